//! Loading a Kimodo GGUF written by `kinema convert kimodo`: the configuration from the
//! metadata, the same tensor checks as the converter, the statistics, and the weights
//! borrowed from the memory map without copying.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use half::{bf16, f16};

use super::config::{KimodoConfig, KimodoModel, MotionStats, SkeletonKind, keys, names};
use super::convert::first_non_finite_f32;
use crate::formats::{FormatError, GgufFile};
use crate::{DType, Error, HostTensor, Result};

const FORMAT: &str = "kimodo model";

fn bad(msg: impl Into<String>) -> Error {
    FormatError::Invalid {
        format: FORMAT,
        msg: msg.into(),
    }
    .into()
}

/// A metadata value the loader needs, with an error that names the key and says what the
/// file is missing.
fn meta<'f, T>(
    f: &'f GgufFile,
    path: &Path,
    key: &str,
    get: impl FnOnce(&'f GgufFile, &str) -> Result<T>,
) -> Result<T> {
    if f.get(key).is_none() {
        return Err(bad(format!(
            "{}: metadata key {key:?} is missing (write the file with `kinema convert kimodo`)",
            path.display()
        )));
    }
    get(f, key).map_err(|e| bad(format!("{}: invalid {key:?}: {e}", path.display())))
}

fn meta_usize(f: &GgufFile, path: &Path, key: &str) -> Result<usize> {
    let v = meta(f, path, key, GgufFile::get_u64)?;
    usize::try_from(v).map_err(|_| bad(format!("{}: {key} = {v} is too large", path.display())))
}

impl KimodoModel {
    /// Open a Kimodo GGUF memory-mapped: read the configuration from its metadata, check every
    /// tensor (present, shape, dtype, finite values, nothing extra) and build the statistics.
    /// The weight tensors borrow the map.
    pub fn load(path: impl AsRef<Path>) -> Result<KimodoModel> {
        let path = path.as_ref();
        let f = GgufFile::open(path).map_err(|e| match e {
            Error::Io { .. } => e,
            e => bad(format!("{}: {e}", path.display())),
        })?;
        let arch = meta(&f, path, keys::ARCHITECTURE, GgufFile::get_str)?;
        if arch != keys::ARCH_NAME {
            return Err(bad(format!(
                "{}: {} is {arch:?}, not {:?}: not a Kimodo model",
                path.display(),
                keys::ARCHITECTURE,
                keys::ARCH_NAME
            )));
        }
        let skeleton = meta(&f, path, keys::SKELETON, GgufFile::get_str)?;
        let skeleton = SkeletonKind::parse(skeleton)
            .map_err(|e| bad(format!("{}: {}: {e}", path.display(), keys::SKELETON)))?;
        let config = KimodoConfig {
            skeleton,
            latent_dim: meta_usize(&f, path, keys::LATENT_DIM)?,
            ff_size: meta_usize(&f, path, keys::FF_SIZE)?,
            num_layers: meta_usize(&f, path, keys::NUM_LAYERS)?,
            num_heads: meta_usize(&f, path, keys::NUM_HEADS)?,
            llm_dim: meta_usize(&f, path, keys::LLM_DIM)?,
            num_text_tokens: meta_usize(&f, path, keys::NUM_TEXT_TOKENS)?,
            motion_dim: meta_usize(&f, path, keys::MOTION_DIM)?,
            fps: meta(&f, path, keys::FPS, GgufFile::get_f32)?,
            num_base_steps: meta_usize(&f, path, keys::NUM_BASE_STEPS)?,
            input_first_heading_angle: meta(
                &f,
                path,
                keys::FIRST_HEADING_TOKEN,
                GgufFile::get_bool,
            )?,
            cfg_text: meta(&f, path, keys::CFG_TEXT, GgufFile::get_f32)?,
            cfg_constraint: meta(&f, path, keys::CFG_CONSTRAINT, GgufFile::get_f32)?,
        };
        config
            .validate()
            .map_err(|e| bad(format!("{}: {e}", path.display())))?;
        // The layer count bounds the tensor list built from it: a file claiming more layers
        // than it has tensors is refused before the list is made.
        if config
            .num_layers
            .checked_mul(24)
            .is_none_or(|n| n > f.tensors().len())
        {
            return Err(bad(format!(
                "{}: {} = {} but the file has only {} tensors",
                path.display(),
                keys::NUM_LAYERS,
                config.num_layers,
                f.tensors().len()
            )));
        }
        let mut tensors = BTreeMap::new();
        for info in f.tensors() {
            tensors.insert(info.name.clone(), f.tensor(&info.name)?);
        }
        check_tensors(&config, &tensors, true)
            .map_err(|e| bad(format!("{}: {e}", path.display())))?;
        let stats = stats_from(&tensors)?;
        Ok(KimodoModel {
            config,
            stats,
            tensors,
        })
    }

    /// Check a model built in memory: a valid configuration, and exactly the tensors of
    /// [`KimodoConfig::tensor_shapes`] with accepted dtypes (2-D weights f32, f16 or bf16;
    /// everything else f32), and statistics that match the tensors. Values are not scanned.
    pub fn validate(&self) -> Result<()> {
        self.config.validate()?;
        check_tensors(&self.config, &self.tensors, false).map_err(bad)?;
        if stats_from(&self.tensors)? != self.stats {
            return Err(bad(
                "the statistics differ from the stats.* tensors they were built from",
            ));
        }
        Ok(())
    }

    /// The same model with its 2-D weight matrices in `dtype` (round to nearest even; biases,
    /// norms and statistics stay f32), as `kinema convert kimodo --dtype` would have written
    /// it. Fast precision runs f16/bf16 weights; this narrows an f32 file in memory.
    pub fn with_weight_dtype(self, dtype: DType) -> Result<KimodoModel> {
        let mut tensors = BTreeMap::new();
        for (name, t) in self.tensors {
            let narrow = t.shape.len() == 2 && !name.starts_with("stats.") && t.dtype != dtype;
            let t = if narrow {
                super::convert::cast_weight(&name, &t, dtype)?
            } else {
                t
            };
            tensors.insert(name, t);
        }
        Ok(KimodoModel {
            config: self.config,
            stats: self.stats,
            tensors,
        })
    }

    /// The model as a backend runs it: in fast precision, f32 weight matrices are narrowed to
    /// the 16-bit type the backend's fast kernels consume
    /// ([`BackendInfo::fast_weight_dtype`](crate::backend::BackendInfo::fast_weight_dtype):
    /// f16 on Vulkan, bf16 on the CPU), falling back from f16 to bf16 when a weight lies
    /// beyond the f16 range. Strict precision, and files already holding 16-bit weights, are
    /// left as they are.
    pub fn for_backend(self, info: &crate::backend::BackendInfo) -> Result<KimodoModel> {
        if info.precision != crate::Precision::Fast || self.weight_dtype()? != DType::F32 {
            return Ok(self);
        }
        if info.fast_weight_dtype == DType::F16 {
            let f16_fits = self
                .tensors
                .iter()
                .filter(|(n, t)| t.shape.len() == 2 && !n.starts_with("stats."))
                .try_fold(true, |ok, (_, t)| -> Result<bool> {
                    Ok(ok && t.to_f32_vec()?.iter().all(|v| v.abs() <= 65504.0))
                })?;
            if f16_fits {
                return self.with_weight_dtype(DType::F16);
            }
        }
        self.with_weight_dtype(DType::BF16)
    }

    /// The dtype of the 2-D weight matrices (the first stage's input projection).
    pub fn weight_dtype(&self) -> Result<DType> {
        Ok(self
            .tensor(&names::stage(names::STAGES[0], "input_linear.weight"))?
            .dtype)
    }

    /// Weights and biases of both stages (statistics not counted).
    pub fn parameter_count(&self) -> u64 {
        self.tensors
            .iter()
            .filter(|(n, _)| !n.starts_with("stats."))
            .map(|(_, t)| t.numel() as u64)
            .sum()
    }

    /// A human-readable summary for `kinema info --model`.
    pub fn describe(&self) -> String {
        let c = &self.config;
        let mut by_dtype: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
        for t in self.tensors.values() {
            let e = by_dtype.entry(t.dtype.name()).or_default();
            e.0 += 1;
            e.1 += t.bytes().len() as u64;
        }
        let dtypes: Vec<String> = by_dtype
            .iter()
            .map(|(d, (n, b))| format!("{n} {d} ({:.1} MiB)", *b as f64 / (1 << 20) as f64))
            .collect();
        let mut s = String::new();
        let _ = writeln!(s, "Kimodo model");
        let _ = writeln!(
            s,
            "  skeleton          : {} ({} joints, motion features {})",
            c.skeleton.name(),
            c.skeleton.num_joints(),
            c.motion_dim
        );
        let _ = writeln!(
            s,
            "  transformer       : 2 stages x {} layers, width {}, feed-forward {}, {} heads of {}",
            c.num_layers,
            c.latent_dim,
            c.ff_size,
            c.num_heads,
            c.head_dim()
        );
        let _ = writeln!(
            s,
            "  stage widths      : root {} -> {}, body {} -> {}",
            c.root_in(),
            c.root_out(),
            c.body_in(),
            c.body_out()
        );
        let _ = writeln!(
            s,
            "  text              : width {}, {} tokens; prefix {} tokens{}",
            c.llm_dim,
            c.num_text_tokens,
            c.prefix_len(),
            if c.input_first_heading_angle {
                " (with heading token)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            s,
            "  frames            : {} fps, at most {} ({:.1} s)",
            c.fps,
            c.max_frames(),
            c.max_frames() as f32 / c.fps
        );
        let _ = writeln!(
            s,
            "  diffusion         : {} base steps; CFG text {}, constraint {}",
            c.num_base_steps, c.cfg_text, c.cfg_constraint
        );
        let _ = writeln!(
            s,
            "  parameters        : {} ({:.1} M)",
            self.parameter_count(),
            self.parameter_count() as f64 / 1e6
        );
        let _ = write!(s, "  tensors           : {}", dtypes.join(", "));
        s
    }
}

/// Exactly the expected tensors, with their shapes and accepted dtypes; with `scan`, every
/// value finite. Returns the problems joined into one message.
fn check_tensors(
    config: &KimodoConfig,
    tensors: &BTreeMap<String, HostTensor>,
    scan: bool,
) -> std::result::Result<(), String> {
    let expected = config.tensor_shapes();
    let mut problems = Vec::new();
    for (name, shape) in &expected {
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
        let ok = match t.dtype {
            DType::F32 => true,
            DType::F16 | DType::BF16 => shape.len() == 2 && !name.starts_with("stats."),
            _ => false,
        };
        if !ok {
            problems.push(format!(
                "tensor {name:?} is {}, expected f32{}",
                t.dtype,
                if shape.len() == 2 {
                    ", f16 or bf16"
                } else {
                    ""
                }
            ));
            continue;
        }
        if scan && let Some((i, x)) = first_non_finite(t) {
            problems.push(format!(
                "tensor {name:?} holds the non-finite value {x} at flat index {i}"
            ));
        }
    }
    if tensors.len() != expected.len() {
        let want: std::collections::HashSet<&str> =
            expected.iter().map(|(n, _)| n.as_str()).collect();
        for name in tensors.keys() {
            if !want.contains(name.as_str()) {
                problems.push(format!("unexpected tensor {name:?}"));
            }
        }
    }
    const MAX_LISTED: usize = 20;
    match problems.len() {
        0 => Ok(()),
        1 => Err(problems.remove(0)),
        n => {
            let mut msg = format!("{n} problems: {}", problems[..n.min(MAX_LISTED)].join("; "));
            if n > MAX_LISTED {
                msg.push_str(&format!("; and {} more", n - MAX_LISTED));
            }
            Err(msg)
        }
    }
}

fn first_non_finite(t: &HostTensor) -> Option<(usize, f32)> {
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

/// The statistics from their f32 tensors.
fn stats_from(tensors: &BTreeMap<String, HostTensor>) -> Result<MotionStats> {
    let get = |name: &str| -> Result<Vec<f32>> {
        tensors
            .get(name)
            .ok_or_else(|| bad(format!("missing tensor {name:?}")))?
            .to_f32_vec()
    };
    fn fixed<const N: usize>(v: Vec<f32>, name: &str) -> Result<[f32; N]> {
        v.try_into().map_err(|v: Vec<f32>| {
            bad(format!(
                "tensor {name:?} has {} values, expected {N}",
                v.len()
            ))
        })
    }
    Ok(MotionStats {
        global_mean: fixed(get(names::STATS_GLOBAL_MEAN)?, names::STATS_GLOBAL_MEAN)?,
        global_std: fixed(get(names::STATS_GLOBAL_STD)?, names::STATS_GLOBAL_STD)?,
        local_mean: fixed(get(names::STATS_LOCAL_MEAN)?, names::STATS_LOCAL_MEAN)?,
        local_std: fixed(get(names::STATS_LOCAL_STD)?, names::STATS_LOCAL_STD)?,
        body_mean: get(names::STATS_BODY_MEAN)?,
        body_std: get(names::STATS_BODY_STD)?,
    })
}

#[cfg(test)]
mod tests {
    use crate::backend::{BackendInfo, Precision};
    use crate::models::kimodo::{SkeletonKind, synthetic};
    use crate::{DType, HostTensor};

    /// A backend whose fast kernels multiply `fast` weights (f16: Vulkan, bf16: the CPU).
    fn info(fast: DType, precision: Precision) -> BackendInfo {
        BackendInfo {
            kind: "test",
            device: String::new(),
            precision,
            threads: 1,
            cooperative_matrix: false,
            fast_weight_dtype: fast,
        }
    }

    #[test]
    fn fast_precision_narrows_to_what_the_backend_multiplies() {
        let mut c = synthetic::released_soma();
        c.skeleton = SkeletonKind::Smplx22;
        c.motion_dim = c.skeleton.motion_dim();
        (c.latent_dim, c.ff_size, c.num_layers, c.num_heads) = (16, 24, 1, 2);
        (c.llm_dim, c.num_text_tokens) = (8, 3);
        let m = || synthetic::model(c.clone()).unwrap();
        let dtype = |m: &super::KimodoModel| m.weight_dtype().unwrap();
        let strict = m()
            .for_backend(&info(DType::F16, Precision::Strict))
            .unwrap();
        assert_eq!(dtype(&strict), DType::F32);
        let vk = m().for_backend(&info(DType::F16, Precision::Fast)).unwrap();
        assert_eq!(dtype(&vk), DType::F16);
        let name = "body_model.seqTransEncoder.layers.0.norm1.weight";
        assert_eq!(vk.tensor(name).unwrap().dtype, DType::F32, "norms stay f32");
        let cpu = m()
            .for_backend(&info(DType::BF16, Precision::Fast))
            .unwrap();
        assert_eq!(dtype(&cpu), DType::BF16);
        // A weight beyond the f16 range: Vulkan falls back to bf16 rather than infinity.
        let mut big = m();
        let w = "root_model.input_linear.weight";
        let t = big.tensor(w).unwrap();
        let mut v = t.to_f32_vec().unwrap();
        v[3] = 1e6;
        let shape = t.shape.clone();
        big.tensors
            .insert(w.into(), HostTensor::from_f32(&shape, &v).unwrap());
        let vk = big.for_backend(&info(DType::F16, Precision::Fast)).unwrap();
        assert_eq!(dtype(&vk), DType::BF16);
    }
}
