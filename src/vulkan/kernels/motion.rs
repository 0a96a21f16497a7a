//! Kimodo's motion representation: the root bridge between global and local root features.

use super::super::recording::Arg::{In, Out};
use super::super::recording::VulkanRecording;
use super::super::shaders::{Shader, push};
use super::{Ref, elementwise, u32_of};
use crate::error::Result;
use crate::ops::RootBridgeParams;

/// `x`, `out` as checked by `check::root_bridge`: one invocation per output frame. The
/// scales `sqrt(std^2 + 1e-5)` are computed here with the CPU reference's f32 expression.
pub(crate) fn root_bridge(
    rec: &mut VulkanRecording,
    p: &RootBridgeParams,
    x: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "root_bridge";
    let n = p.rows * p.frames;
    let mut stats = [0u32; 18];
    let vals = p
        .global_mean
        .iter()
        .copied()
        .chain(p.global_std.map(RootBridgeParams::scale))
        .chain(p.local_mean.iter().copied())
        .chain(p.local_std.map(RootBridgeParams::scale));
    for (d, v) in stats.iter_mut().zip(vals) {
        *d = v.to_bits();
    }
    let push = push::RootBridge {
        rows: u32_of(OP, "rows", p.rows)?,
        frames: u32_of(OP, "frames", p.frames)?,
        fps: p.fps,
        stats,
        ..Default::default()
    };
    u32_of(OP, "rows * frames * 5", n * 5)?;
    elementwise(rec, OP, Shader::RootBridge, &[In(x), Out(out)], push, n)
}
