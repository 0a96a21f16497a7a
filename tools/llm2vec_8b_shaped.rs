//! Writes an LLM2Vec text encoder at Llama-3-8B's dimensions with seeded random weights (a
//! measuring tool, not an API example): `cargo run --release --example llm2vec_8b_shaped --
//! OUT.gguf [bf16|q8_0|f32]` (bf16 by default: 16.1 GB; q8_0 8.5 GB). It streams one tensor
//! at a time, so it needs about 3 GB of memory and the file's size on disk. What it is for:
//! `kinema encode --text-model OUT.gguf ...` under `/usr/bin/time -v` gives the peak resident
//! memory of a full-size model against its file size (BENCHMARKS.md), with no download.

#[path = "../tests/common/tiny_llama.rs"]
mod tiny_llama;

use kinema::DType;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, dtype) = match args.as_slice() {
        [p] => (p, DType::BF16),
        [p, d] => match d.as_str() {
            "bf16" => (p, DType::BF16),
            "q8_0" => (p, DType::Q8_0),
            "f32" => (p, DType::F32),
            other => {
                eprintln!("llm2vec_8b_shaped: unknown dtype {other:?} (bf16, q8_0 or f32)");
                return ExitCode::FAILURE;
            }
        },
        _ => {
            eprintln!("usage: llm2vec_8b_shaped OUT.gguf [bf16|q8_0|f32]");
            return ExitCode::FAILURE;
        }
    };
    let spec = tiny_llama::Spec::default();
    let d = tiny_llama::Dims::llama3_8b();
    match tiny_llama::write_streamed(std::path::Path::new(path), &spec, d, dtype) {
        Ok(()) => {
            println!("{path}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("llm2vec_8b_shaped: {e}");
            ExitCode::FAILURE
        }
    }
}
