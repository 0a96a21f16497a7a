//! [`CpuBackend`]: the dispatch trait on the CPU. Ops are checked and recorded as closures;
//! `submit` runs them in order on the calling thread and the pool. Weights bound from a
//! memory-mapped file are read in place.

use std::cell::UnsafeCell;
use std::sync::{Arc, Mutex};

use half::{bf16, f16};

use super::{Cx, Isa, ThreadPool, Weights};
use crate::backend::check::{self, Checked, byte_range};
use crate::backend::{Backend, BackendInfo, BufRef, MemoryUse, Precision};
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
    /// Record a kernel that writes `out` (checked when the op was recorded): `f` gets the
    /// output range as a mutable slice when the recording is submitted.
    fn push<T: bytemuck::Pod>(
        &mut self,
        out: BufRef<CpuBuffer>,
        f: impl Fn(&Cx, &mut [T]) -> Result<()> + Send + Sync + 'static,
    ) {
        self.cmds.push(Box::new(move |cx| {
            // SAFETY: recorded commands run only in `submit`, which holds the submission lock;
            // the op's checks made `out` a writable range that overlaps none of its inputs, so
            // no other slice of that range is alive while `f` writes it.
            let out = unsafe { slice_mut::<T>(&out) };
            f(cx, out)
        }));
    }
}

impl Backend for CpuBackend {
    type Buffer = CpuBuffer;
    type Recording = CpuRecording;

    fn memory_use(&self) -> MemoryUse {
        super::rss::memory_use()
    }

    fn reset_peak_memory(&self) {
        super::rss::reset_peak();
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "cpu",
            device: self.isa.name().to_string(),
            precision: self.precision,
            threads: self.pool.threads(),
            cooperative_matrix: false,
            fast_weight_dtype: DType::BF16,
            stacks_weights_in_place: false,
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
        let (s, l) = check::write_range(dst, bytes.len())?;
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the submission lock is held, so no recorded op is reading or writing.
        let b = unsafe { dst.buf.bytes_mut() }.ok_or_else(|| {
            Error::InvalidArgument("write: the buffer is a read-only host buffer".into())
        })?;
        b[s..s + l].copy_from_slice(bytes);
        Ok(())
    }

    fn read(&self, src: &BufRef<CpuBuffer>, out: &mut [u8]) -> Result<()> {
        let (s, l) = check::read_range(src, out.len())?;
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

    fn dispatch(&self, rec: &mut CpuRecording, call: Checked<'_, CpuBuffer>) -> Result<()> {
        match call.into_call() {
            Call::Linear { p, x, w, bias, y } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    let bias = bias.as_ref().map(slice);
                    super::matmul::linear(cx, &p, slice(&x), weights(&w), bias, y);
                    Ok(())
                });
            }
            Call::BatchedMatmul { p, a, b, c } => {
                let p = *p;
                rec.push(c, move |cx, c| {
                    super::matmul::batched_matmul(cx, &p, slice(&a), slice(&b), c);
                    Ok(())
                });
            }
            Call::LayerNorm {
                p,
                x,
                gamma,
                beta,
                y,
            } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    let (g, b) = (gamma.as_ref().map(slice), beta.as_ref().map(slice));
                    super::norm::layer_norm(cx, &p, slice(&x), g, b, y);
                    Ok(())
                });
            }
            Call::AddLayerNorm {
                p,
                x,
                r,
                gamma,
                beta,
                y,
            } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    let (g, b) = (gamma.as_ref().map(slice), beta.as_ref().map(slice));
                    super::norm::add_layer_norm(cx, &p, slice(&x), slice(&r), g, b, y);
                    Ok(())
                });
            }
            Call::RmsNorm { p, x, gamma, y } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    super::norm::rms_norm(cx, &p, slice(&x), gamma.as_ref().map(slice), y);
                    Ok(())
                });
            }
            Call::Softmax { p, x, y } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    super::softmax::softmax(cx, &p, slice(&x), y);
                    Ok(())
                });
            }
            Call::Attention {
                p,
                q,
                k,
                v,
                mask,
                out,
            } => {
                let p = *p;
                rec.push(out, move |cx, out| {
                    let (q, k, v) = (slice(&q), slice(&k), slice(&v));
                    let mask = mask.as_ref().map(slice);
                    super::attention::attention(cx, &p, q, k, v, mask, out);
                    Ok(())
                });
            }
            Call::Activation { p, x, y } => {
                let act = *p;
                rec.push(y, move |cx, y| {
                    super::activation::activation(cx, act, slice(&x), y);
                    Ok(())
                });
            }
            Call::Swiglu { p, gate, up, y } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    let (gate, up) = (slice(&gate), slice(&up));
                    if p.stride == p.cols {
                        super::activation::swiglu(cx, gate, up, y);
                    } else {
                        // Row by row: each row's halves are contiguous.
                        for (r, yr) in y.chunks_mut(p.cols).enumerate() {
                            let at = r * p.stride..r * p.stride + p.cols;
                            super::activation::swiglu(cx, &gate[at.clone()], &up[at], yr);
                        }
                    }
                    Ok(())
                });
            }
            Call::Rope {
                p,
                x,
                positions,
                inv_freq,
                y,
            } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    let (x, pos, f) = (slice(&x), slice(&positions), slice(&inv_freq));
                    super::rope::rope(cx, &p, x, pos, f, y);
                    Ok(())
                });
            }
            Call::Conv1d { p, x, w, bias, y } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    let bias = bias.as_ref().map(slice);
                    super::conv1d::conv1d(cx, &p, slice(&x), slice(&w), bias, y);
                    Ok(())
                });
            }
            Call::Upsample { p, x, y } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    super::conv1d::upsample_nearest2x(cx, &p, slice(&x), y);
                    Ok(())
                });
            }
            Call::Binary { p, a, b, y } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    super::elementwise::binary(cx, &p, slice(&a), slice(&b), y);
                    Ok(())
                });
            }
            Call::Scale { p, x, y } => {
                let s = p.s;
                rec.push(y, move |cx, y| {
                    super::elementwise::scale(cx, s, slice(&x), y);
                    Ok(())
                });
            }
            Call::Axpby { p, x, y, out } => {
                let AxpbyParams { a, b } = *p;
                rec.push(out, move |cx, out| {
                    super::elementwise::axpby(cx, a, slice(&x), b, slice(&y), out);
                    Ok(())
                });
            }
            Call::MaskedAct { p, x, m, r, y } => {
                let p = *p;
                rec.push(y, move |cx, y| {
                    let r = r.as_ref().map(slice);
                    super::elementwise::masked_act(cx, &p, slice(&x), slice(&m), r, y);
                    Ok(())
                });
            }
            Call::Embedding { p, ids, table, out } => {
                let p = *p;
                rec.push(out, move |cx, out| {
                    super::embedding::embedding(cx, &p, slice(&ids), weights(&table), out)
                });
            }
            Call::Copy { p, src, dst } => {
                let p = p.clone();
                // The kernel moves 2- or 4-byte elements without looking at them.
                match src.dtype {
                    DType::F16 | DType::BF16 => rec.push(dst, move |cx, dst: &mut [u16]| {
                        super::copy::copy(cx, &p, slice(&src), dst);
                        Ok(())
                    }),
                    _ => rec.push(dst, move |cx, dst: &mut [u32]| {
                        super::copy::copy(cx, &p, slice(&src), dst);
                        Ok(())
                    }),
                }
            }
            Call::MeanPool { p, x, mask, out } => {
                let p = *p;
                rec.push(out, move |cx, out| {
                    super::mean_pool::mean_pool(cx, &p, slice(&x), slice(&mask), out);
                    Ok(())
                });
            }
            Call::Argmax { p, x, out } => {
                let p = *p;
                rec.push(out, move |cx, out| {
                    super::argmax::argmax(cx, &p, slice(&x), out);
                    Ok(())
                });
            }
            Call::Gumbel {
                p,
                logits,
                uniforms,
                out,
            } => {
                let p = *p;
                rec.push(out, move |cx, out| {
                    let u = uniforms.as_ref().map(slice);
                    super::gumbel::gumbel(cx, &p, slice(&logits), u, out);
                    Ok(())
                });
            }
            Call::PosEnc { p, out } => {
                let p = *p;
                rec.push(out, move |cx, out| {
                    super::posenc::posenc(cx, &p, out);
                    Ok(())
                });
            }
            Call::Ddim {
                p,
                x_t,
                x0,
                coef,
                out,
            } => {
                let p = *p;
                rec.push(out, move |cx, out| {
                    let (xt, x0, c) = (slice(&x_t), slice(&x0), slice(&coef));
                    super::diffusion::ddim(cx, &p, xt, x0, c, out);
                    Ok(())
                });
            }
            Call::RootBridge { p, x, out } => {
                let p = *p;
                rec.push(out, move |cx, out| {
                    super::root_bridge::root_bridge(cx, &p, slice(&x), out);
                    Ok(())
                });
            }
            Call::Cfg { p, rows, out } => {
                let p = *p;
                rec.push(out, move |cx, out| {
                    super::diffusion::cfg(cx, &p, slice(&rows), out);
                    Ok(())
                });
            }
        }
        Ok(())
    }
}
