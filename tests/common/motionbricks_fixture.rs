//! The MotionBricks fixtures (`tests/fixtures/motionbricks/`, captured by
//! `reference/capture_motionbricks.py`) and the reduced model in upstream's layout rebuilt
//! from them: the three `config.yaml`, the statistics from `../shared/data/upstream/`, and
//! `model.safetensors` regenerated from `state_dict.json` with the weight formula of
//! `kinema::models::motionbricks::synthetic` (the script's `weight_value`). Include with
//! `#[path = "common/motionbricks_fixture.rs"] mod motionbricks_fixture;` (it needs
//! `shared_data` declared beside it).
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
        std::fs::copy(
            dir().join(format!("{m}.config.yaml")),
            d.join("config.yaml"),
        )
        .unwrap();
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
