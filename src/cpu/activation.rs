//! Elementwise activations (ReLU, LeakyReLU, exact and tanh GELU, SiLU) and SwiGLU.
//!
//! The vector paths evaluate the math of [`super::simd`] (exp, GELU through a tail-accurate
//! normal CDF, tanh GELU and SiLU through one exponential each); ReLU and LeakyReLU are
//! exact. `apply_inplace` is also the fused
//! epilogue of the GEMM, so it runs on the caller's thread without touching the pool.

use super::simd::{self, Kernel, LaneFn, Simd};
use super::{Cx, Isa};
use crate::ops::Activation;

/// Scalar references, written for clarity.
pub mod reference {
    use crate::ops::Activation;

    /// `erf` of |x| < 2.5 by its Maclaurin series, accurate to ~1e-16.
    fn erf_series(x: f64) -> f64 {
        // erf x = 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)).
        let mut sum = 0.0;
        let mut term = x;
        let x2 = x * x;
        let mut n = 0.0;
        loop {
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() < 1e-17 * sum.abs().max(1e-300) {
                break;
            }
            n += 1.0;
            term *= -x2 / n;
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    }

    /// `erfc a` for a >= 2.5 by its continued fraction (Lentz), accurate relative to erfc
    /// itself far into the tail.
    fn erfc_cf(a: f64) -> f64 {
        if a.is_infinite() {
            return 0.0;
        }
        let mut f = a;
        let tiny = 1e-300;
        let mut c = f;
        let mut d = 0.0;
        for i in 1..200 {
            let an = i as f64 / 2.0;
            d = a + an * d;
            d = if d.abs() < tiny { tiny } else { d };
            c = a + an / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        (-a * a).exp() / (f * std::f64::consts::PI.sqrt())
    }

    /// `erf` in f64 (Abramowitz-Stegun 7.1.26 is not accurate enough for an oracle, so this
    /// uses the series / continued fraction split, accurate to ~1e-15); `erf(+-inf) = +-1`.
    pub fn erf(x: f64) -> f64 {
        if x.abs() < 2.5 {
            erf_series(x)
        } else if x.is_nan() {
            x
        } else {
            (1.0 - erfc_cf(x.abs())).copysign(x)
        }
    }

    /// `erfc = 1 - erf` in f64, accurate relative to itself for large positive x (where
    /// `1 - erf` would cancel); `erfc(-inf) = 2`, `erfc(inf) = 0`.
    pub fn erfc(x: f64) -> f64 {
        if x.abs() < 2.5 {
            1.0 - erf_series(x)
        } else if x.is_nan() {
            x
        } else if x > 0.0 {
            erfc_cf(x)
        } else {
            2.0 - erfc_cf(-x)
        }
    }

    pub fn apply(act: Activation, x: f32) -> f32 {
        let xd = x as f64;
        match act {
            Activation::None => x,
            // PyTorch's relu propagates NaN and maps -0 to +0 (`clamp_min`).
            Activation::Relu => {
                if x > 0.0 || x.is_nan() {
                    x
                } else {
                    0.0
                }
            }
            Activation::LeakyRelu(s) => {
                if x >= 0.0 {
                    x
                } else {
                    s * x
                }
            }
            // `1 + erf(x / sqrt 2)` written as `erfc(-x / sqrt 2)` so the negative tail
            // keeps its relative accuracy instead of cancelling.
            Activation::Gelu => (0.5 * xd * erfc(-xd / std::f64::consts::SQRT_2)) as f32,
            // `0.5 x (1 + tanh u)` written as the equal `x / (1 + e^(-2u))`: `1 + tanh u`
            // cancels for u < -9 even in f64.
            Activation::GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                let u = c * (xd + 0.044715 * xd * xd * xd);
                (xd / (1.0 + (-2.0 * u).exp())) as f32
            }
            Activation::Silu => (xd / (1.0 + (-xd).exp())) as f32,
        }
    }

    pub fn activation(act: Activation, x: &[f32], y: &mut [f32]) {
        for (o, v) in y.iter_mut().zip(x) {
            *o = apply(act, *v);
        }
    }

    pub fn swiglu(gate: &[f32], up: &[f32], y: &mut [f32]) {
        for ((o, g), u) in y.iter_mut().zip(gate).zip(up) {
            *o = apply(Activation::Silu, *g) * u;
        }
    }
}

/// Elements per parallel task for elementwise kernels (64 KiB of output).
const CHUNK: usize = 1 << 14;

/// `max(x, 0)` with NaN kept and -0 mapped to +0 (exact).
#[derive(Clone, Copy)]
struct Relu;
impl LaneFn for Relu {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::F) -> S::F {
        // `max(x, 0)` is `x > 0 ? x : 0`, which maps NaN to 0: put NaN back.
        s.select(s.is_nan(x), x, s.max(x, s.splat(0.0)))
    }
}

/// `x < 0 ? slope x : x` (exact; NaN falls through unchanged).
#[derive(Clone, Copy)]
struct LeakyRelu(f32);
impl LaneFn for LeakyRelu {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::F) -> S::F {
        s.select(s.lt(x, s.splat(0.0)), s.mul(s.splat(self.0), x), x)
    }
}

#[derive(Clone, Copy)]
struct Gelu;
impl LaneFn for Gelu {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::F) -> S::F {
        simd::gelu(s, x)
    }
}

#[derive(Clone, Copy)]
struct GeluTanh;
impl LaneFn for GeluTanh {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::F) -> S::F {
        simd::gelu_tanh(s, x)
    }
}

#[derive(Clone, Copy)]
struct Silu;
impl LaneFn for Silu {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::F) -> S::F {
        simd::silu(s, x)
    }
}

/// `act` on one vector, the lanes of [`activation`] (for kernels that fuse an activation
/// into a longer elementwise chain).
#[inline(always)]
pub(super) fn lane<S: Simd>(s: S, act: Activation, x: S::F) -> S::F {
    match act {
        Activation::None => x,
        Activation::Relu => Relu.apply(s, x),
        Activation::LeakyRelu(k) => LeakyRelu(k).apply(s, x),
        Activation::Gelu => Gelu.apply(s, x),
        Activation::GeluTanh => GeluTanh.apply(s, x),
        Activation::Silu => Silu.apply(s, x),
    }
}

/// `dst[i] = act(src[i])` for `i < n`; `src` may be `dst` (in place).
struct Apply {
    act: Activation,
    src: *const f32,
    dst: *mut f32,
    n: usize,
}

impl Apply {
    fn inplace(act: Activation, x: &mut [f32]) -> Apply {
        Apply {
            act,
            src: x.as_ptr(),
            dst: x.as_mut_ptr(),
            n: x.len(),
        }
    }
    fn into(act: Activation, x: &[f32], y: &mut [f32]) -> Apply {
        let n = x.len().min(y.len());
        Apply {
            act,
            src: x.as_ptr(),
            dst: y.as_mut_ptr(),
            n,
        }
    }
}

impl Kernel for Apply {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let (src, dst, n) = (self.src, self.dst, self.n);
        // SAFETY (every arm): the constructors took `src` and `dst` from one exclusively
        // borrowed slice (in place) or from a shared and an exclusive slice of at least `n`
        // elements each, which cannot overlap; the borrows outlive this call.
        match self.act {
            Activation::None => {
                if !std::ptr::eq(src, dst) {
                    // SAFETY: as above.
                    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) }
                }
            }
            // SAFETY: as above.
            Activation::Relu => unsafe { simd::map(s, Relu, src, dst, n) },
            // SAFETY: as above.
            Activation::LeakyRelu(k) => unsafe { simd::map(s, LeakyRelu(k), src, dst, n) },
            // SAFETY: as above.
            Activation::Gelu => unsafe { simd::map(s, Gelu, src, dst, n) },
            // SAFETY: as above.
            Activation::GeluTanh => unsafe { simd::map(s, GeluTanh, src, dst, n) },
            // SAFETY: as above.
            Activation::Silu => unsafe { simd::map(s, Silu, src, dst, n) },
        }
    }
    fn scalar(self) {
        for i in 0..self.n {
            // SAFETY: i < n, inside both buffers (see `run`); element i is read before it
            // is written, so the in-place case is fine.
            unsafe { *self.dst.add(i) = reference::apply(self.act, *self.src.add(i)) };
        }
    }
}

/// Apply `act` in place (used by fused epilogues); runs on the calling thread.
pub fn apply_inplace(isa: Isa, act: Activation, x: &mut [f32]) {
    if act == Activation::None {
        return;
    }
    simd::dispatch(isa, Apply::inplace(act, x));
}

pub fn activation(cx: &Cx, act: Activation, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    cx.pool.par_chunks_mut(&mut y[..n], CHUNK, |i, out| {
        let src = &x[i * CHUNK..i * CHUNK + out.len()];
        simd::dispatch(cx.isa, Apply::into(act, src, out));
    });
}

/// `y = silu(gate) * up`.
struct Swiglu<'a> {
    gate: &'a [f32],
    up: &'a [f32],
    y: &'a mut [f32],
}

impl Kernel for Swiglu<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let n = self.y.len().min(self.gate.len()).min(self.up.len());
        let (g, u, y) = (self.gate.as_ptr(), self.up.as_ptr(), self.y.as_mut_ptr());
        let l = S::LANES;
        let mut i = 0;
        while i + l <= n {
            // SAFETY: lanes i..i + l are inside all three slices (n is the shortest).
            unsafe {
                let v = simd::silu(s, s.load(g.add(i)));
                s.store(y.add(i), s.mul(v, s.load(u.add(i))));
            }
            i += l;
        }
        if i < n {
            let m = n - i;
            // SAFETY: the m < l lanes from i are inside all three slices.
            unsafe {
                let v = simd::silu(s, s.load_part(g.add(i), m, 0.0));
                s.store_part(y.add(i), m, s.mul(v, s.load_part(u.add(i), m, 0.0)));
            }
        }
    }
    fn scalar(self) {
        reference::swiglu(self.gate, self.up, self.y);
    }
}

pub fn swiglu(cx: &Cx, gate: &[f32], up: &[f32], y: &mut [f32]) {
    let n = y.len().min(gate.len()).min(up.len());
    cx.pool.par_chunks_mut(&mut y[..n], CHUNK, |i, out| {
        let r = i * CHUNK..i * CHUNK + out.len();
        simd::dispatch(
            cx.isa,
            Swiglu {
                gate: &gate[r.clone()],
                up: &up[r],
                y: out,
            },
        );
    });
}

#[cfg(test)]
mod tests {
    use super::super::simd::testing::*;
    use super::*;
    use proptest::prelude::*;

    /// GELU: the vector normal CDF is within 4 ulp of the f64 reference (about 3 measured:
    /// exp 0.7 ulp, the tail rational and the two roundings of `e / den` and `x * Phi`).
    /// Below f32's normal range (|x| > 13.2, where exp(-x^2/2) is subnormal) only an
    /// absolute error of a few subnormal steps is kept.
    const GELU_ULPS: f64 = 4.0;
    const GELU_ABS: f64 = 1e-38;
    /// SiLU: exp (0.7 ulp), `1 + e` and the division: within 3 ulp. For x < -88.7, `e^-x`
    /// overflows and the result is -0 where the true value is below 3e-37.
    const SILU_ULPS: f64 = 3.0;
    const SILU_ABS: f64 = 3e-37;
    /// Tanh GELU: 4 ulp for the exp, the sum and the division, plus the rounding of
    /// `v = -2u` (4 roundings, |dv| <= 3 u |v|) that `e^v` turns into a relative error of
    /// 3 u |v| e^v / (1 + e^v): the f32 formula's own conditioning in the negative tail.
    const GELU_TANH_ULPS: f64 = 4.0;
    const GELU_TANH_V_ROUNDINGS: f64 = 3.0;
    const GELU_TANH_ABS: f64 = 3e-37;
    /// SwiGLU: SiLU's bound on `silu(gate)`, carried through the product with `up` (whose
    /// own rounding is added separately in the check).
    const SWIGLU_ULPS: f64 = SILU_ULPS;

    /// Whether `got` is within `ulps` ulp of `want` plus `abs`; NaN must meet NaN and an
    /// infinity the same infinity.
    fn close(got: f32, want: f32, ulps: f64, abs: f64) -> bool {
        if want.is_nan() || got.is_nan() {
            return want.is_nan() && got.is_nan();
        }
        if want.is_infinite() || got.is_infinite() {
            return got == want;
        }
        let err = (got as f64 - want as f64).abs();
        err <= ulps * ulp(want as f64) + abs
    }

    /// The allowed error of `act` at `x`, against the reference value `want`.
    fn bound(act: Activation, x: f32, want: f32) -> (f64, f64) {
        match act {
            Activation::Gelu => (GELU_ULPS, GELU_ABS),
            Activation::Silu => (SILU_ULPS, SILU_ABS),
            Activation::GeluTanh => {
                let xd = x as f64;
                let v = -2.0 * (2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd.powi(3));
                let w = if v > 700.0 {
                    1.0
                } else {
                    v.exp() / (1.0 + v.exp())
                };
                let rel = GELU_TANH_V_ROUNDINGS * U * v.abs() * w;
                let ulps = GELU_TANH_ULPS + rel * want.abs() as f64 / ulp(want as f64);
                (ulps, GELU_TANH_ABS)
            }
            _ => (0.0, 0.0),
        }
    }

    fn check_all(cx_name: &str, act: Activation, xs: &[f32], got: &[f32]) -> f64 {
        let mut worst = 0f64;
        for (&x, &g) in xs.iter().zip(got) {
            let want = reference::apply(act, x);
            let (ulps, abs) = bound(act, x, want);
            if ulps == 0.0 {
                assert!(
                    same_bits(g, want),
                    "{cx_name} {act:?}({x:e}) = {g:e}, want {want:e}"
                );
                continue;
            }
            assert!(
                close(g, want, ulps, abs),
                "{cx_name} {act:?}({x:e}) = {g:e}, want {want:e} ({:.2} ulp)",
                (g as f64 - want as f64).abs() / ulp(want as f64)
            );
            if want.is_finite() && (want as f64).abs() > abs * 1e3 {
                worst = worst.max((g as f64 - want as f64).abs() / ulp(want as f64));
            }
        }
        worst
    }

    const ACTS: [Activation; 6] = [
        Activation::Relu,
        Activation::LeakyRelu(0.01),
        Activation::LeakyRelu(-1.5),
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
    ];

    fn specials() -> Vec<f32> {
        vec![
            0.0,
            -0.0,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            1e30,
            -1e30,
            1e-30,
            -1e-30,
            1e-40,
            -1e-40,
            f32::MIN_POSITIVE,
            88.8,
            -88.8,
            -100.0,
            -104.5,
            13.3,
            -13.3,
            -14.5,
            -15.0,
            -20.0,
            0.75,
            -0.75,
            0.750_000_06,
            -0.750_000_06,
        ]
    }

    /// Dense sweeps over [-20, 20] and the special values, on every ISA: the accuracy
    /// claims of the bounds above, and no NaN from overflow for large |x|.
    #[test]
    fn dense_sweep_within_bounds() {
        let mut xs: Vec<f32> = (0..=400_000).map(|i| -20.0 + i as f32 * 1e-4).collect();
        xs.extend(specials());
        for isa in Isa::available() {
            for act in ACTS {
                let mut got = xs.clone();
                apply_inplace(isa, act, &mut got);
                let worst = check_all(isa.name(), act, &xs, &got);
                if isa != Isa::Scalar {
                    eprintln!("{} {act:?}: max {worst:.2} ulp", isa.name());
                }
            }
        }
    }

    #[test]
    fn large_magnitudes_do_not_make_nan() {
        for isa in Isa::available() {
            for act in [Activation::Gelu, Activation::GeluTanh, Activation::Silu] {
                let xs = [1e30f32, -1e30, f32::MAX, f32::MIN, 1e5, -1e5, 200.0, -200.0];
                let mut got = xs;
                apply_inplace(isa, act, &mut got);
                for (x, g) in xs.iter().zip(got) {
                    assert!(!g.is_nan(), "{isa:?} {act:?}({x}) is NaN");
                    if *x > 0.0 {
                        assert_eq!(g, *x, "{isa:?} {act:?}({x})");
                    } else {
                        assert_eq!(g, 0.0, "{isa:?} {act:?}({x})");
                    }
                }
            }
        }
    }

    fn values(n: usize) -> impl Strategy<Value = Vec<f32>> {
        proptest::collection::vec(
            prop_oneof![
                8 => -8.0f32..8.0,
                2 => -40.0f32..40.0,
                1 => proptest::sample::select(specials()),
            ],
            n,
        )
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn activation_matches_reference(
            xs in (1usize..300).prop_flat_map(values),
            which in 0usize..ACTS.len(),
        ) {
            let act = ACTS[which];
            for_each_cx(|cx| {
                let mut y = vec![0f32; xs.len()];
                activation(cx, act, &xs, &mut y);
                check_all(&name(cx), act, &xs, &y);
            });
        }

        #[test]
        fn swiglu_matches_reference(
            (g, u) in (1usize..300).prop_flat_map(|n| (values(n), proptest::collection::vec(-4.0f32..4.0, n))),
        ) {
            for_each_cx(|cx| {
                let mut y = vec![0f32; g.len()];
                swiglu(cx, &g, &u, &mut y);
                let mut want = vec![0f32; g.len()];
                reference::swiglu(&g, &u, &mut want);
                for i in 0..g.len() {
                    let s = reference::apply(Activation::Silu, g[i]) as f64;
                    // SiLU's error scaled by |up|, then the rounding of this product and of
                    // the reference's (half an ulp each).
                    let abs = SILU_ABS * u[i].abs() as f64;
                    let ok = if !want[i].is_finite() || !y[i].is_finite() {
                        same_bits(y[i], want[i])
                    } else {
                        (y[i] as f64 - want[i] as f64).abs()
                            <= SWIGLU_ULPS * ulp(s) * u[i].abs() as f64 + abs + ulp(want[i] as f64)
                    };
                    assert!(ok, "{} swiglu({}, {}) = {}, want {}", name(cx), g[i], u[i], y[i], want[i]);
                }
            });
        }
    }

    /// Sizes past one parallel chunk, so that the split over threads is exercised.
    #[test]
    fn long_inputs_split_over_threads() {
        let n = 3 * CHUNK + 77;
        let xs: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 2001) as f32 / 100.0 - 10.0)
            .collect();
        for_each_cx(|cx| {
            for act in ACTS {
                let mut y = vec![0f32; n];
                activation(cx, act, &xs, &mut y);
                check_all(&name(cx), act, &xs, &y);
            }
        });
        same_across_threads(|cx| {
            let mut y = vec![0f32; n];
            activation(cx, Activation::Gelu, &xs, &mut y);
            swiglu(cx, &xs, &y.clone(), &mut y);
            y
        });
    }
}
