//! Kimodo's motion representation on the host: normalisation, 6-D rotations and the decode of
//! denoised features into skeleton motion (`kimodo/motion_rep/reps/kimodo_motionrep.py`).
//!
//! Per frame the features are, in this order (kimodo.md §4.1): `smooth_root_pos[3]`,
//! `global_root_heading[2]` (cos, sin), `local_joints_positions[J*3]`, `global_rot_data[J*6]`
//! (6-D of the global rotations), `velocities[J*3]`, `foot_contacts[4]`. Everything is f32, as
//! upstream computes it.

use std::path::Path;

use super::config::{MotionStats, SkeletonKind};
use super::skeleton::{Mat3, Skeleton, Soma77Expansion};
use crate::formats::{NpyArray, NpzWriter};
use crate::{Error, Result};

/// Where each block of a frame's features starts, for `J` joints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureLayout {
    pub num_joints: usize,
}

impl FeatureLayout {
    pub const SMOOTH_ROOT: usize = 0;
    pub const HEADING: usize = 3;
    pub const LOCAL_POSITIONS: usize = 5;
    /// Contact channels: `[left heel, left toe, right heel, right toe]`.
    pub const NUM_CONTACTS: usize = 4;

    pub fn new(num_joints: usize) -> FeatureLayout {
        FeatureLayout { num_joints }
    }
    pub fn rot6d(self) -> usize {
        5 + 3 * self.num_joints
    }
    pub fn velocities(self) -> usize {
        5 + 9 * self.num_joints
    }
    pub fn contacts(self) -> usize {
        5 + 12 * self.num_joints
    }
    /// `9 + 12 J`.
    pub fn dim(self) -> usize {
        9 + 12 * self.num_joints
    }
}

fn check_stats(stats: &MotionStats, dim: usize) -> Result<()> {
    let body = dim.checked_sub(5);
    if body != Some(stats.body_mean.len()) || body != Some(stats.body_std.len()) {
        return Err(Error::Shape(format!(
            "motion stats: body mean/std hold {}/{} values, features of width {dim} need {}",
            stats.body_mean.len(),
            stats.body_std.len(),
            dim.saturating_sub(5)
        )));
    }
    Ok(())
}

fn check_rows(what: &str, len: usize, dim: usize) -> Result<()> {
    if dim == 0 || !len.is_multiple_of(dim) {
        return Err(Error::Shape(format!(
            "{what}: {len} values are not whole frames of width {dim}"
        )));
    }
    Ok(())
}

/// `(x - mean) / sqrt(std^2 + 1e-5)` in place, frame by frame: global stats on `[0, 5)`, body
/// stats on `[5, dim)` (`kimodo/motion_rep/stats.py#L65-70`, `reps/base.py#L232-240`).
pub fn normalize(stats: &MotionStats, features: &mut [f32]) -> Result<()> {
    let (mean, std) = stats.feature_mean_std();
    check_stats(stats, mean.len())?;
    check_rows("normalize", features.len(), mean.len())?;
    let scale: Vec<f32> = std.iter().map(|&s| MotionStats::scale(s)).collect();
    for row in features.chunks_exact_mut(mean.len()) {
        for ((x, m), s) in row.iter_mut().zip(&mean).zip(&scale) {
            *x = (*x - m) / s;
        }
    }
    Ok(())
}

/// `y * sqrt(std^2 + 1e-5) + mean` in place (`kimodo/motion_rep/stats.py#L72-77`), the inverse
/// of [`normalize`].
pub fn unnormalize(stats: &MotionStats, features: &mut [f32]) -> Result<()> {
    let (mean, std) = stats.feature_mean_std();
    check_stats(stats, mean.len())?;
    check_rows("unnormalize", features.len(), mean.len())?;
    let scale: Vec<f32> = std.iter().map(|&s| MotionStats::scale(s)).collect();
    for row in features.chunks_exact_mut(mean.len()) {
        for ((y, m), s) in row.iter_mut().zip(&mean).zip(&scale) {
            // Two roundings, as torch's separate multiply and add (no fused multiply-add).
            *y = *y * s + m;
        }
    }
    Ok(())
}

/// The 6-D form of a rotation: its first two columns, `[m00, m10, m20, m01, m11, m21]`
/// (`kimodo/geometry.py#L21-27`).
pub fn matrix_to_rot6d(m: &Mat3) -> [f32; 6] {
    [m[0], m[3], m[6], m[1], m[4], m[7]]
}

fn cross(a: [f32; 3], b: [f32; 3]) -> [f32; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn normalized(v: [f32; 3]) -> [f32; 3] {
    let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    [v[0] / n, v[1] / n, v[2] / n]
}

/// A rotation from its 6-D form by Gram-Schmidt through cross products, with no epsilon
/// (`kimodo/geometry.py#L30-50`): `x = a/|a|`, `z = (x × b)/|x × b|`, `y = z × x`, the
/// matrix's columns are `[x y z]`. A zero or degenerate input gives NaN, as upstream.
pub fn rot6d_to_matrix(d: &[f32; 6]) -> Mat3 {
    let x = normalized([d[0], d[1], d[2]]);
    let z = normalized(cross(x, [d[3], d[4], d[5]]));
    let y = cross(z, x);
    [x[0], y[0], z[0], x[1], y[1], z[1], x[2], y[2], z[2]]
}

/// Decoded motion, upstream's output dict with the batch dimension dropped. `J` is the
/// skeleton's joint count.
#[derive(Clone, Debug, PartialEq)]
pub struct Motion {
    pub skeleton: SkeletonKind,
    pub frames: usize,
    /// `[T, J, 3, 3]`
    pub local_rot_mats: Vec<f32>,
    /// `[T, J, 3, 3]`
    pub global_rot_mats: Vec<f32>,
    /// `[T, J, 3]` metres, Y up.
    pub posed_joints: Vec<f32>,
    /// `[T, 3]`
    pub root_positions: Vec<f32>,
    /// `[T, 3]`
    pub smooth_root_pos: Vec<f32>,
    /// `[T, 4]`: `[left heel, left toe, right heel, right toe]`.
    pub foot_contacts: Vec<bool>,
    /// `[T, 2]`: the raw predicted (cos, sin), not renormalised.
    pub global_root_heading: Vec<f32>,
}

impl Motion {
    pub fn num_joints(&self) -> usize {
        self.skeleton.num_joints()
    }

    /// `(frames, joints)` of a motion an exporter of `kind` motion takes. Refuses another
    /// skeleton (`"{refusal}, not <skeleton>"`) and arrays that do not hold the motion's
    /// frames, at least one (an error prefixed with `tag`).
    pub(crate) fn export_shape(
        &self,
        kind: SkeletonKind,
        refusal: &str,
        tag: &str,
    ) -> Result<(usize, usize)> {
        if self.skeleton != kind {
            return Err(Error::InvalidArgument(format!(
                "{refusal}, not {}",
                self.skeleton.name()
            )));
        }
        let (frames, nj) = (self.frames, self.num_joints());
        if frames == 0
            || self.local_rot_mats.len() != frames * nj * 9
            || self.root_positions.len() != frames * 3
        {
            return Err(Error::Shape(format!(
                "{tag}: the motion's arrays do not hold {frames} (> 0) frames of {nj} joints"
            )));
        }
        Ok((frames, nj))
    }

    /// The SOMA77 form of a SOMA30 motion, as upstream returns it from every SOMA model
    /// (`SOMASkeleton30.output_to_SOMASkeleton77`, `kimodo/skeleton/definitions.py#L264-277`,
    /// called at `kimodo/model/kimodo_model.py#L524-526`): relaxed-hand local rotations for the
    /// 47 joints SOMA30 lacks, FK with the SOMA77 rest joints at the same root positions. The
    /// roots, smooth roots, heading and contacts are unchanged.
    pub fn to_soma77(&self) -> Result<Motion> {
        if self.skeleton != SkeletonKind::Soma30 {
            return Err(Error::InvalidArgument(format!(
                "only SOMA30 motion expands to SOMA77, not {}",
                self.skeleton.name()
            )));
        }
        let local_rot_mats =
            Soma77Expansion::load()?.expand_locals(&self.local_rot_mats, self.frames)?;
        let soma77 = Skeleton::load(SkeletonKind::Soma77)?;
        let (global_rot_mats, posed_joints) =
            soma77.fk(&local_rot_mats, &self.root_positions, self.frames)?;
        Ok(Motion {
            skeleton: SkeletonKind::Soma77,
            local_rot_mats,
            global_rot_mats,
            posed_joints,
            ..self.clone()
        })
    }

    /// The arrays under upstream's key names and shapes (`kimodo/scripts/generate.py#L329-335`
    /// with the batch dimension dropped): float32, and bool contacts. Callers may add more
    /// members (for example the features) before writing.
    pub fn npz(&self) -> Result<NpzWriter> {
        let (t, j) = (self.frames, self.num_joints());
        let mut w = NpzWriter::new();
        w.add(
            "local_rot_mats",
            &NpyArray::from_f32(&[t, j, 3, 3], &self.local_rot_mats)?,
        )?;
        w.add(
            "global_rot_mats",
            &NpyArray::from_f32(&[t, j, 3, 3], &self.global_rot_mats)?,
        )?;
        w.add(
            "posed_joints",
            &NpyArray::from_f32(&[t, j, 3], &self.posed_joints)?,
        )?;
        w.add(
            "root_positions",
            &NpyArray::from_f32(&[t, 3], &self.root_positions)?,
        )?;
        w.add(
            "smooth_root_pos",
            &NpyArray::from_f32(&[t, 3], &self.smooth_root_pos)?,
        )?;
        w.add(
            "foot_contacts",
            &NpyArray::from_bool(&[t, 4], &self.foot_contacts)?,
        )?;
        w.add(
            "global_root_heading",
            &NpyArray::from_f32(&[t, 2], &self.global_root_heading)?,
        )?;
        Ok(w)
    }

    /// Write [`Motion::npz`] to `path` atomically (never a partial file).
    pub fn write_npz(&self, path: impl AsRef<Path>) -> Result<()> {
        self.npz()?.write(path)
    }
}

/// Decode normalised features `[T, 9 + 12 J]` (batch dropped) into motion on the model's
/// skeleton: [`unnormalize`], then [`inverse`]. Refuses an empty clip, a width that does not
/// match the skeleton or the stats, and non-finite features.
pub fn decode(
    features_normalized: &[f32],
    frames: usize,
    skeleton: &Skeleton,
    stats: &MotionStats,
) -> Result<Motion> {
    let dim = check_features("normalized features", features_normalized, frames, skeleton)?;
    check_stats(stats, dim)?;
    let mut x = features_normalized.to_vec();
    unnormalize(stats, &mut x)?;
    inverse(&x, frames, skeleton)
}

/// [`decode`], then for SOMA30 the SOMA77 expansion ([`Motion::to_soma77`]): the motion
/// upstream's `KimodoModel` returns to its callers.
pub fn decode_output(
    features_normalized: &[f32],
    frames: usize,
    skeleton: &Skeleton,
    stats: &MotionStats,
) -> Result<Motion> {
    let m = decode(features_normalized, frames, skeleton, stats)?;
    if m.skeleton == SkeletonKind::Soma30 {
        m.to_soma77()
    } else {
        Ok(m)
    }
}

/// [`inverse`] of unnormalised features, then for SOMA30 the SOMA77 expansion: how upstream's
/// multi-prompt path decodes its stitched motion (`motion_rep.inverse(...,
/// is_normalized=False)`, `kimodo/model/kimodo_model.py#L316-320`, then #L335-336).
pub fn decode_raw_output(features: &[f32], frames: usize, skeleton: &Skeleton) -> Result<Motion> {
    let m = inverse(features, frames, skeleton)?;
    if m.skeleton == SkeletonKind::Soma30 {
        m.to_soma77()
    } else {
        Ok(m)
    }
}

fn check_features(what: &str, x: &[f32], frames: usize, skeleton: &Skeleton) -> Result<usize> {
    let dim = skeleton.kind.motion_dim();
    if frames == 0 {
        return Err(Error::InvalidArgument(format!(
            "{what}: a motion needs at least one frame"
        )));
    }
    if Some(x.len()) != frames.checked_mul(dim) {
        return Err(Error::Shape(format!(
            "{what}: {} values, but {frames} frames of the {} feature width {dim} need {}",
            x.len(),
            skeleton.kind.name(),
            frames.saturating_mul(dim)
        )));
    }
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "{what}: non-finite value {} at frame {}, feature {}",
            x[i],
            i / dim,
            i % dim
        )));
    }
    Ok(dim)
}

/// The motion representation's inverse on unnormalised features `[T, 9 + 12 J]`
/// (`kimodo/motion_rep/reps/kimodo_motionrep.py#L161-215`, `posed_joints_from="rotations"`):
/// global rotations from the 6-D block, local rotations `parent^T global`,
/// `root_positions = local_joints_positions[root] + (smooth_x, 0, smooth_z)`, posed joints by
/// FK (the position and velocity blocks are not used), contacts `> 0.5`, and the smooth root
/// and raw heading passed through.
pub fn inverse(features: &[f32], frames: usize, skeleton: &Skeleton) -> Result<Motion> {
    let dim = check_features("features", features, frames, skeleton)?;
    let nj = skeleton.num_joints();
    let layout = FeatureLayout::new(nj);
    let mut global_rot_mats = Vec::with_capacity(frames * nj * 9);
    let mut root_positions = Vec::with_capacity(frames * 3);
    let mut smooth_root_pos = Vec::with_capacity(frames * 3);
    let mut global_root_heading = Vec::with_capacity(frames * 2);
    let mut foot_contacts = Vec::with_capacity(frames * 4);
    for (t, f) in features.chunks_exact(dim).enumerate() {
        for j in 0..nj {
            let d: &[f32; 6] = f[layout.rot6d() + 6 * j..][..6]
                .try_into()
                .expect("6 values");
            let m = rot6d_to_matrix(d);
            if m.iter().any(|v| !v.is_finite()) {
                return Err(Error::InvalidArgument(format!(
                    "features: the 6-D rotation of joint {j} at frame {t} is degenerate ({d:?})"
                )));
            }
            global_rot_mats.extend_from_slice(&m);
        }
        let smooth = &f[FeatureLayout::SMOOTH_ROOT..FeatureLayout::SMOOTH_ROOT + 3];
        let root = &f[FeatureLayout::LOCAL_POSITIONS + 3 * skeleton.root..][..3];
        root_positions.extend_from_slice(&[root[0] + smooth[0], root[1], root[2] + smooth[2]]);
        smooth_root_pos.extend_from_slice(smooth);
        global_root_heading
            .extend_from_slice(&f[FeatureLayout::HEADING..FeatureLayout::HEADING + 2]);
        foot_contacts.extend(f[layout.contacts()..][..4].iter().map(|&c| c > 0.5));
    }
    let local_rot_mats = skeleton.local_from_global(&global_rot_mats, frames)?;
    let (_, posed_joints) = skeleton.fk(&local_rot_mats, &root_positions, frames)?;
    Ok(Motion {
        skeleton: skeleton.kind,
        frames,
        local_rot_mats,
        global_rot_mats,
        posed_joints,
        root_positions,
        smooth_root_pos,
        foot_contacts,
        global_root_heading,
    })
}

/// The heading of each frame from the hips (`kimodo/motion_rep/feature_utils.py#L111-126`):
/// `atan2(d_z, -d_x)` with `d = p[right hip] - p[left hip]`. `posed_joints` is `[T, J, 3]`.
/// Part of the forward representation; upstream computes it in f32.
pub fn heading_from_joints(skeleton: &Skeleton, posed_joints: &[f32]) -> Result<Vec<f32>> {
    let nj = skeleton.num_joints();
    check_rows("posed_joints", posed_joints.len(), nj * 3)?;
    let [r, l] = skeleton.hips;
    Ok(posed_joints
        .chunks_exact(nj * 3)
        .map(|p| {
            let dx = p[r * 3] - p[l * 3];
            let dz = p[r * 3 + 2] - p[l * 3 + 2];
            dz.atan2(-dx)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::kimodo::skeleton::{mat_mul, mat_t_mul};

    fn rot_y(a: f32) -> Mat3 {
        let (s, c) = a.sin_cos();
        [c, 0.0, s, 0.0, 1.0, 0.0, -s, 0.0, c]
    }
    fn rot_x(a: f32) -> Mat3 {
        let (s, c) = a.sin_cos();
        [1.0, 0.0, 0.0, 0.0, c, -s, 0.0, s, c]
    }

    fn stats(dim: usize) -> MotionStats {
        let body = dim - 5;
        MotionStats {
            global_mean: [0.1, 0.9, -0.2, 0.0, 0.01],
            global_std: [1.4, 0.17, 1.5, 0.7, 0.0],
            local_mean: [0.0; 4],
            local_std: [1.0; 4],
            body_mean: (0..body).map(|i| (i as f32 * 0.37).sin() * 0.5).collect(),
            body_std: (0..body)
                .map(|i| 0.05 + (i as f32 * 0.11).cos().abs())
                .collect(),
        }
    }

    #[test]
    fn rot6d_roundtrip_and_orthonormal() {
        let r = mat_mul(&rot_y(0.7), &rot_x(-1.3));
        let back = rot6d_to_matrix(&matrix_to_rot6d(&r));
        for (a, b) in r.iter().zip(&back) {
            assert!((a - b).abs() < 1e-6, "{r:?} vs {back:?}");
        }
        // A scaled, skewed 6-D input still gives a proper rotation with x along a.
        let m = rot6d_to_matrix(&[2.0, 0.0, 0.0, 0.5, 3.0, 0.0]);
        let g = mat_t_mul(&m, &m);
        for (i, v) in g.iter().enumerate() {
            let want = if i % 4 == 0 { 1.0 } else { 0.0 };
            assert!((v - want).abs() < 1e-6);
        }
        assert_eq!(m, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
        assert!(rot6d_to_matrix(&[0.0; 6]).iter().all(|v| v.is_nan()));
    }

    #[test]
    fn normalize_inverts_unnormalize() {
        let dim = SkeletonKind::Smplx22.motion_dim();
        let s = stats(dim);
        let orig: Vec<f32> = (0..3 * dim).map(|i| (i as f32 * 0.013).sin()).collect();
        let mut x = orig.clone();
        unnormalize(&s, &mut x).unwrap();
        assert_ne!(x, orig);
        // Upstream's eps form: the zero std of heading sin scales by sqrt(1e-5).
        let want4 = orig[4] * 1e-5f32.sqrt() + 0.01;
        assert_eq!(x[4], want4);
        normalize(&s, &mut x).unwrap();
        for (a, b) in x.iter().zip(&orig) {
            assert!((a - b).abs() < 2e-5, "{a} vs {b}");
        }
        let mut bad = vec![0.0; dim + 1];
        assert!(normalize(&s, &mut bad).is_err());
    }

    /// Build features from a known motion (the forward rep's rotation, root and contact
    /// blocks), decode them and get the motion back.
    #[test]
    fn inverse_recovers_rotations_root_and_contacts() {
        let sk = Skeleton::load(SkeletonKind::Smplx22).unwrap();
        let nj = sk.num_joints();
        let layout = FeatureLayout::new(nj);
        let frames = 3;
        let global: Vec<f32> = (0..frames * nj)
            .flat_map(|i| mat_mul(&rot_y(0.1 * i as f32), &rot_x(0.05 * i as f32 - 0.4)))
            .collect();
        let mut feats = vec![0.0f32; frames * layout.dim()];
        for t in 0..frames {
            let f = &mut feats[t * layout.dim()..(t + 1) * layout.dim()];
            f[..5].copy_from_slice(&[0.3 * t as f32, 0.8, -0.1, 0.6, 0.8]);
            f[5 + 3 * sk.root..][..3].copy_from_slice(&[0.01, 0.9, -0.02]);
            for j in 0..nj {
                let m: &Mat3 = global[(t * nj + j) * 9..][..9].try_into().unwrap();
                f[layout.rot6d() + 6 * j..][..6].copy_from_slice(&matrix_to_rot6d(m));
            }
            f[layout.contacts()..].copy_from_slice(&[0.9, 0.2, 0.5, 0.51]);
        }
        let m = inverse(&feats, frames, &sk).unwrap();
        for (a, b) in m.global_rot_mats.iter().zip(&global) {
            assert!((a - b).abs() < 1e-6);
        }
        assert_eq!(&m.root_positions[3..6], &[0.01 + 0.3, 0.9, -0.02 - 0.1]);
        assert_eq!(&m.foot_contacts[..4], &[true, false, false, true]);
        assert_eq!(&m.global_root_heading[..2], &[0.6, 0.8]);
        // FK of the decoded locals reproduces the decoded globals.
        let (g, _) = sk.fk(&m.local_rot_mats, &m.root_positions, frames).unwrap();
        for (a, b) in g.iter().zip(&m.global_rot_mats) {
            assert!((a - b).abs() < 1e-5);
        }
        // The root joint sits at the root position.
        assert_eq!(&m.posed_joints[..3], &m.root_positions[..3]);
    }

    #[test]
    fn decode_refuses_bad_input() {
        let sk = Skeleton::load(SkeletonKind::G1).unwrap();
        let dim = sk.kind.motion_dim();
        let s = stats(dim);
        let x = vec![0.1f32; 2 * dim];
        let msg = |r: Result<Motion>| r.unwrap_err().to_string();
        assert!(msg(decode(&x, 0, &sk, &s)).contains("at least one frame"));
        assert!(msg(decode(&x[1..], 2, &sk, &s)).contains("feature width 417"));
        let mut nan = x.clone();
        nan[dim + 7] = f32::NAN;
        assert!(msg(decode(&nan, 2, &sk, &s)).contains("frame 1, feature 7"));
        let narrow = stats(dim - 12);
        assert!(msg(decode(&x, 2, &sk, &narrow)).contains("motion stats"));
        let zero = vec![0.0f32; dim];
        assert!(msg(inverse(&zero, 1, &sk)).contains("degenerate"));
        let m = decode(&x, 2, &sk, &s).unwrap();
        assert!(m.to_soma77().is_err());
    }

    #[test]
    fn heading_follows_the_hips() {
        let sk = Skeleton::load(SkeletonKind::Soma30).unwrap();
        let nj = sk.num_joints();
        let mut p = vec![0.0f32; nj * 3];
        let [r, l] = sk.hips;
        // Right hip at -x, left at +x: facing +z, heading 0.
        p[r * 3] = -0.1;
        p[l * 3] = 0.1;
        assert_eq!(heading_from_joints(&sk, &p).unwrap(), [0.0]);
        // Right hip behind the left (d = (0, 0, -0.1)): atan2(-0.1, -0) = -pi/2.
        p[r * 3] = 0.0;
        p[l * 3] = 0.0;
        p[r * 3 + 2] = -0.1;
        let h = heading_from_joints(&sk, &p).unwrap()[0];
        assert!((h + std::f32::consts::FRAC_PI_2).abs() < 1e-6);
    }
}
