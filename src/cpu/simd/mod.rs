//! Vector building blocks shared by the elementwise, normalisation and reduction kernels.
//!
//! [`Simd`] is a zero-sized token per instruction set ([`avx2::Avx2`], [`avx512::Avx512`],
//! `neon::Neon`) whose methods are the primitive lane operations. A token can only be
//! made inside a function compiled for its target features (its constructor is itself a
//! `#[target_feature]` function), so holding one proves the CPU runs those instructions.
//! Kernels are written once, generic over the token, and [`dispatch`] instantiates them
//! inside a `#[target_feature]` function per ISA; every method is `#[inline(always)]`, so
//! the whole body is compiled with that ISA's features. AVX-512 and NEON therefore run the
//! very code the AVX2 tests exercise, with only the primitives below differing.
//!
//! The vector math (exp, exact and tanh GELU, SiLU) is written here on top of the
//! primitives, so every ISA evaluates the same formulas with the same operation order and
//! the elementwise results agree bit for bit across ISAs (reductions differ only in the
//! order their lanes are summed).

use super::Isa;

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
#[cfg(target_arch = "aarch64")]
pub mod neon;

/// The primitive lane operations of one instruction set. Comparisons are ordered (false
/// when either side is NaN); `min`/`max` follow x86: `min(a, b) = if a < b { a } else { b }`
/// (so the second operand is returned when either is NaN), on every ISA.
pub trait Simd: Copy {
    /// f32 lanes per vector (at most 16).
    const LANES: usize;
    /// A vector of f32.
    type F: Copy;
    /// A lane mask, as produced by comparisons.
    type M: Copy;
    /// A vector of i32 with the same lane count.
    type I: Copy;

    fn splat(self, v: f32) -> Self::F;
    /// # Safety
    /// `p` must be valid for reading `LANES` f32 (no alignment needed).
    unsafe fn load(self, p: *const f32) -> Self::F;
    /// # Safety
    /// `p` must be valid for writing `LANES` f32 (no alignment needed).
    unsafe fn store(self, p: *mut f32, v: Self::F);
    /// The first `n < LANES` lanes from `p`, the others `fill`.
    /// # Safety
    /// `p` must be valid for reading `n` f32.
    unsafe fn load_part(self, p: *const f32, n: usize, fill: f32) -> Self::F;
    /// Store the first `n < LANES` lanes.
    /// # Safety
    /// `p` must be valid for writing `n` f32.
    unsafe fn store_part(self, p: *mut f32, n: usize, v: Self::F);

    fn add(self, a: Self::F, b: Self::F) -> Self::F;
    fn sub(self, a: Self::F, b: Self::F) -> Self::F;
    fn mul(self, a: Self::F, b: Self::F) -> Self::F;
    fn div(self, a: Self::F, b: Self::F) -> Self::F;
    /// `a * b + c` rounded once.
    fn mul_add(self, a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    fn min(self, a: Self::F, b: Self::F) -> Self::F;
    fn max(self, a: Self::F, b: Self::F) -> Self::F;
    fn abs(self, a: Self::F) -> Self::F;
    /// Round to the nearest integer, ties to even.
    fn round(self, a: Self::F) -> Self::F;

    fn lt(self, a: Self::F, b: Self::F) -> Self::M;
    fn le(self, a: Self::F, b: Self::F) -> Self::M;
    fn gt(self, a: Self::F, b: Self::F) -> Self::M;
    fn is_nan(self, a: Self::F) -> Self::M;
    fn m_or(self, a: Self::M, b: Self::M) -> Self::M;
    /// The mask of the first `n < LANES` lanes.
    fn first_mask(self, n: usize) -> Self::M;
    /// Whether any lane of the mask is set.
    fn m_any(self, m: Self::M) -> bool;
    /// Whether every lane of the mask is set.
    fn m_all(self, m: Self::M) -> bool;
    /// `m ? a : b` per lane.
    fn select(self, m: Self::M, a: Self::F, b: Self::F) -> Self::F;
    fn select_i(self, m: Self::M, a: Self::I, b: Self::I) -> Self::I;

    fn i_splat(self, v: i32) -> Self::I;
    /// `0, 1, .., LANES - 1`.
    fn i_iota(self) -> Self::I;
    /// Convert lanes holding integral values to i32.
    fn to_i32(self, a: Self::F) -> Self::I;
    fn i_add(self, a: Self::I, b: Self::I) -> Self::I;
    fn i_sub(self, a: Self::I, b: Self::I) -> Self::I;
    /// Shift left by 23: an i32 in the exponent field of an f32.
    fn i_shl23(self, a: Self::I) -> Self::I;
    /// Arithmetic shift right by 1.
    fn i_sar1(self, a: Self::I) -> Self::I;
    /// Reinterpret the bits as f32.
    fn i_as_f(self, a: Self::I) -> Self::F;
    /// # Safety
    /// `p` must be valid for writing `LANES` i32.
    unsafe fn store_i(self, p: *mut i32, v: Self::I);

    /// Sum of the lanes, in a fixed order per ISA.
    fn reduce_add(self, a: Self::F) -> f32;
    /// Largest lane (for rows without NaN; with a NaN the result is unspecified).
    fn reduce_max(self, a: Self::F) -> f32;

    /// Widen `LANES` f16 to f32 (exact, as IEEE conversion: NaNs are quietened).
    /// # Safety
    /// `p` must be valid for reading `LANES` u16.
    unsafe fn load_f16(self, p: *const u16) -> Self::F;
    /// Widen `LANES` bf16 to f32 as `half` (and an IEEE conversion) does: a 16-bit shift,
    /// with signalling NaNs quietened (quiet bit set, sign and payload kept).
    /// # Safety
    /// `p` must be valid for reading `LANES` u16.
    unsafe fn load_bf16(self, p: *const u16) -> Self::F;
    /// Convert `LANES` i8 to f32 (exact).
    /// # Safety
    /// `p` must be valid for reading `LANES` bytes.
    unsafe fn load_i8(self, p: *const i8) -> Self::F;
    /// `acc[i] += x[i] as f64` for `i < LANES` (exact widening, one f64 rounding per add).
    /// # Safety
    /// `acc` valid for reading and writing `LANES` f64, `x` for reading `LANES` f32.
    unsafe fn add_widen_f64(self, acc: *mut f64, x: *const f32);
}

/// A kernel body generic over the instruction set, with its scalar fallback.
pub trait Kernel {
    type Output;
    /// The vector body; implementations are `#[inline(always)]` so that they compile inside
    /// the per-ISA `#[target_feature]` function of [`dispatch`].
    fn run<S: Simd>(self, s: S) -> Self::Output;
    /// The path for [`Isa::Scalar`] and for an ISA this CPU or target cannot run.
    fn scalar(self) -> Self::Output;
}

/// Run `k` on `isa`: the vector body compiled for that ISA when the CPU supports it, else
/// the scalar path. Call this once per parallel task, outside the loops.
pub fn dispatch<K: Kernel>(isa: Isa, k: K) -> K::Output {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if isa.is_supported() => {
            // SAFETY: is_supported checked avx512f/bw/dq/vl, fma and f16c on this CPU.
            unsafe { run_avx512(k) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if isa.is_supported() => {
            // SAFETY: is_supported checked avx2, fma and f16c on this CPU.
            unsafe { run_avx2(k) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon if isa.is_supported() => {
            // SAFETY: is_supported checked neon on this CPU.
            unsafe { run_neon(k) }
        }
        _ => k.scalar(),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn run_avx2<K: Kernel>(k: K) -> K::Output {
    k.run(avx2::Avx2::new())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
fn run_avx512<K: Kernel>(k: K) -> K::Output {
    k.run(avx512::Avx512::new())
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
fn run_neon<K: Kernel>(k: K) -> K::Output {
    k.run(neon::Neon::new())
}

/// Rows per parallel task so that each task touches at least ~`min_elems` elements.
pub fn rows_per_task(cols: usize, min_elems: usize) -> usize {
    min_elems.div_ceil(cols.max(1)).max(1)
}

/// Runs `f(x_rows, y_rows)` over row-major `x` and `y` (`y.len()` values, rows of `cols`)
/// in parallel tasks of whole rows touching at least ~`min_elems` elements each; the split
/// depends on the shape only, never on the thread count.
pub fn par_rows(
    cx: &super::Cx,
    cols: usize,
    min_elems: usize,
    x: &[f32],
    y: &mut [f32],
    f: impl Fn(&[f32], &mut [f32]) + Sync,
) {
    par_rows_of(cx, cols, min_elems, [x], y, |[x], y| f(x, y));
}

/// [`par_rows`] over several row-major inputs of `y`'s shape: `f([rows of each input],
/// y_rows)`.
pub fn par_rows_of<const N: usize>(
    cx: &super::Cx,
    cols: usize,
    min_elems: usize,
    xs: [&[f32]; N],
    y: &mut [f32],
    f: impl Fn([&[f32]; N], &mut [f32]) + Sync,
) {
    let per = rows_per_task(cols, min_elems) * cols;
    cx.pool.par_chunks_mut(y, per, |t, out| {
        let rows = t * per..t * per + out.len();
        f(xs.map(|x| &x[rows.clone()]), out)
    });
}

/// A function applied lane by lane (a struct rather than a closure so that it is inlined
/// into the `#[target_feature]` body for certain).
pub trait LaneFn: Copy {
    fn apply<S: Simd>(self, s: S, x: S::F) -> S::F;
}

/// `dst[i] = f(src[i])` for `i < n`, two vectors per step, the tail as one partial vector
/// (every lane computes the same function, so results do not depend on where a slice
/// starts or ends).
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `n` f32; they may be the same
/// pointer (each element is read before it is written) but must not otherwise overlap.
#[inline(always)]
pub unsafe fn map<S: Simd, F: LaneFn>(s: S, f: F, src: *const f32, dst: *mut f32, n: usize) {
    let l = S::LANES;
    let mut i = 0;
    while i + 2 * l <= n {
        // SAFETY: lanes i..i + 2l are inside both buffers (loop condition, caller contract).
        unsafe {
            let a = s.load(src.add(i));
            let b = s.load(src.add(i + l));
            s.store(dst.add(i), f.apply(s, a));
            s.store(dst.add(i + l), f.apply(s, b));
        }
        i += 2 * l;
    }
    if i + l <= n {
        // SAFETY: lanes i..i + l are inside both buffers.
        unsafe { s.store(dst.add(i), f.apply(s, s.load(src.add(i)))) };
        i += l;
    }
    if i < n {
        // SAFETY: the n - i < l lanes from i are inside both buffers.
        unsafe {
            let x = s.load_part(src.add(i), n - i, 0.0);
            s.store_part(dst.add(i), n - i, f.apply(s, x));
        }
    }
}

/// A function of `N` vectors applied lane by lane (a trait rather than a closure, as
/// [`LaneFn`], so that it is inlined into the `#[target_feature]` body for certain).
pub trait ZipFn<const N: usize> {
    fn apply<S: Simd>(&self, s: S, x: [S::F; N]) -> S::F;
}

/// `dst[i] = f(src[0][i], .., src[N - 1][i])` for `i < n`, one vector per step, the tail as one
/// partial vector (the inputs' missing lanes read as 0.0 and the output's left untouched).
///
/// # Safety
/// Every `src[j]` must be valid for reading and `dst` for writing `n` f32; `dst` must not
/// overlap any input.
#[inline(always)]
pub unsafe fn zip_map<S: Simd, const N: usize, F: ZipFn<N>>(
    s: S,
    f: &F,
    src: [*const f32; N],
    dst: *mut f32,
    n: usize,
) {
    let l = S::LANES;
    let mut i = 0;
    // Loads by index, not through `array::map` and a closure, which need not be inlined into
    // the `#[target_feature]` body.
    let mut v = [s.splat(0.0); N];
    while i + l <= n {
        // SAFETY: lanes i..i + l are inside every buffer (loop condition, caller contract).
        unsafe {
            for j in 0..N {
                v[j] = s.load(src[j].add(i));
            }
            s.store(dst.add(i), f.apply(s, v));
        }
        i += l;
    }
    if i < n {
        let m = n - i;
        // SAFETY: the m < l lanes from i are inside every buffer.
        unsafe {
            for j in 0..N {
                v[j] = s.load_part(src[j].add(i), m, 0.0);
            }
            s.store_part(dst.add(i), m, f.apply(s, v));
        }
    }
}

/// Load `m <= LANES` lanes (a full vector when `m == LANES`, else `m` lanes and zeros).
///
/// # Safety
/// `p` must be valid for reading `m` f32.
#[inline(always)]
pub unsafe fn load_n<S: Simd>(s: S, p: *const f32, m: usize) -> S::F {
    // SAFETY: the caller guarantees m readable f32, and each branch reads at most m.
    unsafe {
        if m == S::LANES {
            s.load(p)
        } else {
            s.load_part(p, m, 0.0)
        }
    }
}

/// Store the first `m <= LANES` lanes.
///
/// # Safety
/// `p` must be valid for writing `m` f32.
#[inline(always)]
pub unsafe fn store_n<S: Simd>(s: S, p: *mut f32, m: usize, v: S::F) {
    // SAFETY: the caller guarantees m writable f32, and each branch writes at most m.
    unsafe {
        if m == S::LANES {
            s.store(p, v)
        } else {
            s.store_part(p, m, v)
        }
    }
}

/// `sum f(p[i])` for `i < n` with four vector accumulators (each lane of each takes every
/// `4 LANES`-th term), combined as `(a0 + a1) + (a2 + a3)` and then across lanes. A partial
/// last vector has its unused lanes zeroed after `f`.
///
/// # Safety
/// `p` must be valid for reading `n` f32.
#[inline(always)]
pub unsafe fn sum_map<S: Simd, F: LaneFn>(s: S, f: F, p: *const f32, n: usize) -> f32 {
    // SAFETY: forwarded contract.
    unsafe { reduce_map::<S, F, false>(s, f, p, n) }
}

/// `sum f(p[i])^2` as [`sum_map`], each square accumulated by one fused multiply-add.
///
/// # Safety
/// `p` must be valid for reading `n` f32.
#[inline(always)]
pub unsafe fn sum_squares_map<S: Simd, F: LaneFn>(s: S, f: F, p: *const f32, n: usize) -> f32 {
    // SAFETY: forwarded contract.
    unsafe { reduce_map::<S, F, true>(s, f, p, n) }
}

/// `acc + v` or `acc + v * v`.
#[inline(always)]
fn accumulate<S: Simd, const SQUARE: bool>(s: S, acc: S::F, v: S::F) -> S::F {
    if SQUARE {
        s.mul_add(v, v, acc)
    } else {
        s.add(acc, v)
    }
}

#[inline(always)]
unsafe fn reduce_map<S: Simd, F: LaneFn, const SQUARE: bool>(
    s: S,
    f: F,
    p: *const f32,
    n: usize,
) -> f32 {
    let l = S::LANES;
    let z = s.splat(0.0);
    let (mut a0, mut a1, mut a2, mut a3) = (z, z, z, z);
    let mut i = 0;
    while i + 4 * l <= n {
        // SAFETY: lanes i..i + 4l are inside the row (loop condition, caller contract).
        unsafe {
            a0 = accumulate::<S, SQUARE>(s, a0, f.apply(s, s.load(p.add(i))));
            a1 = accumulate::<S, SQUARE>(s, a1, f.apply(s, s.load(p.add(i + l))));
            a2 = accumulate::<S, SQUARE>(s, a2, f.apply(s, s.load(p.add(i + 2 * l))));
            a3 = accumulate::<S, SQUARE>(s, a3, f.apply(s, s.load(p.add(i + 3 * l))));
        }
        i += 4 * l;
    }
    while i + l <= n {
        // SAFETY: lanes i..i + l are inside the row.
        a0 = accumulate::<S, SQUARE>(s, a0, f.apply(s, unsafe { s.load(p.add(i)) }));
        i += l;
    }
    if i < n {
        // SAFETY: the n - i < l lanes from i are inside the row.
        let v = f.apply(s, unsafe { s.load_part(p.add(i), n - i, 0.0) });
        a1 = accumulate::<S, SQUARE>(s, a1, s.select(s.first_mask(n - i), v, z));
    }
    s.reduce_add(s.add(s.add(a0, a1), s.add(a2, a3)))
}

/// Polynomial `c[0] x^(N-1) + ... + c[N-1]` by Horner's rule with fused multiply-adds.
#[inline(always)]
pub fn poly<S: Simd, const N: usize>(s: S, x: S::F, c: &[f32; N]) -> S::F {
    let mut acc = s.splat(c[0]);
    for &k in &c[1..] {
        acc = s.mul_add(acc, x, s.splat(k));
    }
    acc
}

/// Largest f32 whose exponential is finite (`exp(88.72284) > f32::MAX`).
const EXP_MAX_ARG: f32 = 88.72283;
/// Below this the exponential is under half the smallest subnormal, so it rounds to 0; the
/// clamp also keeps `n` inside the range the two-factor scaling below can represent.
const EXP_MIN_ARG: f32 = -104.0;
/// ln 2 split for Cody-Waite reduction (Cephes `expf.c`): `C1` has 9 significant bits, so
/// `n * C1` is exact for |n| <= 2^15 and `x - n * C1` is exact.
const LN2_C1: f32 = 0.693_359_4;
const LN2_C2: f32 = -2.121_944_4e-4;
/// `exp(r) = 1 + r + r^2 (c2 + c3 r + ... + c6 r^4)` on `|r| <= ln2 / 2`: a relative-error
/// minimax fit (degree 6, fit error 3.1e-9); with the f32 Horner evaluation the result is
/// within 0.7 ulp of `exp(r)` (measured over 4e5 points against mpmath).
const EXP_POLY: [f32; 7] = [
    0.001_381_461_3,
    0.008_368_71,
    0.041_668_39,
    0.166_665_21,
    0.499_999_94,
    1.0,
    1.0,
];

/// `e^x` per lane, within ~1 ulp over the whole f32 range (subnormal results included);
/// `exp(-inf) = 0`, `exp(inf) = inf`, NaN stays NaN.
#[inline(always)]
pub fn exp<S: Simd>(s: S, x: S::F) -> S::F {
    exp_core::<S, true>(s, x, s.splat(0.0))
}

/// [`exp`] for arguments that are never positive (or NaN), as in softmax after the maximum
/// is subtracted: the same result without the overflow handling.
///
/// Measured over every f32 in [-104, 0] against the f64 exponential: at most 0.882 ulp
/// (0.736 on [-1, 0]), 93.4% of results correctly rounded on [-20, -1], 97.9% in the
/// subnormal range, mean error +0.01 ulp. The Cephes `expf` the attention kernel carried
/// before measured 1.010 ulp, 90.4% correctly rounded on [-20, -1], and flushed every result
/// below 2^-126 to 0 (the test `exp_nonpositive_is_within_0_89_ulp` keeps the bound).
#[inline(always)]
pub fn exp_nonpositive<S: Simd>(s: S, x: S::F) -> S::F {
    exp_core::<S, false>(s, x, s.splat(0.0))
}

/// `e^(hi + lo)` for `hi <= 0` and a correction `|lo| <= ulp(hi)` that `hi` could not hold
/// (used to evaluate `exp(-a^2 / 2)` from the exact two-term square of `a`).
#[inline(always)]
pub fn exp_split_nonpositive<S: Simd>(s: S, hi: S::F, lo: S::F) -> S::F {
    exp_core::<S, false>(s, hi, lo)
}

#[inline(always)]
fn exp_core<S: Simd, const CAN_OVERFLOW: bool>(s: S, hi: S::F, lo: S::F) -> S::F {
    // The constant comes first so a NaN lane passes through (see `Simd`).
    let x = s.max(s.splat(EXP_MIN_ARG), hi);
    let x = if CAN_OVERFLOW {
        s.min(s.splat(EXP_MAX_ARG), x)
    } else {
        x
    };
    let n = s.round(s.mul(x, s.splat(std::f32::consts::LOG2_E)));
    let r = s.mul_add(n, s.splat(-LN2_C1), x);
    let r = s.mul_add(n, s.splat(-LN2_C2), r);
    let r = s.add(r, lo);
    let p = poly(s, r, &EXP_POLY);
    // 2^n as two factors 2^(n/2) and 2^(n - n/2), each a normal f32 for n in [-150, 128],
    // so results near overflow and in the subnormal range are rounded once, correctly.
    let ni = s.to_i32(n);
    let n1 = s.i_sar1(ni);
    let n2 = s.i_sub(ni, n1);
    let bias = s.i_splat(127);
    let f1 = s.i_as_f(s.i_shl23(s.i_add(n1, bias)));
    let f2 = s.i_as_f(s.i_shl23(s.i_add(n2, bias)));
    let y = s.mul(s.mul(p, f1), f2);
    if CAN_OVERFLOW {
        s.select(s.gt(hi, s.splat(EXP_MAX_ARG)), s.splat(f32::INFINITY), y)
    } else {
        y
    }
}

/// `silu(x) = x / (1 + e^-x)` (PyTorch's operation order). For x < -88.7, `e^-x` overflows
/// and the result is -0 where the true value is below 3e-37 in magnitude.
#[inline(always)]
pub fn silu<S: Simd>(s: S, x: S::F) -> S::F {
    let one = s.splat(1.0);
    s.div(x, s.add(one, exp(s, s.sub(s.splat(0.0), x))))
}

/// `sqrt(2 / pi)`, times -2.
const GELU_TANH_M2C: f32 = -1.595_769_2;
const GELU_TANH_K: f32 = 0.044_715;

/// Tanh GELU `0.5 x (1 + tanh(u))`, `u = sqrt(2/pi) (x + 0.044715 x^3)`, evaluated as the
/// equal `x / (1 + e^(-2u))` (`1 + tanh u = 2 sigmoid(2u)`), which needs one exponential
/// and no cancellation. The rounding of `u` itself is amplified by `e^(-2u)` for negative
/// `u` (relative error ~|2u| eps there), as in any f32 evaluation of the formula.
#[inline(always)]
pub fn gelu_tanh<S: Simd>(s: S, x: S::F) -> S::F {
    let one = s.splat(1.0);
    let inner = s.mul_add(s.mul(x, x), s.splat(GELU_TANH_K), one);
    let v = s.mul(s.mul(x, s.splat(GELU_TANH_M2C)), inner);
    s.div(x, s.add(one, exp(s, v)))
}

/// |x| at or below which GELU uses the series branch.
const GELU_T1: f32 = 0.75;
/// Beyond this |x| the tail term `exp(-x^2/2)` is exactly 0 in f32 (x^2/2 > 104), so
/// clamping there changes nothing and keeps `x^2` and the rational function finite.
const GELU_CAP: f32 = 15.0;
/// `Phi(x) = 0.5 + x P(x^2)` for |x| <= 0.75, `P(s) = erf(sqrt(s/2)) / (2 sqrt(s))`:
/// relative minimax fit of degree 5 in `s` (fit error 2.4e-11).
const GELU_P: [f32; 6] = [
    -8.388_589e-6,
    1.147_786_2e-4,
    -0.001_187_138_1,
    0.009_973_532,
    -0.066_490_38,
    0.398_942_3,
];
/// Tail: `Q(a) = Phi(-a) = e^(-a^2/2) / (sqrt(2 pi) a + H(a))` for a in [0.75, 15], where
/// `H = N / D` is a relative (4, 5) rational fit of `e^(-a^2/2) / Q(a) - sqrt(2 pi) a`
/// (fit error 1.5e-9). `H` only enters through the sum `sqrt(2 pi) a + H`, where its weight
/// is at most 0.44, so its f32 evaluation error is damped.
const GELU_N: [f32; 5] = [
    0.010_326_898,
    0.103_840_515,
    0.517_658_6,
    1.432_641_6,
    2.000_019,
];
const GELU_D: [f32; 6] = [
    0.004_119_791_6,
    0.041_429_26,
    0.214_673_94,
    0.655_738,
    1.171_806_5,
    1.0,
];
const SQRT_2PI: f32 = 2.506_628_3;

/// Exact GELU `x Phi(x)`, `Phi(x) = (1 + erf(x / sqrt 2)) / 2`, within 4 ulp (about 3 ulp
/// measured against the f64 reference over [-14, 14]). For |x| > 0.75 `Phi` comes from the
/// tail `Q = Phi(-|x|)` as `Q` (x < 0) or `1 - Q` (x > 0), so the tail keeps full relative
/// accuracy down to the f32 underflow instead of losing it to `1 + erf` cancellation;
/// `exp(-x^2/2)` takes `x^2` as an exact two-term sum. GELU(+inf) = inf, GELU(-inf) = NaN
/// (as PyTorch's `x * 0.5 * (1 + erf(x / sqrt 2))`), NaN stays NaN.
#[inline(always)]
pub fn gelu<S: Simd>(s: S, x: S::F) -> S::F {
    let a = s.abs(x);
    let small = s.le(a, s.splat(GELU_T1));
    let phi = if s.m_all(small) {
        gelu_phi_small(s, x)
    } else if !s.m_any(small) {
        gelu_phi_tail(s, x, a)
    } else {
        s.select(small, gelu_phi_small(s, x), gelu_phi_tail(s, x, a))
    };
    s.mul(x, phi)
}

#[inline(always)]
fn gelu_phi_small<S: Simd>(s: S, x: S::F) -> S::F {
    let p = poly(s, s.mul(x, x), &GELU_P);
    s.mul_add(x, p, s.splat(0.5))
}

#[inline(always)]
fn gelu_phi_tail<S: Simd>(s: S, x: S::F, a: S::F) -> S::F {
    let a = s.min(s.splat(GELU_CAP), a);
    let h = s.div(poly(s, a, &GELU_N), poly(s, a, &GELU_D));
    let den = s.mul_add(a, s.splat(SQRT_2PI), h);
    // -a^2/2 = e_hi + e_lo exactly (`-a/2` is exact, the residual of a product is exact).
    let neg_half_a = s.mul(a, s.splat(-0.5));
    let e_hi = s.mul(a, neg_half_a);
    let e_lo = s.mul_add(a, neg_half_a, s.sub(s.splat(0.0), e_hi));
    let e = exp_split_nonpositive(s, e_hi, e_lo);
    let q = s.div(e, den);
    s.select(s.lt(x, s.splat(0.0)), q, s.sub(s.splat(1.0), q))
}

/// Test helpers shared by the kernel modules: every (ISA, thread count) pair to run, and
/// error measures.
#[cfg(test)]
pub(crate) mod testing {
    use super::super::{Cx, Isa, ThreadPool};

    /// Call `f` with a context for every ISA this CPU runs, with 1 and with 2 threads.
    pub fn for_each_cx(mut f: impl FnMut(&Cx)) {
        let pools = [ThreadPool::new(1), ThreadPool::new(2)];
        for isa in Isa::available() {
            for pool in &pools {
                let cx = Cx::strict(isa, pool);
                f(&cx);
            }
        }
    }

    /// For every ISA, run `f` with 1 and with 2 threads and check the results agree bit for
    /// bit (work is split by rows or chunks only, never inside a reduction).
    pub fn same_across_threads(f: impl Fn(&Cx) -> Vec<f32>) {
        let pools = [ThreadPool::new(1), ThreadPool::new(2)];
        for isa in Isa::available() {
            let run = |pool| f(&Cx::strict(isa, pool));
            let (a, b) = (run(&pools[0]), run(&pools[1]));
            assert_eq!(a.len(), b.len());
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    same_bits(*x, *y),
                    "{isa:?}: element {i} is {x} on 1 thread, {y} on 2"
                );
            }
        }
    }

    /// A short description of a context for assertion messages.
    pub fn name(cx: &Cx) -> String {
        format!("{} x{}", cx.isa.name(), cx.pool.threads())
    }

    /// The proptest configuration of the kernel tests: 48 cases, unless `PROPTEST_CASES`
    /// asks for another number.
    pub fn config() -> proptest::test_runner::Config {
        let d = proptest::test_runner::Config::default();
        if std::env::var_os("PROPTEST_CASES").is_some() {
            d
        } else {
            proptest::test_runner::Config { cases: 48, ..d }
        }
    }

    /// f32 unit roundoff, 2^-24.
    pub const U: f64 = f32::EPSILON as f64 / 2.0;

    /// The spacing of f32 values at `|v|` (the smallest subnormal at 0).
    pub fn ulp(v: f64) -> f64 {
        let a = (v.abs() as f32).min(f32::MAX);
        let next = f32::from_bits(a.to_bits() + 1);
        (next - a) as f64
    }

    /// Bit equality that treats every NaN as equal.
    pub fn same_bits(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// `gamma_k = k u / (1 - k u)`: the relative error bound of a k-term recursive sum.
    pub fn gamma(k: usize) -> f64 {
        let ku = k as f64 * U;
        ku / (1.0 - ku)
    }

    /// The longest chain of additions any ISA uses to sum `n` terms: NEON has 4 lanes x 4
    /// accumulators (16 partial sums), then a tree of at most 5 levels and a tail of at
    /// most 15 scalar-equivalent lane adds.
    pub fn sum_chain(n: usize) -> usize {
        n.div_ceil(16) + 5 + 16
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[derive(Clone, Copy)]
    struct ExpFn;
    impl LaneFn for ExpFn {
        #[inline(always)]
        fn apply<S: Simd>(self, s: S, x: S::F) -> S::F {
            exp(s, x)
        }
    }

    struct MapExp<'a>(&'a mut [f32]);
    impl Kernel for MapExp<'_> {
        type Output = ();
        #[inline(always)]
        fn run<S: Simd>(self, s: S) {
            let p = self.0.as_mut_ptr();
            // SAFETY: source and destination are the same `len`-element slice.
            unsafe { map(s, ExpFn, p, p, self.0.len()) }
        }
        fn scalar(self) {
            for v in self.0.iter_mut() {
                *v = v.exp();
            }
        }
    }

    #[derive(Clone, Copy)]
    struct ExpNonpositiveFn;
    impl LaneFn for ExpNonpositiveFn {
        #[inline(always)]
        fn apply<S: Simd>(self, s: S, x: S::F) -> S::F {
            exp_nonpositive(s, x)
        }
    }

    struct MapExpNonpositive<'a>(&'a mut [f32]);
    impl Kernel for MapExpNonpositive<'_> {
        type Output = bool;
        #[inline(always)]
        fn run<S: Simd>(self, s: S) -> bool {
            let p = self.0.as_mut_ptr();
            // SAFETY: source and destination are the same `len`-element slice.
            unsafe { map(s, ExpNonpositiveFn, p, p, self.0.len()) };
            true
        }
        fn scalar(self) -> bool {
            false
        }
    }

    /// On softmax arguments (x <= 0) the vector exponential is within 0.89 ulp of the f64
    /// exponential, subnormal results included: every 31st f32 of [-104, 0] (36 million) and
    /// the flush boundary of the old Cephes exp.
    #[test]
    fn exp_nonpositive_is_within_0_89_ulp() {
        let mut xs: Vec<f32> = (0..=104f32.to_bits() / 31)
            .map(|i| -f32::from_bits(i * 31))
            .collect();
        xs.extend([-87.336_55, -87.336_56, -103.97, -104.0]);
        for isa in Isa::available() {
            let mut ys = xs.clone();
            if !dispatch(isa, MapExpNonpositive(&mut ys)) {
                continue;
            }
            let (mut worst, mut at) = (0f64, 0f32);
            for (&x, &y) in xs.iter().zip(&ys) {
                let want = (x as f64).exp();
                let err = (y as f64 - want).abs() / ulp(want);
                if err > worst {
                    (worst, at) = (err, x);
                }
            }
            assert!(worst <= 0.89, "{isa:?}: exp({at}) is {worst} ulp off");
        }
    }

    /// The vector exponential is within 1 ulp of the f64 exponential rounded to f32, over
    /// the whole range including subnormal results, and handles the special values.
    #[test]
    fn exp_is_within_one_ulp_everywhere() {
        let mut xs: Vec<f32> = (0..400_001)
            .map(|i| -104.5 + 193.5 * i as f32 / 400_000.0)
            .collect();
        xs.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            88.72283,
            88.722_84,
            -87.33655,
            -103.97,
            1e-30,
            -1e-30,
            f32::MAX,
            f32::MIN,
        ]);
        for isa in Isa::available() {
            let mut ys = xs.clone();
            dispatch(isa, MapExp(&mut ys));
            for (&x, &y) in xs.iter().zip(&ys) {
                let want = (x as f64).exp();
                if x.is_nan() {
                    assert!(y.is_nan(), "{isa:?} exp(NaN) = {y}");
                    continue;
                }
                if (want as f32).is_infinite() {
                    assert_eq!(y, f32::INFINITY, "{isa:?} exp({x})");
                    continue;
                }
                let err = (y as f64 - want).abs();
                let tol = ulp(want);
                assert!(err <= tol, "{isa:?} exp({x}) = {y}, want {want}");
            }
        }
    }
}
