//! Kimodo's sampler and drift trace on the CPU backend with tiny synthetic models: bad inputs
//! are named, the 2-row guidance shortcut agrees with upstream's 3 rows, seeded noise is
//! reproducible, and `kinema drift --model`'s traces name every layer and step. (Integration
//! tests, so that the model code itself imports no backend.)

use kinema::cpu::{CpuBackend, Isa};
use kinema::models::kimodo::drift::{compare_traces, trace};
use kinema::models::kimodo::sampler::{SampleOptions, gaussian_noise, sample};
use kinema::models::kimodo::{KimodoModel, SkeletonKind, synthetic};
use kinema::precision::Precision;

fn tiny() -> KimodoModel {
    let mut c = synthetic::released_soma();
    c.skeleton = SkeletonKind::Smplx22;
    c.motion_dim = c.skeleton.motion_dim();
    (c.latent_dim, c.ff_size, c.num_layers, c.num_heads) = (16, 24, 1, 2);
    (c.llm_dim, c.num_text_tokens) = (8, 3);
    synthetic::model(c).unwrap()
}

#[test]
fn bad_inputs_are_named() {
    let m = tiny();
    let b = CpuBackend::new(Precision::Strict).unwrap();
    let emb = vec![0.5f32; 8];
    let base = SampleOptions {
        steps: 2,
        ..SampleOptions::new(&m, 4)
    };
    let err = |emb: &[f32], o: &SampleOptions| {
        sample(&b, &m, emb, o, &mut |_, _| {})
            .unwrap_err()
            .to_string()
    };
    assert!(err(&emb[..7], &base).contains("7 values; this model takes 8"));
    let mut nan = emb.clone();
    nan[3] = f32::NAN;
    assert!(err(&nan, &base).contains("embedding holds a non-finite value (NaN) at element 3"));
    for frames in [1, m.config.max_frames() + 1] {
        let o = SampleOptions {
            frames,
            ..base.clone()
        };
        assert!(err(&emb, &o).contains(&format!("{frames} frames")));
    }
    for steps in [0, 1001] {
        let o = SampleOptions {
            steps,
            ..base.clone()
        };
        assert!(err(&emb, &o).contains("diffusion steps"));
    }
    let o = SampleOptions {
        cfg_rows: 4,
        ..base.clone()
    };
    assert!(err(&emb, &o).contains("4 guidance rows"));
    let o = SampleOptions {
        noise: Some(vec![0.0; 5]),
        ..base.clone()
    };
    assert!(err(&emb, &o).contains("noise has 5 values"));
    let mut n = vec![0.0; 4 * 273];
    n[7] = f32::INFINITY;
    let o = SampleOptions {
        noise: Some(n),
        ..base.clone()
    };
    assert!(err(&emb, &o).contains("noise holds a non-finite value"));
}

/// The 2-row shortcut and upstream's 3 rows agree (the constraint row equals the
/// unconditional one), seeded noise is reproducible, and a run is deterministic.
#[test]
fn shortcut_seed_and_determinism() {
    let m = tiny();
    let b = CpuBackend::new(Precision::Strict).unwrap();
    let emb: Vec<f32> = (0..8).map(|i| i as f32 * 0.1 - 0.3).collect();
    let o = SampleOptions {
        steps: 3,
        seed: 7,
        ..SampleOptions::new(&m, 5)
    };
    let two = sample(&b, &m, &emb, &o, &mut |_, _| {}).unwrap();
    let again = sample(&b, &m, &emb, &o, &mut |_, _| {}).unwrap();
    assert_eq!(two.features, again.features);
    let o3 = SampleOptions {
        cfg_rows: 3,
        ..o.clone()
    };
    let three = sample(&b, &m, &emb, &o3, &mut |_, _| {}).unwrap();
    let worst = two
        .features
        .iter()
        .zip(&three.features)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-5, "{worst}");
    let explicit = SampleOptions {
        noise: Some(gaussian_noise(7, 5 * 273)),
        ..o.clone()
    };
    let same = sample(&b, &m, &emb, &explicit, &mut |_, _| {}).unwrap();
    assert_eq!(same.features, two.features);
    let z = gaussian_noise(7, 20000);
    let mean = z.iter().map(|&v| v as f64).sum::<f64>() / 2e4;
    let var = z.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / 2e4;
    assert!(
        mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
        "{mean} {var}"
    );
}

#[test]
fn traces_name_every_layer_and_step_and_detect_a_difference() {
    let mut c = synthetic::released_soma();
    c.skeleton = SkeletonKind::G1;
    c.motion_dim = c.skeleton.motion_dim();
    (c.latent_dim, c.ff_size, c.num_layers, c.num_heads) = (16, 24, 2, 2);
    (c.llm_dim, c.num_text_tokens) = (8, 3);
    let m = synthetic::model(c.clone()).unwrap();
    let emb = synthetic::embedding(&c);
    let opts = SampleOptions {
        steps: 3,
        ..SampleOptions::new(&m, 5)
    };
    let a = CpuBackend::with(Isa::Scalar, 1, Precision::Strict).unwrap();
    let t = trace(&a, &m, &emb, &opts).unwrap();
    assert_eq!(t.layers.len(), 4);
    assert_eq!(t.layers[2].0, "body_model.layers.0");
    assert_eq!(t.x0.len(), 3);
    let s = c.prefix_len() + 5;
    assert_eq!(t.layers[0].1.len(), 2 * s * 16);
    // The same run drifts by nothing from itself; a perturbed one is seen at every step.
    let same = compare_traces("self", (2, s, 16), &t, &t);
    assert_eq!(same.len(), 4 + 3);
    assert!(same.iter().all(|d| d.max_abs == 0.0));
    let mut other = t.clone();
    other.x0[1][0] += 0.5;
    let rows = compare_traces("perturbed", (2, s, 16), &t, &other);
    assert_eq!(rows[5].op, "x0 step 2/3");
    assert_eq!(rows[5].max_abs, 0.5);
}
