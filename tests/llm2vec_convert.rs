//! `kinema convert llm2vec` (issue 11 parts 2 and 4) on the tiny Llama-3 and PEFT adapters
//! that `reference/capture_llm2vec.py` built and ran through the real upstream LLM2Vec
//! (`tests/fixtures/llm2vec/tiny/`): merged weights equal PEFT's own merge, identities and the
//! chat-template default are recorded as upstream decides, the tokenizer read back from the
//! GGUF gives the ids of `tokenizer.json` and of Hugging Face `tokenizers`, and every bad input
//! is refused with an error naming the file and the tensor, leaving no output behind.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use half::{bf16, f16};
use kinema::DType;
use kinema::formats::{GgufArray, GgufFile, NpzReader, SafeTensors};
use kinema::models::llm2vec::convert::{CONVERTER_VERSION, Sources, convert, keys};
use kinema::models::llm2vec::hf_config::{Llama3RopeScaling, gguf_tokenizer, llama3_rope_divisors};
use kinema::models::llm2vec::tokenizer::Tokenizer;
use kinema::models::llm2vec::tokenizer::strings::parse_strings;
use kinema::tensor::{Q8_0_BLOCK, Q8_0_BLOCK_BYTES, q8_0_quantize_block};
use serde_json::Value;
use sha2::{Digest, Sha256};

const BASE: &str = "Meta-Llama-3-8B-Instruct";
const MNTP: &str = "LLM2Vec-Meta-Llama-3-8B-Instruct-mntp";
const SUP: &str = "LLM2Vec-Meta-Llama-3-8B-Instruct-mntp-supervised";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm2vec/tiny")
}

fn capture() -> NpzReader {
    NpzReader::open(fixture_dir().join("capture.npz")).unwrap()
}

fn f32s(npz: &NpzReader, name: &str) -> Vec<f32> {
    npz.array(name).unwrap().to_f32().unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// A writable copy of the fixture's three folders.
struct Copy {
    tmp: tempfile::TempDir,
}

impl Copy {
    fn new() -> Copy {
        let tmp = tempfile::tempdir().unwrap();
        copy_dir(&fixture_dir(), tmp.path());
        Copy { tmp }
    }
    fn dir(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
    fn out(&self) -> PathBuf {
        self.tmp.path().join("text.gguf")
    }
    fn sources(&self, adapters: &[&str]) -> Sources {
        Sources {
            base: self.dir(BASE),
            adapters: adapters.iter().map(|a| self.dir(a)).collect(),
        }
    }
    fn edit_json(&self, file: &str, f: impl FnOnce(&mut Value)) {
        let p = self.tmp.path().join(file);
        let mut v: Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        f(&mut v);
        fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    }
    /// Overwrites the f32 value at flat index `at` of tensor `name` in a safetensors file.
    fn poke(&self, file: &str, name: &str, at: usize, x: f32) {
        let p = self.tmp.path().join(file);
        let bytes = fs::read(&p).unwrap();
        let st = SafeTensors::parse(bytes.clone()).unwrap();
        let header = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let off = header + st.info(name).unwrap().data_offsets.0 + 4 * at;
        let mut bytes = bytes;
        bytes[off..off + 4].copy_from_slice(&x.to_le_bytes());
        fs::write(&p, bytes).unwrap();
    }
    /// The conversion's error, after checking that it left no output.
    fn refused(&self, adapters: &[&str]) -> String {
        let e = convert(&self.sources(adapters), &self.out(), DType::F32)
            .unwrap_err()
            .to_string();
        assert!(!self.out().exists(), "a refused conversion left {e}");
        e
    }
}

fn hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

fn gguf_name(hf: &str) -> String {
    if hf == "embed_tokens.weight" {
        return "token_embd.weight".into();
    }
    if hf == "norm.weight" {
        return "output_norm.weight".into();
    }
    let rest = hf.strip_prefix("layers.").unwrap();
    let (i, rest) = rest.split_once('.').unwrap();
    let g = match rest {
        "input_layernorm.weight" => "attn_norm",
        "post_attention_layernorm.weight" => "ffn_norm",
        "self_attn.q_proj.weight" => "attn_q",
        "self_attn.k_proj.weight" => "attn_k",
        "self_attn.v_proj.weight" => "attn_v",
        "self_attn.o_proj.weight" => "attn_output",
        "mlp.gate_proj.weight" => "ffn_gate",
        "mlp.up_proj.weight" => "ffn_up",
        "mlp.down_proj.weight" => "ffn_down",
        r => panic!("unknown tensor {r}"),
    };
    format!("blk.{i}.{g}.weight")
}

/// The merged weights equal PEFT's `merge_and_unload` (the MNTP adapter merged at load, the
/// supervised one merged at the end) up to f32 summation order: the LoRA product is a sum of
/// r terms, which torch's GEMM may accumulate in another order or with FMA. Tensors without
/// an adapter are bit-exact.
#[test]
fn merged_tensors_identities_and_template_default_match_the_capture() {
    let c = Copy::new();
    let conv = convert(&c.sources(&[MNTP, SUP]), &c.out(), DType::F32).unwrap();
    assert!(conv.config.chat_template_default);
    assert_eq!(conv.tensors, 1 + 4 * 9 + 1);
    let g = GgufFile::open(c.out()).unwrap();
    let npz = capture();
    let meta: Value =
        serde_json::from_slice(&fs::read(fixture_dir().join("capture.json")).unwrap()).unwrap();
    let mut worst = 0f32;
    for n in meta["merged_checked"].as_array().unwrap() {
        let n = n.as_str().unwrap();
        let want = f32s(&npz, &format!("merged.{n}"));
        let got = g.tensor(&gguf_name(n)).unwrap().to_f32_vec().unwrap();
        assert_eq!(got.len(), want.len(), "{n}");
        let lora = n.contains("_proj");
        for (a, b) in got.iter().zip(&want) {
            let d = (a - b).abs();
            if lora {
                // Entries are O(0.3); 4 ulps of f32 at that size.
                assert!(d <= 1e-7 * 4.0 * 4.0, "{n}: {a} vs {b}");
                worst = worst.max(d);
            } else {
                assert_eq!(a.to_bits(), b.to_bits(), "{n}");
            }
        }
    }
    eprintln!("merged LoRA projections: max |kinema - PEFT| = {worst:e}");
    assert!(g.tensor_info("output.weight").is_none());
    assert!(g.tensor_info("rope_freqs.weight").is_none());

    let s = |k: &str| g.get_str(k).unwrap().to_string();
    let u = |k: &str| g.get_u32(k).unwrap();
    assert_eq!(s("general.architecture"), "llama");
    assert_eq!(
        [
            u("llama.block_count"),
            u("llama.embedding_length"),
            u("llama.feed_forward_length"),
            u("llama.attention.head_count"),
            u("llama.attention.head_count_kv"),
            u("llama.context_length"),
            u("llama.vocab_size"),
        ],
        [4, 64, 128, 4, 2, 512, 1024]
    );
    assert_eq!(
        g.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap(),
        1e-5
    );
    assert_eq!(g.get_f32("llama.rope.freq_base").unwrap(), 500000.0);
    assert_eq!(s(keys::ROPE_PAIRING), "rotate_half");
    assert_eq!(s(keys::ATTENTION), "bidirectional");
    assert_eq!(s(keys::POOLING), "mean");
    assert_eq!(u(keys::MAX_LENGTH), 512);
    assert_eq!(s(keys::CHAT_TEMPLATE_DEFAULT), "on");
    assert_eq!(
        s(keys::TEMPLATE_NAME),
        "meta-llama/Meta-Llama-3-8B-Instruct"
    );
    assert_eq!(s(keys::BASE_NAME), "");
    assert_eq!(s(keys::CONVERTER_VERSION), CONVERTER_VERSION);
    let Some(GgufArray::Array(ads)) = g.get_array(keys::ADAPTERS).ok().cloned() else {
        panic!("no adapter identities");
    };
    let ads: Vec<Vec<String>> = ads
        .into_iter()
        .map(|a| match a {
            GgufArray::String(v) => v,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        ads,
        [
            ["meta-llama/Meta-Llama-3-8B-Instruct", MNTP],
            ["McGill-NLP/LLM2Vec-Meta-Llama-3-8B-Instruct-mntp", SUP]
        ]
    );
    // The SHA-256 of every file read, and nothing else.
    let mut want = vec![];
    for f in [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "model.safetensors.index.json",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
    ] {
        want.push((format!("base/{f}"), c.dir(BASE).join(f)));
    }
    for (k, d) in [(1, MNTP), (2, SUP)] {
        for f in ["adapter_config.json", "adapter_model.safetensors"] {
            want.push((format!("adapter{k}/{f}"), c.dir(d).join(f)));
        }
    }
    let recorded: Vec<(String, String)> = g
        .metadata()
        .iter()
        .filter_map(|(k, v)| {
            Some((
                k.strip_prefix(keys::SOURCE_SHA256_PREFIX)?.to_string(),
                v.as_str()?.to_string(),
            ))
        })
        .collect();
    assert_eq!(recorded.len(), want.len());
    for (label, path) in want {
        let h = recorded.iter().find(|(l, _)| *l == label).unwrap();
        assert_eq!(h.1, hex(&fs::read(path).unwrap()), "{label}");
    }
    assert_eq!(conv.sources, recorded);
}

/// `--dtype bf16|f16|q8_0` store the f32 merge cast once: round to nearest even, and GGML's
/// q8_0 reference quantisation per 32-value block; norms stay f32.
#[test]
fn dtypes_cast_the_f32_merge_once() {
    let c = Copy::new();
    convert(&c.sources(&[MNTP, SUP]), &c.out(), DType::F32).unwrap();
    let f = GgufFile::open(c.out()).unwrap();
    for dtype in [DType::BF16, DType::F16, DType::Q8_0] {
        let out = c.tmp.path().join(format!("{dtype}.gguf"));
        convert(&c.sources(&[MNTP, SUP]), &out, dtype).unwrap();
        let g = GgufFile::open(&out).unwrap();
        assert_eq!(g.tensors().len(), f.tensors().len());
        for t in f.tensors() {
            let want = f.tensor(&t.name).unwrap().to_f32_vec().unwrap();
            let info = g.tensor_info(&t.name).unwrap();
            let bytes = g.tensor_bytes(&t.name).unwrap();
            if t.shape.len() == 1 {
                assert_eq!(info.dtype, DType::F32, "{}", t.name);
                continue;
            }
            assert_eq!(info.dtype, dtype, "{}", t.name);
            let expect: Vec<u8> = match dtype {
                DType::BF16 => want
                    .iter()
                    .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
                    .collect(),
                DType::F16 => want
                    .iter()
                    .flat_map(|&x| f16::from_f32(x).to_le_bytes())
                    .collect(),
                _ => {
                    let mut o = vec![0u8; want.len() / Q8_0_BLOCK * Q8_0_BLOCK_BYTES];
                    for (x, b) in want
                        .chunks_exact(Q8_0_BLOCK)
                        .zip(o.chunks_exact_mut(Q8_0_BLOCK_BYTES))
                    {
                        q8_0_quantize_block(x, b);
                    }
                    o
                }
            };
            assert!(bytes == expect.as_slice(), "{} {dtype}", t.name);
        }
    }
}

/// The chat-template default is what upstream would do with the identities read
/// (llm2vec.md §2.5): the first adapter's base name, else config.json's `_name_or_path`.
#[test]
fn template_default_follows_the_identities_read() {
    let c = Copy::new();
    let conv = convert(&c.sources(&[]), &c.out(), DType::F32).unwrap();
    assert!(!conv.config.chat_template_default);
    let g = GgufFile::open(c.out()).unwrap();
    assert_eq!(g.get_str(keys::CHAT_TEMPLATE_DEFAULT).unwrap(), "off");
    assert_eq!(g.get_str(keys::TEMPLATE_NAME).unwrap(), "");
    assert_eq!(g.get_array(keys::ADAPTERS).unwrap().len(), 0);
    c.edit_json(&format!("{BASE}/config.json"), |v| {
        v["_name_or_path"] = "meta-llama/Meta-Llama-3-8B-Instruct".into();
    });
    let conv = convert(&c.sources(&[]), &c.out(), DType::F32).unwrap();
    assert!(conv.config.chat_template_default);
    let g = GgufFile::open(c.out()).unwrap();
    assert_eq!(
        g.get_str(keys::BASE_NAME).unwrap(),
        "meta-llama/Meta-Llama-3-8B-Instruct"
    );
    assert_eq!(g.get_str(keys::CHAT_TEMPLATE_DEFAULT).unwrap(), "on");
    // An adapter whose base is another model name turns it off, as upstream would.
    c.edit_json(&format!("{MNTP}/adapter_config.json"), |v| {
        v["base_model_name_or_path"] = "someone/Meta-Llama-3-8B-Instruct".into();
    });
    let conv = convert(&c.sources(&[MNTP]), &c.out(), DType::F32).unwrap();
    assert!(!conv.config.chat_template_default);
}

fn strings() -> Vec<String> {
    // Lone surrogates (escaped in the JSON) become U+FFFD, as the tokenizer tests read them.
    parse_strings(&fs::read(fixture_dir().join("../tokenizer_strings.json")).unwrap()).unwrap()
}

/// The tokenizer read back from the GGUF gives the ids of the tiny `tokenizer.json` read by
/// kinema and of Hugging Face `tokenizers` (capture), for all the shared test strings.
#[test]
fn gguf_tokenizer_gives_the_ids_of_tokenizer_json() {
    let c = Copy::new();
    convert(&c.sources(&[]), &c.out(), DType::F32).unwrap();
    let from_gguf = Tokenizer::open(c.out()).unwrap();
    let from_json = Tokenizer::open(c.dir(BASE).join("tokenizer.json")).unwrap();
    assert_eq!(from_gguf.format(), "gguf");
    assert_eq!(from_gguf.vocab_size(), 1024);
    assert_eq!(from_gguf.bos_id(), Some(768));
    assert_eq!(from_gguf.eos_id(), Some(777));
    assert_eq!(from_gguf.special_id("<|eot_id|>"), Some(777));
    let hf: Value =
        serde_json::from_slice(&fs::read(fixture_dir().join("tokenizer_ids.json")).unwrap())
            .unwrap();
    let hf = hf["ids"].as_array().unwrap();
    let strings = strings();
    assert_eq!(strings.len(), hf.len());
    let mut compared = 0;
    for (s, want) in strings.iter().zip(hf) {
        let a = from_gguf.encode(s, false).unwrap();
        assert_eq!(a, from_json.encode(s, false).unwrap(), "{s:?}");
        assert_eq!(
            from_gguf.encode(s, true).unwrap(),
            from_json.encode(s, true).unwrap()
        );
        if let Some(w) = want.as_array() {
            let w: Vec<u32> = w.iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(a, w, "{s:?}");
            compared += 1;
        }
    }
    assert!(compared > 700, "{compared}");
}

/// The full Llama-3 tokenizer.json (`capture_tokenizer.py --write-tokenizer-json`, or a Hub
/// copy, named by `KINEMA_LLAMA3_TOKENIZER_JSON`) written as GGUF metadata gives the tiktoken
/// ids of `tokenizer_llama3.json` for every string; skipped without it.
#[test]
fn llama3_tokenizer_json_as_gguf_gives_tiktoken_ids() {
    let Ok(p) = std::env::var("KINEMA_LLAMA3_TOKENIZER_JSON") else {
        eprintln!("skipped: set KINEMA_LLAMA3_TOKENIZER_JSON to a Llama-3 tokenizer.json");
        return;
    };
    let json = fs::read(p).unwrap();
    let cfg = br#"{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}"#;
    let meta = gguf_tokenizer(&json, cfg).unwrap();
    let tok = Tokenizer::from_gguf_metadata(&meta).unwrap();
    assert_eq!(tok.vocab_size(), 128_256);
    assert_eq!(tok.bos_id(), Some(128_000));
    assert_eq!(tok.eos_id(), Some(128_009));
    let f: Value =
        serde_json::from_slice(&fs::read(fixture_dir().join("../tokenizer_llama3.json")).unwrap())
            .unwrap();
    for (s, want) in strings().iter().zip(f["tiktoken"].as_array().unwrap()) {
        let w: Vec<u32> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(s, false).unwrap(), w, "{s:?}");
    }
}

/// `rope_freqs` divisors for Llama-3 RoPE scaling as transformers computes them
/// (`_compute_llama3_parameters`, captured): inv_freq_default / divisor = inv_freq_llama3 to
/// f32 rounding (torch's `base ** x` and Rust's `powf` may differ by an ulp), and the file
/// holds them when config.json asks for the scaling.
#[test]
fn llama3_rope_divisors_match_transformers() {
    let npz = capture();
    let s = Llama3RopeScaling {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192.0,
    };
    for d in [128usize, 16] {
        let default = f32s(&npz, &format!("rope_default_d{d}_inv_freq"));
        let llama = f32s(&npz, &format!("rope_llama3_d{d}_inv_freq"));
        let div = llama3_rope_divisors(500000.0, d, &s);
        assert_eq!(div.len(), d / 2);
        for i in 0..d / 2 {
            let want = default[i] / llama[i];
            assert!(
                (div[i] - want).abs() <= 1e-6 * want,
                "d {d} i {i}: {} vs {want}",
                div[i]
            );
        }
    }
    let c = Copy::new();
    c.edit_json(&format!("{BASE}/config.json"), |v| {
        v["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192});
    });
    convert(&c.sources(&[]), &c.out(), DType::BF16).unwrap();
    let g = GgufFile::open(c.out()).unwrap();
    let t = g.tensor("rope_freqs.weight").unwrap();
    assert_eq!((t.dtype, t.shape.clone()), (DType::F32, vec![8]));
    assert_eq!(
        t.to_f32_vec().unwrap(),
        llama3_rope_divisors(500000.0, 16, &s)
    );
}

#[test]
fn refuses_adapters_that_do_not_fit() {
    let c = Copy::new();
    // The supervised adapter alone: trained on the MNTP model, not on the base.
    let e = c.refused(&[SUP]);
    assert!(
        e.contains("adapter_config.json")
            && e.contains("McGill-NLP/LLM2Vec-Meta-Llama-3-8B-Instruct-mntp")
            && e.contains("training order"),
        "{e}"
    );
    // In the wrong order.
    let e = c.refused(&[SUP, MNTP]);
    assert!(e.contains("base_model_name_or_path"), "{e}");
    // Target modules that disagree with the adapter's tensors.
    c.edit_json(&format!("{MNTP}/adapter_config.json"), |v| {
        v["target_modules"] = serde_json::json!(["q_proj", "k_proj"]);
    });
    let e = c.refused(&[MNTP, SUP]);
    assert!(
        e.contains("adapter_model.safetensors")
            && e.contains(
                "unexpected tensor \"base_model.model.layers.0.self_attn.v_proj.lora_A.weight\""
            ),
        "{e}"
    );
    c.edit_json(&format!("{MNTP}/adapter_config.json"), |v| {
        v["target_modules"] = serde_json::json!([
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
            "lm_head"
        ]);
    });
    let e = c.refused(&[MNTP, SUP]);
    assert!(
        e.contains("adapter_config.json") && e.contains("\"lm_head\""),
        "{e}"
    );
    c.edit_json(&format!("{MNTP}/adapter_config.json"), |v| {
        v["target_modules"] = serde_json::json!([
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj"
        ]);
        v["r"] = 8.into();
    });
    let e = c.refused(&[MNTP, SUP]);
    assert!(
        e.contains("lora_A.weight\" has shape [4, 64], expected [8, 64]"),
        "{e}"
    );
    c.edit_json(&format!("{MNTP}/adapter_config.json"), |v| {
        v["r"] = 4.into();
        v["use_dora"] = true.into();
    });
    assert!(c.refused(&[MNTP, SUP]).contains("use_dora"));
    c.edit_json(&format!("{MNTP}/adapter_config.json"), |v| {
        v["use_dora"] = false.into();
    });
    // A NaN in an adapter.
    c.poke(
        &format!("{SUP}/adapter_model.safetensors"),
        "base_model.model.layers.2.mlp.up_proj.lora_B.weight",
        5,
        f32::NAN,
    );
    let e = c.refused(&[MNTP, SUP]);
    assert!(
        e.contains(SUP)
            && e.contains("adapter_model.safetensors")
            && e.contains("layers.2.mlp.up_proj.lora_B.weight\" holds the non-finite value NaN at flat index 5"),
        "{e}"
    );
}

/// The shard holding a tensor, from the fixture's index.
fn shard_of(c: &Copy, tensor: &str) -> String {
    let idx: Value = serde_json::from_slice(
        &fs::read(c.dir(BASE).join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    idx["weight_map"][tensor].as_str().unwrap().to_string()
}

#[test]
fn refuses_bad_base_checkpoints() {
    // A NaN or an infinity in a base weight.
    for x in [f32::NAN, f32::INFINITY] {
        let c = Copy::new();
        let t = "model.layers.1.mlp.gate_proj.weight";
        let shard = shard_of(&c, t);
        c.poke(&format!("{BASE}/{shard}"), t, 17, x);
        let e = c.refused(&[MNTP, SUP]);
        assert!(
            e.contains(&shard)
                && e.contains(&format!(
                    "{t:?} holds the non-finite value {x} at flat index 17"
                )),
            "{e}"
        );
    }
    // A missing shard.
    let c = Copy::new();
    let shard = shard_of(&c, "model.norm.weight");
    fs::remove_file(c.dir(BASE).join(&shard)).unwrap();
    let e = c.refused(&[MNTP, SUP]);
    assert!(e.contains(&shard) && e.contains("missing shard"), "{e}");
    // An index that puts a tensor in a shard that lacks it.
    let c = Copy::new();
    let other = shard_of(&c, "model.embed_tokens.weight");
    c.edit_json(&format!("{BASE}/model.safetensors.index.json"), |v| {
        let norm = v["weight_map"]["model.norm.weight"]
            .as_str()
            .unwrap()
            .to_string();
        let moved = if norm == other {
            "model.layers.3.mlp.up_proj.weight"
        } else {
            "model.norm.weight"
        };
        v["weight_map"][moved] = other.clone().into();
    });
    let e = c.refused(&[]);
    assert!(
        e.contains("which lacks it") || e.contains("does not list it"),
        "{e}"
    );
    // Shapes that disagree with config.json.
    let c = Copy::new();
    c.edit_json(&format!("{BASE}/config.json"), |v| {
        v["intermediate_size"] = 96.into();
    });
    let e = c.refused(&[]);
    assert!(
        e.contains("model.layers.0.mlp.gate_proj.weight\" has shape [128, 64], config.json implies [96, 64]")
            && e.contains(".safetensors"),
        "{e}"
    );
    // A tokenizer from another model.
    let c = Copy::new();
    c.edit_json(&format!("{BASE}/config.json"), |v| {
        v["vocab_size"] = 1000.into();
    });
    let e = c.refused(&[]);
    assert!(
        e.contains("1024 token ids") && e.contains("vocab_size is 1000"),
        "{e}"
    );
    // Not a Llama.
    let c = Copy::new();
    c.edit_json(&format!("{BASE}/config.json"), |v| {
        v["model_type"] = "mistral".into();
    });
    let e = c.refused(&[]);
    assert!(e.contains("config.json") && e.contains("mistral"), "{e}");
    // The output may not be an input.
    let c = Copy::new();
    let e = convert(
        &c.sources(&[]),
        &c.dir(BASE).join("tokenizer.json"),
        DType::F32,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("destroy its own input"), "{e}");
    // An unsupported dtype.
    let e = convert(&c.sources(&[]), &c.out(), DType::I32)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--dtype"), "{e}");
}

#[test]
fn cli_converts_and_reports() {
    let c = Copy::new();
    let run = |dtype: &str| {
        Command::new(env!("CARGO_BIN_EXE_kinema"))
            .args(["convert", "llm2vec", "--base"])
            .arg(c.dir(BASE))
            .arg("--adapter")
            .arg(c.dir(MNTP))
            .arg("--adapter")
            .arg(c.dir(SUP))
            .args(["--dtype", dtype, "-o"])
            .arg(c.out())
            .output()
            .unwrap()
    };
    let o = run("q8_0");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("chat template default on") && err.contains("q8_0"),
        "{err}"
    );
    let g = GgufFile::open(c.out()).unwrap();
    assert_eq!(
        g.tensor_info("blk.0.attn_q.weight").unwrap().dtype,
        DType::Q8_0
    );
    fs::remove_file(c.out()).unwrap();
    let o = run("q4_0");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--dtype") && err.contains("q8_0"), "{err}");
    assert!(!c.out().exists());
}

/// The fuzz target's seeds are valid inputs of the parser their first byte selects (so the
/// fuzzer starts from files that reach the checks after parsing).
#[test]
fn llm2vec_sources_fuzz_seeds_parse() {
    use kinema::formats::safetensors_index::parse_index;
    use kinema::models::llm2vec::hf_config::{LlamaConfig, LoraConfig};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/llm2vec_sources");
    let mut seen = [0usize; 4];
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let b = fs::read(&p).unwrap();
        let (&which, rest) = b.split_first().unwrap();
        let which = which as usize % 4;
        seen[which] += 1;
        let ok = match which {
            0 => parse_index(rest).is_ok(),
            1 => LlamaConfig::parse(rest).is_ok(),
            2 => LoraConfig::parse(rest).and_then(|c| c.targets(3)).is_ok(),
            _ => {
                let i = rest.iter().position(|&x| x == 0).unwrap();
                let meta = gguf_tokenizer(&rest[..i], &rest[i + 1..]).unwrap();
                let t = Tokenizer::from_gguf_metadata(&meta).unwrap();
                t.encode("A person walks.", true).unwrap().len() > 1
            }
        };
        assert!(ok, "{}", p.display());
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}

fn i32s(npz: &NpzReader, name: &str) -> Vec<i64> {
    npz.array(name)
        .unwrap()
        .to_f32()
        .unwrap()
        .iter()
        .map(|&x| x as i64)
        .collect()
}

/// The capture's inputs are what kinema's prompt pipeline builds with the tokenizer read back
/// from the converted GGUF (ids and pooled span, both template modes), and the GGUF's
/// template default ("on" here: the MNTP adapter's base is Meta-Llama-3-8B-Instruct) is the
/// mode upstream ran with that name. Also checks the fixture's own consistency: pooled =
/// mean of the last `sum(embed_mask)` rows of the final-norm output, the embed mask a
/// trailing run of ones, the padded batch left-padded with the EOS id.
#[test]
fn capture_inputs_are_what_kinema_builds_from_the_converted_file() {
    use kinema::models::llm2vec::prompt::llm2vec_input;
    let c = Copy::new();
    convert(&c.sources(&[MNTP, SUP]), &c.out(), DType::BF16).unwrap();
    let g = GgufFile::open(c.out()).unwrap();
    assert_eq!(g.get_str(keys::CHAT_TEMPLATE_DEFAULT).unwrap(), "on");
    let tok = Tokenizer::open(c.out()).unwrap();
    let npz = capture();
    let meta: Value =
        serde_json::from_slice(&fs::read(fixture_dir().join("capture.json")).unwrap()).unwrap();
    assert_eq!(
        meta["modes"]["on"]["model_name"],
        "meta-llama/Meta-Llama-3-8B-Instruct"
    );
    let prompts: Vec<String> = serde_json::from_value(meta["prompts"].clone()).unwrap();
    let hidden = 64;
    for mode in ["on", "off"] {
        for (i, p) in prompts.iter().enumerate() {
            let k = format!("{mode}_p{i}");
            let ids = i32s(&npz, &format!("{k}_input_ids"));
            let mask = i32s(&npz, &format!("{k}_embed_mask"));
            let n = mask.iter().sum::<i64>() as usize;
            assert!(mask[..mask.len() - n].iter().all(|&m| m == 0), "{k}");
            let input = llm2vec_input(&tok, p, mode == "on").unwrap();
            let want: Vec<u32> = ids.iter().map(|&x| x as u32).collect();
            assert_eq!(input.ids, want, "{k}");
            assert_eq!(input.pooled, n, "{k}");
            let fin = f32s(&npz, &format!("{k}_final_norm"));
            let pooled = f32s(&npz, &format!("{k}_pooled"));
            let t = ids.len();
            assert_eq!(fin.len(), t * hidden);
            for j in 0..hidden {
                let mean = (t - n..t).map(|r| fin[r * hidden + j]).sum::<f32>() / n as f32;
                assert!((mean - pooled[j]).abs() <= 1e-6, "{k} {j}");
            }
        }
        let ids = npz.array(&format!("{mode}_batch_input_ids")).unwrap();
        let am = i32s(&npz, &format!("{mode}_batch_attention_mask"));
        let (rows, len) = (ids.shape[0], ids.shape[1]);
        assert_eq!(rows, prompts.len());
        let ids = i32s(&npz, &format!("{mode}_batch_input_ids"));
        let order: Vec<usize> =
            serde_json::from_value(meta["modes"][mode]["batch_row_order"].clone()).unwrap();
        for (r, &pi) in order.iter().enumerate() {
            let single = i32s(&npz, &format!("{mode}_p{pi}_input_ids"));
            let pad = len - single.len();
            assert_eq!(&ids[r * len + pad..(r + 1) * len], single.as_slice());
            assert!(ids[r * len..r * len + pad].iter().all(|&x| x == 777));
            assert!(am[r * len..r * len + pad].iter().all(|&x| x == 0));
            assert!(am[r * len + pad..(r + 1) * len].iter().all(|&x| x == 1));
        }
    }
}

/// A base stored as one `model.safetensors` (no index) converts to the same tensors as the
/// sharded one, and its hash is recorded under `base/model.safetensors`.
#[test]
fn a_single_file_base_converts_like_the_shards() {
    let c = Copy::new();
    convert(&c.sources(&[MNTP]), &c.out(), DType::F32).unwrap();
    let sharded = GgufFile::open(c.out()).unwrap();
    let base = c.dir(BASE);
    let mut all: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for e in fs::read_dir(&base).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            let st = SafeTensors::open(&p).unwrap();
            for t in st.tensors() {
                all.push((
                    t.name.clone(),
                    t.shape.clone(),
                    st.tensor_bytes(&t.name).unwrap().to_vec(),
                ));
            }
            fs::remove_file(&p).unwrap();
        }
    }
    fs::remove_file(base.join("model.safetensors.index.json")).unwrap();
    let views: Vec<(String, safetensors::tensor::TensorView)> = all
        .iter()
        .map(|(n, s, b)| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                .unwrap();
            (n.clone(), v)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &base.join("model.safetensors")).unwrap();
    let out = c.tmp.path().join("single.gguf");
    let conv = convert(&c.sources(&[MNTP]), &out, DType::F32).unwrap();
    assert!(
        conv.sources
            .iter()
            .any(|(l, _)| l == "base/model.safetensors")
    );
    assert!(!conv.sources.iter().any(|(l, _)| l.contains("index")));
    let single = GgufFile::open(&out).unwrap();
    for t in sharded.tensors() {
        assert_eq!(
            single.tensor_bytes(&t.name).unwrap(),
            sharded.tensor_bytes(&t.name).unwrap(),
            "{}",
            t.name
        );
    }
    // Without either file the folder is not a checkpoint.
    fs::remove_file(base.join("model.safetensors")).unwrap();
    fs::remove_file(c.out()).unwrap();
    let e = c.refused(&[]);
    assert!(
        e.contains("no model.safetensors and no model.safetensors.index.json"),
        "{e}"
    );
}
