//! One call of Kimodo's two-stage denoiser as a graph (`kimodo/model/twostage_denoiser.py`,
//! `kimodo/model/backbone.py`; `../shared/docs/upstream/kimodo.md` §1.2-1.3): the root stage,
//! the global-to-local root bridge, the body stage, for `rows` classifier-free-guidance rows
//! that share the noisy motion `x`.
//!
//! Row 0 carries the text; every other row is "unconditional", a zero text feature, so its 50
//! text tokens are `embed_text.bias` (`kimodo/model/cfg.py#L94-129`). Only the constraint row
//! (row 1 of 3) sees the constraints: `x (1 - m) + observed m` and the mask `m` concatenated
//! (`kimodo/model/twostage_denoiser.py#L98-105`, #L133-139); the other rows get a zero mask,
//! which leaves `x` as it is. Without constraints the mask is an all-zero constant, which makes
//! the constraint row identical to the unconditional one, and every row shares one input.
//!
//! Everything that does not change between DDIM steps, the text tokens, the heading token and
//! the positional-encoding tables, depends only on weights and [`Graph::constant`]s, so the
//! graph computes it once per generation in its prepare pass.

use super::config::{KimodoConfig, KimodoModel};
use crate::graph::{Graph, TensorId};
use crate::models::kit::blocks::{Attention, EncoderLayer, Linear, Mlp, Norm, NormPlacement, Qkv};
use crate::ops::{Activation, MaskKind, RootBridgeParams};
use crate::{DType, Error, Result};

/// LayerNorm epsilon of `nn.TransformerEncoderLayer` (the default, `layer_norm_eps=1e-5`).
const LN_EPS: f32 = 1e-5;

/// The tensors of one denoiser call inside a graph.
#[derive(Clone, Debug)]
pub struct Denoiser {
    /// Rows of every stage tensor: guidance rows x samples, guidance-row major (all samples'
    /// text rows, then their constraint rows, then their unconditional rows).
    pub rows: usize,
    /// Samples run side by side (each its own `x_t`).
    pub samples: usize,
    pub frames: usize,
    /// Input `[samples * frames, dim]`: the noisy motion `x_t` of each sample, normalised.
    pub x: TensorId,
    /// Input u32 `[1]`: the network's timestep (`use_timesteps[i]`, 0..num_base_steps).
    pub timestep: TensorId,
    /// Constant `[texts, llm_dim]`: the text feature of the text rows, one shared by every
    /// sample (`texts` = 1) or one per sample (`texts` = `samples`).
    pub embedding: TensorId,
    /// Rows of `embedding`: 1 or `samples`.
    pub texts: usize,
    /// Constant `[1, 2]`: `[cos a, sin a]` of the first heading angle `a`.
    pub heading: TensorId,
    /// Constant `[samples * frames, dim]`: the constraint mask as 0/1 (all zero without
    /// constraints), repeated per sample.
    pub mask: TensorId,
    /// With constraints, constants `[samples * frames, dim]` the caller writes: `[1 - mask,
    /// observed * mask, zeros]` (the zeros are the other rows' mask).
    pub imputation: Option<[TensorId; 3]>,
    /// `[rows, frames, 5]`: the root stage's normalised global root.
    pub root_out: TensorId,
    /// `[rows, frames, 4]`: the bridge's normalised local root.
    pub bridge_out: TensorId,
    /// `[rows, frames, 2 dim - 1]`: the body stage's input.
    pub body_in: TensorId,
    /// `[rows, frames, dim - 5]`.
    pub body_out: TensorId,
    /// `[rows, frames, dim]`: `cat(root_out, body_out)`.
    pub out: TensorId,
    /// Every encoder layer's output `[rows, prefix + frames, D]`, named
    /// `<stage>.layers.<l>`, root stage first (for drift studies).
    pub layers: Vec<(String, TensorId)>,
}

/// Sinusoidal tables shared by both stages.
struct Tables {
    /// `PE[0 .. prefix + frames]`.
    seq: TensorId,
    /// The time token's `PE[timestep]`, `[1, D]`.
    time: TensorId,
}

/// `t [1, ..]` stacked `rows` times along dimension 0.
fn repeat_rows(g: &mut Graph, t: TensorId, rows: usize) -> Result<TensorId> {
    if rows == 1 {
        return Ok(t);
    }
    g.concat(&vec![t; rows], 0)
}

/// Checks that the hyperparameters can make a graph at all (the tensor shapes are checked as
/// the graph is built, and a mismatch names the node).
fn check_config(c: &KimodoConfig) -> Result<()> {
    if c.num_heads == 0 || !c.latent_dim.is_multiple_of(c.num_heads) {
        return Err(Error::InvalidArgument(format!(
            "Kimodo: latent_dim {} does not split into {} heads",
            c.latent_dim, c.num_heads
        )));
    }
    if !c.latent_dim.is_multiple_of(2) || c.num_text_tokens == 0 || c.motion_dim <= 9 {
        return Err(Error::InvalidArgument(format!(
            "Kimodo: unusable config (latent_dim {}, {} text tokens, motion_dim {})",
            c.latent_dim, c.num_text_tokens, c.motion_dim
        )));
    }
    Ok(())
}

struct Stage<'a> {
    model: &'a KimodoModel,
    prefix: &'static str,
}

impl Stage<'_> {
    fn w(&self, g: &mut Graph, name: &str) -> Result<TensorId> {
        let full = format!("{}.{name}", self.prefix);
        let t = self.model.tensor(&full)?.clone();
        g.weight(&full, t)
    }

    /// `output_linear(encoder(seq))[:, prefix:]` for `motion [1 or rows, T, in]`.
    fn run(
        &self,
        g: &mut Graph,
        tables: &Tables,
        rows: usize,
        frames: usize,
        motion: TensorId,
        d: &Denoiser,
        layers: &mut Vec<(String, TensorId)>,
    ) -> Result<TensorId> {
        let c = &self.model.config;
        let (dm, nt, prefix) = (c.latent_dim, c.num_text_tokens, c.prefix_len());
        // Text block `[rows, nt, D]`: row 0 holds `W e + b` then `nt - 1` zero-text rows,
        // the others `nt` zero-text rows; a zero text row projects to the bias exactly.
        let (tw, tb) = (
            self.w(g, "embed_text.weight")?,
            self.w(g, "embed_text.bias")?,
        );
        let pe_text = g.slice(tables.seq, 0, 0, nt)?;
        let uncond = g.add(pe_text, tb)?;
        let samples = d.samples;
        let pe0 = g.slice(tables.seq, 0, 0, 1)?;
        let rest = if nt > 1 {
            Some(g.slice(uncond, 0, 1, nt - 1)?)
        } else {
            None
        };
        // The text block of one text feature `[1, llm_dim]`.
        let block = |g: &mut Graph, e: TensorId| -> Result<TensorId> {
            let real = g.linear(e, tw, Some(tb), Activation::None)?;
            let real = g.add(real, pe0)?;
            let cond = match rest {
                Some(r) => g.concat(&[real, r], 0)?,
                None => real,
            };
            g.reshape(cond, &[1, nt, dm])
        };
        let cond = if d.texts == 1 {
            let cond = block(g, d.embedding)?;
            repeat_rows(g, cond, samples)?
        } else {
            // One text feature per sample (several prompts in one batch): each sample's
            // block from its own row, computed as the single-text block is.
            let blocks = (0..d.texts)
                .map(|i| {
                    let e = g.slice(d.embedding, 0, i, 1)?;
                    block(g, e)
                })
                .collect::<Result<Vec<_>>>()?;
            g.concat(&blocks, 0)?
        };
        let uncond = g.reshape(uncond, &[1, nt, dm])?;
        let uncond = repeat_rows(g, uncond, rows - samples)?;
        let text = g.concat(&[cond, uncond], 0)?;
        // Time token: time_embed(PE[t]) + PE[nt] (`TimestepEmbedder`, backbone.py#L283-312).
        let w0 = self.w(g, "embed_timestep.time_embed.0.weight")?;
        let b0 = self.w(g, "embed_timestep.time_embed.0.bias")?;
        let w2 = self.w(g, "embed_timestep.time_embed.2.weight")?;
        let b2 = self.w(g, "embed_timestep.time_embed.2.bias")?;
        let h = g.linear(tables.time, w0, Some(b0), Activation::Silu)?;
        let time = g.linear(h, w2, Some(b2), Activation::None)?;
        let pe_t = g.slice(tables.seq, 0, nt, 1)?;
        let time = g.add(time, pe_t)?;
        let time = g.reshape(time, &[1, 1, dm])?;
        let mut pieces = vec![text, repeat_rows(g, time, rows)?];
        // Heading token: linear_first_heading_angle([cos a, sin a]) + PE[nt + 1] (#L189-208).
        if c.input_first_heading_angle {
            let hw = self.w(g, "linear_first_heading_angle.weight")?;
            let hb = self.w(g, "linear_first_heading_angle.bias")?;
            let hd = g.linear(d.heading, hw, Some(hb), Activation::None)?;
            let pe_h = g.slice(tables.seq, 0, nt + 1, 1)?;
            let hd = g.add(hd, pe_h)?;
            let hd = g.reshape(hd, &[1, 1, dm])?;
            pieces.push(repeat_rows(g, hd, rows)?);
        }
        // Motion frames: input_linear(x) + PE[prefix + t].
        let iw = self.w(g, "input_linear.weight")?;
        let ib = self.w(g, "input_linear.bias")?;
        let m = g.linear(motion, iw, Some(ib), Activation::None)?;
        let pe_m = g.slice(tables.seq, 0, prefix, frames)?;
        let m = g.add(m, pe_m)?;
        let m_rows = g.tensor(m).shape[0];
        let m = if m_rows == rows {
            m
        } else {
            repeat_rows(g, m, rows / m_rows)?
        };
        pieces.push(m);
        let mut x = g.concat(&pieces, 1)?;
        for l in 0..c.num_layers {
            x = self.layer(g, x, l)?;
            layers.push((format!("{}.layers.{l}", self.prefix), x));
        }
        let y = g.slice(x, 1, prefix, frames)?;
        let ow = self.w(g, "output_linear.weight")?;
        let ob = self.w(g, "output_linear.bias")?;
        g.linear(y, ow, Some(ob), Activation::None)
    }

    /// One post-norm `nn.TransformerEncoderLayer` (eval): `h = LN1(x + out_proj(MHA(x)))`,
    /// `y = LN2(h + linear2(gelu(linear1(h))))`, exact GELU, no mask.
    fn layer(&self, g: &mut Graph, x: TensorId, l: usize) -> Result<TensorId> {
        let heads = self.model.config.num_heads;
        let p = format!("seqTransEncoder.layers.{l}");
        let lin = |g: &mut Graph, name: &str| -> Result<Linear> {
            Ok(Linear {
                w: self.w(g, &format!("{p}.{name}.weight"))?,
                b: Some(self.w(g, &format!("{p}.{name}.bias"))?),
            })
        };
        let qkv = Linear {
            w: self.w(g, &format!("{p}.self_attn.in_proj_weight"))?,
            b: Some(self.w(g, &format!("{p}.self_attn.in_proj_bias"))?),
        };
        let out = lin(g, "self_attn.out_proj")?;
        let up = lin(g, "linear1")?;
        let down = lin(g, "linear2")?;
        let norm = |g: &mut Graph, name: &str| -> Result<Norm> {
            Ok(Norm::Layer {
                gamma: Some(self.w(g, &format!("{p}.{name}.weight"))?),
                beta: Some(self.w(g, &format!("{p}.{name}.bias"))?),
                eps: LN_EPS,
            })
        };
        let norm1 = norm(g, "norm1")?;
        let norm2 = norm(g, "norm2")?;
        EncoderLayer {
            attention: Attention {
                qkv: Qkv::Fused(qkv),
                out,
                q_heads: heads,
                kv_heads: heads,
                mask: MaskKind::None,
                mask_tensor: None,
                rope: None,
            },
            mlp: Mlp::Activation {
                up,
                act: Activation::Gelu,
                down,
            },
            norm1,
            norm2,
            placement: NormPlacement::Post,
        }
        .apply(g, x)
    }
}

/// Adds one denoiser call over `rows` CFG rows (2 or 3) and `frames` frames to `g`, without
/// constraints.
pub fn build(g: &mut Graph, model: &KimodoModel, rows: usize, frames: usize) -> Result<Denoiser> {
    build_with(g, model, rows, frames, false)
}

/// [`build`]; `constrained` (3 rows only) gives row 1 the constraint mask and the imputed
/// motion (the constants `mask` and `imputation` are written by the caller).
pub fn build_with(
    g: &mut Graph,
    model: &KimodoModel,
    rows: usize,
    frames: usize,
    constrained: bool,
) -> Result<Denoiser> {
    build_batch(g, model, rows, 1, frames, constrained)
}

/// [`build_with`] for `samples` motions side by side: one graph whose stage tensors hold
/// `rows * samples` rows (guidance-row major), every sample with its own `x_t`.
pub fn build_batch(
    g: &mut Graph,
    model: &KimodoModel,
    rows: usize,
    samples: usize,
    frames: usize,
    constrained: bool,
) -> Result<Denoiser> {
    build_batch_texts(g, model, rows, samples, 1, frames, constrained)
}

/// [`build_batch`] with `texts` text features: 1 (shared by every sample) or `samples` (one
/// per sample, row `i` of [`Denoiser::embedding`] conditioning sample `i`).
pub fn build_batch_texts(
    g: &mut Graph,
    model: &KimodoModel,
    rows: usize,
    samples: usize,
    texts: usize,
    frames: usize,
    constrained: bool,
) -> Result<Denoiser> {
    if !(texts == 1 || texts == samples) {
        return Err(Error::InvalidArgument(format!(
            "{texts} text features for {samples} samples: give one shared or one per sample"
        )));
    }
    if samples == 0 {
        return Err(Error::InvalidArgument(
            "0 samples: a batch holds at least one".into(),
        ));
    }
    let cfg_rows = rows;
    let rows = cfg_rows * samples;
    let c = &model.config;
    check_config(c)?;
    if !(cfg_rows == 2 || cfg_rows == 3) {
        return Err(Error::InvalidArgument(format!(
            "{cfg_rows} guidance rows: Kimodo's classifier-free guidance takes 2 or 3"
        )));
    }
    if constrained && cfg_rows != 3 {
        return Err(Error::InvalidArgument(format!(
            "{cfg_rows} guidance rows with constraints: the constraint row needs upstream's 3 \
             rows"
        )));
    }
    if !(2..=c.max_frames()).contains(&frames) {
        return Err(Error::InvalidArgument(format!(
            "{frames} frames: expected 2 to {} (the root velocities need 2; the positional \
             encoding holds {} tokens after the {}-token prefix)",
            c.max_frames(),
            c.max_frames(),
            c.prefix_len()
        )));
    }
    let (dim, dm) = (c.motion_dim, c.latent_dim);
    let n = samples * frames;
    let x = g.input("kimodo.x", DType::F32, &[n, dim])?;
    let timestep = g.input("kimodo.timestep", DType::U32, &[1])?;
    let embedding = g.constant("kimodo.embedding", DType::F32, &[texts, c.llm_dim])?;
    let heading = g.constant("kimodo.heading", DType::F32, &[1, 2])?;
    let mask = g.constant("kimodo.mask", DType::F32, &[n, dim])?;
    let seq = g.posenc(0, c.prefix_len() + frames, dm)?;
    let steps_pe = g.posenc(0, c.num_base_steps, dm)?;
    let time = g.embedding(timestep, steps_pe)?;
    let tables = Tables { seq, time };
    let mut d = Denoiser {
        rows,
        samples,
        frames,
        x,
        timestep,
        embedding,
        texts,
        heading,
        mask,
        imputation: None,
        root_out: x,
        bridge_out: x,
        body_in: x,
        body_out: x,
        out: x,
        layers: Vec::new(),
    };
    let mut layers = Vec::new();
    // Root stage on cat(x, mask), the same for every row when no row has constraints; with
    // them, rows [text, constraint, uncond] get [cat(x, 0), cat(x_imputed, m), cat(x, 0)].
    let constraint_x = if constrained {
        let keep = g.constant("kimodo.mask_keep", DType::F32, &[n, dim])?;
        let observed = g.constant("kimodo.observed_masked", DType::F32, &[n, dim])?;
        let zero = g.constant("kimodo.mask_zero", DType::F32, &[n, dim])?;
        d.imputation = Some([keep, observed, zero]);
        // x (1 - m) + observed m, two roundings as upstream's separate multiply and add.
        let kept = g.mul(x, keep)?;
        Some(g.add(kept, observed)?)
    } else {
        None
    };
    let zero_mask = d.imputation.map(|[_, _, z]| z);
    let per_row = |g: &mut Graph, plain: TensorId, with_mask: Option<TensorId>, width: usize| {
        let plain = g.reshape(plain, &[samples, frames, width])?;
        match with_mask {
            None => Ok(plain),
            Some(c) => {
                let c = g.reshape(c, &[samples, frames, width])?;
                g.concat(&[plain, c, plain], 0)
            }
        }
    };
    let root_in = match constraint_x {
        None => {
            let r = g.concat(&[x, mask], 1)?;
            per_row(g, r, None, 2 * dim)?
        }
        Some(cx) => {
            let zm = zero_mask.expect("constrained");
            let plain = g.concat(&[x, zm], 1)?;
            let cons = g.concat(&[cx, mask], 1)?;
            per_row(g, plain, Some(cons), 2 * dim)?
        }
    };
    let root = Stage {
        model,
        prefix: "root_model",
    };
    d.root_out = root.run(g, &tables, rows, frames, root_in, &d, &mut layers)?;
    let s = &model.stats;
    let bp = RootBridgeParams {
        rows,
        frames,
        fps: c.fps,
        global_mean: s.global_mean,
        global_std: s.global_std,
        local_mean: s.local_mean,
        local_std: s.local_std,
    };
    d.bridge_out = g.root_bridge(d.root_out, &bp)?;
    // Body stage on cat(local_root, x[..., 5:], mask) (twostage_denoiser.py#L133-139).
    let body_x = match constraint_x {
        None => {
            let b = g.slice(x, 1, 5, dim - 5)?;
            let b = g.concat(&[b, mask], 1)?;
            let b = per_row(g, b, None, 2 * dim - 5)?;
            repeat_rows(g, b, cfg_rows)?
        }
        Some(cx) => {
            let zm = zero_mask.expect("constrained");
            let b = g.slice(x, 1, 5, dim - 5)?;
            let plain = g.concat(&[b, zm], 1)?;
            let cb = g.slice(cx, 1, 5, dim - 5)?;
            let cons = g.concat(&[cb, mask], 1)?;
            per_row(g, plain, Some(cons), 2 * dim - 5)?
        }
    };
    d.body_in = g.concat(&[d.bridge_out, body_x], 2)?;
    let body = Stage {
        model,
        prefix: "body_model",
    };
    d.body_out = body.run(g, &tables, rows, frames, d.body_in, &d, &mut layers)?;
    d.out = g.concat(&[d.root_out, d.body_out], 2)?;
    d.layers = layers;
    Ok(d)
}
