//! `kinema bench`: the kernel table (`bench kernels`), a model's whole run (`bench <model>`),
//! and without a subcommand both: the table, then one Kimodo DDIM step at the released size.

use std::time::Duration;

use clap::Args;
use kinema::Backend;
use kinema::bench::{self, Measurement};
use kinema::cpu::{CpuBackend, Isa, ThreadPool};
use kinema::device::{BackendVisitor, Selection};
use kinema::models::kimodo::Kimodo;
use kinema::models::kimodo::bench::BenchOptions;
use kinema::models::{BenchReport, ModelHarness};
use kinema::tensor::DType;
use kinema::vulkan::{VulkanBackend, VulkanOptions};

use crate::args::{RunArgs, op_dtype};
use crate::peaks;

/// The ops that measure a ceiling rather than a kernel (no shape).
const PEAKS: [&str; 3] = ["fma_peak", "coopmat_peak", "read_peak"];

/// The kernel table's options (also those of `kinema bench` without a subcommand).
#[derive(Args, Clone)]
pub struct KernelOpts {
    /// Only this op (see `--list`).
    #[arg(long)]
    pub op: Option<String>,
    /// Shape, dimensions joined by 'x' (linear: MxNxK).
    #[arg(long)]
    pub shape: Option<String>,
    /// Weight dtype for linear/embedding: f32, f16, bf16 or q8_0.
    #[arg(long)]
    pub dtype: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
    /// CPU kernels to run: scalar, avx2, avx512, neon, or all available (default: the best,
    /// or KINEMA_CPU_ISA).
    #[arg(long)]
    pub isa: Option<String>,
    /// Samples per measurement (the median is reported).
    #[arg(long, default_value_t = 7)]
    pub samples: usize,
    /// List the ops and what --shape means for each.
    #[arg(long)]
    pub list: bool,
}

/// `kinema bench` without a subcommand: the kernel table, then one Kimodo step at the
/// released size (T=150, 2 rows, 16 layers per stage); only the table when --op, --shape or
/// --list narrows it to kernels.
pub fn quick(o: &KernelOpts) -> kinema::Result<()> {
    if o.op.is_some() || o.shape.is_some() || o.list {
        return kernels(o);
    }
    let selection = o.run.select_device()?;
    kernels_on(o, &selection)?;
    let step = BenchOptions {
        frames: 150,
        steps: 1,
        rows: 2,
        layers: 16,
        samples: 1,
    };
    // The step runs where the table ran (and the fallback note is not said twice), unless
    // --threads asks for the CPU.
    if o.run.threads.is_some() {
        model::<Kimodo>(&o.run.select()?, &step, o.run.json)
    } else {
        model::<Kimodo>(&selection, &step, o.run.json)
    }
}

/// `kinema bench kernels`: time kernels at the models' shapes (or at --op/--shape/--dtype).
pub fn kernels(o: &KernelOpts) -> kinema::Result<()> {
    if o.list {
        for (op, shape) in bench::OPS {
            println!("{op:<15} {shape}");
        }
        return Ok(());
    }
    kernels_on(o, &o.run.select_device()?)
}

/// The kernel table on the device of `selection` (the CPU table runs on CPU backends of
/// each --isa, with --threads).
fn kernels_on(o: &KernelOpts, selection: &Selection) -> kinema::Result<()> {
    let precision = selection.backend.info().precision;
    let isas: Vec<Isa> = match o.isa.as_deref() {
        None => vec![Isa::select()?],
        Some("all") => Isa::available(),
        Some(s) => vec![Isa::parse(s)?],
    };
    let threads = match o.run.threads {
        Some(t) => t,
        None => ThreadPool::default_threads()?,
    };
    let dtype = op_dtype(o.dtype.as_deref())?;
    let cases: Vec<(String, String, DType)> = match (&o.op, &o.shape) {
        (Some(op), _) if PEAKS.contains(&op.as_str()) => Vec::new(),
        (Some(op), Some(shape)) => vec![(op.clone(), shape.clone(), dtype.unwrap_or(DType::F32))],
        (op, shape) => bench::default_cases()
            .into_iter()
            .filter(|(c, s, d)| {
                op.as_deref().is_none_or(|o| o == *c)
                    && shape.as_deref().is_none_or(|x| x == s)
                    && dtype.is_none_or(|x| x == *d)
            })
            .map(|(c, s, d)| (c.to_string(), s, d))
            .collect(),
    };
    let peak_only = o.op.as_deref().is_some_and(|op| PEAKS.contains(&op));
    if cases.is_empty() && !peak_only {
        return Err(kinema::Error::InvalidArgument(
            "no benchmark matches; give --op and --shape, or see --list".into(),
        ));
    }
    if !o.run.json {
        println!("{}", Measurement::table_header());
    }
    if let Some(b) = selection.backend.vulkan() {
        if o.op.is_none() || o.op.as_deref() == Some("coopmat_peak") {
            match peaks::coopmat_peak(b)? {
                Some(m) => show(&m, o.run.json),
                None if o.op.is_some() => eprintln!(
                    "kinema: coopmat_peak: {} has no 16x16x16 f16 cooperative matrices",
                    b.device_name()
                ),
                None => {}
            }
        }
        if o.op.is_none() || o.op.as_deref() == Some("read_peak") {
            for m in peaks::read_peak(b)? {
                show(&m, o.run.json);
            }
        }
        if cases.is_empty() {
            return Ok(());
        }
        // A second backend on the same device with timestamps on gives each op's GPU time.
        let mut po = VulkanOptions::from_env(precision)?;
        po.profile = true;
        let profiled = VulkanBackend::with_options(po)?;
        for (op, shape, dt) in &cases {
            let mut m = bench::measure(b, op, shape, *dt, o.samples, Duration::from_millis(40))?;
            peaks::add_gpu_time(&mut m, &profiled, *dt, o.samples)?;
            show(&m, o.run.json);
        }
        return Ok(());
    }
    if o.op.as_deref() == Some("coopmat_peak") {
        return Err(kinema::Error::InvalidArgument(
            "coopmat_peak measures a Vulkan device's cooperative matrices: use --backend vulkan"
                .into(),
        ));
    }
    if o.op.as_deref() == Some("read_peak") {
        return Err(kinema::Error::InvalidArgument(
            "read_peak measures a Vulkan device's memory: use --backend vulkan".into(),
        ));
    }
    let with_peak = o.op.is_none() || o.op.as_deref() == Some("fma_peak");
    for isa in isas {
        if with_peak {
            for m in peaks::cpu_peaks(isa, threads) {
                show(&m, o.run.json);
            }
        }
        if o.op.as_deref() == Some("fma_peak") {
            continue;
        }
        let b = CpuBackend::with(isa, threads, precision)?;
        for (op, shape, dt) in &cases {
            let m = bench::measure(&b, op, shape, *dt, o.samples, Duration::from_millis(40))?;
            show(&m, o.run.json);
        }
    }
    Ok(())
}

/// Prints one measurement as a table row or a JSON object.
fn show(m: &Measurement, json: bool) {
    println!("{}", if json { m.to_json() } else { m.table_row() });
}

/// `kinema bench <model>`: one whole run of model `H` on synthetic weights on the selected
/// backend, as one line of text or one JSON object.
pub fn model<H: ModelHarness>(
    selection: &Selection,
    o: &H::BenchOptions,
    json: bool,
) -> kinema::Result<()> {
    struct Run<'a, H: ModelHarness>(&'a H::BenchOptions);
    impl<H: ModelHarness> BackendVisitor for Run<'_, H> {
        type Output = kinema::Result<H::BenchReport>;
        fn visit<B: Backend>(self, b: &B) -> Self::Output {
            H::bench(b, self.0)
        }
    }
    let r = selection.backend.visit(Run::<H>(o))?;
    if json {
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
    } else {
        println!("{}", r.text());
    }
    Ok(())
}
