//! Fast precision with bf16 weights on AVX512_BF16: `vdpbf16ps` does 32 bf16 multiply-adds
//! into 16 f32 lanes, `acc[j] += x[2p] w[j, 2p] + x[2p + 1] w[j, 2p + 1]`. The packed unit
//! is a pair of consecutive k values in one u32: `x` and `w` are both contiguous along k, so
//! a weight pair is a plain 32-bit load from the memory-mapped bf16 rows (no conversion at
//! all) and the packers are the AVX2 32-bit transposes. Activations are rounded to bf16
//! (nearest-even, `vcvtne2ps2bf16`) once per packed A block; accumulation stays f32. The
//! 12 x 32 tile, blocking and epilogue match the f32 AVX-512 kernel.

use std::arch::x86_64::*;

use super::avx2::{self, F32Rows, Rows8};
use super::avx512;
use super::driver::{ABlock, BSrc, Epilogue, MicroKernel, Panels};
use crate::cpu::{Isa, Weights};

/// The bf16 dot-product kernel; exists only once AVX-512F/BW/DQ/VL, AVX512_BF16, FMA, F16C
/// and AVX2 were detected.
pub(super) struct Avx512Bf16(());

impl Avx512Bf16 {
    pub(super) fn new() -> Option<Avx512Bf16> {
        (crate::cpu::isa::has_avx512_bf16() && Isa::Avx2.is_supported()).then_some(Avx512Bf16(()))
    }
}

const MR: usize = 12;
const NR: usize = 32;
/// k values per block: 128 pairs, so a 32-wide B micro-panel is 16 KiB as in the f32 kernel.
const KC: usize = 256;

/// bf16 rows read as u32 pairs: unit `u` of row `r` is `w[r0 + r][k0 + 2u ..= k0 + 2u + 1]`.
struct PairRows {
    ptr: *const u16,
    ld: usize,
    r0: usize,
    k0: usize,
}

impl Rows8 for PairRows {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(&self, r: usize, u: usize) -> __m256 {
        // SAFETY: the caller keeps the 16 bf16 values inside the row; the load is unaligned,
        // so the (2-byte aligned) pointer needs no 4-byte alignment.
        unsafe {
            _mm256_loadu_ps(
                self.ptr
                    .add((self.r0 + r) * self.ld + self.k0 + 2 * u)
                    .cast(),
            )
        }
    }
}

// SAFETY: `Avx512Bf16` is only built after detection (see `new`).
unsafe impl MicroKernel for Avx512Bf16 {
    type P = u32;
    const MR: usize = MR;
    const NR: usize = NR;
    const KU: usize = 2;
    const KC: usize = KC;
    const MC: usize = 204;
    const NC: usize = 3072;

    unsafe fn pack_a(&self, blk: ABlock<'_>, out: *mut u32) {
        let (a, lda, i0, rows, k0, kc) = blk.parts();
        debug_assert!(kc <= KC);
        let kcu = kc.div_ceil(2);
        // Round each row to bf16 pairs once, then transpose the pairs like f32 values.
        let mut tmp = [0u32; MR * KC / 2];
        for r in 0..rows {
            let src = &a[(i0 + r) * lda + k0..][..kc];
            // SAFETY: avx512_bf16 was detected (self exists); tmp row r has kcu slots.
            unsafe { round_row(src, tmp[r * kcu..].as_mut_ptr()) };
        }
        let vec_units = kcu / 8 * 8;
        let src = F32Rows {
            ptr: tmp.as_ptr().cast(),
            ld: kcu,
            r0: 0,
            k0: 0,
        };
        // SAFETY: AVX2 was detected; tmp holds `rows` rows of kcu units; out holds
        // kcu * MR + 8 elements.
        unsafe { avx2::pack_t::<_, MR>(&src, rows, vec_units, out.cast()) };
        // SAFETY: as above.
        let out = unsafe { std::slice::from_raw_parts_mut(out, kcu * MR) };
        for u in vec_units..kcu {
            for (r, o) in out[u * MR..(u + 1) * MR].iter_mut().enumerate() {
                *o = if r < rows { tmp[r * kcu + u] } else { 0 };
            }
        }
    }

    unsafe fn pack_b(&self, b: &BSrc, j0: usize, cols: usize, k0: usize, kc: usize, out: *mut u32) {
        let BSrc::RowsN {
            w: Weights::BF16(w),
            ld,
        } = *b
        else {
            unreachable!("the bf16 kernel is only chosen for bf16 weights");
        };
        // SAFETY: AVX2 was detected (self exists); the contract is forwarded.
        unsafe { pack_b_pairs::<NR>(w, ld, j0, cols, k0, kc, out) }
    }

    unsafe fn kernel(&self, ab: Panels<u32>, c: *mut f32, ldc: usize, ep: &Epilogue) {
        let (kcu, a, b) = (ab.kcu, ab.a, ab.b);
        // SAFETY: avx512_bf16 was detected (self exists); the contract is forwarded.
        unsafe { kernel_12x32(kcu, a, b, c, ldc, ep) }
    }
}

/// Pack columns `j0 .. j0 + cols` of bf16 weights `w[n, k]` (row stride `ld`), k range
/// `k0 .. k0 + kc`, as pairs: `out[u * S + j]` holds `w[j0 + j][k0 + 2u ..= k0 + 2u + 1]`
/// (low half first), zero-padded past `cols` and past `kc`. Needs AVX2 only.
///
/// # Safety
/// AVX2+FMA+F16C are available; the rows hold `k0 .. k0 + kc`; `out` is valid for
/// `kc.div_ceil(2) * S + 8` elements.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn pack_b_pairs<const S: usize>(
    w: &[half::bf16],
    ld: usize,
    j0: usize,
    cols: usize,
    k0: usize,
    kc: usize,
    out: *mut u32,
) {
    debug_assert!((j0 + cols - 1) * ld + k0 + kc <= w.len());
    let kcu = kc.div_ceil(2);
    // Units whose two values both lie inside k0 .. k0 + kc go through the transposer.
    let vec_units = kc / 2 / 8 * 8;
    let src = PairRows {
        ptr: w.as_ptr().cast(),
        ld,
        r0: j0,
        k0,
    };
    // SAFETY: forwarded from this function's contract.
    unsafe { avx2::pack_t::<_, S>(&src, cols, vec_units, out.cast()) };
    // SAFETY: as above.
    let out = unsafe { std::slice::from_raw_parts_mut(out, kcu * S) };
    for u in vec_units..kcu {
        for (r, o) in out[u * S..(u + 1) * S].iter_mut().enumerate() {
            let at = |l: usize| {
                if r < cols && l < kc {
                    w[(j0 + r) * ld + k0 + l].to_bits() as u32
                } else {
                    0
                }
            };
            *o = at(2 * u) | at(2 * u + 1) << 16;
        }
    }
}

/// Round `src` to bf16 (nearest-even) and store it as `src.len().div_ceil(2)` u32 pairs,
/// the last one zero-padded. The tail goes through the same instruction as the body, so a
/// value rounds the same wherever it sits.
///
/// # Safety
/// AVX-512F and AVX512_BF16 are available; `dst` is valid for `src.len().div_ceil(2)` u32.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c,avx512bf16")]
unsafe fn round_row(src: &[f32], dst: *mut u32) {
    let mut chunks = src.chunks_exact(32);
    let mut d = dst;
    for ch in &mut chunks {
        // SAFETY: 32 floats in `ch`, 16 u32 slots at d.
        unsafe {
            let lo = _mm512_loadu_ps(ch.as_ptr());
            let hi = _mm512_loadu_ps(ch.as_ptr().add(16));
            // Lanes 0..16 of the result come from the second operand.
            let pairs: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(d.cast(), pairs);
            d = d.add(16);
        }
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut pad = [0f32; 32];
        pad[..rest.len()].copy_from_slice(rest);
        let mut pairs = [0u32; 16];
        // SAFETY: as above, on local buffers.
        unsafe {
            let lo = _mm512_loadu_ps(pad.as_ptr());
            let hi = _mm512_loadu_ps(pad.as_ptr().add(16));
            let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(pairs.as_mut_ptr().cast(), v);
            std::ptr::copy_nonoverlapping(pairs.as_ptr(), d, rest.len().div_ceil(2));
        }
    }
}

/// `C[12, 32] = epilogue(C + A . B)` with bf16 pairs: per pair unit two aligned B loads,
/// twelve 32-bit broadcasts of A and 24 `vdpbf16ps`.
///
/// # Safety
/// As `MicroKernel::kernel`; `b` is 64-byte aligned.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c,avx512bf16")]
unsafe fn kernel_12x32(
    kcu: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    ep: &Epilogue,
) {
    let mut acc = avx512::start(c, ldc, ep);
    let (mut pa, mut pb) = (a, b);
    for _ in 0..kcu {
        // SAFETY: kcu units of 12 (A) and 32 (B, aligned) pairs; __m512i and __m512bh are
        // both 64 bytes of plain bits.
        unsafe {
            let b0: __m512bh = std::mem::transmute(_mm512_load_si512(pb.cast()));
            let b1: __m512bh = std::mem::transmute(_mm512_load_si512(pb.add(16).cast()));
            for (i, row) in acc.iter_mut().enumerate() {
                let ai: __m512bh = std::mem::transmute(_mm512_set1_epi32(*pa.add(i) as i32));
                row[0] = _mm512_dpbf16_ps(row[0], ai, b0);
                row[1] = _mm512_dpbf16_ps(row[1], ai, b1);
            }
            pa = pa.add(MR);
            pb = pb.add(NR);
        }
    }
    // SAFETY: forwarded from this function's contract.
    unsafe { avx512::finish_store(&mut acc, c, ldc, ep) };
}
