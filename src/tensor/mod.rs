//! Tensors: element types, shape/stride layouts and host-side storage.

mod dtype;
mod host;
mod layout;

pub use dtype::{DType, Q8_0_BLOCK, Q8_0_BLOCK_BYTES, q8_0_dequantize_block, q8_0_quantize_block};
pub use host::{HostData, HostTensor};
pub use layout::{Layout, MAX_RANK};
