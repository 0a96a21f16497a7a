//! AVX-512: panels of 32 keys, packed with the AVX2 8 x 8 transposes.

use super::super::simd::avx512::Avx512;
use super::avx2::{pack_rows, prefetch};
use super::{Packers, QP, entries};

entries!(Avx512, "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c");

impl Packers for Avx512 {
    #[inline(always)]
    unsafe fn pack_k(self, rows: &[&[f32]], d: usize, panel: *mut f32) {
        // SAFETY: the token proves AVX-512 F, which implies AVX2; the rest is the forwarded
        // contract.
        unsafe { pack_rows::<32>(rows, d, panel) }
    }
    #[inline(always)]
    unsafe fn pack_q(self, rows: &[&[f32]], d: usize, qp: *mut f32) {
        // SAFETY: as in `pack_k`.
        unsafe { pack_rows::<QP>(rows, d, qp) }
    }
    #[inline(always)]
    fn prefetch(self, x: &f32) {
        prefetch(x)
    }
}
