//! Kimodo's motion exports beyond the motion npz: BVH (SOMA), MuJoCo qpos CSV (G1), AMASS npz
//! (SMPL-X) and the skinned GLB (SOMA), with the checks that run before any work (the format
//! fits the skeleton) and after rendering (every file is parsed back and compared with the
//! motion before it is committed).
//!
//! One scheme for `generate` and `convert motion`: the main output `-o` picks its writer by
//! `--format` or by its extension (`.npz` motion, `.bvh`, `.csv`, `.glb`; AMASS is `.npz` too,
//! so it needs `--format amass`), and `--bvh`, `--csv`, `--amass`, `--glb` add more files of
//! the same motion. `--skin skin_standard.npz` makes every GLB skinned.

pub mod amass;
pub mod bvh;
pub mod csv;
pub mod glb_skinned;
pub mod rot;

use std::path::{Path, PathBuf};

use super::config::SkeletonKind;
use super::glb::{self, SkinnedMesh};
use super::motion::Motion;
use super::skeleton::Skeleton;
use crate::formats::NpzReader;
use crate::models::kit::output::{OutputPlan, Outputs};
use crate::{Error, Result};

/// A file format a motion can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Upstream's motion npz (`local_rot_mats`, `posed_joints`, ...).
    Npz,
    /// BVH (SOMA).
    Bvh,
    /// MuJoCo qpos CSV (G1).
    Csv,
    /// AMASS / SMPL-X npz (SMPL-X).
    Amass,
    /// Animated glTF binary (skinned with `--skin`).
    Glb,
}

impl Format {
    /// The name used by `--format`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Npz => "npz",
            Format::Bvh => "bvh",
            Format::Csv => "csv",
            Format::Amass => "amass",
            Format::Glb => "glb",
        }
    }

    /// Parses `--format`.
    pub fn parse(s: &str) -> Result<Format> {
        Ok(match s {
            "npz" => Format::Npz,
            "bvh" => Format::Bvh,
            "csv" => Format::Csv,
            "amass" => Format::Amass,
            "glb" => Format::Glb,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unknown format '{s}' (npz, bvh, csv, amass or glb)"
                )));
            }
        })
    }

    /// The format named by `--format`, else by the path's extension (`.npz` is the motion
    /// npz; AMASS needs `--format amass`).
    pub fn pick(format: Option<&str>, path: &Path) -> Result<Format> {
        if let Some(f) = format {
            return Format::parse(f);
        }
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("npz") => Ok(Format::Npz),
            Some("bvh") => Ok(Format::Bvh),
            Some("csv") => Ok(Format::Csv),
            Some("glb") => Ok(Format::Glb),
            _ => Err(Error::InvalidArgument(format!(
                "{}: the extension does not say the format (.npz, .bvh, .csv, .glb); pass \
                 --format npz|bvh|csv|amass|glb",
                path.display()
            ))),
        }
    }

    /// Whether a motion on `skeleton` can be written in this format (upstream's exporters:
    /// BVH for SOMA, CSV for G1, AMASS for SMPL-X; the skinned GLB for SOMA).
    pub fn check_skeleton(self, skeleton: SkeletonKind, skinned: bool, flag: &str) -> Result<()> {
        let soma = matches!(skeleton, SkeletonKind::Soma30 | SkeletonKind::Soma77);
        let (ok, needs) = match self {
            Format::Npz => (true, ""),
            Format::Glb if !skinned => (true, ""),
            Format::Glb => (soma, "a SOMA model (the skin is SOMA77's)"),
            Format::Bvh => (soma, "a SOMA model"),
            Format::Csv => (skeleton == SkeletonKind::G1, "a G1 model"),
            Format::Amass => (skeleton == SkeletonKind::Smplx22, "an SMPL-X model"),
        };
        if !ok {
            return Err(Error::InvalidArgument(format!(
                "{flag}: the {} export needs {needs}; this motion is {}",
                self.name(),
                skeleton.name()
            )));
        }
        Ok(())
    }
}

/// The extra outputs of one run and their options.
#[derive(Clone, Debug, Default)]
pub struct Exports {
    /// `(format, path, flag)`: every file to write besides the run's own outputs.
    pub files: Vec<(Format, PathBuf, String)>,
    /// `--skin`: upstream's `skin_standard.npz`; makes the GLB outputs skinned.
    pub skin: Option<PathBuf>,
    /// `--bvh-standard-tpose`: BVH in Kimodo's standard T-pose instead of upstream's BVH rest.
    pub bvh_standard_tpose: bool,
}

/// An export ready to write: the skin loaded, the skeleton checked.
pub struct PreparedExports<'a> {
    exports: &'a Exports,
    mesh: Option<SkinnedMesh>,
}

impl Exports {
    /// Adds every file (and the skin as an input) to `plan`.
    pub fn plan(&self, plan: &mut OutputPlan) {
        if let Some(s) = &self.skin {
            plan.input(s, "--skin");
        }
        for (_, path, flag) in &self.files {
            plan.output(path, flag);
        }
    }

    /// Checks every format against the motion's skeleton and loads the skin: call before any
    /// work. `skeleton` is the model's (or the input motion's) skeleton.
    pub fn prepare(&self, skeleton: SkeletonKind) -> Result<PreparedExports<'_>> {
        let skinned = self.skin.is_some();
        for (f, _, flag) in &self.files {
            f.check_skeleton(skeleton, skinned, flag)?;
        }
        let mesh = match &self.skin {
            Some(p) => {
                Format::Glb.check_skeleton(skeleton, true, "--skin")?;
                Some(glb_skinned::load_skin(p)?.0)
            }
            None => None,
        };
        Ok(PreparedExports {
            exports: self,
            mesh,
        })
    }
}

impl PreparedExports<'_> {
    /// Renders every file of the plan for `motion`, checks each by parsing it back, and stages
    /// it in `outputs`. Returns the paths written.
    pub fn write(&self, outputs: &mut Outputs, motion: &Motion, fps: f32) -> Result<Vec<String>> {
        let mut written = Vec::new();
        for (f, path, _) in &self.exports.files {
            let bytes = self.render(*f, motion, fps)?;
            outputs.write(path, |w| w.write_all(&bytes))?;
            written.push(path.display().to_string());
        }
        Ok(written)
    }

    /// The bytes of `motion` in format `f`, checked by re-reading them.
    pub fn render(&self, f: Format, motion: &Motion, fps: f32) -> Result<Vec<u8>> {
        let bytes = match f {
            Format::Npz => {
                let mut b = Vec::new();
                motion.npz()?.write_to(&mut b)?;
                b
            }
            Format::Bvh => {
                bvh::bvh_text(motion, fps, self.exports.bvh_standard_tpose)?.into_bytes()
            }
            Format::Csv => csv::csv_text(motion)?.into_bytes(),
            Format::Amass => {
                let mut b = Vec::new();
                amass::amass_npz(motion, fps)?.write_to(&mut b)?;
                b
            }
            Format::Glb => match &self.mesh {
                Some(m) => glb_skinned::skinned_glb_bytes(motion, fps, m)?,
                None => glb::glb_bytes(&Skeleton::load(motion.skeleton)?, motion, fps)?,
            },
        };
        reread(f, &bytes, motion, fps, self.exports.bvh_standard_tpose)?;
        Ok(bytes)
    }
}

/// Largest difference allowed between a written file, parsed back, and the motion.
pub use super::import::REREAD_TOLERANCE;

fn reread_err(f: Format, msg: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!(
        "the {} just written does not read back as the motion: {msg}",
        f.name()
    ))
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(
            0.0,
            |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
        )
}

/// Parses `bytes` back and compares what the format holds with `motion`.
pub fn reread(
    f: Format,
    bytes: &[u8],
    motion: &Motion,
    fps: f32,
    standard_tpose: bool,
) -> Result<()> {
    let check = |what: &str, got: &[f32], want: &[f32]| -> Result<()> {
        let d = max_diff(got, want);
        if d > REREAD_TOLERANCE {
            return Err(reread_err(f, format!("{what} differ by {d}")));
        }
        Ok(())
    };
    match f {
        Format::Npz | Format::Amass => {
            let npz = NpzReader::from_bytes(bytes.to_vec())?;
            if f == Format::Npz {
                let back = super::import::motion_from_npz(&npz, "the written npz")?;
                check(
                    "local rotations",
                    &back.motion.local_rot_mats,
                    &motion.local_rot_mats,
                )?;
                check(
                    "root positions",
                    &back.motion.root_positions,
                    &motion.root_positions,
                )?;
            } else {
                let (trans, root, body) = amass::amass_parameters(motion)?;
                check("trans", &npz.array("trans")?.to_f32()?, &trans)?;
                check("root_orient", &npz.array("root_orient")?.to_f32()?, &root)?;
                check("pose_body", &npz.array("pose_body")?.to_f32()?, &body)?;
            }
        }
        Format::Bvh => {
            let text = std::str::from_utf8(bytes).map_err(|e| reread_err(f, e))?;
            let back = super::import::motion_from_bvh(&bvh::parse(text)?)?;
            let want = bvh::soma77_of(motion)?;
            if !standard_tpose && !back.bvh_rest {
                return Err(reread_err(f, "the rest pose is not upstream's BVH rest"));
            }
            // Rotations as rotations: the f32 matrices are orthonormal only to ~1e-5 down long
            // chains, which six-decimal Euler angles cannot (and should not) carry.
            let d = rot::max_rotation_distance(&back.motion.local_rot_mats, &want.local_rot_mats);
            if d > f64::from(REREAD_TOLERANCE) {
                return Err(reread_err(
                    f,
                    format!("local rotations differ by {d:.3e} rad"),
                ));
            }
            check(
                "root positions",
                &back.motion.root_positions,
                &want.root_positions,
            )?;
        }
        Format::Csv => {
            let text = std::str::from_utf8(bytes).map_err(|e| reread_err(f, e))?;
            check("qpos", &csv::parse_csv(text)?, &csv::qpos(motion)?)?;
        }
        Format::Glb => {
            super::import::check_glb(bytes, motion, fps)?;
        }
    }
    Ok(())
}
