//! `kinema convert motionbricks` (issue 12 part 1) on the reduced model captured from the real
//! upstream modules, rebuilt in upstream's layout from `tests/fixtures/motionbricks/` (see
//! `common/motionbricks_fixture.rs`), and every kind of bad input (part 9): each refused with
//! an error that names the problem, no output file left behind.

#[path = "common/shared_data.rs"]
mod shared_data;

#[path = "common/motionbricks_fixture.rs"]
mod motionbricks_fixture;

use std::path::{Path, PathBuf};
use std::process::Command;

use kinema::DType;
use kinema::formats::{GgufFile, SafeTensors};
use kinema::models::motionbricks::config::{MotionBricksConfig, dims, keys, names};
use kinema::models::motionbricks::convert::{CONVERTER_VERSION, Sources, convert};
use motionbricks_fixture as fx;
use safetensors::tensor::Dtype;
use sha2::{Digest, Sha256};

fn upstream_out() -> Option<PathBuf> {
    shared_data::upstream_dir("motionbricks/out")
}

fn hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// The weights rebuilt here are the bytes the capture script wrote: same formula, same
/// serialisation (the script records each file's SHA-256).
#[test]
fn rebuilt_checkpoints_are_the_captured_ones() {
    let meta = fx::meta();
    for m in fx::MODELS {
        let want = meta["model_safetensors_sha256"][m].as_str().unwrap();
        assert_eq!(hex(&fx::safetensors_bytes(m)), want, "{m}");
    }
}

struct Layout {
    _tmp: tempfile::TempDir,
    dirs: [PathBuf; 3],
    out: PathBuf,
}

fn layout() -> Option<Layout> {
    let up = upstream_out()?;
    let tmp = tempfile::tempdir().unwrap();
    let dirs = fx::write_layout(tmp.path(), &up);
    let out = tmp.path().join("mb.gguf");
    Some(Layout {
        _tmp: tmp,
        dirs,
        out,
    })
}

fn sources(l: &Layout) -> Sources {
    Sources {
        root: l.dirs[0].clone(),
        pose: l.dirs[1].clone(),
        vqvae: l.dirs[2].clone(),
        g1_xml: None,
    }
}

#[test]
fn converts_the_reduced_model() {
    let Some(l) = layout() else { return };
    let c = convert(&sources(&l), &l.out, DType::F32).unwrap();
    let f = GgufFile::open(&l.out).unwrap();
    let cfg = MotionBricksConfig::from_gguf(&f, &l.out).unwrap();
    assert_eq!(cfg, c.config);
    // The reduced widths of meta.json, the rest as released.
    assert_eq!(
        (cfg.root_n_embd, cfg.root_n_head, cfg.root_ff),
        (64, 2, 2048)
    );
    assert_eq!((cfg.root_layers_shared, cfg.root_layers_token), (2, 2));
    assert_eq!(
        (cfg.pose_n_embd, cfg.pose_n_head, cfg.pose_layers),
        (128, 2, 2)
    );
    assert_eq!((cfg.code_heads, cfg.codes, cfg.code_dim), (8, 10, 8));
    assert_eq!((cfg.min_tokens, cfg.max_tokens, cfg.down_t), (6, 16, 2));
    assert_eq!((cfg.decoder.width, cfg.decoder.depth), (64, 4));
    assert_eq!(cfg.decoder.dilation(0), 27);
    assert_eq!(cfg.fps, 30.0);
    assert_eq!(
        f.get(keys::CONVERTER_VERSION).and_then(|v| v.as_str()),
        Some(CONVERTER_VERSION)
    );

    // Every tensor, bit-exact, under its GGUF name; nothing training-only.
    let expected = cfg.tensor_shapes();
    assert_eq!(f.tensors().len(), expected.len());
    assert_eq!(c.tensors, expected.len());
    let st: Vec<SafeTensors> = l
        .dirs
        .iter()
        .map(|d| SafeTensors::open(d.join("model.safetensors")).unwrap())
        .collect();
    for (name, shape) in &expected {
        let t = f.tensor(name).unwrap();
        assert_eq!(&t.shape, shape, "{name}");
        let (src, key) = if let Some(r) = name.strip_prefix(names::ROOT) {
            (&st[0], format!("backbone_net.{r}"))
        } else if let Some(r) = name.strip_prefix(names::POSE) {
            (&st[1], format!("backbone_net.{r}"))
        } else if let Some(r) = name.strip_prefix(names::VQ_DECODER) {
            (&st[2], format!("pose_net.decoder.{r}"))
        } else if name == names::VQ_CODEBOOK {
            (&st[2], "pose_net.quantizer.vq._codebook.embed".to_string())
        } else {
            continue;
        };
        assert_eq!(t.dtype, DType::F32, "{name}");
        assert_eq!(
            t.to_f32_vec().unwrap(),
            src.tensor_f32(&key).unwrap().1,
            "{name}"
        );
    }
    assert!(
        f.tensors()
            .iter()
            .all(|t| !t.name.contains("encoder.model") && !t.name.contains("embed_avg"))
    );
    // Statistics: float64 on disk, cast to f32.
    let up = upstream_out().unwrap();
    let mean = kinema::formats::npy::read_file(
        up.join("motionbricks_root/version_1/stats/motion/mean.npy"),
    )
    .unwrap()
    .to_f64()
    .unwrap();
    let got = f.tensor(names::STATS_MEAN).unwrap().to_f32_vec().unwrap();
    assert_eq!(got.len(), dims::STATS);
    assert!(got.iter().zip(&mean).all(|(a, b)| *a == *b as f32));
    // Source hashes: 4 files per folder and the robot description.
    assert_eq!(c.sources.len(), 13);
    for (file, hash) in &c.sources {
        let key = format!("{}{file}", keys::SOURCE_SHA256_PREFIX);
        assert_eq!(f.get(&key).and_then(|v| v.as_str()), Some(hash.as_str()));
    }
    let (_, root_w) = &c.sources[0];
    assert_eq!(
        root_w,
        &hex(&std::fs::read(l.dirs[0].join("model.safetensors")).unwrap())
    );
    println!(
        "{} tensors, {:.2} M parameters",
        c.tensors,
        c.parameters as f64 / 1e6
    );
}

#[test]
fn narrow_dtypes_round_the_matrices_only() {
    let Some(l) = layout() else { return };
    let f32_file = l.out.with_extension("f32.gguf");
    convert(&sources(&l), &f32_file, DType::F32).unwrap();
    let full = GgufFile::open(&f32_file).unwrap();
    for d in [DType::F16, DType::BF16] {
        convert(&sources(&l), &l.out, d).unwrap();
        let f = GgufFile::open(&l.out).unwrap();
        for t in f.tensors() {
            if t.name == names::G1_JOINTS {
                continue; // an i32 table, never narrowed
            }
            let a = f.tensor(&t.name).unwrap();
            let b = full.tensor(&t.name).unwrap();
            if a.shape.len() == 2 {
                assert_eq!(a.dtype, d, "{}", t.name);
                let (x, y) = (a.to_f32_vec().unwrap(), b.to_f32_vec().unwrap());
                let tol = if d == DType::F16 { 1e-3 } else { 8e-3 };
                assert!(
                    x.iter()
                        .zip(&y)
                        .all(|(p, q)| (p - q).abs() <= tol * q.abs().max(1e-2)),
                    "{}",
                    t.name
                );
            } else {
                assert_eq!(a.dtype, DType::F32, "{}", t.name);
            }
        }
    }
    assert!(convert(&sources(&l), &l.out, DType::Q8_0).is_err());
}

/// Rewrite one model's safetensors after changing its entries.
fn rewrite(dir: &Path, model: &str, f: impl FnOnce(&mut Vec<fx::Entry>)) {
    let mut e = fx::entries(model);
    f(&mut e);
    std::fs::write(dir.join("model.safetensors"), fx::serialize(&e)).unwrap();
}

fn edit_yaml(dir: &Path, from: &str, to: &str) {
    let p = dir.join("config.yaml");
    let s = std::fs::read_to_string(&p).unwrap();
    assert!(s.contains(from), "{from}");
    std::fs::write(&p, s.replacen(from, to, 1)).unwrap();
}

/// Each broken layout is refused with a message holding `want`, and leaves no output.
#[test]
fn bad_checkpoints_are_refused() {
    type Break = Box<dyn Fn(&[PathBuf; 3])>;
    let cases: Vec<(&str, Break)> = vec![
        (
            "missing tensor \"backbone_net._middle_token_emb.weight\"",
            Box::new(|d| {
                rewrite(&d[0], "root", |e| {
                    e.retain(|x| x.0 != "backbone_net._middle_token_emb.weight")
                })
            }),
        ),
        (
            "has shape [80, 127]",
            Box::new(|d| {
                rewrite(&d[1], "pose", |e| {
                    let x = e
                        .iter_mut()
                        .find(|x| x.0 == "backbone_net._proj_pose_output_logit.weight")
                        .unwrap();
                    x.2 = vec![80, 127];
                    x.3.truncate(80 * 127 * 4);
                })
            }),
        ),
        (
            "non-finite value NaN",
            Box::new(|d| {
                rewrite(&d[2], "vqvae", |e| {
                    let x = e
                        .iter_mut()
                        .find(|x| x.0 == "pose_net.decoder.model.6.bias")
                        .unwrap();
                    x.3[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
                })
            }),
        ),
        (
            "unexpected tensor \"backbone_net.extra\"",
            Box::new(|d| {
                rewrite(&d[0], "root", |e| {
                    e.push(("backbone_net.extra".into(), Dtype::F32, vec![1], vec![0; 4]))
                })
            }),
        ),
        (
            "is F64, expected F32",
            Box::new(|d| {
                rewrite(&d[0], "root", |e| {
                    let x = e
                        .iter_mut()
                        .find(|x| x.0 == "backbone_net._conv_no_frame_emb")
                        .unwrap();
                    x.1 = Dtype::F64;
                    x.3 = vec![0; 64 * 8];
                })
            }),
        ),
        (
            "initted\" is not true",
            Box::new(|d| {
                rewrite(&d[1], "pose", |e| {
                    e.iter_mut()
                        .find(|x| x.0 == "backbone_net.initted")
                        .unwrap()
                        .3 = vec![0];
                })
            }),
        ),
        (
            "activation = String(\"gelu\") is not supported",
            Box::new(|d| edit_yaml(&d[0], "activation: relu", "activation: gelu")),
        ),
        (
            "text_embeddings = String(\"t5\") is not supported",
            Box::new(|d| edit_yaml(&d[1], "text_embeddings: null", "text_embeddings: t5")),
        ),
        (
            "model.args.max_tokens is 16 in root",
            Box::new(|d| edit_yaml(&d[2], "max_tokens: 16", "max_tokens: 17")),
        ),
        (
            "differs from root/stats/motion",
            Box::new(|d| {
                let p = d[1].join("stats/motion/mean.npy");
                let mut b = std::fs::read(&p).unwrap();
                let n = b.len();
                b[n - 1] ^= 1;
                std::fs::write(&p, b).unwrap();
            }),
        ),
        (
            "shape [417]",
            Box::new(|d| {
                let a = kinema::formats::NpyArray::from_f64(&[417], &[1.0; 417]).unwrap();
                kinema::formats::npy::write_file(d[2].join("stats/motion/std.npy"), &a).unwrap();
            }),
        ),
        (
            "not a MotionBricks root model",
            Box::new(|d| {
                edit_yaml(
                    &d[0],
                    "root_backbone.root_backbone_network",
                    "pose_backbone.pose_backbone_network",
                )
            }),
        ),
        (
            "config.yaml",
            Box::new(|d| std::fs::remove_file(d[2].join("config.yaml")).unwrap()),
        ),
        (
            "aliases",
            Box::new(|d| {
                let p = d[0].join("config.yaml");
                let s = std::fs::read_to_string(&p).unwrap();
                std::fs::write(&p, format!("a: &x 1\nb: *x\n{s}")).unwrap();
            }),
        ),
    ];
    for (want, brk) in cases {
        let Some(l) = layout() else { return };
        brk(&l.dirs);
        let e = convert(&sources(&l), &l.out, DType::F32)
            .expect_err(want)
            .to_string();
        assert!(e.contains(want), "wanted {want:?} in: {e}");
        assert!(!l.out.exists(), "{want}: an output was written");
    }
    // No robot description beside the folders, or a broken one.
    let Some(l) = layout() else { return };
    let xml = l.dirs[0].join("../../../assets/skeletons/g1/g1.xml");
    std::fs::remove_file(&xml).unwrap();
    let e = convert(&sources(&l), &l.out, DType::F32)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--g1-xml"), "{e}");
    std::fs::write(
        &xml,
        "<mujoco><worldbody><body><joint name=\"x_joint\"/></body></worldbody></mujoco>",
    )
    .unwrap();
    let e = convert(&sources(&l), &l.out, DType::F32)
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected the G1's 29 hinges"), "{e}");
    std::fs::write(&xml, "<mujoco><worldbody>").unwrap();
    assert!(convert(&sources(&l), &l.out, DType::F32).is_err());
    assert!(!l.out.exists());
    // Not a folder, and an output directory that does not exist.
    let Some(l) = layout() else { return };
    let mut s = sources(&l);
    s.vqvae = l.dirs[2].join("nope");
    assert!(convert(&s, &l.out, DType::F32).is_err());
    let bad_out = l.out.parent().unwrap().join("missing/mb.gguf");
    assert!(convert(&sources(&l), &bad_out, DType::F32).is_err());
}

/// The output is checked before any work: one of the inputs, a directory or a character
/// device is refused by name and every input is left as it was.
#[test]
fn an_output_that_is_an_input_or_special_is_refused() {
    let Some(l) = layout() else { return };
    let weights = l.dirs[1].join("model.safetensors");
    let before = std::fs::read(&weights).unwrap();
    let e = convert(&sources(&l), &weights, DType::F32)
        .unwrap_err()
        .to_string();
    assert!(e.contains("is the input pose/model.safetensors"), "{e}");
    assert_eq!(std::fs::read(&weights).unwrap(), before);
    let e = convert(&sources(&l), &l.dirs[0], DType::F32)
        .unwrap_err()
        .to_string();
    assert!(e.contains("is a directory"), "{e}");
    #[cfg(unix)]
    {
        let e = convert(&sources(&l), Path::new("/dev/null"), DType::F32)
            .unwrap_err()
            .to_string();
        assert!(e.contains("character device"), "{e}");
    }
    assert!(!l.out.exists());
}

/// The command line converts, and refuses a bad dtype with a message and no output.
#[test]
fn command_line_converts() {
    let Some(l) = layout() else { return };
    let run = |dtype: &str| {
        Command::new(env!("CARGO_BIN_EXE_kinema"))
            .args(["convert", "motionbricks", "--root"])
            .arg(&l.dirs[0])
            .arg("--pose")
            .arg(&l.dirs[1])
            .arg("--vqvae")
            .arg(&l.dirs[2])
            .args(["--dtype", dtype, "-o"])
            .arg(&l.out)
            .output()
            .unwrap()
    };
    let bad = run("f8");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown --dtype"));
    assert!(!l.out.exists());
    let ok = run("bf16");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let f = GgufFile::open(&l.out).unwrap();
    assert!(MotionBricksConfig::from_gguf(&f, &l.out).is_ok());
}

/// A GGUF that is not a MotionBricks model is refused by name.
#[test]
fn other_gguf_is_not_motionbricks() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("k.gguf");
    let mut w = kinema::formats::GgufWriter::new();
    w.add_metadata("general.architecture", "kimodo").unwrap();
    w.write(&p).unwrap();
    let e = MotionBricksConfig::from_gguf(&GgufFile::open(&p).unwrap(), &p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a MotionBricks model"), "{e}");
}
