//! One MotionBricks plan (issue 12 parts 2 and 7) against the boundaries captured from the
//! real upstream modules (`tests/fixtures/motionbricks/*.npz`): the reduced model is rebuilt
//! in upstream's layout, converted, loaded and planned on the CPU and on every Vulkan device
//! (strict), argmax and Gumbel with the stored uniforms. Tokens and lengths must match
//! exactly; the continuous boundaries within the thresholds named at each check.

#[path = "common/shared_data.rs"]
mod shared_data;

#[path = "common/motionbricks_fixture.rs"]
mod motionbricks_fixture;

use kinema::Precision;
use kinema::backend::Backend;
use kinema::cpu::CpuBackend;
use kinema::formats::NpzReader;
use kinema::models::motionbricks::model::MotionBricksModel;
use kinema::models::motionbricks::plan::{PlanInputs, PlanOutput, Planner, Randomness};
use kinema::models::motionbricks::sampler::Sampling;
use kinema::vulkan::{VulkanBackend, VulkanOptions};
use motionbricks_fixture as fx;

use fx::Loaded;

fn model() -> Option<Loaded> {
    let up = shared_data::upstream_dir("motionbricks/out")?;
    Some(fx::converted(&up))
}

fn f32s(z: &NpzReader, n: &str) -> Vec<f32> {
    z.array(n).unwrap().to_f32().unwrap()
}
fn bools(z: &NpzReader, n: &str) -> Vec<bool> {
    z.array(n)
        .unwrap()
        .to_i64()
        .unwrap()
        .iter()
        .map(|&v| v != 0)
        .collect()
}
fn ints(z: &NpzReader, n: &str) -> Vec<i64> {
    z.array(n).unwrap().to_i64().unwrap()
}

fn inputs(z: &NpzReader) -> PlanInputs {
    PlanInputs {
        batch: 1,
        global_root_values: f32s(z, "in.global_root_values"),
        has_global_root_values: bools(z, "in.has_global_root_values"),
        local_root_values: f32s(z, "in.local_root_values"),
        has_local_root_values: bools(z, "in.has_local_root_values"),
        local_poses: f32s(z, "in.local_poses"),
        has_local_poses: bools(z, "in.has_local_poses"),
        num_tokens: ints(z, "in.num_tokens"),
        allowed_pred_num_tokens: bools(z, "in.allowed_pred_num_tokens"),
    }
}

/// (max |a - b|, ||a - b|| / ||b||).
fn errors(a: &[f32], b: &[f32]) -> (f64, f64) {
    assert_eq!(a.len(), b.len());
    let (mut m, mut num, mut den) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let d = (x as f64 - y as f64).abs();
        m = m.max(d);
        num += d * d;
        den += (y as f64) * (y as f64);
    }
    (m, (num / den.max(1e-30)).sqrt())
}

fn close(what: &str, got: &[f32], want: &[f32], max_abs: f64, rel_l2: f64) {
    let (m, r) = errors(got, want);
    println!("  {what:<24} max_abs {m:.3e}  rel_L2 {r:.3e}");
    assert!(
        m <= max_abs && r <= rel_l2,
        "{what}: max_abs {m:e} (limit {max_abs:e}), rel_L2 {r:e} (limit {rel_l2:e})"
    );
}

fn run_case<B: Backend>(b: &B, m: &MotionBricksModel, case: &str, label: &str) -> PlanOutput {
    let z = fx::case(case);
    let meta = fx::meta();
    let mode = meta["cases"][case]["mode"].as_str().unwrap();
    let sampling: Sampling = mode.parse().unwrap();
    let planner = Planner::new(b, m, 1, sampling).unwrap();
    let random = match sampling {
        Sampling::Gumbel => Some(Randomness::Uniforms(f32s(&z, "uniforms"))),
        Sampling::Argmax => None,
    };
    let out = planner.plan(&inputs(&z), random.as_ref()).unwrap();
    println!("{label} {case}: {} tokens", out.num_tokens[0]);
    // Elementwise f32 host math: as upstream's to a few ulps.
    close(
        "norm global root",
        &out.norm_global_root,
        &f32s(&z, "root_in.global_root_values"),
        1e-5,
        1e-6,
    );
    close(
        "norm local root",
        &out.norm_local_root,
        &f32s(&z, "root_in.local_root_values"),
        1e-5,
        1e-6,
    );
    close(
        "norm poses",
        &out.norm_poses,
        &f32s(&z, "root_in.local_poses"),
        1e-4,
        1e-6,
    );
    close(
        "length logits",
        &out.length_logits_raw,
        &f32s(&z, "num_token_logits_raw"),
        1e-4,
        1e-5,
    );
    let want_n = ints(&z, "pred_num_tokens")[0];
    assert_eq!(out.num_tokens[0] as i64, want_n, "{label} {case}: length");
    let masked = f32s(&z, "num_token_logits");
    for (g, w) in out.length_logits.iter().zip(&masked) {
        assert_eq!(g.is_finite(), w.is_finite(), "masked length logits");
    }
    // Graph boundaries (DESIGN.md: F32 stage outputs within 2e-3 / 2e-4; tighter here).
    close(
        "root stage 2",
        &out.root_stage2,
        &f32s(&z, "root_stage2"),
        1e-4,
        1e-5,
    );
    close(
        "root trajectory",
        &out.root_global,
        &f32s(&z, "pred_global_root_values"),
        1e-4,
        1e-5,
    );
    close(
        "local root",
        &out.root_local,
        &f32s(&z, "pred_local_root_values"),
        1e-3,
        1e-4,
    );
    close(
        "pose cond",
        &out.pose_cond,
        &f32s(&z, "pose_in.pose_cond"),
        1e-5,
        1e-6,
    );
    assert_eq!(out.has_pose_cond, bools(&z, "pose_in.has_pose_cond"));
    close(
        "pose logits",
        &out.pose_logits,
        &f32s(&z, "pose_logits"),
        1e-4,
        1e-5,
    );
    let want_tok: Vec<u32> = ints(&z, "pose_tokens").iter().map(|&t| t as u32).collect();
    assert_eq!(out.pose_tokens, want_tok, "{label} {case}: pose tokens");
    close(
        "decoder output",
        &out.decoded,
        &f32s(&z, "decoder_out"),
        1e-3,
        1e-4,
    );
    close("features", &out.features, &f32s(&z, "features"), 1e-3, 1e-3);
    close("qpos", &out.qpos, &f32s(&z, "qpos"), 1e-3, 1e-3);
    out
}

#[test]
fn cpu_plans_match_upstream_at_every_boundary() {
    let Some(l) = model() else { return };
    let b = CpuBackend::new(Precision::Strict).unwrap();
    for case in fx::CASES {
        run_case(&b, &l.model, case, "cpu");
    }
}

#[test]
fn vulkan_plans_match_upstream_and_the_cpu() {
    let Some(l) = model() else { return };
    let devices = match kinema::vulkan::probe() {
        Ok(d) => d,
        Err(why) => {
            let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
            assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
            eprintln!("skipping the Vulkan backend: {why}");
            return;
        }
    };
    let cpu = CpuBackend::new(Precision::Strict).unwrap();
    for d in devices {
        let mut o = VulkanOptions::new(Precision::Strict);
        o.device = Some(d.index);
        let b = VulkanBackend::with_options(o).unwrap();
        for case in fx::CASES {
            let v = run_case(&b, &l.model, case, "vulkan");
            let c = run_case(&cpu, &l.model, case, "cpu");
            assert_eq!(
                v.pose_tokens, c.pose_tokens,
                "{case}: CPU and Vulkan tokens"
            );
        }
    }
}

/// Bad inputs (part 9): clear errors, no panic.
#[test]
fn bad_plan_inputs_are_refused() {
    let Some(l) = model() else { return };
    let b = CpuBackend::new(Precision::Strict).unwrap();
    let z = fx::case("argmax");
    let good = inputs(&z);
    let planner = Planner::new(&b, &l.model, 1, Sampling::Argmax).unwrap();
    let gumbel = Planner::new(&b, &l.model, 1, Sampling::Gumbel).unwrap();
    type Edit = Box<dyn Fn(&mut PlanInputs)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "not a finite number",
            Box::new(|i| i.local_poses[7] = f32::NAN),
        ),
        (
            "not a finite number",
            Box::new(|i| i.global_root_values[0] = f32::INFINITY),
        ),
        (
            "values, expected",
            Box::new(|i| {
                i.local_poses.pop();
            }),
        ),
        (
            "allows no length",
            Box::new(|i| {
                i.allowed_pred_num_tokens
                    .iter_mut()
                    .for_each(|a| *a = false)
            }),
        ),
        ("num_tokens[0] = 5", Box::new(|i| i.num_tokens[0] = 5)),
        ("num_tokens[0] = 17", Box::new(|i| i.num_tokens[0] = 17)),
        ("batch 0", Box::new(|i| i.batch = 0)),
    ];
    for (want, edit) in cases {
        let mut i = good.clone();
        edit(&mut i);
        let e = planner.plan(&i, None).expect_err(want).to_string();
        assert!(e.contains(want), "wanted {want:?} in {e}");
    }
    assert!(gumbel.plan(&good, None).is_err());
    assert!(
        gumbel
            .plan(&good, Some(&Randomness::Seeds(vec![1, 2])))
            .is_err()
    );
    assert!(
        gumbel
            .plan(&good, Some(&Randomness::Uniforms(vec![0.5; 10])))
            .is_err()
    );
    assert!(
        gumbel
            .plan(&good, Some(&Randomness::Uniforms(vec![2.0; 1280])))
            .is_err()
    );
    // A given length in range overrides the choice.
    let mut i = good.clone();
    i.num_tokens[0] = 16;
    assert_eq!(planner.plan(&i, None).unwrap().num_tokens, [16]);
}

/// `predict`'s arguments of a fixture case as an `inputs.npz`.
fn write_inputs(z: &NpzReader, path: &std::path::Path, nan: bool) {
    let mut w = kinema::formats::NpzWriter::new();
    for n in [
        "global_root_values",
        "has_global_root_values",
        "local_root_values",
        "has_local_root_values",
        "local_poses",
        "has_local_poses",
        "num_tokens",
        "allowed_pred_num_tokens",
    ] {
        let mut a = z.array(&format!("in.{n}")).unwrap();
        if nan && n == "local_poses" {
            a.data[0..4].copy_from_slice(&f32::NAN.to_le_bytes());
        }
        w.add(n, &a).unwrap();
    }
    w.write(path).unwrap();
}

/// `kinema plan` end to end: argmax, Gumbel from stored uniforms, and Gumbel from `--seed 7`
/// (the stream upstream consumed in `gumbel_seed`), all matching upstream's tokens and qpos;
/// bad flags and inputs refused without an output.
#[test]
fn command_line_plans() {
    let Some(l) = model() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str], inputs: &std::path::Path, out: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kinema"))
            .arg("plan")
            .arg("--model")
            .arg(&l.path)
            .arg("--inputs")
            .arg(inputs)
            .args(["--backend", "cpu", "--precision", "strict", "-o"])
            .arg(out)
            .args(args)
            .output()
            .unwrap()
    };
    for (case, args) in [
        ("argmax", vec!["--sampling", "argmax", "--diagnostics"]),
        ("gumbel_torch", vec!["--sampling", "gumbel", "--uniforms"]),
        ("gumbel_seed", vec!["--sampling", "gumbel", "--seed", "7"]),
    ] {
        let z = fx::case(case);
        let inputs = tmp.path().join(format!("{case}.in.npz"));
        write_inputs(&z, &inputs, false);
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        if args.last().map(String::as_str) == Some("--uniforms") {
            let u = tmp.path().join("u.npy");
            let a = z.array("uniforms").unwrap();
            let a = kinema::formats::NpyArray::new(a.dtype, &a.shape[1..], a.data).unwrap();
            kinema::formats::npy::write_file(&u, &a).unwrap();
            args.push(u.to_str().unwrap().to_string());
        }
        let out = tmp.path().join(format!("{case}.plan.npz"));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run(&argv, &inputs, &out);
        assert!(
            r.status.success(),
            "{case}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let p = NpzReader::open(&out).unwrap();
        assert_eq!(
            ints(&p, "num_tokens"),
            ints(&z, "pred_num_tokens"),
            "{case}"
        );
        assert_eq!(p.array("pose_tokens").unwrap().shape, [16, 8]);
        let want: Vec<i64> = ints(&z, "pose_tokens");
        assert_eq!(ints(&p, "pose_tokens"), want, "{case}: tokens");
        close("cli qpos", &f32s(&p, "qpos"), &f32s(&z, "qpos"), 1e-3, 1e-3);
        close(
            "cli features",
            &f32s(&p, "features"),
            &f32s(&z, "features"),
            1e-3,
            1e-3,
        );
        assert_eq!(p.names().contains(&"pose_logits"), case == "argmax");
    }
    let z = fx::case("argmax");
    let inputs = tmp.path().join("in.npz");
    write_inputs(&z, &inputs, false);
    let nan_inputs = tmp.path().join("nan.npz");
    write_inputs(&z, &nan_inputs, true);
    let out = tmp.path().join("bad.npz");
    for (args, inp, want) in [
        (vec!["--sampling", "topk"], &inputs, "sampling"),
        (
            vec!["--sampling", "gumbel", "--seed", "-3"],
            &inputs,
            "seed",
        ),
        (vec!["--sampling", "gumbel", "--seed", "x"], &inputs, "seed"),
        (
            vec!["--sampling", "argmax", "--seed", "3"],
            &inputs,
            "gumbel only",
        ),
        (
            vec!["--sampling", "argmax"],
            &nan_inputs,
            "not a finite number",
        ),
    ] {
        let r = run(&args, inp, &out);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success() && err.contains(want), "{args:?}: {err}");
        assert!(!out.exists());
    }
    // Not a MotionBricks model.
    let other = tmp.path().join("other.gguf");
    let mut w = kinema::formats::GgufWriter::new();
    w.add_metadata("general.architecture", "kimodo").unwrap();
    w.write(&other).unwrap();
    let r = std::process::Command::new(env!("CARGO_BIN_EXE_kinema"))
        .args([
            "plan",
            "--sampling",
            "argmax",
            "--backend",
            "cpu",
            "--model",
        ])
        .arg(&other)
        .arg("--inputs")
        .arg(&inputs)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&r.stderr).contains("not a MotionBricks model"));
    assert!(!out.exists());
}

/// B plans in one pass equal B single plans (part 6): the three fixture inputs as one batch,
/// Gumbel with each plan's own uniforms.
#[test]
fn a_batch_equals_single_plans() {
    let Some(l) = model() else { return };
    let b = CpuBackend::new(Precision::Strict).unwrap();
    let single = Planner::new(&b, &l.model, 1, Sampling::Gumbel).unwrap();
    let batch = Planner::new(&b, &l.model, fx::CASES.len(), Sampling::Gumbel).unwrap();
    let mut all = PlanInputs::default();
    let mut seeds = Vec::new();
    let mut outs = Vec::new();
    for (i, case) in fx::CASES.iter().enumerate() {
        let one = inputs(&fx::case(case));
        let seed = 100 + i as u64;
        outs.push(
            single
                .plan(&one, Some(&Randomness::Seeds(vec![seed])))
                .unwrap(),
        );
        seeds.push(seed);
        all.batch += 1;
        all.global_root_values.extend(one.global_root_values);
        all.has_global_root_values
            .extend(one.has_global_root_values);
        all.local_root_values.extend(one.local_root_values);
        all.has_local_root_values.extend(one.has_local_root_values);
        all.local_poses.extend(one.local_poses);
        all.has_local_poses.extend(one.has_local_poses);
        all.num_tokens.extend(one.num_tokens);
        all.allowed_pred_num_tokens
            .extend(one.allowed_pred_num_tokens);
    }
    let got = batch.plan(&all, Some(&Randomness::Seeds(seeds))).unwrap();
    let n = outs.len();
    let cat =
        |f: &dyn Fn(&PlanOutput) -> Vec<f32>| -> Vec<f32> { outs.iter().flat_map(f).collect() };
    assert_eq!(
        got.num_tokens,
        outs.iter().map(|o| o.num_tokens[0]).collect::<Vec<_>>()
    );
    assert_eq!(
        got.pose_tokens,
        outs.iter()
            .flat_map(|o| o.pose_tokens.clone())
            .collect::<Vec<_>>()
    );
    close(
        "batch features",
        &got.features,
        &cat(&|o| o.features.clone()),
        1e-5,
        1e-6,
    );
    close(
        "batch qpos",
        &got.qpos,
        &cat(&|o| o.qpos.clone()),
        1e-5,
        1e-6,
    );
    assert_eq!(got.features.len(), n * 64 * 414);
}

/// `kinema plan` checks its output before any work: an input (the model, the inputs), a
/// directory or a character device is refused by name, and the inputs are untouched.
#[test]
fn plan_refuses_outputs_that_collide_or_are_special() {
    let Some(l) = model() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let inputs = tmp.path().join("in.npz");
    write_inputs(&fx::case("argmax"), &inputs, false);
    let model_bytes = std::fs::read(&l.path).unwrap();
    let inputs_bytes = std::fs::read(&inputs).unwrap();
    let mut cases: Vec<(std::path::PathBuf, &str)> = vec![
        (l.path.clone(), "is the input --model"),
        (inputs.clone(), "is the input --inputs"),
        (tmp.path().to_path_buf(), "is a directory"),
    ];
    if cfg!(unix) {
        cases.push(("/dev/null".into(), "character device"));
    }
    for (out, want) in cases {
        let r = std::process::Command::new(env!("CARGO_BIN_EXE_kinema"))
            .args([
                "plan",
                "--sampling",
                "argmax",
                "--backend",
                "cpu",
                "--model",
            ])
            .arg(&l.path)
            .arg("--inputs")
            .arg(&inputs)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success() && err.contains(want), "{out:?}: {err}");
    }
    assert_eq!(std::fs::read(&l.path).unwrap(), model_bytes);
    assert_eq!(std::fs::read(&inputs).unwrap(), inputs_bytes);
}

/// `kinema drift --model` picks MotionBricks from the file's architecture and reports every
/// stage boundary per backend; `kinema bench motionbricks --model` reports p50 and p99 for
/// argmax and Gumbel; a file of another architecture is refused by name.
#[test]
fn drift_and_bench_on_the_reduced_model() {
    let Some(l) = model() else { return };
    let kinema = env!("CARGO_BIN_EXE_kinema");
    let r = std::process::Command::new(kinema)
        .args(["drift", "--batch", "2", "--model"])
        .arg(&l.path)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(out.contains("2 plan(s), argmax"), "{out}");
    for row in [
        "length logits",
        "root stage 2",
        "root trajectory",
        "pose logits",
        "pose tokens",
        "decoder output",
        "features",
        "qpos",
    ] {
        assert!(out.contains(row), "{row} missing: {out}");
    }

    let r = std::process::Command::new(kinema)
        .args([
            "bench",
            "motionbricks",
            "--backend",
            "cpu",
            "--json",
            "--plans",
            "3",
            "--batch",
            "2",
            "--model",
        ])
        .arg(&l.path)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["batch"], 2);
    assert_eq!(v["plans"], 3);
    assert_eq!(v["weights"], "f32");
    for s in ["argmax", "gumbel"] {
        let (p50, p99) = (
            v[s]["p50_ms"].as_f64().unwrap(),
            v[s]["p99_ms"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p99 >= p50, "{s}: {v}");
        assert_eq!(v[s]["sampling"], s);
    }

    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other.gguf");
    let mut w = kinema::formats::GgufWriter::new();
    // Llama files are text models now (drift compares them too); "bert" is nothing kinema runs.
    w.add_metadata("general.architecture", "bert").unwrap();
    w.write(&other).unwrap();
    let r = std::process::Command::new(kinema)
        .args(["drift", "--model"])
        .arg(&other)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("\"bert\""), "{err}");
}

/// One planner reused across plans whose lengths change and repeat (it writes the inputs that
/// depend only on the lengths again only when they change) gives exactly what a fresh planner
/// gives for each, on the CPU and on every Vulkan device, argmax and Gumbel.
#[test]
fn a_reused_planner_equals_fresh_ones() {
    use kinema::models::motionbricks::harness::{reduced, synthetic_inputs, synthetic_model};
    use kinema::models::motionbricks::plan::masked_num_tokens;
    let m = synthetic_model(reduced()).unwrap();
    let c = &m.config;
    let free = masked_num_tokens(c) as i64;
    let requests: Vec<PlanInputs> = [[free, free], [free, free], [9, free], [9, free], [6, 16]]
        .iter()
        .map(|n| PlanInputs {
            num_tokens: n.to_vec(),
            ..synthetic_inputs(c, 2)
        })
        .collect();
    fn check<B: Backend>(b: &B, m: &MotionBricksModel, requests: &[PlanInputs], label: &str) {
        for sampling in [Sampling::Argmax, Sampling::Gumbel] {
            let reused = Planner::new(b, m, 2, sampling).unwrap();
            for (i, r) in requests.iter().enumerate() {
                let random = Randomness::Seeds(vec![i as u64, 50 + i as u64]);
                let fresh = Planner::new(b, m, 2, sampling).unwrap();
                let want = fresh.plan(r, Some(&random)).unwrap();
                let got = reused.plan(r, Some(&random)).unwrap();
                let what = format!("{label} {} request {i}", sampling.name());
                assert_eq!(got.num_tokens, want.num_tokens, "{what}");
                assert_eq!(got.pose_tokens, want.pose_tokens, "{what}");
                // Bit for bit (the synthetic model's qpos holds NaN past the plan's length).
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
                assert_eq!(bits(&got.root_stage2), bits(&want.root_stage2), "{what}");
                assert_eq!(bits(&got.decoded), bits(&want.decoded), "{what}");
                assert_eq!(bits(&got.features), bits(&want.features), "{what}");
                assert_eq!(bits(&got.qpos), bits(&want.qpos), "{what}");
            }
        }
    }
    check(
        &CpuBackend::new(Precision::Strict).unwrap(),
        &m,
        &requests,
        "cpu",
    );
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
        for staged in [false, true] {
            let mut o = VulkanOptions::new(Precision::Strict);
            o.device = Some(d.index);
            o.force_staging = staged;
            let b = VulkanBackend::with_options(o).unwrap();
            check(&b, &m, &requests, &format!("vulkan staged {staged}"));
        }
    }
}
