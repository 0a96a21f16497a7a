//! The weight-streaming linear (`linear_stream.comp`) for few rows and large weights: when it
//! runs, its tile, and how many splits of k its grid takes.

use super::super::super::context::Limits;
use super::super::super::probe::CoopMatShape;
use super::super::super::shaders::Shader;
use super::{CoopFixed, CoopTile, Forced, GEMM_MIN_WORKGROUPS, dims, workgroup_fits};
use crate::tensor::DType;

/// Weight elements (k * n) at and above which linears of [`STREAM_MIN_M`]..=[`STREAM_MAX_M`]
/// rows run the streaming kernel: LLM2Vec's 8B projections (4096 x 1024 is the smallest, the
/// K/V projections) are 2^22 to 2^26. Kimodo's linears have m = 404 / 606 rows, its text
/// projection (4096 x 1024) one row; MotionBricks' widths are at most 2048 x 1024: none of them
/// changes kernel.
pub(crate) const STREAM_MIN_WEIGHTS: usize = 1 << 22;

/// Rows at and below which the streaming kernel runs (two row blocks of 32 at most).
pub(crate) const STREAM_MAX_M: usize = 64;

/// Rows below which it does not: one row is the skinny kernel's (x is one small vector there).
pub(crate) const STREAM_MIN_M: usize = 2;

/// Rows per block at most (the shader stages MB x KT floats of x).
const STREAM_MAX_ROWS: u32 = 32;

/// Accumulators an invocation holds at most (MB x CPI).
const STREAM_MAX_ACC: u32 = 64;

/// Workgroup sizes, largest first.
const STREAM_WG: [u32; 3] = [256, 128, 64];

/// Lanes per column: 4 lanes read 64 consecutive bytes of a 16-bit weight row a step.
const STREAM_LK: u32 = 4;

/// k staged in shared memory at a time, largest first (each a multiple of 8 [`STREAM_LK`]).
const STREAM_KT: [u32; 4] = [256, 128, 64, 32];

/// Accumulators reduced across lanes per round at most.
const STREAM_RC: u32 = 16;

/// Tile of the streaming kernel: a workgroup of `wg` invocations in column groups of `lk`
/// lanes, `cpi` columns per invocation, `mb` rows per block, x staged `kt` k at a time, lane
/// sums reduced `rc` accumulators a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamTile {
    pub wg: u32,
    pub mb: u32,
    pub cpi: u32,
    pub lk: u32,
    pub kt: u32,
    pub rc: u32,
}

impl StreamTile {
    /// The staged x (`mb kt` floats) and the reduction rounds (`rc wg` floats).
    pub fn shared_bytes(&self) -> u32 {
        (self.mb * self.kt + self.rc * self.wg) * 4
    }
    /// Output columns per workgroup.
    pub fn columns(&self) -> u32 {
        self.wg / self.lk * self.cpi
    }
    fn valid(&self) -> bool {
        let out = self.mb * self.cpi;
        self.wg > 0
            && self.lk > 0
            && self.wg.is_multiple_of(self.lk)
            && (1..=STREAM_MAX_ROWS).contains(&self.mb)
            && self.cpi > 0
            && out <= STREAM_MAX_ACC
            && self.kt > 0
            && self.kt.is_multiple_of(8 * self.lk)
            && self.rc > 0
            && out.is_multiple_of(self.rc)
    }
    fn fits(&self, l: &Limits) -> bool {
        self.valid() && workgroup_fits(self.wg, self.shared_bytes(), l)
    }
    /// Output columns per workgroup and k per stage: what [`stream_splits`] needs.
    pub fn grid(&self) -> StreamGrid {
        StreamGrid {
            columns: self.columns() as usize,
            kt: self.kt as usize,
            max_ks: None,
            row_block: None,
            wave: None,
        }
    }
    /// The shader's specialization constants 0..=7.
    pub fn spec(&self, w_dtype: u32, vec_ok: u32) -> Vec<u32> {
        vec![
            self.wg, self.mb, self.cpi, self.lk, self.kt, self.rc, w_dtype, vec_ok,
        ]
    }
    fn new(wg: u32, mb: u32, cpi: u32, lk: u32, kt: u32) -> StreamTile {
        StreamTile {
            wg,
            mb,
            cpi,
            lk,
            kt,
            rc: STREAM_RC.min(mb * cpi),
        }
    }
}

/// Weight elements (k * n) at and above which linears of [`STREAM_MIN_M`]..=[`STREAM_MAX_M`]
/// rows run the streaming kernel on its narrow tile ([`narrow_stream_tile`]) while below
/// [`STREAM_MIN_WEIGHTS`]: MotionBricks' transformer linears at batch 1 (25 rows; 512 x 512 to
/// 3072 x 1024). On the H200 (2026-12-02, `bench kernels --op linear`, f16 weights, GPU time)
/// the narrow tile took them from 35-95 us on the tiled kernels (coopmat; 12-62 us skinny) to
/// 15-29 us. 512 x 512 (2^18) is the smallest of them.
pub(crate) const STREAM_NARROW_MIN_WEIGHTS: usize = 1 << 18;

/// Whether an m x n x k linear runs the streaming kernel: by default (and with
/// `KINEMA_VK_LINEAR=stream-window`) for m within [`STREAM_MIN_M`]..=[`STREAM_MAX_M`] and k n at
/// least [`STREAM_NARROW_MIN_WEIGHTS`] (LLM2Vec's 8B projections, MotionBricks' transformer
/// linears at small batches); `stream` for every linear; any other value (`tiled`, `skinny`)
/// never. On the H200 (2026-12-02, `bench llm2vec`, 32 layers, 32 tokens, bf16, strict) the
/// window took 45.1 ms p50 per prompt against 107.8 ms with the tiled kernels. An earlier
/// 4-layer comparison that had it slower (23.2 against 13.9 ms p50) was run-to-run noise of a
/// short model: the same 4-layer bench swings between ~6 and ~26 ms a run with either kernel
/// (BENCHMARKS.md).
pub(crate) fn wants_stream([m, n, k]: [usize; 3], f: &Forced) -> bool {
    match f.linear.as_deref() {
        Some("stream") => true,
        None | Some("stream-window") => {
            (STREAM_MIN_M..=STREAM_MAX_M).contains(&m)
                && k.saturating_mul(n) >= STREAM_NARROW_MIN_WEIGHTS
        }
        _ => false,
    }
}

/// The streaming tile of an m x n x k linear and the partial-sum bytes its splits may write
/// regardless of the weights (see [`stream_splits`]): [`stream_tile`] and none for weights of
/// at least [`STREAM_MIN_WEIGHTS`], else [`narrow_stream_tile`] and
/// [`NARROW_FREE_PARTIAL_BYTES`].
pub(crate) fn linear_stream_tile(
    [m, n, k]: [usize; 3],
    l: &Limits,
    f: &Forced,
) -> Option<(StreamTile, usize)> {
    if k.saturating_mul(n) >= STREAM_MIN_WEIGHTS {
        stream_tile(m, l, f).map(|t| (t, 0))
    } else {
        narrow_stream_tile(m, l, f).map(|t| (t, NARROW_FREE_PARTIAL_BYTES))
    }
}

/// Weight elements (c_out x c_in kernel) at and above which a conv1d of at most
/// [`STREAM_MAX_M`] output columns (batch x out_len) runs the streaming kernel: the
/// MotionBricks decoders' 512 x 1536 (786k) and 512 x 768 (393k) convolutions at batch 1-4,
/// where the tiled conv1d's 16 x 32 tiles make 16-64 workgroups that each walk all 1536
/// products (~60 us a dispatch on the H200 for ~94 MFLOP).
pub(crate) const CONV_STREAM_MIN_WEIGHTS: usize = 1 << 16;

/// Whether a conv1d with `cols` output columns (batch x out_len), `c_out` channels and a
/// reduction of `red` (c_in x kernel) runs the streaming kernel (`conv1d_stream`): by default
/// for 1..=[`STREAM_MAX_M`] columns and at least [`CONV_STREAM_MIN_WEIGHTS`] weights;
/// `KINEMA_VK_CONV=stream` always, any other value (`tiled`) never.
pub(crate) fn conv_wants_stream([cols, c_out, red]: [usize; 3], f: &Forced) -> bool {
    match f.conv.as_deref() {
        Some("stream") => true,
        None => {
            (1..=STREAM_MAX_M).contains(&cols)
                && c_out.saturating_mul(red) >= CONV_STREAM_MIN_WEIGHTS
        }
        _ => false,
    }
}

/// The streaming tile for m rows: the forced one (`KINEMA_VK_STREAM_TILE=WGxMBxCPIxLKxKT`)
/// when valid and the device fits it; else m rounded up to a power of two rows per block (at
/// most [`STREAM_MAX_ROWS`]), 64 / that columns per invocation (at most 8), and the largest
/// workgroup of [`STREAM_WG`] and then the largest stage of [`STREAM_KT`] the device fits.
/// `None` when none fits.
pub(crate) fn stream_tile(m: usize, l: &Limits, f: &Forced) -> Option<StreamTile> {
    let mb = block_rows(m);
    forced_tile(l, f).or_else(|| first_fit(l, mb, (STREAM_MAX_ACC / mb).min(8), &STREAM_KT))
}

/// Stages of the narrow streaming tile, largest first.
const NARROW_STREAM_KT: [u32; 2] = [64, 32];

/// The narrow streaming tile for m rows (a conv1d's output columns, or a linear's rows with
/// weights under [`STREAM_MIN_WEIGHTS`]): the forced one as for [`stream_tile`]; else one
/// column per invocation (64 columns per 256-invocation workgroup) and a stage of 64 k, so
/// weights of a few MiB spread over many column groups and splits. On the H200 (2026-12-02,
/// `bench kernels`, GPU time) it took the MotionBricks decoders' 512 x 15 / 30 / 60 x 3
/// convolutions from 31 / 33 / 55 us on the wide tile (4 or 2 columns per invocation, 256 k
/// stages: 2-4 column groups x at most 6 splits) to 15 / 19 / 26 us, and was the fastest of
/// five tiles for 6 of MotionBricks' 8 linear shapes at 25 rows (two columns per invocation
/// won 3072 x 1024 and 2048 x 1024 by 1-5 us).
pub(crate) fn narrow_stream_tile(m: usize, l: &Limits, f: &Forced) -> Option<StreamTile> {
    forced_tile(l, f).or_else(|| first_fit(l, block_rows(m), 1, &NARROW_STREAM_KT))
}

/// m rounded up to a power of two, at most [`STREAM_MAX_ROWS`].
fn block_rows(m: usize) -> u32 {
    (m.max(1).next_power_of_two() as u32).min(STREAM_MAX_ROWS)
}

/// `KINEMA_VK_STREAM_TILE` when it is valid and the device fits it.
fn forced_tile(l: &Limits, f: &Forced) -> Option<StreamTile> {
    let [wg, mb, cpi, lk, kt] = dims(f.stream_tile.as_deref())?;
    Some(StreamTile::new(wg, mb, cpi, lk, kt)).filter(|t| t.fits(l))
}

/// The largest workgroup of [`STREAM_WG`], then the largest stage of `kts`, that the device
/// fits for `mb` rows and `cpi` columns per invocation.
fn first_fit(l: &Limits, mb: u32, cpi: u32, kts: &[u32]) -> Option<StreamTile> {
    STREAM_WG
        .iter()
        .flat_map(|&wg| {
            kts.iter()
                .map(move |&kt| StreamTile::new(wg, mb, cpi, STREAM_LK, kt))
        })
        .find(|t| t.fits(l))
}

/// The fast-mode streaming variants (`linear_cm.comp` with `STREAM`: split k on cooperative
/// matrices, f16 operands and f32 sums; 32-row blocks), first the default. They need what the
/// fixed-tile `linear_cm_*` variants need (32-invocation subgroups, the 16 x 16 x 16 f16 shape).
/// On the H200 (2026-12-03, `bench kernels --op linear`, bf16, 32 rows, GPU ms for 4096 x 4096
/// / 1024 x 4096 / 14336 x 4096 / 4096 x 14336, automatic splits): 8 subgroups of 32 x 16 over
/// 128 columns 0.077 / 0.026 / 0.257 / 0.293 (0.232 with 16 splits), 4 of 32 x 32 over 128
/// 0.112 / 0.036 / 0.322 / 0.345 (0.071 at 4096 x 4096 with 4 splits), 4 of 32 x 16 over 64
/// with k steps of 64 0.131 / 0.031 / 0.512 / 0.518; `linear_stream.comp` (f32 FMA) took
/// 0.098 / - / 0.391 / 0.348 on 2026-12-02, and 0.099 / 0.031 / 0.392 / 0.348 in the same call
/// as the first row (BENCHMARKS.md). Also measured and dropped: the first tile with two tiles'
/// loads in flight per invocation (a second register set): 0.083 / 0.026 / 0.287 / 0.286.
pub(crate) const CM_STREAM: [CoopFixed; 3] = [
    CoopFixed {
        tile: CoopTile::new(32, 128, 32, 32, 16),
        shader: Shader::LinearCmStream32x128x32_32x16,
    },
    CoopFixed {
        tile: CoopTile::new(32, 128, 32, 32, 32),
        shader: Shader::LinearCmStream32x128x32_32x32,
    },
    CoopFixed {
        tile: CoopTile::new(32, 64, 64, 32, 16),
        shader: Shader::LinearCmStream32x64x64_32x16,
    },
];

/// The fast-mode streaming variants that load the weights straight into cooperative matrices
/// (`linear_cm.comp` with `STREAM` and `DIRECT`; 4 k steps of B fragments in flight per
/// subgroup), first the default, then the default for n <= [`DIRECT_NARROW_N`]. Each subgroup
/// covers all 32 rows and WN columns; x goes through shared memory 256 k at a time. They need
/// what [`CM_STREAM`] needs, and k and n multiples of 16 and weights on a 16-byte boundary
/// ([`DirectLayout`]).
///
/// On the H200 (2026-12-03, `bench kernels --op linear`, bf16, 32 rows, GPU ms for
/// 4096 x 4096 / 1024 x 4096 / 14336 x 4096 / 4096 x 14336, automatic splits; two calls):
/// 4 subgroups of 32 x 32 0.043-0.044 / 0.025 / 0.130 / 0.133-0.134; 8 of 32 x 16 0.045 /
/// 0.021 / 0.146 / 0.148; 8 of 32 x 32 over 256 columns 0.049 / 0.028 / 0.133-0.135 /
/// 0.133-0.136. The staged [`CM_STREAM`] default took 0.077 / 0.026 / 0.256 / 0.259. Measured
/// and dropped: 8 k steps in flight (0.047 / 0.021 / 0.152 / 0.152 with 8 x (32 x 16)), 512-k
/// chunks of x (0.049 / 0.027 / 0.151 / 0.152), 4 subgroups of 32 x 16 over 64 columns with 8
/// steps (0.045 / 0.022 / 0.147 / 0.148), and a pipelined form (each group of steps' fragments
/// loaded while the previous group is multiplied, x chunks double-buffered): 0.062 / 0.026 /
/// 0.195 / 0.190 with 4 x (32 x 32), no better with 8 x (32 x 16), worse with 2 steps; so more
/// loads in flight per subgroup do not help (BENCHMARKS.md).
pub(crate) const CM_DIRECT: [CoopFixed; 3] = [
    CoopFixed {
        tile: CoopTile::new(32, 128, 256, 32, 32),
        shader: Shader::LinearCmDirect32x128x256_32x32U4,
    },
    CoopFixed {
        tile: CoopTile::new(32, 128, 256, 32, 16),
        shader: Shader::LinearCmDirect32x128x256_32x16U4,
    },
    CoopFixed {
        tile: CoopTile::new(32, 256, 256, 32, 32),
        shader: Shader::LinearCmDirect32x256x256_32x32U4,
    },
];

/// The direct variants with each invocation loading its own B elements (`LANE`: two 16-byte
/// loads per weight row and window of 64 k, in a permuted k order that x is staged in too),
/// first the default, then the default for n <= [`DIRECT_NARROW_N`]. They run only where the
/// device's B fragment layout, probed when the backend starts (`coopmat_layout.comp`), is the
/// one the shader assumes ([`DirectLayout::lane`]).
///
/// On the H200 (2026-12-03, `bench kernels --op linear`, bf16, 32 rows, GPU ms for
/// 32x14336x4096 / 32x4096x4096, one call): 4 x (32 x 32) with two windows in flight 0.080-0.081
/// / 0.028-0.029, one window 0.086-0.087 / 0.028-0.029, the direct default (coopMatLoad) 0.127 /
/// 0.042-0.043; in an earlier call 8 x (32 x 16) 0.102 / 0.033 and 0.017 ms at 32x1024x4096
/// (4 x (32 x 32): 0.021). 8 x (32 x 32) over 256 columns was within 10% of one window either
/// way. The 64-row tile is for [`lane_gemm_kernel`]'s larger m.
///
/// On the H200 (2026-12-03 21:00 UTC, one call, bf16, 32 rows, GPU ms by forced splits
/// 1 / 2 / 4 / 8 / 16): 32x14336x4096 on 4 x (32 x 32) over 128 columns with two windows
/// 0.101 / **0.075** / 0.081 / 0.091 / 0.101, on 8 x (32 x 32) over 256 columns 0.106 /
/// **0.072** / 0.077 / 0.087 / 0.098; 32x4096x4096 0.077 / 0.049 / 0.033 / **0.029** / 0.041
/// and 0.087 / 0.051 / 0.033 / **0.025** / 0.036. The fastest grid is about one wave at the
/// kernels' occupancy (8 warps an SM at their ~255 registers: [`LANE_WAVE_WARPS`]), so the 256
/// columns, which were behind with the old splits (0.036 against 0.030 at 4096 x 4096), now
/// lead: the default for wide outputs.
pub(crate) const CM_LANE: [CoopFixed; 5] = [
    CoopFixed {
        tile: CoopTile::new(32, 256, 256, 32, 32),
        shader: Shader::LinearCmLane32x256x256_32x32U4,
    },
    CoopFixed {
        tile: CoopTile::new(32, 128, 256, 32, 16),
        shader: Shader::LinearCmLane32x128x256_32x16U4,
    },
    CoopFixed {
        tile: CoopTile::new(32, 128, 256, 32, 32),
        shader: Shader::LinearCmLane32x128x256_32x32U4,
    },
    CoopFixed {
        tile: CoopTile::new(32, 128, 256, 32, 32),
        shader: Shader::LinearCmLane32x128x256_32x32U8,
    },
    CoopFixed {
        tile: CoopTile::new(64, 128, 128, 64, 32),
        shader: Shader::LinearCmLane64x128x128_64x32U4,
    },
];

/// The [`CM_LANE`] variants that read q8_0 weights (32-row blocks, windows of 64 k one at a
/// time), in the same order of defaults: 4 x (32 x 32) for wide outputs, 8 x (32 x 16) for
/// n <= [`DIRECT_NARROW_N`].
pub(crate) const CM_LANE_Q8: [CoopFixed; 2] = [CM_LANE[2], CM_LANE[1]];

/// The [`CM_LANE`] variant [`lane_gemm_kernel`] runs up to [`LANE_GEMM_MAX_WEIGHTS`] weights
/// unless `KINEMA_VK_CM_STREAM` names another: 8 subgroups of 32 x 32 over 256 columns. On the
/// H200 (2026-12-03 17:10 UTC, one call, f16, GPU ms; 128 columns / 256 columns, the same in two
/// runs each): 606x3072x1024 0.055 / 0.048, 606x1024x1024 0.031 / 0.027, 606x1024x2048 0.058
/// / 0.052, 606x2048x1024 0.054 / 0.047, 404x3072x1024 0.054 / 0.048, 404x1024x1024 0.028 /
/// 0.026, 404x1024x2048 0.036 / 0.032. Each B fragment still feeds two products; the wider
/// tile halves how often each row block's x is staged per weight read.
const LANE_GEMM: usize = 0;

/// Whether `table`, what `coopmat_layout.comp` wrote for a 32-invocation subgroup (the
/// fragment length, then each invocation's elements; element (row r, column c) of the probed
/// fragment holds 16 c + r), is the layout the [`CM_LANE`] variants assume: 8 elements per
/// invocation, element e of invocation i at column i / 4 + 8 (e / 4) and row 2 (i % 4) + e % 2
/// + 8 ((e / 2) % 2) (NVIDIA's `mma` B fragment).
pub(crate) fn lane_layout_matches(table: &[f32]) -> bool {
    const LANES: usize = 32;
    const LEN: usize = 8;
    if table.len() < 1 + LANES * LEN || table[0] != LEN as f32 {
        return false;
    }
    (0..LANES).all(|i| {
        (0..LEN).all(|e| {
            let col = i / 4 + 8 * (e / 4);
            let row = 2 * (i % 4) + e % 2 + 8 * ((e / 2) % 2);
            table[1 + i * LEN + e] == (16 * col + row) as f32
        })
    })
}

/// Output widths up to which the direct default is [`CM_DIRECT`]'s second variant (8
/// subgroups of 32 x 16): LLM2Vec's 1024-wide k and v projections took 0.021 against 0.025 ms
/// on it, where the wider outputs are faster on the first.
const DIRECT_NARROW_N: usize = 2048;

/// Whether a linear's weights can be read as [`CM_DIRECT`] reads them: 16 x 16 fragments
/// straight from the buffer through its 16-byte view, so k and n multiples of 16 (no fragment
/// past a row's end or past the last row) and the first weight on a 16-byte boundary.
///
/// `lane` says whether the [`CM_LANE`] variants may read them too: the same layout on a device
/// whose probed B fragment layout is the one they assume. `lane_q8` whether the first two
/// [`CM_LANE`] variants (windows of 64 k, one at a time) may read them as q8_0 weights: on
/// such a device, n a multiple of 16, k of 64 (every window two whole blocks, which the lane
/// loads read at any 2-byte boundary), whole fragments in every binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DirectLayout {
    pub ok: bool,
    pub lane: bool,
    pub lane_q8: bool,
}

impl DirectLayout {
    /// For an n x k weight matrix starting at element `offset` of its buffer (16-bit weights),
    /// recorded in groups of `rows` weight rows (one binding each); `lane_device`: the device's
    /// fragment layout is the one [`CM_LANE`] assumes.
    pub fn of(n: usize, k: usize, offset: usize, rows: usize, lane_device: bool) -> DirectLayout {
        let rows_ok = n.is_multiple_of(16) && (rows >= n || rows.is_multiple_of(16));
        let ok = rows_ok && k.is_multiple_of(16) && offset.is_multiple_of(8);
        DirectLayout {
            ok,
            lane: ok && lane_device,
            lane_q8: rows_ok && lane_device && k.is_multiple_of(64),
        }
    }
}

/// k per split at most for the fast-mode streaming variants unless the splits are forced: the
/// 8-subgroup tile took 0.232 ms at 32 x 4096 x 14336 with 16 splits (896 k each) against
/// 0.293 ms with the 9 that filling the GPU asks for (1600 k each).
const CM_STREAM_MAX_KS: usize = 1024;

/// Warps that fill the H200 once at the lane variants' occupancy: 132 SMs x 8 warps (their
/// 32 x 32 blocks take ~255 registers, `KINEMA_VK_PIPELINE_STATS=1`). Their automatic splits
/// make about this many warps ([`StreamGrid::wave`]; measurements at [`CM_LANE`]).
const LANE_WAVE_WARPS: usize = 4 * GEMM_MIN_WORKGROUPS;

impl CoopFixed {
    /// The grid of a fast-mode streaming variant: its columns, its k step, and at most
    /// [`CM_STREAM_MAX_KS`] k per split; the lane variants also their wave of
    /// [`LANE_WAVE_WARPS`] warps (which [`stream_splits`] follows where they stream weights).
    pub fn stream_grid(&self) -> StreamGrid {
        let lane = CM_LANE.iter().any(|v| v.shader == self.shader);
        let direct = lane || CM_DIRECT.iter().any(|v| v.shader == self.shader);
        let warps = (self.tile.bm / self.tile.wm) * (self.tile.bn / self.tile.wn);
        StreamGrid {
            columns: self.tile.bn as usize,
            kt: self.tile.bk as usize,
            max_ks: Some(CM_STREAM_MAX_KS),
            row_block: direct.then_some(self.tile.bm as usize),
            wave: lane.then(|| (LANE_WAVE_WARPS / warps.max(1) as usize).max(1)),
        }
    }
}

/// The fast-mode streaming variant for an m x n x k linear with weights of dtype `w` laid out
/// as `layout` says, that [`wants_stream`] took, given the device's cooperative-matrix shape
/// `coopmat` (none in strict mode or without one), with that shape: `KINEMA_VK_CM_STREAM=off`
/// never; `KINEMA_VK_CM_STREAM=<module>` that variant (of [`CM_STREAM`] or [`CM_DIRECT`]) for
/// every such linear when the device fits it, a direct one only where the layout allows it (else
/// the first of [`CM_STREAM`] that fits); by default, for f16 and bf16 weights of at least
/// [`STREAM_MIN_WEIGHTS`] (LLM2Vec's projections), where the layout allows it the first of
/// [`CM_DIRECT`] that fits (the second for n up to [`DIRECT_NARROW_N`], when it fits), else the
/// first of [`CM_STREAM`]. MotionBricks' narrow linears stay on
/// `linear_stream.comp`, and so do q8_0 weights, which the staged kernel reads a value at a
/// time (0.428 against 0.362 ms at 32 x 14336 x 4096 on the H200), and f32 weights, which fast
/// mode narrows to f16 at load anyway. At 32 rows each weight feeds 32 products, and f32 FMA
/// cannot keep up with the memory: the H200 would need ~140 TFLOP/s of it to stream bf16
/// weights at 4.3 TB/s, twice its peak.
pub(crate) fn cm_stream_kernel(
    [_m, n, k]: [usize; 3],
    w: DType,
    layout: DirectLayout,
    coopmat: Option<CoopMatShape>,
    l: &Limits,
    f: &Forced,
) -> Option<(CoopFixed, CoopMatShape)> {
    let s = coopmat?;
    let mut staged = CM_STREAM.iter().copied().filter(|v| v.fits(&s, l));
    let sixteen = matches!(w, DType::F16 | DType::BF16);
    let q8 = w == DType::Q8_0 && layout.lane_q8;
    let direct_ok = layout.ok && sixteen;
    let lane_ok = layout.lane && sixteen;
    // The default's order: the narrow tile first for narrow outputs.
    let first = usize::from(n <= DIRECT_NARROW_N);
    let ordered = |set: &'static [CoopFixed], ok: bool| {
        let all = set
            .iter()
            .copied()
            .filter(move |v| ok && v.fits_direct(&s, l));
        all.clone().skip(first).take(1).chain(all)
    };
    let mut direct = ordered(&CM_LANE, lane_ok)
        .chain(ordered(&CM_LANE_Q8, q8))
        .chain(ordered(&CM_DIRECT, direct_ok));
    let named = |name: &str| Some(name) == f.cm_stream.as_deref();
    let v = match f.cm_stream.as_deref() {
        Some("off") => None,
        Some(_) if CM_STREAM.iter().any(|v| named(v.shader.info().name)) => {
            staged.find(|v| named(v.shader.info().name))
        }
        Some(_)
            if CM_DIRECT
                .iter()
                .chain(&CM_LANE)
                .any(|v| named(v.shader.info().name)) =>
        {
            let default = direct.clone().next();
            direct
                .find(|v| named(v.shader.info().name))
                .or(default)
                .or_else(|| staged.next())
        }
        _ if sixteen && k.saturating_mul(n) >= STREAM_MIN_WEIGHTS => {
            direct.next().or_else(|| staged.next())
        }
        _ if q8 && k.saturating_mul(n) >= STREAM_MIN_WEIGHTS => direct.next(),
        _ => None,
    };
    v.map(|v| (v, s))
}

/// Rows above [`STREAM_MAX_M`] up to which fast mode runs 16-bit linears with weights of
/// [`LANE_GEMM_MIN_WEIGHTS`]..=[`LANE_GEMM_MAX_WEIGHTS`] on the lane-loading kernel as a GEMM
/// ([`lane_gemm_kernel`]): Kimodo's 404 and 606 rows.
pub(crate) const LANE_GEMM_MAX_M: usize = 1024;

/// Rows up to which 16-bit linears of at most [`LANE_GEMM_MAX_WEIGHTS`] weights (Kimodo's) also
/// run [`lane_gemm_kernel`] above [`LANE_GEMM_MAX_M`]: Kimodo's batched generations (16
/// motions of 2 guidance rows: 4832 rows). The 32-row blocks read the weights from L2 after the
/// first, so the time grows with m as at 606 rows, and the tiled 128 x 128 kernel stayed slower:
/// on the H200 (2026-12-04, f16, GPU ms; tiled / lane) 4800x3072x1024 0.498 / 0.313,
/// 4800x1024x1024 0.198 / 0.121, 4800x2048x1024 0.369 / 0.226, 4800x1024x2048 0.335 / 0.246,
/// 2048x3072x1024 0.199 / 0.140; 16 Kimodo motions in one generation 7.85 / 5.55 s. Larger
/// weights above 1024 rows (unmeasured) stay on the tiled kernels.
pub(crate) const LANE_GEMM_BATCH_MAX_M: usize = 8192;

/// Weight elements (k n) from which [`lane_gemm_kernel`] takes a linear: Kimodo's 1024 x 1024
/// projections (2^20) are the smallest of its linears.
pub(crate) const LANE_GEMM_MIN_WEIGHTS: usize = 1 << 20;

/// Weight elements up to which [`lane_gemm_kernel`] runs its 32-row tile; larger weights (LLM2Vec
/// at batches of 3 to 32 prompts) run the 64-row tile, which reads each weight half as often
/// from L2. At 512 rows (batch 16) on the H200 (2026-12-03, f16, GPU ms; tiled / 32-row /
/// 64-row): 512x4096x4096 0.247 / 0.244 / 0.221, 512x14336x4096 0.909 / 0.907 / 0.727,
/// 512x4096x14336 0.757 / 0.744 / 0.733; at Kimodo's shapes the 64-row tile was within 6% of
/// the 32-row one except 606x1024x1024 (0.046 against 0.031), and the whole generation slower
/// (0.897 against 0.720 s).
pub(crate) const LANE_GEMM_MAX_WEIGHTS: usize = 1 << 23;

/// The [`CM_LANE`] variant for weights over [`LANE_GEMM_MAX_WEIGHTS`] (64-row blocks).
const LANE_GEMM_WIDE: usize = 4;

/// The lane-loading variant that runs an m x n x k linear of `w` weights laid out as `layout`
/// says as a GEMM in fast mode (every row block of 32 a workgroup of its own along the grid's
/// third dimension, the weights read from L2 after the first), given the device's
/// cooperative-matrix shape: for 16-bit weights that the lane variants may read, m in
/// ([`STREAM_MAX_M`], [`LANE_GEMM_MAX_M`]] (or up to [`LANE_GEMM_BATCH_MAX_M`] with at most
/// [`LANE_GEMM_MAX_WEIGHTS`] weights) and at least [`LANE_GEMM_MIN_WEIGHTS`] weights,
/// unless `KINEMA_VK_LINEAR` names another kernel (`stream-window` is the default). The variant
/// `KINEMA_VK_CM_STREAM` names if it is one of [`CM_LANE`], else up to
/// [`LANE_GEMM_MAX_WEIGHTS`] weights [`LANE_GEMM`] (8 subgroups of 32 x 32 over 256 columns,
/// one window of 64 k at a time), and above it 4 subgroups of 64 x 32. On the
/// H200 (2026-12-03, `bench kernels --op linear`, f16 weights, GPU ms; tiled / 32 x 32 over
/// 128 columns): 606x3072x1024 0.069 / 0.055, 606x1024x1024 0.057 / 0.031, 606x1024x2048 0.096
/// / 0.058, 404x3072x1024 0.070 / 0.054 (8 subgroups of 32 x 16: 0.065 / 0.034 / 0.054 /
/// 0.050); 256 columns took another 10-13% off ([`LANE_GEMM`]).
///
/// q8_0 weights that the lane variants may read ([`DirectLayout::lane_q8`]) run the same way
/// on the q8_0 lane default, [`CM_LANE_Q8`]'s first, in 32-row blocks, and above
/// [`LANE_GEMM_MAX_WEIGHTS`] weights on the 64-row tile as 16-bit weights are (each 32-row block
/// converted the whole q8_0 matrix again; `tests/vulkan_stream.rs` checks the 64-row tile on
/// q8_0), or the named variant if it reads q8_0 (those two or [`CM_LANE_Q8`]): LLM2Vec's batches
/// of 16 prompts (512 rows), which otherwise fall to the tiled kernels' element-by-element q8_0
/// loads (197 ms a batch on the H200 against 72 ms with bf16 weights, 2026-12-04).
pub(crate) fn lane_gemm_kernel(
    [m, n, k]: [usize; 3],
    w: DType,
    layout: DirectLayout,
    coopmat: Option<CoopMatShape>,
    l: &Limits,
    f: &Forced,
) -> Option<(CoopFixed, CoopMatShape)> {
    let s = coopmat?;
    let window = matches!(f.linear.as_deref(), None | Some("stream-window"));
    let weights = k.saturating_mul(n);
    let named = CM_LANE
        .iter()
        .find(|v| Some(v.shader.info().name) == f.cm_stream.as_deref());
    let q8 = w == DType::Q8_0 && layout.lane_q8;
    let sixteen = matches!(w, DType::F16 | DType::BF16) && layout.lane;
    let wide = CM_LANE[LANE_GEMM_WIDE];
    let v = if q8 {
        let default = if weights > LANE_GEMM_MAX_WEIGHTS {
            wide
        } else {
            CM_LANE_Q8[0]
        };
        named
            .filter(|v| v.shader == wide.shader || CM_LANE_Q8.iter().any(|q| q.shader == v.shader))
            .copied()
            .unwrap_or(default)
    } else if weights > LANE_GEMM_MAX_WEIGHTS {
        named.copied().unwrap_or(CM_LANE[LANE_GEMM_WIDE])
    } else {
        named.copied().unwrap_or(CM_LANE[LANE_GEMM])
    };
    (window
        && (sixteen || q8)
        && m > STREAM_MAX_M
        && (m <= LANE_GEMM_MAX_M
            || (sixteen && m <= LANE_GEMM_BATCH_MAX_M && weights <= LANE_GEMM_MAX_WEIGHTS))
        && weights >= LANE_GEMM_MIN_WEIGHTS
        && v.fits_direct(&s, l))
    .then_some((v, s))
}

/// Partial sums of the narrow tile's splits (written and read back once) that count as free
/// whatever the weights: 4 MiB, far inside a large GPU's L2 (the H200 has 50 MiB). The
/// decoders' 512 x 1536 convolutions have 3 MiB of weights, so the quarter-of-the-weights cap
/// would hold them to 6 splits at 60 columns; 24 splits (8 column groups x 24 = 192
/// workgroups) measured 26 against 39 us at 8 splits and 48 us at the cap.
pub(crate) const NARROW_FREE_PARTIAL_BYTES: usize = 4 << 20;

/// The grid of a split-k streaming kernel: output columns per workgroup, the k step that
/// every split but the last takes a whole number of, and the most k a split should take (more
/// splits than filling the GPU asks for, when k is long).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamGrid {
    pub columns: usize,
    pub kt: usize,
    pub max_ks: Option<usize>,
    /// Rows per workgroup where the grid's third dimension walks the row blocks (the direct
    /// and lane variants); `None` where each workgroup walks every row block in turn.
    pub row_block: Option<usize>,
    /// Workgroups that fill the GPU once (the lane variants). The automatic splits are as
    /// many as fit in it without exceeding it, `wave / groups` (at least one), with no bound
    /// on k per split: where they stream weights (one row block, or more than
    /// [`LANE_GEMM_MAX_WEIGHTS`] weights, which L2 does not keep for the next row block) at
    /// most as many as the partial sums allow, and over several row blocks (a GEMM whose
    /// weights L2 keeps) at most one per k step. The GEMM's splits used to follow `max_ks`
    /// (1024 k); on the H200 (2026-12-04, f16, GPU ms, 1 / 2 splits) 606x1024x2048 0.042 /
    /// 0.052, 4800x1024x2048 0.203 / 0.247, 404x1024x1024 0.026 / 0.024 (52 workgroups: the
    /// wave asks for 2), and Kimodo's generations 3% faster (2 rows 0.676 -> 0.656 s).
    pub wave: Option<usize>,
}

impl StreamGrid {
    /// Workgroups along the grid's third dimension for m rows.
    pub fn row_groups(&self, m: usize) -> usize {
        self.row_block.map_or(1, |b| m.div_ceil(b).max(1))
    }
}

/// Splits of k for an m x n x k linear on a streaming kernel of grid `t` with weight rows of
/// `row_bytes`, and k per split: the forced count (`KINEMA_VK_STREAM_SPLITS`) when positive; else
/// as many as the grid's `wave` holds ([`StreamGrid::wave`]: the lane variants), or enough for
/// [`GEMM_MIN_WORKGROUPS`] workgroups (and at least enough for the grid's `max_ks`), but at
/// most so many that the partial sums (4 m bytes
/// per column and split, written and read back) stay within a quarter of the weight bytes or
/// within `free_partial_bytes`, whichever allows more. Every split but the last takes a whole
/// number of stages (k per split is a multiple of the stage); with the partial sums over
/// `max_binding` the splits shrink to fit.
pub(crate) fn stream_splits(
    [m, n, k]: [usize; 3],
    row_bytes: usize,
    free_partial_bytes: usize,
    t: StreamGrid,
    l: &Limits,
    f: &Forced,
) -> (usize, usize) {
    let groups = n.div_ceil(t.columns) * t.row_groups(m);
    let forced = f
        .stream_splits
        .as_deref()
        .and_then(|s| s.parse::<usize>().ok());
    let want = match forced.filter(|&s| s > 0) {
        Some(s) => s,
        None => {
            let partial = 4 * m.max(1);
            let cap = (row_bytes / (4 * partial))
                .max(free_partial_bytes / (partial * n.max(1)))
                .max(1);
            let streams = t.row_groups(m) == 1 || k.saturating_mul(n) > LANE_GEMM_MAX_WEIGHTS;
            match t.wave {
                Some(wave) if streams => (wave / groups.max(1)).clamp(1, cap),
                // Over several row blocks the weights come from L2 after the first: as many
                // splits as one wave holds, whatever k per split that leaves.
                Some(wave) => (wave / groups.max(1)).clamp(1, k.div_ceil(t.kt).max(1)),
                None => {
                    let fill = if groups >= GEMM_MIN_WORKGROUPS {
                        1
                    } else {
                        GEMM_MIN_WORKGROUPS.div_ceil(groups).min(cap)
                    };
                    fill.max(t.max_ks.map_or(1, |ks| k.div_ceil(ks.max(1))))
                }
            }
        }
    };
    let fit = (l.max_binding / 2 / (4 * (m * n).max(1) as u64)).max(1) as usize;
    let kt = t.kt;
    let ks = k
        .div_ceil(want.min(fit).max(1))
        .next_multiple_of(kt)
        .max(kt);
    (k.div_ceil(ks).max(1), ks)
}

#[cfg(test)]
mod tests {
    use super::super::super::{test_h200 as h200, test_limits as limits};
    use super::*;

    /// A tile of 4 lanes per column.
    fn t(wg: u32, mb: u32, cpi: u32, kt: u32, rc: u32) -> StreamTile {
        StreamTile {
            wg,
            mb,
            cpi,
            lk: 4,
            kt,
            rc,
        }
    }

    /// `KINEMA_VK_CM_STREAM` naming `v`.
    fn cm_forced(v: CoopFixed) -> Forced {
        Forced {
            cm_stream: Some(v.shader.info().name.into()),
            ..Forced::default()
        }
    }

    fn forced(linear: Option<&str>, tile: Option<&str>, splits: Option<&str>) -> Forced {
        Forced {
            linear: linear.map(Into::into),
            stream_tile: tile.map(Into::into),
            stream_splits: splits.map(Into::into),
            ..Forced::default()
        }
    }

    #[test]
    fn the_window_takes_llm2vec_shapes_and_not_the_other_models() {
        // The window is the default: no override and `stream-window` choose alike.
        for window in [Forced::default(), forced(Some("stream-window"), None, None)] {
            for n_k in [[4096, 4096], [1024, 4096], [14336, 4096], [4096, 14336]] {
                for m in [2, 16, 32, 64] {
                    assert!(wants_stream([m, n_k[0], n_k[1]], &window), "{m}x{n_k:?}");
                }
                // One row (Kimodo's text projection is 1 x 1024 x 4096) and more than 64 do
                // not.
                assert!(!wants_stream([1, n_k[0], n_k[1]], &window));
                assert!(!wants_stream([65, n_k[0], n_k[1]], &window));
            }
            // MotionBricks' transformer linears at batch 1 and 2 (25 / 50 rows, 512 x 512 to
            // 3072 x 1024) do; Kimodo's (404 / 606 rows), MotionBricks' at batch 16 (400 rows)
            // and weights under 512 x 512 do not.
            for n_k in [
                [512, 512],
                [1536, 512],
                [512, 2048],
                [3072, 1024],
                [1024, 2048],
            ] {
                assert!(wants_stream([25, n_k[0], n_k[1]], &window), "{n_k:?}");
                assert!(wants_stream([50, n_k[0], n_k[1]], &window), "{n_k:?}");
                assert!(!wants_stream([400, n_k[0], n_k[1]], &window), "{n_k:?}");
            }
            assert!(!wants_stream([606, 3072, 1024], &window));
            assert!(!wants_stream([25, 511, 512], &window));
            assert!(!wants_stream([25, 64, 256], &window));
        }
        // The override wins both ways.
        assert!(wants_stream([1, 3, 5], &forced(Some("stream"), None, None)));
        assert!(!wants_stream(
            [32, 4096, 4096],
            &forced(Some("tiled"), None, None)
        ));
        assert!(!wants_stream(
            [32, 4096, 4096],
            &forced(Some("skinny"), None, None)
        ));
        assert!(!wants_stream(
            [32, 4096, 4096],
            &forced(Some("bogus"), None, None)
        ));
    }

    #[test]
    fn conv_window_takes_the_decoders_few_columns() {
        let none = Forced::default();
        let conv = |v: &str| Forced {
            conv: Some(v.into()),
            ..Forced::default()
        };
        // MotionBricks' decoder convolutions at batch 1 (15, 30 and 60 positions) and 4 x 15.
        for cols in [1, 15, 30, 60, 64] {
            assert!(conv_wants_stream([cols, 512, 1536], &none), "{cols}");
            assert!(conv_wants_stream([cols, 512, 768], &none), "{cols}");
        }
        // More columns (batch 16 x 60), or small weights (the root head's 5 x 1536 output
        // convolution), stay tiled.
        assert!(!conv_wants_stream([65, 512, 1536], &none));
        assert!(!conv_wants_stream([960, 512, 1536], &none));
        assert!(!conv_wants_stream([60, 5, 1536], &none));
        assert!(conv_wants_stream([60, 64, 1024], &none));
        assert!(!conv_wants_stream([60, 63, 1024], &none));
        // Nothing to compute: not streamed.
        assert!(!conv_wants_stream([0, 512, 1536], &none));
        // The override wins both ways.
        assert!(conv_wants_stream([960, 5, 3], &conv("stream")));
        for v in ["tiled", "bogus", ""] {
            assert!(!conv_wants_stream([60, 512, 1536], &conv(v)), "{v}");
        }
    }

    #[test]
    fn tile_fits_each_device() {
        let none = Forced::default();
        // The H200 (48 KiB) stages 256 k of 32 rows; lavapipe (32 KiB) 128.
        assert_eq!(
            stream_tile(32, &h200(), &none),
            Some(t(256, 32, 2, 256, 16))
        );
        assert_eq!(
            stream_tile(32, &limits(1024, 32768), &none),
            Some(t(256, 32, 2, 128, 16))
        );
        assert_eq!(
            stream_tile(64, &h200(), &none),
            Some(t(256, 32, 2, 256, 16))
        );
        assert_eq!(stream_tile(7, &h200(), &none), Some(t(256, 8, 8, 256, 16)));
        assert_eq!(stream_tile(1, &h200(), &none), Some(t(256, 1, 8, 256, 8)));
        // 128 invocations and 16 KiB: the smaller workgroup and stage.
        assert_eq!(
            stream_tile(32, &limits(128, 16384), &none),
            Some(t(128, 32, 2, 64, 16))
        );
        // Nothing fits 32 invocations and 1 KiB.
        assert_eq!(stream_tile(32, &limits(32, 1024), &none), None);
        for l in [h200(), limits(1024, 32768), limits(128, 16384)] {
            for m in 1..=64 {
                let t = stream_tile(m, &l, &none).unwrap();
                assert!(
                    t.valid() && t.shared_bytes() <= l.max_shared_memory,
                    "{t:?}"
                );
            }
        }
        // A forced tile that fits is taken; an invalid or unfitting one is ignored.
        let f = forced(None, Some("64x4x4x4x32"), None);
        assert_eq!(stream_tile(32, &h200(), &f), Some(t(64, 4, 4, 32, 16)));
        for bad in [
            "64x4x4x4x20",
            "64x64x1x4x32",
            "64x32x4x4x32",
            "2048x32x2x4x32",
            "64x4",
        ] {
            let f = forced(None, Some(bad), None);
            assert_eq!(
                stream_tile(32, &h200(), &f),
                stream_tile(32, &h200(), &none),
                "{bad}"
            );
        }
    }

    #[test]
    fn linears_under_4m_weights_and_convs_take_the_narrow_tile() {
        let none = Forced::default();
        let l = h200();
        // MotionBricks' shapes: one column per invocation, 64 k stages, free partial sums.
        assert_eq!(
            linear_stream_tile([25, 3072, 1024], &l, &none),
            Some((t(256, 32, 1, 64, 16), NARROW_FREE_PARTIAL_BYTES))
        );
        assert_eq!(
            narrow_stream_tile(15, &l, &none),
            Some(t(256, 16, 1, 64, 16))
        );
        assert_eq!(narrow_stream_tile(2, &l, &none), Some(t(256, 2, 1, 64, 2)));
        // LLM2Vec's (4096 x 1024 is the smallest): the wide tile, partial sums capped by the
        // weights alone.
        assert_eq!(
            linear_stream_tile([32, 1024, 4096], &l, &none),
            Some((t(256, 32, 2, 256, 16), 0))
        );
        // A forced tile wins for both.
        let f = forced(None, Some("64x4x4x4x32"), None);
        assert_eq!(narrow_stream_tile(25, &l, &f), Some(t(64, 4, 4, 32, 16)));
        for dev in [h200(), limits(1024, 32768), limits(128, 16384)] {
            for m in 1..=64 {
                let t = narrow_stream_tile(m, &dev, &none).unwrap();
                assert!(t.valid() && t.fits(&dev) && t.cpi == 1, "{t:?}");
            }
        }
        // The decoders' 512 x 1536 convolution at 60 columns: 8 column groups, and the free
        // 4 MiB of partial sums lets it take one 64 k stage per split (24 splits, 192
        // workgroups) where a quarter of its 3 MiB of weights would allow 6.
        let c = narrow_stream_tile(60, &l, &none).unwrap();
        let conv = |free| stream_splits([60, 512, 1536], 4 * 1536, free, c.grid(), &l, &none);
        assert_eq!(conv(NARROW_FREE_PARTIAL_BYTES), (24, 64));
        assert_eq!(conv(0), (6, 256));
        // 25 x 1024 x 1024 f16: 16 column groups, 16 splits of one stage.
        let lin = narrow_stream_tile(25, &l, &none).unwrap();
        assert_eq!(
            stream_splits(
                [25, 1024, 1024],
                2048,
                NARROW_FREE_PARTIAL_BYTES,
                lin.grid(),
                &l,
                &none
            ),
            (16, 64)
        );
    }

    #[test]
    fn splits_fill_the_gpu_within_the_partial_traffic_cap() {
        let none = Forced::default();
        let l = h200();
        let t = stream_tile(32, &l, &none).unwrap();
        let bf16 = |k: usize| 2 * k;
        let q8 = |k: usize| k / 32 * 34;
        let s = |n: usize, k: usize, row: usize, f: &Forced| {
            stream_splits([32, n, k], row, 0, t.grid(), &l, f)
        };
        // 32 column groups of 128: 9 wanted, 512 k (two stages) per split.
        assert_eq!(s(4096, 4096, bf16(4096), &none), (8, 512));
        // 8 column groups: 33 wanted, capped at 16 (partials at a quarter of the weights).
        assert_eq!(s(1024, 4096, bf16(4096), &none), (16, 256));
        assert_eq!(s(1024, 4096, q8(4096), &none), (8, 512));
        assert_eq!(s(14336, 4096, bf16(4096), &none), (3, 1536));
        assert_eq!(s(4096, 14336, bf16(14336), &none), (8, 1792));
        // Enough column groups: one split.
        assert_eq!(s(264 * 128, 4096, bf16(4096), &none), (1, 4096));
        // Forced counts, rounded to whole stages; zero or junk is the automatic choice.
        assert_eq!(
            s(4096, 4096, bf16(4096), &forced(None, None, Some("5"))),
            (4, 1024)
        );
        assert_eq!(
            s(4096, 4096, bf16(4096), &forced(None, None, Some("1"))),
            (1, 4096)
        );
        for junk in ["0", "x"] {
            let f = forced(None, None, Some(junk));
            assert_eq!(s(4096, 4096, bf16(4096), &f), (8, 512), "{junk}");
        }
        // k shorter than a stage: one split.
        assert_eq!(s(1024, 100, 200, &none), (1, 256));
        // Partial sums over half a binding: fewer splits.
        let mut small = l.clone();
        small.max_binding = 1 << 20;
        let (splits, ks) = stream_splits([32, 1024, 4096], bf16(4096), 0, t.grid(), &small, &none);
        assert_eq!((splits, ks), (4, 1024));
        assert!(splits * 32 * 1024 * 4 <= (1 << 19));
    }

    #[test]
    fn fast_mode_streams_large_weights_on_cooperative_matrices() {
        let s = CoopMatShape::f16_16x16x16();
        let l = h200();
        let none = Forced::default();
        // A layout the direct variants cannot read (their own test is below).
        let staged_only = DirectLayout {
            ok: false,
            lane: false,
            lane_q8: false,
        };
        let pick = |mnk, c: Option<CoopMatShape>, l: &Limits, f: &Forced| {
            cm_stream_kernel(mnk, DType::BF16, staged_only, c, l, f).map(|(v, _)| v.shader)
        };
        let default = Some(CM_STREAM[0].shader);
        // Every variant fits the H200; LLM2Vec's projections take the first by default.
        for v in CM_STREAM {
            assert!(v.fits(&s, &l), "{v:?}");
        }
        for n_k in [[4096, 4096], [1024, 4096], [14336, 4096], [4096, 14336]] {
            for m in [2, 32, 64] {
                assert_eq!(pick([m, n_k[0], n_k[1]], Some(s), &l, &none), default);
            }
        }
        // The shape travels with the variant.
        let (_, shape) = cm_stream_kernel(
            [32, 4096, 4096],
            DType::BF16,
            staged_only,
            Some(s),
            &l,
            &none,
        )
        .unwrap();
        assert_eq!(shape, s);
        // f16 weights too; q8_0 (read a value at a time) and f32 stay on linear_stream.comp
        // unless a variant is forced.
        let dtype =
            |w, f: &Forced| cm_stream_kernel([32, 4096, 4096], w, staged_only, Some(s), &l, f);
        assert_eq!(dtype(DType::F16, &none).map(|(v, _)| v.shader), default);
        assert_eq!(dtype(DType::Q8_0, &none), None);
        assert_eq!(dtype(DType::F32, &none), None);
        let first = cm_forced(CM_STREAM[0]);
        for w in [DType::Q8_0, DType::F32] {
            assert_eq!(dtype(w, &first).map(|(v, _)| v.shader), default);
        }
        // Strict mode (or a device without cooperative matrices) never; MotionBricks' narrow
        // linears stay on linear_stream.comp.
        assert_eq!(pick([32, 4096, 4096], None, &l, &none), None);
        assert_eq!(pick([25, 512, 512], Some(s), &l, &none), None);
        assert_eq!(pick([25, 3072, 1024], Some(s), &l, &none), None);
        // Forced: a named variant for every shape; `off` never; an unknown name is ignored.
        let named = |name: &str| Forced {
            cm_stream: Some(name.into()),
            ..Forced::default()
        };
        for v in CM_STREAM {
            let f = named(v.shader.info().name);
            assert_eq!(pick([25, 512, 512], Some(s), &l, &f), Some(v.shader));
            assert_eq!(pick([32, 4096, 4096], Some(s), &l, &f), Some(v.shader));
        }
        assert_eq!(pick([32, 4096, 4096], Some(s), &l, &named("off")), None);
        assert_eq!(
            pick([32, 4096, 4096], Some(s), &l, &named("bogus")),
            default
        );
        assert_eq!(pick([25, 512, 512], Some(s), &l, &named("bogus")), None);
        // Subgroups of 8 (lavapipe's), another shape, or too little shared memory: none fits.
        let mut sg8 = l.clone();
        sg8.subgroup_size = 8;
        assert_eq!(pick([32, 4096, 4096], Some(s), &sg8, &none), None);
        let s16x8 = CoopMatShape { n: 8, ..s };
        assert_eq!(pick([32, 4096, 4096], Some(s16x8), &l, &none), None);
        let mut small = l.clone();
        small.max_shared_memory = 16384;
        assert_eq!(pick([32, 4096, 4096], Some(s), &small, &none), None);
        // Its grid: 128 columns per workgroup, whole k steps of 32 per split, and enough
        // workgroups for the GPU at n = 4096 (32 column tiles).
        let grid = CM_STREAM[0].stream_grid();
        let (splits, ks) = stream_splits([32, 4096, 4096], 8192, 0, grid, &l, &none);
        assert_eq!((splits, ks), (9, 480));
        assert!(32 * splits >= GEMM_MIN_WORKGROUPS, "{splits} splits");
        // k = 14336: 9 splits fill the GPU, but at most 1024 k a split asks for 14.
        let (splits, ks) = stream_splits([32, 4096, 14336], 28672, 0, grid, &l, &none);
        assert_eq!((splits, ks), (14, 1024));
        // A forced count wins.
        let three = Forced {
            stream_splits: Some("3".into()),
            ..Forced::default()
        };
        let (splits, ks) = stream_splits([32, 4096, 14336], 28672, 0, grid, &l, &three);
        assert_eq!((splits, ks), (3, 4800));
    }

    #[test]
    fn direct_variants_take_the_layouts_they_can_read() {
        let s = CoopMatShape::f16_16x16x16();
        let l = h200();
        let none = Forced::default();
        let named = |name: &str| Forced {
            cm_stream: Some(name.into()),
            ..Forced::default()
        };
        let pick = |mnk, w, layout, f: &Forced| {
            cm_stream_kernel(mnk, w, layout, Some(s), &l, f).map(|(v, _)| v.shader)
        };
        // The layout: k and n multiples of 16, the weights on a 16-byte boundary (8 halves),
        // and whole fragments in every binding's group of rows.
        let ok = DirectLayout {
            ok: true,
            lane: false,
            lane_q8: false,
        };
        assert_eq!(DirectLayout::of(4096, 14336, 0, usize::MAX, false), ok);
        assert_eq!(DirectLayout::of(4096, 4096, 8 * 4096, 4096, false), ok);
        assert_eq!(DirectLayout::of(14336, 4096, 0, 8192, false), ok);
        let bad = DirectLayout {
            ok: false,
            lane: false,
            lane_q8: false,
        };
        assert_eq!(DirectLayout::of(4104, 4096, 0, usize::MAX, false), bad);
        assert_eq!(DirectLayout::of(4096, 4104, 0, usize::MAX, false), bad);
        assert_eq!(DirectLayout::of(4096, 4096, 4, usize::MAX, false), bad);
        assert_eq!(DirectLayout::of(14336, 4096, 0, 8200, false), bad);
        // Every variant fits the H200, and none a device of 8-invocation subgroups or another
        // shape.
        let mut sg8 = l.clone();
        sg8.subgroup_size = 8;
        let s16x8 = CoopMatShape { n: 8, ..s };
        for v in CM_DIRECT {
            assert!(v.fits_direct(&s, &l), "{v:?}");
            assert!(!v.fits_direct(&s, &sg8), "{v:?}");
            assert!(!v.fits_direct(&s16x8, &l), "{v:?}");
        }
        // By default LLM2Vec's projections take the first direct variant where the layout
        // allows it, for f16 and bf16 weights (the second for k and v, 1024 wide); else the
        // staged default.
        let staged = Some(CM_STREAM[0].shader);
        for n_k in [[4096, 4096], [1024, 4096], [14336, 4096], [4096, 14336]] {
            let default = Some(CM_DIRECT[usize::from(n_k[0] == 1024)].shader);
            for w in [DType::BF16, DType::F16] {
                assert_eq!(pick([32, n_k[0], n_k[1]], w, ok, &none), default);
                assert_eq!(pick([32, n_k[0], n_k[1]], w, bad, &none), staged);
            }
            for w in [DType::Q8_0, DType::F32] {
                assert_eq!(pick([32, n_k[0], n_k[1]], w, ok, &none), None);
            }
        }
        assert_eq!(pick([25, 3072, 1024], DType::BF16, ok, &none), None);
        // Forced: that variant where the layout allows it, else the staged default; q8_0 and
        // f32 weights (which it cannot read) take the staged default too. `off` never.
        for v in CM_DIRECT {
            let f = named(v.shader.info().name);
            assert_eq!(pick([32, 4096, 4096], DType::BF16, ok, &f), Some(v.shader));
            assert_eq!(pick([25, 512, 512], DType::F16, ok, &f), Some(v.shader));
            assert_eq!(pick([32, 4096, 4096], DType::BF16, bad, &f), staged);
            assert_eq!(pick([32, 4096, 4096], DType::Q8_0, ok, &f), staged);
            assert_eq!(pick([32, 4096, 4096], DType::F32, ok, &f), staged);
        }
        assert_eq!(pick([32, 4096, 4096], DType::BF16, ok, &named("off")), None);
        // The narrow default is 8 subgroups: where the device allows only 128 invocations,
        // narrow outputs take the first variant that fits instead.
        assert_eq!(
            pick([32, 2048, 4096], DType::BF16, ok, &none),
            Some(CM_DIRECT[1].shader)
        );
        assert_eq!(
            pick([32, 2064, 4096], DType::BF16, ok, &none),
            Some(CM_DIRECT[0].shader)
        );
        let mut narrow = l.clone();
        narrow.max_workgroup_invocations = 128;
        assert!(!CM_DIRECT[1].fits_direct(&s, &narrow) && CM_DIRECT[0].fits_direct(&s, &narrow));
        let got = cm_stream_kernel([32, 1024, 4096], DType::BF16, ok, Some(s), &narrow, &none);
        assert_eq!(got.map(|(v, _)| v.shader), Some(CM_DIRECT[0].shader));
        // Too little shared memory for any direct variant (the smallest, 4 subgroups of 32 x
        // 32 over 256 k, needs 20,992 bytes): none (the staged tiles need more still).
        let mut small = l.clone();
        small.max_shared_memory = 20 * 1024;
        assert!(CM_DIRECT.iter().all(|v| !v.fits_direct(&s, &small)));
        let got = cm_stream_kernel([32, 4096, 4096], DType::BF16, ok, Some(s), &small, &none);
        assert_eq!(got, None);
    }

    #[test]
    fn lane_variants_need_the_probed_layout() {
        let s = CoopMatShape::f16_16x16x16();
        let l = h200();
        let none = Forced::default();
        let pick = |mnk, w, layout, f: &Forced| {
            cm_stream_kernel(mnk, w, layout, Some(s), &l, f).map(|(v, _)| v.shader)
        };
        // The layout a device gets when its probe agrees: lane only where direct is also ok.
        let lane = DirectLayout::of(4096, 4096, 0, usize::MAX, true);
        let all = DirectLayout {
            ok: true,
            lane: true,
            lane_q8: true,
        };
        assert_eq!(lane, all);
        // q8_0 blocks may start anywhere; 16-bit weights need a 16-byte boundary.
        let q8_only = DirectLayout {
            ok: false,
            lane: false,
            lane_q8: true,
        };
        assert_eq!(DirectLayout::of(4096, 4096, 4, usize::MAX, true), q8_only);
        // q8_0 needs k in whole windows of 64; nothing runs lane loads without the probe.
        let no_q8 = DirectLayout {
            lane_q8: false,
            ..all
        };
        assert_eq!(DirectLayout::of(4096, 4128, 0, usize::MAX, true), no_q8);
        let direct = DirectLayout {
            lane: false,
            lane_q8: false,
            ..all
        };
        assert_eq!(DirectLayout::of(4096, 4096, 0, usize::MAX, false), direct);
        for v in CM_LANE {
            assert!(v.fits_direct(&s, &l), "{v:?}");
        }
        // By default the lane variants replace the direct ones, the narrow one for n <= 2048,
        // for 16-bit and q8_0 weights; without the probed layout the direct ones run (q8_0 on
        // linear_stream: none here); f32 weights never.
        for n_k in [[4096, 4096], [1024, 4096], [14336, 4096], [4096, 14336]] {
            let narrow = usize::from(n_k[0] <= DIRECT_NARROW_N);
            let mnk = [32, n_k[0], n_k[1]];
            for w in [DType::BF16, DType::F16] {
                assert_eq!(pick(mnk, w, lane, &none), Some(CM_LANE[narrow].shader));
                assert_eq!(pick(mnk, w, direct, &none), Some(CM_DIRECT[narrow].shader));
            }
            let q8 = Some(CM_LANE_Q8[narrow].shader);
            assert_eq!(pick(mnk, DType::Q8_0, lane, &none), q8);
            assert_eq!(pick(mnk, DType::Q8_0, q8_only, &none), q8);
            assert_eq!(pick(mnk, DType::Q8_0, no_q8, &none), None);
            assert_eq!(pick(mnk, DType::Q8_0, direct, &none), None);
            assert_eq!(pick(mnk, DType::F32, lane, &none), None);
        }
        // q8_0 forced onto a lane variant that does not read it (two windows in flight, 64
        // rows) takes the q8_0 default; one that does is taken.
        for v in [CM_LANE[3], CM_LANE[4]] {
            let f = cm_forced(v);
            let got = pick([32, 4096, 4096], DType::Q8_0, lane, &f);
            assert_eq!(got, Some(CM_LANE_Q8[0].shader));
            assert_eq!(
                pick([32, 4096, 4096], DType::BF16, lane, &f),
                Some(v.shader)
            );
        }
        for v in CM_LANE_Q8 {
            let f = cm_forced(v);
            assert_eq!(
                pick([32, 4096, 4096], DType::Q8_0, lane, &f),
                Some(v.shader)
            );
        }
        // Forced: a lane variant where the probe agreed, else the direct default; a direct
        // variant is still taken on a device that could run the lane ones.
        for v in CM_LANE {
            let f = cm_forced(v);
            assert_eq!(
                pick([32, 4096, 4096], DType::BF16, lane, &f),
                Some(v.shader)
            );
            assert_eq!(
                pick([32, 4096, 4096], DType::BF16, direct, &f),
                Some(CM_DIRECT[0].shader)
            );
        }
        let f = cm_forced(CM_DIRECT[2]);
        assert_eq!(
            pick([32, 4096, 4096], DType::BF16, lane, &f),
            Some(CM_DIRECT[2].shader)
        );
    }

    #[test]
    fn the_lane_layout_is_checked_element_by_element() {
        // NVIDIA's table, as the probe writes it.
        let mut table = vec![8.0f32];
        for i in 0..32 {
            for e in 0..8 {
                let col = i / 4 + 8 * (e / 4);
                let row = 2 * (i % 4) + e % 2 + 8 * ((e / 2) % 2);
                table.push((16 * col + row) as f32);
            }
        }
        assert!(lane_layout_matches(&table));
        // Any other layout, length or a short table is refused.
        let mut swapped = table.clone();
        swapped.swap(1, 2);
        assert!(!lane_layout_matches(&swapped));
        let mut other = table.clone();
        other[0] = 16.0;
        assert!(!lane_layout_matches(&other));
        assert!(!lane_layout_matches(&table[..100]));
        assert!(!lane_layout_matches(&[]));
    }

    #[test]
    fn kimodo_shapes_run_the_lane_kernel_as_a_gemm() {
        let s = CoopMatShape::f16_16x16x16();
        let l = h200();
        let none = Forced::default();
        let lane = DirectLayout::of(3072, 1024, 0, usize::MAX, true);
        let direct = DirectLayout::of(3072, 1024, 0, usize::MAX, false);
        let pick = |mnk, w, layout, f: &Forced| {
            lane_gemm_kernel(mnk, w, layout, Some(s), &l, f).map(|(v, _)| v.shader)
        };
        let want = Some(CM_LANE[LANE_GEMM].shader);
        // Kimodo's linears at 404 and 606 rows, f16 (fast mode narrows its f32 weights) or
        // bf16.
        for m in [404, 606, 65, 1024] {
            for n_k in [[3072, 1024], [1024, 1024], [2048, 1024], [1024, 2048]] {
                for w in [DType::F16, DType::BF16] {
                    assert_eq!(
                        pick([m, n_k[0], n_k[1]], w, lane, &none),
                        want,
                        "{m} {n_k:?}"
                    );
                }
            }
        }
        // Not: few rows (the streaming window's), too many, weights out of range, other
        // dtypes, a device or layout without lane loads, no cooperative matrices, or a
        // KINEMA_VK_LINEAR naming another kernel.
        assert_eq!(pick([64, 3072, 1024], DType::F16, lane, &none), None);
        // Kimodo's batches (16 motions: 4832 rows) up to 8192 rows with Kimodo-sized weights;
        // not larger weights above 1024 rows, nor q8_0 there, nor more rows.
        for m in [1025, 2048, 4832, 8192] {
            for n_k in [[3072, 1024], [1024, 1024], [2048, 1024], [1024, 2048]] {
                assert_eq!(pick([m, n_k[0], n_k[1]], DType::F16, lane, &none), want);
            }
            assert_eq!(pick([m, 4096, 4096], DType::BF16, lane, &none), None);
            assert_eq!(pick([m, 3072, 1024], DType::Q8_0, lane, &none), None);
        }
        assert_eq!(pick([8193, 3072, 1024], DType::F16, lane, &none), None);
        assert_eq!(pick([1025, 8192, 1025], DType::F16, lane, &none), None);
        assert_eq!(pick([606, 1024, 1023], DType::F16, lane, &none), None);
        // Larger weights (LLM2Vec at batch 16) take the 64-row tile.
        for n_k in [[4096, 4096], [14336, 4096], [4096, 14336], [8192, 1025]] {
            let got = pick([512, n_k[0], n_k[1]], DType::BF16, lane, &none);
            assert_eq!(got, Some(CM_LANE[LANE_GEMM_WIDE].shader), "{n_k:?}");
        }
        assert_eq!(pick([512, 8192, 1024], DType::BF16, lane, &none), want);
        assert_eq!(pick([606, 8192, 1024], DType::F16, lane, &none), want);
        assert_eq!(pick([606, 3072, 1024], DType::F32, lane, &none), None);
        // q8_0 where the lane variants read it: the q8_0 lane default, at every size (or the
        // named variant if it reads q8_0); not where k is off the windows of 64 or without
        // the probe.
        let q8 = Some(CM_LANE_Q8[0].shader);
        let q8_wide = Some(CM_LANE[LANE_GEMM_WIDE].shader);
        for mnk in [[606, 3072, 1024], [512, 1024, 4096], [512, 2048, 4096]] {
            assert_eq!(pick(mnk, DType::Q8_0, lane, &none), q8, "{mnk:?}");
        }
        for mnk in [[512, 14336, 4096], [512, 4096, 14336], [96, 4096, 2112]] {
            assert_eq!(pick(mnk, DType::Q8_0, lane, &none), q8_wide, "{mnk:?}");
        }
        for v in CM_LANE {
            let want = if CM_LANE_Q8.contains(&v) || v == CM_LANE[LANE_GEMM_WIDE] {
                v
            } else {
                CM_LANE_Q8[0]
            };
            let got = pick([512, 2048, 4096], DType::Q8_0, lane, &cm_forced(v));
            assert_eq!(got, Some(want.shader), "{v:?}");
        }
        let off = DirectLayout::of(3072, 1040, 0, usize::MAX, true);
        assert_eq!(pick([606, 3072, 1040], DType::Q8_0, off, &none), None);
        assert_eq!(pick([606, 3072, 1024], DType::Q8_0, direct, &none), None);
        assert_eq!(pick([606, 3072, 1024], DType::F16, direct, &none), None);
        assert_eq!(
            lane_gemm_kernel([606, 3072, 1024], DType::F16, lane, None, &l, &none),
            None
        );
        for v in ["tiled", "stream", "skinny"] {
            let f = Forced {
                linear: Some(v.into()),
                ..Forced::default()
            };
            assert_eq!(pick([606, 3072, 1024], DType::F16, lane, &f), None, "{v}");
        }
        let window = Forced {
            linear: Some("stream-window".into()),
            ..Forced::default()
        };
        assert_eq!(pick([606, 3072, 1024], DType::F16, lane, &window), want);
        // KINEMA_VK_CM_STREAM picks another lane variant; any other name is ignored here.
        for v in CM_LANE {
            let f = cm_forced(v);
            assert_eq!(
                pick([606, 3072, 1024], DType::F16, lane, &f),
                Some(v.shader)
            );
        }
        let f = cm_forced(CM_DIRECT[0]);
        assert_eq!(pick([606, 3072, 1024], DType::F16, lane, &f), want);
        // Row blocks are the grid's third dimension: 12 column groups x 19 row blocks, one
        // split (too little k per weight row for partial sums to pay).
        let grid = CM_LANE[LANE_GEMM].stream_grid();
        assert_eq!(grid.row_groups(606), 19);
        assert_eq!(CM_LANE[4].stream_grid().row_groups(606), 10);
        assert_eq!(grid.row_groups(0), 1);
        assert_eq!(CM_STREAM[0].stream_grid().row_groups(606), 1);
        assert_eq!(
            stream_splits([606, 3072, 1024], 2048, 0, grid, &l, &none),
            (1, 1024)
        );
        // With one row block, 12 column groups ask for splits.
        assert!(stream_splits([32, 3072, 1024], 2048, 0, grid, &l, &none).0 > 1);
    }

    #[test]
    fn lane_splits_fill_one_wave() {
        let l = h200();
        let none = Forced::default();
        let splits = |v: CoopFixed, mnk: [usize; 3]| {
            stream_splits(mnk, 2 * mnk[2], 0, v.stream_grid(), &l, &none)
        };
        // 8 subgroups over 256 columns: a wave of 132 workgroups; 4 over 128: 264.
        assert_eq!(CM_LANE[0].stream_grid().wave, Some(132));
        assert_eq!(CM_LANE[3].stream_grid().wave, Some(264));
        assert_eq!(CM_DIRECT[0].stream_grid().wave, None);
        assert_eq!(CM_STREAM[0].stream_grid().wave, None);
        for v in [CM_LANE[0], CM_LANE[3]] {
            // 56 or 112 column groups: 2 splits of 2048 k (no 1024-k bound).
            assert_eq!(splits(v, [32, 14336, 4096]), (2, 2048));
            // 16 or 32: 8 of 512, and 8 of 1792 at k = 14336.
            assert_eq!(splits(v, [32, 4096, 4096]), (8, 512));
            assert_eq!(splits(v, [32, 4096, 14336]), (8, 1792));
        }
        // Kimodo's 404 and 606 rows with weights that L2 keeps: splits only to fill the GPU,
        // no bound on k per split. 606 rows give 76 workgroups, one split (606x1024x2048: 0.052
        // ms with 2 splits, 0.042 with 1 on the H200, 2026-12-04); 404 rows give 52, two
        // splits (a single one took 404x1024x2048 from 0.032 to 0.042 ms and the 2-row
        // generation from 0.678 to 0.726 s, 2026-12-03).
        assert_eq!(splits(CM_LANE[0], [606, 1024, 2048]), (1, 2048));
        assert_eq!(splits(CM_LANE[0], [404, 1024, 2048]), (2, 1024));
        // LLM2Vec at 16 prompts (512 rows, 8 row blocks of the 64-row tile) streams its 2^24+
        // weights: one split of 4096 k where 1024 k asked for 4 (0.221 -> 0.176 ms at 4096^2).
        assert_eq!(CM_LANE[4].stream_grid().wave, Some(264));
        assert_eq!(splits(CM_LANE[4], [512, 4096, 4096]), (1, 4096));
        assert_eq!(splits(CM_LANE[4], [512, 14336, 4096]), (1, 4096));
        // The partial sums still bound the splits: 4 KiB weight rows at 32 rows allow 8.
        assert_eq!(splits(CM_LANE[1], [32, 128, 2048]).0, 8);
        // A forced count wins.
        let four = Forced {
            stream_splits: Some("4".into()),
            ..Forced::default()
        };
        let grid = CM_LANE[0].stream_grid();
        assert_eq!(
            stream_splits([32, 14336, 4096], 8192, 0, grid, &l, &four),
            (4, 1024)
        );
    }
}
