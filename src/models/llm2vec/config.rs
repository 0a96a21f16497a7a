//! The Llama text model's GGUF contract: llama.cpp's metadata keys and tensor names (so
//! llama.cpp `llama` files load as they are), plus the keys `kinema convert llm2vec` adds
//! (RoPE pairing of Hugging Face layout weights, bidirectional attention, pooling, the
//! chat-template default), and the configuration read from them.

use crate::ops::RopePairing;
use crate::{Error, Result};

/// Metadata keys.
pub mod keys {
    use crate::models::kit::convert::ProvenanceKeys;

    pub const ARCHITECTURE: &str = "general.architecture";
    /// The one architecture this model loads.
    pub const ARCH_NAME: &str = "llama";
    pub const NAME: &str = "general.name";
    pub const BLOCK_COUNT: &str = "llama.block_count";
    pub const EMBEDDING_LENGTH: &str = "llama.embedding_length";
    pub const FEED_FORWARD_LENGTH: &str = "llama.feed_forward_length";
    pub const HEAD_COUNT: &str = "llama.attention.head_count";
    /// Absent: no grouped-query attention (llama.cpp's default).
    pub const HEAD_COUNT_KV: &str = "llama.attention.head_count_kv";
    /// Absent: `embedding_length / head_count` (llama.cpp's default).
    pub const KEY_LENGTH: &str = "llama.attention.key_length";
    pub const VALUE_LENGTH: &str = "llama.attention.value_length";
    pub const RMS_EPS: &str = "llama.attention.layer_norm_rms_epsilon";
    /// Absent: 10000 (llama.cpp's default).
    pub const ROPE_FREQ_BASE: &str = "llama.rope.freq_base";
    /// Absent: the head dimension (kinema rotates whole heads only).
    pub const ROPE_DIMENSION_COUNT: &str = "llama.rope.dimension_count";
    pub const CONTEXT_LENGTH: &str = "llama.context_length";
    /// `"rotate_half"`: Q/K rows in Hugging Face order (kinema's converter). Absent: llama.cpp's
    /// permuted Q/K, so interleaved pairs.
    pub const ROPE_PAIRING: &str = "kinema.rope_pairing";
    /// `"bidirectional"` or `"causal"`; absent: causal (every llama.cpp file).
    pub const ATTENTION: &str = "llm2vec.attention";
    /// `"mean"`; absent: mean.
    pub const POOLING: &str = "llm2vec.pooling";
    /// `"on"` or `"off"`: what `--chat-template auto` picks; absent: off.
    pub const CHAT_TEMPLATE_DEFAULT: &str = "llm2vec.chat_template_default";
    /// The tokenizer's truncation length; absent: 512.
    pub const MAX_LENGTH: &str = "llm2vec.max_length";
    pub const CONVERTER_VERSION: &str = "llm2vec.converter_version";
    /// String array: checks and choices worth knowing, one sentence each.
    pub const CONVERTER_NOTES: &str = "llm2vec.converter_notes";
    /// Prefix of the SHA-256 of each source file (the key's rest is the file:
    /// `base/<file>` or `adapter<k>/<file>`, k from 1).
    pub const SOURCE_SHA256_PREFIX: &str = "llm2vec.source_sha256.";
    /// The keys of the converter's version, notes and source hashes.
    pub const PROVENANCE: ProvenanceKeys = ProvenanceKeys {
        version: CONVERTER_VERSION,
        notes: CONVERTER_NOTES,
        sha256_prefix: SOURCE_SHA256_PREFIX,
    };
    /// The chat template of an instruct model (Jinja), as llama.cpp stores it.
    pub const CHAT_TEMPLATE: &str = "tokenizer.chat_template";
}

/// Tensor names (llama.cpp's).
pub mod names {
    pub const TOKEN_EMBD: &str = "token_embd.weight";
    pub const OUTPUT_NORM: &str = "output_norm.weight";
    /// Absent: tied to [`TOKEN_EMBD`].
    pub const OUTPUT: &str = "output.weight";
    /// Llama 3.1's frequency divisors, f32 `[head_dim / 2]`; optional.
    pub const ROPE_FREQS: &str = "rope_freqs.weight";
    /// Per layer, `blk.{i}.` + each of these + `.weight`.
    pub const LAYER: [&str; 9] = [
        "attn_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_norm",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ];

    /// `blk.{i}.{what}.weight`.
    pub fn blk(i: usize, what: &str) -> String {
        format!("blk.{i}.{what}.weight")
    }
}

/// Which keys each token attends to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionMode {
    /// Every token sees every token (LLM2Vec's `is_causal = False`).
    Bidirectional,
    /// Token `i` sees tokens `0..=i` (a language model).
    Causal,
}

impl AttentionMode {
    /// `"bidirectional"` or `"causal"`.
    pub fn name(self) -> &'static str {
        match self {
            AttentionMode::Bidirectional => "bidirectional",
            AttentionMode::Causal => "causal",
        }
    }

    /// The value of [`keys::ATTENTION`].
    pub fn parse(s: &str) -> Result<AttentionMode> {
        match s {
            "bidirectional" => Ok(AttentionMode::Bidirectional),
            "causal" => Ok(AttentionMode::Causal),
            _ => Err(Error::InvalidArgument(format!(
                "attention {s:?}: expected \"bidirectional\" or \"causal\""
            ))),
        }
    }
}

/// The name of a RoPE pairing as [`keys::ROPE_PAIRING`] spells it.
pub fn pairing_name(p: RopePairing) -> &'static str {
    match p {
        RopePairing::RotateHalf => "rotate_half",
        RopePairing::Interleaved => "interleaved",
    }
}

/// A Llama model's sizes and behaviour, from the GGUF metadata and tensor shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Rows of the embedding table.
    pub vocab: usize,
    pub eps: f32,
    pub rope_base: f32,
    pub context_length: usize,
    pub pairing: RopePairing,
    pub attention: AttentionMode,
    /// Whether `--chat-template auto` means on.
    pub chat_template_default: bool,
    /// The LM head is the embedding table (no `output.weight`).
    pub tied_output: bool,
    /// The file holds `rope_freqs.weight`.
    pub rope_freqs: bool,
}

impl LlamaConfig {
    /// Consistent sizes: every count positive, heads grouping evenly over kv heads, an even
    /// head dimension.
    pub fn validate(&self) -> std::result::Result<(), String> {
        for (what, v) in [
            ("block_count", self.layers),
            ("embedding_length", self.hidden),
            ("feed_forward_length", self.ffn),
            ("head_count", self.heads),
            ("head_count_kv", self.kv_heads),
            ("context_length", self.context_length),
            ("vocabulary (token_embd rows)", self.vocab),
        ] {
            if v == 0 {
                return Err(format!("{what} is 0"));
            }
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(format!(
                "{} query heads do not group evenly over {} kv heads",
                self.heads, self.kv_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Err(format!(
                "head dimension {} must be even and positive",
                self.head_dim
            ));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(format!(
                "RMSNorm epsilon {} is not a positive number",
                self.eps
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return Err(format!(
                "RoPE base {} must be a number above 1",
                self.rope_base
            ));
        }
        Ok(())
    }

    /// Every tensor the file must hold, with its row-major shape.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (h, f) = (self.hidden, self.ffn);
        let (q, kv) = (self.heads * self.head_dim, self.kv_heads * self.head_dim);
        let mut v = vec![
            (names::TOKEN_EMBD.to_string(), vec![self.vocab, h]),
            (names::OUTPUT_NORM.to_string(), vec![h]),
        ];
        if !self.tied_output {
            v.push((names::OUTPUT.to_string(), vec![self.vocab, h]));
        }
        if self.rope_freqs {
            v.push((names::ROPE_FREQS.to_string(), vec![self.head_dim / 2]));
        }
        for i in 0..self.layers {
            for (what, shape) in [
                ("attn_norm", vec![h]),
                ("attn_q", vec![q, h]),
                ("attn_k", vec![kv, h]),
                ("attn_v", vec![kv, h]),
                ("attn_output", vec![h, q]),
                ("ffn_norm", vec![h]),
                ("ffn_gate", vec![f, h]),
                ("ffn_up", vec![f, h]),
                ("ffn_down", vec![h, f]),
            ] {
                v.push((names::blk(i, what), shape));
            }
        }
        v
    }

    /// The RoPE inverse frequencies `[head_dim / 2]`: `base^(-2i/d)` (Hugging Face's
    /// `_compute_default_rope_parameters`, `modeling_rope_utils.py`; computed in f64 and
    /// rounded once, the correctly rounded value of upstream's f32 expression), divided by
    /// `rope_freqs[i]` when the file has llama.cpp's Llama 3.1 divisors.
    pub fn inv_freq(&self, rope_freqs: Option<&[f32]>) -> Vec<f32> {
        let d = self.head_dim;
        (0..d / 2)
            .map(|i| {
                let f = (self.rope_base as f64).powf(-((2 * i) as f64) / d as f64) as f32;
                match rope_freqs {
                    Some(r) => f / r[i],
                    None => f,
                }
            })
            .collect()
    }

    /// Parameters of the encoder (the LM head not counted when tied).
    pub fn parameter_count(&self) -> u64 {
        self.tensor_shapes()
            .iter()
            .map(|(_, s)| s.iter().product::<usize>() as u64)
            .sum()
    }
}
