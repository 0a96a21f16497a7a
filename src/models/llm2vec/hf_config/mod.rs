//! The Hugging Face and PEFT JSON files the LLM2Vec converter reads: a Llama `config.json`,
//! a PEFT LoRA `adapter_config.json`, and the tokenizer files (`tokenizer.json`,
//! `tokenizer_config.json`) turned into GGUF `tokenizer.ggml.*` metadata. Each is hostile
//! input: sizes are bounded, every field the conversion depends on is checked, and what
//! kinema cannot reproduce exactly is refused with the field named.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use crate::formats::FormatError;
use crate::formats::gguf::{GgufArray, GgufValue};
use crate::{Error, Result};

/// Largest JSON configuration file read (`config.json`, `adapter_config.json`,
/// `tokenizer_config.json`; Llama-3's `tokenizer_config.json` is 51 KB).
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;
/// Largest dimension accepted (hidden, FFN, vocabulary, context): bounds what a hostile
/// config can make the converter allocate before any tensor is read.
pub const MAX_DIM: usize = 1 << 22;
/// Most layers accepted.
pub const MAX_LAYERS: usize = 1024;

/// The seven Llama projections LoRA adapters may target, as (PEFT module name, the block
/// that holds it).
pub const PROJECTIONS: [(&str, &str); 7] = [
    ("q_proj", "self_attn"),
    ("k_proj", "self_attn"),
    ("v_proj", "self_attn"),
    ("o_proj", "self_attn"),
    ("gate_proj", "mlp"),
    ("up_proj", "mlp"),
    ("down_proj", "mlp"),
];

fn bad(file: &'static str, msg: impl Into<String>) -> Error {
    FormatError::Invalid {
        format: file,
        msg: msg.into(),
    }
    .into()
}

fn unsupported(file: &'static str, msg: impl Into<String>) -> Error {
    FormatError::Unsupported {
        format: file,
        msg: msg.into(),
    }
    .into()
}

// ---------------------------------------------------------------------------------------
// config.json
// ---------------------------------------------------------------------------------------

const CONFIG: &str = "config.json";

/// Llama-3 RoPE scaling (`rope_type: "llama3"`), as `config.json` gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Llama3RopeScaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: f64,
}

/// The Llama architecture of a `config.json`, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// `_name_or_path`, the identity LLM2Vec's chat-template rule tests (empty when absent,
    /// as `PretrainedConfig` reads it).
    pub name_or_path: String,
    pub hidden: usize,
    pub ffn: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub context: usize,
    pub rms_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: Option<Llama3RopeScaling>,
}

impl LlamaConfig {
    /// Parse and check a Llama `config.json`. Both layouts are read: `rope_theta` and
    /// `rope_scaling` at the top level (transformers 4.x, Meta's files) and
    /// `rope_parameters` (transformers 5.x).
    pub fn parse(bytes: &[u8]) -> Result<LlamaConfig> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| bad(CONFIG, format!("not a JSON object: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad(CONFIG, "not a JSON object"))?;
        let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
        if let Some(t) = get("model_type") {
            if t.as_str() != Some("llama") {
                return Err(unsupported(
                    CONFIG,
                    format!("model_type {t} (the LLM2Vec converter reads Llama models)"),
                ));
            }
        } else {
            return Err(bad(CONFIG, "no model_type (expected \"llama\")"));
        }
        let dim = |k: &str| -> Result<usize> {
            let x = get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(CONFIG, format!("{k} is missing or not a whole number")))?;
            if x == 0 || x > MAX_DIM as u64 {
                return Err(bad(CONFIG, format!("{k} = {x} is outside 1..={MAX_DIM}")));
            }
            Ok(x as usize)
        };
        let float = |k: &str, v: Option<&Value>| -> Result<f64> {
            let x = v
                .and_then(Value::as_f64)
                .ok_or_else(|| bad(CONFIG, format!("{k} is missing or not a number")))?;
            if !x.is_finite() || x <= 0.0 {
                return Err(bad(CONFIG, format!("{k} = {x} is not a positive number")));
            }
            Ok(x)
        };
        let hidden = dim("hidden_size")?;
        let ffn = dim("intermediate_size")?;
        let layers = dim("num_hidden_layers")?;
        if layers > MAX_LAYERS {
            return Err(bad(
                CONFIG,
                format!("num_hidden_layers = {layers} is above {MAX_LAYERS}"),
            ));
        }
        let heads = dim("num_attention_heads")?;
        let kv_heads = match get("num_key_value_heads") {
            None => heads,
            Some(_) => dim("num_key_value_heads")?,
        };
        let vocab = dim("vocab_size")?;
        let context = dim("max_position_embeddings")?;
        if hidden % heads != 0 {
            return Err(bad(
                CONFIG,
                format!("hidden_size {hidden} is not a multiple of num_attention_heads {heads}"),
            ));
        }
        if heads % kv_heads != 0 {
            return Err(bad(
                CONFIG,
                format!(
                    "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
                ),
            ));
        }
        let head_dim = hidden / heads;
        if let Some(hd) = get("head_dim")
            && hd.as_u64() != Some(head_dim as u64)
        {
            return Err(unsupported(
                CONFIG,
                format!(
                    "head_dim {hd} differs from hidden_size / num_attention_heads = {head_dim}"
                ),
            ));
        }
        if head_dim % 2 != 0 {
            return Err(bad(CONFIG, format!("head dimension {head_dim} is odd")));
        }
        if let Some(act) = get("hidden_act")
            && act.as_str() != Some("silu")
        {
            return Err(unsupported(
                CONFIG,
                format!("hidden_act {act} (Llama uses \"silu\")"),
            ));
        }
        for k in ["attention_bias", "mlp_bias"] {
            if let Some(b) = get(k)
                && b.as_bool() != Some(false)
            {
                return Err(unsupported(
                    CONFIG,
                    format!("{k} = {b} (no biases in Llama)"),
                ));
            }
        }
        let rms_eps = float("rms_norm_eps", get("rms_norm_eps"))?;
        // transformers 5.x moves rope_theta and the scaling into rope_parameters.
        let params = get("rope_parameters").and_then(Value::as_object);
        let theta_v = get("rope_theta").or_else(|| params.and_then(|p| p.get("rope_theta")));
        let rope_theta = match theta_v {
            // LlamaConfig's default.
            None => 10000.0,
            Some(v) => float("rope_theta", Some(v))?,
        };
        let scaling = get("rope_scaling")
            .and_then(Value::as_object)
            .or(params)
            .filter(|s| {
                let ty = s.get("rope_type").or_else(|| s.get("type"));
                !matches!(ty.and_then(Value::as_str), None | Some("default"))
            });
        let rope_scaling = match scaling {
            None => None,
            Some(s) => {
                let ty = s
                    .get("rope_type")
                    .or_else(|| s.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if ty != "llama3" {
                    return Err(unsupported(
                        CONFIG,
                        format!("rope scaling of type {ty:?} (kinema reads \"llama3\" and none)"),
                    ));
                }
                let f = |k: &str| float(&format!("rope_scaling.{k}"), s.get(k));
                let sc = Llama3RopeScaling {
                    factor: f("factor")?,
                    low_freq_factor: f("low_freq_factor")?,
                    high_freq_factor: f("high_freq_factor")?,
                    original_max_position_embeddings: f("original_max_position_embeddings")?,
                };
                if sc.high_freq_factor <= sc.low_freq_factor {
                    return Err(bad(
                        CONFIG,
                        "rope_scaling.high_freq_factor must exceed low_freq_factor",
                    ));
                }
                Some(sc)
            }
        };
        let name_or_path = match get("_name_or_path") {
            None => String::new(),
            Some(v) => v
                .as_str()
                .ok_or_else(|| bad(CONFIG, "_name_or_path is not a string"))?
                .to_string(),
        };
        Ok(LlamaConfig {
            name_or_path,
            hidden,
            ffn,
            layers,
            heads,
            kv_heads,
            head_dim,
            vocab,
            context,
            rms_eps,
            rope_theta,
            rope_scaling,
        })
    }

    /// `[out, in]` of a projection's weight.
    pub fn projection_shape(&self, proj: &str) -> [usize; 2] {
        let kv = self.kv_heads * self.head_dim;
        match proj {
            "q_proj" | "o_proj" => [self.hidden, self.hidden],
            "k_proj" | "v_proj" => [kv, self.hidden],
            "gate_proj" | "up_proj" => [self.ffn, self.hidden],
            _ => [self.hidden, self.ffn],
        }
    }

    /// llama.cpp's `rope_freqs` divisors for Llama-3 RoPE scaling, computed as transformers'
    /// `_compute_llama3_parameters`
    /// (`huggingface/transformers@v5.1.0:src/transformers/modeling_rope_utils.py`): f32
    /// `inv_freq[i] = 1 / base^(2i/d)`, wavelength `2π / inv_freq`, low frequencies divided by
    /// `factor`, the band between smoothed; the divisor is `inv_freq / inv_freq_llama` so that
    /// llama.cpp's `inv_freq / rope_freqs` gives transformers' frequencies. `None` without
    /// scaling.
    pub fn rope_freq_divisors(&self) -> Option<Vec<f32>> {
        let s = self.rope_scaling.as_ref()?;
        Some(llama3_rope_divisors(self.rope_theta, self.head_dim, s))
    }
}

/// See [`LlamaConfig::rope_freq_divisors`]. Torch computes in f32 on `torch.arange(0, d, 2,
/// dtype=int64).float() / d` and Python floats for the factors; every step here is the same
/// f32 operation in the same order (Python scalars enter as f32, as torch's wrapped numbers
/// do for an f32 tensor).
pub fn llama3_rope_divisors(theta: f64, head_dim: usize, s: &Llama3RopeScaling) -> Vec<f32> {
    let d = head_dim as f32;
    let base = theta as f32;
    let factor = s.factor as f32;
    let low = s.low_freq_factor as f32;
    let high = s.high_freq_factor as f32;
    let old = s.original_max_position_embeddings as f32;
    // Python floats, divided in f64 then used as f32 scalars.
    let low_wavelen = (s.original_max_position_embeddings / s.low_freq_factor) as f32;
    let high_wavelen = (s.original_max_position_embeddings / s.high_freq_factor) as f32;
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    (0..head_dim / 2)
        .map(|i| {
            let e = (2 * i) as f32 / d;
            let inv = 1.0 / base.powf(e);
            let wavelen = two_pi / inv;
            let mut llama = if wavelen > low_wavelen {
                inv / factor
            } else {
                inv
            };
            let smooth = (old / wavelen - low) / (high - low);
            let smoothed = (1.0 - smooth) * llama / factor + smooth * llama;
            // transformers: `~(wavelen < high) * ~(wavelen > low)`; wavelen is never NaN here.
            let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
            if medium {
                llama = smoothed;
            }
            inv / llama
        })
        .collect()
}

fn preview(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        let mut end = 80;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    } else {
        s
    }
}

mod adapter;
mod tokenizer;

pub use adapter::{LoraConfig, TargetModules};
pub use tokenizer::gguf_tokenizer;

#[cfg(test)]
mod tests {
    use super::*;

    fn llama_json(extra: &str) -> String {
        format!(
            r#"{{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 300, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0, "hidden_act": "silu"{extra}}}"#
        )
    }

    #[test]
    fn llama_config_reads_both_layouts_and_refuses_what_it_cannot_run() {
        let c = LlamaConfig::parse(llama_json("").as_bytes()).unwrap();
        assert_eq!((c.head_dim, c.kv_heads, c.rope_theta), (16, 2, 500000.0));
        assert_eq!(c.name_or_path, "");
        assert_eq!(c.projection_shape("k_proj"), [32, 64]);
        assert_eq!(c.projection_shape("down_proj"), [64, 128]);
        let v5 = llama_json(
            r#", "_name_or_path": "x/y", "rope_parameters": {"rope_theta": 1000.0, "rope_type": "default"}"#,
        )
        .replace("\"rope_theta\": 500000.0,", "");
        let c = LlamaConfig::parse(v5.as_bytes()).unwrap();
        assert_eq!((c.rope_theta, c.name_or_path.as_str()), (1000.0, "x/y"));
        assert!(c.rope_scaling.is_none());
        for (extra, want) in [
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (r#", "attention_bias": true"#, "attention_bias"),
            (r#", "head_dim": 32"#, "head_dim"),
            (
                r#", "rope_scaling": {"rope_type": "yarn", "factor": 2.0}"#,
                "yarn",
            ),
            (r#", "num_key_value_heads": 3"#, "multiple"),
        ] {
            let e = LlamaConfig::parse(llama_json(extra).as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
        let e = LlamaConfig::parse(b"[]").unwrap_err().to_string();
        assert!(e.contains("config.json"), "{e}");
    }

    #[test]
    fn lora_config_scale_targets_and_refusals() {
        let base = r#"{"peft_type": "LORA", "base_model_name_or_path": "m/b", "r": 4,
            "lora_alpha": 8, "target_modules": ["q_proj", "mlp.down_proj"]"#;
        let c = LoraConfig::parse(format!("{base}}}").as_bytes()).unwrap();
        assert_eq!(c.scale(), 2.0);
        let t = c.targets(2).unwrap();
        assert_eq!(t[1], [true, false, false, false, false, false, true]);
        let rs = LoraConfig::parse(format!("{base}, \"use_rslora\": true}}").as_bytes()).unwrap();
        assert_eq!(rs.scale(), 4.0);
        let re = LoraConfig::parse(
            br#"{"peft_type": "LORA", "base_model_name_or_path": "m", "r": 2, "lora_alpha": 2,
            "target_modules": ".*\\.(k|v)_proj"}"#,
        )
        .unwrap();
        assert_eq!(
            re.targets(1).unwrap()[0],
            [false, true, true, false, false, false, false]
        );
        for (extra, want) in [
            (r#", "use_dora": true"#, "use_dora"),
            (r#", "rank_pattern": {"q_proj": 8}"#, "rank_pattern"),
            (r#", "bias": "all""#, "bias"),
            (r#", "layers_to_transform": [0]"#, "layers_to_transform"),
        ] {
            let e = LoraConfig::parse(format!("{base}{extra}}}").as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
        let lm = LoraConfig::parse(
            br#"{"peft_type": "LORA", "base_model_name_or_path": "m", "r": 2, "lora_alpha": 2,
            "target_modules": ["q_proj", "lm_head"]}"#,
        )
        .unwrap();
        assert!(lm.targets(1).unwrap_err().to_string().contains("lm_head"));
    }

    #[test]
    fn tokenizer_ids_must_be_contiguous_and_specials_known() {
        let cfg = br#"{"bos_token": "<|begin_of_text|>", "eos_token": {"content": "b"}}"#;
        let json = |vocab: &str, added: &str| {
            format!(
                r#"{{"model": {{"type": "BPE", "vocab": {vocab}, "merges": ["a b"]}}, "added_tokens": {added}}}"#
            )
        };
        let ok = json(
            r#"{"a": 0, "b": 1, "ab": 2}"#,
            r#"[{"id": 3, "content": "<|begin_of_text|>", "special": true}]"#,
        );
        let meta = gguf_tokenizer(ok.as_bytes(), cfg).unwrap();
        let get = |k: &str| meta.iter().find(|(m, _)| m == k).map(|(_, v)| v.clone());
        assert_eq!(get("tokenizer.ggml.bos_token_id"), Some(GgufValue::U32(3)));
        assert_eq!(get("tokenizer.ggml.eos_token_id"), Some(GgufValue::U32(1)));
        assert_eq!(
            get("tokenizer.ggml.token_type"),
            Some(GgufValue::Array(GgufArray::I32(vec![1, 1, 1, 3])))
        );
        let gap = json(r#"{"a": 0, "b": 4000000}"#, "[]");
        let e = gguf_tokenizer(gap.as_bytes(), cfg).unwrap_err().to_string();
        assert!(e.contains("contiguous"), "{e}");
        let e = gguf_tokenizer(ok.as_bytes(), br#"{"eos_token": "zz"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tokenizer_config.json") && e.contains("\"zz\""),
            "{e}"
        );
    }

    #[test]
    fn llama3_divisors_follow_the_three_bands() {
        // Llama-3.1's scaling on a 128-wide head: the highest frequencies are untouched, the
        // lowest divided by the factor, and the band between lies strictly between.
        let s = Llama3RopeScaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        let d = llama3_rope_divisors(500000.0, 128, &s);
        assert_eq!(d.len(), 64);
        assert_eq!(d[0], 1.0);
        assert_eq!(d[63], 8.0);
        assert!(d.iter().any(|&x| x > 1.0 && x < 8.0));
        assert!(d.windows(2).all(|w| w[0] <= w[1]));
    }
}
