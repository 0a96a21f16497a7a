//! One test body per op, generic over the dispatch trait, run on every CPU ISA this machine has
//! (and, with the Vulkan backend, on every Vulkan device). Each compares the backend with the
//! scalar reference of `kinema::cpu`. Kernel-level property tests with random shapes live next
//! to each kernel; these check the backend contract end to end: operand checks, offsets,
//! record-then-submit and re-submission.

mod common;

use common::*;
use half::{bf16, f16};
use kinema::backend::{Backend, Precision};
use kinema::cpu::{self, CpuBackend, Isa, Weights};
use kinema::ops::*;
use kinema::tensor::{DType, Q8_0_BLOCK_BYTES, q8_0_quantize_block};
use kinema::vulkan::{VulkanBackend, VulkanOptions};
use std::sync::OnceLock;

/// Relative L2 bound for f32 ops whose fast paths reassociate sums or use vector
/// approximations of exp/erf/tanh (a few ulp per element; sums over <= 4096 terms).
const REL_F32: f32 = 2e-6;

/// The smallest gap, over rows, between the best and the second-best Gumbel score (the CPU
/// reference's scores; rows whose best is NaN are skipped). Backends compute the noise's `ln`
/// differently by a few ulp (`kinema::vulkan::GUMBEL_NOISE_ULP`), so a test can demand equal
/// tokens only of data whose rows have no near-tie: 1e-4 is far above that error for scores of
/// magnitude below 100.
fn gumbel_margin(p: &GumbelParams, logits: &[f32], uniforms: Option<&[f32]>) -> f32 {
    let t = p.temperature.max(1e-10);
    let mut margin = f32::INFINITY;
    for r in 0..p.rows {
        let (mut best, mut second) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for c in 0..p.cols {
            let i = r * p.cols + c;
            let u = uniforms.map_or_else(
                || kinema::rng::uniform(p.seed, p.counter + i as u64),
                |u| u[i],
            );
            let s = logits[i] / t + cpu::gumbel::reference::gumbel_noise(u);
            if s.is_nan() {
                best = f32::NAN;
                break;
            }
            if s > best {
                (best, second) = (s, best);
            } else if s > second {
                second = s;
            }
        }
        if !best.is_nan() {
            margin = margin.min(best - second);
        }
    }
    margin
}

fn run<B: Backend>(b: &B, f: impl FnOnce(&mut B::Recording) -> kinema::Result<()>) {
    let mut rec = b.begin().expect("begin");
    f(&mut rec).expect("record");
    b.submit(&rec).expect("submit");
    b.sync().expect("sync");
}

mod bodies {
    use super::*;

    pub fn linear<B: Backend>(b: &B) {
        let mut r = Rng(1);
        for &(m, n, k) in &[(1, 1, 32), (7, 13, 64), (33, 17, 96), (202, 40, 160)] {
            let x = r.vec(m * k, -1.0, 1.0);
            let wf = r.vec(n * k, -1.0, 1.0);
            let bias = r.vec(n, -1.0, 1.0);
            let w16: Vec<f16> = wf.iter().map(|&v| f16::from_f32(v)).collect();
            let wb: Vec<bf16> = wf.iter().map(|&v| bf16::from_f32(v)).collect();
            let mut wq = vec![0u8; n * k / 32 * Q8_0_BLOCK_BYTES];
            for (blk, out) in wf.chunks(32).zip(wq.chunks_mut(Q8_0_BLOCK_BYTES)) {
                q8_0_quantize_block(blk, out);
            }
            let cases: Vec<(DType, Vec<u8>, Weights)> = vec![
                (
                    DType::F32,
                    bytemuck::cast_slice(&wf).to_vec(),
                    Weights::F32(&wf),
                ),
                (
                    DType::F16,
                    bytemuck::cast_slice(&w16).to_vec(),
                    Weights::F16(&w16),
                ),
                (
                    DType::BF16,
                    bytemuck::cast_slice(&wb).to_vec(),
                    Weights::BF16(&wb),
                ),
                (DType::Q8_0, wq.clone(), Weights::Q8_0(&wq)),
            ];
            for (dt, bytes, wref) in cases {
                for act in [Activation::None, Activation::Gelu] {
                    let p = LinearParams {
                        m,
                        n,
                        k,
                        activation: act,
                    };
                    let mut want = vec![0f32; m * n];
                    cpu::matmul::reference::linear(&p, &x, wref, Some(&bias), &mut want);
                    let xb = upload_f32(b, &x);
                    let wbuf = upload(b, dt, &bytes, n * k);
                    let bb = upload_f32(b, &bias);
                    let y = alloc(b, DType::F32, m * n);
                    run(b, |rec| b.linear(rec, &p, &xb, &wbuf, Some(&bb), &y));
                    // bf16 weights in fast mode on the CPU round x to bf16 as well (8-bit
                    // mantissa); cooperative matrices round x and w to f16 (11-bit).
                    let info = b.info();
                    let fast_bf16 = dt == DType::BF16 && info.precision == Precision::Fast;
                    let tol = if fast_bf16 || info.cooperative_matrix {
                        1e-2
                    } else {
                        REL_F32
                    };
                    assert_close(
                        &format!("linear {m}x{n}x{k} {dt} {act:?}"),
                        &download_f32(b, &y),
                        &want,
                        tol * k as f32,
                        tol,
                    );
                }
            }
        }
    }

    pub fn batched_matmul<B: Backend>(b: &B) {
        let mut r = Rng(2);
        for &(batch, m, n, k, trans_b, bcast) in &[
            (1, 1, 1, 1, false, false),
            (3, 5, 7, 9, true, false),
            (2, 17, 33, 19, false, true),
            // More than one tile along m, n and k.
            (2, 70, 65, 40, true, true),
        ] {
            let a = r.vec(batch * m * k, -1.0, 1.0);
            let bv = r.vec(if bcast { k * n } else { batch * k * n }, -1.0, 1.0);
            let p = BatchedMatmulParams {
                batch,
                m,
                n,
                k,
                trans_b,
                alpha: 0.5,
                a_batch_stride: m * k,
                b_batch_stride: if bcast { 0 } else { k * n },
            };
            let mut want = vec![0f32; batch * m * n];
            cpu::matmul::reference::batched_matmul(&p, &a, &bv, &mut want);
            let (ab, bb, c) = (
                upload_f32(b, &a),
                upload_f32(b, &bv),
                alloc(b, DType::F32, batch * m * n),
            );
            run(b, |rec| b.batched_matmul(rec, &p, &ab, &bb, &c));
            assert_close("batched_matmul", &download_f32(b, &c), &want, 1e-5, REL_F32);
        }
    }

    pub fn norms<B: Backend>(b: &B) {
        let mut r = Rng(3);
        for &(rows, cols) in &[(1, 1), (3, 17), (606, 1024), (3, 4500)] {
            let x: Vec<f32> = r.vec(rows * cols, -3.0, 5.0);
            let g = r.vec(cols, 0.5, 1.5);
            let be = r.vec(cols, -0.5, 0.5);
            let p = NormParams {
                rows,
                cols,
                eps: 1e-5,
            };
            let (xb, gb, bb) = (upload_f32(b, &x), upload_f32(b, &g), upload_f32(b, &be));
            let y = alloc(b, DType::F32, rows * cols);
            let mut want = vec![0f32; rows * cols];
            cpu::norm::reference::layer_norm(&p, &x, Some(&g), Some(&be), &mut want);
            run(b, |rec| {
                b.layer_norm(rec, &p, &xb, Some(&gb), Some(&bb), &y)
            });
            assert_close("layer_norm", &download_f32(b, &y), &want, 1e-5, REL_F32);
            cpu::norm::reference::rms_norm(&p, &x, Some(&g), &mut want);
            run(b, |rec| b.rms_norm(rec, &p, &xb, Some(&gb), &y));
            assert_close("rms_norm", &download_f32(b, &y), &want, 1e-5, REL_F32);
            // Without the optional affine operands.
            cpu::norm::reference::layer_norm(&p, &x, None, None, &mut want);
            run(b, |rec| b.layer_norm(rec, &p, &xb, None, None, &y));
            assert_close(
                "layer_norm plain",
                &download_f32(b, &y),
                &want,
                1e-5,
                REL_F32,
            );
            cpu::norm::reference::rms_norm(&p, &x, None, &mut want);
            run(b, |rec| b.rms_norm(rec, &p, &xb, None, &y));
            assert_close("rms_norm plain", &download_f32(b, &y), &want, 1e-5, REL_F32);
            // The fused residual: close to the reference, and bit-identical to this backend's
            // own add followed by layer_norm (what lets the models fuse them).
            let res = r.vec(rows * cols, -2.0, 2.0);
            let rb = upload_f32(b, &res);
            for (gamma, beta) in [(Some(&gb), Some(&bb)), (None, None)] {
                let (g, be) = (gamma.map(|_| &g[..]), beta.map(|_| &be[..]));
                cpu::norm::reference::add_layer_norm(&p, &x, &res, g, be, &mut want);
                run(b, |rec| {
                    b.add_layer_norm(rec, &p, &xb, &rb, gamma, beta, &y)
                });
                let fused = download_f32(b, &y);
                assert_close("add_layer_norm", &fused, &want, 1e-5, REL_F32);
                let sum = alloc(b, DType::F32, rows * cols);
                let add = BinaryParams {
                    op: BinaryOp::Add,
                    n: rows * cols,
                    b_len: rows * cols,
                };
                run(b, |rec| {
                    b.binary(rec, &add, &xb, &rb, &sum)?;
                    b.layer_norm(rec, &p, &sum, gamma, beta, &y)
                });
                let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&fused),
                    bits(&download_f32(b, &y)),
                    "add_layer_norm {rows}x{cols} is not add then layer_norm to the bit"
                );
            }
        }
    }

    pub fn softmax<B: Backend>(b: &B) {
        let mut r = Rng(4);
        // 70000 rows need more workgroups than one grid dimension may hold (65535).
        for &(rows, cols) in &[(1, 1), (5, 33), (64, 254), (3, 5000), (70_000, 3)] {
            let mut x = r.vec(rows * cols, -20.0, 20.0);
            // Masked logits: -inf entries get probability 0 (every row keeps a finite one).
            for v in x.iter_mut().skip(1).step_by(7) {
                *v = f32::NEG_INFINITY;
            }
            let p = SoftmaxParams {
                rows,
                cols,
                scale: 0.7,
            };
            let mut want = vec![0f32; rows * cols];
            cpu::softmax::reference::softmax(&p, &x, &mut want);
            let (xb, y) = (upload_f32(b, &x), alloc(b, DType::F32, rows * cols));
            run(b, |rec| b.softmax(rec, &p, &xb, &y));
            assert_close("softmax", &download_f32(b, &y), &want, 1e-6, REL_F32);
        }
    }

    pub fn attention<B: Backend>(b: &B) {
        let mut r = Rng(5);
        for &(batch, ql, kl, qh, kh, d, mask) in &[
            (1, 1, 1, 1, 1, 8, MaskKind::None),
            (2, 9, 9, 4, 2, 16, MaskKind::Causal),
            (3, 21, 21, 2, 2, 32, MaskKind::KeyPadding),
            (1, 5, 12, 8, 1, 64, MaskKind::Causal),
            // Several query blocks and key tiles; head_dim 128; more queries than keys, so
            // the first causal rows see no key; a GQA group of 4.
            (1, 40, 70, 4, 2, 128, MaskKind::Causal),
            (2, 37, 23, 4, 1, 64, MaskKind::Causal),
            (2, 45, 77, 2, 2, 40, MaskKind::KeyPadding),
            // Kimodo's shape (3 CFG rows, 202 tokens, 8 heads of 128) and odd lengths that
            // leave partial query blocks and key tiles.
            (3, 202, 202, 8, 8, 128, MaskKind::None),
            (3, 202, 202, 8, 8, 128, MaskKind::KeyPadding),
            (1, 254, 254, 8, 4, 128, MaskKind::Causal),
            (1, 131, 255, 3, 1, 72, MaskKind::KeyPadding),
        ] {
            // q, k and v are column slices of one fused [tokens, qh+2kh heads] buffer.
            let width = (qh + 2 * kh) * d;
            let fused_q = r.vec(batch * ql * width, -1.0, 1.0);
            let fused_kv = r.vec(batch * kl * width, -1.0, 1.0);
            // Every third key hidden, and all keys of batch 2 (its queries output zeros).
            let m: Vec<u32> = (0..batch * kl)
                .map(|i| u32::from(i % 3 != 1 && i / kl != 2))
                .collect();
            let p = AttentionParams {
                batch,
                q_len: ql,
                kv_len: kl,
                q_heads: qh,
                kv_heads: kh,
                head_dim: d,
                scale: 1.0 / (d as f32).sqrt(),
                mask,
                q_row_stride: width,
                kv_row_stride: width,
            };
            let mut want = vec![0f32; batch * ql * qh * d];
            let mk = (mask == MaskKind::KeyPadding).then_some(m.as_slice());
            cpu::attention::reference::attention(
                &p,
                &fused_q,
                &fused_kv[qh * d..],
                &fused_kv[(qh + kh) * d..],
                mk,
                &mut want,
            );
            let qb = upload_f32(b, &fused_q);
            let kvb = upload_f32(b, &fused_kv);
            let kb = kvb.slice(qh * d, kvb.len - qh * d).unwrap();
            let vb = kvb.slice((qh + kh) * d, kvb.len - (qh + kh) * d).unwrap();
            let mb = upload_u32(b, &m);
            let out = alloc(b, DType::F32, want.len());
            let mref = (mask == MaskKind::KeyPadding).then_some(&mb);
            run(b, |rec| b.attention(rec, &p, &qb, &kb, &vb, mref, &out));
            // Fast mode on cooperative matrices (head_dim 128 on a device that has them)
            // rounds q * scale, k, v and p to f16 (2^-11 relative each) before f32 sums: with
            // inputs in [-1, 1] an output moves by a few 2^-11 at most (measured on the H200:
            // 1.2e-4). tests/vulkan.rs (`fast_attention_within_f16_rounding`) holds it to
            // its derived per-element bound; here the f16 input rounding sets the scale.
            let f16_inputs = b.info().cooperative_matrix && d == 128;
            let (abs, rel) = if f16_inputs {
                (4.0 / 2048.0, 4.0 / 2048.0)
            } else {
                (1e-5, REL_F32)
            };
            assert_close(
                &format!("attention {mask:?} d {d} fast {f16_inputs}"),
                &download_f32(b, &out),
                &want,
                abs,
                rel,
            );
        }
    }

    pub fn activations<B: Backend>(b: &B) {
        let mut r = Rng(6);
        let x = r.vec(4099, -12.0, 12.0);
        let xb = upload_f32(b, &x);
        let y = alloc(b, DType::F32, x.len());
        for act in [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu(0.01),
            Activation::Gelu,
            Activation::GeluTanh,
            Activation::Silu,
        ] {
            let mut want = vec![0f32; x.len()];
            cpu::activation::reference::activation(act, &x, &mut want);
            run(b, |rec| b.activation(rec, act, &xb, &y));
            assert_close(
                &format!("{act:?}"),
                &download_f32(b, &y),
                &want,
                1e-5,
                REL_F32,
            );
        }
        // ReLU and LeakyReLU are exact, specials included: NaN stays NaN (PyTorch's relu
        // propagates it), -0 becomes +0 under ReLU, infinities pass or scale.
        let specials = [
            -0.0,
            0.0,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -3.5,
        ];
        let sb = upload_f32(b, &specials);
        let y = alloc(b, DType::F32, specials.len());
        for act in [Activation::Relu, Activation::LeakyRelu(0.25)] {
            let mut want = vec![0f32; specials.len()];
            cpu::activation::reference::activation(act, &specials, &mut want);
            run(b, |rec| b.activation(rec, act, &sb, &y));
            let got = download_f32(b, &y);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let same = if w.is_nan() {
                    g.is_nan()
                } else {
                    g.to_bits() == w.to_bits()
                };
                assert!(same, "{act:?}({}) = {g}, want {w}", specials[i]);
            }
        }
    }

    pub fn swiglu<B: Backend>(b: &B) {
        let mut r = Rng(6);
        let x = r.vec(4099, -12.0, 12.0);
        let xb = upload_f32(b, &x);
        let y = alloc(b, DType::F32, x.len());
        let up = r.vec(x.len(), -2.0, 2.0);
        let ub = upload_f32(b, &up);
        let mut want = vec![0f32; x.len()];
        cpu::activation::reference::swiglu(&x, &up, &mut want);
        run(b, |rec| b.swiglu(rec, &xb, &ub, &y));
        assert_close("swiglu", &download_f32(b, &y), &want, 1e-5, REL_F32);
        // The halves of fused gate/up rows [rows, 2 cols], read in place with a row stride:
        // the same values as the contiguous op on the split halves, bit for bit.
        let (rows, cols) = (7, 1031);
        let fused = r.vec(rows * 2 * cols, -12.0, 12.0);
        let fb = upload_f32(b, &fused);
        let (mut gate, mut up) = (Vec::new(), Vec::new());
        for row in fused.chunks(2 * cols) {
            gate.extend_from_slice(&row[..cols]);
            up.extend_from_slice(&row[cols..]);
        }
        let split = alloc(b, DType::F32, rows * cols);
        let (gb, ub) = (upload_f32(b, &gate), upload_f32(b, &up));
        run(b, |rec| b.swiglu(rec, &gb, &ub, &split));
        let y = alloc(b, DType::F32, rows * cols);
        let p = SwigluParams {
            rows,
            cols,
            stride: 2 * cols,
        };
        let up_half = fb.slice(cols, fused.len() - cols).unwrap();
        run(b, |rec| {
            b.record(
                rec,
                Call::Swiglu {
                    p: &p,
                    gate: &fb,
                    up: &up_half,
                    y: &y,
                },
            )
        });
        let (got, want) = (download_f32(b, &y), download_f32(b, &split));
        assert!(
            got.iter()
                .zip(&want)
                .all(|(g, w)| g.to_bits() == w.to_bits()),
            "strided swiglu differs from the contiguous op"
        );
        // A stride shorter than a row, and a buffer one element short, are refused.
        let bad = SwigluParams {
            stride: cols - 1,
            ..p
        };
        let mut rec = b.begin().unwrap();
        let call = |p| Call::Swiglu {
            p,
            gate: &fb,
            up: &up_half,
            y: &y,
        };
        let e = b.record(&mut rec, call(&bad)).unwrap_err().to_string();
        assert!(e.contains("row stride"), "{e}");
        let short = fb.slice(cols + 1, fused.len() - cols - 1).unwrap();
        let e = b
            .record(
                &mut rec,
                Call::Swiglu {
                    p: &p,
                    gate: &fb,
                    up: &short,
                    y: &y,
                },
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("swiglu") && e.contains("up"), "{e}");
    }

    pub fn rope<B: Backend>(b: &B) {
        let mut r = Rng(7);
        // The last case reaches position 40990: large angles need an accurate reduction.
        // The fourth and fifth rotate the query and key heads of fused Q/K/V rows (3 + 1 heads,
        // then 1 value head and 5 more elements carried through).
        for (pairing, step, carried) in [
            (RopePairing::RotateHalf, 37, 0),
            (RopePairing::Interleaved, 37, 0),
            (RopePairing::RotateHalf, 4099, 0),
            (RopePairing::RotateHalf, 37, 21),
            (RopePairing::Interleaved, 37, 21),
        ] {
            let (tokens, heads, d) = (11, 3 + usize::from(carried > 0), 16);
            let row_stride = heads * d + carried;
            let x = r.vec(tokens * row_stride, -1.0, 1.0);
            let pos: Vec<i32> = (0..tokens as i32).map(|t| t * step).collect();
            let f: Vec<f32> = (0..d / 2)
                .map(|i| 10000f32.powf(-((2 * i) as f32) / d as f32))
                .collect();
            let p = RopeParams {
                tokens,
                heads,
                head_dim: d,
                pairing,
                row_stride,
            };
            let mut want = vec![0f32; x.len()];
            cpu::rope::reference::rope(&p, &x, &pos, &f, &mut want);
            let (xb, pb, fb, y) = (
                upload_f32(b, &x),
                upload_i32(b, &pos),
                upload_f32(b, &f),
                alloc(b, DType::F32, x.len()),
            );
            run(b, |rec| b.rope(rec, &p, &xb, &pb, &fb, &y));
            assert_close("rope", &download_f32(b, &y), &want, 1e-5, REL_F32);
        }
    }

    pub fn conv<B: Backend>(b: &B) {
        let mut r = Rng(8);
        for &(batch, ci, co, len, kernel, pad, dil) in &[
            (1, 3, 5, 7, 3, 1, 1),
            (2, 8, 4, 16, 3, 2, 2),
            (1, 16, 16, 5, 1, 0, 1),
        ] {
            let p = Conv1dParams {
                batch,
                c_in: ci,
                c_out: co,
                len,
                kernel,
                padding: pad,
                dilation: dil,
            };
            let ol = p.out_len().unwrap();
            let x = r.vec(batch * ci * len, -1.0, 1.0);
            let w = r.vec(co * ci * kernel, -1.0, 1.0);
            let bias = r.vec(co, -1.0, 1.0);
            let mut want = vec![0f32; batch * co * ol];
            cpu::conv1d::reference::conv1d(&p, &x, &w, Some(&bias), &mut want);
            let (xb, wb, bb, y) = (
                upload_f32(b, &x),
                upload_f32(b, &w),
                upload_f32(b, &bias),
                alloc(b, DType::F32, want.len()),
            );
            run(b, |rec| b.conv1d(rec, &p, &xb, &wb, Some(&bb), &y));
            assert_close("conv1d", &download_f32(b, &y), &want, 1e-5, REL_F32);
        }
        let x = r.vec(6 * 9, -1.0, 1.0);
        let p = UpsampleParams { rows: 6, len: 9 };
        let mut want = vec![0f32; 108];
        cpu::conv1d::reference::upsample_nearest2x(&p, &x, &mut want);
        let (xb, y) = (upload_f32(b, &x), alloc(b, DType::F32, 108));
        run(b, |rec| b.upsample_nearest2x(rec, &p, &xb, &y));
        assert_eq!(download_f32(b, &y), want);
    }

    /// Elementwise arithmetic, DDIM and CFG must match the reference bit for bit.
    pub fn elementwise<B: Backend>(b: &B) {
        let mut r = Rng(9);
        let n = 1031;
        let (x, y0) = (r.vec(n, -4.0, 4.0), r.vec(n, -4.0, 4.0));
        let bv = r.vec(n, -4.0, 4.0);
        let (xb, yb, out) = (
            upload_f32(b, &x),
            upload_f32(b, &y0),
            alloc(b, DType::F32, n),
        );
        for (op, bl) in [(BinaryOp::Add, 1), (BinaryOp::Mul, 7), (BinaryOp::Add, n)] {
            let p = BinaryParams {
                op,
                n: if n % bl == 0 { n } else { n / bl * bl },
                b_len: bl,
            };
            let bb = upload_f32(b, &bv[..bl]);
            let mut want = vec![0f32; p.n];
            cpu::elementwise::reference::binary(&p, &x, &bv[..bl], &mut want);
            run(b, |rec| b.binary(rec, &p, &xb, &bb, &out));
            assert_eq!(
                download_f32(b, &out)[..p.n],
                want[..],
                "binary {op:?} b_len {bl}"
            );
        }
        // masked_act: against its reference and against the unfused ops it replaces, with
        // a 0/1 mask (MotionBricks') and a general one, and -0, NaN and infinities in x.
        let mut xs = x.clone();
        xs[..4].copy_from_slice(&[-0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
        let xsb = upload_f32(b, &xs);
        let binary_mask: Vec<f32> = (0..n).map(|i| (i % 5 != 2) as u8 as f32).collect();
        for mask in [binary_mask, bv.clone()] {
            let mb = upload_f32(b, &mask);
            let acts = [
                Activation::Relu,
                Activation::None,
                Activation::LeakyRelu(0.2),
            ];
            for (act, pre_mask, with_r) in acts.into_iter().flat_map(|a| {
                [
                    (a, true, false),
                    (a, false, false),
                    (a, false, true),
                    (a, true, true),
                ]
            }) {
                let p = MaskedActParams { n, act, pre_mask };
                let what = format!("masked_act {act:?} pre_mask {pre_mask} r {with_r}");
                let r = with_r.then_some(&y0[..]);
                let mut want = vec![0f32; n];
                cpu::elementwise::reference::masked_act(&p, &xs, &mask, r, &mut want);
                let rb = with_r.then_some(&yb);
                run(b, |rec| b.masked_act(rec, &p, &xsb, &mb, rb, &out));
                // Against the reference, any NaN matches any NaN (a GPU may return another
                // payload); against the unfused ops on the same backend, every bit.
                let any_nan = |v: Vec<f32>| -> Vec<f32> {
                    v.into_iter()
                        .map(|f| if f.is_nan() { f32::NAN } else { f })
                        .collect()
                };
                let fused = download_f32(b, &out);
                assert_same_bits(&what, &any_nan(fused.clone()), &any_nan(want));
                // The unfused chain on the same backend: t = x m, u = act(t or x), then
                // t = r m, out = u + t, u = out m when r is given, else out = u m.
                let (t, u) = (alloc(b, DType::F32, n), alloc(b, DType::F32, n));
                let mulp = BinaryParams {
                    op: BinaryOp::Mul,
                    n,
                    b_len: n,
                };
                let addp = BinaryParams {
                    op: BinaryOp::Add,
                    ..mulp
                };
                run(b, |rec| {
                    if pre_mask {
                        b.binary(rec, &mulp, &xsb, &mb, &t)?;
                    }
                    b.activation(rec, act, if pre_mask { &t } else { &xsb }, &u)?;
                    match rb {
                        Some(rb) => {
                            b.binary(rec, &mulp, rb, &mb, &t)?;
                            b.binary(rec, &addp, &u, &t, &out)?;
                            b.binary(rec, &mulp, &out, &mb, &u)
                        }
                        None => b.binary(rec, &mulp, &u, &mb, &out),
                    }
                });
                let chain = download_f32(b, if with_r { &u } else { &out });
                assert_same_bits(&format!("{what}: the unfused ops"), &fused, &chain);
            }
        }

        let mut want = vec![0f32; n];
        cpu::elementwise::reference::scale(-1.7, &x, &mut want);
        run(b, |rec| b.scale(rec, -1.7, &xb, &out));
        assert_eq!(download_f32(b, &out), want, "scale");
        cpu::elementwise::reference::axpby(0.3, &x, -2.5, &y0, &mut want);
        run(b, |rec| b.axpby(rec, 0.3, &xb, -2.5, &yb, &out));
        assert_eq!(download_f32(b, &out), want, "axpby");

        let coef = [1.3f32, 0.4, 0.9, 0.43];
        let cb = upload_f32(b, &coef);
        cpu::diffusion::reference::ddim(&DdimParams { n }, &x, &y0, &coef, &mut want);
        run(b, |rec| b.ddim(rec, &DdimParams { n }, &xb, &yb, &cb, &out));
        assert_eq!(download_f32(b, &out), want, "ddim");
        for rows in [2, 3] {
            let rv = r.vec(rows * n, -3.0, 3.0);
            let p = CfgParams {
                n,
                rows,
                w_text: 2.0,
                w_constraint: 1.5,
            };
            cpu::diffusion::reference::cfg(&p, &rv, &mut want);
            let rb = upload_f32(b, &rv);
            run(b, |rec| b.cfg(rec, &p, &rb, &out));
            assert_eq!(download_f32(b, &out), want, "cfg rows {rows}");
        }
    }

    pub fn gather_and_reduce<B: Backend>(b: &B) {
        let mut r = Rng(10);
        let (vocab, dim, tokens) = (50, 64, 9);
        let table = r.vec(vocab * dim, -1.0, 1.0);
        let tb16: Vec<bf16> = table.iter().map(|&v| bf16::from_f32(v)).collect();
        let ids: Vec<u32> = (0..tokens).map(|_| r.below(vocab as u64) as u32).collect();
        let p = EmbeddingParams { tokens, vocab, dim };
        let mut want = vec![0f32; tokens * dim];
        cpu::embedding::reference::embedding(&p, &ids, Weights::BF16(&tb16), &mut want).unwrap();
        let (ib, tb) = (
            upload_u32(b, &ids),
            upload(b, DType::BF16, bytemuck::cast_slice(&tb16), vocab * dim),
        );
        let out = alloc(b, DType::F32, tokens * dim);
        run(b, |rec| b.embedding(rec, &p, &ib, &tb, &out));
        assert_eq!(download_f32(b, &out), want, "embedding");

        let (batch, seq) = (3, 7);
        let x = r.vec(batch * seq * dim, -1.0, 1.0);
        let mask: Vec<u32> = (0..batch * seq)
            .map(|i| u32::from(i % 4 != 0 && i >= seq * 2 || i < seq))
            .collect();
        let p = MeanPoolParams { batch, seq, dim };
        let mut want = vec![0f32; batch * dim];
        cpu::mean_pool::reference::mean_pool(&p, &x, &mask, &mut want);
        let (xb, mb, out) = (
            upload_f32(b, &x),
            upload_u32(b, &mask),
            alloc(b, DType::F32, batch * dim),
        );
        run(b, |rec| b.mean_pool(rec, &p, &xb, &mb, &out));
        assert_close("mean_pool", &download_f32(b, &out), &want, 1e-6, REL_F32);

        // Argmax with ties (first index wins) and Gumbel sampling with generated and injected
        // uniforms.
        let (rows, cols) = (16, 80);
        let mut logits: Vec<f32> = r
            .vec(rows * cols, -3.0, 3.0)
            .iter()
            .map(|v| (v * 4.0).round() / 4.0)
            .collect();
        logits[5] = 100.0;
        logits[7] = 100.0;
        let lb = upload_f32(b, &logits);
        let tok = alloc(b, DType::U32, rows);
        let p = ArgmaxParams { rows, cols };
        let mut want = vec![0u32; rows];
        cpu::argmax::reference::argmax(&p, &logits, &mut want);
        assert_eq!(want[0], 5);
        run(b, |rec| b.argmax(rec, &p, &lb, &tok));
        assert_eq!(download_u32(b, &tok), want, "argmax");
        let gp = GumbelParams {
            rows,
            cols,
            temperature: 1.0,
            seed: 42,
            counter: 0,
        };
        cpu::gumbel::reference::gumbel(&gp, &logits, None, &mut want);
        assert!(
            gumbel_margin(&gp, &logits, None) > 1e-4,
            "a near-tie in the test data"
        );
        run(b, |rec| b.gumbel(rec, &gp, &lb, None, &tok));
        assert_eq!(download_u32(b, &tok), want, "gumbel (generated uniforms)");
        let mut u = r.vec(rows * cols, 0.0, 1.0);
        u[0] = 0.0;
        u[1] = 1e-30;
        u[2] = 0.99999994;
        let ub = upload_f32(b, &u);
        cpu::gumbel::reference::gumbel(&gp, &logits, Some(&u), &mut want);
        assert!(
            gumbel_margin(&gp, &logits, Some(&u)) > 1e-4,
            "a near-tie in the test data"
        );
        run(b, |rec| b.gumbel(rec, &gp, &lb, Some(&ub), &tok));
        assert_eq!(download_u32(b, &tok), want, "gumbel (injected uniforms)");
    }

    /// Bit for bit on the CPU (the reference is PyTorch's f32 arithmetic); within
    /// `kinema::vulkan::POSENC_ABS` on Vulkan, whose sin/cos are not libm's.
    pub fn posenc<B: Backend>(b: &B) {
        for (start, len, dim) in [(50, 30, 64), (0, 3, 2), (4990, 10, 512)] {
            let p = PosEncParams { start, len, dim };
            let mut want = vec![0f32; len * dim];
            cpu::posenc::reference::posenc(&p, &mut want);
            let out = alloc(b, DType::F32, len * dim);
            run(b, |rec| b.posenc(rec, &p, &out));
            let got = download_f32(b, &out);
            if b.info().kind == "vulkan" {
                let what = format!("posenc {p:?}");
                // Values are about 0.7 in RMS, so a relative L2 error can only approach the
                // absolute bound if nearly every element is off by that much.
                let bound = kinema::vulkan::POSENC_ABS;
                assert_close(&what, &got, &want, bound, bound);
            } else {
                assert_eq!(got, want, "posenc {p:?}");
            }
        }
    }

    /// Kimodo's root bridge against the scalar reference: random normalised features, the
    /// SOMA statistics' magnitudes, headings all around the circle (the pairs are not unit
    /// vectors, as a network's are not), 2 frames (the repeated last frame) up to 150.
    pub fn root_bridge<B: Backend>(b: &B) {
        let mut r = Rng(41);
        for &(rows, frames) in &[(1, 2), (3, 3), (2, 17), (3, 150)] {
            let p = RootBridgeParams {
                rows,
                frames,
                fps: 30.0,
                global_mean: [0.004, 0.93, 0.0002, -0.0001, 0.0005],
                global_std: [1.45, 0.17, 1.46, 0.71, 0.71],
                local_mean: [1.4e-5, -2.3e-4, -1.4e-4, 0.93],
                local_std: [0.76, 0.46, 0.46, 0.17],
            };
            let x = r.vec(rows * frames * 5, -2.0, 2.0);
            let mut want = vec![0f32; rows * frames * 4];
            cpu::root_bridge::reference::root_bridge(&p, &x, &mut want);
            // Operands at an offset inside larger buffers.
            let mut padded = vec![7.0f32; 3];
            padded.extend(&x);
            let xb = upload_f32(b, &padded).slice(3, x.len()).unwrap();
            let ob = alloc(b, DType::F32, want.len() + 5)
                .slice(5, want.len())
                .unwrap();
            run(b, |rec| b.root_bridge(rec, &p, &xb, &ob));
            let got = download_f32(b, &ob);
            if b.info().kind == "vulkan" {
                let what = format!("root_bridge {rows}x{frames}");
                let bound = kinema::vulkan::ROOT_BRIDGE_ABS;
                assert_close(&what, &got, &want, bound, bound);
                // Velocities and height are exact products and quotients: bit for bit.
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    if i % 4 != 0 {
                        assert_eq!(g, w, "{what}: element {i}");
                    }
                }
            } else {
                assert_eq!(got, want, "root_bridge {rows}x{frames}");
            }
        }
        // One frame has no velocity (upstream would wrap around): an error at record time.
        let p = RootBridgeParams {
            rows: 1,
            frames: 1,
            fps: 30.0,
            global_mean: [0.0; 5],
            global_std: [1.0; 5],
            local_mean: [0.0; 4],
            local_std: [1.0; 4],
        };
        let (xb, ob) = (alloc(b, DType::F32, 5), alloc(b, DType::F32, 4));
        let mut rec = b.begin().unwrap();
        let e = b
            .root_bridge(&mut rec, &p, &xb, &ob)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("root_bridge") && e.contains("at least 2 frames"),
            "{e}"
        );
    }

    pub fn copy<B: Backend>(b: &B) {
        // Transpose a [3, 4, 5] tensor's last two dims into the middle of a larger buffer.
        let src: Vec<f32> = (0..60).map(|v| v as f32).collect();
        let p = CopyParams {
            shape: vec![3, 5, 4],
            src_strides: vec![20, 1, 5],
            src_offset: 0,
            dst_strides: vec![20, 4, 1],
            dst_offset: 7,
        };
        let (sb, db) = (upload_f32(b, &src), alloc(b, DType::F32, 67));
        run(b, |rec| b.copy(rec, &p, &sb, &db));
        let got = download_f32(b, &db);
        for i in 0..3 {
            for j in 0..5 {
                for k in 0..4 {
                    assert_eq!(got[7 + i * 20 + j * 4 + k], src[i * 20 + k * 5 + j]);
                }
            }
        }
        assert!(got[..7].iter().all(|&v| v == 0.0));

        // 2- and 4-byte dtypes, ranks 0 to 6, odd offsets inside both buffers and into
        // destinations that already hold data (the elements in between must survive).
        let mut r = Rng(12);
        let cases: &[(&[usize], &[usize])] = &[
            (&[], &[]),
            (&[7], &[0]),
            (&[3, 5], &[1, 0]),
            (&[2, 3, 4, 5], &[3, 1, 0, 2]),
            (&[2, 1, 3, 2, 2, 3], &[5, 4, 3, 2, 1, 0]),
        ];
        for &(shape, perm) in cases {
            // Source: contiguous in permuted order; destination: contiguous with padding.
            let rank = shape.len();
            let mut src_strides = vec![0; rank];
            let mut acc = 1;
            for &d in perm.iter().rev() {
                src_strides[d] = acc;
                acc *= shape[d];
            }
            let mut dst_strides = vec![0; rank];
            let mut acc = 1;
            for d in (0..rank).rev() {
                dst_strides[d] = acc;
                acc *= shape[d] + usize::from(d + 1 == rank);
            }
            let p = CopyParams {
                shape: shape.to_vec(),
                src_strides,
                src_offset: 3,
                dst_strides,
                dst_offset: 5,
            };
            let src_len = p.src_offset + acc + 4;
            let dst_len = p.dst_offset + acc + 4;
            for dt in [DType::F16, DType::BF16, DType::I32, DType::F32] {
                let what = format!("copy {dt} shape {shape:?}");
                let s32: Vec<u32> = (0..src_len).map(|_| r.next_u64() as u32).collect();
                let d32: Vec<u32> = (0..dst_len).map(|_| r.next_u64() as u32).collect();
                if dt.block_bytes() == 2 {
                    let s16: Vec<u16> = s32.iter().map(|&v| v as u16).collect();
                    let mut want: Vec<u16> = d32.iter().map(|&v| v as u16).collect();
                    let sb = upload(b, dt, bytemuck::cast_slice(&s16), src_len);
                    let db = upload(b, dt, bytemuck::cast_slice(&want), dst_len);
                    cpu::copy::copy_strided(&p, &s16, &mut want);
                    run(b, |rec| b.copy(rec, &p, &sb, &db));
                    let mut got = vec![0u16; dst_len];
                    b.read(&db, bytemuck::cast_slice_mut(&mut got)).unwrap();
                    assert_eq!(got, want, "{what}");
                } else {
                    let mut want = d32.clone();
                    let sb = upload(b, dt, bytemuck::cast_slice(&s32), src_len);
                    let db = upload(b, dt, bytemuck::cast_slice(&d32), dst_len);
                    cpu::copy::copy_strided(&p, &s32, &mut want);
                    run(b, |rec| b.copy(rec, &p, &sb, &db));
                    assert_eq!(download_u32(b, &db), want, "{what}");
                }
            }
        }
    }

    /// Bad operands are refused when recorded, naming the op and the problem.
    pub fn operand_checks<B: Backend>(b: &B) {
        let x = alloc(b, DType::F32, 10);
        let y = alloc(b, DType::F32, 10);
        let mut rec = b.begin().unwrap();
        let p = NormParams {
            rows: 2,
            cols: 8,
            eps: 1e-5,
        };
        let e = b
            .layer_norm(&mut rec, &p, &x, None, None, &y)
            .unwrap_err()
            .to_string();
        assert!(e.contains("layer_norm") && e.contains("needs 16"), "{e}");
        // The fused residual norm: a short residual, and an output that is the residual.
        let (x16, r16, y16) = (
            alloc(b, DType::F32, 16),
            alloc(b, DType::F32, 16),
            alloc(b, DType::F32, 16),
        );
        let e = b
            .add_layer_norm(&mut rec, &p, &x16, &x, None, None, &y16)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("add_layer_norm") && e.contains("needs 16"),
            "{e}"
        );
        let e = b
            .add_layer_norm(&mut rec, &p, &x16, &r16, None, None, &r16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("add_layer_norm") && e.contains("overlap"), "{e}");
        let u = alloc(b, DType::U32, 16);
        let e = b
            .softmax(
                &mut rec,
                &SoftmaxParams {
                    rows: 1,
                    cols: 4,
                    scale: 1.0,
                },
                &u,
                &y,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("softmax") && e.contains("u32"), "{e}");
        let big = alloc(b, DType::F32, 16);
        let overlap = big.slice(4, 8).unwrap();
        let e = b
            .scale(&mut rec, 2.0, &big.slice(0, 8).unwrap(), &overlap)
            .unwrap_err()
            .to_string();
        assert!(e.contains("overlaps"), "{e}");
        let e = b
            .cfg(
                &mut rec,
                &CfgParams {
                    n: 2,
                    rows: 4,
                    w_text: 1.0,
                    w_constraint: 1.0,
                },
                &big,
                &y,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 or 3"), "{e}");
        let f16 = alloc(b, DType::F16, 16);
        let e = b
            .copy(
                &mut rec,
                &CopyParams {
                    shape: vec![4],
                    src_strides: vec![1],
                    src_offset: 0,
                    dst_strides: vec![1],
                    dst_offset: 0,
                },
                &f16,
                &big,
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("copy") && e.contains("f16") && e.contains("f32"),
            "{e}"
        );
        let w = alloc(b, DType::BF16, 63);
        let p = LinearParams {
            m: 2,
            n: 2,
            k: 32,
            activation: Activation::None,
        };
        let e = b
            .linear(&mut rec, &p, &big, &w, None, &y)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("linear") && e.contains("x has 16") && e.contains("needs 64"),
            "{e}"
        );
        let x = alloc(b, DType::F32, 64);
        let e = b
            .linear(&mut rec, &p, &x, &w, None, &y)
            .unwrap_err()
            .to_string();
        assert!(e.contains("weight has 63") && e.contains("needs 64"), "{e}");
    }

    /// Bad data found while running (an id outside the table) is an error at submit or sync.
    pub fn bad_ids_at_run_time<B: Backend>(b: &B) {
        let ids = upload_u32(b, &[3, 99]);
        let table = upload_f32(b, &[0.0; 40]);
        let out = alloc(b, DType::F32, 20);
        let mut rec = b.begin().unwrap();
        b.embedding(
            &mut rec,
            &EmbeddingParams {
                tokens: 2,
                vocab: 4,
                dim: 10,
            },
            &ids,
            &table,
            &out,
        )
        .unwrap();
        let e = b
            .submit(&rec)
            .and_then(|_| b.sync())
            .unwrap_err()
            .to_string();
        assert!(e.contains("99") && e.contains("4-row"), "{e}");
    }

    /// A recording re-submitted after its inputs change computes with the new inputs.
    pub fn resubmission<B: Backend>(b: &B) {
        let xb = upload_f32(b, &[1.0, 2.0, 3.0]);
        let coef = upload_f32(b, &[1.0, 1.0, 1.0, 0.0]);
        let x0 = upload_f32(b, &[0.5, 0.5, 0.5]);
        let out = alloc(b, DType::F32, 3);
        let mut rec = b.begin().unwrap();
        b.ddim(&mut rec, &DdimParams { n: 3 }, &xb, &x0, &coef, &out)
            .unwrap();
        for step in 0..3 {
            let c = [1.0, 1.0, step as f32, 1.0];
            b.write(&coef, bytemuck::cast_slice(&c)).unwrap();
            b.submit(&rec).unwrap();
            let got = download_f32(b, &out);
            let want: Vec<f32> = [1.0f32, 2.0, 3.0]
                .iter()
                .map(|xt| 0.5 * step as f32 + (xt - 0.5))
                .collect();
            assert_eq!(got, want, "step {step}");
        }
    }
}

/// Every CPU configuration under test: each available ISA with 2 threads, plus the best ISA
/// single-threaded and in fast precision.
fn cpu_backends() -> Vec<CpuBackend> {
    let mut v: Vec<CpuBackend> = Isa::available()
        .into_iter()
        .map(|isa| CpuBackend::with(isa, 2, Precision::Strict).unwrap())
        .collect();
    v.push(CpuBackend::with(Isa::best(), 1, Precision::Strict).unwrap());
    v.push(CpuBackend::with(Isa::best(), 2, Precision::Fast).unwrap());
    v
}

/// Every Vulkan device on this machine (lavapipe in CI), shared by the tests of this binary:
/// each with its defaults, again with host transfers through the staging buffer and
/// descriptor pools (the paths of a discrete GPU without push descriptors), and in fast mode
/// (cooperative-matrix GEMMs where the device has them, the strict kernels otherwise). None prints why, and fails when `KINEMA_REQUIRE_VULKAN=1` (set by `.ci/run`, which
/// installs lavapipe) so CI cannot silently skip the Vulkan bodies.
fn vulkan_backends() -> &'static [VulkanBackend] {
    static BACKENDS: OnceLock<Vec<VulkanBackend>> = OnceLock::new();
    BACKENDS.get_or_init(|| {
        let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
        let devices = match kinema::vulkan::probe() {
            Ok(d) => d,
            Err(why) => {
                assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
                eprintln!("skipping the Vulkan backend: {why}");
                return Vec::new();
            }
        };
        devices
            .iter()
            .flat_map(|d| {
                [
                    (false, Precision::Strict),
                    (true, Precision::Strict),
                    (false, Precision::Fast),
                ]
                .map(|(discrete, precision)| (d, discrete, precision))
            })
            .map(|(d, discrete, precision)| {
                let mut o = VulkanOptions::new(precision);
                o.device = Some(d.index);
                o.force_staging = discrete;
                o.descriptor_pools = discrete;
                VulkanBackend::with_options(o)
                    .unwrap_or_else(|e| panic!("Vulkan device {} ({}): {e}", d.index, d.name))
            })
            .collect()
    })
}

/// The body that tests each op, on every CPU configuration and every Vulkan device: an op
/// added to the op table without a test body here does not compile, and a body not
/// instantiated by `op_tests!` fails `every_op_has_a_test_body`.
fn body_of(op: OpKind) -> &'static str {
    match op {
        OpKind::Linear => "linear",
        OpKind::BatchedMatmul => "batched_matmul",
        OpKind::LayerNorm | OpKind::AddLayerNorm | OpKind::RmsNorm => "norms",
        OpKind::Softmax => "softmax",
        OpKind::Attention => "attention",
        OpKind::Activation => "activations",
        OpKind::Swiglu => "swiglu",
        OpKind::Rope => "rope",
        OpKind::Conv1d | OpKind::Upsample => "conv",
        OpKind::Binary
        | OpKind::MaskedAct
        | OpKind::Scale
        | OpKind::Axpby
        | OpKind::Ddim
        | OpKind::Cfg => "elementwise",
        OpKind::Embedding | OpKind::MeanPool | OpKind::Argmax | OpKind::Gumbel => {
            "gather_and_reduce"
        }
        OpKind::Copy => "copy",
        OpKind::PosEnc => "posenc",
        OpKind::RootBridge => "root_bridge",
    }
}

/// Each body as two tests: on every CPU configuration (`cpu_backends`) and on every Vulkan
/// device (`vulkan_backends`).
macro_rules! op_tests {
    ($($name:ident / $vulkan:ident),* $(,)?) => {
        /// The bodies run on every backend.
        const BODIES: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                for b in cpu_backends() {
                    eprintln!("{} on {:?}", stringify!($name), b.info());
                    bodies::$name(&b);
                }
            }

            #[test]
            fn $vulkan() {
                for b in vulkan_backends() {
                    eprintln!(
                        "{} on {:?}, push descriptors {}",
                        stringify!($name),
                        b.info(),
                        b.uses_push_descriptors()
                    );
                    bodies::$name(b);
                }
            }
        )*
    };
}

op_tests!(
    linear / vulkan_linear,
    batched_matmul / vulkan_batched_matmul,
    norms / vulkan_norms,
    softmax / vulkan_softmax,
    attention / vulkan_attention,
    activations / vulkan_activations,
    swiglu / vulkan_swiglu,
    rope / vulkan_rope,
    conv / vulkan_conv,
    elementwise / vulkan_elementwise,
    gather_and_reduce / vulkan_gather_and_reduce,
    posenc / vulkan_posenc,
    root_bridge / vulkan_root_bridge,
    copy / vulkan_copy,
    operand_checks / vulkan_operand_checks,
    bad_ids_at_run_time / vulkan_bad_ids_at_run_time,
    resubmission / vulkan_resubmission,
);

#[test]
fn every_op_has_a_test_body() {
    for &op in OpKind::ALL {
        assert!(
            BODIES.contains(&body_of(op)),
            "{}: its body {} does not run on every backend",
            op.name(),
            body_of(op)
        );
    }
}

/// The convolutions of the models (512 channels, kernel 3 and 1, short sequences, dilated, up
/// to 512 x 128 outputs), with operands at odd offsets inside larger buffers and no bias. Sums
/// run over c_in * kernel products in f32, so the absolute bound grows with that length, as in
/// `bodies::linear`. On Vulkan the 128-long one runs the tiled kernel and the others (at most
/// 64 output columns) the weight-streaming one.
#[test]
fn vulkan_conv_model_shapes() {
    for b in vulkan_backends() {
        let mut r = Rng(13);
        for &(batch, ch, len, kernel, pad, dil) in &[
            (1, 512, 64, 3, 1, 1),
            (2, 512, 4, 1, 0, 1),
            // MotionBricks' dilated residual blocks (dilation growth^j, padding = dilation).
            (1, 512, 128, 3, 9, 9),
            (1, 512, 37, 3, 3, 3),
        ] {
            let p = Conv1dParams {
                batch,
                c_in: ch,
                c_out: ch,
                len,
                kernel,
                padding: pad,
                dilation: dil,
            };
            let ol = p.out_len().unwrap();
            let x = r.vec(batch * ch * len + 3, -1.0, 1.0);
            let w = r.vec(ch * ch * kernel + 5, -1.0, 1.0);
            let mut want = vec![0f32; batch * ch * ol];
            cpu::conv1d::reference::conv1d(&p, &x[3..], &w[5..], None, &mut want);
            let xb = upload_f32(b, &x);
            let wb = upload_f32(b, &w);
            let y = alloc(b, DType::F32, want.len() + 7);
            let (xs, ws, ys) = (
                xb.slice(3, x.len() - 3).unwrap(),
                wb.slice(5, w.len() - 5).unwrap(),
                y.slice(7, want.len()).unwrap(),
            );
            run(b, |rec| b.conv1d(rec, &p, &xs, &ws, None, &ys));
            let got = download_f32(b, &y);
            assert!(got[..7].iter().all(|&v| v == 0.0), "conv1d wrote before y");
            assert_close(
                &format!("conv1d {p:?}"),
                &got[7..],
                &want,
                REL_F32 * (ch * kernel) as f32,
                REL_F32,
            );
        }
    }
}

/// Convolutions of few output columns (batch x out_len <= 64) and at least 2^16 weights, which
/// the Vulkan backend runs on the weight-streaming kernel (`conv1d_stream`; the window is
/// unit-tested in `gemm_policy::stream`): MotionBricks' decoder shapes at batch 1 (15, 30, 60
/// positions, the dilated blocks, 256 -> 512 and 512 -> 413 channels), batch 2, one column,
/// taps falling wholly in the padding, a reduction that is not a multiple of 8 (the scalar
/// weight loads) and one short enough for a single split of k (no reduce dispatch), with and
/// without bias, every operand at an odd offset inside a larger buffer.
#[test]
fn vulkan_conv_stream_shapes() {
    for b in vulkan_backends() {
        let mut r = Rng(15);
        for &(batch, ci, co, len, kernel, pad, dil, bias) in &[
            (1, 512, 512, 15, 3, 1, 1, true),
            (1, 512, 512, 30, 3, 3, 3, false),
            (1, 512, 512, 60, 3, 9, 9, true),
            (1, 256, 512, 15, 3, 1, 1, true),
            (1, 512, 413, 60, 3, 1, 1, true),
            (2, 512, 512, 30, 3, 1, 1, false),
            (4, 512, 512, 1, 3, 1, 1, true),
            (1, 512, 512, 5, 3, 27, 27, true),
            (3, 101, 700, 7, 3, 2, 2, true),
            (1, 40, 2000, 20, 3, 1, 1, true),
        ] {
            let p = Conv1dParams {
                batch,
                c_in: ci,
                c_out: co,
                len,
                kernel,
                padding: pad,
                dilation: dil,
            };
            let ol = p.out_len().unwrap();
            assert!(batch * ol <= 64 && co * ci * kernel >= 1 << 16, "{p:?}");
            let x = r.vec(batch * ci * len + 3, -1.0, 1.0);
            let w = r.vec(co * ci * kernel + 5, -1.0, 1.0);
            let bv = r.vec(co + 1, -1.0, 1.0);
            let mut want = vec![0f32; batch * co * ol];
            let bias_ref = bias.then(|| &bv[1..]);
            cpu::conv1d::reference::conv1d(&p, &x[3..], &w[5..], bias_ref, &mut want);
            let (xb, wb, bb) = (upload_f32(b, &x), upload_f32(b, &w), upload_f32(b, &bv));
            let y = alloc(b, DType::F32, want.len() + 7);
            let (xs, ws, bs, ys) = (
                xb.slice(3, x.len() - 3).unwrap(),
                wb.slice(5, w.len() - 5).unwrap(),
                bb.slice(1, co).unwrap(),
                y.slice(7, want.len()).unwrap(),
            );
            run(b, |rec| {
                b.conv1d(rec, &p, &xs, &ws, bias.then_some(&bs), &ys)
            });
            let got = download_f32(b, &y);
            assert!(got[..7].iter().all(|&v| v == 0.0), "conv1d wrote before y");
            assert_close(
                &format!("conv1d stream {p:?}"),
                &got[7..],
                &want,
                REL_F32 * (ci * kernel) as f32,
                REL_F32,
            );
        }
    }
}

/// Linears of 2..=64 rows whose weights (2^18 to 2^22 elements) the Vulkan backend streams on
/// the narrow tile (`linear_stream.comp`, one column per invocation, split k; the window is
/// unit-tested in `gemm_policy::stream`): MotionBricks' transformer shapes at batch 1 (25 rows:
/// root 512 wide, pose 1024 wide, feed-forward 2048) and batch 2, the window's edges (2 and 64
/// rows, 512 x 512 weights), odd n and k, f32 and f16 weights, the activations the models use,
/// bias on and off, every operand at an odd offset inside a larger buffer.
#[test]
fn vulkan_linear_narrow_stream_shapes() {
    for b in vulkan_backends() {
        let mut r = Rng(16);
        for &(m, n, k, act, bias) in &[
            (25, 1536, 512, Activation::None, true),
            (25, 512, 512, Activation::None, true),
            (25, 2048, 512, Activation::Relu, true),
            (25, 512, 2048, Activation::None, false),
            (25, 3072, 1024, Activation::None, true),
            (25, 2048, 1024, Activation::LeakyRelu(0.01), true),
            (50, 1024, 2048, Activation::None, true),
            (2, 512, 512, Activation::Relu, false),
            (64, 700, 517, Activation::Gelu, true),
        ] {
            assert!((2..=64).contains(&m) && n * k >= 1 << 18 && n * k < 1 << 22);
            let x = r.vec(m * k + 3, -1.0, 1.0);
            let wf = r.vec(n * k, -1.0, 1.0);
            let bv = r.vec(n + 1, -1.0, 1.0);
            let w16: Vec<f16> = wf.iter().map(|&v| f16::from_f32(v)).collect();
            let cases: [(DType, Vec<u8>, Weights); 2] = [
                (
                    DType::F32,
                    bytemuck::cast_slice(&wf).to_vec(),
                    Weights::F32(&wf),
                ),
                (
                    DType::F16,
                    bytemuck::cast_slice(&w16).to_vec(),
                    Weights::F16(&w16),
                ),
            ];
            for (dt, bytes, wref) in cases {
                let p = LinearParams {
                    m,
                    n,
                    k,
                    activation: act,
                };
                let mut want = vec![0f32; m * n];
                let bias_ref = bias.then(|| &bv[1..]);
                cpu::matmul::reference::linear(&p, &x[3..], wref, bias_ref, &mut want);
                // The weights at element 5 of a larger buffer (f16: 10 bytes in).
                let pad = dt.bytes_for(5).unwrap();
                let mut wbytes = vec![0u8; pad];
                wbytes.extend_from_slice(&bytes);
                let (xb, wb, bb) = (
                    upload_f32(b, &x),
                    upload(b, dt, &wbytes, n * k + 5),
                    upload_f32(b, &bv),
                );
                let y = alloc(b, DType::F32, m * n + 7);
                let (xs, ws, bs, ys) = (
                    xb.slice(3, m * k).unwrap(),
                    wb.slice(5, n * k).unwrap(),
                    bb.slice(1, n).unwrap(),
                    y.slice(7, m * n).unwrap(),
                );
                run(b, |rec| {
                    b.linear(rec, &p, &xs, &ws, bias.then_some(&bs), &ys)
                });
                let got = download_f32(b, &y);
                assert!(got[..7].iter().all(|&v| v == 0.0), "linear wrote before y");
                assert_close(
                    &format!("linear narrow stream {m}x{n}x{k} {dt} {act:?} bias {bias}"),
                    &got[7..],
                    &want,
                    REL_F32 * k as f32,
                    REL_F32,
                );
            }
        }
    }
}

/// Argmax special values on Vulkan: ties (first index), -0 against +0, NaN anywhere (the first
/// NaN wins), all -inf, one column, and rows longer than a workgroup.
#[test]
fn vulkan_argmax_special_values() {
    for b in vulkan_backends() {
        let mut r = Rng(14);
        for cols in [1, 80, 1000] {
            let rows = 12;
            let mut x = r.vec(rows * cols, -1.0, 1.0);
            let last = cols - 1;
            let mut set = |row: usize, col: usize, v: f32| x[row * cols + col.min(last)] = v;
            set(0, 7, 5.0);
            set(0, 900, 5.0);
            set(1, 3, f32::NAN);
            set(1, 2, 9.0);
            set(1, 600, f32::NAN);
            set(2, 0, f32::NAN);
            set(3, 999, f32::NAN);
            set(4, 4, -0.0);
            set(4, 5, 0.0);
            for c in 0..cols {
                set(5, c, f32::NEG_INFINITY);
                set(6, c, 2.0);
            }
            set(7, 500, f32::INFINITY);
            for c in 0..cols {
                set(8, c, if c % 2 == 0 { -0.0 } else { 0.0 });
            }
            let p = ArgmaxParams { rows, cols };
            let mut want = vec![0u32; rows];
            cpu::argmax::reference::argmax(&p, &x, &mut want);
            let (xb, out) = (upload_f32(b, &x), alloc(b, DType::U32, rows + 1));
            let o = out.slice(1, rows).unwrap();
            run(b, |rec| b.argmax(rec, &p, &xb, &o));
            let got = download_u32(b, &out);
            assert_eq!(got[0], 0, "argmax wrote before its output");
            assert_eq!(got[1..], want[..], "argmax cols {cols}");
        }
    }
}

/// Mean pooling over a long sequence (compensated sums), with an all-masked row (zeros).
#[test]
fn vulkan_mean_pool_long() {
    for b in vulkan_backends() {
        let mut r = Rng(15);
        let (batch, seq, dim) = (3, 300, 70);
        let x = r.vec(batch * seq * dim, -1.0, 3.0);
        let mask: Vec<u32> = (0..batch * seq)
            .map(|i| u32::from(i >= seq && (i % 5 != 0)) * (i as u32 % 3 + 1))
            .collect();
        let p = MeanPoolParams { batch, seq, dim };
        let mut want = vec![0f32; batch * dim];
        cpu::mean_pool::reference::mean_pool(&p, &x, &mask, &mut want);
        assert!(want[..dim].iter().all(|&v| v == 0.0));
        let (xb, mb, out) = (
            upload_f32(b, &x),
            upload_u32(b, &mask),
            alloc(b, DType::F32, batch * dim),
        );
        run(b, |rec| b.mean_pool(rec, &p, &xb, &mb, &out));
        assert_close("mean_pool", &download_f32(b, &out), &want, 1e-6, REL_F32);
    }
}

/// Embedding on Vulkan: every table dtype widened bit for bit (f16 subnormals, infinities and
/// NaNs included), tables split over several bindings, and ids outside the table: zero rows,
/// the error reported by `read`, `sync` or the next `submit`, and a clean run afterwards.
#[test]
fn vulkan_embedding() {
    for b in vulkan_backends() {
        let mut o = VulkanOptions::new(Precision::Strict);
        o.device = Some(b.device_index());
        o.max_binding = Some(1024);
        let small = VulkanBackend::with_options(o).unwrap();
        for be in [b, &small] {
            embedding_dtypes(be);
            embedding_bad_ids(be);
        }
    }
}

fn embedding_dtypes(b: &VulkanBackend) {
    let mut r = Rng(16);
    let (vocab, dim, tokens) = (37, 64, 11);
    let mut table = r.vec(vocab * dim, -2.0, 2.0);
    table[5] = 3e-6;
    table[6] = -6e-8;
    table[7] = f32::INFINITY;
    table[8] = f32::NAN;
    table[9] = 1e30;
    let mut ids: Vec<u32> = (0..tokens).map(|_| r.below(vocab as u64) as u32).collect();
    ids[0] = 0;
    ids[1] = vocab as u32 - 1;
    let t16: Vec<f16> = table.iter().map(|&v| f16::from_f32(v)).collect();
    let tb16: Vec<bf16> = table.iter().map(|&v| bf16::from_f32(v)).collect();
    let finite: Vec<f32> = table
        .iter()
        .map(|&v| {
            if v.is_finite() {
                v.clamp(-2.0, 2.0)
            } else {
                0.0
            }
        })
        .collect();
    let mut tq = vec![0u8; vocab * dim / 32 * Q8_0_BLOCK_BYTES];
    for (blk, out) in finite.chunks(32).zip(tq.chunks_mut(Q8_0_BLOCK_BYTES)) {
        q8_0_quantize_block(blk, out);
    }
    let cases: Vec<(DType, Vec<u8>, Weights)> = vec![
        (
            DType::F32,
            bytemuck::cast_slice(&table).to_vec(),
            Weights::F32(&table),
        ),
        (
            DType::F16,
            bytemuck::cast_slice(&t16).to_vec(),
            Weights::F16(&t16),
        ),
        (
            DType::BF16,
            bytemuck::cast_slice(&tb16).to_vec(),
            Weights::BF16(&tb16),
        ),
        (DType::Q8_0, tq.clone(), Weights::Q8_0(&tq)),
    ];
    let p = EmbeddingParams { tokens, vocab, dim };
    let ib = upload_u32(b, &ids);
    for (dt, bytes, wref) in cases {
        let mut want = vec![0f32; tokens * dim];
        cpu::embedding::reference::embedding(&p, &ids, wref, &mut want).unwrap();
        let tb = upload(b, dt, &bytes, vocab * dim);
        let out = alloc(b, DType::F32, tokens * dim);
        run(b, |rec| b.embedding(rec, &p, &ib, &tb, &out));
        let got = download_f32(b, &out);
        // Bit-exact, except that a NaN may carry any payload: widening an f16/bf16 NaN is
        // not required to keep it (the H200 driver's unpackHalf2x16 does not).
        let bits = |v: &[f32]| {
            v.iter()
                .map(|x| {
                    if x.is_nan() {
                        f32::NAN.to_bits()
                    } else {
                        x.to_bits()
                    }
                })
                .collect::<Vec<_>>()
        };
        let (g, w) = (bits(&got), bits(&want));
        if let Some(i) = g.iter().zip(&w).position(|(a, b)| a != b) {
            panic!(
                "embedding {dt}: element {i} (token {}, column {}) is {} ({:#x}), want {} ({:#x})",
                i / dim,
                i % dim,
                got[i],
                g[i],
                want[i],
                w[i]
            );
        }
    }
}

fn embedding_bad_ids(b: &VulkanBackend) {
    let (vocab, dim) = (4, 10);
    let table: Vec<f32> = (0..vocab * dim).map(|v| v as f32 + 1.0).collect();
    let tb = upload_f32(b, &table);
    let ids = upload_u32(b, &[3, 120, 0, 99, 2]);
    let out = alloc(b, DType::F32, 5 * dim);
    let p = EmbeddingParams {
        tokens: 5,
        vocab,
        dim,
    };
    let mut rec = b.begin().unwrap();
    b.embedding(&mut rec, &p, &ids, &tb, &out).unwrap();
    b.submit(&rec).unwrap();
    // `read` waits for the run and reports what it found, once.
    let mut bytes = vec![0u8; 5 * dim * 4];
    let e = b.read(&out, &mut bytes).unwrap_err().to_string();
    assert!(
        e.contains("embedding")
            && e.contains("2 token ids")
            && e.contains("4-row")
            && e.contains("position 1")
            && e.contains("120"),
        "{e}"
    );
    let got = download_f32(b, &out);
    for (t, id) in [3usize, 120, 0, 99, 2].into_iter().enumerate() {
        let row = &got[t * dim..(t + 1) * dim];
        if id < vocab {
            assert_eq!(row, &table[id * dim..(id + 1) * dim], "token {t}");
        } else {
            assert!(
                row.iter().all(|&v| v == 0.0),
                "token {t} (id {id}) not zeroed"
            );
        }
    }
    // Re-submitted with one bad id: the message is the CPU backend's, from `sync`.
    b.write(&ids, bytemuck::cast_slice(&[3u32, 1, 0, 4, 2]))
        .unwrap();
    b.submit(&rec).unwrap();
    let e = b.sync().unwrap_err().to_string();
    assert!(
        e.contains("token id 4 at position 3 is outside the 4-row table"),
        "{e}"
    );
    // A bad run that nobody waited for is reported by the next submission of the recording.
    b.submit(&rec).unwrap();
    let e = b.submit(&rec).unwrap_err().to_string();
    assert!(e.contains("token id 4"), "{e}");
    // Errors go to the thread that submitted the run, not to others sharing the backend.
    b.submit(&rec).unwrap();
    std::thread::scope(|s| s.spawn(|| b.sync().unwrap()).join().unwrap());
    let e = b.sync().unwrap_err().to_string();
    assert!(e.contains("token id 4"), "{e}");
    b.write(&ids, bytemuck::cast_slice(&[3u32, 1, 0, 1, 2]))
        .unwrap();
    b.submit(&rec).unwrap();
    b.sync().unwrap();
    assert_eq!(download_f32(b, &out)[3 * dim], table[dim]);
}

/// Gumbel sampling on Vulkan against the CPU reference: generated uniforms at a counter whose
/// low half carries, injected uniforms with the clamped extremes, rows longer than a
/// workgroup, NaN and infinite logits. Tokens must be equal where no row has a near-tie (see
/// `gumbel_margin`); at temperature 0 the scores are logit / 1e-10 exactly (the noise is below
/// half an ulp of them), so tied logits tie on both backends and the first index wins.
#[test]
fn vulkan_gumbel_tokens() {
    for b in vulkan_backends() {
        let mut r = Rng(17);
        for (cols, temperature) in [(80, 0.7), (1000, 1.3), (1000, 0.0)] {
            let rows = 24;
            let mut logits: Vec<f32> = r
                .vec(rows * cols, -4.0, 4.0)
                .iter()
                .map(|v| (v * 4.0).round() / 4.0)
                .collect();
            logits[cols + 7] = f32::NAN;
            logits[cols + 9] = f32::NAN;
            logits[2 * cols + 3] = f32::INFINITY;
            for v in &mut logits[3 * cols..4 * cols] {
                *v = f32::NEG_INFINITY;
            }
            let mut u = r.vec(rows * cols, 0.0, 1.0);
            u[..6].copy_from_slice(&[0.0, 1e-30, 0.999_999_94, 1.0, f32::NAN, 2.0]);
            let p = GumbelParams {
                rows,
                cols,
                temperature,
                seed: 0x0123_4567_89ab_cdef,
                counter: (1 << 32) - 5 * cols as u64,
            };
            let (lb, ub) = (upload_f32(b, &logits), upload_f32(b, &u));
            let tok = alloc(b, DType::U32, rows);
            for injected in [None, Some(&u[..])] {
                if temperature > 0.0 {
                    assert!(
                        gumbel_margin(&p, &logits, injected) > 1e-4,
                        "a near-tie in the test data"
                    );
                }
                let mut want = vec![0u32; rows];
                cpu::gumbel::reference::gumbel(&p, &logits, injected, &mut want);
                let ubr = injected.map(|_| &ub);
                run(b, |rec| b.gumbel(rec, &p, &lb, ubr, &tok));
                assert_eq!(
                    download_u32(b, &tok),
                    want,
                    "gumbel cols {cols} T {temperature} injected {}",
                    injected.is_some()
                );
            }
        }
    }
}

/// Posenc on Vulkan over many positions and frequencies (every angle reduction path), against
/// the CPU reference within `POSENC_ABS`.
#[test]
fn vulkan_posenc_sweep() {
    for b in vulkan_backends() {
        let last = (1 << 24) - 4;
        for (start, len, dim) in [(0, 4096, 64), (100_000, 64, 256), (last, 4, 512)] {
            let p = PosEncParams { start, len, dim };
            let mut want = vec![0f32; len * dim];
            cpu::posenc::reference::posenc(&p, &mut want);
            let out = alloc(b, DType::F32, len * dim);
            run(b, |rec| b.posenc(rec, &p, &out));
            let got = download_f32(b, &out);
            let (abs, rel) = errors(&got, &want);
            eprintln!("posenc {p:?}: max abs {abs:e}, rel l2 {rel:e}");
            assert!(abs <= kinema::vulkan::POSENC_ABS, "posenc {p:?}: {abs:e}");
        }
        let p = PosEncParams {
            start: 1 << 24,
            len: 1,
            dim: 2,
        };
        let out = alloc(b, DType::F32, 2);
        let mut rec = b.begin().unwrap();
        let e = b.posenc(&mut rec, &p, &out).unwrap_err().to_string();
        assert!(e.contains("2^24"), "{e}");
    }
}

/// Batched ops split over several dispatches: a storage-buffer binding capped at 4 KiB holds
/// only a few of their batches.
#[test]
fn vulkan_batches_split() {
    for d in vulkan_backends() {
        let mut o = VulkanOptions::new(Precision::Strict);
        o.device = Some(d.device_index());
        o.max_binding = Some(4096);
        let b = VulkanBackend::with_options(o).unwrap();
        let mut r = Rng(13);

        let p = BatchedMatmulParams {
            batch: 20,
            m: 8,
            n: 12,
            k: 16,
            trans_b: false,
            alpha: 1.5,
            a_batch_stride: 8 * 16,
            b_batch_stride: 16 * 12,
        };
        let a = r.vec(20 * 8 * 16, -1.0, 1.0);
        let bv = r.vec(20 * 16 * 12, -1.0, 1.0);
        let mut want = vec![0f32; 20 * 8 * 12];
        cpu::matmul::reference::batched_matmul(&p, &a, &bv, &mut want);
        let (ab, bb, c) = (
            upload_f32(&b, &a),
            upload_f32(&b, &bv),
            alloc(&b, DType::F32, want.len()),
        );
        let mut rec = b.begin().unwrap();
        b.batched_matmul(&mut rec, &p, &ab, &bb, &c).unwrap();
        assert!(rec.dispatches() > 1, "{} dispatches", rec.dispatches());
        b.submit(&rec).unwrap();
        assert_close(
            "batched_matmul split",
            &download_f32(&b, &c),
            &want,
            1e-5,
            REL_F32,
        );

        // q, k, v: column slices of fused [tokens, 4 heads of 16] rows (1.3 KiB per batch).
        let (batch, ql, kl, d, width) = (5, 5, 6, 16, 64);
        let p = AttentionParams {
            batch,
            q_len: ql,
            kv_len: kl,
            q_heads: 2,
            kv_heads: 1,
            head_dim: d,
            scale: 0.25,
            mask: MaskKind::KeyPadding,
            q_row_stride: width,
            kv_row_stride: width,
        };
        let fq = r.vec(batch * ql * width, -1.0, 1.0);
        let fkv = r.vec(batch * kl * width, -1.0, 1.0);
        let m: Vec<u32> = (0..batch * kl).map(|i| u32::from(i % 4 != 0)).collect();
        let mut want = vec![0f32; batch * ql * 2 * d];
        let (kf, vf) = (&fkv[2 * d..], &fkv[3 * d..]);
        cpu::attention::reference::attention(&p, &fq, kf, vf, Some(&m), &mut want);
        let (qb, kvb, mb) = (
            upload_f32(&b, &fq),
            upload_f32(&b, &fkv),
            upload_u32(&b, &m),
        );
        let kb = kvb.slice(2 * d, kvb.len - 2 * d).unwrap();
        let vb = kvb.slice(3 * d, kvb.len - 3 * d).unwrap();
        let out = alloc(&b, DType::F32, want.len());
        let mut rec = b.begin().unwrap();
        b.attention(&mut rec, &p, &qb, &kb, &vb, Some(&mb), &out)
            .unwrap();
        assert!(rec.dispatches() > 1, "{} dispatches", rec.dispatches());
        b.submit(&rec).unwrap();
        assert_close(
            "attention split",
            &download_f32(&b, &out),
            &want,
            1e-5,
            REL_F32,
        );
    }
}
