//! Narrowing weight matrices to the 16-bit dtype a backend's fast kernels multiply: by the
//! converter (`--dtype f16|bf16`) and in memory when an f32 file runs in fast precision.

use std::collections::BTreeMap;
use std::sync::Arc;

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::meta::invalid;
use super::par::par_map;
use crate::backend::BackendInfo;
use crate::tensor::HostData;
use crate::{DType, Error, HostTensor, Precision, Result};

/// The values of an f32 tensor without a copy (mapped and owned tensors are 4-byte aligned),
/// or `None` for another dtype.
fn f32_values(t: &HostTensor) -> Option<&[f32]> {
    (t.dtype == DType::F32)
        .then(|| bytemuck::try_cast_slice(t.bytes()).ok())
        .flatten()
}

/// `values` rounded to a 16-bit float (round to nearest even) in one pass, written straight
/// into the owned words of a new tensor; the first value the narrower type cannot hold
/// (rounded to infinity) is returned as an error: (flat index, value).
fn narrow_f32<H: bytemuck::Pod + Copy>(
    shape: &[usize],
    dtype: DType,
    values: &[f32],
    convert: impl Fn(&mut [H], &[f32]),
    finite: impl Fn(H) -> bool,
) -> std::result::Result<HostTensor, (usize, f32)> {
    let mut words = vec![0u32; values.len().div_ceil(2)];
    let out = &mut bytemuck::cast_slice_mut::<u32, H>(&mut words)[..values.len()];
    convert(out, values);
    if let Some(i) = out.iter().position(|&h| !finite(h)) {
        return Err((i, values[i]));
    }
    let len = values.len() * 2;
    Ok(HostTensor {
        dtype,
        shape: shape.to_vec(),
        data: HostData::Owned(Arc::new(words), len),
    })
}

/// A weight in `dtype` (round to nearest even). A value that does not fit the narrower type
/// is refused rather than stored as infinity; errors are prefixed with `format`. An f32 tensor
/// is narrowed in one pass without widening copies (the in-memory narrowing of a whole model
/// at load runs this for every matrix).
pub fn cast_weight(
    format: &'static str,
    name: &str,
    t: &HostTensor,
    dtype: DType,
) -> Result<HostTensor> {
    let widened;
    let values = match f32_values(t) {
        Some(v) => v,
        None if matches!(dtype, DType::F16 | DType::BF16) => {
            widened = t.to_f32_vec()?;
            &widened[..]
        }
        None => &[][..],
    };
    match dtype {
        DType::F32 => Ok(t.clone()),
        DType::F16 => narrow_f32(
            &t.shape,
            DType::F16,
            values,
            |o: &mut [f16], v| o.convert_from_f32_slice(v),
            |h| h.is_finite(),
        )
        .map_err(|(i, v)| {
            invalid(
                format,
                format!(
                    "tensor {name:?}: value {v} at flat index {i} is beyond the f16 range \
                     (±65504); convert with --dtype bf16 or f32"
                ),
            )
        }),
        DType::BF16 => narrow_f32(
            &t.shape,
            DType::BF16,
            values,
            |o: &mut [bf16], v| o.convert_from_f32_slice(v),
            |h| h.is_finite(),
        )
        .map_err(|(i, v)| {
            invalid(
                format,
                format!(
                    "tensor {name:?}: value {v} at flat index {i} rounds beyond the bf16 range"
                ),
            )
        }),
        d => Err(Error::InvalidArgument(format!(
            "the converter writes f32, f16 or bf16 weights, not {d}"
        ))),
    }
}

/// `tensors` with every tensor `is_matrix(name, t)` selects cast to `dtype` (the others, and
/// those already in `dtype`, unchanged), the casts spread over the host's cores.
pub fn narrow_weights(
    format: &'static str,
    tensors: BTreeMap<String, HostTensor>,
    is_matrix: impl Fn(&str, &HostTensor) -> bool + Sync,
    dtype: DType,
) -> Result<BTreeMap<String, HostTensor>> {
    let items: Vec<(String, HostTensor)> = tensors.into_iter().collect();
    let cast = par_map(&items, |(name, t)| {
        (is_matrix(name, t) && t.dtype != dtype).then(|| cast_weight(format, name, t, dtype))
    });
    let mut out = BTreeMap::new();
    for ((name, t), c) in items.into_iter().zip(cast) {
        let t = match c {
            Some(c) => c?,
            None => t,
        };
        out.insert(name, t);
    }
    Ok(out)
}

/// Whether every value of `t` lies within the f16 range (|v| <= 65504); f32 tensors are read
/// in place.
fn fits_f16(t: &HostTensor) -> Result<bool> {
    let fits = |v: &[f32]| v.iter().fold(true, |ok, x| ok & (x.abs() <= 65504.0));
    Ok(match f32_values(t) {
        Some(v) => fits(v),
        None => fits(&t.to_f32_vec()?),
    })
}

/// The dtype a backend runs f32 weight matrices in, or `None` to leave them as they are:
/// strict precision runs f32; fast precision runs the backend's
/// [`BackendInfo::fast_weight_dtype`]: f16 on Vulkan (the cooperative matrices multiply f16;
/// bf16 would be rounded twice) unless a weight lies beyond the f16 range, then bf16, and bf16
/// on the CPU (AVX-512 BF16 dot products).
pub fn fast_weight_dtype<'a>(
    info: &BackendInfo,
    matrices: impl Iterator<Item = &'a HostTensor>,
) -> Result<Option<DType>> {
    if info.precision != Precision::Fast {
        return Ok(None);
    }
    if info.fast_weight_dtype == DType::F16 {
        let matrices: Vec<&HostTensor> = matrices.collect();
        let fits = par_map(&matrices, |t| fits_f16(t));
        if fits
            .into_iter()
            .collect::<Result<Vec<bool>>>()?
            .iter()
            .all(|&f| f)
        {
            return Ok(Some(DType::F16));
        }
    }
    Ok(Some(DType::BF16))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values that exercise rounding: ties, subnormals, the edges of both ranges, signed zero.
    fn values() -> Vec<f32> {
        let mut v: Vec<f32> = (0..4099)
            .map(|i| ((i as f32) * 0.7311).sin() * 10f32.powi(i % 13 - 8))
            .collect();
        v.extend([
            0.0,
            -0.0,
            65504.0,
            -65504.0,
            65519.99,
            1.0 + f32::EPSILON,
            2.0f32.powi(-24),
            2.0f32.powi(-25),
            3.0 * 2.0f32.powi(-26),
            f32::MIN_POSITIVE,
            1.0 + 2.0f32.powi(-11),
            1.0 + 3.0 * 2.0f32.powi(-11),
            3.0e38,
        ]);
        v
    }

    #[test]
    fn one_pass_narrowing_matches_the_element_conversions_bit_for_bit() {
        let v = values();
        let t = HostTensor::from_f32(&[v.len()], &v).unwrap();
        let b = cast_weight("test", "w", &t, DType::BF16).unwrap();
        let want: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
        assert_eq!(b.bytes(), bytemuck::cast_slice::<bf16, u8>(&want));
        assert_eq!((b.dtype, b.shape.clone()), (DType::BF16, vec![v.len()]));
        // f16 holds all but the last (3e38).
        let v = &v[..v.len() - 1];
        let t = HostTensor::from_f32(&[v.len()], v).unwrap();
        let h = cast_weight("test", "w", &t, DType::F16).unwrap();
        let want: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
        assert_eq!(h.bytes(), bytemuck::cast_slice::<f16, u8>(&want));
        // A non-f32 source goes through the widening path, and is refused at the first value
        // that does not fit (65504 rounds to 65536 in bf16).
        let want: Vec<f16> = values()
            .iter()
            .map(|&x| f16::from_f32(bf16::from_f32(x).to_f32()))
            .collect();
        let first = want.iter().position(|h| !h.is_finite()).unwrap();
        let err = cast_weight("test", "w", &b, DType::F16)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("65536 at flat index {first} ")),
            "{err}"
        );
        let short = HostTensor::from_bf16(
            &[first],
            &bytemuck::cast_slice::<u8, bf16>(b.bytes())[..first],
        )
        .unwrap();
        let h = cast_weight("test", "w", &short, DType::F16).unwrap();
        assert_eq!(h.bytes(), bytemuck::cast_slice::<f16, u8>(&want[..first]));
    }

    #[test]
    fn a_value_beyond_the_range_is_refused_with_its_index() {
        let mut v = vec![0.5f32; 37];
        v[29] = 65520.0;
        let t = HostTensor::from_f32(&[37], &v).unwrap();
        let err = cast_weight("test", "w", &t, DType::F16)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("value 65520 at flat index 29 is beyond the f16 range"),
            "{err}"
        );
        // Odd lengths and a 2-D shape keep their shape.
        let t = HostTensor::from_f32(&[3, 3], &[1.5; 9]).unwrap();
        let h = cast_weight("test", "w", &t, DType::F16).unwrap();
        assert_eq!((h.shape.clone(), h.bytes().len()), (vec![3, 3], 18));
        assert_eq!(h.to_f32_vec().unwrap(), vec![1.5; 9]);
    }

    #[test]
    fn the_fast_dtype_is_f16_only_when_every_matrix_fits() {
        let info = |precision| BackendInfo {
            kind: "test",
            device: String::new(),
            precision,
            threads: 1,
            cooperative_matrix: false,
            fast_weight_dtype: DType::F16,
            stacks_weights_in_place: true,
        };
        let ok = HostTensor::from_f32(&[2], &[65504.0, -1.0]).unwrap();
        let big = HostTensor::from_f32(&[2], &[65504.5, 0.0]).unwrap();
        let fast = info(Precision::Fast);
        assert_eq!(
            fast_weight_dtype(&fast, [&ok, &ok].into_iter()).unwrap(),
            Some(DType::F16)
        );
        assert_eq!(
            fast_weight_dtype(&fast, [&ok, &big].into_iter()).unwrap(),
            Some(DType::BF16)
        );
        let strict = info(Precision::Strict);
        assert_eq!(
            fast_weight_dtype(&strict, [&big].into_iter()).unwrap(),
            None
        );
    }

    #[test]
    fn narrowing_a_model_casts_only_the_selected_tensors() {
        let mut m = BTreeMap::new();
        for i in 0..40 {
            let v: Vec<f32> = (0..64).map(|j| (i * 64 + j) as f32 / 7.0).collect();
            m.insert(
                format!("t{i:02}"),
                HostTensor::from_f32(&[8, 8], &v).unwrap(),
            );
        }
        let out = narrow_weights("test", m.clone(), |n, _| n < "t20", DType::F16).unwrap();
        for (name, t) in &out {
            let want = if name.as_str() < "t20" {
                DType::F16
            } else {
                DType::F32
            };
            assert_eq!(t.dtype, want, "{name}");
            let back = t.to_f32_vec().unwrap();
            let orig = m[name].to_f32_vec().unwrap();
            let expect: Vec<f32> = if want == DType::F16 {
                orig.iter().map(|&x| f16::from_f32(x).to_f32()).collect()
            } else {
                orig
            };
            assert_eq!(back, expect, "{name}");
        }
    }
}
