//! The linear layer (`y = act(x w^T + b)`) on the kernel [`linear_kernel`] picks, split over
//! groups of weight rows where the weights exceed a binding; and the cooperative-matrix
//! multiply-add peak that its fast kernels are measured against.

use super::super::context::Coopmat2;
use super::super::probe::CoopMatShape;
use super::super::recording::Arg::{Absent, In, Out};
use super::super::recording::{Dispatch, VulkanRecording};
use super::super::shaders::{Shader, push};
use super::gemm_policy::{
    CoopFixed, DirectLayout, Forced, LinearKernel, StreamGrid, cm_stream_kernel, lane_gemm_kernel,
    linear_kernel, linear_stream_tile, split_kernel, stream_splits, wants_stream,
};
use super::{Ref, act_code, float_dtype_code, rows_per_binding, tile_groups, u32_of};
use crate::error::Result;
use crate::ops::LinearParams;
use bytemuck::Pod;

/// The matrix units a linear may run on, as the backend's precision and device allow.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GemmUnits {
    /// The cooperative-matrix shape of fast mode, on a device that has one.
    pub coopmat: Option<CoopMatShape>,
    /// Workgroup-scope matrices for fast mode.
    pub coopmat2: Option<Coopmat2>,
    /// The device's B fragment layout is the one the lane-loading streaming variants assume
    /// ([`super::gemm_policy::CM_LANE`]).
    pub lane: bool,
    /// Workgroup-scope matrices for split precision ([`split_kernel`]).
    pub split: Option<Coopmat2>,
}

/// `x`, `w`, `bias`, `y` as checked by `check::linear`: in split precision on the
/// split-operand kernel where [`split_kernel`] takes it; in fast mode on the lane-loading
/// kernel as a GEMM where [`lane_gemm_kernel`] takes it (Kimodo's 404 / 606-row linears), else
/// on the weight-streaming kernel where
/// [`wants_stream`] takes it (few rows and large weights, or as `KINEMA_VK_LINEAR` says: on
/// cooperative matrices in fast mode where [`cm_stream_kernel`] gives a variant), else
/// on the skinny kernel for few rows, else on cooperative matrices of shape `coopmat` when
/// given (fast mode on a device that has them), else on the strict f32 kernel
/// ([`linear_kernel`] decides). When the weight matrix does not fit one storage-buffer binding
/// (lavapipe allows 128 MiB) it is split into groups of output columns (weight rows), one
/// dispatch each.
pub(crate) fn linear(
    rec: &mut VulkanRecording,
    p: &LinearParams,
    x: &Ref,
    w: &Ref,
    bias: Option<&Ref>,
    y: &Ref,
    units: GemmUnits,
) -> Result<()> {
    let GemmUnits {
        coopmat,
        coopmat2,
        lane,
        split,
    } = units;
    const OP: &str = "linear";
    if p.m == 0 || p.n == 0 {
        return Ok(());
    }
    let limits = rec.limits();
    let forced = Forced::from_env();
    let mnk = [p.m, p.n, p.k];
    let w_dtype = float_dtype_code(w.dtype);
    let vec_ok = u32::from(limits.min_storage_offset_align.is_multiple_of(16));
    let row_bytes = w.dtype.bytes_for(p.k).expect("checked: whole q8_0 blocks") as u64;
    let rows = rows_per_binding(OP, "weight row", limits, row_bytes)?;
    let layout = DirectLayout::of(p.n, p.k, w.offset, rows, lane);
    let cm_kernel = |(v, shape): (CoopFixed, CoopMatShape)| StreamKernel {
        shader: v.shader,
        spec: v.tile.spec(&shape, limits.subgroup_size, w_dtype, vec_ok),
        grid: v.stream_grid(),
        free: 0,
    };
    if let Some(kernel) = split.and_then(|c2| split_kernel(mnk, w.dtype, &c2, limits, &forced)) {
        return linear_tiled(rec, p, x, w, bias, y, &kernel, rows);
    }
    if let Some(v) = lane_gemm_kernel(mnk, w.dtype, layout, coopmat, limits, &forced) {
        let k = cm_kernel(v);
        return linear_stream(rec, p, x, w, bias, y, &k, &forced);
    }
    if wants_stream(mnk, &forced) {
        if let Some(v) = cm_stream_kernel(mnk, w.dtype, layout, coopmat, limits, &forced) {
            let k = cm_kernel(v);
            return linear_stream(rec, p, x, w, bias, y, &k, &forced);
        }
        if let Some((t, free)) = linear_stream_tile([p.m, p.n, p.k], limits, &forced) {
            let k = StreamKernel {
                shader: Shader::LinearStream,
                spec: t.spec(w_dtype, vec_ok),
                grid: t.grid(),
                free,
            };
            return linear_stream(rec, p, x, w, bias, y, &k, &forced);
        }
    }
    let kernel = linear_kernel(mnk, w.dtype, coopmat, coopmat2, limits, &forced);
    linear_tiled(rec, p, x, w, bias, y, &kernel, rows)
}

/// [`linear`] on a tiled kernel (one workgroup a `bm` x `bn` output tile; `bm` 0: the skinny
/// kernel, whose workgroups walk every row), one dispatch per group of `rows` output columns;
/// x rounded to f16 first where the kernel reads it so.
#[allow(clippy::too_many_arguments)]
fn linear_tiled(
    rec: &mut VulkanRecording,
    p: &LinearParams,
    x: &Ref,
    w: &Ref,
    bias: Option<&Ref>,
    y: &Ref,
    kernel: &LinearKernel,
    rows: usize,
) -> Result<()> {
    const OP: &str = "linear";
    let x16 = if kernel.x16 {
        Some(cast_f16(rec, x, p.m * p.k, kernel.split)?)
    } else {
        None
    };
    let x = x16.as_ref().unwrap_or(x);
    let (act, slope) = act_code(p.activation);
    for_columns(p, rows, w, bias, y, |Columns { nc, ws, bs, ys }| {
        let push = push::Linear {
            m: u32_of(OP, "m", p.m)?,
            n: u32_of(OP, "n", nc)?,
            k: u32_of(OP, "k", p.k)?,
            ldy: u32_of(OP, "n", p.n)?,
            has_bias: u32::from(bs.is_some()),
            act,
            slope,
            ..Default::default()
        };
        // The skinny kernel (bm 0) walks every row in each workgroup.
        let rows = if kernel.bm == 0 { 1 } else { p.m };
        let groups = tile_groups(OP, [rows, nc], [kernel.bm.max(1), kernel.bn], 1)?;
        rec.dispatch(Dispatch {
            op: OP,
            shader: kernel.shader,
            spec: &kernel.spec,
            args: &[In(x), In(&ws), bs.as_ref().map_or(Absent, In), Out(&ys)],
            push,
            groups,
        })
    })
}

/// The first `n` elements of `x` rounded to f16 into the recording's scratch memory, two a
/// word (`cast_f16.comp`): a view of f32 words, as `linear_cm2.comp` with `X_DTYPE` 1 reads it.
/// `split`: their high parts, then (from word ceil(n / 2)) their low parts.
fn cast_f16(rec: &mut VulkanRecording, x: &Ref, n: usize, split: bool) -> Result<Ref> {
    const OP: &str = "linear";
    let words = rec.scratch_f32(n.div_ceil(2) * if split { 2 } else { 1 })?;
    let wg = rec.elementwise_workgroup();
    let groups = rec.grid(OP, n.div_ceil(2) as u64, wg)?;
    let push = push::CastF16 {
        n: u32_of(OP, "m k", n)?,
        ..Default::default()
    };
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::CastF16,
        spec: &[wg, u32::from(split)],
        args: &[In(x), Out(&words)],
        push,
        groups,
    })?;
    Ok(words)
}

/// A split-k streaming kernel with [`push::LinearStream`]'s contract: `linear_stream.comp` on
/// one of its tiles, or a fast-mode `linear_cm_stream_*` variant; its specialization
/// constants, its grid (workgroups: column groups x splits x row blocks, the last 1 where each
/// workgroup walks every row block), and the partial-sum bytes that count as free for
/// [`stream_splits`].
struct StreamKernel {
    shader: Shader,
    spec: Vec<u32>,
    grid: StreamGrid,
    free: usize,
}

/// [`linear`] on the weight-streaming kernel `t`: per group of
/// output columns that fits a binding, one dispatch of ceil(columns / tile columns) x splits
/// workgroups; with several splits of k it writes partial sums to a scratch buffer and
/// `linear_stream_reduce.comp` adds them (in ascending split order), the bias and the
/// activation ([`run_stream`]; with `KINEMA_VK_STREAM_FOLD=1` each column group's last
/// workgroup to finish does it instead).
#[allow(clippy::too_many_arguments)]
fn linear_stream(
    rec: &mut VulkanRecording,
    p: &LinearParams,
    x: &Ref,
    w: &Ref,
    bias: Option<&Ref>,
    y: &Ref,
    t: &StreamKernel,
    forced: &Forced,
) -> Result<()> {
    const OP: &str = "linear";
    let limits = rec.limits().clone();
    let row_bytes = w.dtype.bytes_for(p.k).expect("checked: whole q8_0 blocks");
    let rows = rows_per_binding(OP, "weight row", &limits, row_bytes as u64)?;
    let (act, slope) = act_code(p.activation);
    for_columns(p, rows, w, bias, y, |Columns { nc, ws, bs, ys }| {
        let (splits, ks) =
            stream_splits([p.m, nc, p.k], row_bytes, t.free, t.grid, &limits, forced);
        let groups = [
            u32_of(OP, "column groups", nc.div_ceil(t.grid.columns))?,
            u32_of(OP, "splits of k", splits)?,
            u32_of(OP, "row blocks", t.grid.row_groups(p.m))?,
        ];
        let push = push::LinearStream {
            m: u32_of(OP, "m", p.m)?,
            n: u32_of(OP, "n", nc)?,
            k: u32_of(OP, "k", p.k)?,
            ldy: u32_of(OP, "n", p.n)?,
            ks: u32_of(OP, "k per split", ks)?,
            epilogue: u32::from(splits == 1),
            has_bias: u32::from(bs.is_some()),
            act,
            slope,
            fold: u32::from(forced.stream_fold()),
            ..Default::default()
        };
        run_stream(
            rec,
            StreamRun {
                op: OP,
                shaders: [t.shader, Shader::LinearStreamReduce],
                spec: &t.spec,
                groups,
                splits,
                fold: forced.stream_fold(),
                outputs: p.m * nc,
                operands: [x, &ws, &ys],
                bias: bs.as_ref(),
                push,
                reduce_push: push::LinearStreamReduce {
                    m: push.m,
                    n: push.n,
                    ldy: push.ldy,
                    splits: u32_of(OP, "splits of k", splits)?,
                    has_bias: push.has_bias,
                    act,
                    slope,
                    ..Default::default()
                },
            },
        )
    })
}

/// One run of the weight-streaming kernel (`linear_stream.comp` or its `CONV` variant) and, for
/// several splits of k without `fold`, its reduce: `shaders` = [main, reduce]; `operands` = x,
/// w, y; `push` has `epilogue` set exactly when `splits` is 1 and `fold` as `fold` is here;
/// `outputs` = m n, the partial sums per split.
pub(super) struct StreamRun<'a, P, R> {
    pub op: &'static str,
    pub shaders: [Shader; 2],
    pub spec: &'a [u32],
    pub groups: [u32; 3],
    pub splits: usize,
    pub fold: bool,
    pub outputs: usize,
    pub operands: [&'a Ref; 3],
    pub bias: Option<&'a Ref>,
    pub push: P,
    pub reduce_push: R,
}

/// Records `r`: with one split, the main kernel writes y (bias and activation in its
/// epilogue); with several, it writes the partial sums `[split][m][n]` to scratch memory and
/// they are added in ascending split order, then the bias and activation: with `fold` by each
/// column group's last workgroup to finish (one dispatch; arrival counters from
/// [`VulkanRecording::counters`]), else by the reduce kernel.
pub(super) fn run_stream<P: Pod, R: Pod>(
    rec: &mut VulkanRecording,
    r: StreamRun<'_, P, R>,
) -> Result<()> {
    let [x, w, y] = r.operands;
    let [main, reduce] = r.shaders;
    let part = (r.splits > 1)
        .then(|| rec.scratch_f32(r.splits * r.outputs))
        .transpose()?;
    let count = match &part {
        Some(_) if r.fold => Some(rec.counters(r.groups[0] as usize * r.groups[2] as usize)?),
        _ => None,
    };
    // Without the fold, the main kernel writes only the partial sums and the reduce writes y.
    let reduced = part.is_some() && !r.fold;
    let (bias, out) = if reduced {
        (Absent, Absent)
    } else {
        (r.bias.map_or(Absent, In), Out(y))
    };
    rec.dispatch(Dispatch {
        op: r.op,
        shader: main,
        spec: r.spec,
        args: &[
            In(x),
            In(w),
            bias,
            out,
            part.as_ref().map_or(Absent, Out),
            count.as_ref().map_or(Absent, Out),
        ],
        push: r.push,
        groups: r.groups,
    })?;
    let Some(part) = part.filter(|_| reduced) else {
        return Ok(());
    };
    let wg = rec.elementwise_workgroup();
    let groups = rec.grid(r.op, r.outputs as u64, wg)?;
    rec.dispatch(Dispatch {
        op: r.op,
        shader: reduce,
        spec: &[wg],
        args: &[In(&part), r.bias.map_or(Absent, In), Out(y)],
        push: r.reduce_push,
        groups,
    })
}

/// One group of output columns `n0..n0 + nc` of a linear layer: its weight rows `ws`, bias
/// values `bs`, and `ys`, columns n0..n0 + nc of every row of y (a strided window from
/// element n0).
struct Columns {
    nc: usize,
    ws: Ref,
    bs: Option<Ref>,
    ys: Ref,
}

/// `f` for each group of at most `rows` output columns (weight rows), in order.
fn for_columns(
    p: &LinearParams,
    rows: usize,
    w: &Ref,
    bias: Option<&Ref>,
    y: &Ref,
    mut f: impl FnMut(Columns) -> Result<()>,
) -> Result<()> {
    for n0 in (0..p.n).step_by(rows) {
        let nc = rows.min(p.n - n0);
        f(Columns {
            nc,
            ws: w.slice(n0 * p.k, nc * p.k)?,
            bs: bias.map(|b| b.slice(n0, nc)).transpose()?,
            ys: y.slice(n0, (p.m - 1) * p.n + nc)?,
        })?;
    }
    Ok(())
}

/// `coopmat_peak.comp` on `groups` workgroups of 4 subgroups, `iters` loop trips each; `y`
/// takes 256 floats per subgroup.
pub(crate) fn coopmat_peak(
    rec: &mut VulkanRecording,
    y: &Ref,
    groups: u32,
    iters: u32,
) -> Result<()> {
    let wg = 4 * rec.limits().subgroup_size;
    rec.dispatch(Dispatch {
        op: "coopmat_peak",
        shader: Shader::CoopmatPeak,
        spec: &[wg],
        args: &[Out(y)],
        push: push::CoopmatPeak {
            iters,
            ..Default::default()
        },
        groups: [groups, 1, 1],
    })
}

/// `read_peak.comp` on `groups` workgroups of 256 invocations: reads the first `words`
/// 16-byte words of `s` (an f32 view starting on a 16-byte boundary), contiguously
/// (`row_words` 0) or as rows of `row_words` words, 8 rows per 32 invocations; `y` takes the
/// xor of each invocation's words (256 `groups` u32s).
pub(crate) fn read_peak(
    rec: &mut VulkanRecording,
    s: &Ref,
    y: &Ref,
    [words, row_words]: [u32; 2],
    groups: u32,
) -> Result<()> {
    rec.dispatch(Dispatch {
        op: "read_peak",
        shader: Shader::ReadPeak,
        spec: &[256],
        args: &[In(s), Out(y)],
        push: push::ReadPeak {
            words,
            row_words,
            ..Default::default()
        },
        groups: [groups, 1, 1],
    })
}

/// `coopmat_layout.comp` on one workgroup of one subgroup: y[0] = the length of a 16 x 16 f16
/// B fragment per invocation, then each invocation's elements (y needs 1 + 256 floats).
pub(crate) fn coopmat_layout(rec: &mut VulkanRecording, y: &Ref) -> Result<()> {
    let wg = rec.limits().subgroup_size;
    rec.dispatch(Dispatch {
        op: "coopmat_layout",
        shader: Shader::CoopmatLayout,
        spec: &[wg],
        args: &[Out(y)],
        push: push::CoopmatLayout::default(),
        groups: [1, 1, 1],
    })
}
