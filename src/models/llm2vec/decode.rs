//! Greedy decoding with the Llama graph's LM head: the check that a real trained model runs
//! correctly (SmolLM2 answering a question). No KV cache: the graph is compiled once at the
//! final length, causal, and every step re-runs the whole sequence, reading the next token
//! from the last real position (the right-hand padding is invisible to a causal row).

use super::load::LlamaModel;
use super::model::{GraphSpec, Head, RunInputs, Session};
use crate::backend::Backend;
use crate::ops::MaskKind;
use crate::{Error, Result};

/// The tokens greedy decoding appends to `prompt` (at most `max_new`), stopping after the
/// first token in `stop`, which is included. Attention is causal whatever the file says: a
/// language model generates left to right.
pub fn greedy<B: Backend>(
    backend: &B,
    model: &LlamaModel,
    prompt: &[u32],
    max_new: usize,
    stop: &[u32],
) -> Result<Vec<u32>> {
    if prompt.is_empty() {
        return Err(Error::InvalidArgument(
            "greedy decoding needs at least one prompt token".into(),
        ));
    }
    let seq = prompt.len() + max_new;
    if seq > model.config.context_length {
        return Err(Error::InvalidArgument(format!(
            "{} prompt tokens + {max_new} new ones exceed the model's context of {}",
            prompt.len(),
            model.config.context_length
        )));
    }
    if max_new == 0 {
        return Ok(vec![]);
    }
    let session = Session::new(
        backend,
        model,
        GraphSpec {
            batch: 1,
            seq,
            mask: MaskKind::Causal,
            head: Head::NextToken,
            taps: vec![],
            last_hidden: false,
        },
    )?;
    let mut ids = vec![0u32; seq];
    ids[..prompt.len()].copy_from_slice(prompt);
    let mut len = prompt.len();
    let mut out = Vec::with_capacity(max_new);
    while out.len() < max_new {
        let mut select = vec![0u32; seq];
        select[len - 1] = 1;
        session.run(&RunInputs {
            ids: &ids,
            lengths: &[len],
            select: &select,
        })?;
        let next = session.next_tokens()?[0];
        out.push(next);
        if stop.contains(&next) {
            break;
        }
        ids[len] = next;
        len += 1;
    }
    Ok(out)
}
