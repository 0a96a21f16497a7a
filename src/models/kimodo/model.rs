//! Loading a Kimodo GGUF written by `kinema convert kimodo`: the configuration from the
//! metadata, the same tensor checks as the converter, the statistics, and the weights
//! borrowed from the memory map without copying.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::config::{KimodoConfig, KimodoModel, MotionStats, SkeletonKind, keys, names};
use crate::models::kit::checks::check_tensors;
use crate::models::kit::meta::{self, Meta, invalid};
use crate::models::kit::narrow::{fast_weight_dtype, narrow_weights};
use crate::{DType, Error, HostTensor, Result};

const FORMAT: &str = "kimodo model";

fn bad(msg: impl Into<String>) -> Error {
    invalid(FORMAT, msg)
}

/// Whether `name` is a weight matrix (2-D and not a statistic): the tensors that may be f16
/// or bf16.
fn is_matrix(name: &str, shape: &[usize]) -> bool {
    shape.len() == 2 && !name.starts_with("stats.")
}

impl KimodoModel {
    /// Open a Kimodo GGUF memory-mapped: read the configuration from its metadata, check every
    /// tensor (present, shape, dtype, finite values, nothing extra) and build the statistics.
    /// The weight tensors borrow the map.
    pub fn load(path: impl AsRef<Path>) -> Result<KimodoModel> {
        let path = path.as_ref();
        let f = meta::open(path, FORMAT)?;
        let m = Meta::new(&f, path, FORMAT, "kinema convert kimodo");
        m.expect_architecture(keys::ARCHITECTURE, keys::ARCH_NAME, "Kimodo model")?;
        let skeleton = SkeletonKind::parse(m.str(keys::SKELETON)?)
            .map_err(|e| m.bad(format!("{}: {e}", keys::SKELETON)))?;
        let config = KimodoConfig {
            skeleton,
            latent_dim: m.usize(keys::LATENT_DIM)?,
            ff_size: m.usize(keys::FF_SIZE)?,
            num_layers: m.usize(keys::NUM_LAYERS)?,
            num_heads: m.usize(keys::NUM_HEADS)?,
            llm_dim: m.usize(keys::LLM_DIM)?,
            num_text_tokens: m.usize(keys::NUM_TEXT_TOKENS)?,
            motion_dim: m.usize(keys::MOTION_DIM)?,
            fps: m.f32(keys::FPS)?,
            num_base_steps: m.usize(keys::NUM_BASE_STEPS)?,
            input_first_heading_angle: m.bool(keys::FIRST_HEADING_TOKEN)?,
            cfg_text: m.f32(keys::CFG_TEXT)?,
            cfg_constraint: m.f32(keys::CFG_CONSTRAINT)?,
        };
        config.validate().map_err(|e| m.bad(e))?;
        // The layer count bounds the tensor list built from it: a file claiming more layers
        // than it has tensors is refused before the list is made.
        if config
            .num_layers
            .checked_mul(24)
            .is_none_or(|n| n > f.tensors().len())
        {
            return Err(m.bad(format!(
                "{} = {} but the file has only {} tensors",
                keys::NUM_LAYERS,
                config.num_layers,
                f.tensors().len()
            )));
        }
        let mut tensors = BTreeMap::new();
        for info in f.tensors() {
            tensors.insert(info.name.clone(), f.tensor(&info.name)?);
        }
        check(&config, &tensors, true).map_err(|e| m.bad(e))?;
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
        check(&self.config, &self.tensors, false).map_err(bad)?;
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
        // Narrowing errors read as the converter's, which narrows the same way.
        let tensors = narrow_weights(
            super::convert::FORMAT,
            self.tensors,
            |name, t| is_matrix(name, &t.shape),
            dtype,
        )?;
        Ok(KimodoModel {
            config: self.config,
            stats: self.stats,
            tensors,
        })
    }

    /// The model as a backend runs it: in fast precision, f32 weight matrices are narrowed to
    /// the 16-bit type the backend's fast kernels consume (see
    /// [`fast_weight_dtype`]). Strict precision, and files already holding 16-bit weights,
    /// are left as they are.
    pub fn for_backend(self, info: &crate::backend::BackendInfo) -> Result<KimodoModel> {
        if info.precision != crate::Precision::Fast || self.weight_dtype()? != DType::F32 {
            return Ok(self);
        }
        let matrices = self
            .tensors
            .iter()
            .filter(|(n, t)| is_matrix(n, &t.shape))
            .map(|(_, t)| t);
        match fast_weight_dtype(info, matrices)? {
            Some(dtype) => self.with_weight_dtype(dtype),
            None => Ok(self),
        }
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

/// Exactly the expected tensors, with their shapes and accepted dtypes (2-D weights f32, f16
/// or bf16; everything else f32); with `scan`, every value finite. Returns the problems joined
/// into one message.
fn check(
    config: &KimodoConfig,
    tensors: &BTreeMap<String, HostTensor>,
    scan: bool,
) -> std::result::Result<(), String> {
    let accepts = |name: &str, shape: &[usize]| -> &'static [DType] {
        if is_matrix(name, shape) {
            &[DType::F32, DType::F16, DType::BF16]
        } else {
            &[DType::F32]
        }
    };
    check_tensors(&config.tensor_shapes(), tensors, accepts, scan)
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
            stacks_weights_in_place: false,
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
