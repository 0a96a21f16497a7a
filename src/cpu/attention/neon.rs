//! NEON: panels of 8 keys, packed with 4 x 4 transposes.

use std::arch::aarch64::*;

use super::super::simd::neon::Neon;
use super::{Packers, entries};

entries!(Neon, "neon");

impl Packers for Neon {
    #[inline(always)]
    unsafe fn pack_k(self, rows: &[&[f32]], d: usize, panel: *mut f32) {
        // SAFETY: the token proves NEON; the rest is the forwarded contract (NR = QP = 8).
        unsafe { pack_rows(rows, d, panel) }
    }
    #[inline(always)]
    unsafe fn pack_q(self, rows: &[&[f32]], d: usize, qp: *mut f32) {
        // SAFETY: as in `pack_k`.
        unsafe { pack_rows(rows, d, qp) }
    }
    #[inline(always)]
    fn prefetch(self, x: &f32) {
        // SAFETY: PRFM is a hint: it never faults and changes no architectural state.
        unsafe {
            std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) x as *const f32, options(nostack, readonly, preserves_flags))
        }
    }
}

/// Transposes up to 8 rows of `d` values into `panel[t * 8 + c] = rows[c][t]` (0 in the
/// columns `c >= rows.len()`), in 4 x 4 blocks.
///
/// # Safety
/// The CPU runs NEON; `rows.len() <= 8`, every row holds at least `d` values and `panel` is
/// writable for `d * 8`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn pack_rows(rows: &[&[f32]], d: usize, panel: *mut f32) {
    let d4 = d / 4 * 4;
    for g in (0..8).step_by(4) {
        let group = rows.get(g..).unwrap_or(&[]);
        for t0 in (0..d4).step_by(4) {
            let mut r = [vdupq_n_f32(0.0); 4];
            for (ri, row) in r.iter_mut().zip(group) {
                // SAFETY: t0 + 4 <= d <= row.len() (contract).
                *ri = unsafe { vld1q_f32(row.as_ptr().add(t0)) };
            }
            let a = vtrnq_f32(r[0], r[1]);
            let b = vtrnq_f32(r[2], r[3]);
            let cols = [
                vcombine_f32(vget_low_f32(a.0), vget_low_f32(b.0)),
                vcombine_f32(vget_low_f32(a.1), vget_low_f32(b.1)),
                vcombine_f32(vget_high_f32(a.0), vget_high_f32(b.0)),
                vcombine_f32(vget_high_f32(a.1), vget_high_f32(b.1)),
            ];
            for (t, col) in cols.into_iter().enumerate() {
                // SAFETY: (t0 + t) * 8 + g + 4 <= d * 8 (contract).
                unsafe { vst1q_f32(panel.add((t0 + t) * 8 + g), col) };
            }
        }
        for t in d4..d {
            for i in 0..4 {
                // SAFETY: t * 8 + g + i < d * 8 (contract).
                unsafe { *panel.add(t * 8 + g + i) = group.get(i).map_or(0.0, |row| row[t]) };
            }
        }
    }
}
