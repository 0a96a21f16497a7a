//! LLM2Vec, Kimodo's text encoder (a bidirectional Llama-3-8B with LoRA adapters, mean
//! pooled): from a prompt to the token ids and the span that is pooled, the Llama model that
//! turns them into an embedding, and the converter of the Hugging Face weights.
//! `../shared/docs/upstream/llm2vec.md` is the study this follows.
//!
//! - [`sanitize`]: Kimodo's prompt sanitiser (§2.1, §8.2);
//! - [`tokenizer`]: Llama-3 byte-level BPE from `tokenizer.json` or `tokenizer.model`, and
//!   GPT-2-style BPE from GGUF metadata (§4);
//! - [`prompt`]: LLM2Vec's long-text rule, chat template, BOS and 512-token cap (§2.2, §8.11);
//! - [`config`]: the GGUF contract (llama.cpp's keys and names, plus `llm2vec.*`);
//! - [`load`]: the checked, memory-mapped model;
//! - [`model`]: the Llama graph (bidirectional or causal, pooled or LM head);
//! - [`encode`]: prompts to embeddings, batched;
//! - [`decode`]: greedy decoding (the real-weight check on SmolLM2);
//! - [`run`]: `kinema encode`'s request, outputs and sidecar;
//! - [`prompt_cache`]: one prompt to one embedding for `generate --prompt`, cached on disk;
//! - [`harness`]: `kinema bench llm2vec` (8B shapes, synthetic weights) and `kinema drift`;
//! - [`hf_config`]: the Llama `config.json`, PEFT `adapter_config.json` and tokenizer files
//!   the converter reads;
//! - [`convert`]: `kinema convert llm2vec` (LoRA merged in f32, streamed to a GGUF).

pub mod config;
pub mod convert;
pub mod decode;
pub mod encode;
pub mod harness;
pub mod hf_config;
pub mod load;
pub mod model;
pub mod prompt;
pub mod prompt_cache;
pub mod run;
pub mod sanitize;
pub mod tokenizer;

pub use config::{AttentionMode, LlamaConfig};
pub use load::LlamaModel;
