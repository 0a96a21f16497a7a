//! Backend-independent op descriptions: the parameters each op of the dispatch trait takes.
//! All tensors are contiguous and row-major unless a parameter says otherwise; shapes are in
//! elements. These structs are plain data so the Vulkan backend can turn them into push
//! constants, and the graph can check them when it is built.

use crate::error::{Error, Result};
use crate::tensor::DType;

/// An activation applied elementwise (alone, or fused into a linear layer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    None,
    Relu,
    /// `x if x >= 0 else slope * x`.
    LeakyRelu(f32),
    /// Exact GELU: `0.5 x (1 + erf(x / sqrt 2))`.
    Gelu,
    /// Tanh GELU: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
}

impl Activation {
    pub fn name(self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Relu => "relu",
            Activation::LeakyRelu(_) => "leaky_relu",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
        }
    }
}

/// `y[m, n] = act(x[m, k] . w[n, k]^T + bias[n])`: PyTorch's `nn.Linear` layout, weights
/// stored one output row per line. `w` may be f32, f16, bf16 or q8_0 (k a multiple of 32).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearParams {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub activation: Activation,
}

/// Batched f32 matmul: for each `b < batch`,
/// `c[b] = alpha * a[b] (m x k) . op(b[b])` where `op(B)` is `B (k x n)`, or `B^T` with `B`
/// stored `n x k` when `trans_b`. Batch strides are in elements; a stride of 0 broadcasts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchedMatmulParams {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_b: bool,
    pub alpha: f32,
    pub a_batch_stride: usize,
    pub b_batch_stride: usize,
}

/// Row-wise normalisation over the last axis: `rows x cols`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormParams {
    pub rows: usize,
    pub cols: usize,
    pub eps: f32,
}

/// `y = softmax(scale * x)` over the last axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftmaxParams {
    pub rows: usize,
    pub cols: usize,
    pub scale: f32,
}

/// Which keys each query may attend to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskKind {
    None,
    /// A `u32 [batch, kv_len]` buffer: nonzero keeps the key, zero hides it (PyTorch's
    /// `key_padding_mask` with the opposite polarity). A query whose keys are all hidden
    /// outputs zeros.
    KeyPadding,
    /// Query `i` sees keys `j <= i + (kv_len - q_len)` (bottom-right aligned, as PyTorch's
    /// `is_causal` for equal lengths).
    Causal,
}

/// Fused multi-head attention `softmax(scale q k^T + mask) v` with grouped-query heads:
/// q `[batch, q_len, q_heads, head_dim]`, k and v `[batch, kv_len, kv_heads, head_dim]`,
/// out `[batch, q_len, q_heads, head_dim]`; query head `h` reads kv head
/// `h / (q_heads / kv_heads)`. Row strides (elements between consecutive tokens) allow q, k
/// and v to be column slices of one fused QKV projection.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    pub batch: usize,
    pub q_len: usize,
    pub kv_len: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub mask: MaskKind,
    /// Elements between consecutive tokens of q (>= q_heads * head_dim).
    pub q_row_stride: usize,
    /// Elements between consecutive tokens of k and of v (>= kv_heads * head_dim).
    pub kv_row_stride: usize,
}

/// How RoPE pairs the dimensions it rotates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopePairing {
    /// `(x[i], x[i + d/2])`: GPT-NeoX / Llama in Hugging Face.
    RotateHalf,
    /// `(x[2i], x[2i+1])`: the original RoFormer / GPT-J pairing.
    Interleaved,
}

/// Rotary position embedding on `x [tokens, heads, head_dim]` (in place semantics, separate
/// output buffer), with per-token positions (i32 `[tokens]`) and an inverse-frequency table
/// (f32 `[head_dim / 2]`, so frequency scaling such as Llama 3's is computed once on the host).
/// Angle `= position * inv_freq[i]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeParams {
    pub tokens: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub pairing: RopePairing,
}

/// 1-D convolution, stride 1, PyTorch `Conv1d` layout: x `[batch, c_in, len]`,
/// w `[c_out, c_in, kernel]` (f32), bias `[c_out]`, y `[batch, c_out, out_len]` with
/// `out_len = len + 2 padding - dilation (kernel - 1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv1dParams {
    pub batch: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub len: usize,
    pub kernel: usize,
    pub padding: usize,
    pub dilation: usize,
}

impl Conv1dParams {
    pub fn out_len(&self) -> Result<usize> {
        let span = self
            .kernel
            .checked_sub(1)
            .and_then(|k| k.checked_mul(self.dilation))
            .ok_or_else(|| Error::InvalidArgument("conv1d kernel must be >= 1".into()))?;
        (self.len + 2 * self.padding)
            .checked_sub(span)
            .filter(|&l| l > 0)
            .ok_or_else(|| {
                Error::Shape(format!(
                    "conv1d: input length {} with padding {} is shorter than the kernel span {}",
                    self.len,
                    self.padding,
                    span + 1
                ))
            })
    }
}

/// Nearest-neighbour x2 upsampling along the last axis: `[rows, len] -> [rows, 2 len]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpsampleParams {
    pub rows: usize,
    pub len: usize,
}

/// Elementwise binary op on `n` elements; `b` has `b_len` elements and is repeated
/// (`b[i % b_len]`), which covers per-row bias/scale broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Mul,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinaryParams {
    pub op: BinaryOp,
    pub n: usize,
    pub b_len: usize,
}

/// Embedding gather: `out[t, :] = table[ids[t], :]` widened to f32; the table may be any
/// float dtype. An id outside `0..vocab` is an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddingParams {
    pub tokens: usize,
    pub vocab: usize,
    pub dim: usize,
}

/// A strided copy of up to [`crate::tensor::MAX_RANK`] dimensions (element strides and
/// offsets), which implements slice, transpose, concat and plain copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyParams {
    pub shape: Vec<usize>,
    pub src_strides: Vec<usize>,
    pub src_offset: usize,
    pub dst_strides: Vec<usize>,
    pub dst_offset: usize,
}

/// Masked mean over the sequence: x `[batch, seq, dim]`, mask u32 `[batch, seq]` (nonzero
/// includes the token) -> `[batch, dim]`. A row with no included token gives zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeanPoolParams {
    pub batch: usize,
    pub seq: usize,
    pub dim: usize,
}

/// Index of the first maximum of each row: `[rows, cols]` f32 -> u32 `[rows]`. A NaN counts
/// as larger than every number (as `torch.argmax`); the first NaN wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgmaxParams {
    pub rows: usize,
    pub cols: usize,
}

/// Gumbel-max sampling, MotionBricks' `gumbel_sample`
/// (`motionbricks/motion_backbone/models/sampling.py#L4-14`):
/// `token = first argmax(logit / max(T, 1e-10) + g(u))`, `g(u) = -log_safe(-log_safe(u))`,
/// `log_safe(x) = ln(max(x, 1e-20))`. Uniform `i` (row-major over `[rows, cols]`, plus
/// `counter`) is [`crate::rng::uniform`]`(seed, counter + i)` unless uniforms are
/// injected.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GumbelParams {
    pub rows: usize,
    pub cols: usize,
    pub temperature: f32,
    pub seed: u64,
    pub counter: u64,
}

/// Sinusoidal positional encoding rows `start..start+len` of width `dim` (even):
/// `pe[p, 2i] = sin(p * div_i)`, `pe[p, 2i+1] = cos(p * div_i)`,
/// `div_i = 10000^(-2i/dim)` computed in f32 as Kimodo's `PositionalEncoding`
/// (`kimodo/model/backbone.py#L253-266`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PosEncParams {
    pub start: usize,
    pub len: usize,
    pub dim: usize,
}

/// One DDIM (eta = 0) update over `n` elements, with the per-step scalars read from a
/// 4-float coefficient buffer `[sqrt_recip_ac, sqrt_recipm1_ac, sqrt_prev, sqrt_one_minus_prev]`
/// so a recorded graph can be re-submitted every step (Kimodo `DDIMSampler`,
/// `kimodo/model/diffusion.py#L113-133`, op order kept):
/// `eps = (sqrt_recip_ac * x_t - x0) / sqrt_recipm1_ac`,
/// `x_prev = x0 * sqrt_prev + sqrt_one_minus_prev * eps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdimParams {
    pub n: usize,
}

/// Classifier-free guidance over rows of `n` elements stored one after another.
/// Two rows `[cond, uncond]`: `u + w_text (c - u)`. Three rows `[text, constraint, uncond]`
/// (Kimodo's separated CFG, `kimodo/model/cfg.py#L94-129`, evaluated left to right):
/// `u + w_text (t - u) + w_constraint (c - u)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CfgParams {
    pub n: usize,
    pub rows: usize,
    pub w_text: f32,
    pub w_constraint: f32,
}

/// Kimodo's bridge between the denoiser stages, `global_root_to_local_root` with
/// `normalized=True` (`kimodo/motion_rep/reps/base.py#L107-151`): `x [rows, frames, 5]`
/// (normalised smooth root xyz, heading cos, sin) -> `out [rows, frames, 4]` (normalised
/// rot_vel, vel_x, vel_z, root_y). Per row, in f32 with upstream's operation order:
/// `g = x * sqrt(std^2 + 1e-5) + mean` (global stats), `theta = atan2(g_sin, g_cos)`,
/// `c, s = cos(theta), sin(theta)`,
/// `rot_vel[t] = fps * atan2(s[t+1] c[t] - c[t+1] s[t], c[t+1] c[t] + s[t+1] s[t])`
/// (`feature_utils.py#L15-35`), `vel[t] = fps * (p[t+1] - p[t])` on x and z
/// (`feature_utils.py#L38-72`), the last frame copying the one before, root y passed
/// through, then `(v - mean) / sqrt(std^2 + 1e-5)` with the local stats. `frames >= 2`
/// (upstream wraps around at one frame). The stds are the raw statistics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RootBridgeParams {
    pub rows: usize,
    pub frames: usize,
    pub fps: f32,
    pub global_mean: [f32; 5],
    pub global_std: [f32; 5],
    pub local_mean: [f32; 4],
    pub local_std: [f32; 4],
}

impl RootBridgeParams {
    /// Upstream's epsilon under the square root (`kimodo/motion_rep/stats.py#L65-77`).
    pub const EPS: f32 = 1e-5;

    /// `sqrt(std^2 + 1e-5)` in f32, as upstream's normalisation computes it.
    pub fn scale(std: f32) -> f32 {
        (std * std + Self::EPS).sqrt()
    }
}

/// Checks shared by every backend before an op is recorded.
pub fn expect_len(op: &'static str, what: &str, got: usize, want: usize) -> Result<()> {
    if got < want {
        return Err(Error::Shape(format!(
            "{op}: {what} has {got} elements, needs {want}"
        )));
    }
    Ok(())
}

pub fn expect_dtype(op: &'static str, what: &str, got: DType, allowed: &[DType]) -> Result<()> {
    if !allowed.contains(&got) {
        return Err(Error::DType(format!(
            "{op}: {what} is {got}, expected one of {}",
            allowed
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}
