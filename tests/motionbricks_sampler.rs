//! MotionBricks pose-token sampling (issue 12 part 3) against upstream `gumbel_sample`
//! (`tests/fixtures/motionbricks/gumbel.npz`, captured by `reference/capture_motionbricks.py`
//! with stored uniforms and edge rows), through the host reference and the graph's Gumbel op
//! on the CPU and Vulkan backends; plus the categorical frequencies of 50,000 plan streams.

use std::path::PathBuf;

use kinema::backend::Backend;
use kinema::cpu::CpuBackend;
use kinema::formats::NpzReader;
use kinema::graph::Graph;
use kinema::models::motionbricks::sampler::{Sampling, plan_uniforms, sample_tokens};
use kinema::sampling::gumbel_noise;
use kinema::vulkan::{VulkanBackend, VulkanOptions};
use kinema::{DType, Precision};

fn fixture(name: &str) -> NpzReader {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/motionbricks")
        .join(name);
    NpzReader::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

struct Table {
    rows: usize,
    cols: usize,
    logits: Vec<f32>,
    uniforms: Vec<f32>,
    noise: Vec<f32>,
    score: Vec<f32>,
    tokens: Vec<u32>,
}

fn table() -> Table {
    let z = fixture("gumbel.npz");
    let a = |n: &str| z.array(n).unwrap();
    let shape = a("logits").shape;
    Table {
        rows: shape[0],
        cols: shape[1],
        logits: a("logits").to_f32().unwrap(),
        uniforms: a("uniforms").to_f32().unwrap(),
        noise: a("noise").to_f32().unwrap(),
        score: a("score").to_f32().unwrap(),
        tokens: a("tokens")
            .to_i64()
            .unwrap()
            .iter()
            .map(|&t| t as u32)
            .collect(),
    }
}

/// The stored table holds the edge rows the issue asks for.
#[test]
fn fixture_has_the_edge_rows() {
    let t = table();
    assert_eq!((t.rows, t.cols), (512, 10));
    for e in [0.0f32, 1.0, 1.0 - 2f32.powi(-24), 2f32.powi(-24)] {
        assert!(t.uniforms.contains(&e), "no uniform {e}");
    }
    let ties = (0..t.rows)
        .filter(|&r| {
            let s = &t.score[r * t.cols..(r + 1) * t.cols];
            let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            s.iter().filter(|&&v| v == m).count() > 1
        })
        .count();
    assert!(ties >= 16, "only {ties} rows with an exact score tie");
}

/// Noise and score within 2e-5 of upstream's, and the same token in every row.
#[test]
fn host_sampler_matches_upstream_gumbel_sample() {
    let t = table();
    let (mut worst_noise, mut worst_score) = (0f32, 0f32);
    for i in 0..t.rows * t.cols {
        let g = gumbel_noise(t.uniforms[i]);
        worst_noise = worst_noise.max((g - t.noise[i]).abs());
        worst_score = worst_score.max((t.logits[i] + g - t.score[i]).abs());
    }
    println!("gumbel noise max |diff| {worst_noise:e}, score {worst_score:e}");
    assert!(worst_noise <= 2e-5 && worst_score <= 2e-5);
    let got = sample_tokens(&t.logits, t.cols, Sampling::Gumbel, Some(&t.uniforms)).unwrap();
    assert_eq!(got, t.tokens);
    let arg = sample_tokens(&t.logits, t.cols, Sampling::Argmax, None).unwrap();
    let differ = arg.iter().zip(&t.tokens).filter(|(a, b)| a != b).count();
    assert!(
        differ > t.rows / 4,
        "Gumbel picks differ from argmax in only {differ} rows"
    );
}

fn graph_tokens<B: Backend>(b: &B, t: &Table) -> Vec<u32> {
    let mut g = Graph::new();
    let l = g.input("logits", DType::F32, &[t.rows, t.cols]).unwrap();
    let u = g.input("uniforms", DType::F32, &[t.rows, t.cols]).unwrap();
    let tok = g.gumbel(l, Some(u), 1.0, 0, 0).unwrap();
    g.output(tok);
    let exe = g.compile(b).unwrap();
    exe.write_f32(l, &t.logits).unwrap();
    exe.write_f32(u, &t.uniforms).unwrap();
    exe.run().unwrap();
    exe.read_u32(tok).unwrap()
}

/// The graph's Gumbel op with the stored uniforms injected: upstream's tokens on every backend.
#[test]
fn graph_sampler_matches_upstream_on_every_backend() {
    let t = table();
    let cpu = CpuBackend::new(Precision::Strict).unwrap();
    assert_eq!(graph_tokens(&cpu, &t), t.tokens, "cpu");
    let devices = match kinema::vulkan::probe() {
        Ok(d) => d,
        Err(why) => {
            let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
            assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
            eprintln!("skipping the Vulkan backend: {why}");
            return;
        }
    };
    for d in devices {
        let mut o = VulkanOptions::new(Precision::Strict);
        o.device = Some(d.index);
        let b = VulkanBackend::with_options(o).unwrap();
        assert_eq!(graph_tokens(&b, &t), t.tokens, "vulkan {}", d.index);
    }
}

/// The uniforms upstream consumed in the `gumbel_seed` case are the plan stream of seed 7, in
/// upstream's memory order (position, head, code), padded positions included.
#[test]
fn plan_stream_is_what_upstream_consumed() {
    let z = fixture("gumbel_seed.npz");
    let u = z.array("uniforms").unwrap();
    assert_eq!(u.shape, [1, 16, 8, 10]);
    assert_eq!(u.to_f32().unwrap(), plan_uniforms(7, 1280));
}

/// 50,000 plans, each with its own seed, sample one row of 10 codes: the frequencies are the
/// softmax within 1 percentage point.
#[test]
fn gumbel_frequencies_follow_the_softmax() {
    let logits = [1.2f32, -0.3, 0.0, 2.0, 0.7, -1.5, 1.9, 0.1, -0.6, 1.0];
    let m = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = logits.iter().map(|&l| ((l - m) as f64).exp()).collect();
    let z: f64 = e.iter().sum();
    let draws = 50_000u64;
    let mut counts = [0u64; 10];
    for seed in 0..draws {
        let u = plan_uniforms(seed, 10);
        let tok = sample_tokens(&logits, 10, Sampling::Gumbel, Some(&u)).unwrap();
        counts[tok[0] as usize] += 1;
    }
    let mut worst = 0f64;
    for c in 0..10 {
        let f = counts[c] as f64 / draws as f64;
        worst = worst.max((f - e[c] / z).abs());
    }
    println!("worst |frequency - softmax| = {:.3} pp", worst * 100.0);
    assert!(worst <= 0.01, "{worst}");
}

/// The fixtures were made by the committed capture script at the pinned upstream commit.
#[test]
fn fixtures_come_from_the_committed_script() {
    use sha2::{Digest, Sha256};
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/fixtures/motionbricks/meta.json")).unwrap(),
    )
    .unwrap();
    let script = std::fs::read(root.join("reference/capture_motionbricks.py")).unwrap();
    let hash: String = Sha256::digest(&script)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(meta["script_sha256"].as_str(), Some(hash.as_str()));
    assert_eq!(
        meta["upstream_commit"].as_str(),
        Some("1983e88888217f6c69283cf3a9d1af01e87f07af")
    );
}
