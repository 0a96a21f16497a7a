//! Narrowing weight matrices to the 16-bit dtype a backend's fast kernels multiply: by the
//! converter (`--dtype f16|bf16`) and in memory when an f32 file runs in fast precision.

use std::collections::BTreeMap;

use half::{bf16, f16};

use super::meta::invalid;
use crate::backend::BackendInfo;
use crate::{DType, Error, HostTensor, Precision, Result};

/// A weight in `dtype` (round to nearest even). A value that does not fit the narrower type
/// is refused rather than stored as infinity; errors are prefixed with `format`.
pub fn cast_weight(
    format: &'static str,
    name: &str,
    t: &HostTensor,
    dtype: DType,
) -> Result<HostTensor> {
    match dtype {
        DType::F32 => Ok(t.clone()),
        DType::F16 => {
            let v = t.to_f32_vec()?;
            let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            if let Some(i) = h.iter().position(|x| !x.is_finite()) {
                return Err(invalid(
                    format,
                    format!(
                        "tensor {name:?}: value {} at flat index {i} is beyond the f16 range \
                         (±65504); convert with --dtype bf16 or f32",
                        v[i]
                    ),
                ));
            }
            HostTensor::from_f16(&t.shape, &h)
        }
        DType::BF16 => {
            let v = t.to_f32_vec()?;
            let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
            if let Some(i) = h.iter().position(|x| !x.is_finite()) {
                return Err(invalid(
                    format,
                    format!(
                        "tensor {name:?}: value {} at flat index {i} rounds beyond the bf16 range",
                        v[i]
                    ),
                ));
            }
            HostTensor::from_bf16(&t.shape, &h)
        }
        d => Err(Error::InvalidArgument(format!(
            "the converter writes f32, f16 or bf16 weights, not {d}"
        ))),
    }
}

/// `tensors` with every tensor `is_matrix(name, t)` selects cast to `dtype` (the others, and
/// those already in `dtype`, unchanged).
pub fn narrow_weights(
    format: &'static str,
    tensors: BTreeMap<String, HostTensor>,
    is_matrix: impl Fn(&str, &HostTensor) -> bool,
    dtype: DType,
) -> Result<BTreeMap<String, HostTensor>> {
    let mut out = BTreeMap::new();
    for (name, t) in tensors {
        let t = if is_matrix(&name, &t) && t.dtype != dtype {
            cast_weight(format, &name, &t, dtype)?
        } else {
            t
        };
        out.insert(name, t);
    }
    Ok(out)
}

/// The dtype a backend runs f32 weight matrices in, or `None` to leave them as they are:
/// strict precision runs f32; fast precision runs the backend's
/// [`BackendInfo::fast_weight_dtype`]: f16 on Vulkan (the cooperative matrices multiply f16;
/// bf16 would be rounded twice) unless a weight lies beyond the f16 range, then bf16, and bf16
/// on the CPU (AVX-512 BF16 dot products).
pub fn fast_weight_dtype<'a>(
    info: &BackendInfo,
    mut matrices: impl Iterator<Item = &'a HostTensor>,
) -> Result<Option<DType>> {
    if info.precision != Precision::Fast {
        return Ok(None);
    }
    if info.fast_weight_dtype == DType::F16 {
        let f16_fits = matrices.try_fold(true, |ok, t| -> Result<bool> {
            Ok(ok && t.to_f32_vec()?.iter().all(|v| v.abs() <= 65504.0))
        })?;
        if f16_fits {
            return Ok(Some(DType::F16));
        }
    }
    Ok(Some(DType::BF16))
}
