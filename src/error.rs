//! The crate's error type. Each layer has structured variants with messages a user can act on.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A shape, stride or size that does not fit the operation.
    #[error("shape error: {0}")]
    Shape(String),
    /// A dtype the operation does not accept.
    #[error("dtype error: {0}")]
    DType(String),
    /// An option or argument outside its valid range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A file format problem (GGUF, safetensors, npy/npz).
    #[error(transparent)]
    Format(#[from] crate::formats::FormatError),
    /// A tokenizer file that cannot be used, or text or ids it cannot encode or decode (the
    /// tokenizer's own error, as text: this enum names no layer above `formats`).
    #[error("{0}")]
    Tokenizer(String),
    /// A graph that failed its checks, naming the node.
    #[error("graph node {node} ({op}): {msg}")]
    Graph {
        node: usize,
        op: &'static str,
        msg: String,
    },
    /// A kernel found bad data while running (for example a token id outside the table).
    #[error("{op}: {msg}")]
    Kernel { op: &'static str, msg: String },
    /// A backend that cannot do what was asked (unavailable device, unsupported feature).
    #[error("backend {backend}: {msg}")]
    Backend { backend: &'static str, msg: String },
    /// A run stopped because its progress callback asked to cancel (the host API's
    /// `Progress::Cancel`); nothing was produced.
    #[error("cancelled: the progress callback asked to stop (at {stage} step {step} of {total})")]
    Cancelled {
        /// The phase that was running (`sample`, `decode`, `plan`).
        stage: &'static str,
        /// Steps done when the callback asked to stop.
        step: usize,
        /// Steps in the phase.
        total: usize,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
