//! NumPy `.npy` reader and writer (format versions 1, 2 and 3).
//!
//! A file is the magic `\x93NUMPY`, a major and minor version byte, the header length (u16 in
//! v1, u32 in v2/v3), a header that is a Python dict literal
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }` padded with spaces and a
//! newline, then the raw array data. The header is parsed here by a strict grammar for
//! exactly those three keys; nothing is ever evaluated.
//!
//! Little-endian dtypes read and written: `|b1` bool, `|u1`, `|i1`, `<i4`, `<i8`, `<f2`,
//! `<f4`, `<f8`, and `<U{n}` fixed-width unicode strings (read as [`NpyArray::to_strings`]).
//! Big-endian, object (pickled) and structured dtypes are refused. Fortran-ordered arrays are
//! converted to C order on reading; [`NpyArray::data`] is always C order.

use std::io::Write;
use std::path::Path;

use half::f16;

use super::FormatError;
use super::atomic::write_atomic;
use super::source::{Cursor, Source, chunks, numel};
use crate::error::{Error, Result};
use crate::tensor::{DType, HostTensor};

const FORMAT: &str = "npy";

/// The six bytes every `.npy` file starts with.
pub const NPY_MAGIC: [u8; 6] = *b"\x93NUMPY";
/// Highest rank numpy creates (`NPY_MAXDIMS` in numpy 2).
pub const MAX_NPY_RANK: usize = 64;

/// Element types of [`NpyArray`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NpyDType {
    Bool,
    U8,
    I8,
    I32,
    I64,
    F16,
    F32,
    F64,
    /// Fixed-width unicode strings of this many UTF-32 code units (numpy `<U{n}`).
    Unicode(usize),
}

impl NpyDType {
    /// The numpy `descr` string.
    pub fn descr(self) -> String {
        match self {
            NpyDType::Bool => "|b1".into(),
            NpyDType::U8 => "|u1".into(),
            NpyDType::I8 => "|i1".into(),
            NpyDType::I32 => "<i4".into(),
            NpyDType::I64 => "<i8".into(),
            NpyDType::F16 => "<f2".into(),
            NpyDType::F32 => "<f4".into(),
            NpyDType::F64 => "<f8".into(),
            NpyDType::Unicode(n) => format!("<U{n}"),
        }
    }

    /// Bytes per element (`None` when a unicode width overflows).
    pub fn item_size(self) -> Option<usize> {
        Some(match self {
            NpyDType::Bool | NpyDType::U8 | NpyDType::I8 => 1,
            NpyDType::F16 => 2,
            NpyDType::I32 | NpyDType::F32 => 4,
            NpyDType::I64 | NpyDType::F64 => 8,
            NpyDType::Unicode(n) => return n.checked_mul(4),
        })
    }

    /// Parse a `descr` string, refusing with a message that says why.
    fn parse(descr: &str) -> Result<NpyDType> {
        let unsupported = |why: &str| -> Error {
            FormatError::unsupported(FORMAT, format!("dtype {descr:?}: {why}")).into()
        };
        let (order, code) = match descr.as_bytes().first() {
            Some(b'<' | b'>' | b'|' | b'=') => descr.split_at(1),
            _ => ("", descr),
        };
        if code.starts_with('O') {
            return Err(unsupported("object/pickled arrays are not supported"));
        }
        let one_byte = match code {
            "b1" => Some(NpyDType::Bool),
            "u1" => Some(NpyDType::U8),
            "i1" => Some(NpyDType::I8),
            _ => None,
        };
        if let Some(d) = one_byte {
            // Byte order means nothing for one-byte types; numpy writes '|'.
            return match order {
                "|" | "<" | ">" => Ok(d),
                _ => Err(unsupported("expected an explicit byte order such as '|'")),
            };
        }
        match order {
            "<" => {}
            ">" => return Err(unsupported("big-endian data is not supported")),
            _ => {
                return Err(unsupported(
                    "expected an explicit little-endian byte order '<'",
                ));
            }
        }
        Ok(match code {
            "i4" => NpyDType::I32,
            "i8" => NpyDType::I64,
            "f2" => NpyDType::F16,
            "f4" => NpyDType::F32,
            "f8" => NpyDType::F64,
            _ => match code.strip_prefix('U').map(str::parse::<usize>) {
                Some(Ok(0)) => return Err(unsupported("zero-width strings are not supported")),
                Some(Ok(n)) if NpyDType::Unicode(n).item_size().is_some() => NpyDType::Unicode(n),
                _ => {
                    return Err(unsupported(
                        "kinema reads bool, u8, i8, i32, i64, f16, f32, f64 and unicode strings",
                    ));
                }
            },
        })
    }
}

impl std::fmt::Display for NpyDType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.descr())
    }
}

/// A numpy array: little-endian element bytes in C (row-major) order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyArray {
    pub dtype: NpyDType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

macro_rules! from_slice {
    ($($fn:ident: $t:ty => $d:ident),* $(,)?) => {$(
        #[doc = concat!("An array of `", stringify!($t), "` values; `values.len()` must match the shape.")]
        pub fn $fn(shape: &[usize], values: &[$t]) -> Result<NpyArray> {
            let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            NpyArray::new(NpyDType::$d, shape, data)
        }
    )*};
}

impl NpyArray {
    /// An array over raw little-endian C-order bytes; the length must match shape and dtype.
    pub fn new(dtype: NpyDType, shape: &[usize], data: Vec<u8>) -> Result<NpyArray> {
        let need = numel(shape).and_then(|n| n.checked_mul(dtype.item_size()?));
        if need != Some(data.len()) {
            return Err(Error::Shape(format!(
                "{dtype} array of shape {shape:?} cannot hold {} bytes",
                data.len()
            )));
        }
        Ok(NpyArray {
            dtype,
            shape: shape.to_vec(),
            data,
        })
    }

    from_slice!(from_f32: f32 => F32, from_f64: f64 => F64, from_f16: f16 => F16,
        from_i32: i32 => I32, from_i64: i64 => I64, from_u8: u8 => U8, from_i8: i8 => I8);

    pub fn from_bool(shape: &[usize], values: &[bool]) -> Result<NpyArray> {
        NpyArray::new(
            NpyDType::Bool,
            shape,
            values.iter().map(|&b| u8::from(b)).collect(),
        )
    }

    /// An F32, F16 or I32 host tensor (other dtypes have no numpy counterpart).
    pub fn from_tensor(t: &HostTensor) -> Result<NpyArray> {
        let dtype = match t.dtype {
            DType::F32 => NpyDType::F32,
            DType::F16 => NpyDType::F16,
            DType::I32 => NpyDType::I32,
            d => {
                return Err(Error::DType(format!(
                    "a {d} tensor has no npy dtype; convert it to f32 first"
                )));
            }
        };
        NpyArray::new(dtype, &t.shape, t.bytes().to_vec())
    }

    /// The array as an F32, F16 or I32 host tensor.
    pub fn to_tensor(&self) -> Result<HostTensor> {
        let dtype = match self.dtype {
            NpyDType::F32 => DType::F32,
            NpyDType::F16 => DType::F16,
            NpyDType::I32 => DType::I32,
            d => {
                return Err(Error::DType(format!(
                    "a {d} array is not a tensor dtype; use to_f32 or to_i64"
                )));
            }
        };
        HostTensor::from_bytes(dtype, &self.shape, &self.data)
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    fn numeric<T>(
        &self,
        want: &str,
        float: Option<FloatConv<T>>,
        int: fn(i64) -> T,
    ) -> Result<Vec<T>> {
        let b = &self.data;
        let refuse = || Error::DType(format!("cannot read a {} array as {want}", self.dtype));
        Ok(match (self.dtype, float) {
            (NpyDType::Bool, _) => b.iter().map(|&x| int(i64::from(x != 0))).collect(),
            (NpyDType::U8, _) => b.iter().map(|&x| int(x.into())).collect(),
            (NpyDType::I8, _) => b.iter().map(|&x| int((x as i8).into())).collect(),
            (NpyDType::I32, _) => chunks(b, |a| int(i32::from_le_bytes(a).into())),
            (NpyDType::I64, _) => chunks(b, |a| int(i64::from_le_bytes(a))),
            (NpyDType::F16, Some((h, _, _))) => chunks(b, |a| h(f16::from_le_bytes(a))),
            (NpyDType::F32, Some((_, s, _))) => chunks(b, |a| s(f32::from_le_bytes(a))),
            (NpyDType::F64, Some((_, _, d))) => chunks(b, |a| d(f64::from_le_bytes(a))),
            _ => return Err(refuse()),
        })
    }

    /// Values widened or narrowed to f32 (any numeric or bool dtype; f64 and large integers
    /// round).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        self.numeric("f32", Some((f16::to_f32, |x| x, |x| x as f32)), |x| {
            x as f32
        })
    }

    /// Values as f64 (any numeric or bool dtype).
    pub fn to_f64(&self) -> Result<Vec<f64>> {
        self.numeric("f64", Some((f16::to_f64, f64::from, |x| x)), |x| x as f64)
    }

    /// Values of an integer or bool array as i64 (float arrays are refused, not truncated).
    pub fn to_i64(&self) -> Result<Vec<i64>> {
        self.numeric("i64", None, |x| x)
    }

    /// The strings of a `<U{n}` array, trailing NULs removed as numpy does.
    pub fn to_strings(&self) -> Result<Vec<String>> {
        let NpyDType::Unicode(_) = self.dtype else {
            return Err(Error::DType(format!(
                "cannot read a {} array as strings",
                self.dtype
            )));
        };
        let width = match self.dtype.item_size() {
            Some(w) if w > 0 => w,
            _ => {
                return Err(Error::DType(format!(
                    "{} is not a usable string width",
                    self.dtype
                )));
            }
        };
        self.data
            .chunks_exact(width)
            .map(|item| {
                let units: Vec<u32> = chunks(item, u32::from_le_bytes);
                let end = units.iter().rposition(|&u| u != 0).map_or(0, |p| p + 1);
                units[..end]
                    .iter()
                    .map(|&u| {
                        char::from_u32(u).ok_or_else(|| {
                            Error::from(FormatError::invalid(
                                FORMAT,
                                format!("{u:#x} is not a unicode scalar value"),
                            ))
                        })
                    })
                    .collect()
            })
            .collect()
    }
}

/// Conversions from f16, f32 and f64 to the target type.
type FloatConv<T> = (fn(f16) -> T, fn(f32) -> T, fn(f64) -> T);

fn invalid(msg: impl Into<String>) -> Error {
    FormatError::invalid(FORMAT, msg).into()
}

/// Magic, version and header length, leaving `c` at the start of the header.
fn preamble(c: &mut Cursor<'_>) -> Result<u64> {
    let magic: [u8; 6] = c.array(|| "magic".into())?;
    if magic != NPY_MAGIC {
        return Err(invalid(format!(
            "bad magic {magic:02x?}, expected \\x93NUMPY"
        )));
    }
    let [major, minor] = c.array(|| "version".into())?;
    Ok(match (major, minor) {
        (1, 0) => u64::from(c.u16(|| "header length".into())?),
        (2 | 3, 0) => u64::from(c.u32(|| "header length".into())?),
        _ => {
            return Err(FormatError::unsupported(
                FORMAT,
                format!("format version {major}.{minor}"),
            )
            .into());
        }
    })
}

/// Bytes of array data the header declares.
fn data_len(h: &Header) -> Result<usize> {
    let item = h.dtype.item_size().unwrap_or(usize::MAX);
    numel(&h.shape)
        .and_then(|n| n.checked_mul(item))
        .ok_or_else(|| {
            invalid(format!(
                "{} array of shape {:?} overflows",
                h.dtype, h.shape
            ))
        })
}

/// What the first bytes of a `.npy` file say about its length.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Declared {
    /// The header ends past the prefix: at least this many bytes are needed to know.
    NeedPrefix(u64),
    /// The whole file is this many bytes (preamble, header and the declared shape's data).
    Total(u64),
}

/// The length of the `.npy` file that starts with `prefix`, from its header alone, so that
/// an archive reader can refuse a member whose size disagrees with its declared shape before
/// inflating it.
pub(crate) fn declared_len(prefix: &[u8]) -> Result<Declared> {
    // The longest preamble (versions 2 and 3) is 12 bytes.
    const PREAMBLE: u64 = 12;
    let mut c = Cursor::new(FORMAT, prefix);
    let header_len = match preamble(&mut c) {
        Ok(n) => n,
        Err(_) if (prefix.len() as u64) < PREAMBLE => return Ok(Declared::NeedPrefix(PREAMBLE)),
        Err(e) => return Err(e),
    };
    let header_end = c.pos as u64 + header_len;
    if (prefix.len() as u64) < header_end {
        return Ok(Declared::NeedPrefix(header_end));
    }
    let h = parse_header(c.take(header_len, || "header".into())?)?;
    Ok(Declared::Total(
        header_end.saturating_add(data_len(&h)? as u64),
    ))
}

/// Parse a whole `.npy` file held in memory.
pub fn read(bytes: &[u8]) -> Result<NpyArray> {
    let mut c = Cursor::new(FORMAT, bytes);
    let header_len = preamble(&mut c)?;
    let header = c.take(header_len, || "header".into())?;
    let h = parse_header(header)?;
    let item = h.dtype.item_size().unwrap_or(usize::MAX);
    let nbytes = data_len(&h)?;
    let data = &bytes[c.pos..];
    if data.len() < nbytes {
        return Err(FormatError::Truncated {
            format: FORMAT,
            what: format!("data of the {} array of shape {:?}", h.dtype, h.shape),
            offset: c.pos as u64,
            need: nbytes as u64,
            len: bytes.len() as u64,
        }
        .into());
    }
    if data.len() > nbytes {
        return Err(invalid(format!(
            "{} bytes follow the {nbytes} bytes of array data",
            data.len() - nbytes
        )));
    }
    let data = if h.fortran_order && h.shape.len() > 1 {
        fortran_to_c(data, &h.shape, item)
    } else {
        data.to_vec()
    };
    Ok(NpyArray {
        dtype: h.dtype,
        shape: h.shape,
        data,
    })
}

/// Read a `.npy` file. Only a regular file is read (a directory, a device such as
/// `/dev/zero` or a FIFO is refused before any byte is read); it is mapped, not read into
/// memory, so the array copied out of it is bounded by the file's size and checked against
/// the shape its header declares. Parse errors name the file.
pub fn read_file(path: impl AsRef<Path>) -> Result<NpyArray> {
    let path = path.as_ref();
    let src = Source::map(path)?;
    read(src.bytes()).map_err(|e| {
        FormatError::InFile {
            path: path.to_path_buf(),
            source: Box::new(e),
        }
        .into()
    })
}

/// Reorder Fortran-order (first index fastest) element bytes into C order.
fn fortran_to_c(data: &[u8], shape: &[usize], item: usize) -> Vec<u8> {
    let n: usize = shape.iter().product();
    let mut fstride = Vec::with_capacity(shape.len());
    let mut acc = 1usize;
    for &d in shape {
        fstride.push(acc);
        acc *= d;
    }
    let mut out = Vec::with_capacity(data.len());
    let mut idx = vec![0usize; shape.len()];
    let mut src = 0usize;
    for _ in 0..n {
        out.extend_from_slice(&data[src * item..(src + 1) * item]);
        // Advance the C-order index (last dimension fastest) and track the Fortran offset.
        for j in (0..shape.len()).rev() {
            idx[j] += 1;
            src += fstride[j];
            if idx[j] < shape[j] {
                break;
            }
            src -= fstride[j] * shape[j];
            idx[j] = 0;
        }
    }
    out
}

struct Header {
    dtype: NpyDType,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// A strict parser for the header's dict literal: exactly the keys `descr` (a string),
/// `fortran_order` (`True`/`False`) and `shape` (a tuple of non-negative integers), each
/// once, in any order, with Python's optional trailing commas; then only whitespace.
struct HeaderParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl HeaderParser<'_> {
    fn err(&self, what: &str) -> Error {
        invalid(format!("header: {what} at byte {} of the header", self.i))
    }

    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, b: u8) -> Result<()> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", b as char)))
        }
    }

    fn string(&mut self) -> Result<String> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.err("expected a string")),
        };
        self.i += 1;
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != q {
            if matches!(self.s[self.i], b'\\' | b'\n') {
                return Err(self.err("escape or newline inside a string"));
            }
            self.i += 1;
        }
        if self.i == self.s.len() {
            return Err(self.err("unterminated string"));
        }
        let s = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Ok(s)
    }

    fn word(&mut self) -> &[u8] {
        self.ws();
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i].is_ascii_alphanumeric() {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    fn bool(&mut self) -> Result<bool> {
        match self.word() {
            b"True" => Ok(true),
            b"False" => Ok(false),
            _ => Err(self.err("expected True or False")),
        }
    }

    /// A decimal integer; Python 2 numpy wrote longs with an `L` suffix.
    fn int(&mut self) -> Result<usize> {
        let w = self.word();
        let digits = w.strip_suffix(b"L").unwrap_or(w);
        if digits.is_empty()
            || !digits.iter().all(u8::is_ascii_digit)
            || (digits.len() > 1 && digits[0] == b'0')
        {
            return Err(self.err("expected a non-negative integer"));
        }
        digits
            .iter()
            .try_fold(0usize, |a, &d| {
                a.checked_mul(10)?.checked_add((d - b'0') as usize)
            })
            .ok_or_else(|| self.err("dimension overflows usize"))
    }

    /// `()`, `(n,)`, `(n, m)`, `(n, m,)`, ...; `(n)` is an integer in Python, not a tuple.
    fn shape(&mut self) -> Result<Vec<usize>> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        if self.eat(b')') {
            return Ok(dims);
        }
        loop {
            if dims.len() == MAX_NPY_RANK {
                return Err(FormatError::Limit {
                    format: FORMAT,
                    what: "rank".into(),
                    value: MAX_NPY_RANK as u64 + 1,
                    limit: MAX_NPY_RANK as u64,
                }
                .into());
            }
            dims.push(self.int()?);
            if self.eat(b')') {
                if dims.len() == 1 {
                    return Err(self.err("shape '(n)' is not a tuple"));
                }
                return Ok(dims);
            }
            self.expect(b',')?;
            if self.eat(b')') {
                return Ok(dims);
            }
        }
    }
}

fn parse_header(s: &[u8]) -> Result<Header> {
    let mut p = HeaderParser { s, i: 0 };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    p.expect(b'{')?;
    loop {
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.expect(b':')?;
        let fresh = match key.as_str() {
            "descr" => {
                if p.peek() == Some(b'[') {
                    return Err(FormatError::unsupported(
                        FORMAT,
                        "structured (record) dtypes are not supported",
                    )
                    .into());
                }
                descr.replace(p.string()?).is_none()
            }
            "fortran_order" => fortran.replace(p.bool()?).is_none(),
            "shape" => shape.replace(p.shape()?).is_none(),
            _ => return Err(invalid(format!("header: unexpected key {key:?}"))),
        };
        if !fresh {
            return Err(invalid(format!("header: duplicate key {key:?}")));
        }
        if p.eat(b'}') {
            break;
        }
        p.expect(b',')?;
    }
    if p.peek().is_some() {
        return Err(p.err("unexpected text after the header dict"));
    }
    let missing = |k: &str| invalid(format!("header: missing key {k:?}"));
    Ok(Header {
        dtype: NpyDType::parse(&descr.ok_or_else(|| missing("descr"))?)?,
        fortran_order: fortran.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
    })
}

/// The complete header block numpy 2 writes: the dict with keys sorted, spare spaces for
/// growing the first dimension in place, padding so the data starts at a multiple of 64,
/// and a newline. Version 1 unless the header needs more than 65535 bytes.
fn header_bytes(a: &NpyArray) -> Vec<u8> {
    let shape = match a.shape.as_slice() {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        ds => format!(
            "({})",
            ds.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        a.dtype.descr()
    );
    // numpy's GROWTH_AXIS_MAX_DIGITS: room to rewrite the first dimension with up to 21 digits.
    if let Some(d0) = a.shape.first() {
        let digits = d0.to_string().len();
        dict.extend(std::iter::repeat_n(' ', 21usize.saturating_sub(digits)));
    }
    let hlen = dict.len() + 1;
    // Version 1 stores the length as u16; numpy moves to version 2 when it does not fit.
    let pad_for = |prefix: usize| 64 - (prefix + hlen) % 64;
    let (version, prefix) = if hlen + pad_for(10) <= u16::MAX as usize {
        (1u8, 10)
    } else {
        (2u8, 12)
    };
    let pad = pad_for(prefix);
    let total = hlen + pad;
    let mut out = Vec::with_capacity(prefix + total);
    out.extend_from_slice(&NPY_MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(total as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(total as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    out
}

fn check_consistent(a: &NpyArray) -> Result<()> {
    let need = numel(&a.shape).and_then(|n| n.checked_mul(a.dtype.item_size()?));
    if need != Some(a.data.len()) {
        return Err(Error::Shape(format!(
            "{} array of shape {:?} cannot hold {} bytes",
            a.dtype,
            a.shape,
            a.data.len()
        )));
    }
    Ok(())
}

/// Serialise an array to `.npy` bytes (as numpy 2 would write them).
pub fn to_bytes(a: &NpyArray) -> Result<Vec<u8>> {
    check_consistent(a)?;
    let mut out = header_bytes(a);
    out.extend_from_slice(&a.data);
    Ok(out)
}

/// Write an array to a stream.
pub fn write(a: &NpyArray, mut w: impl Write) -> Result<()> {
    check_consistent(a)?;
    w.write_all(&header_bytes(a))
        .and_then(|()| w.write_all(&a.data))
        .map_err(FormatError::write(FORMAT))
}

/// Write an array to `path` atomically (temporary file, fsync, rename).
pub fn write_file(path: impl AsRef<Path>, a: &NpyArray) -> Result<()> {
    check_consistent(a)?;
    write_atomic(path, |w| {
        w.write_all(&header_bytes(a))?;
        w.write_all(&a.data)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fortran_to_c_reorders() {
        // [[0, 1, 2], [3, 4, 5]] in Fortran order is 0 3 1 4 2 5.
        assert_eq!(
            fortran_to_c(&[0, 3, 1, 4, 2, 5], &[2, 3], 1),
            [0, 1, 2, 3, 4, 5]
        );
        // 2-byte items move whole.
        assert_eq!(fortran_to_c(&[0, 10, 1, 11], &[2, 1, 1], 2), [0, 10, 1, 11]);
        assert!(fortran_to_c(&[], &[0, 3], 4).is_empty());
        let (a, b, c) = (2, 3, 4);
        let f: Vec<u8> = (0..a * b * c)
            .map(|i| {
                let (x, y, z) = (i % a, i / a % b, i / (a * b));
                (x * b * c + y * c + z) as u8
            })
            .collect();
        let want: Vec<u8> = (0..24).collect();
        assert_eq!(fortran_to_c(&f, &[a, b, c], 1), want);
    }
}
