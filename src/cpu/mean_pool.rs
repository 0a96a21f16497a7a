//! Masked mean pooling over the sequence axis (LLM2Vec's mean pooling).

use super::Cx;
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

pub fn mean_pool(cx: &Cx, p: &MeanPoolParams, x: &[f32], mask: &[u32], out: &mut [f32]) {
    let _ = cx;
    reference::mean_pool(p, x, mask, out);
}
