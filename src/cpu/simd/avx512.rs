//! [`Simd`] for x86-64 AVX-512 (F, BW, DQ, VL) + FMA + F16C: 16 f32 lanes in a `__m512`,
//! lane masks in `__mmask16`. Structurally the AVX2 token with twice the lanes; partial
//! vectors use masked loads and stores.

use std::arch::x86_64::*;

use super::Simd;

/// Proof that the CPU runs AVX-512 F/BW/DQ/VL, FMA and F16C; made only by [`Avx512::new`].
#[derive(Clone, Copy)]
pub struct Avx512(());

impl Avx512 {
    /// The token: the proof that code holding it may use avx512f/bw/dq/vl, fma and f16c.
    ///
    /// # Safety
    /// Safe to call only from code compiled with these target features; any other caller
    /// must have checked that the CPU supports them (see `simd::dispatch`).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
    pub fn new() -> Avx512 {
        Avx512(())
    }
}

/// Call a value intrinsic that needs the token's features.
macro_rules! tf {
    ($e:expr) => {
        // SAFETY: an `Avx512` token exists only where avx512f/bw/dq/vl, fma and f16c are
        // available (`Avx512::new` is a target_feature function); no pointer is involved.
        unsafe { $e }
    };
}

/// Mask of the first `n` lanes (n < 16).
#[inline(always)]
fn first_lanes(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

impl Simd for Avx512 {
    const LANES: usize = 16;
    type F = __m512;
    type M = __mmask16;
    type I = __m512i;

    #[inline(always)]
    fn splat(self, v: f32) -> __m512 {
        tf!(_mm512_set1_ps(v))
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> __m512 {
        // SAFETY: the caller guarantees 16 readable f32.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: __m512) {
        // SAFETY: the caller guarantees 16 writable f32.
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_part(self, p: *const f32, n: usize, fill: f32) -> __m512 {
        // SAFETY: masked-off lanes are not accessed (and cannot fault); the caller
        // guarantees the first n are readable.
        unsafe { _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first_lanes(n), p) }
    }
    #[inline(always)]
    unsafe fn store_part(self, p: *mut f32, n: usize, v: __m512) {
        // SAFETY: only the first n lanes, which the caller guarantees writable, are stored.
        unsafe { _mm512_mask_storeu_ps(p, first_lanes(n), v) }
    }

    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_add_ps(a, b))
    }
    #[inline(always)]
    fn sub(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_sub_ps(a, b))
    }
    #[inline(always)]
    fn mul(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_mul_ps(a, b))
    }
    #[inline(always)]
    fn div(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_div_ps(a, b))
    }
    #[inline(always)]
    fn mul_add(self, a: __m512, b: __m512, c: __m512) -> __m512 {
        tf!(_mm512_fmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn min(self, a: __m512, b: __m512) -> __m512 {
        // vminps: `a < b ? a : b`, the same rule as the AVX2 instruction.
        tf!(_mm512_min_ps(a, b))
    }
    #[inline(always)]
    fn max(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_max_ps(a, b))
    }
    #[inline(always)]
    fn abs(self, a: __m512) -> __m512 {
        tf!(_mm512_abs_ps(a))
    }
    #[inline(always)]
    fn round(self, a: __m512) -> __m512 {
        // Scale 0 (round to an integer), nearest-even, exceptions suppressed.
        tf!(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a))
    }

    #[inline(always)]
    fn lt(self, a: __m512, b: __m512) -> __mmask16 {
        tf!(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b))
    }
    #[inline(always)]
    fn le(self, a: __m512, b: __m512) -> __mmask16 {
        tf!(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(a, b))
    }
    #[inline(always)]
    fn gt(self, a: __m512, b: __m512) -> __mmask16 {
        tf!(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, b))
    }
    #[inline(always)]
    fn is_nan(self, a: __m512) -> __mmask16 {
        tf!(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a))
    }
    #[inline(always)]
    fn m_or(self, a: __mmask16, b: __mmask16) -> __mmask16 {
        a | b
    }
    #[inline(always)]
    fn first_mask(self, n: usize) -> __mmask16 {
        first_lanes(n)
    }
    #[inline(always)]
    fn m_any(self, m: __mmask16) -> bool {
        m != 0
    }
    #[inline(always)]
    fn m_all(self, m: __mmask16) -> bool {
        m == 0xffff
    }
    #[inline(always)]
    fn select(self, m: __mmask16, a: __m512, b: __m512) -> __m512 {
        // mask_blend takes the second operand where the mask is set.
        tf!(_mm512_mask_blend_ps(m, b, a))
    }
    #[inline(always)]
    fn select_i(self, m: __mmask16, a: __m512i, b: __m512i) -> __m512i {
        tf!(_mm512_mask_blend_epi32(m, b, a))
    }

    #[inline(always)]
    fn i_splat(self, v: i32) -> __m512i {
        tf!(_mm512_set1_epi32(v))
    }
    #[inline(always)]
    fn i_iota(self) -> __m512i {
        tf!(_mm512_setr_epi32(
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
        ))
    }
    #[inline(always)]
    fn to_i32(self, a: __m512) -> __m512i {
        tf!(_mm512_cvtps_epi32(a))
    }
    #[inline(always)]
    fn i_add(self, a: __m512i, b: __m512i) -> __m512i {
        tf!(_mm512_add_epi32(a, b))
    }
    #[inline(always)]
    fn i_sub(self, a: __m512i, b: __m512i) -> __m512i {
        tf!(_mm512_sub_epi32(a, b))
    }
    #[inline(always)]
    fn i_shl23(self, a: __m512i) -> __m512i {
        tf!(_mm512_slli_epi32::<23>(a))
    }
    #[inline(always)]
    fn i_sar1(self, a: __m512i) -> __m512i {
        tf!(_mm512_srai_epi32::<1>(a))
    }
    #[inline(always)]
    fn i_as_f(self, a: __m512i) -> __m512 {
        tf!(_mm512_castsi512_ps(a))
    }
    #[inline(always)]
    unsafe fn store_i(self, p: *mut i32, v: __m512i) {
        // SAFETY: the caller guarantees 16 writable i32.
        unsafe { _mm512_storeu_si512(p.cast(), v) }
    }

    #[inline(always)]
    fn reduce_add(self, a: __m512) -> f32 {
        // (lane i + lane i+8), then the AVX2 order on the 8 sums.
        tf!({
            let h8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps::<1>(a));
            let h = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps::<1>(h8));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_add_ss(h, _mm_movehdup_ps(h));
            _mm_cvtss_f32(h)
        })
    }
    #[inline(always)]
    fn reduce_max(self, a: __m512) -> f32 {
        tf!({
            let h8 = _mm256_max_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps::<1>(a));
            let h = _mm_max_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps::<1>(h8));
            let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_max_ss(h, _mm_movehdup_ps(h));
            _mm_cvtss_f32(h)
        })
    }

    #[inline(always)]
    unsafe fn load_f16(self, p: *const u16) -> __m512 {
        // SAFETY: the caller guarantees 16 readable u16 (32 bytes).
        let h = unsafe { _mm256_loadu_si256(p.cast()) };
        tf!(_mm512_cvtph_ps(h))
    }
    #[inline(always)]
    unsafe fn load_bf16(self, p: *const u16) -> __m512 {
        // SAFETY: the caller guarantees 16 readable u16.
        let h = unsafe { _mm256_loadu_si256(p.cast()) };
        tf!({
            let v = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h));
            let nan =
                _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(_mm512_castsi512_ps(v), _mm512_castsi512_ps(v));
            let quiet = _mm512_set1_epi32(0x0040_0000);
            _mm512_castsi512_ps(_mm512_mask_or_epi32(v, nan, v, quiet))
        })
    }
    #[inline(always)]
    unsafe fn load_i8(self, p: *const i8) -> __m512 {
        // SAFETY: the caller guarantees 16 readable bytes.
        let q = unsafe { _mm_loadu_si128(p.cast()) };
        tf!(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)))
    }
    #[inline(always)]
    unsafe fn add_widen_f64(self, acc: *mut f64, x: *const f32) {
        // SAFETY: the caller guarantees 16 f64 at `acc` and 16 f32 at `x`.
        unsafe {
            let v = _mm512_loadu_ps(x);
            let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
            let hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps::<1>(v));
            _mm512_storeu_pd(acc, _mm512_add_pd(_mm512_loadu_pd(acc), lo));
            _mm512_storeu_pd(acc.add(8), _mm512_add_pd(_mm512_loadu_pd(acc.add(8)), hi));
        }
    }
}
