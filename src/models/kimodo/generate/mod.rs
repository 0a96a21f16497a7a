//! `kinema generate`: a text feature in, motion out. Checks the options and every output
//! path first ([`OutputPlan`]), reads and checks the inputs (embedding, optional noise), runs
//! [`sampler::sample`] on the chosen backend, decodes the features as upstream's
//! `Kimodo.__call__` does (post-processed as upstream's CLI does unless `--no-postprocess`,
//! then SOMA30 expanded to SOMA77), and writes the outputs together, only
//! once all of them are ready: the npz with upstream's keys plus `features` (and the
//! diagnostics), a JSON sidecar saying exactly what ran, and optionally an animated glTF
//! binary.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::config::{KimodoModel, MotionStats, SkeletonKind, keys, names};
use super::constraints::{self, Constraint};
use super::export::{Exports, Format};
use super::glb;
use super::motion::{self, Motion};
use super::multiprompt::{self, MultiOptions, Segment};
use super::postprocess;
use super::sampler::{self, Sample, SampleOptions};
use super::skeleton::Skeleton;
use crate::backend::{Backend, BackendInfo};
use crate::models::kit::identity::sidecar_json;
use crate::models::kit::output::OutputPlan;
use crate::{Error, Result};

pub use crate::models::kit::identity::ModelIdentity;

mod files;
mod report;
pub use files::{npz_bytes, read_embedding, read_noise};
pub use report::{GenerateReport, ReportTimings, SegmentReport, TextPhase};

/// Everything `kinema generate` was asked for.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub model: PathBuf,
    /// Text features (`.npy`), at least one. Several with one (or no) entry in `frames`: one
    /// motion each, run as one batched graph. Several with as many `frames`: consecutive
    /// segments of ONE motion (upstream's multi-prompt, see [`super::multiprompt`]).
    pub embeddings: Vec<PathBuf>,
    pub noise: Option<PathBuf>,
    /// Frames: none (when `noise` gives them), one (every motion), or one per embedding
    /// (segments).
    pub frames: Vec<usize>,
    /// Multi-prompt transition frames (upstream's `num_transition_frames`, default 5).
    pub transition_frames: usize,
    pub steps: usize,
    /// Default: the model's (2, 2).
    pub cfg_text: Option<f32>,
    pub cfg_constraint: Option<f32>,
    /// 2 (exact without constraints) or 3 (upstream's rows; required with constraints).
    pub cfg_rows: usize,
    /// Upstream's `constraints.json` (see [`constraints`]).
    pub constraints: Option<PathBuf>,
    /// Motions from seeds `seed ..= seed + samples - 1`, run as one batched graph; more than
    /// one is written as upstream does: `<stem>/<stem>_00.npz`, ... (see
    /// [`GenerateRequest::sample_outputs`]).
    pub samples: usize,
    pub seed: u64,
    pub heading: f32,
    pub diagnostics: bool,
    /// Post-process the motion (upstream's foot-skate and constraint cleanup, see
    /// [`postprocess`]) where upstream's CLI does: every model but G1's
    /// ([`postprocess::enabled_by_default`]). `kinema generate` sets it unless
    /// `--no-postprocess`.
    pub postprocess: bool,
    pub output: PathBuf,
    pub glb: Option<PathBuf>,
    /// More formats of the same motion (`--bvh`, `--csv`, `--amass`, `--skin`).
    pub exports: Exports,
    /// Per embedding, in order: how it was made from a prompt (recorded in the sidecar), or
    /// `None` for a file given as is. Empty when no embedding came from a prompt.
    pub text: Vec<Option<TextPhase>>,
}

/// What a request generates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One text feature: `samples` motions from seeds `seed..`.
    Single,
    /// Several text features, one motion each, in one batched graph.
    Batch(usize),
    /// Several text features with their frames: consecutive segments of one motion (per
    /// sample).
    Segments(usize),
}

impl GenerateRequest {
    /// The JSON sidecar's path: the output's with the extension `.json`.
    pub fn sidecar(&self) -> PathBuf {
        self.output.with_extension("json")
    }

    /// What the counts of embeddings and frames ask for; mismatched counts are an error.
    pub fn mode(&self) -> Result<Mode> {
        let (n, f) = (self.embeddings.len(), self.frames.len());
        match (n, f) {
            (0, _) => Err(Error::InvalidArgument(
                "no text feature: give --embedding FILE.npy, --prompt TEXT or --timeline".into(),
            )),
            (1, 0 | 1) => Ok(Mode::Single),
            (n, 0 | 1) => Ok(Mode::Batch(n)),
            (n, f) if n == f => Ok(Mode::Segments(n)),
            (n, f) => Err(Error::InvalidArgument(format!(
                "{n} prompts/embeddings and {f} --frames: give one --frames for all (one \
                 motion per prompt) or one per prompt (consecutive segments of one motion)"
            ))),
        }
    }

    /// Motions written: the samples, or one per text feature of a batch.
    pub fn motions(&self) -> usize {
        match self.mode() {
            Ok(Mode::Batch(n)) => n,
            _ => self.samples,
        }
    }

    /// Each sample's `(npz, glb)` paths. One sample: `--output` and `--glb` as given. More:
    /// upstream's layout (`kimodo/scripts/generate.py#L150-160`, #L337-345): the folder
    /// `<stem>` (the path without its extension) holding `<stem>_00.npz`, `<stem>_01.npz`, ...,
    /// and likewise for the GLB; each npz has its JSON sidecar beside it.
    pub fn sample_outputs(&self) -> Vec<(PathBuf, Option<PathBuf>)> {
        let motions = self.motions();
        if motions <= 1 {
            return vec![(self.output.clone(), self.glb.clone())];
        }
        let numbered = |p: &Path, ext: &str, i: usize| {
            let folder = p.with_extension("");
            let base = folder
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            folder.join(format!("{base}_{i:02}.{ext}"))
        };
        (0..motions)
            .map(|i| {
                (
                    numbered(&self.output, "npz", i),
                    self.glb.as_ref().map(|g| numbered(g, "glb", i)),
                )
            })
            .collect()
    }

    /// Checks the numeric options that need no model: finite guidance weights and heading,
    /// at least one step, 2 or 3 guidance rows, at least 2 frames. The error names the flag.
    pub fn validate(&self) -> Result<()> {
        for (flag, v) in [
            ("--cfg-text", self.cfg_text),
            ("--cfg-constraint", self.cfg_constraint),
        ] {
            if let Some(w) = v
                && !w.is_finite()
            {
                return Err(Error::InvalidArgument(format!(
                    "{flag} {w} is not a finite guidance weight"
                )));
            }
        }
        if !self.heading.is_finite() {
            return Err(Error::InvalidArgument(format!(
                "--heading {} is not a finite angle",
                self.heading
            )));
        }
        if self.steps == 0 {
            return Err(Error::InvalidArgument(
                "--steps 0: the sampler needs at least one DDIM step".into(),
            ));
        }
        let mode = self.mode()?;
        if self.motions() > 1
            && let Some((_, _, flag)) = self.exports.files.first()
        {
            return Err(Error::InvalidArgument(format!(
                "{flag} with {} motions: each is written as <stem>/<stem>_NN.npz (and \
                 .glb); convert the one you want with `kinema convert motion`",
                self.motions()
            )));
        }
        match mode {
            Mode::Single => {}
            Mode::Batch(n) => {
                if self.samples > 1 {
                    return Err(Error::InvalidArgument(format!(
                        "--samples {} with {n} prompts: each prompt gives one motion (seed + \
                         i for prompt i); run the prompts separately for several samples each",
                        self.samples
                    )));
                }
                if self.noise.is_some() {
                    return Err(Error::InvalidArgument(format!(
                        "--noise gives one motion's x_T; the {n} prompts draw theirs from the \
                         seed (seed + i for prompt i)"
                    )));
                }
            }
            Mode::Segments(n) => {
                if self.noise.is_some() {
                    return Err(Error::InvalidArgument(format!(
                        "--noise gives one motion's x_T; the {n} segments draw theirs from \
                         the seed"
                    )));
                }
                if self.diagnostics {
                    return Err(Error::InvalidArgument(format!(
                        "--diagnostics holds one sampling loop's first step; the {n} \
                         segments of a multi-prompt motion each run their own"
                    )));
                }
                if self.transition_frames == 0 {
                    return Err(Error::InvalidArgument(
                        "--transition-frames 0: upstream pins and blends at least one frame \
                         (default 5)"
                            .into(),
                    ));
                }
            }
        }
        if !(self.cfg_rows == 2 || self.cfg_rows == 3) {
            return Err(Error::InvalidArgument(format!(
                "--cfg-rows {}: guidance rows are 2 (the exact shortcut) or 3 (upstream's rows)",
                self.cfg_rows
            )));
        }
        if self.samples == 0 {
            return Err(Error::InvalidArgument(
                "--samples 0: generate at least one motion".into(),
            ));
        }
        if self.samples > 1 && self.noise.is_some() {
            return Err(Error::InvalidArgument(
                "--noise gives one motion's x_T; --samples N draws each sample's noise from \
                 its seed (seed + i)"
                    .into(),
            ));
        }
        if self.samples > 1 && self.seed.checked_add(self.samples as u64 - 1).is_none() {
            return Err(Error::InvalidArgument(format!(
                "--seed {} with --samples {} runs past the largest seed",
                self.seed, self.samples
            )));
        }
        if self.constraints.is_some() && self.cfg_rows != 3 {
            return Err(Error::InvalidArgument(
                "--cfg-rows 2 with --constraints: the 2-row shortcut is exact only without \
                 constraints; constraints need upstream's 3 rows [text, constraint, uncond]"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Every file the request reads and writes: the outputs may not collide with each other
    /// or with an input, and must be regular files or absent.
    pub fn output_plan(&self) -> OutputPlan {
        let mut plan = OutputPlan::new();
        plan.input(&self.model, "--model");
        for e in &self.embeddings {
            plan.input(e, "--embedding");
        }
        if let Some(n) = &self.noise {
            plan.input(n, "--noise");
        }
        if let Some(c) = &self.constraints {
            plan.input(c, "--constraints");
        }
        for (npz, glb) in self.sample_outputs() {
            plan.output(&npz, "--output");
            if let Some(g) = &glb {
                plan.output(g, "--glb");
            }
            plan.output(
                &npz.with_extension("json"),
                "the JSON sidecar (--output with .json)",
            );
        }
        self.exports.plan(&mut plan);
        plan
    }
}

/// Runs a whole request on `backend`. `progress(step, steps)` is called after each step.
/// The options and every output path are checked before any work; the outputs land together
/// only when the whole run has succeeded, so a failure leaves every existing output as it was.
pub fn generate<B: Backend>(
    req: &GenerateRequest,
    backend: &B,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<GenerateReport> {
    let t0 = Instant::now();
    backend.reset_peak_memory();
    req.validate()?;
    let mode = req.mode()?;
    let motions = req.motions();
    if motions > 1 {
        // Upstream makes the `<stem>` folders too (`os.makedirs`, generate.py#L156).
        for (npz, glb) in req.sample_outputs().iter().take(1) {
            for p in std::iter::once(npz).chain(glb) {
                if let Some(dir) = p.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
                }
            }
        }
    }
    let mut outputs = req.output_plan().check()?;
    let info = backend.info();
    // Fast precision runs 16-bit weights: an f32 file is narrowed in memory.
    let model = KimodoModel::load(&req.model)?.for_backend(&info)?;
    let weights = model.weight_dtype()?.name();
    let cfg = &model.config;
    let exports = req.exports.prepare(cfg.skeleton)?;
    let mut embeddings = Vec::with_capacity(req.embeddings.len());
    for p in &req.embeddings {
        let e = read_embedding(p, cfg.llm_dim)?;
        check_embedding_scale(&model, &e, &format!("embedding {}", p.display()))?;
        embeddings.push(e);
    }
    let noise = match &req.noise {
        Some(p) => {
            let (x, t) = read_noise(p, cfg.motion_dim)?;
            if let Some(&f) = req.frames.first()
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
    let max = cfg.max_frames();
    let frames = match (mode, &noise, req.frames.first()) {
        (Mode::Segments(_), _, _) => req.frames.iter().sum(),
        (_, Some((_, t)), _) => *t,
        (_, None, Some(&f)) => f,
        (_, None, None) => {
            return Err(Error::InvalidArgument(
                "--frames is required unless --noise gives the length".into(),
            ));
        }
    };
    if !matches!(mode, Mode::Segments(_)) && !(2..=max).contains(&frames) {
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
    opts.samples = motions;
    if let Some(w) = req.cfg_text {
        opts.cfg_text = w;
    }
    if let Some(w) = req.cfg_constraint {
        opts.cfg_constraint = w;
    }
    let seeded = noise.is_none();
    opts.noise = noise.map(|(x, _)| x);
    let skel = Skeleton::load(cfg.skeleton)?;
    let mut constrained_entries = None;
    let mut constraint_list = Vec::new();
    if let Some(p) = &req.constraints {
        let (list, cond) = constraints::load(p, &skel, &model.stats, frames)?;
        constrained_entries = Some(cond.count());
        constraint_list = list;
        opts.constraints = Some(cond);
    }
    let post = req.postprocess.then_some(constraint_list.as_slice());
    let mut postprocessed = false;
    let load_s = t0.elapsed().as_secs_f64();

    // Every motion's normalised features, diagnostics and decoded motion.
    let dim = cfg.motion_dim;
    let mut produced: Vec<(Sample, Motion)> = Vec::with_capacity(motions);
    let mut segments_report = None;
    let timings;
    let t_dec;
    if let Mode::Segments(_) = mode {
        let mut mo = MultiOptions::new(&model);
        mo.steps = opts.steps;
        mo.cfg_text = opts.cfg_text;
        mo.cfg_constraint = opts.cfg_constraint;
        mo.cfg_rows = opts.cfg_rows;
        mo.heading = opts.heading;
        mo.transition = req.transition_frames;
        if let Some(p) = &req.constraints {
            let bytes = std::fs::read(p).map_err(|e| Error::io(p, e))?;
            let list = constraints::parse(&bytes)?;
            mo.constraints = Some(constraints::build_raw(&list, &skel, frames)?);
        }
        let segments: Vec<Segment> = embeddings
            .iter()
            .zip(&req.frames)
            .map(|(e, &f)| Segment {
                embedding: e.clone(),
                frames: f,
            })
            .collect();
        let mut runs = Vec::with_capacity(motions);
        let mut sum = sampler::Timings::default();
        for i in 0..motions {
            mo.seed = req.seed + i as u64;
            let total = req.steps * segments.len() * motions;
            let base = i * req.steps * segments.len();
            let mut prog = |done: usize, _n: usize| {
                progress(base + done, total);
                ControlFlow::Continue(())
            };
            let ms = multiprompt::sample_segments(backend, &model, &segments, &mo, &mut prog)?;
            sum.build_s += ms.timings.build_s;
            sum.steps_s += ms.timings.steps_s;
            runs.push(ms);
        }
        sum.per_step_ms = sum.steps_s * 1e3 / (req.steps * segments.len() * motions) as f64;
        timings = sum;
        t_dec = Instant::now();
        segments_report = Some(
            runs[0]
                .segments
                .iter()
                .zip(&req.embeddings)
                .enumerate()
                .map(|(k, (r, e))| SegmentReport {
                    embedding: e.display().to_string(),
                    text: req.text.get(k).cloned().flatten(),
                    frames: r.plan.frames,
                    start: r.plan.start,
                    generated: r.plan.generated,
                    overlap: r.plan.overlap,
                })
                .collect(),
        );
        for ms in runs {
            let (motion, ran) = decode_raw_motion(&ms.raw, ms.frames, &skel, post)?;
            postprocessed = ran;
            let mut features = ms.raw;
            motion::normalize(&model.stats, &mut features)?;
            produced.push((
                Sample {
                    features,
                    diagnostics: None,
                    timings,
                },
                motion,
            ));
        }
    } else {
        let embedding = embeddings.concat();
        let sample = sampler::sample(backend, &model, &embedding, &opts, progress)?;
        check_sampled(&sample.features, cfg.motion_dim, &embedding, &opts)?;
        timings = sample.timings;
        t_dec = Instant::now();
        for i in 0..motions {
            let one = if motions > 1 {
                sample_slice(&sample, i, motions, opts.cfg_rows, frames, dim)
            } else {
                sample.clone()
            };
            let (motion, ran) = decode_motion(&one.features, frames, &skel, &model.stats, post)?;
            postprocessed = ran;
            produced.push((one, motion));
        }
    }

    let mut written = Vec::new();
    let mut out_skel_name = "";
    let rows = opts.cfg_rows;
    for ((npz_path, glb_path), (one, motion)) in req.sample_outputs().into_iter().zip(&produced) {
        let out_skel = if motion.skeleton == skel.kind {
            skel.clone()
        } else {
            Skeleton::load(motion.skeleton)?
        };
        out_skel_name = motion.skeleton.name();
        let npz = npz_bytes(
            motion,
            &one.features,
            one.diagnostics.as_ref(),
            opts.constraints.as_ref(),
            dim,
            rows,
        )?;
        outputs.write(&npz_path, |w| w.write_all(&npz))?;
        written.push(npz_path.display().to_string());
        if let Some(g) = &glb_path {
            let bytes = if req.exports.skin.is_some() {
                exports.render(Format::Glb, motion, cfg.fps)?
            } else {
                glb::glb_bytes(&out_skel, motion, cfg.fps)?
            };
            outputs.write(g, |w| w.write_all(&bytes))?;
            written.push(g.display().to_string());
        }
        // --bvh/--csv/--amass write the one motion of a single-motion run (validate refuses
        // them with several motions).
        if motions <= 1 {
            written.extend(exports.write(&mut outputs, motion, cfg.fps)?);
        }
    }
    let decode_s = t_dec.elapsed().as_secs_f64();

    let details = BTreeMap::from([("skeleton", model.config.skeleton.name().to_string())]);
    let mut report = GenerateReport {
        kinema_version: env!("CARGO_PKG_VERSION"),
        model: ModelIdentity::read(&req.model, &keys::PROVENANCE, details)?,
        embedding: req.embeddings[0].display().to_string(),
        noise: match &req.noise {
            Some(p) => p.display().to_string(),
            None => "seed".into(),
        },
        seed: seeded.then_some(req.seed),
        samples: (motions > 1).then_some(motions),
        sample: None,
        frames,
        segments: segments_report,
        transition_frames: matches!(mode, Mode::Segments(_)).then_some(req.transition_frames),
        fps: cfg.fps,
        steps: opts.steps,
        cfg_text: opts.cfg_text,
        cfg_constraint: opts.cfg_constraint,
        cfg_rows: opts.cfg_rows,
        constraints: req.constraints.as_ref().map(|p| p.display().to_string()),
        constrained_entries,
        heading: opts.heading,
        postprocess: postprocessed,
        backend: info.kind,
        device: info.device.clone(),
        precision: info.precision.name(),
        weights,
        threads: info.threads,
        output_skeleton: out_skel_name,
        outputs: written,
        timings: ReportTimings {
            load_s,
            build_s: timings.build_s,
            sampling_s: timings.steps_s,
            per_step_ms: timings.per_step_ms,
            decode_s,
            total_s: t0.elapsed().as_secs_f64(),
        },
        memory: backend.memory_use(),
        // Segments carry their own prompts; a batch, each motion its own (below).
        text: match mode {
            Mode::Segments(_) => None,
            _ => req.text.first().cloned().flatten(),
        },
    };
    if motions > 1 {
        for (i, (npz_path, _)) in req.sample_outputs().into_iter().enumerate() {
            let mut r = report.clone();
            r.sample = Some(i);
            r.seed = Some(req.seed + i as u64);
            if let Mode::Batch(_) = mode {
                r.embedding = req.embeddings[i].display().to_string();
                r.text = req.text.get(i).cloned().flatten();
            }
            let json = sidecar_json(&r)?;
            outputs.write(&npz_path.with_extension("json"), |w| w.write_all(&json))?;
        }
        report.timings.total_s = t0.elapsed().as_secs_f64();
    } else {
        let json = sidecar_json(&report)?;
        outputs.write(&req.sidecar(), |w| w.write_all(&json))?;
    }
    outputs.commit()?;
    Ok(report)
}

/// Sample `i` of a batch of `n`: its features and, with diagnostics, its rows of the stage
/// outputs (guidance-row major in the batch: row `r` of sample `i` is batch row `r n + i`).
fn sample_slice(s: &Sample, i: usize, n: usize, rows: usize, frames: usize, dim: usize) -> Sample {
    let per = frames * dim;
    let pick = |v: &[f32], width: usize| -> Vec<f32> {
        let blk = frames * width;
        (0..rows)
            .flat_map(|r| v[(r * n + i) * blk..(r * n + i + 1) * blk].to_vec())
            .collect()
    };
    Sample {
        features: s.features[i * per..(i + 1) * per].to_vec(),
        diagnostics: s.diagnostics.as_ref().map(|d| sampler::Diagnostics {
            root_stage_step0: pick(&d.root_stage_step0, 5),
            body_stage_step0: pick(&d.body_stage_step0, dim - 5),
            x0_step0: d.x0_step0[i * per..(i + 1) * per].to_vec(),
        }),
        timings: s.timings,
    }
}

/// What [`run_model`] produced: the sampler's result, the decoded motion (SOMA30 expanded to
/// SOMA77, as upstream returns it) and the skeleton it is posed on.
pub struct Generation {
    /// The sampler's result: normalised features `[T, dim]`, diagnostics, timings.
    pub sample: Sample,
    /// The decoded motion.
    pub motion: Motion,
    /// The skeleton of `motion` (SOMA77 for a SOMA30 model).
    pub skeleton: Skeleton,
    /// Whether post-processing ran.
    pub postprocessed: bool,
    /// Seconds spent decoding the features.
    pub decode_s: f64,
}

/// Decodes one sample's normalised features into the motion upstream returns: the inverse
/// representation on the model's skeleton, then, when `postprocess` is given (the constraint
/// list, possibly empty) and upstream's CLI post-processes this model
/// ([`postprocess::enabled_by_default`]), `post_process_motion` as `KimodoModel` calls it
/// (`kimodo/model/kimodo_model.py#L322-331`, before the SOMA77 expansion), then SOMA30 to
/// SOMA77. Without post-processing this is exactly [`motion::decode_output`]. Returns the
/// motion and whether post-processing ran.
pub fn decode_motion(
    features: &[f32],
    frames: usize,
    skel: &Skeleton,
    stats: &MotionStats,
    postprocess: Option<&[Constraint]>,
) -> Result<(Motion, bool)> {
    match postprocess {
        Some(list) if postprocess::enabled_by_default(skel.kind) => {
            let mut m = motion::decode(features, frames, skel, stats)?;
            postprocess::postprocess_motion(&mut m, skel, list)?;
            let m = if m.skeleton == SkeletonKind::Soma30 {
                m.to_soma77()?
            } else {
                m
            };
            Ok((m, true))
        }
        _ => Ok((motion::decode_output(features, frames, skel, stats)?, false)),
    }
}

/// [`decode_motion`] for unnormalised features (a stitched multi-prompt motion, which
/// upstream decodes unnormalised): [`motion::decode_raw_output`], post-processed as there.
pub fn decode_raw_motion(
    features: &[f32],
    frames: usize,
    skel: &Skeleton,
    postprocess: Option<&[Constraint]>,
) -> Result<(Motion, bool)> {
    match postprocess {
        Some(list) if postprocess::enabled_by_default(skel.kind) => {
            let mut m = motion::inverse(features, frames, skel)?;
            postprocess::postprocess_motion(&mut m, skel, list)?;
            let m = if m.skeleton == SkeletonKind::Soma30 {
                m.to_soma77()?
            } else {
                m
            };
            Ok((m, true))
        }
        _ => Ok((motion::decode_raw_output(features, frames, skel)?, false)),
    }
}

/// One generation on a loaded model, the part `kinema generate` and the host API share:
/// [`sampler::sample_cancellable`], the overflow check of the result and the decode
/// ([`decode_motion`], post-processed with the constraint list `postprocess` when given and
/// upstream's CLI would). Callers check the text feature with [`check_embedding_scale`]
/// first. `progress(done, steps)` is called after every step and may cancel.
pub fn run_model<B: Backend>(
    backend: &B,
    model: &KimodoModel,
    embedding: &[f32],
    opts: &SampleOptions,
    postprocess: Option<&[Constraint]>,
    progress: &mut dyn FnMut(usize, usize) -> ControlFlow<()>,
) -> Result<Generation> {
    let sample = sampler::sample_cancellable(backend, model, embedding, opts, progress, None)?;
    let cfg = &model.config;
    check_sampled(&sample.features, cfg.motion_dim, embedding, opts)?;
    let t_dec = Instant::now();
    let skel = Skeleton::load(cfg.skeleton)?;
    let (motion, postprocessed) = decode_motion(
        &sample.features,
        opts.frames,
        &skel,
        &model.stats,
        postprocess,
    )?;
    let skeleton = if motion.skeleton == skel.kind {
        skel
    } else {
        Skeleton::load(motion.skeleton)?
    };
    Ok(Generation {
        sample,
        motion,
        skeleton,
        postprocessed,
        decode_s: t_dec.elapsed().as_secs_f64(),
    })
}

/// The largest magnitude in `v` (NaN counts as infinite).
fn max_abs(v: &[f32]) -> f32 {
    v.iter()
        .map(|x| if x.is_nan() { f32::INFINITY } else { x.abs() })
        .fold(0.0, f32::max)
}

/// Refuses, before sampling (errors start with `label`), a text feature whose projection into the text token cannot be
/// carried through the denoiser's f32 arithmetic: each stage's `embed_text(e)` (computed here
/// in f64) must stay below `sqrt(f32::MAX / D)`, so that the token's LayerNorm variance and
/// its attention dot products are finite. Upstream's LLM2Vec features hold values of order 1;
/// a file of huge values would otherwise fail only after sampling, as non-finite motion.
pub fn check_embedding_scale(model: &KimodoModel, embedding: &[f32], label: &str) -> Result<()> {
    let d = model.config.latent_dim;
    let bound = (f32::MAX as f64 / d as f64).sqrt();
    for stage in names::STAGES {
        let w = model
            .tensor(&names::stage(stage, "embed_text.weight"))?
            .to_f32_vec()?;
        let b = model
            .tensor(&names::stage(stage, "embed_text.bias"))?
            .to_f32_vec()?;
        let k = embedding.len();
        let worst = w
            .chunks_exact(k)
            .zip(&b)
            .map(|(row, &bias)| {
                let dot: f64 = row
                    .iter()
                    .zip(embedding)
                    .map(|(&a, &e)| a as f64 * e as f64)
                    .sum();
                (dot + bias as f64).abs()
            })
            .fold(0.0, f64::max);
        if worst.is_nan() || worst >= bound {
            return Err(Error::InvalidArgument(format!(
                "{label}: its values (largest magnitude {:e}) project to text-token values \
                 of {worst:.3e} in {stage}.embed_text, beyond what the denoiser's f32 arithmetic \
                 can carry (below {bound:.2e} for width {d}); an LLM2Vec text feature holds \
                 values of order 1: check the file",
                max_abs(embedding),
            )));
        }
    }
    Ok(())
}

/// Names the cause when sampling produced non-finite features from finite inputs: the
/// arithmetic overflowed, which extreme inputs or guidance weights cause.
fn check_sampled(
    features: &[f32],
    dim: usize,
    embedding: &[f32],
    opts: &SampleOptions,
) -> Result<()> {
    let Some(i) = features.iter().position(|x| !x.is_finite()) else {
        return Ok(());
    };
    Err(Error::InvalidArgument(format!(
        "sampling overflowed f32: the result holds {} at frame {}, feature {}. The inputs \
         were finite: the text feature's largest magnitude is {:e}{}, guidance weights \
         --cfg-text {} and --cfg-constraint {}. Upstream's text features hold values of order \
         1 and its guidance weights are 2; inputs far from that overflow the denoiser",
        features[i],
        i / dim,
        i % dim,
        max_abs(embedding),
        match &opts.noise {
            Some(n) => format!(", the noise's {:e}", max_abs(n)),
            None => String::new(),
        },
        opts.cfg_text,
        opts.cfg_constraint,
    )))
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
