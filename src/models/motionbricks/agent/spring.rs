//! The critically damped spring that places the plan's 4 start and 4 target root keyframes
//! (`full_navigation_agent._generate_spring_model_position_and_heading`,
//! `motion_backbone/demo/full_agent.py#L195-296`) and the walk blend-space remap
//! (`clip_holder_G1.blendspace_modes_remap_from_velocity`, `demo/clips.py#L234-263`).
//!
//! Everything is float32 as upstream's tensors; Python float constants meet float32 tensors
//! and are rounded to float32 first.

use super::kinematics::Transforms;
use super::math::{PI, TWO_PI, floor_mod, heading_y, wrap};

/// Frames per token (`NUM_FRAMES_PER_TOKEN`, #L34).
pub const FPT: usize = 4;
/// Upstream's literal (#L201), not `std::f64::consts::LN_2`.
#[allow(clippy::approx_constant)]
const LN2: f64 = 0.69314718056;
/// `speed_scale` of the demo (`demo/utils.py#L73-74`): no perturbation.
const SPEED_SCALE_MIN: f32 = 1.0;
const SPEED_SCALE_MAX: f32 = 1.0;
/// `has_specific_target` when a waypoint is given.
const HAS_TARGET: f32 = 1.0;
const EPS: f64 = 1e-5;

/// The spring's command, canonical frame.
#[derive(Clone, Debug)]
pub struct SpringInput<'a> {
    /// The 4 context frames' transforms (motion space).
    pub context: &'a [Transforms],
    /// Style index (upstream's clip order).
    pub mode: usize,
    /// Each style's `avg_root_vel` (upstream's clip order; 0 where the file lacks the style).
    pub avg_root_vel: &'a [f32],
    /// `random_seed`.
    pub seed: u64,
    /// `target_vel`, if given.
    pub target_vel: Option<f32>,
    /// Movement and facing directions (MuJoCo axes, canonical).
    pub movement: [f32; 3],
    pub facing: [f32; 3],
    /// A waypoint (MuJoCo position, heading), canonical.
    pub waypoint: Option<([f32; 3], f32)>,
    pub fps: f32,
}

/// The spring's keyframes (motion-space XZ per frame, headings about Y) and the remapped mode.
#[derive(Clone, Debug, PartialEq)]
pub struct SpringOutput {
    pub start_positions: [[f32; 2]; FPT],
    pub start_headings: [f32; FPT],
    pub target_positions: [[f32; 2]; FPT],
    pub target_headings: [f32; FPT],
    /// The mode after the blend-space remap.
    pub mode: usize,
}

/// `fast_neg_exp_func` (#L202-203), evaluated left to right as Python does.
fn fast_neg_exp(x: f32) -> f32 {
    1.0 / ((1.0 + x) + (0.48f32 * x) * x + ((0.235f32 * x) * x) * x)
}

/// `dts` (#L247-248): frames 0..3 at `i / fps` and the target frames at `1 + i / fps`.
fn dts(fps: f32) -> [f32; 2 * FPT] {
    let mut d = [0f32; 2 * FPT];
    for i in 0..FPT {
        let t = (i as f32 * 1.0) / fps;
        d[i] = t;
        d[FPT + i] = 1.0 + t;
    }
    d
}

/// Upstream's style indices the remap uses (`clips.py#L131-207` order).
const SLOW_WALK: usize = 1;
const WALK: usize = 2;
const WALK_LEFT: usize = 13;
const WALK_RIGHT: usize = 14;

/// Run the spring model.
pub fn spring(inp: &SpringInput) -> SpringOutput {
    let fps = inp.fps;
    let c = inp.context;
    let root = |f: usize| c[f].positions[0];
    let cur = [root(0)[0], root(0)[2]];
    let vel = [
        (root(1)[0] - root(0)[0]) * fps,
        (root(1)[2] - root(0)[2]) * fps,
    ];
    // Safety clamp of the mode (#L211-212).
    let mode = inp.mode.min(inp.avg_root_vel.len() - 1);
    // The style's distance per second (#L214-217); idle uses half the current speed.
    let mut dist = if mode == 0 {
        (vel[0] * vel[0] + vel[1] * vel[1]).sqrt() / 2.0
    } else {
        0.0
    };
    for (i, &v) in inp.avg_root_vel.iter().enumerate().skip(1) {
        dist += if mode == i { v } else { 0.0 };
    }
    // Speed perturbation (#L220-223); with speed_scale [1, 1] a factor of exactly 1.
    let ratio = floor_mod(inp.seed as f32, 100.0) / 100.0;
    dist *= ratio * (SPEED_SCALE_MAX - SPEED_SCALE_MIN) + SPEED_SCALE_MIN;
    if dist <= 0.1 {
        dist = 0.0;
    }
    // target_vel overrides the style's distance (x 2: the spring covers about half), #L227-232.
    let tv = if mode != 0 {
        inp.target_vel.unwrap_or(-1.0) * 2.0
    } else {
        0.0
    };
    if tv > 0.0 {
        dist = tv;
    }
    // Movement direction in motion XZ = MuJoCo (y, x); turning in place moves 0.1 along the
    // facing direction (#L233-238).
    let mv = [inp.movement[1], inp.movement[0]];
    let dir = if (mv[0] * mv[0] + mv[1] * mv[1]).sqrt() > 1e-5 {
        mv
    } else {
        [inp.facing[1] * 0.1, inp.facing[0] * 0.1]
    };
    let mut target = [cur[0] + dist * dir[0], cur[1] + dist * dir[1]];
    if let Some((p, _)) = inp.waypoint {
        // #L241-244 with has_specific_target = 1.
        target = [
            target[0] * (1.0 - HAS_TARGET) + p[1] * HAS_TARGET,
            target[1] * (1.0 - HAS_TARGET) + p[0] * HAS_TARGET,
        ];
    }

    let d = dts(fps);
    let y = ((4.0 * LN2) / (0.8 + EPS) / 2.0) as f32;
    let mut pos = [[0f32; 2]; 2 * FPT];
    for (k, p) in pos.iter_mut().enumerate() {
        let e = fast_neg_exp(y * d[k]);
        for a in 0..2 {
            let j0 = cur[a] - target[a];
            let j1 = vel[a] + j0 * y;
            p[a] = (j0 + j1 * d[k]) * e + target[a];
        }
    }
    let mut start_positions = [[0f32; 2]; FPT];
    start_positions.copy_from_slice(&pos[..FPT]);
    let mut target_positions = [[0f32; 2]; FPT];
    for i in 0..FPT {
        // Idle holds the first target frame (#L258-259).
        target_positions[i] = if mode == 0 { pos[FPT] } else { pos[FPT + i] };
    }

    // Headings (#L263-288).
    let h0 = heading_y(&c[0].rotations[0]);
    let h1 = heading_y(&c[1].rotations[0]);
    let hvel = wrap(h1 - h0) * fps;
    let mut th = inp.facing[1].atan2(inp.facing[0]);
    if let Some((_, h)) = inp.waypoint {
        th = wrap(h) * HAS_TARGET + th * (1.0 - HAS_TARGET);
    }
    if th.is_nan() {
        th = 0.0;
    }
    th = th + TWO_PI * f32::from(u8::from(h0 - th > PI))
        - TWO_PI * f32::from(u8::from(h0 - th < -PI));
    let y = ((4.0 * LN2) / (0.17 + EPS) / 2.0) as f32;
    let mut hs = [0f32; 2 * FPT];
    for (k, h) in hs.iter_mut().enumerate() {
        let e = fast_neg_exp(y * d[k]);
        let j0 = h0 - th;
        let j1 = hvel + j0 * y;
        *h = (j0 + j1 * d[k]) * e + th;
    }
    let mut start_headings = [0f32; FPT];
    start_headings.copy_from_slice(&hs[..FPT]);
    let mut target_headings = [0f32; FPT];
    target_headings.copy_from_slice(&hs[FPT..]);

    // Blend-space remap (clips.py#L234-263): walking sideways picks walk_left / walk_right.
    let mh = dir[0].atan2(dir[1]);
    let diff = wrap(mh - target_headings[0]);
    const QUARTER: f32 = std::f64::consts::FRAC_PI_4 as f32;
    const THREE_QUARTERS: f32 = (3.0 * std::f64::consts::PI / 4.0) as f32;
    let right = diff < -QUARTER && diff > -THREE_QUARTERS;
    let left = diff > QUARTER && diff < THREE_QUARTERS;
    let walking = mode == SLOW_WALK || mode == WALK;
    let mode = if walking && right {
        WALK_RIGHT
    } else if walking && left {
        WALK_LEFT
    } else {
        mode
    };
    SpringOutput {
        start_positions,
        start_headings,
        target_positions,
        target_headings,
        mode,
    }
}
