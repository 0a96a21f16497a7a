//! Op-level parity with PyTorch: fixtures captured by `reference/capture_ops.py` (torch on the
//! CPU, f32) from the expressions the upstream models use. Run on every CPU ISA this machine
//! has. The fixture is refused when its recorded script hash differs from the script in the
//! tree, so the two cannot drift apart silently.

mod common;

use std::path::PathBuf;

use common::*;
use kinema::backend::{Backend, Precision};
use kinema::cpu::{CpuBackend, Isa};
use kinema::formats::npz::NpzReader;
use kinema::ops::*;
use kinema::tensor::DType;

struct Fixture {
    npz: NpzReader,
}

impl Fixture {
    fn load() -> Fixture {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let npz = NpzReader::open(root.join("tests/fixtures/ops_torch.npz")).expect("fixture");
        let meta_bytes = npz.array("meta.json").expect("meta.json").data;
        let meta: serde_json::Value = serde_json::from_slice(&meta_bytes).expect("meta is JSON");
        let script = std::fs::read(root.join("reference/capture_ops.py")).expect("capture script");
        let digest = sha256_hex(&script);
        assert_eq!(
            meta["script_sha256"].as_str(),
            Some(digest.as_str()),
            "tests/fixtures/ops_torch.npz was captured by another version of reference/capture_ops.py: re-run it (meta {meta})"
        );
        Fixture { npz }
    }
    fn f32(&self, name: &str) -> Vec<f32> {
        self.npz
            .array(name)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .to_f32()
            .unwrap()
    }
    fn i64(&self, name: &str) -> Vec<i64> {
        self.npz
            .array(name)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .to_i64()
            .unwrap()
    }
    fn shape(&self, name: &str) -> Vec<usize> {
        self.npz.array(name).unwrap().shape
    }
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn backends() -> Vec<CpuBackend> {
    Isa::available()
        .into_iter()
        .map(|i| CpuBackend::with(i, 2, Precision::Strict).unwrap())
        .collect()
}

fn run<B: Backend>(b: &B, f: impl FnOnce(&mut B::Recording) -> kinema::Result<()>) {
    let mut rec = b.begin().unwrap();
    f(&mut rec).unwrap();
    b.submit(&rec).unwrap();
}

#[test]
fn activations_match_torch() {
    let fx = Fixture::load();
    let x = fx.f32("act.x");
    for b in backends() {
        let xb = upload_f32(&b, &x);
        let y = alloc(&b, DType::F32, x.len());
        for (name, act) in [
            ("gelu", Activation::Gelu),
            ("gelu_tanh", Activation::GeluTanh),
            ("silu", Activation::Silu),
            ("relu", Activation::Relu),
            ("leaky_relu", Activation::LeakyRelu(0.01)),
        ] {
            run(&b, |r| b.activation(r, act, &xb, &y));
            // torch's f32 GELU/SiLU are within ~2 ulp of the exact value; so are ours.
            assert_close(
                &format!("{name} on {:?}", b.isa()),
                &download_f32(&b, &y),
                &fx.f32(&format!("act.{name}")),
                4e-6,
                1e-6,
            );
        }
        let (g, u) = (
            upload_f32(&b, &fx.f32("swiglu.gate")),
            upload_f32(&b, &fx.f32("swiglu.up")),
        );
        let y = alloc(&b, DType::F32, 231);
        run(&b, |r| b.swiglu(r, &g, &u, &y));
        assert_close(
            "swiglu",
            &download_f32(&b, &y),
            &fx.f32("swiglu.out"),
            1e-6,
            1e-6,
        );
    }
}

#[test]
fn norms_and_softmax_match_torch() {
    let fx = Fixture::load();
    for b in backends() {
        let x = upload_f32(&b, &fx.f32("layer_norm.x"));
        let (w, bi) = (
            upload_f32(&b, &fx.f32("layer_norm.w")),
            upload_f32(&b, &fx.f32("layer_norm.b")),
        );
        let y = alloc(&b, DType::F32, 7 * 1024);
        run(&b, |r| {
            b.layer_norm(
                r,
                &NormParams {
                    rows: 7,
                    cols: 1024,
                    eps: 1e-5,
                },
                &x,
                Some(&w),
                Some(&bi),
                &y,
            )
        });
        assert_close(
            "layer_norm",
            &download_f32(&b, &y),
            &fx.f32("layer_norm.out"),
            1e-5,
            1e-6,
        );

        let x = upload_f32(&b, &fx.f32("rms_norm.x"));
        let w = upload_f32(&b, &fx.f32("rms_norm.w"));
        let y = alloc(&b, DType::F32, 5 * 4096);
        run(&b, |r| {
            b.rms_norm(
                r,
                &NormParams {
                    rows: 5,
                    cols: 4096,
                    eps: 1e-5,
                },
                &x,
                Some(&w),
                &y,
            )
        });
        assert_close(
            "rms_norm",
            &download_f32(&b, &y),
            &fx.f32("rms_norm.out"),
            1e-5,
            1e-6,
        );

        let x = upload_f32(&b, &fx.f32("softmax.x"));
        let y = alloc(&b, DType::F32, 9 * 254);
        run(&b, |r| {
            b.softmax(
                r,
                &SoftmaxParams {
                    rows: 9,
                    cols: 254,
                    scale: 0.125,
                },
                &x,
                &y,
            )
        });
        assert_close(
            "softmax",
            &download_f32(&b, &y),
            &fx.f32("softmax.out"),
            1e-6,
            1e-5,
        );
    }
}

#[test]
fn attention_matches_torch_sdpa() {
    let fx = Fixture::load();
    let (bt, s, h, kh, d) = (2, 37, 4, 2, 32);
    assert_eq!(fx.shape("attn.q"), vec![bt, s, h, d]);
    let keep: Vec<u32> = fx.i64("attn.keep").iter().map(|&v| v as u32).collect();
    for b in backends() {
        let (q, k, v) = (
            upload_f32(&b, &fx.f32("attn.q")),
            upload_f32(&b, &fx.f32("attn.k")),
            upload_f32(&b, &fx.f32("attn.v")),
        );
        let m = upload_u32(&b, &keep);
        let out = alloc(&b, DType::F32, bt * s * h * d);
        for (name, kind) in [
            ("none", MaskKind::None),
            ("pad", MaskKind::KeyPadding),
            ("causal", MaskKind::Causal),
        ] {
            let p = AttentionParams {
                batch: bt,
                q_len: s,
                kv_len: s,
                q_heads: h,
                kv_heads: kh,
                head_dim: d,
                scale: 1.0 / (d as f32).sqrt(),
                mask: kind,
                q_row_stride: h * d,
                kv_row_stride: kh * d,
            };
            let mref = (kind == MaskKind::KeyPadding).then_some(&m);
            run(&b, |r| b.attention(r, &p, &q, &k, &v, mref, &out));
            assert_close(
                &format!("attention {name} on {:?}", b.isa()),
                &download_f32(&b, &out),
                &fx.f32(&format!("attn.{name}")),
                2e-6,
                1e-6,
            );
        }
    }
}

#[test]
fn rope_conv_upsample_match_torch() {
    let fx = Fixture::load();
    let pos: Vec<i32> = fx.i64("rope.pos").iter().map(|&v| v as i32).collect();
    for b in backends() {
        let x = upload_f32(&b, &fx.f32("rope.x"));
        let pb = upload_i32(&b, &pos);
        let f = upload_f32(&b, &fx.f32("rope.inv_freq"));
        let y = alloc(&b, DType::F32, 19 * 3 * 64);
        for (name, pairing) in [
            ("half", RopePairing::RotateHalf),
            ("interleaved", RopePairing::Interleaved),
        ] {
            run(&b, |r| {
                b.rope(
                    r,
                    &RopeParams {
                        tokens: 19,
                        heads: 3,
                        head_dim: 64,
                        pairing,
                        row_stride: 3 * 64,
                    },
                    &x,
                    &pb,
                    &f,
                    &y,
                )
            });
            assert_close(
                &format!("rope {name}"),
                &download_f32(&b, &y),
                &fx.f32(&format!("rope.{name}")),
                1e-6,
                1e-6,
            );
        }
        let x = upload_f32(&b, &fx.f32("conv.x"));
        for (name, w, bias, k, pad, dil, ol) in [
            ("k3d2", "conv.w3", "conv.b3", 3, 2, 2, 12),
            ("k1", "conv.w1", "conv.b1", 1, 0, 1, 12),
        ] {
            let (wb, bb) = (upload_f32(&b, &fx.f32(w)), upload_f32(&b, &fx.f32(bias)));
            let y = alloc(&b, DType::F32, 2 * 8 * ol);
            let p = Conv1dParams {
                batch: 2,
                c_in: 16,
                c_out: 8,
                len: 12,
                kernel: k,
                padding: pad,
                dilation: dil,
            };
            run(&b, |r| b.conv1d(r, &p, &x, &wb, Some(&bb), &y));
            assert_close(
                &format!("conv1d {name}"),
                &download_f32(&b, &y),
                &fx.f32(&format!("conv.{name}")),
                2e-6,
                1e-6,
            );
        }
        let y = alloc(&b, DType::F32, 2 * 16 * 24);
        run(&b, |r| {
            b.upsample_nearest2x(r, &UpsampleParams { rows: 32, len: 12 }, &x, &y)
        });
        assert_eq!(download_f32(&b, &y), fx.f32("conv.up"));
    }
}

/// The sampler arithmetic must be bit-identical to PyTorch's f32 op sequence.
#[test]
fn sampler_ops_match_torch_exactly() {
    let fx = Fixture::load();
    for b in backends() {
        let out = alloc(&b, DType::F32, 300 * 64);
        run(&b, |r| {
            b.posenc(
                r,
                &PosEncParams {
                    start: 0,
                    len: 300,
                    dim: 64,
                },
                &out,
            )
        });
        assert_close(
            "posenc",
            &download_f32(&b, &out),
            &fx.f32("posenc.pe"),
            1e-6,
            1e-7,
        );

        let n = 3 * 202 * 8;
        let (xt, x0, c) = (
            upload_f32(&b, &fx.f32("ddim.x_t")),
            upload_f32(&b, &fx.f32("ddim.x0")),
            upload_f32(&b, &fx.f32("ddim.coef")),
        );
        let y = alloc(&b, DType::F32, n);
        run(&b, |r| b.ddim(r, &DdimParams { n }, &xt, &x0, &c, &y));
        assert_eq!(
            download_f32(&b, &y),
            fx.f32("ddim.out"),
            "ddim on {:?}",
            b.isa()
        );

        let rows = upload_f32(&b, &fx.f32("cfg.rows"));
        let m = 202 * 8;
        let y = alloc(&b, DType::F32, m);
        run(&b, |r| {
            b.cfg(
                r,
                &CfgParams {
                    n: m,
                    rows: 3,
                    w_text: 2.0,
                    w_constraint: 1.5,
                },
                &rows,
                &y,
            )
        });
        assert_eq!(
            download_f32(&b, &y),
            fx.f32("cfg.out3"),
            "cfg 3 rows on {:?}",
            b.isa()
        );
        // Two rows [text, uncond]: take rows 0 and 2 of the fixture.
        let r3 = fx.f32("cfg.rows");
        let two: Vec<f32> = r3[..m].iter().chain(&r3[2 * m..]).copied().collect();
        let rows2 = upload_f32(&b, &two);
        run(&b, |r| {
            b.cfg(
                r,
                &CfgParams {
                    n: m,
                    rows: 2,
                    w_text: 2.0,
                    w_constraint: 0.0,
                },
                &rows2,
                &y,
            )
        });
        assert_eq!(
            download_f32(&b, &y),
            fx.f32("cfg.out2"),
            "cfg 2 rows on {:?}",
            b.isa()
        );

        let logits = upload_f32(&b, &fx.f32("gumbel.logits"));
        let uni = upload_f32(&b, &fx.f32("gumbel.uniforms"));
        let tok = alloc(&b, DType::U32, 128);
        run(&b, |r| {
            b.gumbel(
                r,
                &GumbelParams {
                    rows: 128,
                    cols: 10,
                    temperature: 1.0,
                    seed: 0,
                    counter: 0,
                },
                &logits,
                Some(&uni),
                &tok,
            )
        });
        let want: Vec<u32> = fx.i64("gumbel.tokens").iter().map(|&v| v as u32).collect();
        assert_eq!(download_u32(&b, &tok), want, "gumbel on {:?}", b.isa());
        run(&b, |r| {
            b.argmax(
                r,
                &ArgmaxParams {
                    rows: 128,
                    cols: 10,
                },
                &logits,
                &tok,
            )
        });
        let want: Vec<u32> = fx.i64("argmax.tokens").iter().map(|&v| v as u32).collect();
        assert_eq!(download_u32(&b, &tok), want, "argmax on {:?}", b.isa());
    }
}

#[test]
fn pooling_and_linear_match_torch() {
    let fx = Fixture::load();
    let mask: Vec<u32> = fx.i64("pool.mask").iter().map(|&v| v as u32).collect();
    for b in backends() {
        let (x, m) = (upload_f32(&b, &fx.f32("pool.x")), upload_u32(&b, &mask));
        let y = alloc(&b, DType::F32, 2 * 64);
        run(&b, |r| {
            b.mean_pool(
                r,
                &MeanPoolParams {
                    batch: 2,
                    seq: 11,
                    dim: 64,
                },
                &x,
                &m,
                &y,
            )
        });
        assert_close(
            "mean_pool",
            &download_f32(&b, &y),
            &fx.f32("pool.out"),
            1e-6,
            1e-6,
        );

        let x = upload_f32(&b, &fx.f32("linear.x"));
        let bias = upload_f32(&b, &fx.f32("linear.b"));
        let y = alloc(&b, DType::F32, 13 * 40);
        let p = LinearParams {
            m: 13,
            n: 40,
            k: 96,
            activation: Activation::None,
        };
        let w = upload_f32(&b, &fx.f32("linear.w"));
        run(&b, |r| b.linear(r, &p, &x, &w, Some(&bias), &y));
        assert_close(
            "linear f32",
            &download_f32(&b, &y),
            &fx.f32("linear.out"),
            1e-5,
            1e-6,
        );
        // bf16 weights: store the exactly-representable values as bf16 and compare with torch
        // computing on the same values widened.
        let wv = fx.f32("linear.w_bf16_as_f32");
        let wb: Vec<half::bf16> = wv.iter().map(|&v| half::bf16::from_f32(v)).collect();
        assert!(wb.iter().zip(&wv).all(|(h, f)| h.to_f32() == *f));
        let w = upload(&b, DType::BF16, bytemuck::cast_slice(&wb), wb.len());
        run(&b, |r| b.linear(r, &p, &x, &w, Some(&bias), &y));
        assert_close(
            "linear bf16 weights",
            &download_f32(&b, &y),
            &fx.f32("linear.out_bf16w"),
            1e-5,
            1e-6,
        );
    }
}
