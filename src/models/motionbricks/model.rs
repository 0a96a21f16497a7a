//! A loaded MotionBricks model and the graphs of one plan: root stage 1 (the length logits),
//! root stage 2 with its convolutional head (the root trajectory), and the pose model with
//! token sampling, codebook lookup and the VQ decoder. The host glue between them is in
//! [`super::plan`].

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::config::{ConvDecoderConfig, FORMAT, MotionBricksConfig, WRITER, dims, names};
use super::g1::G1Qpos;
use super::sampler::Sampling;
use crate::graph::{Graph, TensorId};
use crate::models::kit::blocks::{Attention, EncoderLayer, Linear, Mlp, Norm, NormPlacement, Qkv};
use crate::models::kit::checks::check_tensors;
use crate::models::kit::meta::{self, Meta};
use crate::ops::{Activation, MaskKind};
use crate::{DType, Error, HostTensor, Result};

/// `nn.TransformerEncoderLayer`'s default `layer_norm_eps`.
const LN_EPS: f32 = 1e-5;
/// `nn.LeakyReLU()`'s default slope, used by every FCBlock
/// (`motion_backbone/neural_modules/mlp.py#L11-16`).
const LEAKY_SLOPE: f32 = 0.01;

fn bad(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

/// A converted model: configuration, statistics and tensors by GGUF name.
pub struct MotionBricksModel {
    pub config: MotionBricksConfig,
    /// The dual statistics `[418]`, cast to f32.
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    /// The G1 qpos constants.
    pub g1: G1Qpos,
    pub tensors: BTreeMap<String, HostTensor>,
}

impl MotionBricksModel {
    /// Open a MotionBricks GGUF (memory-mapped): the configuration from its metadata, every
    /// tensor checked (present, shape, dtype, nothing extra).
    pub fn load(path: impl AsRef<Path>) -> Result<MotionBricksModel> {
        let path = path.as_ref();
        let f = meta::open(path, FORMAT)?;
        let m = Meta::new(&f, path, FORMAT, WRITER);
        let config = MotionBricksConfig::from_gguf(&f, path)?;
        // The layer counts bound the list built from them: refuse a file that claims more
        // layers than it has tensors before making the list.
        let layers = config.root_layers_shared + config.root_layers_token + config.pose_layers;
        if layers.saturating_mul(12) > f.tensors().len() {
            return Err(m.bad(format!(
                "{layers} encoder layers claimed but the file has {} tensors",
                f.tensors().len()
            )));
        }
        let mut tensors = BTreeMap::new();
        for info in f.tensors() {
            tensors.insert(info.name.clone(), f.tensor(&info.name)?);
        }
        MotionBricksModel::from_tensors(config, tensors).map_err(|e| m.bad(e))
    }

    /// A model from its configuration and tensors (a loaded file's, or synthetic ones):
    /// exactly the tensors of [`MotionBricksConfig::tensor_shapes`], 2-D weights f32, f16 or
    /// bf16, the G1 joint table i32, everything else f32; the statistics and G1 constants
    /// read from theirs.
    pub fn from_tensors(
        config: MotionBricksConfig,
        tensors: BTreeMap<String, HostTensor>,
    ) -> Result<MotionBricksModel> {
        let accepts = |name: &str, shape: &[usize]| -> &'static [DType] {
            if name == names::G1_JOINTS {
                &[DType::I32]
            } else if shape.len() == 2 {
                &[DType::F32, DType::F16, DType::BF16]
            } else {
                &[DType::F32]
            }
        };
        check_tensors(&config.tensor_shapes(), &tensors, accepts, false).map_err(bad)?;
        let mean = tensors[names::STATS_MEAN].to_f32_vec()?;
        let std = tensors[names::STATS_STD].to_f32_vec()?;
        let joints: Vec<i32> = bytemuck::pod_collect_to_vec(tensors[names::G1_JOINTS].bytes());
        let g1 = G1Qpos::from_values(&joints, &tensors[names::G1_OFFSETS].to_f32_vec()?)?;
        Ok(MotionBricksModel {
            config,
            mean,
            std,
            g1,
            tensors,
        })
    }

    /// A tensor by GGUF name.
    pub fn tensor(&self, name: &str) -> Result<&HostTensor> {
        self.tensors
            .get(name)
            .ok_or_else(|| bad(format!("MotionBricks model has no tensor {name:?}")))
    }

    /// A tensor's values as f32 (host glue reads a few small tables).
    pub fn values(&self, name: &str) -> Result<Vec<f32>> {
        self.tensor(name)?.to_f32_vec()
    }
}

/// Weight nodes, created once per name.
struct Weights<'m> {
    model: &'m MotionBricksModel,
    ids: HashMap<String, TensorId>,
}

impl<'m> Weights<'m> {
    fn new(model: &'m MotionBricksModel) -> Weights<'m> {
        Weights {
            model,
            ids: HashMap::new(),
        }
    }

    fn get(&mut self, g: &mut Graph, name: &str) -> Result<TensorId> {
        self.get_as(g, name, false)
    }

    /// A weight always in f32 (an operand of an elementwise op).
    fn get_f32(&mut self, g: &mut Graph, name: &str) -> Result<TensorId> {
        self.get_as(g, name, true)
    }

    fn get_as(&mut self, g: &mut Graph, name: &str, f32_only: bool) -> Result<TensorId> {
        if let Some(&t) = self.ids.get(name) {
            return Ok(t);
        }
        let mut t = self.model.tensor(name)?.clone();
        // Convolutions, elementwise operands and the small non-matrix tensors run in f32.
        if (f32_only || t.shape.len() != 2) && t.dtype != DType::F32 {
            t = HostTensor::from_f32(&t.shape, &t.to_f32_vec()?)?;
        }
        let id = g.weight(name, t)?;
        self.ids.insert(name.to_string(), id);
        Ok(id)
    }

    /// A rank-3 `[rows, 1, dim]` table (the sin/cos position embeddings) as `[rows, dim]`.
    fn table(&mut self, g: &mut Graph, name: &str) -> Result<TensorId> {
        let t = self.get(g, name)?;
        let s = g.tensor(t).shape.clone();
        g.reshape(t, &[s[0], s[1..].iter().product()])
    }

    /// The weight and bias of the linear layer `prefix`.
    fn lin(&mut self, g: &mut Graph, prefix: &str) -> Result<Linear> {
        Ok(Linear {
            w: self.get(g, &format!("{prefix}.weight"))?,
            b: Some(self.get(g, &format!("{prefix}.bias"))?),
        })
    }

    fn linear(
        &mut self,
        g: &mut Graph,
        x: TensorId,
        prefix: &str,
        act: Activation,
    ) -> Result<TensorId> {
        self.lin(g, prefix)?.apply(g, x, act)
    }

    /// The LayerNorm `prefix` (gain and shift, torch's eps).
    fn layer_norm(&mut self, g: &mut Graph, prefix: &str) -> Result<Norm> {
        Ok(Norm::Layer {
            gamma: Some(self.get(g, &format!("{prefix}.weight"))?),
            beta: Some(self.get(g, &format!("{prefix}.bias"))?),
            eps: LN_EPS,
        })
    }

    /// An FCBlock: LeakyReLU(0.01) after every hidden layer, none after the projection, no
    /// residual (`motion_backbone/neural_modules/mlp.py#L23-28`).
    fn fc_block(
        &mut self,
        g: &mut Graph,
        x: TensorId,
        prefix: &str,
        layers: usize,
    ) -> Result<TensorId> {
        let mut h = x;
        for l in 0..layers {
            h = self.linear(
                g,
                h,
                &format!("{prefix}fc_layers.{l}"),
                Activation::LeakyRelu(LEAKY_SLOPE),
            )?;
        }
        self.linear(
            g,
            h,
            &format!("{prefix}forward_projection"),
            Activation::None,
        )
    }

    /// One post-norm `nn.TransformerEncoderLayer` (ReLU FFN, packed Q|K|V rows, contiguous
    /// heads, scale 1/sqrt(head_dim)): `x = LN1(x + SA(x)); x = LN2(x + FF(x))`.
    fn encoder_layer(
        &mut self,
        g: &mut Graph,
        x: TensorId,
        prefix: &str,
        heads: usize,
        mask: Option<TensorId>,
    ) -> Result<TensorId> {
        let qkv = Linear {
            w: self.get(g, &format!("{prefix}self_attn.in_proj_weight"))?,
            b: Some(self.get(g, &format!("{prefix}self_attn.in_proj_bias"))?),
        };
        let layer = EncoderLayer {
            attention: Attention {
                qkv: Qkv::Fused(qkv),
                out: self.lin(g, &format!("{prefix}self_attn.out_proj"))?,
                q_heads: heads,
                kv_heads: heads,
                mask: if mask.is_some() {
                    MaskKind::KeyPadding
                } else {
                    MaskKind::None
                },
                mask_tensor: mask,
                rope: None,
            },
            mlp: Mlp::Activation {
                up: self.lin(g, &format!("{prefix}linear1"))?,
                act: Activation::Relu,
                down: self.lin(g, &format!("{prefix}linear2"))?,
            },
            norm1: self.layer_norm(g, &format!("{prefix}norm1"))?,
            norm2: self.layer_norm(g, &format!("{prefix}norm2"))?,
            placement: NormPlacement::Post,
        };
        layer.apply(g, x)
    }

    fn conv(
        &mut self,
        g: &mut Graph,
        x: TensorId,
        prefix: &str,
        padding: usize,
        dilation: usize,
    ) -> Result<TensorId> {
        let w = self.get(g, &format!("{prefix}.weight"))?;
        let b = self.get(g, &format!("{prefix}.bias"))?;
        g.conv1d(x, w, Some(b), padding, dilation)
    }
}

/// The masks and conditions one `DoubleCondDecoder` run reads, all graph inputs written by
/// the host (0/1 masks expanded to full width, since the graph broadcasts trailing shapes
/// only).
#[derive(Clone, Debug)]
pub struct ConvDecoderInputs {
    /// Token mask over `[batch, input, P0]`.
    pub in_mask: TensorId,
    /// Token mask over `[batch, width, P]` at each length `P0 * 2^i`, i = 0..=down_t.
    pub masks: Vec<TensorId>,
    /// Token mask over `[batch, output, 64]`.
    pub out_mask: TensorId,
    /// `[batch, frames, target]`.
    pub target: TensorId,
    /// Per stage: `has` and `1 - has` over `[batch, frames, width / fpp]`.
    pub has: Vec<(TensorId, TensorId)>,
    /// `[batch, frames, external]`.
    pub external: TensorId,
}

impl ConvDecoderInputs {
    fn new(
        g: &mut Graph,
        name: &str,
        c: &ConvDecoderConfig,
        batch: usize,
        p0: usize,
    ) -> Result<Self> {
        let frames = p0 << c.down_t;
        let in_mask = g.input(
            &format!("{name}.in_mask"),
            DType::F32,
            &[batch, c.input, p0],
        )?;
        let masks = (0..=c.down_t)
            .map(|i| {
                g.input(
                    &format!("{name}.mask{i}"),
                    DType::F32,
                    &[batch, c.width, p0 << i],
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let out_mask = g.input(
            &format!("{name}.out_mask"),
            DType::F32,
            &[batch, c.output, frames],
        )?;
        let target = g.input(
            &format!("{name}.target"),
            DType::F32,
            &[batch, frames, c.target_cond],
        )?;
        let has = (0..c.down_t)
            .map(|i| {
                let w = c.width >> (c.down_t - i);
                Ok((
                    g.input(&format!("{name}.has{i}"), DType::F32, &[batch, frames, w])?,
                    g.input(
                        &format!("{name}.not_has{i}"),
                        DType::F32,
                        &[batch, frames, w],
                    )?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let external = g.input(
            &format!("{name}.external"),
            DType::F32,
            &[batch, frames, c.external_cond],
        )?;
        Ok(ConvDecoderInputs {
            in_mask,
            masks,
            out_mask,
            target,
            has,
            external,
        })
    }
}

/// `DoubleCondDecoder.forward` (`vqvae/neural_modules/encdec_double_cond.py#L77-138`) on
/// `x [batch, input, P0]`: output `[batch, output, P0 2^down_t]`.
fn conv_decoder(
    g: &mut Graph,
    w: &mut Weights,
    prefix: &str,
    c: &ConvDecoderConfig,
    x: TensorId,
    inp: &ConvDecoderInputs,
) -> Result<TensorId> {
    let batch = g.tensor(x).shape[0];
    let frames = g.tensor(inp.target).shape[1];
    let x = g.mul(x, inp.in_mask)?;
    let mut h = w.conv(g, x, &format!("{prefix}model.0"), 1, 1)?;
    h = g.activation(h, Activation::Relu)?;
    for i in 0..c.down_t {
        let fpp = 1usize << (c.down_t - i);
        let positions = frames / fpp;
        // Target cond: position p's channels split into fpp chunks, chunk j = frame p fpp + j;
        // replaced where the frame has a target (#L101-112).
        let ht = w.linear(
            g,
            inp.target,
            &format!("{prefix}target_cond_blocks.{}", 2 * i),
            Activation::Relu,
        )?;
        let hp = g.transpose(h, 1, 2)?; // [batch, P, width]
        let hf = g.reshape(hp, &[batch, frames, c.width / fpp])?;
        let (has, not_has) = inp.has[i];
        let keep = g.mul(hf, not_has)?;
        let put = g.mul(ht, has)?;
        let hf = g.add(keep, put)?;
        let hp = g.reshape(hf, &[batch, positions, c.width])?;
        // External cond: fpp consecutive frames concatenated after h's channels (#L115-120).
        let e = g.reshape(inp.external, &[batch, positions, fpp * c.external_cond])?;
        let cat = g.concat(&[hp, e], 2)?;
        let hp = w.linear(
            g,
            cat,
            &format!("{prefix}external_cond_blocks.{}", 2 * i),
            Activation::Relu,
        )?;
        h = g.transpose(hp, 1, 2)?; // [batch, width, P]
        // Resnet1D with reversed dilations (`vqvae/neural_modules/resnet.py#L56-90`). A block
        // is `x0 = h m; relu(x0) m; conv1; relu(.) m; conv2; (. + x0) m` (#L45-69): its
        // elementwise steps run as three masked_act ops, bit-identical to the separate
        // mul / relu / add ops (x0 = h m is recomputed inside the last one).
        let m = inp.masks[i];
        for j in 0..c.depth {
            let d = c.dilation(j);
            let b = format!("{prefix}model.{}.0.model.{j}.", 2 + i);
            let t = g.masked_act(h, m, None, Activation::Relu, true)?;
            let t = w.conv(g, t, &format!("{b}conv1"), d, d)?;
            let t = g.masked_act(t, m, None, Activation::Relu, false)?;
            let t = w.conv(g, t, &format!("{b}conv2"), 0, 1)?;
            h = g.masked_act(t, m, Some(h), Activation::None, false)?;
        }
        h = g.upsample_nearest2x(h)?;
        h = g.mul(h, inp.masks[i + 1])?;
        h = w.conv(g, h, &format!("{prefix}model.{}.2", 2 + i), 1, 1)?;
    }
    let m = inp.masks[c.down_t];
    h = g.mul(h, m)?;
    h = w.conv(g, h, &format!("{prefix}model.{}", 2 + c.down_t), 1, 1)?;
    h = g.masked_act(h, m, None, Activation::Relu, false)?;
    h = w.conv(g, h, &format!("{prefix}model.{}", 4 + c.down_t), 1, 1)?;
    g.mul(h, inp.out_mask)
}

/// Root stage 1 (`motion_backbone/neural_modules/root_backbone.py#L137-184`): frame
/// embeddings and the length logits.
pub struct RootStage1 {
    pub graph: Graph,
    pub batch: usize,
    /// `[batch, 8, 5]`, `[batch, 8, 4]`, `[batch, 8, 304]`: normalized keyframes.
    pub global_root: TensorId,
    pub local_root: TensorId,
    pub poses: TensorId,
    /// `has` and `1 - has` of each input, expanded to its embedding width.
    pub has_pose: (TensorId, TensorId),
    pub has_local: (TensorId, TensorId),
    pub has_global: (TensorId, TensorId),
    /// u32 `[batch, 1]`: `num_tokens - min_tokens` (the masked class for a free length).
    pub num_tokens: TensorId,
    /// `[batch, 8, E]`: the FCBlock outputs (un-positioned).
    pub frame_emb: TensorId,
    /// `[batch, 8, E]`: plus the learned position embedding.
    pub positioned: TensorId,
    /// `[batch, 1, classes]`: raw length logits.
    pub logits: TensorId,
}

impl RootStage1 {
    /// The graph for `batch` plans.
    pub fn build(m: &MotionBricksModel, batch: usize) -> Result<RootStage1> {
        let c = &m.config;
        let mut g = Graph::new();
        let mut w = Weights::new(m);
        let k = 2 * c.frames_per_token();
        let global_root = g.input("global_root", DType::F32, &[batch, k, dims::GLOBAL_ROOT])?;
        let local_root = g.input("local_root", DType::F32, &[batch, k, dims::LOCAL_ROOT])?;
        let poses = g.input("poses", DType::F32, &[batch, k, dims::POSE])?;
        let has_pair = |g: &mut Graph, n: &str, width: usize| -> Result<(TensorId, TensorId)> {
            Ok((
                g.input(&format!("has_{n}"), DType::F32, &[batch, k, width])?,
                g.input(&format!("not_has_{n}"), DType::F32, &[batch, k, width])?,
            ))
        };
        let has_pose = has_pair(&mut g, "pose", c.root_pose_feat)?;
        let has_local = has_pair(&mut g, "local", c.root_local_feat)?;
        let has_global = has_pair(&mut g, "global", c.root_global_feat)?;
        let num_tokens = g.input("num_tokens", DType::U32, &[batch, 1])?;
        let r = names::ROOT;
        // Projections, then `emb * has + no_emb * (1 - has)` (#L141-152).
        let mut blended = Vec::new();
        for (x, proj, no, (has, not_has)) in [
            (poses, "_proj_local_pose", "_no_local_pose_emb", has_pose),
            (
                local_root,
                "_proj_local_root_value",
                "_no_local_root_emb",
                has_local,
            ),
            (
                global_root,
                "_proj_global_root_value",
                "_no_global_root_emb",
                has_global,
            ),
        ] {
            let e = w.linear(&mut g, x, &format!("{r}{proj}"), Activation::None)?;
            let no = w.get(&mut g, &format!("{r}{no}"))?;
            let a = g.mul(e, has)?;
            let b = g.mul(not_has, no)?;
            blended.push(g.add(a, b)?);
        }
        let fpt = c.frames_per_token();
        let mut halves = Vec::new();
        for (start, block) in [(0, "_proj_start_input."), (fpt, "_proj_end_input.")] {
            let pieces = blended
                .iter()
                .map(|&t| g.slice(t, 1, start, fpt))
                .collect::<Result<Vec<_>>>()?;
            let cat = g.concat(&pieces, 2)?;
            halves.push(w.fc_block(&mut g, cat, &format!("{r}{block}"), c.root_mlp_layers)?);
        }
        let frame_emb = g.concat(&halves, 1)?;
        let pos = w.get_f32(&mut g, &format!("{r}_input_position_emb.weight"))?;
        let positioned = g.add(frame_emb, pos)?;
        let table = w.get(&mut g, &format!("{r}_proj_input_num_tokens.weight"))?;
        let tok = g.embedding(num_tokens, table)?;
        let mut x = g.concat(&[tok, positioned], 1)?;
        for l in 0..c.root_layers_shared {
            x = w.encoder_layer(
                &mut g,
                x,
                &format!("{r}_shared_transformer_model.layers.{l}."),
                c.root_n_head,
                None,
            )?;
        }
        let t0 = g.slice(x, 1, 0, 1)?;
        let logits = w.linear(
            &mut g,
            t0,
            &format!("{r}_proj_num_token_output_logit"),
            Activation::None,
        )?;
        for t in [frame_emb, positioned, logits] {
            g.output(t);
        }
        Ok(RootStage1 {
            graph: g,
            batch,
            global_root,
            local_root,
            poses,
            has_pose,
            has_local,
            has_global,
            num_tokens,
            frame_emb,
            positioned,
            logits,
        })
    }
}

/// Root stage 2 and the convolutional root head (`root_backbone.py#L209-265`).
pub struct RootStage2 {
    pub graph: Graph,
    /// `[batch, 1 + 8 + max_tokens, E]`: the chosen length's embedding, the positioned frame
    /// embeddings and the sin/cos table, assembled by the host.
    pub tokens: TensorId,
    /// u32 `[batch, 1 + 8 + max_tokens]`: 1 = attend.
    pub key_mask: TensorId,
    /// `[batch, max_tokens, E]`: 1 at valid positions (the fast path's zero padded outputs).
    pub out_mask: TensorId,
    pub conv: ConvDecoderInputs,
    /// `[batch, max_tokens, E]`.
    pub stage2: TensorId,
    /// `[batch, frames, 5]`: the normalized global root trajectory.
    pub root: TensorId,
}

impl RootStage2 {
    /// The graph for `batch` plans.
    pub fn build(m: &MotionBricksModel, batch: usize) -> Result<RootStage2> {
        let c = &m.config;
        let mut g = Graph::new();
        let mut w = Weights::new(m);
        let e = c.root_n_embd;
        let prefix = 1 + 2 * c.frames_per_token();
        let len = prefix + c.max_tokens;
        let tokens = g.input("tokens", DType::F32, &[batch, len, e])?;
        let key_mask = g.input("key_mask", DType::U32, &[batch, len])?;
        let out_mask = g.input("out_mask", DType::F32, &[batch, c.max_tokens, e])?;
        let conv = ConvDecoderInputs::new(&mut g, "root_conv", &c.root_conv, batch, c.max_tokens)?;
        let r = names::ROOT;
        let mut x = tokens;
        for l in 0..c.root_layers_token {
            x = w.encoder_layer(
                &mut g,
                x,
                &format!("{r}_root_token_transformer_model.layers.{l}."),
                c.root_n_head,
                Some(key_mask),
            )?;
        }
        let last = g.slice(x, 1, prefix, c.max_tokens)?;
        let stage2 = g.mul(last, out_mask)?;
        let xt = g.transpose(stage2, 1, 2)?;
        let y = conv_decoder(
            &mut g,
            &mut w,
            &format!("{r}_conv_output."),
            &c.root_conv,
            xt,
            &conv,
        )?;
        let root = g.transpose(y, 1, 2)?;
        g.output(stage2);
        g.output(root);
        Ok(RootStage2 {
            graph: g,
            tokens,
            key_mask,
            out_mask,
            conv,
            stage2,
            root,
        })
    }
}

/// The pose model (`motion_backbone/neural_modules/pose_backbone.py#L110-175`), token
/// sampling, the codebook lookup and the VQ decoder (`vqvae/neural_modules/vqvae.py#L145-164`).
pub struct PoseDecode {
    pub graph: Graph,
    pub sampling: Sampling,
    /// u32 `[batch, max_tokens, heads]`: input token ids plus `(codes + 1) head` (all MASK in
    /// the released one-pass path).
    pub token_ids: TensorId,
    /// `[batch, frames, 4]`: normalized `(x, z, cos, sin)` of the predicted global root.
    pub root_cond: TensorId,
    /// `[batch, frames, 304]`: dense pose conditions (also the decoder's target).
    pub pose_cond: TensorId,
    /// `has` / `1 - has` of the pose conditions over `[batch, frames, pose_feat_width / fpt]`.
    pub has_cond: (TensorId, TensorId),
    /// u32 `[batch, max_tokens]`: `num_tokens - min_tokens` at every position.
    pub length_ids: TensorId,
    /// u32 `[batch, max_tokens]`: 1 at valid positions.
    pub key_mask: TensorId,
    /// `[batch, max_tokens, E]`: 1 at valid positions.
    pub out_mask: TensorId,
    /// `[batch, max_tokens, heads, codes]`: the uniforms (Gumbel only).
    pub uniforms: Option<TensorId>,
    pub conv: ConvDecoderInputs,
    /// `[batch, max_tokens, heads, codes]`.
    pub logits: TensorId,
    /// u32 `[batch, max_tokens, heads]`.
    pub tokens: TensorId,
    /// `[batch, frames, 413]`: the normalized local representation.
    pub decoded: TensorId,
}

impl PoseDecode {
    /// The graph for `batch` plans, sampling tokens by `sampling`.
    pub fn build(m: &MotionBricksModel, batch: usize, sampling: Sampling) -> Result<PoseDecode> {
        let c = &m.config;
        let mut g = Graph::new();
        let mut w = Weights::new(m);
        let (t, fpt) = (c.max_tokens, c.frames_per_token());
        let frames = c.max_frames();
        let (heads, codes) = (c.code_heads, c.codes);
        let chunk = c.pose_feat_width / fpt;
        let token_ids = g.input("token_ids", DType::U32, &[batch, t, heads])?;
        let root_cond = g.input(
            "root_cond",
            DType::F32,
            &[batch, frames, dims::POSE_ROOT_COND],
        )?;
        let pose_cond = g.input("pose_cond", DType::F32, &[batch, frames, dims::POSE])?;
        let has_cond = (
            g.input("has_cond", DType::F32, &[batch, frames, chunk])?,
            g.input("not_has_cond", DType::F32, &[batch, frames, chunk])?,
        );
        let length_ids = g.input("length_ids", DType::U32, &[batch, t])?;
        let key_mask = g.input("key_mask", DType::U32, &[batch, t])?;
        let out_mask = g.input("out_mask", DType::F32, &[batch, t, c.pose_n_embd])?;
        let uniforms = match sampling {
            Sampling::Gumbel => Some(g.input("uniforms", DType::F32, &[batch, t, heads, codes])?),
            Sampling::Argmax => None,
        };
        let conv = ConvDecoderInputs::new(&mut g, "vq", &c.decoder, batch, t)?;
        let p = names::POSE;

        let rc = g.reshape(root_cond, &[batch, t, fpt * dims::POSE_ROOT_COND])?;
        let root_emb = w.linear(
            &mut g,
            rc,
            &format!("{p}_proj_local_root_values"),
            Activation::None,
        )?;
        let cond_emb = w.linear(
            &mut g,
            pose_cond,
            &format!("{p}_proj_local_pose"),
            Activation::None,
        )?;
        let table = w.get(&mut g, &format!("{p}_pose_token_emb.weight"))?;
        let te = g.embedding(token_ids, table)?;
        let te = g.reshape(te, &[batch, t, heads * c.code_dim])?;
        let te = w.fc_block(
            &mut g,
            te,
            &format!("{p}_proj_pose_token_emb."),
            c.pose_mlp_layers,
        )?;
        let te = g.reshape(te, &[batch, frames, chunk])?;
        // `cond * has + token * (1 - has)` (#L145-147).
        let a = g.mul(cond_emb, has_cond.0)?;
        let b = g.mul(te, has_cond.1)?;
        let pose_emb = g.add(a, b)?;
        let pose_emb = g.reshape(pose_emb, &[batch, t, c.pose_feat_width])?;
        let len_table = w.get(&mut g, &format!("{p}_proj_num_valid_positions.weight"))?;
        let len_emb = g.embedding(length_ids, len_table)?;
        let cat = g.concat(&[pose_emb, root_emb, len_emb], 2)?;
        // ReLU before adding the sin/cos table (#L157-161).
        let x = w.linear(&mut g, cat, &format!("{p}_proj_input.0"), Activation::Relu)?;
        let pe = w.table(&mut g, &format!("{p}_position_emb.embed"))?;
        let mut x = g.add(x, pe)?;
        for l in 0..c.pose_layers {
            x = w.encoder_layer(
                &mut g,
                x,
                &format!("{p}_transformer_model.layers.{l}."),
                c.pose_n_head,
                Some(key_mask),
            )?;
        }
        let x = g.mul(x, out_mask)?;
        let logits = w.linear(
            &mut g,
            x,
            &format!("{p}_proj_pose_output_logit"),
            Activation::None,
        )?;
        let logits = g.reshape(logits, &[batch, t, heads, codes])?;
        let tokens = match uniforms {
            Some(u) => g.gumbel(logits, Some(u), 1.0, 0, 0)?,
            None => g.argmax(logits)?,
        };
        // Codebook lookup per head, concatenated in head order (`quantize_cnn_multihead.py#L66-73`).
        let cb = m.tensor(names::VQ_CODEBOOK)?.to_f32_vec()?;
        let per = codes * c.code_dim;
        let mut parts = Vec::new();
        for h in 0..heads {
            let tab = g.weight(
                &format!("{}.{h}", names::VQ_CODEBOOK),
                HostTensor::from_f32(&[codes, c.code_dim], &cb[h * per..(h + 1) * per])?,
            )?;
            let ids = g.slice(tokens, 2, h, 1)?;
            let ids = g.reshape(ids, &[batch, t])?;
            parts.push(g.embedding(ids, tab)?);
        }
        let codes_t = g.concat(&parts, 2)?;
        let xt = g.transpose(codes_t, 1, 2)?;
        let y = conv_decoder(&mut g, &mut w, names::VQ_DECODER, &c.decoder, xt, &conv)?;
        let decoded = g.transpose(y, 1, 2)?;
        for o in [logits, tokens, decoded] {
            g.output(o);
        }
        Ok(PoseDecode {
            graph: g,
            sampling,
            token_ids,
            root_cond,
            pose_cond,
            has_cond,
            length_ids,
            key_mask,
            out_mask,
            uniforms,
            conv,
            logits,
            tokens,
            decoded,
        })
    }
}
