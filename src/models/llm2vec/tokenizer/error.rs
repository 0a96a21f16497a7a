//! Errors of the tokenizer layer: a tokenizer file that cannot be used, or text or ids that
//! cannot be encoded or decoded. Messages name the file part or the input at fault.

/// What went wrong while loading a tokenizer or tokenizing.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The file is not a tokenizer kinema can read, or is inconsistent (the message says
    /// which part).
    #[error("tokenizer file ({format}): {msg}")]
    Invalid { format: &'static str, msg: String },
    /// A valid tokenizer of a kind kinema does not implement (another model type, normaliser
    /// or pre-tokenizer); the message names it.
    #[error("tokenizer file ({format}): unsupported: {msg}")]
    Unsupported { format: &'static str, msg: String },
    /// A size beyond what kinema accepts, guarding against memory exhaustion.
    #[error("{what} is {value}, above the limit of {limit}")]
    Limit {
        what: String,
        value: u64,
        limit: u64,
    },
    /// The pre-tokenizer regular expression failed (compilation, or its backtracking limit).
    #[error("pre-tokenizer regex: {0}")]
    Regex(String),
    /// An id with no token, in `decode` or in a caller's request.
    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    UnknownId { id: u32, vocab_size: usize },
    /// A tokenizer and a model that disagree on the vocabulary.
    #[error(
        "the tokenizer has {tokenizer} token ids but the model's embedding table has {model} rows"
    )]
    VocabMismatch { tokenizer: usize, model: usize },
    /// A string that is not valid UTF-8 (the message says where).
    #[error("invalid UTF-8: {0}")]
    Utf8(String),
    /// A requested feature the tokenizer lacks (for example a BOS token).
    #[error("{0}")]
    Missing(String),
    /// A strings file that is not a JSON list of strings.
    #[error("strings file: {0}")]
    StringsFile(String),
}

impl TokenizerError {
    pub(crate) fn invalid(format: &'static str, msg: impl Into<String>) -> TokenizerError {
        TokenizerError::Invalid {
            format,
            msg: msg.into(),
        }
    }

    pub(crate) fn unsupported(format: &'static str, msg: impl Into<String>) -> TokenizerError {
        TokenizerError::Unsupported {
            format,
            msg: msg.into(),
        }
    }
}

impl From<TokenizerError> for crate::Error {
    fn from(e: TokenizerError) -> crate::Error {
        crate::Error::Tokenizer(e.to_string())
    }
}
