//! AMASS / SMPL-X npz for SMPL-X motion, as upstream writes it (`kimodo/exports/smplx.py`:
//! `get_amass_parameters` #L13-57 with `z_up=True`, `AMASSConverter` #L60-121).
//!
//! Members, in upstream's order and dtypes: `trans` f32 `[T,3]` (root minus the pelvis rest
//! offset, turned from Y-up to AMASS's Z-up and 180 degrees about Z), `root_orient` f32
//! `[T,3]` (axis-angle), `pose_body` f32 `[T,63]` (the 21 other local rotations, axis-angle),
//! `gender` `'neutral'`, `surface_model_type` `'smplx'`, `betas` f32 `[16]` (the first 16 of
//! `smplx22/beta.npy`), `num_betas` i64, `mocap_frame_rate` f64, `pose_jaw` f64 `[T,3]` and
//! `pose_eye` f64 `[T,6]` zeros, `pose_hand` f64 `[T,90]` (`mean_hands.npy` each frame),
//! `mocap_time_length` f64 (`T / fps`). The constants are embedded from the assets by
//! `reference/capture_kimodo_exports.py`.

use serde::Deserialize;

use super::rot::axis_angle_upstream;
use crate::formats::{NpyArray, NpyDType, NpzWriter};
use crate::models::kimodo::config::SkeletonKind;
use crate::models::kimodo::motion::Motion;
use crate::models::kimodo::skeleton::{Mat3, Skeleton, mat_mul};
use crate::{Error, Result};

const AMASS_JSON: &str = include_str!("../../../../data/kimodo/exports/smplx_amass.json");

#[derive(Deserialize)]
struct AmassFile {
    betas: Vec<f32>,
    mean_hands: Vec<f64>,
}

/// `rot_z_180 @ y_up_to_z_up` (#L36-51), exact in f32.
const Y_UP_TO_Z_UP: Mat3 = [-1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0];

/// The AMASS parameters of one motion: `(trans [T,3], root_orient [T,3], pose_body [T,63])`.
pub fn amass_parameters(motion: &Motion) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let (frames, nj) = motion.export_shape(
        SkeletonKind::Smplx22,
        "the AMASS npz is for SMPL-X motion",
        "amass",
    )?;
    let sk = Skeleton::load(SkeletonKind::Smplx22)?;
    // The SMPL-X rest joints are float32 values (kimodo.md §5).
    let pelvis = sk.neutral_joints[sk.root].map(|v| v as f32);
    let mut trans = Vec::with_capacity(frames * 3);
    let mut root_orient = Vec::with_capacity(frames * 3);
    let mut pose_body = Vec::with_capacity(frames * (nj - 1) * 3);
    for t in 0..frames {
        let r = &motion.root_positions[t * 3..t * 3 + 3];
        // `(trans + pelvis) @ Y^T - pelvis` with `trans = root - pelvis`, in f32 as numpy.
        let a: [f32; 3] = std::array::from_fn(|k| (r[k] - pelvis[k]) + pelvis[k]);
        let b = [-a[0], a[2], a[1]];
        trans.extend((0..3).map(|k| b[k] - pelvis[k]));
        let l = |j: usize| -> &Mat3 {
            motion.local_rot_mats[(t * nj + j) * 9..][..9]
                .try_into()
                .expect("9 values")
        };
        root_orient.extend(axis_angle_upstream(&mat_mul(&Y_UP_TO_Z_UP, l(0))));
        for j in 1..nj {
            pose_body.extend(axis_angle_upstream(l(j)));
        }
    }
    Ok((trans, root_orient, pose_body))
}

fn unicode_scalar(s: &str) -> Result<NpyArray> {
    let data = s.chars().flat_map(|c| (c as u32).to_le_bytes()).collect();
    NpyArray::new(NpyDType::Unicode(s.chars().count()), &[], data)
}

/// The AMASS npz of a SMPL-X motion at `fps`.
pub fn amass_npz(motion: &Motion, fps: f32) -> Result<NpzWriter> {
    if !(fps.is_finite() && fps > 0.0) {
        return Err(Error::InvalidArgument(format!(
            "amass: fps must be positive, not {fps}"
        )));
    }
    let (trans, root_orient, pose_body) = amass_parameters(motion)?;
    let f: AmassFile = serde_json::from_str(AMASS_JSON)
        .map_err(|e| Error::InvalidArgument(format!("embedded AMASS data: {e}")))?;
    if f.betas.len() != 16 || f.mean_hands.len() != 90 {
        return Err(Error::InvalidArgument(
            "embedded AMASS data: want 16 betas and 90 hand values".into(),
        ));
    }
    let t = motion.frames;
    let fps64 = f64::from(fps);
    let mut w = NpzWriter::new();
    w.add("trans", &NpyArray::from_f32(&[t, 3], &trans)?)?;
    w.add("root_orient", &NpyArray::from_f32(&[t, 3], &root_orient)?)?;
    w.add(
        "pose_body",
        &NpyArray::from_f32(&[t, pose_body.len() / t], &pose_body)?,
    )?;
    w.add("gender", &unicode_scalar("neutral")?)?;
    w.add("surface_model_type", &unicode_scalar("smplx")?)?;
    w.add("betas", &NpyArray::from_f32(&[16], &f.betas)?)?;
    w.add("num_betas", &NpyArray::from_i64(&[], &[16])?)?;
    w.add("mocap_frame_rate", &NpyArray::from_f64(&[], &[fps64])?)?;
    w.add("pose_jaw", &NpyArray::from_f64(&[t, 3], &vec![0.0; t * 3])?)?;
    w.add("pose_eye", &NpyArray::from_f64(&[t, 6], &vec![0.0; t * 6])?)?;
    let hands: Vec<f64> = (0..t).flat_map(|_| f.mean_hands.iter().copied()).collect();
    w.add("pose_hand", &NpyArray::from_f64(&[t, 90], &hands)?)?;
    w.add(
        "mocap_time_length",
        &NpyArray::from_f64(&[], &[t as f64 / fps64])?,
    )?;
    Ok(w)
}
