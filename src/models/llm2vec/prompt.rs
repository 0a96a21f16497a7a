//! LLM2Vec's text -> token ids path for one prompt, as Kimodo's vendored copy runs it
//! (`nv-tlabs/kimodo:kimodo/model/llm2vec/llm2vec.py` at 7330e7e; llm2vec.md §2.2, §8.11):
//! the long-text rule, the separator trick that marks the pooled tokens, the optional
//! Llama-3 user header, BOS and the 512-token cap.

use super::sanitize::{py_split, py_strip};
use super::tokenizer::{Tokenizer, TokenizerError};

/// `max_length` (llm2vec.py#L73-89 defaults, used for Hub ids: llm2vec.md §1.2 step 6): the
/// tokenizer truncates every sequence to this many ids, BOS included.
pub const MAX_LENGTH: usize = 512;
/// `doc_max_length`: texts of more tokens are cut word by word (llm2vec.py#L278-303).
pub const DOC_MAX_LENGTH: usize = 400;
/// The instruction/text separator `_convert_to_str` inserts and `tokenize` splits on
/// (llm2vec.py#L303, #L205).
pub const SEPARATOR: &str = "!@#$%^&*()";
/// The Llama-3 user header `prepare_for_tokenization` adds in 'template on' mode
/// (llm2vec.py#L173-175).
pub const LLAMA3_USER_HEADER: &str = "<|start_header_id|>user<|end_header_id|>\n\n";
/// The end-of-turn token closing the user turn in 'template on' mode (llm2vec.py#L174).
pub const LLAMA3_EOT: &str = "<|eot_id|>";

/// The encoder input for one prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Llm2VecInput {
    /// Token ids, BOS first, at most [`MAX_LENGTH`].
    pub ids: Vec<u32>,
    /// Mean pooling covers the last `pooled` positions (`embed_mask`, llm2vec.py#L217-236):
    /// the text tokens, plus `<|eot_id|>` with the template. 0 for an empty text: upstream
    /// then pools the whole sequence (`last_hidden_states[i, -0:]` is every row,
    /// llm2vec.py#L260), but Kimodo replaces the embedding of an empty prompt by zeros
    /// (`kimodo/model/kimodo_model.py#L559-570`), and so does kinema.
    pub pooled: usize,
    /// The text after the long-text rule (equal to the input unless it was cut).
    pub text: String,
}

/// Token count as `_convert_to_str` measures it: `tokenizer(text, truncation=True,
/// max_length=512, add_special_tokens=False)`, so at most 512 (llm2vec.py#L279-287).
fn truncated_len(tok: &Tokenizer, text: &str) -> Result<usize, TokenizerError> {
    Ok(tok.encode(text, false)?.len().min(MAX_LENGTH))
}

/// `_convert_to_str("", text)` (llm2vec.py#L278-303): while the text has more than
/// [`DOC_MAX_LENGTH`] tokens (counted truncated to 512), keep the first
/// `int(n_words * 400 / n_tokens)` whitespace-separated words, joined by single spaces. Each
/// round keeps strictly fewer words, so it ends (at worst with the empty text).
pub fn apply_doc_max_length(tok: &Tokenizer, text: &str) -> Result<String, TokenizerError> {
    let mut text = text.to_string();
    let mut n = truncated_len(tok, &text)?;
    while n > DOC_MAX_LENGTH {
        // Python: `reduction_ratio = self.doc_max_length / tokenized_q_length` and
        // `int(len(text.split()) * reduction_ratio)`, both in f64.
        let ratio = DOC_MAX_LENGTH as f64 / n as f64;
        let words: Vec<&str> = py_split(&text).collect();
        let keep = (words.len() as f64 * ratio) as usize;
        text = words[..keep.min(words.len())].join(" ");
        n = truncated_len(tok, &text)?;
    }
    Ok(text)
}

/// Build the ids and pooling span of one prompt as `LLM2Vec.encode` does for a single string
/// with no instruction: `_convert_to_str` (long-text rule, then `SEPARATOR + text`),
/// `prepare_for_tokenization` (with `template`: `LLAMA3_USER_HEADER + s.strip() +
/// LLAMA3_EOT`, llm2vec.py#L172-175), then `tokenize` (llm2vec.py#L201-238): split on the
/// separator, tokenize the re-joined parts with BOS and truncation to [`MAX_LENGTH`], and pool
/// as many trailing positions as the part after the first separator has tokens. Literal
/// special-token strings in the text become special tokens, as upstream. The text is used as
/// given: Kimodo sanitises it first ([`super::sanitize::sanitize_text`]).
pub fn llm2vec_input(
    tok: &Tokenizer,
    text: &str,
    template: bool,
) -> Result<Llm2VecInput, TokenizerError> {
    let text = apply_doc_max_length(tok, text)?;
    let mut s = format!("{SEPARATOR}{text}");
    if template {
        s = format!("{LLAMA3_USER_HEADER}{}{LLAMA3_EOT}", py_strip(&s));
    }
    let parts: Vec<&str> = s.split(SEPARATOR).collect();
    let pooled_part = parts.get(1).copied().unwrap_or("");
    let original = parts.concat();
    let mut ids = tok.encode(&original, true)?;
    // Truncation keeps the first `max_length` ids including the BOS the post-processor adds
    // (`truncation=True`, right side).
    ids.truncate(MAX_LENGTH);
    let pooled = truncated_len(tok, pooled_part)?;
    if pooled > ids.len() {
        // Upstream fails here too (assigning `pooled` ones into a shorter mask row).
        return Err(TokenizerError::Missing(format!(
            "the pooled part has {pooled} tokens but the whole prompt only {}",
            ids.len()
        )));
    }
    Ok(Llm2VecInput { ids, pooled, text })
}
