//! The model kit's transformer blocks (`src/models/kit/blocks.rs`) on the CPU backend: each
//! block against the same ops recorded one by one.

use kinema::cpu::CpuBackend;
use kinema::graph::{Graph, TensorId};
use kinema::models::kit::blocks::*;
use kinema::ops::{Activation, MaskKind, RopePairing};
use kinema::{DType, HostTensor, Precision};

/// Deterministic values in [-s, s).
fn values(seed: u64, n: usize, s: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * s
        })
        .collect()
}

fn weight(g: &mut Graph, name: &str, shape: &[usize], seed: u64, s: f32) -> TensorId {
    let n = shape.iter().product();
    g.weight(
        name,
        HostTensor::from_f32(shape, &values(seed, n, s)).unwrap(),
    )
    .unwrap()
}

fn run(g: Graph, y: TensorId, inputs: &[(TensorId, Vec<f32>)]) -> Vec<f32> {
    run_with(g, y, inputs, &[])
}

fn run_with(
    mut g: Graph,
    y: TensorId,
    inputs: &[(TensorId, Vec<f32>)],
    ints: &[(TensorId, Vec<i32>)],
) -> Vec<f32> {
    g.output(y);
    let b = CpuBackend::new(Precision::Strict).unwrap();
    let exe = g.compile(&b).unwrap();
    for (t, v) in inputs {
        exe.write_f32(*t, v).unwrap();
    }
    for (t, v) in ints {
        exe.write_i32(*t, v).unwrap();
    }
    exe.run().unwrap();
    exe.read_f32(y).unwrap()
}

/// The post-norm layer is exactly the inline wiring Kimodo's denoiser had (same ops in the
/// same order, so bit-identical results).
#[test]
fn post_norm_layer_is_the_encoder_layer_wiring() {
    let (t, d, heads, ff) = (6, 16, 4, 24);
    let x_val = values(1, 2 * t * d, 1.5);
    let build = |blocks: bool| -> (Graph, TensorId, TensorId) {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[2, t, d]).unwrap();
        let wqkv = weight(&mut g, "wqkv", &[3 * d, d], 2, 0.3);
        let bqkv = weight(&mut g, "bqkv", &[3 * d], 3, 0.1);
        let wo = weight(&mut g, "wo", &[d, d], 4, 0.3);
        let bo = weight(&mut g, "bo", &[d], 5, 0.1);
        let w1 = weight(&mut g, "w1", &[ff, d], 6, 0.3);
        let b1 = weight(&mut g, "b1", &[ff], 7, 0.1);
        let w2 = weight(&mut g, "w2", &[d, ff], 8, 0.3);
        let b2 = weight(&mut g, "b2", &[d], 9, 0.1);
        let n1w = weight(&mut g, "n1w", &[d], 10, 1.0);
        let n1b = weight(&mut g, "n1b", &[d], 11, 0.1);
        let n2w = weight(&mut g, "n2w", &[d], 12, 1.0);
        let n2b = weight(&mut g, "n2b", &[d], 13, 0.1);
        let y = if blocks {
            EncoderLayer {
                attention: Attention {
                    qkv: Qkv::Fused(Linear {
                        w: wqkv,
                        b: Some(bqkv),
                    }),
                    out: Linear { w: wo, b: Some(bo) },
                    q_heads: heads,
                    kv_heads: heads,
                    mask: MaskKind::None,
                    mask_tensor: None,
                    rope: None,
                },
                mlp: Mlp::Activation {
                    up: Linear { w: w1, b: Some(b1) },
                    act: Activation::Gelu,
                    down: Linear { w: w2, b: Some(b2) },
                },
                norm1: Norm::Layer {
                    gamma: Some(n1w),
                    beta: Some(n1b),
                    eps: 1e-5,
                },
                norm2: Norm::Layer {
                    gamma: Some(n2w),
                    beta: Some(n2b),
                    eps: 1e-5,
                },
                placement: NormPlacement::Post,
            }
            .apply(&mut g, x)
            .unwrap()
        } else {
            let qkv = g.linear(x, wqkv, Some(bqkv), Activation::None).unwrap();
            let a = g
                .attention_qkv(qkv, None, heads, heads, MaskKind::None)
                .unwrap();
            let a = g.linear(a, wo, Some(bo), Activation::None).unwrap();
            let h = g.add(x, a).unwrap();
            let h = g.layer_norm(h, Some(n1w), Some(n1b), 1e-5).unwrap();
            let f = g.linear(h, w1, Some(b1), Activation::Gelu).unwrap();
            let f = g.linear(f, w2, Some(b2), Activation::None).unwrap();
            let y = g.add(h, f).unwrap();
            g.layer_norm(y, Some(n2w), Some(n2b), 1e-5).unwrap()
        };
        (g, x, y)
    };
    let (g, x, y) = build(true);
    let ours = run(g, y, &[(x, x_val.clone())]);
    let (g, x, y) = build(false);
    let inline = run(g, y, &[(x, x_val)]);
    assert_eq!(
        ours.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        inline.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

fn rms(x: &[f64], gamma: &[f32], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter()
        .zip(gamma)
        .map(|(v, &g)| v * r * g as f64)
        .collect()
}

/// `x [rows, k] . w[n, k]^T`.
fn matmul(x: &[f64], w: &[f32], k: usize) -> Vec<f64> {
    x.chunks(k)
        .flat_map(|row| {
            w.chunks(k)
                .map(|wr| row.iter().zip(wr).map(|(a, &b)| a * b as f64).sum::<f64>())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A Llama layer (pre-norm RMSNorm, grouped-query attention with rotate-half RoPE and a
/// causal mask, SwiGLU) matches an f64 evaluation of its formulas, with its q/k/v and gate/up
/// weights split or stacked ([`Graph::weight_rows`]: one linear each, RoPE on the fused rows'
/// leading heads, SwiGLU on the fused rows' halves; the CPU copies the parts together).
#[test]
fn pre_norm_llama_layer_matches_an_f64_reference() {
    let (t, qh, kvh, hd, ff) = (7, 4, 2, 8, 20);
    let (d, dkv) = (qh * hd, kvh * hd);
    let eps = 1e-5;
    let xv = values(21, t * d, 1.0);
    let wq = values(22, d * d, 0.3);
    let wk = values(23, dkv * d, 0.3);
    let wv = values(24, dkv * d, 0.3);
    let wo = values(25, d * d, 0.3);
    let wg = values(26, ff * d, 0.3);
    let wu = values(27, ff * d, 0.3);
    let wd = values(28, d * ff, 0.3);
    let g1: Vec<f32> = values(29, d, 0.5).iter().map(|v| 1.0 + v).collect();
    let g2: Vec<f32> = values(30, d, 0.5).iter().map(|v| 1.0 + v).collect();
    let inv_freq: Vec<f32> = (0..hd / 2)
        .map(|i| 10000f32.powf(-((2 * i) as f32) / hd as f32))
        .collect();
    let positions: Vec<i32> = (0..t as i32).map(|p| 3 + p).collect();

    let run = |stacked: bool| {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[1, t, d]).unwrap();
        let pos = g.input("pos", DType::I32, &[t]).unwrap();
        let host = |shape: &[usize], v: &[f32]| HostTensor::from_f32(shape, v).unwrap();
        let mut w =
            |name: &str, shape: &[usize], v: &[f32]| g.weight(name, host(shape, v)).unwrap();
        let g1 = w("g1", &[d], &g1);
        let g2 = w("g2", &[d], &g2);
        let o = w("o", &[d, d], &wo);
        let down = w("down", &[d, ff], &wd);
        let inv = w("inv_freq", &[hd / 2], &inv_freq);
        let (qkv, gate_up) = if stacked {
            let qkv = vec![
                host(&[d, d], &wq),
                host(&[dkv, d], &wk),
                host(&[dkv, d], &wv),
            ];
            let gu = vec![host(&[ff, d], &wg), host(&[ff, d], &wu)];
            (
                Projections::Stacked(g.weight_rows("qkv", qkv).unwrap()),
                Projections::Stacked(g.weight_rows("gate_up", gu).unwrap()),
            )
        } else {
            (
                Projections::Split([
                    w("q", &[d, d], &wq),
                    w("k", &[dkv, d], &wk),
                    w("v", &[dkv, d], &wv),
                ]),
                Projections::Split([w("gate", &[ff, d], &wg), w("up", &[ff, d], &wu)]),
            )
        };
        let weights = LlamaLayerWeights {
            attn_norm: g1,
            qkv,
            o,
            ffn_norm: g2,
            gate_up,
            down,
        };
        let rope = Rope {
            positions: pos,
            inv_freq: inv,
            pairing: RopePairing::RotateHalf,
        };
        let layer = EncoderLayer::llama(&weights, eps, qh, kvh, rope, MaskKind::Causal, None);
        let y = layer.apply(&mut g, x).unwrap();
        run_with(g, y, &[(x, xv.clone())], &[(pos, positions.clone())])
    };
    let split = run(false);
    let stacked = run(true);
    // Each output is the same dot product of the same weight row and input.
    assert!(
        split
            .iter()
            .zip(&stacked)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "stacked projections differ from split ones on the CPU"
    );
    let got = split;

    // The same layer in f64.
    let x64: Vec<f64> = xv.iter().map(|&v| v as f64).collect();
    let n1: Vec<f64> = x64
        .chunks(d)
        .flat_map(|r| rms(r, &g1, eps as f64))
        .collect();
    let rope = |m: &mut [f64], heads: usize| {
        for (ti, &p) in positions.iter().enumerate() {
            for h in 0..heads {
                let o = (ti * heads + h) * hd;
                for (i, &f) in inv_freq.iter().enumerate() {
                    let (s, c) = ((p as f32 * f) as f64).sin_cos();
                    let (a, b) = (m[o + i], m[o + i + hd / 2]);
                    m[o + i] = a * c - b * s;
                    m[o + i + hd / 2] = b * c + a * s;
                }
            }
        }
    };
    let mut q = matmul(&n1, &wq, d);
    let mut k = matmul(&n1, &wk, d);
    let v = matmul(&n1, &wv, d);
    rope(&mut q, qh);
    rope(&mut k, kvh);
    let mut att = vec![0f64; t * d];
    for h in 0..qh {
        let kh = h / (qh / kvh);
        for i in 0..t {
            let qi = &q[i * d + h * hd..][..hd];
            let s: Vec<f64> = (0..=i)
                .map(|j| {
                    let kj = &k[j * dkv + kh * hd..][..hd];
                    qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                })
                .collect();
            let m = s.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for (j, ej) in e.iter().enumerate() {
                for c in 0..hd {
                    att[i * d + h * hd + c] += ej / z * v[j * dkv + kh * hd + c];
                }
            }
        }
    }
    let a = matmul(&att, &wo, d);
    let h: Vec<f64> = x64.iter().zip(&a).map(|(x, a)| x + a).collect();
    let n2: Vec<f64> = h.chunks(d).flat_map(|r| rms(r, &g2, eps as f64)).collect();
    let gate = matmul(&n2, &wg, d);
    let up = matmul(&n2, &wu, d);
    let act: Vec<f64> = gate
        .iter()
        .zip(&up)
        .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
        .collect();
    let f = matmul(&act, &wd, ff);
    let want: Vec<f64> = h.iter().zip(&f).map(|(h, f)| h + f).collect();
    let err = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (*g as f64 - w).abs())
        .fold(0.0, f64::max);
    assert!(err < 2e-5, "max abs error {err}");
}

/// Stacked weights: parts must share the dtype and every dimension but the first; the stack's
/// shape sums the rows.
#[test]
fn stacked_weights_check_their_parts() {
    let t =
        |shape: &[usize]| HostTensor::from_f32(shape, &vec![0.5; shape.iter().product()]).unwrap();
    let mut g = Graph::new();
    let ok = g
        .weight_rows("qkv", vec![t(&[4, 3]), t(&[2, 3]), t(&[2, 3])])
        .unwrap();
    assert_eq!(g.tensor(ok).shape, vec![8, 3]);
    let e = g
        .weight_rows("bad", vec![t(&[4, 3]), t(&[2, 4])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"bad\"") && e.contains("part 1"), "{e}");
    let h = HostTensor::from_f16(&[2, 3], &[half::f16::ONE; 6]).unwrap();
    let e = g
        .weight_rows("mixed", vec![t(&[4, 3]), h])
        .unwrap_err()
        .to_string();
    assert!(e.contains("dtype"), "{e}");
    let e = g.weight_rows("none", vec![]).unwrap_err().to_string();
    assert!(e.contains("no parts"), "{e}");
    let e = g
        .weight_rows("flat", vec![t(&[4])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("not [rows"), "{e}");
}
