//! AVX2 + FMA: panels of 16 keys, packed with 8 x 8 transposes (the packers of AVX-512 too).

use std::arch::x86_64::*;

use super::super::matmul::avx2::transpose8;
use super::super::simd::avx2::Avx2;
use super::entries;

entries!(Avx2, "avx2,fma,f16c");

/// `Packers` for an x86 token whose panels are `$nr` keys: 8 x 8 transposes, PREFETCHT0.
macro_rules! x86_packers {
    ($token:ty, $nr:literal) => {
        impl super::Packers for $token {
            #[inline(always)]
            unsafe fn pack_k(self, rows: &[&[f32]], d: usize, panel: *mut f32) {
                // SAFETY: the token proves AVX2 (AVX-512 F implies it); the rest is the
                // forwarded contract.
                unsafe { super::avx2::pack_rows::<$nr>(rows, d, panel) }
            }
            #[inline(always)]
            unsafe fn pack_q(self, rows: &[&[f32]], d: usize, qp: *mut f32) {
                // SAFETY: as in `pack_k`.
                unsafe { super::avx2::pack_rows::<{ super::QP }>(rows, d, qp) }
            }
            #[inline(always)]
            fn prefetch(self, x: &f32) {
                super::avx2::prefetch(x)
            }
        }
    };
}
pub(super) use x86_packers;

x86_packers!(Avx2, 16);

/// `PREFETCHT0` of the line holding `x`.
#[inline(always)]
pub(super) fn prefetch(x: &f32) {
    // SAFETY: PREFETCHT0 (SSE, baseline on x86-64) never faults.
    unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const f32).cast()) }
}

/// Transposes up to `W` rows of `d` values into `panel[t * W + c] = rows[c][t]` (0 in the
/// columns `c >= rows.len()`), in 8 x 8 blocks: `Packers::pack_k` (`W = NR`) and `pack_q`
/// (`W = QP`) on AVX2 and AVX-512.
///
/// # Safety
/// The CPU runs AVX2; `W` is a multiple of 8, `rows.len() <= W`, every row holds at least `d`
/// values and `panel` is writable for `d * W`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack_rows<const W: usize>(rows: &[&[f32]], d: usize, panel: *mut f32) {
    let d8 = d / 8 * 8;
    for g in (0..W).step_by(8) {
        let group = rows.get(g..).unwrap_or(&[]);
        for t0 in (0..d8).step_by(8) {
            let mut r = [_mm256_setzero_ps(); 8];
            for (ri, row) in r.iter_mut().zip(group) {
                // SAFETY: t0 + 8 <= d <= row.len() (contract).
                *ri = unsafe { _mm256_loadu_ps(row.as_ptr().add(t0)) };
            }
            for (t, col) in transpose8(r).into_iter().enumerate() {
                // SAFETY: (t0 + t) * W + g + 8 <= d * W (contract).
                unsafe { _mm256_storeu_ps(panel.add((t0 + t) * W + g), col) };
            }
        }
        for t in d8..d {
            for i in 0..8 {
                // SAFETY: t * W + g + i < d * W (contract).
                unsafe { *panel.add(t * W + g + i) = group.get(i).map_or(0.0, |row| row[t]) };
            }
        }
    }
}
