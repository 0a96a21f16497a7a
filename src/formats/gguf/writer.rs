//! The GGUF writer: metadata and tensors in the order they are added, written atomically.

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::Path;

use super::{
    ALIGNMENT_KEY, DEFAULT_ALIGNMENT, FORMAT, GGUF_MAGIC, GGUF_VERSION, GgufArray, GgufValue,
    MAX_ALIGNMENT, MAX_ARRAY_DEPTH, dtype_from_ggml, ggml_from_dtype, invalid,
};
use crate::error::Result;
use crate::formats::FormatError;
use crate::formats::atomic::write_atomic;
use crate::formats::source::numel;
use crate::tensor::{DType, HostTensor, MAX_RANK, Q8_0_BLOCK};

/// Builds a GGUF file: metadata and tensors in the order they are added. Nothing touches the
/// disk until [`GgufWriter::write`], which writes a temporary file and renames it into place.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, GgufValue)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
    alignment: Option<u32>,
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Add a metadata entry. Duplicate keys, arrays nested deeper than [`MAX_ARRAY_DEPTH`]
    /// and a `general.alignment` that is not a u32 power of two up to [`MAX_ALIGNMENT`] are
    /// refused.
    pub fn add_metadata(
        &mut self,
        key: impl Into<String>,
        value: impl Into<GgufValue>,
    ) -> Result<()> {
        let key = key.into();
        let value = value.into();
        if self.keys.contains(&key) {
            return Err(FormatError::Duplicate {
                format: FORMAT,
                what: "metadata key",
                name: key,
            }
            .into());
        }
        if let GgufValue::Array(a) = &value
            && a.depth() > MAX_ARRAY_DEPTH
        {
            return Err(FormatError::Limit {
                format: FORMAT,
                what: format!("array nesting depth of metadata key {key:?}"),
                value: a.depth() as u64,
                limit: MAX_ARRAY_DEPTH as u64,
            }
            .into());
        }
        if key == ALIGNMENT_KEY {
            match value {
                GgufValue::U32(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => {
                    self.alignment = Some(a)
                }
                ref v => {
                    return Err(invalid(format!(
                        "{ALIGNMENT_KEY} must be a u32 power of two up to {MAX_ALIGNMENT}, got {v:?}"
                    )));
                }
            }
        }
        self.keys.insert(key.clone());
        self.metadata.push((key, value));
        Ok(())
    }

    /// Add a tensor (its storage is shared, not copied). U32 tensors are refused because GGUF
    /// has no u32 type; so are ranks above [`MAX_RANK`] and q8_0 tensors whose innermost
    /// dimension is not a whole number of blocks (ggml quantises rows).
    pub fn add_tensor(&mut self, name: impl Into<String>, t: &HostTensor) -> Result<()> {
        let name = name.into();
        let ggml_type = self.check_tensor(&name, t.dtype, &t.shape)?;
        let need = numel(&t.shape).and_then(|n| t.dtype.bytes_for(n));
        if need != Some(t.bytes().len()) {
            return Err(invalid(format!(
                "tensor {name:?}: {} bytes do not match {} of shape {:?}",
                t.bytes().len(),
                t.dtype,
                t.shape
            )));
        }
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            ggml_type,
            shape: t.shape.clone(),
            size: t.bytes().len(),
            data: Some(t.clone()),
        });
        Ok(())
    }

    /// Declare a tensor whose data is not in memory: its bytes are given later, in declaration
    /// order, to the [`GgufStream`] of [`GgufWriter::stream`]. The same checks as
    /// [`GgufWriter::add_tensor`] apply to the name, dtype and shape. A writer holding
    /// declared tensors can only be streamed.
    pub fn declare_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        let name = name.into();
        let ggml_type = self.check_tensor(&name, dtype, shape)?;
        let size = numel(shape)
            .and_then(|n| dtype.bytes_for(n))
            .ok_or_else(|| invalid(format!("tensor {name:?}: shape {shape:?} overflows")))?;
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            ggml_type,
            shape: shape.to_vec(),
            size,
            data: None,
        });
        Ok(())
    }

    /// The checks shared by [`GgufWriter::add_tensor`] and [`GgufWriter::declare_tensor`];
    /// returns the ggml type id.
    fn check_tensor(&self, name: &str, dtype: DType, shape: &[usize]) -> Result<u32> {
        if self.names.contains(name) {
            return Err(FormatError::Duplicate {
                format: FORMAT,
                what: "tensor",
                name: name.to_string(),
            }
            .into());
        }
        let Some(ggml_type) = ggml_from_dtype(dtype) else {
            return Err(FormatError::unsupported(
                FORMAT,
                format!("tensor {name:?} is {dtype}, which GGUF has no type for; store it as i32"),
            )
            .into());
        };
        if shape.len() > MAX_RANK {
            return Err(FormatError::unsupported(
                FORMAT,
                format!("tensor {name:?} has rank {}, above {MAX_RANK}", shape.len()),
            )
            .into());
        }
        if dtype == DType::Q8_0 && shape.last().is_none_or(|&d| d % Q8_0_BLOCK != 0) {
            return Err(invalid(format!(
                "q8_0 tensor {name:?} of shape {shape:?}: the innermost dimension must be a \
                 multiple of {Q8_0_BLOCK}"
            )));
        }
        Ok(ggml_type)
    }

    /// Total bytes of tensor data the file will hold, alignment padding included.
    pub fn data_bytes(&self) -> Option<u64> {
        let align = self.alignment();
        self.tensors.iter().try_fold(0u64, |acc, t| {
            acc.checked_add(t.size.checked_next_multiple_of(align)? as u64)
        })
    }

    /// Write the header (metadata and tensor table, computed from the declared shapes and
    /// dtypes) to `w` and return the stream that takes each tensor's bytes in order. Only the
    /// tensor being written is ever in memory: a converter produces, writes and drops one
    /// tensor at a time. Tensors added with data ([`GgufWriter::add_tensor`]) are written by
    /// the stream itself when their turn comes.
    pub fn stream<'w>(&self, w: &'w mut dyn Write) -> io::Result<GgufStream<'_, 'w>> {
        let align = self.alignment();
        let mut w = Counting { w, pos: 0 };
        self.emit_header(&mut w)?;
        let mut s = GgufStream {
            writer: self,
            w,
            next: 0,
            align,
        };
        s.write_stored()?;
        Ok(s)
    }

    fn alignment(&self) -> usize {
        self.alignment.unwrap_or(DEFAULT_ALIGNMENT) as usize
    }

    /// Write the file to `path` atomically (temporary file in the same directory, fsync,
    /// rename): `path` never holds a partial file.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        write_atomic(path, |w| self.emit(w))
    }

    /// Write the file to a stream.
    pub fn write_to(&self, mut w: impl Write) -> Result<()> {
        self.emit(&mut w).map_err(FormatError::write(FORMAT))
    }

    fn emit(&self, w: &mut dyn Write) -> io::Result<()> {
        if let Some(t) = self.tensors.iter().find(|t| t.data.is_none()) {
            return Err(io::Error::other(format!(
                "tensor {:?} was declared without data: write the file with GgufWriter::stream",
                t.name
            )));
        }
        let s = self.stream(w)?;
        s.finish()
    }

    /// Magic, counts, metadata, tensor table and the padding up to the data section.
    fn emit_header(&self, w: &mut Counting) -> io::Result<()> {
        let align = self.alignment();
        w.put(&GGUF_MAGIC)?;
        w.put(&GGUF_VERSION.to_le_bytes())?;
        w.put(&(self.tensors.len() as u64).to_le_bytes())?;
        w.put(&(self.metadata.len() as u64).to_le_bytes())?;
        let mut buf = Vec::new();
        for (k, v) in &self.metadata {
            buf.clear();
            put_string(&mut buf, k);
            buf.extend_from_slice(&v.ty().id().to_le_bytes());
            put_value(&mut buf, v);
            w.put(&buf)?;
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            buf.clear();
            put_string(&mut buf, &t.name);
            buf.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for &d in t.shape.iter().rev() {
                buf.extend_from_slice(&(d as u64).to_le_bytes());
            }
            buf.extend_from_slice(&t.ggml_type.to_le_bytes());
            buf.extend_from_slice(&(offset as u64).to_le_bytes());
            w.put(&buf)?;
            offset = offset
                .checked_add(t.size)
                .and_then(|e| e.checked_next_multiple_of(align))
                .ok_or_else(|| io::Error::other("GGUF data section size overflows usize"))?;
        }
        let zeros = [0u8; 64];
        let mut pad = w.pos.next_multiple_of(align) - w.pos;
        while pad > 0 {
            let n = pad.min(zeros.len());
            w.put(&zeros[..n])?;
            pad -= n;
        }
        Ok(())
    }
}

/// The data section of a GGUF file being written by [`GgufWriter::stream`]: each declared
/// tensor's bytes in declaration order, each padded to the alignment.
pub struct GgufStream<'a, 'w> {
    writer: &'a GgufWriter,
    w: Counting<'w>,
    next: usize,
    align: usize,
}

impl GgufStream<'_, '_> {
    /// The name, dtype and row-major shape of the tensor the stream expects next (`None`
    /// when every tensor has been written).
    pub fn next_tensor(&self) -> Option<(&str, DType, &[usize])> {
        let t = self.writer.tensors.get(self.next)?;
        Some((
            &t.name,
            dtype_from_ggml(t.ggml_type).unwrap_or(DType::F32),
            &t.shape,
        ))
    }

    /// Write the data of the declared tensor `name`, which must be the next one in
    /// declaration order and have exactly its declared size. Tensors added with data that
    /// follow it are written too.
    pub fn write_tensor(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let Some(t) = self.writer.tensors.get(self.next) else {
            return Err(io::Error::other(format!(
                "tensor {name:?}: every declared tensor is already written"
            )));
        };
        if t.name != name || t.data.is_some() {
            return Err(io::Error::other(format!(
                "tensor {name:?} written out of order: the next declared tensor is {:?}",
                t.name
            )));
        }
        if bytes.len() != t.size {
            return Err(io::Error::other(format!(
                "tensor {name:?}: {} bytes given, {} declared",
                bytes.len(),
                t.size
            )));
        }
        self.put_data(bytes)?;
        self.next += 1;
        self.write_stored()
    }

    /// Checks that every tensor was written and flushes.
    pub fn finish(self) -> io::Result<()> {
        if let Some(t) = self.writer.tensors.get(self.next) {
            return Err(io::Error::other(format!(
                "the GGUF stream ended before tensor {:?}",
                t.name
            )));
        }
        self.w.w.flush()
    }

    /// Writes the tensors with stored data from the current position on, up to the next
    /// declared one.
    fn write_stored(&mut self) -> io::Result<()> {
        while let Some(t) = self.writer.tensors.get(self.next) {
            let Some(data) = &t.data else { break };
            self.put_data(data.bytes())?;
            self.next += 1;
        }
        Ok(())
    }

    fn put_data(&mut self, b: &[u8]) -> io::Result<()> {
        self.w.put(b)?;
        // ggml pads every tensor, the last one too, and sizes the data section that way.
        let zeros = [0u8; 64];
        let mut pad = b.len().next_multiple_of(self.align) - b.len();
        while pad > 0 {
            let n = pad.min(zeros.len());
            self.w.put(&zeros[..n])?;
            pad -= n;
        }
        Ok(())
    }
}

struct PendingTensor {
    name: String,
    ggml_type: u32,
    shape: Vec<usize>,
    size: usize,
    /// `None` for a tensor declared with [`GgufWriter::declare_tensor`].
    data: Option<HostTensor>,
}

/// A writer that counts the bytes written, to place the padding.
struct Counting<'a> {
    w: &'a mut dyn Write,
    pos: usize,
}

impl Counting<'_> {
    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.pos += b.len();
        self.w.write_all(b)
    }
}

fn put_string(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

fn put_value(buf: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => buf.push(*x),
        GgufValue::I8(x) => buf.push(*x as u8),
        GgufValue::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => buf.push(u8::from(*x)),
        GgufValue::String(s) => put_string(buf, s),
        GgufValue::Array(a) => put_array(buf, a),
        GgufValue::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(buf: &mut Vec<u8>, a: &GgufArray) {
    buf.extend_from_slice(&a.elem_type().id().to_le_bytes());
    buf.extend_from_slice(&(a.len() as u64).to_le_bytes());
    fn each<T: Copy, const N: usize>(buf: &mut Vec<u8>, v: &[T], f: impl Fn(T) -> [u8; N]) {
        for &x in v {
            buf.extend_from_slice(&f(x));
        }
    }
    match a {
        GgufArray::U8(v) => buf.extend_from_slice(v),
        GgufArray::I8(v) => each(buf, v, i8::to_le_bytes),
        GgufArray::U16(v) => each(buf, v, u16::to_le_bytes),
        GgufArray::I16(v) => each(buf, v, i16::to_le_bytes),
        GgufArray::U32(v) => each(buf, v, u32::to_le_bytes),
        GgufArray::I32(v) => each(buf, v, i32::to_le_bytes),
        GgufArray::F32(v) => each(buf, v, f32::to_le_bytes),
        GgufArray::Bool(v) => each(buf, v, |b| [u8::from(b)]),
        GgufArray::String(v) => v.iter().for_each(|s| put_string(buf, s)),
        GgufArray::Array(v) => v.iter().for_each(|a| put_array(buf, a)),
        GgufArray::U64(v) => each(buf, v, u64::to_le_bytes),
        GgufArray::I64(v) => each(buf, v, i64::to_le_bytes),
        GgufArray::F64(v) => each(buf, v, f64::to_le_bytes),
    }
}
