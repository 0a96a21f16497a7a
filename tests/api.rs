//! The host API (issue 15 part 1) on the tiny models: it runs the command line's code paths
//! (the npz equals `kinema generate`'s byte for byte), two models and two engines run side by
//! side from several threads with the single-threaded results, progress cancels, and bad
//! requests are errors that name the field.

#[path = "common/tiny_models.rs"]
mod tiny_models;

use std::sync::OnceLock;

use kinema::cpu::{CpuBackend, Isa};
use kinema::formats::{NpyArray, npy};
use kinema::models::kimodo::generate as cli;
use kinema::{
    BackendChoice, Draws, Engine, EngineOptions, Error, GenerateRequest, Kimodo, MotionBricks,
    Noise, Plan, PlanRequest, Precision, PrecisionChoice, Progress, Sampling, Stage,
};

struct Models {
    _dir: tempfile::TempDir,
    kimodo: std::path::PathBuf,
    mb: std::path::PathBuf,
}

fn models() -> &'static Models {
    static M: OnceLock<Models> = OnceLock::new();
    M.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (kimodo, mb) = tiny_models::write(dir.path()).unwrap();
        Models {
            _dir: dir,
            kimodo,
            mb,
        }
    })
}

fn cpu_engine() -> Engine {
    Engine::new(EngineOptions {
        backend: BackendChoice::Cpu,
        precision: PrecisionChoice::Strict,
        threads: Some(2),
        ..EngineOptions::default()
    })
    .unwrap()
}

/// A text feature of order 1, as LLM2Vec's are.
fn embedding(dim: usize, phase: f32) -> Vec<f32> {
    (0..dim).map(|i| (i as f32 * 0.37 + phase).sin()).collect()
}

fn request(k: &Kimodo, seed: u64) -> GenerateRequest {
    GenerateRequest {
        steps: 4,
        noise: Noise::Seed(seed),
        heading: 0.3,
        ..GenerateRequest::new(embedding(k.embedding_dim(), seed as f32), 12)
    }
}

fn plan_request(mb: &MotionBricks, seed: u64) -> PlanRequest {
    let mut r = mb.request(2).unwrap();
    let c = mb.config();
    let k = 2 * c.frames_per_token();
    let g: Vec<f32> = (0..2 * k * 5).map(|i| (i as f32 * 0.11).cos()).collect();
    r.set_floats("global_root_values", &g).unwrap();
    let mut has = vec![false; 2 * k];
    has[0] = true;
    has[k] = true;
    r.set_flags("has_global_root_values", &has).unwrap();
    r.draws = Draws::Seed(seed);
    r
}

/// Bit patterns: the padded frames past a plan's length hold NaN, which `==` never equals.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn same_plan(a: &Plan, b: &Plan) {
    assert_eq!(a.num_tokens(), b.num_tokens());
    assert_eq!(a.pose_tokens(), b.pose_tokens());
    assert!(bits(a.features()) == bits(b.features()), "features differ");
    assert!(bits(a.qpos()) == bits(b.qpos()), "qpos differ");
}

#[test]
fn generate_writes_the_npz_of_kinema_generate() {
    let m = models();
    let engine = cpu_engine();
    let k = Kimodo::load(&engine, &m.kimodo).unwrap();
    let req = GenerateRequest {
        diagnostics: true,
        cfg_rows: Some(3),
        ..request(&k, 5)
    };
    let motion = k.generate(&req).unwrap();
    assert_eq!(motion.frames(), 12);
    assert_eq!(motion.skeleton(), "soma77");
    assert!(
        motion.postprocessed(),
        "on by default for SOMA, as upstream's CLI"
    );
    assert_eq!(motion.posed_joints().len(), 12 * motion.joints() * 3);

    let tmp = tempfile::tempdir().unwrap();
    let emb = tmp.path().join("e.npy");
    let kinema::TextInput::Embedding(e) = &req.text else {
        unreachable!()
    };
    npy::write_file(&emb, &NpyArray::from_f32(&[1, e.len()], e).unwrap()).unwrap();
    let out = tmp.path().join("cli.npz");
    let cli_req = cli::GenerateRequest {
        model: m.kimodo.clone(),
        embeddings: vec![emb],
        noise: None,
        frames: vec![12],
        transition_frames: 5,
        steps: 4,
        cfg_text: None,
        cfg_constraint: None,
        cfg_rows: 3,
        seed: 5,
        heading: 0.3,
        diagnostics: true,
        postprocess: true,
        output: out.clone(),
        glb: None,
        constraints: None,
        samples: 1,
        exports: Default::default(),
        text: Vec::new(),
    };
    let b = CpuBackend::with(Isa::select().unwrap(), 2, Precision::Strict).unwrap();
    cli::generate(&cli_req, &b, &mut |_, _| {}).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), motion.npz_bytes().unwrap());
    let api_out = tmp.path().join("api.npz");
    motion.write_npz(&api_out).unwrap();
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&api_out).unwrap()
    );
}

#[test]
fn two_models_and_two_engines_from_several_threads_match_single_threaded_runs() {
    let m = models();
    let engine = cpu_engine();
    let k = Kimodo::load(&engine, &m.kimodo).unwrap();
    let mb = MotionBricks::load(&engine, &m.mb).unwrap();
    let other = cpu_engine();
    assert!(!engine.same_as(&other) && engine.same_as(&engine.clone()));
    let k2 = Kimodo::load(&other, &m.kimodo).unwrap();

    let want_k: Vec<_> = (0..2)
        .map(|s| k.generate(&request(&k, s)).unwrap())
        .collect();
    let want_mb = mb.plan(&plan_request(&mb, 9)).unwrap();
    let want_argmax = mb
        .plan(&PlanRequest {
            sampling: Sampling::Argmax,
            ..plan_request(&mb, 0)
        })
        .unwrap();

    std::thread::scope(|s| {
        let mut jobs = Vec::new();
        for seed in 0..2u64 {
            let (k, k2, want) = (&k, &k2, &want_k[seed as usize]);
            jobs.push(s.spawn(move || {
                for model in [k, k2] {
                    let got = model.generate(&request(model, seed)).unwrap();
                    assert_eq!(got.features(), want.features());
                    assert_eq!(got.posed_joints(), want.posed_joints());
                    assert_eq!(got.npz_bytes().unwrap(), want.npz_bytes().unwrap());
                }
            }));
        }
        for _ in 0..2 {
            let (mb, want, want_argmax) = (&mb, &want_mb, &want_argmax);
            jobs.push(s.spawn(move || {
                same_plan(&mb.plan(&plan_request(mb, 9)).unwrap(), want);
                let argmax = PlanRequest {
                    sampling: Sampling::Argmax,
                    ..plan_request(mb, 0)
                };
                same_plan(&mb.plan(&argmax).unwrap(), want_argmax);
            }));
        }
        for j in jobs {
            j.join().unwrap();
        }
    });
    // A different seed draws differently (the comparison above can fail).
    assert_ne!(
        mb.plan(&plan_request(&mb, 10)).unwrap().output().uniforms,
        want_mb.output().uniforms
    );
    assert_ne!(want_k[0].features(), want_k[1].features());
}

#[test]
fn progress_reports_every_step_and_cancels() {
    let m = models();
    let engine = cpu_engine();
    let k = Kimodo::load(&engine, &m.kimodo).unwrap();
    let mut seen = Vec::new();
    k.generate_with_progress(&request(&k, 0), &mut |stage, step, total| {
        seen.push((stage, step, total));
        Progress::Continue
    })
    .unwrap();
    let steps: Vec<_> = (1..=4).map(|i| (Stage::Sample, i, 4)).collect();
    assert_eq!(seen[..4], steps[..]);
    assert_eq!(seen[4..], [(Stage::Decode, 1, 1)]);

    let mut calls = 0;
    let e = k
        .generate_with_progress(&request(&k, 0), &mut |_, step, _| {
            calls += 1;
            if step == 2 {
                Progress::Cancel
            } else {
                Progress::Continue
            }
        })
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Cancelled {
                step: 2,
                total: 4,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(calls, 2);

    let mb = MotionBricks::load(&engine, &m.mb).unwrap();
    let e = mb
        .plan_with_progress(&plan_request(&mb, 0), &mut |_, _, _| Progress::Cancel)
        .unwrap_err();
    assert!(matches!(e, Error::Cancelled { stage: "plan", .. }), "{e}");
}

fn message(r: kinema::Result<impl std::fmt::Debug>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn bad_requests_name_what_is_wrong() {
    let m = models();
    let engine = cpu_engine();
    let k = Kimodo::load(&engine, &m.kimodo).unwrap();
    let ok = request(&k, 0);
    for (req, says) in [
        (
            GenerateRequest::new(vec![0.5; 3], 12),
            "the embedding has 3 values",
        ),
        (
            GenerateRequest {
                frames: 1,
                ..ok.clone()
            },
            "GenerateRequest.frames = 1",
        ),
        (
            GenerateRequest {
                steps: 0,
                ..ok.clone()
            },
            "GenerateRequest.steps = 0",
        ),
        (
            GenerateRequest {
                cfg_text: Some(f32::NAN),
                ..ok.clone()
            },
            "GenerateRequest.cfg_text = NaN",
        ),
        (
            GenerateRequest {
                cfg_rows: Some(4),
                ..ok.clone()
            },
            "4 guidance rows",
        ),
        (
            GenerateRequest {
                noise: Noise::Values(vec![0.0; 5]),
                ..ok.clone()
            },
            "the noise has 5 values",
        ),
        (
            GenerateRequest::new(vec![1e30; k.embedding_dim()], 12),
            "GenerateRequest.text: its values",
        ),
    ] {
        let got = message(k.generate(&req));
        assert!(got.contains(says), "{got:?} lacks {says:?}");
    }

    let mb = MotionBricks::load(&engine, &m.mb).unwrap();
    assert!(message(mb.request(0)).contains("batch 0"));
    let mut r = mb.request(1).unwrap();
    assert!(message(r.set_floats("poses", &[])).contains("local_poses"));
    assert!(message(r.set_flags("has_local_poses", &[true])).contains("takes 8 values"));
    r.draws = Draws::Uniforms(vec![0.5; 3]);
    assert!(message(mb.plan(&r)).contains("PlanRequest.draws"));
    r.draws = Draws::Seed(0);
    r.set_num_tokens(&[3]).unwrap();
    assert!(message(mb.plan(&r)).contains("num_tokens[0] = 3"));

    for (opts, says) in [
        (
            EngineOptions {
                backend: BackendChoice::Vulkan,
                threads: Some(2),
                ..EngineOptions::default()
            },
            "applies to the CPU backend",
        ),
        (
            EngineOptions {
                backend: BackendChoice::Cpu,
                device: Some(0),
                ..EngineOptions::default()
            },
            "Vulkan device index",
        ),
        (
            EngineOptions {
                backend: BackendChoice::Cpu,
                threads: Some(0),
                ..EngineOptions::default()
            },
            "from 1 to 1024, got 0",
        ),
    ] {
        let got = message(Engine::new(opts));
        assert!(got.contains(says), "{got:?} lacks {says:?}");
    }
    let missing = message(Kimodo::load(&engine, "/nonexistent/kimodo.gguf"));
    assert!(missing.contains("/nonexistent/kimodo.gguf"), "{missing}");
    assert!(MotionBricks::load(&engine, &m.kimodo).is_err());
    assert!(Kimodo::load(&engine, &m.mb).is_err());
}
