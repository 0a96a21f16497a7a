//! Skinned GLB for SOMA: the body mesh of upstream's `somaskel77/skin_standard.npz` bound to the
//! 77-joint skeleton of [`crate::models::kimodo::glb`], animated by the same rotation and root
//! translation tracks. No morph targets.
//!
//! Upstream skins with `v' = sum_k w_k [G_j | p_j] B_j^-1 v` (`kimodo/viz/soma_skin.py#L57-80`,
//! `B` = `bind_rig_transform`). A glTF joint's world matrix is exactly `[G_j | p_j]` (the node
//! hierarchy reproduces Kimodo's FK), so the inverse bind matrices are `B_j^-1` (inverted in
//! f64) and the vertices are `bind_vertices`.
//!
//! glTF's `JOINTS_0`/`WEIGHTS_0` hold 4 influences per vertex, and three.js reads no second
//! set; the skin has up to 8 (966 of the 18056 vertices have more than 4). Each vertex keeps its
//! 4 largest weights (the lower slot first on ties, after merging repeated joints), divided by
//! their sum; [`SkinReduction`] reports how much weight was dropped.

use std::path::Path;

use crate::formats::{NpyArray, NpzReader};
use crate::models::kimodo::config::SkeletonKind;
use crate::models::kimodo::glb::{SkinnedMesh, glb_bytes_with_mesh};
use crate::models::kimodo::motion::Motion;
use crate::models::kimodo::skeleton::Skeleton;
use crate::{Error, Result};

/// Largest skin file read (the shipped one is about 3 MB).
const MAX_SKIN_BYTES: u64 = 256 << 20;

/// What reducing the skin to 4 influences per vertex changed.
#[derive(Clone, Debug, PartialEq)]
pub struct SkinReduction {
    pub vertices: usize,
    /// Vertices that had more than 4 non-zero influences.
    pub reduced_vertices: usize,
    /// The largest total weight dropped from one vertex (before renormalising).
    pub max_dropped_weight: f32,
}

fn skin_err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("skin {}: {msg}", path.display()))
}

fn member(npz: &NpzReader, path: &Path, name: &str, shape_tail: &[usize]) -> Result<NpyArray> {
    let a = npz
        .array(name)
        .map_err(|e| skin_err(path, format!("member '{name}': {e}")))?;
    if a.shape.len() != shape_tail.len() + 1 || a.shape[1..] != *shape_tail {
        return Err(skin_err(
            path,
            format!("'{name}' has shape {:?}, want [N, {shape_tail:?}]", a.shape),
        ));
    }
    Ok(a)
}

/// 4x4 inverse (row-major f64) by Gauss-Jordan with partial pivoting; `None` if singular.
fn inverse4(m: &[f64; 16]) -> Option<[f64; 16]> {
    let mut a = *m;
    let mut inv = [0.0; 16];
    for i in 0..4 {
        inv[i * 5] = 1.0;
    }
    for c in 0..4 {
        let p = (c..4).max_by(|&x, &y| a[x * 4 + c].abs().total_cmp(&a[y * 4 + c].abs()))?;
        if a[p * 4 + c].abs() < 1e-12 {
            return None;
        }
        for k in 0..4 {
            a.swap(c * 4 + k, p * 4 + k);
            inv.swap(c * 4 + k, p * 4 + k);
        }
        let d = a[c * 4 + c];
        for k in 0..4 {
            a[c * 4 + k] /= d;
            inv[c * 4 + k] /= d;
        }
        for r in 0..4 {
            if r != c {
                let f = a[r * 4 + c];
                for k in 0..4 {
                    a[r * 4 + k] -= f * a[c * 4 + k];
                    inv[r * 4 + k] -= f * inv[c * 4 + k];
                }
            }
        }
    }
    Some(inv)
}

/// The 4 largest influences of one vertex, normalised: `(joints, weights, dropped, had_more)`.
fn top4(joints: &[i32], weights: &[f32]) -> ([u8; 4], [f32; 4], f32, bool) {
    let mut merged: Vec<(i32, f64)> = Vec::new();
    for (&j, &w) in joints.iter().zip(weights) {
        if w > 0.0 {
            match merged.iter_mut().find(|(k, _)| *k == j) {
                Some(e) => e.1 += f64::from(w),
                None => merged.push((j, f64::from(w))),
            }
        }
    }
    // Stable: equal weights keep their slot order.
    merged.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = merged.iter().map(|e| e.1).sum();
    let kept = &merged[..merged.len().min(4)];
    let sum: f64 = kept.iter().map(|e| e.1).sum();
    let mut js = [0u8; 4];
    let mut ws = [0.0f32; 4];
    for (i, (j, w)) in kept.iter().enumerate() {
        js[i] = *j as u8;
        ws[i] = (w / sum) as f32;
    }
    // The last kept weight absorbs the f32 rounding: the sum of the others is at least 1/2
    // (they include the largest), so `1 - sum` is exact (Sterbenz) and the row sums, in slot
    // order, to exactly 1 in f32.
    if let Some(last) = kept.len().checked_sub(1)
        && last > 0
    {
        let head: f32 = ws[..last].iter().sum();
        ws[last] = 1.0 - head;
    } else if kept.len() == 1 {
        ws[0] = 1.0;
    }
    (js, ws, (total - sum) as f32, merged.len() > 4)
}

/// Reads `skin_standard.npz` into a mesh bound to SOMA77 (see the module documentation).
pub fn load_skin(path: &Path) -> Result<(SkinnedMesh, SkinReduction)> {
    let npz = NpzReader::open_with_limit(path, MAX_SKIN_BYTES)?;
    let sk = Skeleton::load(SkeletonKind::Soma77)?;
    let nj = sk.num_joints();
    let names = member(&npz, path, "rig_joint_names", &[])?.to_strings()?;
    if names != sk.names {
        return Err(skin_err(
            path,
            "rig_joint_names are not the SOMA77 joints in order",
        ));
    }
    let verts = member(&npz, path, "bind_vertices", &[3])?.to_f64()?;
    let v = verts.len() / 3;
    let faces = member(&npz, path, "faces", &[3])?.to_i64()?;
    let bind = member(&npz, path, "bind_rig_transform", &[4, 4])?.to_f64()?;
    let lbs_i = npz
        .array("lbs_indices")
        .map_err(|e| skin_err(path, format!("member 'lbs_indices': {e}")))?;
    let lbs_w = npz
        .array("lbs_weights")
        .map_err(|e| skin_err(path, format!("member 'lbs_weights': {e}")))?;
    if bind.len() != nj * 16 {
        return Err(skin_err(
            path,
            format!("bind_rig_transform is not [{nj}, 4, 4]"),
        ));
    }
    if lbs_i.shape.len() != 2 || lbs_i.shape[0] != v || lbs_w.shape != lbs_i.shape {
        return Err(skin_err(
            path,
            format!(
                "lbs_indices {:?} and lbs_weights {:?} must both be [{v}, W]",
                lbs_i.shape, lbs_w.shape
            ),
        ));
    }
    let width = lbs_i.shape[1];
    let lbs_i: Vec<i32> = lbs_i
        .to_i64()?
        .into_iter()
        .map(|x| i32::try_from(x).unwrap_or(-1))
        .collect();
    let lbs_w = lbs_w.to_f32()?;
    if let Some(x) = lbs_i.iter().find(|&&x| x < 0 || x as usize >= nj) {
        return Err(skin_err(path, format!("joint index {x} is not below {nj}")));
    }
    if lbs_w.iter().any(|w| !w.is_finite() || *w < 0.0) {
        return Err(skin_err(path, "a weight is negative or not finite"));
    }
    if verts.iter().any(|x| !x.is_finite()) || bind.iter().any(|x| !x.is_finite()) {
        return Err(skin_err(path, "non-finite vertices or bind transforms"));
    }
    let indices: Vec<u32> = faces
        .iter()
        .map(|&i| u32::try_from(i).ok().filter(|&i| (i as usize) < v))
        .collect::<Option<_>>()
        .ok_or_else(|| skin_err(path, format!("a face index is not below {v}")))?;

    let mut inverse_bind = Vec::with_capacity(nj * 16);
    for j in 0..nj {
        let m: &[f64; 16] = bind[j * 16..][..16].try_into().expect("16 values");
        let inv = inverse4(m)
            .ok_or_else(|| skin_err(path, format!("joint {j}'s bind transform is singular")))?;
        // glTF matrices are column-major; the file's are row-major.
        for c in 0..4 {
            for r in 0..4 {
                inverse_bind.push(inv[r * 4 + c] as f32);
            }
        }
    }
    // glTF wants the last row exactly (0, 0, 0, 1).
    for j in 0..nj {
        inverse_bind[j * 16 + 3] = 0.0;
        inverse_bind[j * 16 + 7] = 0.0;
        inverse_bind[j * 16 + 11] = 0.0;
        inverse_bind[j * 16 + 15] = 1.0;
    }

    let mut joints = Vec::with_capacity(v * 4);
    let mut weights = Vec::with_capacity(v * 4);
    let mut red = SkinReduction {
        vertices: v,
        reduced_vertices: 0,
        max_dropped_weight: 0.0,
    };
    for i in 0..v {
        let (js, ws, dropped, more) =
            top4(&lbs_i[i * width..][..width], &lbs_w[i * width..][..width]);
        if ws.iter().all(|&w| w == 0.0) {
            return Err(skin_err(path, format!("vertex {i} has no weight")));
        }
        joints.extend(js);
        weights.extend(ws);
        red.reduced_vertices += usize::from(more);
        red.max_dropped_weight = red.max_dropped_weight.max(dropped);
    }

    // Area-weighted vertex normals of the bind pose.
    let mut n = vec![[0.0f64; 3]; v];
    for f in indices.chunks_exact(3) {
        let p = |k: usize| -> [f64; 3] { std::array::from_fn(|c| verts[f[k] as usize * 3 + c]) };
        let (a, b, c) = (p(0), p(1), p(2));
        let e1 = [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
        let e2 = [c[0] - a[0], c[1] - a[1], c[2] - a[2]];
        let cr = [
            e1[1] * e2[2] - e1[2] * e2[1],
            e1[2] * e2[0] - e1[0] * e2[2],
            e1[0] * e2[1] - e1[1] * e2[0],
        ];
        for &k in f {
            for c in 0..3 {
                n[k as usize][c] += cr[c];
            }
        }
    }
    let normals: Vec<f32> = n
        .iter()
        .flat_map(|x| {
            let l = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
            if l > 1e-20 {
                x.map(|c| (c / l) as f32)
            } else {
                [0.0, 1.0, 0.0]
            }
        })
        .collect();

    Ok((
        SkinnedMesh {
            positions: verts.iter().map(|&x| x as f32).collect(),
            normals,
            indices,
            joints,
            weights,
            inverse_bind,
        },
        red,
    ))
}

/// The skinned `.glb` bytes of a SOMA motion (SOMA30 is expanded to SOMA77 first).
pub fn skinned_glb_bytes(motion: &Motion, fps: f32, mesh: &SkinnedMesh) -> Result<Vec<u8>> {
    let m = super::bvh::soma77_of(motion).map_err(|_| {
        Error::InvalidArgument(format!(
            "the skinned GLB is for SOMA motion, not {}",
            motion.skeleton.name()
        ))
    })?;
    let sk = Skeleton::load(SkeletonKind::Soma77)?;
    glb_bytes_with_mesh(&sk, &m, fps, Some(mesh))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top4_keeps_the_largest_and_normalises() {
        let (j, w, dropped, more) = top4(
            &[3, 5, 3, 7, 9, 11, 0, 0],
            &[0.1, 0.3, 0.1, 0.25, 0.15, 0.1, 0.0, 0.0],
        );
        // Joint 3 merges to 0.2; kept 5 (0.3), 7 (0.25), 3 (0.2), 9 (0.15); 11 dropped.
        assert_eq!(j, [5, 7, 3, 9]);
        assert!((dropped - 0.1).abs() < 1e-6 && more);
        assert_eq!(w.iter().sum::<f32>(), 1.0);
        assert!((w[0] - 0.3 / 0.9).abs() < 1e-6);
        let (j, w, dropped, more) = top4(&[2, 4], &[1.0, 0.0]);
        assert_eq!(
            (j, w, dropped, more),
            ([2, 0, 0, 0], [1.0, 0.0, 0.0, 0.0], 0.0, false)
        );
    }

    #[test]
    fn inverse4_inverts() {
        let m = [
            0.0, -1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 1.0, 3.0, 0.0, 0.0, 0.0, 1.0,
        ];
        let inv = inverse4(&m).unwrap();
        for r in 0..4 {
            for c in 0..4 {
                let v: f64 = (0..4).map(|k| m[r * 4 + k] * inv[k * 4 + c]).sum();
                assert!((v - f64::from(u8::from(r == c))).abs() < 1e-12);
            }
        }
        assert!(inverse4(&[0.0; 16]).is_none());
    }
}
