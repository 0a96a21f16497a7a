//! MotionBricks in the model-level commands: `kinema bench motionbricks` times whole plans
//! (argmax and Gumbel) on deterministic synthetic weights at the released widths, and
//! `kinema drift --model` compares one batch of plans on every backend with the strict CPU
//! run at each stage boundary (length logits, root stage 2, root trajectory, pose logits,
//! pose tokens, decoder output, features, qpos).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::config::{ConvDecoderConfig, ConvShape, MotionBricksConfig, dims, names};
use super::g1::{BONES, HINGES};
use super::model::MotionBricksModel;
use super::plan::{PlanInputs, PlanOutput, Planner, Randomness, masked_num_tokens};
use super::sampler::Sampling;
use super::synthetic;
use crate::backend::Backend;
use crate::drift::{Drift, Output, compare};
use crate::error::{Error, Result};
use crate::models::harness::{BenchReport, DriftRun, ModelHarness, quantile};
use crate::models::kimodo::synthetic::fnv1a64;
use crate::{DType, HostTensor, rng};

/// MotionBricks' [`ModelHarness`].
pub struct MotionBricks;

/// The released configuration (`out/motionbricks_{root,pose,vqvae}/version_1/config.yaml`;
/// `../shared/docs/upstream/motionbricks.md` sections 2.2-2.5): root 512 wide with 3 + 3
/// layers, pose 1024 wide with 16 layers, 8 heads x 10 codes of 32, both convolution heads
/// 512 wide, depth 4, dilation growth 3; torch's default feed-forward width 2048.
pub fn released() -> MotionBricksConfig {
    let down_t = 2;
    let conv = ConvShape {
        width: 512,
        depth: 4,
        dilation_growth_rate: 3,
        down_t,
    };
    MotionBricksConfig {
        min_tokens: 6,
        max_tokens: 16,
        down_t,
        fps: 30.0,
        root_n_embd: 512,
        root_n_head: 16,
        root_ff: 2048,
        root_layers_shared: 3,
        root_layers_token: 3,
        root_pose_feat: 256,
        root_local_feat: 64,
        root_global_feat: 64,
        root_mlp_layers: 2,
        root_conv: ConvDecoderConfig::root_head(512, conv),
        pose_n_embd: 1024,
        pose_n_head: 16,
        pose_ff: 2048,
        pose_layers: 16,
        pose_feat_width: 640,
        pose_root_width: 256,
        pose_length_width: 128,
        pose_mlp_layers: 2,
        code_heads: 8,
        codes: 10,
        code_dim: 32,
        decoder: ConvDecoderConfig::vq_decoder(256, conv),
    }
}

/// A small configuration with the released structure (token counts, 8 heads x 10 codes,
/// layer kinds, convolution depth and dilations) at the parity fixtures' reduced widths
/// (`tests/fixtures/motionbricks/meta.json` `reduced_widths`): what the host-API tests and
/// examples run on, a few MB of weights.
pub fn reduced() -> MotionBricksConfig {
    let r = released();
    let conv = ConvShape {
        width: 64,
        depth: 4,
        dilation_growth_rate: 3,
        down_t: r.down_t,
    };
    MotionBricksConfig {
        root_n_embd: 64,
        root_n_head: 2,
        root_layers_shared: 2,
        root_layers_token: 2,
        root_pose_feat: 32,
        root_local_feat: 16,
        root_global_feat: 16,
        root_conv: ConvDecoderConfig::root_head(64, conv),
        pose_n_embd: 128,
        pose_n_head: 2,
        pose_layers: 2,
        pose_feat_width: 64,
        pose_root_width: 32,
        pose_length_width: 16,
        code_dim: 8,
        decoder: ConvDecoderConfig::vq_decoder(64, conv),
        ..r
    }
}

/// Writes `m` as a model file [`MotionBricksModel::load`] reads (metadata and tensors as
/// `kinema convert motionbricks` lays them out, without source hashes), atomically.
pub fn write_model(m: &MotionBricksModel, path: &Path) -> Result<()> {
    let mut w = crate::formats::GgufWriter::new();
    m.config.write_metadata(&mut w)?;
    for (name, t) in &m.tensors {
        w.add_tensor(name.clone(), t)?;
    }
    crate::formats::write_atomic(path, |sink| {
        crate::models::kit::convert::write_gguf(&w, sink, 0, &mut |_| {})
    })
}

/// A model of `config` with the parity tests' synthetic weights ([`synthetic::tensor_values`]),
/// statistics mean 0 and deviation 1, and synthetic G1 constants (hinge `i` turns joint
/// `i + 1` about axis `i mod 3`, no rotation offsets): the arithmetic of a real model, not
/// its motion.
pub fn synthetic_model(config: MotionBricksConfig) -> Result<MotionBricksModel> {
    config.validate()?;
    let mut tensors = BTreeMap::new();
    for (name, shape) in config.tensor_shapes() {
        let n: usize = shape.iter().product();
        let t = match name.as_str() {
            names::STATS_MEAN => HostTensor::from_f32(&shape, &vec![0.0; n])?,
            names::STATS_STD => HostTensor::from_f32(&shape, &vec![1.0; n])?,
            names::G1_JOINTS => {
                let v: Vec<i32> = (0..HINGES)
                    .flat_map(|i| [i as i32 + 1, (i % 3) as i32])
                    .collect();
                HostTensor::from_i32(&shape, &v)?
            }
            names::G1_OFFSETS => {
                let eye = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
                let v: Vec<f32> = (0..BONES.len()).flat_map(|_| eye).collect();
                HostTensor::from_f32(&shape, &v)?
            }
            _ => HostTensor::from_f32(&shape, &synthetic::tensor_values(&name, &shape))?,
        };
        tensors.insert(name, t);
    }
    MotionBricksModel::from_tensors(config, tensors)
}

/// `batch` deterministic plan requests: values in [-1, 1) from the counter-based generator,
/// the first and last keyframe of each half given (root and pose), every length allowed and
/// the root model choosing it.
pub fn synthetic_inputs(c: &MotionBricksConfig, batch: usize) -> PlanInputs {
    let k = 2 * c.frames_per_token();
    let classes = c.max_tokens - c.min_tokens + 1;
    let values = |name: &str, n: usize| -> Vec<f32> {
        let seed = fnv1a64(name.as_bytes());
        (0..n as u64)
            .map(|i| rng::uniform(seed, i) * 2.0 - 1.0)
            .collect()
    };
    let half = k / 2;
    let has: Vec<bool> = (0..batch * k)
        .map(|i| {
            let f = i % k;
            f == 0 || f == half - 1 || f == half || f == k - 1
        })
        .collect();
    PlanInputs {
        batch,
        global_root_values: values("global_root_values", batch * k * dims::GLOBAL_ROOT),
        has_global_root_values: has.clone(),
        local_root_values: values("local_root_values", batch * k * dims::LOCAL_ROOT),
        has_local_root_values: has.clone(),
        local_poses: values("local_poses", batch * k * dims::EXTERNAL_POSE),
        has_local_poses: has,
        num_tokens: vec![masked_num_tokens(c) as i64; batch],
        allowed_pred_num_tokens: vec![true; batch * classes],
    }
}

/// What `kinema bench motionbricks` times.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// A model file to time instead of the synthetic released-width model.
    pub model: Option<PathBuf>,
    /// Plans per batch.
    pub batch: usize,
    /// Timed batches per sampling mode (after one untimed warm-up batch).
    pub plans: usize,
}

/// The time of one phase of a plan ([`super::plan::PlanTimes`]) over the timed runs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PhaseLatency {
    pub phase: String,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

/// The times of one sampling mode.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Latency {
    pub sampling: String,
    /// Compiling the planner's three graphs.
    pub build_s: f64,
    /// Per batch of plans, inputs to qpos.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    /// Per batch, phase by phase (host steps; per graph its upload, run and download), from
    /// a second set of as many runs ([`Planner::plan_timed`]).
    pub phases: Vec<PhaseLatency>,
}

/// The result of [`MotionBricks::bench`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct MotionBricksBench {
    pub backend: String,
    pub device: String,
    pub threads: usize,
    pub precision: String,
    /// `released (synthetic)` or the model file's path.
    pub model: String,
    /// Dtype of the weight matrices.
    pub weights: String,
    pub parameters: u64,
    /// Making (or loading) the weights, not part of a plan.
    pub weights_s: f64,
    pub batch: usize,
    /// Timed batches per sampling mode.
    pub plans: usize,
    pub argmax: Latency,
    pub gumbel: Latency,
}

impl BenchReport for MotionBricksBench {
    fn text(&self) -> String {
        let l = |x: &Latency| {
            format!(
                "{} p50 {:.2} ms, p99 {:.2} ms, mean {:.2} ms (build {:.2} s)",
                x.sampling, x.p50_ms, x.p99_ms, x.mean_ms, x.build_s
            )
        };
        let phases = |x: &Latency| {
            let p: Vec<String> = x
                .phases
                .iter()
                .map(|p| format!("{} {:.3}", p.phase, p.p50_ms))
                .collect();
            format!("\n  {} phases, p50 ms: {}", x.sampling, p.join(", "))
        };
        let text = format!(
            "motionbricks {} ({}, {} threads, {}, {} weights): {}, {:.1} M params, batch {}, \
             {} timed runs each: {}; {} (weights {:.1} s)",
            self.backend,
            self.device,
            self.threads,
            self.precision,
            self.weights,
            self.model,
            self.parameters as f64 / 1e6,
            self.batch,
            self.plans,
            l(&self.argmax),
            l(&self.gumbel),
            self.weights_s
        );
        text + &phases(&self.argmax) + &phases(&self.gumbel)
    }
}

fn time_plans<B: Backend>(
    b: &B,
    m: &MotionBricksModel,
    inputs: &PlanInputs,
    sampling: Sampling,
    plans: usize,
) -> Result<Latency> {
    let batch = inputs.batch;
    let t = Instant::now();
    let planner = Planner::new(b, m, batch, sampling)?;
    let build_s = t.elapsed().as_secs_f64();
    let mut ms = Vec::with_capacity(plans);
    let random =
        |r: u64| Randomness::Seeds((0..batch as u64).map(|i| r * batch as u64 + i).collect());
    // Run 0 warms the caches and is not timed; run r's plans use seeds r * batch + i.
    for r in 0..=plans as u64 {
        let random = random(r);
        let t = Instant::now();
        planner.plan(inputs, Some(&random))?;
        if r > 0 {
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    // The phases from as many runs again, each graph waited for before its download.
    let mut phases: Vec<(&'static str, Vec<f64>)> = Vec::new();
    for r in 1..=plans as u64 {
        let (_, times) = planner.plan_timed(inputs, Some(&random(r)))?;
        // Every run has the same phases in the same order.
        for (i, &(name, v)) in times.phases.iter().enumerate() {
            if phases.len() == i {
                phases.push((name, Vec::new()));
            }
            phases[i].1.push(v);
        }
    }
    let summary = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (
            quantile(&v, 0.5),
            quantile(&v, 0.99),
            v.iter().sum::<f64>() / v.len().max(1) as f64,
        )
    };
    let phases = phases
        .into_iter()
        .map(|(name, v)| {
            let (p50_ms, p99_ms, mean_ms) = summary(v);
            PhaseLatency {
                phase: name.to_string(),
                p50_ms,
                p99_ms,
                mean_ms,
            }
        })
        .collect();
    let (p50_ms, p99_ms, mean_ms) = summary(ms);
    Ok(Latency {
        sampling: sampling.name().to_string(),
        build_s,
        p50_ms,
        p99_ms,
        mean_ms,
        phases,
    })
}

/// Weights and biases (statistics and G1 constants not counted).
fn parameters(m: &MotionBricksModel) -> u64 {
    m.tensors
        .iter()
        .filter(|(n, _)| !n.starts_with("stats.") && !n.starts_with("g1."))
        .map(|(_, t)| t.numel() as u64)
        .sum()
}

/// The dtype of the weight matrices (the pose model's first; the converter writes them all
/// alike).
fn weight_dtype(m: &MotionBricksModel) -> DType {
    m.tensors
        .iter()
        .find(|(n, t)| n.starts_with(names::POSE) && t.shape.len() == 2)
        .map_or(DType::F32, |(_, t)| t.dtype)
}

impl ModelHarness for MotionBricks {
    const NAME: &'static str = "motionbricks";

    type BenchOptions = BenchOptions;
    type BenchReport = MotionBricksBench;
    fn bench<B: Backend>(b: &B, o: &BenchOptions) -> Result<MotionBricksBench> {
        if o.plans == 0 {
            return Err(Error::InvalidArgument(
                "--plans 0: time at least one batch".into(),
            ));
        }
        let t = Instant::now();
        let (m, label) = match &o.model {
            Some(p) => (MotionBricksModel::load(p)?, p.display().to_string()),
            None => (
                synthetic_model(released())?,
                "released widths (synthetic)".to_string(),
            ),
        };
        let weights_s = t.elapsed().as_secs_f64();
        let inputs = synthetic_inputs(&m.config, o.batch);
        inputs.validate(&m.config)?;
        let argmax = time_plans(b, &m, &inputs, Sampling::Argmax, o.plans)?;
        let gumbel = time_plans(b, &m, &inputs, Sampling::Gumbel, o.plans)?;
        let info = b.info();
        Ok(MotionBricksBench {
            backend: info.kind.to_string(),
            device: info.device,
            threads: info.threads,
            precision: info.precision.name().to_string(),
            model: label,
            weights: weight_dtype(&m).name().to_string(),
            parameters: parameters(&m),
            weights_s,
            batch: o.batch,
            plans: o.plans,
            argmax,
            gumbel,
        })
    }

    type DriftOptions = DriftOptions;
    type Drift = MotionBricksDrift;
    fn drift(path: &Path, o: &DriftOptions) -> Result<MotionBricksDrift> {
        let model = MotionBricksModel::load(path)?;
        let inputs = synthetic_inputs(&model.config, o.batch);
        inputs.validate(&model.config)?;
        Ok(MotionBricksDrift {
            model,
            inputs,
            sampling: o.sampling,
            seed: o.seed,
        })
    }
}

/// What `kinema drift --model` runs on a MotionBricks file.
#[derive(Clone, Debug)]
pub struct DriftOptions {
    /// Plans in the batch ([`synthetic_inputs`]).
    pub batch: usize,
    pub sampling: Sampling,
    /// Gumbel: plan `i` uses the uniform stream `seed + i`.
    pub seed: u64,
}

/// A MotionBricks file loaded for `kinema drift --model`, with the batch's inputs.
pub struct MotionBricksDrift {
    model: MotionBricksModel,
    inputs: PlanInputs,
    sampling: Sampling,
    seed: u64,
}

impl DriftRun for MotionBricksDrift {
    type Trace = PlanOutput;

    fn describe(&self) -> String {
        let c = &self.model.config;
        format!(
            "{} plan(s), {}, {} tokens x {} heads, {} frames",
            self.inputs.batch,
            self.sampling.name(),
            c.max_tokens,
            c.code_heads,
            c.max_frames()
        )
    }

    fn trace<B: Backend>(&self, b: &B) -> Result<PlanOutput> {
        let planner = Planner::new(b, &self.model, self.inputs.batch, self.sampling)?;
        let random = Randomness::Seeds(
            (0..self.inputs.batch as u64)
                .map(|i| self.seed.wrapping_add(i))
                .collect(),
        );
        planner.plan(&self.inputs, Some(&random))
    }

    fn compare(&self, label: &str, reference: &PlanOutput, got: &PlanOutput) -> Vec<Drift> {
        let c = &self.model.config;
        let b = self.inputs.batch;
        let (t, f) = (c.max_tokens, c.max_frames());
        let classes = c.max_tokens - c.min_tokens + 2;
        let f32s = |name: &str, shape: String, want: &[f32], have: &[f32]| {
            compare(
                name,
                &shape,
                DType::F32,
                label,
                &Output::F32(want.to_vec()),
                &Output::F32(have.to_vec()),
            )
        };
        let (r, g) = (reference, got);
        vec![
            f32s(
                "length logits",
                format!("{b}x{classes}"),
                &r.length_logits_raw,
                &g.length_logits_raw,
            ),
            f32s(
                "root stage 2",
                format!("{b}x{t}x{}", c.root_n_embd),
                &r.root_stage2,
                &g.root_stage2,
            ),
            f32s(
                "root trajectory",
                format!("{b}x{f}x{}", dims::GLOBAL_ROOT),
                &r.root_global,
                &g.root_global,
            ),
            f32s(
                "pose logits",
                format!("{b}x{t}x{}x{}", c.code_heads, c.codes),
                &r.pose_logits,
                &g.pose_logits,
            ),
            compare(
                "pose tokens",
                &format!("{b}x{t}x{}", c.code_heads),
                DType::U32,
                label,
                &Output::U32(r.pose_tokens.clone()),
                &Output::U32(g.pose_tokens.clone()),
            ),
            f32s(
                "decoder output",
                format!("{b}x{f}x{}", dims::LOCAL_REP),
                &r.decoded,
                &g.decoded,
            ),
            f32s(
                "features",
                format!("{b}x{f}x{}", dims::GLOBAL_REP),
                &r.features,
                &g.features,
            ),
            f32s("qpos", format!("{b}x{f}x{}", dims::QPOS), &r.qpos, &g.qpos),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_widths_match_the_upstream_parameter_count() {
        let c = released();
        c.validate().unwrap();
        // `motionbricks.md` section 2.2: the root model has 34,122,833 parameters.
        let root: usize = c
            .root_tensor_shapes()
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum();
        assert_eq!(root, 34_122_833);
    }

    #[test]
    fn synthetic_inputs_are_valid_and_deterministic() {
        let c = released();
        let a = synthetic_inputs(&c, 3);
        a.validate(&c).unwrap();
        assert_eq!(a.local_poses, synthetic_inputs(&c, 3).local_poses);
        assert!(a.local_poses.iter().all(|x| (-1.0..1.0).contains(x)));
    }
}
