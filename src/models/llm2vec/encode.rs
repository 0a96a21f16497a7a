//! Prompts to embeddings, as `LLM2Vec.encode` computes them for Kimodo (llm2vec.md §2.2):
//! each prompt through [`super::prompt::llm2vec_input`] (long-text rule, optional Llama-3
//! user header, BOS, 512-token cap, the pooled span), a right-padded batch through the Llama
//! graph ([`super::model`]), and the mean of the hidden states over exactly the pooled
//! positions: the text tokens, plus `<|eot_id|>` with the template; never BOS or the header.
//!
//! An empty prompt (nothing but whitespace, Python's `text.strip() == ""`) is not encoded: its
//! embedding is zeros, as Kimodo sets it (`kimodo/model/kimodo_model.py#L559-570`).

use std::time::Instant;

use serde::Serialize;

use super::config::AttentionMode;
use super::load::LlamaModel;
use super::model::{GraphSpec, Head, RunInputs, Session};
use super::prompt::{DOC_MAX_LENGTH, LLAMA3_EOT, Llm2VecInput, llm2vec_input};
use super::sanitize::py_strip;
use crate::backend::Backend;
use crate::ops::MaskKind;
use crate::{Error, Result};

/// Prompts encoded together in one graph run (more are run in several).
pub const MAX_BATCH: usize = 16;

/// `--chat-template`: whether the Llama-3 user header wraps the prompt (llm2vec.md §2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateChoice {
    /// The model file's `llm2vec.chat_template_default` (off when absent).
    Auto,
    On,
    Off,
}

impl TemplateChoice {
    /// `auto`, `on` or `off`.
    pub fn parse(s: &str) -> Result<TemplateChoice> {
        match s {
            "auto" => Ok(TemplateChoice::Auto),
            "on" => Ok(TemplateChoice::On),
            "off" => Ok(TemplateChoice::Off),
            _ => Err(Error::InvalidArgument(format!(
                "unknown --chat-template {s:?}: expected auto, on or off"
            ))),
        }
    }

    /// The name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            TemplateChoice::Auto => "auto",
            TemplateChoice::On => "on",
            TemplateChoice::Off => "off",
        }
    }

    /// Whether the template is on for `model`.
    pub fn resolve(self, model: &LlamaModel) -> bool {
        match self {
            TemplateChoice::Auto => model.config.chat_template_default,
            TemplateChoice::On => true,
            TemplateChoice::Off => false,
        }
    }
}

/// Refuses the chat template for a tokenizer without the Llama-3 header and end-of-turn
/// special tokens (the header would be split into ordinary text tokens).
pub fn check_template(model: &LlamaModel, template: bool) -> Result<()> {
    if !template {
        return Ok(());
    }
    let tok = &model.tokenizer;
    for s in ["<|start_header_id|>", "<|end_header_id|>", LLAMA3_EOT] {
        if tok.special_id(s).is_none() {
            return Err(Error::InvalidArgument(format!(
                "the chat template (Llama-3's user header) needs the special token {s}, which \
                 this model's tokenizer lacks: use --chat-template off"
            )));
        }
    }
    Ok(())
}

/// What to do with a prompt of more than [`DOC_MAX_LENGTH`] text tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongText {
    /// Upstream's rule: cut whole words until it fits (`_convert_to_str`, llm2vec.py#L278-303).
    Trim,
    /// Refuse the prompt with an error.
    Refuse,
}

impl LongText {
    /// `trim` or `refuse`.
    pub fn parse(s: &str) -> Result<LongText> {
        match s {
            "trim" => Ok(LongText::Trim),
            "refuse" => Ok(LongText::Refuse),
            _ => Err(Error::InvalidArgument(format!(
                "unknown --long-text {s:?}: expected trim or refuse"
            ))),
        }
    }
}

/// One prompt ready for the encoder.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// `None` for an empty prompt (its embedding is zeros).
    pub input: Option<Llm2VecInput>,
    /// The long-text rule cut words from it.
    pub trimmed: bool,
}

/// What a prompt became, for the sidecar.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PromptReport {
    /// Token ids run through the model (BOS and template included); 0 when empty.
    pub tokens: usize,
    /// Positions mean-pooled.
    pub pooled: usize,
    /// Empty after Python's `strip()`: the embedding is zeros, not encoded.
    pub empty: bool,
    /// Words were cut by the long-text rule.
    pub trimmed: bool,
}

impl Prepared {
    /// The sidecar's record of it.
    pub fn report(&self) -> PromptReport {
        PromptReport {
            tokens: self.input.as_ref().map_or(0, |i| i.ids.len()),
            pooled: self.input.as_ref().map_or(0, |i| i.pooled),
            empty: self.input.is_none(),
            trimmed: self.trimmed,
        }
    }
}

/// Tokenize prompt `index` (0-based, for errors) as LLM2Vec does, with or without the chat
/// template. Over-long text is cut as upstream does, or refused with `LongText::Refuse`; a
/// prompt that still holds more ids than the model's context is refused.
pub fn prepare(
    model: &LlamaModel,
    index: usize,
    text: &str,
    template: bool,
    long: LongText,
) -> Result<Prepared> {
    if py_strip(text).is_empty() {
        return Ok(Prepared {
            input: None,
            trimmed: false,
        });
    }
    let tok = &model.tokenizer;
    let prompt_err = |e: super::tokenizer::TokenizerError| {
        Error::InvalidArgument(format!("prompt {index}: {e}"))
    };
    if long == LongText::Refuse {
        let n = tok.encode(text, false).map_err(prompt_err)?.len();
        if n > DOC_MAX_LENGTH {
            return Err(Error::InvalidArgument(format!(
                "prompt {index} is {n} tokens long, over LLM2Vec's limit of {DOC_MAX_LENGTH} text \
                 tokens (--long-text refuse; with --long-text trim it is cut word by word as \
                 upstream does)"
            )));
        }
    }
    let input = llm2vec_input(tok, text, template).map_err(prompt_err)?;
    if input.ids.len() > model.config.context_length {
        return Err(Error::InvalidArgument(format!(
            "prompt {index} is {} tokens long, over the model's context of {}",
            input.ids.len(),
            model.config.context_length
        )));
    }
    Ok(Prepared {
        trimmed: input.text != text,
        input: Some(input),
    })
}

/// Time spent, in seconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EncodeTimings {
    /// Building and compiling the graph (binding or uploading the weights).
    pub build_s: f64,
    /// Running it.
    pub run_s: f64,
}

/// The embeddings of `prompts` in order, `[prompts.len(), hidden]` row-major: the mean of
/// the final hidden states over each prompt's pooled positions, zeros for an empty prompt.
/// Batches of up to [`MAX_BATCH`] prompts share one graph; a padded row gives exactly what
/// the prompt alone gives (right padding, see [`super::model`]). A non-finite result (from
/// non-finite weights) is an error.
pub fn encode<B: Backend>(
    backend: &B,
    model: &LlamaModel,
    prompts: &[Prepared],
) -> Result<(Vec<f32>, EncodeTimings)> {
    let hidden = model.config.hidden;
    let mut out = vec![0f32; prompts.len() * hidden];
    let mut timings = EncodeTimings::default();
    let work: Vec<(usize, &Llm2VecInput)> = prompts
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.input.as_ref().map(|x| (i, x)))
        .collect();
    let Some(seq) = work.iter().map(|(_, x)| x.ids.len()).max() else {
        return Ok((out, timings));
    };
    let batch = work.len().min(MAX_BATCH);
    let mask = match model.config.attention {
        AttentionMode::Causal => MaskKind::Causal,
        AttentionMode::Bidirectional
            if batch == 1 || work.iter().all(|(_, x)| x.ids.len() == seq) =>
        {
            MaskKind::None
        }
        AttentionMode::Bidirectional => MaskKind::KeyPadding,
    };
    let t = Instant::now();
    let session = Session::new(
        backend,
        model,
        GraphSpec {
            batch,
            seq,
            mask,
            head: Head::MeanPool,
            taps: vec![],
            last_hidden: false,
        },
    )?;
    timings.build_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for chunk in work.chunks(batch) {
        let mut ids = vec![0u32; batch * seq];
        let mut select = vec![0u32; batch * seq];
        // Rows past the chunk's prompts run pad tokens and pool nothing.
        let mut lengths = vec![seq; batch];
        for (r, (_, x)) in chunk.iter().enumerate() {
            let l = x.ids.len();
            ids[r * seq..r * seq + l].copy_from_slice(&x.ids);
            select[r * seq + l - x.pooled..r * seq + l].fill(1);
            lengths[r] = l;
        }
        session.run(&RunInputs {
            ids: &ids,
            lengths: &lengths,
            select: &select,
        })?;
        let pooled = session.pooled()?;
        for (r, (i, _)) in chunk.iter().enumerate() {
            let v = &pooled[r * hidden..(r + 1) * hidden];
            if let Some(j) = v.iter().position(|x| !x.is_finite()) {
                return Err(Error::InvalidArgument(format!(
                    "prompt {i}: the embedding holds {} at index {j}; the model's weights or its \
                     arithmetic produced a non-finite value",
                    v[j]
                )));
            }
            out[i * hidden..(i + 1) * hidden].copy_from_slice(v);
        }
    }
    timings.run_s = t.elapsed().as_secs_f64();
    Ok((out, timings))
}
