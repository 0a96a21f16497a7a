//! Writes a Kimodo model at the released SOMA size (283 M parameters) with the deterministic
//! synthetic weights and statistics of `kinema bench kimodo` (a measuring tool, not an API
//! example): `cargo run --release --example kimodo_released_shaped -- OUT.gguf [f32|f16|bf16]`
//! (f32 by default, as `kinema convert kimodo` writes: 1.1 GB). What it is for: `kinema generate
//! --model OUT.gguf --text-model <llm2vec_8b_shaped's file> --prompt ...` times the whole
//! text-to-motion flow at the real sizes and records each phase's peak memory, with no download
//! (`tools/bench_generate_h200.sh`).

use std::process::ExitCode;

use kinema::DType;
use kinema::formats::GgufWriter;
use kinema::models::kimodo::{KimodoModel, convert, synthetic};

fn write(path: &str, dtype: DType) -> kinema::Result<()> {
    let model: KimodoModel =
        synthetic::model(synthetic::released_soma())?.with_weight_dtype(dtype)?;
    let mut w = GgufWriter::new();
    convert::add_config_metadata(&mut w, &model.config)?;
    for (name, t) in &model.tensors {
        w.add_tensor(name.as_str(), t)?;
    }
    w.write(path)?;
    // What `kinema generate` will read back: the same checks as a converted file (a file that
    // fails them is removed, not left behind).
    KimodoModel::load(path).map(drop).inspect_err(|_| {
        let _ = std::fs::remove_file(path);
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, dtype) = match args.as_slice() {
        [p] => (p, Some(DType::F32)),
        [p, d] => (
            p,
            DType::parse(d).filter(|d| matches!(d, DType::F32 | DType::F16 | DType::BF16)),
        ),
        _ => {
            eprintln!("usage: kimodo_released_shaped OUT.gguf [f32|f16|bf16]");
            return ExitCode::FAILURE;
        }
    };
    let Some(dtype) = dtype else {
        eprintln!(
            "kimodo_released_shaped: unknown dtype {:?} (f32, f16 or bf16)",
            args[1]
        );
        return ExitCode::FAILURE;
    };
    match write(path, dtype) {
        Ok(()) => {
            println!("{path}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kimodo_released_shaped: {e}");
            ExitCode::FAILURE
        }
    }
}
