//! LayerNorm (biased variance) and RMSNorm over the last axis.

use super::Cx;
use crate::ops::NormParams;

pub mod reference {
    use crate::ops::NormParams;

    /// Two-pass mean and biased variance in f64, then f32 output.
    pub fn layer_norm(
        p: &NormParams,
        x: &[f32],
        gamma: Option<&[f32]>,
        beta: Option<&[f32]>,
        y: &mut [f32],
    ) {
        for r in 0..p.rows {
            let row = &x[r * p.cols..(r + 1) * p.cols];
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / p.cols as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / p.cols as f64;
            let inv = 1.0 / (var + p.eps as f64).sqrt();
            for c in 0..p.cols {
                let mut v = (row[c] as f64 - mean) * inv;
                if let Some(g) = gamma {
                    v *= g[c] as f64;
                }
                if let Some(b) = beta {
                    v += b[c] as f64;
                }
                y[r * p.cols + c] = v as f32;
            }
        }
    }

    pub fn rms_norm(p: &NormParams, x: &[f32], gamma: Option<&[f32]>, y: &mut [f32]) {
        for r in 0..p.rows {
            let row = &x[r * p.cols..(r + 1) * p.cols];
            let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / p.cols as f64;
            let inv = 1.0 / (ms + p.eps as f64).sqrt();
            for c in 0..p.cols {
                let mut v = row[c] as f64 * inv;
                if let Some(g) = gamma {
                    v *= g[c] as f64;
                }
                y[r * p.cols + c] = v as f32;
            }
        }
    }
}

pub fn layer_norm(
    cx: &Cx,
    p: &NormParams,
    x: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    y: &mut [f32],
) {
    let cols = p.cols.max(1);
    cx.pool
        .par_chunks_mut(&mut y[..p.rows * p.cols], cols, |r, out| {
            let one = NormParams { rows: 1, ..*p };
            reference::layer_norm(&one, &x[r * cols..(r + 1) * cols], gamma, beta, out);
        });
}

pub fn rms_norm(cx: &Cx, p: &NormParams, x: &[f32], gamma: Option<&[f32]>, y: &mut [f32]) {
    let cols = p.cols.max(1);
    cx.pool
        .par_chunks_mut(&mut y[..p.rows * p.cols], cols, |r, out| {
            let one = NormParams { rows: 1, ..*p };
            reference::rms_norm(&one, &x[r * cols..(r + 1) * cols], gamma, out);
        });
}
