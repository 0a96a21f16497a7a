//! Embedding gather: rows of a (possibly f16/bf16/q8_0) table widened to f32.
//!
//! The vector paths widen whole vectors at a time: f16 with the hardware conversion (F16C
//! `vcvtph2ps`, NEON `fcvtl`), bf16 by a 16-bit shift, q8_0 as `d * (q as f32)` per block.
//! Every conversion is exact and IEEE (NaNs quietened, as `half` does), so the output is
//! bit-identical to the reference.

use half::{bf16, f16};

use super::simd::{self, Kernel, Simd};
use super::{Cx, Weights};
use crate::backend::check::bad_id;
use crate::error::Result;
use crate::ops::EmbeddingParams;
use crate::tensor::{Q8_0_BLOCK, Q8_0_BLOCK_BYTES};

pub mod reference {
    use super::super::Weights;
    use crate::error::Result;
    use crate::ops::EmbeddingParams;

    pub fn embedding(
        p: &EmbeddingParams,
        ids: &[u32],
        table: Weights,
        out: &mut [f32],
    ) -> Result<()> {
        for (t, &id) in ids[..p.tokens].iter().enumerate() {
            if id as usize >= p.vocab {
                return Err(crate::backend::check::bad_id(id, t, p.vocab));
            }
            table.widen_into(id as usize * p.dim, &mut out[t * p.dim..(t + 1) * p.dim]);
        }
        Ok(())
    }
}

/// Output elements per parallel task (whole rows).
const TASK_ELEMS: usize = 1 << 14;

/// Rows `out[t] = table[ids[t]]` for the given ids (all already checked against the table).
struct Gather<'a> {
    ids: &'a [u32],
    table: Weights<'a>,
    dim: usize,
    out: &'a mut [f32],
}

/// Widen `n` 16-bit values with `load` a vector at a time, the tail with `one`.
///
/// # Safety
/// `src` must be valid for reading `n` u16 and `dst` for writing `n` f32.
#[inline(always)]
unsafe fn widen16<S: Simd>(s: S, src: *const u16, dst: *mut f32, n: usize, bf: bool) {
    let l = S::LANES;
    let mut i = 0;
    while i + l <= n {
        // SAFETY: lanes i..i + l are inside both buffers (caller contract).
        unsafe {
            let v = if bf {
                s.load_bf16(src.add(i))
            } else {
                s.load_f16(src.add(i))
            };
            s.store(dst.add(i), v);
        }
        i += l;
    }
    for j in i..n {
        // SAFETY: j < n, inside both buffers.
        unsafe {
            let h = *src.add(j);
            *dst.add(j) = if bf {
                bf16::from_bits(h).to_f32()
            } else {
                f16::from_bits(h).to_f32()
            };
        }
    }
}

impl Kernel for Gather<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let d = self.dim;
        for (&id, out) in self.ids.iter().zip(self.out.chunks_exact_mut(d)) {
            let start = id as usize * d;
            match self.table {
                Weights::F32(w) => out.copy_from_slice(&w[start..start + d]),
                Weights::F16(w) => {
                    let row = &w[start..start + d];
                    // SAFETY: `row` and `out` hold d values each; f16 is a transparent u16.
                    unsafe { widen16(s, row.as_ptr().cast(), out.as_mut_ptr(), d, false) }
                }
                Weights::BF16(w) => {
                    let row = &w[start..start + d];
                    // SAFETY: as above; bf16 is a transparent u16.
                    unsafe { widen16(s, row.as_ptr().cast(), out.as_mut_ptr(), d, true) }
                }
                Weights::Q8_0(w) => {
                    let b0 = start / Q8_0_BLOCK;
                    let blocks =
                        &w[b0 * Q8_0_BLOCK_BYTES..(b0 + d / Q8_0_BLOCK) * Q8_0_BLOCK_BYTES];
                    for (blk, o) in blocks
                        .chunks_exact(Q8_0_BLOCK_BYTES)
                        .zip(out.chunks_exact_mut(Q8_0_BLOCK))
                    {
                        let scale = s.splat(f16::from_le_bytes([blk[0], blk[1]]).to_f32());
                        let q = blk[2..].as_ptr().cast::<i8>();
                        let mut j = 0;
                        // 32 is a multiple of every ISA's lane count (4, 8, 16).
                        while j < Q8_0_BLOCK {
                            // SAFETY: lanes j..j + LANES are inside the block's 32 quants
                            // and the output's 32 values.
                            unsafe {
                                let v = s.mul(scale, s.load_i8(q.add(j)));
                                s.store(o.as_mut_ptr().add(j), v);
                            }
                            j += S::LANES;
                        }
                    }
                }
            }
        }
    }
    fn scalar(self) {
        let d = self.dim;
        for (&id, out) in self.ids.iter().zip(self.out.chunks_exact_mut(d)) {
            self.table.widen_into(id as usize * d, out);
        }
    }
}

pub fn embedding(
    cx: &Cx,
    p: &EmbeddingParams,
    ids: &[u32],
    table: Weights,
    out: &mut [f32],
) -> Result<()> {
    let ids = &ids[..p.tokens];
    if let Some((t, id)) = ids
        .iter()
        .enumerate()
        .find(|(_, id)| **id as usize >= p.vocab)
    {
        return Err(bad_id(*id, t, p.vocab));
    }
    if p.dim == 0 {
        return Ok(());
    }
    let per = simd::rows_per_task(p.dim, TASK_ELEMS);
    cx.pool
        .par_chunks_mut(&mut out[..p.tokens * p.dim], per * p.dim, |t, o| {
            let ids = &ids[t * per..t * per + o.len() / p.dim];
            simd::dispatch(
                cx.isa,
                Gather {
                    ids,
                    table,
                    dim: p.dim,
                    out: o,
                },
            );
        });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::simd::testing::*;
    use super::*;
    use proptest::prelude::*;

    fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "{what}: [{i}] = {g:e} ({:#x}), want {w:e} ({:#x})",
                g.to_bits(),
                w.to_bits()
            );
        }
    }

    fn check(p: &EmbeddingParams, ids: &[u32], table: Weights) {
        let mut want = vec![0f32; p.tokens * p.dim];
        reference::embedding(p, ids, table, &mut want).unwrap();
        for_each_cx(|cx| {
            let mut y = vec![f32::NAN; p.tokens * p.dim];
            embedding(cx, p, ids, table, &mut y).unwrap();
            assert_bits(&format!("{} {:?}", name(cx), table.dtype()), &y, &want);
        });
    }

    /// Every f16 and bf16 bit pattern (NaNs with payloads, infinities, subnormals, -0)
    /// widens to exactly the bits `half` gives.
    #[test]
    fn every_16_bit_pattern_is_exact() {
        let f: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let b: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let p = EmbeddingParams {
            tokens: 2,
            vocab: 2,
            dim: 32768,
        };
        check(&p, &[1, 0], Weights::F16(&f));
        check(&p, &[1, 0], Weights::BF16(&b));
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn gather_is_bit_identical(
            (vocab, dim32, ids, bits, extra) in (1usize..20, 1usize..6, 1usize..12)
                .prop_flat_map(|(v, d, t)| (
                    Just(v),
                    Just(d),
                    proptest::collection::vec(0u32..v as u32, t),
                    proptest::collection::vec(any::<u16>(), v * d * 32 * 2 + 1),
                    0usize..32,
                )),
        ) {
            // f16/bf16/f32 rows with a ragged width; q8_0 rows of whole blocks, with random
            // quants and random (including NaN/inf) scales.
            let dim = dim32 * 32 - extra;
            let p = EmbeddingParams { tokens: ids.len(), vocab, dim };
            let n = vocab * dim;
            let f: Vec<f16> = bits[..n].iter().map(|&b| f16::from_bits(b)).collect();
            let b: Vec<bf16> = bits[..n].iter().map(|&b| bf16::from_bits(b)).collect();
            let w: Vec<f32> = bits[..2 * n].chunks(2).map(|c| f32::from_bits((c[0] as u32) << 16 | c[1] as u32)).collect();
            check(&p, &ids, Weights::F16(&f));
            check(&p, &ids, Weights::BF16(&b));
            check(&p, &ids, Weights::F32(&w));
            let q: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).take(vocab * dim32 * Q8_0_BLOCK_BYTES).collect();
            let pq = EmbeddingParams { dim: dim32 * 32, ..p };
            check(&pq, &ids, Weights::Q8_0(&q));
        }
    }

    /// Many tokens (several parallel tasks) of a Kimodo-width q8_0 and bf16 table.
    #[test]
    fn many_tokens_split_over_threads() {
        let (vocab, dim) = (50, 1024);
        let x: Vec<f32> = (0..vocab * dim)
            .map(|i| ((i * 7919) % 2003) as f32 * 0.01 - 10.0)
            .collect();
        let mut q = vec![0u8; vocab * dim / 32 * Q8_0_BLOCK_BYTES];
        for (blk, v) in q.chunks_exact_mut(Q8_0_BLOCK_BYTES).zip(x.chunks_exact(32)) {
            crate::tensor::q8_0_quantize_block(v, blk);
        }
        let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        let ids: Vec<u32> = (0..202).map(|i| (i * 37 % vocab) as u32).collect();
        let p = EmbeddingParams {
            tokens: 202,
            vocab,
            dim,
        };
        check(&p, &ids, Weights::Q8_0(&q));
        check(&p, &ids, Weights::BF16(&b));
    }

    #[test]
    fn out_of_range_ids_are_errors() {
        let w = vec![0f32; 12];
        let p = EmbeddingParams {
            tokens: 3,
            vocab: 3,
            dim: 4,
        };
        for_each_cx(|cx| {
            let mut y = vec![0f32; 12];
            let e = embedding(cx, &p, &[0, 3, 1], Weights::F32(&w), &mut y).unwrap_err();
            assert!(e.to_string().contains("token id 3 at position 1"), "{e}");
        });
    }
}
