//! What `kinema generate` and `kinema convert` do with their outputs, through the command
//! line (issue 10): outputs that collide with each other or with an input, special files and
//! missing directories are refused before any work; a failed or killed run leaves the previous
//! outputs as they were and no temporary file; numeric options and hostile inputs are refused
//! with a message that names the cause. The model is the soma30 upstream fixture checkpoint
//! (`tests/fixtures/kimodo/soma30/checkpoint`: D=64, 2 layers, text width 48).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kinema::formats::{NpyArray, npy};

fn kinema() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kinema"))
}

/// Runs a command; returns success and stdout + stderr.
fn run(mut cmd: impl std::borrow::BorrowMut<Command>) -> (bool, String) {
    let out = cmd.borrow_mut().output().expect("run kinema");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("panicked"), "kinema panicked: {text}");
    (out.status.success(), text)
}

fn checkpoint() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kimodo/soma30/checkpoint")
}

/// The converted fixture model and a `[1, 48]` text feature, made once per test process.
struct Inputs {
    _dir: tempfile::TempDir,
    model: PathBuf,
    embedding: PathBuf,
}

fn inputs() -> &'static Inputs {
    static INPUTS: OnceLock<Inputs> = OnceLock::new();
    INPUTS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model.gguf");
        let (ok, text) = run(kinema()
            .args(["convert", "kimodo", "--quiet"])
            .arg(checkpoint())
            .arg("-o")
            .arg(&model));
        assert!(ok, "convert failed: {text}");
        let embedding = dir.path().join("embedding.npy");
        let e: Vec<f32> = (0..48).map(|i| ((i as f32) * 0.37).sin()).collect();
        npy::write_file(&embedding, &NpyArray::from_f32(&[1, 48], &e).unwrap()).unwrap();
        Inputs {
            _dir: dir,
            model,
            embedding,
        }
    })
}

/// `kinema generate --quiet --backend cpu` on the fixture model with `args` appended (a
/// short run unless `args` say otherwise).
fn generate(args: &[&str], embedding: Option<&Path>) -> Command {
    let i = inputs();
    let mut c = kinema();
    c.args(["generate", "--quiet", "--backend", "cpu", "--threads", "1"])
        .arg("--model")
        .arg(&i.model)
        .arg("--embedding")
        .arg(embedding.unwrap_or(&i.embedding))
        .args(args);
    if !args.contains(&"--frames") {
        c.args(["--frames", "8"]);
    }
    if !args.contains(&"--steps") {
        c.args(["--steps", "2"]);
    }
    c
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Defect 2: outputs that name one file are refused before any work, and nothing is written.
#[test]
fn colliding_outputs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (x, a_npz, a_json) = (d.join("x.json"), d.join("a.npz"), d.join("a.json"));
    // `-o x.json`: the sidecar is x.json as well.
    let (ok, text) = run(generate(&["-o", s(&x)], None));
    assert!(!ok, "-o x.json must fail (its sidecar is the same file)");
    assert!(
        text.contains("same file") && text.contains("sidecar"),
        "{text}"
    );
    // The GLB names the npz, or the sidecar.
    let (ok, text) = run(generate(&["-o", s(&a_npz), "--glb", s(&a_npz)], None));
    assert!(
        !ok && text.contains("--glb") && text.contains("same file"),
        "{text}"
    );
    let (ok, text) = run(generate(&["-o", s(&a_npz), "--glb", s(&a_json)], None));
    assert!(
        !ok && text.contains("--glb") && text.contains("sidecar"),
        "{text}"
    );
    // An output that names an input.
    let i = inputs();
    let (ok, text) = run(generate(&["-o", s(&a_npz), "--glb", s(&i.embedding)], None));
    assert!(!ok && text.contains("destroy its own input"), "{text}");
    assert!(names(d).is_empty(), "files were written: {:?}", names(d));
    let emb = npy::read_file(&i.embedding).unwrap();
    assert_eq!(emb.shape, [1, 48], "the input was damaged");
    // Distinct outputs work.
    let (ok, text) = run(generate(
        &["-o", s(&a_npz), "--glb", s(&d.join("a.glb"))],
        None,
    ));
    assert!(ok, "{text}");
    assert_eq!(names(d), ["a.glb", "a.json", "a.npz"]);
}

/// Defect 3: with `out.json` an existing directory the run fails before replacing anything.
#[test]
fn a_failed_run_replaces_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (npz, glb) = (d.join("out.npz"), d.join("out.glb"));
    fs::write(&npz, b"previous npz").unwrap();
    fs::write(&glb, b"previous glb").unwrap();
    fs::create_dir(d.join("out.json")).unwrap();
    let start = Instant::now();
    let (ok, text) = run(generate(
        &["-o", s(&npz), "--glb", s(&glb), "--steps", "1000"],
        None,
    ));
    assert!(!ok, "an output path that is a directory must fail");
    assert!(
        text.contains("out.json") && text.contains("directory"),
        "{text}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "refused only after the work"
    );
    assert!(fs::read(&npz).unwrap() == b"previous npz");
    assert!(fs::read(&glb).unwrap() == b"previous glb");
    assert_eq!(names(d), ["out.glb", "out.json", "out.npz"]);
}

/// Makes a FIFO and, where the file system allows device nodes, a character device (the
/// null device's numbers) in `dir`; returns those that could be made.
fn special_files(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    let mut v = Vec::new();
    let fifo = dir.join("fifo");
    if Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        v.push((fifo, "FIFO"));
    } else {
        eprintln!("skipping the FIFO case: mkfifo failed");
    }
    let null = dir.join("null");
    let made = Command::new("mknod")
        .arg(&null)
        .args(["c", "1", "3"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if made {
        v.push((null, "character device"));
    } else {
        eprintln!("skipping the character-device case: mknod failed (not root?)");
    }
    v
}

#[cfg(unix)]
fn kind(p: &Path) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let ft = fs::symlink_metadata(p).unwrap().file_type();
    if ft.is_fifo() {
        "FIFO"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_file() {
        "regular file"
    } else {
        "other"
    }
}

/// Defect 4: an output naming a FIFO or a character device is refused, and it stays what it
/// was (generate and convert).
#[cfg(unix)]
#[test]
fn special_files_are_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let specials = special_files(d);
    for (p, what) in &specials {
        let npz = d.join("ok.npz");
        for args in [vec!["-o", s(p)], vec!["-o", s(&npz), "--glb", s(p)]] {
            let (ok, text) = run(generate(&args, None));
            assert!(!ok, "{args:?} must fail");
            assert!(
                text.contains(what) && text.contains("regular"),
                "{args:?}: {text}"
            );
            assert_eq!(kind(p), *what, "{args:?} replaced the {what}");
        }
        let (ok, text) = run(kinema()
            .args(["convert", "kimodo", "--quiet"])
            .arg(checkpoint())
            .arg("-o")
            .arg(p));
        assert!(!ok && text.contains(what), "convert -o {what}: {text}");
        assert_eq!(kind(p), *what, "convert replaced the {what}");
        assert!(!npz.exists());
    }
    // The real null device is refused the same way (never replaced, even as root).
    let (ok, text) = run(generate(&["-o", "/dev/null"], None));
    assert!(!ok && text.contains("character device"), "{text}");
    assert_eq!(kind(Path::new("/dev/null")), "character device");
}

/// Copies the fixture checkpoint into `dir` (the tests never risk the fixture itself).
fn copy_checkpoint(dir: &Path) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for e in fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let target = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &target);
            } else {
                fs::copy(e.path(), target).unwrap();
            }
        }
    }
    let c = dir.join("c");
    copy(&checkpoint(), &c);
    c
}

/// Defect 5: `convert kimodo c -o c/model.safetensors` is refused and the checkpoint survives.
#[test]
fn convert_never_overwrites_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let c = copy_checkpoint(dir.path());
    let weights = fs::read(c.join("model.safetensors")).unwrap();
    let mean = fs::read(c.join("stats/motion/body/mean.npy")).unwrap();
    for target in [
        c.join("model.safetensors"),
        c.join("stats/motion/body/mean.npy"),
        // The same file through `..`.
        c.join("stats/../model.safetensors"),
    ] {
        let (ok, text) = run(kinema()
            .args(["convert", "kimodo", "--quiet"])
            .arg(&c)
            .arg("-o")
            .arg(&target));
        assert!(!ok, "convert -o {} must fail", target.display());
        assert!(text.contains("destroy its own input"), "{text}");
    }
    assert!(fs::read(c.join("model.safetensors")).unwrap() == weights);
    assert!(fs::read(c.join("stats/motion/body/mean.npy")).unwrap() == mean);
    // A hard link to the weights is the same file under another name.
    let link = dir.path().join("link.gguf");
    fs::hard_link(c.join("model.safetensors"), &link).unwrap();
    let (ok, text) = run(kinema()
        .args(["convert", "kimodo", "--quiet"])
        .arg(&c)
        .arg("-o")
        .arg(&link));
    assert!(!ok && text.contains("destroy its own input"), "{text}");
    assert!(fs::read(c.join("model.safetensors")).unwrap() == weights);
}

/// Item 8: generate and convert word a missing output directory alike.
#[test]
fn a_missing_output_directory_reads_the_same_in_both_commands() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir");
    let (ok, gen_text) = run(generate(&["-o", s(&missing.join("out.npz"))], None));
    assert!(!ok);
    let (ok, conv_text) = run(kinema()
        .args(["convert", "kimodo", "--quiet"])
        .arg(checkpoint())
        .arg("-o")
        .arg(missing.join("m.gguf")));
    assert!(!ok);
    let want = format!("the output directory {} does not exist", missing.display());
    assert!(gen_text.contains(&want), "generate: {gen_text}");
    assert!(conv_text.contains(&want), "convert: {conv_text}");
}

/// Item 8: non-finite guidance weights and headings are refused before any work, naming the
/// flag (they used to fail after sampling as "normalized features: non-finite value").
#[test]
fn numeric_options_are_checked_before_work() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.npz");
    for (flag, value) in [
        ("--cfg-text", "nan"),
        ("--cfg-text", "inf"),
        ("--cfg-constraint", "-inf"),
        ("--heading", "NaN"),
    ] {
        let arg = format!("{flag}={value}");
        let (ok, text) = run(generate(&["-o", s(&out), &arg], None));
        assert!(!ok, "{flag} {value} must fail");
        assert!(
            text.contains(flag) && text.contains("finite"),
            "{flag} {value}: {text}"
        );
        assert!(!text.contains("normalized features"), "{text}");
    }
    assert!(names(dir.path()).is_empty());
}

/// Item 8: a text feature of huge finite values is refused before sampling with the cause
/// named, instead of "normalized features: non-finite value" after it.
#[test]
fn a_huge_embedding_names_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let emb = dir.path().join("huge.npy");
    npy::write_file(&emb, &NpyArray::from_f32(&[1, 48], &[3e38; 48]).unwrap()).unwrap();
    let out = dir.path().join("out.npz");
    let (ok, text) = run(generate(&["-o", s(&out)], Some(&emb)));
    assert!(!ok);
    assert!(
        text.contains("embedding") && text.contains("huge.npy") && text.contains("3e38"),
        "{text}"
    );
    assert!(!text.contains("normalized features"), "{text}");
    assert_eq!(names(dir.path()), ["huge.npy"]);
}

/// Item 8 (and 7): inputs that are not regular files, and npy files that do not parse, are
/// refused with the flag or the file named instead of an operating-system error.
#[test]
fn inputs_that_are_not_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("out.npz");
    let i = inputs();
    let run_with = |model: &Path, emb: &Path| {
        run(kinema()
            .args(["generate", "--quiet", "--backend", "cpu", "--frames", "8"])
            .arg("--model")
            .arg(model)
            .arg("--embedding")
            .arg(emb)
            .arg("-o")
            .arg(&out))
    };
    let (ok, text) = run_with(d, &i.embedding);
    assert!(!ok && text.contains("--model names a directory"), "{text}");
    let (ok, text) = run_with(Path::new("/dev/null"), &i.embedding);
    assert!(
        !ok && text.contains("--model names a character device"),
        "{text}"
    );
    assert!(!text.contains("os error 19"), "{text}");
    let start = Instant::now();
    let (ok, text) = run_with(&i.model, Path::new("/dev/zero"));
    assert!(
        !ok && text.contains("--embedding names a character device"),
        "{text}"
    );
    assert!(start.elapsed() < Duration::from_secs(30), "read /dev/zero");
    let junk = d.join("junk.npy");
    fs::write(&junk, b"definitely not an npy file").unwrap();
    let (ok, text) = run_with(&i.model, &junk);
    assert!(!ok && text.contains("junk.npy"), "{text}");
    assert_eq!(names(d), ["junk.npy"]);
}

/// Part 3: SIGTERM and SIGKILL in the middle of sampling leave the previous outputs as they
/// were and no temporary file beside them.
#[cfg(unix)]
#[test]
fn a_killed_generation_leaves_the_previous_outputs() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (npz, glb) = (d.join("out.npz"), d.join("out.glb"));
    let (ok, text) = run(generate(&["-o", s(&npz), "--glb", s(&glb)], None));
    assert!(ok, "{text}");
    let before: Vec<(String, Vec<u8>)> = names(d)
        .into_iter()
        .map(|n| (n.clone(), fs::read(d.join(&n)).unwrap()))
        .collect();
    assert_eq!(before.len(), 3);
    for signal in ["TERM", "KILL"] {
        // 1000 steps over 1000 frames on one thread: minutes of sampling.
        let mut child = generate(
            &[
                "-o",
                s(&npz),
                "--glb",
                s(&glb),
                "--frames",
                "1000",
                "--steps",
                "1000",
            ],
            None,
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the signal"
        );
        let killed = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = child.wait().unwrap();
        let want = if signal == "TERM" { 15 } else { 9 };
        assert_eq!(status.signal(), Some(want), "SIG{signal}: {status:?}");
        let after: Vec<(String, Vec<u8>)> = names(d)
            .into_iter()
            .map(|n| (n.clone(), fs::read(d.join(&n)).unwrap()))
            .collect();
        assert!(
            after == before,
            "SIG{signal} changed the outputs: {:?}",
            names(d)
        );
    }
}

/// Unmounts the file system mounted at the path when dropped.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Mounts a tmpfs of `size` at a new folder `name` in `dir`; `None` (with a message) where
/// mounting is not allowed.
fn tmpfs(dir: &Path, name: &str, size: &str) -> Option<(PathBuf, Mount)> {
    let disk = dir.join(name);
    fs::create_dir(&disk).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&disk)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipping: cannot mount a tmpfs (needs root)");
        return None;
    }
    Some((disk.clone(), Mount(disk)))
}

/// Part 3: a full disk gives a clear error naming the file, leaves no partial or temporary
/// file, and replaces none of the previous outputs, even when the disk fills up between two
/// of them.
#[test]
fn a_full_disk_leaves_no_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let Some((disk, _mount)) = tmpfs(dir.path(), "disk", "64k") else {
        return;
    };
    let npz = disk.join("out.npz");
    fs::write(&npz, b"previous npz").unwrap();
    // 60 frames of SOMA77 rotations alone are 2 x 60 x 77 x 9 x 4 bytes = 333 KB.
    let (ok, text) = run(generate(&["-o", s(&npz), "--frames", "60"], None));
    assert!(!ok, "writing 333 KB into 64 KiB must fail");
    assert!(text.contains("No space left on device"), "{text}");
    assert!(text.contains("out.npz"), "the error names the file: {text}");
    assert!(fs::read(&npz).unwrap() == b"previous npz");
    assert_eq!(
        names(&disk),
        ["out.npz"],
        "a partial or temporary file was left"
    );
    // Convert: a 1 MB model does not fit either.
    let gguf = disk.join("m.gguf");
    let (ok, text) = run(kinema()
        .args(["convert", "kimodo", "--quiet"])
        .arg(checkpoint())
        .arg("-o")
        .arg(&gguf));
    assert!(!ok && text.contains("No space left on device"), "{text}");
    assert_eq!(
        names(&disk),
        ["out.npz"],
        "a partial or temporary file was left"
    );

    // 112 KiB holds the new npz of 10 frames (82 KB) but not the GLB (44 KB) beside it: the
    // run fails at the GLB, and the npz it already wrote must not land without it.
    let Some((disk, _mount)) = tmpfs(dir.path(), "disk2", "112k") else {
        return;
    };
    let (npz, glb) = (disk.join("out.npz"), disk.join("out.glb"));
    fs::write(&npz, b"previous npz").unwrap();
    fs::write(&glb, b"previous glb").unwrap();
    let (ok, text) = run(generate(
        &["-o", s(&npz), "--glb", s(&glb), "--frames", "10"],
        None,
    ));
    assert!(!ok && text.contains("No space left on device"), "{text}");
    assert!(
        fs::read(&npz).unwrap() == b"previous npz",
        "a partial set landed"
    );
    assert!(fs::read(&glb).unwrap() == b"previous glb");
    assert_eq!(names(&disk), ["out.glb", "out.npz"]);
}
