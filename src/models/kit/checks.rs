//! Tensor checks every model loader and converter runs: exactly the expected tensors, each of
//! its shape and an accepted dtype, every value finite; all problems gathered into one
//! message.

use std::collections::{BTreeMap, HashSet};

use half::{bf16, f16};

use super::par::par_map;
use crate::{DType, HostTensor};

/// Problems listed in one message before the rest are counted.
pub const MAX_LISTED: usize = 20;

/// Problems found by a check, reported together.
#[derive(Clone, Debug, Default)]
pub struct Problems(Vec<String>);

impl Problems {
    /// No problems yet.
    pub fn new() -> Problems {
        Problems::default()
    }

    /// Records one problem.
    pub fn push(&mut self, problem: String) {
        self.0.push(problem);
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok` when there are none; else one message: the problem itself, or `"<n> problems: a;
    /// b; …"` listing the first [`MAX_LISTED`] and counting the rest.
    pub fn into_result(mut self) -> Result<(), String> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            n => {
                let mut msg = format!("{n} problems: {}", self.0[..n.min(MAX_LISTED)].join("; "));
                if n > MAX_LISTED {
                    msg.push_str(&format!("; and {} more", n - MAX_LISTED));
                }
                Err(msg)
            }
        }
    }
}

/// The first non-finite f32 in little-endian `bytes`: (index, value). Blocks are first
/// tested without an early exit (an all-ones exponent is NaN or infinity), which the compiler
/// vectorises; only a block that holds one is searched.
pub fn first_non_finite_f32(bytes: &[u8]) -> Option<(usize, f32)> {
    const EXP: u32 = 0x7f80_0000;
    const BLOCK: usize = 4096;
    let word = |c: &[u8]| u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    for (b, block) in bytes.chunks(BLOCK).enumerate() {
        let any = block
            .chunks_exact(4)
            .fold(false, |acc, c| acc | (word(c) & EXP == EXP));
        if any {
            return block
                .chunks_exact(4)
                .position(|c| word(c) & EXP == EXP)
                .map(|i| (b * BLOCK / 4 + i, f32::from_bits(word(&block[4 * i..]))));
        }
    }
    None
}

/// The first non-finite value of a float tensor (f32, f16 or bf16): (flat index, value as
/// f32). Other dtypes have none.
pub fn first_non_finite(t: &HostTensor) -> Option<(usize, f32)> {
    let b = t.bytes();
    match t.dtype {
        DType::F32 => first_non_finite_f32(b),
        DType::F16 => b
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]))
            .position(|x| !x.is_finite())
            .map(|i| (i, f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32())),
        DType::BF16 => b
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]))
            .position(|x| !x.is_finite())
            .map(|i| (i, bf16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32())),
        _ => None,
    }
}

/// `"f32"`, `"f32 or f16"`, `"f32, f16 or bf16"`.
pub fn dtype_list(dtypes: &[DType]) -> String {
    let names: Vec<&str> = dtypes.iter().map(|d| d.name()).collect();
    match names.as_slice() {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// Exactly the `expected` tensors (name, shape), each of a dtype `accepts(name, shape)`
/// allows; with `scan`, every value finite (the scans spread over the host's cores); and no
/// tensor that is not expected. Returns the problems joined into one message (see
/// [`Problems::into_result`]).
pub fn check_tensors(
    expected: &[(String, Vec<usize>)],
    tensors: &BTreeMap<String, HostTensor>,
    accepts: impl Fn(&str, &[usize]) -> &'static [DType],
    scan: bool,
) -> Result<(), String> {
    let mut problems = Problems::new();
    let non_finite = if scan {
        par_map(expected, |(name, _)| {
            tensors.get(name).and_then(first_non_finite)
        })
    } else {
        vec![None; expected.len()]
    };
    for ((name, shape), non_finite) in expected.iter().zip(non_finite) {
        let Some(t) = tensors.get(name) else {
            problems.push(format!("missing tensor {name:?}"));
            continue;
        };
        if t.shape != *shape {
            problems.push(format!(
                "tensor {name:?} has shape {:?}, expected {shape:?}",
                t.shape
            ));
            continue;
        }
        let ok = accepts(name, shape);
        if !ok.contains(&t.dtype) {
            problems.push(format!(
                "tensor {name:?} is {}, expected {}",
                t.dtype,
                dtype_list(ok)
            ));
            continue;
        }
        if let Some((i, x)) = non_finite {
            problems.push(format!(
                "tensor {name:?} holds the non-finite value {x} at flat index {i}"
            ));
        }
    }
    if tensors.len() != expected.len() {
        let want: HashSet<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
        for name in tensors.keys() {
            if !want.contains(name.as_str()) {
                problems.push(format!("unexpected tensor {name:?}"));
            }
        }
    }
    problems.into_result()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_non_finite_value_across_blocks() {
        let mut v: Vec<f32> = (0..5000).map(|i| i as f32 - 2500.0).collect();
        let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        assert_eq!(first_non_finite_f32(&bytes(&v)), None);
        v[4999] = f32::NEG_INFINITY;
        assert_eq!(
            first_non_finite_f32(&bytes(&v)),
            Some((4999, f32::NEG_INFINITY))
        );
        v[1500] = f32::INFINITY;
        assert_eq!(
            first_non_finite_f32(&bytes(&v)),
            Some((1500, f32::INFINITY))
        );
        v[1024] = f32::NAN;
        let (i, x) = first_non_finite_f32(&bytes(&v)).unwrap();
        assert!(i == 1024 && x.is_nan());
        // The largest finite values and subnormals are finite.
        let edge = [f32::MAX, f32::MIN, f32::MIN_POSITIVE / 2.0, -0.0];
        assert_eq!(first_non_finite_f32(&bytes(&edge)), None);
        let h = HostTensor::from_f16(&[3], &[f16::ONE, f16::INFINITY, f16::NAN]).unwrap();
        assert_eq!(first_non_finite(&h), Some((1, f32::INFINITY)));
    }

    #[test]
    fn gathers_every_problem_into_one_message() {
        let t = |shape: &[usize]| HostTensor::from_f32(shape, &vec![1.0; shape[0]]).unwrap();
        let mut tensors = BTreeMap::new();
        tensors.insert("a".to_string(), t(&[2]));
        tensors.insert("b".to_string(), t(&[3]));
        tensors.insert(
            "c".to_string(),
            HostTensor::from_f16(&[1], &[f16::NAN]).unwrap(),
        );
        tensors.insert("z".to_string(), t(&[1]));
        let expected = vec![
            ("a".to_string(), vec![2]),
            ("b".to_string(), vec![2]),
            ("c".to_string(), vec![1]),
            ("d".to_string(), vec![1]),
        ];
        let f32_only = |_: &str, _: &[usize]| -> &'static [DType] { &[DType::F32] };
        let msg = check_tensors(&expected, &tensors, f32_only, true).unwrap_err();
        assert!(msg.starts_with("3 problems: "), "{msg}");
        assert!(
            msg.contains("tensor \"b\" has shape [3], expected [2]"),
            "{msg}"
        );
        assert!(msg.contains("tensor \"c\" is f16, expected f32"), "{msg}");
        assert!(msg.contains("missing tensor \"d\""), "{msg}");
        let msg = check_tensors(&expected[..3], &tensors, f32_only, false).unwrap_err();
        assert!(msg.contains("unexpected tensor \"z\""), "{msg}");
        let any = |_: &str, _: &[usize]| -> &'static [DType] { &[DType::F32, DType::F16] };
        let msg = check_tensors(&expected[2..3], &tensors, any, true).unwrap_err();
        assert!(
            msg.starts_with("4 problems") && msg.contains("non-finite value NaN"),
            "{msg}"
        );
        assert_eq!(
            dtype_list(&[DType::F32, DType::F16, DType::BF16]),
            "f32, f16 or bf16"
        );
        let mut many = Problems::new();
        for i in 0..25 {
            many.push(format!("p{i}"));
        }
        assert!(many.into_result().unwrap_err().ends_with("p19; and 5 more"));
    }
}
