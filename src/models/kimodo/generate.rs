//! `kinema generate`: a text feature in, motion out. Reads and checks the inputs (embedding,
//! optional noise), runs [`sampler::sample`] on the chosen backend, decodes the features as
//! upstream's `Kimodo.__call__` does (SOMA30 expanded to SOMA77), and writes the outputs
//! atomically: the npz with upstream's keys plus `features` (and the diagnostics), a JSON
//! sidecar saying exactly what ran, and optionally an animated glTF binary.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use super::config::{KimodoModel, keys};
use super::motion::{self, Motion};
use super::sampler::{self, Sample, SampleOptions};
use super::skeleton::Skeleton;
use super::{glb, skeleton};
use crate::backend::{Backend, BackendInfo};
use crate::formats::{GgufFile, NpyArray, NpyDType, npy, write_atomic};
use crate::{Error, Result};

/// Everything `kinema generate` was asked for.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub model: PathBuf,
    pub embedding: PathBuf,
    pub noise: Option<PathBuf>,
    /// Frames; may be omitted when `noise` gives them.
    pub frames: Option<usize>,
    pub steps: usize,
    /// Default: the model's (2, 2).
    pub cfg_text: Option<f32>,
    pub cfg_constraint: Option<f32>,
    /// 2 (exact without constraints) or 3 (upstream's rows).
    pub cfg_rows: usize,
    pub seed: u64,
    pub heading: f32,
    pub diagnostics: bool,
    pub output: PathBuf,
    pub glb: Option<PathBuf>,
}

impl GenerateRequest {
    /// The JSON sidecar's path: the output's with the extension `.json`.
    pub fn sidecar(&self) -> PathBuf {
        self.output.with_extension("json")
    }
}

/// Reads a text feature: float32 `.npy` of shape `[llm_dim]`, `[1, llm_dim]` or
/// `[1, 1, llm_dim]` (upstream's wrapper returns `[B, 1, 4096]`, its API client `[1, 4096]`).
/// The sampler refuses non-finite values.
pub fn read_embedding(path: &Path, llm_dim: usize) -> Result<Vec<f32>> {
    let a = read_f32_npy(path, "embedding")?;
    let ok = matches!(a.shape.as_slice(), [n] | [1, n] | [1, 1, n] if *n == llm_dim);
    if !ok {
        return Err(Error::Shape(format!(
            "embedding {}: shape {:?}, expected [1, {llm_dim}] or [1, 1, {llm_dim}] (the \
             model's text feature width is {llm_dim})",
            path.display(),
            a.shape
        )));
    }
    a.to_f32()
}

/// Reads initial noise `x_T`: float32 `.npy` of shape `[1, T, dim]` or `[T, dim]`. Returns the
/// values and T (the sampler refuses non-finite values).
pub fn read_noise(path: &Path, dim: usize) -> Result<(Vec<f32>, usize)> {
    let a = read_f32_npy(path, "noise")?;
    let frames = match a.shape.as_slice() {
        [1, t, d] | [t, d] if *d == dim => *t,
        _ => {
            return Err(Error::Shape(format!(
                "noise {}: shape {:?}, expected [1, T, {dim}] (the model's motion feature \
                 width is {dim})",
                path.display(),
                a.shape
            )));
        }
    };
    Ok((a.to_f32()?, frames))
}

fn read_f32_npy(path: &Path, what: &str) -> Result<NpyArray> {
    let a = npy::read_file(path)?;
    if a.dtype != NpyDType::F32 {
        return Err(Error::DType(format!(
            "{what} {}: dtype {}, expected float32",
            path.display(),
            a.dtype.descr()
        )));
    }
    Ok(a)
}

/// Fails early, before minutes of sampling, when `path` cannot be written: its directory must
/// exist and accept a new file.
pub fn check_writable(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(Error::InvalidArgument(format!(
            "output {} is a directory",
            path.display()
        )));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let probe = dir.join(format!(".kinema-write-check-{}", std::process::id()));
    std::fs::File::create(&probe)
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|e| Error::io(path, e))
}

/// What a finished generation says about itself (the JSON sidecar).
#[derive(Clone, Debug, Serialize)]
pub struct GenerateReport {
    pub kinema_version: &'static str,
    pub model: ModelIdentity,
    pub embedding: String,
    /// `"seed"` or the noise file.
    pub noise: String,
    pub seed: Option<u64>,
    pub frames: usize,
    pub fps: f32,
    pub steps: usize,
    pub cfg_text: f32,
    pub cfg_constraint: f32,
    pub cfg_rows: usize,
    pub heading: f32,
    pub backend: &'static str,
    /// CPU ISA or Vulkan device.
    pub device: String,
    pub precision: &'static str,
    /// Dtype of the weight matrices as run.
    pub weights: &'static str,
    pub threads: usize,
    pub output_skeleton: &'static str,
    pub outputs: Vec<String>,
    pub timings: ReportTimings,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelIdentity {
    pub path: String,
    pub bytes: u64,
    pub skeleton: &'static str,
    pub converter_version: Option<String>,
    /// SHA-256 of the upstream files the model was converted from.
    pub sources: Vec<(String, String)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReportTimings {
    pub load_s: f64,
    pub build_s: f64,
    pub sampling_s: f64,
    pub per_step_ms: f64,
    pub decode_s: f64,
    pub total_s: f64,
}

/// Runs a whole request on `backend`. `progress(step, steps)` is called after each step.
pub fn generate<B: Backend>(
    req: &GenerateRequest,
    backend: &B,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<GenerateReport> {
    let t0 = Instant::now();
    check_writable(&req.output)?;
    if let Some(g) = &req.glb {
        check_writable(g)?;
    }
    let info = backend.info();
    // Fast precision runs 16-bit weights: an f32 file is narrowed in memory.
    let model = KimodoModel::load(&req.model)?.for_backend(&info)?;
    let weights = model.weight_dtype()?.name();
    let cfg = &model.config;
    let embedding = read_embedding(&req.embedding, cfg.llm_dim)?;
    let noise = match &req.noise {
        Some(p) => {
            let (x, t) = read_noise(p, cfg.motion_dim)?;
            if let Some(f) = req.frames
                && f != t
            {
                return Err(Error::InvalidArgument(format!(
                    "--frames {f} disagrees with the noise file {}, which holds {t} frames",
                    p.display()
                )));
            }
            Some((x, t))
        }
        None => None,
    };
    let frames = match (&noise, req.frames) {
        (Some((_, t)), _) => *t,
        (None, Some(f)) => f,
        (None, None) => {
            return Err(Error::InvalidArgument(
                "--frames is required unless --noise gives the length".into(),
            ));
        }
    };
    let max = cfg.max_frames();
    if !(2..=max).contains(&frames) {
        return Err(Error::InvalidArgument(format!(
            "--frames {frames} is outside 2..={max} (the positional-encoding table holds 5000 \
             tokens, {} of them the prefix; the root bridge needs two frames)",
            cfg.prefix_len()
        )));
    }
    let mut opts = SampleOptions::new(&model, frames);
    opts.steps = req.steps;
    opts.cfg_rows = req.cfg_rows;
    opts.heading = req.heading;
    opts.seed = req.seed;
    opts.diagnostics = req.diagnostics;
    if let Some(w) = req.cfg_text {
        opts.cfg_text = w;
    }
    if let Some(w) = req.cfg_constraint {
        opts.cfg_constraint = w;
    }
    let seeded = noise.is_none();
    opts.noise = noise.map(|(x, _)| x);
    let load_s = t0.elapsed().as_secs_f64();

    let sample = sampler::sample(backend, &model, &embedding, &opts, progress)?;

    let t_dec = Instant::now();
    let skel = Skeleton::load(cfg.skeleton)?;
    let motion = motion::decode_output(&sample.features, frames, &skel, &model.stats)?;
    let out_skel = if motion.skeleton == skel.kind {
        skel
    } else {
        skeleton::Skeleton::load(motion.skeleton)?
    };
    write_npz(
        &req.output,
        &motion,
        &sample,
        frames,
        cfg.motion_dim,
        opts.cfg_rows,
    )?;
    let mut outputs = vec![req.output.display().to_string()];
    if let Some(g) = &req.glb {
        glb::write_glb(g, &out_skel, &motion, cfg.fps)?;
        outputs.push(g.display().to_string());
    }
    let decode_s = t_dec.elapsed().as_secs_f64();

    let report = GenerateReport {
        kinema_version: env!("CARGO_PKG_VERSION"),
        model: identity(&req.model, &model)?,
        embedding: req.embedding.display().to_string(),
        noise: match &req.noise {
            Some(p) => p.display().to_string(),
            None => "seed".into(),
        },
        seed: seeded.then_some(req.seed),
        frames,
        fps: cfg.fps,
        steps: opts.steps,
        cfg_text: opts.cfg_text,
        cfg_constraint: opts.cfg_constraint,
        cfg_rows: opts.cfg_rows,
        heading: opts.heading,
        backend: info.kind,
        device: info.device.clone(),
        precision: info.precision.name(),
        weights,
        threads: info.threads,
        output_skeleton: motion.skeleton.name(),
        outputs,
        timings: ReportTimings {
            load_s,
            build_s: sample.timings.build_s,
            sampling_s: sample.timings.steps_s,
            per_step_ms: sample.timings.per_step_ms,
            decode_s,
            total_s: t0.elapsed().as_secs_f64(),
        },
    };
    let sidecar = req.sidecar();
    let json = serde_json::to_vec_pretty(&report)
        .map_err(|e| Error::InvalidArgument(format!("JSON sidecar: {e}")))?;
    write_atomic(&sidecar, |w: &mut dyn Write| w.write_all(&json))?;
    Ok(report)
}

/// The npz: upstream's motion keys, `features` `[T, dim]` (normalised), and with diagnostics
/// `root_stage_step0` `[rows, T, 5]`, `body_stage_step0` `[rows, T, dim - 5]`, `x0_step0`
/// `[T, dim]`.
fn write_npz(
    path: &Path,
    motion: &Motion,
    sample: &Sample,
    frames: usize,
    dim: usize,
    rows: usize,
) -> Result<()> {
    let mut w = motion.npz()?;
    w.add(
        "features",
        &NpyArray::from_f32(&[frames, dim], &sample.features)?,
    )?;
    if let Some(d) = &sample.diagnostics {
        w.add(
            "root_stage_step0",
            &NpyArray::from_f32(&[rows, frames, 5], &d.root_stage_step0)?,
        )?;
        w.add(
            "body_stage_step0",
            &NpyArray::from_f32(&[rows, frames, dim - 5], &d.body_stage_step0)?,
        )?;
        w.add(
            "x0_step0",
            &NpyArray::from_f32(&[frames, dim], &d.x0_step0)?,
        )?;
    }
    w.write(path)
}

/// The model file's identity: size, skeleton, converter, and the source hashes the converter
/// recorded (read again from the memory-mapped header).
fn identity(path: &Path, model: &KimodoModel) -> Result<ModelIdentity> {
    let bytes = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len();
    let gguf = GgufFile::open(path)?;
    let sources = gguf
        .metadata()
        .iter()
        .filter_map(|(k, v)| {
            let file = k.strip_prefix(keys::SOURCE_SHA256_PREFIX)?;
            Some((file.to_string(), v.as_str()?.to_string()))
        })
        .collect();
    Ok(ModelIdentity {
        path: path.display().to_string(),
        bytes,
        skeleton: model.config.skeleton.name(),
        converter_version: gguf
            .get(keys::CONVERTER_VERSION)
            .and_then(|v| v.as_str())
            .map(str::to_string),
        sources,
    })
}

/// The one-line description of a backend for progress output.
pub fn describe_backend(info: &BackendInfo) -> String {
    format!(
        "{} ({}, {} precision, {} thread{})",
        info.kind,
        info.device,
        info.precision.name(),
        info.threads,
        if info.threads == 1 { "" } else { "s" }
    )
}
