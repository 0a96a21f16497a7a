//! Fused multi-head attention with grouped-query heads and optional key-padding or causal
//! masking.
//!
//! The SIMD paths work flash-attention style on the CPU, one tile of `MR` query rows of one
//! head at a time, with the whole score row of the tile held in a small buffer (two-pass
//! softmax, so no rescaling of partial outputs):
//! 1. the visible keys of each batch row are listed once (key padding drops hidden keys here,
//!    so they are never read), and K and V of every (batch, kv head) are packed once, shared
//!    by every query head of its group and every tile: K^T in panels of `NR` keys
//!    (`[head_dim][NR]`, vector transposes), V in column chunks of `NR` (`[keys][NR]`), so
//!    both micro-kernels stream contiguous memory whatever the row strides;
//! 2. scores `MR x NR` come from a register-tiled GEMM (broadcast q, vector loads of K^T);
//! 3. each row's softmax runs over its buffered scores (max, the shared vector exp
//!    [`simd::exp_nonpositive`](super::simd::exp_nonpositive), sum);
//! 4. P.V accumulates `MR x NR` output columns in registers and divides by the row sums as it
//!    stores them.
//!
//! A row's keys end at `ends[r]` (its last visible key + 1, causal), so a hidden key
//! contributes nothing, not even `0 * v`; K panels past a tile's last visible key are skipped.
//! Work is split over (batch, head, block of query rows) only, so results do not depend on the
//! thread count.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | entry point, operand checks, the blocked driver and its threading |
//! | `tile.rs` | the micro-kernels (Q.K^T, softmax, P.V, V packing), once, generic over [`Simd`] |
//! | `scalar.rs` | the f64 reference, also the [`Isa::Scalar`] path |
//! | `avx2.rs`, `avx512.rs`, `neon.rs` | per ISA: the transposing K/Q packers and the entry points compiled for it |
//!
//! `NR` is two vectors: 16 keys on AVX2, 32 on AVX-512, 8 on NEON.

mod scalar;
mod tile;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(test)]
mod tests;

pub use scalar::reference;

use super::pool::SendPtr;
use super::simd::Simd;
use super::{Cx, Isa};
use crate::ops::{AttentionParams, MaskKind};

/// Query rows per register tile, on every ISA (the P.V and Q.K^T tiles are `MR x NR` with
/// `NR` two vectors wide: 12 accumulators on AVX2/AVX-512/NEON).
const MR: usize = 6;
/// Register tiles of query rows per pool task: enough work per task to amortise its scratch
/// buffers, small enough that batch x heads x blocks gives every thread many tasks.
const TILES_PER_TASK: usize = 4;
/// The widest `NR` (AVX-512), for stack arrays of panel rows.
const MAX_NR: usize = 32;
/// Row stride of a packed query tile `[head_dim][QP]` (`MR` used): one 8 x 8 transpose block
/// on x86, two 4 x 4 on NEON.
const QP: usize = 8;
const _: () = assert!(MR <= QP);

/// What an instruction set adds to the generic kernels of `tile.rs`: the transposing packers
/// and a prefetch hint. Implemented by the [`Simd`] tokens, so holding one proves the CPU
/// runs the ISA.
trait Packers: Simd {
    /// Writes the K^T panel of up to `NR = 2 LANES` key rows: `panel[t * NR + c] =
    /// rows[c][t]` for `t < d`, and 0 in the columns `c >= rows.len()`.
    ///
    /// # Safety
    /// `rows.len() <= NR`, every row holds at least `d` values and `panel` is writable for
    /// `d * NR`.
    unsafe fn pack_k(self, rows: &[&[f32]], d: usize, panel: *mut f32);

    /// Writes a query tile `[d][QP]`: `qp[t * QP + r] = rows[r][t]`, 0 for `r >= rows.len()`.
    ///
    /// # Safety
    /// `rows.len() <= QP`, every row holds at least `d` values and `qp` is writable for
    /// `d * QP`.
    unsafe fn pack_q(self, rows: &[&[f32]], d: usize, qp: *mut f32);

    /// Hints that the cache line holding `x` will be read soon (no architectural effect).
    fn prefetch(self, x: &f32);
}

/// Keys per packed K^T panel and output columns per P.V tile on the ISA of `S`.
const fn nr<S: Simd>() -> usize {
    2 * S::LANES
}

/// One ISA's two passes, each a `#[target_feature]` function that makes the ISA's token and
/// runs the generic body ([`Job::pack`], [`Job::tiles`]) inlined into it.
struct Entries {
    /// `nr` of the ISA.
    nr: usize,
    /// Packs K^T and V of one (batch, kv head).
    pack: unsafe fn(&Job<'_>, usize),
    /// Computes one block of query tiles of one (batch, head).
    tiles: unsafe fn(&Job<'_>, &[f32], usize),
}

/// The [`Entries`] of the ISA whose token is `$token`, compiled with `$features`.
macro_rules! entries {
    ($token:ty, $features:literal) => {
        pub(super) const ENTRIES: super::Entries = super::Entries {
            nr: super::nr::<$token>(),
            pack,
            tiles,
        };

        /// # Safety
        /// The CPU runs the ISA; as [`Job::pack`](super::Job::pack).
        #[target_feature(enable = $features)]
        unsafe fn pack(job: &super::Job<'_>, bh: usize) {
            // SAFETY: this function is compiled for the ISA, so the token may be made; the
            // rest is the caller's contract.
            unsafe { job.pack(<$token>::new(), bh) }
        }

        /// # Safety
        /// The CPU runs the ISA; as [`Job::tiles`](super::Job::tiles).
        #[target_feature(enable = $features)]
        unsafe fn tiles(job: &super::Job<'_>, packed: &[f32], task: usize) {
            // SAFETY: as in `pack`.
            unsafe { job.tiles(<$token>::new(), packed, task) }
        }
    };
}
use entries;

/// Attention of `q` over `k`, `v` (row layouts and masking in `p`) into `out`
/// `[batch, q_len, q_heads * head_dim]`, on `cx`'s ISA and threads.
///
/// # Panics
/// If the operands are smaller than `p` says (the backend checks them when an op is
/// recorded), or if `cx.isa` does not run on this CPU.
pub fn attention(
    cx: &Cx,
    p: &AttentionParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[u32]>,
    out: &mut [f32],
) {
    let x = Operands { q, k, v, mask };
    check(p, x, out);
    assert!(
        cx.isa.is_supported(),
        "{} is not supported here",
        cx.isa.name()
    );
    let entries = match cx.isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::ENTRIES,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => avx2::ENTRIES,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => neon::ENTRIES,
        _ => return scalar::split(cx, p, x, out),
    };
    // SAFETY: the ISA was checked just above (`Isa::is_supported`) and the operands passed
    // `check`.
    unsafe { run(cx, &entries, p, x, out) }
}

/// The inputs of one call: queries, keys, values and the key-padding mask.
#[derive(Clone, Copy)]
struct Operands<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    mask: Option<&'a [u32]>,
}

/// The operand sizes the unchecked SIMD paths rely on (CpuBackend checked them when the op
/// was recorded; this keeps the public entry point sound on its own).
fn check(p: &AttentionParams, x: Operands, out: &mut [f32]) {
    let (Operands { q, k, v, mask }, d) = (x, p.head_dim);
    assert!(
        p.kv_heads > 0 && p.q_heads.is_multiple_of(p.kv_heads),
        "attention: bad head grouping"
    );
    assert!(p.q_row_stride >= p.q_heads * d && p.kv_row_stride >= p.kv_heads * d);
    let span = |rows: usize, stride: usize, width: usize| {
        if rows == 0 {
            0
        } else {
            (rows - 1) * stride + width
        }
    };
    assert!(q.len() >= span(p.batch * p.q_len, p.q_row_stride, p.q_heads * d));
    let kv = span(p.batch * p.kv_len, p.kv_row_stride, p.kv_heads * d);
    assert!(k.len() >= kv && v.len() >= kv);
    assert!(out.len() >= p.batch * p.q_len * p.q_heads * d);
    if p.mask == MaskKind::KeyPadding {
        assert!(mask.is_some_and(|m| m.len() >= p.batch * p.kv_len));
    }
}

/// The blocked driver shared by every SIMD ISA: packs K and V once per (batch, kv head),
/// then runs the query tiles; each pass is one pool run over tasks whose results do not
/// depend on which thread takes them.
///
/// # Safety
/// `entries` belong to an ISA this CPU runs, and the operands passed [`check`].
unsafe fn run(cx: &Cx, entries: &Entries, p: &AttentionParams, x: Operands, out: &mut [f32]) {
    let (lq, lk, hq, hkv) = (p.q_len, p.kv_len, p.q_heads, p.kv_heads);
    if p.batch * lq * hq * p.head_dim == 0 {
        return;
    }
    // Visible keys of each batch row, in order.
    let keys: Vec<Vec<u32>> = (0..p.batch)
        .map(|b| match (p.mask, x.mask) {
            (MaskKind::KeyPadding, Some(m)) => (0..lk as u32)
                .filter(|&j| m[b * lk + j as usize] != 0)
                .collect(),
            _ => (0..lk as u32).collect(),
        })
        .collect();
    let mut job = Job {
        p,
        x,
        keys,
        nr: entries.nr,
        at: Vec::new(),
        packed: SendPtr(std::ptr::null_mut()),
        out: SendPtr(out.as_mut_ptr()),
    };
    job.layout();
    let total = *job.at.last().unwrap();
    let mut packed: Vec<f32> = Vec::with_capacity(total);
    job.packed = SendPtr(packed.as_mut_ptr());
    let job = &job;
    cx.pool.run(p.batch * hkv, &|bh| {
        // SAFETY: the ISA runs here (contract); task bh writes only its own range of
        // `packed`, whose capacity is `total`.
        unsafe { (entries.pack)(job, bh) }
    });
    // SAFETY: the tasks above wrote every value below `total`: each K^T panel in full (zero
    // columns past the last key) and each V chunk row in full (zero lanes past head_dim).
    unsafe { packed.set_len(total) };
    let packed = &packed;
    let blocks = lq.div_ceil(MR * TILES_PER_TASK);
    cx.pool.run(p.batch * hq * blocks, &|task| {
        // SAFETY: the ISA runs here (contract); `packed` holds what `pack` wrote, and task
        // writes only the output rows of its block.
        unsafe { (entries.tiles)(job, packed, task) }
    });
}

/// The operands and packed layout of one attention call, shared by its pool tasks.
struct Job<'a> {
    p: &'a AttentionParams,
    x: Operands<'a>,
    /// The visible keys of each batch row, in order.
    keys: Vec<Vec<u32>>,
    /// Keys per K^T panel, `nr::<S>()` of the ISA that runs.
    nr: usize,
    /// Where the K^T panels and V chunks of (batch, kv head) `bh` start in the packed buffer:
    /// `at[bh]`; `at` ends with the total.
    at: Vec<usize>,
    /// The packed buffer (capacity `at.last()`), written by [`Job::pack`].
    packed: SendPtr<f32>,
    /// `out`, written by [`Job::tiles`].
    out: SendPtr<f32>,
}

impl Job<'_> {
    /// K^T panels of batch row `b`.
    fn panels(&self, b: usize) -> usize {
        self.keys[b].len().div_ceil(self.nr)
    }

    /// Where V starts inside the packed block of a (batch `b`, kv head).
    fn v_off(&self, b: usize) -> usize {
        self.panels(b) * self.p.head_dim * self.nr
    }

    /// Sets `at`. Per (batch, kv head) `bh`, packed once and shared by its query
    /// heads and tiles, from `at[bh]`: K^T as `panels(b)` panels of `[d][nr]`, then V as
    /// `d.div_ceil(nr)` column chunks of `[n][nr]` (n visible keys, columns past d zero).
    fn layout(&mut self) {
        let nr = self.nr;
        let chunks = self.p.head_dim.div_ceil(nr);
        let mut at = Vec::with_capacity(self.p.batch * self.p.kv_heads + 1);
        at.push(0usize);
        for b in 0..self.p.batch {
            for _ in 0..self.p.kv_heads {
                let block = self.v_off(b) + chunks * self.keys[b].len() * nr;
                at.push(at.last().unwrap() + block);
            }
        }
        self.at = at;
    }

    /// Packs K^T and V of (batch, kv head) `bh` into its range of `packed`.
    ///
    /// # Safety
    /// `self.nr == nr::<S>()`, `packed` has capacity `at.last()`, and no other task writes
    /// the range of `bh`.
    #[inline(always)]
    unsafe fn pack<S: Packers>(&self, s: S, bh: usize) {
        let (p, d, nr) = (self.p, self.p.head_dim, nr::<S>());
        const { assert!(2 * S::LANES <= MAX_NR) };
        let (b, kh) = (bh / p.kv_heads, bh % p.kv_heads);
        let keys = &self.keys[b];
        let n = keys.len();
        let row = |jj: usize| (b * p.kv_len + keys[jj] as usize) * p.kv_row_stride + kh * d;
        let base = self.packed.get().wrapping_add(self.at[bh]);
        let mut rows: [&[f32]; MAX_NR] = [&[]; MAX_NR];
        for pn in 0..self.panels(b) {
            let cnt = nr.min(n - pn * nr);
            for (c, r) in rows.iter_mut().enumerate().take(cnt) {
                *r = &self.x.k[row(pn * nr + c)..][..d];
            }
            // SAFETY: panel pn lies in [at[bh], at[bh] + v_off(b)), inside the capacity and
            // this task's range; cnt <= NR rows of d values.
            unsafe { s.pack_k(&rows[..cnt], d, base.add(pn * d * nr)) };
        }
        for jj in 0..n {
            // SAFETY: chunk c < d.div_ceil(nr) of row jj is at at[bh] + v_off(b) + (c * n +
            // jj) * nr, whose nr values lie before at[bh + 1], inside this task's range.
            unsafe {
                tile::pack_v(
                    s,
                    &self.x.v[row(jj)..][..d],
                    base.add(self.v_off(b) + jj * nr),
                    n * nr,
                )
            };
        }
    }

    /// Computes query tiles `task % blocks` of (batch, head) `task / blocks`, where a block is
    /// [`TILES_PER_TASK`] tiles of [`MR`] rows.
    ///
    /// # Safety
    /// `self.nr == nr::<S>()`, `packed` is what [`Job::pack`] wrote for every (batch, kv
    /// head), and no other task writes this block's output rows.
    #[inline(always)]
    unsafe fn tiles<S: Packers>(&self, s: S, packed: &[f32], task: usize) {
        let (p, d, nr) = (self.p, self.p.head_dim, nr::<S>());
        let (lq, lk, hq, hkv) = (p.q_len, p.kv_len, p.q_heads, p.kv_heads);
        let rows_per_task = MR * TILES_PER_TASK;
        let blocks = lq.div_ceil(rows_per_task);
        let (bh, blk) = (task / blocks, task % blocks);
        let (b, h) = (bh / hq, bh % hq);
        let kh = h / (hq / hkv);
        let n = self.keys[b].len();
        let kt = &packed[self.at[b * hkv + kh]..self.at[b * hkv + kh + 1]];
        let (kt, vt) = kt.split_at(self.v_off(b));
        let ldp = self.panels(b).max(1) * nr;
        let mut qp = vec![0f32; d * QP];
        let mut sc = vec![0f32; MR * ldp];
        let i_end = lq.min((blk + 1) * rows_per_task);
        for i0 in (blk * rows_per_task..i_end).step_by(MR) {
            let rows = MR.min(i_end - i0);
            let mut ends = [0usize; MR];
            for (r, e) in ends.iter_mut().enumerate().take(rows) {
                *e = match p.mask {
                    // Query i sees keys j <= i + lk - lq.
                    MaskKind::Causal => (i0 + r + 1 + lk).saturating_sub(lq).min(lk),
                    _ => n,
                };
            }
            let hi = ends.iter().copied().max().unwrap_or(0);
            if hi > 0 {
                let mut rows_q: [&[f32]; MR] = [&[]; MR];
                for (r, row) in rows_q.iter_mut().enumerate().take(rows) {
                    *row = &self.x.q[(b * lq + i0 + r) * p.q_row_stride + h * d..][..d];
                }
                // SAFETY: rows <= MR <= QP rows of d values; qp holds d * QP values.
                unsafe { s.pack_q(&rows_q[..rows], d, qp.as_mut_ptr()) };
                // The next tile's query rows, far apart in a fused QKV buffer, load while
                // this tile computes.
                for i in
                    (i0 + MR..i_end.min(i0 + 2 * MR)).map(|i| (b * lq + i) * p.q_row_stride + h * d)
                {
                    for x in self.x.q[i..i + d].iter().step_by(16) {
                        s.prefetch(x);
                    }
                }
                for pn in 0..hi.div_ceil(nr) {
                    // SAFETY: qp holds d * QP values, panel pn of kt d * nr (pn <
                    // panels(b)), and sc rows of ldp >= (pn + 1) * nr values.
                    unsafe {
                        tile::qk(
                            s,
                            d,
                            qp.as_ptr(),
                            kt[pn * d * nr..].as_ptr(),
                            p.scale,
                            sc.as_mut_ptr().add(pn * nr),
                            ldp,
                        )
                    };
                }
            }
            // Rows without visible keys keep z = 1 and an empty sum: they write +0.
            let mut z = [1f32; MR];
            for r in 0..rows {
                if ends[r] > 0 {
                    // SAFETY: row r of sc holds ldp >= ends[r] values.
                    z[r] = unsafe { tile::softmax(s, sc.as_mut_ptr().add(r * ldp), ends[r]) };
                }
            }
            let mut rows_out = [std::ptr::null_mut(); MR];
            for c in 0..d.div_ceil(nr) {
                for (r, o) in rows_out.iter_mut().enumerate().take(rows) {
                    // SAFETY: row (b, i0 + r, h) of out, column c * nr < d (check).
                    *o = unsafe {
                        self.out
                            .get()
                            .add(((b * lq + i0 + r) * hq + h) * d + c * nr)
                    };
                }
                // SAFETY: sc rows have ldp >= ends[r] values; chunk c of vt holds n >=
                // max(ends) rows of nr values; each non-null output row has cols = min(nr, d -
                // c nr) values left in out, written by this task only.
                unsafe {
                    tile::pv(
                        s,
                        sc.as_ptr(),
                        ldp,
                        &ends,
                        &z,
                        vt[c * n * nr..].as_ptr(),
                        nr.min(d - c * nr),
                        &rows_out,
                    )
                };
            }
        }
    }
}
