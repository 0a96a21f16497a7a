//! kinema: an inference engine for LLM2Vec, Kimodo and MotionBricks on hand-written kernels.
//!
//! Layers, bottom to top (see `../shared/docs/DESIGN.md` in the project checkout). A module
//! imports only modules below it:
//! - [`error`], [`tensor`]: the error type; dtypes (f32, f16, bf16, i32, u32, q8_0),
//!   shape/stride layouts, host tensors that borrow memory-mapped files;
//! - [`precision`], [`rng`], [`ops`]: the arithmetic modes, the counter-based random stream
//!   both backends implement bit for bit, and the ops' parameter structs;
//! - [`backend`]: the one dispatch trait every backend implements, with the operand checks
//!   they share (`backend::check`); it knows neither backend;
//! - [`cpu`], [`vulkan`]: the two backends (CPU kernels with a scalar reference and AVX2+FMA /
//!   AVX-512 / NEON paths picked at run time; the Vulkan device layer, loader opened at run
//!   time);
//! - [`graph`]: typed op nodes, shape checks, buffer planning, record-once/run-many execution;
//! - [`formats`]: GGUF, safetensors and npy/npz readers and writers for untrusted input;
//! - [`device`]: picking a backend at run time (`--backend`), and the one visitor that runs
//!   generic code on the chosen one;
//! - [`mod@bench`], [`drift`]: kernel timings and op-level cross-backend comparison;
//! - [`models`]: the models, generic over the trait (they import neither backend), and the
//!   per-model harness of `kinema bench <model>` and `kinema drift --model`.
//!
//! - [`api`]: the host API (re-exported here: [`Engine`], [`Kimodo`], [`MotionBricks`], their
//!   requests and results), which programs embedding kinema use, and [`capi`], the same as
//!   a flat C ABI (`include/kinema.h`).
//!
//! The `kinema` command line (`src/bin/kinema/`) sits on top: one file per command family.

pub mod api;
pub mod backend;
pub mod bench;
pub mod capi;
pub mod cpu;
pub mod device;
pub mod drift;
pub mod error;
pub mod formats;
pub mod graph;
pub mod models;
pub mod ops;
pub mod precision;
pub mod rng;
pub mod sampling;
pub mod tensor;
pub mod vulkan;

pub use api::{
    Agent, AgentCommand, AgentFrames, AgentOptions, AgentPlan, BackendChoice, ChatTemplate,
    ClipLibrary, Constraints, Draws, Embeddings, Engine, EngineOptions, GenerateRequest, Kimodo,
    LongText, Motion, MotionBricks, MotionParts, Noise, Plan, PlanRequest, PrecisionChoice,
    Progress, ProgressFn, Sampling, Segment, Stage, TextEncoder, TextInput, TextOptions,
};
pub use backend::{Backend, BufRef};
pub use error::{Error, Result};
pub use precision::Precision;
pub use tensor::{DType, HostTensor, Layout};
