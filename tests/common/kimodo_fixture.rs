//! Kimodo parity fixtures (`tests/fixtures/kimodo/<skeleton>/`), captured from the real
//! upstream PyTorch modules by `reference/capture_kimodo.py` (keys and shapes:
//! `tests/fixtures/kimodo/README.md`).
//!
//! A fixture is refused, with an error that says what to do, when the capture script or its
//! upstream-import helper (`reference/kimodo_upstream.py`) no longer hashes to what the
//! fixture's `meta` recorded, or when a checkpoint file is missing, extra or differs from its
//! recorded SHA-256: stale fixtures never pass silently.
//!
//! Include it from an integration test with
//! `#[path = "common/kimodo_fixture.rs"] mod kimodo_fixture;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kinema::formats::{NpyDType, NpzReader};

/// The skeletons with a fixture, by folder name.
pub const SKELETONS: [&str; 3] = ["soma30", "g1", "smplx22"];

/// The `fixture_format` this module understands.
pub const FORMAT: u64 = 1;

/// The crate root (fixtures and `reference/` live under it).
pub fn crate_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One skeleton's fixture: the arrays, the parsed `meta` JSON, and where it lies.
pub struct Fixture {
    pub skeleton: String,
    /// `tests/fixtures/kimodo/<skeleton>`.
    pub dir: PathBuf,
    pub npz: NpzReader,
    pub meta: serde_json::Value,
}

/// Loads `tests/fixtures/kimodo/<skel>` and checks it against `reference/`; panics with the
/// reason when the fixture is refused.
pub fn load(skel: &str) -> Fixture {
    let root = crate_root();
    match open(
        &root.join("tests/fixtures/kimodo").join(skel),
        &root.join("reference"),
    ) {
        Ok(f) => f,
        Err(e) => panic!("{e}"),
    }
}

/// Opens the fixture in `dir` and verifies it against the capture scripts in `reference_dir`
/// and the checkpoint files beside it. The error names the first mismatch.
pub fn open(dir: &Path, reference_dir: &Path) -> Result<Fixture, String> {
    let skeleton = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{}: not a fixture folder", dir.display()))?
        .to_string();
    let npz_path = dir.join("fixture.npz");
    let npz = NpzReader::open(&npz_path).map_err(|e| format!("{}: {e}", npz_path.display()))?;
    let meta_arr = npz
        .array("meta")
        .map_err(|e| format!("{}: no meta: {e}", npz_path.display()))?;
    if meta_arr.dtype != NpyDType::U8 {
        return Err(format!(
            "{}: meta is {}, expected uint8 JSON bytes",
            npz_path.display(),
            meta_arr.dtype
        ));
    }
    let meta: serde_json::Value = serde_json::from_slice(&meta_arr.data)
        .map_err(|e| format!("{}: meta is not JSON: {e}", npz_path.display()))?;

    let regen = "re-run `python reference/capture_kimodo.py --upstream-root <7330e7e checkout> \
                 --out tests/fixtures/kimodo` (tests/fixtures/kimodo/README.md)";
    if meta["fixture_format"].as_u64() != Some(FORMAT) {
        return Err(format!(
            "{}: fixture_format {} is not {FORMAT}; {regen}",
            npz_path.display(),
            meta["fixture_format"]
        ));
    }
    if meta["skeleton"].as_str() != Some(skeleton.as_str()) {
        return Err(format!(
            "{}: meta says skeleton {}, the folder is {skeleton}",
            npz_path.display(),
            meta["skeleton"]
        ));
    }
    for (key, file) in [
        ("script_sha256", "capture_kimodo.py"),
        ("helper_sha256", "kimodo_upstream.py"),
    ] {
        let path = reference_dir.join(file);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let have = sha256_hex(&bytes);
        if meta[key].as_str() != Some(have.as_str()) {
            return Err(format!(
                "{} was captured by another version of {} (meta {key} {}, the file now {have}); {regen}",
                npz_path.display(),
                path.display(),
                meta[key]
            ));
        }
    }

    let ckpt = dir.join("checkpoint");
    let recorded = meta["checkpoint_sha256"]
        .as_object()
        .ok_or_else(|| format!("{}: meta has no checkpoint_sha256", npz_path.display()))?;
    let mut present = Vec::new();
    list_files(&ckpt, &ckpt, &mut present)?;
    for rel in &present {
        if !recorded.contains_key(rel) {
            return Err(format!(
                "{}: file {rel} is not in the fixture's checkpoint_sha256; {regen}",
                ckpt.display()
            ));
        }
    }
    for (rel, want) in recorded {
        let path = ckpt.join(rel);
        let bytes = std::fs::read(&path).map_err(|e| {
            format!(
                "{}: checkpoint file recorded in meta is unreadable: {e}",
                path.display()
            )
        })?;
        let have = sha256_hex(&bytes);
        if want.as_str() != Some(have.as_str()) {
            return Err(format!(
                "{}: SHA-256 {have} differs from the fixture's record {want}; the checkpoint \
                 and fixture.npz must come from one capture run: {regen}",
                path.display()
            ));
        }
    }
    Ok(Fixture {
        skeleton,
        dir: dir.to_path_buf(),
        npz,
        meta,
    })
}

fn list_files(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.is_dir() {
            list_files(base, &path, out)?;
        } else {
            let rel = path.strip_prefix(base).expect("under base");
            let parts: Vec<_> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect();
            out.push(parts.join("/"));
        }
    }
    Ok(())
}

pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Fixture {
    /// The array's shape.
    pub fn shape(&self, name: &str) -> Vec<usize> {
        self.array(name).shape
    }

    /// A float32 array as (values, shape); panics on another dtype or a missing key.
    pub fn f32(&self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let a = self.array(name);
        assert_eq!(
            a.dtype,
            NpyDType::F32,
            "{}: {name} is {}",
            self.skeleton,
            a.dtype
        );
        (a.to_f32().expect("f32"), a.shape)
    }

    /// An int32 array as (values, shape).
    pub fn i32(&self, name: &str) -> (Vec<i32>, Vec<usize>) {
        let a = self.array(name);
        assert_eq!(
            a.dtype,
            NpyDType::I32,
            "{}: {name} is {}",
            self.skeleton,
            a.dtype
        );
        (bytemuck::pod_collect_to_vec(&a.data), a.shape)
    }

    /// A uint8 array as (values, shape).
    pub fn u8(&self, name: &str) -> (Vec<u8>, Vec<usize>) {
        let a = self.array(name);
        assert_eq!(
            a.dtype,
            NpyDType::U8,
            "{}: {name} is {}",
            self.skeleton,
            a.dtype
        );
        (a.data, a.shape)
    }

    /// Whether the fixture has this key (the `*_77` keys exist for soma30 only).
    pub fn has(&self, name: &str) -> bool {
        self.npz.names().contains(&name)
    }

    fn array(&self, name: &str) -> kinema::formats::NpyArray {
        self.npz
            .array(name)
            .unwrap_or_else(|e| panic!("{}: fixture key {name}: {e}", self.skeleton))
    }

    /// `tests/fixtures/kimodo/<skeleton>/checkpoint`: the upstream-layout checkpoint the
    /// fixture was computed from (input for `kinema convert kimodo`).
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.dir.join("checkpoint")
    }

    fn meta_u64(&self, key: &str) -> usize {
        self.meta[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: meta {key} is not an integer", self.skeleton))
            as usize
    }
    fn meta_f64(&self, path: &[&str]) -> f64 {
        let mut v = &self.meta;
        for k in path {
            v = &v[*k];
        }
        v.as_f64()
            .unwrap_or_else(|| panic!("{}: meta {path:?} is not a number", self.skeleton))
    }

    /// Frames T of the captured run.
    pub fn frames(&self) -> usize {
        self.meta_u64("frames")
    }
    /// DDIM steps of the captured run.
    pub fn steps(&self) -> usize {
        self.meta_u64("steps")
    }
    pub fn num_joints(&self) -> usize {
        self.meta_u64("num_joints")
    }
    /// Motion feature width `9 + 12 J`.
    pub fn motion_dim(&self) -> usize {
        self.meta_u64("motion_dim")
    }
    pub fn heading(&self) -> f64 {
        self.meta_f64(&["heading"])
    }
    pub fn cfg_text(&self) -> f64 {
        self.meta_f64(&["cfg_weights", "text"])
    }
    pub fn cfg_constraint(&self) -> f64 {
        self.meta_f64(&["cfg_weights", "constraint"])
    }
    /// A model hyperparameter from `meta.model` (latent_dim, ff_size, num_layers, ...).
    pub fn model_usize(&self, key: &str) -> usize {
        self.meta["model"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: meta model.{key} is not an integer", self.skeleton))
            as usize
    }
}
