//! The host API's MotionBricks agent (issue 15) on the tiny model and the synthetic clips: a
//! script pushed at the frames it switches commands plays `kinema agent`'s `qpos` bit for bit
//! (argmax and Gumbel), `poll` stops at plans, progress cancels without changing the agent,
//! and bad commands are errors naming the field.

#[path = "common/tiny_models.rs"]
mod tiny_models;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kinema::formats::NpzReader;
use kinema::models::motionbricks::agent::commands;
use kinema::{
    Agent, AgentCommand, AgentOptions, BackendChoice, ClipLibrary, Engine, EngineOptions, Error,
    MotionBricks, PrecisionChoice, Progress, Sampling,
};

/// 6 seconds: idle, walk forward, turn left walking, sideways (walk_left), a zombie walk to a
/// waypoint.
const SCRIPT: &str = r#"{"commands": [
  {"style": "idle", "duration": 0.7},
  {"style": "walk", "duration": 1.5, "movement": [1, 0], "facing": [1, 0], "seed": 11},
  {"style": "walk", "duration": 1.2, "movement": [0, 1], "facing": [0, 1], "speed": 0.6, "seed": 12},
  {"style": "walk", "duration": 1.0, "movement": [0, 1], "facing": [1, 0], "seed": 13},
  {"style": "walk_zombie", "duration": 1.6, "waypoint": {"position": [3, 4], "heading": 1.5}, "seed": 14}
]}"#;

/// The script as API commands, in order.
fn api_commands() -> Vec<AgentCommand> {
    let walk = |m: [f64; 2], f: [f64; 2], seed| AgentCommand {
        movement: m,
        facing: f,
        seed,
        ..AgentCommand::new("walk")
    };
    vec![
        AgentCommand::new("idle"),
        walk([1.0, 0.0], [1.0, 0.0], 11),
        AgentCommand {
            speed: Some(0.6),
            ..walk([0.0, 1.0], [0.0, 1.0], 12)
        },
        walk([0.0, 1.0], [1.0, 0.0], 13),
        AgentCommand {
            waypoint: Some(([3.0, 4.0], 1.5)),
            seed: 14,
            ..AgentCommand::new("walk_zombie")
        },
    ]
}

struct Files {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    mb: PathBuf,
    clips: PathBuf,
    commands: PathBuf,
}

fn files() -> Files {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_path_buf();
    let (_, mb) = tiny_models::write(&p).unwrap();
    let clips = p.join("clips.npz");
    ClipLibrary::synthetic(1)
        .to_npz()
        .unwrap()
        .write(&clips)
        .unwrap();
    let commands = p.join("commands.json");
    std::fs::write(&commands, SCRIPT).unwrap();
    Files {
        _dir: dir,
        dir: p,
        mb,
        clips,
        commands,
    }
}

fn cpu_engine() -> Engine {
    Engine::new(EngineOptions {
        backend: BackendChoice::Cpu,
        precision: PrecisionChoice::Strict,
        threads: Some(2),
        ..EngineOptions::default()
    })
    .unwrap()
}

fn cli(f: &Files, sampling: &str, out: &Path) -> NpzReader {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_kinema"))
        .arg("agent")
        .arg("--model")
        .arg(&f.mb)
        .arg("--clips")
        .arg(&f.clips)
        .arg("--commands")
        .arg(&f.commands)
        .args([
            "--sampling",
            sampling,
            "--backend",
            "cpu",
            "--precision",
            "strict",
        ])
        .args(["--threads", "2", "--quiet", "-o"])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    NpzReader::open(out).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Plays the script through the API, pushing each command at the frame `kinema agent`
/// switches to it (`commands::at`), in steps of `chunk` frames.
fn play(agent: &mut Agent<&MotionBricks>, chunk: usize) -> (Vec<f32>, Vec<kinema::AgentPlan>) {
    let lib = ClipLibrary::synthetic(1);
    let script = commands::parse(SCRIPT, &lib).unwrap();
    let api = api_commands();
    let total = commands::total_frames(&script, 30.0);
    // The frames each command holds.
    let mut spans = vec![0usize; script.len()];
    for t in 0..total {
        spans[commands::at(&script, t, 30.0).0] += 1;
    }
    let (mut qpos, mut plans) = (Vec::new(), Vec::new());
    for (c, &n) in api.iter().zip(&spans) {
        agent.push(c).unwrap();
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk);
            let out = agent.step(k).unwrap();
            assert_eq!(out.frames(), k);
            qpos.extend_from_slice(&out.qpos);
            plans.extend(out.plans);
            left -= k;
        }
    }
    assert_eq!(agent.frames_played(), total);
    (qpos, plans)
}

#[test]
fn a_pushed_script_plays_kinema_agent_bit_for_bit() {
    let f = files();
    let engine = cpu_engine();
    let mb = MotionBricks::load(&engine, &f.mb).unwrap();
    for (sampling, name, chunk) in [
        (Sampling::Argmax, "argmax", 7),
        (Sampling::Gumbel, "gumbel", 40),
    ] {
        let z = cli(&f, name, &f.dir.join(format!("run-{name}.npz")));
        let want = z.array("qpos").unwrap();
        let mut agent = Agent::open(&mb, &f.clips, AgentOptions { sampling }).unwrap();
        let (qpos, plans) = play(&mut agent, chunk);
        assert_eq!(want.shape, vec![qpos.len() / 36, 36], "{name}");
        assert_eq!(bits(&want.to_f32().unwrap()), bits(&qpos), "{name}: qpos");
        assert!(qpos.iter().all(|v| v.is_finite()), "{name}: finite qpos");
        let ints = |n: &str| z.array(n).unwrap().to_i64().unwrap();
        let frames: Vec<i64> = plans.iter().map(|p| p.frame as i64).collect();
        assert_eq!(ints("plan_frame"), frames, "{name}");
        let styles: Vec<i64> = plans.iter().map(|p| p.style as i64).collect();
        assert_eq!(ints("plan_style"), styles, "{name}");
        let cmds: Vec<i64> = plans.iter().map(|p| p.command as i64).collect();
        assert_eq!(ints("plan_command"), cmds, "{name}");
        let toks: Vec<i64> = plans.iter().map(|p| i64::from(p.num_tokens)).collect();
        assert_eq!(ints("plan_num_tokens"), toks, "{name}");
        assert!(plans.len() >= 8, "{name}: {} plans", plans.len());
        assert!(
            plans.iter().any(|p| p.style == 13),
            "{name}: walk_left used"
        );
        assert!(
            plans
                .iter()
                .all(|p| p.ms >= p.predict_ms && p.predict_ms > 0.0)
        );
    }
}

#[test]
fn poll_stops_at_plans_and_an_arc_agent_moves_between_threads() {
    let f = files();
    let engine = cpu_engine();
    let mb = Arc::new(MotionBricks::load(&engine, &f.mb).unwrap());
    let mut agent = Agent::open(mb.clone(), &f.clips, AgentOptions::default()).unwrap();
    // Before any push the agent follows idle: the first plan comes after 16 frames, then
    // idle under idle does not replan (16 frames per poll).
    let out = agent.poll().unwrap();
    assert_eq!(
        (out.frames(), out.plans[0].frame, out.first_frame),
        (16, 16, 0)
    );
    let out = agent.poll().unwrap();
    assert_eq!(
        (out.frames(), out.plans.len(), out.first_frame),
        (16, 0, 16)
    );
    agent.push(&AgentCommand::new("walk")).unwrap();
    let (first, second, agent) = std::thread::spawn(move || {
        let first = agent.poll().unwrap();
        let second = agent.poll().unwrap();
        (first, second, agent)
    })
    .join()
    .unwrap();
    // Walking replans at once (16 frames of the idle plan played), then 16 frames later.
    assert_eq!((first.frames(), first.plans[0].frame), (1, 33));
    assert_eq!((second.frames(), second.plans[0].frame), (16, 49));
    assert_eq!(second.plans[0].command, 0);
    assert_eq!(agent.plans_made(), 3);
    assert_eq!(agent.frames_played(), 49);
    assert!(agent.available_styles().contains(&"walk_zombie"));
}

#[test]
fn a_cancel_or_a_bad_command_leaves_the_agent_as_it_was() {
    let f = files();
    let engine = cpu_engine();
    let mb = MotionBricks::load(&engine, &f.mb).unwrap();
    let mut agent = Agent::open(&mb, &f.clips, AgentOptions::default()).unwrap();
    agent.push(&AgentCommand::new("walk")).unwrap();
    let mut seen = Vec::new();
    let e = agent
        .step_with_progress(40, &mut |s, i, n| {
            seen.push((s.name(), i, n));
            if seen.len() == 3 {
                Progress::Cancel
            } else {
                Progress::Continue
            }
        })
        .unwrap_err();
    assert!(matches!(e, Error::Cancelled { stage: "plan", .. }), "{e}");
    assert_eq!(seen, vec![("plan", 0, 1), ("plan", 1, 1), ("plan", 0, 1)]);
    assert_eq!((agent.frames_played(), agent.plans_made()), (0, 0));
    let whole = agent.step(40).unwrap();
    let mut again = Agent::open(&mb, &f.clips, AgentOptions::default()).unwrap();
    again.push(&AgentCommand::new("walk")).unwrap();
    assert_eq!(bits(&again.step(40).unwrap().qpos), bits(&whole.qpos));
    for (c, want) in [
        (AgentCommand::new("run"), "style \"run\" is not a style"),
        (
            AgentCommand {
                speed: Some(-1.0),
                ..AgentCommand::new("walk")
            },
            "speed is -1, expected m/s > 0",
        ),
        (
            AgentCommand {
                movement: [f64::NAN, 0.0],
                ..AgentCommand::new("walk")
            },
            "movement is NaN",
        ),
        (
            AgentCommand {
                seed: u64::MAX,
                ..AgentCommand::new("walk")
            },
            "is above 9223372036854775807",
        ),
    ] {
        let e = agent.push(&c).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    assert_eq!(agent.frames_played(), 40);
    let mut lib = ClipLibrary::synthetic(1);
    lib.clips[10] = None;
    let mut a = Agent::new(&mb, lib, AgentOptions::default()).unwrap();
    let e = a.push(&AgentCommand::new("walk_zombie")).unwrap_err();
    assert!(
        e.to_string().contains("the clip file has no such clip"),
        "{e}"
    );
    let e = a.step(2_000_000).unwrap_err().to_string();
    assert!(e.contains("frames in one call"), "{e}");
}
