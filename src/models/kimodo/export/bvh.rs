//! BVH for SOMA, in upstream's layout (`kimodo/exports/bvh.py#L62-206`), and a BVH parser.
//!
//! Layout: a wrapper `Root` joint at the origin (6 channels, always zero) whose one child is
//! `Hips` (`Xposition Yposition Zposition Zrotation Yrotation Xrotation`), then the other 76
//! SOMA77 joints depth first in index order with `Zrotation Yrotation Xrotation`; leaves have no
//! `End Site` (upstream strips them). Offsets and positions are centimetres.
//!
//! Two rest poses:
//! - upstream's default, the BONES-SEED BVH rest (`bvh_joints.p`): the local rotations are first
//!   re-expressed by `from_standard_tpose` (`kimodo/skeleton/transforms.py#L43-105`);
//! - the standard T-pose (`--bvh-standard-tpose`, upstream's later `--bvh_standard_tpose`, not in
//!   the pinned commit): Kimodo's own rest joints and local rotations, unchanged.
//!
//! Angles are written in degrees, straight from each rotation matrix ([`euler_zyx`]), with six
//! decimals; the Hips position channel holds the root position (the channel is absolute, as
//! upstream writes it and Blender reads it).

use std::fmt::Write as _;

use serde::Deserialize;

use super::rot::{Axis, axis_rotation, euler_zyx, mul64};
use crate::models::kimodo::config::SkeletonKind;
use crate::models::kimodo::motion::Motion;
use crate::models::kimodo::skeleton::{Mat3, Skeleton, mat_mul};
use crate::{Error, Result};

const BVH_JSON: &str = include_str!("../../../../data/kimodo/exports/soma77_bvh.json");

/// Name of the wrapper joint above `Hips`.
pub const WRAPPER: &str = "Root";

#[derive(Deserialize)]
struct BvhFile {
    bvh_joints: Vec<[f64; 3]>,
    standard_t_pose_global_offsets_rots: Vec<[[f32; 3]; 3]>,
}

/// SOMA77's BVH constants: the BVH rest joints (metres) and the global rotation offsets of the
/// standard T-pose (`[77, 3, 3]`).
pub struct SomaBvhRest {
    pub bvh_joints: Vec<[f64; 3]>,
    pub tpose_offsets: Vec<Mat3>,
}

impl SomaBvhRest {
    /// The constants embedded from `data/kimodo/exports/soma77_bvh.json`.
    pub fn load() -> Result<SomaBvhRest> {
        let f: BvhFile = serde_json::from_str(BVH_JSON)
            .map_err(|e| Error::InvalidArgument(format!("embedded BVH data: {e}")))?;
        let n = SkeletonKind::Soma77.num_joints();
        if f.bvh_joints.len() != n || f.standard_t_pose_global_offsets_rots.len() != n {
            return Err(Error::InvalidArgument(
                "embedded BVH data: not 77 joints".into(),
            ));
        }
        Ok(SomaBvhRest {
            bvh_joints: f.bvh_joints,
            tpose_offsets: f
                .standard_t_pose_global_offsets_rots
                .iter()
                .map(|m| [m[0], m[1], m[2]].concat().try_into().expect("9 values"))
                .collect(),
        })
    }
}

/// `change_tpose` (`kimodo/skeleton/transforms.py#L43-73`): global rotations by FK, each
/// multiplied on the right by `X_j^T` (`from_standard_tpose` passes `X = O^T`, so `G O`;
/// `to_standard_tpose` passes `O`, so `G O^T`), then back to locals. f32, as upstream.
pub fn change_tpose(
    skeleton: &Skeleton,
    local_rot_mats: &[f32],
    frames: usize,
    offsets: &[Mat3],
    from_standard: bool,
) -> Result<Vec<f32>> {
    let nj = skeleton.num_joints();
    let zeros = vec![0.0f32; frames * 3];
    let (global, _) = skeleton.fk(local_rot_mats, &zeros, frames)?;
    let mut new_global = vec![0.0f32; global.len()];
    for (i, (g, out)) in global
        .chunks_exact(9)
        .zip(new_global.chunks_exact_mut(9))
        .enumerate()
    {
        let g: &Mat3 = g.try_into().expect("9 values");
        let o = &offsets[i % nj];
        let o_used = if from_standard { *o } else { transpose(o) };
        out.copy_from_slice(&mat_mul(g, &o_used));
    }
    skeleton.local_from_global(&new_global, frames)
}

fn transpose(m: &Mat3) -> Mat3 {
    [m[0], m[3], m[6], m[1], m[4], m[7], m[2], m[5], m[8]]
}

/// The SOMA77 form of a SOMA motion (SOMA30 is expanded as upstream's exporter does).
pub fn soma77_of(motion: &Motion) -> Result<Motion> {
    match motion.skeleton {
        SkeletonKind::Soma77 => Ok(motion.clone()),
        SkeletonKind::Soma30 => motion.to_soma77(),
        other => Err(Error::InvalidArgument(format!(
            "BVH export is for SOMA skeletons (upstream's too), not {}",
            other.name()
        ))),
    }
}

/// The rest joints (metres) a BVH of this rest pose uses.
fn rest_joints(skeleton: &Skeleton, rest: &SomaBvhRest, standard_tpose: bool) -> Vec<[f64; 3]> {
    if standard_tpose {
        skeleton.neutral_joints.clone()
    } else {
        rest.bvh_joints.clone()
    }
}

/// The BVH text of a SOMA motion at `fps` (see the module documentation).
pub fn bvh_text(motion: &Motion, fps: f32, standard_tpose: bool) -> Result<String> {
    if !(fps.is_finite() && fps > 0.0) {
        return Err(Error::InvalidArgument(format!(
            "bvh: fps must be positive, not {fps}"
        )));
    }
    let m = soma77_of(motion)?;
    let sk = Skeleton::load(SkeletonKind::Soma77)?;
    let (frames, nj) = (m.frames, sk.num_joints());
    if frames == 0 {
        return Err(Error::InvalidArgument(
            "bvh: the motion has no frames".into(),
        ));
    }
    if m.local_rot_mats.len() != frames * nj * 9 || m.root_positions.len() != frames * 3 {
        return Err(Error::Shape(format!(
            "bvh: the motion's arrays do not hold {frames} frames of {nj} joints"
        )));
    }
    if m.local_rot_mats
        .iter()
        .chain(&m.root_positions)
        .any(|v| !v.is_finite())
    {
        return Err(Error::InvalidArgument(
            "bvh: the motion holds non-finite rotations or root positions".into(),
        ));
    }
    let rest = SomaBvhRest::load()?;
    let locals = if standard_tpose {
        m.local_rot_mats.clone()
    } else {
        change_tpose(&sk, &m.local_rot_mats, frames, &rest.tpose_offsets, true)?
    };
    let joints = rest_joints(&sk, &rest, standard_tpose);
    let mut hips = joints[sk.root].map(|v| v * 100.0);
    if hips == [0.0; 3] {
        // Upstream's nominal pelvis height for a rest whose root sits at the origin.
        hips = [0.0, 100.0, 0.0];
    }

    let mut s = String::new();
    let num = |v: f64| format!("{v:.6}");
    let root_channels = "CHANNELS 6 Xposition Yposition Zposition Zrotation Yrotation Xrotation";
    s.push_str("HIERARCHY\nROOT Root\n{\n\tOFFSET 0.000000 0.000000 0.000000\n\t");
    s.push_str(root_channels);
    s.push('\n');
    // Depth-first over the joints with an explicit stack: (joint, closing?).
    let mut order = Vec::with_capacity(nj);
    let mut stack = vec![(sk.root, false)];
    while let Some((j, closing)) = stack.pop() {
        let depth = {
            let mut d = 1;
            let mut p = sk.parents[j];
            while let Some(q) = p {
                d += 1;
                p = sk.parents[q];
            }
            d
        };
        let ind = "\t".repeat(depth);
        if closing {
            let _ = writeln!(s, "{ind}}}");
            continue;
        }
        order.push(j);
        let off = match sk.parents[j] {
            None => hips,
            Some(p) => [0, 1, 2].map(|k| (joints[j][k] - joints[p][k]) * 100.0),
        };
        let _ = writeln!(s, "{ind}JOINT {}\n{ind}{{", sk.names[j]);
        let _ = writeln!(
            s,
            "{ind}\tOFFSET {} {} {}",
            num(off[0]),
            num(off[1]),
            num(off[2])
        );
        if j == sk.root {
            let _ = writeln!(s, "{ind}\t{root_channels}");
        } else {
            let _ = writeln!(s, "{ind}\tCHANNELS 3 Zrotation Yrotation Xrotation");
        }
        stack.push((j, true));
        let kids: Vec<usize> = (0..nj).filter(|&c| sk.parents[c] == Some(j)).collect();
        for &c in kids.iter().rev() {
            stack.push((c, false));
        }
    }
    s.push_str("}\nMOTION\n");
    let _ = writeln!(s, "Frames: {frames}");
    let _ = writeln!(s, "Frame Time: {}", 1.0 / f64::from(fps));
    let deg = |r: f64| num(r.to_degrees());
    for t in 0..frames {
        let mut line = String::from("0.000000 0.000000 0.000000 0.000000 0.000000 0.000000");
        for &j in &order {
            let l: &Mat3 = locals[(t * nj + j) * 9..][..9]
                .try_into()
                .expect("9 values");
            let [z, y, x] = euler_zyx(l);
            if j == sk.root {
                for k in 0..3 {
                    line.push(' ');
                    line.push_str(&num(f64::from(m.root_positions[t * 3 + k]) * 100.0));
                }
            }
            for a in [z, y, x] {
                line.push(' ');
                line.push_str(&deg(a));
            }
        }
        s.push_str(&line);
        s.push('\n');
    }
    Ok(s)
}

/// One channel of a BVH joint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    Position(Axis),
    Rotation(Axis),
}

/// One joint of a parsed BVH (`End Site`s are not joints).
#[derive(Clone, Debug, PartialEq)]
pub struct BvhJoint {
    pub name: String,
    pub parent: Option<usize>,
    pub offset: [f64; 3],
    pub channels: Vec<Channel>,
    /// Index of this joint's first channel within a frame's values.
    pub first_channel: usize,
}

/// A parsed BVH file.
#[derive(Clone, Debug, PartialEq)]
pub struct Bvh {
    /// Joints in file order (parents precede children).
    pub joints: Vec<BvhJoint>,
    pub frames: usize,
    pub frame_time: f64,
    /// `[frames, channels]`, in the file's units (degrees for rotations).
    pub values: Vec<f64>,
    pub channels_per_frame: usize,
}

/// Most joints a BVH may declare (SOMA77 has 78 with the wrapper).
pub const MAX_JOINTS: usize = 4096;

fn bvh_err(line: usize, msg: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("bvh line {line}: {msg}"))
}

struct Tokens<'a> {
    it: std::iter::Peekable<Box<dyn Iterator<Item = (usize, &'a str)> + 'a>>,
    last_line: usize,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str) -> Tokens<'a> {
        let it: Box<dyn Iterator<Item = (usize, &'a str)>> = Box::new(
            text.lines()
                .enumerate()
                .flat_map(|(i, l)| l.split_whitespace().map(move |w| (i + 1, w))),
        );
        Tokens {
            it: it.peekable(),
            last_line: 1,
        }
    }
    fn next(&mut self, what: &str) -> Result<&'a str> {
        match self.it.next() {
            Some((l, w)) => {
                self.last_line = l;
                Ok(w)
            }
            None => Err(bvh_err(
                self.last_line,
                format!("the file ends where {what} was expected"),
            )),
        }
    }
    fn expect(&mut self, word: &str) -> Result<()> {
        let w = self.next(&format!("'{word}'"))?;
        if w != word {
            return Err(bvh_err(
                self.last_line,
                format!("expected '{word}', found '{w}'"),
            ));
        }
        Ok(())
    }
    fn number(&mut self, what: &str) -> Result<f64> {
        let w = self.next(what)?;
        match w.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(bvh_err(
                self.last_line,
                format!("{what}: '{w}' is not a finite number"),
            )),
        }
    }
    fn count(&mut self, what: &str) -> Result<usize> {
        let w = self.next(what)?;
        w.parse::<usize>()
            .map_err(|_| bvh_err(self.last_line, format!("{what}: '{w}' is not a count")))
    }
    fn offset(&mut self) -> Result<[f64; 3]> {
        self.expect("OFFSET")?;
        Ok([
            self.number("an OFFSET value")?,
            self.number("an OFFSET value")?,
            self.number("an OFFSET value")?,
        ])
    }
}

fn channel(word: &str) -> Option<Channel> {
    Some(match word {
        "Xposition" => Channel::Position(Axis::X),
        "Yposition" => Channel::Position(Axis::Y),
        "Zposition" => Channel::Position(Axis::Z),
        "Xrotation" => Channel::Rotation(Axis::X),
        "Yrotation" => Channel::Rotation(Axis::Y),
        "Zrotation" => Channel::Rotation(Axis::Z),
        _ => return None,
    })
}

/// Parses BVH text (one hierarchy, `ROOT`/`JOINT`/`End Site`, then `MOTION`). Hostile input
/// gives an error naming the line, never a panic: nesting is walked with an explicit stack,
/// joints are capped at [`MAX_JOINTS`], and the frame count is checked against the text's size
/// before anything is allocated for the values.
pub fn parse(text: &str) -> Result<Bvh> {
    let mut tok = Tokens::new(text);
    tok.expect("HIERARCHY")?;
    tok.expect("ROOT")?;
    let mut joints: Vec<BvhJoint> = Vec::new();
    let mut channels_per_frame = 0usize;
    // Open blocks: Some(joint) or None for an End Site.
    let mut open: Vec<Option<usize>> = Vec::new();
    let mut pending: Option<(String, Option<usize>)> =
        Some((tok.next("the root's name")?.to_string(), None));
    loop {
        if let Some((name, parent)) = pending.take() {
            if joints.len() >= MAX_JOINTS {
                return Err(bvh_err(
                    tok.last_line,
                    format!("more than {MAX_JOINTS} joints"),
                ));
            }
            tok.expect("{")?;
            let offset = tok.offset()?;
            tok.expect("CHANNELS")?;
            let n = tok.count("the channel count")?;
            if n > 6 {
                return Err(bvh_err(
                    tok.last_line,
                    format!("joint '{name}' declares {n} channels (at most 6)"),
                ));
            }
            let mut chans = Vec::with_capacity(n);
            for _ in 0..n {
                let w = tok.next("a channel name")?;
                chans.push(
                    channel(w)
                        .ok_or_else(|| bvh_err(tok.last_line, format!("unknown channel '{w}'")))?,
                );
            }
            joints.push(BvhJoint {
                name,
                parent,
                offset,
                channels: chans,
                first_channel: channels_per_frame,
            });
            channels_per_frame += n;
            open.push(Some(joints.len() - 1));
        }
        if open.is_empty() {
            break;
        }
        let w = tok.next("JOINT, End Site or '}'")?;
        match w {
            "JOINT" => {
                let parent = match open.last() {
                    Some(Some(p)) => *p,
                    _ => {
                        return Err(bvh_err(tok.last_line, "a JOINT inside an End Site"));
                    }
                };
                pending = Some((tok.next("a joint name")?.to_string(), Some(parent)));
            }
            "End" => {
                tok.expect("Site")?;
                tok.expect("{")?;
                tok.offset()?;
                tok.expect("}")?;
            }
            "}" => {
                open.pop();
            }
            _ => {
                return Err(bvh_err(
                    tok.last_line,
                    format!("expected JOINT, End Site or '}}', found '{w}'"),
                ));
            }
        }
    }
    tok.expect("MOTION")?;
    tok.expect("Frames:")?;
    let frames = tok.count("the frame count")?;
    tok.expect("Frame")?;
    tok.expect("Time:")?;
    let frame_time = tok.number("the frame time")?;
    if frame_time <= 0.0 {
        return Err(bvh_err(
            tok.last_line,
            format!("frame time {frame_time} is not positive"),
        ));
    }
    // Each value takes at least two bytes of text (a digit and a separator).
    let total = frames
        .checked_mul(channels_per_frame)
        .filter(|&n| n <= text.len() / 2 + 1)
        .ok_or_else(|| {
            bvh_err(
                tok.last_line,
                format!(
                    "{frames} frames of {channels_per_frame} channels cannot fit in {} bytes",
                    text.len()
                ),
            )
        })?;
    let mut values = Vec::with_capacity(total);
    for _ in 0..total {
        values.push(tok.number("a frame value")?);
    }
    if let Some((l, w)) = tok.it.next() {
        return Err(bvh_err(
            l,
            format!("'{w}' after the last of {frames} frames"),
        ));
    }
    Ok(Bvh {
        joints,
        frames,
        frame_time,
        values,
        channels_per_frame,
    })
}

impl Bvh {
    fn frame(&self, t: usize, j: usize) -> &[f64] {
        let jt = &self.joints[j];
        &self.values[t * self.channels_per_frame + jt.first_channel..][..jt.channels.len()]
    }

    /// The local rotation of joint `j` at frame `t` (row-major f64): the product of its
    /// rotation channels in the order they are listed (`Zrotation Yrotation Xrotation` is
    /// `Rz Ry Rx`).
    pub fn rotation(&self, t: usize, j: usize) -> [f64; 9] {
        let mut r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        for (c, v) in self.joints[j].channels.iter().zip(self.frame(t, j)) {
            if let Channel::Rotation(a) = c {
                r = mul64(&r, &axis_rotation(*a, v.to_radians()));
            }
        }
        r
    }

    /// The position channels of joint `j` at frame `t` (`None` without position channels;
    /// missing axes are 0).
    pub fn position(&self, t: usize, j: usize) -> Option<[f64; 3]> {
        let mut p = [0.0; 3];
        let mut any = false;
        for (c, v) in self.joints[j].channels.iter().zip(self.frame(t, j)) {
            if let Channel::Position(a) = c {
                p[*a as usize] = *v;
                any = true;
            }
        }
        any.then_some(p)
    }
}

/// Local rotations read from a BVH in upstream's BVH rest (`[T, J]` row-major f64, SOMA77 order)
/// turned back to the standard T-pose: `to_standard_tpose` (`change_tpose` with `O`, so
/// `G O^T`), in f64 so that reading adds no rounding of its own to what the file holds.
pub(crate) fn to_standard(
    skeleton: &Skeleton,
    locals: &[[f64; 9]],
    frames: usize,
) -> Result<Vec<f32>> {
    let rest = SomaBvhRest::load()?;
    let nj = skeleton.num_joints();
    let mut out = Vec::with_capacity(frames * nj * 9);
    let mut global = vec![[0.0f64; 9]; nj];
    let mut new = vec![[0.0f64; 9]; nj];
    for t in 0..frames {
        for j in 0..nj {
            let l = &locals[t * nj + j];
            global[j] = match skeleton.parents[j] {
                None => *l,
                Some(p) => mul64(&global[p], l),
            };
            let o = rest.tpose_offsets[j].map(f64::from);
            let ot = [o[0], o[3], o[6], o[1], o[4], o[7], o[2], o[5], o[8]];
            new[j] = mul64(&global[j], &ot);
            let local = match skeleton.parents[j] {
                None => new[j],
                Some(p) => {
                    let n = &new[p];
                    let nt = [n[0], n[3], n[6], n[1], n[4], n[7], n[2], n[5], n[8]];
                    mul64(&nt, &new[j])
                }
            };
            out.extend(local.map(|v| v as f32));
        }
    }
    Ok(out)
}

/// Which rest pose a SOMA BVH's offsets (centimetres, by SOMA77 joint) follow: `Some(false)`
/// for upstream's BVH rest, `Some(true)` for the standard T-pose, `None` for neither (more than
/// 1e-3 cm away from both).
pub(crate) fn rest_pose_of(offsets: &[[f64; 3]]) -> Result<Option<bool>> {
    let sk = Skeleton::load(SkeletonKind::Soma77)?;
    let rest = SomaBvhRest::load()?;
    for standard in [false, true] {
        let joints = rest_joints(&sk, &rest, standard);
        let ok = (0..sk.num_joints()).all(|j| match sk.parents[j] {
            None => true,
            Some(p) => (0..3)
                .all(|k| ((joints[j][k] - joints[p][k]) * 100.0 - offsets[j][k]).abs() <= 1e-3),
        });
        if ok {
            return Ok(Some(standard));
        }
    }
    Ok(None)
}
