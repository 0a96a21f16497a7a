//! `kinema plan`: `predict`'s tensor arguments from an npz, one batch of plans, the results to
//! an npz (issue 12 part 4).
//!
//! `inputs.npz` holds `global_root_values [B,8,5]`, `has_global_root_values [B,8]`,
//! `local_root_values [B,8,4]`, `has_local_root_values [B,8]`, `local_poses [B,8,303]`,
//! `has_local_poses [B,8]`, `num_tokens [B]` (or `[B,1]`; `max_tokens + 2` = choose) and
//! `allowed_pred_num_tokens [B,11]` (flags as bool or 0/1 integers). The output holds
//! `num_tokens`, `pose_tokens [16,8]`, `features [64,414]` and `qpos [64,36]`, plus with
//! diagnostics the root output, the raw and masked duration logits, the pose logits, the
//! decoder output and the uniforms; the batch dimension is kept when B > 1. With `--seed S`,
//! plan `b` draws from the stream of seed `S + b`.

use std::path::{Path, PathBuf};

use super::config::{MotionBricksConfig, dims};
use super::model::MotionBricksModel;
use super::plan::{PlanInputs, PlanOutput, Planner, Randomness};
use super::sampler::Sampling;
use crate::backend::Backend;
use crate::formats::{NpyArray, NpyDType, NpzReader, NpzWriter, npy};
use crate::models::kit::output::{OutputPlan, Outputs};
use crate::{Error, Result};

/// What `kinema plan` was asked for.
#[derive(Clone, Debug)]
pub struct PlanRequest {
    /// The model file.
    pub model: PathBuf,
    /// `inputs.npz`.
    pub inputs: PathBuf,
    pub sampling: Sampling,
    /// Gumbel uniforms `[B,16,8,10]` (`[16,8,10]` for one plan) from a `.npy`.
    pub uniforms: Option<PathBuf>,
    pub seed: Option<u64>,
    pub diagnostics: bool,
    pub output: PathBuf,
}

fn bad(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

fn array(z: &NpzReader, name: &str, shape: &[usize]) -> Result<NpyArray> {
    let a = z
        .array(name)
        .map_err(|e| bad(format!("inputs: {name}: {e}")))?;
    if a.shape != shape {
        return Err(Error::Shape(format!(
            "inputs: {name} has shape {:?}, expected {shape:?}",
            a.shape
        )));
    }
    Ok(a)
}

fn floats(z: &NpzReader, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    let a = array(z, name, shape)?;
    if !matches!(a.dtype, NpyDType::F32 | NpyDType::F64 | NpyDType::F16) {
        return Err(bad(format!(
            "inputs: {name} is {}, expected floats",
            a.dtype
        )));
    }
    a.to_f32()
}

fn flags(z: &NpzReader, name: &str, shape: &[usize]) -> Result<Vec<bool>> {
    let a = array(z, name, shape)?;
    if matches!(a.dtype, NpyDType::F32 | NpyDType::F64 | NpyDType::F16) {
        return Err(bad(format!(
            "inputs: {name} is {}, expected bool or 0/1 integers",
            a.dtype
        )));
    }
    a.to_i64()?
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad(format!("inputs: {name}[{i}] = {v}, expected 0 or 1"))),
        })
        .collect()
}

/// Read `predict`'s arguments from `inputs.npz`.
pub fn read_inputs(path: &Path, m: &MotionBricksModel) -> Result<PlanInputs> {
    let c = &m.config;
    let z = NpzReader::open(path)?;
    read_inputs_npz(&z, c.frames_per_token(), c.min_tokens, c.max_tokens)
}

/// Read `predict`'s arguments from an opened `inputs.npz`, for a model with
/// `frames_per_token` frames per token and plans of `min_tokens..=max_tokens` tokens.
pub fn read_inputs_npz(
    z: &NpzReader,
    frames_per_token: usize,
    min_tokens: usize,
    max_tokens: usize,
) -> Result<PlanInputs> {
    if min_tokens > max_tokens {
        return Err(bad(format!(
            "inputs: min_tokens {min_tokens} is above max_tokens {max_tokens}"
        )));
    }
    let g = z
        .array("global_root_values")
        .map_err(|e| bad(format!("inputs: global_root_values: {e}")))?;
    let b = match g.shape.as_slice() {
        [b, _, _] => *b,
        s => {
            return Err(Error::Shape(format!(
                "inputs: global_root_values has shape {s:?}, expected [B, 8, 5]"
            )));
        }
    };
    let k = 2 * frames_per_token;
    let classes = max_tokens - min_tokens + 1;
    let nt = z
        .array("num_tokens")
        .map_err(|e| bad(format!("inputs: num_tokens: {e}")))?;
    if !(nt.shape == [b] || nt.shape == [b, 1]) {
        return Err(Error::Shape(format!(
            "inputs: num_tokens has shape {:?}, expected [{b}] or [{b}, 1]",
            nt.shape
        )));
    }
    if matches!(nt.dtype, NpyDType::F32 | NpyDType::F64 | NpyDType::F16) {
        return Err(bad(format!(
            "inputs: num_tokens is {}, expected integers",
            nt.dtype
        )));
    }
    Ok(PlanInputs {
        batch: b,
        global_root_values: floats(z, "global_root_values", &[b, k, dims::GLOBAL_ROOT])?,
        has_global_root_values: flags(z, "has_global_root_values", &[b, k])?,
        local_root_values: floats(z, "local_root_values", &[b, k, dims::LOCAL_ROOT])?,
        has_local_root_values: flags(z, "has_local_root_values", &[b, k])?,
        local_poses: floats(z, "local_poses", &[b, k, dims::EXTERNAL_POSE])?,
        has_local_poses: flags(z, "has_local_poses", &[b, k])?,
        num_tokens: nt.to_i64()?,
        allowed_pred_num_tokens: flags(z, "allowed_pred_num_tokens", &[b, classes])?,
    })
}

/// The seeds of a batch of `batch` plans asked for with seed `seed`: plan `b` draws from the
/// stream of `seed + b` (wrapping), so plan 0 of any batch repeats a single plan's draws.
pub fn plan_seeds(seed: u64, batch: usize) -> Vec<u64> {
    (0..batch as u64).map(|i| seed.wrapping_add(i)).collect()
}

/// The shape of given Gumbel uniforms for `batch` plans: `[batch, max_tokens, heads, codes]`,
/// `[max_tokens, heads, codes]` for one plan.
pub fn uniforms_shape(c: &MotionBricksConfig, batch: usize) -> Vec<usize> {
    shaped(batch, &[c.max_tokens, c.code_heads, c.codes])
}

/// One batch of plans on a loaded model with checked inputs, the part `kinema plan` and the
/// host API share: the graphs for the batch size and sampling mode, then the plan.
pub fn run_plan<B: Backend>(
    backend: &B,
    m: &MotionBricksModel,
    inputs: &PlanInputs,
    sampling: Sampling,
    random: Option<&Randomness>,
) -> Result<PlanOutput> {
    let planner = Planner::new(backend, m, inputs.batch, sampling)?;
    planner.plan(inputs, random)
}

/// The shape with the batch dimension dropped when there is one plan.
fn shaped(b: usize, rest: &[usize]) -> Vec<usize> {
    let mut s = if b == 1 { vec![] } else { vec![b] };
    s.extend_from_slice(rest);
    s
}

/// The plan npz, staged in `outputs` (renamed into place at its commit).
pub fn write_output(
    outputs: &mut Outputs,
    path: &Path,
    m: &MotionBricksModel,
    o: &PlanOutput,
    b: usize,
    diagnostics: bool,
) -> Result<()> {
    let c = &m.config;
    let (t, h, k, f) = (c.max_tokens, c.code_heads, c.codes, c.max_frames());
    let mut w = NpzWriter::new();
    let n: Vec<i64> = o.num_tokens.iter().map(|&v| v as i64).collect();
    w.add("num_tokens", &NpyArray::from_i64(&[b], &n)?)?;
    let tok: Vec<i64> = o.pose_tokens.iter().map(|&v| v as i64).collect();
    w.add(
        "pose_tokens",
        &NpyArray::from_i64(&shaped(b, &[t, h]), &tok)?,
    )?;
    w.add(
        "features",
        &NpyArray::from_f32(&shaped(b, &[f, dims::GLOBAL_REP]), &o.features)?,
    )?;
    w.add(
        "qpos",
        &NpyArray::from_f32(&shaped(b, &[f, dims::QPOS]), &o.qpos)?,
    )?;
    if diagnostics {
        let cl = c.length_classes();
        w.add(
            "root_output",
            &NpyArray::from_f32(&shaped(b, &[f, dims::GLOBAL_ROOT]), &o.root_global)?,
        )?;
        w.add(
            "local_root",
            &NpyArray::from_f32(&shaped(b, &[f, dims::LOCAL_ROOT]), &o.root_local)?,
        )?;
        w.add(
            "duration_logits",
            &NpyArray::from_f32(&shaped(b, &[cl]), &o.length_logits_raw)?,
        )?;
        w.add(
            "duration_logits_masked",
            &NpyArray::from_f32(&shaped(b, &[cl]), &o.length_logits)?,
        )?;
        w.add(
            "pose_logits",
            &NpyArray::from_f32(&shaped(b, &[t, h, k]), &o.pose_logits)?,
        )?;
        w.add(
            "decoder_output",
            &NpyArray::from_f32(&shaped(b, &[f, dims::LOCAL_REP]), &o.decoded)?,
        )?;
        if !o.uniforms.is_empty() {
            w.add(
                "uniforms",
                &NpyArray::from_f32(&shaped(b, &[t, h, k]), &o.uniforms)?,
            )?;
        }
    }
    outputs.write(path, |sink| {
        w.write_to(sink)
            .map_err(|e| std::io::Error::other(e.to_string()))
    })
}

/// Run `kinema plan` on `backend`: read, plan, write. The output is checked before any work
/// (see [`OutputPlan`]: it may not be an input, nor anything but a regular file); nothing is
/// written on an error.
pub fn plan_file<B: Backend>(backend: &B, req: &PlanRequest) -> Result<PlanOutput> {
    let mut plan = OutputPlan::new();
    plan.input(&req.model, "--model")
        .input(&req.inputs, "--inputs");
    if let Some(u) = &req.uniforms {
        plan.input(u, "--uniforms");
    }
    let mut outputs = plan.output(&req.output, "--output").check()?;
    let m = MotionBricksModel::load(&req.model)?;
    let inputs = read_inputs(&req.inputs, &m)?;
    inputs.validate(&m.config)?;
    let b = inputs.batch;
    let c = &m.config;
    let n = c.max_tokens * c.code_heads * c.codes;
    let random = match (req.sampling, &req.uniforms, req.seed) {
        (Sampling::Argmax, None, None) => None,
        (Sampling::Argmax, _, _) => {
            return Err(bad(
                "--uniforms and --seed apply to --sampling gumbel only".into()
            ));
        }
        (Sampling::Gumbel, Some(_), Some(_)) => {
            return Err(bad("give --uniforms or --seed, not both".into()));
        }
        (Sampling::Gumbel, Some(p), None) => {
            let a = npy::read_file(p)?;
            let want = uniforms_shape(c, b);
            if a.shape != want || a.dtype != NpyDType::F32 {
                return Err(bad(format!(
                    "--uniforms {}: {} {:?}, expected float32 {want:?}",
                    p.display(),
                    a.dtype,
                    a.shape
                )));
            }
            Some(Randomness::Uniforms(a.to_f32()?))
        }
        (Sampling::Gumbel, None, seed) => Some(Randomness::Seeds(plan_seeds(seed.unwrap_or(0), b))),
    };
    let out = run_plan(backend, &m, &inputs, req.sampling, random.as_ref())?;
    debug_assert_eq!(out.pose_logits.len(), b * n);
    write_output(&mut outputs, &req.output, &m, &out, b, req.diagnostics)?;
    outputs.commit()?;
    Ok(out)
}
