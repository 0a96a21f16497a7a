//! Transformer blocks on the graph, shared by the models: normalisation (LayerNorm, RMSNorm),
//! the feed-forward block (an activation MLP or SwiGLU), multi-head attention (fused or split
//! projections, grouped-query heads, optional RoPE, the graph's mask kinds) and the encoder
//! layer that joins them with its norms before (pre-norm: Llama) or after (post-norm:
//! PyTorch's `nn.TransformerEncoderLayer` default, Kimodo) each residual branch.
//!
//! A block only wires graph ops; the caller binds the weights (with [`Graph::weight`]) in
//! whatever order and naming its checkpoint uses, and passes their ids in.

use crate::Result;
use crate::graph::{Graph, TensorId};
use crate::ops::{Activation, MaskKind, RopePairing};

/// A linear layer's weight `[out, in]` and optional bias `[out]`.
#[derive(Clone, Copy, Debug)]
pub struct Linear {
    pub w: TensorId,
    pub b: Option<TensorId>,
}

impl Linear {
    /// `x w^T + b`, then `act`.
    pub fn apply(&self, g: &mut Graph, x: TensorId, act: Activation) -> Result<TensorId> {
        g.linear(x, self.w, self.b, act)
    }
}

/// A normalisation over the last dimension, with its optional scale and shift.
#[derive(Clone, Copy, Debug)]
pub enum Norm {
    /// `(x - mean) / sqrt(var + eps) * gamma + beta`.
    Layer {
        gamma: Option<TensorId>,
        beta: Option<TensorId>,
        eps: f32,
    },
    /// `x / sqrt(mean(x^2) + eps) * gamma`.
    Rms { gamma: Option<TensorId>, eps: f32 },
}

impl Norm {
    /// The normalised `x`.
    pub fn apply(&self, g: &mut Graph, x: TensorId) -> Result<TensorId> {
        match *self {
            Norm::Layer { gamma, beta, eps } => g.layer_norm(x, gamma, beta, eps),
            Norm::Rms { gamma, eps } => g.rms_norm(x, gamma, eps),
        }
    }

    /// The normalised `x + r` (a post-norm residual): one fused op for LayerNorm, bit-identical
    /// to adding first.
    pub fn apply_residual(&self, g: &mut Graph, x: TensorId, r: TensorId) -> Result<TensorId> {
        match *self {
            Norm::Layer { gamma, beta, eps } => g.add_layer_norm(x, r, gamma, beta, eps),
            Norm::Rms { .. } => {
                let h = g.add(x, r)?;
                self.apply(g, h)
            }
        }
    }
}

/// The feed-forward block.
#[derive(Clone, Copy, Debug)]
pub enum Mlp {
    /// `down(act(up(x)))` (exact GELU in PyTorch's encoder layer).
    Activation {
        up: Linear,
        act: Activation,
        down: Linear,
    },
    /// `down(silu(gate(x)) * up(x))` (Llama).
    SwiGlu {
        gate: Linear,
        up: Linear,
        down: Linear,
    },
    /// The same with gate and up stacked into one projection to `[gate | up]` columns
    /// ([`Graph::weight_rows`]), its halves read in place by the SwiGLU op.
    SwiGluFused { gate_up: Linear, down: Linear },
}

impl Mlp {
    /// The block's output for `x`.
    pub fn apply(&self, g: &mut Graph, x: TensorId) -> Result<TensorId> {
        match *self {
            Mlp::Activation { up, act, down } => {
                let h = up.apply(g, x, act)?;
                down.apply(g, h, Activation::None)
            }
            Mlp::SwiGlu { gate, up, down } => {
                let a = gate.apply(g, x, Activation::None)?;
                let b = up.apply(g, x, Activation::None)?;
                let h = g.swiglu(a, b)?;
                down.apply(g, h, Activation::None)
            }
            Mlp::SwiGluFused { gate_up, down } => {
                let ab = gate_up.apply(g, x, Activation::None)?;
                let h = g.swiglu_fused(ab)?;
                down.apply(g, h, Activation::None)
            }
        }
    }
}

/// The query, key and value projections.
#[derive(Clone, Copy, Debug)]
pub enum Qkv {
    /// One projection to `[q | k | v]` columns (PyTorch's `in_proj`).
    Fused(Linear),
    /// Three projections (Llama's `q_proj`, `k_proj`, `v_proj`).
    Split { q: Linear, k: Linear, v: Linear },
}

/// Rotary position embedding applied to the queries and keys (of split projections, or the
/// leading query and key heads of each fused row).
#[derive(Clone, Copy, Debug)]
pub struct Rope {
    /// i32 `[tokens]`, one position per token of `x` (all leading dimensions flattened).
    pub positions: TensorId,
    /// `[head_dim / 2]`.
    pub inv_freq: TensorId,
    pub pairing: RopePairing,
}

/// Multi-head attention: projections, optional RoPE, the fused attention op, and the output
/// projection.
#[derive(Clone, Copy, Debug)]
pub struct Attention {
    pub qkv: Qkv,
    pub out: Linear,
    pub q_heads: usize,
    /// Equal to `q_heads` without grouped-query attention.
    pub kv_heads: usize,
    pub mask: MaskKind,
    /// The u32 `[batch, kv_len]` tensor of [`MaskKind::KeyPadding`].
    pub mask_tensor: Option<TensorId>,
    pub rope: Option<Rope>,
}

impl Attention {
    /// `out(attention(q, k, v))` for `x [batch, len, width]`.
    pub fn apply(&self, g: &mut Graph, x: TensorId) -> Result<TensorId> {
        let a = match self.qkv {
            Qkv::Fused(p) => {
                let mut qkv = p.apply(g, x, Activation::None)?;
                if let Some(r) = self.rope {
                    // Queries and keys share positions and frequencies: their heads lead each
                    // row, rotated in one pass with the values carried through.
                    let width = g.tensor(qkv).shape.last().copied().unwrap_or(0);
                    let head_dim = width / (self.q_heads + 2 * self.kv_heads).max(1);
                    let heads = self.q_heads + self.kv_heads;
                    qkv =
                        g.rope_leading(qkv, r.positions, r.inv_freq, heads, head_dim, r.pairing)?;
                }
                g.attention_qkv(
                    qkv,
                    self.mask_tensor,
                    self.q_heads,
                    self.kv_heads,
                    self.mask,
                )?
            }
            Qkv::Split { q, k, v } => {
                let mut q = q.apply(g, x, Activation::None)?;
                let mut k = k.apply(g, x, Activation::None)?;
                let v = v.apply(g, x, Activation::None)?;
                if let Some(r) = self.rope {
                    q = g.rope(q, r.positions, r.inv_freq, self.q_heads, r.pairing)?;
                    k = g.rope(k, r.positions, r.inv_freq, self.kv_heads, r.pairing)?;
                }
                g.attention(
                    q,
                    k,
                    v,
                    self.mask_tensor,
                    self.q_heads,
                    self.kv_heads,
                    self.mask,
                )?
            }
        };
        self.out.apply(g, a, Activation::None)
    }
}

/// Where an encoder layer normalises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPlacement {
    /// `h = x + attn(norm1(x))`, `y = h + mlp(norm2(h))` (Llama; `norm_first=True`).
    Pre,
    /// `h = norm1(x + attn(x))`, `y = norm2(h + mlp(h))` (`nn.TransformerEncoderLayer`'s
    /// default `norm_first=False`).
    Post,
}

/// One transformer encoder layer.
#[derive(Clone, Copy, Debug)]
pub struct EncoderLayer {
    pub attention: Attention,
    pub mlp: Mlp,
    pub norm1: Norm,
    pub norm2: Norm,
    pub placement: NormPlacement,
}

impl EncoderLayer {
    /// The layer's output for `x [batch, len, width]` (dropout is the identity at inference).
    pub fn apply(&self, g: &mut Graph, x: TensorId) -> Result<TensorId> {
        match self.placement {
            NormPlacement::Post => {
                let a = self.attention.apply(g, x)?;
                let h = self.norm1.apply_residual(g, x, a)?;
                let f = self.mlp.apply(g, h)?;
                self.norm2.apply_residual(g, h, f)
            }
            NormPlacement::Pre => {
                let n = self.norm1.apply(g, x)?;
                let a = self.attention.apply(g, n)?;
                let h = g.add(x, a)?;
                let n = self.norm2.apply(g, h)?;
                let f = self.mlp.apply(g, n)?;
                g.add(h, f)
            }
        }
    }
}

/// The 12 tensors of each PyTorch `nn.TransformerEncoderLayer` in `state_dict` order, after
/// `<encoder>.layers.<i>.` (Kimodo's stages and MotionBricks' stacks store their layers so).
pub const TORCH_ENCODER_LAYER_TENSORS: [&str; 12] = [
    "self_attn.in_proj_weight",
    "self_attn.in_proj_bias",
    "self_attn.out_proj.weight",
    "self_attn.out_proj.bias",
    "linear1.weight",
    "linear1.bias",
    "linear2.weight",
    "linear2.bias",
    "norm1.weight",
    "norm1.bias",
    "norm2.weight",
    "norm2.bias",
];

/// The shapes of [`TORCH_ENCODER_LAYER_TENSORS`] for width `d` and feed-forward width `f`.
pub fn torch_encoder_layer_shapes(d: usize, f: usize) -> [Vec<usize>; 12] {
    [
        vec![3 * d, d],
        vec![3 * d],
        vec![d, d],
        vec![d],
        vec![f, d],
        vec![f],
        vec![d, f],
        vec![d],
        vec![d],
        vec![d],
        vec![d],
        vec![d],
    ]
}

/// Projections that read the same input: `N` weights, or one weight stacking their rows in
/// order ([`Graph::weight_rows`]) that runs as one linear.
#[derive(Clone, Copy, Debug)]
pub enum Projections<const N: usize> {
    Split([TensorId; N]),
    Stacked(TensorId),
}

/// The weights of one Llama decoder layer (no biases anywhere).
#[derive(Clone, Copy, Debug)]
pub struct LlamaLayerWeights {
    /// RMSNorm before attention (`input_layernorm`, llama.cpp `attn_norm`).
    pub attn_norm: TensorId,
    /// q, k, v.
    pub qkv: Projections<3>,
    pub o: TensorId,
    /// RMSNorm before the MLP (`post_attention_layernorm`, llama.cpp `ffn_norm`).
    pub ffn_norm: TensorId,
    /// gate, up.
    pub gate_up: Projections<2>,
    pub down: TensorId,
}

impl EncoderLayer {
    /// A Llama decoder layer (`LlamaDecoderLayer`, transformers
    /// `models/llama/modeling_llama.py`): `h = x + o(attn(rope(q(n1)), rope(k(n1)), v(n1)))`
    /// with `n1 = rms_norm(x)`, then `y = h + down(silu(gate(n2)) * up(n2))` with
    /// `n2 = rms_norm(h)`; grouped-query heads, RoPE on queries and keys, `mask` as the
    /// graph's mask kinds (LLM2Vec's bidirectional encoder: none or key padding; a language
    /// model: causal). Stacked projections compute the same products as split ones, each
    /// output from the same weight row and input (a kernel may pick another summation order for
    /// the wider shape).
    pub fn llama(
        w: &LlamaLayerWeights,
        eps: f32,
        q_heads: usize,
        kv_heads: usize,
        rope: Rope,
        mask: MaskKind,
        mask_tensor: Option<TensorId>,
    ) -> EncoderLayer {
        let lin = |w| Linear { w, b: None };
        EncoderLayer {
            attention: Attention {
                qkv: match w.qkv {
                    Projections::Split([q, k, v]) => Qkv::Split {
                        q: lin(q),
                        k: lin(k),
                        v: lin(v),
                    },
                    Projections::Stacked(qkv) => Qkv::Fused(lin(qkv)),
                },
                out: lin(w.o),
                q_heads,
                kv_heads,
                mask,
                mask_tensor,
                rope: Some(rope),
            },
            mlp: match w.gate_up {
                Projections::Split([gate, up]) => Mlp::SwiGlu {
                    gate: lin(gate),
                    up: lin(up),
                    down: lin(w.down),
                },
                Projections::Stacked(gate_up) => Mlp::SwiGluFused {
                    gate_up: lin(gate_up),
                    down: lin(w.down),
                },
            },
            norm1: Norm::Rms {
                gamma: Some(w.attn_norm),
                eps,
            },
            norm2: Norm::Rms {
                gamma: Some(w.ffn_norm),
                eps,
            },
            placement: NormPlacement::Pre,
        }
    }
}
