//! Positions: rotary embeddings (rope) and the sinusoidal positional encoding (posenc).

use super::super::backend_error;
use super::super::recording::Arg::{In, Out};
use super::super::recording::VulkanRecording;
use super::super::shaders::{Shader, push};
use super::{Ref, elementwise, u32_of};
use crate::error::Result;
use crate::ops::{PosEncParams, RopePairing, RopeParams};

/// `x`, `positions`, `inv_freq`, `y` as checked by `check::rope`: one invocation per rotated
/// pair and per element carried through after a row's rotated heads.
pub(crate) fn rope(
    rec: &mut VulkanRecording,
    p: &RopeParams,
    x: &Ref,
    positions: &Ref,
    inv_freq: &Ref,
    y: &Ref,
) -> Result<()> {
    const OP: &str = "rope";
    u32_of(OP, "element count", x.len)?;
    let row_pairs = p.heads * p.head_dim / 2;
    let per_token = p.row_stride - row_pairs;
    let count = p.tokens * per_token;
    let push = push::Rope {
        count: count as u32,
        per_token: per_token as u32,
        half_dim: u32_of(OP, "head_dim / 2", p.head_dim / 2)?,
        interleaved: u32::from(p.pairing == RopePairing::Interleaved),
        row_stride: u32_of(OP, "row stride", p.row_stride)?,
        row_pairs: row_pairs as u32,
        ..Default::default()
    };
    let args = [In(x), In(positions), In(inv_freq), Out(y)];
    elementwise(rec, OP, Shader::Rope, &args, push, count)
}

/// `out` as checked by `check::posenc`. The frequencies `div[i] = 10000^(-2i / dim)` are
/// computed here with the CPU reference's f32 expression (`cpu::posenc::reference`, Kimodo's
/// `kimodo/model/backbone.py#L253-266`) and bound as a table, so the shader's angles are the
/// CPU's bit for bit and only its sin/cos differ (by at most
/// [`POSENC_ABS`](crate::vulkan::POSENC_ABS)).
pub(crate) fn posenc(rec: &mut VulkanRecording, p: &PosEncParams, out: &Ref) -> Result<()> {
    const OP: &str = "posenc";
    let n = p.len * p.dim;
    if n == 0 {
        return Ok(());
    }
    // The shader's angle reduction needs whole multiples of pi/2 below 2^24 (posenc.comp).
    if p.start + p.len > 1 << 24 {
        return Err(backend_error(format!(
            "{OP}: positions up to {} are past 2^24, beyond the shader's sin/cos",
            p.start + p.len - 1
        )));
    }
    let div: Vec<f32> = (0..p.dim / 2)
        .map(|i| 10000f32.powf(-((2 * i) as f32) / p.dim as f32))
        .collect();
    let table = rec.constant_f32(&div)?;
    // Element indices are u32 in the shader.
    u32_of(OP, "len * dim", n)?;
    let push = push::PosEnc {
        start: p.start as u32,
        len: p.len as u32,
        dim: u32_of(OP, "dim", p.dim)?,
        ..Default::default()
    };
    elementwise(rec, OP, Shader::PosEnc, &[In(&table), Out(out)], push, n)
}
