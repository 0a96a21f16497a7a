//! The MotionBricks fixtures (`tests/fixtures/motionbricks/`, captured by
//! `reference/capture_motionbricks.py`) and the reduced model in upstream's layout rebuilt
//! from them: the three `config.yaml` (the released ones from `../shared/data/upstream/` with
//! the reduced widths), the statistics and `g1.xml` from there too, and
//! `model.safetensors` regenerated from `state_dict.json` with the weight formula of
//! `kinema::models::motionbricks::synthetic` (the script's `weight_value`). Include with
//! `#[path = "common/motionbricks_fixture.rs"] mod motionbricks_fixture;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kinema::formats::NpzReader;
use kinema::models::motionbricks::synthetic::tensor_values;
use safetensors::tensor::{Dtype, TensorView};

pub const MODELS: [&str; 3] = ["root", "pose", "vqvae"];
pub const CASES: [&str; 3] = ["argmax", "gumbel_seed", "gumbel_torch"];

pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/motionbricks")
}

pub fn case(name: &str) -> NpzReader {
    let p = dir().join(format!("{name}.npz"));
    NpzReader::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub fn meta() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("meta.json")).unwrap()).unwrap()
}

/// One safetensors entry: name, dtype, shape, little-endian bytes.
pub type Entry = (String, Dtype, Vec<usize>, Vec<u8>);

/// The `model.safetensors` bytes of one model, from the key list and the weight formula.
pub fn safetensors_bytes(model: &str) -> Vec<u8> {
    serialize(&entries(model))
}

pub fn serialize(data: &[Entry]) -> Vec<u8> {
    let views: Vec<(&str, TensorView)> = data
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// The state_dict of one model: every key of `state_dict.json`, values from the formula.
pub fn entries(model: &str) -> Vec<Entry> {
    let keys: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("state_dict.json")).unwrap())
            .unwrap();
    let entries = keys[model]
        .as_array()
        .expect("state_dict.json lists the model");
    entries
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            let shape: Vec<usize> = e["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let n: usize = shape.iter().product();
            match e["dtype"].as_str().unwrap() {
                "bool" => (name, Dtype::BOOL, shape, vec![1u8; n]),
                "float32" => {
                    let v = tensor_values(&name, &shape);
                    let b = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    (name, Dtype::F32, shape, b)
                }
                d => panic!("{name}: dtype {d}"),
            }
        })
        .collect()
}

/// Released value -> reduced value of each overridden line, per model (the capture
/// script's `ROOT_ARGS`, `POSE_ARGS`, `VQVAE_ARGS`; checked against `meta.json`).
/// One overridden line: key, released value, reduced value.
type Override = (&'static str, &'static str, &'static str);

const OVERRIDES: [(&str, &[Override]); 3] = [
    (
        "root",
        &[
            ("n_embd", "512", "64"),
            ("n_head", "16", "2"),
            ("n_layers_shared", "3", "2"),
            ("n_layers_root_token", "3", "2"),
            ("pose_feat_dim", "256", "32"),
            ("local_root_feat_dim", "64", "16"),
            ("global_root_feat_dim", "64", "16"),
            ("width", "512", "64"),
        ],
    ),
    (
        "pose",
        &[
            ("n_embd", "1024", "128"),
            ("n_head", "16", "2"),
            ("n_layers", "16", "2"),
            ("root_feat_width", "256", "32"),
            ("pose_feat_width", "640", "64"),
            ("token_length_feat_width", "128", "16"),
            ("code_dim", "256", "64"),
            ("output_emb_width", "256", "64"),
            ("width", "512", "64"),
        ],
    ),
    (
        "vqvae",
        &[
            ("code_dim", "256", "64"),
            ("output_emb_width", "256", "64"),
            ("width", "512", "64"),
        ],
    ),
];

/// The reduced `config.yaml` of `model`: the released one with the overridden lines
/// replaced (each must occur exactly once).
pub fn reduced_config(upstream_out: &Path, model: &str) -> String {
    let text = std::fs::read_to_string(
        upstream_out.join(format!("motionbricks_{model}/version_1/config.yaml")),
    )
    .unwrap();
    let meta = meta();
    let (_, table) = OVERRIDES.iter().find(|(m, _)| *m == model).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for (key, old, new) in table.iter() {
        let section = if model == "vqvae"
            || (model == "pose" && ["code_dim", "output_emb_width", "width"].contains(key))
        {
            "vqvae"
        } else {
            model
        };
        assert_eq!(
            meta["reduced_widths"][section][key]
                .as_u64()
                .map(|v| v.to_string()),
            Some(new.to_string()),
            "{model}: {key}"
        );
        let want = format!("{key}: {old}");
        let hits: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].trim_start() == want)
            .collect();
        assert_eq!(
            hits.len(),
            1,
            "{model}: {want:?} occurs {} times",
            hits.len()
        );
        let l = &mut lines[hits[0]];
        *l = l.replacen(&want, &format!("{key}: {new}"), 1);
    }
    lines.join("\n") + "\n"
}

/// Write the reduced model in upstream's layout under `root`:
/// `out/motionbricks_<model>/version_1/{config.yaml, stats/motion/{mean,std}.npy,
/// model.safetensors}` and `assets/skeletons/g1/g1.xml`; returns the three folders (root, pose, vqvae). `stats` is the
/// upstream folder `motionbricks/out` beside the checkout.
pub fn write_layout(root: &Path, upstream_out: &Path) -> [PathBuf; 3] {
    // The robot description where upstream keeps it, beside `out/`.
    let assets = root.join("assets/skeletons/g1");
    std::fs::create_dir_all(&assets).unwrap();
    std::fs::copy(
        upstream_out.join("../assets/skeletons/g1/g1.xml"),
        assets.join("g1.xml"),
    )
    .unwrap();
    MODELS.map(|m| {
        let d = root.join(format!("out/motionbricks_{m}/version_1"));
        std::fs::create_dir_all(d.join("stats/motion")).unwrap();
        std::fs::write(d.join("config.yaml"), reduced_config(upstream_out, m)).unwrap();
        for s in ["mean", "std"] {
            std::fs::copy(
                upstream_out.join(format!("motionbricks_{m}/version_1/stats/motion/{s}.npy")),
                d.join(format!("stats/motion/{s}.npy")),
            )
            .unwrap();
        }
        std::fs::write(d.join("model.safetensors"), safetensors_bytes(m)).unwrap();
        d
    })
}

/// A MotionBricks model converted from the fixture layout ([`write_layout`] over upstream's
/// released configs): the GGUF lives as long as the value.
pub struct Loaded {
    pub _tmp: tempfile::TempDir,
    pub path: PathBuf,
    pub model: kinema::models::motionbricks::model::MotionBricksModel,
}

/// [`Loaded`] for the upstream folder `up` (`../shared`'s `motionbricks/out`).
pub fn converted(up: &Path) -> Loaded {
    use kinema::models::motionbricks::convert::{Sources, convert};
    let tmp = tempfile::tempdir().unwrap();
    let d = write_layout(tmp.path(), up);
    let out = tmp.path().join("mb.gguf");
    convert(
        &Sources {
            root: d[0].clone(),
            pose: d[1].clone(),
            vqvae: d[2].clone(),
            g1_xml: None,
        },
        &out,
        kinema::DType::F32,
    )
    .unwrap();
    let model = kinema::models::motionbricks::model::MotionBricksModel::load(&out).unwrap();
    Loaded {
        _tmp: tmp,
        path: out,
        model,
    }
}
