//! What `kinema generate` says about a finished run: the JSON sidecar's records.

use serde::Serialize;

use crate::backend::MemoryUse;
use crate::models::kit::identity::ModelIdentity;

/// The embedding of one prompt in the text phase of `generate --prompt`, for the sidecar.
/// `seconds` and `memory` are the whole phase's (every prompt of the run shares one load).
#[derive(Clone, Debug, Serialize)]
pub struct TextPhase {
    pub text_model: String,
    pub prompt: String,
    /// `on` or `off`.
    pub chat_template: &'static str,
    /// Token ids run through the text model (0 for an empty prompt).
    pub tokens: usize,
    /// `hit`, `miss` or `off` (`--no-cache`).
    pub cache: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_entry: Option<String>,
    /// `--keep-text-loaded`: the text model stayed loaded through the motion phase.
    pub kept_loaded: bool,
    /// Seconds of the phase (opening the text model, the cache, encoding).
    pub seconds: f64,
    /// Peak memory of the phase.
    pub memory: MemoryUse,
}

/// What a finished generation says about itself (the JSON sidecar).
#[derive(Clone, Debug, Serialize)]
pub struct GenerateReport {
    pub kinema_version: &'static str,
    pub model: ModelIdentity,
    pub embedding: String,
    /// `"seed"` or the noise file.
    pub noise: String,
    pub seed: Option<u64>,
    /// With `--samples N > 1`: N, and which sample this sidecar describes (its seed is
    /// `seed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<usize>,
    /// Frames of the motion (with segments: their sum).
    pub frames: usize,
    /// Multi-prompt: each segment's text feature, frames, first frame in the motion, frames
    /// taken back for its transition and frames generated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<Vec<SegmentReport>>,
    /// Multi-prompt: `num_transition_frames`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transition_frames: Option<usize>,
    pub fps: f32,
    pub steps: usize,
    pub cfg_text: f32,
    pub cfg_constraint: f32,
    pub cfg_rows: usize,
    /// The constraints file, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraints: Option<String>,
    /// Constrained feature entries (with `constraints`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constrained_entries: Option<usize>,
    pub heading: f32,
    /// Whether post-processing ran (asked for and the model is not G1's).
    pub postprocess: bool,
    pub backend: &'static str,
    /// CPU ISA or Vulkan device.
    pub device: String,
    pub precision: &'static str,
    /// Dtype of the weight matrices as run.
    pub weights: &'static str,
    pub threads: usize,
    pub output_skeleton: &'static str,
    pub outputs: Vec<String>,
    pub timings: ReportTimings,
    /// Peak memory of the motion phase: from loading the motion model to writing the
    /// outputs (what is counted: see [`MemoryUse::what`]).
    pub memory: MemoryUse,
    /// With `--prompt`: the text phase before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<TextPhase>,
}

/// One segment of a multi-prompt motion, in the sidecar.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentReport {
    pub embedding: String,
    /// The segment's prompt, when it came from one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<TextPhase>,
    pub frames: usize,
    pub start: usize,
    pub overlap: usize,
    pub generated: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReportTimings {
    pub load_s: f64,
    pub build_s: f64,
    pub sampling_s: f64,
    pub per_step_ms: f64,
    pub decode_s: f64,
    pub total_s: f64,
}
