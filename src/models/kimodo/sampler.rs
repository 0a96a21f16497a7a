//! Kimodo's sampling loop (`kimodo/model/kimodo_model.py` `_generate` #L578-604): DDIM with
//! eta 0 over the respaced schedule, separated classifier-free guidance, as ONE graph recorded
//! once and submitted once per step. Per step the host writes only the network's timestep and
//! the four DDIM coefficients; the state `x_t` stays on the device (a graph carry copies the
//! DDIM result into the next step's input), and nothing is read back until the end.

use std::ops::ControlFlow;
use std::time::Instant;

use super::config::KimodoModel;
use super::constraints::Conditions;
use super::denoiser::{self, Denoiser};
use super::schedule::Schedule;
use crate::backend::Backend;
use crate::graph::{Graph, TensorId};
use crate::rng;
use crate::{Error, Result};

/// What to generate and how.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleOptions {
    /// Frames T, 2 to `config.max_frames()`.
    pub frames: usize,
    /// DDIM steps, 1 to `config.num_base_steps` (upstream's CLI default: 100).
    pub steps: usize,
    /// Text guidance weight (`cfg_weight[0]`, default from the model: 2).
    pub cfg_text: f32,
    /// Constraint guidance weight (`cfg_weight[1]`, default from the model: 2).
    pub cfg_constraint: f32,
    /// 3: upstream's rows `[text, constraint, uncond]`; 2: `[text, uncond]`, the exact
    /// shortcut without constraints (the constraint row equals the unconditional one, so
    /// `u + wt (t - u) + wc (c - u)` is `u + wt (t - u)`).
    pub cfg_rows: usize,
    /// First heading angle in radians (upstream's default 0).
    pub heading: f32,
    /// Initial noise `x_T` `[T, dim]`; when `None` it is drawn from `seed` (see
    /// [`gaussian_noise`]).
    pub noise: Option<Vec<f32>>,
    pub seed: u64,
    /// Keep the first step's stage outputs and guided prediction.
    pub diagnostics: bool,
    /// The constraints' observed motion and mask (needs 3 rows; see
    /// [`super::constraints`]), shared by every sample.
    pub constraints: Option<Conditions>,
    /// Motions generated side by side in one batched graph (default 1): sample `i` starts
    /// from the noise of seed `seed + i` (or from the `i`-th `[T, dim]` block of `noise`).
    pub samples: usize,
}

impl SampleOptions {
    /// Upstream's defaults for `frames` frames: 100 steps, the model's CFG weights, the exact
    /// 2-row shortcut, heading 0, noise from seed 0.
    pub fn new(model: &KimodoModel, frames: usize) -> SampleOptions {
        SampleOptions {
            frames,
            steps: 100,
            cfg_text: model.config.cfg_text,
            cfg_constraint: model.config.cfg_constraint,
            cfg_rows: 2,
            heading: 0.0,
            noise: None,
            seed: 0,
            diagnostics: false,
            constraints: None,
            samples: 1,
        }
    }
}

/// The first denoiser call's intermediate values (rows in the order text, constraint, uncond;
/// with 2 rows, text and uncond; with several samples, guidance-row major: every sample's
/// text row, then their constraint rows, then their unconditional rows).
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostics {
    /// `[rows * samples, T, 5]`.
    pub root_stage_step0: Vec<f32>,
    /// `[rows * samples, T, dim - 5]`.
    pub body_stage_step0: Vec<f32>,
    /// `[samples * T, dim]`: the guided clean prediction of the first step.
    pub x0_step0: Vec<f32>,
}

/// Wall-clock seconds of the phases of [`sample`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    /// Building and compiling the graph (binding the weights, recording) and the
    /// once-per-generation prepare pass.
    pub build_s: f64,
    /// All steps, from the first submit until the result is read.
    pub steps_s: f64,
    /// `steps_s` over the step count, in milliseconds.
    pub per_step_ms: f64,
}

/// A generation's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// `[samples * T, dim]`: the final clean prediction, normalised features.
    pub features: Vec<f32>,
    pub diagnostics: Option<Diagnostics>,
    pub timings: Timings,
}

/// The graph of one sampling step: a denoiser call over the CFG rows, the guidance
/// combination and the DDIM update, whose result is carried into `den.x`.
pub struct StepGraph {
    pub graph: Graph,
    pub den: Denoiser,
    /// Input `[4]`: the DDIM coefficients of the step ([`Schedule::ddim_coef`]).
    pub coef: TensorId,
    /// `[T, dim]`: the guided clean prediction.
    pub x0: TensorId,
    /// `[T, dim]`: the DDIM result, copied into `den.x` at the end of every run.
    pub x_next: TensorId,
}

/// Builds the step graph; `diagnostics` keeps the stage outputs readable, `constrained` builds
/// the constraint row (see [`denoiser::build_with`]).
pub fn step_graph_with(
    model: &KimodoModel,
    frames: usize,
    cfg_rows: usize,
    cfg_text: f32,
    cfg_constraint: f32,
    diagnostics: bool,
    constrained: bool,
) -> Result<StepGraph> {
    step_graph_batch(
        model,
        &SampleOptions {
            cfg_rows,
            cfg_text,
            cfg_constraint,
            diagnostics,
            constraints: None,
            ..SampleOptions::new(model, frames)
        },
        constrained,
    )
}

/// The step graph of `opts` (frames, rows, weights, diagnostics, samples); `constrained`
/// builds the constraint row.
pub fn step_graph_batch(
    model: &KimodoModel,
    opts: &SampleOptions,
    constrained: bool,
) -> Result<StepGraph> {
    step_graph_texts(model, opts, constrained, 1)
}

/// [`step_graph_batch`] with `texts` text features (1 shared, or one per sample; see
/// [`denoiser::build_batch_texts`]).
pub fn step_graph_texts(
    model: &KimodoModel,
    opts: &SampleOptions,
    constrained: bool,
    texts: usize,
) -> Result<StepGraph> {
    let (frames, cfg_rows, samples) = (opts.frames, opts.cfg_rows, opts.samples);
    let diagnostics = opts.diagnostics;
    let mut g = Graph::new();
    let den =
        denoiser::build_batch_texts(&mut g, model, cfg_rows, samples, texts, frames, constrained)?;
    let coef = g.input("kimodo.ddim_coef", crate::DType::F32, &[4])?;
    // The guidance combines row r of every sample: [rows, samples * T, dim].
    let out = if samples > 1 {
        g.reshape(
            den.out,
            &[cfg_rows, samples * frames, model.config.motion_dim],
        )?
    } else {
        den.out
    };
    let x0 = g.cfg(out, opts.cfg_text, opts.cfg_constraint)?;
    let x_next = g.ddim(den.x, x0, coef)?;
    g.carry(x_next, den.x)?;
    g.output(x0);
    if diagnostics {
        g.output(den.root_out);
        g.output(den.body_out);
    }
    Ok(StepGraph {
        graph: g,
        den,
        coef,
        x0,
        x_next,
    })
}

/// The documented noise of `--seed`: element `k` (row-major over `[T, dim]`) is
/// `z_k` of the Box-Muller pairs `(z_2j, z_2j+1) = r (cos 2 pi v, sin 2 pi v)` with
/// `r = sqrt(-2 ln(1 - u))`, `u = uniform(seed, 2j)`, `v = uniform(seed, 2j + 1)`, where
/// `uniform` is [`crate::rng::uniform`] (SplitMix64 output `i`, top 24 bits times 2^-24,
/// so `1 - u` lies in (0, 1]). The pair is computed in f64 and each value rounded to f32.
/// It does not reproduce `torch.randn` (pass upstream's noise explicitly for parity).
pub fn gaussian_noise(seed: u64, n: usize) -> Vec<f32> {
    gaussian_noise_range(seed, 0, n)
}

/// Elements `start .. start + n` of the stream [`gaussian_noise`] defines for `seed` (the
/// segments of a multi-prompt motion draw consecutive ranges of one stream).
pub fn gaussian_noise_range(seed: u64, start: usize, n: usize) -> Vec<f32> {
    (start..start + n)
        .map(|k| {
            let j = (k / 2) as u64;
            let u = rng::uniform(seed, 2 * j) as f64;
            let v = rng::uniform(seed, 2 * j + 1) as f64;
            let r = (-2.0 * (1.0 - u).ln()).sqrt();
            let a = 2.0 * std::f64::consts::PI * v;
            (if k % 2 == 0 { r * a.cos() } else { r * a.sin() }) as f32
        })
        .collect()
}

fn check_finite(what: &str, v: &[f32]) -> Result<()> {
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "{what} holds a non-finite value ({}) at element {i}",
            v[i]
        )));
    }
    Ok(())
}

/// What [`sample_traced`] records for drift studies: every encoder layer's output in the first
/// denoiser call, and the guided clean prediction after every step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    /// `(name, [rows, prefix + T, D])`, root stage first (see [`Denoiser::layers`]).
    pub layers: Vec<(String, Vec<f32>)>,
    /// `[T, dim]` per step, in sampling order.
    pub x0: Vec<Vec<f32>>,
}

/// Runs the whole DDIM loop for one text feature `embedding` (`[llm_dim]` values, or with
/// `samples > 1` also `[samples, llm_dim]`: one per sample) and returns the final normalised
/// features. `progress(done, steps)` is called after every step.
pub fn sample<B: Backend>(
    backend: &B,
    model: &KimodoModel,
    embedding: &[f32],
    opts: &SampleOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Sample> {
    sample_traced(backend, model, embedding, opts, progress, None)
}

/// [`sample`], also filling `trace` when given (which reads the device after every step, so
/// it is slower).
pub fn sample_traced<B: Backend>(
    backend: &B,
    model: &KimodoModel,
    embedding: &[f32],
    opts: &SampleOptions,
    progress: &mut dyn FnMut(usize, usize),
    trace: Option<&mut Trace>,
) -> Result<Sample> {
    let mut go_on = |done, n| {
        progress(done, n);
        ControlFlow::Continue(())
    };
    sample_cancellable(backend, model, embedding, opts, &mut go_on, trace)
}

/// [`sample_traced`] whose `progress(done, steps)`, called after every step, may stop the
/// loop: `ControlFlow::Break` returns [`Error::Cancelled`] before the next step starts (the
/// host API's cancel).
pub fn sample_cancellable<B: Backend>(
    backend: &B,
    model: &KimodoModel,
    embedding: &[f32],
    opts: &SampleOptions,
    progress: &mut dyn FnMut(usize, usize) -> ControlFlow<()>,
    mut trace: Option<&mut Trace>,
) -> Result<Sample> {
    let c = &model.config;
    let (frames, dim) = (opts.frames, c.motion_dim);
    // One text feature shared by every sample, or (several prompts in one batch) one per
    // sample, row-major.
    let texts = if embedding.len() == c.llm_dim {
        1
    } else if opts.samples > 1 && embedding.len() == opts.samples * c.llm_dim {
        opts.samples
    } else {
        return Err(Error::InvalidArgument(format!(
            "the text embedding has {} values; this model takes {}{}",
            embedding.len(),
            c.llm_dim,
            if opts.samples > 1 {
                format!(" (or {} for one per sample)", opts.samples * c.llm_dim)
            } else {
                String::new()
            }
        )));
    };
    check_finite("the text embedding", embedding)?;
    if !(2..=c.max_frames()).contains(&frames) {
        return Err(Error::InvalidArgument(format!(
            "{frames} frames: expected 2 to {}",
            c.max_frames()
        )));
    }
    if !(opts.cfg_rows == 2 || opts.cfg_rows == 3) {
        return Err(Error::InvalidArgument(format!(
            "{} guidance rows: expected 2 (the exact shortcut) or 3 (upstream's rows)",
            opts.cfg_rows
        )));
    }
    if let Some(cond) = &opts.constraints {
        if opts.cfg_rows != 3 {
            return Err(Error::InvalidArgument(format!(
                "{} guidance rows with constraints: the 2-row shortcut is exact only without \
                 constraints; use 3 (upstream's [text, constraint, uncond])",
                opts.cfg_rows
            )));
        }
        if cond.frames != frames
            || cond.dim != dim
            || cond.features.len() != frames * dim
            || cond.mask.len() != frames * dim
        {
            return Err(Error::Shape(format!(
                "the constraint conditions are [{}, {}]; the sample is [{frames}, {dim}]",
                cond.frames, cond.dim
            )));
        }
        check_finite("the constraints' observed motion", &cond.features)?;
    }
    let schedule = Schedule::new(c.num_base_steps, opts.steps)?;
    let samples = opts.samples;
    if samples == 0 {
        return Err(Error::InvalidArgument(
            "0 samples: generate at least one".into(),
        ));
    }
    let noise = match &opts.noise {
        Some(n) => {
            if n.len() != samples * frames * dim {
                return Err(Error::InvalidArgument(format!(
                    "the noise has {} values; {samples} sample(s) of {frames} frames of {dim} \
                     features need {}",
                    n.len(),
                    samples * frames * dim
                )));
            }
            check_finite("the noise", n)?;
            n.clone()
        }
        None => {
            let mut all = Vec::with_capacity(samples * frames * dim);
            for i in 0..samples as u64 {
                let seed = opts.seed.checked_add(i).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "--seed {} with {samples} samples runs past the largest seed",
                        opts.seed
                    ))
                })?;
                all.extend(gaussian_noise(seed, frames * dim));
            }
            all
        }
    };
    if !opts.heading.is_finite() {
        return Err(Error::InvalidArgument(format!(
            "the heading {} is not a finite angle",
            opts.heading
        )));
    }

    let t0 = Instant::now();
    let sg = step_graph_texts(model, opts, opts.constraints.is_some(), texts)?;
    let den = sg.den;
    let mut graph = sg.graph;
    if trace.is_some() {
        for (_, t) in &den.layers {
            graph.output(*t);
        }
    }
    let exe = graph.compile(backend)?;
    exe.write_f32(den.embedding, embedding)?;
    // `torch.cos` / `torch.sin` of the f32 angle (backbone.py#L189-208).
    exe.write_f32(den.heading, &[opts.heading.cos(), opts.heading.sin()])?;
    let per_sample = |v: Vec<f32>| v.repeat(samples);
    match (&opts.constraints, den.imputation) {
        (Some(cond), Some([keep, observed, zero])) => {
            exe.write_f32(den.mask, &per_sample(cond.mask_f32()))?;
            exe.write_f32(keep, &per_sample(cond.keep_f32()))?;
            exe.write_f32(observed, &per_sample(cond.observed_masked()))?;
            exe.write_f32(zero, &vec![0.0; samples * frames * dim])?;
        }
        _ => exe.write_f32(den.mask, &vec![0.0; samples * frames * dim])?,
    }
    exe.write_f32(den.x, &noise)?;
    // The text tokens, heading token and tables: once per generation.
    exe.prepare()?;
    backend.sync()?;
    let build_s = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let n = schedule.steps();
    let mut diagnostics = None;
    for (done, i) in (0..n).rev().enumerate() {
        exe.write_u32(den.timestep, &[schedule.timesteps[i]])?;
        exe.write_f32(sg.coef, &schedule.ddim_coef(i))?;
        exe.run()?;
        if let Some(tr) = trace.as_deref_mut() {
            if done == 0 {
                for (name, t) in &den.layers {
                    tr.layers.push((name.clone(), exe.read_f32(*t)?));
                }
            }
            tr.x0.push(exe.read_f32(sg.x0)?);
        }
        if done == 0 && opts.diagnostics {
            diagnostics = Some(Diagnostics {
                root_stage_step0: exe.read_f32(den.root_out)?,
                body_stage_step0: exe.read_f32(den.body_out)?,
                x0_step0: exe.read_f32(sg.x0)?,
            });
        }
        if progress(done + 1, n).is_break() {
            return Err(Error::Cancelled {
                stage: "sample",
                step: done + 1,
                total: n,
            });
        }
    }
    // The last step's update has prev = 1 and returns x0 (diffusion.py#L113-133); read x0
    // itself, as upstream's final x is that prediction.
    let features = exe.read_f32(sg.x0)?;
    let steps_s = t1.elapsed().as_secs_f64();
    Ok(Sample {
        features,
        diagnostics,
        timings: Timings {
            build_s,
            steps_s,
            per_step_ms: steps_s * 1e3 / n as f64,
        },
    })
}
