//! Gumbel-max sampling exactly as MotionBricks' `gumbel_sample`
//! (`motionbricks/motion_backbone/models/sampling.py#L4-14`).

use super::Cx;
use crate::ops::GumbelParams;

pub mod reference {
    use crate::ops::GumbelParams;

    /// `ln(max(x, 1e-20))`: upstream's `log` helper clamps its argument.
    pub fn log_safe(x: f32) -> f32 {
        x.max(1e-20).ln()
    }

    /// `-log_safe(-log_safe(u))`, both clamps kept.
    pub fn gumbel_noise(u: f32) -> f32 {
        -log_safe(-log_safe(u))
    }

    pub fn gumbel(p: &GumbelParams, logits: &[f32], uniforms: Option<&[f32]>, out: &mut [u32]) {
        let t = p.temperature.max(1e-10);
        let mut row = vec![0f32; p.cols];
        for r in 0..p.rows {
            for c in 0..p.cols {
                let i = r * p.cols + c;
                let u = match uniforms {
                    Some(u) => u[i],
                    None => super::super::rng::uniform(p.seed, p.counter + i as u64),
                };
                row[c] = logits[i] / t + gumbel_noise(u);
            }
            out[r] = super::super::argmax::reference::argmax_row(&row);
        }
    }
}

pub fn gumbel(
    cx: &Cx,
    p: &GumbelParams,
    logits: &[f32],
    uniforms: Option<&[f32]>,
    out: &mut [u32],
) {
    let _ = cx;
    reference::gumbel(p, logits, uniforms, out);
}
