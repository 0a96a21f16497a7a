//! Sinusoidal positional encoding, as Kimodo's `PositionalEncoding`
//! (`kimodo/model/backbone.py#L253-266`): `div_i = 10000^(-2i/dim)` by an f32 `pow`,
//! `pe[p, 2i] = sin(p * div_i)`, `pe[p, 2i+1] = cos(p * div_i)`, all in f32.

use super::Cx;
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

pub fn posenc(cx: &Cx, p: &PosEncParams, out: &mut [f32]) {
    let _ = cx;
    reference::posenc(p, out);
}
