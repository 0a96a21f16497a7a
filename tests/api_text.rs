//! The host API's text encoder (issue 15 part 1, issue 11 part 6) on the tiny models: a
//! [`TextEncoder`] embeds as `kinema encode` does (bit for bit), two threads encode at once
//! with the single-threaded results, a Kimodo model given the encoder generates from a prompt
//! exactly what it generates from that prompt's embedding, and encoders that do not fit the
//! motion model (another width, a causal language model) are refused naming the problem.

#[path = "common/tiny_llama.rs"]
mod tiny_llama;
#[path = "common/tiny_models.rs"]
mod tiny_models;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use kinema::formats::NpzReader;
use kinema::models::llm2vec::encode::LongText as CliLongText;
use kinema::models::llm2vec::run::{EncodeRequest, Prompts, encode_request};
use kinema::{
    BackendChoice, ChatTemplate, Engine, EngineOptions, GenerateRequest, Kimodo, Noise,
    PrecisionChoice, Progress, Stage, TextEncoder, TextInput, TextOptions,
};
use tiny_llama::Spec;

/// The tiny Kimodo model takes 48-wide text features.
const LLM_DIM: usize = 48;

struct Models {
    _dir: tempfile::TempDir,
    kimodo: PathBuf,
    /// Bidirectional, 48 wide: fits the tiny Kimodo model.
    text: PathBuf,
    /// Bidirectional, 64 wide.
    wide: PathBuf,
    /// Causal, 48 wide: a language model, not an LLM2Vec encoder.
    causal: PathBuf,
}

fn models() -> &'static Models {
    static M: OnceLock<Models> = OnceLock::new();
    M.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (kimodo, _) = tiny_models::write(dir.path()).unwrap();
        let text = dir.path().join("text48.gguf");
        tiny_llama::write(
            &text,
            &Spec {
                hidden: LLM_DIM,
                ..Spec::default()
            },
        );
        let wide = dir.path().join("text64.gguf");
        tiny_llama::write(&wide, &Spec::default());
        let causal = dir.path().join("causal48.gguf");
        tiny_llama::write(
            &causal,
            &Spec {
                hidden: LLM_DIM,
                attention: None,
                ..Spec::default()
            },
        );
        Models {
            _dir: dir,
            kimodo,
            text,
            wide,
            causal,
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

const PROMPTS: [&str; 4] = [
    "A person walks forward.",
    "someone jumps twice, then sits down",
    "   ",
    "a person waves with the left hand",
];

/// `kinema encode`'s function on `prompts`, the embeddings read back from its npz.
fn cli_encode(model: &Path, prompts: &[&str], template: &str) -> Vec<f32> {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("e.npz");
    let req = EncodeRequest {
        model: model.to_path_buf(),
        prompts: Prompts::Inline(prompts.iter().map(|s| s.to_string()).collect()),
        template: ChatTemplate::parse(template).unwrap(),
        long_text: CliLongText::Trim,
        output: output.clone(),
    };
    // The engine's own CPU backend: same ISA and threads as the API runs.
    let engine = cpu_engine();
    let kinema::device::AnyBackend::Cpu(cpu) = engine.backend() else {
        unreachable!("a CPU engine")
    };
    encode_request(&req, cpu).unwrap();
    let npz = NpzReader::open(&output).unwrap();
    npz.array("embeddings").unwrap().to_f32().unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn encode_equals_kinema_encode_bit_for_bit() {
    let m = models();
    let engine = cpu_engine();
    for (template, opts) in [
        ("auto", TextOptions::default()),
        (
            "off",
            TextOptions {
                chat_template: ChatTemplate::Off,
                ..TextOptions::default()
            },
        ),
    ] {
        let enc = TextEncoder::load_with(&engine, &m.text, opts).unwrap();
        assert_eq!(enc.dim(), LLM_DIM);
        assert_eq!(enc.chat_template(), template == "auto", "the file says on");
        let e = enc.encode(&PROMPTS).unwrap();
        assert_eq!((e.rows(), e.dim()), (PROMPTS.len(), LLM_DIM));
        assert!(
            bits(e.as_slice()) == bits(&cli_encode(&m.text, &PROMPTS, template)),
            "template {template}: the API and kinema encode differ"
        );
        assert!(
            e.row(2).unwrap().iter().all(|&x| x == 0.0),
            "an empty prompt embeds to zeros, as upstream"
        );
        assert!(e.row(0).unwrap().iter().any(|&x| x != 0.0));
    }
}

#[test]
fn two_threads_encode_at_once_as_one_does() {
    let m = models();
    let engine = cpu_engine();
    let enc = TextEncoder::load(&engine, &m.text).unwrap();
    let lists: [&[&str]; 2] = [&PROMPTS[..2], &PROMPTS[1..]];
    let alone: Vec<Vec<f32>> = lists
        .iter()
        .map(|l| enc.encode(l).unwrap().as_slice().to_vec())
        .collect();
    // A second engine too: nothing is global.
    let other = TextEncoder::load(&cpu_engine(), &m.text).unwrap();
    std::thread::scope(|s| {
        let mut jobs = Vec::new();
        for round in 0..3 {
            for (i, l) in lists.iter().enumerate() {
                let enc = if (round + i) % 2 == 0 {
                    enc.clone()
                } else {
                    other.clone()
                };
                jobs.push((i, s.spawn(move || enc.encode(l).unwrap())));
            }
        }
        for (i, j) in jobs {
            let got = j.join().unwrap();
            assert!(bits(got.as_slice()) == bits(&alone[i]), "list {i} differs");
        }
    });
}

#[test]
fn kimodo_generates_from_a_prompt_what_it_generates_from_its_embedding() {
    let m = models();
    let engine = cpu_engine();
    let kimodo =
        Kimodo::load_with_text(&engine, &m.kimodo, &m.text, TextOptions::default()).unwrap();
    let enc = kimodo.text_encoder().unwrap().clone();
    let prompt = "A person walks forward.";
    let req = GenerateRequest {
        steps: 3,
        noise: Noise::Seed(11),
        ..GenerateRequest::from_prompt(prompt, 10)
    };
    let mut stages = Vec::new();
    let from_prompt = kimodo
        .generate_with_progress(&req, &mut |stage, step, total| {
            stages.push((stage, step, total));
            Progress::Continue
        })
        .unwrap();
    assert_eq!(stages.first(), Some(&(Stage::Encode, 1, 1)));
    let embedding = enc.encode(&[prompt]).unwrap().row(0).unwrap().to_vec();
    let from_embedding = kimodo
        .generate(&GenerateRequest {
            text: TextInput::Embedding(embedding),
            ..req.clone()
        })
        .unwrap();
    assert_eq!(
        from_prompt.npz_bytes().unwrap(),
        from_embedding.npz_bytes().unwrap()
    );

    // The text encoder may live on another engine.
    let plain = Kimodo::load(&engine, &m.kimodo).unwrap();
    let e = plain.generate(&req).unwrap_err().to_string();
    assert!(e.contains("no text encoder"), "{e}");
    let other = TextEncoder::load(&cpu_engine(), &m.text).unwrap();
    let joined = plain.with_text_encoder(other).unwrap();
    assert_eq!(
        joined.generate(&req).unwrap().npz_bytes().unwrap(),
        from_embedding.npz_bytes().unwrap()
    );
}

#[test]
fn encoders_that_do_not_fit_are_refused() {
    let m = models();
    let engine = cpu_engine();
    let msg = |r: kinema::Result<Kimodo>| r.unwrap_err().to_string();
    let e = msg(Kimodo::load_with_text(
        &engine,
        &m.kimodo,
        &m.wide,
        TextOptions::default(),
    ));
    assert!(e.contains("64-wide") && e.contains("48-wide"), "{e}");
    let e = msg(Kimodo::load_with_text(
        &engine,
        &m.kimodo,
        &m.causal,
        TextOptions::default(),
    ));
    assert!(e.contains("causal") && e.contains("LLM2Vec"), "{e}");
    // The causal model still encodes on its own (it is a valid text model).
    let causal = TextEncoder::load(&engine, &m.causal).unwrap();
    assert_eq!(causal.encode(&["hi"]).unwrap().dim(), LLM_DIM);

    let enc = TextEncoder::load(&engine, &m.text).unwrap();
    let e = enc.encode(&[]).unwrap_err().to_string();
    assert!(e.contains("no prompt"), "{e}");
    let long = "word ".repeat(600);
    let refuse = TextEncoder::load_with(
        &engine,
        &m.text,
        TextOptions {
            long_text: kinema::LongText::Refuse,
            ..TextOptions::default()
        },
    )
    .unwrap();
    let e = refuse.encode(&[&long]).unwrap_err().to_string();
    assert!(e.contains("over LLM2Vec's limit"), "{e}");
    let e = TextEncoder::load(&engine, &m.kimodo)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a Llama text model"), "{e}");
}
