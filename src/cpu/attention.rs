//! Fused multi-head attention with grouped-query heads and optional key-padding or causal
//! masking.
//!
//! The SIMD paths work flash-attention style on the CPU, one tile of [`MR`] query rows of one
//! head at a time, with the whole score row of the tile held in a small buffer (two-pass
//! softmax, so no rescaling of partial outputs):
//! 1. the visible keys of each batch row are listed once (key padding drops hidden keys here,
//!    so they are never read), and K and V of every (batch, kv head) are packed once, shared
//!    by every query head of its group and every tile: K^T in panels of `NR` keys
//!    (`[head_dim][NR]`, 8 x 8 vector transposes), V in column chunks of `NR` (`[keys][NR]`),
//!    so both micro-kernels stream contiguous memory whatever the row strides;
//! 2. scores `MR x NR` come from a register-tiled GEMM (broadcast q, vector loads of K^T);
//! 3. each row's softmax runs over its buffered scores (max, vector exp, sum);
//! 4. P.V accumulates `MR x NR` output columns in registers and divides by the row sums as it
//!    stores them.
//!
//! A row's keys end at `ends[r]` (its last visible key + 1, causal), so a hidden key
//! contributes nothing, not even `0 * v`; K panels past a tile's last visible key are skipped.
//! Work is split over (batch, head, block of query rows) only, so results do not depend on the
//! thread count.

use super::pool::SendPtr;
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

/// One ISA's micro-kernels. `NR` is the keys per packed K^T panel and the output columns per
/// P.V tile (two vectors). Every method requires that this CPU supports the ISA.
trait Kernels {
    const NR: usize;

    /// `s[r * lds + c] = scale * sum_t qp[t * QP + r] * kp[t * NR + c]` for `r < MR`,
    /// `c < NR`.
    ///
    /// # Safety
    /// The ISA is supported; `qp` holds `d * QP` values, `kp` `d * NR`, and `s` is writable at
    /// `r * lds + c` for every `r < MR`, `c < NR`.
    unsafe fn qk(d: usize, qp: *const f32, kp: *const f32, scale: f32, s: *mut f32, lds: usize);

    /// In place `s[j] = exp(s[j] - max_j s[j])` for `j < n` (n >= 1); returns the sum.
    ///
    /// # Safety
    /// The ISA is supported; `s` is readable and writable for `n.next_multiple_of(NR)` values.
    unsafe fn softmax(s: *mut f32, n: usize) -> f32;

    /// Hints that the cache line holding `x` will be read soon (no architectural effect).
    fn prefetch(x: &f32);

    /// Writes the K^T panel of up to `NR` key rows: `panel[t * NR + c] = rows[c][t]` for
    /// `t < d`, and 0 in the columns `c >= rows.len()`.
    ///
    /// # Safety
    /// The ISA is supported; `rows.len() <= NR`, every row holds at least `d` values and
    /// `panel` is writable for `d * NR`.
    unsafe fn pack_k(rows: &[&[f32]], d: usize, panel: *mut f32);

    /// Writes a query tile `[d][QP]`: `qp[t * QP + r] = rows[r][t]`, 0 for `r >= rows.len()`.
    ///
    /// # Safety
    /// The ISA is supported; `rows.len() <= QP`, every row holds at least `d` values and `qp`
    /// is writable for `d * QP`.
    unsafe fn pack_q(rows: &[&[f32]], d: usize, qp: *mut f32);

    /// Writes one V row into its column chunks: `dst[c * stride + i] = row[c * NR + i]` for
    /// `i < NR`, 0 past the row's end.
    ///
    /// # Safety
    /// The ISA is supported; `dst` is writable at `c * stride + i` for every chunk
    /// `c < row.len().div_ceil(NR)` and `i < NR`.
    unsafe fn pack_v(row: &[f32], dst: *mut f32, stride: usize);

    /// `out[r][c] = (sum_{j < ends[r]} p[r * ldp + j] * vp[j * NR + c]) / z[r]` for `r < MR`
    /// with `out[r]` not null, `c < cols`, summed in increasing `j`.
    ///
    /// # Safety
    /// The ISA is supported; `p` is readable at `r * ldp + j` for `j < ends[r]`, `vp` holds
    /// `max(ends) * NR` values, `1 <= cols <= NR`, and each non-null `out[r]` is writable
    /// for `cols` values.
    unsafe fn pv(
        p: *const f32,
        ldp: usize,
        ends: &[usize; MR],
        z: &[f32; MR],
        vp: *const f32,
        cols: usize,
        out: &[*mut f32; MR],
    );
}

pub mod reference {
    use crate::ops::{AttentionParams, MaskKind};

    /// Whether query `i` of batch `b` may attend key `j`.
    pub fn visible(
        p: &AttentionParams,
        mask: Option<&[u32]>,
        b: usize,
        i: usize,
        j: usize,
    ) -> bool {
        match p.mask {
            MaskKind::None => true,
            MaskKind::KeyPadding => mask.is_some_and(|m| m[b * p.kv_len + j] != 0),
            MaskKind::Causal => j + p.q_len <= i + p.kv_len,
        }
    }

    /// Softmax in f64 per (batch, query, head); fully masked rows give zeros. A NaN score
    /// makes its row NaN (a row is "fully masked" by visibility, not by its maximum, which
    /// `f64::max` computes ignoring NaN).
    pub fn attention(
        p: &AttentionParams,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: Option<&[u32]>,
        out: &mut [f32],
    ) {
        let d = p.head_dim;
        let group = p.q_heads / p.kv_heads;
        let mut s = vec![0f64; p.kv_len];
        for b in 0..p.batch {
            for i in 0..p.q_len {
                for h in 0..p.q_heads {
                    let kh = h / group;
                    let qo = (b * p.q_len + i) * p.q_row_stride + h * d;
                    let mut m = f64::NEG_INFINITY;
                    let mut any_visible = false;
                    for (j, sj) in s.iter_mut().enumerate() {
                        if !visible(p, mask, b, i, j) {
                            *sj = f64::NEG_INFINITY;
                            continue;
                        }
                        any_visible = true;
                        let ko = (b * p.kv_len + j) * p.kv_row_stride + kh * d;
                        let dot: f64 = (0..d).map(|t| q[qo + t] as f64 * k[ko + t] as f64).sum();
                        *sj = dot * p.scale as f64;
                        m = m.max(*sj);
                    }
                    let oo = (b * p.q_len + i) * (p.q_heads * d) + h * d;
                    let o = &mut out[oo..oo + d];
                    o.fill(0.0);
                    if !any_visible {
                        continue;
                    }
                    let mut acc = vec![0f64; d];
                    let mut z = 0f64;
                    for (j, sj) in s.iter().enumerate() {
                        if !visible(p, mask, b, i, j) {
                            continue;
                        }
                        let e = (sj - m).exp();
                        z += e;
                        let vo = (b * p.kv_len + j) * p.kv_row_stride + kh * d;
                        for t in 0..d {
                            acc[t] += e * v[vo + t] as f64;
                        }
                    }
                    for t in 0..d {
                        o[t] = (acc[t] / z) as f32;
                    }
                }
            }
        }
    }
}

pub fn attention(
    cx: &Cx,
    p: &AttentionParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[u32]>,
    out: &mut [f32],
) {
    check(p, q, k, v, mask, out);
    assert!(
        cx.isa.is_supported(),
        "{} is not supported here",
        cx.isa.name()
    );
    match cx.isa {
        // SAFETY (all three arms): the ISA was detected just above (`Isa::is_supported`).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { run::<x86::Avx512>(cx, p, q, k, v, mask, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { run::<x86::Avx2>(cx, p, q, k, v, mask, out) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { run::<arm::Neon>(cx, p, q, k, v, mask, out) },
        _ => scalar(cx, p, q, k, v, mask, out),
    }
}

/// The operand sizes the unchecked SIMD paths rely on (CpuBackend checked them when the op
/// was recorded; this keeps the public entry point sound on its own).
fn check(
    p: &AttentionParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[u32]>,
    out: &mut [f32],
) {
    let d = p.head_dim;
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

/// The reference, split over batch rows.
fn scalar(
    cx: &Cx,
    p: &AttentionParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[u32]>,
    out: &mut [f32],
) {
    let row = p.q_heads * p.head_dim;
    cx.pool.par_chunks_mut(
        &mut out[..p.batch * p.q_len * row],
        p.q_len * row,
        |b, o| {
            let one = AttentionParams { batch: 1, ..*p };
            let q = &q[b * p.q_len * p.q_row_stride..];
            let k = &k[b * p.kv_len * p.kv_row_stride..];
            let v = &v[b * p.kv_len * p.kv_row_stride..];
            let m = mask.map(|m| &m[b * p.kv_len..(b + 1) * p.kv_len]);
            reference::attention(&one, q, k, v, m, o);
        },
    );
}

/// The blocked driver shared by every SIMD ISA.
///
/// # Safety
/// `K`'s ISA is supported by this CPU, and the operands passed [`check`].
unsafe fn run<K: Kernels>(
    cx: &Cx,
    p: &AttentionParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[u32]>,
    out: &mut [f32],
) {
    let (d, nr) = (p.head_dim, K::NR);
    let (lq, lk, hq, hkv) = (p.q_len, p.kv_len, p.q_heads, p.kv_heads);
    if p.batch * lq * hq * d == 0 {
        return;
    }
    let group = hq / hkv;
    // Visible keys of each batch row, in order.
    let keys: Vec<Vec<u32>> = (0..p.batch)
        .map(|b| match (p.mask, mask) {
            (MaskKind::KeyPadding, Some(m)) => (0..lk as u32)
                .filter(|&j| m[b * lk + j as usize] != 0)
                .collect(),
            _ => (0..lk as u32).collect(),
        })
        .collect();
    let panels: Vec<usize> = keys.iter().map(|l| l.len().div_ceil(nr)).collect();
    let chunks = d.div_ceil(nr);
    // Per (batch, kv head) `bh`, packed once and shared by its query heads and tiles, from
    // `at[bh]`: K^T as `panels[b]` panels of `[d][nr]`, then V as `chunks` column chunks of
    // `[n][nr]` (n visible keys, columns past d zero), so both micro-kernels stream
    // contiguous memory whatever the row stride.
    let v_off = |b: usize| panels[b] * d * nr;
    let mut at = Vec::with_capacity(p.batch * hkv + 1);
    at.push(0usize);
    for (b, kb) in keys.iter().enumerate() {
        for _ in 0..hkv {
            at.push(at.last().unwrap() + v_off(b) + chunks * kb.len() * nr);
        }
    }
    const { assert!(K::NR <= MAX_NR) };
    let total = *at.last().unwrap();
    let mut packed: Vec<f32> = Vec::with_capacity(total);
    let pk = SendPtr(packed.as_mut_ptr());
    cx.pool.run(p.batch * hkv, &|bh| {
        let (b, kh) = (bh / hkv, bh % hkv);
        let n = keys[b].len();
        let row = |jj: usize| (b * lk + keys[b][jj] as usize) * p.kv_row_stride + kh * d;
        let mut rows: [&[f32]; MAX_NR] = [&[]; MAX_NR];
        for pn in 0..panels[b] {
            let cnt = nr.min(n - pn * nr);
            for (c, r) in rows.iter_mut().enumerate().take(cnt) {
                *r = &k[row(pn * nr + c)..][..d];
            }
            // SAFETY: panel pn lies in [at[bh], at[bh] + v_off(b)), inside `packed`'s
            // capacity and touched by this task only; cnt <= NR rows of d values.
            unsafe { K::pack_k(&rows[..cnt], d, pk.get().add(at[bh] + pn * d * nr)) };
        }
        for jj in 0..n {
            // SAFETY: chunk c < chunks of row jj is at at[bh] + v_off(b) + (c * n + jj) * nr,
            // whose nr values lie before at[bh + 1], inside the capacity and this task's.
            unsafe {
                K::pack_v(
                    &v[row(jj)..][..d],
                    pk.get().add(at[bh] + v_off(b) + jj * nr),
                    n * nr,
                )
            };
        }
    });
    // SAFETY: the tasks above wrote every value below `total`: each K^T panel in full (zero
    // columns past the last key) and each V chunk row in full (zero lanes past head_dim).
    unsafe { packed.set_len(total) };
    let packed = &packed;

    let rows_per_task = MR * TILES_PER_TASK;
    let blocks = lq.div_ceil(rows_per_task);
    let outp = SendPtr(out.as_mut_ptr());
    cx.pool.run(p.batch * hq * blocks, &|task| {
        let (bh, blk) = (task / blocks, task % blocks);
        let (b, h) = (bh / hq, bh % hq);
        let kh = h / group;
        let n = keys[b].len();
        let kt = &packed[at[b * hkv + kh]..at[b * hkv + kh + 1]];
        let (kt, vt) = kt.split_at(v_off(b));
        let ldp = panels[b].max(1) * nr;
        let mut qp = vec![0f32; d * QP];
        let mut s = vec![0f32; MR * ldp];
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
                    *row = &q[(b * lq + i0 + r) * p.q_row_stride + h * d..][..d];
                }
                // SAFETY: rows <= MR <= QP rows of d values; qp holds d * QP values.
                unsafe { K::pack_q(&rows_q[..rows], d, qp.as_mut_ptr()) };
                // The next tile's query rows, far apart in a fused QKV buffer, load while
                // this tile computes.
                for i in
                    (i0 + MR..i_end.min(i0 + 2 * MR)).map(|i| (b * lq + i) * p.q_row_stride + h * d)
                {
                    for x in q[i..i + d].iter().step_by(16) {
                        K::prefetch(x);
                    }
                }
                for pn in 0..hi.div_ceil(nr) {
                    // SAFETY: qp holds d * QP values, panel pn of kt d * nr (pn < panels[b]),
                    // and s rows of ldp >= (pn + 1) * nr values.
                    unsafe {
                        K::qk(
                            d,
                            qp.as_ptr(),
                            kt[pn * d * nr..].as_ptr(),
                            p.scale,
                            s.as_mut_ptr().add(pn * nr),
                            ldp,
                        )
                    };
                }
            }
            // Rows without visible keys keep z = 1 and an empty sum: they write +0.
            let mut z = [1f32; MR];
            for r in 0..rows {
                if ends[r] > 0 {
                    // SAFETY: row r of s holds ldp >= ends[r].next_multiple_of(nr) values.
                    z[r] = unsafe { K::softmax(s.as_mut_ptr().add(r * ldp), ends[r]) };
                }
            }
            let mut rows_out = [std::ptr::null_mut(); MR];
            for c in 0..chunks {
                for (r, o) in rows_out.iter_mut().enumerate().take(rows) {
                    // SAFETY: row (b, i0 + r, h) of out, column c * nr < d (check).
                    *o = unsafe { outp.get().add(((b * lq + i0 + r) * hq + h) * d + c * nr) };
                }
                // SAFETY: p rows have ldp >= ends[r] values; chunk c of vt holds n >= max(ends)
                // rows of nr values; each non-null output row has cols = min(nr, d - c nr)
                // values left in out, written by this task only.
                unsafe {
                    K::pv(
                        s.as_ptr(),
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
    });
}

/// Vector exp, Cephes `expf` (`cephes/single/expf.c`): `x = n ln2 + r`, `|r| <= ln2 / 2`,
/// `e^r = 1 + r + r^2 P(r)` with a degree-5 `P`, `2^n` from exponent bits. About 1 ulp over
/// the domain used here (softmax arguments, `x <= 0`); `x < EXP_MIN` (results below the
/// smallest normal f32) gives exactly 0 and NaN stays NaN.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod exp_consts {
    /// `ln(f32::MIN_POSITIVE)`: below it the result would be subnormal; it flushes to 0.
    pub const EXP_MIN: f32 = -87.336_55;
    /// Upper clamp keeping `2^n` finite (the callers only pass `x <= 0`).
    pub const EXP_MAX: f32 = 88.0;
    pub const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// `ln 2` split so `n * LN2_HI` is exact for |n| < 2^9.
    pub const LN2_HI: f32 = 0.693_359_4;
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    pub const P: [f32; 6] = [
        1.987_569_2e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        // Cephes' 5.0000001201e-1, which rounds to 0.5 in f32.
        0.5,
    ];
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::exp_consts::*;
    use super::{Kernels, MR, QP};
    use crate::cpu::matmul::avx2::transpose8;
    use std::arch::x86_64::*;

    pub struct Avx2;

    impl Kernels for Avx2 {
        const NR: usize = 16;
        unsafe fn qk(
            d: usize,
            qp: *const f32,
            kp: *const f32,
            scale: f32,
            s: *mut f32,
            lds: usize,
        ) {
            // SAFETY: forwarded contract.
            unsafe { qk_avx2(d, qp, kp, scale, s, lds) }
        }
        fn prefetch(x: &f32) {
            // SAFETY: PREFETCHT0 (SSE, baseline on x86-64) never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const f32).cast()) }
        }
        unsafe fn pack_k(rows: &[&[f32]], d: usize, panel: *mut f32) {
            // SAFETY: forwarded contract.
            unsafe { pack_k_x86::<16>(rows, d, panel) }
        }
        unsafe fn pack_q(rows: &[&[f32]], d: usize, qp: *mut f32) {
            // SAFETY: forwarded contract.
            unsafe { pack_k_x86::<QP>(rows, d, qp) }
        }
        unsafe fn pack_v(row: &[f32], dst: *mut f32, stride: usize) {
            // SAFETY: forwarded contract.
            unsafe { pack_v_avx2(row, dst, stride) }
        }
        unsafe fn softmax(s: *mut f32, n: usize) -> f32 {
            // SAFETY: forwarded contract.
            unsafe { softmax_avx2(s, n) }
        }
        unsafe fn pv(
            p: *const f32,
            ldp: usize,
            ends: &[usize; MR],
            z: &[f32; MR],
            vp: *const f32,
            cols: usize,
            out: &[*mut f32; MR],
        ) {
            // SAFETY: forwarded contract.
            unsafe { pv_avx2(p, ldp, ends, z, vp, cols, out) }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn exp_avx2(x: __m256) -> __m256 {
        // MINPS/MAXPS return the second operand when either is NaN: x goes second so a NaN
        // survives the clamps.
        let xc = _mm256_max_ps(
            _mm256_set1_ps(EXP_MIN),
            _mm256_min_ps(_mm256_set1_ps(EXP_MAX), x),
        );
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(xc, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), xc);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
        let mut y = _mm256_set1_ps(P[0]);
        for &c in &P[1..] {
            y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(c));
        }
        let y = _mm256_add_ps(
            _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r),
            _mm256_set1_ps(1.0),
        );
        let pow2n = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        )));
        let e = _mm256_mul_ps(y, pow2n);
        let tiny = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_MIN));
        _mm256_andnot_ps(tiny, e)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum_avx2(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hmax_avx2(v: __m256) -> f32 {
        let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)))
    }

    /// `Kernels::pack_k` for panels of `NR` (16 on AVX2, 32 on AVX-512) in 8 x 8 blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pack_k_x86<const NR: usize>(rows: &[&[f32]], d: usize, panel: *mut f32) {
        let d8 = d / 8 * 8;
        for g in (0..NR).step_by(8) {
            let group = rows.get(g..).unwrap_or(&[]);
            for t0 in (0..d8).step_by(8) {
                let mut r = [_mm256_setzero_ps(); 8];
                for (ri, row) in r.iter_mut().zip(group) {
                    // SAFETY: t0 + 8 <= d <= row.len() (contract).
                    *ri = unsafe { _mm256_loadu_ps(row.as_ptr().add(t0)) };
                }
                for (t, col) in transpose8(r).into_iter().enumerate() {
                    // SAFETY: (t0 + t) * NR + g + 8 <= d * NR (contract).
                    unsafe { _mm256_storeu_ps(panel.add((t0 + t) * NR + g), col) };
                }
            }
            for t in d8..d {
                for i in 0..8 {
                    // SAFETY: as above.
                    unsafe { *panel.add(t * NR + g + i) = group.get(i).map_or(0.0, |row| row[t]) };
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pack_v_avx2(row: &[f32], dst: *mut f32, stride: usize) {
        for (c, src) in row.chunks(16).enumerate() {
            let m0 = _mm256_castps_si256(lanes_below_avx2(src.len()));
            let m1 = _mm256_castps_si256(lanes_below_avx2(src.len().saturating_sub(8)));
            // SAFETY: src holds src.len() values; a partial chunk is read through masks
            // (masked-off lanes are not accessed; `wrapping_add` keeps the address defined);
            // dst is writable for 16 values at c * stride (contract).
            unsafe {
                let (v0, v1) = if src.len() == 16 {
                    (
                        _mm256_loadu_ps(src.as_ptr()),
                        _mm256_loadu_ps(src.as_ptr().add(8)),
                    )
                } else {
                    (
                        _mm256_maskload_ps(src.as_ptr(), m0),
                        _mm256_maskload_ps(src.as_ptr().wrapping_add(8), m1),
                    )
                };
                _mm256_storeu_ps(dst.add(c * stride), v0);
                _mm256_storeu_ps(dst.add(c * stride + 8), v1);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn qk_avx2(
        d: usize,
        qp: *const f32,
        kp: *const f32,
        scale: f32,
        s: *mut f32,
        lds: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        for t in 0..d {
            // SAFETY: t < d, so kp + t * 16 + 16 and qp + t * QP + MR are inside the panels.
            unsafe {
                let k0 = _mm256_loadu_ps(kp.add(t * 16));
                let k1 = _mm256_loadu_ps(kp.add(t * 16 + 8));
                for (r, a) in acc.iter_mut().enumerate() {
                    let qv = _mm256_set1_ps(*qp.add(t * QP + r));
                    a[0] = _mm256_fmadd_ps(qv, k0, a[0]);
                    a[1] = _mm256_fmadd_ps(qv, k1, a[1]);
                }
            }
        }
        let sc = _mm256_set1_ps(scale);
        for (r, a) in acc.iter().enumerate() {
            // SAFETY: s is writable at r * lds + c for c < 16 (contract).
            unsafe {
                _mm256_storeu_ps(s.add(r * lds), _mm256_mul_ps(a[0], sc));
                _mm256_storeu_ps(s.add(r * lds + 8), _mm256_mul_ps(a[1], sc));
            }
        }
    }

    /// Lanes `< n` of a vector as an all-ones mask.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn lanes_below_avx2(n: usize) -> __m256 {
        let iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), iota))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn softmax_avx2(s: *mut f32, n: usize) -> f32 {
        let full = n / 8 * 8;
        let tail = lanes_below_avx2(n - full);
        let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut mx = ninf;
        // SAFETY (this function): s is readable and writable up to n rounded up to 16 >= full
        // + 8 (contract).
        for i in (0..full).step_by(8) {
            mx = _mm256_max_ps(mx, unsafe { _mm256_loadu_ps(s.add(i)) });
        }
        if full < n {
            let x = unsafe { _mm256_loadu_ps(s.add(full)) };
            mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, x, tail));
        }
        let m = _mm256_set1_ps(hmax_avx2(mx));
        let mut sum = _mm256_setzero_ps();
        for i in (0..full).step_by(8) {
            let e = exp_avx2(_mm256_sub_ps(unsafe { _mm256_loadu_ps(s.add(i)) }, m));
            unsafe { _mm256_storeu_ps(s.add(i), e) };
            sum = _mm256_add_ps(sum, e);
        }
        if full < n {
            let x = unsafe { _mm256_loadu_ps(s.add(full)) };
            let e = _mm256_and_ps(exp_avx2(_mm256_sub_ps(x, m)), tail);
            unsafe { _mm256_storeu_ps(s.add(full), e) };
            sum = _mm256_add_ps(sum, e);
        }
        hsum_avx2(sum)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pv_avx2(
        p: *const f32,
        ldp: usize,
        ends: &[usize; MR],
        z: &[f32; MR],
        vp: *const f32,
        cols: usize,
        out: &[*mut f32; MR],
    ) {
        let lo = ends.iter().copied().min().unwrap_or(0);
        let hi = ends.iter().copied().max().unwrap_or(0);
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        // One key: every row takes it below `lo`; between `lo` and `hi` only the rows whose
        // end lies beyond it (a hidden key is never multiplied in, not even by 0).
        macro_rules! key {
            ($j:expr, $all:expr) => {{
                let j = $j;
                // SAFETY: j < hi, so row j of vp holds 16 values (contract).
                let (v0, v1) = unsafe {
                    (
                        _mm256_loadu_ps(vp.add(j * 16)),
                        _mm256_loadu_ps(vp.add(j * 16 + 8)),
                    )
                };
                for (r, a) in acc.iter_mut().enumerate() {
                    if $all || j < ends[r] {
                        // SAFETY: j < ends[r], so p is readable at r * ldp + j (contract).
                        let pr = _mm256_set1_ps(unsafe { *p.add(r * ldp + j) });
                        a[0] = _mm256_fmadd_ps(pr, v0, a[0]);
                        a[1] = _mm256_fmadd_ps(pr, v1, a[1]);
                    }
                }
            }};
        }
        for j in 0..lo {
            key!(j, true);
        }
        for j in lo..hi {
            key!(j, false);
        }
        let m0 = _mm256_castps_si256(lanes_below_avx2(cols));
        let m1 = _mm256_castps_si256(lanes_below_avx2(cols.saturating_sub(8)));
        for (r, a) in acc.iter().enumerate() {
            if out[r].is_null() {
                continue;
            }
            let zr = _mm256_set1_ps(z[r]);
            let (o0, o1) = (_mm256_div_ps(a[0], zr), _mm256_div_ps(a[1], zr));
            // SAFETY: out[r] is writable for cols values (contract); masked-off lanes are not
            // written, and `wrapping_add` keeps the address computation defined.
            unsafe {
                if cols == 16 {
                    _mm256_storeu_ps(out[r], o0);
                    _mm256_storeu_ps(out[r].add(8), o1);
                } else {
                    _mm256_maskstore_ps(out[r], m0, o0);
                    _mm256_maskstore_ps(out[r].wrapping_add(8), m1, o1);
                }
            }
        }
    }

    pub struct Avx512;

    impl Kernels for Avx512 {
        const NR: usize = 32;
        unsafe fn qk(
            d: usize,
            qp: *const f32,
            kp: *const f32,
            scale: f32,
            s: *mut f32,
            lds: usize,
        ) {
            // SAFETY: forwarded contract.
            unsafe { qk_avx512(d, qp, kp, scale, s, lds) }
        }
        fn prefetch(x: &f32) {
            // SAFETY: PREFETCHT0 (SSE, baseline on x86-64) never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const f32).cast()) }
        }
        unsafe fn pack_k(rows: &[&[f32]], d: usize, panel: *mut f32) {
            // SAFETY: forwarded contract.
            unsafe { pack_k_avx512(rows, d, panel) }
        }
        unsafe fn pack_q(rows: &[&[f32]], d: usize, qp: *mut f32) {
            // SAFETY: forwarded contract.
            unsafe { pack_q_avx512(rows, d, qp) }
        }
        unsafe fn pack_v(row: &[f32], dst: *mut f32, stride: usize) {
            // SAFETY: forwarded contract.
            unsafe { pack_v_avx512(row, dst, stride) }
        }
        unsafe fn softmax(s: *mut f32, n: usize) -> f32 {
            // SAFETY: forwarded contract.
            unsafe { softmax_avx512(s, n) }
        }
        unsafe fn pv(
            p: *const f32,
            ldp: usize,
            ends: &[usize; MR],
            z: &[f32; MR],
            vp: *const f32,
            cols: usize,
            out: &[*mut f32; MR],
        ) {
            // SAFETY: forwarded contract.
            unsafe { pv_avx512(p, ldp, ends, z, vp, cols, out) }
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
    fn exp_avx512(x: __m512) -> __m512 {
        // As exp_avx2 (VMINPS/VMAXPS keep a NaN in the second operand).
        let xc = _mm512_max_ps(
            _mm512_set1_ps(EXP_MIN),
            _mm512_min_ps(_mm512_set1_ps(EXP_MAX), x),
        );
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(xc, _mm512_set1_ps(LOG2E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), xc);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
        let mut y = _mm512_set1_ps(P[0]);
        for &c in &P[1..] {
            y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(c));
        }
        let y = _mm512_add_ps(
            _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r),
            _mm512_set1_ps(1.0),
        );
        let pow2n = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(n),
            _mm512_set1_epi32(127),
        )));
        let e = _mm512_mul_ps(y, pow2n);
        let tiny = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_MIN));
        _mm512_maskz_mov_ps(!tiny, e)
    }

    /// Lanes `< n` of a vector as a mask.
    #[inline]
    fn lanes_below_512(n: usize) -> __mmask16 {
        ((1u32 << n.min(16)) - 1) as __mmask16
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
    unsafe fn pack_k_avx512(rows: &[&[f32]], d: usize, panel: *mut f32) {
        // SAFETY: forwarded contract; the enabled AVX-512 features imply AVX2.
        unsafe { pack_k_x86::<32>(rows, d, panel) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
    unsafe fn pack_q_avx512(rows: &[&[f32]], d: usize, qp: *mut f32) {
        // SAFETY: forwarded contract; the enabled AVX-512 features imply AVX2.
        unsafe { pack_k_x86::<QP>(rows, d, qp) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
    unsafe fn pack_v_avx512(row: &[f32], dst: *mut f32, stride: usize) {
        for (c, src) in row.chunks(32).enumerate() {
            let (m0, m1) = (
                lanes_below_512(src.len()),
                lanes_below_512(src.len().saturating_sub(16)),
            );
            // SAFETY: src holds src.len() values, read through masks (masked-off lanes are not
            // accessed; `wrapping_add` keeps the address defined); dst is writable for 32
            // values at c * stride (contract).
            unsafe {
                let v0 = _mm512_maskz_loadu_ps(m0, src.as_ptr());
                let v1 = _mm512_maskz_loadu_ps(m1, src.as_ptr().wrapping_add(16));
                _mm512_storeu_ps(dst.add(c * stride), v0);
                _mm512_storeu_ps(dst.add(c * stride + 16), v1);
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
    unsafe fn qk_avx512(
        d: usize,
        qp: *const f32,
        kp: *const f32,
        scale: f32,
        s: *mut f32,
        lds: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for t in 0..d {
            // SAFETY: t < d, so kp + t * 32 + 32 and qp + t * QP + MR are inside the panels.
            unsafe {
                let k0 = _mm512_loadu_ps(kp.add(t * 32));
                let k1 = _mm512_loadu_ps(kp.add(t * 32 + 16));
                for (r, a) in acc.iter_mut().enumerate() {
                    let qv = _mm512_set1_ps(*qp.add(t * QP + r));
                    a[0] = _mm512_fmadd_ps(qv, k0, a[0]);
                    a[1] = _mm512_fmadd_ps(qv, k1, a[1]);
                }
            }
        }
        let sc = _mm512_set1_ps(scale);
        for (r, a) in acc.iter().enumerate() {
            // SAFETY: s is writable at r * lds + c for c < 32 (contract).
            unsafe {
                _mm512_storeu_ps(s.add(r * lds), _mm512_mul_ps(a[0], sc));
                _mm512_storeu_ps(s.add(r * lds + 16), _mm512_mul_ps(a[1], sc));
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
    unsafe fn softmax_avx512(s: *mut f32, n: usize) -> f32 {
        let full = n / 16 * 16;
        let tail = lanes_below_512(n - full);
        let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut mx = ninf;
        // SAFETY (this function): s is readable and writable up to n rounded up to 32 >= full
        // + 16 (contract); the tail is also masked.
        for i in (0..full).step_by(16) {
            mx = _mm512_max_ps(mx, unsafe { _mm512_loadu_ps(s.add(i)) });
        }
        if full < n {
            mx = _mm512_max_ps(mx, unsafe { _mm512_mask_loadu_ps(ninf, tail, s.add(full)) });
        }
        let m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
        let mut sum = _mm512_setzero_ps();
        for i in (0..full).step_by(16) {
            let e = exp_avx512(_mm512_sub_ps(unsafe { _mm512_loadu_ps(s.add(i)) }, m));
            unsafe { _mm512_storeu_ps(s.add(i), e) };
            sum = _mm512_add_ps(sum, e);
        }
        if full < n {
            let x = unsafe { _mm512_maskz_loadu_ps(tail, s.add(full)) };
            let e = _mm512_maskz_mov_ps(tail, exp_avx512(_mm512_sub_ps(x, m)));
            unsafe { _mm512_mask_storeu_ps(s.add(full), tail, e) };
            sum = _mm512_add_ps(sum, e);
        }
        _mm512_reduce_add_ps(sum)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
    unsafe fn pv_avx512(
        p: *const f32,
        ldp: usize,
        ends: &[usize; MR],
        z: &[f32; MR],
        vp: *const f32,
        cols: usize,
        out: &[*mut f32; MR],
    ) {
        let lo = ends.iter().copied().min().unwrap_or(0);
        let hi = ends.iter().copied().max().unwrap_or(0);
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        // One key: every row takes it below `lo`; between `lo` and `hi` only the rows whose
        // end lies beyond it (a hidden key is never multiplied in, not even by 0).
        macro_rules! key {
            ($j:expr, $all:expr) => {{
                let j = $j;
                // SAFETY: j < hi, so row j of vp holds 32 values (contract).
                let (v0, v1) = unsafe {
                    (
                        _mm512_loadu_ps(vp.add(j * 32)),
                        _mm512_loadu_ps(vp.add(j * 32 + 16)),
                    )
                };
                for (r, a) in acc.iter_mut().enumerate() {
                    if $all || j < ends[r] {
                        // SAFETY: j < ends[r], so p is readable at r * ldp + j (contract).
                        let pr = _mm512_set1_ps(unsafe { *p.add(r * ldp + j) });
                        a[0] = _mm512_fmadd_ps(pr, v0, a[0]);
                        a[1] = _mm512_fmadd_ps(pr, v1, a[1]);
                    }
                }
            }};
        }
        for j in 0..lo {
            key!(j, true);
        }
        for j in lo..hi {
            key!(j, false);
        }
        let (m0, m1) = (
            lanes_below_512(cols),
            lanes_below_512(cols.saturating_sub(16)),
        );
        for (r, a) in acc.iter().enumerate() {
            if out[r].is_null() {
                continue;
            }
            let zr = _mm512_set1_ps(z[r]);
            let (o0, o1) = (_mm512_div_ps(a[0], zr), _mm512_div_ps(a[1], zr));
            // SAFETY: out[r] is writable for cols values (contract); masked-off lanes are not
            // written (AVX-512 masked stores do not fault), and `wrapping_add` keeps the
            // address computation defined.
            unsafe {
                _mm512_mask_storeu_ps(out[r], m0, o0);
                _mm512_mask_storeu_ps(out[r].wrapping_add(16), m1, o1);
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::exp_consts::*;
    use super::{Kernels, MR, QP};
    use std::arch::aarch64::*;

    pub struct Neon;

    impl Kernels for Neon {
        const NR: usize = 8;
        unsafe fn qk(
            d: usize,
            qp: *const f32,
            kp: *const f32,
            scale: f32,
            s: *mut f32,
            lds: usize,
        ) {
            // SAFETY: forwarded contract.
            unsafe { qk_neon(d, qp, kp, scale, s, lds) }
        }
        fn prefetch(x: &f32) {
            // SAFETY: PRFM is a hint: it never faults and changes no architectural state.
            unsafe {
                std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) x as *const f32, options(nostack, readonly, preserves_flags))
            }
        }
        unsafe fn pack_k(rows: &[&[f32]], d: usize, panel: *mut f32) {
            // SAFETY: forwarded contract.
            unsafe { pack_k_neon(rows, d, panel) }
        }
        unsafe fn pack_q(rows: &[&[f32]], d: usize, qp: *mut f32) {
            // SAFETY: forwarded contract.
            unsafe { pack_k_neon(rows, d, qp) }
        }
        unsafe fn pack_v(row: &[f32], dst: *mut f32, stride: usize) {
            // SAFETY: forwarded contract.
            unsafe { pack_v_neon(row, dst, stride) }
        }
        unsafe fn softmax(s: *mut f32, n: usize) -> f32 {
            // SAFETY: forwarded contract.
            unsafe { softmax_neon(s, n) }
        }
        unsafe fn pv(
            p: *const f32,
            ldp: usize,
            ends: &[usize; MR],
            z: &[f32; MR],
            vp: *const f32,
            cols: usize,
            out: &[*mut f32; MR],
        ) {
            // SAFETY: forwarded contract.
            unsafe { pv_neon(p, ldp, ends, z, vp, cols, out) }
        }
    }

    #[inline]
    #[target_feature(enable = "neon")]
    fn exp_neon(x: float32x4_t) -> float32x4_t {
        // As exp_avx2; FMIN/FMAX propagate NaN on their own.
        let xc = vmaxq_f32(vdupq_n_f32(EXP_MIN), vminq_f32(vdupq_n_f32(EXP_MAX), x));
        let n = vrndnq_f32(vmulq_n_f32(xc, LOG2E));
        let r = vfmsq_f32(xc, n, vdupq_n_f32(LN2_HI));
        let r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
        let mut y = vdupq_n_f32(P[0]);
        for &c in &P[1..] {
            y = vfmaq_f32(vdupq_n_f32(c), y, r);
        }
        let y = vaddq_f32(vfmaq_f32(r, y, vmulq_f32(r, r)), vdupq_n_f32(1.0));
        let pow2n = vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(
            vcvtnq_s32_f32(n),
            vdupq_n_s32(127),
        )));
        let e = vmulq_f32(y, pow2n);
        let tiny = vcltq_f32(x, vdupq_n_f32(EXP_MIN));
        vbslq_f32(tiny, vdupq_n_f32(0.0), e)
    }

    /// Lanes `< n` of a vector as an all-ones mask.
    #[inline]
    #[target_feature(enable = "neon")]
    fn lanes_below_neon(n: usize) -> uint32x4_t {
        let iota = vcombine_u32(vcreate_u32(1 << 32), vcreate_u32(2 | (3 << 32)));
        vcltq_u32(iota, vdupq_n_u32(n.min(4) as u32))
    }

    #[target_feature(enable = "neon")]
    unsafe fn pack_k_neon(rows: &[&[f32]], d: usize, panel: *mut f32) {
        let d4 = d / 4 * 4;
        for g in (0..8).step_by(4) {
            let group = rows.get(g..).unwrap_or(&[]);
            for t0 in (0..d4).step_by(4) {
                let mut r = [vdupq_n_f32(0.0); 4];
                for (ri, row) in r.iter_mut().zip(group) {
                    // SAFETY: t0 + 4 <= d <= row.len() (contract).
                    *ri = unsafe { vld1q_f32(row.as_ptr().add(t0)) };
                }
                // 4 x 4 transpose.
                let a = vtrnq_f32(r[0], r[1]);
                let b = vtrnq_f32(r[2], r[3]);
                let cols = [
                    vcombine_f32(vget_low_f32(a.0), vget_low_f32(b.0)),
                    vcombine_f32(vget_low_f32(a.1), vget_low_f32(b.1)),
                    vcombine_f32(vget_high_f32(a.0), vget_high_f32(b.0)),
                    vcombine_f32(vget_high_f32(a.1), vget_high_f32(b.1)),
                ];
                for (t, col) in cols.into_iter().enumerate() {
                    // SAFETY: (t0 + t) * 8 + g + 4 <= d * 8 (contract).
                    unsafe { vst1q_f32(panel.add((t0 + t) * 8 + g), col) };
                }
            }
            for t in d4..d {
                for i in 0..4 {
                    // SAFETY: as above.
                    unsafe { *panel.add(t * 8 + g + i) = group.get(i).map_or(0.0, |row| row[t]) };
                }
            }
        }
    }

    #[target_feature(enable = "neon")]
    unsafe fn pack_v_neon(row: &[f32], dst: *mut f32, stride: usize) {
        for (c, src) in row.chunks(8).enumerate() {
            let mut part = [0f32; 8];
            part[..src.len()].copy_from_slice(src);
            // SAFETY: dst is writable for 8 values at c * stride (contract).
            unsafe {
                vst1q_f32(dst.add(c * stride), vld1q_f32(part.as_ptr()));
                vst1q_f32(dst.add(c * stride + 4), vld1q_f32(part.as_ptr().add(4)));
            }
        }
    }

    #[target_feature(enable = "neon")]
    unsafe fn qk_neon(
        d: usize,
        qp: *const f32,
        kp: *const f32,
        scale: f32,
        s: *mut f32,
        lds: usize,
    ) {
        let mut acc = [[vdupq_n_f32(0.0); 2]; MR];
        for t in 0..d {
            // SAFETY: t < d, so kp + t * 8 + 8 and qp + t * QP + MR are inside the panels.
            unsafe {
                let k0 = vld1q_f32(kp.add(t * 8));
                let k1 = vld1q_f32(kp.add(t * 8 + 4));
                for (r, a) in acc.iter_mut().enumerate() {
                    let qv = *qp.add(t * QP + r);
                    a[0] = vfmaq_n_f32(a[0], k0, qv);
                    a[1] = vfmaq_n_f32(a[1], k1, qv);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            // SAFETY: s is writable at r * lds + c for c < 8 (contract).
            unsafe {
                vst1q_f32(s.add(r * lds), vmulq_n_f32(a[0], scale));
                vst1q_f32(s.add(r * lds + 4), vmulq_n_f32(a[1], scale));
            }
        }
    }

    #[target_feature(enable = "neon")]
    unsafe fn softmax_neon(s: *mut f32, n: usize) -> f32 {
        let full = n / 4 * 4;
        let tail = lanes_below_neon(n - full);
        let ninf = vdupq_n_f32(f32::NEG_INFINITY);
        let mut mx = ninf;
        // SAFETY (this function): s is readable and writable up to n rounded up to 8 >= full
        // + 4 (contract).
        for i in (0..full).step_by(4) {
            mx = vmaxq_f32(mx, unsafe { vld1q_f32(s.add(i)) });
        }
        if full < n {
            mx = vmaxq_f32(mx, vbslq_f32(tail, unsafe { vld1q_f32(s.add(full)) }, ninf));
        }
        let m = vdupq_n_f32(vmaxvq_f32(mx));
        let mut sum = vdupq_n_f32(0.0);
        for i in (0..full).step_by(4) {
            let e = exp_neon(vsubq_f32(unsafe { vld1q_f32(s.add(i)) }, m));
            unsafe { vst1q_f32(s.add(i), e) };
            sum = vaddq_f32(sum, e);
        }
        if full < n {
            let x = vbslq_f32(tail, unsafe { vld1q_f32(s.add(full)) }, ninf);
            let e = exp_neon(vsubq_f32(x, m));
            unsafe { vst1q_f32(s.add(full), e) };
            sum = vaddq_f32(sum, e);
        }
        vaddvq_f32(sum)
    }

    #[target_feature(enable = "neon")]
    unsafe fn pv_neon(
        p: *const f32,
        ldp: usize,
        ends: &[usize; MR],
        z: &[f32; MR],
        vp: *const f32,
        cols: usize,
        out: &[*mut f32; MR],
    ) {
        let lo = ends.iter().copied().min().unwrap_or(0);
        let hi = ends.iter().copied().max().unwrap_or(0);
        let mut acc = [[vdupq_n_f32(0.0); 2]; MR];
        // One key: every row takes it below `lo`; between `lo` and `hi` only the rows whose
        // end lies beyond it (a hidden key is never multiplied in, not even by 0).
        macro_rules! key {
            ($j:expr, $all:expr) => {{
                let j = $j;
                // SAFETY: j < hi, so row j of vp holds 8 values (contract).
                let (v0, v1) = unsafe { (vld1q_f32(vp.add(j * 8)), vld1q_f32(vp.add(j * 8 + 4))) };
                for (r, a) in acc.iter_mut().enumerate() {
                    if $all || j < ends[r] {
                        // SAFETY: j < ends[r], so p is readable at r * ldp + j (contract).
                        let pr = unsafe { *p.add(r * ldp + j) };
                        a[0] = vfmaq_n_f32(a[0], v0, pr);
                        a[1] = vfmaq_n_f32(a[1], v1, pr);
                    }
                }
            }};
        }
        for j in 0..lo {
            key!(j, true);
        }
        for j in lo..hi {
            key!(j, false);
        }
        for (r, a) in acc.iter().enumerate() {
            if out[r].is_null() {
                continue;
            }
            let zr = vdupq_n_f32(z[r]);
            let (o0, o1) = (vdivq_f32(a[0], zr), vdivq_f32(a[1], zr));
            // SAFETY: out[r] is writable for cols values (contract); a partial chunk goes
            // through a local copy (NEON has no masked stores).
            unsafe {
                if cols == 8 {
                    vst1q_f32(out[r], o0);
                    vst1q_f32(out[r].add(4), o1);
                } else {
                    let mut part = [0f32; 8];
                    vst1q_f32(part.as_mut_ptr(), o0);
                    vst1q_f32(part.as_mut_ptr().add(4), o1);
                    std::ptr::copy_nonoverlapping(part.as_ptr(), out[r], cols);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Precision;
    use crate::cpu::ThreadPool;
    use crate::rng::uniform;
    use proptest::prelude::*;

    /// Multiplier on the first-order error bound of an output against the f64 reference,
    /// `eps * max|v| * ((head_dim + 4) * sabs + kv_len + 4)`, where `sabs = scale * max_j
    /// sum_t |q_t k_jt|`: a score carries the f32 dot product's `head_dim * eps/2 * sabs` plus
    /// a few roundings (scale, max subtraction, exp), and a score error `delta` moves the
    /// output by at most `2 delta max|v|` (softmax: `sum_j p_j |v_j - o| <= 2 max|v|`); the
    /// P.V sum and the normaliser add `kv_len * eps/2` relative each.
    const ATTN_TOL_ULPS: f32 = 2.0;

    struct Case {
        p: AttentionParams,
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
        /// Offsets of q, k and v in their buffers (a fused QKV buffer shares one).
        at: [usize; 3],
        mask: Option<Vec<u32>>,
    }

    impl std::fmt::Debug for Case {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?} at {:?} mask {:?}", self.p, self.at, self.mask)
        }
    }

    impl Case {
        fn operands(&self) -> (&[f32], &[f32], &[f32]) {
            (
                &self.q[self.at[0]..],
                &self.k[self.at[1]..],
                &self.v[self.at[2]..],
            )
        }
        fn run(&self, isa: Isa, threads: usize) -> Vec<f32> {
            let pool = ThreadPool::new(threads);
            let cx = Cx {
                isa,
                pool: &pool,
                precision: Precision::Strict,
            };
            let p = &self.p;
            let mut out = vec![f32::NAN; p.batch * p.q_len * p.q_heads * p.head_dim];
            let (q, k, v) = self.operands();
            attention(&cx, p, q, k, v, self.mask.as_deref(), &mut out);
            out
        }
        fn reference(&self) -> Vec<f32> {
            let p = &self.p;
            let mut out = vec![f32::NAN; p.batch * p.q_len * p.q_heads * p.head_dim];
            let (q, k, v) = self.operands();
            reference::attention(p, q, k, v, self.mask.as_deref(), &mut out);
            out
        }
        /// The bound of every output of row (b, i, h).
        fn tolerance(&self, b: usize, i: usize, h: usize) -> f32 {
            let p = &self.p;
            let (q, k, v) = self.operands();
            let (d, kh) = (p.head_dim, h / (p.q_heads / p.kv_heads));
            let (mut sabs, mut vmax) = (0f32, 0f32);
            for j in 0..p.kv_len {
                if reference::visible(p, self.mask.as_deref(), b, i, j) {
                    let qo = (b * p.q_len + i) * p.q_row_stride + h * d;
                    let ko = (b * p.kv_len + j) * p.kv_row_stride + kh * d;
                    let dot: f32 = (0..d).map(|t| (q[qo + t] * k[ko + t]).abs()).sum();
                    sabs = sabs.max(dot * p.scale);
                    vmax = (0..d).fold(vmax, |m, t| m.max(v[ko + t].abs()));
                }
            }
            ATTN_TOL_ULPS * f32::EPSILON * vmax * ((d + 4) as f32 * sabs + (p.kv_len + 4) as f32)
        }
    }

    /// Random values in [-2, 2) from a seed.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        (0..n as u64)
            .map(|i| 4.0 * uniform(seed, i) - 2.0)
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn make(
        batch: usize,
        q_len: usize,
        kv_len: usize,
        kv_heads: usize,
        group: usize,
        head_dim: usize,
        mask: MaskKind,
        fused: bool,
        pad: usize,
        seed: u64,
    ) -> Case {
        let q_heads = kv_heads * group;
        let d = head_dim;
        let (q_row_stride, kv_row_stride, at, lens);
        if fused {
            // One [tokens, (q_heads + 2 kv_heads) * d + pad] projection, q | k | v columns.
            assert_eq!(q_len, kv_len);
            q_row_stride = (q_heads + 2 * kv_heads) * d + pad;
            kv_row_stride = q_row_stride;
            at = [0, q_heads * d, (q_heads + kv_heads) * d];
            let n = batch * q_len * q_row_stride;
            lens = [n, n, n];
        } else {
            q_row_stride = q_heads * d + pad;
            kv_row_stride = kv_heads * d + 2 * pad;
            at = [0, pad, 0];
            let nkv = (batch * kv_len - 1) * kv_row_stride + kv_heads * d + pad;
            lens = [(batch * q_len - 1) * q_row_stride + q_heads * d, nkv, nkv];
        }
        let q = values(seed, lens[0]);
        let (k, v) = if fused {
            (q.clone(), q.clone())
        } else {
            (values(seed ^ 1, lens[1]), values(seed ^ 2, lens[2]))
        };
        let mask_buf = (mask == MaskKind::KeyPadding).then(|| {
            (0..batch)
                .flat_map(|b| {
                    let mode = crate::rng::splitmix64(seed, 1000 + b as u64) % 4;
                    (0..kv_len).map(move |j| match mode {
                        0 => 1,
                        1 => 0,
                        _ => (uniform(seed ^ 3, (b * kv_len + j) as u64) < 0.6) as u32 * 7,
                    })
                })
                .collect()
        });
        Case {
            p: AttentionParams {
                batch,
                q_len,
                kv_len,
                q_heads,
                kv_heads,
                head_dim: d,
                scale: 1.0 / (d as f32).sqrt(),
                mask,
                q_row_stride,
                kv_row_stride,
            },
            q,
            k,
            v,
            at,
            mask: mask_buf,
        }
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            (1..=3usize, 1..=40usize, 1..=45usize),
            (1..=3usize, 1..=3usize, 1..=40usize),
            prop_oneof![
                Just(MaskKind::None),
                Just(MaskKind::KeyPadding),
                Just(MaskKind::Causal)
            ],
            (any::<bool>(), 0..4usize, any::<u64>()),
            // Scores of order 1, or of order 1000 (near one-hot rows, where the max
            // subtraction and exp underflow matter).
            prop_oneof![Just(1f32), Just(40f32)],
        )
            .prop_map(
                |((b, lq, lk), (hkv, g, d), mask, (fused, pad, seed), amp)| {
                    let mut c = make(
                        b,
                        lq,
                        if fused { lq } else { lk },
                        hkv,
                        g,
                        d,
                        mask,
                        fused,
                        pad,
                        seed,
                    );
                    c.q.iter_mut().for_each(|x| *x *= amp);
                    c
                },
            )
    }

    fn assert_close(c: &Case, got: &[f32], want: &[f32], what: &str) {
        let p = &c.p;
        let d = p.head_dim;
        for (n, (g, w)) in got.iter().zip(want).enumerate() {
            let (row, t) = (n / d, n % d);
            let (bi, h) = (row / p.q_heads, row % p.q_heads);
            let (b, i) = (bi / p.q_len, bi % p.q_len);
            let tol = c.tolerance(b, i, h);
            assert!(
                (g - w).abs() <= tol,
                "{what}: out[b={b}, i={i}, h={h}, t={t}] = {g}, reference {w}, tol {tol}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn matches_reference_on_every_isa(c in case()) {
            let want = c.reference();
            for isa in Isa::available() {
                let one = c.run(isa, 1);
                assert_close(&c, &one, &want, isa.name());
                let two = c.run(isa, 2);
                prop_assert!(
                    one.iter().zip(&two).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{}: 1 and 2 threads differ", isa.name()
                );
            }
        }
    }

    /// Hidden keys contribute exactly nothing: poisoning their K and V with NaN and huge
    /// values leaves every output that cannot see them bit-identical (causal: also rows in
    /// the same tile as rows that do see them), rows that see a NaN are NaN, and fully
    /// hidden rows are +0.
    #[test]
    fn hidden_keys_are_skipped_exactly() {
        // (mask, q_len, kv_len, first poisoned key when causal)
        for (mask, lq, lk, from) in [
            (MaskKind::KeyPadding, 13, 37, 0),
            (MaskKind::Causal, 29, 29, 10),
            (MaskKind::Causal, 29, 21, 5),
            (MaskKind::Causal, 8, 40, 35),
        ] {
            let mut c = make(2, lq, lk, 2, 2, 24, mask, false, 1, 7);
            if let Some(m) = c.mask.as_mut() {
                for (j, x) in m.iter_mut().enumerate() {
                    // Batch row 0: keys 3, 4, 7, 10, ... visible; batch row 1: none.
                    *x = (j < lk && (j % 3 == 0 || j == 4)) as u32;
                }
            }
            let p = c.p;
            let hidden = |b: usize, j: usize| match &c.mask {
                Some(m) => m[b * lk + j] == 0,
                None => j >= from,
            };
            let mut dirty = Case {
                q: c.q.clone(),
                k: c.k.clone(),
                v: c.v.clone(),
                mask: c.mask.clone(),
                ..c
            };
            for b in 0..p.batch {
                for j in (0..lk).filter(|&j| hidden(b, j)) {
                    let o = (b * lk + j) * p.kv_row_stride;
                    for t in 0..p.kv_heads * p.head_dim {
                        dirty.k[c.at[1] + o + t] = if t % 2 == 0 { f32::NAN } else { 1e30 };
                        dirty.v[c.at[2] + o + t] = if t % 3 == 0 { f32::NAN } else { -1e30 };
                    }
                }
            }
            for isa in Isa::available() {
                let (clean, poisoned) = (c.run(isa, 2), dirty.run(isa, 2));
                for (n, (a, z)) in clean.iter().zip(&poisoned).enumerate() {
                    let row = n / p.head_dim / p.q_heads;
                    let (b, i) = (row / lq, row % lq);
                    let visible = |j: &usize| reference::visible(&p, c.mask.as_deref(), b, i, *j);
                    let what = format!("{} {mask:?} out[b={b}, i={i}] #{n}", isa.name());
                    if !(0..lk).any(|j| visible(&j)) {
                        assert_eq!((a.to_bits(), z.to_bits()), (0, 0), "{what}: not +0");
                    } else if (0..lk).filter(visible).any(|j| hidden(b, j)) {
                        assert!(z.is_nan(), "{what}: a visible NaN must propagate");
                    } else {
                        assert_eq!(a.to_bits(), z.to_bits(), "{what}: changed");
                    }
                }
            }
        }
    }
}
