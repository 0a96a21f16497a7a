//! [`CpuBackend`]: the dispatch trait on the CPU. Ops are checked and recorded as closures;
//! `submit` runs them in order on the calling thread and the pool. Weights bound from a
//! memory-mapped file are read in place.

use std::cell::UnsafeCell;
use std::sync::{Arc, Mutex};

use half::{bf16, f16};

use super::{Cx, Isa, ThreadPool, Weights};
use crate::backend::check::{self, byte_range};
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
        CpuBackend::with(Isa::select()?, ThreadPool::default_threads()?, precision)
    }

    /// An explicit ISA and thread count (errors if the CPU cannot run the ISA, the count is
    /// outside `1..=MAX_THREADS` or a worker thread cannot be started).
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
            pool: ThreadPool::try_new(threads)?,
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

impl check::BufferInfo for CpuBuffer {
    fn byte_len(&self) -> usize {
        self.0.bytes
    }
    fn same(&self, other: &CpuBuffer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
    fn is_read_only(&self) -> bool {
        self.is_borrowed_host()
    }
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
            cooperative_matrix: false,
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
        let (x, w, bias, y) = check::linear(p, x, w, bias, y)?;
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
        let (a, b, c) = check::batched_matmul(p, a, b, c)?;
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
        let (x, g, b, y) = check::layer_norm(p, x, gamma, beta, y)?;
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
        let (x, g, y) = check::rms_norm(p, x, gamma, y)?;
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
        let (x, y) = check::softmax(p, x, y)?;
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
        let (q, k, v, mask, out) = check::attention(p, q, k, v, mask, out)?;
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
        let (x, y) = check::activation(x, y)?;
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
        let (g, u, y) = check::swiglu(gate, up, y)?;
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
        let (x, pos, f, y) = check::rope(p, x, positions, inv_freq, y)?;
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
        let (x, w, b, y) = check::conv1d(p, x, w, bias, y)?;
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
        let (x, y) = check::upsample_nearest2x(p, x, y)?;
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
        let (a, b, y) = check::binary(p, a, b, y)?;
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
        let (x, y) = check::scale(x, y)?;
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
        let (x, y, o) = check::axpby(x, y, out)?;
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
        let (ids, t, o) = check::embedding(p, ids, table, out)?;
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
        let (s, d) = check::copy(p, src, dst)?;
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
        let (x, m, o) = check::mean_pool(p, x, mask, out)?;
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
        let (x, o) = check::argmax(p, x, out)?;
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
        let (l, u, o) = check::gumbel(p, logits, uniforms, out)?;
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
        let o = check::posenc(p, out)?;
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
        let (xt, x0, c, o) = check::ddim(p, x_t, x0, coef, out)?;
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

    fn root_bridge(
        &self,
        rec: &mut CpuRecording,
        p: &RootBridgeParams,
        x: &BufRef<CpuBuffer>,
        out: &BufRef<CpuBuffer>,
    ) -> Result<()> {
        let (x, o) = check::root_bridge(p, x, out)?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::root_bridge::root_bridge(cx, &p, slice(&x), unsafe { slice_mut(&o) });
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
        let (r, o) = check::cfg(p, rows, out)?;
        let p = *p;
        rec.push(move |cx| {
            // SAFETY: as in `linear`.
            super::diffusion::cfg(cx, &p, slice(&r), unsafe { slice_mut(&o) });
            Ok(())
        });
        Ok(())
    }
}
