//! The convolution stack's ops: conv1d (an implicit GEMM: for few output columns on the
//! weight-streaming kernel where [`gemm_policy::conv_wants_stream`](super::gemm_policy::conv_wants_stream)
//! takes it, else tiled with [`gemm_policy::conv_tile`](super::gemm_policy::conv_tile)) and
//! nearest 2x upsampling.

use super::super::recording::Arg::{Absent, In, Out};
use super::super::recording::{Dispatch, VulkanRecording};
use super::super::shaders::{Shader, push};
use super::gemm_policy::{
    Forced, NARROW_FREE_PARTIAL_BYTES, StreamTile, conv_tile, conv_wants_stream,
    narrow_stream_tile, stream_splits,
};
use super::linear::{StreamRun, run_stream};
use super::{Ref, elementwise, float_dtype_code, tile_groups, u32_of};
use crate::error::Result;
use crate::ops::{Conv1dParams, UpsampleParams};
use crate::tensor::DType;

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
    let forced = Forced::from_env();
    // The reduction index ci * kernel + kk must fit the shader's u32 arithmetic.
    let red = p.c_in * p.kernel;
    u32_of(OP, "c_in * kernel", red)?;
    if conv_wants_stream([cols, p.c_out, red], &forced)
        && let Some(t) = narrow_stream_tile(cols, rec.limits(), &forced)
    {
        return conv1d_stream(rec, p, x, w, bias, y, &t, &forced);
    }
    let tile = conv_tile(rec.limits(), &forced);
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

/// [`conv1d`] on the weight-streaming kernel (`conv1d_stream`, `linear_stream.comp` with
/// `CONV`) with tile `t`: the implicit GEMM of m = batch out_len rows (the im2col rows,
/// gathered while staging), n = c_out columns and k = c_in kernel, one dispatch of
/// ceil(c_out / tile columns) x splits workgroups; with several splits of k the partial sums go
/// to scratch memory and `conv1d_stream_reduce` (or, with `KINEMA_VK_STREAM_FOLD=1`, each
/// column group's last workgroup) adds them in ascending split order, then the bias. Each output sums its products in the streaming kernel's fixed order (lanes, then
/// splits), not the tiled kernel's single chain: a different rounding within the same f32
/// bound.
#[allow(clippy::too_many_arguments)]
fn conv1d_stream(
    rec: &mut VulkanRecording,
    p: &Conv1dParams,
    x: &Ref,
    w: &Ref,
    bias: Option<&Ref>,
    y: &Ref,
    t: &StreamTile,
    forced: &Forced,
) -> Result<()> {
    const OP: &str = "conv1d";
    let limits = rec.limits().clone();
    let out_len = p.out_len()?;
    let (m, n, k) = (p.batch * out_len, p.c_out, p.c_in * p.kernel);
    let vec_ok = u32::from(limits.min_storage_offset_align.is_multiple_of(16));
    let spec = t.spec(float_dtype_code(DType::F32), vec_ok);
    let (splits, ks) = stream_splits(
        [m, n, k],
        4 * k,
        NARROW_FREE_PARTIAL_BYTES,
        t.grid(),
        &limits,
        forced,
    );
    let groups = [
        u32_of(OP, "column groups", n.div_ceil(t.columns() as usize))?,
        u32_of(OP, "splits of k", splits)?,
        1,
    ];
    let linear = push::LinearStream {
        m: u32_of(OP, "batch * out_len", m)?,
        n: u32_of(OP, "c_out", n)?,
        k: u32_of(OP, "c_in * kernel", k)?,
        ldy: u32_of(OP, "c_out", n)?,
        ks: u32_of(OP, "k per split", ks)?,
        epilogue: u32::from(splits == 1),
        has_bias: u32::from(bias.is_some()),
        fold: u32::from(forced.stream_fold()),
        ..Default::default()
    };
    let push = push::Conv1dStream {
        linear,
        batch: u32_of(OP, "batch", p.batch)?,
        c_in: u32_of(OP, "c_in", p.c_in)?,
        len: u32_of(OP, "len", p.len)?,
        kernel: u32_of(OP, "kernel", p.kernel)?,
        padding: u32_of(OP, "padding", p.padding)?,
        dilation: u32_of(OP, "dilation", p.dilation)?,
        out_len: u32_of(OP, "out_len", out_len)?,
    };
    run_stream(
        rec,
        StreamRun {
            op: OP,
            shaders: [Shader::Conv1dStream, Shader::Conv1dStreamReduce],
            spec: &spec,
            groups,
            splits,
            fold: forced.stream_fold(),
            outputs: m * n,
            operands: [x, w, y],
            bias,
            push,
            reduce_push: push::Conv1dStreamReduce {
                linear: push::LinearStreamReduce {
                    m: linear.m,
                    n: linear.n,
                    ldy: linear.ldy,
                    splits: u32_of(OP, "splits of k", splits)?,
                    has_bias: linear.has_bias,
                    ..Default::default()
                },
                out_len: push.out_len,
            },
        },
    )
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
