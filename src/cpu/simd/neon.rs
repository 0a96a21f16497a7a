//! [`Simd`] for aarch64 Advanced SIMD: 4 f32 lanes in a `float32x4_t`, masks in
//! `uint32x4_t`. `min`/`max` are built from compare + select so they follow the x86 rule
//! the shared code is written against (NEON's `fmin`/`fmax` propagate NaN differently).

use std::arch::aarch64::*;

use super::Simd;

/// Proof that the CPU runs NEON; made only by [`Neon::new`].
#[derive(Clone, Copy)]
pub struct Neon(());

impl Neon {
    /// The token: the proof that code holding it may use NEON.
    ///
    /// # Safety
    /// Safe to call only from code compiled with this target feature; any other caller
    /// must have checked that the CPU supports it (see `simd::dispatch`).
    #[target_feature(enable = "neon")]
    pub fn new() -> Neon {
        Neon(())
    }
}

/// Call a value intrinsic that needs the token's features.
macro_rules! tf {
    ($e:expr) => {
        // SAFETY: a `Neon` token exists only where NEON is available (`Neon::new` is a
        // target_feature function), and the intrinsic takes no pointer.
        unsafe { $e }
    };
}

impl Simd for Neon {
    const LANES: usize = 4;
    type F = float32x4_t;
    type M = uint32x4_t;
    type I = int32x4_t;

    #[inline(always)]
    fn splat(self, v: f32) -> float32x4_t {
        tf!(vdupq_n_f32(v))
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> float32x4_t {
        // SAFETY: the caller guarantees 4 readable f32.
        unsafe { vld1q_f32(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: float32x4_t) {
        // SAFETY: the caller guarantees 4 writable f32.
        unsafe { vst1q_f32(p, v) }
    }
    #[inline(always)]
    unsafe fn load_part(self, p: *const f32, n: usize, fill: f32) -> float32x4_t {
        let mut buf = [fill; 4];
        // SAFETY: the caller guarantees n < 4 readable f32; `buf` holds 4.
        unsafe {
            std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
            vld1q_f32(buf.as_ptr())
        }
    }
    #[inline(always)]
    unsafe fn store_part(self, p: *mut f32, n: usize, v: float32x4_t) {
        let mut buf = [0f32; 4];
        // SAFETY: `buf` holds 4 f32; the caller guarantees n < 4 writable f32 at `p`.
        unsafe {
            vst1q_f32(buf.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
        }
    }

    #[inline(always)]
    fn add(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        tf!(vaddq_f32(a, b))
    }
    #[inline(always)]
    fn sub(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        tf!(vsubq_f32(a, b))
    }
    #[inline(always)]
    fn mul(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        tf!(vmulq_f32(a, b))
    }
    #[inline(always)]
    fn div(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        tf!(vdivq_f32(a, b))
    }
    #[inline(always)]
    fn mul_add(self, a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
        // vfmaq_f32(c, a, b) = c + a * b, rounded once.
        tf!(vfmaq_f32(c, a, b))
    }
    #[inline(always)]
    fn min(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        tf!(vbslq_f32(vcltq_f32(a, b), a, b))
    }
    #[inline(always)]
    fn max(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        tf!(vbslq_f32(vcgtq_f32(a, b), a, b))
    }
    #[inline(always)]
    fn abs(self, a: float32x4_t) -> float32x4_t {
        tf!(vabsq_f32(a))
    }
    #[inline(always)]
    fn round(self, a: float32x4_t) -> float32x4_t {
        tf!(vrndnq_f32(a))
    }

    #[inline(always)]
    fn lt(self, a: float32x4_t, b: float32x4_t) -> uint32x4_t {
        tf!(vcltq_f32(a, b))
    }
    #[inline(always)]
    fn le(self, a: float32x4_t, b: float32x4_t) -> uint32x4_t {
        tf!(vcleq_f32(a, b))
    }
    #[inline(always)]
    fn gt(self, a: float32x4_t, b: float32x4_t) -> uint32x4_t {
        tf!(vcgtq_f32(a, b))
    }
    #[inline(always)]
    fn is_nan(self, a: float32x4_t) -> uint32x4_t {
        tf!(vmvnq_u32(vceqq_f32(a, a)))
    }
    #[inline(always)]
    fn m_or(self, a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        tf!(vorrq_u32(a, b))
    }
    #[inline(always)]
    fn first_mask(self, n: usize) -> uint32x4_t {
        let iota = [0u32, 1, 2, 3];
        // SAFETY: `iota` holds 4 u32.
        let i = unsafe { vld1q_u32(iota.as_ptr()) };
        tf!(vcltq_u32(i, vdupq_n_u32(n as u32)))
    }
    #[inline(always)]
    fn m_any(self, m: uint32x4_t) -> bool {
        tf!(vmaxvq_u32(m)) != 0
    }
    #[inline(always)]
    fn m_all(self, m: uint32x4_t) -> bool {
        tf!(vminvq_u32(m)) != 0
    }
    #[inline(always)]
    fn select(self, m: uint32x4_t, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        tf!(vbslq_f32(m, a, b))
    }
    #[inline(always)]
    fn select_i(self, m: uint32x4_t, a: int32x4_t, b: int32x4_t) -> int32x4_t {
        tf!(vbslq_s32(m, a, b))
    }

    #[inline(always)]
    fn i_splat(self, v: i32) -> int32x4_t {
        tf!(vdupq_n_s32(v))
    }
    #[inline(always)]
    fn i_iota(self) -> int32x4_t {
        let v = [0i32, 1, 2, 3];
        // SAFETY: `v` holds 4 i32.
        unsafe { vld1q_s32(v.as_ptr()) }
    }
    #[inline(always)]
    fn to_i32(self, a: float32x4_t) -> int32x4_t {
        tf!(vcvtnq_s32_f32(a))
    }
    #[inline(always)]
    fn i_add(self, a: int32x4_t, b: int32x4_t) -> int32x4_t {
        tf!(vaddq_s32(a, b))
    }
    #[inline(always)]
    fn i_sub(self, a: int32x4_t, b: int32x4_t) -> int32x4_t {
        tf!(vsubq_s32(a, b))
    }
    #[inline(always)]
    fn i_shl23(self, a: int32x4_t) -> int32x4_t {
        tf!(vshlq_n_s32::<23>(a))
    }
    #[inline(always)]
    fn i_sar1(self, a: int32x4_t) -> int32x4_t {
        tf!(vshrq_n_s32::<1>(a))
    }
    #[inline(always)]
    fn i_as_f(self, a: int32x4_t) -> float32x4_t {
        tf!(vreinterpretq_f32_s32(a))
    }
    #[inline(always)]
    unsafe fn store_i(self, p: *mut i32, v: int32x4_t) {
        // SAFETY: the caller guarantees 4 writable i32.
        unsafe { vst1q_s32(p, v) }
    }

    #[inline(always)]
    fn reduce_add(self, a: float32x4_t) -> f32 {
        // (lane 0 + lane 2) + (lane 1 + lane 3).
        tf!(vpadds_f32(vadd_f32(vget_low_f32(a), vget_high_f32(a))))
    }
    #[inline(always)]
    fn reduce_max(self, a: float32x4_t) -> f32 {
        tf!(vmaxvq_f32(a))
    }

    #[inline(always)]
    unsafe fn load_f16(self, p: *const u16) -> float32x4_t {
        // SAFETY: the caller guarantees 4 readable u16.
        let h = unsafe { vld1_u16(p) };
        let r: float32x4_t;
        // FCVTL (half to single) is base ARMv8 Advanced SIMD (FEAT_FP16 is only needed for
        // half-precision arithmetic); Rust has no stable intrinsic for it because `f16`
        // vectors are unstable, hence the instruction itself.
        // SAFETY: a register-to-register conversion; no memory, stack or flags touched.
        unsafe {
            std::arch::asm!(
                "fcvtl {r:v}.4s, {h:v}.4h",
                r = out(vreg) r,
                h = in(vreg) h,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        r
    }
    #[inline(always)]
    unsafe fn load_bf16(self, p: *const u16) -> float32x4_t {
        // SAFETY: the caller guarantees 4 readable u16.
        let h = unsafe { vld1_u16(p) };
        tf!({
            let v = vshll_n_u16::<16>(h);
            let f = vreinterpretq_f32_u32(v);
            let nan = vmvnq_u32(vceqq_f32(f, f));
            vreinterpretq_f32_u32(vorrq_u32(v, vandq_u32(nan, vdupq_n_u32(0x0040_0000))))
        })
    }
    #[inline(always)]
    unsafe fn load_i8(self, p: *const i8) -> float32x4_t {
        // SAFETY: the caller guarantees 4 readable bytes; exactly 4 are read.
        let w = unsafe { p.cast::<u32>().read_unaligned() };
        tf!(vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(
            vcreate_s8(w as u64)
        )))))
    }
    #[inline(always)]
    unsafe fn add_widen_f64(self, acc: *mut f64, x: *const f32) {
        // SAFETY: the caller guarantees 4 f64 at `acc` and 4 f32 at `x`.
        unsafe {
            let v = vld1q_f32(x);
            let lo = vcvt_f64_f32(vget_low_f32(v));
            let hi = vcvt_high_f64_f32(v);
            vst1q_f64(acc, vaddq_f64(vld1q_f64(acc), lo));
            vst1q_f64(acc.add(2), vaddq_f64(vld1q_f64(acc.add(2)), hi));
        }
    }
}
