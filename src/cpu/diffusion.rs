//! The elementwise diffusion-sampler ops: one DDIM (eta 0) update and the classifier-free
//! guidance combination, with upstream's f32 operation order kept.

use super::Cx;
use crate::ops::{CfgParams, DdimParams};

pub mod reference {
    use crate::ops::{CfgParams, DdimParams};

    /// `kimodo/model/diffusion.py#L113-133`: `eps = (sqrt_recip*x_t - x0) / sqrt_recipm1`,
    /// `x_prev = x0*sqrt_prev + sqrt_1m_prev*eps`, every step rounded to f32.
    pub fn ddim(p: &DdimParams, x_t: &[f32], x0: &[f32], coef: &[f32], out: &mut [f32]) {
        let (sr, srm1, sp, s1mp) = (coef[0], coef[1], coef[2], coef[3]);
        for i in 0..p.n {
            let eps = (sr * x_t[i] - x0[i]) / srm1;
            out[i] = x0[i] * sp + s1mp * eps;
        }
    }

    /// `kimodo/model/cfg.py#L94-129`, left to right in f32.
    pub fn cfg(p: &CfgParams, rows: &[f32], out: &mut [f32]) {
        let n = p.n;
        if p.rows == 2 {
            let (c, u) = (&rows[..n], &rows[n..2 * n]);
            for i in 0..n {
                out[i] = u[i] + p.w_text * (c[i] - u[i]);
            }
        } else {
            let (t, c, u) = (&rows[..n], &rows[n..2 * n], &rows[2 * n..3 * n]);
            for i in 0..n {
                out[i] = u[i] + p.w_text * (t[i] - u[i]) + p.w_constraint * (c[i] - u[i]);
            }
        }
    }
}

pub fn ddim(cx: &Cx, p: &DdimParams, x_t: &[f32], x0: &[f32], coef: &[f32], out: &mut [f32]) {
    let _ = cx;
    reference::ddim(p, x_t, x0, coef, out);
}

pub fn cfg(cx: &Cx, p: &CfgParams, rows: &[f32], out: &mut [f32]) {
    let _ = cx;
    reference::cfg(p, rows, out);
}
