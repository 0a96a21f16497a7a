//! Sinusoidal positional encoding, as Kimodo's `PositionalEncoding`
//! (`kimodo/model/backbone.py#L253-266`): `div_i = 10000^(-2i/dim)` by an f32 `pow`,
//! `pe[p, 2i] = sin(p * div_i)`, `pe[p, 2i+1] = cos(p * div_i)`, all in f32.

//!
//! Only the product `position * div_i` is vectorised (an exact IEEE multiply, identical on
//! every ISA). `pow`, `sin` and `cos` stay the scalar libm calls of the reference: a vector
//! approximation would differ from `powf`/`sinf`/`cosf` by an ulp here and there, and the
//! table is built once per graph, so bit-exactness with the reference (and through it,
//! PyTorch's f32 table) is worth more than speed. Rows are split over threads.

use super::Cx;
use super::simd::{self, Kernel, Simd, load_n, store_n};
use crate::ops::PosEncParams;

pub mod reference {
    use crate::ops::PosEncParams;

    pub fn posenc(p: &PosEncParams, out: &mut [f32]) {
        let half = p.dim / 2;
        for r in 0..p.len {
            let pos = (p.start + r) as f32;
            for i in 0..half {
                let div = 10000f32.powf(-((2 * i) as f32) / p.dim as f32);
                let a = pos * div;
                out[r * p.dim + 2 * i] = a.sin();
                out[r * p.dim + 2 * i + 1] = a.cos();
            }
        }
    }
}

/// Output elements per parallel task (whole rows).
const TASK_ELEMS: usize = 1 << 12;

/// Rows `first..first + out.len() / dim` of the table.
struct PosEncRows<'a> {
    first: usize,
    dim: usize,
    div: &'a [f32],
    out: &'a mut [f32],
}

impl Kernel for PosEncRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let half = self.div.len();
        let mut angle = vec![0f32; half];
        let l = S::LANES;
        for (r, row) in self.out.chunks_exact_mut(self.dim).enumerate() {
            let pos = s.splat((self.first + r) as f32);
            let mut i = 0;
            while i < half {
                let m = l.min(half - i);
                // SAFETY: lanes i..i + m are inside `div` and `angle` (half each).
                unsafe {
                    let a = s.mul(pos, load_n(s, self.div.as_ptr().add(i), m));
                    store_n(s, angle.as_mut_ptr().add(i), m, a);
                }
                i += l;
            }
            for (pair, a) in row.chunks_exact_mut(2).zip(&angle) {
                pair[0] = a.sin();
                pair[1] = a.cos();
            }
        }
    }
    fn scalar(self) {
        for (r, row) in self.out.chunks_exact_mut(self.dim).enumerate() {
            let pos = (self.first + r) as f32;
            for (pair, d) in row.chunks_exact_mut(2).zip(self.div) {
                let a = pos * d;
                pair[0] = a.sin();
                pair[1] = a.cos();
            }
        }
    }
}

pub fn posenc(cx: &Cx, p: &PosEncParams, out: &mut [f32]) {
    if p.dim == 0 {
        return;
    }
    // The reference's f32 `powf`, once per column pair.
    let div: Vec<f32> = (0..p.dim / 2)
        .map(|i| 10000f32.powf(-((2 * i) as f32) / p.dim as f32))
        .collect();
    let per = simd::rows_per_task(p.dim, TASK_ELEMS);
    cx.pool
        .par_chunks_mut(&mut out[..p.len * p.dim], per * p.dim, |t, o| {
            simd::dispatch(
                cx.isa,
                PosEncRows {
                    first: p.start + t * per,
                    dim: p.dim,
                    div: &div,
                    out: o,
                },
            );
        });
}

#[cfg(test)]
mod tests {
    use super::super::simd::testing::*;
    use super::*;
    use proptest::prelude::*;

    fn check(p: &PosEncParams) {
        let mut want = vec![0f32; p.len * p.dim];
        reference::posenc(p, &mut want);
        for_each_cx(|cx| {
            let mut got = vec![f32::NAN; p.len * p.dim];
            posenc(cx, p, &mut got);
            for i in 0..got.len() {
                assert!(
                    same_bits(got[i], want[i]),
                    "{} [{i}] {} vs {}",
                    name(cx),
                    got[i],
                    want[i]
                );
            }
        });
    }

    proptest! {
        #![proptest_config(config())]

        /// Bit-identical to the reference, including far positions.
        #[test]
        fn posenc_is_bit_identical(
            start in prop_oneof![0usize..10, 0usize..100_000],
            len in 1usize..40,
            half in 1usize..80,
        ) {
            check(&PosEncParams { start, len, dim: 2 * half });
        }
    }

    /// Kimodo's table: 202 tokens of width 1024 (several parallel tasks).
    #[test]
    fn kimodo_table() {
        check(&PosEncParams {
            start: 0,
            len: 202,
            dim: 1024,
        });
    }
}
