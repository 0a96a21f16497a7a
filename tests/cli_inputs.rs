//! Hostile and careless inputs through the command line (issue 10, defects 1, 7 and 8): a
//! worker thread the system refuses, thread counts out of range, an unreadable
//! `KINEMA_THREADS`, a device or a directory where a file is expected, and a broken `.npy`.
//! Each is refused with an error that names the cause (exit status 1, or 2 for a flag the
//! argument parser refuses), never a panic, never an unbounded read.

#[path = "common/kimodo_fixture.rs"]
mod kimodo_fixture;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kinema::formats::{NpyArray, npy};

fn kinema() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kinema"))
}

/// Exit code and stdout + stderr.
fn run(cmd: &mut Command) -> (Option<i32>, String) {
    let out = cmd.output().expect("run kinema");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// A converted fixture model and a matching embedding, shared by the tests of this file.
struct Inputs {
    _dir: tempfile::TempDir,
    model: PathBuf,
    embedding: PathBuf,
}

fn inputs() -> &'static Inputs {
    static INPUTS: OnceLock<Inputs> = OnceLock::new();
    INPUTS.get_or_init(|| {
        let f = kimodo_fixture::load("soma30");
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model.gguf");
        let (code, text) = run(kinema()
            .args(["convert", "kimodo", "--quiet"])
            .arg(f.checkpoint_dir())
            .arg("-o")
            .arg(&model));
        assert_eq!(code, Some(0), "convert failed: {text}");
        let (e, shape) = f.f32("embedding");
        let embedding = dir.path().join("embedding.npy");
        npy::write_file(&embedding, &NpyArray::from_f32(&shape, &e).unwrap()).unwrap();
        Inputs {
            _dir: dir,
            model,
            embedding,
        }
    })
}

/// `kinema generate` on the CPU with a small workload, writing into a fresh directory.
fn generate(model: &Path, embedding: &Path, out_dir: &Path) -> Command {
    let mut c = kinema();
    c.args(["generate", "--quiet", "--backend", "cpu", "--model"])
        .arg(model)
        .arg("--embedding")
        .arg(embedding)
        .args(["--frames", "10", "--steps", "2", "-o"])
        .arg(out_dir.join("out.npz"))
        .env_remove("KINEMA_THREADS");
    c
}

/// Fails with exit status `code` and a message containing `needle`, without a panic and
/// without writing `out.npz`.
fn refused(cmd: &mut Command, out_dir: &Path, code: i32, needle: &str) {
    let (got, text) = run(cmd);
    assert!(!text.contains("panicked"), "panicked: {text}");
    assert_eq!(got, Some(code), "expected exit {code}: {text}");
    assert!(text.contains(needle), "expected {needle:?} in: {text}");
    assert!(!out_dir.join("out.npz").exists(), "an output was written");
}

/// Defect 1: `--threads 1000` (and `KINEMA_THREADS=1000`, and `bench`) where the system
/// cannot start that many threads. An address-space limit makes the thread stacks (2 MiB
/// each) fail where `ulimit -u` would not: it binds root too.
#[test]
fn a_refused_worker_thread_is_an_error_not_a_panic() {
    let x = inputs();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let limited = |c: Command| {
        let mut p = Command::new("prlimit");
        p.arg(format!("--as={}", 768u64 << 20))
            .arg(c.get_program())
            .args(c.get_args());
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => p.env(k, v),
                None => p.env_remove(k),
            };
        }
        p
    };
    let needle = "cannot start worker thread";
    let mut g = generate(&x.model, &x.embedding, d);
    g.args(["--threads", "1000"]);
    refused(&mut limited(g), d, 1, needle);
    let mut g = generate(&x.model, &x.embedding, d);
    g.env("KINEMA_THREADS", "1000");
    refused(&mut limited(g), d, 1, needle);
    let mut b = kinema();
    b.args([
        "bench",
        "--backend",
        "cpu",
        "--op",
        "add",
        "--threads",
        "1000",
    ]);
    refused(&mut limited(b), d, 1, needle);
    // The same run without the limit succeeds: the limit, not the flags, made it fail.
    let (code, text) = run(generate(&x.model, &x.embedding, d).args(["--threads", "3"]));
    assert_eq!(code, Some(0), "{text}");
}

/// Defect 1: thread counts are validated before any work, with the variable or flag named.
#[test]
fn thread_counts_are_validated() {
    let x = inputs();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for bad in ["0", "1025", "100000", "-1", "abc"] {
        refused(
            generate(&x.model, &x.embedding, d).arg(format!("--threads={bad}")),
            d,
            2,
            "--threads",
        );
    }
    for bad in ["0", "1025", "abc", ""] {
        refused(
            generate(&x.model, &x.embedding, d).env("KINEMA_THREADS", bad),
            d,
            1,
            "KINEMA_THREADS",
        );
    }
    let (code, text) = run(kinema().arg("info").env("KINEMA_THREADS", "abc"));
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("KINEMA_THREADS=\"abc\""), "{text}");
}

/// Defects 7 and 8: a device, a directory or a FIFO where a file is expected is refused at
/// once, saying what it is and which option named it; nothing is read from it. (The run's
/// input check in `models/kit/output.rs` answers first; the readers in `formats/source.rs`
/// refuse the same files for callers that skip it.)
#[test]
fn special_files_are_refused_where_a_file_is_expected() {
    let x = inputs();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let start = Instant::now();
    refused(
        &mut generate(&x.model, Path::new("/dev/zero"), d),
        d,
        1,
        "/dev/zero: --embedding names a character device, not a file to read",
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "--embedding /dev/zero took {:?}",
        start.elapsed()
    );
    refused(
        &mut generate(d, &x.embedding, d),
        d,
        1,
        "--model names a directory, not a file to read",
    );
    refused(
        &mut generate(Path::new("/dev/null"), &x.embedding, d),
        d,
        1,
        "/dev/null: --model names a character device, not a file to read",
    );
    refused(
        &mut generate(&x.model, d, d),
        d,
        1,
        "--embedding names a directory, not a file to read",
    );
    #[cfg(unix)]
    {
        let fifo = d.join("fifo.npy");
        let ok = Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfifo");
        // Opening a FIFO for reading blocks until a writer comes; the type check comes first.
        refused(
            &mut generate(&x.model, &fifo, d),
            d,
            1,
            "--embedding names a FIFO (named pipe), not a file to read",
        );
    }
}

/// Defect 8: an `.npy` that does not parse is reported with its file name.
#[test]
fn npy_parse_errors_name_the_file() {
    let x = inputs();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bad = d.join("broken-embedding.npy");
    std::fs::write(&bad, b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'").unwrap();
    refused(
        &mut generate(&x.model, &bad, d),
        d,
        1,
        &format!("{}: npy: truncated", bad.display()),
    );
}
