//! Shared plumbing of the readers: where a file's bytes live, and a bounds-checked cursor.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

use super::FormatError;
use crate::error::{Error, Result};
use crate::tensor::{DType, HostTensor};

/// The bytes of a whole file: memory-mapped from disk, or held in memory.
#[derive(Clone)]
pub(crate) enum Source {
    Mapped(Arc<Mmap>),
    Owned(Arc<[u8]>),
}

impl Source {
    /// Map `path` read-only; anything but a regular file (a directory, a device, a FIFO) is
    /// refused with a message that says what it is.
    pub(crate) fn map(path: &Path) -> Result<Source> {
        let (file, _) = open_regular(path)?;
        // SAFETY: the map is read-only and lives as long as the `Arc`s that hold it. As with
        // every file mapping, another process truncating or rewriting the file while it is
        // mapped is outside what Rust can guard against; kinema's own writers never modify a
        // file in place (they write a temporary file and rename it over the old one).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        Ok(Source::Mapped(Arc::new(map)))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Source::Mapped(m) => m,
            Source::Owned(b) => b,
        }
    }

    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self, Source::Mapped(_))
    }

    /// A tensor over `offset..offset + bytes_for(shape)` (the caller has checked the range):
    /// borrowed from the map when the start is aligned for the dtype, copied otherwise.
    pub(crate) fn tensor(
        &self,
        dtype: DType,
        shape: &[usize],
        offset: usize,
    ) -> Result<HostTensor> {
        if let Source::Mapped(map) = self {
            let addr = (map.as_ptr() as usize).wrapping_add(offset);
            if addr.is_multiple_of(dtype.align()) {
                return HostTensor::from_mmap(dtype, shape, map.clone(), offset);
            }
        }
        let len = numel(shape)
            .and_then(|n| dtype.bytes_for(n))
            .ok_or_else(|| Error::Shape(format!("{dtype} tensor of shape {shape:?} overflows")))?;
        let bytes = offset
            .checked_add(len)
            .and_then(|end| self.bytes().get(offset..end))
            .ok_or_else(|| {
                Error::Shape(format!(
                    "tensor bytes {offset}..+{len} lie outside the {}-byte file",
                    self.bytes().len()
                ))
            })?;
        HostTensor::from_bytes(dtype, shape, bytes)
    }
}

/// What a path that is not a regular file is, for messages (also the output plan's words).
pub fn kind_of(ft: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, ft: std::fs::FileType) -> Error {
    Error::io(
        path,
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}, expected a regular file", kind_of(ft)),
        ),
    )
}

/// Open `path` for reading if it is a regular file (symbolic links followed), with its
/// length. The type is checked before opening, so a FIFO never blocks the open, and again on
/// the open file, so a swap in between is caught.
pub fn open_regular(path: &Path) -> Result<(File, u64)> {
    let ft = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .file_type();
    if !ft.is_file() {
        return Err(not_regular(path, ft));
    }
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(path, meta.file_type()));
    }
    Ok((file, meta.len()))
}

/// The whole of the regular file `path`, refused with [`FormatError::Limit`] when it holds
/// more than `limit` bytes (`format` names the reader in that message). The read stops at
/// `limit + 1` bytes whatever the file's length claims, so a file that grows while it is
/// read cannot exhaust memory either.
pub fn read_capped(path: &Path, limit: u64, format: &'static str) -> Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    let too_big = |value: u64| -> Error {
        FormatError::InFile {
            path: path.to_path_buf(),
            source: Box::new(
                FormatError::Limit {
                    format,
                    what: "file size".into(),
                    value,
                    limit,
                }
                .into(),
            ),
        }
        .into()
    };
    if len > limit {
        return Err(too_big(len));
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Product of the dimensions, `None` on overflow.
pub(crate) fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// A little-endian reader over a byte slice that reports every short read as
/// [`FormatError::Truncated`] naming the field.
pub(crate) struct Cursor<'a> {
    pub(crate) format: &'static str,
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(format: &'static str, buf: &'a [u8]) -> Cursor<'a> {
        Cursor {
            format,
            buf,
            pos: 0,
        }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes; `what` names the field for the error message.
    pub(crate) fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8]> {
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(FormatError::Truncated {
                format: self.format,
                what: what(),
                offset: self.pos as u64,
                need: n,
                len: self.buf.len() as u64,
            }
            .into()),
        }
    }

    pub(crate) fn array<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, what: impl FnOnce() -> String) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u16(&mut self, what: impl FnOnce() -> String) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
}

/// `f` of each `N`-byte chunk of `b` (a trailing partial chunk is ignored).
pub(crate) fn chunks<const N: usize, T>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    b.chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect()
}
