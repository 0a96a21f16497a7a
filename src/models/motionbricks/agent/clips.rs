//! The style-clip library (`clips.npz`) and the target keyframe window
//! (`full_navigation_agent._generate_target_joint_transforms`,
//! `motion_backbone/demo/full_agent.py#L321-391`).
//!
//! `clips.npz` holds, per style `S` the file has (a subset of upstream's 15 styles, named as
//! in `clip_holder_G1.CLIPS`, `motion_backbone/demo/clips.py#L131-207`; `idle` is required, it
//! is the agent's starting motion):
//!
//! - `S.qpos`: float32 `[F, 36]`, the clip's G1 MuJoCo qpos at 30 fps (root xyz, root
//!   quaternion `w x y z`, 29 hinges), F >= 5;
//! - `S.allowed_pred_num_tokens`: bool (or 0/1 integers) `[11]`, the plan lengths 6..16 tokens
//!   the style allows;
//! - `S.avg_root_vel`: float32 scalar (or `[1]`), the style's distance per second for the
//!   spring (upstream's `avg_root_vel`).
//!
//! The style index (upstream's `mode`) is the position in [`STYLES`], whatever the file
//! holds. The joint transforms and headings upstream's clip checkpoint also stores are
//! recomputed from `S.qpos` as upstream computes them (`clips.py#L91-106`), and upstream's
//! heading corrections applied (`clips.py#L227-232`). `reference/motionbricks_clips_to_npz.py`
//! converts upstream's `G1-clip.ckpt`; [`ClipLibrary::synthetic`] makes one for tests.

use std::path::Path;

use super::kinematics::{G1Kinematics, Transforms};
use super::math::{Mat, apply, mul, rot_y, wrap};
use super::spring::{FPT, SpringOutput};
use crate::formats::{NpyArray, NpyDType, NpzReader, NpzWriter};
use crate::models::motionbricks::dims::QPOS;
use crate::{Error, Result};

/// Upstream's 15 styles in `clip_holder_G1.CLIPS` order (the `mode` index).
pub const STYLES: [&str; 15] = [
    "idle",
    "slow_walk",
    "walk",
    "hand_crawling",
    "walk_boxing",
    "elbow_crawling",
    "stealth_walk",
    "injured_walk",
    "walk_stealth",
    "walk_happy_dance",
    "walk_zombie",
    "walk_gun",
    "walk_scared",
    "walk_left",
    "walk_right",
];

/// Upstream's per-style allowed lengths and distances per second (`clips.py#L131-207`), used
/// by the synthetic library.
const UPSTREAM: [([u8; 11], f32); 15] = [
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 0.0),
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 0.6),
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 2.0),
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 1.0),
    ([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 2.0),
    ([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 1.6),
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 2.0),
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 1.0),
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 1.4),
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 2.0),
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 1.2),
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 1.2),
    ([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 1.2),
    ([1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0], 0.4),
    ([1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0], 0.4),
];

/// The length classes of a G1 plan (6..=16 tokens).
pub const LENGTHS: usize = 11;

/// One style clip with what the agent derives from it.
#[derive(Clone, Debug)]
pub struct Clip {
    /// `[frames, 36]`.
    pub qpos: Vec<f32>,
    pub frames: usize,
    /// `[11]`.
    pub allowed: Vec<bool>,
    pub avg_root_vel: f32,
    /// Per frame: the root's ground position `(x, 0, z)` (motion space).
    pub root_positions: Vec<[f32; 3]>,
    /// Per frame: joint positions minus the root's ground position, and world rotations.
    pub joints: Vec<Transforms>,
    /// Per frame: the root's heading about Y (after upstream's corrections).
    pub headings: Vec<f32>,
}

/// The clips of a `clips.npz`, by style index.
#[derive(Clone, Debug)]
pub struct ClipLibrary {
    pub clips: Vec<Option<Clip>>,
}

fn bad(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

impl Clip {
    /// Build a clip from its qpos (checked), deriving transforms and headings.
    pub fn new(
        style: usize,
        qpos: Vec<f32>,
        allowed: Vec<bool>,
        avg_root_vel: f32,
    ) -> Result<Clip> {
        let name = STYLES[style];
        if !qpos.len().is_multiple_of(QPOS) || qpos.len() / QPOS < FPT + 1 {
            return Err(bad(format!(
                "clips: {name}.qpos holds {} values, expected [F, 36] with F >= {}",
                qpos.len(),
                FPT + 1
            )));
        }
        if let Some(i) = qpos.iter().position(|v| !v.is_finite()) {
            return Err(bad(format!(
                "clips: {name}.qpos[{}][{}] is {}, not a finite number",
                i / QPOS,
                i % QPOS,
                qpos[i]
            )));
        }
        if allowed.len() != LENGTHS || !allowed.contains(&true) {
            return Err(bad(format!(
                "clips: {name}.allowed_pred_num_tokens must be {LENGTHS} flags allowing at least one length"
            )));
        }
        if !avg_root_vel.is_finite() || avg_root_vel < 0.0 {
            return Err(bad(format!(
                "clips: {name}.avg_root_vel is {avg_root_vel}, expected a finite number >= 0"
            )));
        }
        let frames = qpos.len() / QPOS;
        let k = G1Kinematics::get();
        let mut root_positions = Vec::with_capacity(frames);
        let mut joints = Vec::with_capacity(frames);
        let mut headings = Vec::with_capacity(frames);
        for f in 0..frames {
            let t = k.transforms(&qpos[f * QPOS..(f + 1) * QPOS]);
            let r = t.positions[0];
            let root = [r[0] * 1.0, r[1] * 0.0, r[2] * 1.0];
            let positions = t
                .positions
                .iter()
                .map(|p| [p[0] - root[0], p[1] - root[1], p[2] - root[2]])
                .collect();
            // The root's forward (Z) axis on the ground, normalised, as a heading.
            let m = &t.rotations[0];
            let d = [m[0][2] * 1.0, m[1][2] * 0.0, m[2][2] * 1.0];
            let n = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
            if n.is_nan() || n <= 1e-5 {
                return Err(bad(format!(
                    "clips: {name}.qpos frame {f} has an ill-defined heading (the root faces straight up or down)"
                )));
            }
            headings.push((d[0] / n).atan2(d[2] / n));
            root_positions.push(root);
            joints.push(Transforms {
                positions,
                rotations: t.rotations,
            });
        }
        // clip_holder_G1._apply_root_headings_correction.
        match name {
            "hand_crawling" => headings[0] = 0.0,
            "elbow_crawling" => headings.iter_mut().for_each(|h| *h -= 0.95),
            _ => {}
        }
        Ok(Clip {
            qpos,
            frames,
            allowed,
            avg_root_vel,
            root_positions,
            joints,
            headings,
        })
    }
}

fn member(z: &NpzReader, name: &str) -> Result<Option<NpyArray>> {
    if z.names()
        .iter()
        .any(|n| *n == name || n.strip_suffix(".npy") == Some(name))
    {
        Ok(Some(z.array(name)?))
    } else {
        Ok(None)
    }
}

impl ClipLibrary {
    /// The style index of `name`.
    pub fn style_index(name: &str) -> Option<usize> {
        STYLES.iter().position(|s| *s == name)
    }

    /// The clip of style `mode`, or an error naming it.
    pub fn clip(&self, mode: usize) -> Result<&Clip> {
        self.clips
            .get(mode)
            .and_then(|c| c.as_ref())
            .ok_or_else(|| {
                bad(format!(
                    "the clip file has no style {:?}",
                    STYLES[mode.min(14)]
                ))
            })
    }

    /// Each style's `avg_root_vel` (0 for styles the file lacks).
    pub fn avg_root_vel(&self) -> Vec<f32> {
        self.clips
            .iter()
            .map(|c| c.as_ref().map_or(0.0, |c| c.avg_root_vel))
            .collect()
    }

    /// Read `clips.npz`.
    pub fn read(path: &Path) -> Result<ClipLibrary> {
        let z = NpzReader::open(path).map_err(|e| bad(format!("clips {}: {e}", path.display())))?;
        Self::from_npz(&z)
    }

    /// Read an opened `clips.npz`.
    pub fn from_npz(z: &NpzReader) -> Result<ClipLibrary> {
        for n in z.names() {
            let n = n.strip_suffix(".npy").unwrap_or(n);
            let known = n.split_once('.').is_some_and(|(s, f)| {
                Self::style_index(s).is_some()
                    && matches!(f, "qpos" | "allowed_pred_num_tokens" | "avg_root_vel")
            });
            if !known {
                return Err(bad(format!(
                    "clips: unknown member {n:?} (expected STYLE.qpos, STYLE.allowed_pred_num_tokens, STYLE.avg_root_vel for the styles {})",
                    STYLES.join(", ")
                )));
            }
        }
        let mut clips = Vec::with_capacity(STYLES.len());
        for (i, s) in STYLES.iter().enumerate() {
            let q = member(z, &format!("{s}.qpos"))?;
            let a = member(z, &format!("{s}.allowed_pred_num_tokens"))?;
            let v = member(z, &format!("{s}.avg_root_vel"))?;
            let (q, a, v) = match (q, a, v) {
                (None, None, None) => {
                    clips.push(None);
                    continue;
                }
                (Some(q), Some(a), Some(v)) => (q, a, v),
                _ => {
                    return Err(bad(format!(
                        "clips: style {s} needs all of {s}.qpos, {s}.allowed_pred_num_tokens and {s}.avg_root_vel"
                    )));
                }
            };
            if q.shape.len() != 2
                || q.shape[1] != QPOS
                || !matches!(q.dtype, NpyDType::F32 | NpyDType::F64)
            {
                return Err(bad(format!(
                    "clips: {s}.qpos is {} {:?}, expected float32 [F, 36]",
                    q.dtype, q.shape
                )));
            }
            if a.numel() != LENGTHS
                || matches!(a.dtype, NpyDType::F32 | NpyDType::F64 | NpyDType::F16)
            {
                return Err(bad(format!(
                    "clips: {s}.allowed_pred_num_tokens is {} {:?}, expected bool [{LENGTHS}]",
                    a.dtype, a.shape
                )));
            }
            let allowed = a
                .to_i64()?
                .into_iter()
                .map(|x| match x {
                    0 => Ok(false),
                    1 => Ok(true),
                    _ => Err(bad(format!(
                        "clips: {s}.allowed_pred_num_tokens holds {x}, expected 0 or 1"
                    ))),
                })
                .collect::<Result<Vec<bool>>>()?;
            if v.numel() != 1 || !matches!(v.dtype, NpyDType::F32 | NpyDType::F64) {
                return Err(bad(format!(
                    "clips: {s}.avg_root_vel is {} {:?}, expected one float",
                    v.dtype, v.shape
                )));
            }
            clips.push(Some(Clip::new(i, q.to_f32()?, allowed, v.to_f32()?[0])?));
        }
        if clips[0].is_none() {
            return Err(bad(
                "clips: the file has no idle style (idle.qpos), the agent's starting motion".into(),
            ));
        }
        Ok(ClipLibrary { clips })
    }

    /// The npz members of this library.
    pub fn to_npz(&self) -> Result<NpzWriter> {
        let mut w = NpzWriter::new();
        for (i, c) in self.clips.iter().enumerate() {
            let Some(c) = c else { continue };
            let s = STYLES[i];
            w.add(
                &format!("{s}.qpos"),
                &NpyArray::from_f32(&[c.frames, QPOS], &c.qpos)?,
            )?;
            w.add(
                &format!("{s}.allowed_pred_num_tokens"),
                &NpyArray::from_bool(&[LENGTHS], &c.allowed)?,
            )?;
            w.add(
                &format!("{s}.avg_root_vel"),
                &NpyArray::from_f32(&[], &[c.avg_root_vel])?,
            )?;
        }
        Ok(w)
    }

    /// A synthetic library of all 15 styles for tests: each clip a plausible G1 stream (pelvis
    /// at 0.78 m moving along its heading at half the style's `avg_root_vel`, a slight sway,
    /// every hinge swinging around its own offset), upstream's allowed lengths and distances.
    /// Deterministic in `seed`.
    pub fn synthetic(seed: u64) -> ClipLibrary {
        let mut draw = 0u64;
        let mut u = |lo: f32, hi: f32| {
            draw += 1;
            lo + (hi - lo) * crate::rng::uniform(seed, draw)
        };
        let clips = (0..STYLES.len())
            .map(|i| {
                let frames = if i == 0 {
                    30
                } else {
                    12 + (u(0.0, 28.0) as usize)
                };
                let speed = UPSTREAM[i].1 / 2.0;
                let yaw0 = if i == 0 { 0.0 } else { u(-0.3, 0.3) };
                let hinge: Vec<(f32, f32, f32)> = (0..29)
                    .map(|_| (u(-0.3, 0.3), u(0.05, 0.3), u(0.0, std::f32::consts::TAU)))
                    .collect();
                let mut q = vec![0f32; frames * QPOS];
                for f in 0..frames {
                    let t = f as f32 / 30.0;
                    let r = &mut q[f * QPOS..(f + 1) * QPOS];
                    let yaw = yaw0 + 0.05 * (2.0 * t).sin();
                    let roll = 0.03 * (3.0 * t).sin();
                    r[0] = speed * t * yaw0.cos();
                    r[1] = speed * t * yaw0.sin();
                    r[2] = 0.78 + 0.01 * (6.0 * t).sin();
                    r[3] = (yaw / 2.0).cos() * (roll / 2.0).cos();
                    r[4] = (yaw / 2.0).cos() * (roll / 2.0).sin();
                    r[5] = (yaw / 2.0).sin() * (roll / 2.0).sin();
                    r[6] = (yaw / 2.0).sin() * (roll / 2.0).cos();
                    for (j, &(b, a, p)) in hinge.iter().enumerate() {
                        r[7 + j] = b + a * (6.0 * t + p).sin();
                    }
                }
                let allowed = UPSTREAM[i].0.iter().map(|&x| x == 1).collect();
                Some(Clip::new(i, q, allowed, UPSTREAM[i].1).expect("synthetic clips are valid"))
            })
            .collect();
        ClipLibrary { clips }
    }
}

/// The target keyframes: 4 frames of joint transforms (positions relative to the root's ground
/// point) and the root ground positions.
#[derive(Clone, Debug)]
pub struct TargetFrames {
    pub joints: Vec<Transforms>,
    pub root_positions: [[f32; 3]; FPT],
}

/// The 4-frame clip window `seed % (frames - 4)` rotated onto the spring's target headings and
/// moved onto its target positions (#L326-359, `target_root_realignment`).
pub fn target_window(clip: &Clip, seed: u64, s: &SpringOutput) -> TargetFrames {
    let start = (seed % (clip.frames - FPT) as u64) as usize;
    let mut joints = Vec::with_capacity(FPT);
    let mut root_positions = [[0f32; 3]; FPT];
    for (k, root) in root_positions.iter_mut().enumerate() {
        let f = start + k;
        let diff = wrap(s.target_headings[k] - clip.headings[f]);
        let corr = rot_y(diff);
        let t = &clip.joints[f];
        joints.push(Transforms {
            positions: t.positions.iter().map(|p| apply(&corr, p)).collect(),
            rotations: t.rotations.iter().map(|r| mul(&corr, r)).collect(),
        });
        let r = clip.root_positions[f];
        *root = [s.target_positions[k][0], r[1], s.target_positions[k][1]];
    }
    TargetFrames {
        joints,
        root_positions,
    }
}

/// Rotate the context frames onto the spring's start headings and move their roots onto its
/// start positions (#L377-389, `source_root_realignment`).
pub fn realign_context(context: &mut [Transforms], s: &SpringOutput) {
    for (f, t) in context.iter_mut().enumerate() {
        let ch = super::math::heading_y(&t.rotations[0]);
        let corr: Mat = rot_y(s.start_headings[f] - ch);
        for r in t.rotations.iter_mut() {
            *r = mul(&corr, r);
        }
        for p in t.positions.iter_mut() {
            *p = apply(&corr, p);
        }
        let root = t.positions[0];
        for p in t.positions.iter_mut() {
            p[0] = p[0] - root[0] + s.start_positions[f][0];
            p[2] = p[2] - root[2] + s.start_positions[f][1];
        }
    }
}
