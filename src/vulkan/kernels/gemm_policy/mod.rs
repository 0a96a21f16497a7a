//! Which GEMM kernel and tile runs for which shape on which device: the strict f32 GEMM of
//! linear and batched_matmul (`gemm_f32.glsl`), the subgroup-scope cooperative-matrix kernels
//! of fast mode (the compiled fixed-tile variants `linear_cm_*` and the generic
//! `linear_coopmat`), the workgroup-scope kernel (`linear_cm2`, `VK_NV_cooperative_matrix2`),
//! the skinny kernel for linears of few rows (`linear_skinny`), the weight-streaming kernel for
//! few rows and large weights (`linear_stream`, in `stream.rs`), which also runs conv1d for
//! few output columns, and the conv1d tiles. Every choice is a pure function of the shape, the device's limits and the tuning
//! overrides ([`Forced`]), so each branch is unit-tested here without a device.

use super::super::context::{Coopmat2, Limits};
use super::super::probe::CoopMatShape;
use super::super::shaders::Shader;
use super::float_dtype_code;
use crate::tensor::DType;

mod stream;
pub(crate) use stream::{
    DirectLayout, NARROW_FREE_PARTIAL_BYTES, StreamGrid, StreamTile, cm_stream_kernel,
    conv_wants_stream, lane_gemm_kernel, lane_layout_matches, linear_stream_tile,
    narrow_stream_tile, stream_splits, wants_stream,
};

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
        workgroup_fits(self.invocations(), self.shared_bytes(), l)
    }
    /// The shader's specialization constants 0..=5: workgroup size, BM, BN, BK, TM, TN.
    pub fn spec(&self) -> [u32; 6] {
        [
            self.invocations(),
            self.bm,
            self.bn,
            self.bk,
            self.tm,
            self.tn,
        ]
    }
}

/// Whether a 1-D workgroup of `invocations` using `shared` bytes of shared memory fits.
fn workgroup_fits(invocations: u32, shared: u32, l: &Limits) -> bool {
    invocations <= l.max_workgroup_invocations
        && invocations <= l.max_workgroup_size[0]
        && shared <= l.max_shared_memory
}

// 64 invocations and 3 KiB of shared memory: within every device's guaranteed minimums.
const TILE_TINY: LinearTile = LinearTile {
    bm: 16,
    bn: 32,
    bk: 16,
    tm: 2,
    tn: 4,
};

/// Tiles of the conv1d shader (an implicit GEMM with c_out rows and batch * out_len columns),
/// the first that fits the device. The model's convolutions are 512 x 128 outputs at most
/// over c_in * kernel = 1536 products, and a workgroup walks that reduction BK at a time, each
/// step a chain of global loads, a barrier and BK fmas with nothing in flight across it: the
/// first tile, 16 x 32 with BK 64, walks it in 24 steps on 128 workgroups (32 x 32 tiles with
/// BK 16 took 96 steps on 64 workgroups: the H200 measured ~100 us a dispatch, about 1 us a
/// step). Each output still sums its products in ascending order with one fma chain, so the
/// tile does not change the result's bits. The second tile fits every device's guaranteed
/// minimums. `KINEMA_VK_CONV_TILE=BMxBNxBKxTMxTN` tries others.
const CONV_TILES: [LinearTile; 2] = [
    LinearTile {
        bm: 16,
        bn: 32,
        bk: 64,
        tm: 1,
        tn: 2,
    },
    TILE_TINY,
];

/// The conv1d tile: the forced one when valid and fitting, else the first of [`CONV_TILES`]
/// the device fits.
pub(crate) fn conv_tile(l: &Limits, f: &Forced) -> LinearTile {
    if let Some([bm, bn, bk, tm, tn]) = dims(f.conv_tile.as_deref()) {
        let t = LinearTile { bm, bn, bk, tm, tn };
        let valid = tm > 0 && tn > 0 && bk > 0 && bm % tm == 0 && bn % tn == 0;
        if valid && t.invocations() > 0 && t.fits(l) {
            return t;
        }
    }
    CONV_TILES
        .iter()
        .copied()
        .find(|t| t.fits(l))
        .unwrap_or(TILE_TINY)
}

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
        workgroup_fits(self.invocations(), self.shared_bytes(), l)
    }
    /// The shader's specialization constants 0..=5 (as [`LinearTile::spec`]).
    pub fn spec(&self) -> [u32; 6] {
        self.0.spec()
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

/// Tuning overrides from the environment, for trying tiles on a new device. Each holds the
/// variable's text; one that does not parse, or names a tile the device does not fit, is
/// ignored (the default choice runs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Forced {
    /// `KINEMA_VK_GEMM_TILE=BMxBNxBKxTMxTN`: the strict GEMM tile.
    pub gemm_tile: Option<String>,
    /// `KINEMA_VK_COOP_SHADER=<file stem>`: a fixed-tile cooperative-matrix variant, or
    /// `linear_coopmat` for the generic shader.
    pub coop_shader: Option<String>,
    /// `KINEMA_VK_COOP_TILE=BMxBNxBKxWMxWN`: the generic cooperative-matrix shader's tile.
    pub coop_tile: Option<String>,
    /// `KINEMA_VK_CM2_TILE=BMxBNxBKxWG`: the workgroup-scope tile.
    pub cm2_tile: Option<String>,
    /// `KINEMA_VK_LINEAR=tiled|skinny|stream|stream-window`: the tiled kernels (strict GEMM or
    /// cooperative matrices), the skinny kernel or the weight-streaming kernel for every
    /// linear, whatever the shape; `stream-window` (also the default): the streaming kernel
    /// for few rows and large weights ([`stream::wants_stream`]), the default choice elsewhere.
    pub linear: Option<String>,
    /// `KINEMA_VK_SKINNY_TILE=WGxMMAXxNC`: the skinny kernel's workgroup size, rows per block
    /// and columns per workgroup.
    pub skinny_tile: Option<String>,
    /// `KINEMA_VK_CONV_TILE=BMxBNxBKxTMxTN`: the conv1d tile.
    pub conv_tile: Option<String>,
    /// `KINEMA_VK_CONV=tiled|stream`: conv1d on its tiled kernel or on the weight-streaming
    /// kernel, whatever the shape (default: [`stream::conv_wants_stream`]'s window).
    pub conv: Option<String>,
    /// `KINEMA_VK_STREAM_TILE=WGxMBxCPIxLKxKT`: the streaming kernel's tile.
    pub stream_tile: Option<String>,
    /// `KINEMA_VK_STREAM_SPLITS=S`: the streaming kernel's splits of k.
    pub stream_splits: Option<String>,
    /// `KINEMA_VK_STREAM_FOLD=1`: the streaming kernel's splits of k summed by each column
    /// group's last workgroup instead of by the separate reduce dispatch.
    pub stream_fold: Option<String>,
    /// `KINEMA_VK_CM_STREAM=<module>|off`: fast mode's streaming linear on that variant of
    /// [`stream::CM_STREAM`] for every linear the streaming window takes, or never
    /// ([`stream::cm_stream_kernel`]).
    pub cm_stream: Option<String>,
    /// `KINEMA_VK_CM2_X=f16|f32`: the workgroup-scope GEMM reads x rounded to f16 by a cast
    /// dispatch before it (the default), or as f32 (rounded in the GEMM).
    pub cm2_x: Option<String>,
}

impl Forced {
    /// Whether the streaming kernel's last workgroup of each column group sums the splits of k
    /// (`KINEMA_VK_STREAM_FOLD=1`) rather than the separate reduce dispatch (the default). Same
    /// bits either way; on the H200 (2026-12-02) folding was slower: MotionBricks batch 1
    /// 4.8-4.9 against 4.2-4.3 ms p50, and each split convolution or linear 1.2-2x slower alone
    /// (the last workgroup sums a column group's splits alone, a serial tail longer than the
    /// dispatch and barrier it saves).
    pub fn stream_fold(&self) -> bool {
        self.stream_fold.as_deref() == Some("1")
    }

    /// The overrides set in the environment now.
    pub fn from_env() -> Forced {
        let var = |name| std::env::var(name).ok();
        Forced {
            gemm_tile: var("KINEMA_VK_GEMM_TILE"),
            coop_shader: var("KINEMA_VK_COOP_SHADER"),
            coop_tile: var("KINEMA_VK_COOP_TILE"),
            cm2_tile: var("KINEMA_VK_CM2_TILE"),
            linear: var("KINEMA_VK_LINEAR"),
            skinny_tile: var("KINEMA_VK_SKINNY_TILE"),
            conv_tile: var("KINEMA_VK_CONV_TILE"),
            conv: var("KINEMA_VK_CONV"),
            stream_tile: var("KINEMA_VK_STREAM_TILE"),
            stream_splits: var("KINEMA_VK_STREAM_SPLITS"),
            stream_fold: var("KINEMA_VK_STREAM_FOLD"),
            cm_stream: var("KINEMA_VK_CM_STREAM"),
            cm2_x: var("KINEMA_VK_CM2_X"),
        }
    }
}

/// The `N` numbers of an `AxBx..` override, or `None` when it has another form.
fn dims<const N: usize>(v: Option<&str>) -> Option<[u32; N]> {
    let d: Vec<u32> = v?.split('x').filter_map(|d| d.parse().ok()).collect();
    d.try_into().ok()
}

/// The forced strict GEMM tile, when it is one `gemm_f32.glsl` accepts and the device fits.
fn forced_gemm_tile(forced: Option<&str>, l: &Limits) -> Option<GemmTile> {
    let [bm, bn, bk, tm, tn] = dims(forced)?;
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

/// The strict GEMM tile for an m x n output (times `batch`): the forced one when valid, else
/// the largest that the device allows and that still gives [`GEMM_MIN_WORKGROUPS`]
/// workgroups, else the one giving the most; never a tile taller than needed for a few rows.
pub(crate) fn gemm_tile(m: usize, n: usize, batch: usize, l: &Limits, f: &Forced) -> GemmTile {
    if let Some(t) = forced_gemm_tile(f.gemm_tile.as_deref(), l) {
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
/// `linear_cm_*` variants have theirs compiled in (`tools/shaderc`'s variant table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopTile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub wm: u32,
    pub wn: u32,
}

impl CoopTile {
    const fn new(bm: u32, bn: u32, bk: u32, wm: u32, wn: u32) -> CoopTile {
        CoopTile { bm, bn, bk, wm, wn }
    }
    fn subgroups(&self) -> u32 {
        (self.bm / self.wm) * (self.bn / self.wn)
    }
    /// The specialization constants of the cooperative-matrix linears for subgroups of `sg`
    /// (16 x 16 x 16 shape): the generic shader reads them all; the fixed-tile variants
    /// (`linear_cm_*`, `linear_cm_stream_*`) only 0 (their compiled-in size), 6 (the weight
    /// dtype code) and 11 (`VEC_OK`), a module ignoring the constants it lacks.
    pub fn spec(&self, s: &CoopMatShape, sg: u32, w_dtype: u32, vec_ok: u32) -> Vec<u32> {
        vec![
            self.subgroups() * sg,
            self.bm,
            self.bn,
            self.bk,
            self.wm,
            self.wn,
            w_dtype,
            s.m,
            s.n,
            s.k,
            sg,
            vec_ok,
        ]
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
            && workgroup_fits(wg, self.shared_bytes(s, buffers), l)
    }

    /// As a direct streaming tile (`linear_cm.comp` with `DIRECT`): subgroups that cover
    /// every row, whole groups of 4 k of the x chunk per invocation, and one x chunk of bm
    /// rows of bk + 8 halves beside the staging blocks in shared memory.
    fn fits_direct(&self, s: &CoopMatShape, l: &Limits) -> bool {
        let wg = self.subgroups() * l.subgroup_size;
        let shared = self.bm * (self.bk + 8) * 2 + self.subgroups() * s.m * s.n * 4;
        self.wm == self.bm
            && self.wm.is_multiple_of(s.m)
            && self.wn.is_multiple_of(s.n)
            && self.bk.is_multiple_of(s.k)
            && (self.bm * self.bk / 4).is_multiple_of(wg)
            && (self.bn * self.bk / 4).is_multiple_of(wg)
            && workgroup_fits(wg, shared, l)
    }
}

/// One compiled fixed-tile variant (`linear_cm_*`, double-buffered shared tiles): its tile
/// and shader. They need 32-invocation subgroups and the 16 x 16 x 16 shape (what the shader
/// hard-codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopFixed {
    pub tile: CoopTile,
    pub shader: Shader,
}

impl CoopFixed {
    fn fits(&self, s: &CoopMatShape, l: &Limits) -> bool {
        l.subgroup_size == 32 && (s.m, s.n, s.k) == (16, 16, 16) && self.tile.fits(s, l, 2)
    }
    /// Whether the device runs it as a direct streaming variant
    /// ([`stream::CM_DIRECT`]).
    fn fits_direct(&self, s: &CoopMatShape, l: &Limits) -> bool {
        l.subgroup_size == 32 && (s.m, s.n, s.k) == (16, 16, 16) && self.tile.fits_direct(s, l)
    }
}

/// The fixed-tile variants, largest first: 128 x 128 with 8 subgroups of 64 x 32 (8
/// accumulators of 16 x 16 each), and 64 x 64 with 4 subgroups of 32 x 32 for outputs that
/// give too few 128 x 128 workgroups. Measured on the H200 (bf16 weights, TFLOP/s, 128 / 64
/// tiles): 4096^3 68.6 / 39.7, 606x3072x1024 33.6 / 26.5, 606x2048x1024 23.1 / 17.4,
/// 404x3072x1024 22.8 / 18.1, 606x1024x2048 15.5 / 18.3. Also measured and dropped: one
/// shared buffer (70.7 at 4096^3, 30.3 at 606x3072x1024), k steps of 16 (51.9), subgroup
/// blocks of 64 x 64 (56.5, 128 x 128 and 128 x 256 tiles) and 32 x 64 (17.1).
pub(crate) const COOP_FIXED: [CoopFixed; 2] = [
    CoopFixed {
        tile: CoopTile::new(128, 128, 32, 64, 32),
        shader: Shader::LinearCm128x128x32_64x32,
    },
    CoopFixed {
        tile: CoopTile::new(64, 64, 32, 32, 32),
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
const COOP_TILES: [CoopTile; 2] = [COOP_FIXED[0].tile, COOP_FIXED[1].tile];

/// A cooperative-matrix kernel: the shader and its tile.
pub(crate) type CoopKernel = (Shader, CoopTile);

/// The forced generic-shader tile, when the device fits it.
fn forced_coop_tile(forced: Option<&str>, s: &CoopMatShape, l: &Limits) -> Option<CoopTile> {
    let [bm, bn, bk, wm, wn] = dims(forced)?;
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

/// The cooperative-matrix kernel for an m x n output: a forced fixed-tile variant that fits,
/// else a fixed-tile variant when the device runs them (the largest giving
/// [`COOP_MIN_WORKGROUPS`]), else the generic shader over the forced tile or [`COOP_TILES`]
/// as [`gemm_tile`] chooses; `None` when nothing fits (the strict kernel runs then). Forcing
/// the generic shader (`linear_coopmat`) skips the fixed-tile variants.
pub(crate) fn coop_kernel(
    m: usize,
    n: usize,
    s: &CoopMatShape,
    l: &Limits,
    f: &Forced,
) -> Option<CoopKernel> {
    let forced = f.coop_shader.as_deref();
    let generic = forced == Some(Shader::LinearCoopmat.info().name);
    if let Some(name) = forced.filter(|_| !generic) {
        let v = COOP_FIXED
            .iter()
            .find(|v| v.shader.info().name == name && v.fits(s, l));
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
    if let Some(t) = forced_coop_tile(f.coop_tile.as_deref(), s, l) {
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

/// The workgroup-scope tile: 128 x 128, k steps of 32, 256 invocations, reading x as f16
/// (rounded by a `cast_f16` dispatch first; `KINEMA_VK_CM2_X=f32` rounds it in the GEMM).
/// Measured on the H200 (2026-12-04, f16 weights, GPU ms, x as f32 / as f16): 4096^3 128 x
/// 256 1.469 / 1.295, 128 x 128 2.010 / **1.077** (128 TFLOP/s), 64 x 128 2.072 / 1.375,
/// 128 x 128 with k steps of 64 2.021 / 1.423; the subgroup-scope 128 x 128 variant 1.82.
/// Loaded as f32, x is converted from an accumulator matrix to an A matrix in the GEMM; as f16
/// the driver loads it as it loads the weights. Earlier (x as f32) no workgroup-scope tile was
/// reliably faster at Kimodo's shapes (606x3072x1024: best 80 us against 69 us), and the lane
/// GEMM is faster still there (48 us), so it runs only where [`CM2_ADMIT`] gives at least
/// [`GEMM_MIN_WORKGROUPS`] workgroups and the lane GEMM does not take the linear.
const CM2_TILE: Cm2Tile = Cm2Tile {
    bm: 128,
    bn: 128,
    bk: 32,
    wg: 256,
};

/// The output footprint (rows, columns) that admits a linear to [`CM2_TILE`]: 128 x 256,
/// the tile the workgroup-scope kernel ran before it read x as f16, so the same outputs take
/// it.
const CM2_ADMIT: (usize, usize) = (128, 256);

/// The `linear_cm2.comp` tile for an m x n output, `None` for the subgroup-scope kernels: the
/// forced tile when the device fits it, else [`CM2_TILE`] when [`CM2_ADMIT`] tiles give at
/// least [`GEMM_MIN_WORKGROUPS`] workgroups.
fn cm2_tile(m: usize, n: usize, c2: &Coopmat2, l: &Limits, f: &Forced) -> Option<Cm2Tile> {
    if let Some([bm, bn, bk, wg]) = dims(f.cm2_tile.as_deref()) {
        let t = Cm2Tile { bm, bn, bk, wg };
        if t.fits(c2, l) {
            return Some(t);
        }
    }
    let t = CM2_TILE;
    let groups = m.div_ceil(CM2_ADMIT.0) * n.div_ceil(CM2_ADMIT.1);
    (t.fits(c2, l) && groups >= GEMM_MIN_WORKGROUPS).then_some(t)
}

/// Split-precision tiles (`linear_cm2.comp` with `SPLIT` 1): 64 x 64 and 64 x 128, k steps of
/// 32, 128 invocations; each holds two accumulators (the high and the low products), 64 / 128
/// floats an invocation. Measured on the H200 (2026-12-04, f32 weights, GPU ms, 64 x 64 /
/// 64 x 128 / 128 x 128 over 256 invocations; the strict kernel last): 404x3072x1024 **0.092** /
/// 0.121 / 0.121 (strict 0.141), 404x1024x1024 **0.067** / 0.098 / 0.118 (0.078),
/// 404x1024x2048 **0.110** / 0.163 / 0.209 (0.149), 606x2048x1024 **0.095** / 0.123 / 0.120
/// (0.141), 606x1024x2048 **0.132** / 0.161 / 0.209 (0.157), 606x3072x1024 0.192 / **0.123** /
/// 0.121 (0.180), 4800x3072x1024 0.940 / **0.866** / 0.848 (1.154), 4800x1024x2048 0.664 /
/// **0.689** / 0.706 (0.802), 4096^3 3.567 / **3.309** / 3.518 (4.899). 64 x 64 wins until it
/// gives more than three workgroups a streaming multiprocessor; 64 x 128 is within 4% of the
/// best beyond.
const SPLIT_TILES: [Cm2Tile; 2] = [
    Cm2Tile {
        bm: 64,
        bn: 64,
        bk: 32,
        wg: 128,
    },
    Cm2Tile {
        bm: 64,
        bn: 128,
        bk: 32,
        wg: 128,
    },
];

/// Workgroups of 64 x 64 above which split precision takes 64 x 128: three a streaming
/// multiprocessor on the H200 (132 of them).
const SPLIT_SMALL_MAX_WORKGROUPS: usize = 396;

/// The split-precision kernel for an m x n x k linear with weights of dtype `w` on a device
/// with workgroup-scope matrices `c2`, or `None` where the linear stays on the strict kernels:
/// bf16 and q8_0 weights, and the few-row shapes that run the streaming or skinny kernels
/// ([`wants_stream`], [`wants_skinny`]), which are bound by reading the weights. The tile is
/// the forced one (`KINEMA_VK_CM2_TILE`) when the device fits it, else 64 x 64 up to
/// [`SPLIT_SMALL_MAX_WORKGROUPS`] of them and 64 x 128 beyond ([`SPLIT_TILES`]). x's parts are
/// written as f16 by a `cast_f16` dispatch first (`KINEMA_VK_CM2_X=f32`: split in the GEMM).
pub(crate) fn split_kernel(
    [m, n, k]: [usize; 3],
    w: DType,
    c2: &Coopmat2,
    l: &Limits,
    f: &Forced,
) -> Option<LinearKernel> {
    if !matches!(w, DType::F32 | DType::F16)
        || wants_stream([m, n, k], f)
        || wants_skinny(m, k, false, f)
    {
        return None;
    }
    let forced = dims(f.cm2_tile.as_deref())
        .map(|[bm, bn, bk, wg]| Cm2Tile { bm, bn, bk, wg })
        .filter(|t| t.fits(c2, l));
    let [small, large] = SPLIT_TILES;
    let groups = m.div_ceil(small.bm as usize) * n.div_ceil(small.bn as usize);
    let t = match forced {
        Some(t) => t,
        None if groups > SPLIT_SMALL_MAX_WORKGROUPS => large,
        None => small,
    };
    if !t.fits(c2, l) {
        return None;
    }
    let x16 = f.cm2_x.as_deref() != Some("f32");
    Some(LinearKernel {
        shader: Shader::LinearCm2,
        spec: vec![
            t.wg,
            t.bm,
            t.bn,
            t.bk,
            0,
            0,
            float_dtype_code(w),
            u32::from(x16),
            1,
        ],
        bm: t.bm,
        bn: t.bn,
        x16,
        split: true,
    })
}

/// Tile of the skinny linear kernel (`linear_skinny.comp`): `nc` output columns per workgroup
/// of `wg` invocations that split k, each holding `mmax` x `nc` accumulators; the rows are
/// walked `mmax` at a time inside the workgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SkinnyTile {
    pub wg: u32,
    pub mmax: u32,
    pub nc: u32,
}

impl SkinnyTile {
    /// The shader's partials (`wg` rows of `mmax nc + 1` floats) and slice sums.
    fn shared_bytes(&self) -> u32 {
        let out = self.mmax * self.nc;
        let q = if self.wg > out { self.wg / out } else { 1 };
        (self.wg * (out + 1) + q * out) * 4
    }
    /// Nonzero, at most [`SKINNY_MAX_ACC`] accumulators, and fits the device.
    fn fits(&self, l: &Limits) -> bool {
        self.wg > 0
            && self.mmax > 0
            && self.nc > 0
            && self.mmax * self.nc <= SKINNY_MAX_ACC
            && workgroup_fits(self.wg, self.shared_bytes(), l)
    }
}

/// Rows at and below which strict linears run the skinny kernel. The tiled GEMM's parallelism
/// is its output tiles: at m <= 64 `gemm_tile` falls to 16- to 64-row tiles and n / 64 or
/// n / 32 workgroups (16-32 at n = 1024, on a GPU of 132 SMs), each walking all of k alone, so
/// the weights (which every row tile reads again) stream through a few SMs. The skinny kernel
/// reads each weight once per `mmax` rows (the further row blocks from cache) with n / nc
/// workgroups that split k. Both compute in f32 FMA; the price of the skinny kernel is x, read
/// once per workgroup (n / nc times, from cache: 16 KiB to 512 KiB at these shapes).
/// Kimodo's linears (m = 404, 606) stay on the tiled kernels.
pub(crate) const SKINNY_MAX_M: usize = 32;

/// Elements of x (m * k) at and below which the skinny kernel runs: every workgroup reads all
/// of x, so its traffic is (n / nc) * m * k. Measured on the H200 (2026-12-02, GPU time,
/// strict): m x 1024 x 1024 f32, skinny / tiled 6 / 61 us at m = 1, 17 / 63 at 16, 31 / 62 at
/// 32, 70 / 62 at 64; at 32 x 4096 x 4096 bf16 the x re-reads made skinny the slower, 559 /
/// 299 us (and 2.1 / 0.6-1.4 ms at 32 x 14336 x 4096 and 32 x 4096 x 14336).
pub(crate) const SKINNY_MAX_X: usize = 32 * 1024;

/// Rows at and below which fast mode (cooperative matrices) runs the skinny kernel: its f32
/// FMAs cost as much as streaming 16-bit weights at m ~ 14 on the H200 (67 TFLOP/s f32 FMA,
/// 4.8 TB/s: 2 m flops per 2-byte weight), above which the matrix cores' ~8x rate wins.
pub(crate) const SKINNY_MAX_M_FAST: usize = 16;

/// Accumulators an invocation of the skinny kernel holds at most (registers: the strict GEMM
/// measured 64 as too many with its other state, 32 as fine).
const SKINNY_MAX_ACC: u32 = 64;

/// Rows per block of the skinny kernel at most.
const SKINNY_MAX_ROWS: u32 = 16;

/// Workgroup sizes of the skinny kernel, largest first (a workgroup of 4 subgroups of 32 on
/// the H200 reads 512 consecutive k of each weight row a step).
const SKINNY_WG: [u32; 3] = [128, 64, 32];

/// The forced skinny tile, when the device fits it.
fn forced_skinny_tile(forced: Option<&str>, l: &Limits) -> Option<SkinnyTile> {
    let [wg, mmax, nc] = dims(forced)?;
    let t = SkinnyTile { wg, mmax, nc };
    t.fits(l).then_some(t)
}

/// The skinny tile for an m x n linear: the forced one when the device fits it; else rows per
/// block m rounded up to a power of two, at most [`SKINNY_MAX_ROWS`]; 4 columns per workgroup,
/// or 2 or 1 where n / 4 workgroups would not give every SM of a large GPU
/// ([`GEMM_MIN_WORKGROUPS`] / 2) one; and the largest of [`SKINNY_WG`] the device fits. `None`
/// when none fits.
pub(crate) fn skinny_tile(m: usize, n: usize, l: &Limits, f: &Forced) -> Option<SkinnyTile> {
    if let Some(t) = forced_skinny_tile(f.skinny_tile.as_deref(), l) {
        return Some(t);
    }
    let mmax = (m.max(1).next_power_of_two() as u32).min(SKINNY_MAX_ROWS);
    let nc = [4u32, 2]
        .into_iter()
        .find(|&nc| n.div_ceil(nc as usize) >= GEMM_MIN_WORKGROUPS / 2)
        .unwrap_or(1);
    SKINNY_WG
        .iter()
        .map(|&wg| SkinnyTile { wg, mmax, nc })
        .find(|t| t.fits(l))
}

/// Whether an m x k linear runs the skinny kernel: as `KINEMA_VK_LINEAR` says (`tiled` or
/// `skinny`), else when x holds at most [`SKINNY_MAX_X`] elements and m is at most
/// [`SKINNY_MAX_M_FAST`] with cooperative matrices (fast mode) or [`SKINNY_MAX_M`] without.
fn wants_skinny(m: usize, k: usize, coopmat: bool, f: &Forced) -> bool {
    match f.linear.as_deref() {
        Some("tiled") => false,
        Some("skinny") => true,
        _ if m.saturating_mul(k) > SKINNY_MAX_X => false,
        _ if coopmat => m <= SKINNY_MAX_M_FAST,
        _ => m <= SKINNY_MAX_M,
    }
}

/// The kernel a linear runs: its shader, specialization constants and BM x BN output tile
/// (one workgroup each; `bm` 0 for the skinny kernel, whose workgroups walk every row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LinearKernel {
    pub shader: Shader,
    pub spec: Vec<u32>,
    pub bm: u32,
    pub bn: u32,
    /// The kernel reads x as f16 words: a `cast_f16` dispatch rounds x into scratch memory
    /// first.
    pub x16: bool,
    /// Split precision: with `x16`, the `cast_f16` dispatch writes x's high and low parts.
    pub split: bool,
}

/// The kernel for an m x n linear with weights of dtype `w`: the skinny kernel for few rows
/// ([`wants_skinny`], when a [`skinny_tile`] fits the device); else, with a cooperative-matrix
/// shape `coopmat` (fast mode on a device that has one) the workgroup-scope kernel when the device
/// has `coopmat2`, the weights are f32 or f16 (bf16 and q8_0 stay on the subgroup-scope
/// kernels, which widen them in registers) and [`cm2_tile`] takes the shape, else the
/// subgroup-scope kernel of [`coop_kernel`]; the strict f32 GEMM ([`gemm_tile`]) otherwise.
pub(crate) fn linear_kernel(
    [m, n, k]: [usize; 3],
    w: DType,
    coopmat: Option<CoopMatShape>,
    coopmat2: Option<Coopmat2>,
    l: &Limits,
    f: &Forced,
) -> LinearKernel {
    let w_dtype = float_dtype_code(w);
    let vec_ok = u32::from(l.min_storage_offset_align.is_multiple_of(16));
    if wants_skinny(m, k, coopmat.is_some(), f)
        && let Some(t) = skinny_tile(m, n, l, f)
    {
        return LinearKernel {
            shader: Shader::LinearSkinny,
            spec: vec![t.wg, t.mmax, t.nc, w_dtype, vec_ok],
            bm: 0,
            bn: t.nc,
            x16: false,
            split: false,
        };
    }
    let coop = coopmat.and_then(|s| Some((s, coop_kernel(m, n, &s, l, f)?)));
    let cm2 = match (coop, coopmat2, w) {
        (Some(_), Some(c2), DType::F32 | DType::F16) => cm2_tile(m, n, &c2, l, f),
        _ => None,
    };
    match (cm2, coop) {
        (Some(t), _) => {
            let x16 = f.cm2_x.as_deref() != Some("f32");
            LinearKernel {
                shader: Shader::LinearCm2,
                spec: vec![t.wg, t.bm, t.bn, t.bk, 0, 0, w_dtype, u32::from(x16)],
                bm: t.bm,
                bn: t.bn,
                x16,
                split: false,
            }
        }
        (None, Some((s, (shader, t)))) => LinearKernel {
            shader,
            spec: t.spec(&s, l.subgroup_size, w_dtype, vec_ok),
            bm: t.bm,
            bn: t.bn,
            x16: false,
            split: false,
        },
        (None, None) => {
            let t = gemm_tile(m, n, 1, l, f);
            let mut spec = t.spec().to_vec();
            spec.push(w_dtype);
            LinearKernel {
                shader: Shader::Linear,
                spec,
                bm: t.0.bm,
                bn: t.0.bn,
                x16: false,
                split: false,
            }
        }
    }
}
#[cfg(test)]
mod tests;
