//! GGUF metadata values: their type ids, the values and arrays, and conversions into them.

/// Type ids of metadata values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgufType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl GgufType {
    pub fn from_id(id: u32) -> Option<GgufType> {
        use GgufType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    pub fn name(self) -> &'static str {
        use GgufType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// Fewest bytes one value of this type occupies in a file (a string is at least its
    /// length field, an array its type and count). Bounds element counts by the bytes left.
    pub(super) fn min_size(self) -> u64 {
        use GgufType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(GgufArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array: elements of one type, stored typed. An array of arrays holds inner
/// arrays that may each have their own element type.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<GgufArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl GgufValue {
    pub fn ty(&self) -> GgufType {
        match self {
            GgufValue::U8(_) => GgufType::U8,
            GgufValue::I8(_) => GgufType::I8,
            GgufValue::U16(_) => GgufType::U16,
            GgufValue::I16(_) => GgufType::I16,
            GgufValue::U32(_) => GgufType::U32,
            GgufValue::I32(_) => GgufType::I32,
            GgufValue::F32(_) => GgufType::F32,
            GgufValue::Bool(_) => GgufType::Bool,
            GgufValue::String(_) => GgufType::String,
            GgufValue::Array(_) => GgufType::Array,
            GgufValue::U64(_) => GgufType::U64,
            GgufValue::I64(_) => GgufType::I64,
            GgufValue::F64(_) => GgufType::F64,
        }
    }

    /// "u32", "string", "array of f32", ... for error messages.
    pub fn type_name(&self) -> String {
        match self {
            GgufValue::Array(a) => format!("array of {}", a.elem_type().name()),
            v => v.ty().name().to_string(),
        }
    }

    /// Any integer value, widened (negative values give `None`).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer value that fits an i64.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// Any integer value that fits a u32 (writers differ in the width they pick).
    pub fn as_u32(&self) -> Option<u32> {
        self.as_u64().and_then(|v| u32::try_from(v).ok())
    }

    /// An F32 value (an F64 is not narrowed silently: use [`GgufValue::as_f64`]).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            GgufValue::F32(v) => Some(v),
            _ => None,
        }
    }

    /// An F32 or F64 value.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&GgufArray> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl GgufArray {
    pub fn elem_type(&self) -> GgufType {
        match self {
            GgufArray::U8(_) => GgufType::U8,
            GgufArray::I8(_) => GgufType::I8,
            GgufArray::U16(_) => GgufType::U16,
            GgufArray::I16(_) => GgufType::I16,
            GgufArray::U32(_) => GgufType::U32,
            GgufArray::I32(_) => GgufType::I32,
            GgufArray::F32(_) => GgufType::F32,
            GgufArray::Bool(_) => GgufType::Bool,
            GgufArray::String(_) => GgufType::String,
            GgufArray::Array(_) => GgufType::Array,
            GgufArray::U64(_) => GgufType::U64,
            GgufArray::I64(_) => GgufType::I64,
            GgufArray::F64(_) => GgufType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            GgufArray::U8(v) => v.len(),
            GgufArray::I8(v) => v.len(),
            GgufArray::U16(v) => v.len(),
            GgufArray::I16(v) => v.len(),
            GgufArray::U32(v) => v.len(),
            GgufArray::I32(v) => v.len(),
            GgufArray::F32(v) => v.len(),
            GgufArray::Bool(v) => v.len(),
            GgufArray::String(v) => v.len(),
            GgufArray::Array(v) => v.len(),
            GgufArray::U64(v) => v.len(),
            GgufArray::I64(v) => v.len(),
            GgufArray::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Nesting depth: 1 for an array of scalars, 1 + the deepest inner array otherwise.
    pub(super) fn depth(&self) -> usize {
        match self {
            GgufArray::Array(v) => 1 + v.iter().map(GgufArray::depth).max().unwrap_or(0),
            _ => 1,
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for GgufValue {
            fn from(x: $t) -> GgufValue {
                GgufValue::$v(x)
            }
        }
        impl From<Vec<$t>> for GgufArray {
            fn from(x: Vec<$t>) -> GgufArray {
                GgufArray::$v(x)
            }
        }
    )*};
}
value_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, u64 => U64, i64 => I64, f64 => F64);

impl From<&str> for GgufValue {
    fn from(s: &str) -> GgufValue {
        GgufValue::String(s.to_string())
    }
}
impl From<GgufArray> for GgufValue {
    fn from(a: GgufArray) -> GgufValue {
        GgufValue::Array(a)
    }
}
impl From<Vec<GgufArray>> for GgufArray {
    fn from(x: Vec<GgufArray>) -> GgufArray {
        GgufArray::Array(x)
    }
}
