//! The host API: what a program embedding kinema calls (issue 15). Re-exported at the crate
//! root, so `kinema::Engine`, `kinema::Kimodo`, `kinema::MotionBricks`.
//!
//! ```no_run
//! use kinema::{Engine, EngineOptions, GenerateRequest, Kimodo, Noise};
//!
//! # fn main() -> kinema::Result<()> {
//! let engine = Engine::new(EngineOptions::default())?;
//! let kimodo = Kimodo::load(&engine, "kimodo-soma-rp.gguf")?;
//! let embedding = vec![0.0f32; kimodo.embedding_dim()]; // an LLM2Vec text feature
//! let motion = kimodo.generate(&GenerateRequest {
//!     steps: 50,
//!     noise: Noise::Seed(7),
//!     ..GenerateRequest::new(embedding, 120)
//! })?;
//! println!("{} frames of {} joints", motion.frames(), motion.joints());
//! # Ok(())
//! # }
//! ```
//!
//! # Objects and threads
//!
//! - An [`Engine`] is one backend (the CPU kernels with their thread pool, or one Vulkan
//!   device) and nothing else: there is no global state, so two engines live side by side in
//!   one process. It is cheap to clone (the clones share the backend) and `Send + Sync`.
//! - A model ([`Kimodo`], [`MotionBricks`], [`TextEncoder`]) holds its weights (memory-mapped) and a clone of
//!   the engine it was loaded on; it is `Send + Sync` (a [`TextEncoder`] is also cheap to
//!   clone: clones share the weights, so one encoder may serve several threads and a
//!   [`Kimodo`] at once). Several models may share one engine,
//!   and one model may run requests from several threads at once: each request builds its own
//!   graph and buffers, and the backends serialise what must be serialised (the CPU pool runs
//!   one parallel region at a time; a Vulkan submission is reported to the thread that made
//!   it). Results do not depend on what runs beside them.
//! - An [`Agent`] (the MotionBricks navigation agent) holds its model by reference or `Arc`,
//!   its clips and its playback state; it is `Send + Sync` (its calls take `&mut self`, so one
//!   thread drives it at a time).
//! - Results ([`Motion`], [`Plan`], [`AgentFrames`]) are plain owned data.
//!
//! # Errors and progress
//!
//! Every fallible call returns [`crate::Error`], whose messages name the option at fault and
//! what it accepts. Long calls take a progress callback `(stage, step, total)` that returns
//! [`Progress::Continue`] or [`Progress::Cancel`]; a cancelled call returns
//! [`crate::Error::Cancelled`] and produces nothing.
//!
//! # Internals
//!
//! The layers this facade is built on (`kinema::models`, `kinema::graph`, `kinema::cpu`,
//! `kinema::vulkan`) stay public for drift studies and benchmarks; the API reaches the same
//! code paths as the command line (`models::kimodo::generate::run_model`,
//! `models::motionbricks::run::run_plan`, `models::llm2vec::encode::{prepare, encode}` and
//! `models::llm2vec::prompt_cache::check_fits`).

#![warn(missing_docs)]

mod agent;
mod engine;
mod kimodo;
mod motionbricks;
mod text;

pub use agent::{Agent, AgentCommand, AgentFrames, AgentOptions, AgentPlan};
pub use engine::{Engine, EngineOptions};
pub use kimodo::{
    Constraints, GenerateRequest, Kimodo, Motion, MotionParts, Noise, Segment, TextInput,
};
pub use motionbricks::{Draws, MotionBricks, Plan, PlanRequest};
pub use text::{ChatTemplate, Embeddings, LongText, TextEncoder, TextOptions};

pub use crate::device::BackendChoice;
pub use crate::models::motionbricks::agent::clips::ClipLibrary;
pub use crate::models::motionbricks::sampler::Sampling;
pub use crate::precision::PrecisionChoice;

/// What a progress callback asks for after each step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Go on.
    Continue,
    /// Stop now: the call returns [`crate::Error::Cancelled`].
    Cancel,
}

/// The phase a progress callback is told about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Kimodo's DDIM steps: `step` of `total` done.
    Sample,
    /// Kimodo's decode of the features into motion (`0` of `1` before, `1` of `1` after).
    Decode,
    /// A MotionBricks plan (`0` of `1` before, `1` of `1` after).
    Plan,
    /// A prompt embedded by the text encoder (`1` of `1` after).
    Encode,
}

impl Stage {
    /// `sample`, `decode`, `plan` or `encode`.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Sample => "sample",
            Stage::Decode => "decode",
            Stage::Plan => "plan",
            Stage::Encode => "encode",
        }
    }
}

/// A progress callback: `(stage, step, total)`, called from the thread that runs the call.
pub type ProgressFn<'a> = dyn FnMut(Stage, usize, usize) -> Progress + 'a;

/// Calls `progress` and turns a cancel into the error.
fn report(
    progress: &mut ProgressFn<'_>,
    stage: Stage,
    step: usize,
    total: usize,
) -> crate::Result<()> {
    match progress(stage, step, total) {
        Progress::Continue => Ok(()),
        Progress::Cancel => Err(crate::Error::Cancelled {
            stage: stage.name(),
            step,
            total,
        }),
    }
}

/// The types a host shares between threads are `Send + Sync` (a compile error otherwise).
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Engine>();
    shared::<Kimodo>();
    shared::<TextEncoder>();
    shared::<Embeddings>();
    shared::<MotionBricks>();
    shared::<Motion>();
    shared::<Plan>();
    shared::<GenerateRequest>();
    shared::<PlanRequest>();
    shared::<Agent<std::sync::Arc<MotionBricks>>>();
    shared::<Agent<&'static MotionBricks>>();
    shared::<AgentFrames>();
};
