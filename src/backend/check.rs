//! Operand checks every backend runs when an op is recorded, so a bad shape, dtype or range is
//! the same error on the CPU and on Vulkan, raised at record time.
//!
//! [`check`] is the one entry: [`crate::Backend::record`] calls it for every op, and only it
//! makes the [`Checked`] operands a backend's `dispatch` takes. It is generated from the op
//! table (`crate::ops::for_each_op!`) and calls, for each op, the function named after the op
//! here: it takes the op's parameters and operands in table order (required inputs, optional
//! inputs, output) and returns the checked operands in the same order, each trimmed to the
//! length the op reads or writes.

// The checked operands come back as plain tuples in argument order, on purpose.
#![allow(clippy::type_complexity)]

use super::BufRef;
use crate::error::{Error, Result};
use crate::ops::*;

/// An op call whose operands passed [`check`], each trimmed to the range the op reads or
/// writes. Only [`check`] makes one, so a backend's `dispatch` sees checked operands only.
pub struct Checked<'a, B>(Call<'a, BufRef<B>>);

impl<'a, B> Checked<'a, B> {
    /// The op's parameters and its checked operands by name.
    pub fn into_call(self) -> Call<'a, BufRef<B>> {
        self.0
    }
}

/// [`check`]: every op's operands through the function named after the op.
macro_rules! define_check {
    ($(
        $(#[$doc:meta])*
        $V:ident($P:ty) $name:ident { $($in:ident),* ; $($opt:ident),* } -> $out:ident
        $(, $by_hand:ident)?;
    )*) => {
        /// Check an op's operands: dtypes, lengths for the parameters, ranges inside their
        /// buffers, and an output that is writable and overlaps no input.
        pub fn check<'a, B: BufferInfo + Clone>(
            call: Call<'a, &BufRef<B>>,
        ) -> Result<Checked<'a, B>> {
            Ok(Checked(match call {
                $( Call::$V { p, $($in,)* $($opt,)* $out } => {
                    let ($($in,)* $($opt,)* $out,) = $name(p, $($in,)* $($opt,)* $out)?;
                    Call::$V { p, $($in,)* $($opt,)* $out }
                } )*
            }))
        }
    };
}

for_each_op!(define_check);
use crate::tensor::{DType, Layout, MAX_RANK};

/// What the checks need to know about a backend buffer.
pub trait BufferInfo {
    /// Size of the buffer in bytes.
    fn byte_len(&self) -> usize;
    /// Whether two handles name the same storage (for the overlap check).
    fn same(&self, other: &Self) -> bool;
    /// Whether ops may not write it (host tensors bound with `bind_host`).
    fn is_read_only(&self) -> bool;
}

/// Every float weight dtype (linear and embedding tables).
pub const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::Q8_0];
pub const F32: &[DType] = &[DType::F32];
/// The dtypes `copy` moves (2- and 4-byte elements).
pub const COPYABLE: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32];

type Ref<B> = BufRef<B>;

/// Byte offset and byte length of a range, checked against its buffer.
pub fn byte_range<B: BufferInfo>(op: &'static str, r: &Ref<B>) -> Result<(usize, usize)> {
    let start = r.dtype.bytes_for(r.offset).ok_or_else(|| {
        Error::Shape(format!(
            "{op}: offset {} is not a whole {} block",
            r.offset, r.dtype
        ))
    })?;
    let len = r.dtype.bytes_for(r.len).ok_or_else(|| {
        Error::Shape(format!(
            "{op}: {} elements is not a whole number of {} blocks",
            r.len, r.dtype
        ))
    })?;
    if start.checked_add(len).is_none_or(|e| e > r.buf.byte_len()) {
        return Err(Error::Shape(format!(
            "{op}: range {}..+{} {} lies outside its {}-byte buffer",
            r.offset,
            r.len,
            r.dtype,
            r.buf.byte_len()
        )));
    }
    Ok((start, len))
}

/// The byte range of `r` for a host write of `given` bytes, which must fill it exactly.
pub fn write_range<B: BufferInfo>(r: &Ref<B>, given: usize) -> Result<(usize, usize)> {
    sized_range("write", r, given, " bytes given")
}

/// The byte range of `r` for a read into a `given`-byte destination, which it must fill
/// exactly.
pub fn read_range<B: BufferInfo>(r: &Ref<B>, given: usize) -> Result<(usize, usize)> {
    sized_range("read", r, given, "-byte destination")
}

/// [`byte_range`], checked to be `given` bytes long (`what` follows that number in the error).
fn sized_range<B: BufferInfo>(
    op: &'static str,
    r: &Ref<B>,
    given: usize,
    what: &str,
) -> Result<(usize, usize)> {
    let (s, l) = byte_range(op, r)?;
    if given != l {
        return Err(Error::Shape(format!(
            "{op}: {given}{what} for a {l}-byte range"
        )));
    }
    Ok((s, l))
}

/// The error for an embedding token id outside the table, the same on every backend. Unlike
/// the checks here it is raised when the op runs (ids are data): by the CPU kernel, and by the
/// Vulkan backend from the shader's status words.
pub fn bad_id(id: u32, position: usize, vocab: usize) -> Error {
    Error::Kernel {
        op: "embedding",
        msg: format!("token id {id} at position {position} is outside the {vocab}-row table"),
    }
}

/// A checked input operand: dtype allowed and `need` elements available.
pub fn input<B: BufferInfo + Clone>(
    op: &'static str,
    what: &str,
    r: &Ref<B>,
    dtypes: &[DType],
    need: usize,
) -> Result<Ref<B>> {
    expect_dtype(op, what, r.dtype, dtypes)?;
    expect_len(op, what, r.len, need)?;
    byte_range(op, r)?;
    Ok(BufRef {
        len: need,
        ..r.clone()
    })
}

/// A checked output operand, writable and not overlapping any input.
pub fn output<B: BufferInfo + Clone>(
    op: &'static str,
    r: &Ref<B>,
    dtype: DType,
    need: usize,
    inputs: &[&Ref<B>],
) -> Result<Ref<B>> {
    expect_dtype(op, "output", r.dtype, &[dtype])?;
    expect_len(op, "output", r.len, need)?;
    let out = BufRef {
        len: need,
        ..r.clone()
    };
    let (os, ol) = byte_range(op, &out)?;
    if out.buf.is_read_only() {
        return Err(Error::InvalidArgument(format!(
            "{op}: the output is a read-only host buffer"
        )));
    }
    for i in inputs {
        if i.buf.same(&out.buf) {
            let (is, il) = byte_range(op, i)?;
            if os < is + il && is < os + ol {
                return Err(Error::InvalidArgument(format!(
                    "{op}: the output range overlaps an input range of the same buffer"
                )));
            }
        }
    }
    Ok(out)
}

pub fn nonzero(op: &'static str, what: &str, v: usize) -> Result<()> {
    if v == 0 {
        return Err(Error::Shape(format!("{op}: {what} must be at least 1")));
    }
    Ok(())
}

/// The product of `dims`, or an error when it overflows.
pub fn mul(op: &'static str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::Shape(format!("{op}: size {dims:?} overflows")))
}

/// `(x, w, bias, y)`.
fn linear<B: BufferInfo + Clone>(
    p: &LinearParams,
    x: &Ref<B>,
    w: &Ref<B>,
    bias: Option<&Ref<B>>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Option<Ref<B>>, Ref<B>)> {
    const OP: &str = "linear";
    nonzero(OP, "k", p.k)?;
    if w.dtype == DType::Q8_0 && !p.k.is_multiple_of(32) {
        return Err(Error::Shape(format!(
            "{OP}: q8_0 weights need k a multiple of 32, got {}",
            p.k
        )));
    }
    let x = input(OP, "x", x, F32, mul(OP, &[p.m, p.k])?)?;
    let w = input(OP, "weight", w, FLOATS, mul(OP, &[p.n, p.k])?)?;
    let bias = bias.map(|b| input(OP, "bias", b, F32, p.n)).transpose()?;
    let mut ins = vec![&x, &w];
    ins.extend(bias.as_ref());
    let y = output(OP, y, DType::F32, mul(OP, &[p.m, p.n])?, &ins)?;
    Ok((x, w, bias, y))
}

/// `(a, b, c)`.
fn batched_matmul<B: BufferInfo + Clone>(
    p: &BatchedMatmulParams,
    a: &Ref<B>,
    b: &Ref<B>,
    c: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Ref<B>)> {
    const OP: &str = "batched_matmul";
    nonzero(OP, "batch", p.batch)?;
    let a_need = (p.batch - 1) * p.a_batch_stride + mul(OP, &[p.m, p.k])?;
    let b_need = (p.batch - 1) * p.b_batch_stride + mul(OP, &[p.k, p.n])?;
    let a = input(OP, "a", a, F32, a_need)?;
    let b = input(OP, "b", b, F32, b_need)?;
    let c = output(OP, c, DType::F32, mul(OP, &[p.batch, p.m, p.n])?, &[&a, &b])?;
    Ok((a, b, c))
}

/// The operands of the LayerNorm ops: `rows x cols` f32 inputs named in `xs` (x, and the
/// residual of [`add_layer_norm`]), `[cols]` gamma and beta, and the output, which overlaps none.
#[allow(clippy::type_complexity)]
fn norm_operands<B: BufferInfo + Clone, const N: usize>(
    op: &'static str,
    p: &NormParams,
    xs: [(&'static str, &Ref<B>); N],
    gamma: Option<&Ref<B>>,
    beta: Option<&Ref<B>>,
    y: &Ref<B>,
) -> Result<([Ref<B>; N], Option<Ref<B>>, Option<Ref<B>>, Ref<B>)> {
    nonzero(op, "cols", p.cols)?;
    let n = mul(op, &[p.rows, p.cols])?;
    let mut xr = Vec::with_capacity(N);
    for (what, x) in xs {
        xr.push(input(op, what, x, F32, n)?);
    }
    let g = gamma
        .map(|g| input(op, "gamma", g, F32, p.cols))
        .transpose()?;
    let b = beta
        .map(|b| input(op, "beta", b, F32, p.cols))
        .transpose()?;
    let mut ins: Vec<&Ref<B>> = xr.iter().collect();
    ins.extend(g.as_ref());
    ins.extend(b.as_ref());
    let y = output(op, y, DType::F32, n, &ins)?;
    let xr = xr
        .try_into()
        .unwrap_or_else(|_| unreachable!("one checked operand per input"));
    Ok((xr, g, b, y))
}

/// `(x, gamma, beta, y)`.
fn layer_norm<B: BufferInfo + Clone>(
    p: &NormParams,
    x: &Ref<B>,
    gamma: Option<&Ref<B>>,
    beta: Option<&Ref<B>>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Option<Ref<B>>, Option<Ref<B>>, Ref<B>)> {
    let ([x], g, b, y) = norm_operands("layer_norm", p, [("x", x)], gamma, beta, y)?;
    Ok((x, g, b, y))
}

/// `(x, r, gamma, beta, y)`: [`layer_norm`]'s operands plus the residual `r`, shaped as `x`.
#[allow(clippy::type_complexity)]
fn add_layer_norm<B: BufferInfo + Clone>(
    p: &NormParams,
    x: &Ref<B>,
    r: &Ref<B>,
    gamma: Option<&Ref<B>>,
    beta: Option<&Ref<B>>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Option<Ref<B>>, Option<Ref<B>>, Ref<B>)> {
    let xs = [("x", x), ("r", r)];
    let ([x, r], g, b, y) = norm_operands("add_layer_norm", p, xs, gamma, beta, y)?;
    Ok((x, r, g, b, y))
}

/// `(x, gamma, y)`.
fn rms_norm<B: BufferInfo + Clone>(
    p: &NormParams,
    x: &Ref<B>,
    gamma: Option<&Ref<B>>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Option<Ref<B>>, Ref<B>)> {
    const OP: &str = "rms_norm";
    nonzero(OP, "cols", p.cols)?;
    let n = mul(OP, &[p.rows, p.cols])?;
    let x = input(OP, "x", x, F32, n)?;
    let g = gamma
        .map(|g| input(OP, "gamma", g, F32, p.cols))
        .transpose()?;
    let mut ins = vec![&x];
    ins.extend(g.as_ref());
    let y = output(OP, y, DType::F32, n, &ins)?;
    Ok((x, g, y))
}

/// `(x, y)`.
fn softmax<B: BufferInfo + Clone>(
    p: &SoftmaxParams,
    x: &Ref<B>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>)> {
    const OP: &str = "softmax";
    nonzero(OP, "cols", p.cols)?;
    let n = mul(OP, &[p.rows, p.cols])?;
    let x = input(OP, "x", x, F32, n)?;
    let y = output(OP, y, DType::F32, n, &[&x])?;
    Ok((x, y))
}

/// `(q, k, v, mask, out)`.
fn attention<B: BufferInfo + Clone>(
    p: &AttentionParams,
    q: &Ref<B>,
    k: &Ref<B>,
    v: &Ref<B>,
    mask: Option<&Ref<B>>,
    out: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Ref<B>, Option<Ref<B>>, Ref<B>)> {
    const OP: &str = "attention";
    for (what, val) in [
        ("batch", p.batch),
        ("q_len", p.q_len),
        ("kv_len", p.kv_len),
        ("q_heads", p.q_heads),
        ("kv_heads", p.kv_heads),
        ("head_dim", p.head_dim),
    ] {
        nonzero(OP, what, val)?;
    }
    if !p.q_heads.is_multiple_of(p.kv_heads) {
        return Err(Error::Shape(format!(
            "{OP}: {} query heads do not group evenly over {} kv heads",
            p.q_heads, p.kv_heads
        )));
    }
    if p.q_row_stride < p.q_heads * p.head_dim || p.kv_row_stride < p.kv_heads * p.head_dim {
        return Err(Error::Shape(format!(
            "{OP}: row strides {}/{} are shorter than a token's heads",
            p.q_row_stride, p.kv_row_stride
        )));
    }
    let span = |rows: usize, stride: usize, width: usize| -> Result<usize> {
        Ok(mul(OP, &[rows - 1, stride])? + width)
    };
    let q = input(
        OP,
        "q",
        q,
        F32,
        span(p.batch * p.q_len, p.q_row_stride, p.q_heads * p.head_dim)?,
    )?;
    let kv_need = span(p.batch * p.kv_len, p.kv_row_stride, p.kv_heads * p.head_dim)?;
    let k = input(OP, "k", k, F32, kv_need)?;
    let v = input(OP, "v", v, F32, kv_need)?;
    let mask = match (p.mask, mask) {
        (MaskKind::KeyPadding, Some(m)) => Some(input(
            OP,
            "mask",
            m,
            &[DType::U32],
            mul(OP, &[p.batch, p.kv_len])?,
        )?),
        (MaskKind::KeyPadding, None) => {
            return Err(Error::InvalidArgument(format!(
                "{OP}: a key-padding mask needs a mask buffer"
            )));
        }
        (_, Some(_)) => {
            return Err(Error::InvalidArgument(format!(
                "{OP}: a mask buffer was given but the mask kind is {:?}",
                p.mask
            )));
        }
        (_, None) => None,
    };
    let mut ins = vec![&q, &k, &v];
    ins.extend(mask.as_ref());
    let out = output(
        OP,
        out,
        DType::F32,
        mul(OP, &[p.batch, p.q_len, p.q_heads, p.head_dim])?,
        &ins,
    )?;
    Ok((q, k, v, mask, out))
}

/// An elementwise f32 op of one operand: `(x, y)` with y as long as x.
fn unary<B: BufferInfo + Clone>(
    op: &'static str,
    x: &Ref<B>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>)> {
    let x = input(op, "x", x, F32, x.len)?;
    let y = output(op, y, DType::F32, x.len, &[&x])?;
    Ok((x, y))
}

/// `(x, y)`.
fn activation<B: BufferInfo + Clone>(
    _: &Activation,
    x: &Ref<B>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>)> {
    unary("activation", x, y)
}

/// `(gate, up, y)`.
fn swiglu<B: BufferInfo + Clone>(
    p: &SwigluParams,
    gate: &Ref<B>,
    up: &Ref<B>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Ref<B>)> {
    const OP: &str = "swiglu";
    if p.stride < p.cols {
        return Err(Error::Shape(format!(
            "{OP}: row stride {} is shorter than a row of {} values",
            p.stride, p.cols
        )));
    }
    let n = mul(OP, &[p.rows, p.cols])?;
    // The last row ends `cols` into its stride.
    let span = match p.rows {
        0 => 0,
        r => mul(OP, &[r - 1, p.stride])?
            .checked_add(p.cols)
            .ok_or_else(|| {
                Error::Shape(format!("{OP}: {r} rows of stride {} overflow", p.stride))
            })?,
    };
    let g = input(OP, "gate", gate, F32, span)?;
    let u = input(OP, "up", up, F32, span)?;
    let y = output(OP, y, DType::F32, n, &[&g, &u])?;
    Ok((g, u, y))
}

/// `(x, positions, inv_freq, y)`.
fn rope<B: BufferInfo + Clone>(
    p: &RopeParams,
    x: &Ref<B>,
    positions: &Ref<B>,
    inv_freq: &Ref<B>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Ref<B>, Ref<B>)> {
    const OP: &str = "rope";
    if !p.head_dim.is_multiple_of(2) {
        return Err(Error::Shape(format!(
            "{OP}: head_dim {} must be even",
            p.head_dim
        )));
    }
    let rotated = mul(OP, &[p.heads, p.head_dim])?;
    if p.row_stride < rotated {
        return Err(Error::Shape(format!(
            "{OP}: row stride {} is shorter than {} heads of {}",
            p.row_stride, p.heads, p.head_dim
        )));
    }
    let n = mul(OP, &[p.tokens, p.row_stride])?;
    let x = input(OP, "x", x, F32, n)?;
    let pos = input(OP, "positions", positions, &[DType::I32], p.tokens)?;
    let f = input(OP, "inv_freq", inv_freq, F32, p.head_dim / 2)?;
    let y = output(OP, y, DType::F32, n, &[&x, &pos, &f])?;
    Ok((x, pos, f, y))
}

/// `(x, w, bias, y)`.
fn conv1d<B: BufferInfo + Clone>(
    p: &Conv1dParams,
    x: &Ref<B>,
    w: &Ref<B>,
    bias: Option<&Ref<B>>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Option<Ref<B>>, Ref<B>)> {
    const OP: &str = "conv1d";
    nonzero(OP, "dilation", p.dilation)?;
    let out_len = p.out_len()?;
    let x = input(OP, "x", x, F32, mul(OP, &[p.batch, p.c_in, p.len])?)?;
    let w = input(OP, "weight", w, F32, mul(OP, &[p.c_out, p.c_in, p.kernel])?)?;
    let b = bias
        .map(|b| input(OP, "bias", b, F32, p.c_out))
        .transpose()?;
    let mut ins = vec![&x, &w];
    ins.extend(b.as_ref());
    let y = output(
        OP,
        y,
        DType::F32,
        mul(OP, &[p.batch, p.c_out, out_len])?,
        &ins,
    )?;
    Ok((x, w, b, y))
}

/// `(x, y)`.
fn upsample_nearest2x<B: BufferInfo + Clone>(
    p: &UpsampleParams,
    x: &Ref<B>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>)> {
    const OP: &str = "upsample_nearest2x";
    let n = mul(OP, &[p.rows, p.len])?;
    let x = input(OP, "x", x, F32, n)?;
    let y = output(OP, y, DType::F32, mul(OP, &[n, 2])?, &[&x])?;
    Ok((x, y))
}

/// `(a, b, y)`.
fn binary<B: BufferInfo + Clone>(
    p: &BinaryParams,
    a: &Ref<B>,
    b: &Ref<B>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Ref<B>)> {
    const OP: &str = "binary";
    nonzero(OP, "b_len", p.b_len)?;
    if !p.n.is_multiple_of(p.b_len) {
        return Err(Error::Shape(format!(
            "{OP}: {} elements do not repeat a {}-element operand evenly",
            p.n, p.b_len
        )));
    }
    let a = input(OP, "a", a, F32, p.n)?;
    let b = input(OP, "b", b, F32, p.b_len)?;
    let y = output(OP, y, DType::F32, p.n, &[&a, &b])?;
    Ok((a, b, y))
}

/// `(x, y)`.
fn scale<B: BufferInfo + Clone>(
    _: &ScaleParams,
    x: &Ref<B>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>)> {
    unary("scale", x, y)
}

/// `(x, y, out)`.
fn axpby<B: BufferInfo + Clone>(
    _: &AxpbyParams,
    x: &Ref<B>,
    y: &Ref<B>,
    out: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Ref<B>)> {
    const OP: &str = "axpby";
    let x = input(OP, "x", x, F32, x.len)?;
    let y = input(OP, "y", y, F32, x.len)?;
    let o = output(OP, out, DType::F32, x.len, &[&x, &y])?;
    Ok((x, y, o))
}

/// `(x, m, r, y)`: `n` f32 elements each.
#[allow(clippy::type_complexity)]
fn masked_act<B: BufferInfo + Clone>(
    p: &MaskedActParams,
    x: &Ref<B>,
    m: &Ref<B>,
    r: Option<&Ref<B>>,
    y: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Option<Ref<B>>, Ref<B>)> {
    const OP: &str = "masked_act";
    let x = input(OP, "x", x, F32, p.n)?;
    let m = input(OP, "m", m, F32, p.n)?;
    let r = r.map(|r| input(OP, "r", r, F32, p.n)).transpose()?;
    let mut ins = vec![&x, &m];
    ins.extend(r.as_ref());
    let y = output(OP, y, DType::F32, p.n, &ins)?;
    Ok((x, m, r, y))
}

/// `(ids, table, out)`.
fn embedding<B: BufferInfo + Clone>(
    p: &EmbeddingParams,
    ids: &Ref<B>,
    table: &Ref<B>,
    out: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Ref<B>)> {
    const OP: &str = "embedding";
    if table.dtype == DType::Q8_0 && !p.dim.is_multiple_of(32) {
        return Err(Error::Shape(format!(
            "{OP}: q8_0 tables need dim a multiple of 32, got {}",
            p.dim
        )));
    }
    let ids = input(OP, "ids", ids, &[DType::U32], p.tokens)?;
    let t = input(OP, "table", table, FLOATS, mul(OP, &[p.vocab, p.dim])?)?;
    let o = output(
        OP,
        out,
        DType::F32,
        mul(OP, &[p.tokens, p.dim])?,
        &[&ids, &t],
    )?;
    Ok((ids, t, o))
}

/// `(src, dst)`, each trimmed to the span its strided layout touches (the layouts' own
/// offsets, `p.src_offset` and `p.dst_offset`, are inside those spans).
fn copy<B: BufferInfo + Clone>(
    p: &CopyParams,
    src: &Ref<B>,
    dst: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>)> {
    const OP: &str = "copy";
    if src.dtype != dst.dtype {
        return Err(Error::DType(format!(
            "{OP}: source is {} but destination is {}",
            src.dtype, dst.dtype
        )));
    }
    let r = p.shape.len();
    if p.src_strides.len() != r || p.dst_strides.len() != r || r > MAX_RANK {
        return Err(Error::Shape(format!(
            "{OP}: shape {:?} and strides {:?} / {:?} disagree in rank (max {MAX_RANK})",
            p.shape, p.src_strides, p.dst_strides,
        )));
    }
    let sl = Layout::strided(&p.shape, &p.src_strides, p.src_offset)?;
    let dl = Layout::strided(&p.shape, &p.dst_strides, p.dst_offset)?;
    let s = input(OP, "src", src, COPYABLE, sl.span()?)?;
    let d = output(OP, dst, dst.dtype, dl.span()?, &[&s])?;
    Ok((s, d))
}

/// `(x, mask, out)`.
fn mean_pool<B: BufferInfo + Clone>(
    p: &MeanPoolParams,
    x: &Ref<B>,
    mask: &Ref<B>,
    out: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Ref<B>)> {
    const OP: &str = "mean_pool";
    let x = input(OP, "x", x, F32, mul(OP, &[p.batch, p.seq, p.dim])?)?;
    let m = input(OP, "mask", mask, &[DType::U32], mul(OP, &[p.batch, p.seq])?)?;
    let o = output(OP, out, DType::F32, mul(OP, &[p.batch, p.dim])?, &[&x, &m])?;
    Ok((x, m, o))
}

/// `(x, out)`.
fn argmax<B: BufferInfo + Clone>(
    p: &ArgmaxParams,
    x: &Ref<B>,
    out: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>)> {
    const OP: &str = "argmax";
    nonzero(OP, "cols", p.cols)?;
    let x = input(OP, "x", x, F32, mul(OP, &[p.rows, p.cols])?)?;
    let o = output(OP, out, DType::U32, p.rows, &[&x])?;
    Ok((x, o))
}

/// `(logits, uniforms, out)`.
fn gumbel<B: BufferInfo + Clone>(
    p: &GumbelParams,
    logits: &Ref<B>,
    uniforms: Option<&Ref<B>>,
    out: &Ref<B>,
) -> Result<(Ref<B>, Option<Ref<B>>, Ref<B>)> {
    const OP: &str = "gumbel";
    nonzero(OP, "cols", p.cols)?;
    if !(p.temperature.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "{OP}: temperature {} is not finite",
            p.temperature
        )));
    }
    let n = mul(OP, &[p.rows, p.cols])?;
    let l = input(OP, "logits", logits, F32, n)?;
    let u = uniforms
        .map(|u| input(OP, "uniforms", u, F32, n))
        .transpose()?;
    let mut ins = vec![&l];
    ins.extend(u.as_ref());
    let o = output(OP, out, DType::U32, p.rows, &ins)?;
    Ok((l, u, o))
}

/// `(out,)`.
fn posenc<B: BufferInfo + Clone>(p: &PosEncParams, out: &Ref<B>) -> Result<(Ref<B>,)> {
    const OP: &str = "posenc";
    if !p.dim.is_multiple_of(2) {
        return Err(Error::Shape(format!("{OP}: dim {} must be even", p.dim)));
    }
    Ok((output(OP, out, DType::F32, mul(OP, &[p.len, p.dim])?, &[])?,))
}

/// `(x_t, x0, coef, out)`.
fn ddim<B: BufferInfo + Clone>(
    p: &DdimParams,
    x_t: &Ref<B>,
    x0: &Ref<B>,
    coef: &Ref<B>,
    out: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>, Ref<B>, Ref<B>)> {
    const OP: &str = "ddim";
    let xt = input(OP, "x_t", x_t, F32, p.n)?;
    let x0 = input(OP, "x0", x0, F32, p.n)?;
    let c = input(OP, "coef", coef, F32, 4)?;
    let o = output(OP, out, DType::F32, p.n, &[&xt, &x0, &c])?;
    Ok((xt, x0, c, o))
}

/// `(rows, out)`.
fn cfg<B: BufferInfo + Clone>(
    p: &CfgParams,
    rows: &Ref<B>,
    out: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>)> {
    const OP: &str = "cfg";
    if !(p.rows == 2 || p.rows == 3) {
        return Err(Error::InvalidArgument(format!(
            "{OP}: {} rows; classifier-free guidance takes 2 or 3",
            p.rows
        )));
    }
    let r = input(OP, "rows", rows, F32, mul(OP, &[p.rows, p.n])?)?;
    let o = output(OP, out, DType::F32, p.n, &[&r])?;
    Ok((r, o))
}

/// `(x, out)`.
fn root_bridge<B: BufferInfo + Clone>(
    p: &RootBridgeParams,
    x: &Ref<B>,
    out: &Ref<B>,
) -> Result<(Ref<B>, Ref<B>)> {
    const OP: &str = "root_bridge";
    nonzero(OP, "rows", p.rows)?;
    if p.frames < 2 {
        return Err(Error::Shape(format!(
            "{OP}: {} frame(s); the root velocities need at least 2 frames",
            p.frames
        )));
    }
    let x = input(OP, "x", x, F32, mul(OP, &[p.rows, p.frames, 5])?)?;
    let o = output(OP, out, DType::F32, mul(OP, &[p.rows, p.frames, 4])?, &[&x])?;
    Ok((x, o))
}
