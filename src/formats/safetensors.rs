//! safetensors reader over a memory map.
//!
//! A file is a u64 little-endian header length `n`, `n` bytes of JSON mapping tensor names to
//! `{"dtype", "shape", "data_offsets": [begin, end]}` (plus an optional `__metadata__` map of
//! strings), then the data buffer the offsets index.
//!
//! The header is parsed here rather than by the `safetensors` crate: its 0.8
//! `read_metadata` adds the declared data end to the header length unchecked, so a header
//! whose offsets sum near `usize::MAX` overflows (a panic in debug builds, a wrapped length
//! check and an out-of-range slice in release). This parser also refuses duplicate JSON keys,
//! which serde's map deserialisation keeps silently (last one wins). As the format requires,
//! the tensors must cover the data buffer exactly, without holes or overlaps.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use half::{bf16, f16};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::FormatError;
use super::source::{Source, chunks, numel};
use crate::error::{Error, Result};
use crate::tensor::{DType, HostTensor};

const FORMAT: &str = "safetensors";

/// Largest header accepted, as the reference implementation (100 MB).
pub const MAX_HEADER_SIZE: usize = 100_000_000;

/// Declares [`SafeDType`] from its variants in the format's order; a variant's header name
/// is its identifier.
macro_rules! safe_dtypes {
    ($($v:ident),* $(,)?) => {
        /// The dtypes of the safetensors format.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        pub enum SafeDType {
            $($v,)*
        }

        impl SafeDType {
            /// The name used in the header.
            pub fn name(self) -> &'static str {
                match self {
                    $(SafeDType::$v => stringify!($v),)*
                }
            }

            pub fn parse(s: &str) -> Option<SafeDType> {
                match s {
                    $(stringify!($v) => Some(SafeDType::$v),)*
                    _ => None,
                }
            }
        }
    };
}

safe_dtypes!(
    BOOL,
    F4,
    F6_E2M3,
    F6_E3M2,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
);

impl SafeDType {
    /// Bits per element (sub-byte float formats pack several per byte).
    pub fn bits(self) -> usize {
        use SafeDType::*;
        match self {
            F4 => 4,
            F6_E2M3 | F6_E3M2 => 6,
            BOOL | U8 | I8 | F8_E5M2 | F8_E4M3 | F8_E8M0 | F8_E4M3FNUZ | F8_E5M2FNUZ => 8,
            I16 | U16 | F16 | BF16 => 16,
            I32 | U32 | F32 => 32,
            C64 | F64 | I64 | U64 => 64,
        }
    }

    /// The kinema tensor dtype with the same layout, if there is one.
    pub fn to_dtype(self) -> Option<DType> {
        Some(match self {
            SafeDType::F32 => DType::F32,
            SafeDType::F16 => DType::F16,
            SafeDType::BF16 => DType::BF16,
            SafeDType::I32 => DType::I32,
            SafeDType::U32 => DType::U32,
            _ => return None,
        })
    }
}

impl fmt::Display for SafeDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One tensor's header entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafeTensorInfo {
    pub name: String,
    pub dtype: SafeDType,
    pub shape: Vec<usize>,
    /// Byte range inside the data buffer (which starts after the header).
    pub data_offsets: (usize, usize),
}

/// A parsed safetensors file. Opened from disk it is memory-mapped and tensors whose data is
/// aligned for their dtype are borrowed from the map without copying.
pub struct SafeTensors {
    src: Source,
    data_start: usize,
    metadata: Vec<(String, String)>,
    tensors: Vec<SafeTensorInfo>,
    index: HashMap<String, usize>,
}

impl fmt::Debug for SafeTensors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SafeTensors")
            .field("tensors", &self.tensors.len())
            .field("mapped", &self.src.is_mapped())
            .finish()
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    FormatError::invalid(FORMAT, msg).into()
}

/// The header's top-level entries in file order, duplicates kept so they can be refused.
pub(crate) struct Entries(pub(crate) Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Entries, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Entries, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = m.next_entry::<String, Value>()? {
                    v.push(e);
                }
                Ok(Entries(v))
            }
        }
        d.deserialize_map(V)
    }
}

impl SafeTensors {
    /// Memory-map and parse the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<SafeTensors> {
        SafeTensors::from_source(Source::map(path.as_ref())?)
    }

    /// Parse a file held in memory; tensors are copied out of it.
    pub fn parse(bytes: impl Into<Arc<[u8]>>) -> Result<SafeTensors> {
        SafeTensors::from_source(Source::Owned(bytes.into()))
    }

    fn from_source(src: Source) -> Result<SafeTensors> {
        let buf = src.bytes();
        let Some(len_bytes) = buf.first_chunk::<8>() else {
            return Err(FormatError::Truncated {
                format: FORMAT,
                what: "header length".into(),
                offset: 0,
                need: 8,
                len: buf.len() as u64,
            }
            .into());
        };
        let n = u64::from_le_bytes(*len_bytes);
        if n > MAX_HEADER_SIZE as u64 {
            return Err(FormatError::Limit {
                format: FORMAT,
                what: "header length".into(),
                value: n,
                limit: MAX_HEADER_SIZE as u64,
            }
            .into());
        }
        let data_start = 8 + n as usize;
        let Some(header) = buf.get(8..data_start) else {
            return Err(FormatError::Truncated {
                format: FORMAT,
                what: "header".into(),
                offset: 8,
                need: n,
                len: buf.len() as u64,
            }
            .into());
        };
        let header = std::str::from_utf8(header)
            .map_err(|e| invalid(format!("header is not valid UTF-8: {e}")))?;
        let Entries(entries) = serde_json::from_str(header)
            .map_err(|e| invalid(format!("header is not a JSON object: {e}")))?;
        let data_len = buf.len() - data_start;

        let mut metadata = None;
        let mut tensors = Vec::with_capacity(entries.len());
        let mut index = HashMap::with_capacity(entries.len());
        for (name, value) in entries {
            if name == "__metadata__" {
                if metadata.is_some() {
                    return Err(duplicate(name));
                }
                metadata = Some(parse_metadata(value)?);
                continue;
            }
            let info = parse_info(name, value)?;
            if index.insert(info.name.clone(), tensors.len()).is_some() {
                return Err(duplicate(info.name));
            }
            tensors.push(info);
        }

        // The tensors must tile the data buffer: sorted by offset, each starts where the
        // previous ended, and the last ends at the end of the file.
        let mut order: Vec<&SafeTensorInfo> = tensors.iter().collect();
        order.sort_by_key(|t| t.data_offsets);
        let mut end = 0usize;
        for t in order {
            let (b, e) = t.data_offsets;
            if b != end {
                return Err(invalid(format!(
                    "tensor {:?} starts at data offset {b}, expected {end} (tensors must \
                     cover the data without holes or overlaps)",
                    t.name
                )));
            }
            if e > data_len {
                return Err(FormatError::Truncated {
                    format: FORMAT,
                    what: format!("data of tensor {:?}", t.name),
                    offset: (data_start + b) as u64,
                    need: (e - b) as u64,
                    len: buf.len() as u64,
                }
                .into());
            }
            end = e;
        }
        if end != data_len {
            return Err(invalid(format!(
                "the tensors cover {end} bytes of the {data_len}-byte data buffer"
            )));
        }
        Ok(SafeTensors {
            src,
            data_start,
            metadata: metadata.unwrap_or_default(),
            tensors,
            index,
        })
    }

    /// Tensor names in header order.
    pub fn names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.name.as_str()).collect()
    }

    /// All tensor entries in header order.
    pub fn tensors(&self) -> &[SafeTensorInfo] {
        &self.tensors
    }

    /// The `__metadata__` string map, in header order.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    pub fn info(&self, name: &str) -> Option<&SafeTensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    fn info_or_err(&self, name: &str) -> Result<&SafeTensorInfo> {
        self.info(name)
            .ok_or_else(|| FormatError::missing_tensor(FORMAT, name))
    }

    /// The raw little-endian bytes of a tensor.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let t = self.info_or_err(name)?;
        // The parser checked that the range lies inside the data buffer.
        Ok(&self.src.bytes()
            [self.data_start + t.data_offsets.0..self.data_start + t.data_offsets.1])
    }

    /// An F32, F16, BF16, I32 or U32 tensor: borrowed from the map when its data is aligned
    /// for the dtype, copied otherwise.
    pub fn tensor(&self, name: &str) -> Result<HostTensor> {
        let t = self.info_or_err(name)?;
        let dtype = t.dtype.to_dtype().ok_or_else(|| {
            FormatError::unsupported(
                FORMAT,
                format!(
                    "tensor {name:?} is {}; kinema tensors are F32, F16, BF16, I32 or U32 \
                     (use tensor_f32 for F64)",
                    t.dtype
                ),
            )
        })?;
        self.src
            .tensor(dtype, &t.shape, self.data_start + t.data_offsets.0)
    }

    /// A floating-point tensor (F64, F32, F16 or BF16) converted to f32, with its shape.
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let t = self.info_or_err(name)?;
        let b = self.tensor_bytes(name)?;
        let v = match t.dtype {
            SafeDType::F32 => chunks(b, f32::from_le_bytes),
            SafeDType::F64 => chunks(b, |a| f64::from_le_bytes(a) as f32),
            SafeDType::F16 => chunks(b, |a| f16::from_le_bytes(a).to_f32()),
            SafeDType::BF16 => chunks(b, |a| bf16::from_le_bytes(a).to_f32()),
            d => {
                return Err(FormatError::unsupported(
                    FORMAT,
                    format!("tensor {name:?} is {d}, not F64, F32, F16 or BF16"),
                )
                .into());
            }
        };
        Ok((t.shape.clone(), v))
    }
}

fn duplicate(name: String) -> Error {
    FormatError::Duplicate {
        format: FORMAT,
        what: "header key",
        name,
    }
    .into()
}

fn parse_metadata(v: Value) -> Result<Vec<(String, String)>> {
    let Value::Object(m) = v else {
        return Err(invalid("__metadata__ is not an object"));
    };
    m.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            _ => Err(invalid(format!(
                "__metadata__ value of {k:?} is not a string"
            ))),
        })
        .collect()
}

fn parse_info(name: String, v: Value) -> Result<SafeTensorInfo> {
    let bad = |what: &str| invalid(format!("tensor {name:?}: {what}"));
    let Value::Object(m) = v else {
        return Err(bad("entry is not an object"));
    };
    let dtype = match m.get("dtype") {
        Some(Value::String(s)) => {
            SafeDType::parse(s).ok_or_else(|| bad(&format!("unknown dtype {s:?}")))?
        }
        _ => return Err(bad("missing or non-string \"dtype\"")),
    };
    let as_usize = |v: &Value| v.as_u64().and_then(|x| usize::try_from(x).ok());
    let shape = match m.get("shape") {
        Some(Value::Array(dims)) => dims
            .iter()
            .map(as_usize)
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| bad("\"shape\" holds a non-integer or negative dimension"))?,
        _ => return Err(bad("missing or non-array \"shape\"")),
    };
    let data_offsets = match m.get("data_offsets") {
        Some(Value::Array(o)) if o.len() == 2 => match (as_usize(&o[0]), as_usize(&o[1])) {
            (Some(b), Some(e)) if b <= e => (b, e),
            _ => return Err(bad("\"data_offsets\" must be two integers, begin <= end")),
        },
        _ => return Err(bad("missing \"data_offsets\" pair")),
    };
    let bits = numel(&shape)
        .and_then(|n| n.checked_mul(dtype.bits()))
        .ok_or_else(|| bad(&format!("shape {shape:?} overflows")))?;
    if bits % 8 != 0 {
        return Err(bad(&format!(
            "{} x {dtype} elements are not a whole number of bytes",
            numel(&shape).unwrap_or(0)
        )));
    }
    if data_offsets.1 - data_offsets.0 != bits / 8 {
        return Err(bad(&format!(
            "data_offsets {data_offsets:?} hold {} bytes, but {dtype} of shape {shape:?} needs {}",
            data_offsets.1 - data_offsets.0,
            bits / 8
        )));
    }
    Ok(SafeTensorInfo {
        name,
        dtype,
        shape,
        data_offsets,
    })
}
