//! Row ops, one workgroup per row: layer_norm, add_layer_norm, rms_norm and softmax, each as a strict shader
//! (fixed reduction trees) and a fast-mode variant on subgroup arithmetic.

use super::super::context::Limits;
use super::super::recording::Arg::{self, Absent, In, Out};
use super::super::recording::VulkanRecording;
use super::super::shaders::{Shader, push};
use super::{Ref, dispatch_1d, u32_of};
use crate::error::Result;
use crate::ops::{NormParams, SoftmaxParams};

/// Workgroup size of the one-workgroup-per-row shaders (norms, softmax): a power of two (their
/// tree reductions need one) of at least 32 and at most 256 invocations, no wider than the
/// row needs, within the device's limits. Longer rows loop in workgroup-size strides.
fn row_workgroup(cols: usize, l: &Limits) -> u32 {
    let cap = 256
        .min(l.max_workgroup_size[0])
        .min(l.max_workgroup_invocations);
    let cap = 1u32 << cap.ilog2();
    (cols.clamp(32, 256).next_power_of_two() as u32).min(cap)
}

/// The row shader `strict` or its subgroup-reduction variant `fast`: the variant in fast mode
/// on a device whose compute shaders have subgroup arithmetic.
fn row_shader(l: &Limits, fast_rows: bool, strict: Shader, fast: Shader) -> Shader {
    if fast_rows && l.subgroup_arithmetic {
        fast
    } else {
        strict
    }
}

/// One workgroup per row of a `rows x cols` operand (the shaders index rows over x and y), on
/// `strict` or, with `fast_rows`, its variant `fast` ([`row_shader`]). The element count must
/// fit the shaders' u32 indices.
fn row_dispatch<P: bytemuck::Pod>(
    rec: &mut VulkanRecording,
    op: &'static str,
    [strict, fast]: [Shader; 2],
    fast_rows: bool,
    args: &[Arg<'_>],
    push: P,
    rows: usize,
    cols: usize,
) -> Result<()> {
    u32_of(op, "rows * cols", rows * cols)?;
    let shader = row_shader(rec.limits(), fast_rows, strict, fast);
    let wg = row_workgroup(cols, rec.limits());
    dispatch_1d(rec, op, shader, wg, args, push, rows as u64 * u64::from(wg))
}

pub(crate) fn layer_norm(
    rec: &mut VulkanRecording,
    p: &NormParams,
    x: &Ref,
    gamma: Option<&Ref>,
    beta: Option<&Ref>,
    y: &Ref,
    fast_rows: bool,
) -> Result<()> {
    let norm = layer_norm_tail("layer_norm", p, gamma, beta)?;
    let push = push::LayerNorm {
        norm,
        ..Default::default()
    };
    let args = [
        In(x),
        gamma.map_or(Absent, In),
        beta.map_or(Absent, In),
        Out(y),
    ];
    let shaders = [Shader::LayerNorm, Shader::LayerNormSg];
    row_dispatch(
        rec,
        "layer_norm",
        shaders,
        fast_rows,
        &args,
        push,
        p.rows,
        p.cols,
    )
}

/// [`layer_norm`] of `x + r` (`layer_norm.comp` with `RESIDUAL`: `r` at binding 1).
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_layer_norm(
    rec: &mut VulkanRecording,
    p: &NormParams,
    x: &Ref,
    r: &Ref,
    gamma: Option<&Ref>,
    beta: Option<&Ref>,
    y: &Ref,
    fast_rows: bool,
) -> Result<()> {
    const OP: &str = "add_layer_norm";
    let norm = layer_norm_tail(OP, p, gamma, beta)?;
    let push = push::AddLayerNorm {
        norm,
        ..Default::default()
    };
    let (g, b) = (gamma.map_or(Absent, In), beta.map_or(Absent, In));
    let args = [In(x), In(r), g, b, Out(y)];
    let shaders = [Shader::AddLayerNorm, Shader::AddLayerNormSg];
    row_dispatch(rec, OP, shaders, fast_rows, &args, push, p.rows, p.cols)
}

/// The push constants both LayerNorm shaders share after their operand offsets.
fn layer_norm_tail(
    op: &'static str,
    p: &NormParams,
    gamma: Option<&Ref>,
    beta: Option<&Ref>,
) -> Result<push::LayerNormTail> {
    Ok(push::LayerNormTail {
        rows: u32_of(op, "rows", p.rows)?,
        cols: u32_of(op, "cols", p.cols)?,
        eps: p.eps,
        has_gamma: u32::from(gamma.is_some()),
        has_beta: u32::from(beta.is_some()),
    })
}

pub(crate) fn rms_norm(
    rec: &mut VulkanRecording,
    p: &NormParams,
    x: &Ref,
    gamma: Option<&Ref>,
    y: &Ref,
    fast_rows: bool,
) -> Result<()> {
    const OP: &str = "rms_norm";
    let push = push::RmsNorm {
        rows: u32_of(OP, "rows", p.rows)?,
        cols: u32_of(OP, "cols", p.cols)?,
        eps: p.eps,
        has_gamma: u32::from(gamma.is_some()),
        ..Default::default()
    };
    let args = [In(x), gamma.map_or(Absent, In), Out(y)];
    let shaders = [Shader::RmsNorm, Shader::RmsNormSg];
    row_dispatch(rec, OP, shaders, fast_rows, &args, push, p.rows, p.cols)
}

pub(crate) fn softmax(
    rec: &mut VulkanRecording,
    p: &SoftmaxParams,
    x: &Ref,
    y: &Ref,
    fast_rows: bool,
) -> Result<()> {
    const OP: &str = "softmax";
    let push = push::Softmax {
        rows: u32_of(OP, "rows", p.rows)?,
        cols: u32_of(OP, "cols", p.cols)?,
        scale: p.scale,
        ..Default::default()
    };
    let shaders = [Shader::Softmax, Shader::SoftmaxSg];
    row_dispatch(
        rec,
        OP,
        shaders,
        fast_rows,
        &[In(x), Out(y)],
        push,
        p.rows,
        p.cols,
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_limits as limits;
    use super::*;

    #[test]
    fn row_workgroups_are_powers_of_two_within_limits() {
        let l = limits(1024, 32768);
        assert_eq!(row_workgroup(1, &l), 32);
        assert_eq!(row_workgroup(100, &l), 128);
        assert_eq!(row_workgroup(5000, &l), 256);
        assert_eq!(row_workgroup(5000, &limits(200, 32768)), 128);
    }

    #[test]
    fn fast_rows_need_subgroup_arithmetic() {
        let mut l = limits(1024, 32768);
        let pick = |l: &Limits, fast| row_shader(l, fast, Shader::Softmax, Shader::SoftmaxSg);
        assert_eq!(pick(&l, false), Shader::Softmax);
        assert_eq!(pick(&l, true), Shader::SoftmaxSg);
        l.subgroup_arithmetic = false;
        assert_eq!(pick(&l, true), Shader::Softmax);
    }
}
