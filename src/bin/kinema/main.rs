//! The `kinema` command line: `info`, `bench`, `drift`, `generate`, `encode`, `plan`,
//! `convert` and `tokenize`. This file parses and dispatches; each command family has its own
//! file, and the options every backend-running command shares are declared once in `args.rs`.

mod args;
mod bench;
mod drift;
mod encode;
mod info;
mod kimodo;
mod llm2vec_convert;
mod motionbricks;
mod peaks;
mod prompt;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "kinema",
    version,
    about = "Inference engine for LLM2Vec, Kimodo and MotionBricks on hand-written Vulkan and CPU SIMD kernels"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per process: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// CPU ISAs, threads, and Vulkan devices (or why there are none).
    Info {
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Benchmarks. Without a subcommand: the kernel table, then one Kimodo DDIM step at the
    /// released size (T=150, 2 rows; `bench kimodo` for a full generation).
    Bench {
        #[command(subcommand)]
        what: Option<BenchCmd>,
        #[command(flatten)]
        opts: bench::KernelOpts,
    },
    /// Run each op with the same inputs on every CPU ISA and precision and on Vulkan, and report
    /// how far each lies from the scalar reference (max_abs, rel_L2, ULP histogram).
    Drift {
        /// Only this op (names as in `kinema bench --list`).
        #[arg(long)]
        op: Option<String>,
        /// Shape for --op, dimensions joined by 'x'.
        #[arg(long)]
        shape: Option<String>,
        /// Weight dtype for linear/embedding: f32, f16, bf16 or q8_0.
        #[arg(long)]
        dtype: Option<String>,
        /// One JSON object per comparison.
        #[arg(long)]
        json: bool,
        /// A model file: compare one whole run instead of single ops (Kimodo: layer by layer
        /// and step by step; MotionBricks: at each stage boundary of a batch of plans) on
        /// every CPU ISA and Vulkan in each precision, against the CPU in strict precision.
        /// The file's general.architecture picks the model.
        #[arg(long)]
        model: Option<PathBuf>,
        #[command(flatten)]
        kimodo: kimodo::DriftOpts,
        #[command(flatten)]
        motionbricks: motionbricks::DriftOpts,
        #[command(flatten)]
        llm2vec: encode::DriftOpts,
    },
    /// Generate motion with a Kimodo model from a text feature (an LLM2Vec embedding).
    Generate(kimodo::GenerateOpts),
    /// LLM2Vec embeddings of prompts with a Llama text model (npz/npy + JSON sidecar).
    Encode(encode::EncodeOpts),
    /// One batch of MotionBricks plans from predict's arguments (inputs.npz) to plan.npz.
    Plan(motionbricks::PlanOpts),
    /// Play a scripted command sequence with the MotionBricks navigation agent (30 fps G1 qpos).
    Agent(motionbricks::AgentOpts),
    /// Tokenize a JSON list of strings into a JSON list of id lists (no special tokens are
    /// added unless --bos; special-token strings in the text are still matched).
    Tokenize {
        /// tokenizer.json, tokenizer.model (tiktoken ranks) or a GGUF with tokenizer.ggml.*.
        #[arg(long)]
        tokenizer: PathBuf,
        /// A JSON list of strings.
        #[arg(long)]
        strings_file: PathBuf,
        /// The JSON list of id lists to write.
        #[arg(short = 'o', long)]
        output: PathBuf,
        /// Prepend the BOS token to every list.
        #[arg(long)]
        bos: bool,
    },
    /// Convert an upstream checkpoint into a kinema GGUF model file.
    Convert {
        #[command(subcommand)]
        model: kimodo::ConvertCmd,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Time kernels at the models' shapes (or at --op/--shape/--dtype).
    Kernels {
        #[command(flatten)]
        opts: bench::KernelOpts,
    },
    /// Time a full Kimodo generation on deterministic synthetic weights at the released SOMA
    /// size (283 M parameters; no file needed).
    Kimodo {
        #[command(flatten)]
        opts: kimodo::BenchOpts,
    },
    /// Time the LLM2Vec encoder (bidirectional Llama, mean pooled) at the Llama-3-8B shapes
    /// on deterministic synthetic weights (no file needed); p50 and p99 per forward.
    Llm2vec {
        #[command(flatten)]
        opts: encode::BenchOpts,
    },
    /// Time whole MotionBricks plans (argmax and Gumbel; p50 and p99) on deterministic
    /// synthetic weights at the released widths (no file needed), or on --model.
    Motionbricks {
        #[command(flatten)]
        opts: motionbricks::BenchOpts,
    },
}

/// Rust starts programs with SIGPIPE ignored, so `println!` to a pipe whose reader has gone
/// (`kinema info | head -1`) panics. Restore the default, as other command-line tools have it:
/// the process ends quietly when nobody reads its output any more. Output files are written
/// to a temporary and renamed, so a process ended this way never leaves a partial result.
#[cfg(unix)]
fn restore_sigpipe() {
    // SAFETY: `signal` with a valid signal number and the default disposition, called first
    // thing in `main`, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn restore_sigpipe() {}

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Info { json } => info::run(json),
        Cmd::Bench {
            what: Some(BenchCmd::Kernels { opts }),
            ..
        } => bench::kernels(&opts),
        Cmd::Bench {
            what: Some(BenchCmd::Kimodo { opts }),
            ..
        } => kimodo::bench(&opts),
        Cmd::Bench {
            what: Some(BenchCmd::Llm2vec { opts }),
            ..
        } => encode::bench(&opts),
        Cmd::Bench {
            what: Some(BenchCmd::Motionbricks { opts }),
            ..
        } => motionbricks::bench(&opts),
        Cmd::Bench { what: None, opts } => bench::quick(&opts),
        Cmd::Drift {
            model: Some(model),
            kimodo,
            motionbricks,
            llm2vec,
            json,
            ..
        } => match drift::architecture(&model) {
            Ok(drift::Architecture::Kimodo) => kimodo::drift(&model, &kimodo, json),
            Ok(drift::Architecture::MotionBricks) => {
                motionbricks::drift(&model, &motionbricks, json)
            }
            Ok(drift::Architecture::Llama) => encode::drift(&model, &llm2vec, json),
            Err(e) => Err(e),
        },
        Cmd::Drift {
            op,
            shape,
            dtype,
            json,
            ..
        } => drift::ops(op, shape, dtype, json),
        Cmd::Generate(o) => kimodo::generate(&o),
        Cmd::Encode(o) => encode::encode(&o),
        Cmd::Plan(o) => motionbricks::plan(&o),
        Cmd::Agent(o) => motionbricks::agent(&o),
        Cmd::Tokenize {
            tokenizer,
            strings_file,
            output,
            bos,
        } => kinema::models::llm2vec::tokenizer::strings::tokenize_file(
            &tokenizer,
            &strings_file,
            &output,
            bos,
        )
        .map(|s| {
            eprintln!(
                "{} strings, {} tokens -> {}",
                s.strings,
                s.tokens,
                output.display()
            )
        }),
        Cmd::Convert { model } => model.run(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kinema: {e}");
            ExitCode::FAILURE
        }
    }
}
