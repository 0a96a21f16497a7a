//! `commands.json`: the scripted sequence `kinema agent` plays.
//!
//! ```json
//! {"commands": [
//!   {"style": "idle", "duration": 1.0},
//!   {"style": "walk", "duration": 8.0, "movement": [1, 0], "facing": [1, 0], "seed": 7},
//!   {"style": "walk", "duration": 6.0, "movement": [0, 1], "facing": [0, 1], "speed": 0.6},
//!   {"style": "walk_zombie", "duration": 5.0, "waypoint": {"position": [4, 3], "heading": 1.57}}
//! ]}
//! ```
//!
//! Each command holds for `duration` seconds, one after the other. `style` names a clip of
//! the clip file (upstream's `mode`); `movement` and `facing` are ground-plane directions in
//! the world (MuJoCo x, y; default `[1, 0]`; a zero movement turns in place); `speed` is
//! upstream's `target_vel` (m/s; default: the style's own); `waypoint` is upstream's
//! `specific_target_positions/headings` (world x, y and a heading in radians about z); `seed`
//! (default 0) is upstream's `random_seed` (the clip window, `seed % (frames - 4)`) and, plus
//! the plan's number in the run, the start of its Gumbel stream.

use serde::Deserialize;

use super::clips::{ClipLibrary, STYLES};
use crate::{Error, Result};

/// The longest run `kinema agent` plays (one hour).
pub const MAX_SECONDS: f64 = 3600.0;

/// One command.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    /// Style index (upstream's `mode`).
    pub mode: usize,
    pub duration: f64,
    /// World directions (MuJoCo x, y, z = 0).
    pub movement: [f32; 3],
    pub facing: [f32; 3],
    pub speed: Option<f32>,
    /// World position (z = 0) and heading.
    pub waypoint: Option<([f32; 3], f32)>,
    pub seed: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    commands: Vec<RawCommand>,
}

/// One command as `commands.json` writes it (the host API's `AgentCommand` converts to it, so
/// both are checked by [`RawCommand::check`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCommand {
    pub(crate) style: String,
    pub(crate) duration: f64,
    #[serde(default)]
    pub(crate) movement: Option<Vec<f64>>,
    #[serde(default)]
    pub(crate) facing: Option<Vec<f64>>,
    #[serde(default)]
    pub(crate) speed: Option<f64>,
    #[serde(default)]
    pub(crate) waypoint: Option<RawWaypoint>,
    #[serde(default)]
    pub(crate) seed: Option<u64>,
}

/// A waypoint as `commands.json` writes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWaypoint {
    pub(crate) position: Vec<f64>,
    pub(crate) heading: f64,
}

fn bad(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

fn finite(v: f64, what: &str, i: usize) -> Result<f32> {
    if !v.is_finite() || v.abs() > 1e6 {
        return Err(bad(format!(
            "commands[{i}].{what} is {v}, expected a finite number of magnitude <= 1e6"
        )));
    }
    Ok(v as f32)
}

fn direction(v: &Option<Vec<f64>>, what: &str, i: usize) -> Result<[f32; 3]> {
    let Some(v) = v else {
        return Ok([1.0, 0.0, 0.0]);
    };
    if v.len() != 2 {
        return Err(bad(format!(
            "commands[{i}].{what} has {} numbers, expected 2 (world x, y)",
            v.len()
        )));
    }
    Ok([finite(v[0], what, i)?, finite(v[1], what, i)?, 0.0])
}

/// Parse and check `commands.json` against the clip library: every style known and present,
/// every number finite, durations positive and the total at most [`MAX_SECONDS`].
pub fn parse(text: &str, clips: &ClipLibrary) -> Result<Vec<Command>> {
    let raw: RawFile = serde_json::from_str(text).map_err(|e| bad(format!("commands: {e}")))?;
    if raw.commands.is_empty() {
        return Err(bad("commands: the list is empty".into()));
    }
    let mut total = 0.0;
    let mut out = Vec::with_capacity(raw.commands.len());
    for (i, c) in raw.commands.iter().enumerate() {
        let command = c.check(i, clips)?;
        total += c.duration;
        if total > MAX_SECONDS {
            return Err(bad(format!(
                "commands: the durations add up to more than {MAX_SECONDS} s by commands[{i}]"
            )));
        }
        out.push(command);
    }
    Ok(out)
}

impl RawCommand {
    /// Check the command against the clip library (style known and present, numbers finite,
    /// duration positive, seed an int64) and convert it; `i` is its index in messages.
    pub(crate) fn check(&self, i: usize, clips: &ClipLibrary) -> Result<Command> {
        let mode = ClipLibrary::style_index(&self.style).ok_or_else(|| {
            bad(format!(
                "commands[{i}].style {:?} is not a style (expected one of {})",
                self.style,
                STYLES.join(", ")
            ))
        })?;
        if clips.clips[mode].is_none() {
            return Err(bad(format!(
                "commands[{i}].style {:?}: the clip file has no such clip",
                self.style
            )));
        }
        if !self.duration.is_finite() || self.duration <= 0.0 {
            return Err(bad(format!(
                "commands[{i}].duration is {}, expected seconds > 0",
                self.duration
            )));
        }
        let speed = match self.speed {
            None => None,
            Some(s) => {
                let s = finite(s, "speed", i)?;
                if s <= 0.0 {
                    return Err(bad(format!("commands[{i}].speed is {s}, expected m/s > 0")));
                }
                Some(s)
            }
        };
        let waypoint = match &self.waypoint {
            None => None,
            Some(w) => {
                if w.position.len() != 2 {
                    return Err(bad(format!(
                        "commands[{i}].waypoint.position has {} numbers, expected 2 (world x, y)",
                        w.position.len()
                    )));
                }
                Some((
                    [
                        finite(w.position[0], "waypoint.position", i)?,
                        finite(w.position[1], "waypoint.position", i)?,
                        0.0,
                    ],
                    finite(w.heading, "waypoint.heading", i)?,
                ))
            }
        };
        let seed = self.seed.unwrap_or(0);
        if seed > i64::MAX as u64 {
            return Err(bad(format!(
                "commands[{i}].seed {seed} is above {} (upstream's seeds are int64)",
                i64::MAX
            )));
        }
        Ok(Command {
            mode,
            duration: self.duration,
            movement: direction(&self.movement, "movement", i)?,
            facing: direction(&self.facing, "facing", i)?,
            speed,
            waypoint,
            seed,
        })
    }
}

/// The command active at `tick` (30 fps), and its index.
pub fn at(commands: &[Command], tick: usize, fps: f64) -> (usize, &Command) {
    let t = tick as f64 / fps;
    let mut end = 0.0;
    for (i, c) in commands.iter().enumerate() {
        end += c.duration;
        if t < end {
            return (i, c);
        }
    }
    let last = commands.len() - 1;
    (last, &commands[last])
}

/// Frames in the whole run.
pub fn total_frames(commands: &[Command], fps: f64) -> usize {
    (commands.iter().map(|c| c.duration).sum::<f64>() * fps).round() as usize
}
