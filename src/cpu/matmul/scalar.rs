//! Portable packing and the scalar micro-kernel. The packers also serve the NEON kernel and
//! the k tails of the x86 packers, so they widen weights exactly like `Weights::widen_into`.

use super::driver::{ABlock, BSrc, Epilogue, MicroKernel, Panels};
use crate::cpu::Weights;
use crate::tensor::{Q8_0_BLOCK, Q8_0_BLOCK_BYTES};
use half::f16;

/// Weight element `idx` of a q8_0 matrix, widened exactly (`d * q`, as
/// `tensor::q8_0_dequantize_block` does).
#[inline]
pub(super) fn q8_0_at(w: &[u8], idx: usize) -> f32 {
    let blk = &w[idx / Q8_0_BLOCK * Q8_0_BLOCK_BYTES..];
    let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
    d * (blk[2 + idx % Q8_0_BLOCK] as i8) as f32
}

/// `out[u * stride + r] = get(r, u)` for `r < rows`, zero for `rows <= r < stride`, `u < units`.
#[inline]
fn fill(
    stride: usize,
    rows: usize,
    units: usize,
    out: &mut [f32],
    get: impl Fn(usize, usize) -> f32,
) {
    for u in 0..units {
        let o = &mut out[u * stride..(u + 1) * stride];
        for (r, v) in o.iter_mut().enumerate() {
            *v = if r < rows { get(r, u) } else { 0.0 };
        }
    }
}

/// Scalar A packing: `out[u * mr + i] = a[(i0 + i) * lda + k0 + u]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn pack_a(
    a: &[f32],
    lda: usize,
    i0: usize,
    rows: usize,
    k0: usize,
    kc: usize,
    mr: usize,
    out: &mut [f32],
) {
    fill(mr, rows, kc, out, |r, u| a[(i0 + r) * lda + k0 + u]);
}

/// Scalar B packing of k units `u0 .. kc` (earlier units are left alone, so the vector
/// packers can hand their tails here): `out[u * nr + j] = B[k0 + u, j0 + j]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn pack_b_from(
    b: &BSrc,
    j0: usize,
    cols: usize,
    k0: usize,
    u0: usize,
    kc: usize,
    nr: usize,
    out: &mut [f32],
) {
    let out = &mut out[u0 * nr..];
    let units = kc - u0;
    let k0 = k0 + u0;
    match *b {
        BSrc::RowsN { w, ld } => {
            let at = |r: usize, u: usize| (j0 + r) * ld + k0 + u;
            match w {
                Weights::F32(w) => fill(nr, cols, units, out, |r, u| w[at(r, u)]),
                Weights::F16(w) => fill(nr, cols, units, out, |r, u| w[at(r, u)].to_f32()),
                Weights::BF16(w) => fill(nr, cols, units, out, |r, u| w[at(r, u)].to_f32()),
                Weights::Q8_0(w) => fill(nr, cols, units, out, |r, u| q8_0_at(w, at(r, u))),
            }
        }
        BSrc::RowsK { b, ld } => fill(nr, cols, units, out, |r, u| b[(k0 + u) * ld + j0 + r]),
    }
}

/// The scalar path: a 4 x 8 register-blocked kernel with plain (unfused) multiply-adds, which
/// is what portable scalar code compiles to.
pub(super) struct Scalar;

const MR: usize = 4;
const NR: usize = 8;

// SAFETY: needs no CPU feature; the driver upholds the pointer contracts.
unsafe impl MicroKernel for Scalar {
    type P = f32;
    const MR: usize = MR;
    const NR: usize = NR;
    const KU: usize = 1;
    const KC: usize = 256;
    const MC: usize = 128;
    const NC: usize = 1024;

    unsafe fn pack_a(&self, blk: ABlock<'_>, out: *mut f32) {
        let (a, lda, i0, rows, k0, kc) = blk.parts();
        // SAFETY: the caller provides kc * MR elements.
        let out = unsafe { std::slice::from_raw_parts_mut(out, kc * MR) };
        pack_a(a, lda, i0, rows, k0, kc, MR, out);
    }

    unsafe fn pack_b(&self, b: &BSrc, j0: usize, cols: usize, k0: usize, kc: usize, out: *mut f32) {
        // SAFETY: the caller provides kc * NR elements.
        let out = unsafe { std::slice::from_raw_parts_mut(out, kc * NR) };
        pack_b_from(b, j0, cols, k0, 0, kc, NR, out);
    }

    unsafe fn kernel(&self, ab: Panels<f32>, c: *mut f32, ldc: usize, ep: &Epilogue) {
        let (kcu, a, b) = (ab.kcu, ab.a, ab.b);
        // SAFETY: the caller provides kcu packed units of each panel.
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(a, kcu * MR),
                std::slice::from_raw_parts(b, kcu * NR),
            )
        };
        let mut acc = [[0f32; NR]; MR];
        for (au, bu) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
            for (row, &av) in acc.iter_mut().zip(au) {
                for (s, &bv) in row.iter_mut().zip(bu) {
                    *s += av * bv;
                }
            }
        }
        if ep.accumulate {
            // The previous k blocks' sum, added after this block's (as the SIMD kernels do).
            for (i, row) in acc.iter_mut().enumerate() {
                // SAFETY: c is valid for an MR x NR tile with row stride ldc.
                let prev = unsafe { std::slice::from_raw_parts(c.add(i * ldc), NR) };
                for (s, p) in row.iter_mut().zip(prev) {
                    *s += p;
                }
            }
        }
        if ep.finish {
            for row in acc.iter_mut() {
                for (j, s) in row.iter_mut().enumerate() {
                    *s *= ep.alpha;
                    if !ep.bias.is_null() {
                        // SAFETY: a non-null bias holds NR values.
                        *s += unsafe { *ep.bias.add(j) };
                    }
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), NR) }.copy_from_slice(row);
        }
    }
}
