//! Models built on the dispatch trait: graphs from GGUF weights plus host-side math.

pub mod kimodo;
pub mod llm2vec;
