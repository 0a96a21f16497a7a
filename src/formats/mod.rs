//! Model file formats: GGUF v3 (read and write), safetensors (read), npy/npz (read and write).
//! Every parser treats its input as hostile: checked arithmetic on sizes and offsets, typed
//! errors, no panic, and no allocation larger than the file justifies.

mod error;

pub use error::FormatError;
