//! `kinema convert llm2vec`: a Hugging Face Llama folder and PEFT LoRA adapters -> the
//! text-encoder GGUF.

use std::path::PathBuf;

use clap::Args;
use kinema::DType;
use kinema::models::kit::progress::ConvertProgress;
use kinema::models::llm2vec::convert::{Sources, convert_with_progress};

/// `kinema convert llm2vec`'s options.
#[derive(Args, Clone)]
pub struct ConvertOpts {
    /// The base model folder (Hugging Face layout: config.json, model.safetensors or shards
    /// with model.safetensors.index.json, tokenizer.json, tokenizer_config.json).
    #[arg(long)]
    base: PathBuf,
    /// A PEFT LoRA folder (adapter_config.json, adapter_model.safetensors); repeat it to merge
    /// several, in training order (LLM2Vec: the MNTP adapter, then the supervised one).
    #[arg(long)]
    adapter: Vec<PathBuf>,
    /// Dtype of the weight matrices: bf16, f16, f32 or q8_0 (norms stay f32).
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Output GGUF file (written atomically; it may not be one of the inputs).
    #[arg(short, long)]
    output: PathBuf,
    /// No progress and no notes on stderr.
    #[arg(long)]
    quiet: bool,
}

/// `kinema convert llm2vec`.
pub fn convert(o: &ConvertOpts) -> kinema::Result<()> {
    let dtype = match o.dtype.as_str() {
        "q8_0" => DType::Q8_0,
        d => crate::args::weight_dtype(d).map_err(|_| {
            kinema::Error::InvalidArgument(format!(
                "unknown --dtype {d:?}: expected bf16, f16, f32 or q8_0"
            ))
        })?,
    };
    let mut bar = ConvertProgress::new(&o.output, o.quiet);
    let c = convert_with_progress(
        &Sources {
            base: o.base.clone(),
            adapters: o.adapter.clone(),
        },
        &o.output,
        dtype,
        &mut |p| bar.show(p),
    )?;
    if !o.quiet {
        for n in &c.notes {
            eprintln!("note: {n}");
        }
        let l = &c.config.llama;
        eprintln!(
            "wrote {}: LLM2Vec Llama ({} layers, hidden {}, {}/{} heads, vocab {}), {} adapter(s) \
             merged, {} tensors, {:.1} M parameters, {} weights, chat template default {}",
            o.output.display(),
            l.layers,
            l.hidden,
            l.heads,
            l.kv_heads,
            l.vocab,
            o.adapter.len(),
            c.tensors,
            c.parameters as f64 / 1e6,
            dtype,
            if c.config.chat_template_default {
                "on"
            } else {
                "off"
            }
        );
    }
    Ok(())
}
