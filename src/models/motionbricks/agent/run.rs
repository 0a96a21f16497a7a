//! The navigation agent's loop (`full_navigation_agent.generate_new_frames`,
//! `motion_backbone/demo/full_agent.py#L109-166`, driven as the demo drives it,
//! `scripts/interactive_demo_g1.py#L71-103`) and `kinema agent`'s files.
//!
//! Playback runs at 30 fps from the idle clip. Each tick plays the current frame and advances;
//! once 16 frames of a plan have played (`controller_dt * fps` = 8/30 s x 2.0 x 30,
//! `demo/controllers.py#L52`, `full_agent.py#L122-128`) the next plan starts from the 4
//! frames ahead (`get_context_mujoco_qpos`, #L517-521) and playback restarts at its frame 0
//! (#L487). Idle after idle does not replan (#L589-596).

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::canonical::{
    blend, canonical_direction, canonical_waypoint, canonicalize, uncanonicalize,
};
use super::clips::{ClipLibrary, LENGTHS, STYLES, realign_context, target_window};
use super::commands::{self, Command};
use super::keyframes::plan_inputs;
use super::kinematics::G1Kinematics;
use super::spring::{FPT, SpringInput, SpringOutput, spring};
use crate::backend::Backend;
use crate::formats::{NpyArray, NpzWriter};
use crate::models::kit::output::OutputPlan;
use crate::models::motionbricks::dims::{self, QPOS};
use crate::models::motionbricks::model::MotionBricksModel;
use crate::models::motionbricks::plan::{
    PlanInputs, PlanOutput, Planner, Randomness, masked_num_tokens,
};
use crate::models::motionbricks::sampler::Sampling;
use crate::{Error, Result};

/// Frames played between plans.
pub const REPLAN_FRAMES: usize = 16;
/// Frames the starting buffer is padded to (`NUM_MIN_FRAMES_IN_BUFFER`, #L101-107).
const MIN_BUFFER: usize = 64;

/// One plan of a run.
#[derive(Clone, Debug)]
pub struct PlanRecord {
    /// The output frame its first frame plays at.
    pub frame: usize,
    /// The command it served and the style it used (after the walk remap).
    pub command: usize,
    pub style: usize,
    /// The Gumbel stream's seed (Gumbel only).
    pub seed: u64,
    /// Wall time of the whole plan (host math and predict) and of predict alone, ms.
    pub ms: f64,
    pub predict_ms: f64,
    /// The raw context qpos `[4, 36]`.
    pub context: Vec<f32>,
    pub spring: SpringOutput,
    pub inputs: PlanInputs,
    pub output: PlanOutput,
    /// The planned qpos in the world, blended and truncated: `[4 n, 36]`.
    pub qpos: Vec<f32>,
}

/// The agent's state: what is playing, where, and how many plans were made. It holds no
/// references, so a host object can own it beside the model and clips; every call takes the
/// planner, model and clips it plays with (always the same ones for one agent).
#[derive(Clone, Debug)]
pub struct Agent {
    /// The qpos being played `[len, 36]`.
    frames: Vec<f32>,
    cur: usize,
    mode: Option<usize>,
    /// Frames played and plans made so far.
    tick: usize,
    plans: usize,
}

fn bad(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

impl Agent {
    /// Start from the idle clip, padded with its last frame to 64 frames.
    pub fn new(model: &MotionBricksModel, clips: &ClipLibrary) -> Result<Agent> {
        let c = &model.config;
        if c.length_classes() != LENGTHS + 1 || c.frames_per_token() != FPT {
            return Err(bad(format!(
                "the agent needs a G1 model of {} lengths and {FPT} frames per token; this one has {} and {}",
                LENGTHS,
                c.length_classes() - 1,
                c.frames_per_token()
            )));
        }
        let idle = clips.clip(0)?;
        let mut frames = idle.qpos.clone();
        let last = frames[frames.len() - QPOS..].to_vec();
        while frames.len() < MIN_BUFFER * QPOS {
            frames.extend_from_slice(&last);
        }
        Ok(Agent {
            frames,
            cur: 0,
            mode: None,
            tick: 0,
            plans: 0,
        })
    }

    fn len(&self) -> usize {
        self.frames.len() / QPOS
    }

    /// Frames played so far.
    pub fn frames_played(&self) -> usize {
        self.tick
    }

    /// Plans made so far.
    pub fn plans_made(&self) -> usize {
        self.plans
    }

    /// Whether the next [`Agent::tick`] under `command` plans (so needs a planner).
    pub fn plan_due(&self, command: &Command) -> bool {
        let cur = (self.cur + 1).min(self.len() - 1);
        if cur < REPLAN_FRAMES && cur < self.len() - 1 {
            return false;
        }
        !(self.mode == Some(0) && command.mode == 0)
    }

    /// One 30 fps tick: the frame to play, then a new plan if one is due under `command`
    /// (the `command_index`-th of the run; its Gumbel stream starts at the command's seed
    /// plus the number of plans made before). `planner` may be `None` when
    /// [`Agent::plan_due`] says no plan is due.
    pub fn tick<B: Backend>(
        &mut self,
        planner: Option<&Planner<'_, B>>,
        model: &MotionBricksModel,
        clips: &ClipLibrary,
        command: &Command,
        command_index: usize,
    ) -> Result<(Vec<f32>, Option<PlanRecord>)> {
        let due = self.plan_due(command);
        let frame_no = self.tick;
        let played = self.frames[self.cur * QPOS..(self.cur + 1) * QPOS].to_vec();
        let planner = match (due, planner) {
            (false, _) => None,
            (true, Some(p)) => Some(p),
            (true, None) => {
                return Err(bad("agent: a plan is due and no planner was given".into()));
            }
        };
        self.cur = (self.cur + 1).min(self.len() - 1);
        self.tick += 1;
        let Some(planner) = planner else {
            return Ok((played, None));
        };
        let mut context = Vec::with_capacity(FPT * QPOS);
        for i in 0..FPT {
            let f = (self.cur + i).min(self.len() - 1);
            context.extend_from_slice(&self.frames[f * QPOS..(f + 1) * QPOS]);
        }
        let seed = command.seed.wrapping_add(self.plans as u64);
        let mut rec = plan(
            planner,
            model,
            clips,
            &context,
            command,
            command_index,
            seed,
        )?;
        rec.frame = frame_no + 1;
        self.frames = rec.qpos.clone();
        self.cur = 0;
        self.mode = Some(rec.style);
        self.plans += 1;
        Ok((played, Some(rec)))
    }
}

/// One plan from raw context qpos `[4, 36]` (`generate_new_frames`' body, #L130-166).
pub fn plan<B: Backend>(
    planner: &Planner<'_, B>,
    model: &MotionBricksModel,
    clips: &ClipLibrary,
    context: &[f32],
    command: &Command,
    command_index: usize,
    plan_seed: u64,
) -> Result<PlanRecord> {
    let start = Instant::now();
    let m = model;
    let fps = m.config.fps;
    let mut canon = context.to_vec();
    let f0 = canonicalize(&mut canon);
    let k = G1Kinematics::get();
    let mut ctx: Vec<_> = canon.chunks_exact(QPOS).map(|q| k.transforms(q)).collect();
    let avg = clips.avg_root_vel();
    let s = spring(&SpringInput {
        context: &ctx,
        mode: command.mode,
        avg_root_vel: &avg,
        seed: command.seed,
        target_vel: command.speed,
        movement: canonical_direction(&f0, &command.movement),
        facing: canonical_direction(&f0, &command.facing),
        waypoint: command
            .waypoint
            .map(|(p, h)| canonical_waypoint(&f0, &p, h)),
        fps,
    });
    let clip = clips.clip(s.mode).map_err(|_| {
        bad(format!(
            "commands[{command_index}]: walking sideways in style {:?} uses style {:?}, which the clip file lacks",
            STYLES[command.mode], STYLES[s.mode]
        ))
    })?;
    let target = target_window(clip, command.seed, &s);
    realign_context(&mut ctx, &s);
    let allowed = &clips.clip(command.mode)?.allowed;
    let inputs = plan_inputs(
        &ctx,
        &target,
        &s.target_headings,
        allowed,
        masked_num_tokens(&m.config),
        fps,
    );
    let random = match planner.sampling() {
        Sampling::Argmax => None,
        Sampling::Gumbel => Some(Randomness::Seeds(vec![plan_seed])),
    };
    let t = Instant::now();
    let output = planner.plan(&inputs, random.as_ref())?;
    let predict_ms = t.elapsed().as_secs_f64() * 1e3;
    let n = output.num_tokens[0] as usize * FPT;
    let mut qpos = output.qpos.clone();
    uncanonicalize(&mut qpos, &f0);
    blend(&mut qpos, context);
    qpos.truncate(n * QPOS);
    Ok(PlanRecord {
        frame: 0,
        command: command_index,
        style: s.mode,
        seed: plan_seed,
        ms: start.elapsed().as_secs_f64() * 1e3,
        predict_ms,
        context: context.to_vec(),
        spring: s,
        inputs,
        output,
        qpos,
    })
}

/// Drops what a plan record keeps beyond its length and timings (the inputs, `predict`'s
/// arrays and the planned qpos), which an hour's run would otherwise hold by the gigabyte.
pub fn slim(p: &mut PlanRecord) {
    p.output = PlanOutput {
        num_tokens: std::mem::take(&mut p.output.num_tokens),
        ..PlanOutput::default()
    };
    p.inputs = PlanInputs::default();
    p.qpos = Vec::new();
}

/// A whole run.
#[derive(Clone, Debug, Default)]
pub struct AgentRun {
    /// `[frames, 36]` at 30 fps.
    pub qpos: Vec<f32>,
    pub frames: usize,
    pub plans: Vec<PlanRecord>,
}

/// Play `commands` from the idle clip. With `keep_outputs` false each plan keeps only its
/// length of `predict`'s outputs and inputs (an hour's run would otherwise hold gigabytes);
/// a trace needs them all.
pub fn run_commands<B: Backend>(
    planner: &Planner<'_, B>,
    model: &MotionBricksModel,
    clips: &ClipLibrary,
    commands: &[Command],
    keep_outputs: bool,
) -> Result<AgentRun> {
    let fps = model.config.fps as f64;
    let total = commands::total_frames(commands, fps);
    let mut agent = Agent::new(model, clips)?;
    let mut run = AgentRun {
        qpos: Vec::with_capacity(total * QPOS),
        frames: total,
        plans: Vec::new(),
    };
    for tick in 0..total {
        let (ci, cmd) = commands::at(commands, tick, fps);
        let (frame, plan) = agent.tick(Some(planner), model, clips, cmd, ci)?;
        run.qpos.extend_from_slice(&frame);
        if let Some(mut p) = plan {
            if !keep_outputs {
                slim(&mut p);
            }
            run.plans.push(p);
        }
    }
    Ok(run)
}

/// What `kinema agent` was asked for.
#[derive(Clone, Debug)]
pub struct AgentRequest {
    pub model: PathBuf,
    pub clips: PathBuf,
    pub commands: PathBuf,
    pub sampling: Sampling,
    pub output: PathBuf,
    pub trace: Option<PathBuf>,
}

fn stack_f32(w: &mut NpzWriter, name: &str, shape: &[usize], rows: Vec<&[f32]>) -> Result<()> {
    let mut s = vec![rows.len()];
    s.extend_from_slice(shape);
    let v: Vec<f32> = rows.concat();
    w.add(name, &NpyArray::from_f32(&s, &v)?)
}

fn stack_bool(w: &mut NpzWriter, name: &str, shape: &[usize], rows: Vec<&[bool]>) -> Result<()> {
    let mut s = vec![rows.len()];
    s.extend_from_slice(shape);
    let v: Vec<bool> = rows.concat();
    w.add(name, &NpyArray::from_bool(&s, &v)?)
}

fn i64s(w: &mut NpzWriter, name: &str, v: impl Iterator<Item = i64>) -> Result<()> {
    let v: Vec<i64> = v.collect();
    w.add(name, &NpyArray::from_i64(&[v.len()], &v)?)
}

/// `run.npz`: `qpos [frames, 36]`, `fps`, and per plan `plan_frame`, `plan_command`,
/// `plan_style`, `plan_num_tokens`, `plan_ms`, `plan_predict_ms`.
pub fn run_npz(run: &AgentRun, fps: f32) -> Result<NpzWriter> {
    let mut w = NpzWriter::new();
    w.add("qpos", &NpyArray::from_f32(&[run.frames, QPOS], &run.qpos)?)?;
    w.add("fps", &NpyArray::from_f32(&[], &[fps])?)?;
    let p = &run.plans;
    i64s(&mut w, "plan_frame", p.iter().map(|r| r.frame as i64))?;
    i64s(&mut w, "plan_command", p.iter().map(|r| r.command as i64))?;
    i64s(&mut w, "plan_style", p.iter().map(|r| r.style as i64))?;
    i64s(
        &mut w,
        "plan_num_tokens",
        p.iter().map(|r| i64::from(r.output.num_tokens[0])),
    )?;
    let ms: Vec<f64> = p.iter().map(|r| r.ms).collect();
    w.add("plan_ms", &NpyArray::from_f64(&[ms.len()], &ms)?)?;
    let ms: Vec<f64> = p.iter().map(|r| r.predict_ms).collect();
    w.add("plan_predict_ms", &NpyArray::from_f64(&[ms.len()], &ms)?)?;
    Ok(w)
}

/// `trace.npz`: per plan (first axis), `predict`'s exact arguments as `in.<name>`, the Gumbel
/// seeds and uniforms drawn, the chosen lengths, the tokens and the boundary outputs
/// (`duration_logits`, `root_output`, `local_root`, `pose_logits`, `decoder_output`,
/// `features`, `plan_qpos` as predict returns it) plus the raw `context_qpos`.
pub fn trace_npz(run: &AgentRun, m: &MotionBricksModel) -> Result<NpzWriter> {
    let c = &m.config;
    let (t, h, k, f) = (c.max_tokens, c.code_heads, c.codes, c.max_frames());
    let kf = 2 * FPT;
    let p = &run.plans;
    let mut w = NpzWriter::new();
    fn i(r: &PlanRecord) -> &PlanInputs {
        &r.inputs
    }
    stack_f32(
        &mut w,
        "in.global_root_values",
        &[kf, dims::GLOBAL_ROOT],
        p.iter().map(|r| &i(r).global_root_values[..]).collect(),
    )?;
    stack_bool(
        &mut w,
        "in.has_global_root_values",
        &[kf],
        p.iter().map(|r| &i(r).has_global_root_values[..]).collect(),
    )?;
    stack_f32(
        &mut w,
        "in.local_root_values",
        &[kf, dims::LOCAL_ROOT],
        p.iter().map(|r| &i(r).local_root_values[..]).collect(),
    )?;
    stack_bool(
        &mut w,
        "in.has_local_root_values",
        &[kf],
        p.iter().map(|r| &i(r).has_local_root_values[..]).collect(),
    )?;
    stack_f32(
        &mut w,
        "in.local_poses",
        &[kf, dims::EXTERNAL_POSE],
        p.iter().map(|r| &i(r).local_poses[..]).collect(),
    )?;
    stack_bool(
        &mut w,
        "in.has_local_poses",
        &[kf],
        p.iter().map(|r| &i(r).has_local_poses[..]).collect(),
    )?;
    i64s(
        &mut w,
        "in.num_tokens",
        p.iter().map(|r| r.inputs.num_tokens[0]),
    )?;
    stack_bool(
        &mut w,
        "in.allowed_pred_num_tokens",
        &[LENGTHS],
        p.iter()
            .map(|r| &i(r).allowed_pred_num_tokens[..])
            .collect(),
    )?;
    let seeds: Vec<i64> = p.iter().map(|r| r.seed as i64).collect();
    w.add("seeds", &NpyArray::from_i64(&[seeds.len()], &seeds)?)?;
    if p.iter().all(|r| !r.output.uniforms.is_empty()) && !p.is_empty() {
        stack_f32(
            &mut w,
            "uniforms",
            &[t, h, k],
            p.iter().map(|r| &r.output.uniforms[..]).collect(),
        )?;
    }
    i64s(
        &mut w,
        "num_tokens",
        p.iter().map(|r| i64::from(r.output.num_tokens[0])),
    )?;
    let tok: Vec<i64> = p
        .iter()
        .flat_map(|r| r.output.pose_tokens.iter().map(|&v| i64::from(v)))
        .collect();
    w.add("pose_tokens", &NpyArray::from_i64(&[p.len(), t, h], &tok)?)?;
    fn o(r: &PlanRecord) -> &PlanOutput {
        &r.output
    }
    stack_f32(
        &mut w,
        "duration_logits",
        &[c.length_classes()],
        p.iter().map(|r| &o(r).length_logits_raw[..]).collect(),
    )?;
    stack_f32(
        &mut w,
        "root_output",
        &[f, dims::GLOBAL_ROOT],
        p.iter().map(|r| &o(r).root_global[..]).collect(),
    )?;
    stack_f32(
        &mut w,
        "local_root",
        &[f, dims::LOCAL_ROOT],
        p.iter().map(|r| &o(r).root_local[..]).collect(),
    )?;
    stack_f32(
        &mut w,
        "pose_logits",
        &[t, h, k],
        p.iter().map(|r| &o(r).pose_logits[..]).collect(),
    )?;
    stack_f32(
        &mut w,
        "decoder_output",
        &[f, dims::LOCAL_REP],
        p.iter().map(|r| &o(r).decoded[..]).collect(),
    )?;
    stack_f32(
        &mut w,
        "features",
        &[f, dims::GLOBAL_REP],
        p.iter().map(|r| &o(r).features[..]).collect(),
    )?;
    stack_f32(
        &mut w,
        "plan_qpos",
        &[f, QPOS],
        p.iter().map(|r| &o(r).qpos[..]).collect(),
    )?;
    stack_f32(
        &mut w,
        "context_qpos",
        &[FPT, QPOS],
        p.iter().map(|r| &r.context[..]).collect(),
    )?;
    Ok(w)
}

fn read_text(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| bad(format!("{what} {}: {e}", path.display())))
}

/// Run `kinema agent` on `backend`: check the files, read the model, clips and commands, play
/// them, and write `run.npz` (and the trace) together; nothing is written on an error.
pub fn agent_file<B: Backend>(backend: &B, req: &AgentRequest) -> Result<AgentRun> {
    let mut plan = OutputPlan::new();
    plan.input(&req.model, "--model")
        .input(&req.clips, "--clips")
        .input(&req.commands, "--commands")
        .output(&req.output, "--output");
    if let Some(t) = &req.trace {
        plan.output(t, "--trace");
    }
    let mut outputs = plan.check()?;
    let clips = ClipLibrary::read(&req.clips)?;
    let commands = commands::parse(&read_text(&req.commands, "--commands")?, &clips)?;
    let m = MotionBricksModel::load(&req.model)?;
    let planner = Planner::new(backend, &m, 1, req.sampling)?;
    let run = run_commands(&planner, &m, &clips, &commands, req.trace.is_some())?;
    let w = run_npz(&run, m.config.fps)?;
    outputs.write(&req.output, |sink| {
        w.write_to(sink)
            .map_err(|e| std::io::Error::other(e.to_string()))
    })?;
    if let Some(t) = &req.trace {
        let w = trace_npz(&run, &m)?;
        outputs.write(t, |sink| {
            w.write_to(sink)
                .map_err(|e| std::io::Error::other(e.to_string()))
        })?;
    }
    outputs.commit()?;
    Ok(run)
}
