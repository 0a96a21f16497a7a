//! Deterministic synthetic Kimodo weights, for benchmarks without any file: every value is a
//! function of the tensor's name and the element's index, bit-identical to
//! `reference/bench_kimodo_torch.py` (the PyTorch side of the comparison), as `SYNTH.md`
//! specifies:
//!
//! ```text
//! SEED = 0x4B494D4F444F ("KIMODO")
//! stream(name) = fnv1a64(utf8(name)) ^ SEED
//! u_i = uniform(stream, i)          (crate::rng::uniform: SplitMix64, top 24 bits)
//! r_i = 2 u_i - 1                   (exact in f32)
//! *norm1.weight, *norm2.weight:     1 + r_i * 0.1
//! other *weight ([out, in]):        r_i * f32(sqrt(3 / in))    (sqrt in f64)
//! *bias:                            r_i * 0.02
//! stats *.mean: r_i * 0.1;  stats *.std: 0.5 + u_i
//! text feature "embedding" [1, llm_dim]: r_i
//! ```

use std::collections::BTreeMap;

use super::config::{KimodoConfig, KimodoModel, MotionStats, SkeletonKind, names};
use crate::models::kit::blocks::{TORCH_ENCODER_LAYER_TENSORS, torch_encoder_layer_shapes};
use crate::rng;
use crate::{HostTensor, Result};

/// "KIMODO" in ASCII.
pub const SEED: u64 = 0x4B49_4D4F_444F;

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The uniform stream of a tensor name.
pub fn stream(name: &str) -> u64 {
    fnv1a64(name.as_bytes()) ^ SEED
}

/// The released SOMA model's hyperparameters (kimodo.md §2): 283 M parameters.
pub fn released_soma() -> KimodoConfig {
    KimodoConfig {
        skeleton: SkeletonKind::Soma30,
        latent_dim: 1024,
        ff_size: 2048,
        num_layers: 16,
        num_heads: 8,
        llm_dim: 4096,
        num_text_tokens: 50,
        motion_dim: SkeletonKind::Soma30.motion_dim(),
        fps: 30.0,
        num_base_steps: 1000,
        input_first_heading_angle: true,
        cfg_text: 2.0,
        cfg_constraint: 2.0,
    }
}

/// `n` values of `name`, computed in parallel over chunks (each value depends only on its
/// index, so the result does not depend on the split).
fn values(name: &str, n: usize, f: impl Fn(f32) -> f32 + Sync) -> Vec<f32> {
    let s = stream(name);
    let mut out = vec![0f32; n];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let chunk = n.div_ceil(threads).max(1 << 16);
    std::thread::scope(|sc| {
        for (c, part) in out.chunks_mut(chunk).enumerate() {
            let f = &f;
            sc.spawn(move || {
                for (j, v) in part.iter_mut().enumerate() {
                    *v = f(rng::uniform(s, (c * chunk + j) as u64));
                }
            });
        }
    });
    out
}

/// The values of the tensor `name` with `shape`, by the rules above.
pub fn tensor_values(name: &str, shape: &[usize]) -> Vec<f32> {
    let n = shape.iter().product();
    let r = |u: f32| 2.0 * u - 1.0;
    if name.ends_with("norm1.weight") || name.ends_with("norm2.weight") {
        values(name, n, |u| r(u) * 0.1 + 1.0)
    } else if name.ends_with("weight") {
        let fan_in = shape.last().copied().unwrap_or(1);
        let s = (3.0 / fan_in as f64).sqrt() as f32;
        values(name, n, |u| r(u) * s)
    } else if name.ends_with("bias") {
        values(name, n, |u| r(u) * 0.02)
    } else if name.ends_with(".std") {
        values(name, n, |u| 0.5 + u)
    } else {
        // Statistics means and the text feature.
        let k = if name.ends_with(".mean") { 0.1 } else { 1.0 };
        values(name, n, |u| r(u) * k)
    }
}

/// The text feature `embedding`, `[llm_dim]` values.
pub fn embedding(config: &KimodoConfig) -> Vec<f32> {
    tensor_values("embedding", &[1, config.llm_dim])
}

/// Every tensor name of a Kimodo model with its shape (upstream's state_dict names without
/// `denoiser.backbone.`, kimodo.md §3), in a fixed order.
pub fn tensor_shapes(c: &KimodoConfig) -> Vec<(String, Vec<usize>)> {
    let (d, f) = (c.latent_dim, c.ff_size);
    let mut v = Vec::new();
    for (stage, (inp, out)) in names::STAGES
        .iter()
        .zip([(c.root_in(), c.root_out()), (c.body_in(), c.body_out())])
    {
        let mut add = |n: &str, s: &[usize]| v.push((format!("{stage}.{n}"), s.to_vec()));
        add("embed_text.weight", &[d, c.llm_dim]);
        add("embed_text.bias", &[d]);
        for k in [0, 2] {
            add(&format!("embed_timestep.time_embed.{k}.weight"), &[d, d]);
            add(&format!("embed_timestep.time_embed.{k}.bias"), &[d]);
        }
        add("input_linear.weight", &[d, inp]);
        add("input_linear.bias", &[d]);
        add("output_linear.weight", &[out, d]);
        add("output_linear.bias", &[out]);
        add("linear_first_heading_angle.weight", &[d, 2]);
        add("linear_first_heading_angle.bias", &[d]);
        for l in 0..c.num_layers {
            let p = format!("seqTransEncoder.layers.{l}");
            for (n, s) in TORCH_ENCODER_LAYER_TENSORS
                .iter()
                .zip(torch_encoder_layer_shapes(d, f))
            {
                add(&format!("{p}.{n}"), &s);
            }
        }
    }
    v
}

/// A complete model of the given size with synthetic weights and statistics (f32), the
/// statistics also as tensors: what [`KimodoModel::load`] gives for a converted file.
pub fn model(config: KimodoConfig) -> Result<KimodoModel> {
    let mut tensors = BTreeMap::new();
    for (name, shape) in tensor_shapes(&config) {
        let t = HostTensor::from_f32(&shape, &tensor_values(&name, &shape))?;
        tensors.insert(name, t);
    }
    let five = |n: &str| -> [f32; 5] { tensor_values(n, &[5]).try_into().expect("5 values") };
    let four = |n: &str| -> [f32; 4] { tensor_values(n, &[4]).try_into().expect("4 values") };
    let body = config.motion_dim - 5;
    let stats = MotionStats {
        global_mean: five(names::STATS_GLOBAL_MEAN),
        global_std: five(names::STATS_GLOBAL_STD),
        local_mean: four(names::STATS_LOCAL_MEAN),
        local_std: four(names::STATS_LOCAL_STD),
        body_mean: tensor_values(names::STATS_BODY_MEAN, &[body]),
        body_std: tensor_values(names::STATS_BODY_STD, &[body]),
    };
    // The statistics are tensors too, as in a converted file ([`KimodoModel::validate`]).
    for (name, v) in [
        (names::STATS_GLOBAL_MEAN, &stats.global_mean[..]),
        (names::STATS_GLOBAL_STD, &stats.global_std[..]),
        (names::STATS_LOCAL_MEAN, &stats.local_mean[..]),
        (names::STATS_LOCAL_STD, &stats.local_std[..]),
        (names::STATS_BODY_MEAN, &stats.body_mean[..]),
        (names::STATS_BODY_STD, &stats.body_std[..]),
    ] {
        tensors.insert(name.to_string(), HostTensor::from_f32(&[v.len()], v)?);
    }
    let model = KimodoModel {
        config,
        stats,
        tensors,
    };
    model.validate()?;
    Ok(model)
}

/// Parameters of a model of this size (both stages).
pub fn parameter_count(c: &KimodoConfig) -> usize {
    tensor_shapes(c)
        .iter()
        .map(|(_, s)| s.iter().product::<usize>())
        .sum()
}

/// FLOPs of one denoiser call over `rows` rows of `frames` frames (kimodo.md §2.1): per
/// stage, `layers (8 S D^2 + 4 S F D + 4 S^2 D)` per row with `S = prefix + frames`, plus the
/// input and output linears of the frames and the time MLP. The text projection runs once per
/// generation and is not counted.
pub fn flops_per_call(c: &KimodoConfig, rows: usize, frames: usize) -> f64 {
    let (d, f) = (c.latent_dim as f64, c.ff_size as f64);
    let s = (c.prefix_len() + frames) as f64;
    let t = frames as f64;
    let layer = 8.0 * s * d * d + 4.0 * s * f * d + 4.0 * s * s * d;
    let mut total = 0.0;
    for (inp, out) in [(c.root_in(), c.root_out()), (c.body_in(), c.body_out())] {
        total += rows as f64 * c.num_layers as f64 * layer;
        total += rows as f64 * 2.0 * t * (inp as f64 + out as f64) * d;
        total += 2.0 * 2.0 * d * d;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from `tests/fixtures/kimodo/synth_vectors.json`, which the numpy twin of this
    /// generator computed (f32 bit patterns).
    #[test]
    fn matches_the_python_generator() {
        // (name, shape, [(index, f32 bits)]).
        type Case = (&'static str, &'static [usize], &'static [(usize, u32)]);
        let cases: &[Case] = &[
            (
                "root_model.seqTransEncoder.layers.3.norm1.weight",
                &[1024],
                &[(0, 0x3f7680fa), (1, 0x3f805d64), (1023, 0x3f6ec429)],
            ),
            (
                "root_model.seqTransEncoder.layers.3.linear1.weight",
                &[2048, 1024],
                &[
                    (0, 0x3c97a205),
                    (1048576, 0xbbdfbc52),
                    (2097151, 0x3b8af320),
                ],
            ),
            (
                "body_model.input_linear.weight",
                &[1024, 737],
                &[(0, 0xbd139a66), (377344, 0xbca6007e), (754687, 0xbd26a858)],
            ),
            (
                "root_model.embed_timestep.time_embed.0.bias",
                &[1024],
                &[(0, 0x3c6a6533), (512, 0xbc6cfa23)],
            ),
            (
                "stats.global_root.mean",
                &[5],
                &[(0, 0x3ce9fa7a), (4, 0xbcae303a)],
            ),
            (
                "stats.body.std",
                &[364],
                &[(0, 0x3fb9d776), (363, 0x3fb83e25)],
            ),
            (
                "embedding",
                &[1, 4096],
                &[(0, 0x3e0d9728), (4095, 0xbe309058)],
            ),
        ];
        for (name, shape, want) in cases {
            let v = tensor_values(name, shape);
            for &(i, bits) in *want {
                assert_eq!(v[i].to_bits(), bits, "{name}[{i}]");
            }
        }
    }

    /// The released size has 283,281,777 parameters (kimodo.md §2) in 408 tensors.
    #[test]
    fn released_size() {
        let c = released_soma();
        assert_eq!(tensor_shapes(&c).len(), 408);
        assert_eq!(parameter_count(&c), 283_281_777);
        // kimodo.md §2.1: 114.4 GFLOP per row per step at T = 150 (both stages' layers).
        let per_row = flops_per_call(&c, 1, 150) / 1e9;
        assert!((per_row - 114.4).abs() < 1.5, "{per_row}");
    }
}
