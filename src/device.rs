//! Device choice: which backend a run uses. Above both backends (it builds them) and below
//! everything that runs work on "the chosen backend" (the command line, benches, drift).
//!
//! [`BackendChoice::select`] turns `--backend` and `--precision` into a [`Selection`]: an
//! [`AnyBackend`] plus, for `auto`, why Vulkan was not taken. Code that runs on either backend
//! is generic over [`Backend`] and reaches the chosen one through [`AnyBackend::visit`] with a
//! [`BackendVisitor`], so the one `match` over the backends is here.

use crate::backend::{Backend, BackendInfo};
use crate::cpu::{CpuBackend, Isa};
use crate::error::{Error, Result};
use crate::precision::PrecisionChoice;
use crate::vulkan::{VulkanBackend, VulkanOptions};

/// The `--backend` choice of the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// The CPU kernels.
    Cpu,
    /// The Vulkan device of [`VulkanOptions::from_env`]; an error when there is none.
    Vulkan,
    /// Vulkan when a usable device and its kernels are present, else the CPU.
    Auto,
}

impl BackendChoice {
    /// `cpu`, `vulkan` or `auto`.
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
            Ok(AnyBackend::Cpu(CpuBackend::new(
                precision.resolve(false, false),
            )?))
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

    /// [`BackendChoice::select`] for a run that may also name CPU threads: a thread count
    /// asks for the CPU (with `cpu` or `auto`; `vulkan` ignores it), on the ISA of
    /// [`Isa::select`].
    pub fn select_with_threads(
        self,
        precision: impl Into<PrecisionChoice>,
        threads: Option<usize>,
    ) -> Result<Selection> {
        let precision = precision.into();
        Ok(match (self, threads) {
            (BackendChoice::Cpu, Some(t)) | (BackendChoice::Auto, Some(t)) => Selection {
                backend: AnyBackend::Cpu(CpuBackend::with(
                    Isa::select()?,
                    t,
                    precision.resolve(false, false),
                )?),
                vulkan_unavailable: Some("--threads asks for the CPU".into()),
            },
            (choice, _) => choice.select(precision)?,
        })
    }

    /// The Vulkan device `index` (as `kinema info` lists them) with the other settings of
    /// [`VulkanOptions::from_env`]: what a host asks for by device index. `Cpu` refuses an
    /// index.
    pub fn select_device(
        self,
        precision: impl Into<PrecisionChoice>,
        index: usize,
    ) -> Result<Selection> {
        if self == BackendChoice::Cpu {
            return Err(Error::InvalidArgument(format!(
                "Vulkan device {index} asked for with the CPU backend: choose vulkan or auto"
            )));
        }
        let mut opts = VulkanOptions::from_env(precision)?;
        opts.device = Some(index);
        Ok(Selection {
            backend: AnyBackend::Vulkan(VulkanBackend::with_options(opts)?),
            vulkan_unavailable: None,
        })
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

/// Work that runs on whichever backend was chosen: [`AnyBackend::visit`] calls
/// [`BackendVisitor::visit`] with the concrete backend, so the work is written once, generic
/// over [`Backend`].
pub trait BackendVisitor {
    /// What the work returns.
    type Output;
    /// Runs the work on `b`.
    fn visit<B: Backend>(self, b: &B) -> Self::Output;
}

/// A backend picked at run time.
pub enum AnyBackend {
    /// The CPU kernels.
    Cpu(CpuBackend),
    /// A Vulkan device.
    Vulkan(VulkanBackend),
}

impl AnyBackend {
    /// Runs `v` on the backend this holds.
    pub fn visit<V: BackendVisitor>(&self, v: V) -> V::Output {
        match self {
            AnyBackend::Cpu(b) => v.visit(b),
            AnyBackend::Vulkan(b) => v.visit(b),
        }
    }

    /// The backend's [`Backend::info`].
    pub fn info(&self) -> BackendInfo {
        struct Info;
        impl BackendVisitor for Info {
            type Output = BackendInfo;
            fn visit<B: Backend>(self, b: &B) -> BackendInfo {
                b.info()
            }
        }
        self.visit(Info)
    }

    /// The Vulkan backend, for what only a GPU has (device timestamps, the cooperative-matrix
    /// peak); `None` on the CPU.
    pub fn vulkan(&self) -> Option<&VulkanBackend> {
        match self {
            AnyBackend::Vulkan(b) => Some(b),
            AnyBackend::Cpu(_) => None,
        }
    }
}

/// What [`BackendChoice::select`] chose.
pub struct Selection {
    /// The backend the run uses.
    pub backend: AnyBackend,
    /// Why `Auto` did not take Vulkan.
    pub vulkan_unavailable: Option<String>,
}
