//! What a MotionBricks model is made of: its hyperparameters (read from the model file), its
//! statistics and its tensors. The GGUF layout written by `kinema convert motionbricks` is
//! named here once.
//!
//! Tensor names are the upstream state_dict keys with the Lightning prefix replaced by the
//! model's: `backbone_net.` of the root checkpoint becomes `root.`, of the pose checkpoint
//! `pose.`; the VQVAE checkpoint's `pose_net.decoder.` becomes `vq.decoder.` and its codebook
//! `pose_net.quantizer.vq._codebook.embed` `vq.codebook` (`../shared/docs/upstream/
//! motionbricks.md` section 5.2). The statistics are `stats.mean` / `stats.std` `[418]`.

use std::path::Path;

use crate::formats::GgufFile;
use crate::models::kit::blocks::torch_encoder_layer_shapes;
use crate::models::kit::meta::Meta;
use crate::{Error, Result};

/// Prefixes the errors of a MotionBricks model file.
pub const FORMAT: &str = "motionbricks model";
/// What writes MotionBricks model files.
pub const WRITER: &str = "kinema convert motionbricks";

pub use super::dims;

/// GGUF metadata keys of a MotionBricks model file.
pub mod keys {
    use crate::models::kit::convert::ProvenanceKeys;

    pub const ARCHITECTURE: &str = "general.architecture";
    /// The value of [`ARCHITECTURE`] for a MotionBricks model.
    pub const ARCH_NAME: &str = "motionbricks";
    pub const MIN_TOKENS: &str = "motionbricks.min_tokens";
    pub const MAX_TOKENS: &str = "motionbricks.max_tokens";
    pub const DOWN_T: &str = "motionbricks.down_t";
    pub const FPS: &str = "motionbricks.fps";
    pub const ROOT_N_EMBD: &str = "motionbricks.root.n_embd";
    pub const ROOT_N_HEAD: &str = "motionbricks.root.n_head";
    pub const ROOT_FF: &str = "motionbricks.root.ff_size";
    pub const ROOT_LAYERS_SHARED: &str = "motionbricks.root.n_layers_shared";
    pub const ROOT_LAYERS_TOKEN: &str = "motionbricks.root.n_layers_root_token";
    pub const ROOT_POSE_FEAT: &str = "motionbricks.root.pose_feat_dim";
    pub const ROOT_LOCAL_FEAT: &str = "motionbricks.root.local_root_feat_dim";
    pub const ROOT_GLOBAL_FEAT: &str = "motionbricks.root.global_root_feat_dim";
    pub const ROOT_MLP_LAYERS: &str = "motionbricks.root.input_feat_mlp_num_layers";
    pub const ROOT_CONV_WIDTH: &str = "motionbricks.root.conv_width";
    pub const ROOT_CONV_DEPTH: &str = "motionbricks.root.conv_depth";
    pub const ROOT_CONV_DILATION: &str = "motionbricks.root.conv_dilation_growth_rate";
    pub const POSE_N_EMBD: &str = "motionbricks.pose.n_embd";
    pub const POSE_N_HEAD: &str = "motionbricks.pose.n_head";
    pub const POSE_FF: &str = "motionbricks.pose.ff_size";
    pub const POSE_LAYERS: &str = "motionbricks.pose.n_layers";
    pub const POSE_FEAT_WIDTH: &str = "motionbricks.pose.pose_feat_width";
    pub const POSE_ROOT_WIDTH: &str = "motionbricks.pose.root_feat_width";
    pub const POSE_LENGTH_WIDTH: &str = "motionbricks.pose.token_length_feat_width";
    pub const POSE_MLP_LAYERS: &str = "motionbricks.pose.pose_token_mlp_num_layers";
    pub const CODE_HEADS: &str = "motionbricks.vq.num_heads";
    pub const CODES: &str = "motionbricks.vq.codes_per_head";
    pub const CODE_DIM: &str = "motionbricks.vq.code_dim_per_head";
    pub const VQ_WIDTH: &str = "motionbricks.vq.decoder_width";
    pub const VQ_DEPTH: &str = "motionbricks.vq.decoder_depth";
    pub const VQ_DILATION: &str = "motionbricks.vq.decoder_dilation_growth_rate";
    pub const CONVERTER_VERSION: &str = "motionbricks.converter_version";
    /// String array: checks and choices worth knowing, one sentence each.
    pub const CONVERTER_NOTES: &str = "motionbricks.converter_notes";
    /// Followed by `root/`, `pose/` or `vqvae/` and the file's path in that folder.
    pub const SOURCE_SHA256_PREFIX: &str = "motionbricks.source_sha256.";
    /// The keys of the converter's version, notes and source hashes.
    pub const PROVENANCE: ProvenanceKeys = ProvenanceKeys {
        version: CONVERTER_VERSION,
        notes: CONVERTER_NOTES,
        sha256_prefix: SOURCE_SHA256_PREFIX,
    };
}

/// Tensor-name prefixes and the statistics' names in a MotionBricks GGUF.
pub mod names {
    pub const ROOT: &str = "root.";
    pub const POSE: &str = "pose.";
    pub const VQ_DECODER: &str = "vq.decoder.";
    pub const VQ_CODEBOOK: &str = "vq.codebook";
    pub const STATS_MEAN: &str = "stats.mean";
    pub const STATS_STD: &str = "stats.std";
    /// i32 `[29, 2]`: per G1 hinge (MuJoCo order) its skeleton joint and motion-space axis.
    pub const G1_JOINTS: &str = "g1.qpos_joints";
    /// f32 `[34, 3, 3]`: the `_rot_offsets_f2q` of each skeleton joint.
    pub const G1_OFFSETS: &str = "g1.rot_offsets_f2q";
    /// The 12 tensors of each `nn.TransformerEncoderLayer`, after `<stack>.layers.<i>.`.
    pub const LAYER_TENSORS: [&str; 12] = crate::models::kit::blocks::TORCH_ENCODER_LAYER_TENSORS;
}

/// One `DoubleCondDecoder` (`motionbricks/vqvae/neural_modules/encdec_double_cond.py#L5-75`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvDecoderConfig {
    /// Channels in (the constructor's `output_emb_width`).
    pub input: usize,
    /// Channels out (the constructor's `input_emb_width`).
    pub output: usize,
    pub width: usize,
    /// Residual blocks per stage.
    pub depth: usize,
    pub dilation_growth_rate: usize,
    /// Upsampling stages (x2 each).
    pub down_t: usize,
    pub target_cond: usize,
    pub external_cond: usize,
}

/// The shape of a `DoubleCondDecoder` that the model file does not store: the others follow
/// from where it sits.
#[derive(Clone, Copy, Debug)]
pub struct ConvShape {
    pub width: usize,
    pub depth: usize,
    pub dilation_growth_rate: usize,
    pub down_t: usize,
}

impl ConvDecoderConfig {
    /// The root model's trajectory head: `n_embd` channels in, the 5 global root values out,
    /// targets the global root values, the external condition the `n_embd` frame embeddings.
    pub fn root_head(n_embd: usize, s: ConvShape) -> ConvDecoderConfig {
        ConvDecoderConfig::with(n_embd, dims::GLOBAL_ROOT, s, dims::GLOBAL_ROOT, n_embd)
    }

    /// The VQ pose decoder: the `code_width` dequantized codes in, the 413-wide local
    /// representation out, the 304-wide poses as targets, 2 external values per frame.
    pub fn vq_decoder(code_width: usize, s: ConvShape) -> ConvDecoderConfig {
        ConvDecoderConfig::with(
            code_width,
            dims::LOCAL_REP,
            s,
            dims::POSE,
            dims::DECODER_EXTERNAL,
        )
    }

    fn with(
        input: usize,
        output: usize,
        s: ConvShape,
        target_cond: usize,
        external_cond: usize,
    ) -> ConvDecoderConfig {
        ConvDecoderConfig {
            input,
            output,
            width: s.width,
            depth: s.depth,
            dilation_growth_rate: s.dilation_growth_rate,
            down_t: s.down_t,
            target_cond,
            external_cond,
        }
    }

    /// The dilation of residual block `j` of a stage: reversed growth
    /// (`motionbricks/vqvae/neural_modules/resnet.py#L82-83`), so block 0 has the largest.
    pub fn dilation(&self, j: usize) -> usize {
        self.dilation_growth_rate.pow((self.depth - 1 - j) as u32)
    }

    /// Every tensor under `prefix`, with its shape.
    pub fn tensor_shapes(&self, prefix: &str, out: &mut Vec<(String, Vec<usize>)>) {
        let w = self.width;
        let mut push = |n: String, s: Vec<usize>| out.push((format!("{prefix}{n}"), s));
        push("model.0.weight".into(), vec![w, self.input, 3]);
        push("model.0.bias".into(), vec![w]);
        for s in 0..self.down_t {
            for j in 0..self.depth {
                let b = format!("model.{}.0.model.{j}.", 2 + s);
                push(format!("{b}conv1.weight"), vec![w, w, 3]);
                push(format!("{b}conv1.bias"), vec![w]);
                push(format!("{b}conv2.weight"), vec![w, w, 1]);
                push(format!("{b}conv2.bias"), vec![w]);
            }
            push(format!("model.{}.2.weight", 2 + s), vec![w, w, 3]);
            push(format!("model.{}.2.bias", 2 + s), vec![w]);
        }
        push(format!("model.{}.weight", 2 + self.down_t), vec![w, w, 3]);
        push(format!("model.{}.bias", 2 + self.down_t), vec![w]);
        push(
            format!("model.{}.weight", 4 + self.down_t),
            vec![self.output, w, 3],
        );
        push(format!("model.{}.bias", 4 + self.down_t), vec![self.output]);
        for i in 0..self.down_t {
            let fpp = 1usize << (self.down_t - i);
            push(
                format!("external_cond_blocks.{}.weight", 2 * i),
                vec![w, fpp * self.external_cond + w],
            );
            push(format!("external_cond_blocks.{}.bias", 2 * i), vec![w]);
        }
        for i in 0..self.down_t {
            let fpp = 1usize << (self.down_t - i);
            push(
                format!("target_cond_blocks.{}.weight", 2 * i),
                vec![w / fpp, self.target_cond],
            );
            push(format!("target_cond_blocks.{}.bias", 2 * i), vec![w / fpp]);
        }
    }
}

/// The hyperparameters of a converted model.
#[derive(Clone, Debug, PartialEq)]
pub struct MotionBricksConfig {
    pub min_tokens: usize,
    pub max_tokens: usize,
    /// Frames per token are `2^down_t`.
    pub down_t: usize,
    pub fps: f32,
    pub root_n_embd: usize,
    pub root_n_head: usize,
    pub root_ff: usize,
    pub root_layers_shared: usize,
    pub root_layers_token: usize,
    pub root_pose_feat: usize,
    pub root_local_feat: usize,
    pub root_global_feat: usize,
    pub root_mlp_layers: usize,
    pub root_conv: ConvDecoderConfig,
    pub pose_n_embd: usize,
    pub pose_n_head: usize,
    pub pose_ff: usize,
    pub pose_layers: usize,
    pub pose_feat_width: usize,
    pub pose_root_width: usize,
    pub pose_length_width: usize,
    pub pose_mlp_layers: usize,
    pub code_heads: usize,
    pub codes: usize,
    pub code_dim: usize,
    pub decoder: ConvDecoderConfig,
}

/// An FCBlock (`motionbricks/motion_backbone/neural_modules/mlp.py#L3-28`) under `prefix`.
fn fc_block(
    prefix: &str,
    layers: usize,
    width: usize,
    input: usize,
    output: usize,
    out: &mut Vec<(String, Vec<usize>)>,
) {
    for l in 0..layers {
        let i = if l == 0 { input } else { width };
        out.push((format!("{prefix}fc_layers.{l}.weight"), vec![width, i]));
        out.push((format!("{prefix}fc_layers.{l}.bias"), vec![width]));
    }
    out.push((
        format!("{prefix}forward_projection.weight"),
        vec![output, width],
    ));
    out.push((format!("{prefix}forward_projection.bias"), vec![output]));
}

fn encoder(prefix: &str, layers: usize, d: usize, f: usize, out: &mut Vec<(String, Vec<usize>)>) {
    for l in 0..layers {
        let shapes = torch_encoder_layer_shapes(d, f);
        for (n, s) in names::LAYER_TENSORS.iter().zip(shapes) {
            out.push((format!("{prefix}layers.{l}.{n}"), s));
        }
    }
}

impl MotionBricksConfig {
    /// Frames per token (4 as released).
    pub fn frames_per_token(&self) -> usize {
        1 << self.down_t
    }
    /// Frames of a full plan (64 as released).
    pub fn max_frames(&self) -> usize {
        self.max_tokens * self.frames_per_token()
    }
    /// Length classes of the root model: `min..=max` tokens plus out-of-reach.
    pub fn length_classes(&self) -> usize {
        self.max_tokens - self.min_tokens + 2
    }

    /// Root-model tensors (`motion_backbone/neural_modules/root_backbone.py#L28-117`), names
    /// without the `backbone_net.` prefix.
    pub fn root_tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let e = self.root_n_embd;
        let (p, l, g) = (
            self.root_pose_feat,
            self.root_local_feat,
            self.root_global_feat,
        );
        let mut out = vec![
            ("_no_local_pose_emb".to_string(), vec![p]),
            ("_no_local_root_emb".to_string(), vec![l]),
            ("_no_global_root_emb".to_string(), vec![g]),
            ("_conv_no_frame_emb".to_string(), vec![e]),
        ];
        encoder(
            "_shared_transformer_model.",
            self.root_layers_shared,
            e,
            self.root_ff,
            &mut out,
        );
        encoder(
            "_root_token_transformer_model.",
            self.root_layers_token,
            e,
            self.root_ff,
            &mut out,
        );
        self.root_conv.tensor_shapes("_conv_output.", &mut out);
        for (n, o, i) in [
            ("_proj_local_pose", p, dims::POSE),
            ("_proj_local_root_value", l, dims::LOCAL_ROOT),
            ("_proj_global_root_value", g, dims::GLOBAL_ROOT),
        ] {
            out.push((format!("{n}.weight"), vec![o, i]));
            out.push((format!("{n}.bias"), vec![o]));
        }
        for n in ["_proj_start_input.", "_proj_end_input."] {
            fc_block(n, self.root_mlp_layers, e, p + l + g, e, &mut out);
        }
        let classes = self.length_classes();
        out.extend([
            (
                "_input_position_emb.weight".to_string(),
                vec![2 * self.frames_per_token(), e],
            ),
            (
                "_proj_input_num_tokens.weight".to_string(),
                vec![classes + 1, e],
            ),
            (
                "_position_emb.embed".to_string(),
                vec![self.max_tokens, 1, e],
            ),
            (
                "_proj_num_token_output_logit.weight".to_string(),
                vec![classes, e],
            ),
            (
                "_proj_num_token_output_logit.bias".to_string(),
                vec![classes],
            ),
            ("_middle_token_emb.weight".to_string(), vec![classes, e]),
        ]);
        out
    }

    /// Pose-model tensors (`motion_backbone/neural_modules/pose_backbone.py#L48-108`), names
    /// without the `backbone_net.` prefix (the `initted` flag is not a weight).
    pub fn pose_tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let e = self.pose_n_embd;
        let mut out = Vec::new();
        encoder(
            "_transformer_model.",
            self.pose_layers,
            e,
            self.pose_ff,
            &mut out,
        );
        out.push((
            "_pose_token_emb.weight".into(),
            vec![self.code_heads * (self.codes + 1), self.code_dim],
        ));
        fc_block(
            "_proj_pose_token_emb.",
            self.pose_mlp_layers,
            self.pose_feat_width,
            self.code_heads * self.code_dim,
            self.pose_feat_width,
            &mut out,
        );
        let fpt = self.frames_per_token();
        out.extend([
            (
                "_proj_local_root_values.weight".to_string(),
                vec![self.pose_root_width, dims::POSE_ROOT_COND * fpt],
            ),
            (
                "_proj_local_root_values.bias".to_string(),
                vec![self.pose_root_width],
            ),
            (
                "_proj_local_pose.weight".to_string(),
                vec![self.pose_feat_width / fpt, dims::POSE],
            ),
            (
                "_proj_local_pose.bias".to_string(),
                vec![self.pose_feat_width / fpt],
            ),
            (
                "_proj_num_valid_positions.weight".to_string(),
                vec![
                    self.max_tokens - self.min_tokens + 1,
                    self.pose_length_width,
                ],
            ),
            (
                "_proj_input.0.weight".to_string(),
                vec![
                    e,
                    self.pose_feat_width + self.pose_root_width + self.pose_length_width,
                ],
            ),
            ("_proj_input.0.bias".to_string(), vec![e]),
            (
                "_position_emb.embed".to_string(),
                vec![self.max_tokens, 1, e],
            ),
            (
                "_proj_pose_output_logit.weight".to_string(),
                vec![self.code_heads * self.codes, e],
            ),
            (
                "_proj_pose_output_logit.bias".to_string(),
                vec![self.code_heads * self.codes],
            ),
        ]);
        out
    }

    /// VQ decoder tensors, names after `decoder.`, and the codebook's shape.
    pub fn decoder_tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let mut out = Vec::new();
        self.decoder.tensor_shapes("", &mut out);
        out
    }

    /// The codebook `[heads, codes, dim]`.
    pub fn codebook_shape(&self) -> Vec<usize> {
        vec![self.code_heads, self.codes, self.code_dim]
    }

    /// Every tensor of a model file, GGUF names, in file order.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let mut out = Vec::new();
        for (n, s) in self.root_tensor_shapes() {
            out.push((format!("{}{n}", names::ROOT), s));
        }
        for (n, s) in self.pose_tensor_shapes() {
            out.push((format!("{}{n}", names::POSE), s));
        }
        for (n, s) in self.decoder_tensor_shapes() {
            out.push((format!("{}{n}", names::VQ_DECODER), s));
        }
        out.push((names::VQ_CODEBOOK.into(), self.codebook_shape()));
        out.push((names::STATS_MEAN.into(), vec![dims::STATS]));
        out.push((names::STATS_STD.into(), vec![dims::STATS]));
        out.push((names::G1_JOINTS.into(), vec![super::g1::HINGES, 2]));
        out.push((names::G1_OFFSETS.into(), vec![super::g1::BONES.len(), 3, 3]));
        out
    }

    /// The values checked against each other; the message names the field at fault.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| {
            Err(Error::InvalidArgument(format!(
                "MotionBricks config: {msg}"
            )))
        };
        for (name, v) in [
            ("root n_embd", self.root_n_embd),
            ("root n_head", self.root_n_head),
            ("root ff_size", self.root_ff),
            ("pose n_embd", self.pose_n_embd),
            ("pose n_head", self.pose_n_head),
            ("pose ff_size", self.pose_ff),
            ("pose n_layers", self.pose_layers),
            ("root n_layers_shared", self.root_layers_shared),
            ("root n_layers_root_token", self.root_layers_token),
            ("code heads", self.code_heads),
            ("codes per head", self.codes),
            ("code dim", self.code_dim),
            ("min_tokens", self.min_tokens),
            ("root mlp layers", self.root_mlp_layers),
            ("pose mlp layers", self.pose_mlp_layers),
        ] {
            if v == 0 {
                return bad(format!("{name} is 0"));
            }
        }
        if self.min_tokens > self.max_tokens {
            return bad(format!(
                "min_tokens {} > max_tokens {}",
                self.min_tokens, self.max_tokens
            ));
        }
        if !(1..=6).contains(&self.down_t) {
            return bad(format!("down_t {} is outside 1..=6", self.down_t));
        }
        for (name, d, h) in [
            ("root", self.root_n_embd, self.root_n_head),
            ("pose", self.pose_n_embd, self.pose_n_head),
        ] {
            if !d.is_multiple_of(h) {
                return bad(format!("{name} n_head {h} does not divide n_embd {d}"));
            }
        }
        if !self.pose_feat_width.is_multiple_of(self.frames_per_token()) {
            return bad(format!(
                "pose_feat_width {} is not a multiple of {} frames per token",
                self.pose_feat_width,
                self.frames_per_token()
            ));
        }
        for (name, c) in [("root conv", self.root_conv), ("VQ decoder", self.decoder)] {
            if c.down_t != self.down_t
                || !(1..=8).contains(&c.depth)
                || !(1..=8).contains(&c.dilation_growth_rate)
                || c.width == 0
            {
                return bad(format!("{name}: {c:?} does not fit down_t {}", self.down_t));
            }
            if !c.width.is_multiple_of(self.frames_per_token()) {
                return bad(format!(
                    "{name} width {} is not a multiple of {} frames per token",
                    c.width,
                    self.frames_per_token()
                ));
            }
        }
        if !(self.fps.is_finite() && self.fps > 0.0) {
            return bad(format!("fps {} is not a positive number", self.fps));
        }
        Ok(())
    }

    /// Write the hyperparameters as GGUF metadata.
    pub fn write_metadata(&self, w: &mut crate::formats::GgufWriter) -> Result<()> {
        w.add_metadata(keys::ARCHITECTURE, keys::ARCH_NAME)?;
        for (k, v) in self.usize_fields() {
            let v = u32::try_from(v)
                .map_err(|_| Error::InvalidArgument(format!("{k} = {v} does not fit u32")))?;
            w.add_metadata(k, v)?;
        }
        w.add_metadata(keys::FPS, self.fps)?;
        Ok(())
    }

    fn usize_fields(&self) -> [(&'static str, usize); 29] {
        [
            (keys::MIN_TOKENS, self.min_tokens),
            (keys::MAX_TOKENS, self.max_tokens),
            (keys::DOWN_T, self.down_t),
            (keys::ROOT_N_EMBD, self.root_n_embd),
            (keys::ROOT_N_HEAD, self.root_n_head),
            (keys::ROOT_FF, self.root_ff),
            (keys::ROOT_LAYERS_SHARED, self.root_layers_shared),
            (keys::ROOT_LAYERS_TOKEN, self.root_layers_token),
            (keys::ROOT_POSE_FEAT, self.root_pose_feat),
            (keys::ROOT_LOCAL_FEAT, self.root_local_feat),
            (keys::ROOT_GLOBAL_FEAT, self.root_global_feat),
            (keys::ROOT_MLP_LAYERS, self.root_mlp_layers),
            (keys::ROOT_CONV_WIDTH, self.root_conv.width),
            (keys::ROOT_CONV_DEPTH, self.root_conv.depth),
            (
                keys::ROOT_CONV_DILATION,
                self.root_conv.dilation_growth_rate,
            ),
            (keys::POSE_N_EMBD, self.pose_n_embd),
            (keys::POSE_N_HEAD, self.pose_n_head),
            (keys::POSE_FF, self.pose_ff),
            (keys::POSE_LAYERS, self.pose_layers),
            (keys::POSE_FEAT_WIDTH, self.pose_feat_width),
            (keys::POSE_ROOT_WIDTH, self.pose_root_width),
            (keys::POSE_LENGTH_WIDTH, self.pose_length_width),
            (keys::POSE_MLP_LAYERS, self.pose_mlp_layers),
            (keys::CODE_HEADS, self.code_heads),
            (keys::CODES, self.codes),
            (keys::CODE_DIM, self.code_dim),
            (keys::VQ_WIDTH, self.decoder.width),
            (keys::VQ_DEPTH, self.decoder.depth),
            (keys::VQ_DILATION, self.decoder.dilation_growth_rate),
        ]
    }

    /// Read the hyperparameters of the converted file `f` (opened from `path`), refusing one
    /// that is not a MotionBricks model.
    pub fn from_gguf(f: &GgufFile, path: &Path) -> Result<MotionBricksConfig> {
        let m = Meta::new(f, path, FORMAT, WRITER);
        let arch = f.get(keys::ARCHITECTURE).and_then(|v| v.as_str());
        if arch != Some(keys::ARCH_NAME) {
            return Err(m.bad(format!(
                "not a MotionBricks model: {} is {}",
                keys::ARCHITECTURE,
                arch.map_or("missing".to_string(), |a| format!("{a:?}"))
            )));
        }
        let u = |k: &str| m.usize(k);
        let down_t = u(keys::DOWN_T)?;
        let root_n_embd = u(keys::ROOT_N_EMBD)?;
        let code_heads = u(keys::CODE_HEADS)?;
        let code_dim = u(keys::CODE_DIM)?;
        let c = MotionBricksConfig {
            min_tokens: u(keys::MIN_TOKENS)?,
            max_tokens: u(keys::MAX_TOKENS)?,
            down_t,
            fps: m.f32(keys::FPS)?,
            root_n_embd,
            root_n_head: u(keys::ROOT_N_HEAD)?,
            root_ff: u(keys::ROOT_FF)?,
            root_layers_shared: u(keys::ROOT_LAYERS_SHARED)?,
            root_layers_token: u(keys::ROOT_LAYERS_TOKEN)?,
            root_pose_feat: u(keys::ROOT_POSE_FEAT)?,
            root_local_feat: u(keys::ROOT_LOCAL_FEAT)?,
            root_global_feat: u(keys::ROOT_GLOBAL_FEAT)?,
            root_mlp_layers: u(keys::ROOT_MLP_LAYERS)?,
            root_conv: ConvDecoderConfig::root_head(
                root_n_embd,
                ConvShape {
                    width: u(keys::ROOT_CONV_WIDTH)?,
                    depth: u(keys::ROOT_CONV_DEPTH)?,
                    dilation_growth_rate: u(keys::ROOT_CONV_DILATION)?,
                    down_t,
                },
            ),
            pose_n_embd: u(keys::POSE_N_EMBD)?,
            pose_n_head: u(keys::POSE_N_HEAD)?,
            pose_ff: u(keys::POSE_FF)?,
            pose_layers: u(keys::POSE_LAYERS)?,
            pose_feat_width: u(keys::POSE_FEAT_WIDTH)?,
            pose_root_width: u(keys::POSE_ROOT_WIDTH)?,
            pose_length_width: u(keys::POSE_LENGTH_WIDTH)?,
            pose_mlp_layers: u(keys::POSE_MLP_LAYERS)?,
            code_heads,
            codes: u(keys::CODES)?,
            code_dim,
            decoder: ConvDecoderConfig::vq_decoder(
                code_heads * code_dim,
                ConvShape {
                    width: u(keys::VQ_WIDTH)?,
                    depth: u(keys::VQ_DEPTH)?,
                    dilation_growth_rate: u(keys::VQ_DILATION)?,
                    down_t,
                },
            ),
        };
        c.validate().map_err(|e| m.bad(e))?;
        Ok(c)
    }
}
