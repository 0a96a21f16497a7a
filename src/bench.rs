//! `kinema bench kernels`: a quick table of kernel timings on any backend, with FLOP/s or
//! bytes/s, as text or one JSON object per measurement. Shapes default to the ones the models
//! run (Kimodo: 3 CFG rows x 202 frames, width 1024, 8 heads of 128; square 1024^3 GEMM).
//! Criterion benches in `benches/` cover the same kernels with statistics. Generic over the
//! trait: the rows only one backend has (peaks, GPU timestamps) are the command line's.

use std::time::{Duration, Instant};

use half::{bf16, f16};

use crate::backend::{Backend, BufRef};
use crate::error::{Error, Result};
use crate::ops::*;
use crate::tensor::{DType, Q8_0_BLOCK, Q8_0_BLOCK_BYTES, q8_0_quantize_block};

/// One timed kernel.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Measurement {
    pub op: String,
    pub shape: String,
    pub dtype: String,
    pub backend: String,
    pub isa: String,
    pub threads: usize,
    /// The resolved precision mode.
    pub precision: String,
    /// Whether GEMMs ran on cooperative matrices (fast mode on a device that has them).
    pub cooperative_matrix: bool,
    pub median_s: f64,
    pub min_s: f64,
    pub samples: usize,
    pub iters_per_sample: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gflops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    /// Median GPU time of the op from device timestamps (Vulkan): what CUDA-event timing
    /// measures, without the submission latency in `median_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_s: Option<f64>,
    /// `gflops` over `gpu_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_gflops: Option<f64>,
}

/// The cases `kinema bench kernels` knows, with what `--shape` means for each. Every op of
/// the op table has at least one ([`case_op`] says which op a case runs; a test checks).
pub const OPS: &[(&str, &str)] = &[
    ("linear", "MxNxK: x [M,K] . W[N,K]^T (weights in --dtype)"),
    ("batched_matmul", "BxMxNxK: a [B,M,K] . b [B,K,N]"),
    (
        "batched_matmul_tb",
        "BxMxNxK: a [B,M,K] . b [B,N,K]^T (attention scores)",
    ),
    ("layer_norm", "RxC"),
    ("add_layer_norm", "RxC (layer_norm of x + r)"),
    ("rms_norm", "RxC"),
    ("softmax", "RxC"),
    ("attention", "BxSxHxD (S queries and keys, H heads of D)"),
    ("gelu", "N"),
    ("gelu_tanh", "N"),
    ("silu", "N"),
    ("swiglu", "N"),
    ("rope", "TxHxD"),
    (
        "conv1d",
        "CxLxK (C in = out channels, length L, kernel K, padding K/2)",
    ),
    ("upsample", "RxL"),
    ("add", "N"),
    (
        "masked_act",
        "N (relu(x m) plus r m, times m: a Resnet1D block's chain)",
    ),
    ("scale", "N"),
    ("axpby", "N"),
    (
        "embedding",
        "TxVxD (T tokens from a V x D table in --dtype)",
    ),
    ("mean_pool", "BxSxD"),
    ("argmax", "RxC"),
    ("gumbel", "RxC"),
    ("posenc", "LxD (rows 0..L of width D)"),
    ("ddim", "N"),
    ("cfg", "RxN (R = 2 or 3 rows)"),
    ("root_bridge", "RxF (R rows of F frames)"),
    ("transpose", "RxC"),
    ("copy", "N (contiguous: the memory-bandwidth reference)"),
    (
        "fma_peak",
        "(none: a register-only FMA loop, the FLOP ceiling)",
    ),
    (
        "coopmat_peak",
        "(none, Vulkan: register-only 16x16x16 f16 cooperative-matrix products, the ceiling of fast mode)",
    ),
    (
        "read_peak",
        "(none, Vulkan: 16-byte reads of a buffer of up to 512 MiB, the ceiling of the weight-streaming linears)",
    ),
];

/// Default (op, shape, dtype) list: the shapes the models run.
pub fn default_cases() -> Vec<(&'static str, String, DType)> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::BF16, DType::F16, DType::Q8_0] {
        for s in [
            "1024x1024x1024",
            "202x3072x1024",
            "202x1024x1024",
            "202x2048x1024",
            "202x1024x2048",
        ] {
            v.push(("linear", s.to_string(), dt));
        }
    }
    // Few rows (the skinny kernel's regime, KINEMA_VK_LINEAR=tiled|skinny compares): MotionBricks
    // at batch 1 (f32 weights), LLM2Vec at 32 tokens (bf16 and q8_0 weights, the issue's
    // bandwidth targets).
    for s in ["1x1024x1024", "16x1024x1024", "64x1024x1024"] {
        v.push(("linear", s.to_string(), DType::F32));
    }
    for dt in [DType::BF16, DType::Q8_0] {
        for s in [
            "32x4096x4096",
            "32x1024x4096",
            "32x14336x4096",
            "32x4096x14336",
        ] {
            v.push(("linear", s.to_string(), dt));
        }
    }
    let rest: &[(&str, &str)] = &[
        ("batched_matmul", "24x202x202x128"),
        ("batched_matmul_tb", "24x202x202x128"),
        ("layer_norm", "606x1024"),
        ("add_layer_norm", "606x1024"),
        ("rms_norm", "606x1024"),
        ("softmax", "4848x254"),
        ("attention", "3x202x8x128"),
        ("attention", "3x254x8x128"),
        ("gelu", "1861632"),
        ("gelu_tanh", "1861632"),
        ("silu", "1861632"),
        ("swiglu", "1861632"),
        ("rope", "128x32x128"),
        ("conv1d", "512x64x3"),
        ("conv1d", "512x128x3"),
        ("conv1d", "512x64x1"),
        ("upsample", "512x32"),
        ("add", "620544"),
        ("masked_act", "32768"),
        ("scale", "620544"),
        ("axpby", "620544"),
        ("embedding", "64x1024x512"),
        ("mean_pool", "1x64x4096"),
        ("argmax", "128x10"),
        ("gumbel", "128x10"),
        ("posenc", "202x1024"),
        ("ddim", "151500"),
        ("cfg", "3x151500"),
        ("root_bridge", "3x202"),
        ("transpose", "1024x1024"),
        ("copy", "4194304"),
    ];
    for (op, s) in rest {
        v.push((op, s.to_string(), DType::F32));
    }
    v
}

/// The op a case of [`OPS`] runs, or `None` for the peak loops (no op) and unknown names.
pub fn case_op(case: &str) -> Option<OpKind> {
    Some(match case {
        "linear" => OpKind::Linear,
        "batched_matmul" | "batched_matmul_tb" => OpKind::BatchedMatmul,
        "layer_norm" => OpKind::LayerNorm,
        "add_layer_norm" => OpKind::AddLayerNorm,
        "rms_norm" => OpKind::RmsNorm,
        "softmax" => OpKind::Softmax,
        "attention" => OpKind::Attention,
        "gelu" | "gelu_tanh" | "silu" => OpKind::Activation,
        "swiglu" => OpKind::Swiglu,
        "rope" => OpKind::Rope,
        "conv1d" => OpKind::Conv1d,
        "upsample" => OpKind::Upsample,
        "add" => OpKind::Binary,
        "masked_act" => OpKind::MaskedAct,
        "scale" => OpKind::Scale,
        "axpby" => OpKind::Axpby,
        "embedding" => OpKind::Embedding,
        "transpose" | "copy" => OpKind::Copy,
        "mean_pool" => OpKind::MeanPool,
        "argmax" => OpKind::Argmax,
        "gumbel" => OpKind::Gumbel,
        "posenc" => OpKind::PosEnc,
        "ddim" => OpKind::Ddim,
        "root_bridge" => OpKind::RootBridge,
        "cfg" => OpKind::Cfg,
        _ => return None,
    })
}

pub fn parse_shape(s: &str) -> Result<Vec<usize>> {
    s.split('x')
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("shape {s:?}: {d:?} is not a positive integer"))
                })
        })
        .collect()
}

/// Deterministic pseudo-random values in [-1, 1) (SplitMix64 based).
fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| crate::rng::uniform(seed, i) * 2.0 - 1.0)
        .collect()
}

struct Setup<'a, B: Backend> {
    b: &'a B,
    seed: u64,
    /// The op's output (each op allocates exactly one).
    out: Option<BufRef<B::Buffer>>,
}

impl<B: Backend> Setup<'_, B> {
    fn f32s(&mut self, n: usize) -> Result<BufRef<B::Buffer>> {
        self.seed += 1;
        let v = values(n, self.seed);
        let r = BufRef::new(self.b.alloc(DType::F32, n)?, DType::F32, n);
        self.b.write(&r, bytemuck::cast_slice(&v))?;
        Ok(r)
    }
    fn typed(&mut self, dtype: DType, n: usize) -> Result<BufRef<B::Buffer>> {
        self.seed += 1;
        let v = values(n, self.seed);
        let bytes: Vec<u8> = match dtype {
            DType::F32 => bytemuck::cast_slice(&v).to_vec(),
            DType::F16 => v
                .iter()
                .flat_map(|&x| f16::from_f32(x).to_le_bytes())
                .collect(),
            DType::BF16 => v
                .iter()
                .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
                .collect(),
            DType::Q8_0 => {
                if !n.is_multiple_of(Q8_0_BLOCK) {
                    return Err(Error::InvalidArgument(format!(
                        "q8_0 needs a multiple of 32 values, got {n}"
                    )));
                }
                let mut out = vec![0u8; n / Q8_0_BLOCK * Q8_0_BLOCK_BYTES];
                for (blk, o) in v.chunks(Q8_0_BLOCK).zip(out.chunks_mut(Q8_0_BLOCK_BYTES)) {
                    q8_0_quantize_block(blk, o);
                }
                out
            }
            DType::I32 | DType::U32 => {
                return Err(Error::InvalidArgument(
                    "integer weights are not benchmarked".into(),
                ));
            }
        };
        let r = BufRef::new(self.b.alloc(dtype, n)?, dtype, n);
        self.b.write(&r, &bytes)?;
        Ok(r)
    }
    fn u32s(&mut self, v: &[u32]) -> Result<BufRef<B::Buffer>> {
        let r = BufRef::new(self.b.alloc(DType::U32, v.len())?, DType::U32, v.len());
        self.b.write(&r, bytemuck::cast_slice(v))?;
        Ok(r)
    }
    fn out(&mut self, dtype: DType, n: usize) -> Result<BufRef<B::Buffer>> {
        let r = BufRef::new(self.b.alloc(dtype, n)?, dtype, n);
        self.out = Some(r.clone());
        Ok(r)
    }
}

fn dims<const N: usize>(op: &str, d: &[usize]) -> Result<[usize; N]> {
    d.try_into().map_err(|_| {
        Error::InvalidArgument(format!(
            "{op}: shape needs {N} dimensions ({})",
            OPS.iter().find(|o| o.0 == op).map_or("", |o| o.1)
        ))
    })
}

/// One op recorded on a backend with synthetic inputs (the same values on every backend: they
/// come from the SplitMix64 stream), its output buffer, and its FLOPs and bytes moved.
pub struct Recorded<B: Backend> {
    pub rec: B::Recording,
    pub out: BufRef<B::Buffer>,
    pub flops: f64,
    pub bytes: f64,
}

/// Record one op on `b` with synthetic data.
pub fn record<B: Backend>(b: &B, op: &str, d: &[usize], dtype: DType) -> Result<Recorded<B>> {
    let mut s = Setup {
        b,
        seed: 7,
        out: None,
    };
    let unknown = || {
        Error::InvalidArgument(format!(
            "unknown op {op:?}; known: {}",
            OPS.iter().map(|o| o.0).collect::<Vec<_>>().join(", ")
        ))
    };
    let kind = case_op(op).ok_or_else(unknown)?;
    let mut rec = b.begin()?;
    let f = |x: usize| x as f64;
    // One arm per op (exhaustive: a new op needs a bench case); cases of one op differ by
    // their parameters.
    let (flops, bytes) = match kind {
        OpKind::Linear => {
            let [m, n, k] = dims(op, d)?;
            let (x, w, bias, y) = (
                s.f32s(m * k)?,
                s.typed(dtype, n * k)?,
                s.f32s(n)?,
                s.out(DType::F32, m * n)?,
            );
            b.linear(
                &mut rec,
                &LinearParams {
                    m,
                    n,
                    k,
                    activation: Activation::None,
                },
                &x,
                &w,
                Some(&bias),
                &y,
            )?;
            let wbytes = dtype.bytes_for(n * k).unwrap_or(0) as f64;
            (2.0 * f(m) * f(n) * f(k), 4.0 * f(m * k + m * n) + wbytes)
        }
        OpKind::BatchedMatmul => {
            let [bt, m, n, k] = dims(op, d)?;
            let trans_b = op == "batched_matmul_tb";
            let (a, bb, c) = (
                s.f32s(bt * m * k)?,
                s.f32s(bt * k * n)?,
                s.out(DType::F32, bt * m * n)?,
            );
            let p = BatchedMatmulParams {
                batch: bt,
                m,
                n,
                k,
                trans_b,
                alpha: 1.0,
                a_batch_stride: m * k,
                b_batch_stride: k * n,
            };
            b.batched_matmul(&mut rec, &p, &a, &bb, &c)?;
            (
                2.0 * f(bt * m * n * k),
                4.0 * f(bt * (m * k + k * n + m * n)),
            )
        }
        OpKind::LayerNorm | OpKind::AddLayerNorm | OpKind::RmsNorm => {
            let [r, c] = dims(op, d)?;
            let (x, g, be, y) = (
                s.f32s(r * c)?,
                s.f32s(c)?,
                s.f32s(c)?,
                s.out(DType::F32, r * c)?,
            );
            let p = NormParams {
                rows: r,
                cols: c,
                eps: 1e-5,
            };
            // Bytes per element: x read and y written; the residual is one more read.
            let per = match kind {
                OpKind::LayerNorm => {
                    b.layer_norm(&mut rec, &p, &x, Some(&g), Some(&be), &y)?;
                    8.0
                }
                OpKind::AddLayerNorm => {
                    let res = s.f32s(r * c)?;
                    b.add_layer_norm(&mut rec, &p, &x, &res, Some(&g), Some(&be), &y)?;
                    12.0
                }
                _ => {
                    b.rms_norm(&mut rec, &p, &x, Some(&g), &y)?;
                    8.0
                }
            };
            (0.0, per * f(r * c))
        }
        OpKind::Softmax => {
            let [r, c] = dims(op, d)?;
            let (x, y) = (s.f32s(r * c)?, s.out(DType::F32, r * c)?);
            b.softmax(
                &mut rec,
                &SoftmaxParams {
                    rows: r,
                    cols: c,
                    scale: 1.0,
                },
                &x,
                &y,
            )?;
            (0.0, 8.0 * f(r * c))
        }
        OpKind::Attention => {
            let [bt, sl, h, hd] = dims(op, d)?;
            let n = bt * sl * h * hd;
            let (q, k, v, o) = (s.f32s(n)?, s.f32s(n)?, s.f32s(n)?, s.out(DType::F32, n)?);
            let p = AttentionParams {
                batch: bt,
                q_len: sl,
                kv_len: sl,
                q_heads: h,
                kv_heads: h,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                mask: MaskKind::None,
                q_row_stride: h * hd,
                kv_row_stride: h * hd,
            };
            b.attention(&mut rec, &p, &q, &k, &v, None, &o)?;
            (4.0 * f(bt * h * sl * sl * hd), 16.0 * f(n))
        }
        OpKind::Activation => {
            let [n] = dims(op, d)?;
            let act = match op {
                "gelu" => Activation::Gelu,
                "gelu_tanh" => Activation::GeluTanh,
                _ => Activation::Silu,
            };
            let (x, y) = (s.f32s(n)?, s.out(DType::F32, n)?);
            b.activation(&mut rec, act, &x, &y)?;
            (0.0, 8.0 * f(n))
        }
        OpKind::Swiglu => {
            let [n] = dims(op, d)?;
            let (g, u, y) = (s.f32s(n)?, s.f32s(n)?, s.out(DType::F32, n)?);
            b.swiglu(&mut rec, &g, &u, &y)?;
            (0.0, 12.0 * f(n))
        }
        OpKind::Rope => {
            let [t, h, hd] = dims(op, d)?;
            let pos: Vec<u32> = (0..t as u32).collect();
            let (x, pb, fr, y) = (
                s.f32s(t * h * hd)?,
                s.u32s(&pos)?,
                s.f32s(hd / 2)?,
                s.out(DType::F32, t * h * hd)?,
            );
            let pb = BufRef {
                dtype: DType::I32,
                ..pb
            };
            b.rope(
                &mut rec,
                &RopeParams {
                    tokens: t,
                    heads: h,
                    head_dim: hd,
                    pairing: RopePairing::RotateHalf,
                    row_stride: h * hd,
                },
                &x,
                &pb,
                &fr,
                &y,
            )?;
            (0.0, 8.0 * f(t * h * hd))
        }
        OpKind::Conv1d => {
            let [c, l, kk] = dims(op, d)?;
            let p = Conv1dParams {
                batch: 1,
                c_in: c,
                c_out: c,
                len: l,
                kernel: kk,
                padding: kk / 2,
                dilation: 1,
            };
            let ol = p.out_len()?;
            let (x, w, bias, y) = (
                s.f32s(c * l)?,
                s.f32s(c * c * kk)?,
                s.f32s(c)?,
                s.out(DType::F32, c * ol)?,
            );
            b.conv1d(&mut rec, &p, &x, &w, Some(&bias), &y)?;
            (
                2.0 * f(c * c * kk * ol),
                4.0 * f(c * l + c * c * kk + c * ol),
            )
        }
        OpKind::Upsample => {
            let [r, l] = dims(op, d)?;
            let (x, y) = (s.f32s(r * l)?, s.out(DType::F32, 2 * r * l)?);
            b.upsample_nearest2x(&mut rec, &UpsampleParams { rows: r, len: l }, &x, &y)?;
            (0.0, 12.0 * f(r * l))
        }
        OpKind::Binary => {
            let [n] = dims(op, d)?;
            let (x, y, o) = (s.f32s(n)?, s.f32s(n)?, s.out(DType::F32, n)?);
            b.binary(
                &mut rec,
                &BinaryParams {
                    op: BinaryOp::Add,
                    n,
                    b_len: n,
                },
                &x,
                &y,
                &o,
            )?;
            (0.0, 12.0 * f(n))
        }
        OpKind::MaskedAct => {
            let [n] = dims(op, d)?;
            let (x, m, r) = (s.f32s(n)?, s.f32s(n)?, s.f32s(n)?);
            let o = s.out(DType::F32, n)?;
            let p = MaskedActParams {
                n,
                act: Activation::Relu,
                pre_mask: true,
            };
            b.masked_act(&mut rec, &p, &x, &m, Some(&r), &o)?;
            (0.0, 16.0 * f(n))
        }
        OpKind::Scale => {
            let [n] = dims(op, d)?;
            let (x, y) = (s.f32s(n)?, s.out(DType::F32, n)?);
            b.scale(&mut rec, 0.5, &x, &y)?;
            (0.0, 8.0 * f(n))
        }
        OpKind::Axpby => {
            let [n] = dims(op, d)?;
            let (x, y, o) = (s.f32s(n)?, s.f32s(n)?, s.out(DType::F32, n)?);
            b.axpby(&mut rec, 0.5, &x, 2.0, &y, &o)?;
            (0.0, 12.0 * f(n))
        }
        OpKind::Embedding => {
            let [t, v, dd] = dims(op, d)?;
            let ids: Vec<u32> = (0..t as u64)
                .map(|i| (crate::rng::splitmix64(3, i) % v as u64) as u32)
                .collect();
            let (ib, tb, o) = (
                s.u32s(&ids)?,
                s.typed(dtype, v * dd)?,
                s.out(DType::F32, t * dd)?,
            );
            b.embedding(
                &mut rec,
                &EmbeddingParams {
                    tokens: t,
                    vocab: v,
                    dim: dd,
                },
                &ib,
                &tb,
                &o,
            )?;
            (
                0.0,
                f(t * dd) * (4.0 + dtype.bytes_for(32).unwrap_or(128) as f64 / 32.0),
            )
        }
        OpKind::MeanPool => {
            let [bt, sl, dd] = dims(op, d)?;
            let mask = vec![1u32; bt * sl];
            let (x, m, o) = (
                s.f32s(bt * sl * dd)?,
                s.u32s(&mask)?,
                s.out(DType::F32, bt * dd)?,
            );
            b.mean_pool(
                &mut rec,
                &MeanPoolParams {
                    batch: bt,
                    seq: sl,
                    dim: dd,
                },
                &x,
                &m,
                &o,
            )?;
            (0.0, 4.0 * f(bt * sl * dd))
        }
        OpKind::Argmax | OpKind::Gumbel => {
            let [r, c] = dims(op, d)?;
            let (x, o) = (s.f32s(r * c)?, s.out(DType::U32, r)?);
            if kind == OpKind::Argmax {
                b.argmax(&mut rec, &ArgmaxParams { rows: r, cols: c }, &x, &o)?;
            } else {
                b.gumbel(
                    &mut rec,
                    &GumbelParams {
                        rows: r,
                        cols: c,
                        temperature: 1.0,
                        seed: 1,
                        counter: 0,
                    },
                    &x,
                    None,
                    &o,
                )?;
            }
            (0.0, 4.0 * f(r * c))
        }
        OpKind::PosEnc => {
            let [l, dd] = dims(op, d)?;
            let o = s.out(DType::F32, l * dd)?;
            let p = PosEncParams {
                start: 0,
                len: l,
                dim: dd,
            };
            b.posenc(&mut rec, &p, &o)?;
            (0.0, 4.0 * f(l * dd))
        }
        OpKind::Ddim => {
            let [n] = dims(op, d)?;
            let (xt, x0, c, o) = (s.f32s(n)?, s.f32s(n)?, s.f32s(4)?, s.out(DType::F32, n)?);
            b.ddim(&mut rec, &DdimParams { n }, &xt, &x0, &c, &o)?;
            (0.0, 12.0 * f(n))
        }
        OpKind::Cfg => {
            let [r, n] = dims(op, d)?;
            let (x, o) = (s.f32s(r * n)?, s.out(DType::F32, n)?);
            b.cfg(
                &mut rec,
                &CfgParams {
                    n,
                    rows: r,
                    w_text: 2.0,
                    w_constraint: 2.0,
                },
                &x,
                &o,
            )?;
            (0.0, 4.0 * f((r + 1) * n))
        }
        OpKind::Copy => {
            // "transpose" RxC: x [R, C] -> [C, R]; "copy" N: contiguous.
            let (shape, src_strides, dst_strides) = if op == "transpose" {
                let [r, c] = dims(op, d)?;
                (vec![c, r], vec![1, c], vec![r, 1])
            } else {
                let [n] = dims(op, d)?;
                (vec![n], vec![1], vec![1])
            };
            let n = shape.iter().product();
            let (x, o) = (s.f32s(n)?, s.out(DType::F32, n)?);
            let p = CopyParams {
                shape,
                src_strides,
                src_offset: 0,
                dst_strides,
                dst_offset: 0,
            };
            b.copy(&mut rec, &p, &x, &o)?;
            (0.0, 8.0 * f(n))
        }
        OpKind::RootBridge => {
            let [r, fr] = dims(op, d)?;
            let (x, o) = (s.f32s(r * fr * 5)?, s.out(DType::F32, r * fr * 4)?);
            let p = RootBridgeParams {
                rows: r,
                frames: fr,
                fps: 30.0,
                global_mean: [0.0; 5],
                global_std: [1.0; 5],
                local_mean: [0.0; 4],
                local_std: [1.0; 4],
            };
            b.root_bridge(&mut rec, &p, &x, &o)?;
            (0.0, 36.0 * f(r * fr))
        }
    };
    let out = s
        .out
        .ok_or_else(|| Error::InvalidArgument(format!("{op}: no output")))?;
    Ok(Recorded {
        rec,
        out,
        flops,
        bytes,
    })
}

/// Time one op: calibrate iterations so a sample lasts about `target`, then take the median
/// of `samples` samples.
pub fn measure<B: Backend>(
    b: &B,
    op: &str,
    shape: &str,
    dtype: DType,
    samples: usize,
    target: Duration,
) -> Result<Measurement> {
    let d = parse_shape(shape)?;
    let Recorded {
        rec, flops, bytes, ..
    } = record(b, op, &d, dtype)?;
    b.submit(&rec)?;
    b.sync()?;
    let t0 = Instant::now();
    b.submit(&rec)?;
    b.sync()?;
    let one = t0.elapsed().max(Duration::from_nanos(100));
    let iters = ((target.as_secs_f64() / one.as_secs_f64()).ceil() as usize).clamp(1, 100_000);
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        let t = Instant::now();
        for _ in 0..iters {
            b.submit(&rec)?;
        }
        b.sync()?;
        times.push(t.elapsed().as_secs_f64() / iters as f64);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let info = b.info();
    Ok(Measurement {
        op: op.to_string(),
        shape: shape.to_string(),
        dtype: dtype.name().to_string(),
        backend: info.kind.to_string(),
        isa: info.device,
        threads: info.threads,
        precision: info.precision.name().to_string(),
        cooperative_matrix: info.cooperative_matrix,
        median_s: median,
        min_s: times[0],
        samples: times.len(),
        iters_per_sample: iters,
        gflops: (flops > 0.0).then(|| flops / median / 1e9),
        gbps: Some(bytes / median / 1e9),
        gpu_s: None,
        gpu_gflops: None,
    })
}

impl Measurement {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn table_header() -> String {
        format!(
            "{:<15} {:<16} {:<5} {:<7} {:>3} {:<6} {:>11} {:>10}",
            "op", "shape", "dtype", "isa", "thr", "prec", "median", "rate"
        )
    }

    pub fn table_row(&self) -> String {
        // Compute-bound ops report FLOP/s, the others bytes/s (both are in the JSON).
        let rate = match (self.gflops, self.gbps) {
            (Some(g), _) => format!("{g:.1} GFLOP/s"),
            (None, Some(g)) => format!("{g:.1} GB/s"),
            (None, None) => String::new(),
        };
        format!(
            "{:<15} {:<16} {:<5} {:<7} {:>3} {:<6} {:>9.3}ms {:>10}",
            self.op,
            self.shape,
            self.dtype,
            self.isa,
            self.threads,
            self.precision,
            self.median_s * 1e3,
            rate
        ) + &self
            .gpu_s
            .map(|g| {
                // Bytes moved per GPU second: the weight-streaming linears' bandwidth.
                let gpu_gbps = self.gbps.map(|b| b * self.median_s / g);
                let rate = gpu_gbps
                    .map(|b| format!(", {b:.1} GB/s"))
                    .unwrap_or_default();
                format!("  (GPU {:.3}ms{rate})", g * 1e3)
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_a_bench_case() {
        for &op in OpKind::ALL {
            assert!(
                OPS.iter().any(|(c, _)| case_op(c) == Some(op)),
                "{} has no bench case",
                op.name()
            );
            assert!(
                default_cases()
                    .iter()
                    .any(|(c, _, _)| case_op(c) == Some(op)),
                "{} has no default bench case",
                op.name()
            );
        }
        for (c, _) in OPS {
            assert!(
                case_op(c).is_some() || c.ends_with("_peak"),
                "{c} runs no op"
            );
        }
    }
}
