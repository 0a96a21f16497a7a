//! NEON: an 8 x 12 f32 micro-kernel (24 q accumulators; A's 8 values sit in two q registers
//! and feed `fmla` by lane, so no broadcasts are needed). Packing uses the portable packers,
//! which widen f16/bf16/q8_0 exactly.

use std::arch::aarch64::*;

use super::driver::{BSrc, Epilogue, MicroKernel};
use super::scalar;
use crate::cpu::Isa;

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

    unsafe fn pack_a(
        &self,
        a: &[f32],
        lda: usize,
        i0: usize,
        rows: usize,
        k0: usize,
        kc: usize,
        out: *mut f32,
    ) {
        // SAFETY: the caller provides kc * MR elements.
        let out = unsafe { std::slice::from_raw_parts_mut(out, kc * MR) };
        scalar::pack_a(a, lda, i0, rows, k0, kc, MR, out);
    }

    unsafe fn pack_b(&self, b: &BSrc, j0: usize, cols: usize, k0: usize, kc: usize, out: *mut f32) {
        // SAFETY: the caller provides kc * NR elements.
        let out = unsafe { std::slice::from_raw_parts_mut(out, kc * NR) };
        scalar::pack_b_from(b, j0, cols, k0, 0, kc, NR, out);
    }

    unsafe fn kernel(
        &self,
        kcu: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        ep: &Epilogue,
    ) {
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
    if ep.accumulate {
        for (i, row) in acc.iter_mut().enumerate() {
            for (h, v) in row.iter_mut().enumerate() {
                // SAFETY: c is valid for an 8 x 12 tile with row stride ldc.
                *v = vaddq_f32(unsafe { vld1q_f32(c.add(i * ldc + h * 4)) }, *v);
            }
        }
    }
    if ep.finish {
        let alpha = vdupq_n_f32(ep.alpha);
        for row in acc.iter_mut() {
            for (h, v) in row.iter_mut().enumerate() {
                *v = vmulq_f32(*v, alpha);
                if !ep.bias.is_null() {
                    // SAFETY: a non-null bias holds 12 values.
                    *v = vaddq_f32(*v, unsafe { vld1q_f32(ep.bias.add(h * 4)) });
                }
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (h, v) in row.iter().enumerate() {
            // SAFETY: as above.
            unsafe { vst1q_f32(c.add(i * ldc + h * 4), *v) };
        }
    }
}
