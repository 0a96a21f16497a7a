//! Errors of the file-format layer. Every variant names the format and, where there is one,
//! the tensor, key or entry at fault, so a message read in a log points at the problem.

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The file ended before a field it declares.
    #[error(
        "{format}: truncated: {what} needs {need} bytes at offset {offset}, the file has {len}"
    )]
    Truncated {
        format: &'static str,
        what: String,
        offset: u64,
        need: u64,
        len: u64,
    },
    /// A field holds a value the format does not allow.
    #[error("{format}: {msg}")]
    Invalid { format: &'static str, msg: String },
    /// Valid in the format, but not something kinema reads.
    #[error("{format}: unsupported: {msg}")]
    Unsupported { format: &'static str, msg: String },
    #[error("{format}: no tensor named {name:?}")]
    MissingTensor { format: &'static str, name: String },
    /// A name that must be unique (tensor, metadata key, archive entry) occurs twice.
    #[error("{format}: duplicate {what} {name:?}")]
    Duplicate {
        format: &'static str,
        what: &'static str,
        name: String,
    },
    #[error("{format}: no metadata key {key:?}")]
    MissingKey { format: &'static str, key: String },
    /// A metadata value of another type than the caller asked for.
    #[error("{format}: metadata key {key:?} holds {found}, expected {expected}")]
    WrongType {
        format: &'static str,
        key: String,
        expected: &'static str,
        found: String,
    },
    /// A size the file declares that is beyond what kinema accepts (a header, a
    /// decompression ratio, a nesting depth), guarding against memory exhaustion.
    #[error("{format}: {what} is {value}, above the limit of {limit}")]
    Limit {
        format: &'static str,
        what: String,
        value: u64,
        limit: u64,
    },
    /// An error inside one entry of an archive (an `.npy` member of an `.npz`).
    #[error("{format} entry {entry:?}: {source}")]
    InEntry {
        format: &'static str,
        entry: String,
        #[source]
        source: Box<crate::Error>,
    },
    /// An error in the file at `path` (the message of a parser that saw only bytes, with the
    /// file it came from).
    #[error("{}: {source}", path.display())]
    InFile {
        path: std::path::PathBuf,
        #[source]
        source: Box<crate::Error>,
    },
    /// Writing to a caller-supplied stream failed (file writes report `Error::Io` with the path).
    #[error("{format}: write failed: {source}")]
    Write {
        format: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl FormatError {
    pub(crate) fn invalid(format: &'static str, msg: impl Into<String>) -> FormatError {
        FormatError::Invalid {
            format,
            msg: msg.into(),
        }
    }

    pub(crate) fn unsupported(format: &'static str, msg: impl Into<String>) -> FormatError {
        FormatError::Unsupported {
            format,
            msg: msg.into(),
        }
    }

    /// No tensor named `name` in the file.
    pub(crate) fn missing_tensor(format: &'static str, name: &str) -> crate::Error {
        FormatError::MissingTensor {
            format,
            name: name.to_string(),
        }
        .into()
    }

    /// Wraps the failure of a write to a caller-supplied stream (for `map_err`).
    pub(crate) fn write(format: &'static str) -> impl FnOnce(std::io::Error) -> crate::Error {
        move |source| FormatError::Write { format, source }.into()
    }
}
