//! The command line's shared options and notes: the fallback note of `--backend auto`,
//! `--json` on `generate`, and output to a closed pipe.

#[path = "common/kimodo_fixture.rs"]
mod kimodo_fixture;

use std::process::Command;

use kinema::formats::{NpyArray, npy};

fn kinema() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kinema"))
}

/// `kinema bench` without a subcommand runs the kernel table and then one Kimodo step on the
/// same backend: when `--backend auto` falls back to the CPU (here because the Vulkan device
/// asked for does not exist), it says why once, not once per part. `--dtype q8_0 --samples 1`
/// keeps the table short; the Kimodo step still runs at the released size.
#[test]
fn bench_says_why_it_uses_the_cpu_once() {
    let out = kinema()
        .args(["bench", "--dtype", "q8_0", "--samples", "1"])
        .env("KINEMA_VK_DEVICE", "99")
        .output()
        .expect("run kinema");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("linear"), "the kernel table ran: {stdout}");
    assert!(
        stdout.contains("kimodo cpu"),
        "the Kimodo step ran: {stdout}"
    );
    let notes = stderr.matches("kinema: using the CPU:").count();
    assert_eq!(notes, 1, "{stderr}");
}

/// Output to a pipe whose reader has gone (`kinema info | head -1` once `head` has its line)
/// ends the process by SIGPIPE, quietly, as other command-line tools end; it used to panic in
/// `println!` (exit 101, "failed printing to stdout: Broken pipe" and a backtrace).
#[cfg(unix)]
#[test]
fn a_closed_output_pipe_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = kinema()
        .arg("info")
        .stdout(writer)
        .output()
        .expect("run kinema");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        out.status
    );
}

/// `generate --json` prints the run's report on stdout: the JSON sidecar's content.
#[test]
fn generate_json_prints_the_report() {
    let f = kimodo_fixture::load("g1");
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.gguf");
    let out = kinema()
        .args(["convert", "kimodo", "--quiet"])
        .arg(f.checkpoint_dir())
        .arg("-o")
        .arg(&model)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (e, es) = f.f32("embedding");
    let emb = dir.path().join("embedding.npy");
    npy::write_file(&emb, &NpyArray::from_f32(&es, &e).unwrap()).unwrap();
    let npz = dir.path().join("out.npz");
    let out = kinema()
        .args(["generate", "--json", "--quiet", "--backend", "cpu"])
        .args(["--frames", "8", "--steps", "2", "--model"])
        .arg(&model)
        .arg("--embedding")
        .arg(&emb)
        .arg("-o")
        .arg(&npz)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "--quiet: {out:?}");
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sidecar: serde_json::Value =
        serde_json::from_slice(&std::fs::read(npz.with_extension("json")).unwrap()).unwrap();
    assert_eq!(printed, sidecar);
    assert_eq!(printed["frames"], 8);
}

/// `kinema bench kimodo --backend cpu --layers 1` with `args` after it.
fn bench_kimodo(args: &str) -> std::process::Output {
    kinema()
        .args(["bench", "kimodo", "--backend", "cpu", "--layers", "1"])
        .args(args.split_whitespace())
        .output()
        .expect("run kinema")
}

/// `kinema bench kimodo --samples N` times N motions in one batched generation (each its own
/// text feature and seed) and reports the time per motion; `--samples 0` is refused by name.
#[test]
fn bench_kimodo_times_a_batch_of_motions() {
    let out = bench_kimodo("--threads 1 --frames 16 --steps 2 --samples 3 --json --quiet");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(v["samples"], 3, "{v}");
    let total = v["generate_s"].as_f64().expect("generate_s");
    let each = v["per_motion_s"].as_f64().expect("per_motion_s");
    assert!(
        total > 0.0 && (each * 3.0 - total).abs() <= 1e-9 * total,
        "{v}"
    );
    assert!(v["tflops"].as_f64().is_some_and(|t| t > 0.0), "{v}");

    let out = bench_kimodo("--samples 0");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--samples 0"), "{stderr}");
}
