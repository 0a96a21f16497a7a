//! LLM2Vec, Kimodo's text encoder (a bidirectional Llama-3-8B with LoRA adapters, mean
//! pooled): the text side, from a prompt to the token ids and the span that is pooled, and
//! the converter of the Hugging Face weights. `../shared/docs/upstream/llm2vec.md` is the
//! study this follows.
//!
//! - [`sanitize`]: Kimodo's prompt sanitiser (§2.1, §8.2);
//! - [`tokenizer`]: Llama-3 byte-level BPE from `tokenizer.json` or `tokenizer.model`, and
//!   GPT-2-style BPE from GGUF metadata (§4);
//! - [`prompt`]: LLM2Vec's long-text rule, chat template, BOS and 512-token cap (§2.2, §8.11);
//! - [`hf_config`]: the Llama `config.json`, PEFT `adapter_config.json` and tokenizer files
//!   the converter reads;
//! - [`convert`]: `kinema convert llm2vec` (LoRA merged in f32, streamed to a GGUF).

pub mod convert;
pub mod hf_config;
pub mod prompt;
pub mod sanitize;
pub mod tokenizer;
