//! [`CpuBackend`]: the dispatch trait on the CPU. Ops are checked and recorded as closures;
//! `submit` runs them in order on the calling thread and the pool. Weights bound from a
//! memory-mapped file are read in place.

use std::cell::UnsafeCell;
use std::sync::{Arc, Mutex};

use half::{bf16, f16};

use super::{Cx, Isa, ThreadPool, Weights};
use crate::backend::{Backend, BackendInfo, BufRef, Precision};
use crate::error::{Error, Result};
use crate::ops::*;
use crate::tensor::{DType, HostData, HostTensor};

enum Data {
    /// Writable memory, 8-byte aligned (kept as u64 words).
    Owned(UnsafeCell<Vec<u64>>),
    /// Read-only host bytes (an owned host tensor or a slice of a memory map).
    Host(HostData),
}

struct Storage {
    data: Data,
    bytes: usize,
}

// SAFETY: the owned words are only written through `bytes_mut`, whose callers (the recorded
// ops and `write`) run while holding the backend's submission lock, and the recorder checks
// that an op's output range never overlaps its inputs.
unsafe impl Sync for Storage {}

/// A CPU buffer handle: reference counted, cheap to clone.
#[derive(Clone)]
pub struct CpuBuffer(Arc<Storage>);

impl CpuBuffer {
    fn bytes(&self) -> &[u8] {
        match &self.0.data {
            // SAFETY: see `Storage`'s Sync note: no writer runs during a read of the same range.
            Data::Owned(cell) => unsafe {
                &bytemuck::cast_slice::<u64, u8>(&*cell.get())[..self.0.bytes]
            },
            Data::Host(h) => h.bytes(),
        }
    }

    /// # Safety
    /// The caller must hold the backend's submission lock, and no other live slice of this
    /// buffer may overlap the range it writes.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self) -> Option<&mut [u8]> {
        match &self.0.data {
            // SAFETY: guaranteed by the caller (see above).
            Data::Owned(cell) => Some(unsafe {
                &mut bytemuck::cast_slice_mut::<u64, u8>(&mut *cell.get())[..self.0.bytes]
            }),
            Data::Host(_) => None,
        }
    }

    fn same(&self, other: &CpuBuffer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether this buffer reads a host tensor in place (no copy was made).
    pub fn is_borrowed_host(&self) -> bool {
        matches!(self.0.data, Data::Host(_))
    }
}

/// Recorded CPU work: a list of checked op closures.
pub struct CpuRecording {
    cmds: Vec<Box<Cmd>>,
}

type Cmd = dyn Fn(&Cx) -> Result<()> + Send + Sync;

impl CpuRecording {
    pub fn len(&self) -> usize {
        self.cmds.len()
    }
    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }
}

pub struct CpuBackend {
    isa: Isa,
    precision: Precision,
    pool: ThreadPool,
    lock: Mutex<()>,
}

impl CpuBackend {
    /// The ISA from `KINEMA_CPU_ISA` or detection, threads from `KINEMA_THREADS` or the
    /// machine.
    pub fn new(precision: Precision) -> Result<CpuBackend> {
        CpuBackend::with(
            Isa::select()?,
            ThreadPool::default_threads(),
            precision,
        )
    }

    /// An explicit ISA and thread count (errors if the CPU cannot run the ISA).
    pub fn with(isa: Isa, threads: usize, precision: Precision) -> Result<CpuBackend> {
        if !isa.is_supported() {
            return Err(Error::Backend {
                backend: "cpu",
                msg: format!("this CPU cannot run the {} kernels", isa.name()),
            });
        }
        Ok(CpuBackend {
            isa,
            precision,
            pool: ThreadPool::new(threads),
            lock: Mutex::new(()),
        })
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    fn cx(&self) -> Cx<'_> {
        Cx {
            isa: self.isa,
            pool: &self.pool,
            precision: self.precision,
        }
    }

    /// Record and run one op immediately (eager use outside a graph).
    pub fn eager(&self, f: impl FnOnce(&Self, &mut CpuRecording) -> Result<()>) -> Result<()> {
        let mut rec = self.begin()?;
        f(self, &mut rec)?;
        self.submit(&rec)
    }
}

// ---- views -----------------------------------------------------------------------------

/// Byte range of a BufRef, checked against the buffer.
fn byte_range(op: &'static str, r: &BufRef<CpuBuffer>) -> Result<(usize, usize)> {
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
    if start.checked_add(len).is_none_or(|e| e > r.buf.0.bytes) {
        return Err(Error::Shape(format!(
            "{op}: range {}..+{} {} lies outside its {}-byte buffer",
            r.offset, r.len, r.dtype, r.buf.0.bytes
        )));
    }
    Ok((start, len))
}

/// A checked input operand: dtype allowed and `need` elements available.
fn input(
    op: &'static str,
    what: &str,
    r: &BufRef<CpuBuffer>,
    dtypes: &[DType],
    need: usize,
) -> Result<BufRef<CpuBuffer>> {
    expect_dtype(op, what, r.dtype, dtypes)?;
    expect_len(op, what, r.len, need)?;
    byte_range(op, r)?;
    Ok(BufRef {
        len: need,
        ..r.clone()
    })
}

/// A checked output operand, writable and not overlapping any input.
fn output(
    op: &'static str,
    r: &BufRef<CpuBuffer>,
    dtype: DType,
    need: usize,
    inputs: &[&BufRef<CpuBuffer>],
) -> Result<BufRef<CpuBuffer>> {
    expect_dtype(op, "output", r.dtype, &[dtype])?;
    expect_len(op, "output", r.len, need)?;
    let out = BufRef {
        len: need,
        ..r.clone()
    };
    let (os, ol) = byte_range(op, &out)?;
    if out.buf.is_borrowed_host() {
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

fn slice<T: bytemuck::Pod>(r: &BufRef<CpuBuffer>) -> &[T] {
    let (s, l) = byte_range("read", r).expect("ranges are checked when ops are recorded");
    bytemuck::cast_slice(&r.buf.bytes()[s..s + l])
}

/// # Safety
/// As [`CpuBuffer::bytes_mut`]: called only from recorded ops during `submit`.
#[allow(clippy::mut_from_ref)]
unsafe fn slice_mut<T: bytemuck::Pod>(r: &BufRef<CpuBuffer>) -> &mut [T] {
    let (s, l) = byte_range("write", r).expect("ranges are checked when ops are recorded");
    // SAFETY: forwarded to the caller.
    let b = unsafe { r.buf.bytes_mut() }.expect("outputs are checked to be writable when recorded");
    bytemuck::cast_slice_mut(&mut b[s..s + l])
}

fn weights(r: &BufRef<CpuBuffer>) -> Weights<'_> {
    match r.dtype {
        DType::F32 => Weights::F32(slice::<f32>(r)),
        DType::F16 => Weights::F16(slice::<f16>(r)),
        DType::BF16 => Weights::BF16(slice::<bf16>(r)),
        DType::Q8_0 => {
            let (s, l) = byte_range("read", r).expect("checked when recorded");
            Weights::Q8_0(&r.buf.bytes()[s..s + l])
        }
        DType::I32 | DType::U32 => unreachable!("weight dtypes are checked when recorded"),
    }
}

const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::Q8_0];
const F32: &[DType] = &[DType::F32];

fn nonzero(op: &'static str, what: &str, v: usize) -> Result<()> {
    if v == 0 {
        return Err(Error::Shape(format!("{op}: {what} must be at least 1")));
    }
    Ok(())
}

fn mul(op: &'static str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::Shape(format!("{op}: size {dims:?} overflows")))
}

impl CpuRecording {
    fn push(&mut self, f: impl Fn(&Cx) -> Result<()> + Send + Sync + 'static) {
        self.cmds.push(Box::new(f));
    }
}

impl Backend for CpuBackend {
    type Buffer = CpuBuffer;
    type Recording = CpuRecording;

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "cpu",
            device: self.isa.name().to_string(),
            precision: self.precision,
            threads: self.pool.threads(),
        }
    }

    fn alloc(&self, dtype: DType, len: usize) -> Result<CpuBuffer> {
        let bytes = dtype.bytes_for(len).ok_or_else(|| {
            Error::Shape(format!(
                "{len} elements is not a whole number of {dtype} blocks"
            ))
        })?;
        let mut words = Vec::new();
        words
            .try_reserve_exact(bytes.div_ceil(8))
            .map_err(|_| Error::Backend {
                backend: "cpu",
                msg: format!("out of memory allocating {bytes} bytes"),
            })?;
        words.resize(bytes.div_ceil(8), 0u64);
        Ok(CpuBuffer(Arc::new(Storage {
            data: Data::Owned(UnsafeCell::new(words)),
            bytes,
        })))
    }

    fn bind_host(&self, t: &HostTensor) -> Result<CpuBuffer> {
        let bytes = t.bytes().len();
        Ok(CpuBuffer(Arc::new(Storage {
            data: Data::Host(t.data.clone()),
            bytes,
        })))
    }

    fn write(&self, dst: &BufRef<CpuBuffer>, bytes: &[u8]) -> Result<()> {
        let (s, l) = byte_range("write", dst)?;
        if bytes.len() != l {
            return Err(Error::Shape(format!(
                "write: {} bytes given for a {l}-byte range",
                bytes.len()
            )));
        }
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the submission lock is held, so no recorded op is reading or writing.
        let b = unsafe { dst.buf.bytes_mut() }.ok_or_else(|| {
            Error::InvalidArgument("write: the buffer is a read-only host buffer".into())
        })?;
        b[s..s + l].copy_from_slice(bytes);
        Ok(())
    }

    fn read(&self, src: &BufRef<CpuBuffer>, out: &mut [u8]) -> Result<()> {
        let (s, l) = byte_range("read", src)?;
        if out.len() != l {
            return Err(Error::Shape(format!(
                "read: {}-byte destination for a {l}-byte range",
                out.len()
            )));
        }
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        out.copy_from_slice(&src.buf.bytes()[s..s + l]);
        Ok(())
    }

    fn begin(&self) -> Result<CpuRecording> {
        Ok(CpuRecording { cmds: Vec::new() })
    }

    fn submit(&self, rec: &CpuRecording) -> Result<()> {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let cx = self.cx();
        for c in &rec.cmds {
            c(&cx)?;
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn linear(
        &self,
        rec: &mut CpuRecording,
        p: &LinearParams,
        x: &BufRef<CpuBuffer>,
        w: &BufRef<CpuBuffer>,
        bias: Option<&BufRef<CpuBuffer>>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
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
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: called during submit; `y` was checked disjoint from the inputs.
            let out = unsafe { slice_mut::<f32>(&y) };
            super::matmul::linear(
                cx,
                &p,
                slice(&x),
                weights(&w),
                bias.as_ref().map(slice),
                out,
            );
            Ok(())
        });
        Ok(())
    }

    fn batched_matmul(
        &self,
        rec: &mut CpuRecording,
        p: &BatchedMatmulParams,
        a: &BufRef<CpuBuffer>,
        b: &BufRef<CpuBuffer>,
        c: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "batched_matmul";
        nonzero(OP, "batch", p.batch)?;
        let a_need = (p.batch - 1) * p.a_batch_stride + mul(OP, &[p.m, p.k])?;
        let b_need = (p.batch - 1) * p.b_batch_stride + mul(OP, &[p.k, p.n])?;
        let a = input(OP, "a", a, F32, a_need)?;
        let b = input(OP, "b", b, F32, b_need)?;
        let c = output(OP, c, DType::F32, mul(OP, &[p.batch, p.m, p.n])?, &[&a, &b])?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::matmul::batched_matmul(cx, &p, slice(&a), slice(&b), unsafe { slice_mut(&c) });
            Ok(())
        });
        Ok(())
    }

    fn layer_norm(
        &self,
        rec: &mut CpuRecording,
        p: &NormParams,
        x: &BufRef<CpuBuffer>,
        gamma: Option<&BufRef<CpuBuffer>>,
        beta: Option<&BufRef<CpuBuffer>>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "layer_norm";
        nonzero(OP, "cols", p.cols)?;
        let n = mul(OP, &[p.rows, p.cols])?;
        let x = input(OP, "x", x, F32, n)?;
        let g = gamma
            .map(|g| input(OP, "gamma", g, F32, p.cols))
            .transpose()?;
        let b = beta
            .map(|b| input(OP, "beta", b, F32, p.cols))
            .transpose()?;
        let mut ins = vec![&x];
        ins.extend(g.as_ref());
        ins.extend(b.as_ref());
        let y = output(OP, y, DType::F32, n, &ins)?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            let out = unsafe { slice_mut(&y) };
            super::norm::layer_norm(
                cx,
                &p,
                slice(&x),
                g.as_ref().map(slice),
                b.as_ref().map(slice),
                out,
            );
            Ok(())
        });
        Ok(())
    }

    fn rms_norm(
        &self,
        rec: &mut CpuRecording,
        p: &NormParams,
        x: &BufRef<CpuBuffer>,
        gamma: Option<&BufRef<CpuBuffer>>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
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
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            let out = unsafe { slice_mut(&y) };
            super::norm::rms_norm(cx, &p, slice(&x), g.as_ref().map(slice), out);
            Ok(())
        });
        Ok(())
    }

    fn softmax(
        &self,
        rec: &mut CpuRecording,
        p: &SoftmaxParams,
        x: &BufRef<CpuBuffer>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "softmax";
        nonzero(OP, "cols", p.cols)?;
        let n = mul(OP, &[p.rows, p.cols])?;
        let x = input(OP, "x", x, F32, n)?;
        let y = output(OP, y, DType::F32, n, &[&x])?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::softmax::softmax(cx, &p, slice(&x), unsafe { slice_mut(&y) });
            Ok(())
        });
        Ok(())
    }

    fn attention(
        &self,
        rec: &mut CpuRecording,
        p: &AttentionParams,
        q: &BufRef<CpuBuffer>,
        k: &BufRef<CpuBuffer>,
        v: &BufRef<CpuBuffer>,
        mask: Option<&BufRef<CpuBuffer>>,
        out: &BufRef<CpuBuffer>,
    ) -> Result<()> {
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
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            let o = unsafe { slice_mut(&out) };
            super::attention::attention(
                cx,
                &p,
                slice(&q),
                slice(&k),
                slice(&v),
                mask.as_ref().map(slice),
                o,
            );
            Ok(())
        });
        Ok(())
    }

    fn activation(
        &self,
        rec: &mut CpuRecording,
        act: Activation,
        x: &BufRef<CpuBuffer>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "activation";
        let x = input(OP, "x", x, F32, x.len)?;
        let y = output(OP, y, DType::F32, x.len, &[&x])?;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::activation::activation(cx, act, slice(&x), unsafe { slice_mut(&y) });
            Ok(())
        });
        Ok(())
    }

    fn swiglu(
        &self,
        rec: &mut CpuRecording,
        gate: &BufRef<CpuBuffer>,
        up: &BufRef<CpuBuffer>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "swiglu";
        let n = gate.len;
        let g = input(OP, "gate", gate, F32, n)?;
        let u = input(OP, "up", up, F32, n)?;
        let y = output(OP, y, DType::F32, n, &[&g, &u])?;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::activation::swiglu(cx, slice(&g), slice(&u), unsafe { slice_mut(&y) });
            Ok(())
        });
        Ok(())
    }

    fn rope(
        &self,
        rec: &mut CpuRecording,
        p: &RopeParams,
        x: &BufRef<CpuBuffer>,
        positions: &BufRef<CpuBuffer>,
        inv_freq: &BufRef<CpuBuffer>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "rope";
        if !p.head_dim.is_multiple_of(2) {
            return Err(Error::Shape(format!(
                "{OP}: head_dim {} must be even",
                p.head_dim
            )));
        }
        let n = mul(OP, &[p.tokens, p.heads, p.head_dim])?;
        let x = input(OP, "x", x, F32, n)?;
        let pos = input(OP, "positions", positions, &[DType::I32], p.tokens)?;
        let f = input(OP, "inv_freq", inv_freq, F32, p.head_dim / 2)?;
        let y = output(OP, y, DType::F32, n, &[&x, &pos, &f])?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::rope::rope(cx, &p, slice(&x), slice(&pos), slice(&f), unsafe {
                slice_mut(&y)
            });
            Ok(())
        });
        Ok(())
    }

    fn conv1d(
        &self,
        rec: &mut CpuRecording,
        p: &Conv1dParams,
        x: &BufRef<CpuBuffer>,
        w: &BufRef<CpuBuffer>,
        bias: Option<&BufRef<CpuBuffer>>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
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
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            let out = unsafe { slice_mut(&y) };
            super::conv1d::conv1d(cx, &p, slice(&x), slice(&w), b.as_ref().map(slice), out);
            Ok(())
        });
        Ok(())
    }

    fn upsample_nearest2x(
        &self,
        rec: &mut CpuRecording,
        p: &UpsampleParams,
        x: &BufRef<CpuBuffer>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "upsample_nearest2x";
        let n = mul(OP, &[p.rows, p.len])?;
        let x = input(OP, "x", x, F32, n)?;
        let y = output(OP, y, DType::F32, mul(OP, &[n, 2])?, &[&x])?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::conv1d::upsample_nearest2x(cx, &p, slice(&x), unsafe { slice_mut(&y) });
            Ok(())
        });
        Ok(())
    }

    fn binary(
        &self,
        rec: &mut CpuRecording,
        p: &BinaryParams,
        a: &BufRef<CpuBuffer>,
        b: &BufRef<CpuBuffer>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
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
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::elementwise::binary(cx, &p, slice(&a), slice(&b), unsafe { slice_mut(&y) });
            Ok(())
        });
        Ok(())
    }

    fn scale(
        &self,
        rec: &mut CpuRecording,
        s: f32,
        x: &BufRef<CpuBuffer>,
        y: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "scale";
        let x = input(OP, "x", x, F32, x.len)?;
        let y = output(OP, y, DType::F32, x.len, &[&x])?;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::elementwise::scale(cx, s, slice(&x), unsafe { slice_mut(&y) });
            Ok(())
        });
        Ok(())
    }

    fn axpby(
        &self,
        rec: &mut CpuRecording,
        a: f32,
        x: &BufRef<CpuBuffer>,
        b: f32,
        y: &BufRef<CpuBuffer>,
        out: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "axpby";
        let x = input(OP, "x", x, F32, x.len)?;
        let y = input(OP, "y", y, F32, x.len)?;
        let o = output(OP, out, DType::F32, x.len, &[&x, &y])?;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::elementwise::axpby(cx, a, slice(&x), b, slice(&y), unsafe { slice_mut(&o) });
            Ok(())
        });
        Ok(())
    }

    fn embedding(
        &self,
        rec: &mut CpuRecording,
        p: &EmbeddingParams,
        ids: &BufRef<CpuBuffer>,
        table: &BufRef<CpuBuffer>,
        out: &BufRef<CpuBuffer>,
    ) -> Result<()> {
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
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::embedding::embedding(cx, &p, slice(&ids), weights(&t), unsafe { slice_mut(&o) })
        });
        Ok(())
    }

    fn copy(
        &self,
        rec: &mut CpuRecording,
        p: &CopyParams,
        src: &BufRef<CpuBuffer>,
        dst: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "copy";
        if src.dtype != dst.dtype {
            return Err(Error::DType(format!(
                "{OP}: source is {} but destination is {}",
                src.dtype, dst.dtype
            )));
        }
        let r = p.shape.len();
        if p.src_strides.len() != r || p.dst_strides.len() != r || r > crate::tensor::MAX_RANK {
            return Err(Error::Shape(format!(
                "{OP}: shape {:?} and strides {:?} / {:?} disagree in rank (max {})",
                p.shape,
                p.src_strides,
                p.dst_strides,
                crate::tensor::MAX_RANK
            )));
        }
        let sl = crate::tensor::Layout::strided(&p.shape, &p.src_strides, p.src_offset)?;
        let dl = crate::tensor::Layout::strided(&p.shape, &p.dst_strides, p.dst_offset)?;
        let types = &[DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32];
        let s = input(OP, "src", src, types, sl.span()?)?;
        let d = output(OP, dst, dst.dtype, dl.span()?, &[&s])?;
        let p = p.clone();
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            match s.dtype {
                DType::F16 | DType::BF16 => {
                    super::copy::copy::<u16>(cx, &p, slice(&s), unsafe { slice_mut(&d) })
                }
                _ => super::copy::copy::<u32>(cx, &p, slice(&s), unsafe { slice_mut(&d) }),
            }
            Ok(())
        });
        Ok(())
    }

    fn mean_pool(
        &self,
        rec: &mut CpuRecording,
        p: &MeanPoolParams,
        x: &BufRef<CpuBuffer>,
        mask: &BufRef<CpuBuffer>,
        out: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "mean_pool";
        let x = input(OP, "x", x, F32, mul(OP, &[p.batch, p.seq, p.dim])?)?;
        let m = input(OP, "mask", mask, &[DType::U32], mul(OP, &[p.batch, p.seq])?)?;
        let o = output(OP, out, DType::F32, mul(OP, &[p.batch, p.dim])?, &[&x, &m])?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::mean_pool::mean_pool(cx, &p, slice(&x), slice(&m), unsafe { slice_mut(&o) });
            Ok(())
        });
        Ok(())
    }

    fn argmax(
        &self,
        rec: &mut CpuRecording,
        p: &ArgmaxParams,
        x: &BufRef<CpuBuffer>,
        out: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "argmax";
        nonzero(OP, "cols", p.cols)?;
        let x = input(OP, "x", x, F32, mul(OP, &[p.rows, p.cols])?)?;
        let o = output(OP, out, DType::U32, p.rows, &[&x])?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::argmax::argmax(cx, &p, slice(&x), unsafe { slice_mut(&o) });
            Ok(())
        });
        Ok(())
    }

    fn gumbel(
        &self,
        rec: &mut CpuRecording,
        p: &GumbelParams,
        logits: &BufRef<CpuBuffer>,
        uniforms: Option<&BufRef<CpuBuffer>>,
        out: &BufRef<CpuBuffer>,
    ) -> Result<()> {
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
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::gumbel::gumbel(cx, &p, slice(&l), u.as_ref().map(slice), unsafe {
                slice_mut(&o)
            });
            Ok(())
        });
        Ok(())
    }

    fn posenc(
        &self,
        rec: &mut CpuRecording,
        p: &PosEncParams,
        out: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "posenc";
        if !p.dim.is_multiple_of(2) {
            return Err(Error::Shape(format!("{OP}: dim {} must be even", p.dim)));
        }
        let o = output(OP, out, DType::F32, mul(OP, &[p.len, p.dim])?, &[])?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::posenc::posenc(cx, &p, unsafe { slice_mut(&o) });
            Ok(())
        });
        Ok(())
    }

    fn ddim(
        &self,
        rec: &mut CpuRecording,
        p: &DdimParams,
        x_t: &BufRef<CpuBuffer>,
        x0: &BufRef<CpuBuffer>,
        coef: &BufRef<CpuBuffer>,
        out: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "ddim";
        let xt = input(OP, "x_t", x_t, F32, p.n)?;
        let x0 = input(OP, "x0", x0, F32, p.n)?;
        let c = input(OP, "coef", coef, F32, 4)?;
        let o = output(OP, out, DType::F32, p.n, &[&xt, &x0, &c])?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::diffusion::ddim(cx, &p, slice(&xt), slice(&x0), slice(&c), unsafe {
                slice_mut(&o)
            });
            Ok(())
        });
        Ok(())
    }

    fn cfg(
        &self,
        rec: &mut CpuRecording,
        p: &CfgParams,
        rows: &BufRef<CpuBuffer>,
        out: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "cfg";
        if !(p.rows == 2 || p.rows == 3) {
            return Err(Error::InvalidArgument(format!(
                "{OP}: {} rows; classifier-free guidance takes 2 or 3",
                p.rows
            )));
        }
        let r = input(OP, "rows", rows, F32, mul(OP, &[p.rows, p.n])?)?;
        let o = output(OP, out, DType::F32, p.n, &[&r])?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::diffusion::cfg(cx, &p, slice(&r), unsafe { slice_mut(&o) });
            Ok(())
        });
        Ok(())
    }
}
