//! GGUF `tokenizer.ggml.*` metadata (GPT-2-style BPE).

use super::*;

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
