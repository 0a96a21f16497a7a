//! NEON: an 8 x 12 f32 micro-kernel (24 q accumulators; A's 8 values sit in two q registers
//! and feed `fmla` by lane, so no broadcasts are needed). f32 and bf16 sources are packed
//! with 4 x 4 register transposes (bf16 widened exactly by a 16-bit shift); f16 and q8_0
//! weights, and k tails, use the portable packers, which widen exactly as well.

use std::arch::aarch64::*;

use super::driver::{ABlock, BSrc, Epilogue, MicroKernel, Panels};
use super::scalar;
use crate::cpu::simd::neon::Neon as NeonSimd;
use crate::cpu::{Isa, Weights};

/// Rows of a matrix read 4 consecutive k values at a time, widened to f32.
trait Rows4 {
    /// Values `u .. u + 4` of row `r`.
    ///
    /// # Safety
    /// NEON is available and the 4 values are inside the source.
    unsafe fn load4(&self, r: usize, u: usize) -> float32x4_t;
}

/// Row-major f32 rows `r0 + r` with stride `ld`, from column `k0`.
struct F32Rows {
    ptr: *const f32,
    ld: usize,
    r0: usize,
    k0: usize,
}

impl Rows4 for F32Rows {
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn load4(&self, r: usize, u: usize) -> float32x4_t {
        // SAFETY: the caller keeps the 4 values inside the source.
        unsafe { vld1q_f32(self.ptr.add((self.r0 + r) * self.ld + self.k0 + u)) }
    }
}

struct Bf16Rows {
    ptr: *const u16,
    ld: usize,
    r0: usize,
    k0: usize,
}

impl Rows4 for Bf16Rows {
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn load4(&self, r: usize, u: usize) -> float32x4_t {
        // SAFETY: 4 bf16 (8 bytes) inside the source.
        let h = unsafe { vld1_u16(self.ptr.add((self.r0 + r) * self.ld + self.k0 + u)) };
        // bf16 is the top half of an f32: widening is exact.
        vreinterpretq_f32_u32(vshll_n_u16::<16>(h))
    }
}

/// The vector part of a transposing pack: `out[u * S + r] = src(r, u)` for `u < vec_units`
/// (a multiple of 4), zero for `rows <= r < S`; one group of 4 rows at a time, all units
/// before the next group (rows 4 KiB apart share an L1 set, as on x86).
///
/// # Safety
/// NEON is available; `out` is valid for `vec_units * S` elements; `src` holds `rows` rows
/// of `vec_units` values.
#[target_feature(enable = "neon")]
unsafe fn pack_t<L: Rows4, const S: usize>(src: &L, rows: usize, vec_units: usize, out: *mut f32) {
    const { assert!(S.is_multiple_of(4)) };
    for g in 0..S / 4 {
        for u in (0..vec_units).step_by(4) {
            let mut r = [vdupq_n_f32(0.0); 4];
            for (i, v) in r.iter_mut().enumerate() {
                if g * 4 + i < rows {
                    // SAFETY: row g*4+i exists; units u..u+4 are inside it.
                    *v = unsafe { src.load4(g * 4 + i, u) };
                }
            }
            // 4 x 4 transpose: pair up 32-bit lanes, then 64-bit halves.
            let t0 = vtrn1q_f32(r[0], r[1]);
            let t1 = vtrn2q_f32(r[0], r[1]);
            let t2 = vtrn1q_f32(r[2], r[3]);
            let t3 = vtrn2q_f32(r[2], r[3]);
            let wide = vreinterpretq_f64_f32;
            let cols = [
                vtrn1q_f64(wide(t0), wide(t2)),
                vtrn1q_f64(wide(t1), wide(t3)),
                vtrn2q_f64(wide(t0), wide(t2)),
                vtrn2q_f64(wide(t1), wide(t3)),
            ];
            for (t, c) in cols.into_iter().enumerate() {
                // SAFETY: unit u+t, lanes g*4..g*4+4, inside the panel.
                unsafe { vst1q_f32(out.add((u + t) * S + g * 4), vreinterpretq_f32_f64(c)) };
            }
        }
    }
}

/// The NEON kernel; exists only once NEON was detected.
pub(super) struct Neon(());

impl Neon {
    pub(super) fn new() -> Option<Neon> {
        Isa::Neon.is_supported().then_some(Neon(()))
    }
}

const MR: usize = 8;
const NR: usize = 12;

// SAFETY: `Neon` is only built after detection (see `new`).
unsafe impl MicroKernel for Neon {
    type P = f32;
    const MR: usize = MR;
    const NR: usize = NR;
    const KU: usize = 1;
    // A 12 x 256 B micro-panel is 12 KiB (64 KiB L1d on most Arm server cores).
    const KC: usize = 256;
    const MC: usize = 208;
    const NC: usize = 3072;

    unsafe fn pack_a(&self, blk: ABlock<'_>, out: *mut f32) {
        let (a, lda, i0, rows, k0, kc) = blk.parts();
        debug_assert!((i0 + rows - 1) * lda + k0 + kc <= a.len());
        let vec_units = kc / 4 * 4;
        let src = F32Rows {
            ptr: a.as_ptr(),
            ld: lda,
            r0: i0,
            k0,
        };
        // SAFETY: NEON was detected (self exists); rows i0..i0+rows hold k0..k0+kc, and
        // out holds kc * MR elements.
        unsafe { pack_t::<_, MR>(&src, rows, vec_units, out) };
        // SAFETY: as above.
        let out = unsafe { std::slice::from_raw_parts_mut(out, kc * MR) };
        for u in vec_units..kc {
            for (r, o) in out[u * MR..(u + 1) * MR].iter_mut().enumerate() {
                *o = if r < rows {
                    a[(i0 + r) * lda + k0 + u]
                } else {
                    0.0
                };
            }
        }
    }

    unsafe fn pack_b(&self, b: &BSrc, j0: usize, cols: usize, k0: usize, kc: usize, out: *mut f32) {
        let vec_units = match *b {
            BSrc::RowsN {
                w: Weights::F32(w),
                ld,
            } => {
                debug_assert!((j0 + cols - 1) * ld + k0 + kc <= w.len());
                let src = F32Rows {
                    ptr: w.as_ptr(),
                    ld,
                    r0: j0,
                    k0,
                };
                // SAFETY: NEON was detected; rows j0..j0+cols hold k0..k0+kc; out holds
                // kc * NR elements.
                unsafe { pack_t::<_, NR>(&src, cols, kc / 4 * 4, out) };
                kc / 4 * 4
            }
            BSrc::RowsN {
                w: Weights::BF16(w),
                ld,
            } => {
                debug_assert!((j0 + cols - 1) * ld + k0 + kc <= w.len());
                let src = Bf16Rows {
                    ptr: w.as_ptr().cast(),
                    ld,
                    r0: j0,
                    k0,
                };
                // SAFETY: as above.
                unsafe { pack_t::<_, NR>(&src, cols, kc / 4 * 4, out) };
                kc / 4 * 4
            }
            _ => 0,
        };
        // SAFETY: the caller provides kc * NR elements.
        let out = unsafe { std::slice::from_raw_parts_mut(out, kc * NR) };
        scalar::pack_b_from(b, j0, cols, k0, vec_units, kc, NR, out);
    }

    unsafe fn kernel(&self, ab: Panels<f32>, c: *mut f32, ldc: usize, ep: &Epilogue) {
        let (kcu, a, b) = (ab.kcu, ab.a, ab.b);
        // SAFETY: NEON was detected (self exists); the contract is forwarded.
        unsafe { kernel_8x12(kcu, a, b, c, ldc, ep) }
    }
}

/// `C[8, 12] = epilogue(C + A . B)`: per k unit three B loads, two A loads, 24 `fmla`.
///
/// # Safety
/// As `MicroKernel::kernel`.
#[target_feature(enable = "neon")]
unsafe fn kernel_8x12(
    kcu: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    ep: &Epilogue,
) {
    // Accumulators start at zero and C is added after the k loop, as on x86.
    let mut acc = [[vdupq_n_f32(0.0); 3]; MR];
    let (mut pa, mut pb) = (a, b);
    for _ in 0..kcu {
        // SAFETY: kcu units of 8 (A) and 12 (B) floats.
        let (a0, a1, bv) = unsafe {
            (
                vld1q_f32(pa),
                vld1q_f32(pa.add(4)),
                [vld1q_f32(pb), vld1q_f32(pb.add(4)), vld1q_f32(pb.add(8))],
            )
        };
        for h in 0..3 {
            acc[0][h] = vfmaq_laneq_f32::<0>(acc[0][h], bv[h], a0);
            acc[1][h] = vfmaq_laneq_f32::<1>(acc[1][h], bv[h], a0);
            acc[2][h] = vfmaq_laneq_f32::<2>(acc[2][h], bv[h], a0);
            acc[3][h] = vfmaq_laneq_f32::<3>(acc[3][h], bv[h], a0);
            acc[4][h] = vfmaq_laneq_f32::<0>(acc[4][h], bv[h], a1);
            acc[5][h] = vfmaq_laneq_f32::<1>(acc[5][h], bv[h], a1);
            acc[6][h] = vfmaq_laneq_f32::<2>(acc[6][h], bv[h], a1);
            acc[7][h] = vfmaq_laneq_f32::<3>(acc[7][h], bv[h], a1);
        }
        // SAFETY: still inside the panels (advanced once per unit).
        unsafe {
            pa = pa.add(MR);
            pb = pb.add(NR);
        }
    }
    // SAFETY: forwarded from this function's contract.
    unsafe { ep.store_tile::<_, MR, 3>(NeonSimd::new(), &mut acc, c, ldc) };
}
