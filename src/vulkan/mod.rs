//! The Vulkan backend. The loader is opened at run time (`ash::Entry::load`), so a machine
//! without Vulkan still runs the CPU path and can say why Vulkan is unavailable.
//!
//! Layers, bottom to top:
//! - `context`: instance, device selection, queue, timeline semaphore, limits;
//! - `memory`: buffers (gpu-allocator), zero fill, uploads and readbacks (mapped memory on
//!   UMA devices, a staging buffer otherwise);
//! - `shaders`: the embedded SPIR-V table and each shader's push-constant struct;
//! - `pipeline`: lazily created compute pipelines keyed by (shader, specialization
//!   constants), their layouts, and the on-disk pipeline cache;
//! - `shared`: the device state a backend shares with its recordings;
//! - `recording`: a [`VulkanRecording`] (one command buffer, hazard-tracked barriers,
//!   timestamps) and the generic dispatch helper every op uses;
//! - `kernels`: each op's host side (push constants, tile choice, splitting);
//! - `backend`: [`VulkanBackend`], the [`crate::backend::Backend`] implementation.
//!
//! Environment ([`VulkanOptions::from_env`]): `KINEMA_VK_DEVICE=N` picks device N as
//! `kinema info` lists them (default: a discrete GPU first); `KINEMA_PROFILE=1` prints per-op
//! GPU time after each submission; `KINEMA_VK_PIPELINE_CACHE=dir|off` places the pipeline
//! cache (default `~/.cache/kinema`); `KINEMA_VK_MAX_BINDING=bytes` lowers the binding limit,
//! `KINEMA_VK_FORCE_STAGING=1` and `KINEMA_VK_NO_PUSH_DESCRIPTOR=1` take the discrete-GPU
//! transfer path and descriptor pools (all three for testing fallbacks on lavapipe).

mod backend;
mod context;
mod kernels;
mod loader;
mod memory;
mod pipeline;
mod probe;
mod profile;
mod recording;
mod shaders;
mod shared;

use ash::vk;

pub use backend::{GUMBEL_NOISE_ULP, POSENC_ABS, ROOT_BRIDGE_ABS, VulkanBackend, VulkanOptions};
pub use memory::VulkanBuffer;
pub use probe::{DeviceSummary, probe};
pub use profile::ProfileRow;
pub use recording::VulkanRecording;

/// What went wrong in the Vulkan layer; converted into [`crate::Error::Backend`] with
/// `backend: "vulkan"` so the CPU path stays usable in the same process.
#[derive(Debug, thiserror::Error)]
pub enum VulkanError {
    /// No loader, no driver or no device: the reason for `kinema info`.
    #[error("Vulkan is unavailable: {0}")]
    Unavailable(String),
    /// A device that lacks something the backend needs.
    #[error("the device {device} lacks {what}")]
    MissingFeature { device: String, what: String },
    #[error("out of device memory while {0}")]
    OutOfDeviceMemory(String),
    /// After this every call on the backend fails; the CPU backend still works.
    #[error("the Vulkan device was lost while {0}; create a new backend (or use the CPU)")]
    DeviceLost(String),
    #[error("{what} timed out after {secs} s (is the device hung?)")]
    Timeout { what: String, secs: u64 },
    /// Any other failing Vulkan call.
    #[error("{what} failed: {result}")]
    Call { what: String, result: vk::Result },
}

impl From<VulkanError> for crate::Error {
    fn from(e: VulkanError) -> crate::Error {
        crate::Error::Backend {
            backend: "vulkan",
            msg: e.to_string(),
        }
    }
}

/// The typed error for a failed Vulkan call made while doing `what`.
pub(crate) fn vk_error(what: &str, result: vk::Result) -> VulkanError {
    match result {
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
            VulkanError::OutOfDeviceMemory(what.to_string())
        }
        vk::Result::ERROR_DEVICE_LOST => VulkanError::DeviceLost(what.to_string()),
        result => VulkanError::Call {
            what: what.to_string(),
            result,
        },
    }
}

/// An [`crate::Error::Backend`] for the Vulkan backend with a free-form message.
pub(crate) fn backend_error(msg: impl Into<String>) -> crate::Error {
    crate::Error::Backend {
        backend: "vulkan",
        msg: msg.into(),
    }
}
