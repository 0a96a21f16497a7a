//! [`Shared`]: the device state one `VulkanBackend` hands to each of its recordings
//! (context, pipelines, memory), in its own file so that the recording and the backend both
//! import it without importing each other.

use std::sync::Arc;

use super::context::Context;
use super::memory::{Memory, VulkanBuffer};
use super::pipeline::Pipelines;

/// What every recording and buffer of one backend shares.
pub(crate) struct Shared {
    /// Instance, device, queue and limits.
    pub ctx: Arc<Context>,
    /// The compute pipelines, created on first use.
    pub pipelines: Pipelines,
    /// Buffer allocation, uploads and readbacks.
    pub memory: Memory,
    /// Bound for absent optional operands.
    pub dummy: VulkanBuffer,
    /// Whether recordings write timestamps (`KINEMA_PROFILE`, `bench`'s GPU times).
    pub profile: bool,
}
