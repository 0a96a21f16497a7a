//! Attention: the strict f32 shader (`attention.comp`, its tile chosen here) and the
//! dispatch loop it shares with the fast-mode cooperative-matrix variants
//! ([`attention_cm`](super::attention_cm)).

use super::super::backend_error;
use super::super::context::{Coopmat2, Limits};
use super::super::probe::CoopMatShape;
use super::super::recording::Arg::{Absent, In, Out};
use super::super::recording::{Dispatch, VulkanRecording};
use super::super::shaders::{Shader, push};
use super::attention_cm::{fast_attention_kernel, split_attention_kernel, split_spec};
use super::{Ref, batches_per_dispatch, u32_of};
use crate::error::Result;
use crate::ops::{AttentionParams, MaskKind};

/// Tile shape of the attention shader: `bq` query rows per workgroup (a multiple of 4), keys
/// `bkv` at a time (a multiple of 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AttentionTile {
    workgroup: u32,
    bq: u32,
    bkv: u32,
}

impl AttentionTile {
    /// Shared memory of the shader's arrays (`attention.comp`): the q block and the k tile
    /// (rows of the head dimension padded to a multiple of 8, plus one vec4), the v tile, the
    /// probabilities, the per-key-pair row maxima and the per-row factors.
    fn shared_bytes(&self, head_dim: u32) -> u64 {
        let (bq, bkv) = (u64::from(self.bq), u64::from(self.bkv));
        let d4 = u64::from(head_dim).div_ceil(8) * 2;
        16 * (bq * (d4 + 1) + bkv * (d4 + 1) + bkv * d4 + bkv * bq / 4 + bq / 4) + 4 * bkv / 2 * bq
    }

    fn fits(&self, head_dim: u32, l: &Limits) -> bool {
        self.bq.is_multiple_of(4)
            && self.bkv.is_multiple_of(2)
            && self.bq > 0
            && self.bkv > 0
            && self.workgroup > 0
            && self.workgroup <= l.max_workgroup_invocations
            && self.workgroup <= l.max_workgroup_size[0]
            && self.shared_bytes(head_dim) <= u64::from(l.max_shared_memory)
    }
}

/// Attention tiles (bq, bkv, workgroup) from the largest down; each workgroup has one
/// invocation per 2 x 2 score tile (`bq * bkv / 4`). Measured on the H200 (48 KiB) at Kimodo's
/// shape (3 x 202 tokens x 8 heads of 128): 64 x 8 86.7 us, 32 x 16 96.9 us, 16 x 32 97.5 us,
/// 16 x 16 137 us (more, smaller workgroups were slower). lavapipe (32 KiB) takes 16 x 16.
const ATTENTION_TILES: [(u32, u32, u32); 6] = [
    (64, 8, 128),
    (32, 16, 128),
    (16, 16, 64),
    (8, 8, 32),
    (4, 4, 32),
    (4, 2, 32),
];

/// The attention tile for `head_dim`: `KINEMA_VK_ATTENTION_TILE=bq,bkv,workgroup` when set
/// (for tuning on a new device; an error when it does not fit), else the largest of
/// [`ATTENTION_TILES`] that fits the device's shared memory and workgroup limits (`None` when
/// even the smallest does not).
fn attention_tile(head_dim: usize, l: &Limits) -> Result<Option<AttentionTile>> {
    let Ok(d) = u32::try_from(head_dim) else {
        return Ok(None);
    };
    if let Ok(s) = std::env::var("KINEMA_VK_ATTENTION_TILE") {
        let v: Vec<u32> = s.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        let t = match v[..] {
            [bq, bkv, workgroup] => AttentionTile { workgroup, bq, bkv },
            _ => {
                return Err(backend_error(format!(
                    "KINEMA_VK_ATTENTION_TILE={s:?}: expected bq,bkv,workgroup"
                )));
            }
        };
        if !t.fits(d, l) {
            return Err(backend_error(format!(
                "KINEMA_VK_ATTENTION_TILE={s:?}: bq must be a multiple of 4 and bkv of 2, and \
                 the tile must fit this device ({} bytes of shared memory, {} invocations)",
                l.max_shared_memory, l.max_workgroup_invocations
            )));
        }
        return Ok(Some(t));
    }
    Ok(ATTENTION_TILES
        .into_iter()
        .map(|(bq, bkv, workgroup)| AttentionTile { workgroup, bq, bkv })
        .find(|t| t.fits(d, l)))
}

/// `q`, `k`, `v`, `mask`, `out` as checked by `check::attention`. One workgroup per (query
/// block, query head, batch); batches are split over several dispatches when they exceed the
/// device's z workgroup count or one storage-buffer binding. With a cooperative-matrix shape
/// `coopmat` (fast mode on a device that has one) a fast-mode kernel runs where one fits
/// ([`fast_attention_kernel`]; `coopmat2`, the device's workgroup-scope matrices, admits the
/// workgroup-scope one), else the strict f32 shader. With `split` (split precision's
/// workgroup-scope matrices) the split-operand kernel runs where [`split_attention_kernel`]
/// takes the head dimension.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    rec: &mut VulkanRecording,
    p: &AttentionParams,
    q: &Ref,
    k: &Ref,
    v: &Ref,
    mask: Option<&Ref>,
    out: &Ref,
    coopmat: Option<CoopMatShape>,
    coopmat2: Option<Coopmat2>,
    split: Option<Coopmat2>,
) -> Result<()> {
    let qkv = [q, k, v];
    if let Some(f) = split.and_then(|c2| split_attention_kernel(p, &c2, rec.limits())) {
        let spec = split_spec(&f, rec.limits());
        return attention_with(rec, p, qkv, mask, out, f.shader, &spec, f.bq);
    }
    let fast = coopmat.and_then(|s| fast_attention_kernel(p, &s, coopmat2.as_ref(), rec.limits()));
    if let Some(f) = fast {
        let spec = f.spec(rec.limits());
        return attention_with(rec, p, qkv, mask, out, f.shader, &spec, f.bq);
    }
    let limits = rec.limits();
    let tile = attention_tile(p.head_dim, limits)?.ok_or_else(|| {
        backend_error(format!(
            "attention: head_dim {} needs more shared memory than this device's {} bytes",
            p.head_dim, limits.max_shared_memory
        ))
    })?;
    let spec = [
        tile.workgroup,
        u32_of("attention", "head_dim", p.head_dim)?,
        tile.bq,
        tile.bkv,
    ];
    let shader = Shader::Attention;
    attention_with(rec, p, qkv, mask, out, shader, &spec, tile.bq)
}

/// The dispatches of an attention shader (`attention.comp` or a fast variant; they share
/// bindings and push constants) with specialization constants `spec` and `bq` query rows per
/// workgroup: one workgroup per (query block, query head, batch), batches split over several
/// dispatches when they exceed the device's z workgroup count or one storage-buffer binding.
#[allow(clippy::too_many_arguments)]
fn attention_with(
    rec: &mut VulkanRecording,
    p: &AttentionParams,
    [q, k, v]: [&Ref; 3],
    mask: Option<&Ref>,
    out: &Ref,
    shader: Shader,
    spec: &[u32],
    bq: u32,
) -> Result<()> {
    const OP: &str = "attention";
    let limits = rec.limits();
    let d = p.head_dim;
    // Elements from one batch to the next, and the span one batch reads or writes.
    let q_step = p.q_len * p.q_row_stride;
    let q_span = (p.q_len - 1) * p.q_row_stride + p.q_heads * d;
    let kv_step = p.kv_len * p.kv_row_stride;
    let kv_span = (p.kv_len - 1) * p.kv_row_stride + p.kv_heads * d;
    let o_step = p.q_len * p.q_heads * d;
    let operands = [
        (q_step, q_span),
        (kv_step, kv_span),
        (p.kv_len, p.kv_len),
        (o_step, o_step),
    ];
    let chunk = batches_per_dispatch(limits, &operands, p.batch);
    if chunk == 0 {
        return Err(backend_error(format!(
            "{OP}: one batch does not fit this device's {}-byte storage-buffer binding limit",
            limits.max_binding
        )));
    }
    let mask_kind = match p.mask {
        MaskKind::None => 0,
        MaskKind::KeyPadding => 1,
        MaskKind::Causal => 2,
    };
    let groups_xy = [
        u32_of(OP, "query blocks", p.q_len.div_ceil(bq as usize))?,
        u32_of(OP, "q_heads", p.q_heads)?,
    ];
    for z0 in (0..p.batch).step_by(chunk) {
        let nb = chunk.min(p.batch - z0);
        let qs = q.slice(z0 * q_step, (nb - 1) * q_step + q_span)?;
        let ks = k.slice(z0 * kv_step, (nb - 1) * kv_step + kv_span)?;
        let vs = v.slice(z0 * kv_step, (nb - 1) * kv_step + kv_span)?;
        let ms = mask
            .map(|m| m.slice(z0 * p.kv_len, nb * p.kv_len))
            .transpose()?;
        let os = out.slice(z0 * o_step, nb * o_step)?;
        let push = push::Attention {
            q_len: u32_of(OP, "q_len", p.q_len)?,
            kv_len: u32_of(OP, "kv_len", p.kv_len)?,
            q_heads: groups_xy[1],
            group: (p.q_heads / p.kv_heads) as u32,
            q_stride: u32_of(OP, "q_row_stride", p.q_row_stride)?,
            kv_stride: u32_of(OP, "kv_row_stride", p.kv_row_stride)?,
            scale: p.scale,
            mask_kind,
            ..Default::default()
        };
        rec.dispatch(Dispatch {
            op: OP,
            shader,
            spec,
            args: &[
                In(&qs),
                In(&ks),
                In(&vs),
                ms.as_ref().map_or(Absent, In),
                Out(&os),
            ],
            push,
            groups: [groups_xy[0], groups_xy[1], nb as u32],
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_limits as limits;
    use super::*;

    #[test]
    fn attention_tiles_fit_shared_memory() {
        let tile = |d, l: &Limits| attention_tile(d, l).unwrap();
        let l = limits(1024, 32768);
        for d in [8, 64, 80, 128, 256] {
            let t = tile(d, &l).unwrap();
            assert!(t.shared_bytes(d as u32) <= 32768, "{d}: {t:?}");
        }
        // lavapipe: 32 KiB; the H200: 48 KiB.
        assert_eq!(tile(128, &l).unwrap().bq, 16);
        let t = tile(128, &limits(1024, 49152)).unwrap();
        assert_eq!((t.bq, t.bkv, t.workgroup), (64, 8, 128));
        assert_eq!(tile(256, &limits(1024, 49152)).unwrap().bq, 8);
        assert_eq!(tile(64, &limits(32, 32768)).unwrap().bq, 8);
        assert_eq!(tile(4096, &l), None);
    }
}
