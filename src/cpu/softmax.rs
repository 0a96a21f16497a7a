//! Row softmax of `scale * x` over the last axis.
//!
//! Three passes per row, each over data still in L1/L2: the extreme `x*` of `x` that
//! maximises `scale * x`; then `e = exp(scale * x - max)` stored to the output while summing
//! with four vector accumulators; then the output times `1 / sum`. Rows are split over
//! threads, never a row.
//!
//! The maximum `scale * x*` is kept as an exact two-term sum `m_hi + m_lo`, and the exponent
//! is `fma(x, scale, -m_hi) - m_lo`: exactly 0 at the maximum and correctly signed (never
//! positive) elsewhere, with a relative error of two roundings. A single `fma(x, scale, -m)`
//! with a rounded `m` would instead leave the maximum at the residual `scale x* - m`, up to
//! half an ulp of `m`, which overflows `exp` once the logits are large.

use super::Cx;
use super::simd::{self, Kernel, Simd, load_n, store_n};
use crate::ops::SoftmaxParams;

pub mod reference {
    use crate::ops::SoftmaxParams;

    pub fn softmax(p: &SoftmaxParams, x: &[f32], y: &mut [f32]) {
        for r in 0..p.rows {
            let row = &x[r * p.cols..(r + 1) * p.cols];
            let m = row
                .iter()
                .map(|&v| v as f64 * p.scale as f64)
                .fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row
                .iter()
                .map(|&v| (v as f64 * p.scale as f64 - m).exp())
                .collect();
            let s: f64 = e.iter().sum();
            for (c, v) in e.iter().enumerate() {
                y[r * p.cols + c] = (v / s) as f32;
            }
        }
    }
}

/// Elements per parallel task (whole rows, at least this many elements).
const TASK_ELEMS: usize = 1 << 13;

struct SoftmaxRows<'a> {
    cols: usize,
    scale: f32,
    x: &'a [f32],
    y: &'a mut [f32],
}

impl SoftmaxRows<'_> {
    /// `max(sign * x)` over one row of `n` f32 at `x` (`sign` is +-1, so the product is
    /// exact; NaN handling: see `Simd::max`, and a row with a NaN ends up all NaN through
    /// the sum either way).
    ///
    /// # Safety
    /// `x` must be valid for reading `n` f32.
    #[inline(always)]
    unsafe fn row_max<S: Simd>(s: S, x: *const f32, n: usize, sign: f32) -> f32 {
        let l = S::LANES;
        let k = s.splat(sign);
        let ninf = s.splat(f32::NEG_INFINITY);
        let (mut a0, mut a1, mut a2, mut a3) = (ninf, ninf, ninf, ninf);
        let mut i = 0;
        while i + 4 * l <= n {
            // SAFETY: lanes i..i + 4l are inside the row.
            unsafe {
                a0 = s.max(a0, s.mul(k, s.load(x.add(i))));
                a1 = s.max(a1, s.mul(k, s.load(x.add(i + l))));
                a2 = s.max(a2, s.mul(k, s.load(x.add(i + 2 * l))));
                a3 = s.max(a3, s.mul(k, s.load(x.add(i + 3 * l))));
            }
            i += 4 * l;
        }
        while i < n {
            let m = l.min(n - i);
            // SAFETY: lanes i..i + m are inside the row.
            let v = s.mul(k, unsafe { load_n(s, x.add(i), m) });
            let v = if m == l {
                v
            } else {
                s.select(s.first_mask(m), v, ninf)
            };
            a1 = s.max(a1, v);
            i += l;
        }
        s.reduce_max(s.max(s.max(a0, a1), s.max(a2, a3)))
    }

    /// `y = exp((x * scale - m_hi) - m_lo)`, returning the sum of `y`.
    ///
    /// # Safety
    /// `x` valid for reading, `y` for writing `n` f32, not overlapping.
    #[inline(always)]
    unsafe fn row_exp<S: Simd>(
        s: S,
        x: *const f32,
        y: *mut f32,
        n: usize,
        scale: f32,
        (m_hi, m_lo): (f32, f32),
    ) -> f32 {
        let l = S::LANES;
        let k = s.splat(scale);
        let (nm, lo) = (s.splat(-m_hi), s.splat(m_lo));
        let z = s.splat(0.0);
        let (mut a0, mut a1, mut a2, mut a3) = (z, z, z, z);
        let mut i = 0;
        while i + 4 * l <= n {
            // SAFETY: lanes i..i + 4l are inside both rows.
            unsafe {
                let e0 = simd::exp_nonpositive(s, s.sub(s.mul_add(s.load(x.add(i)), k, nm), lo));
                let e1 =
                    simd::exp_nonpositive(s, s.sub(s.mul_add(s.load(x.add(i + l)), k, nm), lo));
                let e2 =
                    simd::exp_nonpositive(s, s.sub(s.mul_add(s.load(x.add(i + 2 * l)), k, nm), lo));
                let e3 =
                    simd::exp_nonpositive(s, s.sub(s.mul_add(s.load(x.add(i + 3 * l)), k, nm), lo));
                s.store(y.add(i), e0);
                s.store(y.add(i + l), e1);
                s.store(y.add(i + 2 * l), e2);
                s.store(y.add(i + 3 * l), e3);
                a0 = s.add(a0, e0);
                a1 = s.add(a1, e1);
                a2 = s.add(a2, e2);
                a3 = s.add(a3, e3);
            }
            i += 4 * l;
        }
        while i < n {
            let m = l.min(n - i);
            // SAFETY: lanes i..i + m are inside both rows.
            unsafe {
                let e =
                    simd::exp_nonpositive(s, s.sub(s.mul_add(load_n(s, x.add(i), m), k, nm), lo));
                store_n(s, y.add(i), m, e);
                let e = if m == l {
                    e
                } else {
                    s.select(s.first_mask(m), e, z)
                };
                a0 = s.add(a0, e);
            }
            i += l;
        }
        s.reduce_add(s.add(s.add(a0, a1), s.add(a2, a3)))
    }
}

impl Kernel for SoftmaxRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let n = self.cols;
        let l = S::LANES;
        for (row, out) in self.x.chunks_exact(n).zip(self.y.chunks_exact_mut(n)) {
            let (x, y) = (row.as_ptr(), out.as_mut_ptr());
            // SAFETY: `row` and `out` hold n f32 each and do not overlap (shared vs
            // exclusive borrow).
            unsafe {
                let sign = if self.scale < 0.0 { -1.0 } else { 1.0 };
                let x_star = sign * Self::row_max(s, x, n, sign);
                let m_hi = self.scale * x_star;
                let m_lo = self.scale.mul_add(x_star, -m_hi);
                let sum = Self::row_exp(s, x, y, n, self.scale, (m_hi, m_lo));
                let r = s.splat(1.0 / sum);
                let mut i = 0;
                while i < n {
                    let m = l.min(n - i);
                    store_n(s, y.add(i), m, s.mul(load_n(s, y.add(i), m), r));
                    i += l;
                }
            }
        }
    }
    fn scalar(self) {
        let p = SoftmaxParams {
            rows: self.y.len() / self.cols,
            cols: self.cols,
            scale: self.scale,
        };
        reference::softmax(&p, self.x, self.y);
    }
}

pub fn softmax(cx: &Cx, p: &SoftmaxParams, x: &[f32], y: &mut [f32]) {
    let cols = p.cols.max(1);
    let y = &mut y[..p.rows * p.cols];
    simd::par_rows(cx, cols, TASK_ELEMS, x, y, |x, y| {
        let scale = p.scale;
        simd::dispatch(cx.isa, SoftmaxRows { cols, scale, x, y })
    });
}

#[cfg(test)]
mod tests {
    use super::super::simd::testing::*;
    use super::*;
    use proptest::prelude::*;

    /// Relative error of one output, beyond the sum's `gamma_k`: exp within 1 ulp (2u),
    /// the reciprocal of the sum and the product with it (2u), and the reference's own
    /// rounding to f32 (u).
    const SOFTMAX_ROUNDINGS: f64 = 5.0;
    /// Outputs in the subnormal range keep only absolute accuracy: two subnormal steps.
    const SOFTMAX_ABS: f64 = 2.0 * 1.401_298_5e-45;

    /// The allowed error of each output of one row: the two roundings of the exponent
    /// argument `t = scale * x - max` (`2u |t|` relative on the exponential),
    /// the sum of the exponentials over the longest accumulation chain, and the roundings
    /// above.
    fn bounds(row: &[f32], scale: f32, want: &[f32]) -> Vec<f64> {
        let m = row
            .iter()
            .map(|&v| v as f64 * scale as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let k = sum_chain(row.len());
        row.iter()
            .zip(want)
            .map(|(&v, &w)| {
                let t = (v as f64 * scale as f64 - m).abs();
                if w == 0.0 {
                    // exp(-inf) or an underflow: only the absolute term applies.
                    return SOFTMAX_ABS;
                }
                (w as f64) * (2.0 * U * t + gamma(k) + SOFTMAX_ROUNDINGS * U) + SOFTMAX_ABS
            })
            .collect()
    }

    fn check(cx: &Cx, p: &SoftmaxParams, x: &[f32]) {
        let mut want = vec![0f32; x.len()];
        reference::softmax(p, x, &mut want);
        let mut y = vec![0f32; x.len()];
        softmax(cx, p, x, &mut y);
        for r in 0..p.rows {
            let s = r * p.cols..(r + 1) * p.cols;
            let tol = bounds(&x[s.clone()], p.scale, &want[s.clone()]);
            for (c, t) in tol.iter().enumerate() {
                let (g, w) = (y[s.start + c], want[s.start + c]);
                let ok = if w.is_nan() {
                    g.is_nan()
                } else {
                    (g as f64 - w as f64).abs() <= *t
                };
                assert!(
                    ok,
                    "{} softmax row {r} col {c}: {g:e} vs {w:e} (tol {t:e})",
                    name(cx)
                );
            }
        }
    }

    fn logit() -> impl Strategy<Value = f32> {
        prop_oneof![
            10 => -30.0f32..30.0,
            1 => Just(f32::NEG_INFINITY),
            1 => -1e30f32..1e30,
        ]
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn softmax_matches_reference(
            (rows, cols, x) in (1usize..5, 1usize..300).prop_flat_map(|(r, c)| {
                (Just(r), Just(c), proptest::collection::vec(logit(), r * c))
            }),
            scale in prop_oneof![Just(1.0f32), 0.01f32..2.0, -2.0f32..-0.01],
        ) {
            let p = SoftmaxParams { rows, cols, scale };
            for_each_cx(|cx| check(cx, &p, &x));
        }
    }

    /// -inf entries get exactly 0, a row of only -inf gives NaN (as the reference and
    /// PyTorch), huge finite logits stay finite, NaN poisons only its own row.
    #[test]
    fn special_rows() {
        let ninf = f32::NEG_INFINITY;
        let rows: Vec<Vec<f32>> = vec![
            vec![0.0, ninf, 1.0, ninf, 2.0, 3.0, ninf, 4.0, 5.0, ninf, 6.0],
            vec![ninf; 11],
            vec![
                3e38, -3e38, 1e38, 3e38, 0.0, -1e38, 2e38, 3e38, 1.0, -1.0, 3.4e38,
            ],
            vec![1.0, 2.0, f32::NAN, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
            vec![-5.0; 11],
        ];
        let x: Vec<f32> = rows.concat();
        let p = SoftmaxParams {
            rows: 5,
            cols: 11,
            scale: 1.0,
        };
        for_each_cx(|cx| {
            check(cx, &p, &x);
            let mut y = vec![0f32; x.len()];
            softmax(cx, &p, &x, &mut y);
            for c in [1, 3, 6, 9] {
                assert_eq!(y[c], 0.0, "{}", name(cx));
            }
            assert!(y[11..22].iter().all(|v| v.is_nan()));
            assert!(y[22..33].iter().all(|v| v.is_finite()));
            assert!(y[33..44].iter().all(|v| v.is_nan()));
            assert!(y[44..].iter().all(|v| (*v - 1.0 / 11.0).abs() < 1e-7));
        });
    }

    /// Attention-like rows (254 keys) and enough of them for several parallel tasks.
    #[test]
    fn many_rows_split_over_threads() {
        let p = SoftmaxParams {
            rows: 64,
            cols: 254,
            scale: 0.125,
        };
        let x: Vec<f32> = (0..64 * 254)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.1 - 50.0)
            .collect();
        for_each_cx(|cx| check(cx, &p, &x));
        same_across_threads(|cx| {
            let mut y = vec![0f32; x.len()];
            softmax(cx, &p, &x, &mut y);
            y
        });
    }
}
