//! Models built on the dispatch trait: graphs from GGUF weights plus host-side math, and the
//! [`kit`] they share. Models are generic over [`crate::backend::Backend`] and import neither
//! backend; [`harness`] is what each model gives the model-level commands (`bench <model>`,
//! `drift --model`).

pub mod harness;
pub mod kimodo;
pub mod kit;
pub mod llm2vec;
pub mod motionbricks;

pub use harness::{BenchReport, DriftRun, ModelHarness};
