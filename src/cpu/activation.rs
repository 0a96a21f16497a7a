//! Elementwise activations (ReLU, LeakyReLU, exact and tanh GELU, SiLU) and SwiGLU.

use super::{Cx, Isa};
use crate::ops::Activation;

/// Scalar references, written for clarity.
pub mod reference {
    use crate::ops::Activation;

    /// `erf` in f64 (Abramowitz-Stegun 7.1.26 is not accurate enough for an oracle, so this
    /// uses the series / continued fraction split, accurate to ~1e-15).
    pub fn erf(x: f64) -> f64 {
        if x.abs() < 2.5 {
            // Maclaurin series: erf x = 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)).
            let mut sum = 0.0;
            let mut term = x;
            let x2 = x * x;
            let mut n = 0.0;
            loop {
                let add = term / (2.0 * n + 1.0);
                sum += add;
                if add.abs() < 1e-17 * sum.abs().max(1e-300) {
                    break;
                }
                n += 1.0;
                term *= -x2 / n;
            }
            sum * std::f64::consts::FRAC_2_SQRT_PI
        } else {
            // erfc continued fraction (Lentz), for |x| >= 2.5.
            let a = x.abs();
            let mut f = a;
            let tiny = 1e-300;
            let mut c = f;
            let mut d = 0.0;
            for i in 1..200 {
                let an = i as f64 / 2.0;
                d = a + an * d;
                d = if d.abs() < tiny { tiny } else { d };
                c = a + an / c;
                c = if c.abs() < tiny { tiny } else { c };
                d = 1.0 / d;
                let delta = c * d;
                f *= delta;
                if (delta - 1.0).abs() < 1e-16 {
                    break;
                }
            }
            let erfc = (-a * a).exp() / (f * std::f64::consts::PI.sqrt());
            (1.0 - erfc).copysign(x)
        }
    }

    pub fn apply(act: Activation, x: f32) -> f32 {
        let xd = x as f64;
        match act {
            Activation::None => x,
            Activation::Relu => x.max(0.0),
            Activation::LeakyRelu(s) => {
                if x >= 0.0 {
                    x
                } else {
                    s * x
                }
            }
            Activation::Gelu => (0.5 * xd * (1.0 + erf(xd / std::f64::consts::SQRT_2))) as f32,
            Activation::GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                (0.5 * xd * (1.0 + (c * (xd + 0.044715 * xd * xd * xd)).tanh())) as f32
            }
            Activation::Silu => (xd / (1.0 + (-xd).exp())) as f32,
        }
    }

    pub fn activation(act: Activation, x: &[f32], y: &mut [f32]) {
        for (o, v) in y.iter_mut().zip(x) {
            *o = apply(act, *v);
        }
    }

    pub fn swiglu(gate: &[f32], up: &[f32], y: &mut [f32]) {
        for ((o, g), u) in y.iter_mut().zip(gate).zip(up) {
            *o = apply(Activation::Silu, *g) * u;
        }
    }
}

/// Elements per parallel task for elementwise kernels.
const CHUNK: usize = 1 << 14;

/// Apply `act` in place (used by fused epilogues).
pub fn apply_inplace(isa: Isa, act: Activation, x: &mut [f32]) {
    if act == Activation::None {
        return;
    }
    let _ = isa;
    for v in x.iter_mut() {
        *v = reference::apply(act, *v);
    }
}

pub fn activation(cx: &Cx, act: Activation, x: &[f32], y: &mut [f32]) {
    cx.pool.par_chunks_mut(y, CHUNK, |i, out| {
        let src = &x[i * CHUNK..i * CHUNK + out.len()];
        out.copy_from_slice(src);
        apply_inplace(cx.isa, act, out);
    });
}

pub fn swiglu(cx: &Cx, gate: &[f32], up: &[f32], y: &mut [f32]) {
    cx.pool.par_chunks_mut(y, CHUNK, |i, out| {
        let r = i * CHUNK..i * CHUNK + out.len();
        reference::swiglu(&gate[r.clone()], &up[r], out);
    });
}
