//! The one dispatch trait both backends implement in full, and the enum that picks one at run
//! time.
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

use check::{BufferInfo, Checked};

use crate::cpu::CpuBackend;
use crate::error::{Error, Result};
use crate::ops::*;
use crate::tensor::{DType, HostTensor};
use crate::vulkan::{VulkanBackend, VulkanOptions};

/// Arithmetic contract of a run. Every result records which mode produced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 arithmetic everywhere (f16/bf16/q8_0 weights are widened to f32 exactly before
    /// use): for parity and drift studies.
    Strict,
    /// Reduced-precision arithmetic where it is faster: bf16 dot products on CPUs with
    /// `avx512_bf16`, f16/bf16 cooperative-matrix GEMM on GPUs. Accumulation stays f32.
    Fast,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Strict => "strict",
            Precision::Fast => "fast",
        }
    }
    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "strict" => Ok(Precision::Strict),
            "fast" => Ok(Precision::Fast),
            _ => Err(Error::InvalidArgument(format!(
                "unknown precision {s:?}: expected strict or fast"
            ))),
        }
    }
}

/// The `--precision` choice: a mode, or `auto`, which each backend resolves when created: the
/// CPU to [`Precision::Strict`], Vulkan to [`Precision::Fast`] on a device with cooperative
/// matrices and to strict otherwise. [`BackendInfo::precision`] is always the resolved mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrecisionChoice {
    Strict,
    Fast,
    Auto,
}

impl PrecisionChoice {
    pub fn parse(s: &str) -> Result<PrecisionChoice> {
        match s {
            "auto" => Ok(PrecisionChoice::Auto),
            _ => Precision::parse(s).map(PrecisionChoice::from).map_err(|_| {
                Error::InvalidArgument(format!(
                    "unknown precision {s:?}: expected strict, fast or auto"
                ))
            }),
        }
    }
    /// The mode on a backend that runs fast mode profitably (`fast_available`), else strict
    /// for `Auto`; an explicit mode is kept.
    pub fn resolve(self, fast_available: bool) -> Precision {
        match self {
            PrecisionChoice::Strict => Precision::Strict,
            PrecisionChoice::Fast => Precision::Fast,
            PrecisionChoice::Auto if fast_available => Precision::Fast,
            PrecisionChoice::Auto => Precision::Strict,
        }
    }
}

impl From<Precision> for PrecisionChoice {
    fn from(p: Precision) -> PrecisionChoice {
        match p {
            Precision::Strict => PrecisionChoice::Strict,
            Precision::Fast => PrecisionChoice::Fast,
        }
    }
}

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
    /// "cpu" or "vulkan".
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

/// Every op a backend provides. Both backends implement all of it.
pub trait Backend: Send + Sync {
    type Buffer: Clone + Send + Sync + BufferInfo + 'static;
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

    /// `y = silu(gate) * up`.
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
                p: &SwigluParams,
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

/// The `--backend` choice of the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    Cpu,
    Vulkan,
    /// Vulkan when a usable device and its kernels are present, else the CPU.
    Auto,
}

impl BackendChoice {
    pub fn parse(s: &str) -> Result<BackendChoice> {
        match s {
            "cpu" => Ok(BackendChoice::Cpu),
            "vulkan" => Ok(BackendChoice::Vulkan),
            "auto" => Ok(BackendChoice::Auto),
            _ => Err(Error::InvalidArgument(format!(
                "unknown backend {s:?}: expected cpu, vulkan or auto"
            ))),
        }
    }
    /// The backend this choice stands for. `Vulkan` fails with the reason Vulkan is unusable;
    /// `Auto` takes Vulkan only when it can run every op on a real GPU (a CPU implementation
    /// such as lavapipe is slower than the CPU kernels unless `KINEMA_VK_DEVICE` asks for it),
    /// and otherwise falls back to the CPU and says why in [`Selection::vulkan_unavailable`].
    /// `precision` is resolved by the backend chosen (auto: strict on the CPU).
    pub fn select(self, precision: impl Into<PrecisionChoice>) -> Result<Selection> {
        let precision = precision.into();
        let cpu = || -> Result<AnyBackend> {
            Ok(AnyBackend::Cpu(CpuBackend::new(precision.resolve(false))?))
        };
        match self {
            BackendChoice::Cpu => Ok(Selection {
                backend: cpu()?,
                vulkan_unavailable: None,
            }),
            BackendChoice::Vulkan => Ok(Selection {
                backend: AnyBackend::Vulkan(VulkanBackend::new(precision)?),
                vulkan_unavailable: None,
            }),
            BackendChoice::Auto => match auto_vulkan(precision) {
                Ok(v) => Ok(Selection {
                    backend: AnyBackend::Vulkan(v),
                    vulkan_unavailable: None,
                }),
                Err(why) => Ok(Selection {
                    backend: cpu()?,
                    vulkan_unavailable: Some(why),
                }),
            },
        }
    }
}

/// The Vulkan backend for `--backend auto`, or why it is not used.
fn auto_vulkan(precision: PrecisionChoice) -> std::result::Result<VulkanBackend, String> {
    let opts = VulkanOptions::from_env(precision).map_err(|e| e.to_string())?;
    let requested = opts.device.is_some();
    let v = VulkanBackend::with_options(opts).map_err(|e| e.to_string())?;
    if v.is_cpu_device() && !requested {
        return Err(format!(
            "the Vulkan device {} is a CPU implementation (pick it with --backend vulkan or \
             KINEMA_VK_DEVICE={})",
            v.device_name(),
            v.device_index()
        ));
    }
    Ok(v)
}

/// A backend picked at run time.
pub enum AnyBackend {
    Cpu(CpuBackend),
    Vulkan(VulkanBackend),
}

impl AnyBackend {
    pub fn info(&self) -> BackendInfo {
        match self {
            AnyBackend::Cpu(b) => b.info(),
            AnyBackend::Vulkan(b) => b.info(),
        }
    }
}

/// What [`BackendChoice::select`] chose.
pub struct Selection {
    pub backend: AnyBackend,
    /// Why `Auto` did not take Vulkan.
    pub vulkan_unavailable: Option<String>,
}
