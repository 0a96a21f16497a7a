//! Elementwise arithmetic: add/mul with a repeated second operand, scale, axpby.

use super::Cx;
use crate::ops::BinaryParams;

pub mod reference {
    use crate::ops::{BinaryOp, BinaryParams};

    pub fn binary(p: &BinaryParams, a: &[f32], b: &[f32], y: &mut [f32]) {
        for i in 0..p.n {
            let bv = b[i % p.b_len];
            y[i] = match p.op {
                BinaryOp::Add => a[i] + bv,
                BinaryOp::Mul => a[i] * bv,
            };
        }
    }

    pub fn scale(s: f32, x: &[f32], y: &mut [f32]) {
        for (o, v) in y.iter_mut().zip(x) {
            *o = s * v;
        }
    }

    /// `a*x + b*y`, rounded as two products and one sum (no fused multiply-add), which is
    /// what the SIMD paths and PyTorch's `a*x + b*y` compute.
    pub fn axpby(a: f32, x: &[f32], b: f32, y: &[f32], out: &mut [f32]) {
        for ((o, xv), yv) in out.iter_mut().zip(x).zip(y) {
            *o = a * xv + b * yv;
        }
    }
}

pub fn binary(cx: &Cx, p: &BinaryParams, a: &[f32], b: &[f32], y: &mut [f32]) {
    let _ = cx;
    reference::binary(p, a, b, y);
}

pub fn scale(cx: &Cx, s: f32, x: &[f32], y: &mut [f32]) {
    let _ = cx;
    reference::scale(s, x, y);
}

pub fn axpby(cx: &Cx, a: f32, x: &[f32], b: f32, y: &[f32], out: &mut [f32]) {
    let _ = cx;
    reference::axpby(a, x, b, y, out);
}
