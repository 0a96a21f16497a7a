//! What a Kimodo model is made of: its hyperparameters (all read from the model file, none
//! hard-coded), its normalisation statistics and its tensors. The GGUF layout written by
//! `kinema convert kimodo` and read by [`KimodoModel`] is named here once.

use std::collections::BTreeMap;

use crate::models::kit::blocks::torch_encoder_layer_shapes;
use crate::{Error, HostTensor, Result};

/// GGUF metadata keys of a Kimodo model file.
pub mod keys {
    use crate::models::kit::convert::ProvenanceKeys;

    pub const ARCHITECTURE: &str = "general.architecture";
    /// The value of [`ARCHITECTURE`] for a Kimodo model.
    pub const ARCH_NAME: &str = "kimodo";
    pub const SKELETON: &str = "kimodo.skeleton";
    pub const LATENT_DIM: &str = "kimodo.latent_dim";
    pub const FF_SIZE: &str = "kimodo.ff_size";
    pub const NUM_LAYERS: &str = "kimodo.num_layers";
    pub const NUM_HEADS: &str = "kimodo.num_heads";
    pub const LLM_DIM: &str = "kimodo.llm_dim";
    pub const NUM_TEXT_TOKENS: &str = "kimodo.num_text_tokens";
    pub const MOTION_DIM: &str = "kimodo.motion_dim";
    pub const FPS: &str = "kimodo.fps";
    pub const NUM_BASE_STEPS: &str = "kimodo.num_base_steps";
    pub const FIRST_HEADING_TOKEN: &str = "kimodo.input_first_heading_angle";
    pub const CFG_TEXT: &str = "kimodo.cfg_text";
    pub const CFG_CONSTRAINT: &str = "kimodo.cfg_constraint";
    pub const CONVERTER_VERSION: &str = "kimodo.converter_version";
    /// String array: the settings the converter assumed because neither `config.yaml` nor a
    /// flag gave them (for example `num_heads = 8 (assumed: ...)`), so a model file says
    /// which of its values are guesses.
    pub const CONVERTER_NOTES: &str = "kimodo.converter_notes";
    /// Followed by the source file's path relative to the checkpoint directory.
    pub const SOURCE_SHA256_PREFIX: &str = "kimodo.source_sha256.";
    /// The keys of the converter's version, notes and source hashes.
    pub const PROVENANCE: ProvenanceKeys = ProvenanceKeys {
        version: CONVERTER_VERSION,
        notes: CONVERTER_NOTES,
        sha256_prefix: SOURCE_SHA256_PREFIX,
    };
}

/// Tensor names in a Kimodo GGUF: the upstream state_dict names with the checkpoint prefix
/// `denoiser.backbone.` stripped (`kimodo/model/twostage_denoiser.py#L66-71`), e.g.
/// `root_model.seqTransEncoder.layers.3.linear1.weight`, plus the statistics below.
pub mod names {
    /// The two stages, in the order they run.
    pub const STAGES: [&str; 2] = ["root_model", "body_model"];
    pub const STATS_GLOBAL_MEAN: &str = "stats.global_root.mean";
    pub const STATS_GLOBAL_STD: &str = "stats.global_root.std";
    pub const STATS_LOCAL_MEAN: &str = "stats.local_root.mean";
    pub const STATS_LOCAL_STD: &str = "stats.local_root.std";
    pub const STATS_BODY_MEAN: &str = "stats.body.mean";
    pub const STATS_BODY_STD: &str = "stats.body.std";

    /// The 12 per-stage tensors outside the encoder layers, after the stage prefix.
    pub const STAGE_TENSORS: [&str; 12] = [
        "embed_text.weight",
        "embed_text.bias",
        "embed_timestep.time_embed.0.weight",
        "embed_timestep.time_embed.0.bias",
        "embed_timestep.time_embed.2.weight",
        "embed_timestep.time_embed.2.bias",
        "input_linear.weight",
        "input_linear.bias",
        "output_linear.weight",
        "output_linear.bias",
        "linear_first_heading_angle.weight",
        "linear_first_heading_angle.bias",
    ];

    /// The 12 tensors of each encoder layer, after `<stage>.seqTransEncoder.layers.<i>.`.
    pub const LAYER_TENSORS: [&str; 12] = crate::models::kit::blocks::TORCH_ENCODER_LAYER_TENSORS;

    /// `<stage>.<name>`.
    pub fn stage(stage: &str, name: &str) -> String {
        format!("{stage}.{name}")
    }

    /// `<stage>.seqTransEncoder.layers.<layer>.<name>`.
    pub fn layer(stage: &str, layer: usize, name: &str) -> String {
        format!("{stage}.seqTransEncoder.layers.{layer}.{name}")
    }
}

/// The skeletons Kimodo models are trained on, plus SOMA77, the joint set SOMA30 outputs are
/// expanded to (`kimodo/skeleton/definitions.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SkeletonKind {
    Soma30,
    Soma77,
    G1,
    Smplx22,
}

impl SkeletonKind {
    /// The name used on the command line and in model files.
    pub fn name(self) -> &'static str {
        match self {
            SkeletonKind::Soma30 => "soma30",
            SkeletonKind::Soma77 => "soma77",
            SkeletonKind::G1 => "g1",
            SkeletonKind::Smplx22 => "smplx22",
        }
    }

    /// The skeletons a denoiser is trained on (SOMA77 is only an output expansion).
    pub const TRAINED: [SkeletonKind; 3] = [
        SkeletonKind::Soma30,
        SkeletonKind::G1,
        SkeletonKind::Smplx22,
    ];

    pub fn parse(s: &str) -> Result<SkeletonKind> {
        match s {
            "soma30" => Ok(SkeletonKind::Soma30),
            "soma77" => Ok(SkeletonKind::Soma77),
            "g1" => Ok(SkeletonKind::G1),
            "smplx22" => Ok(SkeletonKind::Smplx22),
            _ => Err(Error::InvalidArgument(format!(
                "unknown skeleton '{s}' (expected soma30, soma77, g1 or smplx22)"
            ))),
        }
    }

    /// The trained skeleton whose features are `dim` wide (273 smplx22, 369 soma30, 417 g1).
    pub fn from_motion_dim(dim: usize) -> Option<SkeletonKind> {
        SkeletonKind::TRAINED
            .into_iter()
            .find(|s| s.motion_dim() == dim)
    }

    pub fn num_joints(self) -> usize {
        match self {
            SkeletonKind::Soma30 => 30,
            SkeletonKind::Soma77 => 77,
            SkeletonKind::G1 => 34,
            SkeletonKind::Smplx22 => 22,
        }
    }

    /// Width of the motion features for this skeleton: `9 + 12 J`
    /// (`kimodo/motion_rep/reps/kimodo_motionrep.py#L34-47`).
    pub fn motion_dim(self) -> usize {
        9 + 12 * self.num_joints()
    }
}

/// Hyperparameters of one Kimodo model (both stages share them).
#[derive(Clone, Debug, PartialEq)]
pub struct KimodoConfig {
    pub skeleton: SkeletonKind,
    /// Transformer width D.
    pub latent_dim: usize,
    /// Feed-forward width F.
    pub ff_size: usize,
    /// Encoder layers per stage.
    pub num_layers: usize,
    pub num_heads: usize,
    /// Width of the text feature (4096 for LLM2Vec).
    pub llm_dim: usize,
    /// Rows of the text block; the released configs pad to 50 (`num_text_tokens_override`).
    pub num_text_tokens: usize,
    /// Motion feature width, `9 + 12 J`.
    pub motion_dim: usize,
    pub fps: f32,
    /// Steps of the base diffusion schedule (1000 in every released model).
    pub num_base_steps: usize,
    /// Whether the heading token follows the time token (true in every released model).
    pub input_first_heading_angle: bool,
    pub cfg_text: f32,
    pub cfg_constraint: f32,
}

impl KimodoConfig {
    /// Tokens before the first motion frame: text block, time token, heading token.
    pub fn prefix_len(&self) -> usize {
        self.num_text_tokens + 1 + usize::from(self.input_first_heading_angle)
    }
    pub fn head_dim(&self) -> usize {
        self.latent_dim / self.num_heads
    }
    /// Root-stage input width: the features and the full-width constraint mask.
    pub fn root_in(&self) -> usize {
        2 * self.motion_dim
    }
    /// Root-stage output: smooth root xyz and heading cos, sin.
    pub fn root_out(&self) -> usize {
        5
    }
    /// Body-stage input: local root (4) + body features (dim - 5) + mask (dim).
    pub fn body_in(&self) -> usize {
        2 * self.motion_dim - 1
    }
    pub fn body_out(&self) -> usize {
        self.motion_dim - 5
    }
    /// The positional-encoding table has 5000 rows (`kimodo/model/backbone.py#L235-280`), so
    /// a sequence holds at most `5000 - prefix` frames (4948 for the released models).
    pub fn max_frames(&self) -> usize {
        5000 - self.prefix_len()
    }

    /// Check the values against each other: non-zero widths, heads dividing the width, the
    /// motion width of the skeleton, a prefix that leaves room in the 5000-row positional
    /// table, finite positive fps. The message names the field at fault.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::InvalidArgument(format!("Kimodo config: {msg}")));
        for (name, v) in [
            ("latent_dim", self.latent_dim),
            ("ff_size", self.ff_size),
            ("num_layers", self.num_layers),
            ("num_heads", self.num_heads),
            ("llm_dim", self.llm_dim),
            ("num_text_tokens", self.num_text_tokens),
            ("num_base_steps", self.num_base_steps),
        ] {
            if v == 0 {
                return bad(format!("{name} is 0"));
            }
        }
        if !self.latent_dim.is_multiple_of(self.num_heads) {
            return bad(format!(
                "num_heads {} does not divide latent_dim {}",
                self.num_heads, self.latent_dim
            ));
        }
        if self.motion_dim != self.skeleton.motion_dim() {
            return bad(format!(
                "motion_dim {} does not match skeleton {} ({} joints: 9 + 12 x {} = {})",
                self.motion_dim,
                self.skeleton.name(),
                self.skeleton.num_joints(),
                self.skeleton.num_joints(),
                self.skeleton.motion_dim()
            ));
        }
        if self.prefix_len() >= 5000 {
            return bad(format!(
                "num_text_tokens {} leaves no room for motion frames in the 5000-row \
                 positional table",
                self.num_text_tokens
            ));
        }
        if !(self.fps.is_finite() && self.fps > 0.0) {
            return bad(format!("fps {} is not a positive number", self.fps));
        }
        for (name, v) in [
            ("cfg_text", self.cfg_text),
            ("cfg_constraint", self.cfg_constraint),
        ] {
            if !v.is_finite() {
                return bad(format!("{name} {v} is not finite"));
            }
        }
        Ok(())
    }

    /// Every tensor a model file holds, with its row-major shape, in file order: per stage
    /// (root, then body) the 12 stage tensors then 12 per layer, then the six statistics
    /// (`kimodo/model/backbone.py#L103-134`; `../shared/docs/upstream/kimodo.md` section 3).
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (d, f) = (self.latent_dim, self.ff_size);
        let mut out = Vec::with_capacity(2 * 12 * (1 + self.num_layers) + 6);
        for (stage, inp, outp) in [
            (names::STAGES[0], self.root_in(), self.root_out()),
            (names::STAGES[1], self.body_in(), self.body_out()),
        ] {
            let fixed: [Vec<usize>; 12] = [
                vec![d, self.llm_dim],
                vec![d],
                vec![d, d],
                vec![d],
                vec![d, d],
                vec![d],
                vec![d, inp],
                vec![d],
                vec![outp, d],
                vec![outp],
                vec![d, 2],
                vec![d],
            ];
            for (n, shape) in names::STAGE_TENSORS.iter().zip(fixed) {
                out.push((names::stage(stage, n), shape));
            }
            for l in 0..self.num_layers {
                let per_layer = torch_encoder_layer_shapes(d, f);
                for (n, shape) in names::LAYER_TENSORS.iter().zip(per_layer) {
                    out.push((names::layer(stage, l, n), shape));
                }
            }
        }
        let body = self.motion_dim - 5;
        for (n, w) in [
            (names::STATS_GLOBAL_MEAN, 5),
            (names::STATS_GLOBAL_STD, 5),
            (names::STATS_LOCAL_MEAN, 4),
            (names::STATS_LOCAL_STD, 4),
            (names::STATS_BODY_MEAN, body),
            (names::STATS_BODY_STD, body),
        ] {
            out.push((n.to_string(), vec![w]));
        }
        out
    }
}

/// Normalisation statistics, cast from the upstream float64 `.npy` files to f32 before any
/// arithmetic, as upstream does (`kimodo/motion_rep/stats.py#L65-77`). `std` is stored raw;
/// [`MotionStats::scale`] applies the `sqrt(std^2 + 1e-5)` of upstream's normalisation.
#[derive(Clone, Debug, PartialEq)]
pub struct MotionStats {
    pub global_mean: [f32; 5],
    pub global_std: [f32; 5],
    pub local_mean: [f32; 4],
    pub local_std: [f32; 4],
    /// `motion_dim - 5` values each.
    pub body_mean: Vec<f32>,
    pub body_std: Vec<f32>,
}

impl MotionStats {
    /// Upstream's epsilon under the square root (`kimodo/motion_rep/stats.py#L65-77`).
    pub const EPS: f32 = 1e-5;

    /// The divisor of normalisation, in f32 as upstream computes it.
    pub fn scale(std: f32) -> f32 {
        (std * std + Self::EPS).sqrt()
    }

    /// Mean and raw std over the full feature width: global stats on `[0, 5)`, body stats on
    /// `[5, dim)` (`kimodo/motion_rep/reps/base.py#L232-240`: the local-root stats written
    /// into `[5, 9)` are overwritten by the body stats).
    pub fn feature_mean_std(&self) -> (Vec<f32>, Vec<f32>) {
        let mut mean = self.global_mean.to_vec();
        mean.extend_from_slice(&self.body_mean);
        let mut std = self.global_std.to_vec();
        std.extend_from_slice(&self.body_std);
        (mean, std)
    }
}

/// A loaded model: configuration, statistics and the tensors by name (see [`names`]).
pub struct KimodoModel {
    pub config: KimodoConfig,
    pub stats: MotionStats,
    pub tensors: BTreeMap<String, HostTensor>,
}

impl KimodoModel {
    pub fn tensor(&self, name: &str) -> Result<&HostTensor> {
        self.tensors
            .get(name)
            .ok_or_else(|| Error::InvalidArgument(format!("Kimodo model has no tensor '{name}'")))
    }
}
