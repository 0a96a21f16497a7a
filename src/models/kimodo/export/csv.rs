//! MuJoCo qpos CSV for G1 (`kimodo/exports/mujoco.py`, `MujocoQposConverter.to_qpos`
//! #L402-460 with its defaults `root_quat_w_first=True`, `mujoco_rest_zero=False`, and
//! `save_csv` #L236-249).
//!
//! 36 columns per frame: the root translation in MuJoCo's frame (`(x, y, z) = (k_z, k_x, k_y)`,
//! #L76-78), the root quaternion `w x y z` of `C (F_0 L_0) C^T`, then the 29 hinge angles in the
//! XML's joint order, each the Euler projection `atan2` picked by the hinge axis in the "f2q"
//! frame (`_local_rots_to_joint_dofs`, #L251-262). `F_j` are the f2q rotation offsets built from
//! the body quats of `g1.xml` (#L165-212), embedded from the real converter by
//! `reference/capture_kimodo_exports.py`. The 4 extra Kimodo joints (toes, hand roll) are not
//! written. Everything is f32, as upstream; numbers are written as numpy's `savetxt` does
//! (`%.18e`, comma separated).

use serde::Deserialize;

use super::rot::quat_wxyz_upstream;
use crate::models::kimodo::config::SkeletonKind;
use crate::models::kimodo::motion::Motion;
use crate::models::kimodo::skeleton::{Mat3, mat_mul};
use crate::{Error, Result};

const G1_JSON: &str = include_str!("../../../../data/kimodo/exports/g1_mujoco.json");

/// Columns of a qpos row.
pub const QPOS_WIDTH: usize = 36;

#[derive(Deserialize)]
struct Hinge {
    kimodo_joint: usize,
    axis_f2q: [f32; 3],
}

#[derive(Deserialize)]
struct G1File {
    hinges: Vec<Hinge>,
    rot_offsets_f2q: Vec<[[f32; 3]; 3]>,
}

struct G1Qpos {
    hinges: Vec<Hinge>,
    f2q: Vec<Mat3>,
}

fn load() -> Result<G1Qpos> {
    let f: G1File = serde_json::from_str(G1_JSON)
        .map_err(|e| Error::InvalidArgument(format!("embedded G1 MuJoCo data: {e}")))?;
    let nj = SkeletonKind::G1.num_joints();
    if f.hinges.len() != QPOS_WIDTH - 7
        || f.rot_offsets_f2q.len() != nj
        || f.hinges.iter().any(|h| h.kimodo_joint >= nj)
    {
        return Err(Error::InvalidArgument(
            "embedded G1 MuJoCo data: wrong hinge or joint count".into(),
        ));
    }
    Ok(G1Qpos {
        hinges: f.hinges,
        f2q: f
            .rot_offsets_f2q
            .iter()
            .map(|m| [m[0], m[1], m[2]].concat().try_into().expect("9 values"))
            .collect(),
    })
}

/// The qpos rows `[T, 36]` of a G1 motion.
pub fn qpos(motion: &Motion) -> Result<Vec<f32>> {
    let (frames, nj) = motion.export_shape(
        SkeletonKind::G1,
        "the MuJoCo qpos CSV is for G1 motion",
        "csv",
    )?;
    let g1 = load()?;
    let mut out = Vec::with_capacity(frames * QPOS_WIDTH);
    for t in 0..frames {
        let local = |j: usize| -> Mat3 {
            let l: &Mat3 = motion.local_rot_mats[(t * nj + j) * 9..][..9]
                .try_into()
                .expect("9 values");
            mat_mul(&g1.f2q[j], l)
        };
        let r = &motion.root_positions[t * 3..t * 3 + 3];
        // kimodo_to_mujoco = [[0,0,1],[1,0,0],[0,1,0]]: a permutation, exact in f32.
        out.extend_from_slice(&[r[2], r[0], r[1]]);
        let root = local(0);
        let p = [2usize, 0, 1];
        let root_mj: Mat3 = std::array::from_fn(|k| root[p[k / 3] * 3 + p[k % 3]]);
        out.extend_from_slice(&quat_wxyz_upstream(&root_mj));
        for h in &g1.hinges {
            let m = local(h.kimodo_joint);
            let x = m[7].atan2(m[8]);
            let y = m[2].atan2(m[0]);
            let z = m[3].atan2(m[4]);
            let a = h.axis_f2q;
            out.push(x * a[0] + y * a[1] + z * a[2]);
        }
    }
    Ok(out)
}

/// A number as numpy's `savetxt` default `%.18e` writes it (`1.500000000000000000e+00`).
pub fn format_e18(v: f64) -> String {
    let s = format!("{v:.18e}");
    match s.split_once('e') {
        Some((mant, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mant}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// The CSV text of a G1 motion (one qpos row per frame).
pub fn csv_text(motion: &Motion) -> Result<String> {
    let q = qpos(motion)?;
    let mut s = String::with_capacity(q.len() * 26);
    for row in q.chunks_exact(QPOS_WIDTH) {
        let cells: Vec<String> = row.iter().map(|&v| format_e18(f64::from(v))).collect();
        s.push_str(&cells.join(","));
        s.push('\n');
    }
    Ok(s)
}

/// Parses qpos CSV text back into rows of [`QPOS_WIDTH`] values (the re-read check).
pub fn parse_csv(text: &str) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != QPOS_WIDTH {
            return Err(Error::InvalidArgument(format!(
                "csv line {}: {} columns, a qpos row has {QPOS_WIDTH}",
                i + 1,
                cells.len()
            )));
        }
        for c in cells {
            let v: f64 = c.trim().parse().map_err(|_| {
                Error::InvalidArgument(format!("csv line {}: '{c}' is not a number", i + 1))
            })?;
            out.push(v as f32);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_numpy_savetxt() {
        assert_eq!(format_e18(1.5), "1.500000000000000000e+00");
        assert_eq!(format_e18(-0.001), "-1.000000000000000021e-03");
        assert_eq!(format_e18(0.0), "0.000000000000000000e+00");
        assert_eq!(format_e18(1.0e120), "9.999999999999999800e+119");
        let row = vec![format_e18(0.25); QPOS_WIDTH].join(",");
        assert_eq!(parse_csv(&row).unwrap(), vec![0.25; QPOS_WIDTH]);
        assert!(parse_csv("1,2").is_err());
    }
}
