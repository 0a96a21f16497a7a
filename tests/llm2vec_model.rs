//! The Llama text model on seeded random tiny GGUFs (`tests/common/tiny_llama.rs`): every
//! weight dtype on every CPU ISA and on Vulkan, padded batches against one prompt at a time,
//! rotate-half on Hugging Face layout against interleaved on llama.cpp's permuted Q/K, and
//! bidirectional against causal attention.

#[path = "common/tiny_llama.rs"]
mod tiny_llama;

use std::path::{Path, PathBuf};

use kinema::backend::Backend;
use kinema::cpu::{CpuBackend, Isa};
use kinema::models::llm2vec::LlamaModel;
use kinema::models::llm2vec::encode::{self, LongText, Prepared};
use kinema::models::llm2vec::model::{GraphSpec, Head, RunInputs, Session};
use kinema::ops::MaskKind;
use kinema::vulkan::VulkanBackend;
use kinema::{DType, Precision};
use tiny_llama::{HIDDEN, Spec};

const PROMPTS: [&str; 4] = [
    "A person walks forward.",
    "Someone jumps",
    "",
    "A person runs in a circle, then stops and waves with both hands!",
];

fn model_file(dir: &Path, name: &str, spec: &Spec) -> PathBuf {
    let p = dir.join(name);
    tiny_llama::write(&p, spec);
    p
}

fn prepare(m: &LlamaModel, prompts: &[&str], template: bool) -> Vec<Prepared> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, s)| encode::prepare(m, i, s, template, LongText::Trim).unwrap())
        .collect()
}

fn embed<B: Backend>(b: &B, path: &Path, prompts: &[&str], template: bool) -> Vec<f32> {
    let m = LlamaModel::load(path)
        .unwrap()
        .for_backend(&b.info())
        .unwrap();
    let p = prepare(&m, prompts, template);
    encode::encode(b, &m, &p).unwrap().0
}

/// `||a - b|| / ||b||` in f64.
fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    (num / den).sqrt()
}

fn vulkan() -> Option<VulkanBackend> {
    if let Err(why) = kinema::vulkan::probe() {
        let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
        assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
        eprintln!("skipping the Vulkan backend: {why}");
        return None;
    }
    Some(VulkanBackend::new(Precision::Strict).unwrap())
}

/// Every weight dtype runs on every CPU ISA and on Vulkan (strict precision) and agrees with
/// the scalar reference ISA within rel_L2 1e-5 (measured: printed); the empty prompt is zeros.
#[test]
fn every_dtype_agrees_across_isas_and_vulkan() {
    let dir = tempfile::tempdir().unwrap();
    let vk = vulkan();
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::Q8_0] {
        let spec = Spec {
            dtype,
            ..Spec::default()
        };
        let path = model_file(dir.path(), &format!("tiny-{dtype}.gguf"), &spec);
        let scalar = CpuBackend::with(Isa::Scalar, 1, Precision::Strict).unwrap();
        let want = embed(&scalar, &path, &PROMPTS, true);
        assert_eq!(want.len(), PROMPTS.len() * HIDDEN);
        assert!(want[2 * HIDDEN..3 * HIDDEN].iter().all(|&x| x == 0.0));
        assert!(want.iter().all(|x| x.is_finite()));
        for isa in Isa::available() {
            let b = CpuBackend::with(isa, 2, Precision::Strict).unwrap();
            let got = embed(&b, &path, &PROMPTS, true);
            let e = rel_l2(&got, &want);
            eprintln!("{dtype} cpu {}: rel_L2 {e:.2e}", isa.name());
            assert!(e <= 1e-5, "{dtype} on {}: rel_L2 {e:.2e}", isa.name());
        }
        if let Some(vk) = &vk {
            let got = embed(vk, &path, &PROMPTS, true);
            let e = rel_l2(&got, &want);
            eprintln!("{dtype} vulkan: rel_L2 {e:.2e}");
            assert!(e <= 1e-5, "{dtype} on Vulkan: rel_L2 {e:.2e}");
        }
    }
}

/// A padded batch (bidirectional: key-padding mask; causal: right padding) gives each prompt
/// what it gives alone, on the CPU and on Vulkan.
#[test]
fn padded_batch_equals_one_prompt_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let vk = vulkan();
    for attention in ["bidirectional", "causal"] {
        let spec = Spec {
            attention: Some(attention),
            ..Spec::default()
        };
        let path = model_file(dir.path(), &format!("tiny-{attention}.gguf"), &spec);
        let check = |what: &str, batch: &[f32], b: &dyn Fn(&str) -> Vec<f32>| {
            for (i, p) in PROMPTS.iter().enumerate() {
                let alone = b(p);
                let row = &batch[i * HIDDEN..(i + 1) * HIDDEN];
                let e = if p.is_empty() {
                    assert!(row.iter().all(|&x| x == 0.0));
                    0.0
                } else {
                    rel_l2(row, &alone)
                };
                eprintln!("{attention} {what} prompt {i}: rel_L2 {e:.2e}");
                assert!(
                    e <= 1e-6,
                    "{attention} {what}: prompt {i} differs by {e:.2e}"
                );
            }
        };
        let cpu = CpuBackend::new(Precision::Strict).unwrap();
        let batch = embed(&cpu, &path, &PROMPTS, true);
        check("cpu", &batch, &|p| embed(&cpu, &path, &[p], true));
        if let Some(vk) = &vk {
            let batch = embed(vk, &path, &PROMPTS, true);
            check("vulkan", &batch, &|p| embed(vk, &path, &[p], true));
        }
    }
}

/// Rotate-half RoPE on Hugging Face layout weights equals interleaved RoPE on the same
/// weights permuted as llama.cpp's converter does (only the summation order of q.k differs).
#[test]
fn rotate_half_on_hf_layout_equals_interleaved_on_permuted() {
    let dir = tempfile::tempdir().unwrap();
    let hf = model_file(dir.path(), "hf.gguf", &Spec::default());
    let gg = model_file(
        dir.path(),
        "permuted.gguf",
        &Spec {
            pairing: None,
            ..Spec::default()
        },
    );
    let cpu = CpuBackend::new(Precision::Strict).unwrap();
    let a = embed(&cpu, &hf, &PROMPTS, false);
    let b = embed(&cpu, &gg, &PROMPTS, false);
    let e = rel_l2(&a, &b);
    eprintln!("rotate_half vs interleaved on permuted: rel_L2 {e:.2e}");
    assert!(e <= 1e-6, "rel_L2 {e:.2e}");
    // The pairing matters: interleaved RoPE on unpermuted weights is another model.
    let wrong = model_file(
        dir.path(),
        "wrong.gguf",
        &Spec {
            pairing: Some("interleaved"),
            ..Spec::default()
        },
    );
    let c = embed(&cpu, &wrong, &PROMPTS, false);
    assert!(rel_l2(&c, &a) > 1e-2);
}

/// Bidirectional and causal attention give different embeddings; in causal mode the first
/// token's hidden state does not depend on later tokens, bidirectionally it does.
#[test]
fn bidirectional_differs_from_causal() {
    let dir = tempfile::tempdir().unwrap();
    let bi = model_file(dir.path(), "bi.gguf", &Spec::default());
    let ca = model_file(
        dir.path(),
        "ca.gguf",
        &Spec {
            attention: Some("causal"),
            ..Spec::default()
        },
    );
    let cpu = CpuBackend::new(Precision::Strict).unwrap();
    let a = embed(&cpu, &bi, &PROMPTS[..2], true);
    let c = embed(&cpu, &ca, &PROMPTS[..2], true);
    assert!(rel_l2(&a, &c) > 1e-2);
    // Position 0's final hidden state under two sequences that differ after it.
    let first_row = |path: &Path, ids: &[u32]| -> Vec<f32> {
        let m = LlamaModel::load(path).unwrap();
        let s = Session::new(
            &cpu,
            &m,
            GraphSpec {
                batch: 1,
                seq: ids.len(),
                mask: if m.config.attention == kinema::models::llm2vec::AttentionMode::Causal {
                    MaskKind::Causal
                } else {
                    MaskKind::None
                },
                head: Head::MeanPool,
                taps: vec![0],
                last_hidden: true,
            },
        )
        .unwrap();
        let mut select = vec![0u32; ids.len()];
        select[0] = 1;
        s.run(&RunInputs {
            ids,
            lengths: &[ids.len()],
            select: &select,
        })
        .unwrap();
        assert_eq!(s.pooled().unwrap(), s.last_hidden().unwrap()[..HIDDEN]);
        assert_eq!(s.tap(0).unwrap().len(), ids.len() * HIDDEN);
        s.pooled().unwrap()
    };
    let (x, y) = ([256u32, 65, 66, 67], [256u32, 65, 66, 90]);
    assert_eq!(first_row(&ca, &x), first_row(&ca, &y));
    assert_ne!(first_row(&bi, &x), first_row(&bi, &y));
}

/// Bad model files: not a Llama, a tokenizer whose vocabulary differs from the embedding
/// table, a missing tensor; each a clear error.
#[test]
fn bad_model_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = model_file(
        dir.path(),
        "vocab.gguf",
        &Spec {
            tokenizer_vocab: tiny_llama::VOCAB + 3,
            ..Spec::default()
        },
    );
    let e = LlamaModel::load(&vocab).err().unwrap().to_string();
    assert!(e.contains("vocab") || e.contains("rows"), "{e}");
    let mut w = kinema::formats::GgufWriter::new();
    w.add_metadata("general.architecture", "kimodo").unwrap();
    let other = dir.path().join("kimodo.gguf");
    w.write(&other).unwrap();
    let e = LlamaModel::load(&other).err().unwrap().to_string();
    assert!(e.contains("not a Llama text model"), "{e}");
}
