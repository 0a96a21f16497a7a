//! `kinema encode`: prompts in, embeddings out. The options and every output path are checked
//! before any work ([`OutputPlan`]); the prompts are read and tokenized before the model
//! runs, so bad input (a prompts file that is not a JSON list of strings, invalid UTF-8, an
//! over-long prompt) fails before anything is computed; the embeddings and the JSON sidecar
//! are written together once the whole run has succeeded.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;

use super::config::{keys, pairing_name};
use super::encode::{self, EncodeTimings, LongText, PromptReport, TemplateChoice};
use super::load::LlamaModel;
use super::tokenizer::strings::{MAX_STRINGS_FILE_BYTES, parse_strings};
use crate::backend::Backend;
use crate::formats::{NpyArray, NpzWriter, npy, read_capped};
use crate::models::kit::identity::{ModelIdentity, sidecar_json};
use crate::models::kit::output::OutputPlan;
use crate::{Error, Result};

/// Where the prompts come from.
#[derive(Clone, Debug)]
pub enum Prompts {
    /// `--prompt TEXT`, in order.
    Inline(Vec<String>),
    /// `--prompts-file FILE`: a JSON list of strings.
    File(PathBuf),
}

/// Everything `kinema encode` was asked for.
#[derive(Clone, Debug)]
pub struct EncodeRequest {
    pub model: PathBuf,
    pub prompts: Prompts,
    pub template: TemplateChoice,
    pub long_text: LongText,
    /// `.npz` (key `embeddings`) or `.npy`.
    pub output: PathBuf,
}

/// The output container, from the output's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Container {
    Npz,
    Npy,
}

impl EncodeRequest {
    /// The JSON sidecar's path: the output's with the extension `.json`.
    pub fn sidecar(&self) -> PathBuf {
        self.output.with_extension("json")
    }

    fn container(&self) -> Result<Container> {
        match self.output.extension().and_then(|e| e.to_str()) {
            Some("npz") => Ok(Container::Npz),
            Some("npy") => Ok(Container::Npy),
            _ => Err(Error::InvalidArgument(format!(
                "--output {}: the embeddings are written as .npz (key \"embeddings\") or .npy; \
                 name the file with one of those extensions",
                self.output.display()
            ))),
        }
    }

    /// Every file the request reads and writes.
    pub fn output_plan(&self) -> OutputPlan {
        let mut plan = OutputPlan::new();
        plan.input(&self.model, "--text-model");
        if let Prompts::File(p) = &self.prompts {
            plan.input(p, "--prompts-file");
        }
        plan.output(&self.output, "--output")
            .output(&self.sidecar(), "the JSON sidecar (--output with .json)");
        plan
    }

    /// The prompts, read and checked: at least one; a file must be a JSON list of strings
    /// in UTF-8.
    pub fn read_prompts(&self) -> Result<Vec<String>> {
        let list = match &self.prompts {
            Prompts::Inline(v) => v.clone(),
            Prompts::File(p) => {
                let bytes = read_capped(p, MAX_STRINGS_FILE_BYTES, "prompts file")?;
                parse_strings(&bytes).map_err(|e| {
                    Error::InvalidArgument(format!("--prompts-file {}: {e}", p.display()))
                })?
            }
        };
        if list.is_empty() {
            return Err(Error::InvalidArgument(
                "no prompt: give --prompt TEXT or a non-empty --prompts-file list".into(),
            ));
        }
        Ok(list)
    }
}

/// What a finished encode says about itself (the JSON sidecar).
#[derive(Clone, Debug, Serialize)]
pub struct EncodeReport {
    pub kinema_version: &'static str,
    pub model: ModelIdentity,
    /// `on` or `off`: whether the Llama-3 user header wrapped the prompts.
    pub chat_template: &'static str,
    /// What was asked: `auto`, `on` or `off`.
    pub chat_template_option: &'static str,
    pub attention: &'static str,
    pub pooling: &'static str,
    /// `[prompts, hidden]`.
    pub shape: [usize; 2],
    /// One entry per prompt, in order.
    pub prompts: Vec<PromptReport>,
    /// Why some rows are zeros, when they are.
    pub notes: Vec<String>,
    pub backend: &'static str,
    /// CPU ISA or Vulkan device.
    pub device: String,
    pub precision: &'static str,
    /// Dtype of the layer matrices as run.
    pub weights: &'static str,
    pub threads: usize,
    pub outputs: Vec<String>,
    pub timings: ReportTimings,
}

/// Seconds per phase.
#[derive(Clone, Debug, Serialize)]
pub struct ReportTimings {
    pub load_s: f64,
    pub tokenize_s: f64,
    pub build_s: f64,
    pub encode_s: f64,
    pub total_s: f64,
}

/// Runs a whole request on `backend`; nothing is written unless everything succeeds.
pub fn encode_request<B: Backend>(req: &EncodeRequest, backend: &B) -> Result<EncodeReport> {
    let t0 = Instant::now();
    let container = req.container()?;
    let mut outputs = req.output_plan().check()?;
    let texts = req.read_prompts()?;
    let info = backend.info();
    let model = LlamaModel::load(&req.model)?.for_backend(&info)?;
    let load_s = t0.elapsed().as_secs_f64();

    let t = Instant::now();
    let template = req.template.resolve(&model);
    encode::check_template(&model, template)?;
    let prepared = texts
        .iter()
        .enumerate()
        .map(|(i, s)| encode::prepare(&model, i, s, template, req.long_text))
        .collect::<Result<Vec<_>>>()?;
    let tokenize_s = t.elapsed().as_secs_f64();

    let (vectors, EncodeTimings { build_s, run_s }) = encode::encode(backend, &model, &prepared)?;
    let hidden = model.config.hidden;
    let shape = [texts.len(), hidden];
    let array = NpyArray::from_f32(&shape, &vectors)?;
    let bytes = match container {
        Container::Npy => npy::to_bytes(&array)?,
        Container::Npz => {
            let mut w = NpzWriter::new();
            w.add("embeddings", &array)?;
            let mut b = Vec::new();
            w.write_to(&mut b)?;
            b
        }
    };
    outputs.write(&req.output, |w| w.write_all(&bytes))?;

    let prompts: Vec<PromptReport> = prepared.iter().map(|p| p.report()).collect();
    let mut notes = Vec::new();
    let empty: Vec<String> = prompts
        .iter()
        .enumerate()
        .filter(|(_, p)| p.empty)
        .map(|(i, _)| i.to_string())
        .collect();
    if !empty.is_empty() {
        notes.push(format!(
            "prompts {} are empty: their embeddings are zeros, as Kimodo sets them \
             (kimodo_model.py#L559-570), not encoded",
            empty.join(", ")
        ));
    }
    let trimmed = prompts.iter().filter(|p| p.trimmed).count();
    if trimmed > 0 {
        notes.push(format!(
            "{trimmed} prompt(s) had more than {} tokens and were cut word by word as \
             LLM2Vec does (llm2vec.py#L278-303)",
            super::prompt::DOC_MAX_LENGTH
        ));
    }
    let c = &model.config;
    let details = BTreeMap::from([
        ("architecture", keys::ARCH_NAME.to_string()),
        ("name", model.name.clone().unwrap_or_default()),
        ("rope_pairing", pairing_name(c.pairing).to_string()),
        ("vocab", c.vocab.to_string()),
        ("layers", c.layers.to_string()),
        ("hidden", c.hidden.to_string()),
    ]);
    let report = EncodeReport {
        kinema_version: env!("CARGO_PKG_VERSION"),
        model: ModelIdentity::read(&req.model, &keys::PROVENANCE, details)?,
        chat_template: if template { "on" } else { "off" },
        chat_template_option: req.template.name(),
        attention: c.attention.name(),
        pooling: "mean",
        shape,
        prompts,
        notes,
        backend: info.kind,
        device: info.device.clone(),
        precision: info.precision.name(),
        weights: model.weight_dtype()?.name(),
        threads: info.threads,
        outputs: vec![req.output.display().to_string()],
        timings: ReportTimings {
            load_s,
            tokenize_s,
            build_s,
            encode_s: run_s,
            total_s: t0.elapsed().as_secs_f64(),
        },
    };
    let json = sidecar_json(&report)?;
    outputs.write(&req.sidecar(), |w| w.write_all(&json))?;
    outputs.commit()?;
    Ok(report)
}
