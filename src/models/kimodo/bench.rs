//! `kinema bench kimodo`: a full Kimodo generation on deterministic synthetic weights
//! ([`super::synthetic`], no file needed) at the released SOMA size unless `layers` is
//! smaller, with the time per DDIM step and the effective FLOP rate of the denoiser
//! (kimodo.md §2.1); with `samples` > 1, that many motions in one batched generation (each
//! its own synthetic text feature and seed), the throughput a host generating many motions
//! gets.

use std::time::Instant;

use super::{sampler, synthetic};
use crate::backend::Backend;
use crate::error::{Error, Result};

/// What to time (the command line's `kinema bench kimodo` options).
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Frames T.
    pub frames: usize,
    /// DDIM steps.
    pub steps: usize,
    /// Guidance rows: 2 (the exact shortcut without constraints) or 3 (upstream's rows).
    pub rows: usize,
    /// Encoder layers per stage (16 in the released models).
    pub layers: usize,
    /// Motions generated side by side in one batched graph (1: one motion).
    pub samples: usize,
}

/// The result of [`bench()`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct KimodoBench {
    pub backend: String,
    pub device: String,
    pub threads: usize,
    pub precision: String,
    /// Dtype of the weight matrices (f32 in strict precision, bf16 in fast).
    pub weights: String,
    pub frames: usize,
    pub steps: usize,
    pub rows: usize,
    pub layers: usize,
    /// Motions in the batch, each with its own text feature and seed.
    pub samples: usize,
    pub parameters: usize,
    /// Generating the synthetic weights (not part of a generation).
    pub weights_s: f64,
    /// Building the graph, binding the weights, recording, and the once-per-generation
    /// prepare pass (text tokens, heading token, positional tables).
    pub build_s: f64,
    /// The DDIM loop, from the first submit to the features read back.
    pub generate_s: f64,
    pub per_step_ms: f64,
    /// `generate_s` over the motions of the batch.
    pub per_motion_s: f64,
    /// Denoiser FLOPs of the loop over `generate_s`.
    pub tflops: f64,
}

impl KimodoBench {
    /// One JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// One line of text.
    pub fn text(&self) -> String {
        format!(
            "kimodo {} ({}, {} threads, {}, {} weights): {} layers/stage, {:.1} M params, T={} steps={} rows={}{}: \
             {:.3} s ({:.1} ms/step, {:.2} TFLOP/s effective; weights {:.1} s, build {:.2} s)",
            self.backend,
            self.device,
            self.threads,
            self.precision,
            self.weights,
            self.layers,
            self.parameters as f64 / 1e6,
            self.frames,
            self.steps,
            self.rows,
            if self.samples > 1 {
                format!(
                    " samples={} ({:.3} s a motion)",
                    self.samples, self.per_motion_s
                )
            } else {
                String::new()
            },
            self.generate_s,
            self.per_step_ms,
            self.tflops,
            self.weights_s,
            self.build_s
        )
    }
}

/// Runs the Kimodo benchmark on `b` (see [`KimodoBench`]).
pub fn bench<B: Backend>(b: &B, o: &BenchOptions) -> Result<KimodoBench> {
    let &BenchOptions {
        frames,
        steps,
        rows,
        layers,
        samples,
    } = o;
    if samples == 0 {
        return Err(Error::InvalidArgument(
            "--samples 0: generate at least one motion".into(),
        ));
    }
    let mut config = synthetic::released_soma();
    if layers == 0 || layers > config.num_layers {
        return Err(Error::InvalidArgument(format!(
            "--layers {layers}: expected 1 to {}",
            config.num_layers
        )));
    }
    config.num_layers = layers;
    let t = Instant::now();
    // Fast precision runs 16-bit weight matrices, as `kinema generate` does.
    let model = synthetic::model(config.clone())?.for_backend(&b.info())?;
    let weights = model.weight_dtype()?.name().to_string();
    // One text feature per motion: the synthetic one, then seeded others.
    let embedding: Vec<f32> = (0..samples)
        .flat_map(|i| match i {
            0 => synthetic::embedding(&config),
            _ => synthetic::tensor_values(&format!("embedding.{i}"), &[1, config.llm_dim]),
        })
        .collect();
    let weights_s = t.elapsed().as_secs_f64();
    let mut opts = sampler::SampleOptions::new(&model, frames);
    opts.steps = steps;
    opts.cfg_rows = rows;
    opts.samples = samples;
    let s = sampler::sample(b, &model, &embedding, &opts, &mut |_, _| {})?;
    let info = b.info();
    let flops = synthetic::flops_per_call(&config, rows, frames) * (steps * samples) as f64;
    Ok(KimodoBench {
        backend: info.kind.to_string(),
        device: info.device,
        threads: info.threads,
        precision: info.precision.name().to_string(),
        weights,
        frames,
        steps,
        rows,
        layers,
        samples,
        parameters: synthetic::parameter_count(&config),
        weights_s,
        build_s: s.timings.build_s,
        generate_s: s.timings.steps_s,
        per_step_ms: s.timings.per_step_ms,
        per_motion_s: s.timings.steps_s / samples as f64,
        tflops: flops / s.timings.steps_s / 1e12,
    })
}
