//! The host side of each op: push constants, specialization constants, workgroup counts and,
//! where one operand can exceed a binding, splitting into several dispatches. Operands arrive
//! checked (`crate::backend::check`) and trimmed to what the op touches.
//!
//! To add an op: write `kernels/glsl/<op>.comp` (README there), add it to
//! `shaders::Shader` with its push-constant struct, and record it here with
//! [`VulkanRecording::dispatch`].

use super::backend_error;
use super::context::{Coopmat2, Limits};
use super::memory::VulkanBuffer;
use super::probe::CoopMatShape;
use super::recording::Arg::{Absent, In, Out};
use super::recording::{Dispatch, RunCheck, VulkanRecording};
use super::shaders::{Shader, push};
use crate::backend::BufRef;
use crate::error::Result;
use crate::ops::*;
use crate::tensor::DType;

pub(crate) mod attention_cm;

type Ref = BufRef<VulkanBuffer>;

/// `v` as a u32 push constant, or an error naming it.
fn u32_of(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v)
        .map_err(|_| backend_error(format!("{op}: {what} = {v} does not fit in 32 bits")))
}

/// The activation code and LeakyReLU slope the shaders' `activate()` takes (`common.glsl`).
fn act_code(a: Activation) -> (u32, f32) {
    match a {
        Activation::None => (0, 0.0),
        Activation::Relu => (1, 0.0),
        Activation::LeakyRelu(s) => (2, s),
        Activation::Gelu => (3, 0.0),
        Activation::GeluTanh => (4, 0.0),
        Activation::Silu => (5, 0.0),
    }
}

/// A 1-D elementwise dispatch over `n` elements.
fn elementwise<P: bytemuck::Pod>(
    rec: &mut VulkanRecording,
    op: &'static str,
    shader: Shader,
    args: &[super::recording::Arg<'_>],
    push: P,
    n: usize,
) -> Result<()> {
    let wg = rec.elementwise_workgroup();
    let groups = rec.grid(op, n as u64, wg)?;
    rec.dispatch(Dispatch {
        op,
        shader,
        spec: &[wg],
        args,
        push,
        groups,
    })
}

pub(crate) fn activation(
    rec: &mut VulkanRecording,
    act: Activation,
    x: &Ref,
    y: &Ref,
) -> Result<()> {
    const OP: &str = "activation";
    let (act, slope) = act_code(act);
    let push = push::Activation {
        n: u32_of(OP, "n", x.len)?,
        act,
        slope,
        ..Default::default()
    };
    elementwise(rec, OP, Shader::Activation, &[In(x), Out(y)], push, x.len)
}

pub(crate) fn binary(
    rec: &mut VulkanRecording,
    p: &BinaryParams,
    a: &Ref,
    b: &Ref,
    y: &Ref,
) -> Result<()> {
    const OP: &str = "binary";
    let push = push::Binary {
        n: u32_of(OP, "n", p.n)?,
        b_len: u32_of(OP, "b_len", p.b_len)?,
        op: match p.op {
            BinaryOp::Add => 0,
            BinaryOp::Mul => 1,
        },
        ..Default::default()
    };
    elementwise(rec, OP, Shader::Binary, &[In(a), In(b), Out(y)], push, p.n)
}

pub(crate) fn scale(rec: &mut VulkanRecording, s: f32, x: &Ref, y: &Ref) -> Result<()> {
    const OP: &str = "scale";
    let push = push::Scale {
        n: u32_of(OP, "n", x.len)?,
        s,
        ..Default::default()
    };
    elementwise(rec, OP, Shader::Scale, &[In(x), Out(y)], push, x.len)
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

pub(crate) fn axpby(
    rec: &mut VulkanRecording,
    a: f32,
    x: &Ref,
    b: f32,
    y: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "axpby";
    let push = push::Axpby {
        n: u32_of(OP, "n", x.len)?,
        a,
        b,
        ..Default::default()
    };
    elementwise(
        rec,
        OP,
        Shader::Axpby,
        &[In(x), In(y), Out(out)],
        push,
        x.len,
    )
}

pub(crate) fn ddim(
    rec: &mut VulkanRecording,
    p: &DdimParams,
    xt: &Ref,
    x0: &Ref,
    coef: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "ddim";
    let push = push::Ddim {
        n: u32_of(OP, "n", p.n)?,
        ..Default::default()
    };
    elementwise(
        rec,
        OP,
        Shader::Ddim,
        &[In(xt), In(x0), In(coef), Out(out)],
        push,
        p.n,
    )
}

pub(crate) fn cfg(rec: &mut VulkanRecording, p: &CfgParams, rows: &Ref, out: &Ref) -> Result<()> {
    const OP: &str = "cfg";
    let push = push::Cfg {
        n: u32_of(OP, "n", p.n)?,
        rows: u32_of(OP, "rows", p.rows)?,
        w_text: p.w_text,
        w_constraint: p.w_constraint,
        ..Default::default()
    };
    elementwise(rec, OP, Shader::Cfg, &[In(rows), Out(out)], push, p.n)
}

/// `x`, `out` as checked by `check::root_bridge`: one invocation per output frame. The
/// scales `sqrt(std^2 + 1e-5)` are computed here with the CPU reference's f32 expression.
pub(crate) fn root_bridge(
    rec: &mut VulkanRecording,
    p: &RootBridgeParams,
    x: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "root_bridge";
    let n = p.rows * p.frames;
    let mut stats = [0u32; 18];
    let vals = p
        .global_mean
        .iter()
        .copied()
        .chain(p.global_std.map(RootBridgeParams::scale))
        .chain(p.local_mean.iter().copied())
        .chain(p.local_std.map(RootBridgeParams::scale));
    for (d, v) in stats.iter_mut().zip(vals) {
        *d = v.to_bits();
    }
    let push = push::RootBridge {
        rows: u32_of(OP, "rows", p.rows)?,
        frames: u32_of(OP, "frames", p.frames)?,
        fps: p.fps,
        stats,
        ..Default::default()
    };
    u32_of(OP, "rows * frames * 5", n * 5)?;
    elementwise(rec, OP, Shader::RootBridge, &[In(x), Out(out)], push, n)
}

pub(crate) fn swiglu(rec: &mut VulkanRecording, gate: &Ref, up: &Ref, y: &Ref) -> Result<()> {
    const OP: &str = "swiglu";
    let push = push::Swiglu {
        n: u32_of(OP, "n", gate.len)?,
        ..Default::default()
    };
    elementwise(
        rec,
        OP,
        Shader::Swiglu,
        &[In(gate), In(up), Out(y)],
        push,
        gate.len,
    )
}

/// `x`, `positions`, `inv_freq`, `y` as checked by `check::rope`: one invocation per rotated
/// pair.
pub(crate) fn rope(
    rec: &mut VulkanRecording,
    p: &RopeParams,
    x: &Ref,
    positions: &Ref,
    inv_freq: &Ref,
    y: &Ref,
) -> Result<()> {
    const OP: &str = "rope";
    u32_of(OP, "element count", x.len)?;
    let pairs = x.len / 2;
    let push = push::Rope {
        pairs: pairs as u32,
        heads: u32_of(OP, "heads", p.heads)?,
        half_dim: u32_of(OP, "head_dim / 2", p.head_dim / 2)?,
        interleaved: u32::from(p.pairing == RopePairing::Interleaved),
        ..Default::default()
    };
    elementwise(
        rec,
        OP,
        Shader::Rope,
        &[In(x), In(positions), In(inv_freq), Out(y)],
        push,
        pairs,
    )
}

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

/// One workgroup per row of a `rows x cols` operand (the shaders index rows over x and y).
fn row_dispatch<P: bytemuck::Pod>(
    rec: &mut VulkanRecording,
    op: &'static str,
    shader: Shader,
    args: &[super::recording::Arg<'_>],
    push: P,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let wg = row_workgroup(cols, rec.limits());
    let groups = rec.grid(op, rows as u64 * u64::from(wg), wg)?;
    rec.dispatch(Dispatch {
        op,
        shader,
        spec: &[wg],
        args,
        push,
        groups,
    })
}

/// The element count of a `rows x cols` operand as a u32 (the shaders index with u32).
fn row_elements(op: &'static str, rows: usize, cols: usize) -> Result<()> {
    u32_of(op, "rows * cols", rows * cols).map(|_| ())
}

/// The row shader `strict` or its subgroup-reduction variant `fast`: the variant in fast mode
/// on a device whose compute shaders have subgroup arithmetic.
fn row_shader(rec: &VulkanRecording, fast_rows: bool, strict: Shader, fast: Shader) -> Shader {
    if fast_rows && rec.limits().subgroup_arithmetic {
        fast
    } else {
        strict
    }
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
    const OP: &str = "layer_norm";
    row_elements(OP, p.rows, p.cols)?;
    let push = push::LayerNorm {
        rows: u32_of(OP, "rows", p.rows)?,
        cols: u32_of(OP, "cols", p.cols)?,
        eps: p.eps,
        has_gamma: u32::from(gamma.is_some()),
        has_beta: u32::from(beta.is_some()),
        ..Default::default()
    };
    let shader = row_shader(rec, fast_rows, Shader::LayerNorm, Shader::LayerNormSg);
    row_dispatch(
        rec,
        OP,
        shader,
        &[
            In(x),
            gamma.map_or(Absent, In),
            beta.map_or(Absent, In),
            Out(y),
        ],
        push,
        p.rows,
        p.cols,
    )
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
    row_elements(OP, p.rows, p.cols)?;
    let push = push::RmsNorm {
        rows: u32_of(OP, "rows", p.rows)?,
        cols: u32_of(OP, "cols", p.cols)?,
        eps: p.eps,
        has_gamma: u32::from(gamma.is_some()),
        ..Default::default()
    };
    let g = gamma.map_or(Absent, In);
    let shader = row_shader(rec, fast_rows, Shader::RmsNorm, Shader::RmsNormSg);
    row_dispatch(rec, OP, shader, &[In(x), g, Out(y)], push, p.rows, p.cols)
}

pub(crate) fn softmax(
    rec: &mut VulkanRecording,
    p: &SoftmaxParams,
    x: &Ref,
    y: &Ref,
    fast_rows: bool,
) -> Result<()> {
    const OP: &str = "softmax";
    row_elements(OP, p.rows, p.cols)?;
    let push = push::Softmax {
        rows: u32_of(OP, "rows", p.rows)?,
        cols: u32_of(OP, "cols", p.cols)?,
        scale: p.scale,
        ..Default::default()
    };
    let shader = row_shader(rec, fast_rows, Shader::Softmax, Shader::SoftmaxSg);
    row_dispatch(rec, OP, shader, &[In(x), Out(y)], push, p.rows, p.cols)
}

/// `src` and `dst` as checked by `check::copy` (each starting at the op's buffer offset).
pub(crate) fn copy(rec: &mut VulkanRecording, p: &CopyParams, src: &Ref, dst: &Ref) -> Result<()> {
    const OP: &str = "copy";
    let count: usize = p.shape.iter().product();
    if count == 0 {
        return Ok(());
    }
    // Bind from the layouts' first elements, so the shader adds only strides.
    let s = src.slice(p.src_offset, src.len - p.src_offset)?;
    let d = dst.slice(p.dst_offset, dst.len - p.dst_offset)?;
    let mut push = push::Copy {
        count: u32_of(OP, "element count", count)?,
        rank: p.shape.len() as u32,
        ..Default::default()
    };
    for (i, ((&n, &ss), &ds)) in p
        .shape
        .iter()
        .zip(&p.src_strides)
        .zip(&p.dst_strides)
        .enumerate()
    {
        push.shape[i] = u32_of(OP, "shape", n)?;
        push.src_stride[i] = u32_of(OP, "source stride", ss)?;
        push.dst_stride[i] = u32_of(OP, "destination stride", ds)?;
    }
    let elem_bytes = match src.dtype {
        DType::F16 | DType::BF16 => 2,
        _ => 4,
    };
    let wg = rec.elementwise_workgroup();
    let groups = rec.grid(OP, count as u64, wg)?;
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::Copy,
        spec: &[wg, elem_bytes],
        args: &[In(&s), Out(&d)],
        push,
        groups,
    })
}

/// Tile shape of a BM x BN output tile per workgroup of (BM / TM) * (BN / TN) invocations,
/// k in steps of BK: the conv1d shader's tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LinearTile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub tm: u32,
    pub tn: u32,
}

impl LinearTile {
    pub fn invocations(&self) -> u32 {
        (self.bm / self.tm) * (self.bn / self.tn)
    }
    pub fn shared_bytes(&self) -> u32 {
        (self.bm + self.bn) * self.bk * 4
    }
    fn fits(&self, l: &Limits) -> bool {
        let n = self.invocations();
        n <= l.max_workgroup_invocations
            && n <= l.max_workgroup_size[0]
            && self.shared_bytes() <= l.max_shared_memory
    }
}

// 64 invocations and 3 KiB of shared memory: within every device's guaranteed minimums.
const TILE_TINY: LinearTile = LinearTile {
    bm: 16,
    bn: 32,
    bk: 16,
    tm: 2,
    tn: 4,
};

/// Tile of the strict f32 GEMM shared by linear and batched_matmul (`gemm_f32.glsl`): the
/// same fields as [`LinearTile`], with TM and TN multiples of 4 (outputs are read from shared
/// memory as vec4) and two k-major shared buffers whose rows are padded by one vec4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GemmTile(pub LinearTile);

impl GemmTile {
    pub fn invocations(&self) -> u32 {
        self.0.invocations()
    }
    pub fn shared_bytes(&self) -> u32 {
        let t = &self.0;
        2 * t.bk * (t.bm + 4 + t.bn + 4) * 4
    }
    fn fits(&self, l: &Limits) -> bool {
        let n = self.invocations();
        n <= l.max_workgroup_invocations
            && n <= l.max_workgroup_size[0]
            && self.shared_bytes() <= l.max_shared_memory
    }
    /// The shader's specialization constants 0..=5.
    fn spec(&self) -> [u32; 6] {
        let t = &self.0;
        [self.invocations(), t.bm, t.bn, t.bk, t.tm, t.tn]
    }
    const fn new(bm: u32, bn: u32, bk: u32, tm: u32, tn: u32) -> GemmTile {
        GemmTile(LinearTile { bm, bn, bk, tm, tn })
    }
}

/// Strict GEMM tiles, largest first. 128 x 64 with 8 x 4 outputs per invocation and BK 16
/// (25 KiB of shared memory, within lavapipe's 32 KiB): on the H200 at 4096^3 it ran at
/// 27.2 TFLOP/s, where 128 x 128 with 8 x 8 outputs ran at 8.2 (BK 8) and 8.9 (BK 16) TFLOP/s
/// (64 accumulators an invocation are too many for the driver's register allocation).
/// `KINEMA_VK_GEMM_TILE` tries others.
const GEMM_TILES: [GemmTile; 5] = [
    GemmTile::new(128, 64, 16, 8, 4),
    GemmTile::new(64, 64, 16, 4, 4),
    GemmTile::new(32, 64, 16, 4, 4),
    GemmTile::new(16, 64, 16, 4, 4),
    // 32 invocations and 3.6 KiB: within every device's guaranteed minimums.
    GemmTile::new(16, 32, 8, 4, 4),
];

/// Workgroups a large GPU needs to keep busy (the H200 has 132 SMs, each running at least two
/// 256-invocation workgroups of the strict GEMM): a tile is taken only when the grid has at
/// least this many, unless no smaller tile exists.
const GEMM_MIN_WORKGROUPS: usize = 264;

/// A strict GEMM tile forced by `KINEMA_VK_GEMM_TILE=BMxBNxBKxTMxTN` (for tuning on a new
/// device), when it is one `gemm_f32.glsl` accepts and the device fits.
fn forced_gemm_tile(l: &Limits) -> Option<GemmTile> {
    let v = std::env::var("KINEMA_VK_GEMM_TILE").ok()?;
    let d: Vec<u32> = v.split('x').filter_map(|d| d.parse().ok()).collect();
    let &[bm, bn, bk, tm, tn] = d.as_slice() else {
        return None;
    };
    let t = GemmTile::new(bm, bn, bk, tm, tn);
    let wg = (tm > 0 && tn > 0).then(|| t.invocations())?;
    let valid = tm % 4 == 0
        && tn % 4 == 0
        && bm % tm == 0
        && bn % tn == 0
        && wg > 0
        && (bm * bk) % wg == 0
        && (bn * bk) % wg == 0;
    (valid && t.fits(l)).then_some(t)
}

/// The strict GEMM tile for an m x n output (times `batch`): the largest that the device
/// allows and that still gives [`GEMM_MIN_WORKGROUPS`] workgroups, else the one giving the
/// most; never a tile taller than needed for a few rows.
pub(crate) fn gemm_tile(m: usize, n: usize, batch: usize, l: &Limits) -> GemmTile {
    if let Some(t) = forced_gemm_tile(l) {
        return t;
    }
    let fitting: Vec<GemmTile> = GEMM_TILES.iter().copied().filter(|t| t.fits(l)).collect();
    let last = *fitting.last().unwrap_or(&GEMM_TILES[GEMM_TILES.len() - 1]);
    let groups = |t: &GemmTile| m.div_ceil(t.0.bm as usize) * n.div_ceil(t.0.bn as usize) * batch;
    fitting
        .iter()
        .copied()
        .filter(|t| m > (t.0.bm / 2) as usize || t.0.bm <= 16)
        .find(|t| groups(t) >= GEMM_MIN_WORKGROUPS)
        .unwrap_or(last)
}

/// Tile of a cooperative-matrix linear shader: a BM x BN output tile per workgroup of
/// (BM / WM) (BN / WN) subgroups, each a WM x WN block of the device's CM x CN accumulators; k
/// in steps of BK. `linear_coopmat.comp` takes any tile as specialization constants; the
/// `linear_cm_*.comp` variants have theirs compiled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopTile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub wm: u32,
    pub wn: u32,
}

impl CoopTile {
    fn subgroups(&self) -> u32 {
        (self.bm / self.wm) * (self.bn / self.wn)
    }
    /// `buffers` sets of f16 A and B tiles (rows padded by 8 halves) and the f32 staging
    /// blocks.
    fn shared_bytes(&self, s: &CoopMatShape, buffers: u32) -> u32 {
        buffers * (self.bm + self.bn) * (self.bk + 8) * 2 + self.subgroups() * s.m * s.n * 4
    }
    fn fits(&self, s: &CoopMatShape, l: &Limits, buffers: u32) -> bool {
        let wg = self.subgroups() * l.subgroup_size;
        self.wm.is_multiple_of(s.m)
            && self.wn.is_multiple_of(s.n)
            && self.bk.is_multiple_of(s.k)
            && self.bk.is_multiple_of(4)
            && (self.bm * self.bk / 4).is_multiple_of(wg)
            && (self.bn * self.bk / 4).is_multiple_of(wg)
            && wg <= l.max_workgroup_invocations
            && wg <= l.max_workgroup_size[0]
            && self.shared_bytes(s, buffers) <= l.max_shared_memory
    }
}

/// One compiled fixed-tile variant (`linear_cm_*.comp`, double-buffered shared tiles): its
/// tile and shader. They need 32-invocation subgroups and the 16 x 16 x 16 shape (what the
/// shader hard-codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopFixed {
    pub tile: CoopTile,
    pub shader: Shader,
}

/// The fixed-tile variants, largest first: 128 x 128 with 8 subgroups of 64 x 32 (8
/// accumulators of 16 x 16 each), and 64 x 64 with 4 subgroups of 32 x 32 for outputs that
/// give too few 128 x 128 workgroups. Measured on the H200 (bf16 weights, TFLOP/s, 128 / 64
/// tiles): 4096^3 68.6 / 39.7, 606x3072x1024 33.6 / 26.5, 606x2048x1024 23.1 / 17.4,
/// 404x3072x1024 22.8 / 18.1, 606x1024x2048 15.5 / 18.3. Also measured and dropped: one
/// shared buffer (70.7 at 4096^3, 30.3 at 606x3072x1024), k steps of 16 (51.9), subgroup
/// blocks of 64 x 64 (56.5, 128 x 128 and 128 x 256 tiles) and 32 x 64 (17.1).
const COOP_FIXED: [CoopFixed; 2] = [
    CoopFixed {
        tile: CoopTile {
            bm: 128,
            bn: 128,
            bk: 32,
            wm: 64,
            wn: 32,
        },
        shader: Shader::LinearCm128x128x32_64x32,
    },
    CoopFixed {
        tile: CoopTile {
            bm: 64,
            bn: 64,
            bk: 32,
            wm: 32,
            wn: 32,
        },
        shader: Shader::LinearCm64x64x32_32x32,
    },
];

/// Workgroups below which the fixed variants drop to the next smaller tile: on the H200 the
/// 128 x 128 tile still won with 80 workgroups (606x2048x1024) and lost with 40
/// (606x1024x2048), the 64 x 64 tile's extra loads costing more than idle SMs.
const COOP_MIN_WORKGROUPS: usize = 64;

/// Generic-shader tiles (`linear_coopmat.comp`), largest first: for devices the fixed variants
/// do not fit (another subgroup size or shape). 128 x 128 with 8 subgroups of 64 x 32, and
/// 64 x 64 with 4 subgroups of 32 x 32 for outputs too small to fill the GPU with the first.
const COOP_TILES: [CoopTile; 2] = [
    CoopTile {
        bm: 128,
        bn: 128,
        bk: 32,
        wm: 64,
        wn: 32,
    },
    CoopTile {
        bm: 64,
        bn: 64,
        bk: 32,
        wm: 32,
        wn: 32,
    },
];

impl CoopFixed {
    fn fits(&self, s: &CoopMatShape, l: &Limits) -> bool {
        l.subgroup_size == 32 && (s.m, s.n, s.k) == (16, 16, 16) && self.tile.fits(s, l, 2)
    }
}

/// A cooperative-matrix kernel: the shader and its tile.
pub(crate) type CoopKernel = (Shader, CoopTile);

/// A generic-shader tile forced by `KINEMA_VK_COOP_TILE=BMxBNxBKxWMxWN` (for tuning on a new
/// device), when the device fits it.
fn forced_coop_tile(s: &CoopMatShape, l: &Limits) -> Option<CoopTile> {
    let v = std::env::var("KINEMA_VK_COOP_TILE").ok()?;
    let d: Vec<u32> = v.split('x').filter_map(|d| d.parse().ok()).collect();
    let &[bm, bn, bk, wm, wn] = d.as_slice() else {
        return None;
    };
    let t = CoopTile { bm, bn, bk, wm, wn };
    let valid = wm > 0 && wn > 0 && bm % wm == 0 && bn % wn == 0 && bk % 4 == 0;
    (valid && t.fits(s, l, 1)).then_some(t)
}

/// The first (largest) of `tiles` that gives at least `min_groups` workgroups for an m x n
/// output, else the last (smallest).
fn pick<T: Copy>(
    m: usize,
    n: usize,
    tiles: &[T],
    min_groups: usize,
    tile: impl Fn(&T) -> CoopTile,
) -> Option<T> {
    let groups = |t: &CoopTile| m.div_ceil(t.bm as usize) * n.div_ceil(t.bn as usize);
    tiles
        .iter()
        .copied()
        .find(|t| groups(&tile(t)) >= min_groups)
        .or(tiles.last().copied())
}

/// The cooperative-matrix kernel for an m x n output: a fixed-tile variant when the device
/// runs them (the largest giving [`COOP_MIN_WORKGROUPS`]), else the generic shader over
/// [`COOP_TILES`] as [`gemm_tile`] chooses; `None` when nothing fits (the strict kernel runs
/// then).
/// `KINEMA_VK_COOP_SHADER` forces a variant by file stem (`linear_coopmat` for the generic
/// shader, whose tile `KINEMA_VK_COOP_TILE` may force too).
pub(crate) fn coop_kernel(m: usize, n: usize, s: &CoopMatShape, l: &Limits) -> Option<CoopKernel> {
    let forced = std::env::var("KINEMA_VK_COOP_SHADER").ok();
    let generic = forced.as_deref() == Some(Shader::LinearCoopmat.info().name);
    if let Some(f) = forced.as_deref().filter(|_| !generic) {
        let v = COOP_FIXED
            .iter()
            .find(|v| v.shader.info().name == f && v.fits(s, l));
        if let Some(v) = v {
            return Some((v.shader, v.tile));
        }
    }
    let fitting: Vec<CoopFixed> = COOP_FIXED
        .iter()
        .copied()
        .filter(|v| v.fits(s, l))
        .collect();
    if !generic && let Some(v) = pick(m, n, &fitting, COOP_MIN_WORKGROUPS, |v| v.tile) {
        return Some((v.shader, v.tile));
    }
    if let Some(t) = forced_coop_tile(s, l) {
        return Some((Shader::LinearCoopmat, t));
    }
    let fitting: Vec<CoopTile> = COOP_TILES
        .iter()
        .copied()
        .filter(|t| t.fits(s, l, 1))
        .collect();
    pick(m, n, &fitting, GEMM_MIN_WORKGROUPS, |t| *t).map(|t| (Shader::LinearCoopmat, t))
}

/// Tile of `linear_cm2.comp`: a BM x BN output tile (one workgroup-scope accumulator) per
/// workgroup of `wg` invocations, k in steps of BK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cm2Tile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub wg: u32,
}

impl Cm2Tile {
    fn fits(&self, c2: &Coopmat2, l: &Limits) -> bool {
        self.bm > 0
            && self.bn > 0
            && self.bk > 0
            && self.wg.is_multiple_of(l.subgroup_size)
            && self.wg <= c2.max_workgroup_size
            && self.wg <= l.max_workgroup_invocations
            && self.wg <= l.max_workgroup_size[0]
    }
}

/// The workgroup-scope tile: 128 x 256 with 256 invocations (ggml-vulkan's large coopmat2
/// tile). Measured on the H200 (f16 weights, GPU time): 4096^3 1.48 ms (92.7 TFLOP/s)
/// against 1.84 ms for the 128 x 128 subgroup-scope variant; at Kimodo's shapes no
/// workgroup-scope tile was reliably faster (606x3072x1024: best 80 us against 69 us; 128 x
/// 128, 64 x 64, 64 x 128, 128 x 64, 256 x 128, k steps of 16 and 64 were tried), so smaller
/// outputs stay on the subgroup-scope kernels.
const CM2_TILE: Cm2Tile = Cm2Tile {
    bm: 128,
    bn: 256,
    bk: 32,
    wg: 256,
};

/// The `linear_cm2.comp` tile for an m x n output, `None` for the subgroup-scope kernels:
/// `KINEMA_VK_CM2_TILE=BMxBNxBKxWG` when set and the device fits it (for tuning), else
/// [`CM2_TILE`] when it gives at least [`GEMM_MIN_WORKGROUPS`] workgroups.
fn cm2_tile(m: usize, n: usize, c2: &Coopmat2, l: &Limits) -> Option<Cm2Tile> {
    if let Ok(v) = std::env::var("KINEMA_VK_CM2_TILE") {
        let d: Vec<u32> = v.split('x').filter_map(|d| d.parse().ok()).collect();
        if let &[bm, bn, bk, wg] = d.as_slice() {
            let t = Cm2Tile { bm, bn, bk, wg };
            if t.fits(c2, l) {
                return Some(t);
            }
        }
    }
    let t = CM2_TILE;
    let groups = m.div_ceil(t.bm as usize) * n.div_ceil(t.bn as usize);
    (t.fits(c2, l) && groups >= GEMM_MIN_WORKGROUPS).then_some(t)
}

/// `x`, `w`, `bias`, `y` as checked by `check::linear`, on cooperative matrices of shape
/// `coopmat` when given (fast mode on a device that has them), else on the strict f32
/// kernel. When the weight matrix does not fit one storage-buffer binding (lavapipe allows
/// 128 MiB) it is split into groups of output columns (weight rows), one dispatch each.
pub(crate) fn linear(
    rec: &mut VulkanRecording,
    p: &LinearParams,
    x: &Ref,
    w: &Ref,
    bias: Option<&Ref>,
    y: &Ref,
    coopmat: Option<CoopMatShape>,
    coopmat2: Option<Coopmat2>,
) -> Result<()> {
    const OP: &str = "linear";
    if p.m == 0 || p.n == 0 {
        return Ok(());
    }
    let coop = coopmat.and_then(|s| Some((s, coop_kernel(p.m, p.n, &s, rec.limits())?)));
    // Workgroup-scope matrices take f32 and f16 weights (bf16 and q8_0 stay on the
    // subgroup-scope kernels, which widen them in registers).
    let cm2 = match (coop, coopmat2, w.dtype) {
        (Some(_), Some(c2), DType::F32 | DType::F16) => cm2_tile(p.m, p.n, &c2, rec.limits()),
        _ => None,
    };
    let w_dtype = match w.dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::Q8_0 => 3,
        DType::I32 | DType::U32 => unreachable!("weight dtypes are checked when recorded"),
    };
    let row_bytes = w.dtype.bytes_for(p.k).expect("checked: whole q8_0 blocks") as u64;
    // A binding starts up to one alignment unit before the operand and ends on a word.
    let limits = rec.limits();
    let usable = limits
        .max_binding
        .saturating_sub(limits.min_storage_offset_align + 4);
    let rows = (usable / row_bytes) as usize;
    if rows == 0 {
        return Err(backend_error(format!(
            "{OP}: one weight row of {row_bytes} bytes does not fit this device's \
             {}-byte storage-buffer binding limit",
            limits.max_binding
        )));
    }
    let (act, slope) = act_code(p.activation);
    let (shader, spec, bm, bn) = match (cm2, coop) {
        (Some(t), _) => (
            Shader::LinearCm2,
            vec![t.wg, t.bm, t.bn, t.bk, 0, 0, w_dtype],
            t.bm,
            t.bn,
        ),
        (None, Some((s, (shader, t)))) => {
            let sg = limits.subgroup_size;
            // The fixed-tile variants read only the workgroup size (their compiled-in one:
            // subgroups of 32), W_DTYPE and VEC_OK; a module ignores constants it lacks.
            let spec = vec![
                t.subgroups() * sg,
                t.bm,
                t.bn,
                t.bk,
                t.wm,
                t.wn,
                w_dtype,
                s.m,
                s.n,
                s.k,
                sg,
                u32::from(limits.min_storage_offset_align.is_multiple_of(16)),
            ];
            (shader, spec, t.bm, t.bn)
        }
        (None, None) => {
            let [wg, bm, bn, bk, tm, tn] = gemm_tile(p.m, p.n, 1, limits).spec();
            (
                Shader::Linear,
                vec![wg, bm, bn, bk, tm, tn, w_dtype],
                bm,
                bn,
            )
        }
    };
    for n0 in (0..p.n).step_by(rows) {
        let nc = rows.min(p.n - n0);
        let ws = w.slice(n0 * p.k, nc * p.k)?;
        let bs = bias.map(|b| b.slice(n0, nc)).transpose()?;
        // Columns n0..n0+nc of every row of y: a strided window from element n0.
        let ys = y.slice(n0, (p.m - 1) * p.n + nc)?;
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
        let groups = [
            u32_of(OP, "column tiles", nc.div_ceil(bn as usize))?,
            u32_of(OP, "row tiles", p.m.div_ceil(bm as usize))?,
            1,
        ];
        let b_arg = match &bs {
            Some(b) => In(b),
            None => Absent,
        };
        rec.dispatch(Dispatch {
            op: OP,
            shader,
            spec: &spec,
            args: &[In(x), In(&ws), b_arg, Out(&ys)],
            push,
            groups,
        })?;
    }
    Ok(())
}

/// Tiles of the conv1d shader (an implicit GEMM with c_out rows and batch * out_len columns):
/// small, because the model's convolutions are 512 x 128 outputs at most and a device needs
/// many workgroups in flight; the second fits every device's guaranteed minimums.
const CONV_TILES: [LinearTile; 2] = [
    LinearTile {
        bm: 32,
        bn: 32,
        bk: 16,
        tm: 2,
        tn: 2,
    },
    TILE_TINY,
];

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
    let tile = CONV_TILES
        .iter()
        .copied()
        .find(|t| t.fits(rec.limits()))
        .unwrap_or(TILE_TINY);
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
    let groups = [
        u32_of(OP, "column tiles", cols.div_ceil(tile.bn as usize))?,
        u32_of(OP, "row tiles", p.c_out.div_ceil(tile.bm as usize))?,
        1,
    ];
    let b_arg = match bias {
        Some(b) => In(b),
        None => Absent,
    };
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::Conv1d,
        spec: &[
            tile.invocations(),
            tile.bm,
            tile.bn,
            tile.bk,
            tile.tm,
            tile.tn,
        ],
        args: &[In(x), In(w), b_arg, Out(y)],
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
    elementwise(
        rec,
        OP,
        Shader::UpsampleNearest2x,
        &[In(x), Out(y)],
        push,
        n,
    )
}

pub(crate) fn mean_pool(
    rec: &mut VulkanRecording,
    p: &MeanPoolParams,
    x: &Ref,
    mask: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "mean_pool";
    let n = p.batch * p.dim;
    let push = push::MeanPool {
        batch: u32_of(OP, "batch", p.batch)?,
        seq: u32_of(OP, "seq", p.seq)?,
        dim: u32_of(OP, "dim", p.dim)?,
        ..Default::default()
    };
    u32_of(OP, "batch * dim", n)?;
    elementwise(
        rec,
        OP,
        Shader::MeanPool,
        &[In(x), In(mask), Out(out)],
        push,
        n,
    )
}

/// Workgroup size of the one-row-per-workgroup reductions (argmax.glsl): a power of two,
/// 64 for short rows so few invocations idle, 256 for long ones.
fn argmax_workgroup(rec: &VulkanRecording, cols: usize) -> u32 {
    let l = rec.limits();
    let want: u32 = if cols <= 512 { 64 } else { 256 };
    let cap = want
        .min(l.max_workgroup_size[0])
        .min(l.max_workgroup_invocations);
    1 << cap.ilog2()
}

pub(crate) fn argmax(
    rec: &mut VulkanRecording,
    p: &ArgmaxParams,
    x: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "argmax";
    let push = push::Argmax {
        rows: u32_of(OP, "rows", p.rows)?,
        cols: u32_of(OP, "cols", p.cols)?,
        ..Default::default()
    };
    u32_of(OP, "rows * cols", p.rows * p.cols)?;
    let wg = argmax_workgroup(rec, p.cols);
    let groups = rec.grid(OP, p.rows as u64, 1)?;
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::Argmax,
        spec: &[wg],
        args: &[In(x), Out(out)],
        push,
        groups,
    })
}

/// Shader code of a table dtype (`T_DTYPE` in embedding.comp, as `W_DTYPE` in linear.comp).
fn float_dtype_code(d: DType) -> u32 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::Q8_0 => 3,
        DType::I32 | DType::U32 => unreachable!("float dtypes are checked when recorded"),
    }
}

/// Whole rows of `row_bytes` bytes that fit one storage-buffer binding (which starts up to one
/// alignment unit before the operand and ends on a word).
fn rows_per_binding(op: &str, rec: &VulkanRecording, row_bytes: u64) -> Result<usize> {
    let l = rec.limits();
    let usable = l.max_binding.saturating_sub(l.min_storage_offset_align + 4);
    match usable / row_bytes.max(1) {
        0 => Err(backend_error(format!(
            "{op}: one row of {row_bytes} bytes does not fit this device's {}-byte \
             storage-buffer binding limit",
            l.max_binding
        ))),
        rows => Ok(rows as usize),
    }
}

/// `ids`, `table`, `out` as checked by `check::embedding`. A table larger than one binding is
/// split into row ranges, one dispatch each writing the tokens whose ids fall in its range
/// (and an output larger than one binding into token ranges); the dispatch of each token range
/// that starts at row 0 also writes zeros for ids outside the table and records them in
/// status words the backend checks after the run ([`RunCheck`]).
pub(crate) fn embedding(
    rec: &mut VulkanRecording,
    p: &EmbeddingParams,
    ids: &Ref,
    table: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "embedding";
    let n = p.tokens * p.dim;
    if n == 0 {
        return Ok(());
    }
    u32_of(OP, "tokens * dim", n)?;
    let row_bytes = table
        .dtype
        .bytes_for(p.dim)
        .expect("checked: whole q8_0 blocks") as u64;
    let table_rows = rows_per_binding(OP, rec, row_bytes)?;
    let token_rows = rows_per_binding(OP, rec, 4 * p.dim as u64)?;
    let status = rec.status_words()?;
    let wg = rec.elementwise_workgroup();
    let spec = [wg, float_dtype_code(table.dtype)];
    let base = push::Embedding {
        vocab: u32_of(OP, "vocab", p.vocab)?,
        dim: u32_of(OP, "dim", p.dim)?,
        ..Default::default()
    };
    for t0 in (0..p.tokens).step_by(token_rows) {
        let nt = token_rows.min(p.tokens - t0);
        let ids_s = ids.slice(t0, nt)?;
        let out_s = out.slice(t0 * p.dim, nt * p.dim)?;
        let groups = rec.grid(OP, (nt * p.dim) as u64, wg)?;
        // An empty table still needs the dispatch that zeroes and reports every token.
        for row0 in (0..p.vocab.max(1)).step_by(table_rows) {
            let nr = table_rows.min(p.vocab.saturating_sub(row0));
            let ts = table.slice(row0 * p.dim, nr * p.dim)?;
            let check = row0 == 0;
            let push = push::Embedding {
                tokens: nt as u32,
                t0: t0 as u32,
                row0: row0 as u32,
                rows: nr as u32,
                check: u32::from(check),
                ..base
            };
            let status_arg = if check { Out(&status) } else { Absent };
            rec.dispatch(Dispatch {
                op: OP,
                shader: Shader::Embedding,
                spec: &spec,
                args: &[In(&ids_s), In(&ts), Out(&out_s), status_arg],
                push,
                groups,
            })?;
        }
    }
    rec.add_check(RunCheck {
        status: status.buf,
        vocab: p.vocab,
    });
    Ok(())
}

/// `out` as checked by `check::posenc`. The frequencies `div[i] = 10000^(-2i / dim)` are
/// computed here with the CPU reference's f32 expression (`cpu::posenc::reference`, Kimodo's
/// `kimodo/model/backbone.py#L253-266`) and bound as a table, so the shader's angles are the
/// CPU's bit for bit and only its sin/cos differ (by at most
/// [`POSENC_ABS`](super::backend::POSENC_ABS)).
pub(crate) fn posenc(rec: &mut VulkanRecording, p: &PosEncParams, out: &Ref) -> Result<()> {
    const OP: &str = "posenc";
    let n = p.len * p.dim;
    if n == 0 {
        return Ok(());
    }
    // The shader's angle reduction needs whole multiples of pi/2 below 2^24 (posenc.comp).
    if p.start + p.len > 1 << 24 {
        return Err(backend_error(format!(
            "{OP}: positions up to {} are past 2^24, beyond the shader's sin/cos",
            p.start + p.len - 1
        )));
    }
    let div: Vec<f32> = (0..p.dim / 2)
        .map(|i| 10000f32.powf(-((2 * i) as f32) / p.dim as f32))
        .collect();
    let table = rec.constant_f32(&div)?;
    // Element indices are u32 in the shader.
    u32_of(OP, "len * dim", n)?;
    let push = push::PosEnc {
        start: p.start as u32,
        len: p.len as u32,
        dim: u32_of(OP, "dim", p.dim)?,
        ..Default::default()
    };
    elementwise(rec, OP, Shader::PosEnc, &[In(&table), Out(out)], push, n)
}

/// The push constants of the gumbel shader.
fn gumbel_push(op: &'static str, p: &GumbelParams, injected: bool) -> Result<push::Gumbel> {
    u32_of(op, "rows * cols", p.rows * p.cols)?;
    Ok(push::Gumbel {
        rows: u32_of(op, "rows", p.rows)?,
        cols: u32_of(op, "cols", p.cols)?,
        t: p.temperature.max(1e-10),
        seed: [p.seed as u32, (p.seed >> 32) as u32],
        counter: [p.counter as u32, (p.counter >> 32) as u32],
        has_uniforms: u32::from(injected),
        ..Default::default()
    })
}

/// `logits`, `uniforms`, `out` as checked by `check::gumbel`.
pub(crate) fn gumbel(
    rec: &mut VulkanRecording,
    p: &GumbelParams,
    logits: &Ref,
    uniforms: Option<&Ref>,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "gumbel";
    let push = gumbel_push(OP, p, uniforms.is_some())?;
    let wg = argmax_workgroup(rec, p.cols);
    let groups = rec.grid(OP, p.rows as u64, 1)?;
    let u_arg = match uniforms {
        Some(u) => In(u),
        None => Absent,
    };
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::Gumbel,
        spec: &[wg, 0],
        args: &[In(logits), u_arg, Out(out)],
        push,
        groups,
    })
}

/// Test hook of the gumbel shader: for each of the `rows * cols` elements, the uniform the
/// sampler uses and its noise `g(u)`, as f32 bits in `out[2 i]` and `out[2 i + 1]` (u32,
/// `2 rows cols` elements). `uniforms` as in [`gumbel`]; the logits are not read.
#[cfg(test)]
pub(crate) fn gumbel_noise(
    rec: &mut VulkanRecording,
    p: &GumbelParams,
    uniforms: Option<&Ref>,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "gumbel_noise";
    let n = p.rows * p.cols;
    let push = gumbel_push(OP, p, uniforms.is_some())?;
    let wg = rec.elementwise_workgroup();
    let groups = rec.grid(OP, n as u64, wg)?;
    let u_arg = match uniforms {
        Some(u) => In(u),
        None => Absent,
    };
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::Gumbel,
        spec: &[wg, 1],
        args: &[Absent, u_arg, Out(out)],
        push,
        groups,
    })
}

/// How many consecutive batches of an operand (`size` elements each, `stride` apart) one
/// binding of `usable` elements holds: unbounded for a broadcast operand, 0 when not even one.
fn batches_per_binding(usable: usize, stride: usize, size: usize) -> usize {
    match usable.checked_sub(size) {
        None => 0,
        Some(room) => room.checked_div(stride).map_or(usize::MAX, |n| n + 1),
    }
}

/// `a`, `b`, `c` as checked by `check::batched_matmul`: the strict GEMM tile of linear
/// ([`gemm_tile`]), with the batch on z. Batches are split into several dispatches when they
/// exceed the device's z workgroup count or one storage-buffer binding.
pub(crate) fn batched_matmul(
    rec: &mut VulkanRecording,
    p: &BatchedMatmulParams,
    a: &Ref,
    b: &Ref,
    c: &Ref,
) -> Result<()> {
    const OP: &str = "batched_matmul";
    if p.m == 0 || p.n == 0 {
        return Ok(());
    }
    let limits = rec.limits();
    let tile = gemm_tile(p.m, p.n, p.batch, limits);
    let usable = (limits
        .max_binding
        .saturating_sub(limits.min_storage_offset_align + 4)
        / 4) as usize;
    let (mk, kn, mn) = (p.m * p.k, p.k * p.n, p.m * p.n);
    let chunk = [
        batches_per_binding(usable, p.a_batch_stride, mk),
        batches_per_binding(usable, p.b_batch_stride, kn),
        batches_per_binding(usable, mn, mn),
        limits.max_workgroup_count[2] as usize,
    ]
    .into_iter()
    .min()
    .unwrap_or(0)
    .min(p.batch);
    if chunk == 0 {
        return Err(backend_error(format!(
            "{OP}: one {}x{}x{} matrix product does not fit this device's {}-byte \
             storage-buffer binding limit",
            p.m, p.n, p.k, limits.max_binding
        )));
    }
    let [wg, bm, bn, bk, tm, tn] = tile.spec();
    let spec = [wg, bm, bn, bk, tm, tn, u32::from(p.trans_b)];
    let groups_xy = [
        u32_of(OP, "column tiles", p.n.div_ceil(bn as usize))?,
        u32_of(OP, "row tiles", p.m.div_ceil(bm as usize))?,
    ];
    for z0 in (0..p.batch).step_by(chunk) {
        let nb = chunk.min(p.batch - z0);
        let aslice = a.slice(z0 * p.a_batch_stride, (nb - 1) * p.a_batch_stride + mk)?;
        let bslice = b.slice(z0 * p.b_batch_stride, (nb - 1) * p.b_batch_stride + kn)?;
        let cslice = c.slice(z0 * mn, nb * mn)?;
        let push = push::BatchedMatmul {
            m: u32_of(OP, "m", p.m)?,
            n: u32_of(OP, "n", p.n)?,
            k: u32_of(OP, "k", p.k)?,
            a_stride: u32_of(OP, "a batch stride", p.a_batch_stride)?,
            b_stride: u32_of(OP, "b batch stride", p.b_batch_stride)?,
            alpha: p.alpha,
            ..Default::default()
        };
        rec.dispatch(Dispatch {
            op: OP,
            shader: Shader::BatchedMatmul,
            spec: &spec,
            args: &[In(&aslice), In(&bslice), Out(&cslice)],
            push,
            groups: [groups_xy[0], groups_xy[1], nb as u32],
        })?;
    }
    Ok(())
}

/// Tile shape of the attention shader: `bq` query rows per workgroup (a multiple of 4), keys
/// `bkv` at a time (a multiple of 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AttentionTile {
    workgroup: u32,
    bq: u32,
    bkv: u32,
}

impl AttentionTile {
    /// Shared memory of the shader's arrays (`attention.comp`): the q block and the k tile
    /// (rows of the head dimension padded to a multiple of 8, plus one vec4), the v tile, the
    /// probabilities, the per-key-pair row maxima and the per-row factors.
    fn shared_bytes(&self, head_dim: u32) -> u64 {
        let (bq, bkv) = (u64::from(self.bq), u64::from(self.bkv));
        let d4 = u64::from(head_dim).div_ceil(8) * 2;
        16 * (bq * (d4 + 1) + bkv * (d4 + 1) + bkv * d4 + bkv * bq / 4 + bq / 4) + 4 * bkv / 2 * bq
    }

    fn fits(&self, head_dim: u32, l: &Limits) -> bool {
        self.bq.is_multiple_of(4)
            && self.bkv.is_multiple_of(2)
            && self.bq > 0
            && self.bkv > 0
            && self.workgroup > 0
            && self.workgroup <= l.max_workgroup_invocations
            && self.workgroup <= l.max_workgroup_size[0]
            && self.shared_bytes(head_dim) <= u64::from(l.max_shared_memory)
    }
}

/// Attention tiles (bq, bkv, workgroup) from the largest down; each workgroup has one
/// invocation per 2 x 2 score tile (`bq * bkv / 4`). Measured on the H200 (48 KiB) at Kimodo's
/// shape (3 x 202 tokens x 8 heads of 128): 64 x 8 86.7 us, 32 x 16 96.9 us, 16 x 32 97.5 us,
/// 16 x 16 137 us (more, smaller workgroups were slower). lavapipe (32 KiB) takes 16 x 16.
const ATTENTION_TILES: [(u32, u32, u32); 6] = [
    (64, 8, 128),
    (32, 16, 128),
    (16, 16, 64),
    (8, 8, 32),
    (4, 4, 32),
    (4, 2, 32),
];

/// The attention tile for `head_dim`: `KINEMA_VK_ATTENTION_TILE=bq,bkv,workgroup` when set
/// (for tuning on a new device; an error when it does not fit), else the largest of
/// [`ATTENTION_TILES`] that fits the device's shared memory and workgroup limits (`None` when
/// even the smallest does not).
fn attention_tile(head_dim: usize, l: &Limits) -> Result<Option<AttentionTile>> {
    let Ok(d) = u32::try_from(head_dim) else {
        return Ok(None);
    };
    if let Ok(s) = std::env::var("KINEMA_VK_ATTENTION_TILE") {
        let v: Vec<u32> = s.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        let t = match v[..] {
            [bq, bkv, workgroup] => AttentionTile { workgroup, bq, bkv },
            _ => {
                return Err(backend_error(format!(
                    "KINEMA_VK_ATTENTION_TILE={s:?}: expected bq,bkv,workgroup"
                )));
            }
        };
        if !t.fits(d, l) {
            return Err(backend_error(format!(
                "KINEMA_VK_ATTENTION_TILE={s:?}: bq must be a multiple of 4 and bkv of 2, and \
                 the tile must fit this device ({} bytes of shared memory, {} invocations)",
                l.max_shared_memory, l.max_workgroup_invocations
            )));
        }
        return Ok(Some(t));
    }
    Ok(ATTENTION_TILES
        .into_iter()
        .map(|(bq, bkv, workgroup)| AttentionTile { workgroup, bq, bkv })
        .find(|t| t.fits(d, l)))
}

/// `q`, `k`, `v`, `mask`, `out` as checked by `check::attention`. One workgroup per (query
/// block, query head, batch); batches are split over several dispatches when they exceed the
/// device's z workgroup count or one storage-buffer binding. With a cooperative-matrix shape
/// `coopmat` (fast mode on a device that has one) a fast-mode variant runs where one fits
/// ([`attention_cm::fast_attention_kernel`]), else the strict f32 shader.
pub(crate) fn attention(
    rec: &mut VulkanRecording,
    p: &AttentionParams,
    q: &Ref,
    k: &Ref,
    v: &Ref,
    mask: Option<&Ref>,
    out: &Ref,
    coopmat: Option<CoopMatShape>,
) -> Result<()> {
    if let Some(f) = coopmat.and_then(|s| attention_cm::fast_attention_kernel(p, &s, rec.limits()))
    {
        return attention_cm::attention_cm(rec, p, q, k, v, mask, out, f);
    }
    let limits = rec.limits();
    let tile = attention_tile(p.head_dim, limits)?.ok_or_else(|| {
        backend_error(format!(
            "attention: head_dim {} needs more shared memory than this device's {} bytes",
            p.head_dim, limits.max_shared_memory
        ))
    })?;
    let spec = [
        tile.workgroup,
        u32_of("attention", "head_dim", p.head_dim)?,
        tile.bq,
        tile.bkv,
    ];
    attention_with(
        rec,
        p,
        [q, k, v],
        mask,
        out,
        Shader::Attention,
        &spec,
        tile.bq,
    )
}

/// The dispatches of an attention shader (`attention.comp` or a fast variant; they share
/// bindings and push constants) with specialization constants `spec` and `bq` query rows per
/// workgroup: one workgroup per (query block, query head, batch), batches split over several
/// dispatches when they exceed the device's z workgroup count or one storage-buffer binding.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention_with(
    rec: &mut VulkanRecording,
    p: &AttentionParams,
    [q, k, v]: [&Ref; 3],
    mask: Option<&Ref>,
    out: &Ref,
    shader: Shader,
    spec: &[u32],
    bq: u32,
) -> Result<()> {
    const OP: &str = "attention";
    let limits = rec.limits();
    let usable = (limits
        .max_binding
        .saturating_sub(limits.min_storage_offset_align + 4)
        / 4) as usize;
    let d = p.head_dim;
    // Elements from one batch to the next, and the span one batch reads or writes.
    let q_step = p.q_len * p.q_row_stride;
    let q_span = (p.q_len - 1) * p.q_row_stride + p.q_heads * d;
    let kv_step = p.kv_len * p.kv_row_stride;
    let kv_span = (p.kv_len - 1) * p.kv_row_stride + p.kv_heads * d;
    let o_step = p.q_len * p.q_heads * d;
    let chunk = [
        batches_per_binding(usable, q_step, q_span),
        batches_per_binding(usable, kv_step, kv_span),
        batches_per_binding(usable, p.kv_len, p.kv_len),
        batches_per_binding(usable, o_step, o_step),
        limits.max_workgroup_count[2] as usize,
    ]
    .into_iter()
    .min()
    .unwrap_or(0)
    .min(p.batch);
    if chunk == 0 {
        return Err(backend_error(format!(
            "{OP}: one batch does not fit this device's {}-byte storage-buffer binding limit",
            limits.max_binding
        )));
    }
    let mask_kind = match p.mask {
        MaskKind::None => 0,
        MaskKind::KeyPadding => 1,
        MaskKind::Causal => 2,
    };
    let groups_xy = [
        u32_of(OP, "query blocks", p.q_len.div_ceil(bq as usize))?,
        u32_of(OP, "q_heads", p.q_heads)?,
    ];
    for z0 in (0..p.batch).step_by(chunk) {
        let nb = chunk.min(p.batch - z0);
        let qs = q.slice(z0 * q_step, (nb - 1) * q_step + q_span)?;
        let ks = k.slice(z0 * kv_step, (nb - 1) * kv_step + kv_span)?;
        let vs = v.slice(z0 * kv_step, (nb - 1) * kv_step + kv_span)?;
        let ms = mask
            .map(|m| m.slice(z0 * p.kv_len, nb * p.kv_len))
            .transpose()?;
        let os = out.slice(z0 * o_step, nb * o_step)?;
        let push = push::Attention {
            q_len: u32_of(OP, "q_len", p.q_len)?,
            kv_len: u32_of(OP, "kv_len", p.kv_len)?,
            q_heads: groups_xy[1],
            group: (p.q_heads / p.kv_heads) as u32,
            q_stride: u32_of(OP, "q_row_stride", p.q_row_stride)?,
            kv_stride: u32_of(OP, "kv_row_stride", p.kv_row_stride)?,
            scale: p.scale,
            mask_kind,
            ..Default::default()
        };
        rec.dispatch(Dispatch {
            op: OP,
            shader,
            spec,
            args: &[
                In(&qs),
                In(&ks),
                In(&vs),
                ms.as_ref().map_or(Absent, In),
                Out(&os),
            ],
            push,
            groups: [groups_xy[0], groups_xy[1], nb as u32],
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(invocations: u32, shared: u32) -> Limits {
        Limits {
            subgroup_arithmetic: true,
            subgroup_size: 8,
            max_shared_memory: shared,
            max_push_constants: 128,
            max_binding: 1 << 27,
            min_storage_offset_align: 16,
            max_workgroup_count: [65535; 3],
            max_workgroup_size: [invocations, 1, 1],
            max_workgroup_invocations: invocations,
            timestamp_period_ns: 1.0,
            timestamp_valid_bits: 64,
        }
    }

    #[test]
    fn batch_chunks_fit_a_binding() {
        assert_eq!(batches_per_binding(100, 0, 40), usize::MAX);
        assert_eq!(batches_per_binding(100, 40, 40), 2);
        assert_eq!(batches_per_binding(100, 30, 40), 3);
        assert_eq!(batches_per_binding(100, 30, 101), 0);
    }

    #[test]
    fn row_workgroups_are_powers_of_two_within_limits() {
        let l = limits(1024, 32768);
        assert_eq!(row_workgroup(1, &l), 32);
        assert_eq!(row_workgroup(100, &l), 128);
        assert_eq!(row_workgroup(5000, &l), 256);
        assert_eq!(row_workgroup(5000, &limits(200, 32768)), 128);
    }

    #[test]
    fn attention_tiles_fit_shared_memory() {
        let tile = |d, l: &Limits| attention_tile(d, l).unwrap();
        let l = limits(1024, 32768);
        for d in [8, 64, 80, 128, 256] {
            let t = tile(d, &l).unwrap();
            assert!(t.shared_bytes(d as u32) <= 32768, "{d}: {t:?}");
        }
        // lavapipe: 32 KiB; the H200: 48 KiB.
        assert_eq!(tile(128, &l).unwrap().bq, 16);
        let t = tile(128, &limits(1024, 49152)).unwrap();
        assert_eq!((t.bq, t.bkv, t.workgroup), (64, 8, 128));
        assert_eq!(tile(256, &limits(1024, 49152)).unwrap().bq, 8);
        assert_eq!(tile(64, &limits(32, 32768)).unwrap().bq, 8);
        assert_eq!(tile(4096, &l), None);
    }

    #[test]
    fn tiles_respect_limits() {
        for t in [TILE_TINY, CONV_TILES[0]] {
            assert_eq!(t.bm % t.tm, 0);
            assert_eq!(t.bn % t.tn, 0);
        }
        assert!(TILE_TINY.fits(&limits(128, 16384)));
        // What gemm_f32.glsl needs of a tile.
        for GemmTile(t) in GEMM_TILES {
            assert_eq!((t.tm % 4, t.tn % 4), (0, 0), "{t:?}");
            assert_eq!((t.bm % t.tm, t.bn % t.tn), (0, 0), "{t:?}");
            let wg = GemmTile(t).invocations();
            assert_eq!((t.bm * t.bk % wg, t.bn * t.bk % wg), (0, 0), "{t:?}");
        }
        let smallest = GEMM_TILES[GEMM_TILES.len() - 1];
        assert!(smallest.fits(&limits(128, 16384)));
    }

    #[test]
    fn workgroup_scope_tile_only_for_large_outputs_on_devices_that_fit_it() {
        let mut h200 = limits(1024, 49152);
        h200.subgroup_size = 32;
        let c2 = Coopmat2 {
            max_workgroup_size: 256,
        };
        assert_eq!(cm2_tile(4096, 4096, &c2, &h200), Some(CM2_TILE));
        // 16 x 32 = 512 workgroups; Kimodo's 606 x 3072 gives 60, 4096 x 1024 only 128.
        assert_eq!(cm2_tile(606, 3072, &c2, &h200), None);
        assert_eq!(cm2_tile(4096, 1024, &c2, &h200), None);
        assert_eq!(cm2_tile(2048, 8192, &c2, &h200), Some(CM2_TILE));
        // A device whose workgroup-scope matrices allow fewer invocations keeps the
        // subgroup-scope kernels, as does one whose workgroups are smaller.
        let small = Coopmat2 {
            max_workgroup_size: 128,
        };
        assert_eq!(cm2_tile(4096, 4096, &small, &h200), None);
        assert_eq!(cm2_tile(4096, 4096, &c2, &limits(128, 49152)), None);
    }

    #[test]
    fn coop_tiles_follow_the_device_and_the_shape() {
        let s = CoopMatShape::f16_16x16x16();
        let mut h200 = limits(1024, 49152);
        h200.subgroup_size = 32;
        let fixed = |v: CoopFixed| Some((v.shader, v.tile));
        assert_eq!(coop_kernel(4096, 4096, &s, &h200), fixed(COOP_FIXED[0]));
        assert_eq!(coop_kernel(606, 3072, &s, &h200), fixed(COOP_FIXED[0]));
        assert_eq!(coop_kernel(404, 3072, &s, &h200), fixed(COOP_FIXED[0]));
        assert_eq!(coop_kernel(606, 1024, &s, &h200), fixed(COOP_FIXED[1]));
        for v in COOP_FIXED {
            assert!(v.fits(&s, &h200), "{v:?}");
        }
        // The generic shader's tiles also fit the H200.
        for t in COOP_TILES {
            assert!(t.fits(&s, &h200, 1), "{t:?}");
        }
        // Another subgroup size or shape takes the generic shader.
        let mut wave64 = h200.clone();
        wave64.subgroup_size = 64;
        let generic = |t: CoopTile| Some((Shader::LinearCoopmat, t));
        assert_eq!(coop_kernel(4096, 4096, &s, &wave64), generic(COOP_TILES[0]));
        let s16x8 = CoopMatShape { n: 8, ..s };
        assert_eq!(
            coop_kernel(4096, 4096, &s16x8, &h200),
            generic(COOP_TILES[0])
        );
        // 128-invocation devices take the 4-subgroup tiles; none fits 8 KiB of shared memory.
        h200.max_workgroup_invocations = 128;
        assert_eq!(coop_kernel(4096, 4096, &s, &h200), fixed(COOP_FIXED[1]));
        let mut small = limits(1024, 8192);
        small.subgroup_size = 32;
        assert_eq!(coop_kernel(4096, 4096, &s, &small), None);
    }

    #[test]
    fn gemm_tiles_follow_the_device_and_the_shape() {
        let h200 = limits(1024, 49152);
        let lavapipe = limits(1024, 32768);
        for l in [&h200, &lavapipe] {
            let big = gemm_tile(4096, 4096, 1, l).0;
            assert_eq!(
                (big.bm, big.bn, big.bk, big.tm, big.tn),
                (128, 64, 16, 8, 4)
            );
        }
        // 5 x 48 tiles of 128 x 64 would leave much of a large GPU idle.
        assert_eq!(gemm_tile(606, 3072, 1, &h200).0.bm, 64);
        // A few rows take the shortest tile.
        assert_eq!(gemm_tile(3, 1 << 20, 1, &h200).0.bm, 16);
        assert_eq!(
            gemm_tile(4096, 4096, 1, &limits(64, 16384)),
            GemmTile::new(16, 64, 16, 4, 4)
        );
        for (m, n, b) in [(1, 1, 1), (202, 202, 24), (4096, 4096, 1)] {
            for l in [&h200, &lavapipe, &limits(128, 16384)] {
                assert!(gemm_tile(m, n, b, l).fits(l), "{m}x{n}x{b}");
            }
        }
    }
}

#[cfg(test)]
mod device_tests {
    use super::*;
    use crate::backend::{Backend, Precision};
    use crate::cpu::gumbel::reference::gumbel_noise as cpu_noise;
    use crate::rng;
    use crate::vulkan::backend::GUMBEL_NOISE_ULP;
    use crate::vulkan::{VulkanBackend, VulkanOptions, probe};

    /// A backend on the first Vulkan device; None (said on stderr) when there is none, which
    /// fails instead under `KINEMA_REQUIRE_VULKAN=1` (CI installs lavapipe).
    fn device() -> Option<VulkanBackend> {
        let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
        match probe() {
            Ok(d) => {
                let mut o = VulkanOptions::new(Precision::Strict);
                o.device = Some(d[0].index);
                Some(VulkanBackend::with_options(o).unwrap())
            }
            Err(why) => {
                assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
                eprintln!("skipping: {why}");
                None
            }
        }
    }

    /// `(u, g(u))` of every element, from the shader's test hook.
    fn noise(b: &VulkanBackend, p: &GumbelParams, uniforms: Option<&[f32]>) -> Vec<(f32, f32)> {
        let n = p.rows * p.cols;
        let u = uniforms.map(|u| {
            let r = BufRef::new(b.alloc(DType::F32, n).unwrap(), DType::F32, n);
            b.write(&r, bytemuck::cast_slice(u)).unwrap();
            r
        });
        let out = BufRef::new(b.alloc(DType::U32, 2 * n).unwrap(), DType::U32, 2 * n);
        let mut rec = b.begin().unwrap();
        gumbel_noise(&mut rec, p, u.as_ref(), &out).unwrap();
        b.submit(&rec).unwrap();
        let mut bytes = vec![0u8; 8 * n];
        b.read(&out, &mut bytes).unwrap();
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
        words
            .chunks(2)
            .map(|w| (f32::from_bits(w[0]), f32::from_bits(w[1])))
            .collect()
    }

    /// `|got - want|` in units of `want`'s ulp, after the 2^-22 absolute allowance.
    fn noise_ulps(got: f32, want: f32) -> f32 {
        if got.to_bits() == want.to_bits() {
            return 0.0;
        }
        let ulp = f32::from_bits(want.abs().to_bits() + 1) - want.abs();
        ((got - want).abs() - 2f32.powi(-22)).max(0.0) / ulp
    }

    #[test]
    fn gumbel_uniforms_are_the_cpu_stream() {
        let Some(b) = device() else { return };
        // A carry out of the counter's low half, and seeds with every bit set.
        for (seed, counter) in [
            (42, 0),
            (0xdead_beef_0123_4567, (1 << 32) - 300_000),
            (u64::MAX, u64::MAX - 2_000_000),
        ] {
            let p = GumbelParams {
                rows: 1000,
                cols: 1000,
                temperature: 1.0,
                seed,
                counter,
            };
            let mut worst = 0f32;
            for (i, (u, g)) in noise(&b, &p, None).into_iter().enumerate() {
                let want = rng::uniform(seed, counter + i as u64);
                assert_eq!(u.to_bits(), want.to_bits(), "seed {seed:#x} uniform {i}");
                worst = worst.max(noise_ulps(g, cpu_noise(u)));
            }
            eprintln!("seed {seed:#x}: g(u) within {worst} ulp of the CPU's");
            assert!(worst <= GUMBEL_NOISE_ULP, "g(u) off by {worst} ulp");
        }
    }

    #[test]
    fn gumbel_noise_of_injected_uniforms() {
        let Some(b) = device() else { return };
        let mut u = vec![
            0.0,
            -0.0,
            1e-45,
            1e-30,
            1e-20,
            1.000_000_1e-20,
            0.5,
            0.999_999_94,
            1.0,
            2.0,
            -1.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        let k = u.len();
        u.extend((0..1000 - k).map(|i| ((i as f32 + 0.5) / (1000 - k) as f32).powi(3)));
        let p = GumbelParams {
            rows: 10,
            cols: 100,
            temperature: 1.0,
            seed: 0,
            counter: 0,
        };
        for (i, (got_u, g)) in noise(&b, &p, Some(&u)).into_iter().enumerate() {
            assert_eq!(got_u.to_bits(), u[i].to_bits());
            let want = cpu_noise(u[i]);
            let e = noise_ulps(g, want);
            assert!(e <= GUMBEL_NOISE_ULP, "u = {:e}: g {g} vs {want}", u[i]);
        }
    }
}
