//! The CPU backend: kernels with a scalar reference and AVX2+FMA, AVX-512 and NEON paths,
//! chosen at run time, and an explicit thread pool.
//!
//! Each op lives in a module named after it. Inside, `reference` is the scalar oracle,
//! written for clarity, and `run`-style entry points dispatch on [`Isa`] once, at the
//! outermost loop, to `#[target_feature]` bodies.

pub mod activation;
pub mod argmax;
pub mod attention;
mod backend;
pub mod conv1d;
pub mod copy;
pub mod diffusion;
pub mod elementwise;
pub mod embedding;
pub mod gumbel;
pub mod isa;
pub mod matmul;
pub mod mean_pool;
pub mod norm;
pub mod peak;
pub mod pool;
pub mod posenc;
pub mod root_bridge;
pub mod rope;
mod rss;
pub mod simd;
pub mod softmax;

pub use backend::{CpuBackend, CpuBuffer, CpuRecording};
pub use isa::Isa;
pub use pool::ThreadPool;

use half::{bf16, f16};

use crate::precision::Precision;

/// What every CPU kernel entry point gets: the ISA to run, the pool to split work over, and
/// the precision mode (fast mode lets bf16 weights use bf16 dot products).
#[derive(Clone, Copy)]
pub struct Cx<'a> {
    pub isa: Isa,
    pub pool: &'a ThreadPool,
    pub precision: Precision,
}

#[cfg(test)]
impl<'a> Cx<'a> {
    /// `isa` on `pool` in strict precision (what the kernel tests compare bit for bit).
    pub(crate) fn strict(isa: Isa, pool: &'a ThreadPool) -> Cx<'a> {
        Cx {
            isa,
            pool,
            precision: Precision::Strict,
        }
    }
}

/// A weight matrix or table in one of the stored dtypes, borrowed in place.
#[derive(Clone, Copy, Debug)]
pub enum Weights<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    /// q8_0 blocks: 34 bytes per 32 values.
    Q8_0(&'a [u8]),
}

impl Weights<'_> {
    /// Number of values held.
    pub fn len(&self) -> usize {
        match self {
            Weights::F32(w) => w.len(),
            Weights::F16(w) => w.len(),
            Weights::BF16(w) => w.len(),
            Weights::Q8_0(w) => {
                w.len() / crate::tensor::Q8_0_BLOCK_BYTES * crate::tensor::Q8_0_BLOCK
            }
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> crate::tensor::DType {
        use crate::tensor::DType;
        match self {
            Weights::F32(_) => DType::F32,
            Weights::F16(_) => DType::F16,
            Weights::BF16(_) => DType::BF16,
            Weights::Q8_0(_) => DType::Q8_0,
        }
    }

    /// Widen values `start..start + out.len()` to f32 (scalar; `start` and the length must be
    /// multiples of 32 for q8_0).
    pub fn widen_into(&self, start: usize, out: &mut [f32]) {
        let n = out.len();
        match self {
            Weights::F32(w) => out.copy_from_slice(&w[start..start + n]),
            Weights::F16(w) => {
                for (o, v) in out.iter_mut().zip(&w[start..start + n]) {
                    *o = v.to_f32();
                }
            }
            Weights::BF16(w) => {
                for (o, v) in out.iter_mut().zip(&w[start..start + n]) {
                    *o = v.to_f32();
                }
            }
            Weights::Q8_0(w) => {
                use crate::tensor::{Q8_0_BLOCK, Q8_0_BLOCK_BYTES, q8_0_dequantize_block};
                let b0 = start / Q8_0_BLOCK;
                for (i, o) in out.chunks_mut(Q8_0_BLOCK).enumerate() {
                    let off = (b0 + i) * Q8_0_BLOCK_BYTES;
                    q8_0_dequantize_block(&w[off..off + Q8_0_BLOCK_BYTES], o);
                }
            }
        }
    }
}
