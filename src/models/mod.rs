//! Models built on the dispatch trait: graphs from GGUF weights plus host-side math, and the
//! [`kit`] they share.

pub mod kimodo;
pub mod kit;
