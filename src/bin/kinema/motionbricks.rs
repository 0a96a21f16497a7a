//! `kinema plan`, `kinema agent`, `kinema convert motionbricks`, `kinema bench motionbricks` and `kinema drift
//! --model` for a MotionBricks file.

use std::path::{Path, PathBuf};

use clap::Args;
use kinema::backend::Backend;
use kinema::device::BackendVisitor;
use kinema::models::ModelHarness;
use kinema::models::kit::progress::ConvertProgress;
use kinema::models::motionbricks::MotionBricks;
use kinema::models::motionbricks::agent::run::{AgentRequest, AgentRun, agent_file};
use kinema::models::motionbricks::convert::{Sources, convert_with_progress};
use kinema::models::motionbricks::harness::{BenchOptions, DriftOptions};
use kinema::models::motionbricks::plan::PlanOutput;
use kinema::models::motionbricks::run::{PlanRequest, plan_file};
use kinema::models::motionbricks::sampler::parse_seed;

use crate::args::{RunArgs, weight_dtype};

/// `kinema plan`'s options.
#[derive(Args, Clone)]
pub struct PlanOpts {
    /// The MotionBricks model file (`kinema convert motionbricks`).
    #[arg(long)]
    model: PathBuf,
    /// predict's tensor arguments by name (see the README).
    #[arg(long)]
    inputs: PathBuf,
    /// argmax or gumbel (upstream predict's default).
    #[arg(long, default_value = "gumbel")]
    sampling: String,
    /// Gumbel uniforms, float32 .npy [B, 16, 8, 10] ([16, 8, 10] for one plan).
    #[arg(long)]
    uniforms: Option<PathBuf>,
    /// Seed of the first plan's uniform stream (plan b uses seed + b); default 0.
    #[arg(long, allow_hyphen_values = true)]
    seed: Option<String>,
    #[command(flatten)]
    run: RunArgs,
    /// Also write the root output, duration logits, pose logits, decoder output, uniforms.
    #[arg(long)]
    diagnostics: bool,
    /// Output npz (written atomically).
    #[arg(short, long)]
    output: PathBuf,
}

/// `kinema convert motionbricks`'s options: the three model folders (upstream's
/// out/motionbricks_*/version_1/ with model.safetensors = the checkpoint's state_dict,
/// config.yaml, stats/motion/).
#[derive(Args, Clone)]
pub struct ConvertOpts {
    /// The root model folder.
    #[arg(long)]
    root: PathBuf,
    /// The pose model folder.
    #[arg(long)]
    pose: PathBuf,
    /// The VQVAE folder.
    #[arg(long)]
    vqvae: PathBuf,
    /// The G1 description (default: upstream's assets/skeletons/g1/g1.xml beside out/).
    #[arg(long)]
    g1_xml: Option<PathBuf>,
    /// Dtype of the 2-D weight matrices: f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Output GGUF file (written atomically; it may not be one of the inputs).
    #[arg(short, long)]
    output: PathBuf,
}

/// `kinema bench motionbricks`'s options.
#[derive(Args, Clone)]
pub struct BenchOpts {
    /// Plans per batch.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Timed batches per sampling mode (argmax, then Gumbel), after one untimed warm-up.
    #[arg(long, default_value_t = 200)]
    plans: usize,
    /// Time this model file instead of the synthetic model at the released widths.
    #[arg(long)]
    model: Option<PathBuf>,
    #[command(flatten)]
    run: RunArgs,
}

/// `kinema bench motionbricks`.
pub fn bench(o: &BenchOpts) -> kinema::Result<()> {
    let opts = BenchOptions {
        model: o.model.clone(),
        batch: o.batch,
        plans: o.plans,
    };
    crate::bench::model::<MotionBricks>(&o.run.select()?, &opts, o.run.json)
}

/// `kinema drift --model`'s options for a MotionBricks file.
#[derive(Args, Clone)]
#[group(id = "motionbricks_drift")]
pub struct DriftOpts {
    /// With a MotionBricks --model: plans in the batch (deterministic synthetic requests).
    #[arg(long, default_value_t = 2)]
    batch: usize,
    /// With a MotionBricks --model: argmax or gumbel (plan i uses the uniform stream i).
    #[arg(long, default_value = "argmax")]
    sampling: String,
}

/// `kinema drift --model FILE` for a MotionBricks file.
pub fn drift(path: &Path, o: &DriftOpts, json: bool) -> kinema::Result<()> {
    let opts = DriftOptions {
        batch: o.batch,
        sampling: o.sampling.parse()?,
        seed: 0,
    };
    crate::drift::model(&MotionBricks::drift(path, &opts)?, json)
}

/// `kinema convert motionbricks`.
pub fn convert(o: &ConvertOpts) -> kinema::Result<()> {
    let dtype = weight_dtype(&o.dtype)?;
    let mut bar = ConvertProgress::new(&o.output, false);
    let c = convert_with_progress(
        &Sources {
            root: o.root.clone(),
            pose: o.pose.clone(),
            vqvae: o.vqvae.clone(),
            g1_xml: o.g1_xml.clone(),
        },
        &o.output,
        dtype,
        &mut |p| bar.show(p),
    )?;
    for n in &c.notes {
        eprintln!("note: {n}");
    }
    eprintln!(
        "wrote {}: MotionBricks (root {} x {} layers, pose {} x {} layers, {} x {} codes), {} tensors, {:.1} M parameters, {} weights",
        o.output.display(),
        c.config.root_n_embd,
        c.config.root_layers_shared + c.config.root_layers_token,
        c.config.pose_n_embd,
        c.config.pose_layers,
        c.config.code_heads,
        c.config.codes,
        c.tensors,
        c.parameters as f64 / 1e6,
        dtype
    );
    Ok(())
}

/// `kinema plan`.
pub fn plan(o: &PlanOpts) -> kinema::Result<()> {
    let req = PlanRequest {
        model: o.model.clone(),
        inputs: o.inputs.clone(),
        sampling: o.sampling.parse()?,
        uniforms: o.uniforms.clone(),
        seed: o.seed.as_deref().map(parse_seed).transpose()?,
        diagnostics: o.diagnostics,
        output: o.output.clone(),
    };
    let selection = o.run.select()?;
    let start = std::time::Instant::now();
    let out = selection.backend.visit(Plan { req: &req })?;
    if !o.run.quiet {
        eprintln!(
            "kinema: wrote {} ({} plan(s), {:?} tokens, {} sampling, {:.1} ms)",
            o.output.display(),
            out.num_tokens.len(),
            out.num_tokens,
            req.sampling,
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// [`plan`] on the chosen backend.
struct Plan<'a> {
    req: &'a PlanRequest,
}

impl BackendVisitor for Plan<'_> {
    type Output = kinema::Result<PlanOutput>;
    fn visit<B: Backend>(self, b: &B) -> Self::Output {
        plan_file(b, self.req)
    }
}

/// `kinema agent`'s options.
#[derive(Args, Clone)]
pub struct AgentOpts {
    /// The MotionBricks model file (`kinema convert motionbricks`).
    #[arg(long)]
    model: PathBuf,
    /// The style clips (clips.npz: STYLE.qpos, STYLE.allowed_pred_num_tokens,
    /// STYLE.avg_root_vel; see the README).
    #[arg(long)]
    clips: PathBuf,
    /// The scripted commands (commands.json; see the README).
    #[arg(long)]
    commands: PathBuf,
    /// argmax (what upstream's agent uses) or gumbel (plan i of the run draws from the stream
    /// of its command's seed + i).
    #[arg(long, default_value = "argmax")]
    sampling: String,
    /// Also write per plan predict's inputs, the uniforms, the tokens and the boundary outputs.
    #[arg(long)]
    trace: Option<PathBuf>,
    #[command(flatten)]
    run: RunArgs,
    /// Output npz: qpos [frames, 36] at 30 fps and per plan its frame, style, length and
    /// timing (written atomically, together with --trace).
    #[arg(short, long)]
    output: PathBuf,
}

/// `kinema agent`.
pub fn agent(o: &AgentOpts) -> kinema::Result<()> {
    let req = AgentRequest {
        model: o.model.clone(),
        clips: o.clips.clone(),
        commands: o.commands.clone(),
        sampling: o.sampling.parse()?,
        output: o.output.clone(),
        trace: o.trace.clone(),
    };
    let selection = o.run.select()?;
    let start = std::time::Instant::now();
    let run = selection.backend.visit(Agent { req: &req })?;
    if !o.run.quiet {
        let mut ms: Vec<f64> = run.plans.iter().map(|p| p.ms).collect();
        ms.sort_by(f64::total_cmp);
        let p50 = ms.get(ms.len() / 2).copied().unwrap_or(0.0);
        eprintln!(
            "kinema: wrote {} ({} frames, {} plans, {} sampling, plan p50 {:.1} ms, {:.1} s total)",
            o.output.display(),
            run.frames,
            run.plans.len(),
            req.sampling,
            p50,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// [`agent`] on the chosen backend.
struct Agent<'a> {
    req: &'a AgentRequest,
}

impl BackendVisitor for Agent<'_> {
    type Output = kinema::Result<AgentRun>;
    fn visit<B: Backend>(self, b: &B) -> Self::Output {
        agent_file(b, self.req)
    }
}
