//! Linear layers (`x . W^T + b`, weights f32/f16/bf16/q8_0, fused activation) and batched
//! f32 matmul.

use super::{Cx, Weights, activation};
use crate::ops::{BatchedMatmulParams, LinearParams};

pub mod reference {
    use super::super::Weights;
    use crate::ops::{BatchedMatmulParams, LinearParams};

    /// f64 accumulation over the exactly widened weights.
    pub fn linear(p: &LinearParams, x: &[f32], w: Weights, bias: Option<&[f32]>, y: &mut [f32]) {
        let mut wrow = vec![0f32; p.k];
        for n in 0..p.n {
            w.widen_into(n * p.k, &mut wrow);
            for m in 0..p.m {
                let xr = &x[m * p.k..(m + 1) * p.k];
                let mut acc: f64 = xr
                    .iter()
                    .zip(&wrow)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum();
                if let Some(b) = bias {
                    acc += b[n] as f64;
                }
                y[m * p.n + n] =
                    super::super::activation::reference::apply(p.activation, acc as f32);
            }
        }
    }

    pub fn batched_matmul(p: &BatchedMatmulParams, a: &[f32], b: &[f32], c: &mut [f32]) {
        for bi in 0..p.batch {
            let a0 = bi * p.a_batch_stride;
            let b0 = bi * p.b_batch_stride;
            let c0 = bi * p.m * p.n;
            for i in 0..p.m {
                for j in 0..p.n {
                    let mut acc = 0f64;
                    for l in 0..p.k {
                        let bv = if p.trans_b {
                            b[b0 + j * p.k + l]
                        } else {
                            b[b0 + l * p.n + j]
                        };
                        acc += a[a0 + i * p.k + l] as f64 * bv as f64;
                    }
                    c[c0 + i * p.n + j] = (p.alpha as f64 * acc) as f32;
                }
            }
        }
    }
}

pub fn linear(
    cx: &Cx,
    p: &LinearParams,
    x: &[f32],
    w: Weights,
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    let n = p.n.max(1);
    cx.pool.par_chunks_mut(&mut y[..p.m * p.n], n, |m, out| {
        let one = LinearParams { m: 1, ..*p };
        let act = one.activation;
        let one = LinearParams {
            activation: crate::ops::Activation::None,
            ..one
        };
        reference::linear(&one, &x[m * p.k..(m + 1) * p.k], w, bias, out);
        activation::apply_inplace(cx.isa, act, out);
    });
}

pub fn batched_matmul(cx: &Cx, p: &BatchedMatmulParams, a: &[f32], b: &[f32], c: &mut [f32]) {
    let per = (p.m * p.n).max(1);
    cx.pool
        .par_chunks_mut(&mut c[..p.batch * p.m * p.n], per, |bi, out| {
            let one = BatchedMatmulParams { batch: 1, ..*p };
            let a = &a[bi * p.a_batch_stride..];
            let b = &b[bi * p.b_batch_stride..];
            reference::batched_matmul(&one, a, b, out);
        });
}
