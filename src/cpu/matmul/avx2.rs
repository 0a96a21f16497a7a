//! AVX2 + FMA: a 6 x 16 micro-kernel (12 ymm accumulators, BLIS's Haswell shape) and the
//! transposing packers, which the AVX-512 kernels reuse (AVX-512F implies AVX2).

use std::arch::x86_64::*;

use super::driver::{ABlock, BSrc, Epilogue, MicroKernel, Panels};
use super::scalar;
use crate::cpu::simd::avx2::Avx2 as Avx2Simd;
use crate::cpu::{Isa, Weights};

/// Rows of a matrix read 8 consecutive k units at a time (one unit is one value, or for
/// the bf16 pair packers one `u32` holding two bf16, moved as raw bits).
pub(super) trait Rows8 {
    /// Units `u .. u + 8` of row `r`, widened to f32 (or raw 32-bit units).
    ///
    /// # Safety
    /// AVX2+F16C are available, and the 8 units are inside the source.
    unsafe fn load8(&self, r: usize, u: usize) -> __m256;
}

/// Row-major f32 rows `r0 + r` with stride `ld`, from column `k0` (also raw u32 units).
pub(super) struct F32Rows {
    pub ptr: *const f32,
    pub ld: usize,
    pub r0: usize,
    pub k0: usize,
}

impl Rows8 for F32Rows {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(&self, r: usize, u: usize) -> __m256 {
        // SAFETY: the caller keeps the 8 units inside the source.
        unsafe { _mm256_loadu_ps(self.ptr.add((self.r0 + r) * self.ld + self.k0 + u)) }
    }
}

struct F16Rows {
    ptr: *const u16,
    ld: usize,
    r0: usize,
    k0: usize,
}

impl Rows8 for F16Rows {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(&self, r: usize, u: usize) -> __m256 {
        // SAFETY: 8 f16 (16 bytes) inside the source.
        let h =
            unsafe { _mm_loadu_si128(self.ptr.add((self.r0 + r) * self.ld + self.k0 + u).cast()) };
        _mm256_cvtph_ps(h)
    }
}

struct Bf16Rows {
    ptr: *const u16,
    ld: usize,
    r0: usize,
    k0: usize,
}

impl Rows8 for Bf16Rows {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(&self, r: usize, u: usize) -> __m256 {
        // SAFETY: 8 bf16 (16 bytes) inside the source.
        let h =
            unsafe { _mm_loadu_si128(self.ptr.add((self.r0 + r) * self.ld + self.k0 + u).cast()) };
        // bf16 is the top half of an f32: widening is exact.
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }
}

/// q8_0 rows; `ld` and `k0` are multiples of 32 and `u` of 8, so 8 units never straddle a
/// block.
struct Q8Rows {
    ptr: *const u8,
    ld: usize,
    r0: usize,
    k0: usize,
}

impl Rows8 for Q8Rows {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(&self, r: usize, u: usize) -> __m256 {
        use crate::tensor::{Q8_0_BLOCK, Q8_0_BLOCK_BYTES};
        let idx = (self.r0 + r) * self.ld + self.k0 + u;
        // SAFETY: the block holding values idx .. idx + 8 is inside the source.
        let (d, q) = unsafe {
            let blk = self.ptr.add(idx / Q8_0_BLOCK * Q8_0_BLOCK_BYTES);
            let d = _mm_set1_epi16(blk.cast::<i16>().read_unaligned());
            let q = _mm_loadl_epi64(blk.add(2 + idx % Q8_0_BLOCK).cast());
            (d, q)
        };
        // d * q with an f16 d (11 significant bits) and |q| <= 128 (8 bits) is exact in f32,
        // so this equals `tensor::q8_0_dequantize_block`.
        _mm256_mul_ps(
            _mm256_cvtph_ps(d),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)),
        )
    }
}

/// 8 x 8 transpose: `out[t]` holds lane `t` of every input row (also used by the attention
/// kernel).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

/// Rows `g * 8 .. g * 8 + 8` of `src` at units `u .. u + 8`, transposed; rows at or past
/// `rows` read as zero.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group<L: Rows8>(src: &L, rows: usize, g: usize, u: usize) -> [__m256; 8] {
    let mut r = [_mm256_setzero_ps(); 8];
    for (i, v) in r.iter_mut().enumerate() {
        if g * 8 + i < rows {
            // SAFETY: row g*8+i exists; the caller keeps units u..u+8 inside it.
            *v = unsafe { src.load8(g * 8 + i, u) };
        }
    }
    transpose8(r)
}

/// The vector part of a transposing pack: `out[u * S + r] = src(r, u)` for `u < vec_units`
/// (a multiple of 8), zero for `rows <= r < S`.
///
/// One group of 8 rows at a time, all units before the next group: source rows whose
/// stride is a multiple of 4 KiB (every k = 1024 n) share one L1 set, and touching 16 of
/// them in turn would evict each line before its second half is read. For `S` not a
/// multiple of 8 (then `S <= 16`) the last group is stored as whole 8-lane vectors that
/// spill into the next unit's first lanes; groups go in descending order and units in
/// ascending order, so the spilled lanes are rewritten afterwards (the last unit's spill
/// lands in the panel's slack, in the tail units, or in the next panel, all written later).
///
/// # Safety
/// `out` is valid for `vec_units * S + 8` elements; `src` holds `rows` rows of `vec_units`
/// units.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack_t<L: Rows8, const S: usize>(
    src: &L,
    rows: usize,
    vec_units: usize,
    out: *mut f32,
) {
    const { assert!(S.is_multiple_of(8) || S <= 16) };
    for g in (0..S.div_ceil(8)).rev() {
        for u in (0..vec_units).step_by(8) {
            // SAFETY: as the function's contract.
            let t = unsafe { group(src, rows, g, u) };
            for (i, v) in t.iter().enumerate() {
                // SAFETY: unit u+i, lanes g*8..g*8+8, at most 8 past the unit's end.
                unsafe { _mm256_storeu_ps(out.add((u + i) * S + g * 8), *v) };
            }
        }
    }
}

/// Pack an A panel of `MR` rows (see `MicroKernel::pack_a`).
///
/// # Safety
/// AVX2+FMA+F16C are available; as `MicroKernel::pack_a` with `KU = 1`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack_a<const MR: usize>(
    a: &[f32],
    lda: usize,
    i0: usize,
    rows: usize,
    k0: usize,
    kc: usize,
    out: *mut f32,
) {
    debug_assert!((i0 + rows - 1) * lda + k0 + kc <= a.len());
    let vec_units = kc / 8 * 8;
    let src = F32Rows {
        ptr: a.as_ptr(),
        ld: lda,
        r0: i0,
        k0,
    };
    // SAFETY: rows i0..i0+rows hold k0..k0+kc; out has kc * MR + 8 elements.
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

/// Pack a B panel of `NR` columns (see `MicroKernel::pack_b`).
///
/// # Safety
/// AVX2+FMA+F16C are available; as `MicroKernel::pack_b` with `KU = 1`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack_b<const NR: usize>(
    b: &BSrc,
    j0: usize,
    cols: usize,
    k0: usize,
    kc: usize,
    out: *mut f32,
) {
    const { assert!(NR.is_multiple_of(8)) };
    let vec_units = match *b {
        BSrc::RowsN { w, ld } => {
            debug_assert!((j0 + cols - 1) * ld + k0 + kc <= w.len());
            let vec_units = kc / 8 * 8;
            // The same transposing packer over each dtype's row reader.
            macro_rules! pack_rows {
                ($rows:ident, $ptr:expr) => {
                    pack_t::<_, NR>(
                        &$rows {
                            ptr: $ptr,
                            ld,
                            r0: j0,
                            k0,
                        },
                        cols,
                        vec_units,
                        out,
                    )
                };
            }
            // SAFETY: rows j0..j0+cols hold k0..k0+kc; out has kc * NR + 8 elements.
            unsafe {
                match w {
                    Weights::F32(w) => pack_rows!(F32Rows, w.as_ptr()),
                    Weights::F16(w) => pack_rows!(F16Rows, w.as_ptr().cast()),
                    Weights::BF16(w) => pack_rows!(Bf16Rows, w.as_ptr().cast()),
                    Weights::Q8_0(w) => pack_rows!(Q8Rows, w.as_ptr()),
                }
            }
            vec_units
        }
        BSrc::RowsK { b, ld } if cols == NR => {
            debug_assert!((k0 + kc - 1) * ld + j0 + NR <= b.len());
            for u in 0..kc {
                for g in 0..NR / 8 {
                    // SAFETY: row k0+u holds columns j0..j0+NR; unit u of the panel is in out.
                    unsafe {
                        let v = _mm256_loadu_ps(b.as_ptr().add((k0 + u) * ld + j0 + g * 8));
                        _mm256_storeu_ps(out.add(u * NR + g * 8), v);
                    }
                }
            }
            kc
        }
        BSrc::RowsK { .. } => 0,
    };
    if vec_units < kc {
        // SAFETY: out has kc * NR elements.
        let out = unsafe { std::slice::from_raw_parts_mut(out, kc * NR) };
        scalar::pack_b_from(b, j0, cols, k0, vec_units, kc, NR, out);
    }
}

/// The AVX2 + FMA kernel; exists only once AVX2+FMA+F16C were detected.
pub(super) struct Avx2(());

impl Avx2 {
    pub(super) fn new() -> Option<Avx2> {
        Isa::Avx2.is_supported().then_some(Avx2(()))
    }
}

const MR: usize = 6;
const NR: usize = 16;

// SAFETY: `Avx2` is only built after detection (see `new`).
unsafe impl MicroKernel for Avx2 {
    type P = f32;
    const MR: usize = MR;
    const NR: usize = NR;
    const KU: usize = 1;
    // A 16 x 384 B micro-panel is 24 KiB of a 32 KiB L1d; the A micro-panel (9 KiB) streams
    // past it from L2, where the A block (MC x KC, ~300 KiB) lives. Measured on Zen 3 (CPU
    // time, M = 202 and 1024): 384 beat 256 and 320 by 1-4%; MC = 120 lost 10% at M = 202.
    const KC: usize = 384;
    const MC: usize = 204;
    const NC: usize = 3072;

    unsafe fn pack_a(&self, blk: ABlock<'_>, out: *mut f32) {
        let (a, lda, i0, rows, k0, kc) = blk.parts();
        // SAFETY: AVX2+FMA+F16C were detected (self exists); the contract is forwarded.
        unsafe { pack_a::<MR>(a, lda, i0, rows, k0, kc, out) }
    }

    unsafe fn pack_b(&self, b: &BSrc, j0: usize, cols: usize, k0: usize, kc: usize, out: *mut f32) {
        // SAFETY: as above.
        unsafe { pack_b::<NR>(b, j0, cols, k0, kc, out) }
    }

    unsafe fn kernel(&self, ab: Panels<f32>, c: *mut f32, ldc: usize, ep: &Epilogue) {
        let (kcu, a, b) = (ab.kcu, ab.a, ab.b);
        // SAFETY: as above.
        unsafe { kernel_6x16(kcu, a, b, c, ldc, ep) }
    }
}

/// `C[6, 16] = epilogue(C + A . B)`: per k unit two aligned B loads, six broadcasts of A
/// and twelve FMAs (two FMA pipes, 4-cycle latency: 12 chains keep both busy).
///
/// # Safety
/// As `MicroKernel::kernel`; `b` is 32-byte aligned.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn kernel_6x16(
    kcu: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    ep: &Epilogue,
) {
    if ep.accumulate {
        // C is added after the k loop: fetch it now so it has arrived by then.
        for i in 0..MR {
            let row = c.wrapping_add(i * ldc).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(row);
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(NR * 4 - 1));
        }
    }
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    let (mut pa, mut pb) = (a, b);
    for _ in 0..kcu {
        // SAFETY: kcu units of 6 (A) and 16 (B, aligned) floats.
        unsafe {
            let b0 = _mm256_load_ps(pb);
            let b1 = _mm256_load_ps(pb.add(8));
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm256_broadcast_ss(&*pa.add(i));
                row[0] = _mm256_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm256_fmadd_ps(ai, b1, row[1]);
            }
            pa = pa.add(MR);
            pb = pb.add(NR);
        }
    }
    // SAFETY: forwarded from this function's contract.
    unsafe { ep.store_tile::<_, MR, 2>(Avx2Simd::new(), &mut acc, c, ldc) };
}
