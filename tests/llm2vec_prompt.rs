//! `kinema generate --prompt` (issue 11, part 6): the prompt's embedding comes from the text
//! model, through the on-disk cache (hit, miss, a corrupt entry ignored and rewritten,
//! `--no-cache`), and equals what `kinema encode` computes; a text model whose width is not
//! the motion model's is refused before any work, naming both widths.

#[path = "common/tiny_llama.rs"]
mod tiny_llama;

use std::path::Path;
use std::process::Command;

use kinema::cpu::CpuBackend;
use kinema::formats::npy;
use kinema::models::llm2vec::encode::TemplateChoice;
use kinema::models::llm2vec::prompt_cache::embed_prompt;
use kinema::precision::Precision;
use tiny_llama::{HIDDEN, Spec};

fn kinema() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kinema"))
}

fn encode_one(model: &Path, prompt: &str, dir: &Path) -> Vec<f32> {
    let out = dir.join("want.npy");
    let o = kinema()
        .args(["encode", "--backend", "cpu", "--text-model"])
        .arg(model)
        .args(["--prompt", prompt, "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    npy::read_file(&out).unwrap().to_f32().unwrap()
}

#[test]
fn the_cache_is_keyed_checked_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    tiny_llama::write(&model, &Spec::default());
    let cache = dir.path().join("cache");
    let cpu = CpuBackend::new(Precision::Strict).unwrap();
    let prompt = "A person walks forward.";
    let want = encode_one(&model, prompt, dir.path());
    let run =
        |template| embed_prompt(&cpu, &model, prompt, template, HIDDEN, Some(&cache)).unwrap();

    let first = run(TemplateChoice::Auto);
    assert!(!first.cache_hit && first.template);
    assert_eq!(
        first.embedding, want,
        "generate --prompt embeds as encode does"
    );
    let entry = first.cache_entry.clone().unwrap();
    assert!(entry.starts_with(&cache) && entry.exists());

    let again = run(TemplateChoice::Auto);
    assert!(again.cache_hit, "the second run reads the cache");
    assert_eq!(again.embedding, want);
    assert_eq!(again.cache_entry.as_ref(), Some(&entry));

    // Another template mode is another key (and another embedding).
    let off = run(TemplateChoice::Off);
    assert!(!off.cache_hit && !off.template);
    assert_ne!(off.cache_entry.as_ref(), Some(&entry));
    assert_ne!(off.embedding, want);

    // A corrupt entry is ignored, said so, and rewritten.
    std::fs::write(&entry, b"not an npy").unwrap();
    let fixed = run(TemplateChoice::Auto);
    assert!(!fixed.cache_hit);
    assert!(
        fixed.notes.iter().any(|n| n.contains("corrupt")),
        "{:?}",
        fixed.notes
    );
    assert_eq!(fixed.embedding, want);
    assert_eq!(npy::read_file(&entry).unwrap().to_f32().unwrap(), want);

    // An entry of the right shape holding NaN is not trusted either.
    let mut bad = want.clone();
    bad[3] = f32::NAN;
    npy::write_file(
        &entry,
        &kinema::formats::NpyArray::from_f32(&[1, HIDDEN], &bad).unwrap(),
    )
    .unwrap();
    let fixed = run(TemplateChoice::Auto);
    assert!(!fixed.cache_hit && fixed.embedding == want);

    // No cache: computed, nothing stored.
    let none = embed_prompt(
        &cpu,
        &model,
        "Someone jumps",
        TemplateChoice::Auto,
        HIDDEN,
        None,
    )
    .unwrap();
    assert!(none.cache_entry.is_none() && !none.cache_hit);
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 2);

    // The width the motion model needs is checked before any work.
    let e = embed_prompt(&cpu, &model, prompt, TemplateChoice::Auto, 48, Some(&cache))
        .unwrap_err()
        .to_string();
    assert!(e.contains("64-wide") && e.contains("48-wide"), "{e}");
}

#[test]
fn generate_with_a_prompt_refuses_a_text_model_of_another_width() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("tiny.gguf");
    tiny_llama::write(&text, &Spec::default());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let motion = dir.path().join("soma30.gguf");
    let o = kinema()
        .args(["convert", "kimodo", "--quiet"])
        .arg(root.join("tests/fixtures/kimodo/soma30/checkpoint"))
        .arg("-o")
        .arg(&motion)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = dir.path().join("m.npz");
    let o = kinema()
        .args(["generate", "--backend", "cpu", "--model"])
        .arg(&motion)
        .args(["--prompt", "a person walks", "--text-model"])
        .arg(&text)
        .args(["--frames", "8", "--steps", "2", "--cache-dir"])
        .arg(dir.path().join("cache"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("64-wide") && err.contains("48-wide"), "{err}");
    assert!(!out.exists() && !out.with_extension("json").exists());

    // --prompt needs --text-model, and excludes --embedding.
    let o = kinema()
        .args(["generate", "--model"])
        .arg(&motion)
        .args(["--prompt", "a person walks", "--frames", "8", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--text-model"));
}
