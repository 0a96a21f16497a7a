//! The options every command that runs work on a backend shares, declared once and flattened
//! into each (`generate`, `bench`, `bench kimodo`).

use clap::Args;
use kinema::DType;
use kinema::device::{BackendChoice, Selection};
use kinema::precision::PrecisionChoice;

/// `--backend`, `--precision`, `--threads`, `--json` and `--quiet`.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// cpu, vulkan or auto.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// strict, fast, split or auto (fast on a Vulkan device with cooperative matrices, else
    /// strict; the CPU resolves auto to strict). Fast narrows f32 weight matrices in memory
    /// (f16 on Vulkan, bf16 on the CPU). Split runs strict except the large linears and the
    /// attention, which split f32 operands into f16 high and low parts for the matrix cores
    /// (Vulkan with VK_NV_cooperative_matrix2; elsewhere strict). Every result records the
    /// resolved mode.
    #[arg(long, default_value = "auto")]
    pub precision: String,
    /// CPU threads, 1 to 1024 (default: KINEMA_THREADS or all).
    #[arg(long, value_parser = kinema::cpu::ThreadPool::parse_threads)]
    pub threads: Option<usize>,
    /// JSON on stdout instead of text (one object per result).
    #[arg(long)]
    pub json: bool,
    /// No progress and no notes on stderr.
    #[arg(long)]
    pub quiet: bool,
}

impl RunArgs {
    /// The parsed `--precision`.
    pub fn precision(&self) -> kinema::Result<PrecisionChoice> {
        PrecisionChoice::parse(&self.precision)
    }

    /// The backend of `--backend` and `--precision`; `--threads` asks for the CPU.
    pub fn select(&self) -> kinema::Result<Selection> {
        let precision = self.precision()?;
        let s =
            BackendChoice::parse(&self.backend)?.select_with_threads(precision, self.threads)?;
        self.note_fallback(&s);
        Ok(s)
    }

    /// The backend of `--backend` and `--precision` alone (`--threads` then only sizes the
    /// CPU backends a command builds itself).
    pub fn select_device(&self) -> kinema::Result<Selection> {
        let precision = self.precision()?;
        let s = BackendChoice::parse(&self.backend)?.select(precision)?;
        self.note_fallback(&s);
        Ok(s)
    }

    /// Says on stderr why `auto` took the CPU (unless `--quiet`).
    fn note_fallback(&self, s: &Selection) {
        if let Some(why) = &s.vulkan_unavailable
            && !self.quiet
        {
            eprintln!("kinema: using the CPU: {why}");
        }
    }
}

/// A `--dtype` of the op-level commands: f32, f16, bf16 or q8_0.
pub fn op_dtype(d: Option<&str>) -> kinema::Result<Option<DType>> {
    d.map(|d| {
        DType::parse(d).ok_or_else(|| {
            kinema::Error::InvalidArgument(format!(
                "unknown dtype {d:?}: expected f32, f16, bf16 or q8_0"
            ))
        })
    })
    .transpose()
}

/// A converter's `--dtype` for the 2-D weight matrices: f32, f16 or bf16.
pub fn weight_dtype(d: &str) -> kinema::Result<DType> {
    match d {
        "f32" => Ok(DType::F32),
        "f16" => Ok(DType::F16),
        "bf16" => Ok(DType::BF16),
        d => Err(kinema::Error::InvalidArgument(format!(
            "unknown --dtype {d:?}: expected f32, f16 or bf16"
        ))),
    }
}
