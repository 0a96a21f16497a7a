//! [`Simd`] for x86-64 AVX2 + FMA + F16C: 8 f32 lanes in a `__m256`.

use std::arch::x86_64::*;

use super::Simd;

/// Proof that the CPU runs AVX2, FMA and F16C; made only by [`Avx2::new`].
#[derive(Clone, Copy)]
pub struct Avx2(());

impl Avx2 {
    /// The token: the proof that code holding it may use avx2, fma and f16c.
    ///
    /// # Safety
    /// Safe to call only from code compiled with these target features; any other caller
    /// must have checked that the CPU supports them (see `simd::dispatch`).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn new() -> Avx2 {
        Avx2(())
    }
}

/// Call a value intrinsic that needs the token's features.
macro_rules! tf {
    ($e:expr) => {
        // SAFETY: an `Avx2` token exists only where avx2, fma and f16c are available
        // (`Avx2::new` is a target_feature function), and the intrinsic takes no pointer.
        unsafe { $e }
    };
}

/// Mask of the first `n` lanes (n <= 8), as lane-wide all-ones integers.
#[inline(always)]
fn first_lanes(n: usize) -> __m256i {
    tf!(_mm256_cmpgt_epi32(
        _mm256_set1_epi32(n as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
    ))
}

impl Simd for Avx2 {
    const LANES: usize = 8;
    type F = __m256;
    type M = __m256;
    type I = __m256i;

    #[inline(always)]
    fn splat(self, v: f32) -> __m256 {
        tf!(_mm256_set1_ps(v))
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> __m256 {
        // SAFETY: the caller guarantees 8 readable f32; the token guarantees AVX.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: __m256) {
        // SAFETY: the caller guarantees 8 writable f32; the token guarantees AVX.
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_part(self, p: *const f32, n: usize, fill: f32) -> __m256 {
        let m = first_lanes(n);
        // SAFETY: masked-off lanes are not accessed (and cannot fault); the caller
        // guarantees the first n are readable.
        let v = unsafe { _mm256_maskload_ps(p, m) };
        tf!(_mm256_blendv_ps(
            _mm256_set1_ps(fill),
            v,
            _mm256_castsi256_ps(m)
        ))
    }
    #[inline(always)]
    unsafe fn store_part(self, p: *mut f32, n: usize, v: __m256) {
        // SAFETY: only the first n lanes, which the caller guarantees writable, are stored.
        unsafe { _mm256_maskstore_ps(p, first_lanes(n), v) }
    }

    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_add_ps(a, b))
    }
    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_sub_ps(a, b))
    }
    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_mul_ps(a, b))
    }
    #[inline(always)]
    fn div(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_div_ps(a, b))
    }
    #[inline(always)]
    fn mul_add(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        tf!(_mm256_fmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn min(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_min_ps(a, b))
    }
    #[inline(always)]
    fn max(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_max_ps(a, b))
    }
    #[inline(always)]
    fn abs(self, a: __m256) -> __m256 {
        tf!(_mm256_and_ps(
            a,
            _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX))
        ))
    }
    #[inline(always)]
    fn round(self, a: __m256) -> __m256 {
        tf!(_mm256_round_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a))
    }

    #[inline(always)]
    fn lt(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_cmp_ps::<_CMP_LT_OQ>(a, b))
    }
    #[inline(always)]
    fn le(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_cmp_ps::<_CMP_LE_OQ>(a, b))
    }
    #[inline(always)]
    fn gt(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_cmp_ps::<_CMP_GT_OQ>(a, b))
    }
    #[inline(always)]
    fn is_nan(self, a: __m256) -> __m256 {
        tf!(_mm256_cmp_ps::<_CMP_UNORD_Q>(a, a))
    }
    #[inline(always)]
    fn m_or(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_or_ps(a, b))
    }
    #[inline(always)]
    fn first_mask(self, n: usize) -> __m256 {
        tf!(_mm256_castsi256_ps(first_lanes(n)))
    }
    #[inline(always)]
    fn m_any(self, m: __m256) -> bool {
        tf!(_mm256_movemask_ps(m)) != 0
    }
    #[inline(always)]
    fn m_all(self, m: __m256) -> bool {
        tf!(_mm256_movemask_ps(m)) == 0xff
    }
    #[inline(always)]
    fn select(self, m: __m256, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_blendv_ps(b, a, m))
    }
    #[inline(always)]
    fn select_i(self, m: __m256, a: __m256i, b: __m256i) -> __m256i {
        tf!(_mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(b),
            _mm256_castsi256_ps(a),
            m
        )))
    }

    #[inline(always)]
    fn i_splat(self, v: i32) -> __m256i {
        tf!(_mm256_set1_epi32(v))
    }
    #[inline(always)]
    fn i_iota(self) -> __m256i {
        tf!(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
    }
    #[inline(always)]
    fn to_i32(self, a: __m256) -> __m256i {
        tf!(_mm256_cvtps_epi32(a))
    }
    #[inline(always)]
    fn i_add(self, a: __m256i, b: __m256i) -> __m256i {
        tf!(_mm256_add_epi32(a, b))
    }
    #[inline(always)]
    fn i_sub(self, a: __m256i, b: __m256i) -> __m256i {
        tf!(_mm256_sub_epi32(a, b))
    }
    #[inline(always)]
    fn i_shl23(self, a: __m256i) -> __m256i {
        tf!(_mm256_slli_epi32::<23>(a))
    }
    #[inline(always)]
    fn i_sar1(self, a: __m256i) -> __m256i {
        tf!(_mm256_srai_epi32::<1>(a))
    }
    #[inline(always)]
    fn i_as_f(self, a: __m256i) -> __m256 {
        tf!(_mm256_castsi256_ps(a))
    }
    #[inline(always)]
    unsafe fn store_i(self, p: *mut i32, v: __m256i) {
        // SAFETY: the caller guarantees 8 writable i32.
        unsafe { _mm256_storeu_si256(p.cast(), v) }
    }

    #[inline(always)]
    fn reduce_add(self, a: __m256) -> f32 {
        // (lane i + lane i+4), then (+ i+2), then (+ i+1).
        tf!({
            let h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_add_ss(h, _mm_movehdup_ps(h));
            _mm_cvtss_f32(h)
        })
    }
    #[inline(always)]
    fn reduce_max(self, a: __m256) -> f32 {
        tf!({
            let h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
            let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_max_ss(h, _mm_movehdup_ps(h));
            _mm_cvtss_f32(h)
        })
    }

    #[inline(always)]
    unsafe fn load_f16(self, p: *const u16) -> __m256 {
        // SAFETY: the caller guarantees 8 readable u16 (16 bytes).
        let h = unsafe { _mm_loadu_si128(p.cast()) };
        tf!(_mm256_cvtph_ps(h))
    }
    #[inline(always)]
    unsafe fn load_bf16(self, p: *const u16) -> __m256 {
        // SAFETY: the caller guarantees 8 readable u16.
        let h = unsafe { _mm_loadu_si128(p.cast()) };
        tf!({
            let v = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)));
            let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v);
            let quiet = _mm256_castsi256_ps(_mm256_set1_epi32(0x0040_0000));
            _mm256_or_ps(v, _mm256_and_ps(nan, quiet))
        })
    }
    #[inline(always)]
    unsafe fn load_i8(self, p: *const i8) -> __m256 {
        // SAFETY: the caller guarantees 8 readable bytes; this loads exactly 8.
        let q = unsafe { _mm_loadl_epi64(p.cast()) };
        tf!(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)))
    }
    #[inline(always)]
    unsafe fn add_widen_f64(self, acc: *mut f64, x: *const f32) {
        // SAFETY: the caller guarantees 8 f64 at `acc` and 8 f32 at `x`.
        unsafe {
            let v = _mm256_loadu_ps(x);
            let lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
            let hi = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v));
            _mm256_storeu_pd(acc, _mm256_add_pd(_mm256_loadu_pd(acc), lo));
            _mm256_storeu_pd(acc.add(4), _mm256_add_pd(_mm256_loadu_pd(acc.add(4)), hi));
        }
    }
}
