//! `kinema convert kimodo`: an upstream Hugging Face checkpoint directory to one GGUF file.
//!
//! The directory holds `model.safetensors` (f32, keys `denoiser.backbone.{root_model,
//! body_model}.…`), `stats/motion/{global_root,local_root,body}/{mean,std}.npy` (float64) and,
//! when present, the Hydra `config.yaml` (`../shared/docs/upstream/kimodo.md` sections 2-3).
//! Widths, layer count and the text width come from the tensor shapes; heads, fps, the
//! diffusion steps and the text-token count come from the flags, else `config.yaml`, else the
//! values of every released model (each such guess is printed and recorded in the file under
//! [`keys::CONVERTER_NOTES`]). Every tensor is checked (present, expected shape, f32, finite,
//! nothing extra) before anything is written, and the output is written atomically.

use std::io;
use std::path::Path;

use yaml_rust2::Yaml;

use super::config::{KimodoConfig, SkeletonKind, keys, names};
use crate::formats::{FormatError, GgufWriter, SafeDType, SafeTensors};
use crate::models::kit::convert::{
    WeightTally, check_source_tensors, check_weight_dtype, read_float_npy, sha256_file, write_gguf,
};
use crate::models::kit::meta::invalid;
use crate::models::kit::output::OutputPlan;
use crate::models::kit::yaml::{self, Lookup, as_f32, as_usize, show};
use crate::{DType, Error, HostTensor, Result};

pub use crate::models::kit::convert::Progress;

/// Recorded in every converted file under [`keys::CONVERTER_VERSION`]. The trailing number
/// changes whenever the file layout written here changes.
pub const CONVERTER_VERSION: &str =
    concat!("kinema ", env!("CARGO_PKG_VERSION"), " kimodo-convert 1");

/// The prefix of every checkpoint key (`kimodo/model/twostage_denoiser.py#L66-71` strips it).
pub const CHECKPOINT_PREFIX: &str = "denoiser.backbone.";
pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const CONFIG_FILE: &str = "config.yaml";
/// The statistics files, relative to the checkpoint directory, with their tensor names.
pub const STATS_FILES: [(&str, &str); 6] = [
    (
        "stats/motion/global_root/mean.npy",
        names::STATS_GLOBAL_MEAN,
    ),
    ("stats/motion/global_root/std.npy", names::STATS_GLOBAL_STD),
    ("stats/motion/local_root/mean.npy", names::STATS_LOCAL_MEAN),
    ("stats/motion/local_root/std.npy", names::STATS_LOCAL_STD),
    ("stats/motion/body/mean.npy", names::STATS_BODY_MEAN),
    ("stats/motion/body/std.npy", names::STATS_BODY_STD),
];

/// Values of every released checkpoint (`kimodo.md` section 2), used when neither a flag nor
/// `config.yaml` gives one.
pub const DEFAULT_NUM_HEADS: usize = 8;
pub const DEFAULT_NUM_TEXT_TOKENS: usize = 50;
pub const DEFAULT_FPS: f32 = 30.0;
pub const DEFAULT_NUM_BASE_STEPS: usize = 1000;
/// Upstream's generation default `cfg_weight = [2.0, 2.0]` (text, constraint;
/// `kimodo/model/kimodo_model.py#L129`).
pub const DEFAULT_CFG: [f32; 2] = [2.0, 2.0];

/// The prefix of the converter's errors.
pub(crate) const FORMAT: &str = "kimodo checkpoint";
/// A Hydra config is a few KiB; anything far larger is not one.
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Layer indices listed in one error.
const MAX_LISTED: usize = 20;

/// What the flags ask for; `None` defers to `config.yaml`, then to inference or the defaults.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    pub skeleton: Option<SkeletonKind>,
    pub num_heads: Option<usize>,
    /// F32 (default), F16 or BF16: the dtype of the 2-D weight matrices. Biases, norms and
    /// statistics stay f32.
    pub dtype: DType,
}

impl Default for ConvertOptions {
    fn default() -> ConvertOptions {
        ConvertOptions {
            skeleton: None,
            num_heads: None,
            dtype: DType::F32,
        }
    }
}

/// What a successful conversion wrote (parameters: the weights and biases of both stages).
pub type Conversion = crate::models::kit::convert::Conversion<KimodoConfig>;

fn bad(msg: impl Into<String>) -> Error {
    invalid(FORMAT, msg)
}

/// Name the checkpoint file an error came from (I/O errors already name the path; invalid
/// settings are about the flags or the configuration, not a file).
fn in_file(file: &str) -> impl FnOnce(Error) -> Error + '_ {
    move |e| match e {
        Error::Io { .. } | Error::InvalidArgument(_) => e,
        Error::Format(FormatError::Invalid {
            format: FORMAT,
            msg,
        }) => bad(format!("{file}: {msg}")),
        other => bad(format!("{file}: {other}")),
    }
}

/// Convert the checkpoint directory `dir` into the GGUF file `out`. Nothing is written unless
/// every check passes; `out` is checked first (see [`OutputPlan`]: it may not be one of the
/// checkpoint's files, nor anything but a regular file) and replaced atomically, so it never
/// holds a partial file.
pub fn convert(
    dir: &Path,
    out: &Path,
    opts: &ConvertOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Conversion> {
    check_weight_dtype(opts.dtype, &[DType::F32, DType::F16, DType::BF16])?;
    let mut plan = OutputPlan::new();
    for file in [WEIGHTS_FILE, CONFIG_FILE]
        .into_iter()
        .chain(STATS_FILES.iter().map(|(f, _)| *f))
    {
        plan.input(&dir.join(file), file);
    }
    let mut outputs = plan.output(out, "--output").check()?;
    if !dir.is_dir() {
        return Err(Error::io(
            dir,
            io::Error::new(io::ErrorKind::NotFound, "not a checkpoint directory"),
        ));
    }
    let mut notes = Vec::new();
    let config_path = dir.join(CONFIG_FILE);
    let settings = if config_path.exists() {
        Settings::read(&config_path).map_err(in_file(CONFIG_FILE))?
    } else {
        notes.push(format!(
            "no {CONFIG_FILE}: settings from flags, tensor shapes and defaults"
        ));
        Settings::default()
    };
    let st = SafeTensors::open(dir.join(WEIGHTS_FILE)).map_err(in_file(WEIGHTS_FILE))?;
    let config = infer_config(&st, &settings, opts, &mut notes).map_err(in_file(WEIGHTS_FILE))?;
    let expected = config.tensor_shapes();
    let n_weights = expected.len() - STATS_FILES.len();
    check_source_tensors(
        &st,
        CHECKPOINT_PREFIX,
        &expected[..n_weights],
        &[SafeDType::F32],
        progress,
    )
    .map_err(in_file(WEIGHTS_FILE))?
    .map_err(bad)
    .map_err(in_file(WEIGHTS_FILE))?;
    let mut stats = Vec::with_capacity(STATS_FILES.len());
    for ((file, name), (want_name, shape)) in STATS_FILES.iter().zip(&expected[n_weights..]) {
        debug_assert_eq!(name, want_name);
        stats.push(read_stats(&dir.join(file), shape[0]).map_err(in_file(file))?);
    }

    let mut sources = Vec::new();
    let mut files: Vec<&str> = vec![WEIGHTS_FILE];
    files.extend(STATS_FILES.iter().map(|(f, _)| *f));
    if config_path.exists() {
        files.push(CONFIG_FILE);
    }
    for file in files {
        sources.push((
            file.to_string(),
            sha256_file(&dir.join(file), file, progress)?,
        ));
    }

    let mut w = GgufWriter::new();
    add_config_metadata(&mut w, &config)?;
    keys::PROVENANCE.add_to(&mut w, CONVERTER_VERSION, &notes, &sources)?;

    let mut weights = WeightTally::default();
    for (name, _) in &expected[..n_weights] {
        let src = st.tensor(&format!("{CHECKPOINT_PREFIX}{name}"))?;
        weights.add(&mut w, FORMAT, name, src, opts.dtype)?;
    }
    let mut data_bytes = weights.data_bytes;
    for ((name, shape), values) in expected[n_weights..].iter().zip(&stats) {
        let t = HostTensor::from_f32(shape, values)?;
        data_bytes += t.bytes().len() as u64;
        w.add_tensor(name.as_str(), &t)?;
    }

    outputs.write(out, |sink| write_gguf(&w, sink, data_bytes, progress))?;
    outputs.commit()?;
    Ok(Conversion {
        config,
        notes,
        tensors: expected.len(),
        parameters: weights.parameters,
        sources,
    })
}

/// The metadata of `config` that [`KimodoModel::load`](super::KimodoModel::load) reads back
/// (architecture, skeleton, sizes, fps, heading token, guidance weights), without the
/// converter's provenance.
pub fn add_config_metadata(w: &mut GgufWriter, config: &KimodoConfig) -> Result<()> {
    w.add_metadata(keys::ARCHITECTURE, keys::ARCH_NAME)?;
    w.add_metadata(keys::SKELETON, config.skeleton.name())?;
    for (key, v) in [
        (keys::LATENT_DIM, config.latent_dim),
        (keys::FF_SIZE, config.ff_size),
        (keys::NUM_LAYERS, config.num_layers),
        (keys::NUM_HEADS, config.num_heads),
        (keys::LLM_DIM, config.llm_dim),
        (keys::NUM_TEXT_TOKENS, config.num_text_tokens),
        (keys::MOTION_DIM, config.motion_dim),
        (keys::NUM_BASE_STEPS, config.num_base_steps),
    ] {
        let v = u32::try_from(v).map_err(|_| bad(format!("{key} = {v} does not fit u32")))?;
        w.add_metadata(key, v)?;
    }
    w.add_metadata(keys::FPS, config.fps)?;
    w.add_metadata(keys::FIRST_HEADING_TOKEN, config.input_first_heading_angle)?;
    w.add_metadata(keys::CFG_TEXT, config.cfg_text)?;
    w.add_metadata(keys::CFG_CONSTRAINT, config.cfg_constraint)?;
    Ok(())
}

/// One statistics vector: a 1-D float array of `width` finite values, cast to f32 as
/// upstream does before any arithmetic (`kimodo/motion_rep/stats.py#L65-77`).
fn read_stats(path: &Path, width: usize) -> Result<Vec<f32>> {
    let a = read_float_npy(path, FORMAT)?;
    if a.shape != [width] {
        return Err(bad(format!(
            "shape {:?} does not match the model: expected [{width}]",
            a.shape
        )));
    }
    let v = a.to_f32()?;
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(bad(format!(
            "non-finite value {} at index {i} (or beyond f32 range)",
            v[i]
        )));
    }
    Ok(v)
}

/// The shape of a tensor needed to infer the architecture, as a matrix.
fn matrix(st: &SafeTensors, name: &str) -> Result<[usize; 2]> {
    let key = format!("{CHECKPOINT_PREFIX}{name}");
    let info = st.info(&key).ok_or_else(|| {
        bad(format!(
            "missing tensor {key:?} (needed to infer the model's dimensions)"
        ))
    })?;
    match info.shape[..] {
        [r, c] => Ok([r, c]),
        _ => Err(bad(format!(
            "tensor {key:?} has shape {:?}, expected a matrix",
            info.shape
        ))),
    }
}

/// Layer indices `0..n` of a stage's encoder, read from the tensor names.
fn layer_count(st: &SafeTensors, stage: &str) -> Result<usize> {
    let prefix = format!("{CHECKPOINT_PREFIX}{stage}.seqTransEncoder.layers.");
    let mut seen = std::collections::BTreeSet::new();
    for info in st.tensors() {
        if let Some(rest) = info.name.strip_prefix(&prefix) {
            let idx = rest.split('.').next().and_then(|s| s.parse::<usize>().ok());
            match idx {
                Some(i) => {
                    seen.insert(i);
                }
                None => return Err(bad(format!("unexpected tensor {:?}", info.name))),
            }
        }
    }
    if seen.is_empty() {
        return Err(bad(format!(
            "no encoder layer tensors ({prefix}<i>.…) for {stage}"
        )));
    }
    let n = seen.len();
    if seen.last() != Some(&(n - 1)) {
        return Err(bad(format!(
            "the encoder layers of {stage} are numbered {:?}, expected 0..{}",
            seen.iter().take(MAX_LISTED).collect::<Vec<_>>(),
            n
        )));
    }
    Ok(n)
}

/// The model's configuration: dimensions from the tensor shapes, the rest from the flags,
/// `config.yaml` or the released defaults (each default noted), cross-checked.
fn infer_config(
    st: &SafeTensors,
    settings: &Settings,
    opts: &ConvertOptions,
    notes: &mut Vec<String>,
) -> Result<KimodoConfig> {
    let root = names::STAGES[0];
    let num_layers = layer_count(st, root)?;
    let body_layers = layer_count(st, names::STAGES[1])?;
    if body_layers != num_layers {
        return Err(bad(format!(
            "root_model has {num_layers} encoder layers but body_model has {body_layers}"
        )));
    }
    let [d, llm_dim] = matrix(st, &names::stage(root, "embed_text.weight"))?;
    let [f, _] = matrix(st, &names::layer(root, 0, "linear1.weight"))?;
    let [_, root_in] = matrix(st, &names::stage(root, "input_linear.weight"))?;
    if root_in % 2 != 0 {
        return Err(bad(format!(
            "{root}.input_linear.weight has {root_in} input columns; a Kimodo root stage \
             takes the features and their mask, 2 x motion_dim"
        )));
    }
    let motion_dim = root_in / 2;

    let skeleton = match (opts.skeleton, settings.skeleton) {
        (Some(s), _) => s,
        (None, Some(s)) => s,
        (None, None) => {
            let s = SkeletonKind::from_motion_dim(motion_dim).ok_or_else(|| {
                bad(format!(
                    "unknown skeleton: motion dim {motion_dim} (from {root}.input_linear.weight) \
                     matches none of {}; pass --skeleton",
                    SkeletonKind::TRAINED
                        .iter()
                        .map(|s| format!("{} ({})", s.name(), s.motion_dim()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            notes.push(format!(
                "skeleton {} inferred from the motion dim {motion_dim} (9 + 12 x {} joints)",
                s.name(),
                s.num_joints()
            ));
            s
        }
    };
    if skeleton.motion_dim() != motion_dim {
        return Err(bad(format!(
            "skeleton {} has motion dim {} (9 + 12 x {} joints) but the tensors have {motion_dim} \
             ({root}.input_linear.weight takes {root_in} = 2 x {motion_dim} columns)",
            skeleton.name(),
            skeleton.motion_dim(),
            skeleton.num_joints()
        )));
    }
    for (name, from_yaml, inferred) in [
        ("latent_dim", settings.latent_dim, d),
        ("ff_size", settings.ff_size, f),
        ("num_layers", settings.num_layers, num_layers),
        ("llm_shape[1]", settings.llm_dim, llm_dim),
    ] {
        if let Some(v) = from_yaml
            && v != inferred
        {
            return Err(bad(format!(
                "{name} = {v} in {CONFIG_FILE}, but the tensors have {inferred}"
            )));
        }
    }
    let num_heads = match (opts.num_heads, settings.num_heads) {
        (Some(h), _) | (None, Some(h)) => h,
        (None, None) => {
            notes.push(format!(
                "num_heads = {DEFAULT_NUM_HEADS} assumed (not in {CONFIG_FILE} nor given by \
                 --num-heads; every released model has {DEFAULT_NUM_HEADS})"
            ));
            DEFAULT_NUM_HEADS
        }
    };
    if num_heads == 0 || d % num_heads != 0 {
        return Err(Error::InvalidArgument(format!(
            "num_heads {num_heads} does not divide latent_dim {d}"
        )));
    }
    let num_text_tokens = settings.num_text_tokens.unwrap_or_else(|| {
        notes.push(format!(
            "num_text_tokens = {DEFAULT_NUM_TEXT_TOKENS} assumed (released configs set \
             num_text_tokens_override: {DEFAULT_NUM_TEXT_TOKENS})"
        ));
        DEFAULT_NUM_TEXT_TOKENS
    });
    let fps = settings.fps.unwrap_or_else(|| {
        notes.push(format!("fps = {DEFAULT_FPS} assumed"));
        DEFAULT_FPS
    });
    let num_base_steps = settings.num_base_steps.unwrap_or_else(|| {
        notes.push(format!("num_base_steps = {DEFAULT_NUM_BASE_STEPS} assumed"));
        DEFAULT_NUM_BASE_STEPS
    });
    let input_first_heading_angle = settings.input_first_heading_angle.unwrap_or_else(|| {
        notes.push("input_first_heading_angle = true assumed".into());
        true
    });
    let [cfg_text, cfg_constraint] = settings.cfg.unwrap_or(DEFAULT_CFG);
    let config = KimodoConfig {
        skeleton,
        latent_dim: d,
        ff_size: f,
        num_layers,
        num_heads,
        llm_dim,
        num_text_tokens,
        motion_dim,
        fps,
        num_base_steps,
        input_first_heading_angle,
        cfg_text,
        cfg_constraint,
    };
    config.validate()?;
    Ok(config)
}

/// What `config.yaml` says, each `None` when absent. The keys are searched anywhere in the
/// Hydra tree (the denoiser's arguments sit under `denoiser`, the skeleton and fps under its
/// `motion_rep`); a key found twice with different values is an error.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Settings {
    pub skeleton: Option<SkeletonKind>,
    pub num_heads: Option<usize>,
    pub latent_dim: Option<usize>,
    pub ff_size: Option<usize>,
    pub num_layers: Option<usize>,
    pub llm_dim: Option<usize>,
    pub num_text_tokens: Option<usize>,
    pub fps: Option<f32>,
    pub num_base_steps: Option<usize>,
    pub input_first_heading_angle: Option<bool>,
    pub cfg: Option<[f32; 2]>,
}

/// Parse `config.yaml` text as `kinema convert` does (aliases refused, `${a.b}`
/// interpolations resolved, every key kinema reads checked): the entry point of the
/// `config_yaml` fuzz target in `fuzz/`.
#[doc(hidden)]
pub fn parse_config_yaml(text: &str) -> Result<()> {
    Settings::parse(text).map(|_| ())
}

/// Upstream skeleton class names (`kimodo/skeleton/definitions.py`) and kinema's names.
fn skeleton_from_name(s: &str) -> Option<SkeletonKind> {
    let class = s.rsplit('.').next().unwrap_or(s);
    match class {
        "SOMASkeleton30" => Some(SkeletonKind::Soma30),
        "SOMASkeleton77" => Some(SkeletonKind::Soma77),
        "G1Skeleton34" => Some(SkeletonKind::G1),
        "SMPLXSkeleton22" => Some(SkeletonKind::Smplx22),
        _ => SkeletonKind::parse(&s.to_ascii_lowercase()).ok(),
    }
}

/// The skeleton of a config: a `_target_` class (`kimodo.skeleton.SOMASkeleton30`), upstream's
/// factory `kimodo.skeleton.registry.build_skeleton` with `nbjoints`
/// (`kimodo/skeleton/registry.py`), or a plain name.
fn skeleton_from_yaml(v: &Yaml) -> Result<SkeletonKind> {
    let unknown = |what: String| {
        bad(format!(
            "unknown skeleton {what} (expected SOMASkeleton30, G1Skeleton34, \
             SMPLXSkeleton22, build_skeleton with nbjoints 30, 34 or 22, or soma30, g1, smplx22)"
        ))
    };
    let name = match v {
        Yaml::String(n) => n.as_str(),
        Yaml::Hash(h) => match h.get(&Yaml::String("_target_".into())) {
            Some(Yaml::String(t)) => t.as_str(),
            _ => return Err(bad("skeleton has no _target_ class name")),
        },
        other => return Err(unknown(show(other))),
    };
    if name.rsplit('.').next() == Some("build_skeleton") {
        let joints = match v {
            Yaml::Hash(h) => h.get(&Yaml::String("nbjoints".into())),
            _ => None,
        };
        return match joints {
            Some(Yaml::Integer(j)) => [
                SkeletonKind::Soma30,
                SkeletonKind::G1,
                SkeletonKind::Smplx22,
                SkeletonKind::Soma77,
            ]
            .into_iter()
            .find(|s| s.num_joints() as i64 == *j)
            .ok_or_else(|| unknown(format!("{name} with nbjoints {j}"))),
            _ => Err(bad(format!("skeleton {name} needs an integer nbjoints"))),
        };
    }
    skeleton_from_name(name).ok_or_else(|| unknown(format!("{name:?}")))
}

impl Settings {
    pub(crate) fn read(path: &Path) -> Result<Settings> {
        Settings::parse(&yaml::read_capped(path, MAX_CONFIG_BYTES)?)
    }

    pub(crate) fn parse(text: &str) -> Result<Settings> {
        let Some(root) = yaml::load_mapping(text, "a Kimodo config")? else {
            return Ok(Settings::default());
        };
        let cfg = Lookup {
            root: &root,
            format: FORMAT,
        };

        let mut s = Settings::default();
        if let Some(v) = cfg.find("skeleton")? {
            s.skeleton = Some(skeleton_from_yaml(v)?);
        }
        s.num_heads = cfg.usize("num_heads")?;
        s.latent_dim = cfg.usize("latent_dim")?;
        s.ff_size = cfg.usize("ff_size")?;
        s.num_layers = cfg.usize("num_layers")?;
        s.num_base_steps = cfg.usize("num_base_steps")?;
        s.fps = cfg.f32("fps")?;
        s.input_first_heading_angle = cfg.bool("input_first_heading_angle")?;
        let llm_shape = match cfg.find("llm_shape")? {
            None => None,
            Some(Yaml::Array(a)) if a.len() == 2 => Some([
                as_usize(FORMAT, "llm_shape[0]", &a[0])?,
                as_usize(FORMAT, "llm_shape[1]", &a[1])?,
            ]),
            Some(other) => {
                return Err(bad(format!(
                    "llm_shape is {other:?}, expected [tokens, width]"
                )));
            }
        };
        s.llm_dim = llm_shape.map(|[_, w]| w);
        // `num_text_tokens = llm_shape[0]` unless the override is set
        // (`kimodo/model/backbone.py#L111-113`).
        s.num_text_tokens = match cfg.find("num_text_tokens_override")? {
            Some(Yaml::Null) | None => llm_shape.map(|[n, _]| n),
            Some(v) => Some(as_usize(FORMAT, "num_text_tokens_override", v)?),
        };
        s.cfg = match cfg.find("cfg_weight")? {
            None => None,
            Some(Yaml::Array(a)) if a.len() == 2 => Some([
                as_f32(FORMAT, "cfg_weight[0]", &a[0])?,
                as_f32(FORMAT, "cfg_weight[1]", &a[1])?,
            ]),
            Some(v) => {
                let w = as_f32(FORMAT, "cfg_weight", v)?;
                Some([w, w])
            }
        };

        // Settings kinema implements one way only: refuse a model built another way rather
        // than run it wrong.
        let refuse = |key: &str, v: &Yaml, why: &str| {
            Err(bad(format!("{key} = {} is not supported: {why}", show(v))))
        };
        if let Some(v) = cfg.find("motion_mask_mode")?
            && v.as_str() != Some("concat")
        {
            return refuse("motion_mask_mode", v, "kinema implements \"concat\"");
        }
        if let Some(v) = cfg.find("activation")?
            && v.as_str() != Some("gelu")
        {
            return refuse("activation", v, "kinema implements exact \"gelu\"");
        }
        if let Some(v) = cfg.find("norm_first")?
            && v.as_bool() != Some(false)
        {
            return refuse(
                "norm_first",
                v,
                "kinema implements post-norm layers (false)",
            );
        }
        if let Some(v) = cfg.find("use_text_mask")?
            && v.as_bool() != Some(false)
        {
            return refuse(
                "use_text_mask",
                v,
                "kinema attends to every text slot, as the released models (false)",
            );
        }
        if let Some(v) = cfg.find("cfg_type")?
            && !matches!(v, Yaml::Null)
            && v.as_str() != Some("separated")
        {
            return refuse("cfg_type", v, "kinema implements \"separated\" guidance");
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_nested_hydra_config() {
        let s = Settings::parse(
            "# a comment\n\
             _target_: kimodo.model.Kimodo\n\
             num_base_steps: 1000\n\
             denoiser:\n  _target_: kimodo.model.TwostageDenoiser\n  motion_mask_mode: concat\n\
             \x20 motion_rep:\n    _target_: kimodo.motion_rep.KimodoMotionRep\n    fps: 30\n\
             \x20   skeleton:\n      _target_: kimodo.skeleton.SOMASkeleton30\n\
             \x20 llm_shape: [1, 4096]\n  latent_dim: 1024\n  ff_size: 2048\n  num_layers: 16\n\
             \x20 num_heads: 8\n  activation: gelu\n  norm_first: false\n  use_text_mask: false\n\
             \x20 num_text_tokens_override: 50\n  input_first_heading_angle: true\n\
             \x20 root_model:\n    skeleton: ${denoiser.motion_rep.skeleton}\n\
             \x20   num_heads: ${denoiser.num_heads}\n",
        )
        .unwrap();
        assert_eq!(
            s,
            Settings {
                skeleton: Some(SkeletonKind::Soma30),
                num_heads: Some(8),
                latent_dim: Some(1024),
                ff_size: Some(2048),
                num_layers: Some(16),
                llm_dim: Some(4096),
                num_text_tokens: Some(50),
                fps: Some(30.0),
                num_base_steps: Some(1000),
                input_first_heading_angle: Some(true),
                cfg: None,
            }
        );
    }

    #[test]
    fn block_lists_null_override_and_cfg_weight() {
        let s = Settings::parse(
            "llm_shape:\n- 2\n- 16\nnum_text_tokens_override: null\ncfg_weight: [2.5, 1]\n\
             skeleton: g1\nfps: 29.5\n",
        )
        .unwrap();
        assert_eq!(s.num_text_tokens, Some(2));
        assert_eq!(s.llm_dim, Some(16));
        assert_eq!(s.cfg, Some([2.5, 1.0]));
        assert_eq!(s.skeleton, Some(SkeletonKind::G1));
        assert_eq!(s.fps, Some(29.5));
        assert_eq!(Settings::parse("").unwrap(), Settings::default());
        let factory = "skeleton:\n  _target_: kimodo.skeleton.registry.build_skeleton\n  \
                       nbjoints: 22\nstats_path: ${checkpoint_dir}/stats\n";
        assert_eq!(
            Settings::parse(factory).unwrap().skeleton,
            Some(SkeletonKind::Smplx22)
        );
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        let err = |text: &str| Settings::parse(text).unwrap_err().to_string();
        assert!(err("a: {x: 1}\nb: [").contains("yaml"));
        assert!(err("a: &x [1]\nb: *x\n").contains("aliases"));
        assert!(err("skeleton: {_target_: kimodo.skeleton.Foo}\n").contains("unknown skeleton"));
        assert!(
            err("skeleton: {_target_: kimodo.skeleton.registry.build_skeleton, nbjoints: 31}\n")
                .contains("nbjoints 31")
        );
        assert!(err("a: {num_heads: 8}\nb: {num_heads: 16}\n").contains("conflicting"));
        assert!(err("num_heads: eight\n").contains("positive integer"));
        assert!(err("num_heads: ${nowhere.at_all}\n").contains("cannot resolve"));
        assert!(err("a: ${b}\nb: ${a}\nnum_heads: ${a}\n").contains("nest deeper"));
        assert!(err("use_text_mask: true\n").contains("use_text_mask"));
        assert!(err("norm_first: true\n").contains("post-norm"));
        assert!(err("motion_mask_mode: add\n").contains("concat"));
        assert!(err("cfg_type: regular\n").contains("separated"));
        assert!(err("- 1\n- 2\n").contains("not a mapping"));
        assert!(err("fps: .nan\n").contains("finite"));
    }
}
