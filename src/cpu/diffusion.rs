//! The elementwise diffusion-sampler ops: one DDIM (eta 0) update and the classifier-free
//! guidance combination, with upstream's f32 operation order kept.
//!
//! The vector paths are bit-identical to the reference on every ISA: the same IEEE-rounded
//! multiplies, subtractions, additions and the (correctly rounded) division, in the same
//! order, never contracted into fused multiply-adds.

use super::Cx;
use super::simd::{self, Kernel, Simd, load_n, store_n};
use crate::ops::{CfgParams, DdimParams};

pub mod reference {
    use crate::ops::{CfgParams, DdimParams};

    /// `kimodo/model/diffusion.py#L113-133`: `eps = (sqrt_recip*x_t - x0) / sqrt_recipm1`,
    /// `x_prev = x0*sqrt_prev + sqrt_1m_prev*eps`, every step rounded to f32.
    pub fn ddim(p: &DdimParams, x_t: &[f32], x0: &[f32], coef: &[f32], out: &mut [f32]) {
        let (sr, srm1, sp, s1mp) = (coef[0], coef[1], coef[2], coef[3]);
        for i in 0..p.n {
            let eps = (sr * x_t[i] - x0[i]) / srm1;
            out[i] = x0[i] * sp + s1mp * eps;
        }
    }

    /// `kimodo/model/cfg.py#L94-129`, left to right in f32.
    pub fn cfg(p: &CfgParams, rows: &[f32], out: &mut [f32]) {
        let n = p.n;
        if p.rows == 2 {
            let (c, u) = (&rows[..n], &rows[n..2 * n]);
            for i in 0..n {
                out[i] = u[i] + p.w_text * (c[i] - u[i]);
            }
        } else {
            let (t, c, u) = (&rows[..n], &rows[n..2 * n], &rows[2 * n..3 * n]);
            for i in 0..n {
                out[i] = u[i] + p.w_text * (t[i] - u[i]) + p.w_constraint * (c[i] - u[i]);
            }
        }
    }
}

/// Elements per parallel task (64 KiB of output).
const CHUNK: usize = 1 << 14;

struct Ddim<'a> {
    x_t: &'a [f32],
    x0: &'a [f32],
    coef: [f32; 4],
    out: &'a mut [f32],
}

impl Kernel for Ddim<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let n = self.out.len().min(self.x_t.len()).min(self.x0.len());
        let [sr, srm1, sp, s1mp] = self.coef.map(|c| s.splat(c));
        let (xt, x0, o) = (self.x_t.as_ptr(), self.x0.as_ptr(), self.out.as_mut_ptr());
        let l = S::LANES;
        let mut i = 0;
        while i < n {
            let m = l.min(n - i);
            // SAFETY: lanes i..i + m are inside all three slices; partial vectors touch
            // only their m lanes.
            unsafe {
                let (a, b) = (load_n(s, xt.add(i), m), load_n(s, x0.add(i), m));
                let eps = s.div(s.sub(s.mul(sr, a), b), srm1);
                store_n(s, o.add(i), m, s.add(s.mul(b, sp), s.mul(s1mp, eps)));
            }
            i += l;
        }
    }
    fn scalar(self) {
        let p = DdimParams { n: self.out.len() };
        reference::ddim(&p, self.x_t, self.x0, &self.coef, self.out);
    }
}

pub fn ddim(cx: &Cx, p: &DdimParams, x_t: &[f32], x0: &[f32], coef: &[f32], out: &mut [f32]) {
    let coef = [coef[0], coef[1], coef[2], coef[3]];
    cx.pool.par_chunks_mut(&mut out[..p.n], CHUNK, |i, o| {
        let r = i * CHUNK..i * CHUNK + o.len();
        simd::dispatch(
            cx.isa,
            Ddim {
                x_t: &x_t[r.clone()],
                x0: &x0[r],
                coef,
                out: o,
            },
        );
    });
}

/// Guidance over one range of the rows: `rows[k]` is the same range of row `k`.
struct Cfg<'a> {
    rows: [&'a [f32]; 3],
    three: bool,
    w_text: f32,
    w_constraint: f32,
    out: &'a mut [f32],
}

impl Kernel for Cfg<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let n = self.out.len();
        let [r0, r1, r2] = self.rows.map(|r| r.as_ptr());
        let (wt, wc) = (s.splat(self.w_text), s.splat(self.w_constraint));
        let o = self.out.as_mut_ptr();
        let l = S::LANES;
        let mut i = 0;
        while i < n {
            let m = l.min(n - i);
            // SAFETY: lanes i..i + m are inside `out` and every row slice in use (each
            // holds n f32); partial vectors touch only their m lanes.
            unsafe {
                let v = if self.three {
                    let (t, c, u) = (
                        load_n(s, r0.add(i), m),
                        load_n(s, r1.add(i), m),
                        load_n(s, r2.add(i), m),
                    );
                    let a = s.add(u, s.mul(wt, s.sub(t, u)));
                    s.add(a, s.mul(wc, s.sub(c, u)))
                } else {
                    let (c, u) = (load_n(s, r0.add(i), m), load_n(s, r1.add(i), m));
                    s.add(u, s.mul(wt, s.sub(c, u)))
                };
                store_n(s, o.add(i), m, v);
            }
            i += l;
        }
    }
    fn scalar(self) {
        let n = self.out.len();
        let k = if self.three { 3 } else { 2 };
        let p = CfgParams {
            n,
            rows: k,
            w_text: self.w_text,
            w_constraint: self.w_constraint,
        };
        let packed: Vec<f32> = self.rows[..k].concat();
        reference::cfg(&p, &packed, self.out);
    }
}

pub fn cfg(cx: &Cx, p: &CfgParams, rows: &[f32], out: &mut [f32]) {
    let n = p.n;
    let three = p.rows == 3;
    cx.pool.par_chunks_mut(&mut out[..n], CHUNK, |i, o| {
        let r = |k: usize| &rows[k * n + i * CHUNK..][..o.len()];
        let (r0, r1) = (r(0), r(1));
        let r2 = if three { r(2) } else { r1 };
        simd::dispatch(
            cx.isa,
            Cfg {
                rows: [r0, r1, r2],
                three,
                w_text: p.w_text,
                w_constraint: p.w_constraint,
                out: o,
            },
        );
    });
}

#[cfg(test)]
mod tests {
    use super::super::simd::testing::*;
    use super::*;
    use proptest::prelude::*;

    fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(same_bits(*g, *w), "{what}: [{i}] = {g:e}, want {w:e}");
        }
    }

    /// `ddim` on every ISA and thread count gives the reference's bits.
    fn check_ddim(p: &DdimParams, xt: &[f32], x0: &[f32], c: &[f32; 4]) {
        let mut want = vec![0f32; p.n];
        reference::ddim(p, xt, x0, c, &mut want);
        for_each_cx(|cx| {
            let mut y = vec![0f32; p.n];
            ddim(cx, p, xt, x0, c, &mut y);
            assert_bits(&name(cx), &y, &want);
        });
    }

    /// `cfg` on every ISA and thread count gives the reference's bits.
    fn check_cfg(p: &CfgParams, data: &[f32]) {
        let mut want = vec![0f32; p.n];
        reference::cfg(p, data, &mut want);
        for_each_cx(|cx| {
            let mut y = vec![0f32; p.n];
            cfg(cx, p, data, &mut y);
            assert_bits(&name(cx), &y, &want);
        });
    }

    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            8 => -10.0f32..10.0,
            1 => -1e30f32..1e30,
            1 => proptest::sample::select(vec![0.0, -0.0, f32::NAN, f32::INFINITY, 1e-40]),
        ]
    }

    /// DDIM coefficients of a real schedule step, and arbitrary ones.
    fn coef() -> impl Strategy<Value = [f32; 4]> {
        prop_oneof![
            Just([1.0513, 0.3265, 0.9806, 0.1961]),
            [0.5f32..20.0, 0.01f32..20.0, 0.0f32..1.0, 0.0f32..1.0],
        ]
    }

    proptest! {
        #![proptest_config(config())]

        /// Exact equality (bits; NaN = NaN): the same rounded operations in the same order.
        #[test]
        fn ddim_is_bit_identical(
            (xt, x0) in (1usize..300).prop_flat_map(|n| (
                proptest::collection::vec(value(), n),
                proptest::collection::vec(value(), n),
            )),
            c in coef(),
        ) {
            check_ddim(&DdimParams { n: xt.len() }, &xt, &x0, &c);
        }

        #[test]
        fn cfg_is_bit_identical(
            (n, rows, data) in (1usize..300, 2usize..4)
                .prop_flat_map(|(n, k)| (Just(n), Just(k), proptest::collection::vec(value(), n * k))),
            w_text in -2.0f32..8.0,
            w_constraint in -2.0f32..8.0,
        ) {
            check_cfg(&CfgParams { n, rows, w_text, w_constraint }, &data);
        }
    }

    /// Kimodo-sized rows (several parallel chunks, a ragged last one).
    #[test]
    fn long_rows_cross_chunks() {
        let n = 3 * CHUNK + 5;
        let data: Vec<f32> = (0..3 * n)
            .map(|i| ((i * 7919) % 1999) as f32 * 0.003 - 3.0)
            .collect();
        for rows in [2, 3] {
            let p = CfgParams {
                n,
                rows,
                w_text: 2.5,
                w_constraint: 1.5,
            };
            check_cfg(&p, &data);
        }
        let p = DdimParams { n };
        let c = [1.0513, 0.3265, 0.9806, 0.1961];
        check_ddim(&p, &data[..n], &data[n..2 * n], &c);
    }
}
