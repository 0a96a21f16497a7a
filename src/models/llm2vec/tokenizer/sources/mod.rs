//! Tokenizer files: Hugging Face `tokenizer.json`, tiktoken rank files (Meta's Llama-3
//! `tokenizer.model`) and GGUF `tokenizer.ggml.*` metadata, each turned into the same
//! [`Parts`]. Every file is hostile input: counts, ids and lengths are bounded before use,
//! and every inconsistency is an error naming the entry.

use std::collections::HashMap;

use serde::Deserialize;

use super::TokenizerError;
use super::bpe::Merges;
use super::pretokenize::{LLAMA3_PATTERN, PreTokenizerKind};
use crate::formats::gguf::{GgufArray, GgufValue};

/// Largest tokenizer file read into memory (Llama-3's `tokenizer.json` is 9 MB, its
/// `tokenizer.model` 2.2 MB).
pub const MAX_FILE_BYTES: u64 = 256 << 20;
/// Most token ids accepted (Llama-3 has 128256, Gemma 256000).
pub const MAX_VOCAB: usize = 1 << 21;
/// Longest token accepted, in bytes (Llama-3's longest is 128).
pub const MAX_TOKEN_BYTES: usize = 1 << 12;

/// Llama-3 (Meta-Llama-3-8B-Instruct) names of the 256 special tokens that follow the
/// 128000 ranks of `tokenizer.model` (llm2vec.md §4.1). Meta's loader adds them in code
/// (`llama_models/llama3/tokenizer.py#L76-96` in llama-models 0.3.0, which uses the Llama-3.1
/// names `<|finetune_right_pad_id|>`, `<|step_id|>`, `<|eom_id|>`, `<|python_tag|>` and
/// `<|image|>` for slots 128004, 128005, 128008, 128010 and 128011; the ids of the tokens
/// LLM2Vec uses are the same in both lists).
pub fn llama3_special_tokens(first_id: u32) -> Vec<(String, u32)> {
    let named = [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|reserved_special_token_0|>",
        "<|reserved_special_token_1|>",
        "<|reserved_special_token_2|>",
        "<|reserved_special_token_3|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|reserved_special_token_4|>",
        "<|eot_id|>",
    ];
    let mut out: Vec<(String, u32)> = named
        .iter()
        .map(|s| s.to_string())
        .zip(first_id..)
        .collect();
    let n = out.len() as u32;
    for i in n..256 {
        out.push((
            format!("<|reserved_special_token_{}|>", i - n + 5),
            first_id + i,
        ));
    }
    out
}

/// A tokenizer file reduced to what the encoder needs.
pub(crate) struct Parts {
    pub format: &'static str,
    /// Id -> bytes of every ordinary (BPE) token; `None` for ids that are special or unused.
    pub tokens: Vec<Option<Box<[u8]>>>,
    /// Tokens matched literally in the text before pre-tokenising, with their ids.
    pub specials: Vec<(String, u32)>,
    pub merges: Merges,
    /// Emit a pre-token that is itself a vocabulary entry without merging (tiktoken, and
    /// `tokenizers` with `"ignore_merges": true`).
    pub ignore_merges: bool,
    pub pre: PreTokenizerKind,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// The token a byte without a token of its own becomes; `None`: such bytes are dropped.
    pub unk: Option<u32>,
    /// Refuse a vocabulary that lacks a single-byte token (tiktoken cannot encode without
    /// them).
    pub require_all_bytes: bool,
}

// ---------------------------------------------------------------------------------------
// GPT-2 byte <-> unicode mapping
// ---------------------------------------------------------------------------------------

/// The character GPT-2's `bytes_to_unicode` maps byte `b` to: printable `!`..`~`, `¡`..`¬`
/// and `®`..`ÿ` map to themselves, the other 68 bytes to U+0100 onward in byte order.
pub(crate) fn byte_to_char(b: u8) -> char {
    if is_printable_byte(b) {
        return char::from(b);
    }
    let below = (0..b).filter(|&x| !is_printable_byte(x)).count() as u32;
    // 256 + below < 256 + 68 is a valid scalar value.
    char::from_u32(256 + below).unwrap_or(char::REPLACEMENT_CHARACTER)
}

fn is_printable_byte(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// Inverse of [`byte_to_char`] for a whole string; `None` if a character is not in the map.
pub(crate) struct ByteDecoder {
    table: HashMap<char, u8>,
}

impl ByteDecoder {
    pub(crate) fn new() -> ByteDecoder {
        ByteDecoder {
            table: (0..=255u8).map(|b| (byte_to_char(b), b)).collect(),
        }
    }

    pub(crate) fn decode(&self, s: &str) -> Option<Vec<u8>> {
        s.chars().map(|c| self.table.get(&c).copied()).collect()
    }
}

// ---------------------------------------------------------------------------------------
// Shared checks
// ---------------------------------------------------------------------------------------

fn check_id(format: &'static str, id: u64, what: &str) -> Result<u32, TokenizerError> {
    if id >= MAX_VOCAB as u64 {
        return Err(TokenizerError::Limit {
            what: format!("{format}: id of {what}"),
            value: id,
            limit: MAX_VOCAB as u64 - 1,
        });
    }
    Ok(id as u32)
}

fn check_token_len(format: &'static str, len: usize, what: &str) -> Result<(), TokenizerError> {
    if len == 0 {
        return Err(TokenizerError::invalid(format, format!("{what} is empty")));
    }
    if len > MAX_TOKEN_BYTES {
        return Err(TokenizerError::Limit {
            what: format!("{format}: length of {what}"),
            value: len as u64,
            limit: MAX_TOKEN_BYTES as u64,
        });
    }
    Ok(())
}

fn put_token(
    format: &'static str,
    tokens: &mut Vec<Option<Box<[u8]>>>,
    id: u32,
    bytes: Vec<u8>,
) -> Result<(), TokenizerError> {
    let i = id as usize;
    if tokens.len() <= i {
        tokens.resize(i + 1, None);
    }
    if tokens[i].is_some() {
        return Err(TokenizerError::invalid(
            format,
            format!("two vocabulary entries have id {id}"),
        ));
    }
    tokens[i] = Some(bytes.into_boxed_slice());
    Ok(())
}

fn preview(s: &str) -> String {
    let mut p: String = s.chars().take(200).collect();
    if p.len() < s.len() {
        p.push_str("...");
    }
    p
}

mod gguf;
mod hf_json;
mod tiktoken;

pub(crate) use gguf::parse_gguf;
pub(crate) use hf_json::parse_tokenizer_json;
pub(crate) use tiktoken::parse_tiktoken;

#[cfg(test)]
mod tests {
    use super::tiktoken::base64_decode;
    use super::*;

    #[test]
    fn base64_round_trips_and_rejects_garbage() {
        assert_eq!(base64_decode("IQ==").unwrap(), b"!");
        assert_eq!(base64_decode("IGFi").unwrap(), b" ab");
        assert_eq!(base64_decode("IGE=").unwrap(), b" a");
        for bad in ["", "I", "IQ=", "I===", "IQ==IQ==", "I*==", "=IQ="] {
            assert!(base64_decode(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn byte_level_map_is_gpt2s() {
        assert_eq!(byte_to_char(b'!'), '!');
        assert_eq!(byte_to_char(b' '), '\u{120}');
        assert_eq!(byte_to_char(b'\n'), '\u{10a}');
        assert_eq!(byte_to_char(0xAD), '\u{143}');
        let d = ByteDecoder::new();
        let all: String = (0..=255u8).map(byte_to_char).collect();
        assert_eq!(d.decode(&all).unwrap(), (0..=255u8).collect::<Vec<_>>());
        assert!(d.decode("\u{3000}").is_none());
    }

    #[test]
    fn llama3_specials_have_the_published_ids() {
        let s = llama3_special_tokens(128000);
        let id = |name: &str| s.iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(s.len(), 256);
        assert_eq!(id("<|begin_of_text|>"), 128000);
        assert_eq!(id("<|start_header_id|>"), 128006);
        assert_eq!(id("<|end_header_id|>"), 128007);
        assert_eq!(id("<|reserved_special_token_4|>"), 128008);
        assert_eq!(id("<|eot_id|>"), 128009);
        assert_eq!(id("<|reserved_special_token_5|>"), 128010);
        assert_eq!(id("<|reserved_special_token_250|>"), 128255);
    }
}
