//! Loading a Llama GGUF (llama.cpp's layout, or `kinema convert llm2vec`'s, which adds the
//! `llm2vec.*` keys): the configuration from the metadata, the tokenizer from
//! `tokenizer.ggml.*`, every tensor checked (present, shape, dtype, nothing extra) and
//! borrowed from the memory map without copying (llama.cpp block formats such as Q4_1 are
//! dequantised to f32 by the GGUF reader).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::config::{AttentionMode, LlamaConfig, keys, names, pairing_name};
use super::tokenizer::Tokenizer;
use crate::models::kit::checks::check_tensors;
use crate::models::kit::identity::ModelIdentity;
use crate::models::kit::meta::{self, Meta};
use crate::models::kit::narrow::{fast_weight_dtype, narrow_weights};
use crate::ops::RopePairing;
use crate::{DType, HostTensor, Result};

/// The format name in errors.
pub const FORMAT: &str = "llama text model";
const WRITER: &str = "kinema convert llm2vec, or llama.cpp's convert_hf_to_gguf.py";

/// A loaded Llama text model: configuration, tokenizer, and its tensors by GGUF name.
pub struct LlamaModel {
    pub config: LlamaConfig,
    pub tokenizer: Tokenizer,
    /// `general.name`, if the file has one.
    pub name: Option<String>,
    tensors: BTreeMap<String, HostTensor>,
}

/// Whether a tensor is a weight matrix (the ones a linear layer or the embedding reads).
fn is_matrix(name: &str, shape: &[usize]) -> bool {
    shape.len() == 2 && name != names::ROPE_FREQS
}

impl LlamaModel {
    /// The identity of this model, read again from `path`, with its name (`unnamed` without
    /// one) as the one detail: what a text encoder's results name.
    pub fn identity(&self, path: &Path) -> Result<ModelIdentity> {
        let name = self.name.clone().unwrap_or_else(|| "unnamed".into());
        ModelIdentity::read(path, &keys::PROVENANCE, BTreeMap::from([("name", name)]))
    }

    /// Open a Llama GGUF memory-mapped and check it. A file of another architecture, one
    /// without a tokenizer, or a tokenizer whose vocabulary differs from the embedding table
    /// is refused with a message naming the problem.
    pub fn load(path: impl AsRef<Path>) -> Result<LlamaModel> {
        let path = path.as_ref();
        let f = meta::open(path, FORMAT)?;
        let m = Meta::new(&f, path, FORMAT, WRITER);
        m.expect_architecture(keys::ARCHITECTURE, keys::ARCH_NAME, "Llama text model")?;
        let opt_usize =
            |key: &str| -> Result<Option<usize>> { f.get(key).map(|_| m.usize(key)).transpose() };
        let hidden = m.usize(keys::EMBEDDING_LENGTH)?;
        let heads = m.usize(keys::HEAD_COUNT)?;
        if heads == 0 || !hidden.is_multiple_of(heads) {
            return Err(m.bad(format!(
                "{} = {hidden} does not split into {} = {heads} heads",
                keys::EMBEDDING_LENGTH,
                keys::HEAD_COUNT
            )));
        }
        let head_dim = hidden / heads;
        for key in [
            keys::KEY_LENGTH,
            keys::VALUE_LENGTH,
            keys::ROPE_DIMENSION_COUNT,
        ] {
            if let Some(v) = opt_usize(key)?
                && v != head_dim
            {
                return Err(m.bad(format!(
                    "{key} = {v} differs from the head dimension {head_dim} \
                     (embedding_length / head_count); kinema runs Llama heads whose keys, \
                     values and rotary dimensions are whole heads"
                )));
            }
        }
        let pairing = match f.get(keys::ROPE_PAIRING) {
            None => RopePairing::Interleaved,
            Some(_) => match m.str(keys::ROPE_PAIRING)? {
                "rotate_half" => RopePairing::RotateHalf,
                "interleaved" => RopePairing::Interleaved,
                s => {
                    return Err(m.bad(format!(
                        "{} = {s:?}: expected \"rotate_half\" or \"interleaved\"",
                        keys::ROPE_PAIRING
                    )));
                }
            },
        };
        let attention = match f.get(keys::ATTENTION) {
            None => AttentionMode::Causal,
            Some(_) => AttentionMode::parse(m.str(keys::ATTENTION)?)
                .map_err(|e| m.bad(format!("{}: {e}", keys::ATTENTION)))?,
        };
        if f.get(keys::POOLING).is_some() {
            let p = m.str(keys::POOLING)?;
            if p != "mean" {
                return Err(m.bad(format!(
                    "{} = {p:?}: kinema pools the mean only (LLM2Vec's `pooling_mode=\"mean\"`)",
                    keys::POOLING
                )));
            }
        }
        let chat_template_default = match f.get(keys::CHAT_TEMPLATE_DEFAULT) {
            None => false,
            Some(_) => match m.str(keys::CHAT_TEMPLATE_DEFAULT)? {
                "on" => true,
                "off" => false,
                s => {
                    return Err(m.bad(format!(
                        "{} = {s:?}: expected \"on\" or \"off\"",
                        keys::CHAT_TEMPLATE_DEFAULT
                    )));
                }
            },
        };
        if let Some(n) = opt_usize(keys::MAX_LENGTH)?
            && n != super::prompt::MAX_LENGTH
        {
            return Err(m.bad(format!(
                "{} = {n}: kinema truncates prompts as LLM2Vec's published configuration does, at \
                 {} tokens",
                keys::MAX_LENGTH,
                super::prompt::MAX_LENGTH
            )));
        }
        let embd = f.tensor_info(names::TOKEN_EMBD).ok_or_else(|| {
            m.bad(format!(
                "tensor {:?} is missing: not a text model",
                names::TOKEN_EMBD
            ))
        })?;
        let vocab = match embd.shape.as_slice() {
            [v, h] if *h == hidden => *v,
            s => {
                return Err(m.bad(format!(
                    "tensor {:?} has shape {s:?}, expected [vocab, {hidden}]",
                    names::TOKEN_EMBD
                )));
            }
        };
        let config = LlamaConfig {
            layers: m.usize(keys::BLOCK_COUNT)?,
            hidden,
            ffn: m.usize(keys::FEED_FORWARD_LENGTH)?,
            heads,
            kv_heads: opt_usize(keys::HEAD_COUNT_KV)?.unwrap_or(heads),
            head_dim,
            vocab,
            eps: m.f32(keys::RMS_EPS)?,
            rope_base: match f.get(keys::ROPE_FREQ_BASE) {
                None => 10000.0,
                Some(_) => m.f32(keys::ROPE_FREQ_BASE)?,
            },
            context_length: m.usize(keys::CONTEXT_LENGTH)?,
            pairing,
            attention,
            chat_template_default,
            tied_output: f.tensor_info(names::OUTPUT).is_none(),
            rope_freqs: f.tensor_info(names::ROPE_FREQS).is_some(),
        };
        config.validate().map_err(|e| m.bad(e))?;
        // The layer count bounds the tensor list built from it.
        if config
            .layers
            .checked_mul(names::LAYER.len())
            .is_none_or(|n| n > f.tensors().len())
        {
            return Err(m.bad(format!(
                "{} = {} but the file has only {} tensors",
                keys::BLOCK_COUNT,
                config.layers,
                f.tensors().len()
            )));
        }
        let tokenizer = Tokenizer::from_gguf(&f).map_err(|e| {
            m.bad(format!(
                "its tokenizer (tokenizer.ggml.*) cannot be read: {e}"
            ))
        })?;
        tokenizer
            .check_vocab_size(vocab)
            .map_err(|e| m.bad(e.to_string()))?;
        let mut tensors = BTreeMap::new();
        for info in f.tensors() {
            tensors.insert(info.name.clone(), f.tensor(&info.name)?);
        }
        check(&config, &tensors).map_err(|e| m.bad(e))?;
        if let Some(r) = tensors.get(names::ROPE_FREQS) {
            let r = r.to_f32_vec()?;
            if let Some(x) = r.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
                return Err(m.bad(format!(
                    "tensor {:?} holds {x}: RoPE frequency divisors must be positive",
                    names::ROPE_FREQS
                )));
            }
        }
        let name = f
            .get(keys::NAME)
            .and_then(|v| v.as_str())
            .map(str::to_string);
        Ok(LlamaModel {
            config,
            tokenizer,
            name,
            tensors,
        })
    }

    /// A model from parts built in memory (tests, benches); checked as a file would be.
    pub fn from_parts(
        config: LlamaConfig,
        tokenizer: Tokenizer,
        tensors: BTreeMap<String, HostTensor>,
    ) -> Result<LlamaModel> {
        config.validate().map_err(|e| meta::invalid(FORMAT, e))?;
        tokenizer
            .check_vocab_size(config.vocab)
            .map_err(|e| meta::invalid(FORMAT, e.to_string()))?;
        check(&config, &tensors).map_err(|e| meta::invalid(FORMAT, e))?;
        Ok(LlamaModel {
            config,
            tokenizer,
            name: None,
            tensors,
        })
    }

    /// A tensor by GGUF name.
    pub fn tensor(&self, name: &str) -> Result<&HostTensor> {
        self.tensors
            .get(name)
            .ok_or_else(|| meta::invalid(FORMAT, format!("missing tensor {name:?}")))
    }

    /// The LM head's weight: `output.weight`, or the embedding table when tied.
    pub fn output_weight(&self) -> Result<&HostTensor> {
        if self.config.tied_output {
            self.tensor(names::TOKEN_EMBD)
        } else {
            self.tensor(names::OUTPUT)
        }
    }

    /// The RoPE inverse-frequency table of [`LlamaConfig::inv_freq`].
    pub fn inv_freq(&self) -> Result<Vec<f32>> {
        let r = match self.tensors.get(names::ROPE_FREQS) {
            Some(t) => Some(t.to_f32_vec()?),
            None => None,
        };
        Ok(self.config.inv_freq(r.as_deref()))
    }

    /// The dtype of the layer matrices (layer 0's query projection).
    pub fn weight_dtype(&self) -> Result<DType> {
        Ok(self.tensor(&names::blk(0, "attn_q"))?.dtype)
    }

    /// The model as a backend runs it: in fast precision, f32 weight matrices are narrowed to
    /// the 16-bit dtype the backend's fast kernels multiply
    /// ([`fast_weight_dtype`]); strict precision and 16-bit or q8_0 matrices are left as
    /// they are.
    pub fn for_backend(self, info: &crate::backend::BackendInfo) -> Result<LlamaModel> {
        let f32_matrices = || {
            self.tensors
                .iter()
                .filter(|(n, t)| is_matrix(n, &t.shape) && t.dtype == DType::F32)
                .map(|(_, t)| t)
        };
        if f32_matrices().next().is_none() {
            return Ok(self);
        }
        let Some(dtype) = fast_weight_dtype(info, f32_matrices())? else {
            return Ok(self);
        };
        let tensors = narrow_weights(
            FORMAT,
            self.tensors,
            |name, t| is_matrix(name, &t.shape) && t.dtype == DType::F32,
            dtype,
        )?;
        Ok(LlamaModel {
            config: self.config,
            tokenizer: self.tokenizer,
            name: self.name,
            tensors,
        })
    }

    /// A human-readable summary.
    pub fn describe(&self) -> String {
        let c = &self.config;
        let mut by_dtype: BTreeMap<&str, usize> = BTreeMap::new();
        for t in self.tensors.values() {
            *by_dtype.entry(t.dtype.name()).or_default() += 1;
        }
        let dtypes: Vec<String> = by_dtype.iter().map(|(d, n)| format!("{n} {d}")).collect();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Llama text model{}",
            self.name
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        );
        let _ = writeln!(
            s,
            "  layers {}, width {}, feed-forward {}, {} query / {} kv heads of {}",
            c.layers, c.hidden, c.ffn, c.heads, c.kv_heads, c.head_dim
        );
        let _ = writeln!(
            s,
            "  vocabulary {}, RoPE base {} ({}), {} attention, context {}",
            c.vocab,
            c.rope_base,
            pairing_name(c.pairing),
            c.attention.name(),
            c.context_length
        );
        let _ = write!(s, "  tensors {}", dtypes.join(", "));
        s
    }
}

/// Exactly the expected tensors: weight matrices f32, f16, bf16 or q8_0 (llama.cpp block
/// formats arrive dequantised as f32), norms and RoPE divisors f32.
fn check(
    config: &LlamaConfig,
    tensors: &BTreeMap<String, HostTensor>,
) -> std::result::Result<(), String> {
    let accepts = |name: &str, shape: &[usize]| -> &'static [DType] {
        if is_matrix(name, shape) {
            &[DType::F32, DType::F16, DType::BF16, DType::Q8_0]
        } else {
            &[DType::F32]
        }
    };
    check_tensors(&config.tensor_shapes(), tensors, accepts, false)
}
