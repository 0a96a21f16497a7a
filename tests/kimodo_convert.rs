//! `kinema convert kimodo` and `KimodoModel::load`: round trips of small upstream-layout
//! checkpoints built here (values bit-exact in f32, round-to-nearest-even in f16/bf16), the
//! checkpoints captured from the real upstream modules (`tests/fixtures/kimodo/*/checkpoint`),
//! and every kind of bad input, each refused with an error that names the problem and
//! without leaving an output file behind.

use std::path::{Path, PathBuf};
use std::process::Command;

use half::{bf16, f16};
use kinema::formats::{GgufFile, GgufValue, GgufWriter, NpyArray, npy};
use kinema::models::kimodo::config::{keys, names};
use kinema::models::kimodo::convert::{
    CONVERTER_VERSION, Conversion, ConvertOptions, DEFAULT_NUM_HEADS, Progress, convert,
};
use kinema::models::kimodo::{KimodoModel, SkeletonKind};
use kinema::{DType, HostTensor};
use sha2::{Digest, Sha256};

const PREFIX: &str = "denoiser.backbone.";

/// One safetensors entry: name, dtype string, shape, little-endian bytes.
#[derive(Clone)]
struct Entry {
    name: String,
    dtype: &'static str,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

/// An upstream-layout checkpoint held in memory, written out by [`Ckpt::write`].
#[derive(Clone)]
struct Ckpt {
    tensors: Vec<Entry>,
    /// (path relative to the directory, array).
    stats: Vec<(String, NpyArray)>,
    config: Option<String>,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32_values(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Deterministic values in [-1, 1) with full 24-bit mantissas (so narrowing has to round).
fn values(seed: u64, n: usize) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let mut z = seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(i.wrapping_mul(0xBF58_476D_1CE4_E5B9));
            z ^= z >> 31;
            z = z.wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 29;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The upstream state_dict names and shapes, written out from `kimodo.md` section 3
/// independently of `KimodoConfig::tensor_shapes`, which the converter checks against.
fn upstream_shapes(
    motion_dim: usize,
    d: usize,
    f: usize,
    layers: usize,
    llm: usize,
) -> Vec<(String, Vec<usize>)> {
    let mut out = Vec::new();
    for (stage, inp, outp) in [
        ("root_model", 2 * motion_dim, 5),
        ("body_model", 2 * motion_dim - 1, motion_dim - 5),
    ] {
        let p = format!("{PREFIX}{stage}.");
        let fixed = [
            ("embed_text.weight", vec![d, llm]),
            ("embed_text.bias", vec![d]),
            ("embed_timestep.time_embed.0.weight", vec![d, d]),
            ("embed_timestep.time_embed.0.bias", vec![d]),
            ("embed_timestep.time_embed.2.weight", vec![d, d]),
            ("embed_timestep.time_embed.2.bias", vec![d]),
            ("input_linear.weight", vec![d, inp]),
            ("input_linear.bias", vec![d]),
            ("output_linear.weight", vec![outp, d]),
            ("output_linear.bias", vec![outp]),
            ("linear_first_heading_angle.weight", vec![d, 2]),
            ("linear_first_heading_angle.bias", vec![d]),
        ];
        for (n, s) in fixed {
            out.push((format!("{p}{n}"), s));
        }
        for l in 0..layers {
            let lp = format!("{p}seqTransEncoder.layers.{l}.");
            let per = [
                ("self_attn.in_proj_weight", vec![3 * d, d]),
                ("self_attn.in_proj_bias", vec![3 * d]),
                ("self_attn.out_proj.weight", vec![d, d]),
                ("self_attn.out_proj.bias", vec![d]),
                ("linear1.weight", vec![f, d]),
                ("linear1.bias", vec![f]),
                ("linear2.weight", vec![d, f]),
                ("linear2.bias", vec![d]),
                ("norm1.weight", vec![d]),
                ("norm1.bias", vec![d]),
                ("norm2.weight", vec![d]),
                ("norm2.bias", vec![d]),
            ];
            for (n, s) in per {
                out.push((format!("{lp}{n}"), s));
            }
        }
    }
    out
}

const D: usize = 16;
const F: usize = 24;
const LLM: usize = 12;
const HEADS: usize = 4;

fn config_yaml(joints: usize, layers: usize, heads: usize) -> String {
    format!(
        "_target_: kimodo.model.Kimodo\n\
         denoiser:\n\
         \x20 _target_: kimodo.model.TwostageDenoiser\n\
         \x20 motion_rep:\n\
         \x20   _target_: kimodo.motion_rep.KimodoMotionRep\n\
         \x20   skeleton:\n\
         \x20     _target_: kimodo.skeleton.registry.build_skeleton\n\
         \x20     nbjoints: {joints}\n\
         \x20   fps: 30\n\
         \x20   stats_path: ${{checkpoint_dir}}/stats/motion\n\
         \x20 motion_mask_mode: concat\n\
         \x20 llm_shape:\n\
         \x20 - 1\n\
         \x20 - {LLM}\n\
         \x20 use_text_mask: false\n\
         \x20 latent_dim: {D}\n\
         \x20 ff_size: {F}\n\
         \x20 num_layers: {layers}\n\
         \x20 num_heads: {heads}\n\
         \x20 activation: gelu\n\
         \x20 norm_first: false\n\
         \x20 num_text_tokens_override: 50\n\
         \x20 input_first_heading_angle: true\n\
         num_base_steps: 1000\n\
         cfg_type: separated\n"
    )
}

impl Ckpt {
    /// A small checkpoint for a motion width (D=16, F=24, llm 12), with a config.yaml when
    /// the width is a skeleton's.
    fn with_dim(motion_dim: usize, layers: usize) -> Ckpt {
        let tensors = upstream_shapes(motion_dim, D, F, layers, LLM)
            .into_iter()
            .enumerate()
            .map(|(k, (name, shape))| {
                let n: usize = shape.iter().product();
                let mut v = values(k as u64 + 1, n);
                // Values that test exactness and rounding: negative zero, a subnormal, and
                // ties that round to even in f16 (1 + 2^-11) and bf16 (1 + 2^-8).
                if n >= 8 {
                    v[0] = -0.0;
                    v[1] = 1e-40;
                    v[2] = 1.0 + 2f32.powi(-11);
                    v[3] = 1.0 + 2f32.powi(-8);
                }
                Entry {
                    name,
                    dtype: "F32",
                    shape,
                    bytes: f32_bytes(&v),
                }
            })
            .collect();
        let body = motion_dim - 5;
        let stat = |w: usize, base: f64| -> NpyArray {
            // Thirds are not f32-exact: the f64 -> f32 cast must round.
            let v: Vec<f64> = (0..w).map(|i| base + (i as f64 + 1.0) / 3.0).collect();
            NpyArray::from_f64(&[w], &v).unwrap()
        };
        let stats = vec![
            ("stats/motion/global_root/mean.npy".into(), stat(5, -1.0)),
            ("stats/motion/global_root/std.npy".into(), stat(5, 0.5)),
            ("stats/motion/local_root/mean.npy".into(), stat(4, -0.5)),
            ("stats/motion/local_root/std.npy".into(), stat(4, 0.25)),
            ("stats/motion/body/mean.npy".into(), stat(body, 0.0)),
            ("stats/motion/body/std.npy".into(), stat(body, 0.125)),
        ];
        let config = [
            SkeletonKind::Soma30,
            SkeletonKind::G1,
            SkeletonKind::Smplx22,
        ]
        .into_iter()
        .find(|s| s.motion_dim() == motion_dim)
        .map(|s| config_yaml(s.num_joints(), layers, HEADS));
        Ckpt {
            tensors,
            stats,
            config,
        }
    }

    fn new(skeleton: SkeletonKind, layers: usize) -> Ckpt {
        Ckpt::with_dim(skeleton.motion_dim(), layers)
    }

    fn entry(&mut self, short: &str) -> &mut Entry {
        let name = format!("{PREFIX}{short}");
        self.tensors
            .iter_mut()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
    }

    fn remove(&mut self, short: &str) {
        let name = format!("{PREFIX}{short}");
        self.tensors.retain(|e| e.name != name);
    }

    fn write(&self, dir: &Path) {
        write_safetensors(&dir.join("model.safetensors"), &self.tensors);
        for (rel, a) in &self.stats {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            npy::write_file(&p, a).unwrap();
        }
        if let Some(c) = &self.config {
            std::fs::write(dir.join("config.yaml"), c).unwrap();
        }
    }
}

/// A minimal safetensors writer (the crate has only a reader): JSON header padded with
/// spaces to 8 bytes, then the data in entry order.
fn write_safetensors(path: &Path, tensors: &[Entry]) {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for t in tensors {
        header.insert(
            t.name.clone(),
            serde_json::json!({
                "dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + t.bytes.len()]
            }),
        );
        offset += t.bytes.len();
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    for t in tensors {
        out.extend_from_slice(&t.bytes);
    }
    std::fs::write(path, out).unwrap();
}

struct Case {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    out: PathBuf,
}

fn case(ckpt: &Ckpt) -> Case {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    std::fs::create_dir(&dir).unwrap();
    ckpt.write(&dir);
    let out = tmp.path().join("model.gguf");
    Case {
        _tmp: tmp,
        dir,
        out,
    }
}

fn run(c: &Case, opts: &ConvertOptions) -> kinema::Result<Conversion> {
    convert(&c.dir, &c.out, opts, &mut |_: Progress| {})
}

/// Convert and expect an error containing every one of `needles`; the output must not exist.
fn refused(ckpt: &Ckpt, opts: &ConvertOptions, needles: &[&str]) -> String {
    let c = case(ckpt);
    let err = run(&c, opts)
        .expect_err("conversion should fail")
        .to_string();
    for n in needles {
        assert!(err.contains(n), "error {err:?} does not mention {n:?}");
    }
    assert!(!c.out.exists(), "a failed conversion left {:?}", c.out);
    let leftovers: Vec<_> = std::fs::read_dir(c.out.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "ckpt")
        .collect();
    assert!(leftovers.is_empty(), "files left behind: {leftovers:?}");
    err
}

fn sha256_hex(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn stat_f32(ckpt: &Ckpt, rel: &str) -> Vec<f32> {
    let a = &ckpt.stats.iter().find(|(r, _)| r == rel).unwrap().1;
    a.to_f64().unwrap().iter().map(|&x| x as f32).collect()
}

#[test]
fn round_trip_f32_with_config() {
    let ckpt = Ckpt::new(SkeletonKind::Soma30, 2);
    let c = case(&ckpt);
    let conv = run(&c, &ConvertOptions::default()).unwrap();
    assert!(conv.notes.is_empty(), "{:?}", conv.notes);
    assert_eq!(conv.tensors, 2 * (12 + 12 * 2) + 6);

    let m = KimodoModel::load(&c.out).unwrap();
    let cfg = &m.config;
    assert_eq!(cfg, &conv.config);
    assert_eq!(cfg.skeleton, SkeletonKind::Soma30);
    assert_eq!(
        (
            cfg.latent_dim,
            cfg.ff_size,
            cfg.num_layers,
            cfg.num_heads,
            cfg.llm_dim
        ),
        (D, F, 2, HEADS, LLM)
    );
    assert_eq!((cfg.motion_dim, cfg.num_text_tokens), (369, 50));
    assert_eq!((cfg.fps, cfg.num_base_steps), (30.0, 1000));
    assert!(cfg.input_first_heading_angle);
    assert_eq!((cfg.cfg_text, cfg.cfg_constraint), (2.0, 2.0));
    m.validate().unwrap();

    // Every weight bit-exact, borrowed from the map.
    assert_eq!(m.tensors.len(), ckpt.tensors.len() + 6);
    for e in &ckpt.tensors {
        let t = m.tensor(e.name.strip_prefix(PREFIX).unwrap()).unwrap();
        assert_eq!(t.dtype, DType::F32, "{}", e.name);
        assert_eq!(t.shape, e.shape, "{}", e.name);
        assert_eq!(t.bytes(), &e.bytes[..], "{}", e.name);
        assert!(t.data.is_mapped(), "{} was copied", e.name);
    }
    // Statistics: the float64 files cast to f32.
    assert_eq!(
        m.stats.global_mean.to_vec(),
        stat_f32(&ckpt, "stats/motion/global_root/mean.npy")
    );
    assert_eq!(
        m.stats.global_std.to_vec(),
        stat_f32(&ckpt, "stats/motion/global_root/std.npy")
    );
    assert_eq!(
        m.stats.local_mean.to_vec(),
        stat_f32(&ckpt, "stats/motion/local_root/mean.npy")
    );
    assert_eq!(
        m.stats.local_std.to_vec(),
        stat_f32(&ckpt, "stats/motion/local_root/std.npy")
    );
    assert_eq!(
        m.stats.body_mean,
        stat_f32(&ckpt, "stats/motion/body/mean.npy")
    );
    assert_eq!(
        m.stats.body_std,
        stat_f32(&ckpt, "stats/motion/body/std.npy")
    );
    assert_eq!(m.stats.body_mean.len(), 364);

    // Metadata: identity, provenance, and the tensors in the documented order.
    let g = GgufFile::open(&c.out).unwrap();
    assert_eq!(g.get_str(keys::ARCHITECTURE).unwrap(), "kimodo");
    assert_eq!(g.get_str(keys::SKELETON).unwrap(), "soma30");
    assert_eq!(
        g.get_str(keys::CONVERTER_VERSION).unwrap(),
        CONVERTER_VERSION
    );
    assert_eq!(g.get_array(keys::CONVERTER_NOTES).unwrap().len(), 0);
    let mut files = vec!["model.safetensors".to_string(), "config.yaml".to_string()];
    files.extend(ckpt.stats.iter().map(|(r, _)| r.clone()));
    for f in &files {
        let key = format!("{}{f}", keys::SOURCE_SHA256_PREFIX);
        assert_eq!(
            g.get_str(&key).unwrap(),
            sha256_hex(&c.dir.join(f)),
            "{key}"
        );
    }
    assert_eq!(conv.sources.len(), files.len());
    let order: Vec<&str> = g.tensors().iter().map(|t| t.name.as_str()).collect();
    let want: Vec<String> = cfg.tensor_shapes().into_iter().map(|(n, _)| n).collect();
    assert_eq!(order, want);
    // The contract's name list agrees with the upstream list written out in this file.
    let upstream: Vec<(String, Vec<usize>)> = upstream_shapes(369, D, F, 2, LLM)
        .into_iter()
        .map(|(n, s)| (n.strip_prefix(PREFIX).unwrap().to_string(), s))
        .collect();
    assert_eq!(cfg.tensor_shapes()[..upstream.len()], upstream[..]);
    assert_eq!(
        &cfg.tensor_shapes()[upstream.len()..],
        &[
            (names::STATS_GLOBAL_MEAN.to_string(), vec![5]),
            (names::STATS_GLOBAL_STD.to_string(), vec![5]),
            (names::STATS_LOCAL_MEAN.to_string(), vec![4]),
            (names::STATS_LOCAL_STD.to_string(), vec![4]),
            (names::STATS_BODY_MEAN.to_string(), vec![364]),
            (names::STATS_BODY_STD.to_string(), vec![364]),
        ]
    );

    let text = m.describe();
    assert!(
        text.contains("soma30") && text.contains("2 stages x 2 layers"),
        "{text}"
    );
    assert_eq!(m.parameter_count(), conv.parameters);
}

#[test]
fn f16_and_bf16_narrow_only_matrices_to_nearest_even() {
    let ckpt = Ckpt::new(SkeletonKind::G1, 1);
    for dtype in [DType::F16, DType::BF16] {
        let c = case(&ckpt);
        let opts = ConvertOptions {
            dtype,
            ..ConvertOptions::default()
        };
        run(&c, &opts).unwrap();
        let m = KimodoModel::load(&c.out).unwrap();
        m.validate().unwrap();
        for e in &ckpt.tensors {
            let t = m.tensor(e.name.strip_prefix(PREFIX).unwrap()).unwrap();
            let src = f32_values(&e.bytes);
            if e.shape.len() == 1 {
                assert_eq!(
                    (t.dtype, t.bytes()),
                    (DType::F32, &e.bytes[..]),
                    "{}",
                    e.name
                );
                continue;
            }
            assert_eq!(t.dtype, dtype, "{}", e.name);
            let got: Vec<u16> = t
                .bytes()
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            let want: Vec<u16> = src
                .iter()
                .map(|&x| match dtype {
                    DType::F16 => f16::from_f32(x).to_bits(),
                    _ => bf16::from_f32(x).to_bits(),
                })
                .collect();
            assert_eq!(got, want, "{}", e.name);
            if src.len() >= 8 {
                // -0.0 keeps its sign; the ties 1 + 2^-11 (f16) and 1 + 2^-8 (bf16) round
                // to the even neighbour 1.0.
                assert_eq!(got[0], 0x8000, "{}", e.name);
                match dtype {
                    DType::F16 => assert_eq!(got[2], 0x3C00, "{}", e.name),
                    _ => assert_eq!(got[3], 0x3F80, "{}", e.name),
                }
            }
        }
        assert_eq!(m.tensor(names::STATS_BODY_STD).unwrap().dtype, DType::F32);
    }
}

#[test]
fn without_config_the_skeleton_is_inferred_and_defaults_are_noted() {
    for skel in SkeletonKind::TRAINED {
        let mut ckpt = Ckpt::new(skel, 1);
        ckpt.config = None;
        let c = case(&ckpt);
        let conv = run(&c, &ConvertOptions::default()).unwrap();
        assert_eq!(conv.config.skeleton, skel);
        assert_eq!(conv.config.num_heads, DEFAULT_NUM_HEADS);
        assert_eq!(conv.config.num_text_tokens, 50);
        let joined = conv.notes.join("\n");
        for needle in [
            &format!("skeleton {} inferred from the motion dim", skel.name()),
            "num_heads = 8 assumed",
            "num_text_tokens = 50 assumed",
            "fps = 30 assumed",
            "num_base_steps = 1000 assumed",
        ] {
            assert!(joined.contains(needle), "{joined}");
        }
        let g = GgufFile::open(&c.out).unwrap();
        assert_eq!(
            g.get(keys::CONVERTER_NOTES),
            Some(&GgufValue::Array(kinema::formats::GgufArray::String(
                conv.notes.clone()
            )))
        );
        assert!(
            g.get(&format!("{}config.yaml", keys::SOURCE_SHA256_PREFIX))
                .is_none()
        );
        KimodoModel::load(&c.out).unwrap();
    }
}

#[test]
fn flags_override_the_config() {
    let ckpt = Ckpt::new(SkeletonKind::Soma30, 1);
    let c = case(&ckpt);
    let opts = ConvertOptions {
        num_heads: Some(2),
        skeleton: Some(SkeletonKind::Soma30),
        ..ConvertOptions::default()
    };
    assert_eq!(run(&c, &opts).unwrap().config.num_heads, 2);
    // A config naming another skeleton is overridden by the flag that matches the tensors.
    let mut g1_config = ckpt.clone();
    g1_config.config = Some(config_yaml(34, 1, HEADS));
    let c = case(&g1_config);
    assert_eq!(
        run(&c, &opts).unwrap().config.skeleton,
        SkeletonKind::Soma30
    );
    refused(
        &g1_config,
        &ConvertOptions::default(),
        &["skeleton g1 has motion dim 417", "369"],
    );
    refused(
        &ckpt,
        &ConvertOptions {
            skeleton: Some(SkeletonKind::Smplx22),
            ..ConvertOptions::default()
        },
        &["skeleton smplx22 has motion dim 273"],
    );
}

#[test]
fn refuses_missing_misshapen_extra_and_wrong_dtype_tensors() {
    let base = Ckpt::new(SkeletonKind::Soma30, 2);
    let opts = ConvertOptions::default();

    let mut k = base.clone();
    k.remove("body_model.seqTransEncoder.layers.1.norm2.bias");
    refused(
        &k,
        &opts,
        &[
            "model.safetensors",
            "missing tensor \"denoiser.backbone.body_model.seqTransEncoder.layers.1.norm2.bias\"",
        ],
    );

    let mut k = base.clone();
    let e = k.entry("root_model.seqTransEncoder.layers.1.linear1.weight");
    e.shape = vec![F / 2, 2 * D];
    refused(
        &k,
        &opts,
        &[
            "root_model.seqTransEncoder.layers.1.linear1.weight\" has shape [12, 32], expected [24, 16]",
        ],
    );

    let mut k = base.clone();
    k.tensors.push(Entry {
        name: format!("{PREFIX}root_model.extra.weight"),
        dtype: "F32",
        shape: vec![2],
        bytes: f32_bytes(&[1.0, 2.0]),
    });
    refused(
        &k,
        &opts,
        &["unexpected tensor \"denoiser.backbone.root_model.extra.weight\""],
    );

    let mut k = base.clone();
    k.tensors.push(Entry {
        name: "model.ema.weight".into(),
        dtype: "F32",
        shape: vec![1],
        bytes: f32_bytes(&[1.0]),
    });
    refused(&k, &opts, &["unexpected tensor \"model.ema.weight\""]);

    // A third body layer: both stages must have the same depth.
    let mut k = base.clone();
    let extra: Vec<Entry> = k
        .tensors
        .iter()
        .filter(|e| e.name.contains("body_model.seqTransEncoder.layers.1."))
        .map(|e| Entry {
            name: e.name.replace("layers.1.", "layers.2."),
            ..e.clone()
        })
        .collect();
    k.tensors.extend(extra);
    refused(
        &k,
        &opts,
        &["root_model has 2 encoder layers but body_model has 3"],
    );

    // Layers numbered 0 and 2.
    let mut k = Ckpt::new(SkeletonKind::Soma30, 1);
    for e in &mut k.tensors {
        e.name = e.name.replace("layers.0.", "layers.2.");
    }
    refused(&k, &opts, &["numbered [2], expected 0..1"]);

    let mut k = base.clone();
    let e = k.entry("body_model.output_linear.bias");
    e.dtype = "F64";
    e.shape = vec![e.shape[0] / 2];
    refused(
        &k,
        &opts,
        &["body_model.output_linear.bias\" has shape [182], expected [364]"],
    );
    let mut k = base.clone();
    let e = k.entry("body_model.output_linear.bias");
    e.dtype = "I32";
    refused(
        &k,
        &opts,
        &["body_model.output_linear.bias\" is I32, expected F32"],
    );

    // Two problems are both reported.
    let mut k = base.clone();
    k.remove("root_model.embed_text.bias");
    k.remove("body_model.embed_text.bias");
    refused(
        &k,
        &opts,
        &[
            "2 problems",
            "root_model.embed_text.bias",
            "body_model.embed_text.bias",
        ],
    );

    // A tensor the dimensions are read from.
    let mut k = base.clone();
    k.remove("root_model.embed_text.weight");
    refused(
        &k,
        &opts,
        &[
            "root_model.embed_text.weight",
            "needed to infer the model's dimensions",
        ],
    );
}

#[test]
fn refuses_non_finite_values() {
    let base = Ckpt::new(SkeletonKind::Smplx22, 1);
    let opts = ConvertOptions::default();
    for (bad, shown) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf")] {
        let mut k = base.clone();
        let e = k.entry("body_model.seqTransEncoder.layers.0.self_attn.in_proj_weight");
        e.bytes[40..44].copy_from_slice(&bad.to_le_bytes());
        refused(
            &k,
            &opts,
            &[
                "body_model.seqTransEncoder.layers.0.self_attn.in_proj_weight",
                &format!("non-finite value {shown} at flat index 10"),
            ],
        );
    }
    let mut k = base.clone();
    let mut v = k.stats[3].1.to_f64().unwrap();
    v[2] = f64::NAN;
    k.stats[3].1 = NpyArray::from_f64(&[4], &v).unwrap();
    refused(
        &k,
        &opts,
        &[
            "stats/motion/local_root/std.npy",
            "non-finite value NaN at index 2",
        ],
    );
    // Finite in f64 but beyond f32.
    let mut k = base.clone();
    let mut v = k.stats[4].1.to_f64().unwrap();
    v[0] = 1e300;
    k.stats[4].1 = NpyArray::from_f64(&[v.len()], &v).unwrap();
    refused(
        &k,
        &opts,
        &["stats/motion/body/mean.npy", "non-finite value inf"],
    );
}

#[test]
fn refuses_bad_statistics() {
    let base = Ckpt::new(SkeletonKind::G1, 1);
    let opts = ConvertOptions::default();
    let mut k = base.clone();
    k.stats[5].1 = NpyArray::from_f64(&[411], &vec![1.0; 411]).unwrap();
    refused(
        &k,
        &opts,
        &["stats/motion/body/std.npy", "shape [411]", "expected [412]"],
    );
    let mut k = base.clone();
    k.stats[0].1 = NpyArray::from_f64(&[1, 5], &[0.0; 5]).unwrap();
    refused(
        &k,
        &opts,
        &["stats/motion/global_root/mean.npy", "shape [1, 5]"],
    );
    let mut k = base.clone();
    k.stats[2].1 = NpyArray::from_i64(&[4], &[1, 2, 3, 4]).unwrap();
    refused(
        &k,
        &opts,
        &["stats/motion/local_root/mean.npy", "not a float type"],
    );
    // A missing file is an I/O error naming its path.
    let c = case(&base);
    std::fs::remove_file(c.dir.join("stats/motion/body/mean.npy")).unwrap();
    let err = run(&c, &opts).unwrap_err().to_string();
    assert!(err.contains("stats/motion/body/mean.npy"), "{err}");
    assert!(!c.out.exists());
}

#[test]
fn refuses_unknown_skeletons_and_bad_settings() {
    let opts = ConvertOptions::default();
    // Motion width 100 is no skeleton's.
    refused(
        &Ckpt::with_dim(100, 1),
        &opts,
        &[
            "unknown skeleton: motion dim 100",
            "soma30 (369)",
            "--skeleton",
        ],
    );
    let mut k = Ckpt::new(SkeletonKind::Soma30, 1);
    k.config =
        Some(config_yaml(30, 1, HEADS).replace("registry.build_skeleton", "MyRobotSkeleton"));
    refused(
        &k,
        &opts,
        &[
            "config.yaml",
            "unknown skeleton \"kimodo.skeleton.MyRobotSkeleton\"",
        ],
    );
    k.config = Some(config_yaml(31, 1, HEADS));
    refused(&k, &opts, &["config.yaml", "nbjoints 31"]);
    assert!(
        SkeletonKind::parse("soma31")
            .unwrap_err()
            .to_string()
            .contains("unknown skeleton")
    );

    // Heads must divide the width.
    let k = Ckpt::new(SkeletonKind::Soma30, 1);
    refused(
        &k,
        &ConvertOptions {
            num_heads: Some(5),
            ..ConvertOptions::default()
        },
        &["num_heads 5 does not divide latent_dim 16"],
    );
    // The config must agree with the tensors, and describe a model kinema runs.
    let mut k = Ckpt::new(SkeletonKind::Soma30, 1);
    k.config = Some(config_yaml(30, 3, HEADS));
    refused(
        &k,
        &opts,
        &["num_layers = 3 in config.yaml, but the tensors have 1"],
    );
    k.config =
        Some(config_yaml(30, 1, HEADS).replace("use_text_mask: false", "use_text_mask: true"));
    refused(
        &k,
        &opts,
        &["config.yaml", "use_text_mask = true is not supported"],
    );
    k.config = Some("denoiser: [unclosed\n".into());
    refused(&k, &opts, &["config.yaml", "yaml"]);
    // f16 cannot hold 1e5.
    let mut k = Ckpt::new(SkeletonKind::Soma30, 1);
    let e = k.entry("root_model.input_linear.weight");
    e.bytes[20..24].copy_from_slice(&1e5f32.to_le_bytes());
    let f16_opts = ConvertOptions {
        dtype: DType::F16,
        ..ConvertOptions::default()
    };
    refused(
        &k,
        &f16_opts,
        &[
            "root_model.input_linear.weight",
            "100000 at flat index 5 is beyond the f16 range",
        ],
    );
    // bf16 holds it.
    let c = case(&k);
    run(
        &c,
        &ConvertOptions {
            dtype: DType::BF16,
            ..ConvertOptions::default()
        },
    )
    .unwrap();
    refused(
        &k,
        &ConvertOptions {
            dtype: DType::Q8_0,
            ..ConvertOptions::default()
        },
        &["f32, f16 or bf16"],
    );
}

#[test]
fn refuses_corrupt_safetensors() {
    let base = Ckpt::new(SkeletonKind::Soma30, 1);
    let opts = ConvertOptions::default();
    let c = case(&base);
    let p = c.dir.join("model.safetensors");
    let full = std::fs::read(&p).unwrap();
    std::fs::write(&p, &full[..full.len() - 7]).unwrap();
    let err = run(&c, &opts).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("safetensors"),
        "{err}"
    );
    assert!(!c.out.exists());

    std::fs::write(&p, b"\x10\0\0\0\0\0\0\0{not json at all").unwrap();
    let err = run(&c, &opts).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("header"),
        "{err}"
    );
    std::fs::write(&p, b"").unwrap();
    let err = run(&c, &opts).unwrap_err().to_string();
    assert!(err.contains("truncated"), "{err}");
    std::fs::remove_file(&p).unwrap();
    let err = run(&c, &opts).unwrap_err().to_string();
    assert!(err.contains("model.safetensors"), "{err}");
    assert!(!c.out.exists());
}

#[test]
fn unwritable_outputs_and_no_partial_file() {
    let ckpt = Ckpt::new(SkeletonKind::Soma30, 1);
    let c = case(&ckpt);
    let opts = ConvertOptions::default();
    let missing = c.dir.join("no/such/dir/model.gguf");
    let err = convert(&c.dir, &missing, &opts, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("does not exist") && err.contains("no/such/dir"),
        "{err}"
    );
    let err = convert(&c.dir, &c.dir, &opts, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("is a directory"), "{err}");

    // An existing output survives a failed conversion untouched, and nothing is left beside it.
    std::fs::write(&c.out, b"previous model").unwrap();
    let mut bad = ckpt.clone();
    bad.remove("root_model.output_linear.bias");
    bad.write(&c.dir);
    assert!(run(&c, &opts).is_err());
    assert_eq!(std::fs::read(&c.out).unwrap(), b"previous model");
    let names: Vec<_> = std::fs::read_dir(c.out.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, ["ckpt", "model.gguf"]);
    // A good conversion replaces it, reporting progress up to the end.
    ckpt.write(&c.dir);
    let mut last_write = None;
    convert(&c.dir, &c.out, &opts, &mut |p| {
        if let Progress::Writing { done, total } = p {
            last_write = Some((done, total));
        }
    })
    .unwrap();
    let (done, total) = last_write.unwrap();
    assert_eq!(done, total);
    KimodoModel::load(&c.out).unwrap();
}

/// Copy a GGUF with edits to its metadata and tensors.
fn rewrite(
    src: &Path,
    dst: &Path,
    edit: impl FnOnce(&mut Vec<(String, GgufValue)>, &mut Vec<(String, HostTensor)>),
) {
    let g = GgufFile::open(src).unwrap();
    let mut meta: Vec<(String, GgufValue)> = g.metadata().to_vec();
    let mut tensors: Vec<(String, HostTensor)> = g
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), g.tensor(&t.name).unwrap()))
        .collect();
    edit(&mut meta, &mut tensors);
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.add_metadata(k, v).unwrap();
    }
    for (n, t) in &tensors {
        w.add_tensor(n.as_str(), t).unwrap();
    }
    w.write(dst).unwrap();
}

fn load_err(
    good: &Path,
    edit: impl FnOnce(&mut Vec<(String, GgufValue)>, &mut Vec<(String, HostTensor)>),
    needles: &[&str],
) {
    let dst = good.with_file_name("edited.gguf");
    rewrite(good, &dst, edit);
    let err = match KimodoModel::load(&dst) {
        Ok(_) => panic!("loading should fail ({needles:?})"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("edited.gguf"), "{err}");
    for n in needles {
        assert!(err.contains(n), "error {err:?} does not mention {n:?}");
    }
}

fn set(meta: &mut [(String, GgufValue)], key: &str, v: GgufValue) {
    meta.iter_mut().find(|(k, _)| k == key).unwrap().1 = v;
}

#[test]
fn loader_refuses_bad_files() {
    let ckpt = Ckpt::new(SkeletonKind::Soma30, 1);
    let c = case(&ckpt);
    run(&c, &ConvertOptions::default()).unwrap();
    let good = c.out.as_path();
    // An unchanged copy loads.
    rewrite(good, &good.with_file_name("copy.gguf"), |_, _| {});
    KimodoModel::load(good.with_file_name("copy.gguf")).unwrap();

    load_err(
        good,
        |m, _| m.retain(|(k, _)| k != keys::NUM_HEADS),
        &["metadata key \"kimodo.num_heads\" is missing"],
    );
    load_err(
        good,
        |m, _| set(m, keys::NUM_HEADS, GgufValue::String("eight".into())),
        &["invalid \"kimodo.num_heads\"", "string"],
    );
    load_err(
        good,
        |m, _| set(m, keys::ARCHITECTURE, GgufValue::String("llama".into())),
        &["\"llama\"", "not a Kimodo model"],
    );
    load_err(
        good,
        |m, _| set(m, keys::SKELETON, GgufValue::String("horse".into())),
        &["kimodo.skeleton", "unknown skeleton 'horse'"],
    );
    load_err(
        good,
        |m, _| set(m, keys::MOTION_DIM, GgufValue::U32(417)),
        &["motion_dim 417 does not match skeleton soma30"],
    );
    load_err(
        good,
        |m, _| set(m, keys::NUM_HEADS, GgufValue::U32(3)),
        &["num_heads 3 does not divide latent_dim 16"],
    );
    load_err(
        good,
        |m, _| set(m, keys::NUM_LAYERS, GgufValue::U32(1_000_000_000)),
        &["kimodo.num_layers = 1000000000 but the file has only 54 tensors"],
    );
    load_err(
        good,
        |m, _| set(m, keys::NUM_LAYERS, GgufValue::U32(2)),
        &["missing tensor \"root_model.seqTransEncoder.layers.1.linear1.weight\""],
    );
    load_err(
        good,
        |_, t| t.retain(|(n, _)| n != names::STATS_BODY_MEAN),
        &["missing tensor \"stats.body.mean\""],
    );
    load_err(
        good,
        |_, t| {
            t.push((
                "root_model.lora.weight".into(),
                HostTensor::from_f32(&[1], &[0.0]).unwrap(),
            ))
        },
        &["unexpected tensor \"root_model.lora.weight\""],
    );
    load_err(
        good,
        |_, t| {
            let e = t
                .iter_mut()
                .find(|(n, _)| n == "body_model.linear_first_heading_angle.weight")
                .unwrap();
            e.1 = HostTensor::from_f32(&[2, D], &[0.5; 2 * D]).unwrap();
        },
        &["body_model.linear_first_heading_angle.weight\" has shape [2, 16], expected [16, 2]"],
    );
    load_err(
        good,
        |_, t| {
            let e = t
                .iter_mut()
                .find(|(n, _)| n == "root_model.embed_text.weight")
                .unwrap();
            let mut v = e.1.to_f32_vec().unwrap();
            v[7] = f32::NAN;
            e.1 = HostTensor::from_f32(&e.1.shape.clone(), &v).unwrap();
        },
        &[
            "root_model.embed_text.weight",
            "non-finite value NaN at flat index 7",
        ],
    );
    load_err(
        good,
        |_, t| {
            let e = t
                .iter_mut()
                .find(|(n, _)| n == names::STATS_BODY_STD)
                .unwrap();
            let v: Vec<f16> =
                e.1.to_f32_vec()
                    .unwrap()
                    .iter()
                    .map(|&x| f16::from_f32(x))
                    .collect();
            e.1 = HostTensor::from_f16(&e.1.shape.clone(), &v).unwrap();
        },
        &["stats.body.std\" is f16, expected f32"],
    );
    load_err(
        good,
        |_, t| {
            let e = t
                .iter_mut()
                .find(|(n, _)| n == "root_model.embed_text.bias")
                .unwrap();
            let v: Vec<bf16> =
                e.1.to_f32_vec()
                    .unwrap()
                    .iter()
                    .map(|&x| bf16::from_f32(x))
                    .collect();
            e.1 = HostTensor::from_bf16(&e.1.shape.clone(), &v).unwrap();
        },
        &["root_model.embed_text.bias\" is bf16, expected f32"],
    );
    // Not a GGUF at all.
    let junk = good.with_file_name("junk.gguf");
    std::fs::write(&junk, b"GGUF but not really").unwrap();
    assert!(KimodoModel::load(&junk).is_err());
}

fn fixture_dir(skel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/kimodo/{skel}/checkpoint"))
}

/// The checkpoints `reference/capture_kimodo.py` wrote from the real upstream modules
/// (seeded random weights, D=64, F=96, 2 layers, 2 heads, llm 48) convert and load.
#[test]
fn upstream_fixture_checkpoints_convert_and_load() {
    for (name, skel) in [
        ("soma30", SkeletonKind::Soma30),
        ("g1", SkeletonKind::G1),
        ("smplx22", SkeletonKind::Smplx22),
    ] {
        let dir = fixture_dir(name);
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("m.gguf");
        let conv = convert(&dir, &out, &ConvertOptions::default(), &mut |_| {}).unwrap();
        assert!(conv.notes.is_empty(), "{name}: {:?}", conv.notes);
        let m = KimodoModel::load(&out).unwrap();
        let c = &m.config;
        assert_eq!(c.skeleton, skel, "{name}");
        assert_eq!(
            (
                c.latent_dim,
                c.ff_size,
                c.num_layers,
                c.num_heads,
                c.llm_dim
            ),
            (64, 96, 2, 2, 48),
            "{name}"
        );
        assert_eq!(c.motion_dim, skel.motion_dim(), "{name}");
        assert_eq!((c.num_text_tokens, c.prefix_len()), (50, 52), "{name}");
        assert_eq!((c.fps, c.num_base_steps), (30.0, 1000), "{name}");
        assert!(c.input_first_heading_angle, "{name}");
        assert_eq!(m.tensors.len(), 2 * (12 + 12 * 2) + 6, "{name}");
        // Every weight equals the safetensors bytes; stats equal the float64 files cast.
        let st = kinema::formats::SafeTensors::open(dir.join("model.safetensors")).unwrap();
        assert_eq!(st.tensors().len(), 72, "{name}");
        for info in st.tensors() {
            let short = info.name.strip_prefix(PREFIX).unwrap();
            assert_eq!(
                m.tensor(short).unwrap().bytes(),
                st.tensor_bytes(&info.name).unwrap(),
                "{name} {short}"
            );
        }
        let body: Vec<f32> = npy::read_file(dir.join("stats/motion/body/std.npy"))
            .unwrap()
            .to_f64()
            .unwrap()
            .iter()
            .map(|&x| x as f32)
            .collect();
        assert_eq!(m.stats.body_std, body, "{name}");
        let g = GgufFile::open(&out).unwrap();
        assert_eq!(
            g.get_str(&format!("{}model.safetensors", keys::SOURCE_SHA256_PREFIX))
                .unwrap(),
            sha256_hex(&dir.join("model.safetensors"))
        );
    }
}

#[test]
fn command_line() {
    let exe = env!("CARGO_BIN_EXE_kinema");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("soma.gguf");
    let r = Command::new(exe)
        .args(["convert", "kimodo", "--quiet", "--dtype", "f16"])
        .arg(fixture_dir("soma30"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(r.stdout.is_empty() && r.stderr.is_empty());
    let m = KimodoModel::load(&out).unwrap();
    assert_eq!(
        m.tensor("root_model.embed_text.weight").unwrap().dtype,
        DType::F16
    );

    // Without --quiet, a summary; the skeleton flag is checked against the tensors.
    let r = Command::new(exe)
        .args([
            "convert",
            "kimodo",
            "--skeleton",
            "soma30",
            "--num-heads",
            "4",
        ])
        .arg(fixture_dir("soma30"))
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains("wrote") && err.contains("4 heads"), "{err}");

    let bad_out = tmp.path().join("g1.gguf");
    for (args, needle) in [
        (vec!["--skeleton", "g1"], "skeleton g1 has motion dim 417"),
        (vec!["--skeleton", "horse"], "unknown skeleton 'horse'"),
        (vec!["--dtype", "q4"], "unknown --dtype \"q4\""),
        (
            vec!["--num-heads", "7"],
            "num_heads 7 does not divide latent_dim 64",
        ),
    ] {
        let r = Command::new(exe)
            .args(["convert", "kimodo"])
            .args(&args)
            .arg(fixture_dir("soma30"))
            .arg("-o")
            .arg(&bad_out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!bad_out.exists());
    }
}
