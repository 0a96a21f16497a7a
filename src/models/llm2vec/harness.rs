//! LLM2Vec in the model-level commands: `kinema bench llm2vec` times the bidirectional,
//! mean-pooled encoder at the Llama-3-8B shapes on deterministic synthetic weights (no file
//! needed: the real model is gated), and `kinema drift --model text.gguf` compares every
//! layer's output, the final norm and the pooled vector across ISAs, devices and precisions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::config::{AttentionMode, LlamaConfig};
use super::load::LlamaModel;
use super::model::{GraphSpec, Head, RunInputs, Session};
use super::tokenizer::{Tokenizer, byte_to_char};
use crate::backend::Backend;
use crate::drift::{Drift, Output, compare};
use crate::formats::GgufValue;
use crate::formats::gguf::GgufArray;
use crate::models::harness::{BenchReport, DriftRun, ModelHarness, quantile};
use crate::models::kit::convert::encode_f32;
use crate::ops::{MaskKind, RopePairing};
use crate::tensor::{HostTensor, Q8_0_BLOCK};
use crate::{DType, Error, Result};

/// The harness of [`ModelHarness`] for the Llama text encoder.
pub struct Llm2Vec;

/// Meta-Llama-3-8B(-Instruct) with `layers` decoder layers (32 in the real model), as
/// LLM2Vec runs it: bidirectional, HF-layout RoPE (theta 500000, no scaling), vocab 128256.
pub fn llama3_8b(layers: usize) -> LlamaConfig {
    LlamaConfig {
        layers,
        hidden: 4096,
        ffn: 14336,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        vocab: 128256,
        eps: 1e-5,
        rope_base: 500000.0,
        context_length: 8192,
        pairing: RopePairing::RotateHalf,
        attention: AttentionMode::Bidirectional,
        chat_template_default: true,
        tied_output: true,
        rope_freqs: false,
    }
}

/// A tokenizer of `vocab` ids (256 byte tokens, the rest control tokens, no merges): enough
/// for a synthetic model, whose inputs are ids.
fn synthetic_tokenizer(vocab: usize) -> Result<Tokenizer> {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    let mut types = vec![1i32; 256];
    while tokens.len() < vocab {
        tokens.push(format!("<|synthetic_{}|>", tokens.len()));
        types.push(3);
    }
    let meta = vec![
        ("tokenizer.ggml.model".to_string(), GgufValue::from("gpt2")),
        (
            "tokenizer.ggml.pre".to_string(),
            GgufValue::from("llama-bpe"),
        ),
        (
            "tokenizer.ggml.tokens".to_string(),
            GgufValue::Array(GgufArray::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".to_string(),
            GgufValue::Array(GgufArray::I32(types)),
        ),
        (
            "tokenizer.ggml.merges".to_string(),
            GgufValue::Array(GgufArray::String(vec![])),
        ),
    ];
    Tokenizer::from_gguf_metadata(&meta).map_err(Into::into)
}

/// A pool of deterministic values in `[-0.02, 0.02)` (SplitMix64), stored as `dtype`: each
/// weight is a window of it, so an 8B model is made with copies, not 8 billion draws.
struct Pool {
    dtype: DType,
    /// Elements in the pool (a multiple of the q8_0 block).
    len: usize,
    bytes: Vec<u8>,
}

impl Pool {
    fn new(dtype: DType) -> Result<Pool> {
        const LEN: usize = 1 << 20;
        const SEED: u64 = 0x6b69_6e65_6d61;
        let values: Vec<f32> = (0..LEN as u64)
            .map(|i| {
                let z = crate::rng::splitmix64(SEED, i);
                ((z >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.04
            })
            .collect();
        let bytes = match dtype {
            DType::F32 | DType::F16 | DType::BF16 | DType::Q8_0 => {
                encode_f32("synthetic", "pool", &[LEN], &values, dtype)?
            }
            d => {
                return Err(Error::InvalidArgument(format!(
                    "synthetic Llama weights in {d}: expected f32, f16, bf16 or q8_0"
                )));
            }
        };
        Ok(Pool {
            dtype,
            len: LEN,
            bytes,
        })
    }

    /// A tensor of `shape` whose values start at element `start` of the pool (wrapping).
    fn tensor(&self, shape: &[usize], start: usize) -> Result<HostTensor> {
        let n: usize = shape.iter().product();
        let unit = if self.dtype == DType::Q8_0 {
            Q8_0_BLOCK
        } else {
            1
        };
        let unit_bytes = self.dtype.bytes_for(unit).unwrap_or(0);
        let units = n / unit;
        let pool_units = self.len / unit;
        let mut out = Vec::with_capacity(units * unit_bytes);
        let mut u = (start / unit) % pool_units;
        while out.len() < units * unit_bytes {
            let take = (pool_units - u).min(units - out.len() / unit_bytes);
            out.extend_from_slice(&self.bytes[u * unit_bytes..(u + take) * unit_bytes]);
            u = 0;
        }
        HostTensor::from_bytes(self.dtype, shape, &out)
    }
}

/// A model of `config`'s sizes with deterministic weights: matrices (and the embedding
/// table) in `dtype`, norm gains 1 in f32.
pub fn synthetic_model(config: LlamaConfig, dtype: DType) -> Result<LlamaModel> {
    let pool = Pool::new(dtype)?;
    let mut tensors = BTreeMap::new();
    for (i, (name, shape)) in config.tensor_shapes().into_iter().enumerate() {
        let t = if shape.len() == 1 {
            HostTensor::from_f32(&shape, &vec![1.0; shape[0]])?
        } else {
            pool.tensor(&shape, i.wrapping_mul(7919 * Q8_0_BLOCK))?
        };
        tensors.insert(name, t);
    }
    let tokenizer = synthetic_tokenizer(config.vocab)?;
    LlamaModel::from_parts(config, tokenizer, tensors)
}

/// `n` deterministic token ids below `vocab`.
fn synthetic_ids(n: usize, vocab: usize) -> Vec<u32> {
    (0..n as u64)
        .map(|i| (crate::rng::splitmix64(0x1d5, i) % vocab as u64) as u32)
        .collect()
}

/// What `kinema bench llm2vec` times.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Tokens per prompt.
    pub tokens: usize,
    /// Prompts per forward.
    pub batch: usize,
    /// Decoder layers (32 in the real model).
    pub layers: usize,
    /// Weight dtype: f32, f16, bf16 or q8_0.
    pub dtype: DType,
    /// Timed forwards after the untimed warm-up ([`BENCH_WARMUP_S`]).
    pub runs: usize,
}

/// Seconds of untimed forwards (at least one) before the timed ones, as
/// `reference/bench_llm2vec_torch.py` warms up 10 forwards: on the H200 a batch-1 forward is
/// ~10 ms, and after a single warm-up run some timed runs took ~40 ms (p50 10.5 ms, p99 40.5
/// ms, mean 13-17 ms over 30 runs, 2026-12-03/04) while 72-ms batches of 16 had p99 = p50;
/// presumably the GPU's clocks still rising after one short forward (not yet confirmed there).
/// The first run's time is still reported ([`Llm2VecBench::first_ms`]).
pub const BENCH_WARMUP_S: f64 = 0.5;

/// The result of [`Llm2Vec::bench`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct Llm2VecBench {
    pub backend: String,
    pub device: String,
    pub threads: usize,
    pub precision: String,
    /// Dtype of the weight matrices as run (fast precision may narrow f32).
    pub weights: String,
    pub layers: usize,
    pub parameters: u64,
    /// Bytes of weights one forward streams (the matrices and the gathered rows).
    pub weight_bytes: u64,
    pub tokens: usize,
    pub batch: usize,
    pub runs: usize,
    /// Untimed forwards before the timed ones ([`BENCH_WARMUP_S`]).
    pub warmup_runs: usize,
    /// The very first forward (cold: first use of every pipeline, clocks not raised yet).
    pub first_ms: f64,
    /// Making the synthetic weights.
    pub weights_s: f64,
    /// Compiling the graph (binding or uploading the weights).
    pub build_s: f64,
    /// Per forward of the whole batch: ids in, pooled vectors read back.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    /// `weight_bytes / p50`: the weight-streaming rate reached, GB/s.
    pub weight_gbps: f64,
}

impl BenchReport for Llm2VecBench {
    fn text(&self) -> String {
        format!(
            "llm2vec {} ({}, {} threads, {}, {} weights): Llama-3-8B shapes, {} layers, \
             {:.2} B params, {} tokens, batch {}, {} runs: p50 {:.2} ms, p99 {:.2} ms, \
             mean {:.2} ms ({:.2} ms per prompt; weights streamed at {:.0} GB/s) \
             (weights {:.1} s, build {:.1} s, first run {:.2} ms, {} warm-up runs)",
            self.backend,
            self.device,
            self.threads,
            self.precision,
            self.weights,
            self.layers,
            self.parameters as f64 / 1e9,
            self.tokens,
            self.batch,
            self.runs,
            self.p50_ms,
            self.p99_ms,
            self.mean_ms,
            self.p50_ms / self.batch as f64,
            self.weight_gbps,
            self.weights_s,
            self.build_s,
            self.first_ms,
            self.warmup_runs
        )
    }
}

impl ModelHarness for Llm2Vec {
    const NAME: &'static str = "llm2vec";

    type BenchOptions = BenchOptions;
    type BenchReport = Llm2VecBench;
    fn bench<B: Backend>(b: &B, o: &BenchOptions) -> Result<Llm2VecBench> {
        bench_config(b, llama3_8b(o.layers), o)
    }

    type DriftOptions = DriftOptions;
    type Drift = Llm2VecDrift;
    fn drift(path: &Path, o: &DriftOptions) -> Result<Llm2VecDrift> {
        let model = LlamaModel::load(path)?;
        if o.tokens == 0 || o.tokens > model.config.context_length {
            return Err(Error::InvalidArgument(format!(
                "--tokens {}: expected 1 to the model's context of {}",
                o.tokens, model.config.context_length
            )));
        }
        let ids = synthetic_ids(o.tokens, model.config.vocab);
        Ok(Llm2VecDrift {
            path: path.to_path_buf(),
            model,
            ids,
        })
    }
}

/// [`Llm2Vec::bench`] on a model of `config`'s sizes (the tests use small ones).
fn bench_config<B: Backend>(b: &B, config: LlamaConfig, o: &BenchOptions) -> Result<Llm2VecBench> {
    if o.runs == 0 || o.tokens == 0 || o.batch == 0 || o.layers == 0 {
        return Err(Error::InvalidArgument(format!(
            "bench llm2vec: --runs {}, --tokens {}, --batch {} and --layers {} must each \
             be at least 1",
            o.runs, o.tokens, o.batch, o.layers
        )));
    }
    if o.tokens > config.context_length {
        return Err(Error::InvalidArgument(format!(
            "--tokens {} is over the model's context of {}",
            o.tokens, config.context_length
        )));
    }
    let t = Instant::now();
    let model = synthetic_model(config, o.dtype)?.for_backend(&b.info())?;
    let weights_s = t.elapsed().as_secs_f64();
    let c = &model.config;
    let parameters = c.parameter_count();
    let matrix_dtype = model.weight_dtype()?;
    let per_layer = (c.hidden * (c.heads + 2 * c.kv_heads) * c.head_dim
        + c.heads * c.head_dim * c.hidden
        + 3 * c.hidden * c.ffn) as u64;
    let weight_bytes = matrix_dtype
        .bytes_for(per_layer as usize)
        .map_or(0, |x| x as u64)
        * c.layers as u64;
    let t = Instant::now();
    let session = Session::new(
        b,
        &model,
        GraphSpec {
            batch: o.batch,
            seq: o.tokens,
            mask: MaskKind::None,
            head: Head::MeanPool,
            taps: vec![],
            last_hidden: false,
        },
    )?;
    let build_s = t.elapsed().as_secs_f64();
    let ids = synthetic_ids(o.batch * o.tokens, c.vocab);
    let lengths = vec![o.tokens; o.batch];
    let select = vec![1u32; o.batch * o.tokens];
    let inputs = RunInputs {
        ids: &ids,
        lengths: &lengths,
        select: &select,
    };
    let forward = || -> Result<f64> {
        let t = Instant::now();
        session.run(&inputs)?;
        let pooled = session.pooled()?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        match pooled.iter().find(|x| !x.is_finite()) {
            Some(x) => Err(Error::InvalidArgument(format!(
                "bench llm2vec: the pooled output holds {x} (synthetic weights overflowed)"
            ))),
            None => Ok(ms),
        }
    };
    let warm = Instant::now();
    let first_ms = forward()?;
    let mut warmup_runs = 1;
    while warm.elapsed().as_secs_f64() < BENCH_WARMUP_S {
        forward()?;
        warmup_runs += 1;
    }
    let mut ms = (0..o.runs)
        .map(|_| forward())
        .collect::<Result<Vec<f64>>>()?;
    ms.sort_by(f64::total_cmp);
    let p50 = quantile(&ms, 0.5);
    let info = b.info();
    Ok(Llm2VecBench {
        backend: info.kind.to_string(),
        device: info.device,
        threads: info.threads,
        precision: info.precision.name().to_string(),
        weights: matrix_dtype.name().to_string(),
        layers: c.layers,
        parameters,
        weight_bytes,
        tokens: o.tokens,
        batch: o.batch,
        runs: o.runs,
        warmup_runs,
        first_ms,
        weights_s,
        build_s,
        p50_ms: p50,
        p99_ms: quantile(&ms, 0.99),
        mean_ms: ms.iter().sum::<f64>() / ms.len() as f64,
        weight_gbps: weight_bytes as f64 / (p50 * 1e-3) / 1e9,
    })
}

/// What `kinema drift --model` runs on a Llama text model.
#[derive(Clone, Debug)]
pub struct DriftOptions {
    /// Tokens of the one synthetic prompt (deterministic ids).
    pub tokens: usize,
}

/// A Llama file loaded for `kinema drift --model`, with the prompt's ids.
pub struct Llm2VecDrift {
    /// Reloaded (memory-mapped) for each run: fast precision narrows a copy's weights.
    path: PathBuf,
    model: LlamaModel,
    ids: Vec<u32>,
}

/// Every layer's output, the final norm and the pooled vector of one run.
pub struct Llm2VecTrace {
    layers: Vec<Vec<f32>>,
    last_hidden: Vec<f32>,
    pooled: Vec<f32>,
}

impl DriftRun for Llm2VecDrift {
    type Trace = Llm2VecTrace;

    fn describe(&self) -> String {
        let c = &self.model.config;
        format!(
            "{} tokens, {} layers, hidden {}, {} attention, {} weights",
            self.ids.len(),
            c.layers,
            c.hidden,
            c.attention.name(),
            self.model
                .weight_dtype()
                .map_or("?".to_string(), |d| d.name().to_string())
        )
    }

    fn trace<B: Backend>(&self, b: &B) -> Result<Llm2VecTrace> {
        let model = LlamaModel::load(&self.path)?.for_backend(&b.info())?;
        let t = self.ids.len();
        let mask = match model.config.attention {
            AttentionMode::Bidirectional => MaskKind::None,
            AttentionMode::Causal => MaskKind::Causal,
        };
        let s = Session::new(
            b,
            &model,
            GraphSpec {
                batch: 1,
                seq: t,
                mask,
                head: Head::MeanPool,
                taps: (0..model.config.layers).collect(),
                last_hidden: true,
            },
        )?;
        s.run(&RunInputs {
            ids: &self.ids,
            lengths: &[t],
            select: &vec![1; t],
        })?;
        Ok(Llm2VecTrace {
            layers: (0..model.config.layers)
                .map(|l| s.tap(l))
                .collect::<Result<_>>()?,
            last_hidden: s.last_hidden()?,
            pooled: s.pooled()?,
        })
    }

    fn compare(&self, label: &str, r: &Llm2VecTrace, g: &Llm2VecTrace) -> Vec<Drift> {
        let (t, h) = (self.ids.len(), self.model.config.hidden);
        let row = |name: String, shape: String, want: &[f32], have: &[f32]| {
            compare(
                &name,
                &shape,
                DType::F32,
                label,
                &Output::F32(want.to_vec()),
                &Output::F32(have.to_vec()),
            )
        };
        let mut rows: Vec<Drift> = r
            .layers
            .iter()
            .zip(&g.layers)
            .enumerate()
            .map(|(l, (a, b))| row(format!("layer {l}"), format!("{t}x{h}"), a, b))
            .collect();
        rows.push(row(
            "final norm".into(),
            format!("{t}x{h}"),
            &r.last_hidden,
            &g.last_hidden,
        ));
        rows.push(row("pooled".into(), format!("{h}"), &r.pooled, &g.pooled));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuBackend;
    use crate::precision::Precision;

    #[test]
    fn the_synthetic_pool_tiles_the_same_values_in_every_dtype() {
        let f = Pool::new(DType::F32).unwrap();
        let b = Pool::new(DType::BF16).unwrap();
        let q = Pool::new(DType::Q8_0).unwrap();
        let shape = [3, 64];
        let (tf, tb, tq) = (
            f.tensor(&shape, 96).unwrap().to_f32_vec().unwrap(),
            b.tensor(&shape, 96).unwrap().to_f32_vec().unwrap(),
            q.tensor(&shape, 96).unwrap().to_f32_vec().unwrap(),
        );
        for ((x, y), z) in tf.iter().zip(&tb).zip(&tq) {
            assert!(x.abs() < 0.02);
            assert!((x - y).abs() <= 0.02 / 128.0, "{x} {y}");
            assert!((x - z).abs() <= 0.02 / 64.0, "{x} {z}");
        }
        // Windows wrap around the pool's end.
        let n = 1 << 20;
        let w = f.tensor(&[2, 64], n - 64).unwrap().to_f32_vec().unwrap();
        let head = f.tensor(&[64], 0).unwrap().to_f32_vec().unwrap();
        assert_eq!(&w[64..], head.as_slice());
    }

    #[test]
    fn bench_runs_a_small_synthetic_model() {
        let cpu = CpuBackend::new(Precision::Strict).unwrap();
        let mut o = BenchOptions {
            tokens: 4,
            batch: 2,
            layers: 1,
            dtype: DType::Q8_0,
            runs: 1,
        };
        let small = LlamaConfig {
            hidden: 64,
            ffn: 128,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            vocab: 300,
            ..llama3_8b(1)
        };
        let r = bench_config(&cpu, small.clone(), &o).unwrap();
        assert_eq!((r.layers, r.batch, r.tokens), (1, 2, 4));
        assert_eq!(r.weights, "q8_0");
        assert!(r.p50_ms > 0.0 && r.weight_gbps > 0.0);
        // The warm-up ran for its time (tiny forwards: many of them) and the first is kept.
        assert!(r.warmup_runs > 1 && r.first_ms > 0.0, "{r:?}");
        o.runs = 0;
        assert!(bench_config(&cpu, small, &o).is_err());
    }
}
