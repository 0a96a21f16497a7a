//! Batched matrix products (attention's scores and mixes outside the fused shader): the
//! strict f32 GEMM of linear, batch on z.

use super::super::backend_error;
use super::super::recording::Arg::{In, Out};
use super::super::recording::{Dispatch, VulkanRecording};
use super::super::shaders::{Shader, push};
use super::gemm_policy::{Forced, gemm_tile};
use super::{Ref, batches_per_dispatch, tile_groups, u32_of};
use crate::error::Result;
use crate::ops::BatchedMatmulParams;

/// `a`, `b`, `c` as checked by `check::batched_matmul`: the strict GEMM tile of linear
/// ([`gemm_tile`]), with the batch on z. Batches are split into several dispatches when they
/// exceed the device's z workgroup count or one storage-buffer binding.
pub(crate) fn batched_matmul(
    rec: &mut VulkanRecording,
    p: &BatchedMatmulParams,
    a: &Ref,
    b: &Ref,
    c: &Ref,
) -> Result<()> {
    const OP: &str = "batched_matmul";
    if p.m == 0 || p.n == 0 {
        return Ok(());
    }
    let limits = rec.limits();
    let tile = gemm_tile(p.m, p.n, p.batch, limits, &Forced::from_env());
    let (mk, kn, mn) = (p.m * p.k, p.k * p.n, p.m * p.n);
    let operands = [(p.a_batch_stride, mk), (p.b_batch_stride, kn), (mn, mn)];
    let chunk = batches_per_dispatch(limits, &operands, p.batch);
    if chunk == 0 {
        return Err(backend_error(format!(
            "{OP}: one {}x{}x{} matrix product does not fit this device's {}-byte \
             storage-buffer binding limit",
            p.m, p.n, p.k, limits.max_binding
        )));
    }
    let [wg, bm, bn, bk, tm, tn] = tile.spec();
    let spec = [wg, bm, bn, bk, tm, tn, u32::from(p.trans_b)];
    for z0 in (0..p.batch).step_by(chunk) {
        let nb = chunk.min(p.batch - z0);
        let aslice = a.slice(z0 * p.a_batch_stride, (nb - 1) * p.a_batch_stride + mk)?;
        let bslice = b.slice(z0 * p.b_batch_stride, (nb - 1) * p.b_batch_stride + kn)?;
        let cslice = c.slice(z0 * mn, nb * mn)?;
        let push = push::BatchedMatmul {
            m: u32_of(OP, "m", p.m)?,
            n: u32_of(OP, "n", p.n)?,
            k: u32_of(OP, "k", p.k)?,
            a_stride: u32_of(OP, "a batch stride", p.a_batch_stride)?,
            b_stride: u32_of(OP, "b batch stride", p.b_batch_stride)?,
            alpha: p.alpha,
            ..Default::default()
        };
        rec.dispatch(Dispatch {
            op: OP,
            shader: Shader::BatchedMatmul,
            spec: &spec,
            args: &[In(&aslice), In(&bslice), Out(&cslice)],
            push,
            groups: tile_groups(OP, [p.m, p.n], [bm, bn], nb as u32)?,
        })?;
    }
    Ok(())
}
