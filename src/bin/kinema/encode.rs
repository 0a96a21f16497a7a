//! `kinema encode`: LLM2Vec embeddings of prompts with a Llama text model; `kinema bench
//! llm2vec` and `kinema drift --model` for a Llama file.

use std::path::{Path, PathBuf};

use clap::Args;
use kinema::Backend;
use kinema::device::BackendVisitor;
use kinema::models::ModelHarness;
use kinema::models::llm2vec::encode::{LongText, TemplateChoice};
use kinema::models::llm2vec::harness::{BenchOptions, DriftOptions, Llm2Vec};
use kinema::models::llm2vec::run::{self, EncodeReport, EncodeRequest, Prompts};

use crate::args::RunArgs;

/// `kinema encode`'s options.
#[derive(Args, Clone)]
pub struct EncodeOpts {
    /// The Llama text model (`kinema convert llm2vec`, or a llama.cpp `llama` GGUF).
    #[arg(long)]
    text_model: PathBuf,
    /// A prompt (repeat for several; they are encoded as one batch, in order).
    #[arg(long, conflicts_with = "prompts_file")]
    prompt: Vec<String>,
    /// A JSON list of prompts (UTF-8).
    #[arg(long)]
    prompts_file: Option<PathBuf>,
    /// Wrap each prompt in the Llama-3 user header and pool `<|eot_id|>` too: on, off, or
    /// auto (the model file's llm2vec.chat_template_default; off when absent).
    #[arg(long, default_value = "auto")]
    chat_template: String,
    /// Prompts of more than 400 text tokens: trim (cut whole words, as LLM2Vec does) or
    /// refuse.
    #[arg(long, default_value = "trim")]
    long_text: String,
    #[command(flatten)]
    run: RunArgs,
    /// Output: .npz (key `embeddings`, [prompts, hidden] float32) or .npy; a JSON sidecar is
    /// written beside it.
    #[arg(short, long)]
    output: PathBuf,
}

/// `kinema encode`.
pub fn encode(o: &EncodeOpts) -> kinema::Result<()> {
    let prompts = match (&o.prompts_file, o.prompt.is_empty()) {
        (Some(p), _) => Prompts::File(p.clone()),
        (None, false) => Prompts::Inline(o.prompt.clone()),
        (None, true) => {
            return Err(kinema::Error::InvalidArgument(
                "give --prompt TEXT (one or more) or --prompts-file prompts.json".into(),
            ));
        }
    };
    let req = EncodeRequest {
        model: o.text_model.clone(),
        prompts,
        template: TemplateChoice::parse(&o.chat_template)?,
        long_text: LongText::parse(&o.long_text)?,
        output: o.output.clone(),
    };
    let selection = o.run.select()?;
    let r = selection.backend.visit(Encode { req: &req })?;
    if o.run.json {
        let json = serde_json::to_string_pretty(&r)
            .map_err(|e| kinema::Error::InvalidArgument(format!("JSON report: {e}")))?;
        println!("{json}");
    }
    if !o.run.quiet {
        for n in &r.notes {
            eprintln!("note: {n}");
        }
        let tokens: usize = r.prompts.iter().map(|p| p.tokens).sum();
        eprintln!(
            "kinema: wrote {} ([{}, {}] float32; {} prompt(s), {tokens} tokens, template {}, \
             {} {} {}, {:.2} s encoding) and {}",
            r.outputs.join(", "),
            r.shape[0],
            r.shape[1],
            r.prompts.len(),
            r.chat_template,
            r.backend,
            r.device,
            r.precision,
            r.timings.encode_s,
            req.sidecar().display()
        );
    }
    Ok(())
}

/// [`encode`] on the chosen backend.
struct Encode<'a> {
    req: &'a EncodeRequest,
}

impl BackendVisitor for Encode<'_> {
    type Output = kinema::Result<EncodeReport>;
    fn visit<B: Backend>(self, b: &B) -> Self::Output {
        run::encode_request(self.req, b)
    }
}

/// `kinema bench llm2vec`'s options.
#[derive(Args, Clone)]
pub struct BenchOpts {
    /// Tokens per prompt.
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Prompts per forward.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Decoder layers (the real model has 32; fewer fit smaller machines).
    #[arg(long, default_value_t = 32)]
    layers: usize,
    /// Weight dtype of the synthetic model: bf16 (the converter's default), f16, f32 or q8_0.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Timed forwards, after untimed ones for half a second (at least one; the first run's
    /// time is reported apart).
    #[arg(long, default_value_t = 50)]
    runs: usize,
    #[command(flatten)]
    run: RunArgs,
}

/// `kinema bench llm2vec`.
pub fn bench(o: &BenchOpts) -> kinema::Result<()> {
    let opts = BenchOptions {
        tokens: o.tokens,
        batch: o.batch,
        layers: o.layers,
        dtype: crate::args::op_dtype(Some(&o.dtype))?.unwrap_or(kinema::DType::BF16),
        runs: o.runs,
    };
    crate::bench::model::<Llm2Vec>(&o.run.select()?, &opts, o.run.json)
}

/// `kinema drift --model`'s options for a Llama text model.
#[derive(Args, Clone)]
#[group(id = "llm2vec_drift")]
pub struct DriftOpts {
    /// With a Llama --model: tokens of the synthetic prompt (deterministic ids).
    #[arg(long, default_value_t = 16)]
    tokens: usize,
}

/// `kinema drift --model FILE` for a Llama text model.
pub fn drift(path: &Path, o: &DriftOpts, json: bool) -> kinema::Result<()> {
    crate::drift::model(
        &Llm2Vec::drift(path, &DriftOptions { tokens: o.tokens })?,
        json,
    )
}
