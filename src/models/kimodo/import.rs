//! Motion read back from files: upstream's motion npz (the full output of `generate`, or the
//! shipped demo clips' `posed_joints`/`global_rot_mats`/`foot_contacts`), BVH written in
//! upstream's SOMA layout, and the check that a GLB we wrote animates the motion it came from.
//!
//! What a file does not hold is not invented: [`Imported::present`] says which of the
//! non-kinematic arrays (contacts, smooth root, heading) came from the file; the others are
//! zero in the [`Motion`] and are left out when the motion is written as npz again
//! ([`imported_npz`]).

use std::path::Path;

use super::config::SkeletonKind;
use super::export::bvh::{self, Bvh, WRAPPER};
use super::export::rot::mul64;
use super::motion::Motion;
use super::skeleton::{Mat3, Skeleton};
use crate::formats::{NpyArray, NpzReader, NpzWriter, read_capped};
use crate::models::kit::rotation;
use crate::{Error, Result};

/// Largest difference allowed between a written file, parsed back, and the motion: the text
/// formats carry six decimals of degrees and centimetres, so 1e-5 (radians of rotation angle,
/// metres, qpos values, quaternion-to-matrix entries) covers them with room.
pub const REREAD_TOLERANCE: f32 = 1e-5;

/// Which non-kinematic arrays a file held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Present {
    pub foot_contacts: bool,
    pub smooth_root_pos: bool,
    pub global_root_heading: bool,
}

/// A motion read from a file.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    pub motion: Motion,
    pub present: Present,
    /// Frames per second when the file says (BVH's frame time).
    pub fps: Option<f32>,
    /// For BVH: whether the file used upstream's BVH rest (else the standard T-pose).
    pub bvh_rest: bool,
}

/// Largest motion file read (npz or BVH).
pub const MAX_MOTION_BYTES: u64 = 1 << 30;

fn bad(what: &str, msg: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{what}: {msg}"))
}

fn skeleton_of_joints(what: &str, j: usize) -> Result<SkeletonKind> {
    [
        SkeletonKind::Soma30,
        SkeletonKind::Soma77,
        SkeletonKind::G1,
        SkeletonKind::Smplx22,
    ]
    .into_iter()
    .find(|k| k.num_joints() == j)
    .ok_or_else(|| {
        bad(
            what,
            format!("{j} joints is no Kimodo skeleton (30, 77, 34 or 22)"),
        )
    })
}

/// A member and its shape, a leading batch dimension of 1 dropped (`rank` is the unbatched
/// rank).
fn get(
    npz: &NpzReader,
    what: &str,
    name: &str,
    rank: usize,
) -> Result<Option<(Vec<usize>, NpyArray)>> {
    if !npz.names().contains(&name) {
        return Ok(None);
    }
    let a = npz
        .array(name)
        .map_err(|e| bad(what, format!("'{name}': {e}")))?;
    let mut shape = a.shape.clone();
    if shape.len() == rank + 1 && shape[0] == 1 {
        shape.remove(0);
    }
    Ok(Some((shape, a)))
}

fn f32s(what: &str, name: &str, a: &NpyArray) -> Result<Vec<f32>> {
    let v = a
        .to_f32()
        .map_err(|e| bad(what, format!("'{name}': {e}")))?;
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(bad(what, format!("'{name}' holds {} at index {i}", v[i])));
    }
    Ok(v)
}

/// Reads upstream's motion npz: `local_rot_mats` or `global_rot_mats` `[T, J, 3, 3]`, and
/// `root_positions` `[T, 3]` or `posed_joints` `[T, J, 3]` (the root joint's positions), with
/// `smooth_root_pos`, `foot_contacts`, `global_root_heading` when present. A leading batch
/// dimension of 1 is accepted. Missing global rotations and posed joints come from FK.
pub fn motion_from_npz(npz: &NpzReader, what: &str) -> Result<Imported> {
    let local = get(npz, what, "local_rot_mats", 4)?;
    let global = get(npz, what, "global_rot_mats", 4)?;
    let rots = local.as_ref().or(global.as_ref()).ok_or_else(|| {
        bad(
            what,
            "holds neither local_rot_mats nor global_rot_mats (not a Kimodo motion npz)",
        )
    })?;
    let (frames, nj) = match rots.0.as_slice() {
        [t, j, 3, 3] if *t > 0 => (*t, *j),
        s => {
            return Err(bad(
                what,
                format!("rotations of shape {s:?}, want [T>0, J, 3, 3]"),
            ));
        }
    };
    let kind = skeleton_of_joints(what, nj)?;
    let sk = Skeleton::load(kind)?;
    let shape_is = |name: &str, s: &[usize], want: &[usize]| -> Result<()> {
        if s != want {
            return Err(bad(
                what,
                format!("'{name}' has shape {s:?}, want {want:?}"),
            ));
        }
        Ok(())
    };
    let mut global_rot_mats = None;
    if let Some((s, a)) = &global {
        shape_is("global_rot_mats", s, &[frames, nj, 3, 3])?;
        global_rot_mats = Some(f32s(what, "global_rot_mats", a)?);
    }
    let local_rot_mats = match &local {
        Some((s, a)) => {
            shape_is("local_rot_mats", s, &[frames, nj, 3, 3])?;
            f32s(what, "local_rot_mats", a)?
        }
        None => sk.local_from_global(global_rot_mats.as_ref().expect("checked"), frames)?,
    };
    let mut posed = None;
    if let Some((s, a)) = get(npz, what, "posed_joints", 3)? {
        shape_is("posed_joints", &s, &[frames, nj, 3])?;
        posed = Some(f32s(what, "posed_joints", &a)?);
    }
    let root_positions = match get(npz, what, "root_positions", 2)? {
        Some((s, a)) => {
            shape_is("root_positions", &s, &[frames, 3])?;
            f32s(what, "root_positions", &a)?
        }
        None => {
            let p = posed
                .as_ref()
                .ok_or_else(|| bad(what, "holds neither root_positions nor posed_joints"))?;
            (0..frames)
                .flat_map(|t| p[(t * nj + sk.root) * 3..][..3].to_vec())
                .collect()
        }
    };
    let (fk_global, fk_posed) = sk.fk(&local_rot_mats, &root_positions, frames)?;
    let mut present = Present::default();
    let opt = |name: &str, width: usize, flag: &mut bool| -> Result<Vec<f32>> {
        match get(npz, what, name, 2)? {
            Some((s, a)) => {
                shape_is(name, &s, &[frames, width])?;
                *flag = true;
                f32s(what, name, &a)
            }
            None => Ok(vec![0.0; frames * width]),
        }
    };
    let smooth_root_pos = opt("smooth_root_pos", 3, &mut present.smooth_root_pos)?;
    let global_root_heading = opt("global_root_heading", 2, &mut present.global_root_heading)?;
    let foot_contacts = opt("foot_contacts", 4, &mut present.foot_contacts)?
        .into_iter()
        .map(|c| c > 0.5)
        .collect();
    Ok(Imported {
        motion: Motion {
            skeleton: kind,
            frames,
            local_rot_mats,
            global_rot_mats: global_rot_mats.unwrap_or(fk_global),
            posed_joints: posed.unwrap_or(fk_posed),
            root_positions,
            smooth_root_pos,
            foot_contacts,
            global_root_heading,
        },
        present,
        fps: None,
        bvh_rest: false,
    })
}

/// A motion from a SOMA BVH in upstream's layout (optionally under the `Root` wrapper): the 77
/// SOMA77 joints by name with SOMA77's parents, offsets of upstream's BVH rest (rotations are
/// turned back to the standard T-pose by `to_standard_tpose`) or of the standard T-pose, in
/// centimetres. The Hips position channel is the root position; a non-zero wrapper transform is
/// applied to the root.
pub fn motion_from_bvh(b: &Bvh) -> Result<Imported> {
    let what = "bvh";
    let sk = Skeleton::load(SkeletonKind::Soma77)?;
    let nj = sk.num_joints();
    if b.frames == 0 {
        return Err(bad(what, "no frames"));
    }
    let index = |name: &str| b.joints.iter().position(|j| j.name == name);
    let mut map = Vec::with_capacity(nj);
    for j in 0..nj {
        let name = &sk.names[j];
        let bj = index(name).ok_or_else(|| {
            bad(
                what,
                format!("joint '{name}' of SOMA77 is missing (only SOMA BVH is read)"),
            )
        })?;
        let parent_name = b.joints[bj].parent.map(|p| b.joints[p].name.as_str());
        let want = sk.parents[j].map(|p| sk.names[p].as_str());
        let ok = match want {
            Some(w) => parent_name == Some(w),
            None => parent_name.is_none() || parent_name == Some(WRAPPER),
        };
        if !ok {
            return Err(bad(
                what,
                format!("joint '{name}' has parent {parent_name:?}, SOMA77 says {want:?}"),
            ));
        }
        map.push(bj);
    }
    if b.joints.len() > nj + 1 || (b.joints.len() == nj + 1 && index(WRAPPER).is_none()) {
        return Err(bad(
            what,
            format!(
                "{} joints, SOMA77 has {nj} (+ the '{WRAPPER}' wrapper)",
                b.joints.len()
            ),
        ));
    }
    let offsets: Vec<[f64; 3]> = map.iter().map(|&bj| b.joints[bj].offset).collect();
    let standard = bvh::rest_pose_of(&offsets)?.ok_or_else(|| {
        bad(
            what,
            "the offsets are neither upstream's BVH rest nor the standard T-pose of SOMA77",
        )
    })?;
    let wrapper = b.joints[map[sk.root]].parent;
    let frames = b.frames;
    let mut locals: Vec<[f64; 9]> = Vec::with_capacity(frames * nj);
    let mut root_positions = Vec::with_capacity(frames * 3);
    for t in 0..frames {
        let (wr, wp) = match wrapper {
            Some(w) => (
                b.rotation(t, w),
                b.position(t, w).unwrap_or(b.joints[w].offset),
            ),
            None => ([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], [0.0; 3]),
        };
        for (j, &bj) in map.iter().enumerate() {
            let mut r = b.rotation(t, bj);
            if j == sk.root {
                r = mul64(&wr, &r);
                let p = b.position(t, bj).unwrap_or(b.joints[bj].offset);
                let rp: [f64; 3] = std::array::from_fn(|k| {
                    (0..3).map(|c| wr[k * 3 + c] * p[c]).sum::<f64>() + wp[k]
                });
                root_positions.extend(rp.map(|v| (v / 100.0) as f32));
            }
            locals.push(r);
        }
    }
    if locals.iter().flatten().any(|v| !v.is_finite())
        || root_positions.iter().any(|v| !v.is_finite())
    {
        return Err(bad(what, "non-finite rotations or positions"));
    }
    let local_rot_mats = if standard {
        locals.iter().flat_map(|r| r.map(|v| v as f32)).collect()
    } else {
        bvh::to_standard(&sk, &locals, frames)?
    };
    let (global_rot_mats, posed_joints) = sk.fk(&local_rot_mats, &root_positions, frames)?;
    Ok(Imported {
        motion: Motion {
            skeleton: SkeletonKind::Soma77,
            frames,
            local_rot_mats,
            global_rot_mats,
            posed_joints,
            root_positions,
            smooth_root_pos: vec![0.0; frames * 3],
            foot_contacts: vec![false; frames * 4],
            global_root_heading: vec![0.0; frames * 2],
        },
        present: Present::default(),
        fps: Some((1.0 / b.frame_time) as f32),
        bvh_rest: !standard,
    })
}

/// Reads a motion from `.npz` (upstream's motion npz) or `.bvh` (SOMA), by extension.
pub fn read_motion(path: &Path) -> Result<Imported> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let what = path.display().to_string();
    match ext.as_deref() {
        Some("npz") => motion_from_npz(&NpzReader::open_with_limit(path, MAX_MOTION_BYTES)?, &what),
        Some("bvh") => {
            let bytes = read_capped(path, MAX_MOTION_BYTES, "bvh")?;
            let text = std::str::from_utf8(&bytes).map_err(|e| bad(&what, e))?;
            motion_from_bvh(&bvh::parse(text)?)
        }
        _ => Err(bad(
            &what,
            "motion input must be .npz (upstream's motion npz) or .bvh (SOMA)",
        )),
    }
}

/// The npz of an imported motion: the kinematic arrays always, the others only when the source
/// held them.
pub fn imported_npz(m: &Imported) -> Result<NpzWriter> {
    let x = &m.motion;
    let (t, j) = (x.frames, x.num_joints());
    let mut w = NpzWriter::new();
    w.add(
        "local_rot_mats",
        &NpyArray::from_f32(&[t, j, 3, 3], &x.local_rot_mats)?,
    )?;
    w.add(
        "global_rot_mats",
        &NpyArray::from_f32(&[t, j, 3, 3], &x.global_rot_mats)?,
    )?;
    w.add(
        "posed_joints",
        &NpyArray::from_f32(&[t, j, 3], &x.posed_joints)?,
    )?;
    w.add(
        "root_positions",
        &NpyArray::from_f32(&[t, 3], &x.root_positions)?,
    )?;
    if m.present.smooth_root_pos {
        w.add(
            "smooth_root_pos",
            &NpyArray::from_f32(&[t, 3], &x.smooth_root_pos)?,
        )?;
    }
    if m.present.foot_contacts {
        w.add(
            "foot_contacts",
            &NpyArray::from_bool(&[t, 4], &x.foot_contacts)?,
        )?;
    }
    if m.present.global_root_heading {
        w.add(
            "global_root_heading",
            &NpyArray::from_f32(&[t, 2], &x.global_root_heading)?,
        )?;
    }
    Ok(w)
}

/// The matrix of a unit glTF quaternion (`x y z w`), computed in f64 and cast to f32.
fn quat_to_matrix(q: [f32; 4]) -> Mat3 {
    let [x, y, z, w] = q.map(f64::from);
    let r = rotation::unit_quaternion_to_matrix_f64([w, x, y, z]);
    std::array::from_fn(|i| r[i / 3][i % 3] as f32)
}

/// Checks a GLB written from `motion`: the container, then every joint's rotation track and the
/// root's translation track against the motion (SOMA30 motion is compared on SOMA77 when the
/// GLB is skinned), and, with a mesh, 4 weights per vertex summing to 1.
pub fn check_glb(bytes: &[u8], motion: &Motion, fps: f32) -> Result<()> {
    let e =
        |m: String| Error::InvalidArgument(format!("the glb just written does not read back: {m}"));
    let u32_at = |o: usize| -> Result<u32> {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .ok_or_else(|| e(format!("truncated at byte {o}")))
    };
    if u32_at(0)? != 0x4654_6C67 || u32_at(4)? != 2 || u32_at(8)? as usize != bytes.len() {
        return Err(e("bad header".into()));
    }
    let jlen = u32_at(12)? as usize;
    let json = bytes
        .get(20..20 + jlen)
        .ok_or_else(|| e("truncated JSON".into()))?;
    let doc: serde_json::Value =
        serde_json::from_slice(json).map_err(|x| e(format!("JSON: {x}")))?;
    let bin_at = 20 + jlen + 8;
    let bin = bytes
        .get(bin_at..)
        .ok_or_else(|| e("no BIN chunk".into()))?;
    let floats = |acc: usize| -> Result<Vec<f32>> {
        let a = &doc["accessors"][acc];
        let v = &doc["bufferViews"][a["bufferView"].as_u64().unwrap_or(u64::MAX) as usize];
        let off = v["byteOffset"].as_u64().unwrap_or(0) as usize;
        let len = v["byteLength"].as_u64().unwrap_or(0) as usize;
        let b = bin
            .get(off..off + len)
            .ok_or_else(|| e(format!("accessor {acc} out of range")))?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
            .collect())
    };
    let skinned = doc.get("meshes").is_some();
    let m = if skinned {
        bvh::soma77_of(motion)?
    } else {
        motion.clone()
    };
    let nj = m.num_joints();
    let channels = doc["animations"][0]["channels"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let samplers = &doc["animations"][0]["samplers"];
    if channels.len() != nj + 1 {
        return Err(e(format!("{} channels for {nj} joints", channels.len())));
    }
    let mut worst = 0.0f32;
    for c in &channels {
        let node = c["target"]["node"].as_u64().unwrap_or(u64::MAX) as usize;
        let s = c["sampler"].as_u64().unwrap_or(u64::MAX) as usize;
        let out = floats(samplers[s]["output"].as_u64().unwrap_or(u64::MAX) as usize)?;
        let times = floats(samplers[s]["input"].as_u64().unwrap_or(u64::MAX) as usize)?;
        if times.len() != m.frames || (m.frames > 1 && (times[1] - 1.0 / fps).abs() > 1e-6) {
            return Err(e(format!(
                "{} key times, want {} at {fps} fps",
                times.len(),
                m.frames
            )));
        }
        match c["target"]["path"].as_str() {
            Some("rotation") if node < nj && out.len() == m.frames * 4 => {
                for t in 0..m.frames {
                    let q: [f32; 4] = out[t * 4..t * 4 + 4].try_into().expect("4");
                    let r = quat_to_matrix(q);
                    let want = &m.local_rot_mats[(t * nj + node) * 9..][..9];
                    for (a, b) in r.iter().zip(want) {
                        worst = worst.max((a - b).abs());
                    }
                }
            }
            Some("translation") if out.len() == m.frames * 3 => {
                for (a, b) in out.iter().zip(&m.root_positions) {
                    worst = worst.max((a - b).abs());
                }
            }
            _ => return Err(e(format!("unexpected channel {c}"))),
        }
    }
    if worst.is_nan() || worst > REREAD_TOLERANCE {
        return Err(e(format!("tracks differ from the motion by {worst}")));
    }
    if skinned {
        let w = doc["meshes"][0]["primitives"][0]["attributes"]["WEIGHTS_0"]
            .as_u64()
            .unwrap_or(u64::MAX) as usize;
        let ws = floats(w)?;
        if let Some(row) = ws
            .chunks_exact(4)
            .find(|r| (r.iter().sum::<f32>() - 1.0).abs() > 1e-6)
        {
            return Err(e(format!("weights {row:?} do not sum to 1")));
        }
    }
    Ok(())
}
