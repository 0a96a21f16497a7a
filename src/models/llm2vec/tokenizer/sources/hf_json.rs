//! Hugging Face `tokenizer.json` (byte-level BPE).

use super::*;

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
