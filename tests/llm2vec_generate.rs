//! Prompt to motion end to end on the tiny models (issue 11, part 6): `kinema generate
//! --prompt P --text-model T` writes exactly the npz of `kinema generate --embedding E` with E
//! from `kinema encode --prompt P`, bit for bit, on the CPU and on Vulkan (lavapipe in CI);
//! `--prompts-file` writes one motion per prompt (each that prompt's motion), with
//! `--keep-text-loaded` too; the sidecar records each phase's time and peak memory.

#[path = "common/tiny_llama.rs"]
mod tiny_llama;
#[path = "common/tiny_models.rs"]
mod tiny_models;

use std::path::{Path, PathBuf};
use std::process::Command;

use tiny_llama::Spec;

fn kinema() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kinema"))
}

fn run(args: &mut Command) {
    let o = args.output().unwrap();
    assert!(
        o.status.success(),
        "{:?}: {}",
        args,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The backends to run: the CPU, and Vulkan when a device is there (a failure with
/// `KINEMA_REQUIRE_VULKAN=1` when not).
fn backends() -> Vec<&'static str> {
    let mut v = vec!["cpu"];
    match kinema::vulkan::probe() {
        Ok(_) => v.push("vulkan"),
        Err(why) => {
            let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
            assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
            eprintln!("skipping the Vulkan backend: {why}");
        }
    }
    v
}

struct Setup {
    dir: tempfile::TempDir,
    motion: PathBuf,
    text: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (motion, _) = tiny_models::write(dir.path()).unwrap();
    let text = dir.path().join("text48.gguf");
    tiny_llama::write(
        &text,
        &Spec {
            hidden: 48,
            ..Spec::default()
        },
    );
    Setup { dir, motion, text }
}

const MOTION_ARGS: [&str; 6] = ["--frames", "10", "--steps", "3", "--seed", "4"];

fn encode(s: &Setup, backend: &str, prompt: &str, out: &Path) {
    run(kinema()
        .args(["encode", "--quiet", "--backend", backend, "--text-model"])
        .arg(&s.text)
        .args(["--prompt", prompt, "-o"])
        .arg(out));
}

fn generate_from_embedding(s: &Setup, backend: &str, embedding: &Path, out: &Path) {
    generate_from_embedding_seed(s, backend, embedding, out, 4);
}

/// As [`generate_from_embedding`] with another seed (MOTION_ARGS but `--seed seed`).
fn generate_from_embedding_seed(s: &Setup, backend: &str, embedding: &Path, out: &Path, seed: u64) {
    run(kinema()
        .args(["generate", "--quiet", "--backend", backend, "--model"])
        .arg(&s.motion)
        .arg("--embedding")
        .arg(embedding)
        .args(&MOTION_ARGS[..4])
        .args(["--seed", &seed.to_string()])
        .arg("-o")
        .arg(out));
}

fn sidecar(npz: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(npz.with_extension("json")).unwrap()).unwrap()
}

#[test]
fn a_prompt_gives_the_motion_of_its_encoded_embedding_bit_for_bit() {
    let s = setup();
    let d = s.dir.path();
    let prompt = "A person walks forward and waves.";
    for backend in backends() {
        let emb = d.join(format!("{backend}-e.npy"));
        encode(&s, backend, prompt, &emb);
        let want = d.join(format!("{backend}-want.npz"));
        generate_from_embedding(&s, backend, &emb, &want);
        let got = d.join(format!("{backend}-got.npz"));
        run(kinema()
            .args(["generate", "--quiet", "--backend", backend, "--model"])
            .arg(&s.motion)
            .args(["--prompt", prompt, "--text-model"])
            .arg(&s.text)
            .arg("--no-cache")
            .args(MOTION_ARGS)
            .arg("-o")
            .arg(&got));
        assert!(
            std::fs::read(&got).unwrap() == std::fs::read(&want).unwrap(),
            "{backend}: generate --prompt differs from generate --embedding of encode's output"
        );
        let j = sidecar(&got);
        let text = &j["text"];
        assert_eq!(text["prompt"], prompt);
        assert_eq!(text["cache"], "off");
        assert_eq!(text["kept_loaded"], false);
        assert!(text["seconds"].as_f64().unwrap() > 0.0);
        let what = if backend == "cpu" {
            "process rss"
        } else {
            "vulkan buffers"
        };
        for phase in [&text["memory"], &j["memory"]] {
            assert_eq!(phase["what"], what, "{j}");
            let peak = phase["peak_bytes"].as_u64().unwrap();
            assert!(peak > 0, "{backend}: a phase with no memory: {j}");
            assert!(peak >= phase["current_bytes"].as_u64().unwrap(), "{j}");
        }
        if backend == "vulkan" {
            // Each phase frees what it allocated: after either, only the backend's own small
            // buffers remain (its status word), the same after both.
            let left = text["memory"]["current_bytes"].as_u64().unwrap();
            assert_eq!(j["memory"]["current_bytes"].as_u64().unwrap(), left, "{j}");
            assert!(
                left * 100 < text["memory"]["peak_bytes"].as_u64().unwrap(),
                "the text phase left its buffers: {j}"
            );
        }
    }
}

#[test]
fn a_prompts_file_writes_one_motion_per_prompt_with_the_text_model_kept_loaded() {
    let s = setup();
    let d = s.dir.path();
    let prompts = ["a person jumps", "someone sits down slowly"];
    let file = d.join("prompts.json");
    std::fs::write(&file, serde_json::to_vec(&prompts).unwrap()).unwrap();
    let cache = d.join("cache");
    // A miss fills the cache; the text model kept loaded runs every prompt (no cache); a hit.
    for (run_no, keep, cached, want_cache) in [
        (0, false, true, "miss"),
        (1, true, false, "off"),
        (2, false, true, "hit"),
    ] {
        let out = d.join(format!("many-{run_no}.npz"));
        let mut cmd = kinema();
        cmd.args(["generate", "--quiet", "--backend", "cpu", "--model"])
            .arg(&s.motion)
            .arg("--prompts-file")
            .arg(&file)
            .arg("--text-model")
            .arg(&s.text)
            .args(MOTION_ARGS)
            .arg("-o")
            .arg(&out);
        if cached {
            cmd.arg("--cache-dir").arg(&cache);
        } else {
            cmd.arg("--no-cache");
        }
        if keep {
            cmd.arg("--keep-text-loaded");
        }
        run(&mut cmd);
        assert!(!out.exists(), "several prompts write under <stem>/");
        for (i, p) in prompts.iter().enumerate() {
            let got = d.join(format!("many-{run_no}/many-{run_no}_{i:02}.npz"));
            let emb = d.join(format!("e{i}.npy"));
            let want = d.join(format!("want{i}.npz"));
            if run_no == 0 {
                // Prompt i of a batch is sample i: seed 4 + i, as --samples counts.
                encode(&s, "cpu", p, &emb);
                generate_from_embedding_seed(&s, "cpu", &emb, &want, 4 + i as u64);
            }
            assert!(
                std::fs::read(&got).unwrap() == std::fs::read(&want).unwrap(),
                "prompt {i} (run {run_no}) differs from its own motion"
            );
            let j = sidecar(&got);
            assert_eq!(j["text"]["prompt"], *p);
            assert_eq!(j["text"]["kept_loaded"], keep);
            assert_eq!(j["text"]["cache"], want_cache);
        }
    }

    // Several prompts name no single output for --glb or --samples.
    let o = kinema()
        .args(["generate", "--backend", "cpu", "--model"])
        .arg(&s.motion)
        .arg("--prompts-file")
        .arg(&file)
        .arg("--text-model")
        .arg(&s.text)
        .args(["--samples", "2"])
        .args(MOTION_ARGS)
        .arg("-o")
        .arg(d.join("x.npz"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--samples"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // --text-model without a prompt is refused.
    let o = kinema()
        .args(["generate", "--backend", "cpu", "--model"])
        .arg(&s.motion)
        .arg("--embedding")
        .arg(d.join("e0.npy"))
        .arg("--text-model")
        .arg(&s.text)
        .args(MOTION_ARGS)
        .arg("-o")
        .arg(d.join("y.npz"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--prompts-file"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
