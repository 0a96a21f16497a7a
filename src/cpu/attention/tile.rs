//! The attention micro-kernels, written once over the [`Simd`] primitives: every ISA runs
//! the same operations in the same order on vectors of its width (`NR = 2 LANES` columns per
//! tile), so they differ only in where a sum's lanes are combined.
//!
//! Each function is `#[inline(always)]` and reached from an ISA's `#[target_feature]` entry
//! point (see `entries!` in `mod.rs`), so it is compiled with that ISA's features.

use super::super::simd::{Simd, exp_nonpositive, load_n, store_n};
use super::{MR, QP};

/// `sc[r * lds + c] = scale * sum_t qp[t * QP + r] * kp[t * NR + c]` for `r < MR`, `c < NR`.
///
/// # Safety
/// `qp` holds `d * QP` values, `kp` `d * NR`, and `sc` is writable at `r * lds + c` for every
/// `r < MR`, `c < NR`.
#[inline(always)]
pub(super) unsafe fn qk<S: Simd>(
    s: S,
    d: usize,
    qp: *const f32,
    kp: *const f32,
    scale: f32,
    sc: *mut f32,
    lds: usize,
) {
    let (l, nr) = (S::LANES, 2 * S::LANES);
    let mut acc = [[s.splat(0.0); 2]; MR];
    for t in 0..d {
        // SAFETY: t < d, so kp + t * NR + NR and qp + t * QP + MR are inside the panels.
        unsafe {
            let k0 = s.load(kp.add(t * nr));
            let k1 = s.load(kp.add(t * nr + l));
            for (r, a) in acc.iter_mut().enumerate() {
                let qv = s.splat(*qp.add(t * QP + r));
                a[0] = s.mul_add(qv, k0, a[0]);
                a[1] = s.mul_add(qv, k1, a[1]);
            }
        }
    }
    let scale = s.splat(scale);
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: sc is writable at r * lds + c for c < NR (contract).
        unsafe {
            s.store(sc.add(r * lds), s.mul(a[0], scale));
            s.store(sc.add(r * lds + l), s.mul(a[1], scale));
        }
    }
}

/// In place `x[j] = exp(x[j] - max_j x[j])` for `j < n` (n >= 1); returns the sum, one vector
/// accumulator combined across lanes at the end. Values from `n` on are neither read nor
/// written. The exponential is the shared [`exp_nonpositive`] (the arguments are <= 0), so
/// the numerators are the same bits on every ISA and the same function as `cpu::softmax`'s.
///
/// # Safety
/// `x` is readable and writable for `n` values.
#[inline(always)]
pub(super) unsafe fn softmax<S: Simd>(s: S, x: *mut f32, n: usize) -> f32 {
    let l = S::LANES;
    let full = n / l * l;
    let ninf = f32::NEG_INFINITY;
    let mut mx = s.splat(ninf);
    for i in (0..full).step_by(l) {
        // SAFETY: i + LANES <= full <= n values are inside the row (contract).
        mx = s.max(mx, unsafe { s.load(x.add(i)) });
    }
    if full < n {
        // SAFETY: the n - full < LANES values from full are inside the row.
        mx = s.max(mx, unsafe { s.load_part(x.add(full), n - full, ninf) });
    }
    let m = s.splat(s.reduce_max(mx));
    let mut sum = s.splat(0.0);
    for i in (0..full).step_by(l) {
        // SAFETY: as in the first loop.
        let e = exp_nonpositive(s, s.sub(unsafe { s.load(x.add(i)) }, m));
        // SAFETY: as in the first loop.
        unsafe { s.store(x.add(i), e) };
        sum = s.add(sum, e);
    }
    if full < n {
        // SAFETY: as for the tail's maximum.
        let t = unsafe { s.load_part(x.add(full), n - full, ninf) };
        // The lanes past the row (-inf - m, or NaN when m = -inf) are zeroed before the sum.
        let e = s.select(
            s.first_mask(n - full),
            exp_nonpositive(s, s.sub(t, m)),
            s.splat(0.0),
        );
        // SAFETY: as for the tail's maximum.
        unsafe { s.store_part(x.add(full), n - full, e) };
        sum = s.add(sum, e);
    }
    s.reduce_add(sum)
}

/// One key `j` of [`pv`]: `acc[r] += p[r * ldp + j] * v_j` for every row (`ALL`) or only the
/// rows whose keys reach past `j`.
///
/// # Safety
/// As [`pv`], with `j < max(ends)` (and `j < min(ends)` when `ALL`).
#[inline(always)]
unsafe fn key<S: Simd, const ALL: bool>(
    s: S,
    acc: &mut [[S::F; 2]; MR],
    p: *const f32,
    ldp: usize,
    ends: &[usize; MR],
    v: *const f32,
    j: usize,
) {
    let (l, nr) = (S::LANES, 2 * S::LANES);
    // SAFETY: j < max(ends), so row j of v holds NR values (contract).
    let (v0, v1) = unsafe { (s.load(v.add(j * nr)), s.load(v.add(j * nr + l))) };
    for (r, a) in acc.iter_mut().enumerate() {
        if ALL || j < ends[r] {
            // SAFETY: j < ends[r], so p is readable at r * ldp + j (contract).
            let pr = s.splat(unsafe { *p.add(r * ldp + j) });
            a[0] = s.mul_add(pr, v0, a[0]);
            a[1] = s.mul_add(pr, v1, a[1]);
        }
    }
}

/// `out[r][c] = (sum_{j < ends[r]} p[r * ldp + j] * v[j * NR + c]) / z[r]` for `r < MR` with
/// `out[r]` not null, `c < cols`, summed in increasing `j`. A hidden key is never multiplied
/// in, not even by 0.
///
/// # Safety
/// `p` is readable at `r * ldp + j` for `j < ends[r]`, `v` holds `max(ends) * NR` values,
/// `1 <= cols <= NR`, and each non-null `out[r]` is writable for `cols` values.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn pv<S: Simd>(
    s: S,
    p: *const f32,
    ldp: usize,
    ends: &[usize; MR],
    z: &[f32; MR],
    v: *const f32,
    cols: usize,
    out: &[*mut f32; MR],
) {
    let l = S::LANES;
    let lo = ends.iter().copied().min().unwrap_or(0);
    let hi = ends.iter().copied().max().unwrap_or(0);
    let mut acc = [[s.splat(0.0); 2]; MR];
    // Every row takes the keys below `lo`; between `lo` and `hi` only the rows whose end lies
    // beyond the key.
    for j in 0..lo {
        // SAFETY: j < lo = min(ends) (contract forwarded).
        unsafe { key::<S, true>(s, &mut acc, p, ldp, ends, v, j) };
    }
    for j in lo..hi {
        // SAFETY: j < hi = max(ends) (contract forwarded).
        unsafe { key::<S, false>(s, &mut acc, p, ldp, ends, v, j) };
    }
    for (r, a) in acc.iter().enumerate() {
        if out[r].is_null() {
            continue;
        }
        let zr = s.splat(z[r]);
        let (o0, o1) = (s.div(a[0], zr), s.div(a[1], zr));
        // SAFETY: out[r] is writable for cols values (contract), split as min(cols, LANES)
        // and the rest.
        unsafe {
            store_n(s, out[r], cols.min(l), o0);
            if cols > l {
                store_n(s, out[r].add(l), cols - l, o1);
            }
        }
    }
}

/// Writes one V row into its column chunks: `dst[c * stride + i] = row[c * NR + i]` for
/// `i < NR`, 0 past the row's end.
///
/// # Safety
/// `dst` is writable at `c * stride + i` for every chunk `c < row.len().div_ceil(NR)` and
/// `i < NR`.
#[inline(always)]
pub(super) unsafe fn pack_v<S: Simd>(s: S, row: &[f32], dst: *mut f32, stride: usize) {
    let l = S::LANES;
    for (c, src) in row.chunks(2 * l).enumerate() {
        let n = src.len();
        // SAFETY: src holds n values, read as min(n, LANES) and the rest; dst is writable for
        // NR values at c * stride (contract).
        unsafe {
            let v0 = load_n(s, src.as_ptr(), n.min(l));
            let v1 = if n > l {
                load_n(s, src.as_ptr().add(l), n - l)
            } else {
                s.splat(0.0)
            };
            s.store(dst.add(c * stride), v0);
            s.store(dst.add(c * stride + l), v1);
        }
    }
}
