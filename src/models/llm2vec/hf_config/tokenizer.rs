//! `tokenizer.json` + `tokenizer_config.json` turned into GGUF `tokenizer.ggml.*` metadata.

use super::*;

// ---------------------------------------------------------------------------------------
// tokenizer.json + tokenizer_config.json -> GGUF tokenizer.ggml.*
// ---------------------------------------------------------------------------------------

const TOKENIZER: &str = "tokenizer.json";
const TOKENIZER_CONFIG: &str = "tokenizer_config.json";

/// llama.cpp token types (`llama_token_type`): normal, control (special added tokens),
/// user-defined (other added tokens).
const TYPE_NORMAL: i32 = 1;
const TYPE_CONTROL: i32 = 3;
const TYPE_USER_DEFINED: i32 = 4;

/// The GGUF tokenizer metadata of a Llama-3 `tokenizer.json` (byte-level BPE; tokens and
/// merges in their byte-level spelling, as llama.cpp's `convert_hf_to_gguf.py` writes them)
/// and the BOS and EOS of `tokenizer_config.json`.
pub fn gguf_tokenizer(
    tokenizer_json: &[u8],
    tokenizer_config: &[u8],
) -> Result<Vec<(String, GgufValue)>> {
    #[derive(Deserialize)]
    struct Added {
        id: u64,
        content: String,
        #[serde(default)]
        special: bool,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Merge {
        Joined(String),
        Pair([String; 2]),
    }
    #[derive(Deserialize)]
    struct Model {
        #[serde(rename = "type")]
        ty: Option<String>,
        vocab: HashMap<String, u64>,
        #[serde(default)]
        merges: Vec<Merge>,
    }
    #[derive(Deserialize)]
    struct File {
        model: Model,
        #[serde(default)]
        added_tokens: Vec<Added>,
    }
    let f: File = serde_json::from_slice(tokenizer_json)
        .map_err(|e| bad(TOKENIZER, format!("not a tokenizer.json: {e}")))?;
    if f.model.ty.as_deref().is_some_and(|t| t != "BPE") {
        return Err(unsupported(
            TOKENIZER,
            format!("model type {:?} (byte-level BPE only)", f.model.ty),
        ));
    }
    let n = f
        .model
        .vocab
        .values()
        .chain(f.added_tokens.iter().map(|a| &a.id))
        .max()
        .map_or(0, |&m| m + 1);
    if n == 0 || n > MAX_DIM as u64 {
        return Err(bad(
            TOKENIZER,
            format!("{n} token ids is outside 1..={MAX_DIM}"),
        ));
    }
    // Ids must run from 0 without a gap, so there are at least as many entries as ids: this
    // also bounds the table below by the input's size.
    let entries = f.model.vocab.len() + f.added_tokens.len();
    if n > entries as u64 {
        return Err(unsupported(
            TOKENIZER,
            format!(
                "token ids up to {} but only {entries} tokens: ids must be contiguous from 0",
                n - 1
            ),
        ));
    }
    let n = n as usize;
    let mut tokens: Vec<Option<String>> = vec![None; n];
    let mut types = vec![TYPE_NORMAL; n];
    for (s, &id) in &f.model.vocab {
        let slot = &mut tokens[id as usize];
        if slot.is_some() {
            return Err(bad(
                TOKENIZER,
                format!("two vocabulary entries have id {id}"),
            ));
        }
        *slot = Some(s.clone());
    }
    let mut by_content: HashMap<&str, u32> = HashMap::new();
    for a in &f.added_tokens {
        let i = a.id as usize;
        match &tokens[i] {
            Some(t) if *t != a.content && !f.model.vocab.contains_key(&a.content) => {
                return Err(bad(
                    TOKENIZER,
                    format!(
                        "added token {:?} reuses id {} of the token {t:?}",
                        a.content, a.id
                    ),
                ));
            }
            _ => {}
        }
        tokens[i] = Some(a.content.clone());
        types[i] = if a.special {
            TYPE_CONTROL
        } else {
            TYPE_USER_DEFINED
        };
        by_content.insert(&a.content, a.id as u32);
    }
    if let Some(i) = tokens.iter().position(Option::is_none) {
        return Err(unsupported(
            TOKENIZER,
            format!("token id {i} has no token (ids must be contiguous from 0)"),
        ));
    }
    let tokens: Vec<String> = tokens.into_iter().map(Option::unwrap_or_default).collect();
    let merges: Vec<String> = f
        .model
        .merges
        .into_iter()
        .map(|m| match m {
            Merge::Joined(s) => s,
            Merge::Pair([a, b]) => format!("{a} {b}"),
        })
        .collect();

    let cfg: Value = serde_json::from_slice(tokenizer_config)
        .map_err(|e| bad(TOKENIZER_CONFIG, format!("not a JSON object: {e}")))?;
    let special = |k: &str| -> Result<Option<u32>> {
        let v = match cfg.get(k) {
            None | Some(Value::Null) => return Ok(None),
            Some(v) => v,
        };
        let content = v
            .as_str()
            .or_else(|| v.get("content").and_then(Value::as_str))
            .ok_or_else(|| bad(TOKENIZER_CONFIG, format!("{k} is not a token string")))?;
        let id = by_content
            .get(content)
            .copied()
            .or_else(|| f.model.vocab.get(content).map(|&id| id as u32))
            .ok_or_else(|| {
                bad(
                    TOKENIZER_CONFIG,
                    format!("{k} {content:?} is not a token of tokenizer.json"),
                )
            })?;
        Ok(Some(id))
    };
    let bos = special("bos_token")?;
    let eos = special("eos_token")?;
    let mut meta: Vec<(String, GgufValue)> = vec![
        ("tokenizer.ggml.model".into(), "gpt2".into()),
        ("tokenizer.ggml.pre".into(), "llama-bpe".into()),
        (
            "tokenizer.ggml.tokens".into(),
            GgufArray::String(tokens).into(),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            GgufArray::I32(types).into(),
        ),
        (
            "tokenizer.ggml.merges".into(),
            GgufArray::String(merges).into(),
        ),
    ];
    if let Some(b) = bos {
        meta.push(("tokenizer.ggml.bos_token_id".into(), b.into()));
    }
    if let Some(e) = eos {
        meta.push(("tokenizer.ggml.eos_token_id".into(), e.into()));
    }
    Ok(meta)
}
