//! The one dispatch trait both backends implement in full. Picking a backend at run time is
//! `crate::device`'s job; this file knows neither backend.
//!
//! Buffers are opaque handles owned by the backend (cheap to clone: they are reference
//! counted). Work is recorded into a [`Backend::Recording`] and then submitted; a recording can
//! be submitted any number of times, reading whatever its input buffers hold at that moment,
//! which is how a diffusion loop re-runs one graph 100 times without rebuilding it. The CPU
//! backend records closures and runs them on submit; the Vulkan backend records a command
//! buffer. Submission may be asynchronous: [`Backend::read`] and [`Backend::sync`] wait for it.
//!
//! Contract for every op: inputs and outputs are [`BufRef`]s (buffer + element offset + element
//! count + dtype); an output never overlaps an input; shapes come from the op's parameter
//! struct in [`crate::ops`] and are checked when the op is recorded, so a bad shape is an
//! error at record time, never a fault at run time.

pub mod check;

pub use crate::precision::{Precision, PrecisionChoice};

use crate::error::{Error, Result};
use crate::ops::*;
use crate::tensor::{DType, HostTensor};

/// A typed range of a backend buffer: `len` elements of `dtype` starting `offset` elements in.
#[derive(Clone, Debug)]
pub struct BufRef<B> {
    pub buf: B,
    pub offset: usize,
    pub len: usize,
    pub dtype: DType,
}

impl<B: Clone> BufRef<B> {
    /// The whole of a buffer allocated for `len` elements of `dtype`.
    pub fn new(buf: B, dtype: DType, len: usize) -> BufRef<B> {
        BufRef {
            buf,
            offset: 0,
            len,
            dtype,
        }
    }
    /// A sub-range of this one (elements relative to its start).
    pub fn slice(&self, start: usize, len: usize) -> Result<BufRef<B>> {
        if start.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(Error::Shape(format!(
                "slice {start}..+{len} outside a {}-element buffer range",
                self.len
            )));
        }
        Ok(BufRef {
            buf: self.buf.clone(),
            offset: self.offset + start,
            len,
            dtype: self.dtype,
        })
    }
}

/// What a backend reports about itself (for results, `kinema info` and benches).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendInfo {
    /// "cpu" or "vulkan": a label for results and tables. Code that needs a fact about the
    /// backend reads the field that states it, never this.
    pub kind: &'static str,
    /// ISA (CPU) or device name (Vulkan).
    pub device: String,
    /// The resolved mode this backend runs.
    pub precision: Precision,
    pub threads: usize,
    /// Whether fast-mode GEMMs run on cooperative matrices (Vulkan with
    /// `VK_KHR_cooperative_matrix` in [`Precision::Fast`]); false where they run the strict
    /// kernels (strict mode, the CPU, devices without cooperative matrices).
    pub cooperative_matrix: bool,
    /// The 16-bit weight dtype this backend's fast-mode GEMMs multiply, which a model narrows
    /// f32 weight matrices to in [`Precision::Fast`]: f16 on Vulkan (the cooperative matrices
    /// multiply f16; bf16 would be rounded twice), bf16 on the CPU (AVX-512 BF16 dot products).
    pub fast_weight_dtype: DType,
}

/// Every op a backend provides. Both backends implement all of it.
pub trait Backend: Send + Sync {
    type Buffer: Clone + Send + Sync + 'static;
    type Recording: Send;

    fn info(&self) -> BackendInfo;

    // --- memory ---------------------------------------------------------------------------
    /// A zero-initialised buffer of `len` elements.
    fn alloc(&self, dtype: DType, len: usize) -> Result<Self::Buffer>;
    /// Bind a host tensor (weights): the CPU borrows memory-mapped bytes without copying; a
    /// GPU uploads once and keeps the copy resident.
    fn bind_host(&self, t: &HostTensor) -> Result<Self::Buffer>;
    /// Copy little-endian bytes into a buffer range (after pending work that uses it).
    fn write(&self, dst: &BufRef<Self::Buffer>, bytes: &[u8]) -> Result<()>;
    /// Copy a buffer range out, waiting for submitted work first.
    fn read(&self, src: &BufRef<Self::Buffer>, out: &mut [u8]) -> Result<()>;

    // --- execution ------------------------------------------------------------------------
    fn begin(&self) -> Result<Self::Recording>;
    /// Run a recording (possibly asynchronously). It may be submitted again.
    fn submit(&self, rec: &Self::Recording) -> Result<()>;
    /// Wait until all submitted work has finished.
    fn sync(&self) -> Result<()>;

    // --- ops (recorded, run on submit) ----------------------------------------------------
    /// See [`LinearParams`]. `w` is f32/f16/bf16/q8_0, `bias` f32 `[n]`.
    fn linear(
        &self,
        rec: &mut Self::Recording,
        p: &LinearParams,
        x: &BufRef<Self::Buffer>,
        w: &BufRef<Self::Buffer>,
        bias: Option<&BufRef<Self::Buffer>>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    fn batched_matmul(
        &self,
        rec: &mut Self::Recording,
        p: &BatchedMatmulParams,
        a: &BufRef<Self::Buffer>,
        b: &BufRef<Self::Buffer>,
        c: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// `y = (x - mean) / sqrt(var + eps) * gamma + beta` with the biased variance.
    fn layer_norm(
        &self,
        rec: &mut Self::Recording,
        p: &NormParams,
        x: &BufRef<Self::Buffer>,
        gamma: Option<&BufRef<Self::Buffer>>,
        beta: Option<&BufRef<Self::Buffer>>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// `y = x / sqrt(mean(x^2) + eps) * gamma`.
    fn rms_norm(
        &self,
        rec: &mut Self::Recording,
        p: &NormParams,
        x: &BufRef<Self::Buffer>,
        gamma: Option<&BufRef<Self::Buffer>>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    fn softmax(
        &self,
        rec: &mut Self::Recording,
        p: &SoftmaxParams,
        x: &BufRef<Self::Buffer>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// `mask` is u32 `[batch, kv_len]` for [`MaskKind::KeyPadding`], else `None`.
    fn attention(
        &self,
        rec: &mut Self::Recording,
        p: &AttentionParams,
        q: &BufRef<Self::Buffer>,
        k: &BufRef<Self::Buffer>,
        v: &BufRef<Self::Buffer>,
        mask: Option<&BufRef<Self::Buffer>>,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// Elementwise activation over `x.len` elements (`Activation::None` copies).
    fn activation(
        &self,
        rec: &mut Self::Recording,
        act: Activation,
        x: &BufRef<Self::Buffer>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// `y = silu(gate) * up`.
    fn swiglu(
        &self,
        rec: &mut Self::Recording,
        gate: &BufRef<Self::Buffer>,
        up: &BufRef<Self::Buffer>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    fn rope(
        &self,
        rec: &mut Self::Recording,
        p: &RopeParams,
        x: &BufRef<Self::Buffer>,
        positions: &BufRef<Self::Buffer>,
        inv_freq: &BufRef<Self::Buffer>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    fn conv1d(
        &self,
        rec: &mut Self::Recording,
        p: &Conv1dParams,
        x: &BufRef<Self::Buffer>,
        w: &BufRef<Self::Buffer>,
        bias: Option<&BufRef<Self::Buffer>>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    fn upsample_nearest2x(
        &self,
        rec: &mut Self::Recording,
        p: &UpsampleParams,
        x: &BufRef<Self::Buffer>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    fn binary(
        &self,
        rec: &mut Self::Recording,
        p: &BinaryParams,
        a: &BufRef<Self::Buffer>,
        b: &BufRef<Self::Buffer>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// `y = s * x`.
    fn scale(
        &self,
        rec: &mut Self::Recording,
        s: f32,
        x: &BufRef<Self::Buffer>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// `out = a * x + b * y`.
    fn axpby(
        &self,
        rec: &mut Self::Recording,
        a: f32,
        x: &BufRef<Self::Buffer>,
        b: f32,
        y: &BufRef<Self::Buffer>,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// `ids` u32 `[tokens]`, `table` `[vocab, dim]` any float dtype.
    fn embedding(
        &self,
        rec: &mut Self::Recording,
        p: &EmbeddingParams,
        ids: &BufRef<Self::Buffer>,
        table: &BufRef<Self::Buffer>,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// Strided copy between buffers of the same dtype (f32, f16, bf16, i32, u32).
    fn copy(
        &self,
        rec: &mut Self::Recording,
        p: &CopyParams,
        src: &BufRef<Self::Buffer>,
        dst: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    fn mean_pool(
        &self,
        rec: &mut Self::Recording,
        p: &MeanPoolParams,
        x: &BufRef<Self::Buffer>,
        mask: &BufRef<Self::Buffer>,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    fn argmax(
        &self,
        rec: &mut Self::Recording,
        p: &ArgmaxParams,
        x: &BufRef<Self::Buffer>,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// `uniforms` (f32 `[rows, cols]`) replaces the generator's draws when given.
    fn gumbel(
        &self,
        rec: &mut Self::Recording,
        p: &GumbelParams,
        logits: &BufRef<Self::Buffer>,
        uniforms: Option<&BufRef<Self::Buffer>>,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    fn posenc(
        &self,
        rec: &mut Self::Recording,
        p: &PosEncParams,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// `coef` is 4 f32: see [`DdimParams`].
    fn ddim(
        &self,
        rec: &mut Self::Recording,
        p: &DdimParams,
        x_t: &BufRef<Self::Buffer>,
        x0: &BufRef<Self::Buffer>,
        coef: &BufRef<Self::Buffer>,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// Kimodo's global-to-local root bridge: `x [rows, frames, 5]` -> `out [rows, frames, 4]`
    /// (see [`RootBridgeParams`]).
    fn root_bridge(
        &self,
        rec: &mut Self::Recording,
        p: &RootBridgeParams,
        x: &BufRef<Self::Buffer>,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()>;
    /// `rows` holds `p.rows` rows of `p.n` elements.
    fn cfg(
        &self,
        rec: &mut Self::Recording,
        p: &CfgParams,
        rows: &BufRef<Self::Buffer>,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()>;
}
