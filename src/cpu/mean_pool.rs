//! Masked mean pooling over the sequence axis (LLM2Vec's mean pooling).
//!
//! The vector paths accumulate in f64, widening each f32 exactly, in the reference's order
//! (tokens in sequence order, one sum per output element), then divide in f64 and round
//! once: the result is bit-identical to the reference. (The f64 sums are exact to within
//! `seq * 2^-53 * sum|x|`, far below f32 resolution for any realistic sequence.) Work is
//! split over (batch row, block of `DIM_BLOCK` columns); a sum is never split.

use super::Cx;
use super::pool::SendPtr;
use super::simd::{self, Kernel, Simd};
use crate::ops::MeanPoolParams;

pub mod reference {
    use crate::ops::MeanPoolParams;

    pub fn mean_pool(p: &MeanPoolParams, x: &[f32], mask: &[u32], out: &mut [f32]) {
        for b in 0..p.batch {
            let mut acc = vec![0f64; p.dim];
            let mut count = 0usize;
            for s in 0..p.seq {
                if mask[b * p.seq + s] == 0 {
                    continue;
                }
                count += 1;
                let row = &x[(b * p.seq + s) * p.dim..][..p.dim];
                for (a, v) in acc.iter_mut().zip(row) {
                    *a += *v as f64;
                }
            }
            for (o, a) in out[b * p.dim..(b + 1) * p.dim].iter_mut().zip(&acc) {
                *o = if count == 0 {
                    0.0
                } else {
                    (a / count as f64) as f32
                };
            }
        }
    }
}

/// Output columns per task; their f64 accumulators (2 KiB) stay in L1.
const DIM_BLOCK: usize = 256;

/// `out[j] = mean of x[s][d0 + j]` over the included tokens `s`, for `j < out.len()`.
struct PoolBlock<'a> {
    /// The batch row's `[seq, dim]` inputs.
    x: &'a [f32],
    mask: &'a [u32],
    dim: usize,
    d0: usize,
    out: &'a mut [f32],
}

impl Kernel for PoolBlock<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let w = self.out.len();
        let mut acc = [0f64; DIM_BLOCK];
        let l = S::LANES;
        let mut count = 0usize;
        for (t, &m) in self.mask.iter().enumerate() {
            if m == 0 {
                continue;
            }
            count += 1;
            let row = &self.x[t * self.dim + self.d0..][..w];
            let mut j = 0;
            while j + l <= w {
                // SAFETY: j + l <= w <= DIM_BLOCK: inside `acc` and `row`.
                unsafe { s.add_widen_f64(acc.as_mut_ptr().add(j), row.as_ptr().add(j)) };
                j += l;
            }
            for k in j..w {
                acc[k] += row[k] as f64;
            }
        }
        for (o, a) in self.out.iter_mut().zip(&acc) {
            *o = if count == 0 {
                0.0
            } else {
                (a / count as f64) as f32
            };
        }
    }
    fn scalar(self) {
        let w = self.out.len();
        let mut acc = [0f64; DIM_BLOCK];
        let mut count = 0usize;
        for (t, &m) in self.mask.iter().enumerate() {
            if m != 0 {
                count += 1;
                let row = &self.x[t * self.dim + self.d0..][..w];
                for (a, v) in acc.iter_mut().zip(row) {
                    *a += *v as f64;
                }
            }
        }
        for (o, a) in self.out.iter_mut().zip(&acc) {
            *o = if count == 0 {
                0.0
            } else {
                (a / count as f64) as f32
            };
        }
    }
}

pub fn mean_pool(cx: &Cx, p: &MeanPoolParams, x: &[f32], mask: &[u32], out: &mut [f32]) {
    if p.dim == 0 {
        return;
    }
    let blocks = p.dim.div_ceil(DIM_BLOCK);
    let out = &mut out[..p.batch * p.dim];
    let base = SendPtr(out.as_mut_ptr());
    cx.pool.run(p.batch * blocks, &|task| {
        let (b, k) = (task / blocks, task % blocks);
        let d0 = k * DIM_BLOCK;
        let w = DIM_BLOCK.min(p.dim - d0);
        // SAFETY: task (b, k) writes out[b * dim + d0 .. + w], disjoint from every other
        // task's range and inside `out`, which is exclusively borrowed for this call.
        let o = unsafe { std::slice::from_raw_parts_mut(base.get().add(b * p.dim + d0), w) };
        simd::dispatch(
            cx.isa,
            PoolBlock {
                x: &x[b * p.seq * p.dim..(b + 1) * p.seq * p.dim],
                mask: &mask[b * p.seq..(b + 1) * p.seq],
                dim: p.dim,
                d0,
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

    proptest! {
        #![proptest_config(config())]

        /// Bit-identical to the reference (same f64 sums in the same order).
        #[test]
        fn mean_pool_is_bit_identical(
            (batch, seq, dim, x, mask) in (1usize..4, 1usize..20, 1usize..600)
                .prop_flat_map(|(b, s, d)| (
                    Just(b), Just(s), Just(d),
                    proptest::collection::vec(prop_oneof![9 => -50.0f32..50.0, 1 => -1e30f32..1e30], b * s * d),
                    proptest::collection::vec(prop_oneof![3 => Just(1u32), 1 => Just(0u32), 1 => any::<u32>()], b * s),
                )),
        ) {
            let p = MeanPoolParams { batch, seq, dim };
            let mut want = vec![0f32; batch * dim];
            reference::mean_pool(&p, &x, &mask, &mut want);
            for_each_cx(|cx| {
                let mut y = vec![f32::NAN; batch * dim];
                mean_pool(cx, &p, &x, &mask, &mut y);
                for i in 0..y.len() {
                    assert!(same_bits(y[i], want[i]), "{} [{i}] {} vs {}", name(cx), y[i], want[i]);
                }
            });
        }
    }

    /// A row with no included token gives zeros; NaN and inf propagate per column.
    #[test]
    fn empty_rows_and_specials() {
        let p = MeanPoolParams {
            batch: 2,
            seq: 3,
            dim: 17,
        };
        let mut x = vec![1f32; 2 * 3 * 17];
        x[17 * 3 + 4] = f32::NAN;
        x[17 * 3 + 5] = f32::INFINITY;
        let mask = [0u32, 0, 0, 1, 0, 7];
        for_each_cx(|cx| {
            let mut y = vec![f32::NAN; 34];
            mean_pool(cx, &p, &x, &mask, &mut y);
            assert!(y[..17].iter().all(|v| *v == 0.0), "{}", name(cx));
            assert!(y[17 + 4].is_nan() && y[17 + 5] == f32::INFINITY && y[17 + 6] == 1.0);
        });
    }
}
