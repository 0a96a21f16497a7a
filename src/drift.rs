//! `kinema drift`: the same op with the same inputs on every CPU ISA and precision and on
//! Vulkan in each precision (fast mode on cooperative matrices where the device has them,
//! labelled `+coopmat`), each compared with the scalar reference path (CPU `scalar` ISA, strict, one
//! thread): largest absolute difference, relative L2 error and a histogram of ULP distances.
//! Integer outputs (argmax, gumbel) count mismatching elements instead.

use crate::backend::{Backend, BufRef};
use crate::bench::{parse_shape, record};
use crate::error::Result;
use crate::tensor::DType;

/// Upper edges of the ULP histogram bins: 0, 1, 2-3, 4-15, 16-255, then everything above.
pub const ULP_BINS: [u64; 5] = [0, 1, 3, 15, 255];

/// Default (case, shape, dtype) list (cases of [`crate::bench::OPS`]): small versions of the
/// models' shapes, so the comparison also runs quickly on a CPU Vulkan implementation. Every
/// op of the op table has at least one (a test checks).
pub fn default_cases() -> Vec<(&'static str, &'static str, DType)> {
    vec![
        ("linear", "64x256x256", DType::F32),
        ("linear", "64x256x256", DType::F16),
        ("linear", "64x256x256", DType::BF16),
        ("linear", "64x256x256", DType::Q8_0),
        ("batched_matmul", "8x64x64x64", DType::F32),
        ("batched_matmul_tb", "8x64x64x64", DType::F32),
        ("layer_norm", "64x1024", DType::F32),
        ("add_layer_norm", "64x1024", DType::F32),
        ("rms_norm", "64x1024", DType::F32),
        ("softmax", "64x254", DType::F32),
        ("attention", "1x64x8x64", DType::F32),
        ("gelu", "65536", DType::F32),
        ("gelu_tanh", "65536", DType::F32),
        ("silu", "65536", DType::F32),
        ("swiglu", "65536", DType::F32),
        ("rope", "32x8x64", DType::F32),
        ("conv1d", "64x32x3", DType::F32),
        ("upsample", "64x32", DType::F32),
        ("add", "65536", DType::F32),
        ("masked_act", "65536", DType::F32),
        ("scale", "65536", DType::F32),
        ("axpby", "65536", DType::F32),
        ("embedding", "16x256x128", DType::BF16),
        ("mean_pool", "1x32x256", DType::F32),
        ("argmax", "32x10", DType::F32),
        ("gumbel", "32x10", DType::F32),
        ("posenc", "64x256", DType::F32),
        ("ddim", "65536", DType::F32),
        ("cfg", "3x65536", DType::F32),
        ("root_bridge", "3x64", DType::F32),
        ("copy", "65536", DType::F32),
        ("transpose", "256x256", DType::F32),
    ]
}

/// An op's output read back to the host.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    F32(Vec<f32>),
    U32(Vec<u32>),
}

/// Run one op once on `b` and read its output.
pub fn run_case<B: Backend>(b: &B, op: &str, shape: &str, dtype: DType) -> Result<Output> {
    let r = record(b, op, &parse_shape(shape)?, dtype)?;
    b.submit(&r.rec)?;
    b.sync()?;
    read(b, &r.out)
}

fn read<B: Backend>(b: &B, out: &BufRef<B::Buffer>) -> Result<Output> {
    let mut bytes = vec![0u8; out.dtype.bytes_for(out.len).unwrap_or(0)];
    b.read(out, &mut bytes)?;
    Ok(match out.dtype {
        DType::U32 | DType::I32 => Output::U32(bytemuck::pod_collect_to_vec(&bytes)),
        _ => Output::F32(bytemuck::pod_collect_to_vec(&bytes)),
    })
}

/// How far one backend's output lies from the reference's.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Drift {
    pub op: String,
    pub shape: String,
    pub dtype: String,
    /// "cpu/avx2/strict", `"vulkan/<device>/strict"`, ...
    pub backend: String,
    pub elements: usize,
    pub max_abs: f64,
    pub rel_l2: f64,
    /// Counts per ULP bin (see [`ULP_BINS`]; the last bin is everything above 255 and any
    /// NaN/inf disagreement).
    pub ulp_histogram: [u64; 6],
    /// Integer outputs: elements that differ.
    pub mismatches: usize,
}

/// Distance in units in the last place between two floats (0 for equal values, including
/// +0/-0; `u64::MAX` when exactly one is NaN).
pub fn ulp_distance(a: f32, b: f32) -> u64 {
    if a == b {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    // Map the bit patterns onto a line where adjacent floats are adjacent integers.
    let ord = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 {
            i32::MIN as i64 - i as i64
        } else {
            i as i64
        }
    };
    ord(a).abs_diff(ord(b))
}

/// Compare `got` with the reference output.
pub fn compare(
    op: &str,
    shape: &str,
    dtype: DType,
    backend: &str,
    reference: &Output,
    got: &Output,
) -> Drift {
    let mut d = Drift {
        op: op.to_string(),
        shape: shape.to_string(),
        dtype: dtype.name().to_string(),
        backend: backend.to_string(),
        elements: 0,
        max_abs: 0.0,
        rel_l2: 0.0,
        ulp_histogram: [0; 6],
        mismatches: 0,
    };
    match (reference, got) {
        (Output::F32(r), Output::F32(g)) => {
            d.elements = r.len();
            let (mut num, mut den) = (0f64, 0f64);
            for (&a, &b) in r.iter().zip(g) {
                let diff = (a as f64 - b as f64).abs();
                if diff.is_finite() {
                    d.max_abs = d.max_abs.max(diff);
                    num += diff * diff;
                }
                den += (a as f64) * (a as f64);
                let u = ulp_distance(a, b);
                let bin = ULP_BINS.iter().position(|&edge| u <= edge).unwrap_or(5);
                d.ulp_histogram[bin] += 1;
            }
            d.rel_l2 = if den > 0.0 {
                (num / den).sqrt()
            } else {
                num.sqrt()
            };
        }
        (Output::U32(r), Output::U32(g)) => {
            d.elements = r.len();
            d.mismatches = r.iter().zip(g).filter(|(a, b)| a != b).count();
        }
        _ => d.mismatches = usize::MAX,
    }
    d
}

impl Drift {
    pub fn table_header() -> String {
        format!(
            "{:<15} {:<12} {:<5} {:<28} {:>10} {:>10}  ulp: {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
            "op",
            "shape",
            "dtype",
            "backend",
            "max_abs",
            "rel_l2",
            "0",
            "1",
            "2-3",
            "4-15",
            "16-255",
            ">255"
        )
    }

    pub fn table_row(&self) -> String {
        if self.ulp_histogram.iter().sum::<u64>() == 0 {
            return format!(
                "{:<15} {:<12} {:<5} {:<28} {} of {} elements differ",
                self.op, self.shape, self.dtype, self.backend, self.mismatches, self.elements
            );
        }
        let h = self.ulp_histogram;
        format!(
            "{:<15} {:<12} {:<5} {:<28} {:>10.3e} {:>10.3e}       {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
            self.op,
            self.shape,
            self.dtype,
            self.backend,
            self.max_abs,
            self.rel_l2,
            h[0],
            h[1],
            h[2],
            h[3],
            h[4],
            h[5]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::case_op;
    use crate::cpu::{CpuBackend, Isa};
    use crate::ops::OpKind;

    #[test]
    fn every_op_has_a_drift_case() {
        for &op in OpKind::ALL {
            assert!(
                default_cases()
                    .iter()
                    .any(|(c, _, _)| case_op(c) == Some(op)),
                "{} has no drift case",
                op.name()
            );
        }
    }

    /// Every default case runs on the reference path and gives finite values.
    #[test]
    fn default_cases_run_on_the_reference() {
        let b = CpuBackend::with(Isa::Scalar, 1, crate::Precision::Strict).unwrap();
        for (op, shape, dtype) in default_cases() {
            match run_case(&b, op, shape, dtype).unwrap() {
                Output::F32(v) => {
                    assert!(!v.is_empty() && v.iter().all(|x| x.is_finite()), "{op}")
                }
                Output::U32(v) => assert!(!v.is_empty(), "{op}"),
            }
        }
    }

    #[test]
    fn ulp_distances() {
        assert_eq!(ulp_distance(1.0, 1.0), 0);
        assert_eq!(ulp_distance(0.0, -0.0), 0);
        assert_eq!(ulp_distance(1.0, f32::from_bits(1.0f32.to_bits() + 1)), 1);
        assert_eq!(
            ulp_distance(-f32::MIN_POSITIVE, f32::MIN_POSITIVE),
            2 * f32::MIN_POSITIVE.to_bits() as u64
        );
        assert_eq!(ulp_distance(f32::NAN, 1.0), u64::MAX);
    }

    #[test]
    fn comparison_bins_and_mismatches() {
        let r = Output::F32(vec![1.0, 2.0, 3.0, 4.0]);
        let g = Output::F32(vec![
            1.0,
            f32::from_bits(2.0f32.to_bits() + 1),
            f32::from_bits(3.0f32.to_bits() + 9),
            f32::NAN,
        ]);
        let d = compare("x", "4", DType::F32, "t", &r, &g);
        assert_eq!(d.ulp_histogram, [1, 1, 0, 1, 0, 1]);
        assert!(d.max_abs > 0.0 && d.max_abs < 1e-5);
        let d = compare(
            "x",
            "3",
            DType::F32,
            "t",
            &Output::U32(vec![1, 2, 3]),
            &Output::U32(vec![1, 5, 3]),
        );
        assert_eq!(d.mismatches, 1);
    }
}
