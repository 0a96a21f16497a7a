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

// ---------------------------------------------------------------------------------------
// tiktoken rank file
// ---------------------------------------------------------------------------------------

const TIKTOKEN: &str = "tiktoken";

/// Parse a tiktoken rank file: one `base64(token bytes) rank` per line; ranks must be the ids
/// 0..n-1 (as in Llama-3's 128000 lines). It is taken to be Llama-3's: the Llama-3 pattern,
/// the 256 special tokens at ids n..n+255 ([`llama3_special_tokens`]), BOS = the first.
pub(crate) fn parse_tiktoken(bytes: &[u8]) -> Result<Parts, TokenizerError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        TokenizerError::invalid(TIKTOKEN, format!("not UTF-8 text ({e}): not a rank file"))
    })?;
    let mut tokens: Vec<Option<Box<[u8]>>> = Vec::new();
    let mut by_bytes: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut count = 0usize;
    for (lineno, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let (Some(b64), Some(rank), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(TokenizerError::invalid(
                TIKTOKEN,
                format!(
                    "line {}: expected `base64 rank`, found {:?}",
                    lineno + 1,
                    preview(line)
                ),
            ));
        };
        let tok = base64_decode(b64).ok_or_else(|| {
            TokenizerError::invalid(TIKTOKEN, format!("line {}: bad base64 {b64:?}", lineno + 1))
        })?;
        let rank: u64 = rank.parse().map_err(|_| {
            TokenizerError::invalid(TIKTOKEN, format!("line {}: bad rank {rank:?}", lineno + 1))
        })?;
        let what = format!("the token on line {}", lineno + 1);
        let id = check_id(TIKTOKEN, rank, &what)?;
        check_token_len(TIKTOKEN, tok.len(), &what)?;
        if by_bytes.insert(tok.clone(), id).is_some() {
            return Err(TokenizerError::invalid(
                TIKTOKEN,
                format!("line {}: the same token bytes appear twice", lineno + 1),
            ));
        }
        put_token(TIKTOKEN, &mut tokens, id, tok)?;
        count += 1;
    }
    if count == 0 {
        return Err(TokenizerError::invalid(TIKTOKEN, "no ranks in the file"));
    }
    if count != tokens.len() {
        return Err(TokenizerError::invalid(
            TIKTOKEN,
            format!(
                "ranks are not 0..{}: {} lines but the largest rank is {}",
                count - 1,
                count,
                tokens.len() - 1
            ),
        ));
    }
    // Every split of a token into two tokens is a merge ranked by the token: the same rule as
    // tiktoken's `byte_pair_merge`, and how transformers' `TikTokenConverter` writes merges.
    let mut merges = Merges::with_capacity(count * 2);
    for (id, tok) in tokens.iter().enumerate() {
        let Some(tok) = tok else { continue };
        for k in 1..tok.len() {
            if let (Some(&l), Some(&r)) = (by_bytes.get(&tok[..k]), by_bytes.get(&tok[k..])) {
                merges.insert(l, r, id as u32, id as u32);
            }
        }
    }
    let first_special = u32::try_from(count)
        .ok()
        .filter(|&n| (n as usize) + 256 <= MAX_VOCAB)
        .ok_or_else(|| TokenizerError::invalid(TIKTOKEN, "too many ranks"))?;
    Ok(Parts {
        format: TIKTOKEN,
        tokens,
        specials: llama3_special_tokens(first_special),
        merges,
        ignore_merges: true,
        pre: PreTokenizerKind::Llama3,
        bos: Some(first_special),
        eos: Some(first_special + 1),
        unk: None,
        require_all_bytes: true,
    })
}

/// Standard base64 with `=` padding, strict (what tiktoken's files hold).
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let b = s.as_bytes();
    if b.is_empty() || !b.len().is_multiple_of(4) {
        return None;
    }
    let pad = b.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    for (ci, chunk) in b.chunks(4).enumerate() {
        let last = ci + 1 == b.len() / 4;
        let mut acc = 0u32;
        let mut n = 0;
        for (j, &c) in chunk.iter().enumerate() {
            if c == b'=' {
                if !last || j < 4 - pad {
                    return None;
                }
                continue;
            }
            acc |= val(c)? << (18 - 6 * j);
            n += 1;
        }
        let bytes = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        // n characters carry n*6 bits: 2 -> 1 byte, 3 -> 2, 4 -> 3.
        let keep = n - 1;
        if keep == 0 {
            return None;
        }
        out.extend_from_slice(&bytes[..keep]);
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------
// Hugging Face tokenizer.json
// ---------------------------------------------------------------------------------------

const HF_JSON: &str = "tokenizer.json";

#[derive(Deserialize)]
struct HfFile {
    #[serde(default)]
    added_tokens: Vec<HfAdded>,
    #[serde(default)]
    normalizer: Option<serde_json::Value>,
    #[serde(default)]
    pre_tokenizer: Option<serde_json::Value>,
    #[serde(default)]
    post_processor: Option<serde_json::Value>,
    model: HfModel,
}

#[derive(Deserialize)]
struct HfAdded {
    id: u64,
    content: String,
    #[serde(default)]
    single_word: bool,
    #[serde(default)]
    lstrip: bool,
    #[serde(default)]
    rstrip: bool,
}

#[derive(Deserialize)]
struct HfModel {
    #[serde(rename = "type", default)]
    ty: Option<String>,
    vocab: HashMap<String, u64>,
    #[serde(default)]
    merges: Vec<HfMerge>,
    #[serde(default)]
    ignore_merges: bool,
    #[serde(default)]
    byte_fallback: bool,
    #[serde(default)]
    dropout: Option<f64>,
    #[serde(default)]
    unk_token: Option<String>,
    #[serde(default)]
    continuing_subword_prefix: Option<String>,
    #[serde(default)]
    end_of_word_suffix: Option<String>,
}

/// `"a b"` (tokenizers before 0.20) or `["a", "b"]` (later).
#[derive(Deserialize)]
#[serde(untagged)]
enum HfMerge {
    Joined(String),
    Pair([String; 2]),
}

/// Parse a Hugging Face `tokenizer.json` holding a byte-level BPE model with the Llama-3 or
/// a GPT-2 pre-tokenizer, no normaliser, and added tokens without strip/word flags.
pub(crate) fn parse_tokenizer_json(bytes: &[u8]) -> Result<Parts, TokenizerError> {
    let f: HfFile = serde_json::from_slice(bytes)
        .map_err(|e| TokenizerError::invalid(HF_JSON, format!("not a tokenizer.json: {e}")))?;
    let m = &f.model;
    if let Some(ty) = &m.ty
        && ty != "BPE"
    {
        return Err(TokenizerError::unsupported(
            HF_JSON,
            format!("model type {ty:?} (only BPE)"),
        ));
    }
    if m.byte_fallback {
        return Err(TokenizerError::unsupported(HF_JSON, "byte_fallback BPE"));
    }
    if m.dropout.is_some_and(|d| d != 0.0) {
        return Err(TokenizerError::unsupported(HF_JSON, "BPE dropout"));
    }
    for (name, v) in [
        ("continuing_subword_prefix", &m.continuing_subword_prefix),
        ("end_of_word_suffix", &m.end_of_word_suffix),
    ] {
        if v.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(TokenizerError::unsupported(HF_JSON, format!("a {name}")));
        }
    }
    if let Some(n) = &f.normalizer
        && !n.is_null()
    {
        return Err(TokenizerError::unsupported(
            HF_JSON,
            format!("a normalizer ({})", preview(&n.to_string())),
        ));
    }
    let pre = hf_pre_tokenizer(f.pre_tokenizer.as_ref())?;
    if m.vocab.len() > MAX_VOCAB {
        return Err(TokenizerError::Limit {
            what: format!("{HF_JSON}: vocabulary size"),
            value: m.vocab.len() as u64,
            limit: MAX_VOCAB as u64,
        });
    }

    let dec = ByteDecoder::new();
    let mut tokens: Vec<Option<Box<[u8]>>> = Vec::new();
    for (s, &id) in &m.vocab {
        let what = format!("vocabulary entry {:?}", preview(s));
        let id = check_id(HF_JSON, id, &what)?;
        let b = dec.decode(s).ok_or_else(|| {
            TokenizerError::invalid(
                HF_JSON,
                format!("{what} is not in GPT-2 byte-level form (not a byte-level BPE)"),
            )
        })?;
        check_token_len(HF_JSON, b.len(), &what)?;
        put_token(HF_JSON, &mut tokens, id, b)?;
    }

    let mut merges = Merges::with_capacity(m.merges.len());
    let lookup = |s: &str, i: usize| {
        m.vocab.get(s).map(|&id| id as u32).ok_or_else(|| {
            TokenizerError::invalid(
                HF_JSON,
                format!("merge {i}: {:?} is not in the vocabulary", preview(s)),
            )
        })
    };
    for (i, mg) in m.merges.iter().enumerate() {
        let (a, b) = match mg {
            HfMerge::Joined(s) => {
                let mut it = s.split(' ');
                match (it.next(), it.next(), it.next()) {
                    (Some(a), Some(b), None) => (a, b),
                    _ => {
                        return Err(TokenizerError::invalid(
                            HF_JSON,
                            format!("merge {i}: {:?} is not two tokens", preview(s)),
                        ));
                    }
                }
            }
            HfMerge::Pair([a, b]) => (a.as_str(), b.as_str()),
        };
        let rank =
            u32::try_from(i).map_err(|_| TokenizerError::invalid(HF_JSON, "too many merges"))?;
        merges.insert(
            lookup(a, i)?,
            lookup(b, i)?,
            rank,
            lookup(&format!("{a}{b}"), i)?,
        );
    }

    let mut specials = Vec::with_capacity(f.added_tokens.len());
    for t in &f.added_tokens {
        let what = format!("added token {:?}", preview(&t.content));
        if t.lstrip || t.rstrip || t.single_word {
            return Err(TokenizerError::unsupported(
                HF_JSON,
                format!("{what} with lstrip, rstrip or single_word"),
            ));
        }
        let id = check_id(HF_JSON, t.id, &what)?;
        check_token_len(HF_JSON, t.content.len(), &what)?;
        specials.push((t.content.clone(), id));
    }
    let bos = hf_bos(f.post_processor.as_ref(), &specials)?;
    let unk = match &m.unk_token {
        None => None,
        Some(u) => Some(
            m.vocab
                .get(u)
                .map(|&id| id as u32)
                .or_else(|| specials.iter().find(|(s, _)| s == u).map(|&(_, id)| id))
                .ok_or_else(|| {
                    TokenizerError::invalid(HF_JSON, format!("unk_token {u:?} is not a token"))
                })?,
        ),
    };
    let eos = specials
        .iter()
        .find(|(s, _)| s == "<|end_of_text|>")
        .map(|&(_, id)| id);
    Ok(Parts {
        format: HF_JSON,
        tokens,
        specials,
        merges,
        ignore_merges: m.ignore_merges,
        pre,
        bos,
        eos,
        unk,
        require_all_bytes: false,
    })
}

fn hf_pre_tokenizer(v: Option<&serde_json::Value>) -> Result<PreTokenizerKind, TokenizerError> {
    use serde_json::Value;
    let unsupported = |v: &Value| {
        TokenizerError::unsupported(
            HF_JSON,
            format!(
                "pre-tokenizer {} (kinema reads Llama-3's Split + ByteLevel, GPT-2's ByteLevel, \
                 and Digits + ByteLevel)",
                preview(&v.to_string())
            ),
        )
    };
    let Some(v) = v else {
        return Err(TokenizerError::unsupported(HF_JSON, "no pre-tokenizer"));
    };
    let ty = |x: &Value| {
        x.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let flag = |x: &Value, k: &str| x.get(k).and_then(Value::as_bool);
    let byte_level = |x: &Value, use_regex: bool| {
        ty(x) == "ByteLevel"
            && flag(x, "add_prefix_space") != Some(true)
            && flag(x, "use_regex").unwrap_or(true) == use_regex
    };
    if byte_level(v, true) {
        return Ok(PreTokenizerKind::Gpt2);
    }
    let list = match (
        ty(v).as_str(),
        v.get("pretokenizers").and_then(Value::as_array),
    ) {
        ("Sequence", Some(l)) => l,
        _ => return Err(unsupported(v)),
    };
    match list.as_slice() {
        [split, bl] if ty(split) == "Split" && byte_level(bl, false) => {
            let pattern = split
                .get("pattern")
                .and_then(|p| p.get("Regex"))
                .and_then(Value::as_str);
            let behavior = split.get("behavior").and_then(Value::as_str);
            if pattern == Some(LLAMA3_PATTERN)
                && behavior == Some("Isolated")
                && flag(split, "invert") != Some(true)
            {
                Ok(PreTokenizerKind::Llama3)
            } else {
                Err(unsupported(v))
            }
        }
        [digits, bl]
            if ty(digits) == "Digits"
                && flag(digits, "individual_digits") == Some(true)
                && byte_level(bl, true) =>
        {
            Ok(PreTokenizerKind::Gpt2IndividualDigits)
        }
        _ => Err(unsupported(v)),
    }
}

/// BOS from a `TemplateProcessing` post-processor (alone or inside a `Sequence`) whose
/// single-sequence template starts with a special token: `<|begin_of_text|>` for Llama-3.
fn hf_bos(
    v: Option<&serde_json::Value>,
    specials: &[(String, u32)],
) -> Result<Option<u32>, TokenizerError> {
    use serde_json::Value;
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
    if ty == "Sequence" {
        for p in v
            .get("processors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(b) = hf_bos(Some(p), specials)? {
                return Ok(Some(b));
            }
        }
        return Ok(None);
    }
    if ty != "TemplateProcessing" {
        return Ok(None);
    }
    let first = v
        .get("single")
        .and_then(Value::as_array)
        .and_then(|s| s.first());
    let Some(name) = first
        .and_then(|f| f.get("SpecialToken"))
        .and_then(|s| s.get("id"))
        .and_then(Value::as_str)
    else {
        return Ok(None);
    };
    let id = v
        .get("special_tokens")
        .and_then(|s| s.get(name))
        .and_then(|s| s.get("ids"))
        .and_then(Value::as_array)
        .and_then(|ids| ids.first())
        .and_then(Value::as_u64)
        .or_else(|| {
            specials
                .iter()
                .find(|(s, _)| s == name)
                .map(|&(_, id)| u64::from(id))
        })
        .ok_or_else(|| {
            TokenizerError::invalid(
                HF_JSON,
                format!("post-processor names special token {name:?} but gives no id"),
            )
        })?;
    Ok(Some(check_id(HF_JSON, id, "the BOS token")?))
}

// ---------------------------------------------------------------------------------------
// GGUF tokenizer.ggml.*
// ---------------------------------------------------------------------------------------

const GGUF: &str = "gguf";

/// llama.cpp token types (`llama_token_type` in `include/llama.h`).
const TOKEN_TYPE_UNKNOWN: i64 = 2;
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Read the GPT-2-style BPE tokenizer of a GGUF file (`tokenizer.ggml.model = "gpt2"`), as
/// llama.cpp does (`src/llama-vocab.cpp`): tokens and merges in byte-level form, the
/// pre-tokenizer named by `tokenizer.ggml.pre`, control, user-defined and unknown tokens
/// split out of the text, merges ignored for whole-vocabulary pieces only for Llama-3.
pub(crate) fn parse_gguf<'a>(
    get: &dyn Fn(&str) -> Option<&'a GgufValue>,
) -> Result<Parts, TokenizerError> {
    let model = match get("tokenizer.ggml.model") {
        None => {
            return Err(TokenizerError::invalid(
                GGUF,
                "no tokenizer.ggml.model key: this GGUF holds no tokenizer (not a text model)",
            ));
        }
        Some(v) => v
            .as_str()
            .ok_or_else(|| TokenizerError::invalid(GGUF, "tokenizer.ggml.model is not a string"))?,
    };
    if model != "gpt2" {
        return Err(TokenizerError::unsupported(
            GGUF,
            format!("tokenizer.ggml.model {model:?} (kinema reads byte-level BPE, \"gpt2\")"),
        ));
    }
    let pre_name = get("tokenizer.ggml.pre")
        .and_then(|v| v.as_str())
        .unwrap_or("default");
    let pre = match pre_name {
        "llama-bpe" | "llama3" => PreTokenizerKind::Llama3,
        "gpt2" => PreTokenizerKind::Gpt2,
        "smollm" => PreTokenizerKind::Gpt2IndividualDigits,
        other => {
            return Err(TokenizerError::unsupported(
                GGUF,
                format!(
                    "tokenizer.ggml.pre {other:?} (kinema reads \"llama-bpe\", \"gpt2\" and \"smollm\")"
                ),
            ));
        }
    };
    let strings = |key: &str| -> Result<&[String], TokenizerError> {
        match get(key).and_then(|v| v.as_array()) {
            Some(GgufArray::String(v)) => Ok(v.as_slice()),
            Some(a) => Err(TokenizerError::invalid(
                GGUF,
                format!(
                    "{key} is an array of {}, expected strings",
                    a.elem_type().name()
                ),
            )),
            None => Err(TokenizerError::invalid(
                GGUF,
                format!("no {key} array: this GGUF holds no complete tokenizer"),
            )),
        }
    };
    let names = strings("tokenizer.ggml.tokens")?;
    let merge_list = strings("tokenizer.ggml.merges")?;
    if names.len() > MAX_VOCAB {
        return Err(TokenizerError::Limit {
            what: "gguf: tokenizer.ggml.tokens length".into(),
            value: names.len() as u64,
            limit: MAX_VOCAB as u64,
        });
    }
    let types: Vec<i64> = match get("tokenizer.ggml.token_type").and_then(|v| v.as_array()) {
        None => vec![1; names.len()],
        Some(a) => {
            let v: Option<Vec<i64>> = match a {
                GgufArray::I32(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
                GgufArray::U32(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
                GgufArray::I8(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
                GgufArray::U8(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
                _ => None,
            };
            let v = v.ok_or_else(|| {
                TokenizerError::invalid(GGUF, "tokenizer.ggml.token_type is not an integer array")
            })?;
            if v.len() != names.len() {
                return Err(TokenizerError::invalid(
                    GGUF,
                    format!(
                        "tokenizer.ggml.token_type has {} entries for {} tokens",
                        v.len(),
                        names.len()
                    ),
                ));
            }
            v
        }
    };

    let dec = ByteDecoder::new();
    let mut tokens: Vec<Option<Box<[u8]>>> = vec![None; names.len()];
    let mut specials = Vec::new();
    // Last id wins for a repeated string, as in llama.cpp's `token_to_id` and transformers'
    // `{word: i for i, word in enumerate(tokens)}`.
    let mut ids: HashMap<&str, u32> = HashMap::with_capacity(names.len());
    for (i, (name, &ty)) in names.iter().zip(&types).enumerate() {
        let id = i as u32;
        let what = format!("token {i} {:?}", preview(name));
        if matches!(
            ty,
            TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED | TOKEN_TYPE_UNKNOWN
        ) {
            check_token_len(GGUF, name.len(), &what)?;
            specials.push((name.clone(), id));
        } else {
            let b = dec.decode(name).ok_or_else(|| {
                TokenizerError::invalid(GGUF, format!("{what} is not in GPT-2 byte-level form"))
            })?;
            check_token_len(GGUF, b.len(), &what)?;
            tokens[i] = Some(b.into_boxed_slice());
        }
        ids.insert(name.as_str(), id);
    }
    let mut merges = Merges::with_capacity(merge_list.len());
    for (i, s) in merge_list.iter().enumerate() {
        let bad = |msg: String| {
            TokenizerError::invalid(GGUF, format!("merge {i} {:?}: {msg}", preview(s)))
        };
        let (a, b) = s
            .split_once(' ')
            .filter(|(_, b)| !b.contains(' '))
            .ok_or_else(|| bad("not two tokens".into()))?;
        let get = |t: &str| {
            ids.get(t)
                .copied()
                .ok_or_else(|| bad(format!("{:?} is not a token", preview(t))))
        };
        let rank = u32::try_from(i).map_err(|_| bad("too many merges".into()))?;
        merges.insert(get(a)?, get(b)?, rank, get(&format!("{a}{b}"))?);
    }
    let id_key = |key: &str| -> Result<Option<u32>, TokenizerError> {
        match get(key) {
            None => Ok(None),
            Some(v) => {
                let id = v
                    .as_u32()
                    .filter(|&id| (id as usize) < names.len())
                    .ok_or_else(|| {
                        TokenizerError::invalid(GGUF, format!("{key} is not a token id"))
                    })?;
                Ok(Some(id))
            }
        }
    };
    Ok(Parts {
        format: GGUF,
        tokens,
        specials,
        merges,
        // llama.cpp sets `ignore_merges` for the Llama-3 pre-tokenizer only.
        ignore_merges: pre == PreTokenizerKind::Llama3,
        pre,
        bos: id_key("tokenizer.ggml.bos_token_id")?,
        eos: id_key("tokenizer.ggml.eos_token_id")?,
        // Bytes without a token are dropped, as SmolLM2's `tokenizer.json` (BPE with no
        // `unk_token`) and llama.cpp's BPE session do; transformers' GGUF loader maps them to
        // `tokenizer.ggml.unknown_token_id` instead (see reference/capture_tokenizer.py).
        unk: None,
        require_all_bytes: false,
    })
}

#[cfg(test)]
mod tests {
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
