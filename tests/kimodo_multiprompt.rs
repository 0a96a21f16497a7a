//! Kimodo multi-prompt against upstream (`tests/fixtures/kimodo/multiprompt/`, captured by
//! `reference/capture_kimodo_multiprompt.py` from upstream's own `Kimodo._multiprompt` on the
//! tiny seeded checkpoints): the transition conditions, heading, re-rooting and blending as
//! host math from upstream's own segment results; the whole chain of segments through the
//! sampler on the CPU and on every Vulkan device (strict); and the CLI: segments from
//! `--embedding/--frames` pairs and from a timeline, several prompts as one batch equal to one
//! at a time, and errors that name the entry.

mod common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::errors;
use kinema::backend::{Backend, Precision};
use kinema::cpu::CpuBackend;
use kinema::formats::{NpyArray, NpzReader, npy};
use kinema::models::kimodo::constraints;
use kinema::models::kimodo::convert::{self, ConvertOptions};
use kinema::models::kimodo::motion;
use kinema::models::kimodo::multiprompt::{self, MultiOptions, Segment};
use kinema::models::kimodo::sampler::{self, SampleOptions};
use kinema::models::kimodo::{KimodoModel, Skeleton};
use kinema::vulkan::{VulkanBackend, VulkanOptions};

/// Per-segment and stitched features after the sampling loops: kimodo.md §9 item 13 and the
/// loop rule of `tests/kimodo_parity.rs` (`max(STAGE_ABS, LOOP_MARGIN x s)`, `s` how far the
/// same run moves when the noise is nudged by one ulp). One nudge is one sample of that
/// sensitivity: here `s` is the largest move over four nudges (every value up, every value
/// down, two seeded random-sign patterns). Why: the third segment of `soma30_three` is far
/// more sensitive than the single-loop fixtures; upstream itself (torch 2.11, CPU) moves its
/// frame 19, feature 288 by 5.0e-3 for the all-up nudge but by 7.9e-3..2.0e-2 for random-sign
/// ones, and this port's all-up nudge under-reads it the same way (3.0e-3 on lavapipe, against
/// 2.5e-2 from upstream).
const STAGE_ABS: f32 = 2e-3;
const STAGE_REL: f32 = 2e-4;
const LOOP_MARGIN: f32 = 8.0;
/// The normalised observed motion: as `tests/kimodo_constraints.rs` (f32 FK and atan2/cos/sin
/// against torch's, over the statistics' scale).
const FEATURES_ABS: f32 = 2e-6;

const CASES: [&str; 3] = ["soma30_three", "g1_constrained", "smplx22_two"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn dir() -> PathBuf {
    root().join("tests/fixtures/kimodo/multiprompt")
}

struct Case {
    name: String,
    npz: NpzReader,
    meta: serde_json::Value,
}

impl Case {
    fn load(name: &str) -> Case {
        let npz = NpzReader::open(dir().join(format!("{name}.npz"))).unwrap();
        let meta = serde_json::from_slice(&npz.array("meta").unwrap().data).unwrap();
        Case {
            name: name.to_string(),
            npz,
            meta,
        }
    }
    fn f32(&self, k: &str) -> Vec<f32> {
        self.npz.array(k).unwrap().to_f32().unwrap()
    }
    fn mask(&self, k: &str) -> Vec<bool> {
        self.npz
            .array(k)
            .unwrap()
            .data
            .iter()
            .map(|&m| m != 0)
            .collect()
    }
    fn usizes(&self, k: &str) -> Vec<usize> {
        self.meta[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect()
    }
    fn skeleton(&self) -> String {
        self.meta["skeleton"].as_str().unwrap().to_string()
    }
    fn segments(&self, llm: usize) -> Vec<Segment> {
        let e = self.f32("embeddings");
        self.usizes("segment_frames")
            .into_iter()
            .enumerate()
            .map(|(k, frames)| Segment {
                embedding: e[k * llm..(k + 1) * llm].to_vec(),
                frames,
            })
            .collect()
    }
    /// The whole-timeline constraints, unnormalised, when the case has them.
    fn constraints(&self, skel: &Skeleton) -> Option<constraints::Conditions> {
        let f = self.meta["constraints_file"].as_str()?;
        let list = constraints::parse(&std::fs::read(dir().join(f)).unwrap()).unwrap();
        let total = self.usizes("segment_frames").iter().sum();
        Some(constraints::build_raw(&list, skel, total).unwrap())
    }
}

/// The tiny checkpoint of `skel` converted to GGUF in `tmp` and loaded.
fn model(skel: &str, tmp: &Path) -> (KimodoModel, PathBuf) {
    let out = tmp.join(format!("{skel}.gguf"));
    if !out.exists() {
        let ckpt = root()
            .join("tests/fixtures/kimodo")
            .join(skel)
            .join("checkpoint");
        convert::convert(&ckpt, &out, &ConvertOptions::default(), &mut |_| {}).unwrap();
    }
    (KimodoModel::load(&out).unwrap(), out)
}

fn check(tag: &str, what: &str, got: &[f32], want: &[f32], max_abs: f32, rel: f32) {
    let (a, r) = errors(got, want);
    eprintln!("{tag:<28} {what:<22} max_abs {a:.2e}  rel_l2 {r:.2e}");
    assert!(
        a <= max_abs && r <= rel,
        "{tag} {what}: max_abs {a:e} (bound {max_abs:e}), rel_l2 {r:e} (bound {rel:e})"
    );
}

/// The host math alone, fed with upstream's own segment results: each later segment's
/// transition conditions (observed motion and mask) and heading, then re-rooting and
/// blending into the stitched motion, and its decode.
#[test]
fn transitions_and_stitching_match_upstream() {
    let tmp = tempfile::tempdir().unwrap();
    for name in CASES {
        let c = Case::load(name);
        let (m, _) = model(&c.skeleton(), tmp.path());
        let skel = Skeleton::load(m.config.skeleton).unwrap();
        let dim = m.config.motion_dim;
        let frames = c.usizes("segment_frames");
        let plans = multiprompt::plan(&frames, 5, m.config.max_frames()).unwrap();
        assert_eq!(
            plans.iter().map(|p| p.generated).collect::<Vec<_>>(),
            c.usizes("generated_frames"),
            "{name}: frames generated per segment"
        );
        let user = c.constraints(&skel);
        let mut chunks: Vec<Vec<f32>> = Vec::new();
        for (k, p) in plans.iter().enumerate() {
            let own = user.as_ref().map(|u| constraints::Conditions {
                frames: p.frames,
                dim,
                features: u.features[p.start * dim..(p.start + p.frames) * dim].to_vec(),
                mask: u.mask[p.start * dim..(p.start + p.frames) * dim].to_vec(),
            });
            let tag = format!("{name} seg{k}");
            let origin = if p.overlap == 0 {
                assert_eq!(c.f32(&format!("seg{k}_heading")), [-0.4]);
                if let Some(mut o) = own {
                    motion::normalize(&m.stats, &mut o.features).unwrap();
                    assert_eq!(o.mask, c.mask(&format!("seg{k}_mask")), "{tag} mask");
                    check(
                        &tag,
                        "observed",
                        &o.features,
                        &c.f32(&format!("seg{k}_observed")),
                        FEATURES_ABS,
                        FEATURES_ABS,
                    );
                }
                [0.0, 0.0]
            } else {
                let last = chunks.last().unwrap();
                let tail = &last[last.len() - p.overlap * dim..];
                let t =
                    multiprompt::transition(&m, &skel, tail, p.overlap, 5, own.as_ref(), p.frames)
                        .unwrap();
                assert_eq!(
                    t.conditions.mask,
                    c.mask(&format!("seg{k}_mask")),
                    "{tag} mask"
                );
                check(
                    &tag,
                    "observed",
                    &t.conditions.features,
                    &c.f32(&format!("seg{k}_observed")),
                    FEATURES_ABS,
                    FEATURES_ABS,
                );
                let h = c.f32(&format!("seg{k}_heading"))[0];
                assert!(
                    (t.heading - h).abs() <= 1e-6,
                    "{tag} heading {} vs {h}",
                    t.heading
                );
                t.origin
            };
            let mut raw = c.f32(&format!("seg{k}_out"));
            motion::unnormalize(&m.stats, &mut raw).unwrap();
            if p.overlap > 0 {
                for row in raw.chunks_exact_mut(dim) {
                    row[0] += origin[0];
                    row[2] += origin[1];
                }
            }
            multiprompt::stitch(&mut chunks, raw, p, 5, dim).unwrap();
        }
        let stitched = chunks.concat();
        let want = c.f32("stitched");
        // Elementwise f32 arithmetic in upstream's order: unnormalise, move, blend.
        check(name, "stitched", &stitched, &want, 1e-6, 1e-7);
        let total: usize = frames.iter().sum();
        let mo = motion::decode_raw_output(&want, total, &skel).unwrap();
        check(
            name,
            "posed_joints",
            &mo.posed_joints,
            &c.f32("posed_joints"),
            1e-5,
            1e-6,
        );
    }
}

/// `noise` moved by one ulp: variant 0 every value up, 1 every value down, 2 and 3 seeded
/// random signs.
fn nudged(noise: &[f32], variant: u64) -> Vec<f32> {
    let mut rng = common::Rng(0x5eed + variant);
    noise
        .iter()
        .map(|v| {
            let up = match variant {
                0 => true,
                1 => false,
                _ => rng.below(2) == 0,
            };
            if up { v.next_up() } else { v.next_down() }
        })
        .collect()
}

/// The loop's one-ulp sensitivity: the largest `(max_abs, rel_l2)` move of `run` over the four
/// [`nudged`] noises.
fn sensitivity(base: &[f32], mut run: impl FnMut(u64) -> Vec<f32>) -> (f32, f32) {
    (0..4).fold((0f32, 0f32), |(a, r), v| {
        let (x, y) = errors(&run(v), base);
        (a.max(x), r.max(y))
    })
}

/// Runs every segment of `c` through the sampler from upstream's noise (nudged as
/// [`nudged`] `variant` when given).
fn run_case<B: Backend>(
    b: &B,
    c: &Case,
    m: &KimodoModel,
    nudge: Option<u64>,
) -> multiprompt::MultiSample {
    let skel = Skeleton::load(m.config.skeleton).unwrap();
    let segs = c.segments(m.config.llm_dim);
    let mut o = MultiOptions::new(m);
    o.steps = c.meta["steps"].as_u64().unwrap() as usize;
    // Upstream's first segment runs its zero mask through the 3 rows.
    o.cfg_rows = 3;
    o.heading = c.meta["heading"].as_f64().unwrap() as f32;
    o.noise = Some(
        (0..segs.len())
            .map(|k| {
                let n = c.f32(&format!("seg{k}_noise"));
                match nudge {
                    Some(v) => nudged(&n, v),
                    None => n,
                }
            })
            .collect(),
    );
    o.constraints = c.constraints(&skel);
    let mut calls = 0;
    let total = o.steps * segs.len();
    let s = multiprompt::sample_segments(b, m, &segs, &o, &mut |done, n| {
        calls += 1;
        assert_eq!((done, n), (calls, total));
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(calls, total);
    s
}

fn whole_chain<B: Backend>(b: &B, tag: &str) {
    let tmp = tempfile::tempdir().unwrap();
    for name in CASES {
        let c = Case::load(name);
        let (m, _) = model(&c.skeleton(), tmp.path());
        // Each segment alone from upstream's own conditions, heading and noise: one sampling
        // loop, held to the rule of tests/kimodo_parity.rs.
        for k in 0..c.usizes("segment_frames").len() {
            let noise = c.f32(&format!("seg{k}_noise"));
            let n = c.usizes("generated_frames")[k];
            let cond = constraints::Conditions {
                frames: n,
                dim: m.config.motion_dim,
                features: c.f32(&format!("seg{k}_observed")),
                mask: c.mask(&format!("seg{k}_mask")),
            };
            let one = |noise: Vec<f32>| {
                let mut o = SampleOptions::new(&m, n);
                o.steps = c.meta["steps"].as_u64().unwrap() as usize;
                o.cfg_rows = 3;
                o.heading = c.f32(&format!("seg{k}_heading"))[0];
                o.noise = Some(noise);
                o.constraints = Some(cond.clone());
                let e = &c.segments(m.config.llm_dim)[k].embedding;
                sampler::sample(b, &m, e, &o, &mut |_, _| {}).unwrap()
            };
            let s = one(noise.clone());
            let (sa, sr) = sensitivity(&s.features, |v| one(nudged(&noise, v)).features);
            check(
                &format!("{tag} {name}"),
                &format!("seg{k} alone"),
                &s.features,
                &c.f32(&format!("seg{k}_out")),
                STAGE_ABS.max(LOOP_MARGIN * sa),
                STAGE_REL.max(LOOP_MARGIN * sr),
            );
        }
        // The whole chain, each segment from this port's previous ones.
        let s = run_case(b, &c, &m, None);
        let ups: Vec<_> = (0..4).map(|v| run_case(b, &c, &m, Some(v))).collect();
        let tg = format!("{tag} {}", c.name);
        for (k, seg) in s.segments.iter().enumerate() {
            let (sa, sr) = sensitivity(&seg.features, |v| {
                ups[v as usize].segments[k].features.clone()
            });
            check(
                &tg,
                &format!("seg{k} features"),
                &seg.features,
                &c.f32(&format!("seg{k}_out")),
                STAGE_ABS.max(LOOP_MARGIN * sa),
                STAGE_REL.max(LOOP_MARGIN * sr),
            );
        }
        let (sa, sr) = sensitivity(&s.raw, |v| ups[v as usize].raw.clone());
        eprintln!("{tg:<28} stitched one-ulp sensitivity max_abs {sa:.2e}  rel_l2 {sr:.2e}");
        check(
            &tg,
            "stitched",
            &s.raw,
            &c.f32("stitched"),
            STAGE_ABS.max(LOOP_MARGIN * sa),
            STAGE_REL.max(LOOP_MARGIN * sr),
        );
    }
}

#[test]
fn cpu_multiprompt_matches_upstream() {
    let b = CpuBackend::new(Precision::Strict).unwrap();
    whole_chain(&b, &format!("cpu {}", b.info().device));
}

#[test]
fn vulkan_multiprompt_matches_upstream() {
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
        whole_chain(&b, "vulkan");
    }
}

fn kinema() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kinema"))
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("run kinema");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Three text features `emb{i}.npy` in `tmp`.
fn embeddings(tmp: &Path, llm: usize) -> Vec<PathBuf> {
    (0..3)
        .map(|k| {
            let p = tmp.join(format!("emb{k}.npy"));
            let e: Vec<f32> = (0..llm)
                .map(|i| (i as f32 * 0.21 + k as f32).cos())
                .collect();
            npy::write_file(&p, &NpyArray::from_f32(&[1, llm], &e).unwrap()).unwrap();
            p
        })
        .collect()
}

fn base(gguf: &Path, out: &Path) -> Command {
    let mut cmd = kinema();
    cmd.args(["generate", "--quiet", "--backend", "cpu", "--steps", "2"])
        .arg("--model")
        .arg(gguf)
        .arg("-o")
        .arg(out);
    cmd
}

fn same_npz(a: &Path, b: &Path, tag: &str) {
    let (x, y) = (NpzReader::open(a).unwrap(), NpzReader::open(b).unwrap());
    assert_eq!(x.names(), y.names(), "{tag}");
    for k in y.names() {
        let (p, q) = (x.array(k).unwrap(), y.array(k).unwrap());
        assert_eq!((&p.shape, &p.data), (&q.shape, &q.data), "{tag} key {k}");
    }
}

/// `--embedding A --frames 20 --embedding B --frames 16 ...`: one motion of the summed frames,
/// the same as the library's chain from the seed's stream and as a timeline file.
#[test]
fn cli_segments_make_one_motion() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, gguf) = model("g1", tmp.path());
    let e = embeddings(tmp.path(), m.config.llm_dim);
    let out = tmp.path().join("multi.npz");
    let mut cmd = base(&gguf, &out);
    for (p, f) in e.iter().zip(["20", "16", "12"]) {
        cmd.arg("--embedding").arg(p).args(["--frames", f]);
    }
    let (ok, text) = run(cmd.args(["--seed", "9"]));
    assert!(ok, "{text}");
    let got = NpzReader::open(&out).unwrap();
    assert_eq!(got.array("posed_joints").unwrap().shape, [48, 34, 3]);
    let side: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("multi.json")).unwrap()).unwrap();
    assert_eq!(side["frames"], 48);
    assert_eq!(side["transition_frames"], 5);
    let segs = side["segments"].as_array().unwrap();
    assert_eq!(
        segs.iter()
            .map(|s| (
                s["start"].as_u64().unwrap(),
                s["generated"].as_u64().unwrap()
            ))
            .collect::<Vec<_>>(),
        [(0, 20), (20, 23), (36, 18)]
    );

    // The library's chain with the same seed gives the same motion.
    let b = CpuBackend::new(Precision::Strict).unwrap();
    let segs: Vec<Segment> = e
        .iter()
        .zip([20, 16, 12])
        .map(|(p, frames)| Segment {
            embedding: npy::read_file(p).unwrap().to_f32().unwrap(),
            frames,
        })
        .collect();
    let mut o = MultiOptions::new(&m);
    o.steps = 2;
    o.seed = 9;
    let s = multiprompt::sample_segments(&b, &m, &segs, &o, &mut |_, _| ControlFlow::Continue(()))
        .unwrap();
    let skel = Skeleton::load(m.config.skeleton).unwrap();
    let mo = motion::decode_raw_output(&s.raw, s.frames, &skel).unwrap();
    assert_eq!(
        got.array("posed_joints").unwrap().to_f32().unwrap(),
        mo.posed_joints
    );

    // A timeline file (relative embedding paths) gives the same file.
    let tl = tmp.path().join("timeline.json");
    std::fs::write(
        &tl,
        r#"[{"embedding": "emb0.npy", "frames": 20}, {"embedding": "emb1.npy", "frames": 16},
            {"embedding": "emb2.npy", "frames": 12}]"#,
    )
    .unwrap();
    let out2 = tmp.path().join("timeline_out.npz");
    let (ok, text) = run(base(&gguf, &out2)
        .arg("--timeline")
        .arg(&tl)
        .args(["--seed", "9"]));
    assert!(ok, "{text}");
    same_npz(&out2, &out, "timeline");
}

/// Several embeddings with one `--frames`: one motion each in one batched graph
/// (`<stem>/<stem>_NN.npz`), bit for bit the motions generated one at a time with seed + i;
/// also with constraints.
#[test]
fn cli_prompt_batch_equals_one_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, gguf) = model("soma30", tmp.path());
    let e = embeddings(tmp.path(), m.config.llm_dim);
    let cons = root().join("tests/fixtures/kimodo/constraints/mixed_overlap.json");
    for (tag, extra) in [("plain", None), ("constrained", Some(&cons))] {
        let add = |cmd: &mut Command| {
            cmd.args(["--frames", "12", "--diagnostics"]);
            if let Some(c) = extra {
                cmd.arg("--constraints").arg(c);
            }
        };
        let batch = tmp.path().join(format!("{tag}.npz"));
        let mut cmd = base(&gguf, &batch);
        for p in &e {
            cmd.arg("--embedding").arg(p);
        }
        add(&mut cmd);
        let (ok, text) = run(cmd.args(["--seed", "40"]));
        assert!(ok, "{tag}: {text}");
        assert!(!batch.exists(), "{tag}: several prompts go into <stem>/");
        for (i, p) in e.iter().enumerate() {
            let one = tmp.path().join(format!("{tag}_one_{i}.npz"));
            let mut cmd = base(&gguf, &one);
            cmd.arg("--embedding").arg(p);
            add(&mut cmd);
            let (ok, text) = run(cmd.args(["--seed", &(40 + i).to_string()]));
            assert!(ok, "{tag} {i}: {text}");
            let got = tmp.path().join(format!("{tag}/{tag}_{i:02}.npz"));
            same_npz(&got, &one, &format!("{tag} prompt {i}"));
            let side: serde_json::Value = serde_json::from_slice(
                &std::fs::read(tmp.path().join(format!("{tag}/{tag}_{i:02}.json"))).unwrap(),
            )
            .unwrap();
            assert_eq!(side["seed"], 40 + i as u64);
            assert_eq!(side["embedding"], p.display().to_string());
        }
    }
}

/// Bad multi-prompt input gets an error that names the entry or the counts.
#[test]
fn bad_multiprompt_input_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, gguf) = model("smplx22", tmp.path());
    let e = embeddings(tmp.path(), m.config.llm_dim);
    let out = tmp.path().join("bad.npz");
    let fails = |args: &[&str], with: &[(usize, &str)], want: &str| {
        let mut cmd = base(&gguf, &out);
        for (i, f) in with {
            cmd.arg("--embedding").arg(&e[*i]);
            if !f.is_empty() {
                cmd.args(["--frames", f]);
            }
        }
        cmd.args(args);
        let (ok, text) = run(&mut cmd);
        assert!(!ok && text.contains(want), "want {want:?}, got: {text}");
        assert!(!out.exists());
    };
    fails(
        &[],
        &[(0, "10"), (1, ""), (2, "9")],
        "3 prompts/embeddings and 2 --frames",
    );
    fails(&[], &[(0, "10"), (1, "0")], "segment 1 has 0 frames");
    fails(
        &[],
        &[(0, "10"), (1, "4945")],
        "segment 1: 4951 frames to generate",
    );
    fails(
        &[],
        &[(0, "4"), (1, "10")],
        "segment 1: its transition takes back 5 frames",
    );
    fails(
        &["--transition-frames", "0"],
        &[(0, "10"), (1, "10")],
        "--transition-frames 0",
    );
    fails(
        &["--diagnostics"],
        &[(0, "10"), (1, "10")],
        "--diagnostics holds one sampling loop",
    );
    fails(
        &["--samples", "2"],
        &[(0, "10"), (1, ""), (2, "")],
        "--samples 2 with 3 prompts",
    );
    // Timelines.
    let tl = tmp.path().join("t.json");
    for (json, want) in [
        ("[]", "the list is empty"),
        (
            r#"[{"embedding": "emb0.npy", "frames": 10}, {"embedding": "emb1.npy", "frames": 0}]"#,
            "entry 1: frames 0 is not a positive integer",
        ),
        (
            r#"[{"embedding": "emb0.npy", "frames": 10}, {"prompt": "walk", "frames": 9}]"#,
            "prompt \"walk\" needs --text-model",
        ),
        (
            r#"[{"embedding": "emb0.npy", "prompt": "walk", "frames": 10}]"#,
            "entry 0: give either prompt or embedding",
        ),
    ] {
        std::fs::write(&tl, json).unwrap();
        let (ok, text) = run(base(&gguf, &out).arg("--timeline").arg(&tl));
        assert!(!ok && text.contains(want), "want {want:?}, got: {text}");
    }
    // Mixing --prompt and --embedding on the command line is refused by the parser.
    let (ok, text) = run(base(&gguf, &out).arg("--embedding").arg(&e[0]).args([
        "--prompt",
        "walk",
        "--text-model",
        "x.gguf",
        "--frames",
        "9",
    ]));
    assert!(!ok && text.contains("cannot be used with"), "{text}");
}

/// The host API: a request with `segments` gives the library's stitched motion; bad segments
/// are named.
#[test]
fn api_segments_match_the_library() {
    use kinema::cpu::Isa;
    use kinema::{BackendChoice, Engine, EngineOptions, GenerateRequest, Kimodo, Noise};
    let tmp = tempfile::tempdir().unwrap();
    let (m, gguf) = model("soma30", tmp.path());
    let llm = m.config.llm_dim;
    let e: Vec<Vec<f32>> = (0..3)
        .map(|k| {
            (0..llm)
                .map(|i| (i as f32 * 0.13 + k as f32).sin())
                .collect()
        })
        .collect();
    let engine = Engine::new(EngineOptions {
        backend: BackendChoice::Cpu,
        precision: kinema::PrecisionChoice::Strict,
        threads: Some(2),
        ..EngineOptions::default()
    })
    .unwrap();
    let k = Kimodo::load(&engine, &gguf).unwrap();
    let seg = |i: usize, frames| kinema::Segment {
        text: kinema::TextInput::Embedding(e[i].clone()),
        frames,
    };
    let req = GenerateRequest {
        steps: 2,
        noise: Noise::Seed(3),
        heading: 0.2,
        segments: vec![seg(1, 14), seg(2, 11)],
        // The library's raw decode below; post-processing has its own tests.
        postprocess: false,
        ..GenerateRequest::new(e[0].clone(), 16)
    };
    let got = k.generate(&req).unwrap();
    assert!(!got.postprocessed());
    assert_eq!(got.frames(), 41);
    assert_eq!(got.skeleton(), "soma77");

    let b = CpuBackend::with(Isa::select().unwrap(), 2, Precision::Strict).unwrap();
    let segs: Vec<Segment> = [(0, 16), (1, 14), (2, 11)]
        .into_iter()
        .map(|(i, frames)| Segment {
            embedding: e[i].clone(),
            frames,
        })
        .collect();
    let mut o = MultiOptions::new(&m);
    o.steps = 2;
    o.seed = 3;
    o.heading = 0.2;
    let s = multiprompt::sample_segments(&b, &m, &segs, &o, &mut |_, _| ControlFlow::Continue(()))
        .unwrap();
    let skel = Skeleton::load(m.config.skeleton).unwrap();
    let (raw, ran) =
        kinema::models::kimodo::generate::decode_raw_motion(&s.raw, s.frames, &skel, None)
            .unwrap();
    assert!(!ran);
    assert_eq!(got.posed_joints(), raw.posed_joints.as_slice());
    // By default a stitched motion is post-processed as a single one is (SOMA), as the
    // command line decodes it.
    let pp = k
        .generate(&GenerateRequest {
            postprocess: true,
            ..req.clone()
        })
        .unwrap();
    let (want, ran) =
        kinema::models::kimodo::generate::decode_raw_motion(&s.raw, s.frames, &skel, Some(&[]))
            .unwrap();
    assert!(ran && pp.postprocessed());
    assert_eq!(pp.frames(), 41);
    assert_eq!(pp.posed_joints(), want.posed_joints.as_slice());
    assert_ne!(pp.posed_joints(), raw.posed_joints.as_slice());

    let bad = |r: GenerateRequest, want: &str| {
        let err = k.generate(&r).unwrap_err().to_string();
        assert!(err.contains(want), "want {want:?}, got {err}");
    };
    bad(
        GenerateRequest {
            segments: vec![seg(1, 0)],
            ..req.clone()
        },
        "segment 1 has 0 frames",
    );
    bad(
        GenerateRequest {
            segments: vec![kinema::Segment {
                text: kinema::TextInput::Embedding(vec![0.0; 3]),
                frames: 9,
            }],
            ..req.clone()
        },
        "GenerateRequest.segments[0].text",
    );
    bad(
        GenerateRequest {
            noise: Noise::Values(vec![0.0; 16 * m.config.motion_dim]),
            ..req.clone()
        },
        "Noise::Values gives one sampling loop",
    );
}
