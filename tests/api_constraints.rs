//! Constraints through the host API (`GenerateRequest::constraints`): on the tiny SOMA30 model
//! a constrained request gives the npz of `kinema generate --constraints` byte for byte (one
//! segment with diagnostics, post-processing on and off, and segments against `--timeline`),
//! and bad constraints are errors that name the problem as the command line's do.

#[path = "common/tiny_models.rs"]
mod tiny_models;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kinema::formats::{NpyArray, npy};
use kinema::{
    BackendChoice, Constraints, Engine, EngineOptions, GenerateRequest, Kimodo, Noise,
    PrecisionChoice, Segment, TextInput,
};

struct Models {
    dir: tempfile::TempDir,
    kimodo: PathBuf,
}

fn models() -> &'static Models {
    static M: OnceLock<Models> = OnceLock::new();
    M.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (kimodo, _) = tiny_models::write(dir.path()).unwrap();
        Models { dir, kimodo }
    })
}

fn model() -> Kimodo {
    let engine = Engine::new(EngineOptions {
        backend: BackendChoice::Cpu,
        precision: PrecisionChoice::Strict,
        threads: Some(2),
        ..EngineOptions::default()
    })
    .unwrap();
    Kimodo::load(&engine, &models().kimodo).unwrap()
}

/// A text feature of order 1, as LLM2Vec's are.
fn embedding(dim: usize, phase: f32) -> Vec<f32> {
    (0..dim).map(|i| (i as f32 * 0.37 + phase).sin()).collect()
}

const FRAMES: usize = 16;

/// A full-body keyframe of the tiny SOMA30 skeleton (30 joints) at `frame`, its root at `x`.
fn fullbody(frame: usize, x: f32) -> String {
    fullbody_joints(30, frame, x)
}

/// A full-body keyframe of `joints` joints.
fn fullbody_joints(joints: usize, frame: usize, x: f32) -> String {
    let rots: Vec<String> = (0..joints)
        .map(|j| format!("[{:.2},0,{:.2}]", 0.01 * j as f32, -0.02 * j as f32))
        .collect();
    format!(
        r#"{{"type":"fullbody","frame_indices":[{frame}],"local_joints_rot":[[{}]],"root_positions":[[{x},0.9,0.3]]}}"#,
        rots.join(",")
    )
}

/// root2d over several frames, a full-body keyframe and a hand chain: three kinds of entry.
fn constraint_json(last: usize) -> String {
    let rots: Vec<String> = (0..30).map(|_| "[0,0.1,0]".to_string()).collect();
    format!(
        r#"[{{"type":"root2d","frame_indices":[0,4,8],"smooth_root_2d":[[0,0],[0.2,0.1],[0.5,0.2]],"global_root_heading":[[1,0],[1,0],[0.9,0.43589]]}},{},{{"type":"left-hand","frame_indices":[{last}],"local_joints_rot":[[{}]],"root_positions":[[0.6,0.9,0.3]]}}]"#,
        fullbody(6, 0.4),
        rots.join(",")
    )
}

fn kinema() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kinema"))
}

/// Runs the command line; `(success, stdout + stderr)`.
fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("run kinema");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn write_embedding(path: &Path, e: &[f32]) {
    npy::write_file(path, &NpyArray::from_f32(&[1, e.len()], e).unwrap()).unwrap();
}

/// `kinema generate` on the tiny model (CPU, strict, 2 threads, 3 steps, seed 5).
fn cli(args: &[&str], extra: &[&Path]) -> Command {
    let mut c = kinema();
    c.args([
        "generate",
        "--quiet",
        "--backend",
        "cpu",
        "--precision",
        "strict",
        "--threads",
        "2",
        "--steps",
        "3",
        "--seed",
        "5",
        "--heading",
        "0.3",
    ])
    .arg("--model")
    .arg(&models().kimodo)
    .args(args);
    for p in extra {
        c.arg(p);
    }
    c
}

fn request(k: &Kimodo, constraints: Option<Constraints>) -> GenerateRequest {
    GenerateRequest {
        steps: 3,
        noise: Noise::Seed(5),
        heading: 0.3,
        constraints,
        ..GenerateRequest::new(embedding(k.embedding_dim(), 0.0), FRAMES)
    }
}

#[test]
fn constrained_generation_equals_kinema_generate_constraints() {
    let k = model();
    let tmp = tempfile::tempdir().unwrap();
    let json = constraint_json(FRAMES - 1);
    let cpath = tmp.path().join("constraints.json");
    std::fs::write(&cpath, &json).unwrap();
    let emb = tmp.path().join("e.npy");
    write_embedding(&emb, &embedding(k.embedding_dim(), 0.0));

    for (diagnostics, postprocess) in [(true, true), (false, false)] {
        let cs = Constraints::from_json(&json).unwrap();
        assert_eq!(cs.len(), 3);
        let req = GenerateRequest {
            diagnostics,
            postprocess,
            ..request(&k, Some(cs))
        };
        let motion = k.generate(&req).unwrap();
        assert_eq!(motion.postprocessed(), postprocess);
        let cond = motion
            .conditions()
            .expect("the constraint row's conditions");
        assert!(cond.count() > 0);

        let out = tmp.path().join(format!("cli_{diagnostics}.npz"));
        let frames = FRAMES.to_string();
        let mut args = vec!["--frames", frames.as_str()];
        if diagnostics {
            args.push("--diagnostics");
        }
        if !postprocess {
            args.push("--no-postprocess");
        }
        args.extend(["--embedding"]);
        let mut cmd = cli(&args, &[&emb]);
        cmd.arg("--constraints").arg(&cpath).arg("-o").arg(&out);
        let (ok, text) = run(&mut cmd);
        assert!(ok, "{text}");
        let side: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.with_extension("json")).unwrap()).unwrap();
        assert_eq!(side["cfg_rows"], 3, "the CLI's default with constraints");
        assert_eq!(side["constrained_entries"], cond.count());
        assert_eq!(side["postprocess"], postprocess);
        assert!(
            std::fs::read(&out).unwrap() == motion.npz_bytes().unwrap(),
            "the API's npz differs from kinema generate --constraints (diagnostics \
             {diagnostics}, postprocess {postprocess})"
        );

        // The same from the file, and explicit 3 rows, give the same motion.
        let from_file = GenerateRequest {
            cfg_rows: Some(3),
            ..req.clone()
        };
        let from_file = GenerateRequest {
            constraints: Some(Constraints::from_path(&cpath).unwrap()),
            ..from_file
        };
        let again = k.generate(&from_file).unwrap();
        assert!(again.npz_bytes().unwrap() == motion.npz_bytes().unwrap());
    }

    // Constraints change the motion: without them the first root differs.
    let free = k.generate(&request(&k, None)).unwrap();
    let held = k
        .generate(&request(&k, Some(Constraints::from_json(&json).unwrap())))
        .unwrap();
    assert!(free.conditions().is_none());
    assert_ne!(free.root_positions(), held.root_positions());
    // Post-processing pins the full-body keyframe's root (frame 6 at x = 0.4, z = 0.3).
    let r = &held.root_positions()[6 * 3..6 * 3 + 3];
    assert!(
        (r[0] - 0.4).abs() < 1e-3 && (r[2] - 0.3).abs() < 1e-3,
        "root at the keyframe: {r:?}"
    );
}

/// Segments with constraints over the whole timeline equal `kinema generate --timeline
/// --constraints`.
#[test]
fn constrained_segments_equal_the_timeline() {
    let k = model();
    let tmp = tempfile::tempdir().unwrap();
    let d = k.embedding_dim();
    let frames = [14usize, 12, 11];
    let total: usize = frames.iter().sum();
    let json = format!(
        "[{},{}]",
        fullbody(3, 0.1),
        fullbody(total - 2, 1.2).replace("fullbody", "right-foot")
    );
    let cpath = tmp.path().join("c.json");
    std::fs::write(&cpath, &json).unwrap();
    let mut entries = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let p = tmp.path().join(format!("e{i}.npy"));
        write_embedding(&p, &embedding(d, i as f32));
        entries.push(serde_json::json!({"embedding": p, "frames": f}));
    }
    let tl = tmp.path().join("timeline.json");
    std::fs::write(&tl, serde_json::to_vec(&entries).unwrap()).unwrap();
    let out = tmp.path().join("tl.npz");
    let mut cmd = cli(&["--timeline"], &[&tl]);
    cmd.arg("--constraints").arg(&cpath).arg("-o").arg(&out);
    let (ok, text) = run(&mut cmd);
    assert!(ok, "{text}");

    let seg = |i: usize| Segment {
        text: TextInput::Embedding(embedding(d, i as f32)),
        frames: frames[i],
    };
    let req = GenerateRequest {
        segments: vec![seg(1), seg(2)],
        frames: frames[0],
        ..request(&k, Some(Constraints::from_json(&json).unwrap()))
    };
    let motion = k.generate(&req).unwrap();
    assert_eq!(motion.frames(), total);
    assert!(motion.postprocessed());
    assert!(
        std::fs::read(&out).unwrap() == motion.npz_bytes().unwrap(),
        "the API's segments differ from kinema generate --timeline --constraints"
    );
    // Without the constraints the motion is another one.
    let free = k
        .generate(&GenerateRequest {
            constraints: None,
            ..req.clone()
        })
        .unwrap();
    assert_ne!(free.posed_joints(), motion.posed_joints());
    // A constraint past the stitched timeline is refused.
    let past = format!("[{}]", fullbody(total, 0.0));
    let e = k
        .generate(&GenerateRequest {
            constraints: Some(Constraints::from_json(&past).unwrap()),
            ..req
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "entry 0 (fullbody): frame {total} is outside the motion's {total} frames"
        )),
        "{e}"
    );
}

#[test]
fn bad_constraints_name_the_problem() {
    let k = model();
    let tmp = tempfile::tempdir().unwrap();
    // JSON that does not parse, or is not upstream's format: refused when parsed.
    for (json, want) in [
        ("[{", "constraints: not valid JSON"),
        ("{}", "JSON array"),
        (
            r#"[{"type":"waypoint","frame_indices":[0]}]"#,
            "entry 0 (waypoint): unknown constraint type",
        ),
        (
            r#"[{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[NaN,0]]}]"#,
            "entry 0 (root2d): smooth_root_2d[0]: NaN is not a finite number",
        ),
        (
            r#"[{"type":"end-effector","frame_indices":[0],"local_joints_rot":[[]],"root_positions":[[0,0,0]],"joint_names":["LeftElbow"]}]"#,
            "entry 0 (end-effector): unknown end effector 'LeftElbow'",
        ),
    ] {
        let e = Constraints::from_json(json).unwrap_err().to_string();
        assert!(e.contains(want), "{json}: {e}");
    }
    // Entries that do not fit the model or the request: refused by generate, with the
    // command line's message (the same text after the file name, the file named when read
    // from one).
    let emb = tmp.path().join("e.npy");
    write_embedding(&emb, &embedding(k.embedding_dim(), 0.0));
    let root = r#"{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[0,0]]}"#;
    for (i, (json, want)) in [
        (
            format!("[{root},{}]", fullbody(FRAMES, 0.0)),
            format!("entry 1 (fullbody): frame {FRAMES} is outside the motion's {FRAMES} frames"),
        ),
        (
            format!("[{}]", fullbody_joints(31, 0, 0.0)),
            "entry 0 (fullbody): local_joints_rot holds 31 joints per frame; the soma30 skeleton \
             takes 30 or 77"
                .to_string(),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let e = k
            .generate(&request(&k, Some(Constraints::from_json(&json).unwrap())))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&want), "case {i}: {e}");
        let path = tmp.path().join(format!("c{i}.json"));
        std::fs::write(&path, &json).unwrap();
        let from_file = k
            .generate(&request(&k, Some(Constraints::from_path(&path).unwrap())))
            .unwrap_err()
            .to_string();
        let frames = FRAMES.to_string();
        let mut cmd = cli(&["--frames", frames.as_str(), "--embedding"], &[&emb]);
        cmd.arg("--constraints")
            .arg(&path)
            .arg("-o")
            .arg(tmp.path().join("o.npz"));
        let (ok, text) = run(&mut cmd);
        assert!(!ok, "case {i} passed the CLI");
        assert!(
            text.contains(&from_file) && from_file.contains(path.to_str().unwrap()),
            "case {i}: the API says {from_file:?}, the CLI {text:?}"
        );
    }
    // A file that is not there names it.
    let missing = Constraints::from_path(tmp.path().join("none.json"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("none.json"), "{missing}");
    // Two rows cannot carry constraints.
    let e = k
        .generate(&GenerateRequest {
            cfg_rows: Some(2),
            ..request(
                &k,
                Some(Constraints::from_json(&format!("[{root}]")).unwrap()),
            )
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("GenerateRequest.cfg_rows = 2 with constraints")
            && e.contains("2-row shortcut is exact only without constraints"),
        "{e}"
    );
    let _ = &models().dir;
}

/// On a Vulkan device (lavapipe in CI) the constrained request equals `kinema generate
/// --backend vulkan --constraints` too. Skipped without a device unless KINEMA_REQUIRE_VULKAN=1.
#[test]
fn vulkan_constrained_generation_equals_the_cli() {
    let engine = match Engine::new(EngineOptions {
        backend: BackendChoice::Vulkan,
        precision: PrecisionChoice::Strict,
        ..EngineOptions::default()
    }) {
        Ok(e) => e,
        Err(e) => {
            assert!(
                std::env::var("KINEMA_REQUIRE_VULKAN").as_deref() != Ok("1"),
                "no Vulkan device: {e}"
            );
            eprintln!("skipped: no Vulkan device ({e})");
            return;
        }
    };
    let k = Kimodo::load(&engine, &models().kimodo).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let json = constraint_json(FRAMES - 1);
    let cpath = tmp.path().join("constraints.json");
    std::fs::write(&cpath, &json).unwrap();
    let emb = tmp.path().join("e.npy");
    write_embedding(&emb, &embedding(k.embedding_dim(), 0.0));
    let req = GenerateRequest {
        diagnostics: true,
        ..request(&k, Some(Constraints::from_json(&json).unwrap()))
    };
    let motion = k.generate(&req).unwrap();
    let out = tmp.path().join("vk.npz");
    let frames = FRAMES.to_string();
    let mut cmd = kinema();
    cmd.args([
        "generate",
        "--quiet",
        "--backend",
        "vulkan",
        "--precision",
        "strict",
        "--steps",
        "3",
        "--seed",
        "5",
        "--heading",
        "0.3",
        "--diagnostics",
        "--frames",
        frames.as_str(),
    ])
    .arg("--model")
    .arg(&models().kimodo)
    .arg("--embedding")
    .arg(&emb)
    .arg("--constraints")
    .arg(&cpath)
    .arg("-o")
    .arg(&out);
    let (ok, text) = run(&mut cmd);
    assert!(ok, "{text}");
    assert!(
        std::fs::read(&out).unwrap() == motion.npz_bytes().unwrap(),
        "the API's npz on Vulkan differs from kinema generate --backend vulkan --constraints"
    );
}
