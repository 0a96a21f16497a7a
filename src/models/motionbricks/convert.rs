//! `kinema convert motionbricks`: the three upstream model folders to one GGUF file.
//!
//! Each folder is upstream's `out/motionbricks_{root,pose,vqvae}/version_1/` layout
//! (`config.yaml`, `stats/motion/{mean,std}.npy`) with `model.safetensors` = the Lightning
//! checkpoint's `state_dict`, same keys (`../shared/docs/upstream/motionbricks.md` section 5).
//! Widths, layer counts, the codebook size and the decoder depth come from the tensor shapes;
//! heads, token range, `down_t`, fps and the dilation growth from the YAML, which must also
//! name the one architecture kinema implements (ReLU convolutions without norms, no text
//! input, hard length embeddings, the global `root_without_hip_height` pose condition, the
//! local-rep VQVAE with the multi-head EMA quantizer, no last-layer cond fusion). Every tensor
//! is checked (present, expected shape, f32, finite, nothing unknown), the three statistics
//! folders must agree, and the training-only tensors are left out: the VQ encoder, the
//! codebook's EMA buffers (`cluster_size`, `embed_avg`, `initted`) and the pose backbone's
//! `initted` flag (which must be true). Each source file's SHA-256 is recorded. Nothing is
//! written unless every check passes, and the output is replaced atomically.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use yaml_rust2::Yaml;

use super::config::{ConvDecoderConfig, ConvShape, MotionBricksConfig, dims, keys, names};
use super::g1::G1Qpos;
use crate::formats::{FormatError, GgufWriter, SafeDType, SafeTensors};
use crate::models::kit::checks::MAX_LISTED;
use crate::models::kit::convert::{
    Progress, WeightTally, check_source_tensors_skipping, check_weight_dtype, read_float_npy,
    sha256_file, write_gguf,
};
use crate::models::kit::meta::invalid;
use crate::models::kit::output::OutputPlan;
use crate::models::kit::yaml::{Lookup, as_usize, load_mapping, read_capped};
use crate::{DType, Error, HostTensor, Result};

/// Recorded in every converted file; the trailing number changes with the file layout.
pub const CONVERTER_VERSION: &str = concat!(
    "kinema ",
    env!("CARGO_PKG_VERSION"),
    " motionbricks-convert 1"
);
/// Files of each model folder, relative to it.
pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const CONFIG_FILE: &str = "config.yaml";
pub const STATS_MEAN_FILE: &str = "stats/motion/mean.npy";
pub const STATS_STD_FILE: &str = "stats/motion/std.npy";
/// The Lightning prefix of the root and pose checkpoints' keys.
pub const BACKBONE_PREFIX: &str = "backbone_net.";
/// The VQVAE checkpoint's decoder keys (`motion_backbone/models/pose_model.py#L74-96`).
pub const VQ_DECODER_PREFIX: &str = "pose_net.decoder.";
/// The codebook `[heads, codes, dim]` in the VQVAE checkpoint.
pub const VQ_CODEBOOK_KEY: &str = "pose_net.quantizer.vq._codebook.embed";
/// Training-only parts of the VQVAE checkpoint.
pub const VQ_TRAINING_ONLY: [&str; 4] = [
    "pose_net.encoder.",
    "pose_net.quantizer.vq._codebook.cluster_size",
    "pose_net.quantizer.vq._codebook.embed_avg",
    "pose_net.quantizer.vq._codebook.initted",
];
const POSE_INITTED: &str = "backbone_net.initted";

const FORMAT: &str = "motionbricks checkpoint";
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// The files of each model folder, in the order their hashes are recorded.
const FOLDER_FILES: [&str; 4] = [WEIGHTS_FILE, CONFIG_FILE, STATS_MEAN_FILE, STATS_STD_FILE];

/// The three model folders and the robot description.
#[derive(Clone, Debug)]
pub struct Sources {
    pub root: PathBuf,
    pub pose: PathBuf,
    pub vqvae: PathBuf,
    /// Upstream's `assets/skeletons/g1/g1.xml`; `None` looks for it where upstream keeps it,
    /// `<root>/../../../assets/skeletons/g1/g1.xml`.
    pub g1_xml: Option<PathBuf>,
}

impl Sources {
    /// The robot description's path.
    pub fn g1_xml_path(&self) -> PathBuf {
        self.g1_xml
            .clone()
            .unwrap_or_else(|| self.root.join("../../../assets/skeletons/g1/g1.xml"))
    }
}

/// What a successful conversion wrote (sources: `root/model.safetensors` etc.).
pub type Conversion = crate::models::kit::convert::Conversion<MotionBricksConfig>;

fn bad(msg: impl Into<String>) -> Error {
    invalid(FORMAT, msg)
}

fn in_file<'a>(which: &'a str, file: &'a str) -> impl FnOnce(Error) -> Error + 'a {
    move |e| match e {
        Error::Io { .. } | Error::InvalidArgument(_) => e,
        Error::Format(FormatError::Invalid {
            format: FORMAT,
            msg,
        }) => bad(format!("{which}/{file}: {msg}")),
        other => bad(format!("{which}/{file}: {other}")),
    }
}

/// Convert the three folders into the GGUF file `out`, 2-D weights in `dtype` (f32, f16 or
/// bf16; everything else stays f32), without progress reports.
pub fn convert(src: &Sources, out: &Path, dtype: DType) -> Result<Conversion> {
    convert_with_progress(src, out, dtype, &mut |_| {})
}

/// [`convert`], reporting progress (tensor checks, hashing, writing) to `progress`. `out` is
/// checked first (see [`OutputPlan`]: it may not be one of the source files, nor anything but
/// a regular file) and replaced only when everything has succeeded.
pub fn convert_with_progress(
    src: &Sources,
    out: &Path,
    dtype: DType,
    progress: &mut dyn FnMut(Progress),
) -> Result<Conversion> {
    check_weight_dtype(dtype, &[DType::F32, DType::F16, DType::BF16])?;
    let folders = [
        ("root", &src.root),
        ("pose", &src.pose),
        ("vqvae", &src.vqvae),
    ];
    let xml_path = src.g1_xml_path();
    let mut plan = OutputPlan::new();
    for (which, dir) in folders {
        for file in FOLDER_FILES {
            plan.input(&dir.join(file), &format!("{which}/{file}"));
        }
    }
    plan.input(&xml_path, "--g1-xml");
    let mut outputs = plan.output(out, "--output").check()?;
    for (which, dir) in folders {
        if !dir.is_dir() {
            return Err(Error::io(
                dir,
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("not a MotionBricks {which} model folder"),
                ),
            ));
        }
    }
    let yaml: Vec<Yaml> = folders
        .iter()
        .map(|(which, dir)| {
            read_config(&dir.join(CONFIG_FILE)).map_err(in_file(which, CONFIG_FILE))
        })
        .collect::<Result<_>>()?;
    let st: Vec<SafeTensors> = folders
        .iter()
        .map(|(which, dir)| {
            SafeTensors::open(dir.join(WEIGHTS_FILE)).map_err(in_file(which, WEIGHTS_FILE))
        })
        .collect::<Result<_>>()?;
    let mut notes = Vec::new();
    let config = infer_config(&yaml, &st, &mut notes)?;

    // Every tensor, by checkpoint.
    let root_expected: Vec<(String, Vec<usize>)> = config
        .root_tensor_shapes()
        .into_iter()
        .map(|(n, s)| (format!("{BACKBONE_PREFIX}{n}"), s))
        .collect();
    let pose_expected: Vec<(String, Vec<usize>)> = config
        .pose_tensor_shapes()
        .into_iter()
        .map(|(n, s)| (format!("{BACKBONE_PREFIX}{n}"), s))
        .collect();
    let mut vq_expected: Vec<(String, Vec<usize>)> = config
        .decoder_tensor_shapes()
        .into_iter()
        .map(|(n, s)| (format!("{VQ_DECODER_PREFIX}{n}"), s))
        .collect();
    vq_expected.push((VQ_CODEBOOK_KEY.to_string(), config.codebook_shape()));
    for (i, (expected, skip)) in [
        (&root_expected, &[][..]),
        (&pose_expected, &[POSE_INITTED][..]),
        (&vq_expected, &VQ_TRAINING_ONLY[..]),
    ]
    .into_iter()
    .enumerate()
    {
        check_source_tensors_skipping(&st[i], "", expected, &[SafeDType::F32], skip, progress)
            .and_then(|r| r.map_err(bad))
            .map_err(in_file(folders[i].0, WEIGHTS_FILE))?;
    }
    check_initted(&st[1]).map_err(in_file("pose", WEIGHTS_FILE))?;
    notes.push(
        "left out as training-only: the VQ encoder, the codebook EMA buffers and the pose \
         backbone's initted flag"
            .to_string(),
    );

    // Statistics: identical in the three folders (upstream ships one file three times).
    let mut stats: Option<(Vec<f64>, Vec<f64>)> = None;
    for (which, dir) in folders {
        let m = read_stats(&dir.join(STATS_MEAN_FILE)).map_err(in_file(which, STATS_MEAN_FILE))?;
        let s = read_stats(&dir.join(STATS_STD_FILE)).map_err(in_file(which, STATS_STD_FILE))?;
        if let Some(i) = s.iter().position(|&x| x < 0.0) {
            return Err(in_file(which, STATS_STD_FILE)(bad(format!(
                "negative standard deviation {} at index {i}",
                s[i]
            ))));
        }
        match &stats {
            None => stats = Some((m, s)),
            Some((m0, s0)) => {
                if m0 != &m || s0 != &s {
                    return Err(bad(format!(
                        "{which}/stats/motion differs from root/stats/motion: the three models \
                         must share one motion representation"
                    )));
                }
            }
        }
    }
    let (mean, std) = stats.ok_or_else(|| bad("no statistics"))?;

    // The G1 qpos constants (`helper/mujoco_helper.py#L161-262`).
    let xml_len = std::fs::metadata(&xml_path)
        .map_err(|e| {
            Error::io(
                &xml_path,
                io::Error::new(
                    e.kind(),
                    format!("{e} (the G1 description g1.xml; pass --g1-xml)"),
                ),
            )
        })?
        .len();
    if xml_len > MAX_CONFIG_BYTES {
        return Err(bad(format!(
            "{}: {xml_len} bytes is not a robot description",
            xml_path.display()
        )));
    }
    let xml = std::fs::read_to_string(&xml_path).map_err(|e| Error::io(&xml_path, e))?;
    let g1 = G1Qpos::from_xml(&xml)?;

    let mut sources = Vec::new();
    for (which, dir) in folders {
        for file in FOLDER_FILES {
            let label = format!("{which}/{file}");
            let hash = sha256_file(&dir.join(file), &label, progress)?;
            sources.push((label, hash));
        }
    }
    sources.push((
        "g1.xml".to_string(),
        sha256_file(&xml_path, "g1.xml", progress)?,
    ));

    let mut w = GgufWriter::new();
    config.write_metadata(&mut w)?;
    keys::PROVENANCE.add_to(&mut w, CONVERTER_VERSION, &notes, &sources)?;
    let mut weights = WeightTally::default();
    let mut add =
        |w: &mut GgufWriter, name: String, t: HostTensor| weights.add(w, FORMAT, &name, t, dtype);
    for (key, _) in &root_expected {
        let n = format!("{}{}", names::ROOT, &key[BACKBONE_PREFIX.len()..]);
        add(&mut w, n, st[0].tensor(key)?)?;
    }
    for (key, _) in &pose_expected {
        let n = format!("{}{}", names::POSE, &key[BACKBONE_PREFIX.len()..]);
        add(&mut w, n, st[1].tensor(key)?)?;
    }
    for (key, _) in &vq_expected {
        let n = match key.strip_prefix(VQ_DECODER_PREFIX) {
            Some(rest) => format!("{}{rest}", names::VQ_DECODER),
            None => names::VQ_CODEBOOK.to_string(),
        };
        add(&mut w, n, st[2].tensor(key)?)?;
    }
    let mut tensors = weights.tensors;
    // Cast to f32 first, as upstream does before any arithmetic
    // (`motion_backbone/inference/motion_inference.py#L96-99`).
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    for (n, v) in [(names::STATS_MEAN, &mean), (names::STATS_STD, &std)] {
        let v = to32(v);
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(bad(format!("{n}[{i}] is beyond the f32 range")));
        }
        w.add_tensor(n, &HostTensor::from_f32(&[dims::STATS], &v)?)?;
        tensors += 1;
    }
    let (joints, offsets) = g1.to_values();
    w.add_tensor(
        names::G1_JOINTS,
        &HostTensor::from_i32(&[super::g1::HINGES, 2], &joints)?,
    )?;
    w.add_tensor(
        names::G1_OFFSETS,
        &HostTensor::from_f32(&[super::g1::BONES.len(), 3, 3], &offsets)?,
    )?;
    tensors += 2;
    // The small tables after the weights are left out of the byte count: the progress
    // report ends at the total either way.
    outputs.write(out, |sink| {
        write_gguf(&w, sink, weights.data_bytes, progress)
    })?;
    outputs.commit()?;
    Ok(Conversion {
        config,
        notes,
        tensors,
        parameters: weights.parameters,
        sources,
    })
}

/// The pose backbone's `initted` flag must be set: upstream refuses to run otherwise
/// (`motion_backbone/inference/motion_inference.py#L40-41`).
fn check_initted(st: &SafeTensors) -> Result<()> {
    let Some(info) = st.info(POSE_INITTED) else {
        return Ok(());
    };
    let b = st.tensor_bytes(POSE_INITTED)?;
    if info.dtype != SafeDType::BOOL || b.is_empty() || b.contains(&0) {
        return Err(bad(format!(
            "{POSE_INITTED:?} is not true: the pose backbone's token embeddings were never \
             initialised from the codebook"
        )));
    }
    Ok(())
}

fn read_stats(path: &Path) -> Result<Vec<f64>> {
    let a = read_float_npy(path, FORMAT)?;
    if a.shape != [dims::STATS] {
        return Err(bad(format!(
            "shape {:?}, expected [{}] (the dual G1 representation)",
            a.shape,
            dims::STATS
        )));
    }
    let v = a.to_f64()?;
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(bad(format!("non-finite value {} at index {i}", v[i])));
    }
    Ok(v)
}

/// One config file: size-capped, aliases refused, one mapping.
fn read_config(path: &Path) -> Result<Yaml> {
    let text = read_capped(path, MAX_CONFIG_BYTES)?;
    load_mapping(&text, "a MotionBricks config")?
        .ok_or_else(|| bad("the config is empty; expected a mapping"))
}

/// Values by dotted path, with OmegaConf's absolute interpolations `${a.b}` followed; errors
/// name the folder's config file.
struct Conf<'a> {
    which: &'static str,
    look: Lookup<'a>,
}

impl<'a> Conf<'a> {
    fn new(which: &'static str, root: &'a Yaml) -> Conf<'a> {
        Conf {
            which,
            look: Lookup {
                root,
                format: FORMAT,
            },
        }
    }

    fn get(&self, path: &str) -> Result<&'a Yaml> {
        self.look
            .at(path)
            .map_err(in_file(self.which, CONFIG_FILE))?
            .ok_or_else(|| bad(format!("{}/{CONFIG_FILE}: no {path}", self.which)))
    }

    fn usize(&self, path: &str) -> Result<usize> {
        as_usize(FORMAT, path, self.get(path)?).map_err(in_file(self.which, CONFIG_FILE))
    }

    fn f64(&self, path: &str) -> Result<f64> {
        let v = self.get(path)?;
        match v {
            Yaml::Integer(i) => Ok(*i as f64),
            Yaml::Real(_) => v.as_f64().ok_or_else(|| bad(format!("{path}: bad number"))),
            _ => Err(bad(format!(
                "{}/{CONFIG_FILE}: {path} is {v:?}, expected a number",
                self.which
            ))),
        }
    }

    /// A setting that must have one value: kinema implements that architecture only.
    fn require(&self, path: &str, want: &Yaml, why: &str) -> Result<()> {
        let v = self.get(path)?;
        if v != want {
            return Err(bad(format!(
                "{}/{CONFIG_FILE}: {path} = {v:?} is not supported: {why}",
                self.which
            )));
        }
        Ok(())
    }
}

fn s(v: &str) -> Yaml {
    Yaml::String(v.into())
}

/// A stack's layer count, from the `<prefix>layers.<i>.` names (numbered 0..n).
fn count_indexed(st: &SafeTensors, prefix: &str) -> Result<usize> {
    let mut seen = BTreeSet::new();
    for info in st.tensors() {
        if let Some(rest) = info.name.strip_prefix(prefix)
            && let Some(i) = rest.split('.').next().and_then(|s| s.parse::<usize>().ok())
        {
            seen.insert(i);
        }
    }
    let n = seen.len();
    if n == 0 || seen.last() != Some(&(n - 1)) {
        return Err(bad(format!(
            "the tensors {prefix}<i>.… are numbered {:?}, expected 0..n with n >= 1",
            seen.iter().take(MAX_LISTED).collect::<Vec<_>>()
        )));
    }
    Ok(n)
}

fn shape<'a>(st: &'a SafeTensors, which: &str, key: &str, rank: usize) -> Result<&'a [usize]> {
    let info = st.info(key).ok_or_else(|| {
        bad(format!(
            "{which}/{WEIGHTS_FILE}: missing tensor {key:?} (needed to infer the dimensions)"
        ))
    })?;
    if info.shape.len() != rank {
        return Err(bad(format!(
            "{which}/{WEIGHTS_FILE}: tensor {key:?} has shape {:?}, expected rank {rank}",
            info.shape
        )));
    }
    Ok(&info.shape)
}

fn infer_config(
    yaml: &[Yaml],
    st: &[SafeTensors],
    notes: &mut Vec<String>,
) -> Result<MotionBricksConfig> {
    let root_c = Conf::new("root", &yaml[0]);
    let pose_c = Conf::new("pose", &yaml[1]);
    let vq_c = Conf::new("vqvae", &yaml[2]);
    let (rs, ps, vs) = (&st[0], &st[1], &st[2]);

    // The architecture kinema implements.
    let g1 = s("motionbricks.motionlib.core.skeletons.g1.G1Skeleton34");
    let rep =
        s("motionbricks.motionlib.core.motion_reps.dual_root_global_joints.GlobalRootGlobalJoints");
    for c in [&root_c, &pose_c, &vq_c] {
        c.require(
            "skeleton._target_",
            &g1,
            "kinema implements the G1 34-joint skeleton",
        )?;
        c.require(
            "motion_rep._target_",
            &rep,
            "kinema implements GlobalRootGlobalJoints",
        )?;
    }
    root_c.require(
        "model.backbone_network._target_",
        &s("motionbricks.motion_backbone.neural_modules.root_backbone.root_backbone_network"),
        "this is not a MotionBricks root model",
    )?;
    pose_c.require(
        "model.backbone_network._target_",
        &s("motionbricks.motion_backbone.neural_modules.pose_backbone.pose_backbone_network"),
        "this is not a MotionBricks pose model",
    )?;
    vq_c.require(
        "model.pose_vqvae_network._target_",
        &s("motionbricks.vqvae.neural_modules.vqvae.VQVAE"),
        "this is not a MotionBricks VQVAE",
    )?;
    for c in [&root_c, &pose_c] {
        c.require(
            "model.backbone_network.args.text_embeddings",
            &Yaml::Null,
            "kinema has no text input (the released models have none)",
        )?;
        c.require(
            "model.backbone_network.args.local_pose_feature",
            &s("joint_positions_and_rotations_and_hip_height"),
            "the pose feature must be the 304-wide one",
        )?;
    }
    let bt = Yaml::Boolean(true);
    root_c.require(
        "model.backbone_network.args.use_hard_num_token_emb_for_root_prediction",
        &bt,
        "kinema implements the hard length embedding",
    )?;
    for k in ["local_root_feature", "global_root_feature"] {
        root_c.require(
            &format!("model.backbone_network.args.{k}"),
            &s("root"),
            "the root model reads the full root features",
        )?;
    }
    pose_c.require(
        "model.backbone_network.args.cond_root_feature",
        &s("root_without_hip_height"),
        "kinema implements the released pose condition",
    )?;
    pose_c.require(
        "model.backbone_network.args.cond_root_feature_is_from_motion_rep",
        &s("global"),
        "kinema implements the released pose condition",
    )?;
    pose_c.require(
        "model.pose_vqvae_motion_rep",
        &s("local"),
        "kinema implements the local-rep VQ decoder",
    )?;
    let conv_checks = |c: &Conf, base: &str| -> Result<()> {
        c.require(
            &format!("{base}.activation"),
            &s("relu"),
            "kinema implements ReLU convolutions",
        )?;
        let norm = c.get(&format!("{base}.norm"))?;
        if !(norm == &Yaml::Null || norm == &s("None")) {
            return Err(bad(format!(
                "{}/{CONFIG_FILE}: {base}.norm = {norm:?} is not supported: kinema implements \
                 the convolutions without norms",
                c.which
            )));
        }
        Ok(())
    };
    conv_checks(&root_c, "model.backbone_network.args")?;
    conv_checks(&vq_c, "model.pose_vqvae_network")?;
    vq_c.require(
        "model.pose_vqvae_network.quantizer_strategy",
        &s("multihead_ema_reset"),
        "kinema implements the multi-head codebook",
    )?;
    vq_c.require(
        "model.pose_vqvae_network.cond_fusion_last_layer",
        &Yaml::Boolean(false),
        "kinema implements the decoder without last-layer fusion",
    )?;
    vq_c.require(
        "model.pose_vqvae_network.feature_mode",
        &Yaml::Array(vec![
            s("joint_positions_and_rotations_and_hip_height"),
            s("pose"),
            s("joint_positions_and_rotations_and_hip_height"),
            s("root_without_hip_height_without_heading"),
        ]),
        "kinema implements the released decoder inputs",
    )?;

    // Token range, down_t and fps: one value across the three configs.
    let same = |path: &str| -> Result<usize> {
        let v = root_c.usize(path)?;
        for c in [&pose_c, &vq_c] {
            let w = c.usize(path)?;
            if w != v {
                return Err(bad(format!(
                    "{path} is {v} in root/{CONFIG_FILE} but {w} in {}/{CONFIG_FILE}",
                    c.which
                )));
            }
        }
        Ok(v)
    };
    let min_tokens = same("model.args.min_tokens")?;
    let max_tokens = same("model.args.max_tokens")?;
    let down_t = same("model.args.down_t")?;
    let fps = root_c.f64("fps")?;
    for c in [&pose_c, &vq_c] {
        if c.f64("fps")? != fps {
            return Err(bad(format!("fps differs between root and {}", c.which)));
        }
    }
    if vq_c.usize("model.pose_vqvae_network.down_t")? != down_t {
        return Err(bad("the VQVAE's down_t differs from model.args.down_t"));
    }

    // Root: widths from shapes.
    let p = |k: &str| format!("{BACKBONE_PREFIX}{k}");
    let pos = shape(rs, "root", &p("_input_position_emb.weight"), 2)?;
    let root_n_embd = pos[1];
    let fpt_in = pos[0] / 2;
    let root_ff = shape(
        rs,
        "root",
        &p("_shared_transformer_model.layers.0.linear1.weight"),
        2,
    )?[0];
    let root_layers_shared = count_indexed(rs, &p("_shared_transformer_model.layers."))?;
    let root_layers_token = count_indexed(rs, &p("_root_token_transformer_model.layers."))?;
    let root_pose_feat = shape(rs, "root", &p("_proj_local_pose.weight"), 2)?[0];
    let root_local_feat = shape(rs, "root", &p("_proj_local_root_value.weight"), 2)?[0];
    let root_global_feat = shape(rs, "root", &p("_proj_global_root_value.weight"), 2)?[0];
    let root_mlp_layers = count_indexed(rs, &p("_proj_start_input.fc_layers."))?;
    let rc_width = shape(rs, "root", &p("_conv_output.model.0.weight"), 3)?[0];
    let rc_depth = count_indexed(rs, &p("_conv_output.model.2.0.model."))?;
    let root_mlp_yaml = root_c.usize("model.backbone_network.args.input_feat_mlp_num_layers")?;
    if root_mlp_yaml != root_mlp_layers {
        return Err(bad(format!(
            "root: input_feat_mlp_num_layers is {root_mlp_yaml} but the checkpoint has \
             {root_mlp_layers} layers"
        )));
    }

    // Pose.
    let pose_in = shape(ps, "pose", &p("_proj_input.0.weight"), 2)?;
    let pose_n_embd = pose_in[0];
    let pose_ff = shape(
        ps,
        "pose",
        &p("_transformer_model.layers.0.linear1.weight"),
        2,
    )?[0];
    let pose_layers = count_indexed(ps, &p("_transformer_model.layers."))?;
    let pose_root_width = shape(ps, "pose", &p("_proj_local_root_values.weight"), 2)?[0];
    let pose_length_width = shape(ps, "pose", &p("_proj_num_valid_positions.weight"), 2)?[1];
    let pose_feat_width = shape(
        ps,
        "pose",
        &p("_proj_pose_token_emb.forward_projection.weight"),
        2,
    )?[0];
    let pose_mlp_layers = count_indexed(ps, &p("_proj_pose_token_emb.fc_layers."))?;

    // Codebook and VQ decoder.
    let cb = shape(vs, "vqvae", VQ_CODEBOOK_KEY, 3)?;
    let (code_heads, codes, code_dim) = (cb[0], cb[1], cb[2]);
    let vq_width = shape(
        vs,
        "vqvae",
        &format!("{VQ_DECODER_PREFIX}model.0.weight"),
        3,
    )?[0];
    let vq_depth = count_indexed(vs, &format!("{VQ_DECODER_PREFIX}model.2.0.model."))?;
    let nb_code = vq_c.f64("model.pose_vqvae_network.nb_code")?;
    let heads_yaml = vq_c.usize("model.pose_vqvae_network.num_heads")?;
    if heads_yaml != code_heads || (codes as f64).powi(code_heads as i32) != nb_code {
        return Err(bad(format!(
            "the codebook is {code_heads} heads x {codes} codes, but vqvae/{CONFIG_FILE} says \
             num_heads {heads_yaml} and nb_code {nb_code}"
        )));
    }
    for (c, base) in [
        (&pose_c, "model.pose_vqvae_network"),
        (&vq_c, "model.pose_vqvae_network"),
    ] {
        if c.usize(&format!("{base}.code_dim"))? != code_heads * code_dim {
            return Err(bad(format!(
                "{}: code_dim does not match the codebook ({code_heads} x {code_dim})",
                c.which
            )));
        }
    }

    let config = MotionBricksConfig {
        min_tokens,
        max_tokens,
        down_t,
        fps: fps as f32,
        root_n_embd,
        root_n_head: root_c.usize("model.backbone_network.args.n_head")?,
        root_ff,
        root_layers_shared,
        root_layers_token,
        root_pose_feat,
        root_local_feat,
        root_global_feat,
        root_mlp_layers,
        root_conv: ConvDecoderConfig::root_head(
            root_n_embd,
            ConvShape {
                width: rc_width,
                depth: rc_depth,
                dilation_growth_rate: root_c
                    .usize("model.backbone_network.args.dilation_growth_rate")?,
                down_t,
            },
        ),
        pose_n_embd,
        pose_n_head: pose_c.usize("model.backbone_network.args.n_head")?,
        pose_ff,
        pose_layers,
        pose_feat_width,
        pose_root_width,
        pose_length_width,
        pose_mlp_layers,
        code_heads,
        codes,
        code_dim,
        decoder: ConvDecoderConfig::vq_decoder(
            code_heads * code_dim,
            ConvShape {
                width: vq_width,
                depth: vq_depth,
                dilation_growth_rate: vq_c
                    .usize("model.pose_vqvae_network.dilation_growth_rate")?,
                down_t,
            },
        ),
    };
    config.validate()?;
    if fpt_in != config.frames_per_token() {
        return Err(bad(format!(
            "root: _input_position_emb has {} rows, expected 2 x 2^down_t = {}",
            2 * fpt_in,
            2 * config.frames_per_token()
        )));
    }
    // The YAML's stale `*_state_dim` / `*_cond_dim` entries (`motionbricks.md` section 0,
    // correction 2) are not read: upstream recomputes them too (`vqvae/neural_modules/
    // vqvae.py#L73-81`).
    notes.push(
        "widths from the tensor shapes; heads, token range, down_t, fps and the dilation \
         growth from config.yaml (its stale *_state_dim / *_cond_dim entries are not used)"
            .to_string(),
    );
    Ok(config)
}
