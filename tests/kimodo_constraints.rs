//! Kimodo constraints against upstream (`tests/fixtures/kimodo/constraints/`, captured by
//! `reference/capture_kimodo_constraints.py` from upstream's own `load_constraints_lst` and
//! `create_conditions_from_constraints_batched`): the observed motion and the mask of every
//! constraint type (SOMA with 30 and 77 joints, G1, SMPL-X, overlapping entries), the first
//! denoiser call with the constraint row (3 rows) on the CPU and on every Vulkan device
//! (strict), and the shipped demo `constraints.json` files, whose conditions are compared with
//! upstream's and which run through `kinema generate --constraints` on the tiny models.

mod common;
#[path = "common/shared_data.rs"]
mod shared_data;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::errors;
use kinema::backend::{Backend, Precision};
use kinema::cpu::CpuBackend;
use kinema::formats::{NpyArray, NpzReader, npy};
use kinema::models::kimodo::constraints::{self, Conditions};
use kinema::models::kimodo::convert::{self, ConvertOptions};
use kinema::models::kimodo::sampler::{self, SampleOptions};
use kinema::models::kimodo::schedule::Schedule;
use kinema::models::kimodo::{KimodoModel, Skeleton};
use kinema::vulkan::{VulkanBackend, VulkanOptions};

/// Stage outputs of the first call: kimodo.md §9 item 13 (as `tests/kimodo_parity.rs`).
const STAGE_ABS: f32 = 2e-3;
const STAGE_REL: f32 = 2e-4;
/// The normalised observed motion: f32 host math (axis-angle, FK, atan2/cos/sin) against
/// torch's, divided by the statistics' scale (down to sqrt(0.17^2 + 1e-5) for the root height).
/// Measured (Zen 4): at most 4.8e-7 over the cases (mixed_overlap), 2.4e-7 over the demo files.
const FEATURES_ABS: f32 = 2e-6;

const CASES: [&str; 12] = [
    "root2d",
    "root2d_heading",
    "fullbody",
    "fullbody_soma77",
    "left_hand",
    "right_hand",
    "left_foot",
    "right_foot",
    "end_effector",
    "mixed_overlap",
    "g1_mixed",
    "smplx22_mixed",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn dir() -> PathBuf {
    root().join("tests/fixtures/kimodo/constraints")
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
        let a = self.npz.array(k).unwrap();
        a.data.iter().map(|&m| m != 0).collect()
    }
    fn usize(&self, k: &str) -> usize {
        self.meta[k].as_u64().unwrap() as usize
    }
    fn skeleton(&self) -> String {
        self.meta["skeleton"].as_str().unwrap().to_string()
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
    eprintln!("{tag:<32} {what:<20} max_abs {a:.2e}  rel_l2 {r:.2e}");
    assert!(
        a <= max_abs && r <= rel,
        "{tag} {what}: max_abs {a:e} (bound {max_abs:e}), rel_l2 {r:e} (bound {rel:e})"
    );
}

fn conditions(c: &Case, m: &KimodoModel) -> Conditions {
    let bytes = std::fs::read(dir().join(format!("{}.json", c.name))).unwrap();
    let list = constraints::parse(&bytes).unwrap();
    let skel = Skeleton::load(m.config.skeleton).unwrap();
    constraints::build_conditions(&list, &skel, &m.stats, c.usize("frames")).unwrap()
}

#[test]
fn conditions_match_upstream_for_every_type() {
    let tmp = tempfile::tempdir().unwrap();
    for name in CASES {
        let c = Case::load(name);
        let (m, _) = model(&c.skeleton(), tmp.path());
        let cond = conditions(&c, &m);
        let want_mask = c.mask("constraint_mask");
        assert_eq!(cond.mask, want_mask, "{name}: constraint mask");
        assert!(cond.count() > 0, "{name}: nothing constrained");
        check(
            name,
            "constraint_features",
            &cond.features,
            &c.f32("constraint_features"),
            FEATURES_ABS,
            FEATURES_ABS,
        );
    }
}

/// The first denoiser call with the constraint row, against upstream's 3 rows.
fn first_call<B: Backend>(b: &B, tag: &str) {
    let tmp = tempfile::tempdir().unwrap();
    for name in CASES {
        let c = Case::load(name);
        let (m, _) = model(&c.skeleton(), tmp.path());
        let cond = conditions(&c, &m);
        let (t, dim) = (c.usize("frames"), c.usize("motion_dim"));
        let steps = c.usize("steps");
        let sched = Schedule::new(m.config.num_base_steps, steps).unwrap();
        let heading = c.f32("heading")[0];
        let w = (m.config.cfg_text, m.config.cfg_constraint);
        let mut sg = sampler::step_graph_with(&m, t, 3, w.0, w.1, true, true).unwrap();
        let d = sg.den;
        sg.graph.output(d.body_in);
        let exe = sg.graph.compile(b).unwrap();
        let [keep, observed, zero] = d.imputation.unwrap();
        exe.write_f32(d.embedding, &c.f32("embedding")).unwrap();
        exe.write_f32(d.heading, &[heading.cos(), heading.sin()])
            .unwrap();
        exe.write_f32(d.mask, &cond.mask_f32()).unwrap();
        exe.write_f32(keep, &cond.keep_f32()).unwrap();
        exe.write_f32(observed, &cond.observed_masked()).unwrap();
        exe.write_f32(zero, &vec![0.0; t * dim]).unwrap();
        exe.write_f32(d.x, &c.f32("noise")).unwrap();
        let i = steps - 1;
        exe.write_u32(d.timestep, &[sched.timesteps[i]]).unwrap();
        exe.write_f32(sg.coef, &sched.ddim_coef(i)).unwrap();
        exe.run().unwrap();
        let tg = format!("{tag} {name}");
        let read = |id| exe.read_f32(id).unwrap();
        check(
            &tg,
            "root_out",
            &read(d.root_out),
            &c.f32("root_out"),
            STAGE_ABS,
            STAGE_REL,
        );
        // The bridge's angular velocities reach ~100 with random weights: the body input's
        // bound scales with them (as in tests/kimodo_parity.rs).
        let body_in = c.f32("body_in");
        let scale = body_in.iter().fold(1f32, |a, v| a.max(v.abs()));
        check(
            &tg,
            "body_in",
            &read(d.body_in),
            &body_in,
            STAGE_ABS * scale,
            STAGE_REL,
        );
        check(
            &tg,
            "body_out",
            &read(d.body_out),
            &c.f32("body_out"),
            STAGE_ABS,
            STAGE_REL,
        );
        check(
            &tg,
            "x0_step0",
            &read(sg.x0),
            &c.f32("x0_step0"),
            STAGE_ABS,
            STAGE_REL,
        );

        // The public sampler with the conditions gives the same first step.
        let mut o = SampleOptions::new(&m, t);
        o.steps = steps;
        o.cfg_rows = 3;
        o.heading = heading;
        o.noise = Some(c.f32("noise"));
        o.diagnostics = true;
        o.constraints = Some(cond.clone());
        let s = sampler::sample(b, &m, &c.f32("embedding"), &o, &mut |_, _| {}).unwrap();
        let dg = s.diagnostics.unwrap();
        check(
            &tg,
            "sample x0_step0",
            &dg.x0_step0,
            &c.f32("x0_step0"),
            STAGE_ABS,
            STAGE_REL,
        );
        // Two rows cannot carry a constraint row.
        o.cfg_rows = 2;
        let e = sampler::sample(b, &m, &c.f32("embedding"), &o, &mut |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2-row shortcut is exact only without constraints"),
            "{e}"
        );
    }
}

#[test]
fn cpu_constraint_row_matches_upstream() {
    let b = CpuBackend::new(Precision::Strict).unwrap();
    first_call(&b, &format!("cpu {}", b.info().device));
}

#[test]
fn vulkan_constraint_row_matches_upstream() {
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
        first_call(&b, "vulkan");
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

/// Frames of a demo example: the sum of `int(duration * 30)` over its meta.json
/// (`kimodo/scripts/generate.py#L116-134`, f64 truncation).
fn demo_frames(meta: &serde_json::Value) -> usize {
    let ds: Vec<f64> = match meta.get("durations") {
        Some(v) => v
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_f64().unwrap())
            .collect(),
        None => vec![meta["duration"].as_f64().unwrap()],
    };
    ds.iter().map(|d| (d * 30.0) as usize).sum()
}

/// Each shipped demo `constraints.json`: upstream's conditions for it, and a run through
/// `kinema generate --constraints` on the tiny model of its skeleton (2 steps, CPU).
#[test]
fn shipped_demo_constraints_run_through_generate() {
    let Some(examples) = shared_data::upstream_dir("kimodo/assets/demo/examples") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for (folder, skel) in [("kimodo-soma-rp", "soma30"), ("kimodo-g1-rp", "g1")] {
        let mut entries: Vec<_> = std::fs::read_dir(examples.join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for ex in entries {
            let cpath = ex.join("constraints.json");
            if !cpath.is_file() {
                continue;
            }
            let name = ex.file_name().unwrap().to_str().unwrap().to_string();
            let meta: serde_json::Value =
                serde_json::from_slice(&std::fs::read(ex.join("meta.json")).unwrap()).unwrap();
            let frames = demo_frames(&meta);
            let (m, gguf) = model(skel, tmp.path());
            let skeleton = Skeleton::load(m.config.skeleton).unwrap();
            let (_, cond) = constraints::load(&cpath, &skeleton, &m.stats, frames).unwrap();
            let want = NpzReader::open(dir().join(format!("demo_{skel}_{name}.npz"))).unwrap();
            let want_mask: Vec<bool> = want
                .array("constraint_mask")
                .unwrap()
                .data
                .iter()
                .map(|&v| v != 0)
                .collect();
            assert_eq!(cond.mask, want_mask, "{folder}/{name}: mask");
            let got: Vec<f32> = cond
                .features
                .iter()
                .zip(&cond.mask)
                .filter(|(_, m)| **m)
                .map(|(v, _)| *v)
                .collect();
            let tag = format!("demo {skel} {name}");
            check(
                &tag,
                "masked features",
                &got,
                &want.array("masked_values").unwrap().to_f32().unwrap(),
                FEATURES_ABS,
                FEATURES_ABS,
            );

            let emb = tmp.path().join("emb.npy");
            let e: Vec<f32> = (0..m.config.llm_dim)
                .map(|i| (i as f32 * 0.37).sin())
                .collect();
            npy::write_file(
                &emb,
                &NpyArray::from_f32(&[1, m.config.llm_dim], &e).unwrap(),
            )
            .unwrap();
            let out = tmp.path().join(format!("{skel}_{name}.npz"));
            let (ok, text) = run(kinema()
                .args(["generate", "--quiet", "--backend", "cpu", "--steps", "2"])
                .arg("--model")
                .arg(&gguf)
                .arg("--embedding")
                .arg(&emb)
                .args(["--frames", &frames.to_string(), "--diagnostics"])
                .arg("--constraints")
                .arg(&cpath)
                .arg("-o")
                .arg(&out));
            assert!(ok, "{folder}/{name}: {text}");
            let npz = NpzReader::open(&out).unwrap();
            let mask_arr = npz.array("constraint_mask").unwrap();
            assert_eq!(mask_arr.dtype, kinema::formats::NpyDType::Bool);
            let mask: Vec<bool> = mask_arr.data.iter().map(|&v| v != 0).collect();
            assert_eq!(mask, cond.mask, "{folder}/{name}: written mask");
            assert_eq!(
                npz.array("constraint_features").unwrap().to_f32().unwrap(),
                cond.features
            );
            assert_eq!(npz.array("root_stage_step0").unwrap().shape[0], 3);
            let side: serde_json::Value =
                serde_json::from_slice(&std::fs::read(out.with_extension("json")).unwrap())
                    .unwrap();
            assert_eq!(side["cfg_rows"], 3);
            assert_eq!(side["constrained_entries"], cond.count());
            seen += 1;
        }
    }
    assert_eq!(seen, 10, "the 10 shipped constraints.json files");
}

/// Bad constraint files through the command line: the error names the file and the entry.
#[test]
fn bad_constraint_files_name_the_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, gguf) = model("soma30", tmp.path());
    let emb = tmp.path().join("emb.npy");
    npy::write_file(
        &emb,
        &NpyArray::from_f32(&[1, m.config.llm_dim], &vec![0.1; m.config.llm_dim]).unwrap(),
    )
    .unwrap();
    let fullbody = |joints: usize, frame: usize| {
        format!(
            r#"{{"type":"fullbody","frame_indices":[{frame}],"local_joints_rot":[[{}]],"root_positions":[[0,0.9,0]]}}"#,
            vec!["[0,0,0]"; joints].join(",")
        )
    };
    let root = r#"{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[0,0]]}"#;
    let cases = [
        (format!("[{root},{}]", fullbody(30, 8)), "entry 1 (fullbody): frame 8 is outside the motion's 8 frames"),
        (format!("[{}]", fullbody(31, 0)), "entry 0 (fullbody): local_joints_rot holds 31 joints per frame; the soma30 skeleton takes 30 or 77"),
        (format!("[{root},{{\"type\":\"waypoint\"}}]"), "entry 1 (waypoint): unknown constraint type"),
        (r#"[{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[NaN,0]]}]"#.to_string(), "entry 0 (root2d): smooth_root_2d[0]: NaN is not a finite number"),
        (r#"[{"type":"end-effector","frame_indices":[0],"local_joints_rot":[[]],"root_positions":[[0,0,0]],"joint_names":["LeftElbow"]}]"#.to_string(), "entry 0 (end-effector): unknown end effector 'LeftElbow'"),
    ];
    for (i, (json, want)) in cases.iter().enumerate() {
        let c = tmp.path().join(format!("c{i}.json"));
        std::fs::write(&c, json).unwrap();
        let out = tmp.path().join(format!("o{i}.npz"));
        let (ok, text) = run(kinema()
            .args([
                "generate",
                "--quiet",
                "--backend",
                "cpu",
                "--steps",
                "1",
                "--frames",
                "8",
            ])
            .arg("--model")
            .arg(&gguf)
            .arg("--embedding")
            .arg(&emb)
            .arg("--constraints")
            .arg(&c)
            .arg("-o")
            .arg(&out));
        assert!(!ok, "case {i} passed");
        assert!(text.contains(want), "case {i}: {text}");
        assert!(
            text.contains(&format!("c{i}.json")),
            "case {i} names no file: {text}"
        );
        assert!(!out.exists());
    }
    // Two rows cannot carry constraints.
    let c = tmp.path().join("ok.json");
    std::fs::write(&c, format!("[{root}]")).unwrap();
    let (ok, text) = run(kinema()
        .args([
            "generate",
            "--quiet",
            "--backend",
            "cpu",
            "--steps",
            "1",
            "--frames",
            "8",
        ])
        .args(["--cfg-rows", "2"])
        .arg("--model")
        .arg(&gguf)
        .arg("--embedding")
        .arg(&emb)
        .arg("--constraints")
        .arg(&c)
        .arg("-o")
        .arg(tmp.path().join("o.npz")));
    assert!(
        !ok && text.contains("2-row shortcut is exact only without constraints"),
        "{text}"
    );
}

/// `--samples N`: one batched graph whose motions equal the same seeds generated one at a
/// time, bit for bit (every row of every GEMM, attention and norm is computed the same way
/// whatever the row count), written as upstream does; also with constraints.
#[test]
fn samples_batch_equals_one_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, gguf) = model("soma30", tmp.path());
    let emb = tmp.path().join("emb.npy");
    let e: Vec<f32> = (0..m.config.llm_dim)
        .map(|i| (i as f32 * 0.21).cos())
        .collect();
    npy::write_file(
        &emb,
        &NpyArray::from_f32(&[1, m.config.llm_dim], &e).unwrap(),
    )
    .unwrap();
    let cons = dir().join("mixed_overlap.json");
    for (tag, extra) in [("plain", None), ("constrained", Some(&cons))] {
        let generate = |out: &Path, seed: u64, samples: usize| {
            let mut cmd = kinema();
            cmd.args([
                "generate",
                "--quiet",
                "--backend",
                "cpu",
                "--steps",
                "3",
                "--frames",
                "12",
            ])
            .args([
                "--seed",
                &seed.to_string(),
                "--samples",
                &samples.to_string(),
            ])
            .arg("--diagnostics")
            .arg("--model")
            .arg(&gguf)
            .arg("--embedding")
            .arg(&emb)
            .arg("-o")
            .arg(out);
            if let Some(c) = extra {
                cmd.arg("--constraints").arg(c);
            }
            let (ok, text) = run(&mut cmd);
            assert!(ok, "{tag}: {text}");
        };
        let batch = tmp.path().join(format!("{tag}.npz"));
        generate(&batch, 40, 3);
        assert!(
            !batch.exists(),
            "{tag}: several samples go into the <stem>/ folder"
        );
        for i in 0..3 {
            let one = tmp.path().join(format!("{tag}_one_{i}.npz"));
            generate(&one, 40 + i as u64, 1);
            let got = NpzReader::open(tmp.path().join(format!("{tag}/{tag}_{i:02}.npz"))).unwrap();
            let want = NpzReader::open(&one).unwrap();
            assert_eq!(got.names(), want.names(), "{tag} sample {i}");
            for k in want.names() {
                let (a, b) = (got.array(k).unwrap(), want.array(k).unwrap());
                assert_eq!(
                    (&a.shape, &a.data),
                    (&b.shape, &b.data),
                    "{tag} sample {i} key {k}"
                );
            }
            let side: serde_json::Value = serde_json::from_slice(
                &std::fs::read(tmp.path().join(format!("{tag}/{tag}_{i:02}.json"))).unwrap(),
            )
            .unwrap();
            assert_eq!(side["seed"], 40 + i as u64);
            assert_eq!(
                (side["sample"].as_u64(), side["samples"].as_u64()),
                (Some(i as u64), Some(3))
            );
        }
    }
}
