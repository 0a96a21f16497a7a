//! Animated glTF 2.0 binary (`.glb`) export of a decoded motion: the skeleton as a node
//! hierarchy, one animation with a rotation channel per joint and a translation channel on
//! the root. No mesh: viewers show the joints (three.js: `SkeletonHelper` over the scene).
//!
//! Each node's translation is its rest offset from its parent, exactly the `rel_j` that FK
//! uses, and its animated rotation is the joint's local rotation, so a viewer's
//! `world_j = world_parent · T(rel_j) · R(L_j)` reproduces `posed_joints` (glTF uses the same
//! column-vector convention, metres and Y up). The root's animated translation is the motion's
//! `root_positions`.

use std::path::Path;

use serde_json::{Value, json};

use super::motion::Motion;
use super::skeleton::{Mat3, Skeleton};
use crate::formats::write_atomic;
use crate::{Error, Result};

const GLB_MAGIC: u32 = 0x4654_6C67; // "glTF"
const GLB_VERSION: u32 = 2;
const CHUNK_JSON: u32 = 0x4E4F_534A; // "JSON"
const CHUNK_BIN: u32 = 0x004E_4942; // "BIN\0"
const FLOAT: u32 = 5126;

/// A unit quaternion `[x, y, z, w]` (glTF order) from a rotation matrix, by Shepperd's method
/// in f64 (the largest of `w, x, y, z` is computed from the diagonal, so no branch divides by
/// a small number).
pub fn quat_from_matrix(m: &Mat3) -> [f64; 4] {
    let m = m.map(f64::from);
    let (m00, m01, m02, m10, m11, m12, m20, m21, m22) =
        (m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8]);
    let tr = m00 + m11 + m22;
    let q = if tr > 0.0 {
        let s = (tr + 1.0).sqrt() * 2.0;
        [(m21 - m12) / s, (m02 - m20) / s, (m10 - m01) / s, 0.25 * s]
    } else if m00 > m11 && m00 > m22 {
        let s = (1.0 + m00 - m11 - m22).sqrt() * 2.0;
        [0.25 * s, (m01 + m10) / s, (m02 + m20) / s, (m21 - m12) / s]
    } else if m11 > m22 {
        let s = (1.0 + m11 - m00 - m22).sqrt() * 2.0;
        [(m01 + m10) / s, 0.25 * s, (m12 + m21) / s, (m02 - m20) / s]
    } else {
        let s = (1.0 + m22 - m00 - m11).sqrt() * 2.0;
        [(m02 + m20) / s, (m12 + m21) / s, 0.25 * s, (m10 - m01) / s]
    };
    let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    q.map(|v| v / n)
}

/// Per-component min and max of `n`-wide f32 elements, as exact JSON numbers.
fn bounds(values: &[f32], n: usize) -> (Value, Value) {
    let mut lo = vec![f32::INFINITY; n];
    let mut hi = vec![f32::NEG_INFINITY; n];
    for e in values.chunks_exact(n) {
        for k in 0..n {
            lo[k] = lo[k].min(e[k]);
            hi[k] = hi[k].max(e[k]);
        }
    }
    // Widened to f64, whose shortest decimal is the exact f32 value: readers that compare
    // the bounds with the data in single or double precision both see equality.
    let to_json = |v: Vec<f32>| Value::from(v.into_iter().map(f64::from).collect::<Vec<_>>());
    (to_json(lo), to_json(hi))
}

/// Accumulates the binary chunk: each accessor gets its own 4-byte aligned buffer view.
struct Bin {
    bytes: Vec<u8>,
    views: Vec<Value>,
    accessors: Vec<Value>,
}

impl Bin {
    fn push(&mut self, values: &[f32], kind: &str, width: usize, with_bounds: bool) -> usize {
        let bounds = with_bounds.then(|| bounds(values, width));
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.push_bytes(&bytes, FLOAT, values.len() / width, kind, bounds, None)
    }

    /// One accessor over `bytes` in its own buffer view (`target` for vertex and index data);
    /// the chunk is padded back to 4-byte alignment after it.
    fn push_bytes(
        &mut self,
        bytes: &[u8],
        component: u32,
        count: usize,
        kind: &str,
        bounds: Option<(Value, Value)>,
        target: Option<u32>,
    ) -> usize {
        let offset = self.bytes.len();
        debug_assert_eq!(offset % 4, 0);
        self.bytes.extend_from_slice(bytes);
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
        let mut view = json!({
            "buffer": 0,
            "byteOffset": offset,
            "byteLength": bytes.len(),
        });
        if let Some(t) = target {
            view["target"] = json!(t);
        }
        self.views.push(view);
        let mut acc = json!({
            "bufferView": self.views.len() - 1,
            "componentType": component,
            "count": count,
            "type": kind,
        });
        if let Some((lo, hi)) = bounds {
            acc["min"] = lo;
            acc["max"] = hi;
        }
        self.accessors.push(acc);
        self.accessors.len() - 1
    }
}

/// A body mesh bound to every joint of the skeleton (skin 0), for [`glb_bytes_with_mesh`].
#[derive(Clone, Debug, PartialEq)]
pub struct SkinnedMesh {
    /// `[V, 3]` bind-pose positions, metres.
    pub positions: Vec<f32>,
    /// `[V, 3]` unit normals.
    pub normals: Vec<f32>,
    /// `[F * 3]` triangle vertex indices.
    pub indices: Vec<u32>,
    /// `[V, 4]` joint indices (the skeleton's joint order).
    pub joints: Vec<u8>,
    /// `[V, 4]` weights, each row summing to 1.
    pub weights: Vec<f32>,
    /// `[J, 16]` column-major inverse bind matrices.
    pub inverse_bind: Vec<f32>,
}

const UNSIGNED_BYTE: u32 = 5121;
const UNSIGNED_SHORT: u32 = 5123;
const UNSIGNED_INT: u32 = 5125;
const ARRAY_BUFFER: u32 = 34962;
const ELEMENT_ARRAY_BUFFER: u32 = 34963;

fn check(skeleton: &Skeleton, motion: &Motion, fps: f32) -> Result<()> {
    if motion.skeleton != skeleton.kind {
        return Err(Error::InvalidArgument(format!(
            "glb: a {} motion cannot be written on the {} skeleton",
            motion.skeleton.name(),
            skeleton.kind.name()
        )));
    }
    if !(fps.is_finite() && fps > 0.0) {
        return Err(Error::InvalidArgument(format!(
            "glb: fps must be positive, not {fps}"
        )));
    }
    let (t, nj) = (motion.frames, skeleton.num_joints());
    if t == 0 {
        return Err(Error::InvalidArgument(
            "glb: the motion has no frames".into(),
        ));
    }
    if motion.local_rot_mats.len() != t * nj * 9 || motion.root_positions.len() != t * 3 {
        return Err(Error::Shape(format!(
            "glb: the motion's arrays do not hold {t} frames of {nj} joints"
        )));
    }
    let finite = |v: &[f32]| v.iter().all(|x| x.is_finite());
    if !finite(&motion.local_rot_mats) || !finite(&motion.root_positions) {
        return Err(Error::InvalidArgument(
            "glb: the motion holds non-finite rotations or root positions".into(),
        ));
    }
    Ok(())
}

/// The `.glb` bytes of `motion` on `skeleton`, sampled at `fps`.
pub fn glb_bytes(skeleton: &Skeleton, motion: &Motion, fps: f32) -> Result<Vec<u8>> {
    glb_bytes_with_mesh(skeleton, motion, fps, None)
}

/// [`glb_bytes`], plus, with `mesh`, a skinned mesh node (mesh 0, skin 0) whose inverse bind
/// matrices replace the rest-pose ones. Without a mesh the bytes are exactly [`glb_bytes`]'s.
pub fn glb_bytes_with_mesh(
    skeleton: &Skeleton,
    motion: &Motion,
    fps: f32,
    mesh: Option<&SkinnedMesh>,
) -> Result<Vec<u8>> {
    check(skeleton, motion, fps)?;
    let (frames, nj) = (motion.frames, skeleton.num_joints());
    let mut bin = Bin {
        bytes: Vec::new(),
        views: Vec::new(),
        accessors: Vec::new(),
    };
    // Keyframe times: glTF requires min and max on a sampler's input.
    let times: Vec<f32> = (0..frames).map(|t| t as f32 / fps).collect();
    let input = bin.push(&times, "SCALAR", 1, true);

    let mut samplers = Vec::with_capacity(nj + 1);
    let mut channels = Vec::with_capacity(nj + 1);
    for j in 0..nj {
        let mut quats = Vec::with_capacity(frames * 4);
        let mut prev: Option<[f64; 4]> = None;
        for t in 0..frames {
            let m: &Mat3 = motion.local_rot_mats[(t * nj + j) * 9..][..9]
                .try_into()
                .expect("9 values");
            let mut q = quat_from_matrix(m);
            // q and -q are the same rotation; LINEAR interpolation between keys of opposite
            // sign would swing the long way round, so keep consecutive keys in one hemisphere.
            if let Some(p) = prev
                && p.iter().zip(&q).map(|(a, b)| a * b).sum::<f64>() < 0.0
            {
                q = q.map(|v| -v);
            }
            prev = Some(q);
            quats.extend(q.map(|v| v as f32));
        }
        let output = bin.push(&quats, "VEC4", 4, false);
        samplers.push(json!({"input": input, "output": output, "interpolation": "LINEAR"}));
        channels.push(json!({
            "sampler": samplers.len() - 1,
            "target": {"node": j, "path": "rotation"},
        }));
    }
    let output = bin.push(&motion.root_positions, "VEC3", 3, true);
    samplers.push(json!({"input": input, "output": output, "interpolation": "LINEAR"}));
    channels.push(json!({
        "sampler": samplers.len() - 1,
        "target": {"node": skeleton.root, "path": "translation"},
    }));

    // Rest translations: the root at its neutral position, every other joint at its FK offset
    // from its parent. In the rest pose (identity rotations) a joint's world position is the
    // sum of the translations along its chain, and its inverse bind matrix undoes it.
    let rest: Vec<[f32; 3]> = (0..nj)
        .map(|j| match skeleton.parents[j] {
            None => skeleton.neutral_joints[j].map(|v| v as f32),
            Some(_) => skeleton.rel_offsets()[j],
        })
        .collect();
    let mut rest_world = rest.clone();
    for j in 0..nj {
        if let Some(p) = skeleton.parents[j] {
            rest_world[j] = [0, 1, 2].map(|k| rest_world[p][k] + rest[j][k]);
        }
    }
    // Column-major 4x4: identity rotation, translation -rest_world.
    let ibm: Vec<f32> = rest_world
        .iter()
        .flat_map(|w| {
            [
                1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, -w[0], -w[1], -w[2],
                1.0,
            ]
        })
        .collect();
    let ibm_accessor = match mesh {
        None => bin.push(&ibm, "MAT4", 16, false),
        Some(m) => {
            check_mesh(m, nj)?;
            bin.push(&m.inverse_bind, "MAT4", 16, false)
        }
    };

    let nodes: Vec<Value> = (0..nj)
        .map(|j| {
            let rest = rest[j].map(f64::from);
            let mut node = json!({"name": skeleton.names[j], "translation": rest});
            let children: Vec<usize> = (0..nj)
                .filter(|&c| skeleton.parents[c] == Some(j))
                .collect();
            if !children.is_empty() {
                node["children"] = json!(children);
            }
            node
        })
        .collect();

    let mut nodes = nodes;
    let mut scene_nodes = vec![skeleton.root];
    let mut meshes = None;
    if let Some(m) = mesh {
        let v = m.positions.len() / 3;
        let f32_bytes = |x: &[f32]| x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
        let position = bin.push_bytes(
            &f32_bytes(&m.positions),
            FLOAT,
            v,
            "VEC3",
            Some(bounds(&m.positions, 3)),
            Some(ARRAY_BUFFER),
        );
        let normal = bin.push_bytes(
            &f32_bytes(&m.normals),
            FLOAT,
            v,
            "VEC3",
            None,
            Some(ARRAY_BUFFER),
        );
        let joints = bin.push_bytes(
            &m.joints,
            UNSIGNED_BYTE,
            v,
            "VEC4",
            None,
            Some(ARRAY_BUFFER),
        );
        let weights = bin.push_bytes(
            &f32_bytes(&m.weights),
            FLOAT,
            v,
            "VEC4",
            None,
            Some(ARRAY_BUFFER),
        );
        let indices = if v <= usize::from(u16::MAX) {
            let b: Vec<u8> = m
                .indices
                .iter()
                .flat_map(|&i| (i as u16).to_le_bytes())
                .collect();
            bin.push_bytes(
                &b,
                UNSIGNED_SHORT,
                m.indices.len(),
                "SCALAR",
                None,
                Some(ELEMENT_ARRAY_BUFFER),
            )
        } else {
            let b: Vec<u8> = m.indices.iter().flat_map(|&i| i.to_le_bytes()).collect();
            bin.push_bytes(
                &b,
                UNSIGNED_INT,
                m.indices.len(),
                "SCALAR",
                None,
                Some(ELEMENT_ARRAY_BUFFER),
            )
        };
        meshes = Some(json!([{
            "name": "body",
            "primitives": [{
                "attributes": {
                    "POSITION": position,
                    "NORMAL": normal,
                    "JOINTS_0": joints,
                    "WEIGHTS_0": weights,
                },
                "indices": indices,
            }],
        }]));
        // The skinned mesh node sits at the scene root without a transform (glTF 2.0 §3.7.3.3:
        // only the joints' transforms move a skinned mesh).
        nodes.push(json!({"name": "body", "mesh": 0, "skin": 0}));
        scene_nodes.push(nj);
    }

    let mut doc = json!({
        "asset": {"version": "2.0", "generator": concat!("kinema ", env!("CARGO_PKG_VERSION"))},
        "scene": 0,
        "scenes": [{"name": skeleton.kind.name(), "nodes": scene_nodes}],
        "nodes": nodes,
        "animations": [{"name": "motion", "channels": channels, "samplers": samplers}],
        // A skin over all joints, although no mesh uses it: it marks the nodes as joints, so
        // viewers build bones from them (three.js's GLTFLoader makes them `Bone`s, which
        // `SkeletonHelper` draws), and a mesh bound to the rest pose can use it unchanged.
        "skins": [{
            "name": skeleton.kind.name(),
            "skeleton": skeleton.root,
            "joints": (0..nj).collect::<Vec<_>>(),
            "inverseBindMatrices": ibm_accessor,
        }],
        "buffers": [{"byteLength": bin.bytes.len()}],
        "bufferViews": bin.views,
        "accessors": bin.accessors,
    });
    if let Some(m) = meshes {
        doc["meshes"] = m;
    }
    let mut json_chunk = serde_json::to_vec(&doc)
        .map_err(|e| Error::InvalidArgument(format!("glb: JSON encoding failed: {e}")))?;
    // Chunks are 4-byte aligned: JSON padded with spaces, BIN with zeros (glTF 2.0 §4.4.3).
    while !json_chunk.len().is_multiple_of(4) {
        json_chunk.push(b' ');
    }
    let mut bin_chunk = bin.bytes;
    while !bin_chunk.len().is_multiple_of(4) {
        bin_chunk.push(0);
    }
    let total = 12 + 8 + json_chunk.len() + 8 + bin_chunk.len();
    let total32 = u32::try_from(total).map_err(|_| {
        Error::InvalidArgument(format!("glb: {total} bytes exceed the 4 GiB limit"))
    })?;
    let mut out = Vec::with_capacity(total);
    for w in [GLB_MAGIC, GLB_VERSION, total32] {
        out.extend(w.to_le_bytes());
    }
    for (kind, chunk) in [(CHUNK_JSON, &json_chunk), (CHUNK_BIN, &bin_chunk)] {
        out.extend((chunk.len() as u32).to_le_bytes());
        out.extend(kind.to_le_bytes());
        out.extend_from_slice(chunk);
    }
    Ok(out)
}

fn check_mesh(m: &SkinnedMesh, joints: usize) -> Result<()> {
    let v = m.positions.len() / 3;
    let bad = |msg: String| Err(Error::Shape(format!("glb mesh: {msg}")));
    if v == 0 || m.positions.len() != v * 3 || m.normals.len() != v * 3 {
        return bad(format!(
            "{} position and {} normal values",
            m.positions.len(),
            m.normals.len()
        ));
    }
    if m.joints.len() != v * 4 || m.weights.len() != v * 4 {
        return bad(format!(
            "joints/weights hold {}/{} values for {v} vertices",
            m.joints.len(),
            m.weights.len()
        ));
    }
    if m.inverse_bind.len() != joints * 16 {
        return bad(format!(
            "{} inverse bind values for {joints} joints",
            m.inverse_bind.len()
        ));
    }
    if m.indices.is_empty()
        || !m.indices.len().is_multiple_of(3)
        || m.indices.iter().any(|&i| i as usize >= v)
    {
        return bad(format!(
            "{} indices are not whole triangles over {v} vertices",
            m.indices.len()
        ));
    }
    if m.joints.iter().any(|&j| usize::from(j) >= joints) {
        return bad(format!("a joint index is not below {joints}"));
    }
    Ok(())
}

/// Write [`glb_bytes`] to `path` atomically (never a partial file).
pub fn write_glb(
    path: impl AsRef<Path>,
    skeleton: &Skeleton,
    motion: &Motion,
    fps: f32,
) -> Result<()> {
    let bytes = glb_bytes(skeleton, motion, fps)?;
    write_atomic(path, |w| w.write_all(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quaternions_of_known_rotations() {
        let id = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        assert_eq!(quat_from_matrix(&id), [0.0, 0.0, 0.0, 1.0]);
        // 180 degrees about x: the trace is -1, the x branch.
        let q = quat_from_matrix(&[1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, -1.0]);
        assert_eq!(q, [1.0, 0.0, 0.0, 0.0]);
        // 90 degrees about z: [0, 0, sin 45, cos 45].
        let q = quat_from_matrix(&[0.0, -1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        let h = std::f64::consts::FRAC_1_SQRT_2;
        assert!(
            (q[2] - h).abs() < 1e-12 && (q[3] - h).abs() < 1e-12,
            "{q:?}"
        );
    }
}
