//! Shared plumbing of the readers: where a file's bytes live, and a bounds-checked cursor.

use std::fs::File;
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
    /// Map `path` read-only.
    pub(crate) fn map(path: &Path) -> Result<Source> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
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
