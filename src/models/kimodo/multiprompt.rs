//! Multi-prompt generation: several text features with their durations stitched into ONE
//! motion, as upstream's `Kimodo._multiprompt` does (`kimodo/model/kimodo_model.py#L123-341`
//! at `7330e7e`; the newest upstream readable here, `0f6fccf`, has the same file; upstream's
//! later PR #32 changed the transitions and is not followed; kimodo.md §1.7).
//!
//! Segments are generated one after the other, each by the ordinary sampling loop:
//!
//! 1. Segment 0 is generated alone (`frames` frames, the first heading angle as given).
//! 2. Segment `k > 0` takes back the last `overlap = n + int(0.10 * frames[k-1])` frames of
//!    what is stitched so far (`share_transition=True`, `percentage_transition_override=0.10`,
//!    `n = num_transition_frames`, default 5; #L190-204) and generates `overlap + frames[k]`
//!    frames. Its first `n` frames are pinned by a full-body constraint made from the taken-back
//!    frames (`FullBodyConstraintSet`: every joint's position, the smooth root's (x, z), the
//!    root height and the hip heading; no rotations; #L206-240), placed before the segment's
//!    own constraints (#L242-243). The whole observed motion is moved so that the smooth root
//!    of the first taken-back frame is the origin (`translate_2d`, x and z of the smooth root
//!    only, #L245-252), masked, normalised (#L265); the heading token gets that frame's hip
//!    heading (#L255). So the new segment is re-rooted, not rotated.
//! 3. The result is unnormalised and moved back (#L282-288). Its first `n` frames are blended
//!    with the first `n` taken-back frames in feature space, `old alpha + (1 - alpha) new` with
//!    `alpha = linspace(1, 0, n)` (#L290-300); the rest of the taken-back frames are dropped
//!    (segment `k` regenerated them) and its frames after the first `n` follow (#L304-311).
//!
//! The stitched motion has `sum(frames)` frames and is decoded from the unnormalised features
//! (#L316-320). Constraints of a whole-timeline `constraints.json` are cropped to each segment
//! (`crop_move`, #L177-187): here they are built once over the whole timeline unnormalised
//! ([`super::constraints::build_raw`]) and each segment takes its rows, which is the same since every
//! entry's data is per frame.

use std::ops::ControlFlow;

use super::config::KimodoModel;
use super::constraints::Conditions;
use super::motion::{self, FeatureLayout};
use super::sampler::{self, SampleOptions, Timings};
use super::skeleton::Skeleton;
use crate::backend::Backend;
use crate::models::kit::linspace::linspace_f32;
use crate::{Error, Result};

/// Upstream's default `num_transition_frames` (`kimodo_model.py#L135`, the CLI's
/// `--num_transition_frames`, `kimodo/scripts/generate.py#L53-57`).
pub const TRANSITION_FRAMES: usize = 5;

/// `percentage_transition_override` (`kimodo_model.py#L137`): the share of the previous
/// segment's frames that the next one regenerates, beyond the transition frames.
pub const TRANSITION_SHARE: f64 = 0.10;

/// One segment: its text feature (`[llm_dim]`) and its frames in the stitched motion.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub embedding: Vec<f32>,
    pub frames: usize,
}

/// Where a segment lands and what is generated for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentPlan {
    /// Its first frame in the stitched motion.
    pub start: usize,
    /// Its frames in the stitched motion.
    pub frames: usize,
    /// Frames taken back from what precedes it (0 for the first segment):
    /// `transition + int(0.10 * previous frames)`.
    pub overlap: usize,
    /// Frames the sampler generates: `overlap + frames`.
    pub generated: usize,
}

/// The segments' plans for `frames` (one entry per segment) with `transition` transition
/// frames, each generation at most `max_frames` frames. Errors name the segment: no segments,
/// a segment of 0 frames, a generation too long or shorter than 2 frames, a transition that
/// takes back more frames than the previous segment's own part holds.
pub fn plan(frames: &[usize], transition: usize, max_frames: usize) -> Result<Vec<SegmentPlan>> {
    let bad = |m: String| Err(Error::InvalidArgument(m));
    if frames.is_empty() {
        return bad("multi-prompt: no segments (give at least one prompt or embedding)".into());
    }
    if transition == 0 {
        return bad(
            "multi-prompt: 0 transition frames; upstream pins and blends at least one \
             (default 5)"
                .into(),
        );
    }
    let mut plans: Vec<SegmentPlan> = Vec::with_capacity(frames.len());
    // Frames of the last stitched chunk: what the next segment can take back.
    let mut chunk = 0usize;
    for (k, &f) in frames.iter().enumerate() {
        if f == 0 {
            return bad(format!("multi-prompt: segment {k} has 0 frames"));
        }
        let overlap = match plans.last() {
            None => 0,
            Some(prev) => {
                // Python's `int(prev_num_frame * 0.10)`: a float64 product, truncated.
                let o = transition + (prev.frames as f64 * TRANSITION_SHARE) as usize;
                if o > chunk {
                    return bad(format!(
                        "multi-prompt: segment {k}: its transition takes back {o} frames \
                         ({transition} + 10% of segment {}'s {} frames), but the part of \
                         segment {} that precedes it holds only {chunk}; make segment {} longer",
                        k - 1,
                        prev.frames,
                        k - 1,
                        k - 1
                    ));
                }
                o
            }
        };
        let generated = overlap + f;
        if !(2..=max_frames).contains(&generated) {
            return bad(format!(
                "multi-prompt: segment {k}: {generated} frames to generate ({f} of its own{}), \
                 outside 2..={max_frames}",
                if overlap > 0 {
                    format!(" + {overlap} taken back for the transition")
                } else {
                    String::new()
                }
            ));
        }
        let start = plans.last().map_or(0, |p| p.start + p.frames);
        chunk = if overlap > 0 {
            generated - transition
        } else {
            generated
        };
        plans.push(SegmentPlan {
            start,
            frames: f,
            overlap,
            generated,
        });
    }
    Ok(plans)
}

/// `torch.linspace(1, 0, n)` in float32 as torch's CPU kernel computes it: `start + step i`
/// for the first half, `end - step (n - 1 - i)` for the rest, `step = (end - start) / (n - 1)`.
pub fn blend_weights(n: usize) -> Vec<f32> {
    linspace_f32(1.0, 0.0, n)
}

/// What segment `k > 0` is conditioned on, built from the frames it takes back.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    /// The smooth root's (x, z) of the first taken-back frame: the segment's origin.
    pub origin: [f32; 2],
    /// The hip heading of that frame (the heading token's angle).
    pub heading: f32,
    /// `[overlap + frames, dim]`: the observed motion (normalised) and mask.
    pub conditions: Conditions,
}

/// The conditions of a segment that takes back `tail` (`[overlap, dim]` unnormalised stitched
/// features) with `transition` pinned frames, followed by the segment's own constraints
/// `own` (unnormalised, `[frames, dim]`, from [`super::constraints::build_raw`]) when given.
pub fn transition(
    model: &KimodoModel,
    skel: &Skeleton,
    tail: &[f32],
    overlap: usize,
    transition: usize,
    own: Option<&Conditions>,
    frames: usize,
) -> Result<Transition> {
    let dim = model.config.motion_dim;
    if tail.len() != overlap * dim || transition > overlap {
        return Err(Error::Shape(format!(
            "multi-prompt transition: {} values taken back for {overlap} frames of {dim}, \
             {transition} pinned",
            tail.len()
        )));
    }
    // `motion_rep.inverse(latest_frames, is_normalized=False)` (#L206-211): posed joints by
    // FK on the model's skeleton.
    let m = motion::inverse(tail, overlap, skel)?;
    let nj = skel.num_joints();
    let total = overlap + frames;
    let mut obs = vec![0.0f32; total * dim];
    let mut mask = vec![false; total * dim];
    let headings = motion::heading_from_joints(skel, &m.posed_joints[..transition * nj * 3])?;
    let sr = FeatureLayout::SMOOTH_ROOT;
    for t in 0..transition {
        let row = &mut obs[t * dim..(t + 1) * dim];
        let mrow = &mut mask[t * dim..(t + 1) * dim];
        let (sx, sz) = (m.smooth_root_pos[t * 3], m.smooth_root_pos[t * 3 + 2]);
        let p = &m.posed_joints[t * nj * 3..(t + 1) * nj * 3];
        // create_conditions (kimodo_motionrep.py#L241-293) for one FullBodyConstraintSet:
        // smooth root (x, z), root y (the posed root's, constraints.py#L226), heading
        // (cos, sin) of the hip angle, positions relative to (smooth x, 0, smooth z).
        row[sr] = sx;
        row[sr + 2] = sz;
        row[sr + 1] = p[skel.root * 3 + 1];
        row[FeatureLayout::HEADING] = headings[t].cos();
        row[FeatureLayout::HEADING + 1] = headings[t].sin();
        for i in [
            sr,
            sr + 1,
            sr + 2,
            FeatureLayout::HEADING,
            FeatureLayout::HEADING + 1,
        ] {
            mrow[i] = true;
        }
        for j in 0..nj {
            let b = FeatureLayout::LOCAL_POSITIONS + 3 * j;
            row[b] = p[3 * j] - sx;
            row[b + 1] = p[3 * j + 1] - 0.0;
            row[b + 2] = p[3 * j + 2] - sz;
            mrow[b..b + 3].fill(true);
        }
    }
    if let Some(c) = own {
        if c.frames != frames || c.dim != dim {
            return Err(Error::Shape(format!(
                "multi-prompt transition: the segment's constraints are [{}, {}], the segment \
                 [{frames}, {dim}]",
                c.frames, c.dim
            )));
        }
        obs[overlap * dim..].copy_from_slice(&c.features);
        mask[overlap * dim..].copy_from_slice(&c.mask);
    }
    // translate_2d(observed, -origin), then `observed * mask` (#L245-252).
    let origin = [m.smooth_root_pos[0], m.smooth_root_pos[2]];
    for (row, mrow) in obs.chunks_exact_mut(dim).zip(mask.chunks_exact(dim)) {
        row[sr] += -origin[0];
        row[sr + 2] += -origin[1];
        for (v, &k) in row.iter_mut().zip(mrow) {
            *v *= if k { 1.0 } else { 0.0 };
        }
    }
    motion::normalize(&model.stats, &mut obs)?;
    Ok(Transition {
        origin,
        heading: headings[0],
        conditions: Conditions {
            frames: total,
            dim,
            features: obs,
            mask,
        },
    })
}

/// How to sample every segment.
#[derive(Clone, Debug, PartialEq)]
pub struct MultiOptions {
    pub steps: usize,
    pub cfg_text: f32,
    pub cfg_constraint: f32,
    /// Guidance rows of an unconstrained first segment (2 or 3); every other segment has
    /// constraints and runs upstream's 3 rows.
    pub cfg_rows: usize,
    /// The first segment's heading angle (radians).
    pub heading: f32,
    /// Seed of the noise: segment `k` draws the next `generated * dim` values of the stream
    /// of [`sampler::gaussian_noise`] (segment 0 the first ones), unless `noise` is given.
    pub seed: u64,
    /// Per segment `[generated, dim]` (for parity with a PyTorch run).
    pub noise: Option<Vec<Vec<f32>>>,
    /// `num_transition_frames`.
    pub transition: usize,
    /// Constraints over the whole stitched timeline, unnormalised ([`super::constraints::build_raw`]).
    pub constraints: Option<Conditions>,
}

impl MultiOptions {
    /// Upstream's defaults: 100 steps, the model's guidance weights, 2 rows for an
    /// unconstrained first segment, heading 0, seed 0, 5 transition frames.
    pub fn new(model: &KimodoModel) -> MultiOptions {
        MultiOptions {
            steps: 100,
            cfg_text: model.config.cfg_text,
            cfg_constraint: model.config.cfg_constraint,
            cfg_rows: 2,
            heading: 0.0,
            seed: 0,
            noise: None,
            transition: TRANSITION_FRAMES,
            constraints: None,
        }
    }
}

/// One segment's run.
#[derive(Clone, Debug, PartialEq)]
pub struct SegmentRun {
    pub plan: SegmentPlan,
    /// The heading angle it was generated with.
    pub heading: f32,
    /// Its origin (0 for the first segment).
    pub origin: [f32; 2],
    /// The conditions it was generated with (normalised), if any.
    pub conditions: Option<Conditions>,
    /// The sampler's result `[generated, dim]`, normalised.
    pub features: Vec<f32>,
}

/// A stitched motion.
#[derive(Clone, Debug, PartialEq)]
pub struct MultiSample {
    /// `sum(frames)`.
    pub frames: usize,
    /// `[frames, dim]`: the stitched unnormalised features (what upstream decodes).
    pub raw: Vec<f32>,
    pub segments: Vec<SegmentRun>,
    /// Summed over the segments.
    pub timings: Timings,
}

/// Stitches segment `k`'s unnormalised result `seg` (`[generated, dim]`, already moved back
/// to its origin) onto `chunks` (the stitched motion as upstream's `generated_motions`
/// list): the first segment is appended; a later one replaces the last `overlap` frames of
/// the last chunk by the blend of their first `transition` frames with its own first
/// `transition`, followed by the rest of it.
pub fn stitch(
    chunks: &mut Vec<Vec<f32>>,
    seg: Vec<f32>,
    plan: &SegmentPlan,
    transition: usize,
    dim: usize,
) -> Result<()> {
    if plan.overlap == 0 {
        chunks.push(seg);
        return Ok(());
    }
    let last = chunks.pop().ok_or_else(|| {
        Error::InvalidArgument("multi-prompt: a transition with nothing before it".into())
    })?;
    let keep = last
        .len()
        .checked_sub(plan.overlap * dim)
        .ok_or_else(|| Error::Shape("multi-prompt: the overlap exceeds the last chunk".into()))?;
    let (head, latest) = last.split_at(keep);
    let (trans, rest) = seg.split_at(transition * dim);
    let alpha = blend_weights(transition);
    let blended: Vec<f32> = latest[..transition * dim]
        .chunks_exact(dim)
        .zip(trans.chunks_exact(dim))
        .zip(&alpha)
        .flat_map(|((old, new), &a)| {
            // `latest * alpha + (1 - alpha) * transition_frames`: two products, one sum.
            let b = 1.0 - a;
            old.iter()
                .zip(new)
                .map(move |(&o, &n)| o * a + b * n)
                .collect::<Vec<_>>()
        })
        .collect();
    chunks.push(head.to_vec());
    chunks.push(blended);
    chunks.push(rest.to_vec());
    Ok(())
}

/// Generates the segments into one motion (see the module docs). `progress(done, total)`
/// counts the steps of every segment and may cancel.
pub fn sample_segments<B: Backend>(
    backend: &B,
    model: &KimodoModel,
    segments: &[Segment],
    opts: &MultiOptions,
    progress: &mut dyn FnMut(usize, usize) -> ControlFlow<()>,
) -> Result<MultiSample> {
    let c = &model.config;
    let dim = c.motion_dim;
    let frames: Vec<usize> = segments.iter().map(|s| s.frames).collect();
    let plans = plan(&frames, opts.transition, c.max_frames())?;
    let total: usize = frames.iter().sum();
    if let Some(n) = &opts.noise {
        if n.len() != segments.len() {
            return Err(Error::InvalidArgument(format!(
                "multi-prompt: {} noise arrays for {} segments",
                n.len(),
                segments.len()
            )));
        }
        for (k, (x, p)) in n.iter().zip(&plans).enumerate() {
            if x.len() != p.generated * dim {
                return Err(Error::InvalidArgument(format!(
                    "multi-prompt: segment {k}'s noise holds {} values; it generates {} frames \
                     of {dim} features ({} values)",
                    x.len(),
                    p.generated,
                    p.generated * dim
                )));
            }
        }
    }
    if let Some(cond) = &opts.constraints
        && (cond.frames != total || cond.dim != dim)
    {
        return Err(Error::Shape(format!(
            "multi-prompt: the constraints are [{}, {}]; the motion is [{total}, {dim}]",
            cond.frames, cond.dim
        )));
    }
    let skel = Skeleton::load(c.skeleton)?;
    let steps_total = opts.steps * segments.len();
    let mut chunks: Vec<Vec<f32>> = Vec::new();
    let mut runs = Vec::with_capacity(segments.len());
    let mut timings = Timings::default();
    let mut offset = 0usize;
    for (k, (seg, p)) in segments.iter().zip(&plans).enumerate() {
        let own = opts.constraints.as_ref().and_then(|cond| {
            let r = p.start * dim..(p.start + p.frames) * dim;
            cond.mask[r.clone()].iter().any(|&m| m).then(|| Conditions {
                frames: p.frames,
                dim,
                features: cond.features[r.clone()].to_vec(),
                mask: cond.mask[r].to_vec(),
            })
        });
        let (heading, origin, conditions) = if p.overlap == 0 {
            let cond = match own {
                Some(mut o) => {
                    motion::normalize(&model.stats, &mut o.features)?;
                    Some(o)
                }
                None => None,
            };
            (opts.heading, [0.0, 0.0], cond)
        } else {
            let stitched_len: usize = chunks.last().map_or(0, Vec::len);
            let last = chunks.last().expect("a later segment follows a chunk");
            let tail = &last[stitched_len - p.overlap * dim..];
            let t = transition(
                model,
                &skel,
                tail,
                p.overlap,
                opts.transition,
                own.as_ref(),
                p.frames,
            )
            .map_err(|e| match e {
                Error::InvalidArgument(m) => {
                    Error::InvalidArgument(format!("multi-prompt: segment {k}: {m}"))
                }
                e => e,
            })?;
            (t.heading, t.origin, Some(t.conditions))
        };
        let mut o = SampleOptions::new(model, p.generated);
        o.steps = opts.steps;
        o.cfg_text = opts.cfg_text;
        o.cfg_constraint = opts.cfg_constraint;
        o.cfg_rows = if conditions.is_some() {
            3
        } else {
            opts.cfg_rows
        };
        o.heading = heading;
        o.noise = Some(match &opts.noise {
            Some(n) => n[k].clone(),
            None => sampler::gaussian_noise_range(opts.seed, offset, p.generated * dim),
        });
        offset += p.generated * dim;
        o.constraints = conditions.clone();
        let base = k * opts.steps;
        let mut prog = |done: usize, _n: usize| progress(base + done, steps_total);
        let s = sampler::sample_cancellable(backend, model, &seg.embedding, &o, &mut prog, None)
            .map_err(|e| match e {
                Error::InvalidArgument(m) => {
                    Error::InvalidArgument(format!("multi-prompt: segment {k}: {m}"))
                }
                e => e,
            })?;
        if let Some(i) = s.features.iter().position(|x| !x.is_finite()) {
            return Err(Error::InvalidArgument(format!(
                "multi-prompt: segment {k}: sampling overflowed f32 at frame {}, feature {}",
                i / dim,
                i % dim
            )));
        }
        timings.build_s += s.timings.build_s;
        timings.steps_s += s.timings.steps_s;
        let mut raw = s.features.clone();
        motion::unnormalize(&model.stats, &mut raw)?;
        if p.overlap > 0 {
            // translate_2d(motion, origin) (#L285-288).
            for row in raw.chunks_exact_mut(dim) {
                row[FeatureLayout::SMOOTH_ROOT] += origin[0];
                row[FeatureLayout::SMOOTH_ROOT + 2] += origin[1];
            }
        }
        stitch(&mut chunks, raw, p, opts.transition, dim)?;
        runs.push(SegmentRun {
            plan: *p,
            heading,
            origin,
            conditions,
            features: s.features,
        });
    }
    timings.per_step_ms = timings.steps_s * 1e3 / steps_total.max(1) as f64;
    let raw: Vec<f32> = chunks.concat();
    debug_assert_eq!(raw.len(), total * dim);
    Ok(MultiSample {
        frames: total,
        raw,
        segments: runs,
        timings,
    })
}

/// Where a timeline entry's text feature comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum TimelineText {
    /// A prompt, embedded with the text model.
    Prompt(String),
    /// A text feature `.npy` (a relative path is taken from the timeline file's folder).
    Embedding(std::path::PathBuf),
}

/// One entry of a timeline file.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineEntry {
    pub text: TimelineText,
    pub frames: usize,
}

/// Parses a timeline file (`kinema generate --timeline`): a non-empty JSON array of objects
/// `{"prompt": TEXT, "frames": N}` or `{"embedding": "file.npy", "frames": N}`, one per
/// segment in order; `N >= 1`. Relative embedding paths are resolved against `base` (the
/// file's folder). Errors name the entry.
pub fn parse_timeline(bytes: &[u8], base: &std::path::Path) -> Result<Vec<TimelineEntry>> {
    use serde_json::Value;
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::InvalidArgument(format!("timeline: not valid JSON: {e}")))?;
    let arr = v.as_array().ok_or_else(|| {
        Error::InvalidArgument(
            "timeline: expected a JSON array of {\"prompt\"|\"embedding\", \"frames\"} \
             objects"
                .into(),
        )
    })?;
    if arr.is_empty() {
        return Err(Error::InvalidArgument(
            "timeline: the list is empty; give at least one segment".into(),
        ));
    }
    let mut out = Vec::with_capacity(arr.len());
    for (i, e) in arr.iter().enumerate() {
        let err = |m: String| Error::InvalidArgument(format!("timeline: entry {i}: {m}"));
        let o = e
            .as_object()
            .ok_or_else(|| err(format!("{e} is not an object")))?;
        if let Some(k) = o
            .keys()
            .find(|k| !["prompt", "embedding", "frames"].contains(&k.as_str()))
        {
            return Err(err(format!(
                "unknown key '{k}' (expected prompt or embedding, and frames)"
            )));
        }
        let text = match (o.get("prompt"), o.get("embedding")) {
            (Some(_), Some(_)) => {
                return Err(err("give either prompt or embedding, not both".into()));
            }
            (Some(Value::String(p)), None) if !p.trim().is_empty() => {
                TimelineText::Prompt(p.clone())
            }
            (Some(p), None) => return Err(err(format!("prompt {p} is not a non-empty string"))),
            (None, Some(Value::String(p))) if !p.is_empty() => {
                TimelineText::Embedding(base.join(p))
            }
            (None, Some(p)) => return Err(err(format!("embedding {p} is not a file path"))),
            (None, None) => return Err(err("missing prompt or embedding".into())),
        };
        let frames = match o.get("frames") {
            None => return Err(err("missing frames".into())),
            Some(f) => f
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n >= 1)
                .ok_or_else(|| err(format!("frames {f} is not a positive integer")))?,
        };
        out.push(TimelineEntry { text, frames });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_follows_upstreams_shared_transition() {
        let p = plan(&[30, 20, 25], 5, 4948).unwrap();
        assert_eq!(
            p.iter()
                .map(|s| (s.start, s.overlap, s.generated))
                .collect::<Vec<_>>(),
            [(0, 0, 30), (30, 8, 28), (50, 7, 32)]
        );
        // 70 * 0.1 is 7.000000000000001 in float64: int() gives 7.
        assert_eq!(plan(&[70, 10], 5, 4948).unwrap()[1].overlap, 12);
    }

    #[test]
    fn plan_errors_name_the_segment() {
        let e = |f: &[usize], t: usize, max: usize| plan(f, t, max).unwrap_err().to_string();
        assert!(e(&[], 5, 100).contains("no segments"));
        assert!(e(&[10, 0], 5, 100).contains("segment 1 has 0 frames"));
        assert!(e(&[4, 10], 5, 100).contains("segment 1: its transition takes back 5 frames"));
        assert!(e(&[10, 96], 5, 100).contains("segment 1: 102 frames to generate"));
        assert!(e(&[1], 5, 100).contains("segment 0: 1 frames to generate"));
        assert!(e(&[10, 10], 0, 100).contains("0 transition frames"));
    }

    #[test]
    fn timeline_parses_and_names_bad_entries() {
        let base = std::path::Path::new("/t");
        let t = parse_timeline(
            br#"[{"prompt": "walk", "frames": 90}, {"embedding": "b.npy", "frames": 120}]"#,
            base,
        )
        .unwrap();
        assert_eq!(t[0].text, TimelineText::Prompt("walk".into()));
        assert_eq!(t[1].text, TimelineText::Embedding("/t/b.npy".into()));
        assert_eq!((t[0].frames, t[1].frames), (90, 120));
        let e = |j: &str| parse_timeline(j.as_bytes(), base).unwrap_err().to_string();
        assert!(e("[]").contains("empty"));
        assert!(e("{}").contains("JSON array"));
        assert!(
            e(r#"[{"prompt":"a","frames":3},{"prompt":"b","frames":0}]"#)
                .contains("entry 1: frames 0 is not a positive integer")
        );
        assert!(e(r#"[{"prompt":"a"}]"#).contains("entry 0: missing frames"));
        assert!(
            e(r#"[{"prompt":"a","embedding":"x.npy","frames":3}]"#)
                .contains("entry 0: give either prompt or embedding")
        );
        assert!(e(r#"[{"text":"a","frames":3}]"#).contains("entry 0: unknown key 'text'"));
        assert!(e(r#"[{"prompt":" ","frames":3}]"#).contains("entry 0: prompt"));
    }

    #[test]
    fn blend_weights_are_torch_linspace() {
        assert_eq!(blend_weights(5), [1.0, 0.75, 0.5, 0.25, 0.0]);
        assert_eq!(blend_weights(1), [1.0]);
        let w = blend_weights(7);
        assert_eq!((w[0], w[6]), (1.0, 0.0));
        assert!(w.windows(2).all(|p| p[1] < p[0]));
    }
}
