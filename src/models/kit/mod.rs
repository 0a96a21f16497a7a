//! The model kit: what every model (Kimodo, LLM2Vec's Llama, MotionBricks) shares instead of
//! writing it again.
//!
//! - [`meta`]: opening a model GGUF and reading its metadata with errors that name the key;
//! - [`checks`]: tensor checks (present, shape, dtype, finite, nothing extra) in one message;
//! - [`narrow`]: weight matrices in the 16-bit dtype a backend's fast kernels multiply;
//! - [`par`]: load-time work (finite scans, narrowing) spread over the host's cores;
//! - [`convert`]: converter helpers (progress, SHA-256, source tensor checks, GGUF writing);
//! - [`yaml`]: upstream Hydra configs (size cap, no aliases, `${a.b}` interpolation);
//! - [`output`]: the output plan (every output checked before work, written together);
//! - [`identity`]: the model identity and JSON sidecar of a run;
//! - [`linspace`]: `torch.linspace` in float32;
//! - [`progress`]: progress bars on stderr;
//! - [`rotation`]: the rotation conversions the models' upstreams share;
//! - [`blocks`]: transformer blocks on the graph (norms, MLP/SwiGLU, attention, encoder layer).

pub mod blocks;
pub mod checks;
pub mod convert;
pub mod identity;
pub mod linspace;
pub mod meta;
pub mod narrow;
pub mod output;
pub mod par;
pub mod progress;
pub mod rotation;
pub mod yaml;
