//! Embedding gather: rows of a (possibly f16/bf16/q8_0) table widened to f32.

use super::{Cx, Weights};
use crate::error::{Error, Result};
use crate::ops::EmbeddingParams;

pub mod reference {
    use super::super::Weights;
    use crate::error::{Error, Result};
    use crate::ops::EmbeddingParams;

    pub fn embedding(
        p: &EmbeddingParams,
        ids: &[u32],
        table: Weights,
        out: &mut [f32],
    ) -> Result<()> {
        for (t, &id) in ids[..p.tokens].iter().enumerate() {
            if id as usize >= p.vocab {
                return Err(Error::Kernel {
                    op: "embedding",
                    msg: format!(
                        "token id {id} at position {t} is outside the {}-row table",
                        p.vocab
                    ),
                });
            }
            table.widen_into(id as usize * p.dim, &mut out[t * p.dim..(t + 1) * p.dim]);
        }
        Ok(())
    }
}

pub fn embedding(
    cx: &Cx,
    p: &EmbeddingParams,
    ids: &[u32],
    table: Weights,
    out: &mut [f32],
) -> Result<()> {
    let _ = cx;
    if let Some((t, id)) = ids[..p.tokens]
        .iter()
        .enumerate()
        .find(|(_, id)| **id as usize >= p.vocab)
    {
        return Err(Error::Kernel {
            op: "embedding",
            msg: format!(
                "token id {id} at position {t} is outside the {}-row table",
                p.vocab
            ),
        });
    }
    reference::embedding(p, ids, table, out)
}
