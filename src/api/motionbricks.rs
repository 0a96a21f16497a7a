//! [`MotionBricks`]: keyframe context and commands in, a robot motion plan out, through the
//! same [`run_plan`] as `kinema plan`.

use std::path::{Path, PathBuf};

use super::engine::Engine;
use super::{Progress, ProgressFn, Stage, report};
use crate::backend::Backend;
use crate::device::BackendVisitor;
use crate::models::motionbricks::config::{MotionBricksConfig, dims};
use crate::models::motionbricks::model::MotionBricksModel;
use crate::models::motionbricks::plan::{PlanInputs, PlanOutput, Randomness, masked_num_tokens};
use crate::models::motionbricks::run::{plan_seeds, run_plan};
use crate::models::motionbricks::sampler::{Sampling, check_uniforms};
use crate::{Error, Result};

/// Where Gumbel sampling's uniforms come from (argmax sampling draws nothing and ignores this).
#[derive(Clone, Debug, PartialEq)]
pub enum Draws {
    /// Plan `b` of the batch draws from its own SplitMix64 stream started at `seed + b`, so
    /// repeating model, inputs, seed and backend repeats the draws (`kinema plan --seed`).
    Seed(u64),
    /// Given uniforms in [0, 1], `[batch, max_tokens, heads, codes]` (`--uniforms`).
    Uniforms(Vec<f32>),
}

/// The float inputs by name, with their widths per keyframe.
const FLOATS: [(&str, usize); 3] = [
    ("global_root_values", dims::GLOBAL_ROOT),
    ("local_root_values", dims::LOCAL_ROOT),
    ("local_poses", dims::EXTERNAL_POSE),
];

/// The flag inputs by name.
const FLAGS: [&str; 4] = [
    "has_global_root_values",
    "has_local_root_values",
    "has_local_poses",
    "allowed_pred_num_tokens",
];

/// One batch of plans: upstream `predict`'s tensor arguments, addressed by their names, and
/// how tokens are sampled. Start from [`MotionBricks::request`], which sizes every input for
/// the batch and gives nothing (no keyframes, the length left to the model, every length
/// allowed, Gumbel from seed 0).
#[derive(Clone, Debug)]
pub struct PlanRequest {
    /// The inputs, row-major, batch first (the names and shapes of `kinema plan`'s
    /// `inputs.npz`).
    pub inputs: PlanInputs,
    /// Argmax or Gumbel (upstream `predict`'s default).
    pub sampling: Sampling,
    /// Gumbel's uniforms.
    pub draws: Draws,
}

impl PlanRequest {
    /// Sets the float input `name` (`global_root_values` `[B, K, 5]`, `local_root_values`
    /// `[B, K, 4]`, `local_poses` `[B, K, 303]`, K = 2 x frames per token = 8), row-major.
    pub fn set_floats(&mut self, name: &str, values: &[f32]) -> Result<()> {
        let i = &mut self.inputs;
        let slot = match name {
            "global_root_values" => &mut i.global_root_values,
            "local_root_values" => &mut i.local_root_values,
            "local_poses" => &mut i.local_poses,
            _ => return Err(unknown(name, "float", &FLOATS.map(|(n, _)| n))),
        };
        set(slot, values, name)
    }

    /// Sets the flag input `name` (`has_global_root_values`, `has_local_root_values`,
    /// `has_local_poses` `[B, K]`; `allowed_pred_num_tokens` `[B, max - min + 1]`).
    pub fn set_flags(&mut self, name: &str, values: &[bool]) -> Result<()> {
        let i = &mut self.inputs;
        let slot = match name {
            "has_global_root_values" => &mut i.has_global_root_values,
            "has_local_root_values" => &mut i.has_local_root_values,
            "has_local_poses" => &mut i.has_local_poses,
            "allowed_pred_num_tokens" => &mut i.allowed_pred_num_tokens,
            _ => return Err(unknown(name, "flag", &FLAGS)),
        };
        set(slot, values, name)
    }

    /// Sets `num_tokens` `[B]`: a length in `min..=max` tokens, or `max + 2` to let the root
    /// model choose among the allowed lengths.
    pub fn set_num_tokens(&mut self, values: &[i64]) -> Result<()> {
        set(&mut self.inputs.num_tokens, values, "num_tokens")
    }

    /// Plans in the batch.
    pub fn batch(&self) -> usize {
        self.inputs.batch
    }
}

fn unknown(name: &str, kind: &str, known: &[&str]) -> Error {
    Error::InvalidArgument(format!(
        "PlanRequest: no {kind} input named {name:?}; the {kind} inputs are {}",
        known.join(", ")
    ))
}

fn set<T: Copy>(slot: &mut [T], values: &[T], name: &str) -> Result<()> {
    if values.len() != slot.len() {
        return Err(Error::Shape(format!(
            "PlanRequest: {name} takes {} values for this batch, {} given",
            slot.len(),
            values.len()
        )));
    }
    slot.copy_from_slice(values);
    Ok(())
}

/// One batch of plans: the chosen lengths, tokens, features and G1 qpos, and everything the
/// plan computed on the way ([`Plan::output`]).
#[derive(Clone, Debug)]
pub struct Plan {
    output: PlanOutput,
    batch: usize,
    frames: usize,
    max_tokens: usize,
    code_heads: usize,
}

impl Plan {
    /// Plans in the batch B.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Frames per plan (padded: `max_tokens x frames per token`; plan `b` holds
    /// `num_tokens[b] x frames per token` of them).
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// `[B]` the lengths in tokens.
    pub fn num_tokens(&self) -> &[u32] {
        &self.output.num_tokens
    }

    /// `[B, max_tokens, heads]` the pose tokens.
    pub fn pose_tokens(&self) -> &[u32] {
        &self.output.pose_tokens
    }

    /// Tokens per plan (padded) and heads per token: the shape of [`Plan::pose_tokens`] after B.
    pub fn token_shape(&self) -> (usize, usize) {
        (self.max_tokens, self.code_heads)
    }

    /// `[B, frames, 414]` the global features upstream's `predict` returns.
    pub fn features(&self) -> &[f32] {
        &self.output.features
    }

    /// `[B, frames, 36]` G1 MuJoCo qpos: root xyz, root quaternion (w x y z), 29 hinges.
    pub fn qpos(&self) -> &[f32] {
        &self.output.qpos
    }

    /// Everything, diagnostics included (logits, root trajectory, decoder output, uniforms).
    pub fn output(&self) -> &PlanOutput {
        &self.output
    }

    /// [`Plan::output`], taken without copying its arrays.
    pub fn into_output(self) -> PlanOutput {
        self.output
    }
}

/// A loaded MotionBricks model on an [`Engine`]. `Send + Sync`: plans may run from several
/// threads at once.
pub struct MotionBricks {
    engine: Engine,
    model: MotionBricksModel,
    path: PathBuf,
}

impl MotionBricks {
    /// Opens a model written by `kinema convert motionbricks` (memory-mapped and checked).
    pub fn load(engine: &Engine, path: impl AsRef<Path>) -> Result<MotionBricks> {
        let path = path.as_ref();
        Ok(MotionBricks {
            engine: engine.clone(),
            model: MotionBricksModel::load(path)?,
            path: path.to_path_buf(),
        })
    }

    /// The model's hyperparameters.
    pub fn config(&self) -> &MotionBricksConfig {
        &self.model.config
    }

    /// The model as the internals hold it.
    pub fn model(&self) -> &MotionBricksModel {
        &self.model
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The engine it runs on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A request for `batch` plans (1 to 64) that gives nothing: every value 0 and not given,
    /// the length chosen by the model among all lengths, Gumbel sampling from seed 0.
    pub fn request(&self, batch: usize) -> Result<PlanRequest> {
        if !(1..=64).contains(&batch) {
            return Err(Error::InvalidArgument(format!(
                "batch {batch}: expected 1 to 64 plans"
            )));
        }
        let c = &self.model.config;
        let k = 2 * c.frames_per_token();
        let classes = c.max_tokens - c.min_tokens + 1;
        let n = batch * k;
        let inputs = PlanInputs {
            batch,
            global_root_values: vec![0.0; n * FLOATS[0].1],
            has_global_root_values: vec![false; n],
            local_root_values: vec![0.0; n * FLOATS[1].1],
            has_local_root_values: vec![false; n],
            local_poses: vec![0.0; n * FLOATS[2].1],
            has_local_poses: vec![false; n],
            num_tokens: vec![masked_num_tokens(c) as i64; batch],
            allowed_pred_num_tokens: vec![true; batch * classes],
        };
        Ok(PlanRequest {
            inputs,
            sampling: Sampling::Gumbel,
            draws: Draws::Seed(0),
        })
    }

    /// Plans one batch.
    pub fn plan(&self, req: &PlanRequest) -> Result<Plan> {
        self.plan_with_progress(req, &mut |_, _, _| Progress::Continue)
    }

    /// [`MotionBricks::plan`], calling `progress(Stage::Plan, 0, 1)` before and
    /// `(Stage::Plan, 1, 1)` after; a cancel before the plan returns [`Error::Cancelled`].
    pub fn plan_with_progress(
        &self,
        req: &PlanRequest,
        progress: &mut ProgressFn<'_>,
    ) -> Result<Plan> {
        let c = &self.model.config;
        req.inputs.validate(c)?;
        let b = req.inputs.batch;
        let random = match (req.sampling, &req.draws) {
            (Sampling::Argmax, _) => None,
            (Sampling::Gumbel, Draws::Seed(s)) => Some(Randomness::Seeds(plan_seeds(*s, b))),
            (Sampling::Gumbel, Draws::Uniforms(u)) => {
                check_uniforms(u, b * c.max_tokens * c.code_heads * c.codes).map_err(|e| {
                    Error::InvalidArgument(format!(
                        "PlanRequest.draws: {e} (shape [{b}, {}, {}, {}])",
                        c.max_tokens, c.code_heads, c.codes
                    ))
                })?;
                Some(Randomness::Uniforms(u.clone()))
            }
        };
        report(progress, Stage::Plan, 0, 1)?;
        let output = self.engine.backend().visit(Run {
            model: &self.model,
            inputs: &req.inputs,
            sampling: req.sampling,
            random: random.as_ref(),
        })?;
        report(progress, Stage::Plan, 1, 1)?;
        Ok(Plan {
            output,
            batch: b,
            frames: c.max_frames(),
            max_tokens: c.max_tokens,
            code_heads: c.code_heads,
        })
    }
}

impl std::fmt::Debug for MotionBricks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MotionBricks")
            .field("path", &self.path)
            .field("engine", &self.engine)
            .finish()
    }
}

/// [`run_plan`] on the engine's backend.
struct Run<'a> {
    model: &'a MotionBricksModel,
    inputs: &'a PlanInputs,
    sampling: Sampling,
    random: Option<&'a Randomness>,
}

impl BackendVisitor for Run<'_> {
    type Output = Result<PlanOutput>;
    fn visit<B: Backend>(self, b: &B) -> Result<PlanOutput> {
        run_plan(b, self.model, self.inputs, self.sampling, self.random)
    }
}
