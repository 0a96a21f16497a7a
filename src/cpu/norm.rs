//! LayerNorm (biased variance) and RMSNorm over the last axis.
//!
//! The vector paths work in f32 with four vector accumulators per sum. LayerNorm takes the
//! mean of `x - x[0]` (so a large common offset does not cost precision in the sum), keeps
//! the mean as an exact two-term f32 sum `m_hi + m_lo`, and centres as `(x - m_hi) - m_lo`
//! (the first subtraction is exact whenever x is close to the mean), then sums the squared
//! centred values for the biased variance. Rows are split over threads, never a row.

use super::Cx;
use super::elementwise::zip_op;
use super::simd::{self, Kernel, LaneFn, Simd, load_n, store_n};
use crate::ops::{BinaryOp, NormParams};

pub mod reference {
    use crate::ops::NormParams;

    /// Two-pass mean and biased variance in f64, then f32 output.
    pub fn layer_norm(
        p: &NormParams,
        x: &[f32],
        gamma: Option<&[f32]>,
        beta: Option<&[f32]>,
        y: &mut [f32],
    ) {
        for r in 0..p.rows {
            let row = &x[r * p.cols..(r + 1) * p.cols];
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / p.cols as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / p.cols as f64;
            let inv = 1.0 / (var + p.eps as f64).sqrt();
            for c in 0..p.cols {
                let mut v = (row[c] as f64 - mean) * inv;
                if let Some(g) = gamma {
                    v *= g[c] as f64;
                }
                if let Some(b) = beta {
                    v += b[c] as f64;
                }
                y[r * p.cols + c] = v as f32;
            }
        }
    }

    /// `layer_norm(x + r)`: the f32 sums (as `binary` add), then [`layer_norm`].
    pub fn add_layer_norm(
        p: &NormParams,
        x: &[f32],
        r: &[f32],
        gamma: Option<&[f32]>,
        beta: Option<&[f32]>,
        y: &mut [f32],
    ) {
        let n = p.rows * p.cols;
        let sum: Vec<f32> = x[..n].iter().zip(&r[..n]).map(|(a, b)| a + b).collect();
        layer_norm(p, &sum, gamma, beta, y);
    }

    pub fn rms_norm(p: &NormParams, x: &[f32], gamma: Option<&[f32]>, y: &mut [f32]) {
        for r in 0..p.rows {
            let row = &x[r * p.cols..(r + 1) * p.cols];
            let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / p.cols as f64;
            let inv = 1.0 / (ms + p.eps as f64).sqrt();
            for c in 0..p.cols {
                let mut v = row[c] as f64 * inv;
                if let Some(g) = gamma {
                    v *= g[c] as f64;
                }
                y[r * p.cols + c] = v as f32;
            }
        }
    }
}

/// Elements per parallel task (whole rows, at least this many elements).
const TASK_ELEMS: usize = 1 << 13;

/// `x - x0`.
#[derive(Clone, Copy)]
struct Shifted(f32);
impl LaneFn for Shifted {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::F) -> S::F {
        s.sub(x, s.splat(self.0))
    }
}

/// `(x - hi) - lo`.
#[derive(Clone, Copy)]
struct Centred {
    hi: f32,
    lo: f32,
}
impl LaneFn for Centred {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::F) -> S::F {
        s.sub(s.sub(x, s.splat(self.hi)), s.splat(self.lo))
    }
}

#[derive(Clone, Copy)]
struct Identity;
impl LaneFn for Identity {
    #[inline(always)]
    fn apply<S: Simd>(self, _: S, x: S::F) -> S::F {
        x
    }
}

/// `a + b` as an exact pair `(hi, lo)` (Knuth's TwoSum).
fn two_sum(a: f32, b: f32) -> (f32, f32) {
    let hi = a + b;
    let bb = hi - a;
    (hi, (a - (hi - bb)) + (b - bb))
}

/// Rows `y = (x - mean) * inv [* gamma] [+ beta]`, one after another; with a residual `r`,
/// of `x + r` (each row's sums are written to its output row first, and normalised there).
struct LayerNormRows<'a> {
    cols: usize,
    eps: f32,
    x: &'a [f32],
    r: Option<&'a [f32]>,
    gamma: Option<&'a [f32]>,
    beta: Option<&'a [f32]>,
    y: &'a mut [f32],
}

/// One output row of LayerNorm: `t = ((x - hi) - lo) * inv`, then `t * g + b` as one fused
/// multiply-add (`t * g` or `t + b` when only one is given).
///
/// # Safety
/// `x`, `y` valid for `n` f32 (reading, writing), `g` and `b` for reading `n` f32 when the
/// const flags say they are used; `y` overlaps none of them, or is `x` itself (each vector is
/// loaded before its lanes are stored).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ln_out<S: Simd, const G: bool, const B: bool>(
    s: S,
    x: *const f32,
    g: *const f32,
    b: *const f32,
    y: *mut f32,
    n: usize,
    (hi, lo, inv): (f32, f32, f32),
) {
    let (vh, vl, vi) = (s.splat(hi), s.splat(lo), s.splat(inv));
    let l = S::LANES;
    let mut i = 0;
    while i < n {
        let m = l.min(n - i);
        // SAFETY: lanes i..i + m are inside every buffer in use (caller contract); a partial
        // vector reads and writes only its first m lanes.
        unsafe {
            let t = s.mul(s.sub(s.sub(load_n(s, x.add(i), m), vh), vl), vi);
            let v = match (G, B) {
                (true, true) => s.mul_add(t, load_n(s, g.add(i), m), load_n(s, b.add(i), m)),
                (true, false) => s.mul(t, load_n(s, g.add(i), m)),
                (false, true) => s.add(t, load_n(s, b.add(i), m)),
                (false, false) => t,
            };
            store_n(s, y.add(i), m, v);
        }
        i += l;
    }
}

impl Kernel for LayerNormRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let n = self.cols;
        let nil = std::ptr::null();
        let g = self.gamma.map_or(nil, |g| g.as_ptr());
        let b = self.beta.map_or(nil, |b| b.as_ptr());
        for (i, (row, out)) in self
            .x
            .chunks_exact(n)
            .zip(self.y.chunks_exact_mut(n))
            .enumerate()
        {
            let y = out.as_mut_ptr();
            let x = match self.r {
                Some(r) => {
                    let r = &r[i * n..(i + 1) * n];
                    // SAFETY: `row`, `r` and `out` hold n f32; `out` is an exclusive borrow.
                    unsafe { zip_op(s, BinaryOp::Add, row.as_ptr(), r.as_ptr(), y, n) };
                    y.cast_const()
                }
                None => row.as_ptr(),
            };
            // SAFETY: `x` points at n f32 (`row`, or `out` holding the sums).
            let x0 = unsafe { *x };
            // SAFETY: as above.
            let shifted_mean = unsafe { simd::sum_map(s, Shifted(x0), x, n) } / n as f32;
            let (hi, lo) = two_sum(x0, shifted_mean);
            // SAFETY: as above.
            let var = unsafe { simd::sum_squares_map(s, Centred { hi, lo }, x, n) } / n as f32;
            let inv = 1.0 / (var + self.eps).sqrt();
            let k = (hi, lo, inv);
            // SAFETY: `x` and `out` hold n f32 and either do not overlap (shared vs exclusive
            // borrow) or are the same row; gamma and beta were checked to hold n f32 by the
            // entry point.
            unsafe {
                match (self.gamma.is_some(), self.beta.is_some()) {
                    (true, true) => ln_out::<S, true, true>(s, x, g, b, y, n, k),
                    (true, false) => ln_out::<S, true, false>(s, x, g, b, y, n, k),
                    (false, true) => ln_out::<S, false, true>(s, x, g, b, y, n, k),
                    (false, false) => ln_out::<S, false, false>(s, x, g, b, y, n, k),
                }
            }
        }
    }
    fn scalar(self) {
        let rows = self.y.len() / self.cols;
        let p = NormParams {
            rows,
            cols: self.cols,
            eps: self.eps,
        };
        match self.r {
            Some(r) => reference::add_layer_norm(&p, self.x, r, self.gamma, self.beta, self.y),
            None => reference::layer_norm(&p, self.x, self.gamma, self.beta, self.y),
        }
    }
}

pub fn layer_norm(
    cx: &Cx,
    p: &NormParams,
    x: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    y: &mut [f32],
) {
    layer_norm_rows(cx, p, [x], gamma, beta, y);
}

/// `layer_norm(x + r)`, bit-identical to [`super::elementwise::binary`] add followed by
/// [`layer_norm`] on every ISA: each row's sums are written to its output row, then normalised
/// in place by the same code.
pub fn add_layer_norm(
    cx: &Cx,
    p: &NormParams,
    x: &[f32],
    r: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    y: &mut [f32],
) {
    layer_norm_rows(cx, p, [x, r], gamma, beta, y);
}

/// [`layer_norm`] of `xs[0]`, or with `xs = [x, r]` of `x + r`.
fn layer_norm_rows<const N: usize>(
    cx: &Cx,
    p: &NormParams,
    xs: [&[f32]; N],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    y: &mut [f32],
) {
    let cols = p.cols.max(1);
    let gamma = gamma.map(|g| &g[..cols]);
    let beta = beta.map(|b| &b[..cols]);
    let y = &mut y[..p.rows * p.cols];
    simd::par_rows_of(cx, cols, TASK_ELEMS, xs, y, |xs, y| {
        simd::dispatch(
            cx.isa,
            LayerNormRows {
                cols,
                eps: p.eps,
                x: xs[0],
                r: xs.get(1).copied(),
                gamma,
                beta,
                y,
            },
        )
    });
}

/// Rows `y = x * inv [* gamma]`, `inv = 1 / sqrt(mean(x^2) + eps)`.
struct RmsNormRows<'a> {
    cols: usize,
    eps: f32,
    x: &'a [f32],
    gamma: Option<&'a [f32]>,
    y: &'a mut [f32],
}

impl Kernel for RmsNormRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let n = self.cols;
        let l = S::LANES;
        for (row, out) in self.x.chunks_exact(n).zip(self.y.chunks_exact_mut(n)) {
            let (x, y) = (row.as_ptr(), out.as_mut_ptr());
            // SAFETY: `row` holds n f32.
            let ms = unsafe { simd::sum_squares_map(s, Identity, x, n) } / n as f32;
            let vi = s.splat(1.0 / (ms + self.eps).sqrt());
            let mut i = 0;
            while i < n {
                let m = l.min(n - i);
                // SAFETY: lanes i..i + m are inside `row`, `out` and gamma (checked to hold
                // n f32 by the entry point); partial vectors touch only their m lanes.
                unsafe {
                    let mut v = s.mul(load_n(s, x.add(i), m), vi);
                    if let Some(g) = self.gamma {
                        v = s.mul(v, load_n(s, g.as_ptr().add(i), m));
                    }
                    store_n(s, y.add(i), m, v);
                }
                i += l;
            }
        }
    }
    fn scalar(self) {
        let rows = self.y.len() / self.cols;
        let p = NormParams {
            rows,
            cols: self.cols,
            eps: self.eps,
        };
        reference::rms_norm(&p, self.x, self.gamma, self.y);
    }
}

pub fn rms_norm(cx: &Cx, p: &NormParams, x: &[f32], gamma: Option<&[f32]>, y: &mut [f32]) {
    let cols = p.cols.max(1);
    let gamma = gamma.map(|g| &g[..cols]);
    let y = &mut y[..p.rows * p.cols];
    simd::par_rows(cx, cols, TASK_ELEMS, x, y, |x, y| {
        let eps = p.eps;
        simd::dispatch(
            cx.isa,
            RmsNormRows {
                cols,
                eps,
                x,
                gamma,
                y,
            },
        )
    });
}

#[cfg(test)]
mod tests {
    use super::super::simd::testing::*;
    use super::*;
    use proptest::prelude::*;

    /// Rounding steps per element after the sums: `x - m_hi`, `- m_lo`, `* inv`, the fused
    /// `* g + b` (counted twice to cover `t * g` then `+ b` in the bound's `|t|` term), and
    /// the f32 `var + eps`, sqrt and reciprocal that scale every element.
    const LN_ELEMENT_ROUNDINGS: f64 = 8.0;
    /// RMSNorm after the sum of squares: `ms + eps`, sqrt, reciprocal, `x * inv`, `* g`,
    /// and the reference's own rounding to f32.
    const RMS_ROUNDINGS: f64 = 6.0;

    /// Allowed LayerNorm error at every element of one row, from the f64 statistics:
    /// - the mean is off by at most `Em = gamma_k mean|x - x0| + 2u |m - x0|` (the sum of
    ///   the shifted values over the longest accumulation chain `k`, its division, and the
    ///   rounding of each `x - x0`), which moves every output by `|g| inv Em`;
    /// - the variance is a sum of squares with relative error `gamma_k` (plus the second
    ///   order `(inv Em)^2` from centring on the inexact mean), i.e. `gamma_k |t|` on `inv`;
    /// - a few roundings per element relative to `|t| = |x - m| inv`, and the final
    ///   rounding of both this result and the reference's (`2u |y|`).
    fn ln_bounds(row: &[f32], eps: f32, g: Option<&[f32]>, want: &[f32]) -> Vec<f64> {
        let n = row.len();
        let m = row.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = row.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        let x0 = row[0] as f64;
        let k = sum_chain(n) + 1;
        let em = gamma(k) * row.iter().map(|&v| (v as f64 - x0).abs()).sum::<f64>() / n as f64
            + 2.0 * U * (m - x0).abs();
        (0..n)
            .map(|i| {
                let gi = g.map_or(1.0, |g| g[i].abs() as f64);
                let t = (row[i] as f64 - m).abs() * inv;
                gi * (inv * em + (gamma(k) + LN_ELEMENT_ROUNDINGS * U + (inv * em).powi(2)) * t)
                    + 2.0 * U * (want[i] as f64).abs()
                    + 1e-38
            })
            .collect()
    }

    fn rms_bound(n: usize, want: f32) -> f64 {
        (gamma(sum_chain(n) + 1) / 2.0 + RMS_ROUNDINGS * U) * (want as f64).abs() + 1e-38
    }

    /// Rows `offset + scale * U(-1, 1)`: offsets up to 1e4 times the spread test the
    /// shifted mean.
    fn rows_strategy() -> impl Strategy<Value = (usize, usize, Vec<f32>, Vec<f32>, Vec<f32>)> {
        (
            1usize..5,
            1usize..300,
            -100.0f32..100.0,
            0.01f32..10.0,
            any::<bool>(),
        )
            .prop_flat_map(|(rows, cols, offset, scale, centred)| {
                let off = if centred { 0.0 } else { offset };
                (
                    Just(rows),
                    Just(cols),
                    proptest::collection::vec(
                        (-1.0f32..1.0).prop_map(move |u| off + scale * u),
                        rows * cols,
                    ),
                    proptest::collection::vec(-2.0f32..2.0, cols),
                    proptest::collection::vec(-2.0f32..2.0, cols),
                )
            })
    }

    fn check_layer_norm(cx: &Cx, p: &NormParams, x: &[f32], g: Option<&[f32]>, b: Option<&[f32]>) {
        let mut want = vec![0f32; x.len()];
        reference::layer_norm(p, x, g, b, &mut want);
        let mut y = vec![0f32; x.len()];
        layer_norm(cx, p, x, g, b, &mut y);
        for r in 0..p.rows {
            let s = r * p.cols..(r + 1) * p.cols;
            let tol = ln_bounds(&x[s.clone()], p.eps, g, &want[s.clone()]);
            for (c, t) in tol.iter().enumerate() {
                let (got, w) = (y[s.start + c], want[s.start + c]);
                assert!(
                    (got as f64 - w as f64).abs() <= *t,
                    "{} layer_norm row {r} col {c}: {got} vs {w} (tol {t:e})",
                    name(cx)
                );
            }
        }
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn layer_norm_matches_reference(
            (rows, cols, x, g, b) in rows_strategy(),
            which in 0usize..4,
            big_eps in any::<bool>(),
        ) {
            let p = NormParams { rows, cols, eps: if big_eps { 0.1 } else { 1e-5 } };
            let g = (which & 1 != 0).then_some(&g[..]);
            let b = (which & 2 != 0).then_some(&b[..]);
            for_each_cx(|cx| check_layer_norm(cx, &p, &x, g, b));
        }

        /// The fused op is `binary` add then `layer_norm`, to the bit, on every ISA and
        /// thread count (what lets the models use it without changing any output).
        #[test]
        fn add_layer_norm_is_add_then_layer_norm(
            (rows, cols, x, g, b) in rows_strategy(),
            shift in -50.0f32..50.0,
            which in 0usize..4,
        ) {
            let p = NormParams { rows, cols, eps: 1e-5 };
            let r: Vec<f32> = x.iter().rev().map(|v| v * 0.5 + shift).collect();
            let g = (which & 1 != 0).then_some(&g[..]);
            let b = (which & 2 != 0).then_some(&b[..]);
            let add = crate::ops::BinaryParams { op: BinaryOp::Add, n: x.len(), b_len: x.len() };
            for_each_cx(|cx| {
                let mut sum = vec![0f32; x.len()];
                super::super::elementwise::binary(cx, &add, &x, &r, &mut sum);
                let mut want = vec![0f32; x.len()];
                layer_norm(cx, &p, &sum, g, b, &mut want);
                let mut y = vec![f32::NAN; x.len()];
                add_layer_norm(cx, &p, &x, &r, g, b, &mut y);
                let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&y), bits(&want), "{}", name(cx));
            });
        }

        #[test]
        fn rms_norm_matches_reference(
            (rows, cols, x, g, _b) in rows_strategy(),
            with_gamma in any::<bool>(),
        ) {
            let p = NormParams { rows, cols, eps: 1e-6 };
            let g = with_gamma.then_some(&g[..]);
            let mut want = vec![0f32; x.len()];
            reference::rms_norm(&p, &x, g, &mut want);
            for_each_cx(|cx| {
                let mut y = vec![0f32; x.len()];
                rms_norm(cx, &p, &x, g, &mut y);
                for i in 0..x.len() {
                    let t = rms_bound(cols, want[i]);
                    assert!((y[i] as f64 - want[i] as f64).abs() <= t,
                        "{} rms_norm [{i}]: {} vs {} (tol {t:e})", name(cx), y[i], want[i]);
                }
            });
        }
    }

    /// A constant row has zero variance: LayerNorm gives exactly beta (or 0).
    #[test]
    fn constant_rows_give_beta() {
        let p = NormParams {
            rows: 2,
            cols: 37,
            eps: 1e-5,
        };
        let x: Vec<f32> = (0..74).map(|i| if i < 37 { 3.25 } else { -1e6 }).collect();
        let b: Vec<f32> = (0..37).map(|i| i as f32 * 0.5).collect();
        for_each_cx(|cx| {
            let mut y = vec![1f32; 74];
            layer_norm(cx, &p, &x, None, Some(&b), &mut y);
            for (i, v) in y.iter().enumerate() {
                assert_eq!(*v, b[i % 37], "{}", name(cx));
            }
        });
    }

    /// NaN in a row makes that row NaN and leaves the others alone.
    #[test]
    fn nan_stays_in_its_row() {
        let p = NormParams {
            rows: 2,
            cols: 20,
            eps: 1e-5,
        };
        let mut x: Vec<f32> = (0..40).map(|i| i as f32).collect();
        x[25] = f32::NAN;
        for_each_cx(|cx| {
            let mut y = vec![0f32; 40];
            layer_norm(cx, &p, &x, None, None, &mut y);
            assert!(y[..20].iter().all(|v| v.is_finite()) && y[20..].iter().all(|v| v.is_nan()));
            rms_norm(cx, &p, &x, None, &mut y);
            assert!(y[..20].iter().all(|v| v.is_finite()) && y[20..].iter().all(|v| v.is_nan()));
        });
    }

    /// Kimodo-like width, enough rows for several parallel tasks.
    #[test]
    fn many_rows_split_over_threads() {
        let p = NormParams {
            rows: 40,
            cols: 1000,
            eps: 1e-5,
        };
        let x: Vec<f32> = (0..40_000)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.01 + 5.0)
            .collect();
        let g: Vec<f32> = (0..1000).map(|i| 0.5 + (i % 7) as f32 * 0.1).collect();
        for_each_cx(|cx| check_layer_norm(cx, &p, &x, Some(&g), Some(&g)));
        same_across_threads(|cx| {
            let mut y = vec![0f32; 40_000];
            layer_norm(cx, &p, &x, Some(&g), None, &mut y);
            let mut z = vec![0f32; 40_000];
            rms_norm(cx, &p, &x, Some(&g), &mut z);
            y.extend(z);
            y
        });
    }
}
