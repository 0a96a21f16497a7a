//! `kinema drift`: the op-level comparison (each op on every CPU ISA and precision and on
//! Vulkan against the scalar reference) and, with `--model`, one whole model run compared
//! layer by layer and step by step against the strict CPU run.

use std::path::Path;

use kinema::Backend;
use kinema::cpu::{CpuBackend, Isa, ThreadPool, isa};
use kinema::drift::{Drift, compare, default_cases, run_case};
use kinema::models::DriftRun;
use kinema::models::kit::meta;
use kinema::models::{kimodo, llm2vec, motionbricks};
use kinema::precision::Precision;
use kinema::tensor::DType;
use kinema::vulkan::VulkanBackend;

use crate::args::op_dtype;

/// The models `kinema drift --model` compares.
pub enum Architecture {
    Kimodo,
    MotionBricks,
    /// A Llama text model (LLM2Vec, or a llama.cpp `llama` file).
    Llama,
}

/// The model of the GGUF file `path`, from its `general.architecture` key.
pub fn architecture(path: &Path) -> kinema::Result<Architecture> {
    let f = meta::open(path, "model")?;
    let arch = f
        .get(kimodo::config::keys::ARCHITECTURE)
        .and_then(|v| v.as_str());
    match arch {
        Some(kimodo::config::keys::ARCH_NAME) => Ok(Architecture::Kimodo),
        Some(motionbricks::config::keys::ARCH_NAME) => Ok(Architecture::MotionBricks),
        Some(llm2vec::config::keys::ARCH_NAME) => Ok(Architecture::Llama),
        other => Err(kinema::Error::InvalidArgument(format!(
            "{}: {} is {}; drift --model compares {:?}, {:?} and {:?} models",
            path.display(),
            kimodo::config::keys::ARCHITECTURE,
            other.map_or("missing".to_string(), |a| format!("{a:?}")),
            kimodo::config::keys::ARCH_NAME,
            motionbricks::config::keys::ARCH_NAME,
            llm2vec::config::keys::ARCH_NAME
        ))),
    }
}

/// Prints one row per comparison, as table rows or JSON objects.
fn emit(rows: impl IntoIterator<Item = Drift>, json: bool) {
    for d in rows {
        if json {
            println!("{}", serde_json::to_string(&d).unwrap_or_default());
        } else {
            println!("{}", d.table_row());
        }
    }
}

/// `kinema drift --model`: the loaded model `run` on every CPU ISA but the scalar one in
/// strict precision, in fast precision on a CPU with bf16 dot products, and on Vulkan in
/// each precision, each compared with the strict run on the best CPU ISA.
pub fn model<D: DriftRun>(run: &D, json: bool) -> kinema::Result<()> {
    let threads = ThreadPool::default_threads()?;
    let best = Isa::best();
    let reference = CpuBackend::with(best, threads, Precision::Strict)?;
    let want = run.trace(&reference)?;
    if !json {
        println!(
            "reference: cpu/{}/strict, {threads} threads; {}",
            best.name(),
            run.describe()
        );
        println!("{}", Drift::table_header());
    }
    for isa in Isa::available() {
        // The scalar kernels are the op-level oracle; at model size they only cost time.
        if isa == best || isa == Isa::Scalar {
            continue;
        }
        let b = CpuBackend::with(isa, threads, Precision::Strict)?;
        let label = format!("cpu/{}/strict", isa.name());
        emit(run.compare(&label, &want, &run.trace(&b)?), json);
    }
    if isa::has_avx512_bf16() {
        let b = CpuBackend::with(best, threads, Precision::Fast)?;
        let label = format!("cpu/{}/fast", best.name());
        emit(run.compare(&label, &want, &run.trace(&b)?), json);
    }
    for (label, v) in vulkan_backends() {
        emit(run.compare(&label, &want, &run.trace(&v)?), json);
    }
    Ok(())
}

/// A Vulkan backend in each precision with its label (`+coopmat` where fast mode runs on
/// cooperative matrices), each created when the previous one is done with; split precision
/// only where the device has it (elsewhere it would repeat strict); when one cannot be
/// created, a note on stderr and no more.
fn vulkan_backends() -> impl Iterator<Item = (String, VulkanBackend)> {
    [Precision::Strict, Precision::Fast, Precision::Split]
        .into_iter()
        .map_while(|p| match VulkanBackend::new(p) {
            Ok(v) if v.info().precision != p => {
                eprintln!(
                    "kinema: {} precision not compared: the device lacks it",
                    p.name()
                );
                None
            }
            Ok(v) => {
                let coop = if v.info().cooperative_matrix {
                    "+coopmat"
                } else {
                    ""
                };
                Some((format!("vulkan/{}/{}{coop}", v.device_name(), p.name()), v))
            }
            Err(e) => {
                eprintln!("kinema: Vulkan not compared: {e}");
                None
            }
        })
}

/// The op-level comparison: each op of `--op` (default: every drift case) against the
/// scalar reference.
pub fn ops(
    op: Option<String>,
    shape: Option<String>,
    dtype: Option<String>,
    json: bool,
) -> kinema::Result<()> {
    let dtype = op_dtype(dtype.as_deref())?;
    let cases: Vec<(String, String, DType)> = match (&op, &shape) {
        (Some(o), Some(s)) => vec![(o.clone(), s.clone(), dtype.unwrap_or(DType::F32))],
        _ => default_cases()
            .into_iter()
            .filter(|(c, _, d)| {
                op.as_deref().is_none_or(|o| o == *c) && dtype.is_none_or(|x| x == *d)
            })
            .map(|(c, s, d)| (c.to_string(), s.to_string(), d))
            .collect(),
    };
    if cases.is_empty() {
        return Err(kinema::Error::InvalidArgument(
            "no drift case matches; give --op and --shape".into(),
        ));
    }
    let threads = ThreadPool::default_threads()?;
    let reference = CpuBackend::with(Isa::Scalar, 1, Precision::Strict)?;
    let mut cpus: Vec<(String, CpuBackend)> = Vec::new();
    for isa in Isa::available() {
        cpus.push((
            format!("cpu/{}/strict", isa.name()),
            CpuBackend::with(isa, threads, Precision::Strict)?,
        ));
    }
    let best = Isa::best();
    cpus.push((
        format!("cpu/{}/fast", best.name()),
        CpuBackend::with(best, threads, Precision::Fast)?,
    ));
    let vulkan: Vec<(String, VulkanBackend)> = vulkan_backends().collect();
    if !json {
        println!("reference: cpu/scalar/strict, 1 thread");
        println!("{}", Drift::table_header());
    }
    for (op, shape, dt) in &cases {
        let want = run_case(&reference, op, shape, *dt)?;
        for (label, b) in &cpus {
            let got = run_case(b, op, shape, *dt)?;
            emit([compare(op, shape, *dt, label, &want, &got)], json);
        }
        for (label, v) in &vulkan {
            let got = run_case(v, op, shape, *dt)?;
            emit([compare(op, shape, *dt, label, &want, &got)], json);
        }
    }
    Ok(())
}
