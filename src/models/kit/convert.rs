//! Converter helpers every `kinema convert <model>` shares: progress reports, SHA-256 of the
//! source files, the source tensors' checks (present, shape, dtype, finite, nothing extra)
//! and writing the GGUF with byte progress.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use half::{bf16, f16};
use sha2::{Digest, Sha256};

use super::checks::{Problems, first_non_finite_f32};
use super::meta::invalid;
use super::narrow::cast_weight;
use crate::formats::{
    FormatError, GgufArray, GgufWriter, NpyArray, NpyDType, SafeDType, SafeTensors, npy,
};
use crate::tensor::{Q8_0_BLOCK, Q8_0_BLOCK_BYTES, q8_0_quantize_block};
use crate::{DType, Error, HostTensor, Result};

/// What a successful conversion wrote, for a model whose configuration is `C`.
#[derive(Clone, Debug)]
pub struct Conversion<C> {
    pub config: C,
    /// Settings that were inferred or assumed and checks worth knowing, one sentence each
    /// (also in the file).
    pub notes: Vec<String>,
    pub tensors: usize,
    /// Weights and biases (statistics and constant tables not counted).
    pub parameters: u64,
    /// Each source file (relative to its model folder) and its SHA-256, hex.
    pub sources: Vec<(String, String)>,
}

/// Bytes between two progress reports.
pub const PROGRESS_STEP: u64 = 64 << 20;

/// Progress of a conversion, for a display.
#[derive(Clone, Copy, Debug)]
pub enum Progress<'a> {
    /// Tensors checked so far (shape, dtype, finite values).
    Checking { done: usize, total: usize },
    /// Bytes of a source file hashed so far.
    Hashing {
        file: &'a str,
        done: u64,
        total: u64,
    },
    /// Tensor bytes written so far (the header is not counted).
    Writing { done: u64, total: u64 },
}

/// Refuses a `--dtype` that the converter does not write: `writes`, in the order the message
/// names them (`the converter writes f32, f16 or bf16 weights`).
pub fn check_weight_dtype(dtype: DType, writes: &[DType]) -> Result<()> {
    if writes.contains(&dtype) {
        return Ok(());
    }
    let names: Vec<&str> = writes.iter().map(|d| d.name()).collect();
    let list = match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "no".to_string(),
    };
    Err(Error::InvalidArgument(format!(
        "--dtype {dtype}: the converter writes {list} weights"
    )))
}

/// A statistics `.npy` file, refused (errors prefixed with `format`) unless its values are
/// floats (upstream stores float64).
pub fn read_float_npy(path: &Path, format: &'static str) -> Result<NpyArray> {
    let a = npy::read_file(path)?;
    if !matches!(a.dtype, NpyDType::F64 | NpyDType::F32 | NpyDType::F16) {
        return Err(invalid(
            format,
            format!(
                "dtype {} is not a float type (upstream stores float64)",
                a.dtype
            ),
        ));
    }
    Ok(a)
}

/// SHA-256 of a file, hex, read in 1 MiB pieces; `file` names it in the progress reports.
pub fn sha256_file(path: &Path, file: &str, progress: &mut dyn FnMut(Progress)) -> Result<String> {
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    let total = f.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    let mut next_report = PROGRESS_STEP;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(path, e)),
        };
        h.update(&buf[..n]);
        done += n as u64;
        if done >= next_report {
            next_report = done + PROGRESS_STEP;
            progress(Progress::Hashing { file, done, total });
        }
    }
    progress(Progress::Hashing {
        file,
        done,
        total: done,
    });
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Every expected source tensor (`prefix` + name, shape) is present in `st`, of its shape,
/// of one of the `dtypes` and finite (f32 values are scanned), and nothing else is in the
/// file. All problems are gathered into one message.
pub fn check_source_tensors(
    st: &SafeTensors,
    prefix: &str,
    expected: &[(String, Vec<usize>)],
    dtypes: &[SafeDType],
    progress: &mut dyn FnMut(Progress),
) -> Result<Result<(), String>> {
    check_source_tensors_skipping(st, prefix, expected, dtypes, &[], progress)
}

/// [`check_source_tensors`], except that tensors whose names start with one of `skip`
/// (training-only parts the converter leaves out) are not reported as unexpected.
pub fn check_source_tensors_skipping(
    st: &SafeTensors,
    prefix: &str,
    expected: &[(String, Vec<usize>)],
    dtypes: &[SafeDType],
    skip: &[&str],
    progress: &mut dyn FnMut(Progress),
) -> Result<Result<(), String>> {
    let mut problems = Problems::new();
    let total = expected.len();
    for (i, (name, shape)) in expected.iter().enumerate() {
        let key = format!("{prefix}{name}");
        match st.info(&key) {
            None => problems.push(format!("missing tensor {key:?}")),
            Some(info) if info.shape != *shape => problems.push(format!(
                "tensor {key:?} has shape {:?}, expected {shape:?}",
                info.shape
            )),
            Some(info) if !dtypes.contains(&info.dtype) => {
                let want: Vec<String> = dtypes.iter().map(|d| d.to_string()).collect();
                problems.push(format!(
                    "tensor {key:?} is {}, expected {}",
                    info.dtype,
                    want.join(" or ")
                ))
            }
            Some(info) => {
                if info.dtype == SafeDType::F32
                    && let Some((j, x)) = first_non_finite_f32(st.tensor_bytes(&key)?)
                {
                    problems.push(format!(
                        "tensor {key:?} holds the non-finite value {x} at flat index {j}"
                    ));
                }
            }
        }
        if i % 16 == 15 || i + 1 == total {
            progress(Progress::Checking { done: i + 1, total });
        }
    }
    let want: HashSet<String> = expected
        .iter()
        .map(|(n, _)| format!("{prefix}{n}"))
        .collect();
    for info in st.tensors() {
        if !want.contains(&info.name) && !skip.iter().any(|p| info.name.starts_with(p)) {
            problems.push(format!("unexpected tensor {:?}", info.name));
        }
    }
    Ok(problems.into_result())
}

/// A model's metadata keys for what [`ProvenanceKeys::add_to`] writes.
pub struct ProvenanceKeys {
    /// The converter's version string.
    pub version: &'static str,
    /// String array: the converter's notes.
    pub notes: &'static str,
    /// Followed by a source file's name: its SHA-256, hex.
    pub sha256_prefix: &'static str,
}

impl ProvenanceKeys {
    /// Adds, in this order, the converter's `version`, its `notes` and the SHA-256 of every
    /// source (`(file, hex)`) to `w` under these keys.
    pub fn add_to(
        &self,
        w: &mut GgufWriter,
        version: &str,
        notes: &[String],
        sources: &[(String, String)],
    ) -> Result<()> {
        w.add_metadata(self.version, version)?;
        w.add_metadata(self.notes, GgufArray::String(notes.to_vec()))?;
        for (file, hash) in sources {
            w.add_metadata(format!("{}{file}", self.sha256_prefix), hash.as_str())?;
        }
        Ok(())
    }
}

/// The weights a converter has added to its GGUF so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct WeightTally {
    pub tensors: usize,
    /// Their elements: the model's weights and biases.
    pub parameters: u64,
    /// Their bytes as stored.
    pub data_bytes: u64,
}

impl WeightTally {
    /// Adds the weight or bias `t` to `w` as `name`: a matrix (2-D) in `dtype` (see
    /// [`cast_weight`]; `format` prefixes its errors), anything else as it is.
    pub fn add(
        &mut self,
        w: &mut GgufWriter,
        format: &'static str,
        name: &str,
        t: HostTensor,
        dtype: DType,
    ) -> Result<()> {
        let t = if t.shape.len() == 2 {
            cast_weight(format, name, &t, dtype)?
        } else {
            t
        };
        self.parameters += t.numel() as u64;
        self.tensors += 1;
        self.data_bytes += t.bytes().len() as u64;
        w.add_tensor(name, &t)
    }
}

/// Writes `w` into `sink`, reporting [`Progress::Writing`] every [`PROGRESS_STEP`] bytes of
/// the `total` tensor bytes, and once more at the end.
pub fn write_gguf(
    w: &GgufWriter,
    sink: &mut dyn Write,
    total: u64,
    progress: &mut dyn FnMut(Progress),
) -> io::Result<()> {
    let mut pw = ProgressWriter {
        inner: sink,
        done: 0,
        next_report: PROGRESS_STEP,
        total,
        progress: &mut *progress,
    };
    w.write_to(&mut pw).map_err(|e| match e {
        Error::Format(FormatError::Write { source, .. }) => source,
        other => io::Error::other(other.to_string()),
    })?;
    (pw.progress)(Progress::Writing { done: total, total });
    Ok(())
}

/// Counts written bytes and reports them every [`PROGRESS_STEP`].
struct ProgressWriter<'a, 'p> {
    inner: &'a mut dyn Write,
    done: u64,
    next_report: u64,
    total: u64,
    progress: &'a mut dyn FnMut(Progress<'p>),
}

impl Write for ProgressWriter<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.done += n as u64;
        if self.done >= self.next_report {
            self.next_report = self.done + PROGRESS_STEP;
            (self.progress)(Progress::Writing {
                done: self.done.min(self.total),
                total: self.total,
            });
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The bytes of an f32 tensor stored as `dtype` (f32, f16, bf16 round to nearest even; q8_0
/// quantised per 32-value block as GGML's reference `quantize_row_q8_0_ref`). A value beyond
/// the narrower type's range is refused rather than stored as infinity; `format` and `name`
/// prefix the errors. `shape`'s innermost dimension must be whole q8_0 blocks for q8_0.
pub fn encode_f32(
    format: &'static str,
    name: &str,
    shape: &[usize],
    values: &[f32],
    dtype: DType,
) -> Result<Vec<u8>> {
    let beyond = |i: usize, ty: &str| {
        invalid(
            format,
            format!(
                "tensor {name:?}: value {} at flat index {i} is beyond the {ty} range; \
                 convert with another --dtype",
                values[i]
            ),
        )
    };
    match dtype {
        DType::F32 => Ok(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        DType::F16 => {
            let mut out = Vec::with_capacity(values.len() * 2);
            for (i, &v) in values.iter().enumerate() {
                let h = f16::from_f32(v);
                if !h.is_finite() {
                    return Err(beyond(i, "f16 (±65504)"));
                }
                out.extend_from_slice(&h.to_le_bytes());
            }
            Ok(out)
        }
        DType::BF16 => {
            let mut out = Vec::with_capacity(values.len() * 2);
            for (i, &v) in values.iter().enumerate() {
                let h = bf16::from_f32(v);
                if !h.is_finite() {
                    return Err(beyond(i, "bf16"));
                }
                out.extend_from_slice(&h.to_le_bytes());
            }
            Ok(out)
        }
        DType::Q8_0 => {
            if shape.last().is_none_or(|&d| d % Q8_0_BLOCK != 0)
                || !values.len().is_multiple_of(Q8_0_BLOCK)
            {
                return Err(invalid(
                    format,
                    format!(
                        "tensor {name:?} of shape {shape:?}: q8_0 needs rows of whole \
                         {Q8_0_BLOCK}-value blocks"
                    ),
                ));
            }
            let mut out = vec![0u8; values.len() / Q8_0_BLOCK * Q8_0_BLOCK_BYTES];
            for (x, o) in values
                .chunks_exact(Q8_0_BLOCK)
                .zip(out.chunks_exact_mut(Q8_0_BLOCK_BYTES))
            {
                q8_0_quantize_block(x, o);
                if !f16::from_le_bytes([o[0], o[1]]).is_finite() {
                    let i = x
                        .iter()
                        .position(|v| v.abs() > 65504.0 * 127.0)
                        .unwrap_or(0);
                    return Err(beyond(i, "q8_0 (block scale beyond f16)"));
                }
            }
            Ok(out)
        }
        d => Err(Error::InvalidArgument(format!(
            "the converter writes f32, f16, bf16 or q8_0 weights, not {d}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dtype_the_converter_does_not_write_is_refused_naming_those_it_does() {
        let three = [DType::F32, DType::F16, DType::BF16];
        assert!(check_weight_dtype(DType::BF16, &three).is_ok());
        assert_eq!(
            check_weight_dtype(DType::Q8_0, &three)
                .unwrap_err()
                .to_string(),
            "invalid argument: --dtype q8_0: the converter writes f32, f16 or bf16 weights"
        );
        let four = [DType::F32, DType::F16, DType::BF16, DType::Q8_0];
        assert!(
            check_weight_dtype(DType::I32, &four)
                .unwrap_err()
                .to_string()
                .ends_with("--dtype i32: the converter writes f32, f16, bf16 or q8_0 weights")
        );
    }
}
