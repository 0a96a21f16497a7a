//! The BLIS-style blocking driver shared by every ISA (Goto & van de Geijn, "Anatomy of
//! high-performance matrix multiplication", and BLIS's `bli_gemm_ker_var2`):
//!
//! ```text
//! jc (NC columns of B) -> pc (KC of k) -> ic (MC rows of A, packed into L2)
//!     -> jr (one NR-wide B micro-panel, packed on first use, lives in L1)
//!        -> ir (MR rows) -> micro-kernel: MR x NR accumulators in registers
//! ```
//!
//! Both operands are packed into contiguous micro-panels (`[k unit][MR]` and `[k unit][NR]`),
//! which turns the weight layout `w[n, k]` into what an outer-product kernel wants and widens
//! f16/bf16/q8_0 weights to f32 exactly on the way. For each KC block the kernel runs one
//! FMA chain per output from zero and then adds the previous blocks' sum from C, so every
//! output is summed in the same order whatever tile or task it falls in. Work is split over
//! output tiles only, never along k, so results are bit-identical for every thread count.

use std::cell::Cell;

use super::super::pool::SendPtr;
use super::super::simd::Simd;
use super::super::{Isa, ThreadPool, Weights, activation};
use crate::ops::Activation;

/// How the `k x n` right operand is stored.
#[derive(Clone, Copy, Debug)]
pub(super) enum BSrc<'a> {
    /// `w[n, k]`, row `j` at `j * ld` (nn.Linear weights, `trans_b`): column `j` of B is
    /// row `j` of `w`. For q8_0, `ld` and the k offsets are multiples of 32.
    RowsN { w: Weights<'a>, ld: usize },
    /// `b[k, n]` row-major, row `l` at `l * ld`.
    RowsK { b: &'a [f32], ld: usize },
}

/// One `C[m, n] = act(alpha * A[m, k] . B + bias)` problem; A is row-major with row stride
/// `k`, C row-major with row stride `n`.
#[derive(Clone, Copy)]
pub(super) struct Problem<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: &'a [f32],
    pub b: BSrc<'a>,
    pub alpha: f32,
    pub bias: Option<&'a [f32]>,
    pub act: Activation,
    /// The ISA the activation epilogue runs on.
    pub isa: Isa,
}

/// What the micro-kernel does around its k loop.
pub(super) struct Epilogue {
    /// Add the tile in C (the previous KC blocks' sum) to this block's sum.
    pub accumulate: bool,
    /// Last KC block: multiply by `alpha`, then add `bias` (null: none), before storing.
    pub finish: bool,
    pub alpha: f32,
    /// `NR` bias values for this tile's columns (zero-padded at the right edge).
    pub bias: *const f32,
}

impl Epilogue {
    /// The end of every ISA's micro-kernel, written once over the [`Simd`] primitives: add the
    /// C tile (when accumulating), then `alpha` and the bias (last KC block), and store the
    /// `R x (H * S::LANES)` tile. The operation order is fixed (`c + acc`, `* alpha`,
    /// `+ bias`), so every ISA rounds the same way.
    ///
    /// # Safety
    /// `c` is valid for reading and writing an `R x (H * S::LANES)` tile with row stride
    /// `ldc`; `self.bias` is null or holds `H * S::LANES` values.
    #[inline(always)]
    pub(super) unsafe fn store_tile<S: Simd, const R: usize, const H: usize>(
        &self,
        s: S,
        acc: &mut [[S::F; H]; R],
        c: *mut f32,
        ldc: usize,
    ) {
        if self.accumulate {
            for (i, row) in acc.iter_mut().enumerate() {
                for (h, v) in row.iter_mut().enumerate() {
                    // SAFETY: inside the tile, per the contract.
                    *v = s.add(unsafe { s.load(c.add(i * ldc + h * S::LANES)) }, *v);
                }
            }
        }
        if self.finish {
            let alpha = s.splat(self.alpha);
            for row in acc.iter_mut() {
                for (h, v) in row.iter_mut().enumerate() {
                    *v = s.mul(*v, alpha);
                    if !self.bias.is_null() {
                        // SAFETY: a non-null bias holds H * LANES values.
                        *v = s.add(*v, unsafe { s.load(self.bias.add(h * S::LANES)) });
                    }
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            for (h, v) in row.iter().enumerate() {
                // SAFETY: as above.
                unsafe { s.store(c.add(i * ldc + h * S::LANES), *v) };
            }
        }
    }
}

/// An ISA's micro-kernel and packing routines.
///
/// # Safety
/// Implementors may only be constructed once their ISA has been detected; the driver calls
/// the methods with in-bounds sources and packed buffers of the documented sizes.
pub(super) unsafe trait MicroKernel: Sync {
    /// A packed element: `f32`, or `u32` holding a pair of bf16 along k.
    type P: bytemuck::Pod;
    const MR: usize;
    const NR: usize;
    /// k values per packed element (1, or 2 for bf16 pairs).
    const KU: usize;
    /// k block (a multiple of 32 so q8_0 blocks never straddle two, and of `KU`).
    const KC: usize;
    /// Upper bound on the rows of A packed at once (a multiple of `MR`; sized for L2).
    const MC: usize;
    /// Upper bound on the columns of B packed at once (a multiple of `NR`).
    const NC: usize;

    /// Pack the block `blk` of A (`rows <= MR`) into `out[u * MR + i]`, `u < kc.div_ceil(KU)`, zero-padded.
    /// May write up to 8 elements past the panel (the buffers carry that slack and panels
    /// are packed in ascending order, so the next panel overwrites them).
    ///
    /// # Safety
    /// `out` is valid for `kc.div_ceil(KU) * MR + 8` elements.
    unsafe fn pack_a(&self, blk: ABlock<'_>, out: *mut Self::P);

    /// Pack columns `j0 .. j0 + cols` (`cols <= NR`) and k range `k0 .. k0 + kc` of B into
    /// `out[u * NR + j]`, zero-padded.
    ///
    /// # Safety
    /// `out` is valid for `kc.div_ceil(KU) * NR + 8` elements, and 64-byte aligned when `NR`
    /// is a multiple of 16.
    unsafe fn pack_b(
        &self,
        b: &BSrc,
        j0: usize,
        cols: usize,
        k0: usize,
        kc: usize,
        out: *mut Self::P,
    );

    /// `C[MR, NR] (row stride ldc) = epilogue(C_prev + A_panel . B_panel)` over the `ab.kcu`
    /// packed k units, the dot products summed from zero in one chain each.
    ///
    /// # Safety
    /// `ab.a` and `ab.b` hold `ab.kcu` packed units of a panel (`b` aligned as in `pack_b`); `c` is valid for
    /// an `MR x NR` tile with row stride `ldc`; `ep.bias` is null or valid for `NR` reads.
    unsafe fn kernel(&self, ab: Panels<Self::P>, c: *mut f32, ldc: usize, ep: &Epilogue);
}

/// Rows `i0 .. i0 + rows` and k range `k0 .. k0 + kc` of the row-major `a` (row stride
/// `lda`): what [`MicroKernel::pack_a`] packs.
#[derive(Clone, Copy)]
pub(super) struct ABlock<'a> {
    pub a: &'a [f32],
    pub lda: usize,
    pub i0: usize,
    pub rows: usize,
    pub k0: usize,
    pub kc: usize,
}

impl<'a> ABlock<'a> {
    /// `(a, lda, i0, rows, k0, kc)`.
    pub fn parts(self) -> (&'a [f32], usize, usize, usize, usize, usize) {
        (self.a, self.lda, self.i0, self.rows, self.k0, self.kc)
    }
}

/// The packed operands of one micro-tile: `kcu` k units of an A panel and a B panel.
#[derive(Clone, Copy)]
pub(super) struct Panels<P> {
    pub kcu: usize,
    pub a: *const P,
    pub b: *const P,
}

/// The largest micro-tile any kernel uses (AVX-512: 12 x 32).
const MAX_TILE: usize = 16 * 32;
const MAX_NR: usize = 32;
/// Below this many FLOPs a problem runs as one task: waking the pool costs more.
const SERIAL_FLOPS: usize = 1 << 18;

/// Run `batch` problems, problem `bi` writing `c[bi * m * n ..][.. m * n]`, spread over the
/// pool by output tiles.
pub(super) fn run_batched<'a, K: MicroKernel>(
    kern: &K,
    pool: &ThreadPool,
    batch: usize,
    problem: impl Fn(usize) -> Problem<'a> + Sync,
    c: &mut [f32],
) {
    let p0 = problem(0);
    let (m, n, k) = (p0.m, p0.n, p0.k);
    if batch == 0 || m == 0 || n == 0 {
        return;
    }
    let c = &mut c[..batch * m * n];
    let flops = 2 * batch * m * n * k.max(1);
    let threads = if flops < SERIAL_FLOPS {
        1
    } else {
        pool.threads()
    };
    // Split each problem into `ms x ns` rectangles so there are at least `threads` tasks.
    // Splitting along n first keeps each task's share of the (large) weights disjoint; every
    // task re-packs the rows of A it needs, which are few at the model's shapes.
    let per_problem = threads.div_ceil(batch);
    let n_panels = n.div_ceil(K::NR);
    let m_panels = m.div_ceil(K::MR);
    let ns = per_problem.min(n_panels);
    let ms = per_problem.div_ceil(ns).min(m_panels);
    let base = SendPtr(c.as_mut_ptr());
    pool.run(batch * ms * ns, &|t| {
        let bi = t / (ms * ns);
        let mi = t % (ms * ns) / ns;
        let ni = t % ns;
        let p = problem(bi);
        let rows = (m_panels * mi / ms * K::MR)..(m_panels * (mi + 1) / ms * K::MR).min(m);
        let cols = (n_panels * ni / ns * K::NR)..(n_panels * (ni + 1) / ns * K::NR).min(n);
        // SAFETY: task t writes only rows `rows` x columns `cols` of problem bi's output,
        // disjoint from every other task's rectangle and inside `c`.
        unsafe { block(kern, &p, rows, cols, base.get().add(bi * m * n)) };
    });
}

/// One task: the output rectangle `rows x cols` of problem `p`, single-threaded.
///
/// # Safety
/// `c` points at the problem's `m x n` output, and no other thread touches this rectangle.
unsafe fn block<K: MicroKernel>(
    kern: &K,
    p: &Problem,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    c: *mut f32,
) {
    let ldc = p.n;
    if p.k == 0 {
        for i in rows.clone() {
            // SAFETY: row i, columns `cols` lie in this task's rectangle.
            let out =
                unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc + cols.start), cols.len()) };
            for (j, o) in cols.clone().zip(out.iter_mut()) {
                *o = p.bias.map_or(0.0, |b| b[j]);
            }
            activation::apply_inplace(p.isa, p.act, out);
        }
        return;
    }
    let kcu_max = K::KC.min(p.k.next_multiple_of(K::KU)) / K::KU;
    // MC: the task's rows in as few L2-sized blocks as possible, split evenly.
    let m_blocks = rows.len().div_ceil(K::MC);
    let mc_max = rows.len().div_ceil(m_blocks).next_multiple_of(K::MR);
    let a_block = mc_max * kcu_max;
    let mut tile = [0f32; MAX_TILE];
    let mut bias_tile = [0f32; MAX_NR];
    // The tiles of one B micro-panel (columns j.., k block pc) over rows `ic .. ic + mc`.
    let mut panel =
        |a_panels: *const K::P, bp: *const K::P, ic: usize, mc: usize, j: usize, pc: usize| {
            let kc = K::KC.min(p.k - pc);
            let kcu = kc.div_ceil(K::KU);
            let ncols = K::NR.min(cols.end - j);
            let last = pc + kc == p.k;
            let bias = match p.bias {
                Some(b) if last => {
                    if ncols == K::NR {
                        b[j..j + K::NR].as_ptr()
                    } else {
                        bias_tile[..ncols].copy_from_slice(&b[j..j + ncols]);
                        bias_tile[ncols..].fill(0.0);
                        bias_tile.as_ptr()
                    }
                }
                _ => std::ptr::null(),
            };
            let ep = Epilogue {
                accumulate: pc > 0,
                finish: last,
                alpha: p.alpha,
                bias,
            };
            for ip in 0..mc.div_ceil(K::MR) {
                let i = ic + ip * K::MR;
                let nrows = K::MR.min(ic + mc - i);
                // SAFETY: A panel ip of this k block was packed by the caller.
                let ap = unsafe { a_panels.add(ip * K::MR * kcu) };
                // SAFETY: (i, j) is inside this task's rectangle.
                let cp = unsafe { c.add(i * ldc + j) };
                if nrows == K::MR && ncols == K::NR {
                    // SAFETY: a full tile inside the rectangle.
                    unsafe { kern.kernel(Panels { kcu, a: ap, b: bp }, cp, ldc, &ep) };
                } else {
                    // SAFETY: the edge tile goes through `tile` (NR-strided), copying only the
                    // valid nrows x ncols part of C.
                    unsafe { edge_tile(kern, kcu, ap, bp, cp, ldc, nrows, ncols, &ep, &mut tile) };
                }
            }
        };
    let pack_a_block = |ic: usize, mc: usize, pc: usize, out: *mut K::P| {
        let kc = K::KC.min(p.k - pc);
        for ip in 0..mc.div_ceil(K::MR) {
            let i = ic + ip * K::MR;
            // SAFETY: panel ip spans kcu * MR elements (+ 8 slack) of the block at `out`.
            unsafe {
                let blk = ABlock {
                    a: p.a,
                    lda: p.k,
                    i0: i,
                    rows: K::MR.min(ic + mc - i),
                    k0: pc,
                    kc,
                };
                kern.pack_a(blk, out.add(ip * K::MR * kc.div_ceil(K::KU)))
            };
        }
    };
    let activate = |ic: usize, mc: usize, j: usize, n: usize| {
        if p.act != Activation::None {
            for i in ic..ic + mc {
                // SAFETY: row i, columns j..j+n lie in this task's rectangle.
                let out = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc + j), n) };
                activation::apply_inplace(p.isa, p.act, out);
            }
        }
    };
    let k_blocks: Vec<usize> = (0..p.k).step_by(K::KC).collect();
    if m_blocks == 1 {
        // Few rows (the model's M ~ 200): pack A for all of k once, then go panel by panel,
        // each B micro-panel through every k block. One panel-sized B buffer stays in L1,
        // each weight row is read front to back in consecutive packs (a stream the
        // hardware prefetchers follow, unlike KC-long pieces), and the panel's C strip stays
        // in cache between k blocks. Activations run on groups of panels wide enough that
        // the per-call overhead does not matter.
        let b_len = (K::NR * kcu_max + 8).next_multiple_of(16);
        let group = 128usize.div_ceil(K::NR) * K::NR;
        with_scratch::<K::P, _>(b_len + a_block * k_blocks.len() + 8, |buf| {
            let (bbuf, abuf) = buf.split_at_mut(b_len);
            let (bp, abuf) = (bbuf.as_mut_ptr(), abuf.as_mut_ptr());
            for (kb, &pc) in k_blocks.iter().enumerate() {
                // SAFETY: block kb spans a_block elements of abuf (+ 8 slack at the end).
                pack_a_block(rows.start, rows.len(), pc, unsafe {
                    abuf.add(kb * a_block)
                });
            }
            for jg in cols.clone().step_by(group) {
                let gn = group.min(cols.end - jg);
                for j in (jg..jg + gn).step_by(K::NR) {
                    for (kb, &pc) in k_blocks.iter().enumerate() {
                        let kc = K::KC.min(p.k - pc);
                        // SAFETY: bbuf holds one 64-byte aligned panel of kcu_max units.
                        unsafe { kern.pack_b(&p.b, j, K::NR.min(cols.end - j), pc, kc, bp) };
                        // SAFETY: as above.
                        panel(
                            unsafe { abuf.add(kb * a_block) },
                            bp,
                            rows.start,
                            rows.len(),
                            j,
                            pc,
                        );
                    }
                }
                activate(rows.start, rows.len(), jg, gn);
            }
        });
    } else {
        // BLIS order: a KC x NC block of B packed once (panel by panel, on first use) and
        // reused by every MC row block.
        let nc_max = K::NC.min(cols.len().next_multiple_of(K::NR));
        let b_len = (nc_max * kcu_max + 8).next_multiple_of(16);
        with_scratch::<K::P, _>(b_len + a_block + 8, |buf| {
            let (bbuf, abuf) = buf.split_at_mut(b_len);
            let (bbuf, abuf) = (bbuf.as_mut_ptr(), abuf.as_mut_ptr());
            for jc in cols.clone().step_by(nc_max) {
                let nc = nc_max.min(cols.end - jc);
                for &pc in &k_blocks {
                    let kc = K::KC.min(p.k - pc);
                    let kcu = kc.div_ceil(K::KU);
                    for (mb, ic) in rows.clone().step_by(mc_max).enumerate() {
                        let mc = mc_max.min(rows.end - ic);
                        pack_a_block(ic, mc, pc, abuf);
                        for (jp, j) in (jc..jc + nc).step_by(K::NR).enumerate() {
                            // SAFETY: panel jp spans kcu * NR elements of bbuf; for NR a
                            // multiple of 16 that is a multiple of 64 bytes, so panels stay
                            // 64-byte aligned.
                            let bp = unsafe { bbuf.add(jp * K::NR * kcu) };
                            if mb == 0 {
                                // The first row block packs each panel just before its first
                                // use (still in L1); later row blocks reuse it.
                                // SAFETY: as above.
                                unsafe { kern.pack_b(&p.b, j, K::NR.min(jc + nc - j), pc, kc, bp) };
                            }
                            panel(abuf, bp, ic, mc, j, pc);
                        }
                        if pc + kc == p.k {
                            activate(ic, mc, jc, nc);
                        }
                    }
                }
            }
        });
    }
}

/// A partial tile: run the full kernel on a local copy and write back the valid part.
///
/// # Safety
/// As for [`MicroKernel::kernel`], with `c` valid for `nrows x ncols` only.
#[allow(clippy::too_many_arguments)]
unsafe fn edge_tile<K: MicroKernel>(
    kern: &K,
    kcu: usize,
    a: *const K::P,
    b: *const K::P,
    c: *mut f32,
    ldc: usize,
    nrows: usize,
    ncols: usize,
    ep: &Epilogue,
    tile: &mut [f32; MAX_TILE],
) {
    for r in 0..nrows {
        let t = &mut tile[r * K::NR..r * K::NR + ncols];
        if ep.accumulate {
            // SAFETY: row r, first ncols columns are inside C's valid part.
            t.copy_from_slice(unsafe { std::slice::from_raw_parts(c.add(r * ldc), ncols) });
        }
    }
    // SAFETY: `tile` holds a full MR x NR tile with row stride NR.
    unsafe { kern.kernel(Panels { kcu, a, b }, tile.as_mut_ptr(), K::NR, ep) };
    for r in 0..nrows {
        // SAFETY: as above.
        let out = unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc), ncols) };
        out.copy_from_slice(&tile[r * K::NR..r * K::NR + ncols]);
    }
}

thread_local! {
    /// Each thread's packing buffer, kept between calls (pool workers are persistent) so a
    /// GEMM does not page-fault a fresh megabyte of packed weights every time.
    static SCRATCH: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
}

/// Lend `f` a 64-byte aligned scratch slice of `len` elements.
fn with_scratch<P: bytemuck::Pod, R>(len: usize, f: impl FnOnce(&mut [P]) -> R) -> R {
    const { assert!(std::mem::size_of::<P>() == 4 && std::mem::align_of::<P>() <= 4) };
    // Taken out while in use, so a re-entrant call just allocates its own.
    let mut v = SCRATCH.take();
    if v.len() < len + 16 {
        v = vec![0u32; len + 16];
    }
    let off = v.as_ptr().align_offset(64);
    let r = f(bytemuck::cast_slice_mut(&mut v[off..off + len]));
    SCRATCH.set(v);
    r
}
