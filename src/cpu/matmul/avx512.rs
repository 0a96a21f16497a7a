//! AVX-512F: a 12 x 32 f32 micro-kernel (24 zmm accumulators, 2 B vectors, 1 broadcast).
//! Structurally the AVX2 kernel with twice the width and twice the rows; packing reuses the
//! AVX2 transposing packers (every AVX-512F CPU has AVX2), which are tested on AVX2 machines.

use std::arch::x86_64::*;

use super::avx2;
use super::driver::{ABlock, BSrc, Epilogue, MicroKernel, Panels};
use crate::cpu::Isa;
use crate::cpu::simd::avx512::Avx512 as Avx512Simd;

/// The AVX-512 kernel; exists only once AVX-512F/BW/DQ/VL, FMA, F16C and AVX2 were detected.
pub(super) struct Avx512(());

impl Avx512 {
    pub(super) fn new() -> Option<Avx512> {
        (Isa::Avx512.is_supported() && Isa::Avx2.is_supported()).then_some(Avx512(()))
    }
}

const MR: usize = 12;
const NR: usize = 32;

// SAFETY: `Avx512` is only built after detection (see `new`).
unsafe impl MicroKernel for Avx512 {
    type P = f32;
    const MR: usize = MR;
    const NR: usize = NR;
    const KU: usize = 1;
    // A 32 x 128 B micro-panel is 16 KiB, half of a 32 KiB (Zen 4) or 48 KiB (Intel) L1d,
    // next to the streamed 6 KiB A micro-panel.
    const KC: usize = 128;
    const MC: usize = 204;
    const NC: usize = 3072;

    unsafe fn pack_a(&self, blk: ABlock<'_>, out: *mut f32) {
        let (a, lda, i0, rows, k0, kc) = blk.parts();
        // SAFETY: AVX2+FMA+F16C were detected (self exists); the contract is forwarded.
        unsafe { avx2::pack_a::<MR>(a, lda, i0, rows, k0, kc, out) }
    }

    unsafe fn pack_b(&self, b: &BSrc, j0: usize, cols: usize, k0: usize, kc: usize, out: *mut f32) {
        // SAFETY: as above.
        unsafe { avx2::pack_b::<NR>(b, j0, cols, k0, kc, out) }
    }

    unsafe fn kernel(&self, ab: Panels<f32>, c: *mut f32, ldc: usize, ep: &Epilogue) {
        let (kcu, a, b) = (ab.kcu, ab.a, ab.b);
        // SAFETY: AVX-512F was detected (self exists); the contract is forwarded.
        unsafe { kernel_12x32(kcu, a, b, c, ldc, ep) }
    }
}

/// `C[12, 32] = epilogue(C + A . B)`: per k unit two aligned B loads, twelve broadcasts
/// of A and 24 FMAs.
///
/// # Safety
/// As `MicroKernel::kernel`; `b` is 64-byte aligned.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
unsafe fn kernel_12x32(
    kcu: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    ep: &Epilogue,
) {
    let mut acc = start(c, ldc, ep);
    let (mut pa, mut pb) = (a, b);
    for _ in 0..kcu {
        // SAFETY: kcu units of 12 (A) and 32 (B, aligned) floats.
        unsafe {
            let b0 = _mm512_load_ps(pb);
            let b1 = _mm512_load_ps(pb.add(16));
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm512_set1_ps(*pa.add(i));
                row[0] = _mm512_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm512_fmadd_ps(ai, b1, row[1]);
            }
            pa = pa.add(MR);
            pb = pb.add(NR);
        }
    }
    // SAFETY: forwarded from this function's contract.
    unsafe { finish_store(&mut acc, c, ldc, ep) };
}

/// The shared epilogue of the 12 x 32 kernels ([`Epilogue::store_tile`] on AVX-512).
///
/// # Safety
/// `c` is valid for a 12 x 32 tile with row stride `ldc`; `ep.bias` is null or holds 32
/// values; AVX-512F is available.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn finish_store(
    acc: &mut [[__m512; 2]; MR],
    c: *mut f32,
    ldc: usize,
    ep: &Epilogue,
) {
    // SAFETY: forwarded from this function's contract.
    unsafe { ep.store_tile::<_, MR, 2>(Avx512Simd::new(), acc, c, ldc) };
}

/// Zeroed accumulators; when accumulating, prefetch the C tile, which `finish_store` adds
/// after the k loop (loading it first would stall the FMA chains on memory).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) fn start(c: *const f32, ldc: usize, ep: &Epilogue) -> [[__m512; 2]; MR] {
    if ep.accumulate {
        for i in 0..MR {
            let row = c.wrapping_add(i * ldc).cast::<i8>();
            // A row of 32 floats touches at most three lines.
            _mm_prefetch::<_MM_HINT_T0>(row);
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(64));
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(NR * 4 - 1));
        }
    }
    [[_mm512_setzero_ps(); 2]; MR]
}
