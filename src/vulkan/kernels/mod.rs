//! The host side of each op: push constants, specialization constants, workgroup counts and,
//! where one operand can exceed a binding, splitting into several dispatches. Operands arrive
//! checked (`crate::backend::check`) and trimmed to what the op touches.
//!
//! One file per op family; which GEMM kernel and tile runs for a shape on a device is
//! [`gemm_policy`]. The helpers every family shares (u32 push constants, 1-D dispatches,
//! binding arithmetic) are here.
//!
//! To add an op: write `kernels/glsl/<op>.comp` (README there), add its line to the shader
//! table in `shaders.rs` with its push-constant struct, and record it in the family's file with
//! [`VulkanRecording::dispatch`].

use super::backend_error;
use super::context::Limits;
use super::memory::VulkanBuffer;
use super::recording::{Arg, Dispatch, VulkanRecording};
use super::shaders::Shader;
use crate::backend::BufRef;
use crate::error::Result;
use crate::ops::Activation;
use crate::tensor::DType;

pub(crate) mod attention;
pub(crate) mod attention_cm;
mod conv;
mod elementwise;
mod embedding;
pub(crate) mod gemm_policy;
mod linear;
mod matmul;
mod motion;
mod norm;
mod position;
mod sampling;

pub(crate) use attention::attention;
pub(crate) use conv::{conv1d, upsample_nearest2x};
pub(crate) use elementwise::{activation, axpby, binary, copy, masked_act, scale, swiglu};
pub(crate) use embedding::{embedding, mean_pool};
pub(crate) use linear::{GemmUnits, coopmat_layout, coopmat_peak, linear, read_peak};
pub(crate) use matmul::batched_matmul;
pub(crate) use motion::root_bridge;
pub(crate) use norm::{add_layer_norm, layer_norm, rms_norm, softmax};
pub(crate) use position::{posenc, rope};
pub(crate) use sampling::{argmax, cfg, ddim, gumbel};

/// The shader tool's variant table, for the tests that check the host's tables of compiled
/// variants against their defines.
#[cfg(test)]
#[path = "../../../tools/shaderc/src/variants.rs"]
#[allow(dead_code)] // The tests read the table, not the MANIFEST identity.
mod shader_variants;

type Ref = BufRef<VulkanBuffer>;

/// `v` as a u32 push constant, or an error naming it.
fn u32_of(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v)
        .map_err(|_| backend_error(format!("{op}: {what} = {v} does not fit in 32 bits")))
}

/// The activation code and LeakyReLU slope the shaders' `activate()` takes (`common.glsl`).
fn act_code(a: Activation) -> (u32, f32) {
    match a {
        Activation::None => (0, 0.0),
        Activation::Relu => (1, 0.0),
        Activation::LeakyRelu(s) => (2, s),
        Activation::Gelu => (3, 0.0),
        Activation::GeluTanh => (4, 0.0),
        Activation::Silu => (5, 0.0),
    }
}

/// Shader code of a weight or table dtype (`W_DTYPE` in linear.comp and the
/// cooperative-matrix shaders, `T_DTYPE` in embedding.comp).
fn float_dtype_code(d: DType) -> u32 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::Q8_0 => 3,
        DType::I32 | DType::U32 => unreachable!("float dtypes are checked when recorded"),
    }
}

/// A 1-D elementwise dispatch over `n` elements.
fn elementwise<P: bytemuck::Pod>(
    rec: &mut VulkanRecording,
    op: &'static str,
    shader: Shader,
    args: &[Arg<'_>],
    push: P,
    n: usize,
) -> Result<()> {
    let wg = rec.elementwise_workgroup();
    dispatch_1d(rec, op, shader, wg, args, push, n as u64)
}

/// A dispatch of `n` invocations in workgroups of `wg` (specialization constant 0, the only
/// one), spread over x and y ([`VulkanRecording::grid`]).
fn dispatch_1d<P: bytemuck::Pod>(
    rec: &mut VulkanRecording,
    op: &'static str,
    shader: Shader,
    wg: u32,
    args: &[Arg<'_>],
    push: P,
    n: u64,
) -> Result<()> {
    let groups = rec.grid(op, n, wg)?;
    rec.dispatch(Dispatch {
        op,
        shader,
        spec: &[wg],
        args,
        push,
        groups,
    })
}

/// Workgroup counts of a tiled GEMM-like dispatch: `cols` output columns in tiles of `bn` on
/// x, `rows` output rows in tiles of `bm` on y, `z` on z.
fn tile_groups(
    op: &'static str,
    [rows, cols]: [usize; 2],
    [bm, bn]: [u32; 2],
    z: u32,
) -> Result<[u32; 3]> {
    Ok([
        u32_of(op, "column tiles", cols.div_ceil(bn as usize))?,
        u32_of(op, "row tiles", rows.div_ceil(bm as usize))?,
        z,
    ])
}

/// Bytes of an operand one storage-buffer binding can hold: a binding starts up to one
/// alignment unit before the operand and ends on a word.
fn usable_binding_bytes(l: &Limits) -> u64 {
    l.max_binding.saturating_sub(l.min_storage_offset_align + 4)
}

/// Whole rows of `row_bytes` bytes that fit one storage-buffer binding, or an error naming
/// the `what` (a "row", a "weight row") that does not fit even once.
fn rows_per_binding(op: &str, what: &str, l: &Limits, row_bytes: u64) -> Result<usize> {
    match usable_binding_bytes(l) / row_bytes.max(1) {
        0 => Err(backend_error(format!(
            "{op}: one {what} of {row_bytes} bytes does not fit this device's {}-byte \
             storage-buffer binding limit",
            l.max_binding
        ))),
        rows => Ok(rows as usize),
    }
}

/// How many consecutive batches of an operand (`size` elements each, `stride` apart) one
/// binding of `usable` elements holds: unbounded for a broadcast operand, 0 when not even one.
fn batches_per_binding(usable: usize, stride: usize, size: usize) -> usize {
    match usable.checked_sub(size) {
        None => 0,
        Some(room) => room.checked_div(stride).map_or(usize::MAX, |n| n + 1),
    }
}

/// Batches of f32 operands one dispatch can take: as many as every operand's binding holds
/// (`(stride, size)` in elements, as [`batches_per_binding`] takes them) and the device's z
/// workgroup count allows, at most `batch`; 0 when not even one fits.
fn batches_per_dispatch(l: &Limits, operands: &[(usize, usize)], batch: usize) -> usize {
    let usable = (usable_binding_bytes(l) / 4) as usize;
    operands
        .iter()
        .map(|&(stride, size)| batches_per_binding(usable, stride, size))
        .chain([l.max_workgroup_count[2] as usize])
        .min()
        .unwrap_or(0)
        .min(batch)
}

/// Device limits for the policy tests: `invocations` per workgroup, `shared` bytes of shared
/// memory, subgroups of 8 (lavapipe's) and a 128 MiB binding.
#[cfg(test)]
fn test_limits(invocations: u32, shared: u32) -> Limits {
    Limits {
        subgroup_arithmetic: true,
        subgroup_size: 8,
        max_shared_memory: shared,
        max_push_constants: 128,
        max_binding: 1 << 27,
        min_storage_offset_align: 16,
        max_workgroup_count: [65535; 3],
        max_workgroup_size: [invocations, 1, 1],
        max_workgroup_invocations: invocations,
        timestamp_period_ns: 1.0,
        timestamp_valid_bits: 64,
    }
}

/// The H200's limits: 48 KiB of shared memory, subgroups of 32, a 4 GiB binding.
#[cfg(test)]
fn test_h200() -> Limits {
    let mut l = test_limits(1024, 49152);
    l.subgroup_size = 32;
    l.max_binding = 1 << 32;
    l.max_workgroup_size = [1024, 1024, 64];
    l
}

/// The H200's workgroup-scope matrices (`VK_NV_cooperative_matrix2`): 256 invocations, with row
/// reductions.
#[cfg(test)]
fn test_h200_coopmat2() -> super::context::Coopmat2 {
    super::context::Coopmat2 {
        max_workgroup_size: 256,
        reductions: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_chunks_fit_a_binding() {
        assert_eq!(batches_per_binding(100, 0, 40), usize::MAX);
        assert_eq!(batches_per_binding(100, 40, 40), 2);
        assert_eq!(batches_per_binding(100, 30, 40), 3);
        assert_eq!(batches_per_binding(100, 30, 101), 0);
    }

    #[test]
    fn batches_per_dispatch_take_the_tightest_limit() {
        let mut l = test_limits(1024, 32768);
        // (2^27 - 20) / 4 elements per binding.
        let usable = ((1usize << 27) - 20) / 4;
        assert_eq!(batches_per_dispatch(&l, &[(usable / 3, usable / 3)], 10), 3);
        assert_eq!(batches_per_dispatch(&l, &[(0, 8), (8, 8)], 5), 5);
        l.max_workgroup_count[2] = 2;
        assert_eq!(batches_per_dispatch(&l, &[(0, 8), (8, 8)], 5), 2);
        assert_eq!(batches_per_dispatch(&l, &[(8, usable + 1)], 5), 0);
    }

    #[test]
    fn rows_per_binding_names_what_does_not_fit() {
        let l = test_limits(1024, 32768);
        assert_eq!(
            rows_per_binding("op", "row", &l, 4).unwrap(),
            ((1 << 27) - 20) / 4
        );
        let e = rows_per_binding("linear", "weight row", &l, 1 << 28).unwrap_err();
        assert!(
            e.to_string()
                .contains("linear: one weight row of 268435456 bytes"),
            "{e}"
        );
    }
}
