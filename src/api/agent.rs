//! [`Agent`]: the MotionBricks navigation agent as an object a host feeds commands and polls
//! for 30 fps G1 frames. It plays through the same stepper as `kinema agent`
//! (`models::motionbricks::agent::run::Agent::tick`), so pushing the script's commands at the
//! frames the script switches gives `kinema agent`'s `qpos` bit for bit.

use std::borrow::Borrow;
use std::path::Path;

use super::motionbricks::MotionBricks;
use super::{Progress, ProgressFn, Stage, report};
use crate::backend::Backend;
use crate::device::BackendVisitor;
use crate::models::motionbricks::agent::clips::{ClipLibrary, STYLES};
use crate::models::motionbricks::agent::commands::{Command, RawCommand, RawWaypoint};
use crate::models::motionbricks::agent::run::{self, PlanRecord, REPLAN_FRAMES};
use crate::models::motionbricks::dims::QPOS;
use crate::models::motionbricks::model::MotionBricksModel;
use crate::models::motionbricks::plan::Planner;
use crate::models::motionbricks::sampler::Sampling;
use crate::{Error, Result};

/// How an [`Agent`] plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentOptions {
    /// Argmax (what upstream's agent uses, `kinema agent`'s default) or Gumbel (plan `i` of
    /// the run draws from the SplitMix64 stream started at its command's seed plus `i`).
    pub sampling: Sampling,
}

impl Default for AgentOptions {
    fn default() -> AgentOptions {
        AgentOptions {
            sampling: Sampling::Argmax,
        }
    }
}

/// One command: the fields of a `commands.json` entry (see `kinema agent --help`) without its
/// duration, which the host decides by when it pushes the next one.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentCommand {
    /// A style of the clip file (`idle`, `walk`, `walk_zombie`, ...: upstream's `mode`).
    pub style: String,
    /// The ground-plane direction to move in, world x, y (a zero vector turns in place).
    pub movement: [f64; 2],
    /// The ground-plane direction to face, world x, y.
    pub facing: [f64; 2],
    /// Speed in m/s (`None`: the style's own).
    pub speed: Option<f64>,
    /// A world position x, y and heading (radians about z) to walk to.
    pub waypoint: Option<([f64; 2], f64)>,
    /// Upstream's `random_seed` (the clip window) and the start of the Gumbel streams (an
    /// int64: at most `i64::MAX`).
    pub seed: u64,
}

impl AgentCommand {
    /// `style`, moving and facing along world +x at the style's speed, seed 0.
    pub fn new(style: impl Into<String>) -> AgentCommand {
        AgentCommand {
            style: style.into(),
            movement: [1.0, 0.0],
            facing: [1.0, 0.0],
            speed: None,
            waypoint: None,
            seed: 0,
        }
    }

    /// Checks the command against the clips exactly as `kinema agent` checks `commands.json`.
    fn check(&self, index: usize, clips: &ClipLibrary) -> Result<Command> {
        RawCommand {
            style: self.style.clone(),
            duration: 1.0,
            movement: Some(self.movement.to_vec()),
            facing: Some(self.facing.to_vec()),
            speed: self.speed,
            waypoint: self.waypoint.map(|(p, h)| RawWaypoint {
                position: p.to_vec(),
                heading: h,
            }),
            seed: Some(self.seed),
        }
        .check(index, clips)
    }
}

/// One plan the agent made.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentPlan {
    /// The frame (counted from the agent's start) its first frame plays at.
    pub frame: usize,
    /// The command it served (the number of pushes before it, counted from 0).
    pub command: usize,
    /// The style index it used ([`Agent::styles`]; walking sideways uses `walk_left`/`right`).
    pub style: usize,
    /// Its length in tokens (4 frames each).
    pub num_tokens: u32,
    /// Wall time of the whole plan (host math and predict) and of predict alone, ms.
    pub ms: f64,
    /// Wall time of predict alone, ms.
    pub predict_ms: f64,
}

impl AgentPlan {
    fn from_record(r: &PlanRecord) -> AgentPlan {
        AgentPlan {
            frame: r.frame,
            command: r.command,
            style: r.style,
            num_tokens: r.output.num_tokens[0],
            ms: r.ms,
            predict_ms: r.predict_ms,
        }
    }
}

/// Frames an [`Agent`] played in one call, and the plans it made on the way.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentFrames {
    /// `[frames, 36]` G1 MuJoCo qpos at 30 fps: root xyz, root quaternion (w x y z), 29 hinges.
    pub qpos: Vec<f32>,
    /// The frame number (from the agent's start) of the first frame here.
    pub first_frame: usize,
    /// The plans made during the call.
    pub plans: Vec<AgentPlan>,
}

impl AgentFrames {
    /// Frames played.
    pub fn frames(&self) -> usize {
        self.qpos.len() / QPOS
    }
}

/// The MotionBricks navigation agent (`full_navigation_agent`): starts from the clip file's
/// idle clip, plays 30 fps frames and replans every 16 frames from the last frames played,
/// under the command pushed last.
///
/// `M` is how it holds the model: `&MotionBricks` (the agent borrows it) or
/// `Arc<MotionBricks>`. The agent is `Send + Sync` when `M` is; its methods take `&mut self`,
/// so one thread drives it at a time, and several agents may share one model. A failed or
/// cancelled call leaves the agent as it was.
pub struct Agent<M: Borrow<MotionBricks>> {
    model: M,
    clips: ClipLibrary,
    options: AgentOptions,
    state: run::Agent,
    command: Option<Command>,
    pushes: usize,
}

impl<M: Borrow<MotionBricks>> Agent<M> {
    /// An agent on `model` (a G1 MotionBricks model) with the style clips `clips`.
    pub fn new(model: M, clips: ClipLibrary, options: AgentOptions) -> Result<Agent<M>> {
        let state = run::Agent::new(model.borrow().model(), &clips)?;
        Ok(Agent {
            model,
            clips,
            options,
            state,
            command: None,
            pushes: 0,
        })
    }

    /// [`Agent::new`] with the clips read from a `clips.npz` file (`kinema agent --clips`).
    pub fn open(model: M, clips: impl AsRef<Path>, options: AgentOptions) -> Result<Agent<M>> {
        Agent::new(model, ClipLibrary::read(clips.as_ref())?, options)
    }

    /// Upstream's 15 style names; a plan's `style` indexes them.
    pub fn styles() -> &'static [&'static str] {
        &STYLES
    }

    /// The styles the clip file holds.
    pub fn available_styles(&self) -> Vec<&'static str> {
        (0..STYLES.len())
            .filter(|&m| self.clips.clips[m].is_some())
            .map(|m| STYLES[m])
            .collect()
    }

    /// The options it plans with.
    pub fn options(&self) -> AgentOptions {
        self.options
    }

    /// Frames played so far.
    pub fn frames_played(&self) -> usize {
        self.state.frames_played()
    }

    /// Plans made so far.
    pub fn plans_made(&self) -> usize {
        self.state.plans_made()
    }

    /// Frames per second of the output (30).
    pub fn fps(&self) -> f32 {
        self.model.borrow().config().fps
    }

    /// Makes `command` the one the agent follows from the next frame on (it takes effect at
    /// the next plan). Before the first push the agent stands idle. A command the clips cannot
    /// serve is an error naming the field, and changes nothing.
    pub fn push(&mut self, command: &AgentCommand) -> Result<()> {
        let c = command.check(self.pushes, &self.clips)?;
        self.command = Some(c);
        self.pushes += 1;
        Ok(())
    }

    /// Plays `frames` frames, planning whenever one is due.
    pub fn step(&mut self, frames: usize) -> Result<AgentFrames> {
        self.step_with_progress(frames, &mut |_, _, _| Progress::Continue)
    }

    /// Plays frames up to and including the next one that plans (at most 16 frames; an idle
    /// agent under an idle command does not replan and returns 16 frames).
    pub fn poll(&mut self) -> Result<AgentFrames> {
        self.play(REPLAN_FRAMES, true, &mut |_, _, _| Progress::Continue)
    }

    /// [`Agent::step`], calling `progress(Stage::Plan, 0, 1)` before and `(Stage::Plan, 1, 1)`
    /// after each plan; a cancel returns [`Error::Cancelled`] and leaves the agent as it was.
    pub fn step_with_progress(
        &mut self,
        frames: usize,
        progress: &mut ProgressFn<'_>,
    ) -> Result<AgentFrames> {
        self.play(frames, false, progress)
    }

    fn play(
        &mut self,
        frames: usize,
        until_plan: bool,
        progress: &mut ProgressFn<'_>,
    ) -> Result<AgentFrames> {
        if frames > 1 << 20 {
            return Err(Error::InvalidArgument(format!(
                "agent: {frames} frames in one call; at most {} (about 9.7 hours)",
                1 << 20
            )));
        }
        let idle;
        let (command, index) = match &self.command {
            Some(c) => (c, self.pushes - 1),
            None => {
                idle = AgentCommand::new("idle").check(0, &self.clips)?;
                (&idle, 0)
            }
        };
        let mb = self.model.borrow();
        let mut state = self.state.clone();
        let out = mb.engine().backend().visit(Play {
            model: mb.model(),
            clips: &self.clips,
            sampling: self.options.sampling,
            state: &mut state,
            command,
            index,
            frames,
            until_plan,
            progress,
        })?;
        self.state = state;
        Ok(out)
    }
}

impl<M: Borrow<MotionBricks>> std::fmt::Debug for Agent<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", self.model.borrow())
            .field("options", &self.options)
            .field("frames_played", &self.state.frames_played())
            .field("plans_made", &self.state.plans_made())
            .finish()
    }
}

/// Frames on the engine's backend; the planner (its graphs compiled) is built at the first
/// plan of the call.
struct Play<'a, 'p> {
    model: &'a MotionBricksModel,
    clips: &'a ClipLibrary,
    sampling: Sampling,
    state: &'a mut run::Agent,
    command: &'a Command,
    index: usize,
    frames: usize,
    until_plan: bool,
    progress: &'a mut ProgressFn<'p>,
}

impl BackendVisitor for Play<'_, '_> {
    type Output = Result<AgentFrames>;
    fn visit<B: Backend>(self, b: &B) -> Result<AgentFrames> {
        let mut planner: Option<Planner<'_, B>> = None;
        let mut out = AgentFrames {
            qpos: Vec::with_capacity(self.frames * QPOS),
            first_frame: self.state.frames_played(),
            plans: Vec::new(),
        };
        for _ in 0..self.frames {
            let due = self.state.plan_due(self.command);
            if due {
                report(self.progress, Stage::Plan, 0, 1)?;
                if planner.is_none() {
                    planner = Some(Planner::new(b, self.model, 1, self.sampling)?);
                }
            }
            let (frame, plan) = self.state.tick(
                planner.as_ref(),
                self.model,
                self.clips,
                self.command,
                self.index,
            )?;
            out.qpos.extend_from_slice(&frame);
            if let Some(p) = plan {
                out.plans.push(AgentPlan::from_record(&p));
                report(self.progress, Stage::Plan, 1, 1)?;
                if self.until_plan {
                    break;
                }
            }
        }
        Ok(out)
    }
}
