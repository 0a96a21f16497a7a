//! Token-level ops: the embedding lookup (split over table and token ranges that fit a
//! binding, with the run-time id check) and masked mean pooling.

use super::super::recording::Arg::{Absent, In, Out};
use super::super::recording::{Dispatch, RunCheck, VulkanRecording};
use super::super::shaders::{Shader, push};
use super::{Ref, elementwise, float_dtype_code, rows_per_binding, u32_of};
use crate::error::Result;
use crate::ops::{EmbeddingParams, MeanPoolParams};

/// `ids`, `table`, `out` as checked by `check::embedding`. A table larger than one binding is
/// split into row ranges, one dispatch each writing the tokens whose ids fall in its range
/// (and an output larger than one binding into token ranges); the dispatch of each token range
/// that starts at row 0 also writes zeros for ids outside the table and records them in
/// status words the backend checks after the run ([`RunCheck`]).
pub(crate) fn embedding(
    rec: &mut VulkanRecording,
    p: &EmbeddingParams,
    ids: &Ref,
    table: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "embedding";
    let n = p.tokens * p.dim;
    if n == 0 {
        return Ok(());
    }
    u32_of(OP, "tokens * dim", n)?;
    let row_bytes = table
        .dtype
        .bytes_for(p.dim)
        .expect("checked: whole q8_0 blocks") as u64;
    let table_rows = rows_per_binding(OP, "row", rec.limits(), row_bytes)?;
    let token_rows = rows_per_binding(OP, "row", rec.limits(), 4 * p.dim as u64)?;
    let status = rec.status_words()?;
    let wg = rec.elementwise_workgroup();
    let spec = [wg, float_dtype_code(table.dtype)];
    let base = push::Embedding {
        vocab: u32_of(OP, "vocab", p.vocab)?,
        dim: u32_of(OP, "dim", p.dim)?,
        ..Default::default()
    };
    for t0 in (0..p.tokens).step_by(token_rows) {
        let nt = token_rows.min(p.tokens - t0);
        let ids_s = ids.slice(t0, nt)?;
        let out_s = out.slice(t0 * p.dim, nt * p.dim)?;
        let groups = rec.grid(OP, (nt * p.dim) as u64, wg)?;
        // An empty table still needs the dispatch that zeroes and reports every token.
        for row0 in (0..p.vocab.max(1)).step_by(table_rows) {
            let nr = table_rows.min(p.vocab.saturating_sub(row0));
            let ts = table.slice(row0 * p.dim, nr * p.dim)?;
            let check = row0 == 0;
            let push = push::Embedding {
                tokens: nt as u32,
                t0: t0 as u32,
                row0: row0 as u32,
                rows: nr as u32,
                check: u32::from(check),
                ..base
            };
            let status_arg = if check { Out(&status) } else { Absent };
            rec.dispatch(Dispatch {
                op: OP,
                shader: Shader::Embedding,
                spec: &spec,
                args: &[In(&ids_s), In(&ts), Out(&out_s), status_arg],
                push,
                groups,
            })?;
        }
    }
    rec.add_check(RunCheck {
        status: status.buf,
        vocab: p.vocab,
    });
    Ok(())
}

pub(crate) fn mean_pool(
    rec: &mut VulkanRecording,
    p: &MeanPoolParams,
    x: &Ref,
    mask: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "mean_pool";
    let n = p.batch * p.dim;
    let push = push::MeanPool {
        batch: u32_of(OP, "batch", p.batch)?,
        seq: u32_of(OP, "seq", p.seq)?,
        dim: u32_of(OP, "dim", p.dim)?,
        ..Default::default()
    };
    u32_of(OP, "batch * dim", n)?;
    let args = [In(x), In(mask), Out(out)];
    elementwise(rec, OP, Shader::MeanPool, &args, push, n)
}
