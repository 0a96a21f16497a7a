//! `kinema drift --model`: one Kimodo generation on several backends and precisions, compared
//! with a reference run layer by layer (every encoder layer of the first denoiser call) and
//! step by step (the guided clean prediction after every DDIM step), with the metrics of the
//! op-level drift tool ([`crate::drift::compare`]: max_abs, rel_L2, ULP histogram).

use std::path::{Path, PathBuf};

use super::config::KimodoModel;
use super::generate::read_embedding;
use super::sampler::{SampleOptions, Trace, sample_traced};
use super::synthetic;
use crate::backend::Backend;
use crate::drift::{Drift, Output, compare};
use crate::models::harness::DriftRun;
use crate::{DType, Precision, Result};

/// What `kinema drift --model` runs.
#[derive(Clone, Debug)]
pub struct DriftOptions {
    /// The text feature (.npy `[1, llm_dim]`); `None`: the deterministic synthetic one of
    /// `kinema bench kimodo`.
    pub embedding: Option<PathBuf>,
    pub frames: usize,
    /// DDIM steps.
    pub steps: usize,
    /// Guidance rows (2 or 3).
    pub cfg_rows: usize,
    /// Seed of the initial noise.
    pub seed: u64,
}

/// A Kimodo model file loaded for `kinema drift --model`, with the run's inputs.
pub struct KimodoDrift {
    path: PathBuf,
    strict: KimodoModel,
    embedding: Vec<f32>,
    opts: SampleOptions,
    /// Rows x tokens x width of an encoder layer's output.
    layer_shape: (usize, usize, usize),
}

impl KimodoDrift {
    /// Loads the model at `path` and the embedding of `o`.
    pub fn open(path: &Path, o: &DriftOptions) -> Result<KimodoDrift> {
        let strict = KimodoModel::load(path)?;
        let c = strict.config.clone();
        let embedding = match &o.embedding {
            Some(p) => read_embedding(p, c.llm_dim)?,
            None => synthetic::embedding(&c),
        };
        let opts = SampleOptions {
            steps: o.steps,
            cfg_rows: o.cfg_rows,
            seed: o.seed,
            ..SampleOptions::new(&strict, o.frames)
        };
        Ok(KimodoDrift {
            path: path.to_path_buf(),
            layer_shape: (o.cfg_rows, c.prefix_len() + o.frames, c.latent_dim),
            strict,
            embedding,
            opts,
        })
    }
}

impl DriftRun for KimodoDrift {
    type Trace = Trace;

    fn describe(&self) -> String {
        format!(
            "{} frames, {} steps, {} rows",
            self.opts.frames, self.opts.steps, self.opts.cfg_rows
        )
    }

    fn trace<B: Backend>(&self, b: &B) -> Result<Trace> {
        let info = b.info();
        if info.precision == Precision::Fast {
            // Fast precision runs 16-bit weight matrices, as `generate` does (f16 on Vulkan,
            // bf16 on the CPU).
            let fast = KimodoModel::load(&self.path)?.for_backend(&info)?;
            return trace(b, &fast, &self.embedding, &self.opts);
        }
        trace(b, &self.strict, &self.embedding, &self.opts)
    }

    fn compare(&self, label: &str, reference: &Trace, got: &Trace) -> Vec<Drift> {
        compare_traces(label, self.layer_shape, reference, got)
    }
}

/// Runs the generation on `b`, recording the trace.
pub fn trace<B: Backend>(
    b: &B,
    model: &KimodoModel,
    embedding: &[f32],
    opts: &SampleOptions,
) -> Result<Trace> {
    let mut t = Trace::default();
    sample_traced(b, model, embedding, opts, &mut |_, _| {}, Some(&mut t))?;
    Ok(t)
}

/// One [`Drift`] row per layer (`op` = the layer's name, `shape` = its `rows x S x D`) and per
/// step (`op` = `step k/n`), `backend` = `label`.
pub fn compare_traces(
    label: &str,
    shape: (usize, usize, usize),
    reference: &Trace,
    got: &Trace,
) -> Vec<Drift> {
    let (rows, s, d) = shape;
    let layer_shape = format!("{rows}x{s}x{d}");
    let mut out = Vec::new();
    for ((name, want), (_, have)) in reference.layers.iter().zip(&got.layers) {
        out.push(compare(
            &format!("layer {name}"),
            &layer_shape,
            DType::F32,
            label,
            &Output::F32(want.clone()),
            &Output::F32(have.clone()),
        ));
    }
    let n = reference.x0.len();
    for (k, (want, have)) in reference.x0.iter().zip(&got.x0).enumerate() {
        out.push(compare(
            &format!("x0 step {}/{n}", k + 1),
            "Txdim",
            DType::F32,
            label,
            &Output::F32(want.clone()),
            &Output::F32(have.clone()),
        ));
    }
    out
}
