//! [`Engine`]: one backend, chosen once, shared by the models loaded on it.

use std::sync::Arc;

use crate::backend::BackendInfo;
use crate::device::{AnyBackend, BackendChoice};
use crate::precision::PrecisionChoice;
use crate::{Error, Result};

/// How to build an [`Engine`]. The defaults are the command line's: `auto` backend (a real
/// GPU through Vulkan when there is one, else the CPU), `auto` precision, the machine's
/// threads (or `KINEMA_THREADS`), the first discrete GPU (or `KINEMA_VK_DEVICE`).
///
/// ```
/// use kinema::{BackendChoice, EngineOptions, PrecisionChoice};
/// let opts = EngineOptions {
///     backend: BackendChoice::Cpu,
///     precision: PrecisionChoice::Strict,
///     threads: Some(2),
///     ..EngineOptions::default()
/// };
/// # let _ = opts;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    /// CPU, Vulkan or auto (Vulkan only on a real GPU; a CPU Vulkan device such as lavapipe is
    /// taken only when asked for by `device` or `Vulkan`).
    pub backend: BackendChoice,
    /// Strict (f32 everywhere), fast (16-bit weights, cooperative matrices) or auto (fast
    /// where the backend runs it profitably; the CPU resolves auto to strict).
    pub precision: PrecisionChoice,
    /// CPU threads, 1 to 1024; `Some` asks for the CPU with `Cpu` or `Auto` (as `--threads`
    /// does) and is refused with `Vulkan`.
    pub threads: Option<usize>,
    /// A Vulkan device index as `kinema info` lists them; `Some` asks for Vulkan with `Vulkan`
    /// or `Auto` and is refused with `Cpu`.
    pub device: Option<usize>,
}

impl Default for EngineOptions {
    fn default() -> EngineOptions {
        EngineOptions {
            backend: BackendChoice::Auto,
            precision: PrecisionChoice::Auto,
            threads: None,
            device: None,
        }
    }
}

/// One backend and what was chosen. Cheap to clone: clones share the backend. `Send + Sync`.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    backend: AnyBackend,
    vulkan_unavailable: Option<String>,
}

impl Engine {
    /// Builds the backend of `opts`. Errors name the option at fault: an unusable Vulkan
    /// device, a thread count outside 1 to 1024, `threads` with `Vulkan`, `device` with `Cpu`.
    pub fn new(opts: EngineOptions) -> Result<Engine> {
        let selection = match (opts.backend, opts.threads, opts.device) {
            (_, Some(_), Some(_)) => {
                return Err(Error::InvalidArgument(
                    "EngineOptions: threads asks for the CPU and device for a Vulkan device; \
                     give one of them"
                        .into(),
                ));
            }
            (BackendChoice::Vulkan, Some(t), None) => {
                return Err(Error::InvalidArgument(format!(
                    "EngineOptions: threads = {t} applies to the CPU backend, not Vulkan; \
                     leave it None or choose BackendChoice::Cpu"
                )));
            }
            (BackendChoice::Cpu, None, Some(d)) => {
                return Err(Error::InvalidArgument(format!(
                    "EngineOptions: device = {d} is a Vulkan device index, but the backend is \
                     the CPU; leave it None or choose BackendChoice::Vulkan"
                )));
            }
            (_, Some(_), None) => opts
                .backend
                .select_with_threads(opts.precision, opts.threads)?,
            (_, None, Some(d)) => opts.backend.select_device(opts.precision, d)?,
            (_, None, None) => opts.backend.select(opts.precision)?,
        };
        Ok(Engine {
            inner: Arc::new(Inner {
                backend: selection.backend,
                vulkan_unavailable: selection.vulkan_unavailable,
            }),
        })
    }

    /// What runs: backend kind, device or ISA, resolved precision, threads.
    pub fn info(&self) -> BackendInfo {
        self.inner.backend.info()
    }

    /// Why `auto` did not take Vulkan, when it took the CPU.
    pub fn vulkan_unavailable(&self) -> Option<&str> {
        self.inner.vulkan_unavailable.as_deref()
    }

    /// The backend itself, for work below the API (drift studies, benchmarks): run generic
    /// code on it with [`AnyBackend::visit`].
    pub fn backend(&self) -> &AnyBackend {
        &self.inner.backend
    }

    /// Whether `self` and `other` share one backend (one is a clone of the other).
    pub fn same_as(&self, other: &Engine) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = self.info();
        f.debug_struct("Engine")
            .field("backend", &i.kind)
            .field("device", &i.device)
            .field("precision", &i.precision.name())
            .field("threads", &i.threads)
            .finish()
    }
}
