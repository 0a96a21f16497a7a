//! The `kinema` command line: `info`, `bench`, `drift`, `generate` and `convert`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use kinema::backend::{AnyBackend, Backend, BackendChoice, Precision, PrecisionChoice, Selection};
use kinema::bench::{self, Measurement};
use kinema::cpu::{CpuBackend, Isa, ThreadPool, isa};
use kinema::tensor::DType;
use kinema::vulkan::{VulkanBackend, VulkanOptions};

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
        opts: KernelOpts,
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
        /// A Kimodo model: compare one whole generation instead of single ops, layer by layer
        /// and step by step, on every CPU ISA and Vulkan in each precision, against the CPU in
        /// strict precision.
        #[arg(long)]
        model: Option<PathBuf>,
        /// With --model: the text feature (.npy [1, llm_dim]); default: the deterministic
        /// synthetic one of `kinema bench kimodo`.
        #[arg(long)]
        embedding: Option<PathBuf>,
        /// With --model: frames.
        #[arg(long, default_value_t = 30)]
        frames: usize,
        /// With --model: DDIM steps.
        #[arg(long, default_value_t = 10)]
        steps: usize,
        /// With --model: guidance rows (2 or 3).
        #[arg(long, default_value_t = 2)]
        cfg_rows: usize,
        /// With --model: seed of the initial noise.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Generate motion with a Kimodo model from a text feature (an LLM2Vec embedding).
    Generate(GenerateOpts),
    /// Convert an upstream checkpoint into a kinema GGUF model file.
    Convert {
        #[command(subcommand)]
        model: ConvertCmd,
    },
}

#[derive(Args, Clone)]
struct GenerateOpts {
    /// The Kimodo model file (`kinema convert kimodo`).
    #[arg(long)]
    model: PathBuf,
    /// Text feature: float32 .npy of shape [1, 4096] or [1, 1, 4096] (upstream's LLM2Vec
    /// output for the prompt).
    #[arg(long)]
    embedding: Option<PathBuf>,
    /// A text prompt (needs the LLM2Vec text model, which kinema does not run yet: use
    /// --embedding).
    #[arg(long)]
    prompt: Option<String>,
    /// Initial noise x_T: float32 .npy [1, T, dim] (for parity with a PyTorch run); default:
    /// drawn from --seed.
    #[arg(long)]
    noise: Option<PathBuf>,
    /// Frames at 30 fps (2 to 4948); may be omitted with --noise.
    #[arg(long)]
    frames: Option<usize>,
    /// DDIM steps.
    #[arg(long, default_value_t = 100)]
    steps: usize,
    /// Text guidance weight (default: the model's, 2).
    #[arg(long)]
    cfg_text: Option<f32>,
    /// Constraint guidance weight (default: the model's, 2).
    #[arg(long)]
    cfg_constraint: Option<f32>,
    /// Guidance rows: 2 (exact without constraints) or 3 (upstream's [text, constraint, uncond]).
    #[arg(long, default_value_t = 2)]
    cfg_rows: usize,
    /// Seed of the initial noise (SplitMix64 + Box-Muller, see the README).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// First heading angle in radians.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    heading: f32,
    /// cpu, vulkan or auto.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// strict, fast or auto (fast on a Vulkan device with cooperative matrices, else strict).
    /// Fast narrows f32 weight matrices in memory (f16 on Vulkan, bf16 on the CPU).
    #[arg(long, default_value = "auto")]
    precision: String,
    /// CPU threads, 1 to 1024 (default: KINEMA_THREADS or all).
    #[arg(long, value_parser = ThreadPool::parse_threads)]
    threads: Option<usize>,
    /// Add the first step's stage outputs and guided prediction to the npz.
    #[arg(long)]
    diagnostics: bool,
    /// Also write an animated glTF binary (skeleton only).
    #[arg(long)]
    glb: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Output npz (upstream's keys plus `features`); a JSON sidecar is written beside it.
    #[arg(short, long)]
    output: PathBuf,
}

#[derive(Subcommand)]
enum ConvertCmd {
    /// A Kimodo checkpoint directory (the Hugging Face layout: model.safetensors,
    /// stats/motion/..., config.yaml).
    Kimodo {
        /// The checkpoint directory.
        checkpoint_dir: std::path::PathBuf,
        /// Output GGUF file (written atomically).
        #[arg(short, long)]
        output: std::path::PathBuf,
        /// soma30, g1 or smplx22 (default: config.yaml, else inferred from the motion width).
        #[arg(long)]
        skeleton: Option<String>,
        /// Attention heads (default: config.yaml, else 8 as in every released model).
        #[arg(long)]
        num_heads: Option<usize>,
        /// Dtype of the 2-D weight matrices: f32, f16 or bf16 (biases, norms, stats stay f32).
        #[arg(long, default_value = "f32")]
        dtype: String,
        /// No progress and no notes on stderr.
        #[arg(long)]
        quiet: bool,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Time kernels at the models' shapes (or at --op/--shape/--dtype).
    Kernels {
        #[command(flatten)]
        opts: KernelOpts,
    },
    /// Time a full Kimodo generation on deterministic synthetic weights at the released SOMA
    /// size (283 M parameters; no file needed).
    Kimodo {
        #[command(flatten)]
        opts: KimodoOpts,
    },
}

#[derive(Args, Clone)]
struct KimodoOpts {
    /// Frames T.
    #[arg(long, default_value_t = 150)]
    frames: usize,
    /// DDIM steps (1 for the one-step CPU comparison).
    #[arg(long, default_value_t = 100)]
    steps: usize,
    /// Guidance rows: 2 (the exact shortcut without constraints) or 3 (upstream's rows).
    #[arg(long, default_value_t = 2)]
    rows: usize,
    /// Encoder layers per stage (16 in the released models; fewer for a quick run).
    #[arg(long, default_value_t = 16)]
    layers: usize,
    /// cpu, vulkan or auto.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// strict, fast or auto (fast on a Vulkan device with cooperative matrices, else strict).
    #[arg(long, default_value = "auto")]
    precision: String,
    /// CPU threads, 1 to 1024 (default: KINEMA_THREADS or all).
    #[arg(long, value_parser = ThreadPool::parse_threads)]
    threads: Option<usize>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct KernelOpts {
    /// Only this op (see `--list`).
    #[arg(long)]
    op: Option<String>,
    /// Shape, dimensions joined by 'x' (linear: MxNxK).
    #[arg(long)]
    shape: Option<String>,
    /// Weight dtype for linear/embedding: f32, f16, bf16 or q8_0.
    #[arg(long)]
    dtype: Option<String>,
    /// One JSON object per measurement.
    #[arg(long)]
    json: bool,
    /// cpu, vulkan or auto.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// CPU kernels to run: scalar, avx2, avx512, neon, or all available (default: the best,
    /// or KINEMA_CPU_ISA).
    #[arg(long)]
    isa: Option<String>,
    /// CPU threads, 1 to 1024 (default: KINEMA_THREADS or all).
    #[arg(long, value_parser = ThreadPool::parse_threads)]
    threads: Option<usize>,
    /// strict, fast or auto (fast on a Vulkan device with cooperative matrices, else strict;
    /// the CPU resolves auto to strict). Every result records the resolved mode.
    #[arg(long, default_value = "auto")]
    precision: String,
    /// Samples per measurement (the median is reported).
    #[arg(long, default_value_t = 7)]
    samples: usize,
    /// List the ops and what --shape means for each.
    #[arg(long)]
    list: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Info { json } => info(json),
        Cmd::Bench {
            what: Some(BenchCmd::Kernels { opts }),
            ..
        } => bench_kernels(&opts),
        Cmd::Bench {
            what: Some(BenchCmd::Kimodo { opts }),
            ..
        } => bench_kimodo(&opts),
        // The quick default: the kernel table, then one Kimodo step at the released size
        // (only the kernel when --op, --shape or --list narrows it to one).
        Cmd::Bench { what: None, opts }
            if opts.op.is_some() || opts.shape.is_some() || opts.list =>
        {
            bench_kernels(&opts)
        }
        Cmd::Bench { what: None, opts } => bench_kernels(&opts).and_then(|()| {
            bench_kimodo(&KimodoOpts {
                frames: 150,
                steps: 1,
                rows: 2,
                layers: 16,
                backend: opts.backend.clone(),
                precision: opts.precision.clone(),
                threads: opts.threads,
                json: opts.json,
            })
        }),
        Cmd::Drift {
            model: Some(model),
            embedding,
            frames,
            steps,
            cfg_rows,
            seed,
            json,
            ..
        } => drift_model(&model, embedding, frames, steps, cfg_rows, seed, json),
        Cmd::Drift {
            op,
            shape,
            dtype,
            json,
            ..
        } => drift(op, shape, dtype, json),
        Cmd::Generate(o) => generate(&o),
        Cmd::Convert {
            model:
                ConvertCmd::Kimodo {
                    checkpoint_dir,
                    output,
                    skeleton,
                    num_heads,
                    dtype,
                    quiet,
                },
        } => convert_kimodo(&checkpoint_dir, &output, skeleton, num_heads, &dtype, quiet),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kinema: {e}");
            ExitCode::FAILURE
        }
    }
}

fn info(json: bool) -> kinema::Result<()> {
    let selected = Isa::select();
    let available: Vec<&str> = Isa::available().iter().map(|i| i.name()).collect();
    let threads = ThreadPool::default_threads()?;
    let vk = kinema::vulkan::probe();
    if json {
        let devices: Vec<serde_json::Value> = match &vk {
            Ok(ds) => ds
                .iter()
                .map(|d| {
                    serde_json::json!({
                        "index": d.index, "name": d.name, "type": d.kind, "api": d.api_version,
                        "subgroup_size": d.subgroup_size, "max_shared_memory": d.max_shared_memory,
                        "max_push_constants": d.max_push_constants,
                        "max_storage_buffer_range": d.max_storage_buffer_range,
                        "cooperative_matrix": d.cooperative_matrix,
                        "cooperative_matrix_shapes": d.cooperative_matrix_shapes,
                        "extensions": d.extensions,
                    })
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        let v = serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "cpu": {
                "arch": std::env::consts::ARCH,
                "isas_available": available,
                "isa_selected": selected.as_ref().map(|i| i.name()).map_err(|e| e.to_string()),
                "features": isa::feature_report().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
                "avx512_bf16_dot": isa::has_avx512_bf16(),
                "threads": threads,
            },
            "vulkan": {
                "devices": devices,
                "unavailable_because": vk.as_ref().err(),
                "backend": backend_json(),
            },
            "auto_backend": auto_choice(),
        });
        println!("{v:#}");
        return Ok(());
    }
    println!("kinema {}", env!("CARGO_PKG_VERSION"));
    println!("CPU ({})", std::env::consts::ARCH);
    println!("  kernels available : {}", available.join(", "));
    match &selected {
        Ok(i) => println!(
            "  kernels selected  : {}{}",
            i.name(),
            if std::env::var_os("KINEMA_CPU_ISA").is_some() {
                " (forced by KINEMA_CPU_ISA)"
            } else {
                ""
            }
        ),
        Err(e) => println!("  kernels selected  : error: {e}"),
    }
    let feats: Vec<String> = isa::feature_report()
        .iter()
        .map(|(n, on)| format!("{n}{}", if *on { "+" } else { "-" }))
        .collect();
    println!("  features          : {}", feats.join(" "));
    println!(
        "  bf16 dot products : {}",
        if isa::has_avx512_bf16() {
            "yes (avx512_bf16, used in --precision fast)"
        } else {
            "no"
        }
    );
    println!(
        "  threads           : {threads}{}",
        if std::env::var_os("KINEMA_THREADS").is_some() {
            " (KINEMA_THREADS)"
        } else {
            " (available_parallelism)"
        }
    );
    println!("Vulkan");
    match vk {
        Ok(devs) => {
            for d in devs {
                println!(
                    "  [{}] {} ({}, Vulkan {}), subgroup {}, shared memory {} KiB, push constants {} B, max binding {} MiB, cooperative matrix {}",
                    d.index,
                    d.name,
                    d.kind,
                    d.api_version,
                    d.subgroup_size,
                    d.max_shared_memory / 1024,
                    d.max_push_constants,
                    d.max_storage_buffer_range / (1024 * 1024),
                    if d.cooperative_matrix { "yes" } else { "no" }
                );
            }
            match VulkanBackend::new(PrecisionChoice::Auto) {
                Ok(b) => {
                    println!(
                        "  backend uses      : [{}] {} ({}; binding limit {} MiB){}",
                        b.device_index(),
                        b.device_name(),
                        if b.uses_push_descriptors() {
                            "push descriptors"
                        } else {
                            "descriptor pools"
                        },
                        b.max_binding() >> 20,
                        if std::env::var_os("KINEMA_VK_DEVICE").is_some() {
                            " (KINEMA_VK_DEVICE)"
                        } else {
                            ""
                        }
                    );
                    println!(
                        "  cooperative matrix: {}",
                        b.cooperative_matrix()
                            .unwrap_or_else(|| "none (fast mode runs the strict GEMMs)".into())
                    );
                    println!("  --precision auto  : {}", b.info().precision.name());
                }
                Err(e) => println!("  backend           : unusable: {e}"),
            }
        }
        Err(why) => println!("  unavailable: {why}"),
    }
    println!("--backend auto     : {}", auto_choice());
    Ok(())
}

/// The Vulkan backend `--backend vulkan` would use, or why it cannot.
fn backend_json() -> serde_json::Value {
    match VulkanBackend::new(PrecisionChoice::Auto) {
        Ok(b) => serde_json::json!({
            "device_index": b.device_index(), "device": b.device_name(),
            "push_descriptors": b.uses_push_descriptors(), "max_binding": b.max_binding(),
            "subgroup_size": b.subgroup_size(),
            "cooperative_matrix": b.cooperative_matrix(),
            "auto_precision": b.info().precision.name(),
        }),
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

/// What `--backend auto` picks, and why.
fn auto_choice() -> String {
    match BackendChoice::Auto.select(PrecisionChoice::Auto) {
        Ok(Selection {
            backend,
            vulkan_unavailable,
        }) => {
            let i = backend.info();
            let mode = format!(
                "precision {}{}",
                i.precision.name(),
                if i.cooperative_matrix {
                    ", cooperative matrix"
                } else {
                    ""
                }
            );
            match vulkan_unavailable {
                Some(why) => format!("{} ({}, {mode}), because {why}", i.kind, i.device),
                None => format!("{} ({}, {mode})", i.kind, i.device),
            }
        }
        Err(e) => format!("error: {e}"),
    }
}

fn bench_kernels(o: &KernelOpts) -> kinema::Result<()> {
    if o.list {
        for (op, shape) in bench::OPS {
            println!("{op:<15} {shape}");
        }
        return Ok(());
    }
    let choice = PrecisionChoice::parse(&o.precision)?;
    let selection = BackendChoice::parse(&o.backend)?.select(choice)?;
    let precision = selection.backend.info().precision;
    if let Some(why) = &selection.vulkan_unavailable {
        eprintln!("kinema: using the CPU: {why}");
    }
    let isas: Vec<Isa> = match o.isa.as_deref() {
        None => vec![Isa::select()?],
        Some("all") => Isa::available(),
        Some(s) => vec![Isa::parse(s)?],
    };
    let threads = match o.threads {
        Some(t) => t,
        None => ThreadPool::default_threads()?,
    };
    let dtype = o
        .dtype
        .as_deref()
        .map(|d| {
            DType::parse(d).ok_or_else(|| {
                kinema::Error::InvalidArgument(format!(
                    "unknown dtype {d:?}: expected f32, f16, bf16 or q8_0"
                ))
            })
        })
        .transpose()?;
    let cases: Vec<(String, String, DType)> = match (&o.op, &o.shape) {
        (Some(op), _) if op == "fma_peak" || op == "coopmat_peak" => Vec::new(),
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
    let peak_only = matches!(o.op.as_deref(), Some("fma_peak" | "coopmat_peak"));
    if cases.is_empty() && !peak_only {
        return Err(kinema::Error::InvalidArgument(
            "no benchmark matches; give --op and --shape, or see --list".into(),
        ));
    }
    if !o.json {
        println!("{}", Measurement::table_header());
    }
    if let AnyBackend::Vulkan(b) = &selection.backend {
        if o.op.is_none() || o.op.as_deref() == Some("coopmat_peak") {
            match bench::coopmat_peak_measurement(b)? {
                Some(m) => println!("{}", if o.json { m.to_json() } else { m.table_row() }),
                None if o.op.is_some() => eprintln!(
                    "kinema: coopmat_peak: {} has no 16x16x16 f16 cooperative matrices",
                    b.device_name()
                ),
                None => {}
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
            bench::add_gpu_time(&mut m, &profiled, *dt, o.samples)?;
            println!("{}", if o.json { m.to_json() } else { m.table_row() });
        }
        return Ok(());
    }
    if o.op.as_deref() == Some("coopmat_peak") {
        return Err(kinema::Error::InvalidArgument(
            "coopmat_peak measures a Vulkan device's cooperative matrices: use --backend vulkan"
                .into(),
        ));
    }
    let with_peak = o.op.is_none() || o.op.as_deref() == Some("fma_peak");
    for isa in isas {
        if with_peak {
            for m in bench::peak_measurements(isa, threads) {
                println!("{}", if o.json { m.to_json() } else { m.table_row() });
            }
        }
        if o.op.as_deref() == Some("fma_peak") {
            continue;
        }
        let b = CpuBackend::with(isa, threads, precision)?;
        for (op, shape, dt) in &cases {
            let m = bench::measure(&b, op, shape, *dt, o.samples, Duration::from_millis(40))?;
            if o.json {
                println!("{}", m.to_json());
            } else {
                println!("{}", m.table_row());
            }
        }
    }
    Ok(())
}

fn bench_kimodo(o: &KimodoOpts) -> kinema::Result<()> {
    let precision = PrecisionChoice::parse(&o.precision)?;
    let selection = select_backend(&o.backend, precision, o.threads)?;
    if let Some(why) = &selection.vulkan_unavailable {
        eprintln!("kinema: using the CPU: {why}");
    }
    let r = match &selection.backend {
        AnyBackend::Cpu(b) => bench::kimodo(b, o.frames, o.steps, o.rows, o.layers)?,
        AnyBackend::Vulkan(b) => bench::kimodo(b, o.frames, o.steps, o.rows, o.layers)?,
    };
    println!("{}", if o.json { r.to_json() } else { r.text() });
    Ok(())
}

/// The backend of `--backend`, `--precision` and `--threads` (threads ask for the CPU).
fn select_backend(
    backend: &str,
    precision: PrecisionChoice,
    threads: Option<usize>,
) -> kinema::Result<Selection> {
    Ok(match (BackendChoice::parse(backend)?, threads) {
        (BackendChoice::Cpu, Some(t)) | (BackendChoice::Auto, Some(t)) => Selection {
            backend: AnyBackend::Cpu(CpuBackend::with(
                Isa::select()?,
                t,
                precision.resolve(false),
            )?),
            vulkan_unavailable: Some("--threads asks for the CPU".into()),
        },
        (choice, _) => choice.select(precision)?,
    })
}

fn generate(o: &GenerateOpts) -> kinema::Result<()> {
    use kinema::models::kimodo::generate::{GenerateRequest, describe_backend, generate};
    use std::io::IsTerminal;
    if o.prompt.is_some() {
        return Err(kinema::Error::InvalidArgument(
            "--prompt needs the LLM2Vec text model, which kinema cannot run yet; embed the \
             prompt with upstream's LLM2Vec and pass the [1, 4096] float32 .npy with --embedding"
                .into(),
        ));
    }
    let Some(embedding) = o.embedding.clone() else {
        return Err(kinema::Error::InvalidArgument(
            "--embedding FILE.npy is required (the text feature of the prompt)".into(),
        ));
    };
    let precision = PrecisionChoice::parse(&o.precision)?;
    let selection = select_backend(&o.backend, precision, o.threads)?;
    let show = !o.quiet && std::io::stderr().is_terminal();
    if let Some(why) = &selection.vulkan_unavailable
        && !o.quiet
    {
        eprintln!("kinema: using the CPU: {why}");
    }
    let req = GenerateRequest {
        model: o.model.clone(),
        embedding,
        noise: o.noise.clone(),
        frames: o.frames,
        steps: o.steps,
        cfg_text: o.cfg_text,
        cfg_constraint: o.cfg_constraint,
        cfg_rows: o.cfg_rows,
        seed: o.seed,
        heading: o.heading,
        diagnostics: o.diagnostics,
        output: o.output.clone(),
        glb: o.glb.clone(),
    };
    if show {
        eprintln!(
            "kinema: generating on {}",
            describe_backend(&selection.backend.info())
        );
    }
    let start = std::time::Instant::now();
    let mut progress = |step: usize, total: usize| {
        if show {
            let width = 30;
            let filled = step * width / total.max(1);
            let el = start.elapsed().as_secs_f64();
            let eta = if step > 0 {
                el / step as f64 * (total - step) as f64
            } else {
                0.0
            };
            eprint!(
                "\r  [{}{}] {step}/{total} steps  {el:.1} s  eta {eta:.1} s ",
                "#".repeat(filled),
                " ".repeat(width - filled)
            );
            if step == total {
                eprintln!();
            }
        }
    };
    let r = generate(&req, &selection.backend, &mut progress)?;
    if !o.quiet {
        eprintln!(
            "kinema: wrote {} ({} frames of {}, {} steps, {:.1} ms/step, {:.2} s total) and {}",
            r.outputs.join(", "),
            r.frames,
            r.output_skeleton,
            r.steps,
            r.timings.per_step_ms,
            r.timings.total_s,
            req.sidecar().display()
        );
    }
    Ok(())
}

fn drift_model(
    path: &std::path::Path,
    embedding: Option<PathBuf>,
    frames: usize,
    steps: usize,
    cfg_rows: usize,
    seed: u64,
    json: bool,
) -> kinema::Result<()> {
    use kinema::drift::Drift;
    use kinema::models::kimodo::drift::{compare_traces, trace};
    use kinema::models::kimodo::generate::read_embedding;
    use kinema::models::kimodo::sampler::SampleOptions;
    use kinema::models::kimodo::{KimodoModel, synthetic};
    let strict = KimodoModel::load(path)?;
    let c = strict.config.clone();
    let emb = match &embedding {
        Some(p) => read_embedding(p, c.llm_dim)?,
        None => synthetic::embedding(&c),
    };
    let opts = SampleOptions {
        steps,
        cfg_rows,
        seed,
        ..SampleOptions::new(&strict, frames)
    };
    // Fast precision runs 16-bit weight matrices, as `generate` does (f16 on Vulkan, bf16
    // on the CPU).
    let fast = |b: &kinema::backend::BackendInfo| KimodoModel::load(path)?.for_backend(b);
    let threads = ThreadPool::default_threads()?;
    let best = Isa::best();
    let reference = CpuBackend::with(best, threads, Precision::Strict)?;
    let shape = (cfg_rows, c.prefix_len() + frames, c.latent_dim);
    let want = trace(&reference, &strict, &emb, &opts)?;
    if !json {
        println!(
            "reference: cpu/{}/strict, {threads} threads; {} frames, {steps} steps, {cfg_rows} rows",
            best.name(),
            frames
        );
        println!("{}", Drift::table_header());
    }
    let emit = |rows: Vec<Drift>| {
        for d in rows {
            if json {
                println!("{}", serde_json::to_string(&d).unwrap_or_default());
            } else {
                println!("{}", d.table_row());
            }
        }
    };
    for isa in Isa::available() {
        // The scalar kernels are the op-level oracle; at model size they only cost time.
        if isa == best || isa == Isa::Scalar {
            continue;
        }
        let b = CpuBackend::with(isa, threads, Precision::Strict)?;
        let label = format!("cpu/{}/strict", isa.name());
        emit(compare_traces(
            &label,
            shape,
            &want,
            &trace(&b, &strict, &emb, &opts)?,
        ));
    }
    if kinema::cpu::isa::has_avx512_bf16() {
        let b = CpuBackend::with(best, threads, Precision::Fast)?;
        let label = format!("cpu/{}/fast", best.name());
        let m = fast(&b.info())?;
        emit(compare_traces(
            &label,
            shape,
            &want,
            &trace(&b, &m, &emb, &opts)?,
        ));
    }
    for p in [Precision::Strict, Precision::Fast] {
        match VulkanBackend::new(p) {
            Ok(v) => {
                let coop = if v.info().cooperative_matrix {
                    "+coopmat"
                } else {
                    ""
                };
                let label = format!("vulkan/{}/{}{coop}", v.device_name(), p.name());
                let narrowed;
                let m = if p == Precision::Fast {
                    narrowed = fast(&v.info())?;
                    &narrowed
                } else {
                    &strict
                };
                emit(compare_traces(
                    &label,
                    shape,
                    &want,
                    &trace(&v, m, &emb, &opts)?,
                ));
            }
            Err(e) => {
                eprintln!("kinema: Vulkan not compared: {e}");
                break;
            }
        }
    }
    Ok(())
}

fn drift(
    op: Option<String>,
    shape: Option<String>,
    dtype: Option<String>,
    json: bool,
) -> kinema::Result<()> {
    use kinema::drift::{Drift, compare, default_cases, run_case};
    let dtype = dtype
        .as_deref()
        .map(|d| {
            DType::parse(d).ok_or_else(|| {
                kinema::Error::InvalidArgument(format!(
                    "unknown dtype {d:?}: expected f32, f16, bf16 or q8_0"
                ))
            })
        })
        .transpose()?;
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
    let mut vulkan: Vec<(String, VulkanBackend)> = Vec::new();
    for p in [Precision::Strict, Precision::Fast] {
        match VulkanBackend::new(p) {
            Ok(v) => {
                let path = if v.info().cooperative_matrix {
                    "+coopmat"
                } else {
                    ""
                };
                vulkan.push((format!("vulkan/{}/{}{path}", v.device_name(), p.name()), v));
            }
            Err(e) => {
                eprintln!("kinema: Vulkan not compared: {e}");
                break;
            }
        }
    }
    if !json {
        println!("reference: cpu/scalar/strict, 1 thread");
        println!("{}", Drift::table_header());
    }
    let emit = |d: Drift| {
        if json {
            println!("{}", serde_json::to_string(&d).unwrap_or_default());
        } else {
            println!("{}", d.table_row());
        }
    };
    for (op, shape, dt) in &cases {
        let want = run_case(&reference, op, shape, *dt)?;
        for (label, b) in &cpus {
            emit(compare(
                op,
                shape,
                *dt,
                label,
                &want,
                &run_case(b, op, shape, *dt)?,
            ));
        }
        for (label, v) in &vulkan {
            emit(compare(
                op,
                shape,
                *dt,
                label,
                &want,
                &run_case(v, op, shape, *dt)?,
            ));
        }
    }
    Ok(())
}

fn convert_kimodo(
    dir: &std::path::Path,
    out: &std::path::Path,
    skeleton: Option<String>,
    num_heads: Option<usize>,
    dtype: &str,
    quiet: bool,
) -> kinema::Result<()> {
    use kinema::models::kimodo::SkeletonKind;
    use kinema::models::kimodo::convert::{ConvertOptions, Progress, convert};
    use std::io::{IsTerminal, Write};

    let dtype = match dtype {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        d => {
            return Err(kinema::Error::InvalidArgument(format!(
                "unknown --dtype {d:?}: expected f32, f16 or bf16"
            )));
        }
    };
    let opts = ConvertOptions {
        skeleton: skeleton.as_deref().map(SkeletonKind::parse).transpose()?,
        num_heads,
        dtype,
    };
    // On a terminal one line is redrawn. In a log a stage prints one line when it ends, and
    // only for files large enough to take a while.
    let tty = std::io::stderr().is_terminal();
    const MIB: f64 = (1u64 << 20) as f64;
    let mut show = |p: Progress| {
        if quiet {
            return;
        }
        let (line, finished, large) = match p {
            Progress::Checking { done, total } => (
                format!("checking tensors: {done} / {total}"),
                done >= total,
                false,
            ),
            Progress::Hashing { file, done, total } => (
                format!(
                    "hashing {file}: {:.1} / {:.1} MiB",
                    done as f64 / MIB,
                    total as f64 / MIB
                ),
                done >= total,
                total >= 64 << 20,
            ),
            Progress::Writing { done, total } => (
                format!(
                    "writing {}: {:.1} / {:.1} MiB",
                    out.display(),
                    done as f64 / MIB,
                    total as f64 / MIB
                ),
                done >= total,
                total >= 64 << 20,
            ),
        };
        if tty {
            eprint!("\r\x1b[2K{line}");
            if finished {
                eprint!("\r\x1b[2K");
            }
            let _ = std::io::stderr().flush();
        } else if finished && large {
            eprintln!("{line}");
        }
    };
    let c = convert(dir, out, &opts, &mut show)?;
    if !quiet {
        for n in &c.notes {
            eprintln!("note: {n}");
        }
        eprintln!(
            "wrote {}: Kimodo {} ({} layers x 2, width {}, {} heads), {} tensors, {:.1} M parameters, {} weights",
            out.display(),
            c.config.skeleton.name(),
            c.config.num_layers,
            c.config.latent_dim,
            c.config.num_heads,
            c.tensors,
            c.parameters as f64 / 1e6,
            dtype
        );
    }
    Ok(())
}
