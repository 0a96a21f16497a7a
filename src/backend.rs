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

use check::{BufferInfo, Checked};

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
    /// Whether [`Backend::bind_host_rows`] places each part straight into one buffer (a GPU
    /// uploads them anyway), so a model may fuse projections that read the same input into one
    /// linear at no memory cost: true on Vulkan; false on the CPU, whose weights are read in
    /// place from the file's memory map and would have to be copied together.
    pub stacks_weights_in_place: bool,
}

/// The [`Backend`] op methods the op table generates: one per op not marked `by_hand`, taking
/// the op's parameters and its operands in table order and calling [`Backend::record`].
macro_rules! op_methods {
    ($(
        $(#[$doc:meta])*
        $V:ident($P:ty) $name:ident { $($in:ident),* ; $($opt:ident),* } -> $out:ident
        $(, $by_hand:ident)?;
    )*) => {
        $( op_method! { $($by_hand)? ; $(#[$doc])* $V($P) $name [$($in)*] [$($opt)*] $out } )*
    };
}

/// One generated op method (none for an op whose method is written by hand).
macro_rules! op_method {
    (by_hand ; $($rest:tt)*) => {};
    (
        ; $(#[$doc:meta])* $V:ident($P:ty) $name:ident [$($in:ident)*] [$($opt:ident)*]
        $out:ident
    ) => {
        $(#[$doc])*
        fn $name(
            &self,
            rec: &mut Self::Recording,
            p: &$P,
            $($in: &BufRef<Self::Buffer>,)*
            $($opt: Option<&BufRef<Self::Buffer>>,)*
            $out: &BufRef<Self::Buffer>,
        ) -> Result<()> {
            self.record(rec, Call::$V { p, $($in,)* $($opt,)* $out })
        }
    };
}

/// Memory a backend reports for a phase of work ([`Backend::memory_use`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemoryUse {
    /// What is counted: `"vulkan buffers"` (the bytes of every buffer our allocator holds on
    /// the device: weights, activations, staging) or `"process rss"` (the CPU backend: the
    /// process's resident set, which includes memory-mapped weight pages read and everything
    /// else the process holds; Linux `VmRSS` / `VmHWM`).
    pub what: &'static str,
    /// Bytes held now; `None` where the platform does not say.
    pub current_bytes: Option<u64>,
    /// The most bytes held since the last reset; `None` where the platform does not say.
    pub peak_bytes: Option<u64>,
}

/// Every op a backend provides. Both backends implement all of it.
pub trait Backend: Send + Sync {
    type Buffer: Clone + Send + Sync + BufferInfo + 'static;
    type Recording: Send;

    fn info(&self) -> BackendInfo;

    /// Memory held now and at peak since the last [`Backend::reset_peak_memory`] (or since
    /// the backend was made), and what is counted ([`MemoryUse::what`]).
    fn memory_use(&self) -> MemoryUse;
    /// Starts a new peak for [`Backend::memory_use`]: the peak becomes what is held now (the
    /// start of a phase whose peak is wanted).
    fn reset_peak_memory(&self);

    // --- memory ---------------------------------------------------------------------------
    /// A zero-initialised buffer of `len` elements.
    fn alloc(&self, dtype: DType, len: usize) -> Result<Self::Buffer>;
    /// Bind a host tensor (weights): the CPU borrows memory-mapped bytes without copying; a
    /// GPU uploads once and keeps the copy resident.
    fn bind_host(&self, t: &HostTensor) -> Result<Self::Buffer>;
    /// Bind host tensors of one dtype stacked along their first dimension as one weight (the
    /// caller checked that they share every other dimension): by default copied together on
    /// the host, then [`Backend::bind_host`]; a GPU uploads each part into its place in one
    /// buffer ([`BackendInfo::stacks_weights_in_place`]).
    fn bind_host_rows(&self, parts: &[HostTensor]) -> Result<Self::Buffer> {
        let first = parts
            .first()
            .ok_or_else(|| Error::InvalidArgument("bind_host_rows: no parts".into()))?;
        let mut bytes = Vec::with_capacity(parts.iter().map(|p| p.bytes().len()).sum());
        let mut rows = 0;
        for p in parts {
            bytes.extend_from_slice(p.bytes());
            rows += p.shape.first().copied().unwrap_or(1);
        }
        let mut shape = first.shape.clone();
        if let Some(r) = shape.first_mut() {
            *r = rows;
        }
        self.bind_host(&HostTensor::from_bytes(first.dtype, &shape, &bytes)?)
    }
    /// Copy little-endian bytes into a buffer range (after pending work that uses it).
    fn write(&self, dst: &BufRef<Self::Buffer>, bytes: &[u8]) -> Result<()>;
    /// Copy a buffer range out, waiting for submitted work first.
    fn read(&self, src: &BufRef<Self::Buffer>, out: &mut [u8]) -> Result<()>;
    /// Copy several buffer ranges out, waiting for submitted work first: what [`Backend::read`]
    /// does for each, in one transfer and one wait where the backend can batch them (a
    /// discrete GPU's staged reads).
    fn read_many(&self, reads: &mut [(&BufRef<Self::Buffer>, &mut [u8])]) -> Result<()> {
        for (src, out) in reads.iter_mut() {
            self.read(src, out)?;
        }
        Ok(())
    }

    // --- execution ------------------------------------------------------------------------
    fn begin(&self) -> Result<Self::Recording>;
    /// Run a recording (possibly asynchronously). It may be submitted again.
    fn submit(&self, rec: &Self::Recording) -> Result<()>;
    /// Wait until all submitted work has finished.
    fn sync(&self) -> Result<()>;

    // --- ops (recorded, run on submit) ----------------------------------------------------
    /// Record one op: the entry point of every op. The operands are checked
    /// ([`check::check`]: the same errors on every backend, at record time) and handed to
    /// [`Backend::dispatch`]. The op methods below ([`Backend::linear`], ...) build the
    /// [`Call`] and come here; the graph calls it with [`Call::bind`].
    fn record(
        &self,
        rec: &mut Self::Recording,
        call: Call<'_, &BufRef<Self::Buffer>>,
    ) -> Result<()> {
        self.dispatch(rec, check::check(call)?)
    }

    /// Record one checked op: each backend's exhaustive `match` over [`Call`], so an op
    /// missing from a backend is a compile error.
    fn dispatch(&self, rec: &mut Self::Recording, call: Checked<'_, Self::Buffer>) -> Result<()>;

    crate::ops::for_each_op!(op_methods);

    /// Elementwise activation over `x.len` elements (`Activation::None` copies).
    fn activation(
        &self,
        rec: &mut Self::Recording,
        act: Activation,
        x: &BufRef<Self::Buffer>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()> {
        self.record(rec, Call::Activation { p: &act, x, y })
    }

    /// `y = silu(gate) * up` elementwise over the gate's elements
    /// ([`SwigluParams::contiguous`]; the graph records the strided form through
    /// [`Backend::record`]).
    fn swiglu(
        &self,
        rec: &mut Self::Recording,
        gate: &BufRef<Self::Buffer>,
        up: &BufRef<Self::Buffer>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()> {
        self.record(
            rec,
            Call::Swiglu {
                p: &SwigluParams::contiguous(gate.len),
                gate,
                up,
                y,
            },
        )
    }

    /// `y = s * x`.
    fn scale(
        &self,
        rec: &mut Self::Recording,
        s: f32,
        x: &BufRef<Self::Buffer>,
        y: &BufRef<Self::Buffer>,
    ) -> Result<()> {
        self.record(
            rec,
            Call::Scale {
                p: &ScaleParams { s },
                x,
                y,
            },
        )
    }

    /// `out = a * x + b * y`.
    fn axpby(
        &self,
        rec: &mut Self::Recording,
        a: f32,
        x: &BufRef<Self::Buffer>,
        b: f32,
        y: &BufRef<Self::Buffer>,
        out: &BufRef<Self::Buffer>,
    ) -> Result<()> {
        self.record(
            rec,
            Call::Axpby {
                p: &AxpbyParams { a, b },
                x,
                y,
                out,
            },
        )
    }
}
