//! `kinema convert kimodo` then `kinema generate`, end to end through the command line, against
//! the upstream fixtures (`tests/fixtures/kimodo/README.md`): the upstream checkpoint is
//! converted, the fixture's text feature and noise are fed in, and every output key is compared
//! with what upstream's own sampling loop and decoder produced, on the CPU and on Vulkan
//! (strict). Bad input is refused with a message that names the problem, and leaves no file.

#[path = "common/kimodo_fixture.rs"]
mod kimodo_fixture;

use std::path::{Path, PathBuf};
use std::process::Command;

use kimodo_fixture::{Fixture, SKELETONS};
use kinema::formats::{NpyArray, NpzReader, npy};

/// Decoded rotations and joints (issue bound; kimodo.md §9 item 13). The decoder alone meets it
/// by three orders of magnitude (`tests/kimodo_motion.rs`); after the whole sampling loop the
/// bound is `max(DECODED_ABS, LOOP_MARGIN x s)`, where `s` is how far the same generation moves
/// when each noise value is nudged by one ulp. The loop amplifies last-bit differences
/// (kimodo.md §9 item 15): on the smplx22 fixture one ulp of noise moves rotations by 8.6e-4,
/// and PyTorch's own rows differ by ~1e-5 before the first step ends (fixture README), so no
/// faithful f32 port can be held closer than a small multiple of `s` there (measured on the
/// CPU: smplx22 joints 1.06e-3 from upstream at a one-ulp sensitivity of 2.45e-4, 4.3x;
/// soma30 and g1 stay under DECODED_ABS).
const DECODED_ABS: f32 = 3e-4;
const LOOP_MARGIN: f32 = 8.0;
/// The normalised features after the loop: `max(FEATURES_ABS, LOOP_MARGIN x s)` as above,
/// `FEATURES_ABS` being the stage-output bound of kimodo.md §9 item 13. On smplx22 one ulp of
/// noise moves the features by 3.5e-4..2.1e-3 (the bridge's heading amplification measured in
/// `tests/kimodo_parity.rs`, LOOP_MARGIN), so a flat 2e-3 there rested on which last bits a
/// build happened to produce.
const FEATURES_ABS: f32 = 2e-3;

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

fn save(path: &Path, shape: &[usize], v: &[f32]) {
    npy::write_file(path, &NpyArray::from_f32(shape, v).unwrap()).unwrap();
}

/// Converts the fixture's checkpoint and writes its embedding and noise as .npy files.
fn prepare(f: &Fixture, dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let model = dir.join("model.gguf");
    let (ok, text) = run(kinema()
        .args(["convert", "kimodo", "--quiet"])
        .arg(f.checkpoint_dir())
        .arg("-o")
        .arg(&model));
    assert!(ok, "convert failed: {text}");
    let (e, es) = f.f32("embedding");
    let (n, ns) = f.f32("noise");
    let emb = dir.join("embedding.npy");
    let noise = dir.join("noise.npy");
    save(&emb, &es, &e);
    save(&noise, &ns, &n);
    (model, emb, noise)
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn read(npz: &NpzReader, key: &str) -> (Vec<f32>, Vec<usize>) {
    let a = npz
        .array(key)
        .unwrap_or_else(|e| panic!("output key {key}: {e}"));
    (a.to_f32().unwrap(), a.shape.clone())
}

/// Runs `generate` with the fixture's settings on `backend`; returns the npz path.
fn generate(
    f: &Fixture,
    dir: &Path,
    inputs: (&Path, &Path, &Path),
    backend: &str,
    rows: usize,
    name: &str,
) -> PathBuf {
    let (model, emb, noise) = inputs;
    let out = dir.join(format!("{name}.npz"));
    let glb = dir.join(format!("{name}.glb"));
    let (ok, text) = run(kinema()
        .args(["generate", "--quiet", "--diagnostics", "--backend", backend])
        // The fixtures are upstream's sampling loop and decode, without post-processing.
        .args(["--precision", "strict", "--no-postprocess"])
        .arg("--model")
        .arg(model)
        .arg("--embedding")
        .arg(emb)
        .arg("--noise")
        .arg(noise)
        .args(["--steps", &f.steps().to_string()])
        .args(["--cfg-rows", &rows.to_string()])
        .args(["--heading", &f.heading().to_string()])
        .args(["--cfg-text", &f.cfg_text().to_string()])
        .args(["--cfg-constraint", &f.cfg_constraint().to_string()])
        .arg("--glb")
        .arg(&glb)
        .arg("-o")
        .arg(&out));
    assert!(
        ok,
        "{} {backend} rows {rows}: generate failed: {text}",
        f.skeleton
    );
    out
}

/// Generates with the fixture's inputs on `backend` and compares every output key.
fn generate_matches(f: &Fixture, backend: &str, rows: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (model, emb, noise) = prepare(f, dir.path());
    let inputs = (model.as_path(), emb.as_path(), noise.as_path());
    let out = generate(f, dir.path(), inputs, backend, rows, "out");
    let glb = out.with_extension("glb");
    // The same run from noise one ulp larger everywhere: the loop's own sensitivity.
    let (n, ns) = f.f32("noise");
    let nudged: Vec<f32> = n.iter().map(|v| v.next_up()).collect();
    let noise_up = dir.path().join("noise_up.npy");
    save(&noise_up, &ns, &nudged);
    let inputs_up = (model.as_path(), emb.as_path(), noise_up.as_path());
    let out_up = generate(f, dir.path(), inputs_up, backend, rows, "nudged");
    let what = format!("{} {backend} rows {rows}", f.skeleton);
    let npz = NpzReader::open(&out).unwrap();
    let npz_up = NpzReader::open(&out_up).unwrap();
    let (t, dim) = (f.frames(), f.motion_dim());

    let (feat, shape) = read(&npz, "features");
    assert_eq!(shape, vec![t, dim], "{what}: features shape");
    let sensitivity = max_abs(&feat, &read(&npz_up, "features").0);
    let bound = FEATURES_ABS.max(LOOP_MARGIN * sensitivity);
    let e = max_abs(&feat, &f.f32("features").0);
    eprintln!("{what}: features max_abs {e:.2e} (one-ulp sensitivity {sensitivity:.2e})");
    assert!(e <= bound, "{what}: features max_abs {e} > {bound}");

    // SOMA30 output is expanded to SOMA77, as upstream returns it.
    let suffix = if f.has("posed_joints_77") { "_77" } else { "" };
    let keys = [
        "local_rot_mats",
        "global_rot_mats",
        "posed_joints",
        "root_positions",
        "smooth_root_pos",
        "global_root_heading",
    ];
    for key in keys {
        let (ours, shape) = read(&npz, key);
        let per_joint = key.ends_with("mats") || key == "posed_joints";
        let fixture_key = if per_joint {
            format!("{key}{suffix}")
        } else {
            key.to_string()
        };
        let (theirs, their_shape) = f.f32(&fixture_key);
        assert_eq!(shape, their_shape, "{what}: {key} shape");
        let sensitivity = max_abs(&ours, &read(&npz_up, key).0);
        let bound = DECODED_ABS.max(LOOP_MARGIN * sensitivity);
        let e = max_abs(&ours, &theirs);
        eprintln!("{what}: {key} max_abs {e:.2e} (one-ulp sensitivity {sensitivity:.2e})");
        assert!(e <= bound, "{what}: {key} max_abs {e} > {bound}");
    }
    let contacts = npz.array("foot_contacts").unwrap();
    assert_eq!(contacts.shape, vec![t, 4]);
    let theirs: Vec<u8> = f.u8("foot_contacts").0;
    assert_eq!(contacts.data, theirs, "{what}: foot_contacts");

    // Diagnostics: the first call's stage outputs for the rows computed, and the guided x0.
    let root = read(&npz, "root_stage_step0");
    let body = read(&npz, "body_stage_step0");
    assert_eq!(root.1, vec![rows, t, 5], "{what}: root_stage_step0 shape");
    assert_eq!(
        body.1,
        vec![rows, t, dim - 5],
        "{what}: body_stage_step0 shape"
    );
    let (fixture_root, _) = f.f32("root_out");
    let (fixture_body, _) = f.f32("body_out");
    // With 2 rows they are upstream's rows 0 (text) and 2 (uncond).
    let pick = |v: &[f32], w: usize| -> Vec<f32> {
        let per = t * w;
        let ids: Vec<usize> = if rows == 3 { vec![0, 1, 2] } else { vec![0, 2] };
        ids.iter()
            .flat_map(|&r| v[r * per..(r + 1) * per].to_vec())
            .collect()
    };
    let e = max_abs(&root.0, &pick(&fixture_root, 5));
    assert!(e <= 2e-3, "{what}: root_stage_step0 max_abs {e}");
    let e = max_abs(&body.0, &pick(&fixture_body, dim - 5));
    assert!(e <= 2e-3, "{what}: body_stage_step0 max_abs {e}");
    let e = max_abs(&read(&npz, "x0_step0").0, &f.f32("x0_step0").0);
    assert!(e <= 2e-3, "{what}: x0_step0 max_abs {e}");

    // The sidecar says what ran.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.with_extension("json")).unwrap()).unwrap();
    assert_eq!(json["backend"], backend);
    assert_eq!(json["precision"], "strict");
    assert_eq!(json["steps"], f.steps());
    assert_eq!(json["cfg_rows"], rows);
    assert_eq!(json["frames"], t);
    assert_eq!(json["model"]["skeleton"], f.skeleton.as_str());
    // The GLB is a glTF 2.0 binary container.
    let g = std::fs::read(&glb).unwrap();
    assert_eq!(&g[0..4], b"glTF");
    assert_eq!(u32::from_le_bytes(g[4..8].try_into().unwrap()), 2);
    assert_eq!(
        u32::from_le_bytes(g[8..12].try_into().unwrap()) as usize,
        g.len()
    );
}

#[test]
fn cpu_generation_matches_upstream() {
    for s in SKELETONS {
        let f = kimodo_fixture::load(s);
        generate_matches(&f, "cpu", 3);
        generate_matches(&f, "cpu", 2);
    }
}

#[test]
fn vulkan_generation_matches_upstream() {
    if let Err(why) = kinema::vulkan::probe() {
        let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
        assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
        eprintln!("skipping the Vulkan backend: {why}");
        return;
    }
    let f = kimodo_fixture::load("soma30");
    generate_matches(&f, "vulkan", 3);
    generate_matches(&f, "vulkan", 2);
}

/// Runs `generate` with the fixture's model and `args`, expects failure with `needle` in the
/// message, and checks the output file was not created.
fn refused(dir: &Path, args: &[&str], needle: &str) {
    let out = dir.join("refused.npz");
    let (ok, text) = run(kinema()
        .args(["generate", "--quiet", "--backend", "cpu"])
        .args(args)
        .arg("-o")
        .arg(&out));
    assert!(!ok, "{args:?} should fail");
    assert!(
        text.contains(needle),
        "{args:?}: expected {needle:?} in: {text}"
    );
    assert!(!text.contains("panicked"), "{args:?} panicked: {text}");
    assert!(!out.exists(), "{args:?} left an output file");
}

#[test]
fn bad_input_is_refused_with_a_clear_error() {
    let f = kimodo_fixture::load("soma30");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (model, emb, noise) = prepare(&f, d);
    let (m, e, n) = (
        model.to_str().unwrap(),
        emb.to_str().unwrap(),
        noise.to_str().unwrap(),
    );
    let dim = f.motion_dim();
    let bad_emb = d.join("bad_emb.npy");
    save(&bad_emb, &[1, 47], &[0.5; 47]);
    let nan_emb = d.join("nan_emb.npy");
    let mut v = f.f32("embedding").0;
    v[3] = f32::NAN;
    save(&nan_emb, &[1, 48], &v);
    let bad_noise = d.join("bad_noise.npy");
    save(&bad_noise, &[1, 4, dim + 1], &vec![0.0; 4 * (dim + 1)]);
    let nan_noise = d.join("nan_noise.npy");
    let mut v = f.f32("noise").0;
    v[7] = f32::INFINITY;
    save(&nan_noise, &[1, f.frames(), dim], &v);
    let (be, ne, bn, nn) = (
        bad_emb.to_str().unwrap(),
        nan_emb.to_str().unwrap(),
        bad_noise.to_str().unwrap(),
        nan_noise.to_str().unwrap(),
    );
    let base = ["--model", m, "--embedding", e];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    let (ok, text) = run(kinema()
        .args(["generate", "--quiet", "--backend", "tpu", "--frames", "8"])
        .args(base)
        .arg("-o")
        .arg(d.join("x.npz")));
    assert!(!ok && text.contains("unknown backend"), "{text}");
    refused(d, &with(&["--frames", "1"]), "outside 2..=4948");
    refused(d, &with(&["--frames", "4949"]), "outside 2..=4948");
    refused(d, &with(&[]), "--frames is required");
    refused(d, &with(&["--frames", "8", "--steps", "0"]), "steps");
    refused(d, &with(&["--frames", "8", "--cfg-rows", "4"]), "rows");
    refused(
        d,
        &["--model", m, "--embedding", be, "--frames", "8"],
        "expected [48], [1, 48] or [1, 1, 48]",
    );
    refused(
        d,
        &["--model", m, "--embedding", ne, "--frames", "8"],
        "non-finite",
    );
    refused(d, &["--model", m, "--embedding", e, "--noise", bn], "noise");
    refused(
        d,
        &["--model", m, "--embedding", e, "--noise", nn],
        "non-finite",
    );
    refused(
        d,
        &[
            "--model",
            m,
            "--embedding",
            e,
            "--noise",
            n,
            "--frames",
            "9",
        ],
        "disagrees",
    );
    refused(
        d,
        &["--model", m, "--prompt", "A person walks.", "--frames", "8"],
        "--text-model",
    );
    refused(d, &["--model", m, "--frames", "8"], "--embedding");
    let junk = d.join("junk.gguf");
    std::fs::write(&junk, b"not a model").unwrap();
    refused(
        d,
        &[
            "--model",
            junk.to_str().unwrap(),
            "--embedding",
            e,
            "--frames",
            "8",
        ],
        "junk.gguf",
    );

    // An unwritable output is refused before any work, and an existing output survives a
    // failed run untouched.
    let (ok, text) = run(kinema()
        .args(["generate", "--quiet", "--backend", "cpu", "--frames", "8"])
        .args(["--model", m, "--embedding", e, "-o"])
        .arg(d.join("no/such/dir/out.npz")));
    assert!(!ok && text.contains("no/such/dir"), "{text}");
    let keep = d.join("keep.npz");
    std::fs::write(&keep, b"precious").unwrap();
    let (ok, _) = run(kinema()
        .args(["generate", "--quiet", "--backend", "cpu", "--frames", "1"])
        .args(["--model", m, "--embedding", e, "-o"])
        .arg(&keep));
    assert!(!ok);
    assert_eq!(std::fs::read(&keep).unwrap(), b"precious");
}

#[test]
fn seeded_generation_is_reproducible() {
    let f = kimodo_fixture::load("g1");
    let dir = tempfile::tempdir().unwrap();
    let (model, emb, _) = prepare(&f, dir.path());
    let mut outs = Vec::new();
    for name in ["a.npz", "b.npz"] {
        let out = dir.path().join(name);
        let (ok, text) = run(kinema()
            .args(["generate", "--quiet", "--backend", "cpu", "--frames", "12"])
            .args(["--steps", "4", "--seed", "7"])
            .arg("--model")
            .arg(&model)
            .arg("--embedding")
            .arg(&emb)
            .arg("-o")
            .arg(&out));
        assert!(ok, "{text}");
        outs.push(read(&NpzReader::open(&out).unwrap(), "features").0);
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.with_extension("json")).unwrap()).unwrap();
        assert_eq!(json["seed"], 7);
        assert_eq!(json["noise"], "seed");
    }
    assert_eq!(outs[0], outs[1]);
    assert!(outs[0].iter().all(|v| v.is_finite()));
}
