//! Host tensors. Weights read from a file borrow an aligned slice of the memory map without
//! copying; everything else owns a 64-byte aligned allocation.

use std::sync::Arc;

use half::{bf16, f16};
use memmap2::Mmap;

use super::{DType, Layout};
use crate::error::{Error, Result};

/// Where a host tensor's bytes live.
#[derive(Clone)]
pub enum HostData {
    /// An owned allocation (stored as u32 words so it is at least 4-byte aligned).
    Owned(Arc<Vec<u32>>, usize),
    /// A byte range of a memory-mapped file, shared with every tensor cut from it.
    Mapped {
        map: Arc<Mmap>,
        offset: usize,
        len: usize,
    },
}

impl HostData {
    pub fn bytes(&self) -> &[u8] {
        match self {
            HostData::Owned(words, len) => &bytemuck::cast_slice::<u32, u8>(words)[..*len],
            HostData::Mapped { map, offset, len } => &map[*offset..*offset + *len],
        }
    }
    pub fn is_mapped(&self) -> bool {
        matches!(self, HostData::Mapped { .. })
    }
}

/// A contiguous tensor in host memory.
#[derive(Clone)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: HostData,
}

impl std::fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTensor")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("mapped", &self.data.is_mapped())
            .finish()
    }
}

fn checked_numel(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| {
            Error::Shape(format!(
                "shape {shape:?} has more elements than fit in usize"
            ))
        })
}

impl HostTensor {
    /// Wrap raw little-endian bytes (copied into an aligned allocation).
    pub fn from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<HostTensor> {
        let n = checked_numel(shape)?;
        let need = dtype.bytes_for(n).ok_or_else(|| {
            Error::Shape(format!(
                "{n} elements is not a whole number of {dtype} blocks"
            ))
        })?;
        if need != bytes.len() {
            return Err(Error::Shape(format!(
                "{dtype} tensor of shape {shape:?} needs {need} bytes, got {}",
                bytes.len()
            )));
        }
        let mut words = vec![0u32; need.div_ceil(4)];
        bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..need].copy_from_slice(bytes);
        Ok(HostTensor {
            dtype,
            shape: shape.to_vec(),
            data: HostData::Owned(Arc::new(words), need),
        })
    }

    /// Borrow `len` bytes at `offset` of a memory map without copying. The start must be
    /// aligned for the dtype and the range must lie inside the map.
    pub fn from_mmap(
        dtype: DType,
        shape: &[usize],
        map: Arc<Mmap>,
        offset: usize,
    ) -> Result<HostTensor> {
        let n = checked_numel(shape)?;
        let len = dtype.bytes_for(n).ok_or_else(|| {
            Error::Shape(format!(
                "{n} elements is not a whole number of {dtype} blocks"
            ))
        })?;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= map.len())
            .ok_or_else(|| {
                Error::Shape(format!(
                    "tensor bytes {offset}..+{len} lie outside the {}-byte file",
                    map.len()
                ))
            })?;
        let addr = map.as_ptr() as usize + offset;
        if !addr.is_multiple_of(dtype.align()) {
            return Err(Error::Shape(format!(
                "{dtype} tensor at file offset {offset} is not {}-byte aligned",
                dtype.align()
            )));
        }
        let _ = end;
        Ok(HostTensor {
            dtype,
            shape: shape.to_vec(),
            data: HostData::Mapped { map, offset, len },
        })
    }

    pub fn from_f32(shape: &[usize], values: &[f32]) -> Result<HostTensor> {
        HostTensor::from_bytes(DType::F32, shape, bytemuck::cast_slice(values))
    }
    pub fn from_f16(shape: &[usize], values: &[f16]) -> Result<HostTensor> {
        HostTensor::from_bytes(DType::F16, shape, bytemuck::cast_slice(values))
    }
    pub fn from_bf16(shape: &[usize], values: &[bf16]) -> Result<HostTensor> {
        HostTensor::from_bytes(DType::BF16, shape, bytemuck::cast_slice(values))
    }
    pub fn from_i32(shape: &[usize], values: &[i32]) -> Result<HostTensor> {
        HostTensor::from_bytes(DType::I32, shape, bytemuck::cast_slice(values))
    }
    pub fn from_u32(shape: &[usize], values: &[u32]) -> Result<HostTensor> {
        HostTensor::from_bytes(DType::U32, shape, bytemuck::cast_slice(values))
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn layout(&self) -> Result<Layout> {
        Layout::contiguous(&self.shape)
    }
    pub fn bytes(&self) -> &[u8] {
        self.data.bytes()
    }

    /// The values widened to f32 (dequantising q8_0). Integer tensors are refused.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        let b = self.bytes();
        Ok(match self.dtype {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            DType::F16 => b
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::BF16 => b
                .chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::Q8_0 => {
                let mut out = vec![0f32; self.numel()];
                for (blk, o) in b
                    .chunks_exact(super::Q8_0_BLOCK_BYTES)
                    .zip(out.chunks_exact_mut(super::Q8_0_BLOCK))
                {
                    super::q8_0_dequantize_block(blk, o);
                }
                out
            }
            DType::I32 | DType::U32 => {
                return Err(Error::DType(format!(
                    "cannot read a {} tensor as f32",
                    self.dtype
                )));
            }
        })
    }
}
