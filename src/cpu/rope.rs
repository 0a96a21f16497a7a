//! Rotary position embedding, rotate-half and interleaved pairings.

use super::Cx;
use crate::ops::RopeParams;

pub mod reference {
    use crate::ops::{RopePairing, RopeParams};

    pub fn rope(p: &RopeParams, x: &[f32], positions: &[i32], inv_freq: &[f32], y: &mut [f32]) {
        let d = p.head_dim;
        let half = d / 2;
        for t in 0..p.tokens {
            // The angle is an f32 product, as Hugging Face Llama computes `inv_freq * pos`.
            let pos = positions[t] as f32;
            for h in 0..p.heads {
                let o = (t * p.heads + h) * d;
                for i in 0..half {
                    let ang = (pos * inv_freq[i]) as f64;
                    let (s, c) = ang.sin_cos();
                    let (a, b) = match p.pairing {
                        RopePairing::RotateHalf => (o + i, o + i + half),
                        RopePairing::Interleaved => (o + 2 * i, o + 2 * i + 1),
                    };
                    let (xa, xb) = (x[a] as f64, x[b] as f64);
                    y[a] = (xa * c - xb * s) as f32;
                    y[b] = (xb * c + xa * s) as f32;
                }
            }
        }
    }
}

pub fn rope(
    cx: &Cx,
    p: &RopeParams,
    x: &[f32],
    positions: &[i32],
    inv_freq: &[f32],
    y: &mut [f32],
) {
    let row = p.heads * p.head_dim;
    cx.pool
        .par_chunks_mut(&mut y[..p.tokens * row], row.max(1), |t, out| {
            let one = RopeParams { tokens: 1, ..*p };
            reference::rope(
                &one,
                &x[t * row..(t + 1) * row],
                &positions[t..t + 1],
                inv_freq,
                out,
            );
        });
}
