//! The f64 reference attention, and the [`Isa::Scalar`](super::Isa::Scalar) path that runs
//! it split over batch rows.

use super::super::Cx;
use super::Operands;
use crate::ops::AttentionParams;

/// The f64 reference the SIMD paths are tested against.
pub mod reference {
    use crate::ops::{AttentionParams, MaskKind};

    /// Whether query `i` of batch `b` may attend key `j`.
    pub fn visible(
        p: &AttentionParams,
        mask: Option<&[u32]>,
        b: usize,
        i: usize,
        j: usize,
    ) -> bool {
        match p.mask {
            MaskKind::None => true,
            MaskKind::KeyPadding => mask.is_some_and(|m| m[b * p.kv_len + j] != 0),
            MaskKind::Causal => j + p.q_len <= i + p.kv_len,
        }
    }

    /// Softmax in f64 per (batch, query, head); fully masked rows give zeros. A NaN score
    /// makes its row NaN (a row is "fully masked" by visibility, not by its maximum, which
    /// `f64::max` computes ignoring NaN).
    pub fn attention(
        p: &AttentionParams,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: Option<&[u32]>,
        out: &mut [f32],
    ) {
        let d = p.head_dim;
        let group = p.q_heads / p.kv_heads;
        let mut s = vec![0f64; p.kv_len];
        for b in 0..p.batch {
            for i in 0..p.q_len {
                for h in 0..p.q_heads {
                    let kh = h / group;
                    let qo = (b * p.q_len + i) * p.q_row_stride + h * d;
                    let mut m = f64::NEG_INFINITY;
                    let mut any_visible = false;
                    for (j, sj) in s.iter_mut().enumerate() {
                        if !visible(p, mask, b, i, j) {
                            *sj = f64::NEG_INFINITY;
                            continue;
                        }
                        any_visible = true;
                        let ko = (b * p.kv_len + j) * p.kv_row_stride + kh * d;
                        let dot: f64 = (0..d).map(|t| q[qo + t] as f64 * k[ko + t] as f64).sum();
                        *sj = dot * p.scale as f64;
                        m = m.max(*sj);
                    }
                    let oo = (b * p.q_len + i) * (p.q_heads * d) + h * d;
                    let o = &mut out[oo..oo + d];
                    o.fill(0.0);
                    if !any_visible {
                        continue;
                    }
                    let mut acc = vec![0f64; d];
                    let mut z = 0f64;
                    for (j, sj) in s.iter().enumerate() {
                        if !visible(p, mask, b, i, j) {
                            continue;
                        }
                        let e = (sj - m).exp();
                        z += e;
                        let vo = (b * p.kv_len + j) * p.kv_row_stride + kh * d;
                        for t in 0..d {
                            acc[t] += e * v[vo + t] as f64;
                        }
                    }
                    for t in 0..d {
                        o[t] = (acc[t] / z) as f32;
                    }
                }
            }
        }
    }
}

/// The reference, split over batch rows.
pub(super) fn split(cx: &Cx, p: &AttentionParams, x: Operands, out: &mut [f32]) {
    let Operands { q, k, v, mask } = x;
    let row = p.q_heads * p.head_dim;
    cx.pool.par_chunks_mut(
        &mut out[..p.batch * p.q_len * row],
        p.q_len * row,
        |b, o| {
            let one = AttentionParams { batch: 1, ..*p };
            let q = &q[b * p.q_len * p.q_row_stride..];
            let k = &k[b * p.kv_len * p.kv_row_stride..];
            let v = &v[b * p.kv_len * p.kv_row_stride..];
            let m = mask.map(|m| &m[b * p.kv_len..(b + 1) * p.kv_len]);
            reference::attention(&one, q, k, v, m, o);
        },
    );
}
