//! Errors of the file-format layer.

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
}
