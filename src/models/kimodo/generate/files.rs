//! The files of a generation: the text feature and noise it reads (`.npy`) and the npz it
//! writes.

use std::path::Path;

use super::super::constraints::Conditions;
use super::super::motion::Motion;
use super::super::sampler::Diagnostics;
use crate::formats::{NpyArray, NpyDType, npy};
use crate::{Error, Result};

/// Reads a text feature: float32 `.npy` of shape `[llm_dim]`, `[1, llm_dim]` or
/// `[1, 1, llm_dim]` (upstream's wrapper returns `[B, 1, 4096]`, its API client `[1, 4096]`).
/// The sampler refuses non-finite values.
pub fn read_embedding(path: &Path, llm_dim: usize) -> Result<Vec<f32>> {
    let a = read_f32_npy(path, "embedding")?;
    let ok = matches!(a.shape.as_slice(), [n] | [1, n] | [1, 1, n] if *n == llm_dim);
    if !ok {
        return Err(Error::Shape(format!(
            "embedding {}: shape {:?}, expected [{llm_dim}], [1, {llm_dim}] or [1, 1, {llm_dim}] (the \
             model's text feature width is {llm_dim})",
            path.display(),
            a.shape
        )));
    }
    a.to_f32()
}

/// Reads initial noise `x_T`: float32 `.npy` of shape `[1, T, dim]` or `[T, dim]`. Returns the
/// values and T (the sampler refuses non-finite values).
pub fn read_noise(path: &Path, dim: usize) -> Result<(Vec<f32>, usize)> {
    let a = read_f32_npy(path, "noise")?;
    let frames = match a.shape.as_slice() {
        [1, t, d] | [t, d] if *d == dim => *t,
        _ => {
            return Err(Error::Shape(format!(
                "noise {}: shape {:?}, expected [1, T, {dim}] (the model's motion feature \
                 width is {dim})",
                path.display(),
                a.shape
            )));
        }
    };
    Ok((a.to_f32()?, frames))
}

fn read_f32_npy(path: &Path, what: &str) -> Result<NpyArray> {
    let a = npy::read_file(path).map_err(|e| match e {
        Error::Io { .. } => e,
        e => Error::InvalidArgument(format!("{what} {}: {e}", path.display())),
    })?;
    if a.dtype != NpyDType::F32 {
        return Err(Error::DType(format!(
            "{what} {}: dtype {}, expected float32",
            path.display(),
            a.dtype.descr()
        )));
    }
    Ok(a)
}

/// The npz of `kinema generate`: upstream's motion keys, `features` `[T, dim]` (normalised),
/// and with diagnostics `root_stage_step0` `[rows, T, 5]`, `body_stage_step0`
/// `[rows, T, dim - 5]`, `x0_step0` `[T, dim]` (`rows`: the guidance rows), and with
/// constraints also `constraint_features` `[T, dim]` (the normalised observed motion) and
/// `constraint_mask` `[T, dim]` bool.
pub fn npz_bytes(
    motion: &Motion,
    features: &[f32],
    diagnostics: Option<&Diagnostics>,
    cond: Option<&Conditions>,
    dim: usize,
    rows: usize,
) -> Result<Vec<u8>> {
    let frames = motion.frames;
    let mut w = motion.npz()?;
    w.add("features", &NpyArray::from_f32(&[frames, dim], features)?)?;
    if let Some(d) = diagnostics {
        w.add(
            "root_stage_step0",
            &NpyArray::from_f32(&[rows, frames, 5], &d.root_stage_step0)?,
        )?;
        w.add(
            "body_stage_step0",
            &NpyArray::from_f32(&[rows, frames, dim - 5], &d.body_stage_step0)?,
        )?;
        w.add(
            "x0_step0",
            &NpyArray::from_f32(&[frames, dim], &d.x0_step0)?,
        )?;
        if let Some(c) = cond {
            w.add(
                "constraint_features",
                &NpyArray::from_f32(&[frames, dim], &c.features)?,
            )?;
            w.add(
                "constraint_mask",
                &NpyArray::from_bool(&[frames, dim], &c.mask)?,
            )?;
        }
    }
    let mut bytes = Vec::new();
    w.write_to(&mut bytes)?;
    Ok(bytes)
}
