//! Model file formats: GGUF v3 (read and write), safetensors (read), npy/npz (read and write).
//! Every parser treats its input as hostile: checked arithmetic on sizes and offsets, typed
//! errors, no panic, and no allocation larger than the file justifies. Every writer goes
//! through [`write_atomic`], so a destination never holds a partial file.

mod atomic;
mod error;
pub mod gguf;
pub mod npy;
pub mod npz;
pub mod safetensors;
pub mod safetensors_index;
mod source;

pub use atomic::{AtomicSet, probe_writable, write_atomic};
pub use error::FormatError;
pub use gguf::{GgufArray, GgufFile, GgufStream, GgufTensorInfo, GgufType, GgufValue, GgufWriter};
pub use npy::{NpyArray, NpyDType};
pub use npz::{NpzReader, NpzWriter};
pub use safetensors::{SafeDType, SafeTensorInfo, SafeTensors};
pub use source::{kind_of, open_regular, read_capped};
