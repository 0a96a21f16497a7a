//! What one batch of plans takes and gives: [`PlanInputs`] (checked by
//! [`PlanInputs::validate`]), [`Randomness`], [`PlanOutput`].

use super::super::config::{MotionBricksConfig, dims};
use crate::{Error, Result};

/// The "length not given" value of `num_tokens` is `max_tokens + 2`
/// (`root_backbone.py#L302-304`).
pub fn masked_num_tokens(c: &MotionBricksConfig) -> usize {
    c.max_tokens + 2
}

/// `predict`'s tensor arguments for `batch` plans, row-major, unnormalized.
#[derive(Clone, Debug, Default)]
pub struct PlanInputs {
    pub batch: usize,
    /// `[batch, 8, 5]`.
    pub global_root_values: Vec<f32>,
    /// `[batch, 8]`.
    pub has_global_root_values: Vec<bool>,
    /// `[batch, 8, 4]`.
    pub local_root_values: Vec<f32>,
    pub has_local_root_values: Vec<bool>,
    /// `[batch, 8, 303]`.
    pub local_poses: Vec<f32>,
    pub has_local_poses: Vec<bool>,
    /// `[batch]`: a length in `min..=max` tokens, or `max + 2` to let the root model choose.
    pub num_tokens: Vec<i64>,
    /// `[batch, max - min + 1]`: the lengths the root model may choose.
    pub allowed_pred_num_tokens: Vec<bool>,
}

/// Where the Gumbel uniforms come from.
#[derive(Clone, Debug)]
pub enum Randomness {
    /// One private SplitMix64 stream per plan.
    Seeds(Vec<u64>),
    /// Given uniforms, `[batch, max_tokens, heads, codes]`.
    Uniforms(Vec<f32>),
}

/// Everything one batch of plans produced (row-major, batch first).
#[derive(Clone, Debug, Default)]
pub struct PlanOutput {
    /// `[batch]`: the chosen lengths in tokens.
    pub num_tokens: Vec<u32>,
    /// `[batch, 8, 304]` etc.: the normalized root-model inputs.
    pub norm_global_root: Vec<f32>,
    pub norm_local_root: Vec<f32>,
    pub norm_poses: Vec<f32>,
    /// `[batch, classes]`: raw and masked (-inf) length logits.
    pub length_logits_raw: Vec<f32>,
    pub length_logits: Vec<f32>,
    /// `[batch, max_tokens, E_root]`.
    pub root_stage2: Vec<f32>,
    /// `[batch, frames, 5]`: normalized global root trajectory.
    pub root_global: Vec<f32>,
    /// `[batch, frames, 4]`: normalized local root (after the last-frame fix).
    pub root_local: Vec<f32>,
    /// `[batch, frames, 304]` and `[batch, frames]`: the dense pose conditions.
    pub pose_cond: Vec<f32>,
    pub has_pose_cond: Vec<bool>,
    /// `[batch, max_tokens, heads, codes]`.
    pub pose_logits: Vec<f32>,
    /// `[batch, max_tokens, heads, codes]` (Gumbel only).
    pub uniforms: Vec<f32>,
    /// `[batch, max_tokens, heads]`.
    pub pose_tokens: Vec<u32>,
    /// `[batch, frames, 413]`: normalized decoder output.
    pub decoded: Vec<f32>,
    /// `[batch, frames, 414]`: the global features `predict` returns.
    pub features: Vec<f32>,
    /// `[batch, frames, 36]`: G1 MuJoCo qpos (root xyz, root quaternion w x y z, 29 hinges).
    pub qpos: Vec<f32>,
}

pub(super) fn bad(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

impl PlanInputs {
    /// Shapes, finite values, lengths in range, a non-empty allowed mask.
    pub fn validate(&self, c: &MotionBricksConfig) -> Result<()> {
        let b = self.batch;
        if !(1..=64).contains(&b) {
            return Err(bad(format!("batch {b}: expected 1 to 64 plans")));
        }
        let k = 2 * c.frames_per_token();
        let classes = c.max_tokens - c.min_tokens + 1;
        let sizes: [(&str, usize, usize); 8] = [
            (
                "global_root_values",
                self.global_root_values.len(),
                b * k * dims::GLOBAL_ROOT,
            ),
            (
                "has_global_root_values",
                self.has_global_root_values.len(),
                b * k,
            ),
            (
                "local_root_values",
                self.local_root_values.len(),
                b * k * dims::LOCAL_ROOT,
            ),
            (
                "has_local_root_values",
                self.has_local_root_values.len(),
                b * k,
            ),
            (
                "local_poses",
                self.local_poses.len(),
                b * k * dims::EXTERNAL_POSE,
            ),
            ("has_local_poses", self.has_local_poses.len(), b * k),
            ("num_tokens", self.num_tokens.len(), b),
            (
                "allowed_pred_num_tokens",
                self.allowed_pred_num_tokens.len(),
                b * classes,
            ),
        ];
        for (n, got, want) in sizes {
            if got != want {
                return Err(Error::Shape(format!(
                    "{n}: {got} values, expected {want} for {b} plan(s)"
                )));
            }
        }
        for (n, v) in [
            ("global_root_values", &self.global_root_values),
            ("local_root_values", &self.local_root_values),
            ("local_poses", &self.local_poses),
        ] {
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                return Err(bad(format!("{n}[{i}] is {}, not a finite number", v[i])));
            }
        }
        let masked = masked_num_tokens(c) as i64;
        for (i, &n) in self.num_tokens.iter().enumerate() {
            let free = n == masked;
            if !free && !(c.min_tokens as i64..=c.max_tokens as i64).contains(&n) {
                return Err(bad(format!(
                    "num_tokens[{i}] = {n}: expected {}..={} or {masked} (choose)",
                    c.min_tokens, c.max_tokens
                )));
            }
            if free && !self.allowed_pred_num_tokens[i * classes..(i + 1) * classes].contains(&true)
            {
                return Err(bad(format!(
                    "allowed_pred_num_tokens[{i}] allows no length"
                )));
            }
        }
        Ok(())
    }
}
