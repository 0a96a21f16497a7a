//! The MotionBricks navigation agent (issue 12 part 5): each piece of host math against
//! upstream's own functions (`tests/fixtures/motionbricks/agent/`, captured by
//! `reference/capture_motionbricks_agent.py`), and scripted runs end to end on the reduced
//! fixture model.

#[path = "common/shared_data.rs"]
mod shared_data;

#[path = "common/motionbricks_fixture.rs"]
mod motionbricks_fixture;

use std::path::{Path, PathBuf};

use kinema::Precision;
use kinema::backend::Backend;
use kinema::cpu::CpuBackend;
use kinema::formats::NpzReader;
use kinema::models::motionbricks::agent::canonical::{
    Frame0, blend, blend_weights, canonical_direction, canonical_waypoint, canonicalize,
    uncanonicalize,
};
use kinema::models::motionbricks::agent::clips::{
    ClipLibrary, TargetFrames, realign_context, target_window,
};
use kinema::models::motionbricks::agent::commands::{self, Command};
use kinema::models::motionbricks::agent::keyframes::plan_inputs;
use kinema::models::motionbricks::agent::kinematics::{G1Kinematics, Transforms};
use kinema::models::motionbricks::agent::run::{AgentRun, run_commands};
use kinema::models::motionbricks::agent::spring::{SpringInput, SpringOutput, spring};
use kinema::models::motionbricks::plan::{Planner, Randomness};
use kinema::models::motionbricks::sampler::Sampling;
use kinema::vulkan::{VulkanBackend, VulkanOptions};

const CASES: [&str; 5] = ["walk", "turn", "idle", "sideways", "waypoint"];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/motionbricks/agent")
}

fn npz(name: &str) -> NpzReader {
    NpzReader::open(dir().join(name)).unwrap()
}

fn f32s(z: &NpzReader, n: &str) -> Vec<f32> {
    z.array(n).unwrap().to_f32().unwrap()
}

fn int(z: &NpzReader, n: &str) -> i64 {
    z.array(n).unwrap().to_i64().unwrap()[0]
}

/// Largest absolute difference, checked against `tol`.
fn close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let (mut worst, mut at) = (0f32, 0);
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let d = (a - b).abs();
        assert!(!d.is_nan(), "{what}[{i}]: {a} vs {b}");
        if d > worst {
            worst = d;
            at = i;
        }
    }
    assert!(
        worst <= tol,
        "{what}: max |diff| {worst:e} at {at} ({} vs {}) > {tol:e}",
        got[at],
        want[at]
    );
}

fn flat(t: &[Transforms]) -> (Vec<f32>, Vec<f32>) {
    let p = t
        .iter()
        .flat_map(|t| t.positions.iter().flatten().copied())
        .collect();
    let r = t
        .iter()
        .flat_map(|t| t.rotations.iter().flat_map(|m| m.iter().flatten().copied()))
        .collect();
    (p, r)
}

fn transforms(z: &NpzReader, pos: &str, rot: &str) -> Vec<Transforms> {
    let p = f32s(z, pos);
    let r = f32s(z, rot);
    let n = p.len() / (34 * 3);
    (0..n)
        .map(|f| Transforms {
            positions: (0..34)
                .map(|j| {
                    let b = (f * 34 + j) * 3;
                    [p[b], p[b + 1], p[b + 2]]
                })
                .collect(),
            rotations: (0..34)
                .map(|j| {
                    let b = (f * 34 + j) * 9;
                    [
                        [r[b], r[b + 1], r[b + 2]],
                        [r[b + 3], r[b + 4], r[b + 5]],
                        [r[b + 6], r[b + 7], r[b + 8]],
                    ]
                })
                .collect(),
        })
        .collect()
}

fn vec3(v: &[f32]) -> [f32; 3] {
    [v[0], v[1], v[2]]
}

fn clips() -> ClipLibrary {
    ClipLibrary::read(&dir().join("clips.npz")).unwrap()
}

/// Upstream's command of a case, as the agent's spring sees it (canonical).
fn spring_input<'a>(z: &NpzReader, ctx: &'a [Transforms], avg: &'a [f32]) -> SpringInput<'a> {
    let waypoint = z.array("canon_target_pos").ok().map(|_| {
        (
            vec3(&f32s(z, "canon_target_pos")),
            f32s(z, "canon_target_heading")[0],
        )
    });
    SpringInput {
        context: ctx,
        mode: int(z, "cmd_mode") as usize,
        avg_root_vel: avg,
        seed: int(z, "cmd_seed") as u64,
        target_vel: z
            .array("cmd_target_vel")
            .ok()
            .map(|a| a.to_f32().unwrap()[0]),
        movement: vec3(&f32s(z, "canon_movement")),
        facing: vec3(&f32s(z, "canon_facing")),
        waypoint,
        fps: 30.0,
    }
}

fn spring_output(z: &NpzReader) -> SpringOutput {
    let tp = f32s(z, "spring_target_root_positions"); // [2, 4]
    let sp = f32s(z, "spring_start_root_positions");
    let th = f32s(z, "spring_target_root_headings");
    let sh = f32s(z, "spring_start_root_headings");
    SpringOutput {
        start_positions: std::array::from_fn(|f| [sp[f], sp[4 + f]]),
        start_headings: std::array::from_fn(|f| sh[f]),
        target_positions: std::array::from_fn(|f| [tp[f], tp[4 + f]]),
        target_headings: std::array::from_fn(|f| th[f]),
        mode: int(z, "mode_remapped") as usize,
    }
}

#[test]
fn qpos_to_joint_transforms_matches_upstream_fk() {
    let z = npz("fk.npz");
    let q = f32s(&z, "qpos");
    let k = G1Kinematics::get();
    let got: Vec<Transforms> = q.chunks_exact(36).map(|r| k.transforms(r)).collect();
    let (p, r) = flat(&got);
    close("positions", &p, &f32s(&z, "positions"), 2e-6);
    close("rotations", &r, &f32s(&z, "rotations"), 2e-6);
}

#[test]
fn canonicalisation_matches_upstream() {
    for case in CASES {
        let z = npz(&format!("step_{case}.npz"));
        let mut q = f32s(&z, "ctx_qpos");
        let f0 = canonicalize(&mut q);
        close(&format!("{case} qpos"), &q, &f32s(&z, "canon_qpos"), 2e-6);
        close(
            &format!("{case} heading"),
            &[f0.heading],
            &f32s(&z, "first_heading"),
            0.0,
        );
        close(
            &format!("{case} position"),
            &f0.position,
            &f32s(&z, "first_position"),
            0.0,
        );
        let mv = canonical_direction(&f0, &vec3(&f32s(&z, "cmd_movement")));
        close(
            &format!("{case} movement"),
            &mv,
            &f32s(&z, "canon_movement"),
            1e-7,
        );
        let fc = canonical_direction(&f0, &vec3(&f32s(&z, "cmd_facing")));
        close(
            &format!("{case} facing"),
            &fc,
            &f32s(&z, "canon_facing"),
            1e-7,
        );
        if let Ok(p) = z.array("cmd_target_pos") {
            let p = p.to_f32().unwrap();
            let (cp, ch) = canonical_waypoint(&f0, &vec3(&p), f32s(&z, "cmd_target_heading")[0]);
            close(
                &format!("{case} waypoint"),
                &cp,
                &f32s(&z, "canon_target_pos"),
                1e-6,
            );
            close(
                &format!("{case} waypoint heading"),
                &[ch],
                &f32s(&z, "canon_target_heading"),
                0.0,
            );
        }
        // FK of the canonical context.
        let k = G1Kinematics::get();
        let t: Vec<Transforms> = f32s(&z, "canon_qpos")
            .chunks_exact(36)
            .map(|r| k.transforms(r))
            .collect();
        let (p, r) = flat(&t);
        close(
            &format!("{case} ctx positions"),
            &p,
            &f32s(&z, "ctx_positions"),
            2e-6,
        );
        close(
            &format!("{case} ctx rotations"),
            &r,
            &f32s(&z, "ctx_rotations"),
            2e-6,
        );
    }
}

#[test]
fn spring_matches_upstream() {
    let lib = clips();
    let avg = lib.avg_root_vel();
    let mut remapped = 0;
    for case in CASES {
        let z = npz(&format!("step_{case}.npz"));
        let ctx = transforms(&z, "ctx_positions", "ctx_rotations");
        let got = spring(&spring_input(&z, &ctx, &avg));
        let want = spring_output(&z);
        assert_eq!(got.mode, want.mode, "{case}: remapped mode");
        remapped += usize::from(got.mode != int(&z, "cmd_mode") as usize);
        let f = |s: &SpringOutput| {
            let mut v: Vec<f32> = s.start_positions.iter().flatten().copied().collect();
            v.extend(s.target_positions.iter().flatten());
            v.extend(s.start_headings);
            v.extend(s.target_headings);
            v
        };
        close(&format!("{case} spring"), &f(&got), &f(&want), 2e-6);
    }
    assert_eq!(remapped, 1, "the sideways case walks left");
}

#[test]
fn target_window_and_realignment_match_upstream() {
    let lib = clips();
    for case in CASES {
        let z = npz(&format!("step_{case}.npz"));
        let s = spring_output(&z);
        let clip = lib.clip(s.mode).unwrap();
        let t = target_window(clip, int(&z, "cmd_seed") as u64, &s);
        let (p, r) = flat(&t.joints);
        close(
            &format!("{case} target positions"),
            &p,
            &f32s(&z, "target_positions"),
            2e-6,
        );
        close(
            &format!("{case} target rotations"),
            &r,
            &f32s(&z, "target_rotations"),
            2e-6,
        );
        let rp: Vec<f32> = t.root_positions.iter().flatten().copied().collect();
        close(
            &format!("{case} target roots"),
            &rp,
            &f32s(&z, "target_root_positions"),
            0.0,
        );
        let mut ctx = transforms(&z, "ctx_positions", "ctx_rotations");
        realign_context(&mut ctx, &s);
        let (p, r) = flat(&ctx);
        close(
            &format!("{case} realigned positions"),
            &p,
            &f32s(&z, "realigned_ctx_positions"),
            2e-6,
        );
        close(
            &format!("{case} realigned rotations"),
            &r,
            &f32s(&z, "realigned_ctx_rotations"),
            2e-6,
        );
    }
}

#[test]
fn keyframes_match_upstream_predict_arguments() {
    for case in CASES {
        let z = npz(&format!("step_{case}.npz"));
        let s = spring_output(&z);
        let ctx = transforms(&z, "realigned_ctx_positions", "realigned_ctx_rotations");
        let tj = transforms(&z, "target_positions", "target_rotations");
        let rp = f32s(&z, "target_root_positions");
        let target = TargetFrames {
            joints: tj,
            root_positions: std::array::from_fn(|f| vec3(&rp[f * 3..])),
        };
        let allowed: Vec<bool> = z
            .array("in.allowed_pred_num_tokens")
            .unwrap()
            .to_i64()
            .unwrap()
            .iter()
            .map(|&v| v == 1)
            .collect();
        let got = plan_inputs(&ctx, &target, &s.target_headings, &allowed, 18, 30.0);
        close(
            &format!("{case} global"),
            &got.global_root_values,
            &f32s(&z, "in.global_root_values"),
            2e-6,
        );
        close(
            &format!("{case} local"),
            &got.local_root_values,
            &f32s(&z, "in.local_root_values"),
            1e-4,
        );
        close(
            &format!("{case} poses"),
            &got.local_poses,
            &f32s(&z, "in.local_poses"),
            2e-6,
        );
        for (n, v) in [
            ("in.has_global_root_values", &got.has_global_root_values),
            ("in.has_local_root_values", &got.has_local_root_values),
            ("in.has_local_poses", &got.has_local_poses),
        ] {
            let want: Vec<bool> = z
                .array(n)
                .unwrap()
                .to_i64()
                .unwrap()
                .iter()
                .map(|&x| x == 1)
                .collect();
            assert_eq!(v, &want, "{case}: {n}");
        }
        assert_eq!(got.num_tokens, vec![int(&z, "in.num_tokens")]);
        assert_eq!(got.allowed_pred_num_tokens, allowed);
    }
}

#[test]
fn uncanonicalisation_and_blend_match_upstream() {
    for case in CASES {
        let z = npz(&format!("step_{case}.npz"));
        let mut q = f32s(&z, "plan_qpos_canonical");
        let f0 = Frame0 {
            heading: f32s(&z, "first_heading")[0],
            position: vec3(&f32s(&z, "first_position")),
        };
        uncanonicalize(&mut q, &f0);
        close(
            &format!("{case} uncanonicalised"),
            &q,
            &f32s(&z, "raw_qpos"),
            1e-5,
        );
        blend(&mut q, &f32s(&z, "ctx_qpos"));
        close(&format!("{case} blended"), &q, &f32s(&z, "qpos"), 1e-5);
    }
    // torch.linspace(0.3, 0.7, 4) in float32.
    assert_eq!(blend_weights(4), vec![0.3, 0.43333334, 0.56666666, 0.7]);
}

#[test]
fn clip_files_round_trip_and_bad_ones_are_refused() {
    let lib = ClipLibrary::synthetic(3);
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("clips.npz");
    lib.to_npz().unwrap().write(&p).unwrap();
    let back = ClipLibrary::read(&p).unwrap();
    for (a, b) in lib.clips.iter().zip(&back.clips) {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        assert_eq!(a.qpos, b.qpos);
        assert_eq!(a.allowed, b.allowed);
        assert_eq!(a.headings, b.headings);
    }
    // A library without walk_left: a sideways walk must name it; a style it lacks is refused
    // by name; bad JSON and non-finite numbers name the entry.
    let mut part = lib.clone();
    part.clips[13] = None;
    part.clips[4] = None;
    let text = r#"{"commands": [{"style": "walk_boxing", "duration": 1}]}"#;
    let e = commands::parse(text, &part).unwrap_err().to_string();
    assert!(
        e.contains("commands[0].style") && e.contains("walk_boxing"),
        "{e}"
    );
    for (text, want) in [
        (
            r#"{"commands": [{"style": "walk", "duration": 1}, {"style": "run", "duration": 1}]}"#,
            "commands[1].style \"run\"",
        ),
        (
            r#"{"commands": [{"style": "walk", "duration": 1e999}]}"#,
            "commands",
        ),
        (
            r#"{"commands": [{"style": "walk", "duration": 2, "speed": -1}]}"#,
            "commands[0].speed",
        ),
        (
            r#"{"commands": [{"style": "walk", "duration": 0}]}"#,
            "commands[0].duration",
        ),
        (
            r#"{"commands": [{"style": "walk", "duration": 1, "movement": [1]}]}"#,
            "commands[0].movement",
        ),
        (
            r#"{"commands": [{"style": "walk", "duration": 1, "fast": true}]}"#,
            "unknown field",
        ),
        (r#"{"commands": []}"#, "empty"),
        (
            r#"{"commands": [{"style": "walk", "duration": 4000}]}"#,
            "3600",
        ),
        ("[", "commands"),
    ] {
        let e = commands::parse(text, &lib).unwrap_err().to_string();
        assert!(e.contains(want), "{text}: {e}");
    }
    let zp = tmp.path().join("noidle.npz");
    let mut noidle = lib.clone();
    noidle.clips[0] = None;
    noidle.to_npz().unwrap().write(&zp).unwrap();
    let e = ClipLibrary::read(&zp).unwrap_err().to_string();
    assert!(e.contains("idle"), "{e}");
}

use motionbricks_fixture::Loaded;

fn model() -> Option<Loaded> {
    let up = shared_data::upstream_dir("motionbricks/out")?;
    Some(motionbricks_fixture::converted(&up))
}

/// 20 seconds: idle, walk forward, turn and walk left, a zombie walk to a waypoint, idle.
const SCRIPT: &str = r#"{"commands": [
  {"style": "idle", "duration": 1.0},
  {"style": "walk", "duration": 6.0, "movement": [1, 0], "facing": [1, 0], "seed": 11},
  {"style": "walk", "duration": 4.0, "movement": [0, 1], "facing": [0, 1], "speed": 0.6, "seed": 12},
  {"style": "walk", "duration": 3.0, "movement": [0, 1], "facing": [1, 0], "seed": 13},
  {"style": "walk_zombie", "duration": 4.0, "waypoint": {"position": [3, 4], "heading": 1.5}, "seed": 14},
  {"style": "idle", "duration": 2.0}
]}"#;

fn script(lib: &ClipLibrary) -> Vec<Command> {
    commands::parse(SCRIPT, lib).unwrap()
}

fn check_run(run: &AgentRun, label: &str) {
    assert_eq!(run.frames, 600, "{label}");
    assert_eq!(run.qpos.len(), 600 * 36);
    assert!(
        run.qpos.iter().all(|v| v.is_finite()),
        "{label}: finite qpos"
    );
    // A plan every 16 frames from frame 16 until the closing idle holds.
    assert!(run.plans.len() >= 30, "{label}: {} plans", run.plans.len());
    assert_eq!(run.plans[0].frame, 16);
    for w in run.plans.windows(2) {
        assert_eq!(w[1].frame - w[0].frame, 16, "{label}: replan spacing");
    }
    for p in &run.plans {
        let n = p.output.num_tokens[0] as usize;
        assert!((6..=16).contains(&n));
        assert!(
            p.inputs.allowed_pred_num_tokens[n - 6],
            "{label}: an allowed length"
        );
        assert_eq!(p.qpos.len(), n * 4 * 36);
    }
    // The sideways command walks left, and the planned frame that plays right after a plan
    // starts is the 0.3/0.7 blend of the context frame that would have played.
    assert!(
        run.plans.iter().any(|p| p.command == 3 && p.style == 13),
        "{label}: walk_left used"
    );
    for p in &run.plans {
        let at = p.frame * 36;
        close(label, &run.qpos[at..at + 3], &p.qpos[..3], 0.0);
    }
}

fn run_on<B: Backend>(b: &B, l: &Loaded, sampling: Sampling) -> AgentRun {
    let lib = ClipLibrary::synthetic(1);
    let planner = Planner::new(b, &l.model, 1, sampling).unwrap();
    run_commands(&planner, &l.model, &lib, &script(&lib), true).unwrap()
}

#[test]
fn a_scripted_twenty_second_run_on_the_cpu() {
    let Some(l) = model() else { return };
    let cpu = CpuBackend::new(Precision::Strict).unwrap();
    let a = run_on(&cpu, &l, Sampling::Gumbel);
    check_run(&a, "cpu gumbel");
    let b = run_on(&cpu, &l, Sampling::Gumbel);
    assert_eq!(a.qpos, b.qpos, "the same script plays the same motion");
    // The Gumbel picks really sample: on a good share of the valid slots the chosen code is
    // not the most likely one.
    let (mut moved, mut slots) = (0, 0);
    for p in &a.plans {
        let n = p.output.num_tokens[0] as usize * 8;
        for (s, &t) in p.output.pose_tokens[..n].iter().enumerate() {
            let row = &p.output.pose_logits[s * 10..(s + 1) * 10];
            let best = (0..10).fold(0, |b, i| if row[i] > row[b] { i } else { b });
            moved += usize::from(best != t as usize);
        }
        slots += n;
    }
    eprintln!("Gumbel picks differ from argmax on {moved} of {slots} slots");
    assert!(
        moved * 4 >= slots,
        "{moved} of {slots} slots moved by the Gumbel noise"
    );
    let g = run_on(&cpu, &l, Sampling::Argmax);
    check_run(&g, "cpu argmax");
    assert_ne!(a.qpos, g.qpos, "Gumbel picks change the motion");
}

#[test]
fn a_scripted_run_on_vulkan_matches_the_cpu_tokens() {
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
    let mut o = VulkanOptions::new(Precision::Strict);
    o.device = Some(devices[0].index);
    let vk = VulkanBackend::with_options(o).unwrap();
    let cpu = CpuBackend::new(Precision::Strict).unwrap();
    let a = run_on(&cpu, &l, Sampling::Gumbel);
    let v = run_on(&vk, &l, Sampling::Gumbel);
    check_run(&v, "vulkan gumbel");
    // Closed loop each plan's context is the previous plan's output, so the two runs drift
    // apart with the backends' float differences (random weights make the motion chaotic).
    // Each CPU plan's exact inputs and seed replayed on Vulkan must give its tokens.
    let planner = Planner::new(&vk, &l.model, 1, Sampling::Gumbel).unwrap();
    let (mut same, mut slots) = (0, 0);
    for (i, p) in a.plans.iter().enumerate() {
        let q = planner
            .plan(&p.inputs, Some(&Randomness::Seeds(vec![p.seed])))
            .unwrap();
        assert_eq!(p.output.num_tokens, q.num_tokens, "plan {i}: lengths");
        let n = p.output.num_tokens[0] as usize * 8;
        slots += n;
        same += p.output.pose_tokens[..n]
            .iter()
            .zip(&q.pose_tokens[..n])
            .filter(|(x, y)| x == y)
            .count();
    }
    assert_eq!(same, slots, "CPU and Vulkan token slots equal");
}

fn kinema(args: &[&str], paths: &[&Path]) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_kinema"));
    c.args(args);
    for p in paths {
        c.arg(p);
    }
    c.output().unwrap()
}

#[test]
fn command_line_agent_writes_run_and_trace_or_nothing() {
    let Some(l) = model() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let clips = tmp.path().join("clips.npz");
    ClipLibrary::synthetic(1)
        .to_npz()
        .unwrap()
        .write(&clips)
        .unwrap();
    let cmds = tmp.path().join("commands.json");
    std::fs::write(
        &cmds,
        r#"{"commands": [{"style": "walk", "duration": 2.0, "seed": 3}]}"#,
    )
    .unwrap();
    let (run, trace) = (tmp.path().join("run.npz"), tmp.path().join("trace.npz"));
    let args = |run: &Path, trace: &Path, cmds: &Path| -> std::process::Output {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_kinema"));
        c.arg("agent")
            .arg("--model")
            .arg(&l.path)
            .arg("--clips")
            .arg(&clips);
        c.arg("--commands")
            .arg(cmds)
            .args(["--sampling", "gumbel", "--backend", "cpu", "-o"]);
        c.arg(run).arg("--trace").arg(trace);
        c.output().unwrap()
    };
    let o = args(&run, &trace, &cmds);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = NpzReader::open(&run).unwrap();
    assert_eq!(r.array("qpos").unwrap().shape, vec![60, 36]);
    assert_eq!(
        r.array("plan_frame").unwrap().to_i64().unwrap(),
        vec![16, 32, 48]
    );
    let t = NpzReader::open(&trace).unwrap();
    assert_eq!(t.array("uniforms").unwrap().shape, vec![3, 16, 8, 10]);
    assert_eq!(t.array("pose_tokens").unwrap().shape, vec![3, 16, 8]);
    assert_eq!(t.array("in.local_poses").unwrap().shape, vec![3, 8, 303]);
    // A style the clip file lacks: a clear error, and neither file written.
    let mut lib = ClipLibrary::synthetic(1);
    lib.clips[10] = None;
    lib.to_npz().unwrap().write(&clips).unwrap();
    std::fs::write(
        &cmds,
        r#"{"commands": [{"style": "walk_zombie", "duration": 2.0}]}"#,
    )
    .unwrap();
    let (run2, trace2) = (tmp.path().join("run2.npz"), tmp.path().join("trace2.npz"));
    let o = args(&run2, &trace2, &cmds);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("commands[0].style \"walk_zombie\""), "{e}");
    assert!(!run2.exists() && !trace2.exists());
    let o = kinema(&["agent", "--model"], &[&l.path]);
    assert!(!o.status.success());
}
