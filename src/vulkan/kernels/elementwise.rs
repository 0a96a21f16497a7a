//! Elementwise ops (activation, binary, masked_act, scale, axpby, swiglu) and the strided copy: one
//! invocation per output element.

use super::super::recording::Arg::{Absent, In, Out};
use super::super::recording::{Dispatch, VulkanRecording};
use super::super::shaders::{Shader, push};
use super::{Ref, act_code, elementwise, u32_of};
use crate::error::Result;
use crate::ops::{Activation, BinaryOp, BinaryParams, CopyParams, MaskedActParams, SwigluParams};
use crate::tensor::DType;

pub(crate) fn activation(
    rec: &mut VulkanRecording,
    act: Activation,
    x: &Ref,
    y: &Ref,
) -> Result<()> {
    const OP: &str = "activation";
    let (act, slope) = act_code(act);
    let push = push::Activation {
        n: u32_of(OP, "n", x.len)?,
        act,
        slope,
        ..Default::default()
    };
    elementwise(rec, OP, Shader::Activation, &[In(x), Out(y)], push, x.len)
}

pub(crate) fn binary(
    rec: &mut VulkanRecording,
    p: &BinaryParams,
    a: &Ref,
    b: &Ref,
    y: &Ref,
) -> Result<()> {
    const OP: &str = "binary";
    let push = push::Binary {
        n: u32_of(OP, "n", p.n)?,
        b_len: u32_of(OP, "b_len", p.b_len)?,
        op: match p.op {
            BinaryOp::Add => 0,
            BinaryOp::Mul => 1,
        },
        ..Default::default()
    };
    elementwise(rec, OP, Shader::Binary, &[In(a), In(b), Out(y)], push, p.n)
}

pub(crate) fn masked_act(
    rec: &mut VulkanRecording,
    p: &MaskedActParams,
    x: &Ref,
    m: &Ref,
    r: Option<&Ref>,
    y: &Ref,
) -> Result<()> {
    const OP: &str = "masked_act";
    let (act, slope) = act_code(p.act);
    let push = push::MaskedAct {
        n: u32_of(OP, "n", p.n)?,
        act,
        slope,
        pre_mask: u32::from(p.pre_mask),
        has_r: u32::from(r.is_some()),
        ..Default::default()
    };
    let args = [In(x), In(m), r.map_or(Absent, In), Out(y)];
    elementwise(rec, OP, Shader::MaskedAct, &args, push, p.n)
}

pub(crate) fn scale(rec: &mut VulkanRecording, s: f32, x: &Ref, y: &Ref) -> Result<()> {
    const OP: &str = "scale";
    let push = push::Scale {
        n: u32_of(OP, "n", x.len)?,
        s,
        ..Default::default()
    };
    elementwise(rec, OP, Shader::Scale, &[In(x), Out(y)], push, x.len)
}

pub(crate) fn axpby(
    rec: &mut VulkanRecording,
    a: f32,
    x: &Ref,
    b: f32,
    y: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "axpby";
    let push = push::Axpby {
        n: u32_of(OP, "n", x.len)?,
        a,
        b,
        ..Default::default()
    };
    let args = [In(x), In(y), Out(out)];
    elementwise(rec, OP, Shader::Axpby, &args, push, x.len)
}

pub(crate) fn swiglu(
    rec: &mut VulkanRecording,
    p: &SwigluParams,
    gate: &Ref,
    up: &Ref,
    y: &Ref,
) -> Result<()> {
    const OP: &str = "swiglu";
    // Element indices are u32 in the shader (the strided ones reach gate.len).
    u32_of(OP, "gate span", gate.len)?;
    let push = push::Swiglu {
        n: u32_of(OP, "n", y.len)?,
        cols: u32_of(OP, "cols", p.cols)?,
        stride: u32_of(OP, "stride", p.stride)?,
        ..Default::default()
    };
    let args = [In(gate), In(up), Out(y)];
    elementwise(rec, OP, Shader::Swiglu, &args, push, y.len)
}

/// `src` and `dst` as checked by `check::copy` (each starting at the op's buffer offset).
pub(crate) fn copy(rec: &mut VulkanRecording, p: &CopyParams, src: &Ref, dst: &Ref) -> Result<()> {
    const OP: &str = "copy";
    let count: usize = p.shape.iter().product();
    if count == 0 {
        return Ok(());
    }
    // Bind from the layouts' first elements, so the shader adds only strides.
    let s = src.slice(p.src_offset, src.len - p.src_offset)?;
    let d = dst.slice(p.dst_offset, dst.len - p.dst_offset)?;
    let mut push = push::Copy {
        count: u32_of(OP, "element count", count)?,
        rank: p.shape.len() as u32,
        ..Default::default()
    };
    for (i, ((&n, &ss), &ds)) in p
        .shape
        .iter()
        .zip(&p.src_strides)
        .zip(&p.dst_strides)
        .enumerate()
    {
        push.shape[i] = u32_of(OP, "shape", n)?;
        push.src_stride[i] = u32_of(OP, "source stride", ss)?;
        push.dst_stride[i] = u32_of(OP, "destination stride", ds)?;
    }
    let elem_bytes = match src.dtype {
        DType::F16 | DType::BF16 => 2,
        _ => 4,
    };
    let wg = rec.elementwise_workgroup();
    let groups = rec.grid(OP, count as u64, wg)?;
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::Copy,
        spec: &[wg, elem_bytes],
        args: &[In(&s), Out(&d)],
        push,
        groups,
    })
}
