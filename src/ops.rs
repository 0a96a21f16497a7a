//! The op table and the backend-independent op descriptions.
//!
//! `for_each_op!` lists every op once: its [`Op`] variant, its parameter struct, its name
//! and its operands by role (required inputs, then optional inputs, then the output). That one
//! list generates the [`Op`] enum the graph stores, [`OpKind`] and its role table, the [`Call`]
//! enum every backend matches on (exhaustively, so a missing op is a compile error), the
//! operand check dispatch (`crate::backend::check::check`) and the op methods of
//! [`crate::Backend`]. Adding an op: `ARCHITECTURE.md`.
//!
//! All tensors are contiguous and row-major unless a parameter says otherwise; shapes are in
//! elements. The parameter structs are plain data so the Vulkan backend can turn them into
//! push constants, and the graph can check them when it is built.

use crate::error::{Error, Result};
use crate::tensor::DType;

/// The op table. `for_each_op!(m)` calls the macro `m` with every op, one entry each:
///
/// ```text
/// /// doc comment (becomes the docs of the Op variant and of the Backend method)
/// Variant(ParamsType) method_name { required, inputs ; optional, inputs } -> output [, by_hand];
/// ```
///
/// `by_hand` marks an op whose [`crate::Backend`] method keeps a signature of its own (written
/// in `backend.rs`, still routed through [`crate::Backend::record`]); every other op gets the
/// generated `fn name(&self, rec, p: &Params, inputs.., optional inputs.., output)`.
macro_rules! for_each_op {
    ($m:ident) => {
        $m! {
            /// See [`LinearParams`]. `w` is f32/f16/bf16/q8_0, `bias` f32 `[n]`.
            Linear(LinearParams) linear { x, w; bias } -> y;
            /// See [`BatchedMatmulParams`].
            BatchedMatmul(BatchedMatmulParams) batched_matmul { a, b; } -> c;
            /// `y = (x - mean) / sqrt(var + eps) * gamma + beta` with the biased variance.
            LayerNorm(NormParams) layer_norm { x; gamma, beta } -> y;
            /// `y = layer_norm(x + r)`: a post-norm block's residual sum and its LayerNorm in
            /// one pass (`nn.TransformerEncoderLayer`, `norm_first=False`:
            /// `self.norm1(x + self._sa_block(x))`, torch/nn/modules/transformer.py). Each sum
            /// is the f32 `x + r` of [`Op::Binary`] add and the norm that of [`Op::LayerNorm`],
            /// so the result is bit-identical to the two ops.
            AddLayerNorm(NormParams) add_layer_norm { x, r; gamma, beta } -> y;
            /// `y = x / sqrt(mean(x^2) + eps) * gamma`.
            RmsNorm(NormParams) rms_norm { x; gamma } -> y;
            /// See [`SoftmaxParams`].
            Softmax(SoftmaxParams) softmax { x; } -> y;
            /// See [`AttentionParams`]. `mask` is u32 `[batch, kv_len]` for
            /// [`MaskKind::KeyPadding`], else absent.
            Attention(AttentionParams) attention { q, k, v; mask } -> out;
            /// Elementwise activation over `x.len` elements (`Activation::None` copies).
            Activation(Activation) activation { x; } -> y, by_hand;
            /// `y = silu(gate) * up` over `gate.len` elements.
            Swiglu(SwigluParams) swiglu { gate, up; } -> y, by_hand;
            /// See [`RopeParams`].
            Rope(RopeParams) rope { x, positions, inv_freq; } -> y;
            /// See [`Conv1dParams`].
            Conv1d(Conv1dParams) conv1d { x, w; bias } -> y;
            /// See [`UpsampleParams`].
            Upsample(UpsampleParams) upsample_nearest2x { x; } -> y;
            /// See [`BinaryParams`].
            Binary(BinaryParams) binary { a, b; } -> y;
            /// `y = (act(x * m or x) + r * m) * m` over `p.n` elements: a masked residual
            /// unit's elementwise chain in one pass (see [`MaskedActParams`]).
            MaskedAct(MaskedActParams) masked_act { x, m; r } -> y;
            /// `y = s * x` over `x.len` elements.
            Scale(ScaleParams) scale { x; } -> y, by_hand;
            /// `out = a * x + b * y` over `x.len` elements.
            Axpby(AxpbyParams) axpby { x, y; } -> out, by_hand;
            /// `ids` u32 `[tokens]`, `table` `[vocab, dim]` any float dtype (see
            /// [`EmbeddingParams`]).
            Embedding(EmbeddingParams) embedding { ids, table; } -> out;
            /// Strided copy between buffers of the same dtype (f32, f16, bf16, i32, u32); see
            /// [`CopyParams`].
            Copy(CopyParams) copy { src; } -> dst;
            /// See [`MeanPoolParams`].
            MeanPool(MeanPoolParams) mean_pool { x, mask; } -> out;
            /// See [`ArgmaxParams`].
            Argmax(ArgmaxParams) argmax { x; } -> out;
            /// See [`GumbelParams`]. `uniforms` (f32 `[rows, cols]`) replaces the generator's
            /// draws when given.
            Gumbel(GumbelParams) gumbel { logits; uniforms } -> out;
            /// See [`PosEncParams`].
            PosEnc(PosEncParams) posenc { ; } -> out;
            /// `coef` is 4 f32: see [`DdimParams`].
            Ddim(DdimParams) ddim { x_t, x0, coef; } -> out;
            /// Kimodo's global-to-local root bridge: `x [rows, frames, 5]` ->
            /// `out [rows, frames, 4]` (see [`RootBridgeParams`]).
            RootBridge(RootBridgeParams) root_bridge { x; } -> out;
            /// `rows` holds `p.rows` rows of `p.n` elements: see [`CfgParams`].
            Cfg(CfgParams) cfg { rows; } -> out;
        }
    };
}
pub(crate) use for_each_op;

/// One operand role of an op: its name and whether it may be absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    pub name: &'static str,
    pub optional: bool,
}

/// The types [`for_each_op!`] generates here: [`Op`], [`OpKind`] and [`Call`].
macro_rules! define_ops {
    ($(
        $(#[$doc:meta])*
        $V:ident($P:ty) $name:ident { $($in:ident),* ; $($opt:ident),* } -> $out:ident
        $(, $by_hand:ident)?;
    )*) => {
        /// One op with its parameters: what a graph node stores. Its operands are listed by
        /// role ([`Op::inputs`]) beside it.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Op {
            $( $(#[$doc])* $V($P), )*
        }

        /// Which op, without its parameters.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum OpKind {
            $( $(#[$doc])* $V, )*
        }

        impl OpKind {
            /// Every op, in table order.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$V),*];

            /// The op's name: its [`crate::Backend`] method and its name in errors.
            pub fn name(self) -> &'static str {
                match self {
                    $( OpKind::$V => stringify!($name), )*
                }
            }

            /// The input roles in operand order: required ones first, then optional ones.
            pub fn inputs(self) -> &'static [Role] {
                match self {
                    $( OpKind::$V => &[
                        $( Role { name: stringify!($in), optional: false }, )*
                        $( Role { name: stringify!($opt), optional: true }, )*
                    ], )*
                }
            }

            /// The name of the output operand.
            pub fn output(self) -> &'static str {
                match self {
                    $( OpKind::$V => stringify!($out), )*
                }
            }
        }

        impl Op {
            pub fn kind(&self) -> OpKind {
                match self {
                    $( Op::$V(_) => OpKind::$V, )*
                }
            }
        }

        /// An op's parameters with its operands by name (`T` is an operand: a buffer range
        /// on a backend). Backends match on it exhaustively.
        #[derive(Clone, Debug)]
        pub enum Call<'a, T> {
            $( $(#[$doc])* $V { p: &'a $P, $($in: T,)* $($opt: Option<T>,)* $out: T }, )*
        }

        impl<'a, T: Clone> Call<'a, T> {
            /// `op` with its inputs by role (one entry per [`Op::inputs`], `None` for an
            /// absent optional input) and its output. A missing required input or a wrong
            /// number of inputs is an error.
            pub fn bind(op: &'a Op, ins: &[Option<T>], out: T) -> Result<Call<'a, T>> {
                let roles = op.inputs();
                if ins.len() != roles.len() {
                    return Err(Error::InvalidArgument(format!(
                        "{}: {} inputs given for the {} roles {:?}",
                        op.name(),
                        ins.len(),
                        roles.len(),
                        roles.iter().map(|r| r.name).collect::<Vec<_>>()
                    )));
                }
                let mut ins = ins.iter().cloned();
                let mut next = || ins.next().flatten();
                let missing = |what: &str| {
                    Error::InvalidArgument(format!("{}: input {what} is required", op.name()))
                };
                Ok(match op {
                    $( Op::$V(p) => Call::$V {
                        p,
                        $( $in: next().ok_or_else(|| missing(stringify!($in)))?, )*
                        $( $opt: next(), )*
                        $out: out,
                    }, )*
                })
            }
        }

        impl<T> Call<'_, T> {
            pub fn kind(&self) -> OpKind {
                match self {
                    $( Call::$V { .. } => OpKind::$V, )*
                }
            }
        }
    };
}

for_each_op!(define_ops);

impl Op {
    /// See [`OpKind::name`].
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// See [`OpKind::inputs`].
    pub fn inputs(&self) -> &'static [Role] {
        self.kind().inputs()
    }
}

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

/// Rotary position embedding on the first `heads` heads of each token of `x [tokens,
/// row_stride]` (in place semantics, separate output buffer of the same layout), with per-token
/// positions (i32 `[tokens]`) and an inverse-frequency table (f32 `[head_dim / 2]`, so
/// frequency scaling such as Llama 3's is computed once on the host). Angle `= position *
/// inv_freq[i]`. The elements of a row past `heads * head_dim` are copied unchanged: with
/// `row_stride = heads * head_dim` x is `[tokens, heads, head_dim]`; a fused Q/K/V projection's
/// rows rotate their query and key heads (which share positions and frequencies) in one pass
/// and carry the values through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeParams {
    pub tokens: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub pairing: RopePairing,
    /// Elements between consecutive tokens of x and y (>= heads * head_dim).
    pub row_stride: usize,
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

/// A masked residual unit's elementwise chain in one pass, over `n` elements of `x`, `m` and
/// (when given) `r`, all the same length:
///
/// ```text
/// u = pre_mask ? x * m : x
/// u = act(u)
/// u = u + r * m        (only when r is given)
/// y = u * m
/// ```
///
/// Each step is the f32 operation of the unfused op ([`Op::Binary`] mul and add,
/// [`Op::Activation`]), rounded in the same order (the residual product is rounded before the
/// sum, never a fused multiply-add). With `None`, `Relu` or `LeakyRelu` (exact activations)
/// the result is therefore bit-identical to the chain of separate ops on every backend, and to
/// the scalar reference; the smooth activations (GELU, SiLU) run each backend's own activation
/// code, so they carry [`Op::Activation`]'s error bounds against the reference. It replaces,
/// in MotionBricks' `Resnet1D` blocks (`ResConv1DBlock.forward`,
/// `motionbricks/vqvae/neural_modules/resnet.py#L45-69`: `x0 = x * mask`, `relu(x) * mask`
/// before each conv, `(x + x0) * mask` after the second), three to four dispatches with one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MaskedActParams {
    pub n: usize,
    pub act: Activation,
    /// Multiply `x` by `m` before the activation.
    pub pre_mask: bool,
}

/// `y = silu(gate) * up` over `rows` rows of `cols` values: gate and up read their rows
/// `stride` elements apart (>= cols), y is `[rows, cols]` dense. `stride = cols` is plain
/// elementwise SwiGLU; `stride = 2 cols` with up at offset `cols` of the same tensor reads the
/// two halves of one fused gate/up projection in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwigluParams {
    pub rows: usize,
    pub cols: usize,
    pub stride: usize,
}

impl SwigluParams {
    /// Plain elementwise SwiGLU over `n` contiguous values.
    pub fn contiguous(n: usize) -> SwigluParams {
        SwigluParams {
            rows: 1,
            cols: n,
            stride: n,
        }
    }
}

/// `y = s * x`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaleParams {
    pub s: f32,
}

/// `out = a * x + b * y`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AxpbyParams {
    pub a: f32,
    pub b: f32,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_takes_the_inputs_by_role() {
        let op = Op::LayerNorm(NormParams {
            rows: 1,
            cols: 1,
            eps: 1e-5,
        });
        let roles: Vec<(&str, bool)> = op.inputs().iter().map(|r| (r.name, r.optional)).collect();
        assert_eq!(roles, [("x", false), ("gamma", true), ("beta", true)]);
        assert_eq!(op.kind().output(), "y");
        match Call::bind(&op, &[Some(1), None, Some(3)], 9).unwrap() {
            Call::LayerNorm {
                x, gamma, beta, y, ..
            } => assert_eq!((x, gamma, beta, y), (1, None, Some(3), 9)),
            c => panic!("bound to {:?}", c.kind()),
        }
        let e = Call::bind(&op, &[None, Some(2), None], 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("layer_norm") && e.contains("x is required"),
            "{e}"
        );
        let e = Call::bind(&op, &[Some(1)], 0).unwrap_err().to_string();
        assert!(e.contains("1 inputs given for the 3 roles"), "{e}");
    }
}
