//! Kimodo parity with upstream PyTorch at every boundary of generation: the schedule, the
//! positional encoding, the first denoiser call (root stage, bridge, body stage input and
//! output, the guided prediction with upstream's 3 rows and with the exact 2-row shortcut, one
//! DDIM step) and the full 10-step loop, for each skeleton's fixture
//! (`tests/fixtures/kimodo/README.md`), on the CPU and on every Vulkan device (strict, and
//! split precision where the device has it).
//!
//! The model is built straight from the fixture's upstream checkpoint (safetensors with the
//! `denoiser.backbone.` prefix stripped, f64 statistics cast to f32), independent of the GGUF
//! converter.

mod common;
#[path = "common/kimodo_fixture.rs"]
mod kimodo_fixture;

use std::collections::BTreeMap;

use common::errors;
use kimodo_fixture::{Fixture, SKELETONS};
use kinema::backend::{Backend, Precision};
use kinema::cpu::CpuBackend;
use kinema::formats::{SafeTensors, npy};
use kinema::graph::Graph;
use kinema::models::kimodo::sampler::{self, SampleOptions};
use kinema::models::kimodo::schedule::Schedule;
use kinema::models::kimodo::{KimodoConfig, KimodoModel, MotionStats, SkeletonKind};
use kinema::vulkan::{VulkanBackend, VulkanOptions};

/// Stage outputs of the first call (kimodo.md §9 item 13; kimodo.cpp's bounds).
const STAGE_ABS: f32 = 2e-3;
const STAGE_REL: f32 = 2e-4;
/// The features after the whole loop are held to `max(STAGE_ABS, LOOP_MARGIN x s)` (rel_l2
/// likewise), where `s` is how far the same loop moves when every noise value is nudged up by
/// one ulp: the rule of `tests/kimodo_generate.rs`, which no faithful f32 port can beat by
/// much, since upstream's own last bits move it as far.
///
/// Why the smplx22 loop is that sensitive (measured on the CPU, Zen 4): in the last denoiser
/// call its root stage predicts a heading (cos, sin) of length 0.064 at frame 4 (soma30: at
/// least 0.48), and the bridge (`global_root_to_local_root`: atan2 of the raw pair, times
/// fps 30, over the local std 0.756, kimodo.md §4.4) multiplies any change of that heading by
/// ~440 into the body stage's input, which carries it to the features of frames 3-4 (columns
/// 211 and 216). Nudging the noise by one ulp moves x0 by 1e-5..2e-4 over the first nine steps and the
/// final features by 3.5e-4..2.1e-3 there; the features are 2.7e-4..2.1e-3 from upstream
/// depending only on last bits (avx512 and avx2, each with the attention's old Cephes exp, the
/// shared `simd::exp_nonpositive` and a correctly rounded exp), at most 4.6 `s` (avx512 with
/// the shared exp: 2.08e-3 at s = 4.5e-4). soma30 and g1 stay under STAGE_ABS.
const LOOP_MARGIN: f32 = 8.0;

fn model(f: &Fixture) -> KimodoModel {
    let ckpt = f.checkpoint_dir();
    let st = SafeTensors::open(ckpt.join("model.safetensors")).unwrap();
    let mut tensors = BTreeMap::new();
    for name in st.names() {
        let short = name
            .strip_prefix("denoiser.backbone.")
            .unwrap_or_else(|| panic!("unexpected tensor {name}"));
        tensors.insert(short.to_string(), st.tensor(name).unwrap());
    }
    let stat = |part: &str, which: &str| -> Vec<f32> {
        let p = ckpt.join(format!("stats/motion/{part}/{which}.npy"));
        let a = npy::read_file(&p).unwrap();
        a.to_f64().unwrap().iter().map(|&v| v as f32).collect()
    };
    let stats = MotionStats {
        global_mean: stat("global_root", "mean").try_into().unwrap(),
        global_std: stat("global_root", "std").try_into().unwrap(),
        local_mean: stat("local_root", "mean").try_into().unwrap(),
        local_std: stat("local_root", "std").try_into().unwrap(),
        body_mean: stat("body", "mean"),
        body_std: stat("body", "std"),
    };
    let m = |k: &str| f.model_usize(k);
    let config = KimodoConfig {
        skeleton: SkeletonKind::parse(&f.skeleton).unwrap(),
        latent_dim: m("latent_dim"),
        ff_size: m("ff_size"),
        num_layers: m("num_layers"),
        num_heads: m("num_heads"),
        llm_dim: f.meta["model"]["llm_shape"][1].as_u64().unwrap() as usize,
        num_text_tokens: m("num_text_tokens_override"),
        motion_dim: f.motion_dim(),
        fps: m("fps") as f32,
        num_base_steps: m("num_base_steps"),
        input_first_heading_angle: f.meta["model"]["input_first_heading_angle"]
            .as_bool()
            .unwrap(),
        cfg_text: f.cfg_text() as f32,
        cfg_constraint: f.cfg_constraint() as f32,
    };
    assert_eq!(config.motion_dim, config.skeleton.motion_dim());
    KimodoModel {
        config,
        stats,
        tensors,
    }
}

/// Compares, prints the errors reached (for BENCHMARKS/parity notes) and asserts.
fn check(tag: &str, what: &str, got: &[f32], want: &[f32], max_abs: f32, rel: f32) {
    let (a, r) = errors(got, want);
    eprintln!("{tag:<28} {what:<16} max_abs {a:.2e}  rel_l2 {r:.2e}");
    assert!(
        a <= max_abs && r <= rel,
        "{tag} {what}: max_abs {a:e} (bound {max_abs:e}), rel_l2 {r:e} (bound {rel:e})"
    );
}

fn schedule_and_pe(f: &Fixture) {
    for n in [10, 100] {
        let s = Schedule::new(1000, n).unwrap();
        let (ts, _) = f.i32(&format!("sched{n}_use_timesteps"));
        let ts: Vec<u32> = ts.iter().map(|&t| t as u32).collect();
        assert_eq!(s.timesteps, ts, "sched{n} timesteps");
        assert_eq!(
            s.alphas_cumprod,
            f.f32(&format!("sched{n}_alphas_cumprod")).0
        );
        assert_eq!(s.alphas_cumprod_prev, f.f32(&format!("sched{n}_prev")).0);
    }
}

/// Every boundary on one backend.
fn boundaries<B: Backend>(b: &B, f: &Fixture, tag: &str) {
    let m = model(f);
    let (t, dim) = (f.frames(), f.motion_dim());
    let (emb, _) = f.f32("embedding");
    let (noise, _) = f.f32("noise");
    let heading = f.f32("heading").0[0];
    let steps = f.steps();
    let sched = Schedule::new(m.config.num_base_steps, steps).unwrap();

    // Positional encoding: the first rows and the time rows (PE[use_timesteps]).
    let (pe_first, s) = f.f32("pe_first");
    let (pe_time, _) = f.f32("pe_time");
    let mut g = Graph::new();
    let first = g.posenc(0, s[0], s[1]).unwrap();
    let all = g.posenc(0, m.config.num_base_steps, s[1]).unwrap();
    g.output(first);
    g.output(all);
    let exe = g.compile(b).unwrap();
    exe.run().unwrap();
    check(
        tag,
        "pe_first",
        &exe.read_f32(first).unwrap(),
        &pe_first,
        1e-6,
        1e-6,
    );
    let all = exe.read_f32(all).unwrap();
    let time: Vec<f32> = sched
        .timesteps
        .iter()
        .flat_map(|&ts| all[ts as usize * s[1]..(ts as usize + 1) * s[1]].to_vec())
        .collect();
    check(tag, "pe_time", &time, &pe_time, 1e-6, 1e-6);

    // The first denoiser call (DDIM index steps - 1) with upstream's 3 rows, one DDIM step.
    let i = steps - 1;
    let w = (m.config.cfg_text, m.config.cfg_constraint);
    for rows in [3, 2] {
        let mut sg = sampler::step_graph_with(&m, t, rows, w.0, w.1, true, false).unwrap();
        let d = sg.den;
        for o in [d.bridge_out, d.body_in, d.out] {
            sg.graph.output(o);
        }
        let exe = sg.graph.compile(b).unwrap();
        exe.write_f32(d.embedding, &emb).unwrap();
        exe.write_f32(d.heading, &[heading.cos(), heading.sin()])
            .unwrap();
        exe.write_f32(d.mask, &vec![0.0; t * dim]).unwrap();
        exe.write_f32(d.x, &noise).unwrap();
        exe.write_u32(d.timestep, &[sched.timesteps[i]]).unwrap();
        exe.write_f32(sg.coef, &sched.ddim_coef(i)).unwrap();
        exe.run().unwrap();
        // Fixture rows are [text, constraint, uncond]; 2 rows compute [text, uncond].
        let pick = |key: &str| -> Vec<f32> {
            let (v, s) = f.f32(key);
            let per = v.len() / s[0];
            let keep: &[usize] = if rows == 3 { &[0, 1, 2] } else { &[0, 2] };
            keep.iter()
                .flat_map(|&r| v[r * per..(r + 1) * per].to_vec())
                .collect()
        };
        let tg = format!("{tag} rows {rows}");
        let read = |id| exe.read_f32(id).unwrap();
        check(
            &tg,
            "root_out",
            &read(d.root_out),
            &pick("root_out"),
            STAGE_ABS,
            STAGE_REL,
        );
        // Angular velocities reach ~120 with random weights: the bound scales with them.
        let bridge = pick("bridge_out");
        let scale = bridge.iter().fold(1f32, |a, v| a.max(v.abs()));
        check(
            &tg,
            "bridge_out",
            &read(d.bridge_out),
            &bridge,
            STAGE_ABS * scale,
            STAGE_REL,
        );
        check(
            &tg,
            "body_in",
            &read(d.body_in),
            &pick("body_in"),
            STAGE_ABS * scale,
            STAGE_REL,
        );
        check(
            &tg,
            "body_out",
            &read(d.body_out),
            &pick("body_out"),
            STAGE_ABS,
            STAGE_REL,
        );
        check(
            &tg,
            "denoiser_out",
            &read(d.out),
            &pick("denoiser_out"),
            STAGE_ABS,
            STAGE_REL,
        );
        check(
            &tg,
            "x0_step0",
            &read(sg.x0),
            &f.f32("x0_step0").0,
            STAGE_ABS,
            STAGE_REL,
        );
        check(
            &tg,
            "x_step1",
            &read(d.x),
            &f.f32("x_step1").0,
            STAGE_ABS,
            STAGE_REL,
        );
    }

    // The full loop through the public sampler, both row layouts, and from noise one ulp
    // larger everywhere: the loop's own sensitivity.
    let nudged: Vec<f32> = noise.iter().map(|v| v.next_up()).collect();
    for rows in [3, 2] {
        let run = |noise: &[f32]| {
            let mut o = SampleOptions::new(&m, t);
            o.steps = steps;
            o.cfg_rows = rows;
            o.heading = heading;
            o.noise = Some(noise.to_vec());
            o.diagnostics = true;
            let mut calls = 0;
            let s = sampler::sample(b, &m, &emb, &o, &mut |done, n| {
                calls += 1;
                assert_eq!((done, n), (calls, steps));
            })
            .unwrap();
            assert_eq!(calls, steps);
            s
        };
        let s = run(&noise);
        let up = run(&nudged);
        let tg = format!("{tag} rows {rows} loop");
        let dg = s.diagnostics.unwrap();
        check(
            &tg,
            "x0_step0",
            &dg.x0_step0,
            &f.f32("x0_step0").0,
            STAGE_ABS,
            STAGE_REL,
        );
        let (sa, sr) = errors(&up.features, &s.features);
        eprintln!("{tg:<28} features one-ulp sensitivity max_abs {sa:.2e}  rel_l2 {sr:.2e}");
        check(
            &tg,
            "features",
            &s.features,
            &f.f32("features").0,
            STAGE_ABS.max(LOOP_MARGIN * sa),
            STAGE_REL.max(LOOP_MARGIN * sr),
        );
    }
}

fn fixtures() -> Vec<Fixture> {
    SKELETONS.iter().map(|s| kimodo_fixture::load(s)).collect()
}

#[test]
fn schedule_matches_upstream_bit_for_bit() {
    for f in fixtures() {
        schedule_and_pe(&f);
    }
}

#[test]
fn cpu_matches_upstream_at_every_boundary() {
    let b = CpuBackend::new(Precision::Strict).unwrap();
    for f in fixtures() {
        boundaries(&b, &f, &format!("{} cpu {}", f.skeleton, b.info().device));
    }
}

#[test]
fn vulkan_matches_upstream_at_every_boundary() {
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
        let b = VulkanBackend::with_options(o.clone()).unwrap();
        for f in fixtures() {
            boundaries(&b, &f, &format!("{} vulkan", f.skeleton));
        }
        // Split precision, where the device has it (elsewhere it resolves to strict, run
        // above), is held to the same bounds.
        o.precision = kinema::precision::PrecisionChoice::Split;
        let b = VulkanBackend::with_options(o).unwrap();
        if b.info().precision != Precision::Split {
            eprintln!("{}: no split precision (strict only)", b.device_name());
            continue;
        }
        for f in fixtures() {
            boundaries(&b, &f, &format!("{} vulkan split", f.skeleton));
        }
    }
}
