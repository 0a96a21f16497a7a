//! Kimodo's commands: `generate`, `convert kimodo`, `bench kimodo`, and the options of
//! `drift --model` for a Kimodo file.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use kinema::Backend;
use kinema::device::BackendVisitor;
use kinema::models::ModelHarness;
use kinema::models::kimodo::convert::{self, ConvertOptions};
use kinema::models::kimodo::export::{Exports, Format};
use kinema::models::kimodo::generate::{self, GenerateReport, GenerateRequest, describe_backend};
use kinema::models::kimodo::import;
use kinema::models::kimodo::multiprompt::{self, TimelineText};
use kinema::models::kimodo::{Kimodo, SkeletonKind, bench, drift};
use kinema::models::kit::output::OutputPlan;

use crate::args::RunArgs;

/// `kinema generate`'s options.
#[derive(Args, Clone)]
pub struct GenerateOpts {
    /// The Kimodo model file (`kinema convert kimodo`).
    #[arg(long)]
    pub(crate) model: PathBuf,
    /// Text feature: float32 .npy of shape [1, 4096] or [1, 1, 4096] (upstream's LLM2Vec
    /// output for the prompt). Repeatable: with one --frames (or none), one motion per
    /// embedding in one batched graph; with one --frames per embedding, consecutive segments
    /// of one motion (multi-prompt).
    #[arg(long)]
    embedding: Vec<PathBuf>,
    /// A text prompt, embedded with --text-model (LLM2Vec) before the motion model loads;
    /// instead of --embedding. Repeatable, as --embedding.
    #[arg(long, conflicts_with = "embedding", requires = "text_model")]
    pub(crate) prompt: Vec<String>,
    /// A JSON list of prompts (instead of --prompt): the same as one --prompt each.
    #[arg(
        long,
        conflicts_with_all = ["embedding", "prompt", "timeline"],
        requires = "text_model"
    )]
    pub(crate) prompts_file: Option<PathBuf>,
    /// A timeline JSON: [{"prompt": TEXT | "embedding": FILE.npy, "frames": N}, ...], the
    /// segments of one motion in order (instead of --prompt/--embedding and --frames).
    #[arg(long, conflicts_with_all = ["embedding", "prompt", "frames"])]
    timeline: Option<PathBuf>,
    /// Multi-prompt: frames pinned and blended at each transition (upstream's
    /// num_transition_frames).
    #[arg(long, default_value_t = 5)]
    transition_frames: usize,
    /// The LLM2Vec text model for --prompt, --prompts-file and timeline prompts
    /// (`kinema convert llm2vec`).
    #[arg(long)]
    pub(crate) text_model: Option<PathBuf>,
    /// With prompts: keep the text model loaded (and prepared for the backend) through the
    /// motion phase, instead of freeing it before the motion model loads: less latency when
    /// this process goes on to more work, more memory. Within the text phase all prompts share
    /// one load either way.
    #[arg(long)]
    pub(crate) keep_text_loaded: bool,
    /// With --prompt: the Llama-3 chat template on, off, or auto (the text model's default,
    /// decided at conversion as upstream decides it).
    #[arg(long, default_value = "auto")]
    pub(crate) chat_template: String,
    /// With --prompt: do not read or write the embedding cache.
    #[arg(long)]
    pub(crate) no_cache: bool,
    /// With --prompt: the embedding cache folder (default: $KINEMA_CACHE_DIR/embeddings,
    /// $XDG_CACHE_HOME/kinema/embeddings or ~/.cache/kinema/embeddings).
    #[arg(long)]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Initial noise x_T: float32 .npy [1, T, dim] (for parity with a PyTorch run); default:
    /// drawn from --seed.
    #[arg(long)]
    noise: Option<PathBuf>,
    /// Frames at 30 fps (2 to 4948); may be omitted with --noise. Repeatable: one per
    /// --prompt/--embedding makes them consecutive segments of one motion.
    #[arg(long)]
    frames: Vec<usize>,
    /// DDIM steps.
    #[arg(long, default_value_t = 100)]
    steps: usize,
    /// Text guidance weight (default: the model's, 2).
    #[arg(long)]
    cfg_text: Option<f32>,
    /// Constraint guidance weight (default: the model's, 2).
    #[arg(long)]
    cfg_constraint: Option<f32>,
    /// Guidance rows: 2 (exact without constraints) or 3 (upstream's [text, constraint,
    /// uncond]); default 2, or 3 with --constraints.
    #[arg(long)]
    cfg_rows: Option<usize>,
    /// Upstream's constraints.json (root2d, fullbody, left/right-hand, left/right-foot,
    /// end-effector); runs the constraint guidance row.
    #[arg(long)]
    constraints: Option<PathBuf>,
    /// Motions from seeds seed..seed+N-1 in one batched graph; N > 1 writes
    /// <stem>/<stem>_00.npz, ... as upstream does.
    #[arg(long, default_value_t = 1)]
    samples: usize,
    /// Seed of the initial noise (SplitMix64 + Box-Muller, see the README).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// First heading angle in radians.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    heading: f32,
    // --json prints the report (the sidecar's content) on stdout; --quiet: no progress bar,
    // no notes and no summary.
    #[command(flatten)]
    pub(crate) run: RunArgs,
    /// Add the first step's stage outputs and guided prediction to the npz.
    #[arg(long)]
    diagnostics: bool,
    /// Skip the post-processing (foot-skate and constraint cleanup by trajectory correction
    /// and IK, upstream's MotionCorrection), which runs by default except for G1 models,
    /// as upstream's CLI does.
    #[arg(long)]
    no_postprocess: bool,
    /// Also write an animated glTF binary (skeleton only; skinned with --skin).
    #[arg(long)]
    glb: Option<PathBuf>,
    #[command(flatten)]
    exports: ExportArgs,
    /// Output npz (upstream's keys plus `features`); a JSON sidecar is written beside it.
    #[arg(short, long)]
    pub(crate) output: PathBuf,
}

/// The extra exports of `generate` and `convert motion` (one file per flag).
#[derive(Args, Clone, Default)]
pub struct ExportArgs {
    /// Also write BVH (SOMA models), upstream's layout.
    #[arg(long)]
    bvh: Option<PathBuf>,
    /// BVH in Kimodo's standard T-pose instead of upstream's BVH rest pose.
    #[arg(long)]
    bvh_standard_tpose: bool,
    /// Also write the MuJoCo qpos CSV (G1 models).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Also write the AMASS / SMPL-X npz (SMPL-X models).
    #[arg(long)]
    amass: Option<PathBuf>,
    /// Upstream's somaskel77/skin_standard.npz: GLB outputs carry the skinned body (SOMA).
    #[arg(long)]
    skin: Option<PathBuf>,
}

impl ExportArgs {
    /// The exports these flags ask for.
    pub fn exports(&self) -> Exports {
        let mut files = Vec::new();
        for (f, p, flag) in [
            (Format::Bvh, &self.bvh, "--bvh"),
            (Format::Csv, &self.csv, "--csv"),
            (Format::Amass, &self.amass, "--amass"),
        ] {
            if let Some(p) = p {
                files.push((f, p.clone(), flag.to_string()));
            }
        }
        Exports {
            files,
            skin: self.skin.clone(),
            bvh_standard_tpose: self.bvh_standard_tpose,
        }
    }
}

/// `kinema convert motion`'s options.
#[derive(Args, Clone)]
pub struct ConvertMotionOpts {
    /// The motion: upstream's motion npz (also the shipped demo clips) or a SOMA BVH.
    input: PathBuf,
    /// Output file; its extension picks the writer (.npz, .bvh, .csv, .glb) unless --format.
    #[arg(short, long)]
    output: PathBuf,
    /// npz, bvh, csv, amass or glb (amass needs it: its extension is .npz).
    #[arg(long)]
    format: Option<String>,
    /// Frames per second of the output when the input does not say (npz); BVH keeps its own.
    #[arg(long, default_value_t = 30.0)]
    fps: f32,
    /// Also write a GLB.
    #[arg(long)]
    glb: Option<PathBuf>,
    #[command(flatten)]
    exports: ExportArgs,
    /// No summary on stderr.
    #[arg(long)]
    quiet: bool,
}

/// `kinema convert kimodo`'s options.
#[derive(Args, Clone)]
pub struct ConvertOpts {
    /// The checkpoint directory.
    checkpoint_dir: PathBuf,
    /// Output GGUF file (written atomically).
    #[arg(short, long)]
    output: PathBuf,
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
}

/// `kinema convert`'s models.
#[derive(Subcommand)]
pub enum ConvertCmd {
    /// A Kimodo checkpoint directory (the Hugging Face layout: model.safetensors,
    /// stats/motion/..., config.yaml).
    Kimodo(ConvertOpts),
    /// The three MotionBricks model folders (upstream's out/motionbricks_*/version_1/ with
    /// model.safetensors = the checkpoint's state_dict, config.yaml, stats/motion/).
    Motionbricks(crate::motionbricks::ConvertOpts),
    /// LLM2Vec's text encoder: a Hugging Face Llama folder (--base) and PEFT LoRA adapters
    /// (--adapter, merged in the order given).
    Llm2vec(crate::llm2vec_convert::ConvertOpts),
    /// A Kimodo motion (upstream's motion npz, a demo clip, or a SOMA BVH) into another format:
    /// npz, BVH (SOMA), MuJoCo CSV (G1), AMASS npz (SMPL-X), GLB (skinned with --skin).
    Motion(ConvertMotionOpts),
}

impl ConvertCmd {
    /// Runs the conversion.
    pub fn run(&self) -> kinema::Result<()> {
        match self {
            ConvertCmd::Kimodo(o) => convert(
                &o.checkpoint_dir,
                &o.output,
                o.skeleton.clone(),
                o.num_heads,
                &o.dtype,
                o.quiet,
            ),
            ConvertCmd::Motionbricks(o) => crate::motionbricks::convert(o),
            ConvertCmd::Llm2vec(o) => crate::llm2vec_convert::convert(o),
            ConvertCmd::Motion(o) => convert_motion(o),
        }
    }
}

/// `kinema bench kimodo`'s options.
#[derive(Args, Clone)]
pub struct BenchOpts {
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
    /// Motions generated side by side in one batched generation, each with its own text
    /// feature and seed (the throughput of a host that generates many).
    #[arg(long, default_value_t = 1)]
    samples: usize,
    #[command(flatten)]
    run: RunArgs,
}

/// `kinema bench kimodo`.
pub fn bench(o: &BenchOpts) -> kinema::Result<()> {
    let opts = bench::BenchOptions {
        frames: o.frames,
        steps: o.steps,
        rows: o.rows,
        layers: o.layers,
        samples: o.samples,
    };
    crate::bench::model::<Kimodo>(&o.run.select()?, &opts, o.run.json)
}

/// `kinema drift --model`'s options for a Kimodo file.
#[derive(Args, Clone)]
pub struct DriftOpts {
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
}

/// `kinema drift --model FILE` for a Kimodo file.
pub fn drift(path: &Path, o: &DriftOpts, json: bool) -> kinema::Result<()> {
    let opts = drift::DriftOptions {
        embedding: o.embedding.clone(),
        frames: o.frames,
        steps: o.steps,
        cfg_rows: o.cfg_rows,
        seed: o.seed,
    };
    crate::drift::model(&Kimodo::drift(path, &opts)?, json)
}

/// `kinema generate`.
pub fn generate(o: &GenerateOpts) -> kinema::Result<()> {
    let selection = o.run.select()?;
    // The text features and frames: --timeline entries, or the --prompt (--prompts-file) /
    // --embedding and --frames lists.
    enum Text {
        Prompt(String),
        File(PathBuf),
    }
    let (texts, frames): (Vec<Text>, Vec<usize>) = match &o.timeline {
        Some(t) => {
            let bytes = std::fs::read(t).map_err(|e| kinema::Error::io(t, e))?;
            let base = t.parent().unwrap_or(Path::new("."));
            let entries = multiprompt::parse_timeline(&bytes, base).map_err(|e| match e {
                kinema::Error::InvalidArgument(m) => {
                    kinema::Error::InvalidArgument(format!("{}: {m}", t.display()))
                }
                e => e,
            })?;
            entries
                .into_iter()
                .map(|e| {
                    let text = match e.text {
                        TimelineText::Prompt(p) => Text::Prompt(p),
                        TimelineText::Embedding(p) => Text::File(p),
                    };
                    (text, e.frames)
                })
                .unzip()
        }
        None => {
            let prompts = match &o.prompts_file {
                Some(f) => crate::prompt::read_prompts_file(f)?,
                None => o.prompt.clone(),
            };
            let texts = if prompts.is_empty() {
                o.embedding.iter().cloned().map(Text::File).collect()
            } else {
                prompts.into_iter().map(Text::Prompt).collect()
            };
            (texts, o.frames.clone())
        }
    };
    let prompts: Vec<String> = texts
        .iter()
        .filter_map(|t| match t {
            Text::Prompt(p) => Some(p.clone()),
            Text::File(_) => None,
        })
        .collect();
    if prompts.is_empty() && (o.text_model.is_some() || o.keep_text_loaded) {
        return Err(kinema::Error::InvalidArgument(
            "--text-model and --keep-text-loaded apply to prompts (--prompt, --prompts-file or \
             timeline prompts)"
                .into(),
        ));
    }
    // The text phase: every prompt embedded (through the cache) with one load of the text
    // model, freed before the motion model loads unless --keep-text-loaded.
    let phase = match (&o.text_model, prompts.is_empty()) {
        (_, true) => None,
        (Some(text_model), false) => Some(crate::prompt::text_phase(
            &crate::prompt::TextPhaseOptions {
                model: &o.model,
                chat_template: &o.chat_template,
                no_cache: o.no_cache,
                cache_dir: o.cache_dir.as_deref(),
                keep_text_loaded: o.keep_text_loaded,
                quiet: o.run.quiet,
            },
            &selection,
            &prompts,
            text_model,
        )?),
        (None, false) => {
            return Err(kinema::Error::InvalidArgument(format!(
                "prompt {:?} needs --text-model text.gguf (LLM2Vec) to embed it",
                prompts[0]
            )));
        }
    };
    let mut embeddings = Vec::with_capacity(texts.len());
    let mut text = Vec::with_capacity(texts.len());
    let mut embedded = phase.iter().flat_map(|p| p.prompts.iter());
    for t in texts {
        match t {
            Text::File(p) => {
                embeddings.push(p);
                text.push(None);
            }
            Text::Prompt(_) => {
                let (path, record) = embedded.next().expect("one embedding per prompt");
                embeddings.push(path.clone());
                text.push(Some(record.clone()));
            }
        }
    }
    if embeddings.is_empty() {
        return Err(kinema::Error::InvalidArgument(
            "give --embedding FILE.npy (the text feature of the prompt), --prompt TEXT with \
             --text-model text.gguf, or --timeline FILE.json"
                .into(),
        ));
    }
    let req = GenerateRequest {
        model: o.model.clone(),
        embeddings,
        noise: o.noise.clone(),
        frames,
        transition_frames: o.transition_frames,
        steps: o.steps,
        cfg_text: o.cfg_text,
        cfg_constraint: o.cfg_constraint,
        cfg_rows: o
            .cfg_rows
            .unwrap_or(if o.constraints.is_some() { 3 } else { 2 }),
        constraints: o.constraints.clone(),
        samples: o.samples,
        seed: o.seed,
        heading: o.heading,
        diagnostics: o.diagnostics,
        postprocess: !o.no_postprocess,
        output: o.output.clone(),
        glb: o.glb.clone(),
        exports: o.exports.exports(),
        text,
    };
    let r = generate_one(o, &selection, &req);
    // The scratch embeddings and a text model kept loaded live until the motion is written.
    drop(phase);
    r
}

/// One motion of `req` on the selected backend, with the progress bar and the summary.
pub(crate) fn generate_one(
    o: &GenerateOpts,
    selection: &kinema::device::Selection,
    req: &GenerateRequest,
) -> kinema::Result<()> {
    let show = !o.run.quiet && std::io::stderr().is_terminal();
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
    let r = selection.backend.visit(Generate {
        req,
        progress: &mut progress,
    })?;
    if o.run.json {
        let json = serde_json::to_string_pretty(&r)
            .map_err(|e| kinema::Error::InvalidArgument(format!("JSON report: {e}")))?;
        println!("{json}");
    }
    if !o.run.quiet {
        eprintln!(
            "kinema: wrote {} ({} frames of {}, {} steps, {:.1} ms/step, {:.2} s total) and {}",
            r.outputs.join(", "),
            r.frames,
            r.output_skeleton,
            r.steps,
            r.timings.per_step_ms,
            r.timings.total_s,
            if req.motions() > 1 {
                "a JSON sidecar beside each npz".to_string()
            } else {
                req.sidecar().display().to_string()
            }
        );
        if let Some(t) = &r.text {
            eprintln!(
                "kinema: text phase {:.2} s, peak {}; motion phase {:.2} s, peak {}",
                t.seconds,
                crate::prompt::describe_memory(&t.memory),
                r.timings.total_s,
                crate::prompt::describe_memory(&r.memory)
            );
        }
    }
    Ok(())
}

/// [`generate`] on the chosen backend.
struct Generate<'a> {
    req: &'a GenerateRequest,
    progress: &'a mut dyn FnMut(usize, usize),
}

impl BackendVisitor for Generate<'_> {
    type Output = kinema::Result<GenerateReport>;
    fn visit<B: Backend>(self, b: &B) -> Self::Output {
        generate::generate(self.req, b, self.progress)
    }
}

/// `kinema convert kimodo`.
pub fn convert(
    dir: &Path,
    out: &Path,
    skeleton: Option<String>,
    num_heads: Option<usize>,
    dtype: &str,
    quiet: bool,
) -> kinema::Result<()> {
    let dtype = crate::args::weight_dtype(dtype)?;
    let opts = ConvertOptions {
        skeleton: skeleton.as_deref().map(SkeletonKind::parse).transpose()?,
        num_heads,
        dtype,
    };
    let mut bar = kinema::models::kit::progress::ConvertProgress::new(out, quiet);
    let c = convert::convert(dir, out, &opts, &mut |p| bar.show(p))?;
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

/// `kinema convert motion`: read a motion, write it in every asked format, each checked by
/// reading it back, all renamed into place together.
pub fn convert_motion(o: &ConvertMotionOpts) -> kinema::Result<()> {
    let main = Format::pick(o.format.as_deref(), &o.output)?;
    let mut exports = o.exports.exports();
    exports
        .files
        .insert(0, (main, o.output.clone(), "--output".into()));
    if let Some(g) = &o.glb {
        exports.files.push((Format::Glb, g.clone(), "--glb".into()));
    }
    let mut plan = OutputPlan::new();
    plan.input(&o.input, "the input motion");
    exports.plan(&mut plan);
    let mut outputs = plan.check()?;
    let imported = import::read_motion(&o.input)?;
    let fps = imported.fps.unwrap_or(o.fps);
    if !(fps.is_finite() && fps > 0.0) {
        return Err(kinema::Error::InvalidArgument(format!(
            "--fps {fps} is not a positive frame rate"
        )));
    }
    let prepared = exports.prepare(imported.motion.skeleton)?;
    let mut written = Vec::new();
    for (f, path, _) in &exports.files {
        let bytes = if *f == Format::Npz {
            // Only what the input held: no invented contacts or smooth root.
            let mut b = Vec::new();
            import::imported_npz(&imported)?.write_to(&mut b)?;
            kinema::models::kimodo::export::reread(*f, &b, &imported.motion, fps, false)?;
            b
        } else {
            prepared.render(*f, &imported.motion, fps)?
        };
        outputs.write(path, |w| w.write_all(&bytes))?;
        written.push(path.display().to_string());
    }
    outputs.commit()?;
    if !o.quiet {
        eprintln!(
            "kinema: wrote {} ({} frames of {} at {fps} fps)",
            written.join(", "),
            imported.motion.frames,
            imported.motion.skeleton.name()
        );
    }
    Ok(())
}
