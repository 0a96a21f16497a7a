//! Synthetic MotionBricks weights from a counter-based formula, the same one
//! `reference/capture_motionbricks.py` (`weight_value`) fills upstream's modules with, so the
//! parity tests rebuild the checkpoint from the tensor names and shapes alone.
//!
//! Element `i` of tensor `name`: `r_i = 2 u_i - 1` with `u_i = `[`rng::uniform`]`(fnv1a64(name),
//! i)`; then LayerNorm gains (`.norm` in the name, leaf `weight`) are `1 + 0.1 r`, biases
//! `0.1 r`, tensors of rank >= 2 `r sqrt(3 / prod(shape[1..]))`, everything else `r`. The
//! arithmetic is done in f64 and rounded to f32 once, as numpy does it.

use crate::models::kimodo::synthetic::fnv1a64;
use crate::rng;

/// The values of one synthetic tensor.
pub fn tensor_values(name: &str, shape: &[usize]) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let seed = fnv1a64(name.as_bytes());
    let leaf = name.rsplit('.').next().unwrap_or(name);
    let fan: usize = shape.iter().skip(1).product();
    let kind = if name.contains(".norm") && leaf == "weight" {
        Kind::Gain
    } else if leaf == "bias" {
        Kind::Bias
    } else if shape.len() >= 2 {
        Kind::Scaled((3.0 / fan as f64).sqrt())
    } else {
        Kind::Plain
    };
    (0..n as u64)
        .map(|i| {
            let r = rng::uniform(seed, i) as f64 * 2.0 - 1.0;
            let v = match kind {
                Kind::Gain => 1.0 + 0.1 * r,
                Kind::Bias => 0.1 * r,
                Kind::Scaled(s) => r * s,
                Kind::Plain => r,
            };
            v as f32
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Kind {
    Gain,
    Bias,
    Scaled(f64),
    Plain,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_ranges() {
        let g = tensor_values(
            "backbone_net._transformer_model.layers.0.norm1.weight",
            &[64],
        );
        assert!(g.iter().all(|&x| (0.9..=1.1).contains(&x)));
        let b = tensor_values("backbone_net._proj_input.0.bias", &[64]);
        assert!(b.iter().all(|&x| (-0.1..=0.1).contains(&x)));
        let w = tensor_values("backbone_net._proj_input.0.weight", &[8, 12]);
        let s = (3.0f64 / 12.0).sqrt() as f32;
        assert!(w.iter().all(|&x| x.abs() <= s));
        let p = tensor_values("backbone_net._no_local_pose_emb", &[32]);
        assert!(p.iter().all(|&x| (-1.0..1.0).contains(&x)));
        assert_ne!(
            p[..4],
            tensor_values("backbone_net._no_local_root_emb", &[4])[..]
        );
    }
}
