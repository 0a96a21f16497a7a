//! `kinema convert llm2vec`: a Hugging Face Llama folder and PEFT LoRA adapters (LLM2Vec's
//! MNTP and supervised adapters) -> one text-encoder GGUF in llama.cpp's `llama` layout.
//!
//! The adapters are merged in the order given, in f32: `W += scale * B @ A` with `scale =
//! lora_alpha / r` (`/ sqrt(r)` with rsLoRA), as PEFT's `merge_and_unload`
//! (`huggingface/peft@v0.18.1:src/peft/tuners/lora/layer.py` `get_delta_weight`, `merge`),
//! then cast once to `--dtype`. Upstream Kimodo merges the MNTP adapter into bf16 weights and
//! keeps the supervised one unmerged in f32 (llm2vec.md §1.2); merging both in f32 and
//! rounding once differs from it by bf16 rounding only (§8.8 allows it).
//!
//! The conversion is streamed: the header is written from the shapes `config.json` implies,
//! then each tensor is read from the memory-mapped shards, merged, checked, cast, written and
//! dropped, so a 16 GB checkpoint converts in a few GB of memory. Q and K stay in Hugging
//! Face layout (`kinema.rope_pairing = "rotate_half"`), not permuted as llama.cpp does.
//!
//! The file records what the encoder and `--chat-template auto` need: the identities read
//! (`config.json` `_name_or_path`, each adapter's `base_model_name_or_path` and folder), the
//! template default upstream would pick (§2.5) and the SHA-256 of every source file.

use std::io;
use std::path::{Path, PathBuf};

use super::hf_config::{LlamaConfig, LoraConfig, MAX_CONFIG_BYTES, PROJECTIONS, gguf_tokenizer};
use super::tokenizer::{PreTokenizerKind, Tokenizer};
use crate::formats::safetensors_index::{Checkpoint, INDEX_FILE, SINGLE_FILE};
use crate::formats::{GgufArray, GgufValue, GgufWriter, SafeDType, SafeTensors, read_capped};
use crate::models::kit::checks::Problems;
use crate::models::kit::convert::{
    Conversion, Progress, check_weight_dtype, encode_f32, sha256_file,
};
use crate::models::kit::meta::invalid;
use crate::models::kit::output::OutputPlan;
use crate::{DType, Error, Result};

const FORMAT: &str = "llm2vec convert";

/// What this converter writes in `llm2vec.converter_version`.
pub const CONVERTER_VERSION: &str = concat!("kinema ", env!("CARGO_PKG_VERSION"), " llm2vec/1");

/// The model name for which LLM2Vec adds the Llama-3 chat template
/// (`McGill-NLP/llm2vec:llm2vec/llm2vec.py` `prepare_for_tokenization`;
/// `nv-tlabs/kimodo:kimodo/model/llm2vec/llm2vec.py#L172-176`).
pub const TEMPLATE_MODEL: &str = "meta-llama/Meta-Llama-3-8B-Instruct";

/// LLM2Vec's default `max_length` (`nv-tlabs/kimodo:kimodo/model/llm2vec/llm2vec.py#L73-89`).
pub const MAX_LENGTH: u32 = 512;

/// GGUF metadata keys of a text-encoder file beyond llama.cpp's `llama.*`.
pub mod keys {
    pub use super::super::config::keys::{
        ATTENTION, CHAT_TEMPLATE_DEFAULT, CONVERTER_NOTES, CONVERTER_VERSION, MAX_LENGTH, POOLING,
        PROVENANCE, ROPE_PAIRING, SOURCE_SHA256_PREFIX,
    };

    /// The model name upstream's template rule tests (see `convert.rs`).
    pub const TEMPLATE_NAME: &str = "llm2vec.source.template_name";
    pub const BASE_NAME: &str = "llm2vec.source.base_name";
    /// Array of `[base_model_name_or_path, folder name]` per adapter, in merge order.
    pub const ADAPTERS: &str = "llm2vec.source.adapters";
}

/// The input folders.
#[derive(Clone, Debug)]
pub struct Sources {
    /// Hugging Face layout: `config.json`, `model.safetensors` or shards and
    /// `model.safetensors.index.json`, `tokenizer.json`, `tokenizer_config.json`.
    pub base: PathBuf,
    /// PEFT LoRA folders (`adapter_config.json`, `adapter_model.safetensors`), merged in order.
    pub adapters: Vec<PathBuf>,
}

/// What was converted.
#[derive(Clone, Debug)]
pub struct Converted {
    pub llama: LlamaConfig,
    /// The name upstream's chat-template rule would test.
    pub template_name: String,
    /// Whether upstream would add the Llama-3 chat template for it.
    pub chat_template_default: bool,
    pub dtype: DType,
}

/// The result of [`convert`].
pub type Llm2VecConversion = Conversion<Converted>;

const CONFIG_FILE: &str = "config.json";
const TOKENIZER_FILE: &str = "tokenizer.json";
const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";

/// Strings the tokenizer written to the GGUF must encode exactly as `tokenizer.json` does
/// before the file is accepted (ASCII, the chat template, accents, CJK, emoji, digits,
/// whitespace runs, contractions).
const TOKENIZER_PROBES: [&str; 6] = [
    "A person walks forward and then leaps over an obstacle.",
    "<|start_header_id|>user<|end_header_id|>\n\nhello, world!<|eot_id|>",
    "café déjà vu 你好，世界 🙂 running\nfast",
    "1234567 3.14159 -42",
    "  leading\t\ttabs   and   runs\n\n\n  ",
    "I'm sure you'VE seen they'll don't",
];

fn bad(msg: impl Into<String>) -> Error {
    invalid(FORMAT, msg)
}

/// The names a folder is known by: its own name and, for a Hugging Face cache snapshot
/// (`models--ORG--NAME/snapshots/REV`), `ORG/NAME`.
fn folder_names(dir: &Path) -> Vec<String> {
    let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut names = Vec::new();
    if let Some(n) = abs.file_name().and_then(|n| n.to_str()) {
        names.push(n.to_string());
    }
    let parent = abs.parent();
    if parent.and_then(Path::file_name).and_then(|n| n.to_str()) == Some("snapshots")
        && let Some(repo) = parent
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("models--"))
    {
        names.push(repo.replacen("--", "/", 1));
    }
    names
}

/// The last path component of a model id or path (`meta-llama/Meta-Llama-3-8B-Instruct` ->
/// `Meta-Llama-3-8B-Instruct`).
fn last_component(id: &str) -> &str {
    let t = id.trim_end_matches(['/', '\\']);
    t.rsplit(['/', '\\']).next().unwrap_or(t)
}

/// Whether the model id `id` names one of `names` (equal, or the same last component: a
/// local download of a Hub repository keeps the repository's name).
fn names_match(id: &str, names: &[String]) -> bool {
    !id.is_empty()
        && names
            .iter()
            .any(|n| n == id || (!n.is_empty() && last_component(n) == last_component(id)))
}

/// One adapter, opened and checked against the model.
struct Adapter {
    dir: PathBuf,
    config: LoraConfig,
    st: SafeTensors,
    /// The prefix of its tensor names before `layers.`.
    prefix: String,
    /// `[layer][projection]`.
    targets: Vec<Vec<bool>>,
}

impl Adapter {
    fn key(&self, layer: usize, proj: usize, ab: &str) -> String {
        let (p, b) = PROJECTIONS[proj];
        format!("{}layers.{layer}.{b}.{p}.lora_{ab}.weight", self.prefix)
    }
}

fn adapter_file(dir: &Path, file: &str) -> String {
    format!("{}", dir.join(file).display())
}

/// Open the adapter in `dir` and check it against `llama`: the configuration, and that
/// `adapter_model.safetensors` holds exactly an A `[r, in]` and a B `[out, r]` of a float
/// dtype with finite values for every targeted projection of every layer.
fn open_adapter(dir: &Path, llama: &LlamaConfig) -> Result<Adapter> {
    let cfg_path = dir.join(ADAPTER_CONFIG_FILE);
    let config = LoraConfig::parse(&read_capped(&cfg_path, MAX_CONFIG_BYTES, FORMAT)?)
        .map_err(|e| bad(format!("{}: {e}", cfg_path.display())))?;
    let targets = config
        .targets(llama.layers)
        .map_err(|e| bad(format!("{}: {e}", cfg_path.display())))?;
    let w_path = dir.join(ADAPTER_WEIGHTS_FILE);
    let st = SafeTensors::open(&w_path).map_err(|e| match e {
        Error::Io { .. } => e,
        e => bad(format!("{}: {e}", w_path.display())),
    })?;
    // PEFT saves `base_model.model.` + the wrapped model's module names: `layers.` for
    // LLM2Vec's LlamaBiModel, `model.layers.` for a LlamaForCausalLM.
    let prefix = ["base_model.model.", "base_model.model.model."]
        .into_iter()
        .find(|p| {
            st.tensors()
                .iter()
                .any(|t| t.name.starts_with(&format!("{p}layers.")))
        })
        .ok_or_else(|| {
            bad(format!(
                "{}: no LoRA tensor named base_model.model.[model.]layers.*",
                w_path.display()
            ))
        })?
        .to_string();
    let a = Adapter {
        dir: dir.to_path_buf(),
        config,
        st,
        prefix,
        targets,
    };
    let r = a.config.r;
    let mut problems = Problems::new();
    let mut expected = std::collections::HashSet::new();
    for layer in 0..llama.layers {
        for (p, &(proj, _)) in PROJECTIONS.iter().enumerate() {
            if !a.targets[layer][p] {
                continue;
            }
            let [out, inn] = llama.projection_shape(proj);
            for (ab, shape) in [("A", [r, inn]), ("B", [out, r])] {
                let key = a.key(layer, p, ab);
                match a.st.info(&key) {
                    None => problems.push(format!(
                        "missing tensor {key:?} (adapter_config.json targets {proj})"
                    )),
                    Some(info) if info.shape != shape => problems.push(format!(
                        "tensor {key:?} has shape {:?}, expected {shape:?} (r = {r} and \
                         config.json's sizes)",
                        info.shape
                    )),
                    Some(info)
                        if !matches!(
                            info.dtype,
                            SafeDType::F32 | SafeDType::F16 | SafeDType::BF16
                        ) =>
                    {
                        problems.push(format!(
                            "tensor {key:?} is {}, expected F32, F16 or BF16",
                            info.dtype
                        ))
                    }
                    Some(_) => {
                        let (_, v) = a.st.tensor_f32(&key)?;
                        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                            problems.push(format!(
                                "tensor {key:?} holds the non-finite value {} at flat index {i}",
                                v[i]
                            ));
                        }
                    }
                }
                expected.insert(key);
            }
        }
    }
    for t in a.st.tensors() {
        if !expected.contains(&t.name) {
            problems.push(format!(
                "unexpected tensor {:?} (not a LoRA A/B of a projection adapter_config.json \
                 targets)",
                t.name
            ));
        }
    }
    problems
        .into_result()
        .map_err(|m| bad(format!("{}: {m}", adapter_file(dir, ADAPTER_WEIGHTS_FILE))))?;
    Ok(a)
}

/// One tensor of the output file and where it comes from.
struct Planned {
    gguf: String,
    /// The base checkpoint's tensor (`None` for `rope_freqs`).
    source: Option<String>,
    shape: Vec<usize>,
    dtype: DType,
    /// `(layer, projection)` for the LoRA-targetable projections.
    lora: Option<(usize, usize)>,
}

/// Convert `src` into the GGUF file `out` with weight matrices in `dtype` (f32, f16, bf16 or
/// q8_0; norms and `rope_freqs` stay f32), without progress reports.
pub fn convert(src: &Sources, out: &Path, dtype: DType) -> Result<Llm2VecConversion> {
    convert_with_progress(src, out, dtype, &mut |_| {})
}

/// [`convert`], reporting progress (tensor checks, hashing, writing) to `progress`. `out` is
/// checked before any work (see [`OutputPlan`]) and replaced only when everything succeeded.
pub fn convert_with_progress(
    src: &Sources,
    out: &Path,
    dtype: DType,
    progress: &mut dyn FnMut(Progress),
) -> Result<Llm2VecConversion> {
    check_weight_dtype(dtype, &[DType::F32, DType::F16, DType::BF16, DType::Q8_0])?;
    let base = &src.base;
    if !base.is_dir() {
        return Err(Error::io(
            base,
            io::Error::new(io::ErrorKind::NotFound, "--base is not a folder"),
        ));
    }
    for dir in &src.adapters {
        if !dir.is_dir() {
            return Err(Error::io(
                dir,
                io::Error::new(io::ErrorKind::NotFound, "--adapter is not a folder"),
            ));
        }
    }
    let mut plan = OutputPlan::new();
    for f in [
        CONFIG_FILE,
        TOKENIZER_FILE,
        TOKENIZER_CONFIG_FILE,
        INDEX_FILE,
        SINGLE_FILE,
    ] {
        plan.input(&base.join(f), &format!("--base {f}"));
    }
    for dir in &src.adapters {
        for f in [ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE] {
            plan.input(&dir.join(f), &format!("--adapter {f}"));
        }
    }
    plan.output(out, "--output");
    // The shard files are known once the index is read; checked with the rest below.
    let ckpt = Checkpoint::open(base)?;
    for f in ckpt.files() {
        plan.input(&base.join(f), &format!("--base {f}"));
    }
    let mut outputs = plan.check()?;

    let cfg_path = base.join(CONFIG_FILE);
    let llama = LlamaConfig::parse(&read_capped(&cfg_path, MAX_CONFIG_BYTES, FORMAT)?)
        .map_err(|e| bad(format!("{}: {e}", cfg_path.display())))?;
    let mut notes = Vec::new();

    // Identities: each adapter must have been trained on the model before it.
    let mut known: Vec<String> = folder_names(base);
    if !llama.name_or_path.is_empty() {
        known.push(llama.name_or_path.clone());
    }
    let mut adapters = Vec::with_capacity(src.adapters.len());
    for dir in &src.adapters {
        let a = open_adapter(dir, &llama)?;
        let id = &a.config.base_model_name_or_path;
        if !names_match(id, &known) {
            return Err(bad(format!(
                "{}: base_model_name_or_path {id:?} is not the model it would be merged into \
                 (known as {known:?}); pass the adapters in training order, each after the \
                 model it was trained on (a local copy keeps the Hub repository's folder name)",
                adapter_file(dir, ADAPTER_CONFIG_FILE)
            )));
        }
        if a.config.fan_in_fan_out {
            // PEFT turns it off for nn.Linear targets
            // (`huggingface/peft@v0.18.1:src/peft/tuners/lora/layer.py` `dispatch_default`).
            notes.push(format!(
                "{}: fan_in_fan_out = true ignored, as PEFT does for the Linear layers of Llama",
                adapter_file(dir, ADAPTER_CONFIG_FILE)
            ));
        }
        known = folder_names(dir);
        adapters.push(a);
    }
    // llm2vec.md §2.5: the name LLM2Vec tests is the one transformers' adapter loading swaps
    // in, the first adapter's base (Kimodo's Hub path), or config.json's `_name_or_path` when
    // the base is loaded alone.
    let template_name = adapters
        .first()
        .map(|a| a.config.base_model_name_or_path.clone())
        .unwrap_or_else(|| llama.name_or_path.clone());
    let chat_template_default = template_name == TEMPLATE_MODEL;
    notes.push(format!(
        "chat template default {}: upstream tests the model name {template_name:?} (the first \
         adapter's base_model_name_or_path, else config.json's _name_or_path) against {TEMPLATE_MODEL:?}",
        if chat_template_default { "on" } else { "off" }
    ));

    // Tokenizer: GGUF metadata, checked to encode as tokenizer.json does.
    let tok_json = read_capped(
        &base.join(TOKENIZER_FILE),
        crate::models::llm2vec::tokenizer::MAX_FILE_BYTES,
        FORMAT,
    )?;
    let tok_cfg = read_capped(&base.join(TOKENIZER_CONFIG_FILE), MAX_CONFIG_BYTES, FORMAT)?;
    let tok_meta =
        gguf_tokenizer(&tok_json, &tok_cfg).map_err(|e| bad(format!("{}: {e}", base.display())))?;
    let from_json = Tokenizer::from_bytes(&tok_json)
        .map_err(|e| bad(format!("{}: {e}", base.join(TOKENIZER_FILE).display())))?;
    if from_json.pre_tokenizer() != PreTokenizerKind::Llama3 {
        return Err(bad(format!(
            "{}: pre-tokenizer {}, expected Llama-3's (the GGUF records \"llama-bpe\")",
            base.join(TOKENIZER_FILE).display(),
            from_json.pre_tokenizer().name()
        )));
    }
    let from_gguf = Tokenizer::from_gguf_metadata(&tok_meta)?;
    for p in TOKENIZER_PROBES {
        if from_json.encode(p, true)? != from_gguf.encode(p, true)? {
            return Err(bad(format!(
                "the GGUF tokenizer would encode {p:?} differently from tokenizer.json"
            )));
        }
    }
    if from_gguf.vocab_size() != llama.vocab {
        return Err(bad(format!(
            "tokenizer.json has {} token ids but config.json's vocab_size is {}",
            from_gguf.vocab_size(),
            llama.vocab
        )));
    }

    // The base tensors.
    let planned = plan_tensors(&llama, dtype);
    let prefix = if ckpt.info("model.embed_tokens.weight").is_some() {
        "model."
    } else {
        ""
    };
    let mut problems = Problems::new();
    let expected: std::collections::HashSet<String> = planned
        .iter()
        .filter_map(|p| p.source.as_ref().map(|s| format!("{prefix}{s}")))
        .collect();
    let total = planned.len();
    for (i, p) in planned.iter().enumerate() {
        if let Some(s) = &p.source {
            let key = format!("{prefix}{s}");
            match ckpt.info(&key) {
                None => problems.push(format!("missing tensor {key:?}")),
                Some((file, info)) if info.shape != p.shape => problems.push(format!(
                    "{file}: tensor {key:?} has shape {:?}, config.json implies {:?}",
                    info.shape, p.shape
                )),
                Some((file, info))
                    if !matches!(
                        info.dtype,
                        SafeDType::F32 | SafeDType::F16 | SafeDType::BF16
                    ) =>
                {
                    problems.push(format!(
                        "{file}: tensor {key:?} is {}, expected F32, F16 or BF16",
                        info.dtype
                    ))
                }
                Some(_) => {}
            }
        }
        progress(Progress::Checking { done: i + 1, total });
    }
    let mut skipped = Vec::new();
    for n in ckpt.names() {
        if expected.contains(n) {
            continue;
        }
        // No LM head in LLM2Vec; old checkpoints store RoPE's inv_freq buffers.
        if n == "lm_head.weight" || n.ends_with(".rotary_emb.inv_freq") {
            skipped.push(n.clone());
        } else {
            let file = ckpt.info(n).map(|(f, _)| f).unwrap_or_default();
            problems.push(format!("{file}: unexpected tensor {n:?}"));
        }
    }
    problems
        .into_result()
        .map_err(|m| bad(format!("{}: {m}", base.display())))?;
    if !skipped.is_empty() {
        notes.push(format!(
            "left out: {} (LLM2Vec has no LM head)",
            skipped.join(", ")
        ));
    }

    // SHA-256 of every file read.
    let mut sources = Vec::new();
    let mut base_files: Vec<String> = vec![
        CONFIG_FILE.into(),
        TOKENIZER_FILE.into(),
        TOKENIZER_CONFIG_FILE.into(),
    ];
    if base.join(INDEX_FILE).exists() {
        base_files.push(INDEX_FILE.into());
    }
    base_files.extend(ckpt.files().map(str::to_string));
    for f in &base_files {
        let label = format!("base/{f}");
        sources.push((label.clone(), sha256_file(&base.join(f), &label, progress)?));
    }
    for (k, a) in adapters.iter().enumerate() {
        for f in [ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE] {
            let label = format!("adapter{}/{f}", k + 1);
            sources.push((
                label.clone(),
                sha256_file(&a.dir.join(f), &label, progress)?,
            ));
        }
    }

    // Metadata and the tensor table.
    let mut w = GgufWriter::new();
    let u32_of = |x: usize| u32::try_from(x).map_err(|_| bad(format!("{x} does not fit u32")));
    w.add_metadata("general.architecture", "llama")?;
    let name = if llama.name_or_path.is_empty() {
        folder_names(base).into_iter().next().unwrap_or_default()
    } else {
        llama.name_or_path.clone()
    };
    w.add_metadata("general.name", name.as_str())?;
    w.add_metadata("llama.block_count", u32_of(llama.layers)?)?;
    w.add_metadata("llama.context_length", u32_of(llama.context)?)?;
    w.add_metadata("llama.embedding_length", u32_of(llama.hidden)?)?;
    w.add_metadata("llama.feed_forward_length", u32_of(llama.ffn)?)?;
    w.add_metadata("llama.attention.head_count", u32_of(llama.heads)?)?;
    w.add_metadata("llama.attention.head_count_kv", u32_of(llama.kv_heads)?)?;
    w.add_metadata(
        "llama.attention.layer_norm_rms_epsilon",
        llama.rms_eps as f32,
    )?;
    w.add_metadata("llama.rope.freq_base", llama.rope_theta as f32)?;
    w.add_metadata("llama.rope.dimension_count", u32_of(llama.head_dim)?)?;
    w.add_metadata("llama.vocab_size", u32_of(llama.vocab)?)?;
    w.add_metadata(keys::ROPE_PAIRING, "rotate_half")?;
    w.add_metadata(keys::ATTENTION, "bidirectional")?;
    w.add_metadata(keys::POOLING, "mean")?;
    w.add_metadata(keys::MAX_LENGTH, MAX_LENGTH)?;
    w.add_metadata(
        keys::CHAT_TEMPLATE_DEFAULT,
        if chat_template_default { "on" } else { "off" },
    )?;
    w.add_metadata(keys::TEMPLATE_NAME, template_name.as_str())?;
    w.add_metadata(keys::BASE_NAME, llama.name_or_path.as_str())?;
    let adapter_ids: Vec<GgufArray> = adapters
        .iter()
        .map(|a| {
            GgufArray::String(vec![
                a.config.base_model_name_or_path.clone(),
                folder_names(&a.dir).into_iter().next().unwrap_or_default(),
            ])
        })
        .collect();
    w.add_metadata(
        keys::ADAPTERS,
        GgufValue::Array(GgufArray::Array(adapter_ids)),
    )?;
    notes.push(format!(
        "LoRA merged in f32 in the order given ({} adapter(s)), then cast once to {dtype}",
        adapters.len()
    ));
    keys::PROVENANCE.add_to(&mut w, CONVERTER_VERSION, &notes, &sources)?;
    for (k, v) in tok_meta {
        w.add_metadata(k, v)?;
    }
    let mut parameters = 0u64;
    for p in &planned {
        w.declare_tensor(p.gguf.as_str(), p.dtype, &p.shape)?;
        if p.source.is_some() {
            parameters += p.shape.iter().product::<usize>() as u64;
        }
    }
    let data_total = w
        .data_bytes()
        .ok_or_else(|| bad("the data section size overflows"))?;

    // The data, one tensor at a time.
    let divisors = llama.rope_freq_divisors();
    let mut failure: Option<Error> = None;
    let written = outputs.write(out, |sink| {
        let mut s = w.stream(sink)?;
        let mut done = 0u64;
        for p in &planned {
            let bytes = match produce(p, &ckpt, prefix, &adapters, divisors.as_deref()) {
                Ok(b) => b,
                Err(e) => {
                    let msg = e.to_string();
                    failure = Some(e);
                    return Err(io::Error::other(msg));
                }
            };
            s.write_tensor(&p.gguf, &bytes)?;
            done += bytes.len() as u64;
            progress(Progress::Writing {
                done: done.min(data_total),
                total: data_total,
            });
        }
        progress(Progress::Writing {
            done: data_total,
            total: data_total,
        });
        s.finish()
    });
    if let Some(e) = failure {
        return Err(e);
    }
    written?;
    outputs.commit()?;
    Ok(Conversion {
        config: Converted {
            llama,
            template_name,
            chat_template_default,
            dtype,
        },
        notes,
        tensors: planned.len(),
        parameters,
        sources,
    })
}

/// Every tensor of the output file, in order (llama.cpp's names and order).
fn plan_tensors(c: &LlamaConfig, dtype: DType) -> Vec<Planned> {
    let planned = |gguf: String, source: Option<String>, shape: Vec<usize>, matrix: bool| Planned {
        gguf,
        source,
        shape,
        dtype: if matrix { dtype } else { DType::F32 },
        lora: None,
    };
    let mut v = vec![planned(
        "token_embd.weight".into(),
        Some("embed_tokens.weight".into()),
        vec![c.vocab, c.hidden],
        true,
    )];
    if c.rope_scaling.is_some() {
        v.push(planned(
            "rope_freqs.weight".into(),
            None,
            vec![c.head_dim / 2],
            false,
        ));
    }
    let gguf_of = |proj: &str| match proj {
        "q_proj" => "attn_q",
        "k_proj" => "attn_k",
        "v_proj" => "attn_v",
        "o_proj" => "attn_output",
        "gate_proj" => "ffn_gate",
        "up_proj" => "ffn_up",
        _ => "ffn_down",
    };
    for i in 0..c.layers {
        let norm = |g: &str, s: &str| {
            planned(
                format!("blk.{i}.{g}.weight"),
                Some(format!("layers.{i}.{s}.weight")),
                vec![c.hidden],
                false,
            )
        };
        v.push(norm("attn_norm", "input_layernorm"));
        for (p, &(proj, block)) in PROJECTIONS.iter().enumerate() {
            if proj == "gate_proj" {
                v.push(norm("ffn_norm", "post_attention_layernorm"));
            }
            let mut t = planned(
                format!("blk.{i}.{}.weight", gguf_of(proj)),
                Some(format!("layers.{i}.{block}.{proj}.weight")),
                c.projection_shape(proj).to_vec(),
                true,
            );
            t.lora = Some((i, p));
            v.push(t);
        }
    }
    v.push(planned(
        "output_norm.weight".into(),
        Some("norm.weight".into()),
        vec![c.hidden],
        false,
    ));
    v
}

/// The bytes of one output tensor: read from the checkpoint, every adapter merged in f32,
/// checked finite, cast.
fn produce(
    p: &Planned,
    ckpt: &Checkpoint,
    prefix: &str,
    adapters: &[Adapter],
    divisors: Option<&[f32]>,
) -> Result<Vec<u8>> {
    let Some(src) = &p.source else {
        let d = divisors.ok_or_else(|| bad("rope_freqs planned without rope scaling"))?;
        return encode_f32(FORMAT, &p.gguf, &p.shape, d, DType::F32);
    };
    let key = format!("{prefix}{src}");
    let file = ckpt.info(&key).map(|(f, _)| f).unwrap_or_default();
    let mut w = ckpt.tensor_f32(&key)?;
    if let Some(i) = w.iter().position(|x| !x.is_finite()) {
        return Err(bad(format!(
            "{}: tensor {key:?} holds the non-finite value {} at flat index {i}",
            ckpt.dir().join(file).display(),
            w[i]
        )));
    }
    if let Some((layer, proj)) = p.lora {
        let (out, inn) = (p.shape[0], p.shape[1]);
        for a in adapters.iter().filter(|a| a.targets[layer][proj]) {
            let (_, am) = a.st.tensor_f32(&a.key(layer, proj, "A"))?;
            let (_, bm) = a.st.tensor_f32(&a.key(layer, proj, "B"))?;
            merge_lora(&mut w, out, inn, &am, &bm, a.config.r, a.config.scale());
            if let Some(i) = w.iter().position(|x| !x.is_finite()) {
                return Err(bad(format!(
                    "tensor {key:?}: merging {} makes flat index {i} non-finite",
                    adapter_file(&a.dir, ADAPTER_WEIGHTS_FILE)
                )));
            }
        }
    }
    encode_f32(FORMAT, &p.gguf, &p.shape, &w, p.dtype)
}

/// `w[out, in] += scale * (b[out, r] @ a[r, in])`, the product accumulated over `r` in order
/// and scaled after, as PEFT's `get_delta_weight` computes `(B @ A) * scaling` before adding.
pub fn merge_lora(
    w: &mut [f32],
    out: usize,
    inn: usize,
    a: &[f32],
    b: &[f32],
    r: usize,
    scale: f32,
) {
    let mut row = vec![0f32; inn];
    for o in 0..out {
        row.fill(0.0);
        for k in 0..r {
            let bk = b[o * r + k];
            for (x, &av) in row.iter_mut().zip(&a[k * inn..(k + 1) * inn]) {
                *x += bk * av;
            }
        }
        for (wv, &d) in w[o * inn..(o + 1) * inn].iter_mut().zip(&row) {
            *wv += d * scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_hub_ids_local_copies_and_cache_snapshots() {
        let known = vec!["Meta-Llama-3-8B-Instruct".to_string()];
        assert!(names_match("meta-llama/Meta-Llama-3-8B-Instruct", &known));
        assert!(!names_match("meta-llama/Meta-Llama-3-8B", &known));
        assert!(!names_match("", &known));
        let d = tempfile::tempdir().unwrap();
        let snap = d
            .path()
            .join("models--McGill-NLP--LLM2Vec-x-mntp/snapshots/abc123");
        std::fs::create_dir_all(&snap).unwrap();
        let names = folder_names(&snap);
        assert_eq!(names, ["abc123", "McGill-NLP/LLM2Vec-x-mntp"]);
        assert!(names_match("McGill-NLP/LLM2Vec-x-mntp", &names));
    }

    #[test]
    fn merge_is_scaled_b_times_a() {
        // w = 0, b = [[1, 2]], a = [[1, 0, 1], [0, 1, 1]] -> b @ a = [1, 2, 3], times 0.5.
        let mut w = vec![0.0f32; 3];
        merge_lora(&mut w, 1, 3, &[1., 0., 1., 0., 1., 1.], &[1., 2.], 2, 0.5);
        assert_eq!(w, [0.5, 1.0, 1.5]);
    }
}
