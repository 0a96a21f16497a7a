//! Reading a model's GGUF: opening it (with a clear error for what is not a file), and its
//! metadata values with errors that name the file, the key, and the command that writes it.

use std::path::Path;

use crate::formats::{FormatError, GgufFile};
use crate::{Error, Result};

/// A GGUF file being loaded as one model: `format` prefixes every error (`"kimodo model"`),
/// `writer` says what writes such files (`kinema convert kimodo`).
pub struct Meta<'f> {
    pub file: &'f GgufFile,
    pub path: &'f Path,
    pub format: &'static str,
    pub writer: &'static str,
}

/// `format: msg` as a format error.
pub fn invalid(format: &'static str, msg: impl Into<String>) -> Error {
    FormatError::Invalid {
        format,
        msg: msg.into(),
    }
    .into()
}

/// Opens a model file memory-mapped. I/O errors name the path; a parse error is prefixed with
/// `format` and the path. A path that is not a regular file (a directory, `/dev/null`) is
/// refused with words instead of the operating system's mapping error.
pub fn open(path: &Path, format: &'static str) -> Result<GgufFile> {
    if let Ok(m) = std::fs::metadata(path)
        && !m.is_file()
    {
        let what = if m.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{what}, not a {format} file"),
            ),
        ));
    }
    GgufFile::open(path).map_err(|e| match e {
        Error::Io { .. } => e,
        e => invalid(format, format!("{}: {e}", path.display())),
    })
}

impl<'f> Meta<'f> {
    /// `file` (read from `path`) loaded as a `format` model that `writer` writes.
    pub fn new(
        file: &'f GgufFile,
        path: &'f Path,
        format: &'static str,
        writer: &'static str,
    ) -> Meta<'f> {
        Meta {
            file,
            path,
            format,
            writer,
        }
    }

    /// Refuses a file whose string `key` is not `want`: `key is "x", not "want": not a
    /// {what}`.
    pub fn expect_architecture(&self, key: &str, want: &str, what: &str) -> Result<()> {
        let arch = self.str(key)?;
        if arch != want {
            return Err(self.bad(format!("{key} is {arch:?}, not {want:?}: not a {what}")));
        }
        Ok(())
    }

    /// A metadata value, with an error that names the key and says what the file is missing.
    pub fn get<T>(
        &self,
        key: &str,
        get: impl FnOnce(&'f GgufFile, &str) -> Result<T>,
    ) -> Result<T> {
        if self.file.get(key).is_none() {
            return Err(self.bad(format!(
                "metadata key {key:?} is missing (write the file with `{}`)",
                self.writer
            )));
        }
        get(self.file, key).map_err(|e| self.bad(format!("invalid {key:?}: {e}")))
    }

    /// A string value.
    pub fn str(&self, key: &str) -> Result<&'f str> {
        self.get(key, GgufFile::get_str)
    }

    /// An unsigned integer that fits this machine's `usize`.
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.get(key, GgufFile::get_u64)?;
        usize::try_from(v).map_err(|_| self.bad(format!("{key} = {v} is too large")))
    }

    /// An f32 value.
    pub fn f32(&self, key: &str) -> Result<f32> {
        self.get(key, GgufFile::get_f32)
    }

    /// A boolean value.
    pub fn bool(&self, key: &str) -> Result<bool> {
        self.get(key, GgufFile::get_bool)
    }

    /// `format: path: msg`.
    pub fn bad(&self, msg: impl std::fmt::Display) -> Error {
        invalid(self.format, format!("{}: {msg}", self.path.display()))
    }

    /// The metadata values whose keys start with `prefix`, as (rest of the key, string
    /// value); non-string values are skipped.
    pub fn strings_under(&self, prefix: &str) -> Vec<(String, String)> {
        self.file
            .metadata()
            .iter()
            .filter_map(|(k, v)| {
                let rest = k.strip_prefix(prefix)?;
                Some((rest.to_string(), v.as_str()?.to_string()))
            })
            .collect()
    }
}
