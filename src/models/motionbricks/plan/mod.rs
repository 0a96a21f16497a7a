//! One plan, `motion_inference.predict` (`motion_backbone/inference/motion_inference.py#L44-126`),
//! for a batch of independent plans: the host glue upstream runs between its modules
//! (recentring, normalisation, the length choice, the dense conditions, the global <-> local
//! root conversions, de-normalisation) around the three graphs of [`super::model`].
//!
//! Float arithmetic follows upstream's f32 operation order; trigonometry is the platform's
//! f32 `atan2`/`sin`/`cos`, and the cumulative sums accumulate in f64 as torch's CPU
//! `cumsum` does for f32 (`at::acc_type<float, false>` is double).

mod graph_inputs;
mod inputs;
mod times;

pub use inputs::{PlanInputs, PlanOutput, Randomness, masked_num_tokens};
pub use times::PlanTimes;

use std::cell::RefCell;

use super::config::{dims, names};
use super::model::{MotionBricksModel, PoseDecode, RootStage1, RootStage2};
use super::sampler::{Sampling, check_uniforms, plan_uniforms};
use crate::Result;
use crate::backend::Backend;
use crate::graph::{Executable, Graph};
use graph_inputs::{has_pair, write_conv_conditions, write_conv_masks, write_for_lengths};
use inputs::bad;
use times::Clock;

/// `motion_inference.EPS` (`motion_inference.py#L24`) and `Stats.eps`.
const EPS: f32 = 1e-5;

/// Read marked outputs in one batch (one transfer and one wait on a discrete GPU).
fn read_all<B: Backend>(
    x: &Executable<'_, B>,
    ts: &[crate::graph::TensorId],
) -> Result<Vec<Vec<u8>>> {
    x.read_many_bytes(ts)
}

fn f32s(b: &[u8]) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(b)
}

/// `(x - mean) / sqrt(std^2 + eps)` in f32 (`motionlib/core/utils/stats.py#L46-58`).
fn norm(x: f32, mean: f32, std: f32) -> f32 {
    (x - mean) / (std * std + EPS).sqrt()
}

/// `x * sqrt(std^2 + eps) + mean` (`stats.py#L60-72`).
fn unnorm(x: f32, mean: f32, std: f32) -> f32 {
    x * (std * std + EPS).sqrt() + mean
}

/// Dual-statistics offsets (`motionbricks.md` section 4.1): global root 0-4, local root
/// 5-8, body 9-417.
const GLOBAL_ROOT_AT: usize = 0;
const LOCAL_ROOT_AT: usize = 5;
const BODY_AT: usize = 9;

/// The compiled graphs of one batch size and sampling mode.
pub struct Planner<'b, B: Backend> {
    model: &'b MotionBricksModel,
    batch: usize,
    sampling: Sampling,
    s1: RootStage1,
    s1x: Executable<'b, B>,
    s2: RootStage2,
    s2x: Executable<'b, B>,
    pd: PoseDecode,
    pdx: Executable<'b, B>,
    /// The chosen lengths that the inputs of root stage 2 and of the pose graph which depend
    /// on nothing else (token masks, length ids, the convolution masks; the pose graph's
    /// token ids) hold: a plan writes them again only when the lengths change. `None` after a
    /// failed write, so the next plan writes them all.
    s2_lengths: RefCell<Option<Vec<usize>>>,
    pd_lengths: RefCell<Option<Vec<usize>>>,
}

fn take(g: &mut Graph) -> Graph {
    std::mem::take(g)
}

impl<'b, B: Backend> Planner<'b, B> {
    /// Build and compile the three graphs for `batch` plans.
    pub fn new(
        backend: &'b B,
        model: &'b MotionBricksModel,
        batch: usize,
        sampling: Sampling,
    ) -> Result<Planner<'b, B>> {
        if !(1..=64).contains(&batch) {
            return Err(bad(format!("batch {batch}: expected 1 to 64 plans")));
        }
        let mut s1 = RootStage1::build(model, batch)?;
        let s1x = take(&mut s1.graph).compile(backend)?;
        let mut s2 = RootStage2::build(model, batch)?;
        let s2x = take(&mut s2.graph).compile(backend)?;
        let mut pd = PoseDecode::build(model, batch, sampling)?;
        let pdx = take(&mut pd.graph).compile(backend)?;
        Ok(Planner {
            model,
            batch,
            sampling,
            s1,
            s1x,
            s2,
            s2x,
            pd,
            pdx,
            s2_lengths: RefCell::new(None),
            pd_lengths: RefCell::new(None),
        })
    }

    /// Plans per run.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// How tokens are chosen.
    pub fn sampling(&self) -> Sampling {
        self.sampling
    }

    /// Run one batch of plans. Gumbel sampling needs `random`; argmax ignores it.
    pub fn plan(&self, inp: &PlanInputs, random: Option<&Randomness>) -> Result<PlanOutput> {
        Ok(self.run_plan(inp, random, Clock::new(false))?.0)
    }

    /// [`Planner::plan`], with where its time went (each graph is waited for before its
    /// outputs are read, which can cost a device round trip per graph more than `plan`).
    pub fn plan_timed(
        &self,
        inp: &PlanInputs,
        random: Option<&Randomness>,
    ) -> Result<(PlanOutput, PlanTimes)> {
        self.run_plan(inp, random, Clock::new(true))
    }

    fn run_plan(
        &self,
        inp: &PlanInputs,
        random: Option<&Randomness>,
        mut clock: Clock,
    ) -> Result<(PlanOutput, PlanTimes)> {
        let m = self.model;
        let c = &m.config;
        inp.validate(c)?;
        let b = inp.batch;
        if b != self.batch {
            return Err(bad(format!(
                "{b} plan(s) given to a planner built for {}",
                self.batch
            )));
        }
        let (t, fpt, frames) = (c.max_tokens, c.frames_per_token(), c.max_frames());
        let k = 2 * fpt;
        let (heads, codes) = (c.code_heads, c.codes);
        let n_logits = t * heads * codes;
        let uniforms = match (self.sampling, random) {
            (Sampling::Argmax, _) => Vec::new(),
            (Sampling::Gumbel, Some(Randomness::Seeds(s))) => {
                if s.len() != b {
                    return Err(bad(format!("{} seeds for {b} plan(s)", s.len())));
                }
                s.iter()
                    .flat_map(|&seed| plan_uniforms(seed, n_logits))
                    .collect()
            }
            (Sampling::Gumbel, Some(Randomness::Uniforms(u))) => {
                check_uniforms(u, b * n_logits)?;
                u.clone()
            }
            (Sampling::Gumbel, None) => {
                return Err(bad("Gumbel sampling needs seeds or uniforms".into()));
            }
        };
        let (mean, std) = (&m.mean, &m.std);
        let mut out = PlanOutput {
            uniforms: uniforms.clone(),
            ..PlanOutput::default()
        };

        // Step 1: recentre the XZ of every keyframe on frame 0 (the heading is kept) and
        // normalize (`motion_inference.py#L80-101`, #L157-177).
        let mut offsets = Vec::with_capacity(b);
        let mut headings = Vec::with_capacity(b);
        for p in 0..b {
            let g = &inp.global_root_values[p * k * 5..(p + 1) * k * 5];
            let (ox, oz) = (g[0], g[2]);
            offsets.push((ox, oz));
            headings.push(g[4].atan2(g[3]));
            for f in 0..k {
                let r = &g[f * 5..f * 5 + 5];
                let rec = [r[0] - ox, r[1], r[2] - oz, r[3], r[4]];
                for (j, &v) in rec.iter().enumerate() {
                    out.norm_global_root.push(norm(
                        v,
                        mean[GLOBAL_ROOT_AT + j],
                        std[GLOBAL_ROOT_AT + j],
                    ));
                }
                let l = &inp.local_root_values[(p * k + f) * 4..(p * k + f) * 4 + 4];
                for (j, &v) in l.iter().enumerate() {
                    out.norm_local_root.push(norm(
                        v,
                        mean[LOCAL_ROOT_AT + j],
                        std[LOCAL_ROOT_AT + j],
                    ));
                }
                // Hip height = the recentred global root y, then the 303 pose values, with
                // the local rep's statistics of [root_y, ric, global_rot] (dual 8, 9..312).
                out.norm_poses.push(norm(
                    rec[1],
                    mean[LOCAL_ROOT_AT + 3],
                    std[LOCAL_ROOT_AT + 3],
                ));
                let lp = &inp.local_poses
                    [(p * k + f) * dims::EXTERNAL_POSE..(p * k + f + 1) * dims::EXTERNAL_POSE];
                for (j, &v) in lp.iter().enumerate() {
                    out.norm_poses
                        .push(norm(v, mean[BODY_AT + j], std[BODY_AT + j]));
                }
            }
        }

        clock.lap("host: inputs");

        // Step 2a: root stage 1.
        let x = &self.s1x;
        x.write_f32(self.s1.global_root, &out.norm_global_root)?;
        x.write_f32(self.s1.local_root, &out.norm_local_root)?;
        x.write_f32(self.s1.poses, &out.norm_poses)?;
        for ((h, nh), flags, width) in [
            (self.s1.has_pose, &inp.has_local_poses, c.root_pose_feat),
            (
                self.s1.has_local,
                &inp.has_local_root_values,
                c.root_local_feat,
            ),
            (
                self.s1.has_global,
                &inp.has_global_root_values,
                c.root_global_feat,
            ),
        ] {
            let (a, bb) = has_pair(flags, width);
            x.write_f32(h, &a)?;
            x.write_f32(nh, &bb)?;
        }
        let ids: Vec<u32> = inp
            .num_tokens
            .iter()
            .map(|&n| (n as usize - c.min_tokens) as u32)
            .collect();
        x.write_u32(self.s1.num_tokens, &ids)?;
        clock.lap("root1: upload");
        clock.run(x)?;
        clock.lap("root1: run");
        let r = read_all(x, &[self.s1.frame_emb, self.s1.positioned, self.s1.logits])?;
        let (frame_emb, positioned) = (f32s(&r[0]), f32s(&r[1]));
        out.length_logits_raw = f32s(&r[2]);
        clock.lap("root1: download");

        // Step 2b: the length (`root_backbone.py#L187-206`): out-of-reach and disallowed
        // lengths at -inf, first maximum, or the given length.
        let classes = c.length_classes();
        let allowed_n = classes - 1;
        let mut ns = Vec::with_capacity(b);
        for p in 0..b {
            let mut l = out.length_logits_raw[p * classes..(p + 1) * classes].to_vec();
            l[classes - 1] = f32::NEG_INFINITY;
            for (j, v) in l.iter_mut().take(allowed_n).enumerate() {
                if !inp.allowed_pred_num_tokens[p * allowed_n + j] {
                    *v = f32::NEG_INFINITY;
                }
            }
            let chosen = if inp.num_tokens[p] as usize == masked_num_tokens(c) {
                crate::sampling::argmax_row(&l) as usize
            } else {
                inp.num_tokens[p] as usize - c.min_tokens
            };
            out.length_logits.extend_from_slice(&l);
            ns.push(chosen + c.min_tokens);
        }
        out.num_tokens = ns.iter().map(|&n| n as u32).collect();

        // Step 2c: root stage 2 tokens `[chosen emb, positioned frames, sin/cos table]`, the
        // key mask hiding table slots >= n, and the conv head's dense conditions (#L209-256).
        let e = c.root_n_embd;
        let mid = m.values(&format!("{}_middle_token_emb.weight", names::ROOT))?;
        let pe = m.values(&format!("{}_position_emb.embed", names::ROOT))?;
        let no_frame = m.values(&format!("{}_conv_no_frame_emb", names::ROOT))?;
        let prefix = 1 + k;
        let len2 = prefix + t;
        let mut tokens = Vec::with_capacity(b * len2 * e);
        let mut key_mask = Vec::with_capacity(b * len2);
        let mut out_mask = Vec::with_capacity(b * t * e);
        let mut dense_frame = Vec::with_capacity(b * frames * e);
        let mut dense_root = vec![0f32; b * frames * 5];
        let mut dense_has = vec![false; b * frames];
        for (p, &n) in ns.iter().enumerate() {
            let chosen = n - c.min_tokens;
            tokens.extend_from_slice(&mid[chosen * e..(chosen + 1) * e]);
            tokens.extend_from_slice(&positioned[p * k * e..(p + 1) * k * e]);
            tokens.extend_from_slice(&pe[..t * e]);
            key_mask.extend((0..len2).map(|i| u32::from(i < prefix || i - prefix < n)));
            for i in 0..t {
                let v = if i < n { 1.0 } else { 0.0 };
                out_mask.extend(std::iter::repeat_n(v, e));
            }
            // Which source keyframe (0..8) each dense frame holds, if any.
            let src = |f: usize| -> Option<usize> {
                if f < fpt {
                    Some(f)
                } else if f + fpt >= n * fpt && f < n * fpt {
                    Some(f + fpt - (n * fpt - fpt))
                } else {
                    None
                }
            };
            let has_frame = |s: usize| {
                inp.has_local_poses[p * k + s]
                    || inp.has_global_root_values[p * k + s]
                    || inp.has_local_root_values[p * k + s]
            };
            for f in 0..frames {
                match src(f) {
                    Some(s) => {
                        if has_frame(s) {
                            dense_frame.extend_from_slice(
                                &frame_emb[(p * k + s) * e..(p * k + s + 1) * e],
                            );
                        } else {
                            dense_frame.extend_from_slice(&no_frame);
                        }
                        dense_root[(p * frames + f) * 5..(p * frames + f + 1) * 5].copy_from_slice(
                            &out.norm_global_root[(p * k + s) * 5..(p * k + s + 1) * 5],
                        );
                        dense_has[p * frames + f] = inp.has_global_root_values[p * k + s];
                    }
                    None => dense_frame.extend_from_slice(&no_frame),
                }
            }
        }
        clock.lap("host: length");
        let x = &self.s2x;
        x.write_f32(self.s2.tokens, &tokens)?;
        write_for_lengths(&self.s2_lengths, &ns, || {
            x.write_u32(self.s2.key_mask, &key_mask)?;
            x.write_f32(self.s2.out_mask, &out_mask)?;
            write_conv_masks(x, &self.s2.conv, &c.root_conv, &ns, t)
        })?;
        write_conv_conditions(
            x,
            &self.s2.conv,
            &c.root_conv,
            &dense_root,
            &dense_has,
            &dense_frame,
        )?;
        clock.lap("root2: upload");
        clock.run(x)?;
        clock.lap("root2: run");
        let r = read_all(x, &[self.s2.stage2, self.s2.root])?;
        out.root_stage2 = f32s(&r[0]);
        out.root_global = f32s(&r[1]);
        clock.lap("root2: download");

        // Step 3: global -> local root with the length-aware end duplication, then the last
        // frame's given local root (`motion_inference.py#L222-242`).
        let fps = c.fps;
        for (p, &n) in ns.iter().enumerate() {
            let len = n * fpt;
            let rg = &out.root_global[p * frames * 5..(p + 1) * frames * 5];
            let mut pos = Vec::with_capacity(frames);
            let mut ang = Vec::with_capacity(frames);
            for f in 0..frames {
                let r: Vec<f32> = (0..5)
                    .map(|j| {
                        unnorm(
                            rg[f * 5 + j],
                            mean[GLOBAL_ROOT_AT + j],
                            std[GLOBAL_ROOT_AT + j],
                        )
                    })
                    .collect();
                pos.push([r[0], r[1], r[2]]);
                // compute_root_pos_and_rot -> heading quaternion -> angle again
                // (`global_root_local_body.py#L79-89`, `local_root_local_body.py#L120`).
                let a = r[4].atan2(r[3]);
                let (qw, qy) = ((a / 2.0).cos(), (a / 2.0).sin());
                ang.push(qy.atan2(qw) * 2.0);
            }
            let (cs, sn): (Vec<f32>, Vec<f32>) = ang.iter().map(|a| (a.cos(), a.sin())).unzip();
            let mut rot_vel = vec![0f32; frames];
            let mut vel = vec![[0f32; 3]; frames];
            for f in 0..frames - 1 {
                // diff_angles (`motionlib/core/utils/rotations.py#L330-349`).
                let cd = cs[f + 1] * cs[f] + sn[f + 1] * sn[f];
                let sd = sn[f + 1] * cs[f] - cs[f + 1] * sn[f];
                rot_vel[f] = fps * sd.atan2(cd);
                for j in 0..3 {
                    vel[f][j] = fps * (pos[f + 1][j] - pos[f][j]);
                }
            }
            // compute_vel_angle / compute_vel_xyz (`motion_features.py#L30-115`).
            rot_vel[len - 1] = rot_vel[len - 2];
            vel[len - 1] = vel[len - 2];
            for f in 0..frames {
                let l = [rot_vel[f], vel[f][0], vel[f][2], pos[f][1]];
                for (j, &v) in l.iter().enumerate() {
                    out.root_local
                        .push(norm(v, mean[LOCAL_ROOT_AT + j], std[LOCAL_ROOT_AT + j]));
                }
            }
            if inp.has_local_root_values[p * k + k - 1] {
                let at = (p * frames + len - 1) * 4;
                out.root_local[at..at + 4]
                    .copy_from_slice(&out.norm_local_root[(p * k + k - 1) * 4..(p * k + k) * 4]);
            }
        }

        // Step 4: the pose model's dense conditions (`motion_inference.py#L262-284`).
        out.pose_cond = vec![0f32; b * frames * dims::POSE];
        out.has_pose_cond = vec![false; b * frames];
        let mut root_cond = Vec::with_capacity(b * frames * 4);
        let mut external = Vec::with_capacity(b * frames * 2);
        for (p, &n) in ns.iter().enumerate() {
            for s in 0..k {
                let f = if s < fpt {
                    s
                } else {
                    n * fpt - fpt + (s - fpt)
                };
                let src = &out.norm_poses[(p * k + s) * dims::POSE..(p * k + s + 1) * dims::POSE];
                out.pose_cond[(p * frames + f) * dims::POSE..(p * frames + f + 1) * dims::POSE]
                    .copy_from_slice(src);
                out.has_pose_cond[p * frames + f] |= inp.has_local_poses[p * k + s];
            }
            for f in 0..frames {
                let r = &out.root_global[(p * frames + f) * 5..(p * frames + f + 1) * 5];
                root_cond.extend_from_slice(&[r[0], r[2], r[3], r[4]]);
                let l = &out.root_local[(p * frames + f) * 4..(p * frames + f + 1) * 4];
                external.extend_from_slice(&l[1..3]);
            }
        }
        clock.lap("host: root");
        let x = &self.pdx;
        write_for_lengths(&self.pd_lengths, &ns, || {
            let mut length_ids = Vec::with_capacity(b * t);
            let mut pkey = Vec::with_capacity(b * t);
            let mut pout = Vec::with_capacity(b * t * c.pose_n_embd);
            for &n in &ns {
                length_ids.extend(std::iter::repeat_n((n - c.min_tokens) as u32, t));
                pkey.extend((0..t).map(|i| u32::from(i < n)));
                for i in 0..t {
                    let v = if i < n { 1.0 } else { 0.0 };
                    pout.extend(std::iter::repeat_n(v, c.pose_n_embd));
                }
            }
            let mask_id = codes as u32; // POSE_MASK_ID = codes (`pose_backbone.py#L218-220`)
            let token_ids: Vec<u32> = (0..b * t)
                .flat_map(|_| (0..heads).map(move |h| mask_id + (codes as u32 + 1) * h as u32))
                .collect();
            x.write_u32(self.pd.token_ids, &token_ids)?;
            x.write_u32(self.pd.length_ids, &length_ids)?;
            x.write_u32(self.pd.key_mask, &pkey)?;
            x.write_f32(self.pd.out_mask, &pout)?;
            write_conv_masks(x, &self.pd.conv, &c.decoder, &ns, t)
        })?;
        x.write_f32(self.pd.root_cond, &root_cond)?;
        x.write_f32(self.pd.pose_cond, &out.pose_cond)?;
        let (a, bb) = has_pair(&out.has_pose_cond, c.pose_feat_width / fpt);
        x.write_f32(self.pd.has_cond.0, &a)?;
        x.write_f32(self.pd.has_cond.1, &bb)?;
        if let Some(u) = self.pd.uniforms {
            x.write_f32(u, &uniforms)?;
        }
        write_conv_conditions(
            x,
            &self.pd.conv,
            &c.decoder,
            &out.pose_cond,
            &out.has_pose_cond,
            &external,
        )?;
        clock.lap("pose: upload");
        clock.run(x)?;
        clock.lap("pose: run");
        let r = read_all(x, &[self.pd.logits, self.pd.tokens, self.pd.decoded])?;
        out.pose_logits = f32s(&r[0]);
        out.pose_tokens = bytemuck::pod_collect_to_vec(&r[1]);
        out.decoded = f32s(&r[2]);
        clock.lap("pose: download");

        // Step 5: local -> global (`local_root_local_body.py#L61-116`), then the frame-0 XZ
        // and heading put back (`motion_inference.py#L179-193`).
        let w = dims::LOCAL_REP;
        for (p, &(ox, oz)) in offsets.iter().enumerate() {
            let d = &out.decoded[p * frames * w..(p + 1) * frames * w];
            let (mut ang, mut px, mut pz) = (0f64, 0f64, 0f64);
            for f in 0..frames {
                if f > 0 {
                    let prev = &d[(f - 1) * w..(f - 1) * w + 3];
                    let rv = unnorm(prev[0], mean[LOCAL_ROOT_AT], std[LOCAL_ROOT_AT]) / fps;
                    let vx = unnorm(prev[1], mean[LOCAL_ROOT_AT + 1], std[LOCAL_ROOT_AT + 1]) / fps;
                    let vz = unnorm(prev[2], mean[LOCAL_ROOT_AT + 2], std[LOCAL_ROOT_AT + 2]) / fps;
                    ang += rv as f64;
                    px += vx as f64;
                    pz += vz as f64;
                }
                let a = ang as f32;
                let (qw, qy) = ((a / 2.0).cos(), (a / 2.0).sin());
                let a2 = qy.atan2(qw) * 2.0;
                let y = unnorm(
                    d[f * w + 3],
                    mean[LOCAL_ROOT_AT + 3],
                    std[LOCAL_ROOT_AT + 3],
                );
                // Re-apply the frame-0 heading to the angle read back from (cos, sin).
                let heading = a2.sin().atan2(a2.cos()) + headings[p];
                out.features.extend_from_slice(&[
                    px as f32 + ox,
                    y,
                    pz as f32 + oz,
                    heading.cos(),
                    heading.sin(),
                ]);
                for j in 4..w {
                    out.features.push(unnorm(
                        d[f * w + j],
                        mean[BODY_AT + j - 4],
                        std[BODY_AT + j - 4],
                    ));
                }
            }
        }
        out.qpos = m.g1.features_to_qpos(&out.features, b * frames);
        clock.lap("host: features");
        Ok((out, clock.times))
    }
}
