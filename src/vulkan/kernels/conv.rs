//! The convolution stack's ops: conv1d (an implicit GEMM, tile from
//! [`gemm_policy::conv_tile`](super::gemm_policy::conv_tile)) and nearest 2x upsampling.

use super::super::recording::Arg::{Absent, In, Out};
use super::super::recording::{Dispatch, VulkanRecording};
use super::super::shaders::{Shader, push};
use super::gemm_policy::{Forced, conv_tile};
use super::{Ref, elementwise, tile_groups, u32_of};
use crate::error::Result;
use crate::ops::{Conv1dParams, UpsampleParams};

/// `x`, `w`, `bias`, `y` as checked by `check::conv1d`.
pub(crate) fn conv1d(
    rec: &mut VulkanRecording,
    p: &Conv1dParams,
    x: &Ref,
    w: &Ref,
    bias: Option<&Ref>,
    y: &Ref,
) -> Result<()> {
    const OP: &str = "conv1d";
    let out_len = p.out_len()?;
    let cols = p.batch * out_len;
    if cols == 0 || p.c_out == 0 {
        return Ok(());
    }
    let tile = conv_tile(rec.limits(), &Forced::from_env());
    // The reduction index ci * kernel + kk must fit the shader's u32 arithmetic.
    u32_of(OP, "c_in * kernel", p.c_in * p.kernel)?;
    let push = push::Conv1d {
        batch: u32_of(OP, "batch", p.batch)?,
        c_in: u32_of(OP, "c_in", p.c_in)?,
        c_out: u32_of(OP, "c_out", p.c_out)?,
        len: u32_of(OP, "len", p.len)?,
        kernel: u32_of(OP, "kernel", p.kernel)?,
        padding: u32_of(OP, "padding", p.padding)?,
        dilation: u32_of(OP, "dilation", p.dilation)?,
        out_len: u32_of(OP, "out_len", out_len)?,
        has_bias: u32::from(bias.is_some()),
        ..Default::default()
    };
    let groups = tile_groups(OP, [p.c_out, cols], [tile.bm, tile.bn], 1)?;
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::Conv1d,
        spec: &tile.spec(),
        args: &[In(x), In(w), bias.map_or(Absent, In), Out(y)],
        push,
        groups,
    })
}

pub(crate) fn upsample_nearest2x(
    rec: &mut VulkanRecording,
    p: &UpsampleParams,
    x: &Ref,
    y: &Ref,
) -> Result<()> {
    const OP: &str = "upsample_nearest2x";
    let n = 2 * p.rows * p.len;
    let push = push::Upsample {
        n: u32_of(OP, "output elements", n)?,
        ..Default::default()
    };
    let shader = Shader::UpsampleNearest2x;
    elementwise(rec, OP, shader, &[In(x), Out(y)], push, n)
}
