//! Row softmax of `scale * x` over the last axis.

use super::Cx;
use crate::ops::SoftmaxParams;

pub mod reference {
    use crate::ops::SoftmaxParams;

    pub fn softmax(p: &SoftmaxParams, x: &[f32], y: &mut [f32]) {
        for r in 0..p.rows {
            let row = &x[r * p.cols..(r + 1) * p.cols];
            let m = row
                .iter()
                .map(|&v| v as f64 * p.scale as f64)
                .fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row
                .iter()
                .map(|&v| (v as f64 * p.scale as f64 - m).exp())
                .collect();
            let s: f64 = e.iter().sum();
            for (c, v) in e.iter().enumerate() {
                y[r * p.cols + c] = (v / s) as f32;
            }
        }
    }
}

pub fn softmax(cx: &Cx, p: &SoftmaxParams, x: &[f32], y: &mut [f32]) {
    let cols = p.cols.max(1);
    cx.pool
        .par_chunks_mut(&mut y[..p.rows * p.cols], cols, |r, out| {
            let one = SoftmaxParams { rows: 1, ..*p };
            reference::softmax(&one, &x[r * cols..(r + 1) * cols], out);
        });
}
