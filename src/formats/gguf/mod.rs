//! GGUF (v3, and v2 which has the same layout) reader and writer.
//!
//! Layout (little-endian; spec: ggml `docs/gguf.md`): magic `GGUF`, u32 version, u64 tensor
//! count, u64 metadata count, the metadata key/value pairs, the tensor infos (name, rank,
//! dimensions innermost first, ggml type id, offset into the data section), padding up to
//! `general.alignment` (default 32), then the tensor data, each tensor at a multiple of the
//! alignment.
//!
//! Shapes are exposed row-major, outermost dimension first as in PyTorch: the reverse of
//! ggml's `ne`. Tensor types read and written: F32, F16, Q8_0, I32 and BF16; llama.cpp's Q4_0
//! and Q4_1 are read and dequantised to f32 at load (`quants.rs`).
//!
//! The reader treats the file as hostile: every count is bounded by the bytes left before
//! anything is allocated for it, every size and offset is computed with checked arithmetic,
//! tensor data must lie inside the file, be aligned and not overlap another tensor's.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::FormatError;
use super::source::{Cursor, Source, numel};
use crate::error::Result;
use crate::tensor::{DType, HostTensor, MAX_RANK};

mod quants;
mod value;
mod writer;

pub use quants::BlockQuant;
pub use value::{GgufArray, GgufType, GgufValue};
pub use writer::{GgufStream, GgufWriter};

const FORMAT: &str = "gguf";

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The version the writer emits.
pub const GGUF_VERSION: u32 = 3;
/// Data alignment when the file has no `general.alignment` key.
pub const DEFAULT_ALIGNMENT: u32 = 32;
/// The metadata key that sets the data alignment (a u32 power of two).
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// Largest alignment accepted (the format allows up to 2^31; real files use 32, and a page
/// is at most 64 KiB). Bounds the padding a writer must produce for a file it read.
pub const MAX_ALIGNMENT: u32 = 1 << 20;
/// Deepest nesting of arrays inside arrays accepted (the format sets no limit; real files
/// use one level). Bounds the reader's recursion.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// GGML tensor type ids kinema reads and writes.
const GGML_F32: u32 = 0;
const GGML_F16: u32 = 1;
const GGML_Q8_0: u32 = 8;
const GGML_I32: u32 = 26;
const GGML_BF16: u32 = 30;

fn dtype_from_ggml(id: u32) -> Option<DType> {
    Some(match id {
        GGML_F32 => DType::F32,
        GGML_F16 => DType::F16,
        GGML_Q8_0 => DType::Q8_0,
        GGML_I32 => DType::I32,
        GGML_BF16 => DType::BF16,
        _ => return None,
    })
}

/// The ggml type id of a dtype; `None` for U32, which GGUF cannot store.
fn ggml_from_dtype(dtype: DType) -> Option<u32> {
    match dtype {
        DType::F32 => Some(GGML_F32),
        DType::F16 => Some(GGML_F16),
        DType::Q8_0 => Some(GGML_Q8_0),
        DType::I32 => Some(GGML_I32),
        DType::BF16 => Some(GGML_BF16),
        DType::U32 => None,
    }
}

/// Names of the other ggml types, so an unsupported-type error says what the file holds.
fn ggml_type_name(id: u32) -> &'static str {
    match id {
        2 => "Q4_0",
        3 => "Q4_1",
        6 => "Q5_0",
        7 => "Q5_1",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        12 => "Q4_K",
        13 => "Q5_K",
        14 => "Q6_K",
        15 => "Q8_K",
        16..=23 | 29 => "an IQ quantisation",
        24 => "I8",
        25 => "I16",
        27 => "I64",
        28 => "F64",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => "an unknown type",
    }
}

/// One tensor's entry in the file's tensor table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// The dtype [`GgufFile::tensor`] returns: the stored one, or f32 for a block format
    /// dequantised at load (`quant`).
    pub dtype: DType,
    /// The llama.cpp block format the data is stored in, when it is one kinema dequantises
    /// at load ([`BlockQuant`]); `None` when the data is stored as `dtype`.
    pub quant: Option<BlockQuant>,
    /// Row-major, outermost dimension first (the reverse of ggml's `ne`).
    pub shape: Vec<usize>,
    /// Byte offset of the data relative to the start of the data section.
    pub offset: usize,
    /// Bytes of data.
    pub size: usize,
}

/// A parsed GGUF file. Opened from disk it is memory-mapped and [`GgufFile::tensor`] borrows
/// the map without copying.
pub struct GgufFile {
    src: Source,
    h: Header,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.h.version)
            .field("alignment", &self.h.alignment)
            .field("metadata", &self.h.metadata.len())
            .field("tensors", &self.h.tensors.len())
            .field("mapped", &self.src.is_mapped())
            .finish()
    }
}

/// The typed metadata getters of [`GgufFile`], each [`GgufFile::typed`] with the type it
/// expects (as an error message says it) and the [`GgufValue`] accessor.
macro_rules! typed_getters {
    ($($(#[$doc:meta])* $name:ident -> $t:ty, $expected:literal, $as:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, key: &str) -> Result<$t> {
                self.typed(key, $expected, GgufValue::$as)
            }
        )*
    };
}

impl GgufFile {
    /// Memory-map and parse the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        GgufFile::from_source(Source::map(path.as_ref())?)
    }

    /// Parse a file held in memory; tensors are copied out of it.
    pub fn parse(bytes: impl Into<Arc<[u8]>>) -> Result<GgufFile> {
        GgufFile::from_source(Source::Owned(bytes.into()))
    }

    fn from_source(src: Source) -> Result<GgufFile> {
        let h = parse_header(src.bytes())?;
        Ok(GgufFile { src, h })
    }

    pub fn version(&self) -> u32 {
        self.h.version
    }
    pub fn alignment(&self) -> u32 {
        self.h.alignment
    }
    /// File offset of the data section.
    pub fn data_offset(&self) -> usize {
        self.h.data_offset
    }
    pub fn is_mapped(&self) -> bool {
        self.src.is_mapped()
    }

    /// All metadata in file order.
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.h.metadata
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.h.keys.get(key).map(|&i| &self.h.metadata[i].1)
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        f: impl FnOnce(&'a GgufValue) -> Option<T>,
    ) -> Result<T> {
        let v = self.get(key).ok_or_else(|| FormatError::MissingKey {
            format: FORMAT,
            key: key.to_string(),
        })?;
        f(v).ok_or_else(|| {
            FormatError::WrongType {
                format: FORMAT,
                key: key.to_string(),
                expected,
                found: v.type_name(),
            }
            .into()
        })
    }

    typed_getters! {
        /// An integer value that fits a u32, of any integer type.
        get_u32 -> u32, "an integer that fits u32", as_u32;
        /// A non-negative integer value of any integer type.
        get_u64 -> u64, "a non-negative integer", as_u64;
        /// An integer value that fits i64, of any integer type.
        get_i64 -> i64, "an integer that fits i64", as_i64;
        get_f32 -> f32, "f32", as_f32;
        /// An f32 or f64 value.
        get_f64 -> f64, "f32 or f64", as_f64;
        get_bool -> bool, "bool", as_bool;
        get_str -> &str, "string", as_str;
        get_array -> &GgufArray, "array", as_array;
    }

    /// The tensor table in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.h.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.h.names.get(name).map(|&i| &self.h.tensors[i])
    }

    fn info_or_err(&self, name: &str) -> Result<&GgufTensorInfo> {
        self.tensor_info(name)
            .ok_or_else(|| FormatError::missing_tensor(FORMAT, name))
    }

    /// The raw little-endian bytes of a tensor.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let t = self.info_or_err(name)?;
        // The parser checked that this range lies inside the file.
        let start = self.h.data_offset + t.offset;
        Ok(&self.src.bytes()[start..start + t.size])
    }

    /// A tensor: borrowed from the memory map when the file was opened from disk (the
    /// parser checked alignment and bounds), copied when it was parsed from memory or when a
    /// small `general.alignment` leaves the data misaligned for its dtype. A tensor stored in
    /// a llama.cpp block format ([`GgufTensorInfo::quant`]) is dequantised into an owned f32
    /// tensor.
    pub fn tensor(&self, name: &str) -> Result<HostTensor> {
        let t = self.info_or_err(name)?;
        if let Some(q) = t.quant {
            let values = q.dequantize(self.tensor_bytes(name)?)?;
            return HostTensor::from_f32(&t.shape, &values);
        }
        self.src
            .tensor(t.dtype, &t.shape, self.h.data_offset + t.offset)
    }
}

/// What the parser reads before the data section: version, alignment, metadata and tensor table.
struct Header {
    version: u32,
    alignment: u32,
    metadata: Vec<(String, GgufValue)>,
    keys: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    names: HashMap<String, usize>,
    data_offset: usize,
}

fn invalid(msg: impl Into<String>) -> crate::Error {
    FormatError::invalid(FORMAT, msg).into()
}

/// Capacity to reserve for `count` items of at least `min_size` bytes each: never more than
/// the bytes left could hold, so a hostile count cannot force a huge allocation.
fn bounded_capacity(count: u64, min_size: u64, remaining: usize) -> usize {
    let fit = remaining as u64 / min_size.max(1);
    count.min(fit) as usize
}

fn read_string(c: &mut Cursor<'_>, what: &dyn Fn() -> String) -> Result<String> {
    let len = c.u64(|| format!("length of {}", what()))?;
    let bytes = c.take(len, what)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| invalid(format!("{} is not valid UTF-8", what())))
}

fn read_value(c: &mut Cursor<'_>, ty: GgufType, depth: usize, key: &str) -> Result<GgufValue> {
    let what = || format!("value of metadata key {key:?}");
    Ok(match ty {
        GgufType::U8 => GgufValue::U8(c.u8(what)?),
        GgufType::I8 => GgufValue::I8(c.u8(what)? as i8),
        GgufType::U16 => GgufValue::U16(c.u16(what)?),
        GgufType::I16 => GgufValue::I16(c.u16(what)? as i16),
        GgufType::U32 => GgufValue::U32(c.u32(what)?),
        GgufType::I32 => GgufValue::I32(c.u32(what)? as i32),
        GgufType::F32 => GgufValue::F32(f32::from_bits(c.u32(what)?)),
        GgufType::U64 => GgufValue::U64(c.u64(what)?),
        GgufType::I64 => GgufValue::I64(c.u64(what)? as i64),
        GgufType::F64 => GgufValue::F64(f64::from_bits(c.u64(what)?)),
        GgufType::Bool => GgufValue::Bool(read_bool(c.u8(what)?, key)?),
        GgufType::String => GgufValue::String(read_string(c, &what)?),
        GgufType::Array => GgufValue::Array(read_array(c, depth + 1, key)?),
    })
}

fn read_bool(b: u8, key: &str) -> Result<bool> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(invalid(format!(
            "metadata key {key:?}: bool byte is {b}, not 0 or 1"
        ))),
    }
}

fn read_array(c: &mut Cursor<'_>, depth: usize, key: &str) -> Result<GgufArray> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(FormatError::Limit {
            format: FORMAT,
            what: format!("array nesting depth of metadata key {key:?}"),
            value: depth as u64,
            limit: MAX_ARRAY_DEPTH as u64,
        }
        .into());
    }
    let id = c.u32(|| format!("array type of metadata key {key:?}"))?;
    let ty = GgufType::from_id(id).ok_or_else(|| {
        invalid(format!(
            "metadata key {key:?}: unknown array element type id {id}"
        ))
    })?;
    let count = c.u64(|| format!("array length of metadata key {key:?}"))?;
    let what = || format!("{count} x {} array of metadata key {key:?}", ty.name());
    // Every element takes at least `min_size` bytes, so a count the rest of the file cannot
    // hold is refused before anything is allocated for it.
    let min_bytes = count.saturating_mul(ty.min_size());
    if min_bytes > c.remaining() as u64 {
        return Err(FormatError::Truncated {
            format: FORMAT,
            what: what(),
            offset: c.pos as u64,
            need: min_bytes,
            len: c.buf.len() as u64,
        }
        .into());
    }
    fn fixed<const N: usize, T>(
        c: &mut Cursor<'_>,
        count: u64,
        what: impl FnOnce() -> String,
        f: impl Fn([u8; N]) -> T,
    ) -> Result<Vec<T>> {
        let bytes = c.take(count * N as u64, what)?;
        Ok(bytes
            .chunks_exact(N)
            .map(|ch| {
                let mut a = [0u8; N];
                a.copy_from_slice(ch);
                f(a)
            })
            .collect())
    }
    Ok(match ty {
        GgufType::U8 => GgufArray::U8(fixed(c, count, what, |[b]| b)?),
        GgufType::I8 => GgufArray::I8(fixed(c, count, what, |[b]| b as i8)?),
        GgufType::U16 => GgufArray::U16(fixed(c, count, what, u16::from_le_bytes)?),
        GgufType::I16 => GgufArray::I16(fixed(c, count, what, i16::from_le_bytes)?),
        GgufType::U32 => GgufArray::U32(fixed(c, count, what, u32::from_le_bytes)?),
        GgufType::I32 => GgufArray::I32(fixed(c, count, what, i32::from_le_bytes)?),
        GgufType::F32 => GgufArray::F32(fixed(c, count, what, f32::from_le_bytes)?),
        GgufType::U64 => GgufArray::U64(fixed(c, count, what, u64::from_le_bytes)?),
        GgufType::I64 => GgufArray::I64(fixed(c, count, what, i64::from_le_bytes)?),
        GgufType::F64 => GgufArray::F64(fixed(c, count, what, f64::from_le_bytes)?),
        GgufType::Bool => {
            let bytes = c.take(count, what)?;
            GgufArray::Bool(
                bytes
                    .iter()
                    .map(|&b| read_bool(b, key))
                    .collect::<Result<_>>()?,
            )
        }
        GgufType::String => {
            let mut v = Vec::with_capacity(bounded_capacity(count, 8, c.remaining()));
            for i in 0..count {
                v.push(read_string(c, &|| {
                    format!("string {i} of metadata key {key:?}")
                })?);
            }
            GgufArray::String(v)
        }
        GgufType::Array => {
            let mut v = Vec::with_capacity(bounded_capacity(count, 12, c.remaining()));
            for _ in 0..count {
                v.push(read_array(c, depth + 1, key)?);
            }
            GgufArray::Array(v)
        }
    })
}

/// Magic, version, counts and the metadata key/value pairs: everything before the tensor
/// table. Returns the version, the tensor count, the pairs and their index by key.
#[allow(clippy::type_complexity)]
fn parse_preamble(
    c: &mut Cursor<'_>,
) -> Result<(u32, u64, Vec<(String, GgufValue)>, HashMap<String, usize>)> {
    let magic: [u8; 4] = c.array(|| "magic".into())?;
    if magic != GGUF_MAGIC {
        return Err(invalid(format!(
            "bad magic {magic:02x?}, expected {GGUF_MAGIC:02x?} (\"GGUF\")"
        )));
    }
    let version = c.u32(|| "version".into())?;
    match version {
        2 | 3 => {}
        v if matches!(v.swap_bytes(), 2 | 3) => {
            return Err(FormatError::unsupported(FORMAT, "big-endian GGUF files").into());
        }
        1 => {
            return Err(FormatError::unsupported(
                FORMAT,
                "GGUF version 1 (32-bit counts); convert it with a current gguf tool",
            )
            .into());
        }
        v => return Err(invalid(format!("unknown version {v}"))),
    }
    let tensor_count = c.u64(|| "tensor count".into())?;
    let kv_count = c.u64(|| "metadata count".into())?;

    // Key (8-byte length), type (4) and at least one value byte.
    let mut metadata = Vec::with_capacity(bounded_capacity(kv_count, 13, c.remaining()));
    let mut keys = HashMap::new();
    for i in 0..kv_count {
        let key = read_string(c, &|| format!("key of metadata entry {i}"))?;
        let id = c.u32(|| format!("value type of metadata key {key:?}"))?;
        let ty = GgufType::from_id(id)
            .ok_or_else(|| invalid(format!("metadata key {key:?}: unknown value type id {id}")))?;
        let value = read_value(c, ty, 0, &key)?;
        if keys.insert(key.clone(), metadata.len()).is_some() {
            return Err(FormatError::Duplicate {
                format: FORMAT,
                what: "metadata key",
                name: key,
            }
            .into());
        }
        metadata.push((key, value));
    }

    Ok((version, tensor_count, metadata, keys))
}

/// Only the metadata of the GGUF file at `path` (memory-mapped; the tensor table is not
/// read): for readers that need the key/value pairs alone, such as a tokenizer, also of
/// files whose tensor types kinema does not load.
pub fn read_metadata(path: impl AsRef<Path>) -> Result<Vec<(String, GgufValue)>> {
    let src = Source::map(path.as_ref())?;
    let mut c = Cursor::new(FORMAT, src.bytes());
    Ok(parse_preamble(&mut c)?.2)
}

fn parse_header(buf: &[u8]) -> Result<Header> {
    let mut c = Cursor::new(FORMAT, buf);
    let (version, tensor_count, metadata, keys) = parse_preamble(&mut c)?;

    let alignment = match keys.get(ALIGNMENT_KEY).map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(GgufValue::U32(a)) if a.is_power_of_two() && *a <= MAX_ALIGNMENT => *a,
        Some(v) => {
            return Err(invalid(format!(
                "{ALIGNMENT_KEY} must be a u32 power of two up to {MAX_ALIGNMENT}, found {v:?}"
            )));
        }
    };

    // Name length (8), rank (4), type (4), offset (8).
    let mut tensors = Vec::with_capacity(bounded_capacity(tensor_count, 24, c.remaining()));
    let mut names = HashMap::new();
    for i in 0..tensor_count {
        let t = read_tensor_info(&mut c, i)?;
        if names.insert(t.name.clone(), tensors.len()).is_some() {
            return Err(FormatError::Duplicate {
                format: FORMAT,
                what: "tensor",
                name: t.name,
            }
            .into());
        }
        tensors.push(t);
    }

    let data_offset = c
        .pos
        .checked_next_multiple_of(alignment as usize)
        .ok_or_else(|| invalid("data section offset overflows"))?;
    check_tensor_data(&tensors, data_offset, alignment, buf.len())?;
    Ok(Header {
        version,
        alignment,
        metadata,
        keys,
        tensors,
        names,
        data_offset,
    })
}

fn read_tensor_info(c: &mut Cursor<'_>, i: u64) -> Result<GgufTensorInfo> {
    let name = read_string(c, &|| format!("name of tensor {i}"))?;
    let n_dims = c.u32(|| format!("rank of tensor {name:?}"))?;
    if n_dims as usize > MAX_RANK {
        return Err(FormatError::unsupported(
            FORMAT,
            format!("tensor {name:?} has rank {n_dims}, above kinema's maximum of {MAX_RANK}"),
        )
        .into());
    }
    let mut shape = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        let d = c.u64(|| format!("dimensions of tensor {name:?}"))?;
        let d = usize::try_from(d)
            .map_err(|_| invalid(format!("tensor {name:?}: dimension {d} overflows usize")))?;
        shape.push(d);
    }
    // ggml lists the innermost dimension first.
    shape.reverse();
    let type_id = c.u32(|| format!("type of tensor {name:?}"))?;
    let quant = BlockQuant::from_ggml(type_id);
    let dtype = match quant {
        Some(_) => DType::F32,
        None => dtype_from_ggml(type_id).ok_or_else(|| {
            FormatError::unsupported(
                FORMAT,
                format!(
                    "tensor {name:?} has ggml type {type_id} ({}); kinema reads F32, F16, BF16, \
                     Q8_0 and I32, and dequantises Q4_0 and Q4_1",
                    ggml_type_name(type_id)
                ),
            )
        })?,
    };
    let offset = c.u64(|| format!("data offset of tensor {name:?}"))?;
    let offset = usize::try_from(offset)
        .map_err(|_| invalid(format!("tensor {name:?}: offset {offset} overflows usize")))?;
    let n = numel(&shape)
        .ok_or_else(|| invalid(format!("tensor {name:?}: shape {shape:?} overflows")))?;
    // ggml quantises rows: a block never spans two.
    let (stored, block) = match quant {
        Some(q) => (q.name(), q.block_elems()),
        None => (dtype.name(), dtype.block_elems()),
    };
    if block > 1 && shape.last().is_none_or(|&d| d % block != 0) {
        return Err(invalid(format!(
            "{stored} tensor {name:?} of shape {shape:?}: the innermost dimension must be a \
             multiple of {block}"
        )));
    }
    let size = match quant {
        Some(q) => q.bytes_for(n),
        None => dtype.bytes_for(n),
    }
    .ok_or_else(|| invalid(format!("tensor {name:?}: {n} {stored} elements overflow")))?;
    Ok(GgufTensorInfo {
        name,
        dtype,
        quant,
        shape,
        offset,
        size,
    })
}

/// Every tensor's data must start at a multiple of the alignment, lie inside the file and
/// not overlap another tensor's data.
fn check_tensor_data(
    tensors: &[GgufTensorInfo],
    data_offset: usize,
    alignment: u32,
    file_len: usize,
) -> Result<()> {
    for t in tensors {
        if t.offset % alignment as usize != 0 {
            return Err(invalid(format!(
                "tensor {:?}: data offset {} is not a multiple of the alignment {alignment}",
                t.name, t.offset
            )));
        }
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.size));
        if end.is_none_or(|e| e > file_len) {
            return Err(FormatError::Truncated {
                format: FORMAT,
                what: format!("data of tensor {:?}", t.name),
                offset: (data_offset as u64).saturating_add(t.offset as u64),
                need: t.size as u64,
                len: file_len as u64,
            }
            .into());
        }
    }
    let mut order: Vec<&GgufTensorInfo> = tensors.iter().filter(|t| t.size > 0).collect();
    order.sort_by_key(|t| t.offset);
    for w in order.windows(2) {
        // In range: both ends were checked against the file length above.
        if w[0].offset + w[0].size > w[1].offset {
            return Err(invalid(format!(
                "the data of tensors {:?} and {:?} overlap",
                w[0].name, w[1].name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_file_is_the_file_written_from_memory() {
        let a = HostTensor::from_f32(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
        let b = HostTensor::from_i32(&[5], &[7, 8, 9, 10, 11]).unwrap();
        let c = HostTensor::from_f32(&[1], &[0.5]).unwrap();
        let mut mem = GgufWriter::new();
        mem.add_metadata("k", 3u32).unwrap();
        mem.add_tensor("a", &a).unwrap();
        mem.add_tensor("b", &b).unwrap();
        mem.add_tensor("c", &c).unwrap();
        let mut want = Vec::new();
        mem.write_to(&mut want).unwrap();

        // a and c declared (streamed), b added with its data (written by the stream).
        let mut st = GgufWriter::new();
        st.add_metadata("k", 3u32).unwrap();
        st.declare_tensor("a", DType::F32, &[2, 3]).unwrap();
        st.add_tensor("b", &b).unwrap();
        st.declare_tensor("c", DType::F32, &[1]).unwrap();
        assert_eq!(st.data_bytes(), Some(32 + 32 + 32));
        // A writer with declared tensors cannot be written from memory.
        assert!(st.write_to(&mut Vec::new()).is_err());
        let mut got = Vec::new();
        let mut s = st.stream(&mut got).unwrap();
        assert_eq!(s.next_tensor(), Some(("a", DType::F32, &[2usize, 3][..])));
        let e = s.write_tensor("c", c.bytes()).unwrap_err().to_string();
        assert!(e.contains("out of order") && e.contains("\"a\""), "{e}");
        let e = s
            .write_tensor("a", &a.bytes()[..20])
            .unwrap_err()
            .to_string();
        assert!(e.contains("20 bytes given, 24 declared"), "{e}");
        s.write_tensor("a", a.bytes()).unwrap();
        assert_eq!(s.next_tensor().map(|t| t.0), Some("c"));
        s.write_tensor("c", c.bytes()).unwrap();
        assert!(s.write_tensor("c", c.bytes()).is_err());
        s.finish().unwrap();
        assert_eq!(got, want);

        // A stream that ends early is an error.
        let mut st = GgufWriter::new();
        st.declare_tensor("a", DType::F32, &[2, 3]).unwrap();
        let mut sink = Vec::new();
        let e = st
            .stream(&mut sink)
            .unwrap()
            .finish()
            .unwrap_err()
            .to_string();
        assert!(e.contains("ended before tensor \"a\""), "{e}");
        // Declarations are checked as additions are.
        assert!(st.declare_tensor("a", DType::F32, &[1]).is_err());
        assert!(st.declare_tensor("q", DType::Q8_0, &[3, 33]).is_err());
        assert!(st.declare_tensor("u", DType::U32, &[3]).is_err());
    }

    #[test]
    fn capacity_is_bounded_by_the_bytes_left() {
        assert_eq!(bounded_capacity(u64::MAX, 13, 100), 7);
        assert_eq!(bounded_capacity(3, 13, 1000), 3);
        assert_eq!(bounded_capacity(5, 0, 2), 2);
    }
}
