//! `kinema encode` on a seeded random tiny Llama (`tests/common/tiny_llama.rs`): the npz/npy
//! and its sidecar, the template modes, empty prompts, and bad input (each a clear error and
//! no output at all).

#[path = "common/tiny_llama.rs"]
mod tiny_llama;

use std::path::Path;
use std::process::{Command, Output};

use kinema::formats::{NpzReader, npy};
use tiny_llama::{HIDDEN, Spec};

fn kinema() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kinema"))
}

fn encode(model: &Path, args: &[&str], out: &Path) -> Output {
    kinema()
        .args(["encode", "--backend", "cpu", "--text-model"])
        .arg(model)
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run kinema")
}

fn sidecar(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.with_extension("json")).unwrap()).unwrap()
}

#[test]
fn encode_writes_embeddings_and_a_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    tiny_llama::write(&model, &Spec::default());

    // Several prompts (one empty) to an npz; auto = the file's default ("on").
    let out = dir.path().join("e.npz");
    let o = encode(
        &model,
        &[
            "--prompt",
            "A person walks.",
            "--prompt",
            "  ",
            "--prompt",
            "Jump",
        ],
        &out,
    );
    assert!(o.status.success(), "{o:?}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("empty") && stderr.contains("zeros"),
        "{stderr}"
    );
    let a = NpzReader::open(&out).unwrap().array("embeddings").unwrap();
    assert_eq!(a.shape, vec![3, HIDDEN]);
    let v = a.to_f32().unwrap();
    assert!(v[HIDDEN..2 * HIDDEN].iter().all(|&x| x == 0.0));
    assert!(v[..HIDDEN].iter().any(|&x| x != 0.0));
    let s = sidecar(&out);
    assert_eq!(s["chat_template"], "on");
    assert_eq!(s["chat_template_option"], "auto");
    assert_eq!(s["attention"], "bidirectional");
    assert_eq!(s["backend"], "cpu");
    assert_eq!(s["precision"], "strict");
    assert_eq!(s["model"]["architecture"], "llama");
    assert_eq!(s["prompts"][1]["empty"], true);
    // "A person walks." is 15 byte tokens (the tiny tokenizer has no merges): BOS, the header
    // (2 specials + "user" + "\n\n" = 8 tokens), the text, eot; pooled: the text and eot.
    assert_eq!(s["prompts"][0]["tokens"], 25);
    assert_eq!(s["prompts"][0]["pooled"], 16);
    assert!(s["notes"][0].as_str().unwrap().contains("zeros"));
    assert!(s["timings"]["total_s"].as_f64().unwrap() > 0.0);

    // One prompt, template off, to an npy: [1, hidden], and BOS + text pooled over the text.
    let npy_out = dir.path().join("one.npy");
    let o = encode(
        &model,
        &[
            "--prompt",
            "A person walks.",
            "--chat-template",
            "off",
            "--quiet",
        ],
        &npy_out,
    );
    assert!(o.status.success(), "{o:?}");
    assert!(
        o.stderr.is_empty(),
        "--quiet: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let a = npy::read_file(&npy_out).unwrap();
    assert_eq!(a.shape, vec![1, HIDDEN]);
    let off = a.to_f32().unwrap();
    assert_ne!(
        off,
        v[..HIDDEN].to_vec(),
        "the template changes the embedding"
    );
    let s = sidecar(&npy_out);
    assert_eq!(s["chat_template"], "off");
    assert_eq!(
        (
            s["prompts"][0]["tokens"].as_u64(),
            s["prompts"][0]["pooled"].as_u64()
        ),
        (Some(16), Some(15))
    );

    // The prompts file gives the same vectors as --prompt.
    let list = dir.path().join("prompts.json");
    std::fs::write(&list, r#"["A person walks.", "  ", "Jump"]"#).unwrap();
    let out2 = dir.path().join("f.npz");
    let o = encode(&model, &["--prompts-file", list.to_str().unwrap()], &out2);
    assert!(o.status.success(), "{o:?}");
    let w = NpzReader::open(&out2)
        .unwrap()
        .array("embeddings")
        .unwrap()
        .to_f32()
        .unwrap();
    assert_eq!(w, v);
}

/// Runs `encode` expecting failure with `needle` in stderr, and checks that neither the
/// output nor its sidecar was written.
fn refused(model: &Path, args: &[&str], out: &Path, needle: &str) {
    let o = encode(model, args, out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(
        stderr.contains(needle),
        "{args:?}: {stderr:?} lacks {needle:?}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !out.exists() && !out.with_extension("json").exists(),
        "{args:?} wrote output"
    );
}

#[test]
fn bad_input_is_a_clear_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = d.join("tiny.gguf");
    tiny_llama::write(&model, &Spec::default());
    let out = d.join("e.npz");
    let file = |name: &str, bytes: &[u8]| {
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_string()
    };

    let bad_utf8 = file("utf8.json", b"[\"ok\", \"bad \xff byte\"]");
    refused(&model, &["--prompts-file", &bad_utf8], &out, "string 1");
    let not_list = file("obj.json", br#"{"prompt": "a person walks"}"#);
    refused(
        &model,
        &["--prompts-file", &not_list],
        &out,
        "not a JSON list of strings",
    );
    let numbers = file("nums.json", br#"["a", 3]"#);
    refused(
        &model,
        &["--prompts-file", &numbers],
        &out,
        "not a JSON list of strings",
    );
    let empty = file("empty.json", b"[]");
    refused(&model, &["--prompts-file", &empty], &out, "no prompt");
    refused(&model, &[], &out, "--prompt");
    refused(
        &model,
        &["--prompt", "x", "--chat-template", "maybe"],
        &out,
        "--chat-template",
    );

    // 500 words of one byte token each (plus spaces): over 400 text tokens.
    let long = vec!["a"; 500].join(" ");
    refused(
        &model,
        &["--prompt", &long, "--long-text", "refuse"],
        &out,
        "over LLM2Vec's limit",
    );
    // Trimmed as upstream by default, and said so.
    let o = encode(&model, &["--prompt", &long], &out);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(sidecar(&out)["prompts"][0]["trimmed"], true);
    std::fs::remove_file(&out).unwrap();
    std::fs::remove_file(out.with_extension("json")).unwrap();

    refused(&model, &["--prompt", "x"], &d.join("e.txt"), ".npz");

    let vocab = d.join("vocab.gguf");
    tiny_llama::write(
        &vocab,
        &Spec {
            tokenizer_vocab: tiny_llama::VOCAB + 5,
            ..Spec::default()
        },
    );
    refused(&vocab, &["--prompt", "x"], &out, "embedding table has");

    let mut w = kinema::formats::GgufWriter::new();
    w.add_metadata("general.architecture", "kimodo").unwrap();
    let kimodo = d.join("kimodo.gguf");
    w.write(&kimodo).unwrap();
    refused(&kimodo, &["--prompt", "x"], &out, "not a Llama text model");

    let mut w = kinema::formats::GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    let bare = d.join("bare.gguf");
    w.write(&bare).unwrap();
    refused(&bare, &["--prompt", "x"], &out, "llama.embedding_length");

    refused(
        &d.join("missing.gguf"),
        &["--prompt", "x"],
        &out,
        "missing.gguf",
    );
}
