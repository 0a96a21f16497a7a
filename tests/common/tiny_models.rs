//! The tiny models the host-API tests, examples and the C example run on: the Kimodo SOMA30
//! parity checkpoint (`tests/fixtures/kimodo/soma30/checkpoint`) converted, and a MotionBricks
//! model at the parity fixtures' reduced widths with synthetic weights. Include with
//! `#[path = "common/tiny_models.rs"] mod tiny_models;` (`tools/tiny_models.rs` does too).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kinema::models::kimodo::convert::{ConvertOptions, convert};
use kinema::models::motionbricks::harness::{reduced, synthetic_model, write_model};

/// The Kimodo file name in the folder [`write`] fills.
pub const KIMODO: &str = "kimodo-soma30-tiny.gguf";
/// The MotionBricks file name in the folder [`write`] fills.
pub const MOTIONBRICKS: &str = "motionbricks-tiny.gguf";

/// Writes both models into `dir` and returns their paths (Kimodo, MotionBricks).
pub fn write(dir: &Path) -> kinema::Result<(PathBuf, PathBuf)> {
    let checkpoint =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kimodo/soma30/checkpoint");
    let kimodo = dir.join(KIMODO);
    convert(
        &checkpoint,
        &kimodo,
        &ConvertOptions::default(),
        &mut |_| {},
    )?;
    let mb = dir.join(MOTIONBRICKS);
    write_model(&synthetic_model(reduced())?, &mb)?;
    Ok((kimodo, mb))
}

/// The clip file name in the folder [`write_clips`] fills.
pub const CLIPS: &str = "clips.npz";

/// Writes the agent's synthetic style clips (`ClipLibrary::synthetic(1)`, what the agent
/// tests play) into `dir` and returns the path.
pub fn write_clips(dir: &Path) -> kinema::Result<PathBuf> {
    let path = dir.join(CLIPS);
    kinema::ClipLibrary::synthetic(1).to_npz()?.write(&path)?;
    Ok(path)
}
