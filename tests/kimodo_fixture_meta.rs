//! The Kimodo parity fixtures themselves: every skeleton's fixture loads, its metadata matches
//! the capture scripts and checkpoint files, its keys have the documented shapes
//! (`tests/fixtures/kimodo/README.md`), and a stale or tampered fixture is refused.

#[path = "common/kimodo_fixture.rs"]
mod kimodo_fixture;

use std::path::Path;

use kimodo_fixture::{SKELETONS, crate_root, load, open};

const UPSTREAM_COMMIT: &str = "7330e7ebc08b3e90791cf17eefdc7f65bb2050d5";

#[test]
fn every_fixture_loads_with_documented_shapes() {
    for skel in SKELETONS {
        let fx = load(skel);
        let j = fx.num_joints();
        let dim = fx.motion_dim();
        assert_eq!(dim, 9 + 12 * j, "{skel}");
        let t = fx.frames();
        let llm = fx.meta["model"]["llm_shape"][1].as_u64().unwrap() as usize;
        let d = fx.model_usize("latent_dim");
        let expect: &[(&str, Vec<usize>)] = &[
            ("embedding", vec![1, llm]),
            ("noise", vec![1, t, dim]),
            ("heading", vec![1]),
            ("sched10_use_timesteps", vec![10]),
            ("sched10_alphas_cumprod", vec![10]),
            ("sched10_prev", vec![10]),
            ("sched100_use_timesteps", vec![100]),
            ("sched100_alphas_cumprod", vec![100]),
            ("sched100_prev", vec![100]),
            ("root_in", vec![3, t, 2 * dim]),
            ("root_out", vec![3, t, 5]),
            ("bridge_out", vec![3, t, 4]),
            ("body_in", vec![3, t, 2 * dim - 1]),
            ("body_out", vec![3, t, dim - 5]),
            ("denoiser_out", vec![3, t, dim]),
            ("x0_step0", vec![1, t, dim]),
            ("x_step1", vec![1, t, dim]),
            ("pe_first", vec![d + 1, d]),
            ("pe_time", vec![fx.steps(), d]),
            ("features", vec![1, t, dim]),
            ("local_rot_mats", vec![t, j, 3, 3]),
            ("global_rot_mats", vec![t, j, 3, 3]),
            ("posed_joints", vec![t, j, 3]),
            ("root_positions", vec![t, 3]),
            ("smooth_root_pos", vec![t, 3]),
            ("foot_contacts", vec![t, 4]),
            ("global_root_heading", vec![t, 2]),
        ];
        for (name, shape) in expect {
            assert_eq!(&fx.shape(name), shape, "{skel}: {name}");
        }
        assert_eq!(fx.has("local_rot_mats_77"), skel == "soma30", "{skel}");
        if skel == "soma30" {
            assert_eq!(fx.f32("local_rot_mats_77").1, vec![t, 77, 3, 3]);
            assert_eq!(fx.f32("global_rot_mats_77").1, vec![t, 77, 3, 3]);
            assert_eq!(fx.f32("posed_joints_77").1, vec![t, 77, 3]);
        }
        // Typed accessors and dtypes.
        let (ts, _) = fx.i32("sched10_use_timesteps");
        assert_eq!(ts.first(), Some(&0));
        assert_eq!(ts.last(), Some(&999));
        let (fc, _) = fx.u8("foot_contacts");
        assert!(fc.iter().all(|&c| c <= 1), "{skel}: contacts are 0/1");
        let (feat, _) = fx.f32("features");
        assert!(feat.iter().all(|v| v.is_finite()), "{skel}");
    }
}

#[test]
fn metadata_records_the_capture() {
    for skel in SKELETONS {
        let fx = load(skel);
        let m = &fx.meta;
        assert_eq!(
            m["upstream_commit"].as_str(),
            Some(UPSTREAM_COMMIT),
            "{skel}"
        );
        assert_eq!(m["device"].as_str(), Some("cpu"));
        assert_eq!(m["dtype"].as_str(), Some("float32"));
        assert_eq!(m["mha_fastpath"].as_bool(), Some(false));
        assert_eq!(
            m["cfg_rows"],
            serde_json::json!(["text", "constraint", "uncond"])
        );
        assert_eq!((fx.cfg_text(), fx.cfg_constraint()), (2.0, 2.0));
        assert!((fx.heading() - 0.3).abs() < 1e-12);
        assert_eq!((fx.frames(), fx.steps()), (10, 10));
        assert!(m["torch_version"].as_str().is_some());
        for key in ["weights", "stats", "embedding", "noise"] {
            assert!(m["seeds"][key].as_u64().is_some(), "{skel}: seed {key}");
        }
        // The heading value stored as an array matches the metadata.
        assert_eq!(fx.f32("heading").0, vec![0.3f32]);
        // The config's skeleton is the fixture's.
        let nb = m["config"]["denoiser"]["motion_rep"]["skeleton"]["nbjoints"].as_u64();
        assert_eq!(nb, Some(fx.num_joints() as u64));
        // Every checkpoint file is hashed, and the tensor file holds 12 + 12 L per stage.
        let files = m["checkpoint_sha256"].as_object().unwrap();
        assert_eq!(
            files.len(),
            8,
            "{skel}: config, weights and six stats files"
        );
        let st = std::fs::read(fx.checkpoint_dir().join("model.safetensors")).unwrap();
        let st = safetensors::SafeTensors::deserialize(&st).unwrap();
        let layers = fx.model_usize("num_layers");
        for stage in ["root_model", "body_model"] {
            let prefix = format!("denoiser.backbone.{stage}.");
            let n = st.names().iter().filter(|k| k.starts_with(&prefix)).count();
            assert_eq!(n, 12 + 12 * layers, "{skel}: {stage}");
        }
        assert_eq!(st.len(), 2 * (12 + 12 * layers));
    }
}

/// Copies `src` (a fixture folder) to `dst`, recursively.
fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let to = dst.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &to);
        } else {
            std::fs::copy(&p, &to).unwrap();
        }
    }
}

/// A scratch copy of the soma30 fixture and of `reference/`, to tamper with.
fn scratch() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let root = crate_root();
    let tmp = tempfile::tempdir().unwrap();
    let fx = tmp.path().join("soma30");
    copy_dir(&root.join("tests/fixtures/kimodo/soma30"), &fx);
    let reference = tmp.path().join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    for f in ["capture_kimodo.py", "kimodo_upstream.py"] {
        std::fs::copy(root.join("reference").join(f), reference.join(f)).unwrap();
    }
    (tmp, fx, reference)
}

#[test]
fn untouched_copy_is_accepted() {
    let (_tmp, fx, reference) = scratch();
    open(&fx, &reference).expect("a faithful copy loads");
}

#[test]
fn edited_capture_script_is_refused() {
    let (_tmp, fx, reference) = scratch();
    let script = reference.join("capture_kimodo.py");
    let mut text = std::fs::read(&script).unwrap();
    text.extend_from_slice(b"\n# edited\n");
    std::fs::write(&script, text).unwrap();
    let err = open(&fx, &reference).err().expect("refused");
    assert!(
        err.contains("capture_kimodo.py") && err.contains("re-run"),
        "{err}"
    );
}

#[test]
fn edited_upstream_helper_is_refused() {
    let (_tmp, fx, reference) = scratch();
    let helper = reference.join("kimodo_upstream.py");
    std::fs::write(&helper, b"# another helper\n").unwrap();
    let err = open(&fx, &reference).err().expect("refused");
    assert!(err.contains("kimodo_upstream.py"), "{err}");
}

#[test]
fn changed_checkpoint_file_is_refused() {
    let (_tmp, fx, reference) = scratch();
    let mean = fx.join("checkpoint/stats/motion/body/mean.npy");
    let mut bytes = std::fs::read(&mean).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&mean, bytes).unwrap();
    let err = open(&fx, &reference).err().expect("refused");
    assert!(
        err.contains("body/mean.npy") && err.contains("SHA-256"),
        "{err}"
    );
}

#[test]
fn missing_or_extra_checkpoint_file_is_refused() {
    let (_tmp, fx, reference) = scratch();
    std::fs::remove_file(fx.join("checkpoint/config.yaml")).unwrap();
    let err = open(&fx, &reference).err().expect("refused");
    assert!(err.contains("config.yaml"), "{err}");

    let (_tmp2, fx2, reference2) = scratch();
    std::fs::write(fx2.join("checkpoint/extra.bin"), b"x").unwrap();
    let err = open(&fx2, &reference2).err().expect("refused");
    assert!(err.contains("extra.bin"), "{err}");
}

/// The synthetic-weight spec (/work/wt/SYNTH.md) as `reference/bench_kimodo_torch.py`
/// implements it in numpy agrees bit for bit with `kinema::rng`: the vectors in
/// `tests/fixtures/kimodo/synth_vectors.json` were written by that script
/// (`--write-vectors`) and are recomputed here from the spec.
#[test]
fn synthetic_weight_vectors_match_the_rust_rng() {
    use kinema::rng::uniform;

    const SEED: u64 = 0x4B49_4D4F_444F;
    fn fnv1a64(bytes: &[u8]) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    }
    fn value(name: &str, shape: &[usize], stream: u64, i: u64) -> f32 {
        let u = uniform(stream, i);
        let r = 2.0f32 * u - 1.0f32;
        if name.ends_with("norm1.weight") || name.ends_with("norm2.weight") {
            let t = r * 0.1f32;
            t + 1f32
        } else if name.ends_with("weight") {
            r * (3.0f64 / shape[1] as f64).sqrt() as f32
        } else if name.ends_with("bias") {
            r * 0.02f32
        } else if name.ends_with(".mean") {
            r * 0.1f32
        } else if name.ends_with(".std") {
            0.5f32 + u
        } else {
            assert_eq!(name, "embedding");
            r
        }
    }

    let path = crate_root().join("tests/fixtures/kimodo/synth_vectors.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(v["seed"].as_str(), Some(format!("{SEED:x}").as_str()));
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 8);
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let shape: Vec<usize> = c["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        let stream = fnv1a64(name.as_bytes()) ^ SEED;
        assert_eq!(
            c["stream"].as_str().unwrap(),
            format!("{stream:016x}"),
            "{name}"
        );
        for (i, u) in c["u_first_bits"].as_array().unwrap().iter().enumerate() {
            let want = u32::from_str_radix(u.as_str().unwrap(), 16).unwrap();
            assert_eq!(uniform(stream, i as u64).to_bits(), want, "{name} u{i}");
        }
        let idx = c["index"].as_array().unwrap();
        let bits = c["value_bits"].as_array().unwrap();
        for (i, b) in idx.iter().zip(bits) {
            let i = i.as_u64().unwrap();
            let want = u32::from_str_radix(b.as_str().unwrap(), 16).unwrap();
            let have = value(name, &shape, stream, i).to_bits();
            assert_eq!(have, want, "{name}[{i}]: {have:08x} vs python {want:08x}");
        }
    }
}
