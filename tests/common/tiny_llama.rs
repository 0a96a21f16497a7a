//! A seeded random tiny Llama GGUF in the layout `kinema convert llm2vec` writes (llama.cpp
//! names and keys, `llm2vec.*` keys, a GPT-2-style byte-level tokenizer with the Llama-3
//! special tokens the chat template needs), for the model, encode and CLI tests. Include
//! with `#[path = "common/tiny_llama.rs"] mod tiny_llama;`.
#![allow(dead_code)]

use std::path::Path;

use half::{bf16, f16};
use kinema::formats::{GgufArray, GgufWriter};
use kinema::tensor::{Q8_0_BLOCK, Q8_0_BLOCK_BYTES, q8_0_quantize_block};
use kinema::{DType, HostTensor};

/// The tiny model's sizes.
pub const LAYERS: usize = 2;
pub const HIDDEN: usize = 64;
pub const FFN: usize = 96;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = HIDDEN / HEADS;
/// 256 byte tokens, then the specials.
pub const SPECIALS: [&str; 4] = [
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
];
pub const VOCAB: usize = 256 + SPECIALS.len();
pub const BOS: u32 = 256;

/// How the file is written.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Dtype of the weight matrices (the embedding table too).
    pub dtype: DType,
    /// `Some("rotate_half")`: Hugging Face layout; `None`: llama.cpp's permuted Q/K.
    pub pairing: Option<&'static str>,
    /// `llm2vec.attention`; `None` leaves the key out (causal).
    pub attention: Option<&'static str>,
    /// `llm2vec.chat_template_default`.
    pub template_default: Option<&'static str>,
    /// Write `output.weight` (else tied).
    pub untied_output: bool,
    /// Token count the tokenizer claims (VOCAB unless testing a mismatch).
    pub tokenizer_vocab: usize,
    pub seed: u64,
    /// The model width (HIDDEN, or 48 to condition the tiny Kimodo model, whose llm_dim is
    /// 48); a multiple of 4 * HEADS.
    pub hidden: usize,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            dtype: DType::F32,
            pairing: Some("rotate_half"),
            attention: Some("bidirectional"),
            template_default: Some("on"),
            untied_output: false,
            tokenizer_vocab: VOCAB,
            seed: 7,
            hidden: HIDDEN,
        }
    }
}

/// Deterministic values in [-s, s) (xorshift).
pub fn values(seed: u64, n: usize, s: f32) -> Vec<f32> {
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

/// GPT-2's `bytes_to_unicode`: printable bytes map to themselves, the other 68 to U+0100 on.
pub fn byte_char(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// llama.cpp's `permute` (`convert_hf_to_gguf.py`, `LlamaModel.permute`): within each head,
/// rows `(j, i)` of the `[2, head_dim/2]` split become rows `(i, j)`, so rotate-half pairs
/// `(i, i + d/2)` become adjacent pairs `(2i, 2i+1)`.
pub fn permute(w: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let rows = w.len() / cols;
    let hd = rows / heads;
    let mut out = vec![0f32; w.len()];
    for h in 0..heads {
        for j in 0..2 {
            for i in 0..hd / 2 {
                let src = h * hd + j * hd / 2 + i;
                let dst = h * hd + 2 * i + j;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// `v` as a tensor of `dtype`.
pub fn tensor(dtype: DType, shape: &[usize], v: &[f32]) -> HostTensor {
    match dtype {
        DType::F32 => HostTensor::from_f32(shape, v).unwrap(),
        DType::F16 => HostTensor::from_f16(
            shape,
            &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(),
        )
        .unwrap(),
        DType::BF16 => HostTensor::from_bf16(
            shape,
            &v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>(),
        )
        .unwrap(),
        DType::Q8_0 => {
            let mut b = vec![0u8; v.len() / Q8_0_BLOCK * Q8_0_BLOCK_BYTES];
            for (x, o) in v
                .chunks_exact(Q8_0_BLOCK)
                .zip(b.chunks_exact_mut(Q8_0_BLOCK_BYTES))
            {
                q8_0_quantize_block(x, o);
            }
            HostTensor::from_bytes(DType::Q8_0, shape, &b).unwrap()
        }
        d => panic!("no {d} weights"),
    }
}

/// The tokenizer metadata: byte tokens, no merges, the specials as control tokens.
pub fn add_tokenizer(w: &mut GgufWriter, vocab: usize) {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.extend(SPECIALS.iter().map(|s| s.to_string()));
    let mut types = vec![1i32; 256];
    types.extend([3; SPECIALS.len()]);
    while tokens.len() < vocab {
        tokens.push(format!("<|extra_{}|>", tokens.len()));
        types.push(3);
    }
    tokens.truncate(vocab);
    types.truncate(vocab);
    w.add_metadata("tokenizer.ggml.model", "gpt2").unwrap();
    w.add_metadata("tokenizer.ggml.pre", "llama-bpe").unwrap();
    w.add_metadata("tokenizer.ggml.tokens", GgufArray::String(tokens))
        .unwrap();
    w.add_metadata("tokenizer.ggml.token_type", GgufArray::I32(types))
        .unwrap();
    w.add_metadata("tokenizer.ggml.merges", GgufArray::String(vec![]))
        .unwrap();
    w.add_metadata("tokenizer.ggml.bos_token_id", BOS).unwrap();
}

/// The f32 values of every weight, by name, in Hugging Face row order.
pub fn weights(seed: u64, untied: bool) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    weights_of(seed, untied, HIDDEN)
}

/// [`weights`] at width `hidden` (head dimension `hidden / HEADS`).
pub fn weights_of(seed: u64, untied: bool, hidden: usize) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let head_dim = hidden / HEADS;
    let (q, kv) = (HEADS * head_dim, KV_HEADS * head_dim);
    let mut s = seed * 1000;
    let mut next = |shape: &[usize], scale: f32, around: f32| -> Vec<f32> {
        s += 1;
        values(s, shape.iter().product(), scale)
            .into_iter()
            .map(|x| x + around)
            .collect()
    };
    let mut v = vec![
        (
            "token_embd.weight".to_string(),
            vec![VOCAB, hidden],
            next(&[VOCAB, hidden], 1.0, 0.0),
        ),
        (
            "output_norm.weight".to_string(),
            vec![hidden],
            next(&[hidden], 0.2, 1.0),
        ),
    ];
    if untied {
        v.push((
            "output.weight".to_string(),
            vec![VOCAB, hidden],
            next(&[VOCAB, hidden], 0.3, 0.0),
        ));
    }
    for i in 0..LAYERS {
        for (what, shape, scale, around) in [
            ("attn_norm", vec![hidden], 0.2, 1.0),
            ("attn_q", vec![q, hidden], 0.25, 0.0),
            ("attn_k", vec![kv, hidden], 0.25, 0.0),
            ("attn_v", vec![kv, hidden], 0.25, 0.0),
            ("attn_output", vec![hidden, q], 0.2, 0.0),
            ("ffn_norm", vec![hidden], 0.2, 1.0),
            ("ffn_gate", vec![FFN, hidden], 0.2, 0.0),
            ("ffn_up", vec![FFN, hidden], 0.2, 0.0),
            ("ffn_down", vec![hidden, FFN], 0.2, 0.0),
        ] {
            let x = next(&shape, scale, around);
            v.push((format!("blk.{i}.{what}.weight"), shape, x));
        }
    }
    v
}

/// Llama dimensions of a file: the tiny model's ([`Dims::tiny`]) or Llama-3-8B's
/// ([`Dims::llama3_8b`]).
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub vocab: usize,
}

impl Dims {
    pub fn tiny(hidden: usize, vocab: usize) -> Dims {
        Dims {
            layers: LAYERS,
            hidden,
            ffn: FFN,
            heads: HEADS,
            kv_heads: KV_HEADS,
            vocab,
        }
    }

    /// Meta-Llama-3-8B's `config.json`: 32 layers, 4096 wide, 14336 feed-forward, 32 query and
    /// 8 key/value heads, 128256 tokens.
    pub fn llama3_8b() -> Dims {
        Dims {
            layers: 32,
            hidden: 4096,
            ffn: 14336,
            heads: 32,
            kv_heads: 8,
            vocab: 128_256,
        }
    }
}

/// The GGUF metadata of a `kinema convert llm2vec` file of dimensions `d` (tokenizer included).
pub fn metadata(w: &mut GgufWriter, spec: &Spec, d: Dims) {
    w.add_metadata("general.architecture", "llama").unwrap();
    w.add_metadata("general.name", "tiny-llama-test").unwrap();
    w.add_metadata("llama.block_count", d.layers as u32)
        .unwrap();
    w.add_metadata("llama.embedding_length", d.hidden as u32)
        .unwrap();
    w.add_metadata("llama.feed_forward_length", d.ffn as u32)
        .unwrap();
    w.add_metadata("llama.attention.head_count", d.heads as u32)
        .unwrap();
    w.add_metadata("llama.attention.head_count_kv", d.kv_heads as u32)
        .unwrap();
    w.add_metadata("llama.attention.layer_norm_rms_epsilon", 1e-5f32)
        .unwrap();
    w.add_metadata("llama.rope.freq_base", 500000f32).unwrap();
    w.add_metadata("llama.context_length", 512u32).unwrap();
    if let Some(p) = spec.pairing {
        w.add_metadata("kinema.rope_pairing", p).unwrap();
    }
    if let Some(a) = spec.attention {
        w.add_metadata("llm2vec.attention", a).unwrap();
    }
    w.add_metadata("llm2vec.pooling", "mean").unwrap();
    if let Some(t) = spec.template_default {
        w.add_metadata("llm2vec.chat_template_default", t).unwrap();
    }
    w.add_metadata("llm2vec.max_length", 512u32).unwrap();
    add_tokenizer(w, spec.tokenizer_vocab);
}

/// Writes the tiny model of `spec` to `path`.
pub fn write(path: &Path, spec: &Spec) {
    let mut w = GgufWriter::new();
    metadata(&mut w, spec, Dims::tiny(spec.hidden, VOCAB));
    for (name, shape, v) in weights_of(spec.seed, spec.untied_output, spec.hidden) {
        let v = if spec.pairing.is_none() && name.ends_with("attn_q.weight") {
            permute(&v, HEADS, spec.hidden)
        } else if spec.pairing.is_none() && name.ends_with("attn_k.weight") {
            permute(&v, KV_HEADS, spec.hidden)
        } else {
            v
        };
        let dtype = if shape.len() == 2 {
            spec.dtype
        } else {
            DType::F32
        };
        w.add_tensor(name, &tensor(dtype, &shape, &v)).unwrap();
    }
    w.write(path).unwrap();
}

/// Writes a model of dimensions `d` with seeded random weights (matrices in `dtype`, norms
/// f32, the tokenizer of `spec` padded to `d.vocab` tokens), one tensor in memory at a time:
/// at Llama-3-8B's dimensions a 16 GB bf16 file (a 1 GB embedding table is the largest
/// tensor), for measuring what a full-size model costs without NVIDIA's or Meta's downloads.
pub fn write_streamed(path: &Path, spec: &Spec, d: Dims, dtype: DType) -> kinema::Result<()> {
    let mut w = GgufWriter::new();
    let spec = Spec {
        tokenizer_vocab: d.vocab,
        ..spec.clone()
    };
    metadata(&mut w, &spec, d);
    let head_dim = d.hidden / d.heads;
    let (q, kv) = (d.heads * head_dim, d.kv_heads * head_dim);
    // (name, shape, scale, around): matrices around 0 at about 1/sqrt(fan-in), norms around 1.
    let mut list = vec![
        (
            "token_embd.weight".to_string(),
            vec![d.vocab, d.hidden],
            1.0,
            0.0,
        ),
        ("output_norm.weight".to_string(), vec![d.hidden], 0.2, 1.0),
    ];
    let (sh, sf) = (1.0 / (d.hidden as f32).sqrt(), 1.0 / (d.ffn as f32).sqrt());
    for i in 0..d.layers {
        for (what, shape, scale, around) in [
            ("attn_norm", vec![d.hidden], 0.2, 1.0),
            ("attn_q", vec![q, d.hidden], sh, 0.0),
            ("attn_k", vec![kv, d.hidden], sh, 0.0),
            ("attn_v", vec![kv, d.hidden], sh, 0.0),
            ("attn_output", vec![d.hidden, q], sh, 0.0),
            ("ffn_norm", vec![d.hidden], 0.2, 1.0),
            ("ffn_gate", vec![d.ffn, d.hidden], sh, 0.0),
            ("ffn_up", vec![d.ffn, d.hidden], sh, 0.0),
            ("ffn_down", vec![d.hidden, d.ffn], sf, 0.0),
        ] {
            list.push((format!("blk.{i}.{what}.weight"), shape, scale, around));
        }
    }
    let dtype_of = |shape: &[usize]| if shape.len() == 2 { dtype } else { DType::F32 };
    for (name, shape, _, _) in &list {
        w.declare_tensor(name.clone(), dtype_of(shape), shape)?;
    }
    kinema::formats::write_atomic(path, |out| {
        let mut s = w.stream(out)?;
        for (k, (name, shape, scale, around)) in list.iter().enumerate() {
            let n = shape.iter().product();
            let v: Vec<f32> = values(spec.seed * 1000 + k as u64, n, *scale)
                .into_iter()
                .map(|x| x + around)
                .collect();
            let t = tensor(dtype_of(shape), shape, &v);
            drop(v);
            s.write_tensor(name, t.bytes())?;
        }
        s.finish()
    })
}
