//! The Vulkan device layer. The loader is opened at run time, so a machine without Vulkan
//! still runs the CPU path and can say why Vulkan is unavailable.

mod probe;

pub use probe::{DeviceSummary, probe};
