//! The graph's data-movement and selection ops: embedding gather, reshape, strided copies
//! (slice, transpose, concat), mean pooling, argmax and Gumbel sampling.

use super::*;

impl Graph {
    /// Rows of `table [vocab, dim]` for u32 ids of any shape: output `ids.shape + [dim]`.
    pub fn embedding(&mut self, ids: TensorId, table: TensorId) -> Result<TensorId> {
        const OP: &str = "embedding";
        let is = self.check(OP, "ids", ids, &[DType::U32])?.shape.clone();
        let ts = self
            .check(
                OP,
                "table",
                table,
                &[DType::F32, DType::F16, DType::BF16, DType::Q8_0],
            )?
            .shape
            .clone();
        if ts.len() != 2 || is.len() >= MAX_RANK {
            return Err(self.err(OP, format!("table {ts:?} must be [vocab, dim]")));
        }
        let mut out = is.clone();
        out.push(ts[1]);
        let p = EmbeddingParams {
            tokens: is.iter().product(),
            vocab: ts[0],
            dim: ts[1],
        };
        self.push(
            Op::Embedding(p),
            &[Some(ids), Some(table)],
            DType::F32,
            &out,
        )
    }

    pub fn reshape(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        let info = self.check("reshape", "x", x, &DType::ALL)?.clone();
        if numel(shape) != Some(info.numel()) {
            return Err(self.err(
                "reshape",
                format!("{:?} -> {shape:?} changes the element count", info.shape),
            ));
        }
        let base = match info.kind {
            TensorKind::Alias(b) => b,
            _ => x,
        };
        self.add_tensor(
            &format!("{}:reshape", info.name),
            info.dtype,
            shape,
            TensorKind::Alias(base),
        )
    }

    fn copy_node(
        &mut self,
        x: TensorId,
        src_layout: crate::tensor::Layout,
        out: TensorId,
        dst_layout: crate::tensor::Layout,
        accumulates: bool,
    ) {
        let p = CopyParams {
            shape: src_layout.shape().to_vec(),
            src_strides: src_layout.strides().to_vec(),
            src_offset: src_layout.offset(),
            dst_strides: dst_layout.strides().to_vec(),
            dst_offset: dst_layout.offset(),
        };
        self.nodes.push(Node {
            op: Op::Copy(p),
            inputs: vec![Some(x.into())],
            output: out,
            accumulates,
        });
    }

    fn copy_like(
        &mut self,
        op: &'static str,
        x: TensorId,
        src: crate::tensor::Layout,
    ) -> Result<TensorId> {
        let dtype = self
            .check(
                op,
                "x",
                x,
                &[DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32],
            )?
            .dtype;
        let shape = src.shape().to_vec();
        let out = self.add_tensor(
            &format!("{op}#{}", self.nodes.len()),
            dtype,
            &shape,
            TensorKind::Value,
        )?;
        let dst = crate::tensor::Layout::contiguous(&shape)?;
        self.copy_node(x, src, out, dst, false);
        Ok(out)
    }

    /// Elements `start..start+len` of dimension `dim` (a copy).
    pub fn slice(&mut self, x: TensorId, dim: usize, start: usize, len: usize) -> Result<TensorId> {
        let l = crate::tensor::Layout::contiguous(&self.shape_of(x))?
            .narrow(dim, start, len)
            .map_err(|e| self.err("slice", e.to_string()))?;
        self.copy_like("slice", x, l)
    }

    /// Swap two dimensions (a copy into the new row-major order).
    pub fn transpose(&mut self, x: TensorId, a: usize, b: usize) -> Result<TensorId> {
        let l = crate::tensor::Layout::contiguous(&self.shape_of(x))?
            .transpose(a, b)
            .map_err(|e| self.err("transpose", e.to_string()))?;
        self.copy_like("transpose", x, l)
    }

    pub fn copy(&mut self, x: TensorId) -> Result<TensorId> {
        let l = crate::tensor::Layout::contiguous(&self.shape_of(x))?;
        self.copy_like("copy", x, l)
    }

    /// Join tensors along `dim` (one copy node per piece).
    pub fn concat(&mut self, xs: &[TensorId], dim: usize) -> Result<TensorId> {
        const OP: &str = "concat";
        let first = *xs
            .first()
            .ok_or_else(|| self.err(OP, "nothing to concatenate"))?;
        let dtype = self
            .check(
                OP,
                "piece 0",
                first,
                &[DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32],
            )?
            .dtype;
        let mut shape = self.shape_of(first);
        if dim >= shape.len() {
            return Err(self.err(OP, format!("dim {dim} outside rank {}", shape.len())));
        }
        let mut total = 0;
        for (i, &x) in xs.iter().enumerate() {
            let s = self.check(OP, "piece", x, &[dtype])?.shape.clone();
            let same = s.len() == shape.len()
                && s.iter()
                    .zip(&shape)
                    .enumerate()
                    .all(|(d, (a, b))| d == dim || a == b);
            if !same {
                return Err(self.err(
                    OP,
                    format!(
                        "piece {i} has shape {s:?}, incompatible with {shape:?} along dim {dim}"
                    ),
                ));
            }
            total += s[dim];
        }
        shape[dim] = total;
        let out = self.add_tensor(
            &format!("concat#{}", self.nodes.len()),
            dtype,
            &shape,
            TensorKind::Value,
        )?;
        let full = crate::tensor::Layout::contiguous(&shape)?;
        let mut at = 0;
        for (i, &x) in xs.iter().enumerate() {
            let s = self.shape_of(x);
            let src = crate::tensor::Layout::contiguous(&s)?;
            let dst = full.narrow(dim, at, s[dim])?;
            self.copy_node(x, src, out, dst, i > 0);
            at += s[dim];
        }
        Ok(out)
    }

    /// Masked mean over `x [batch, seq, dim]` with u32 mask `[batch, seq]`.
    pub fn mean_pool(&mut self, x: TensorId, mask: TensorId) -> Result<TensorId> {
        const OP: &str = "mean_pool";
        let xs = self.check(OP, "x", x, &[DType::F32])?.shape.clone();
        let ms = self.check(OP, "mask", mask, &[DType::U32])?.shape.clone();
        if xs.len() != 3 || ms != xs[..2] {
            return Err(self.err(
                OP,
                format!("x {xs:?} must be [batch, seq, dim] and mask {ms:?} [batch, seq]"),
            ));
        }
        let p = MeanPoolParams {
            batch: xs[0],
            seq: xs[1],
            dim: xs[2],
        };
        self.push(
            Op::MeanPool(p),
            &[Some(x), Some(mask)],
            DType::F32,
            &[xs[0], xs[2]],
        )
    }

    /// First maximum along the last axis: u32 output without that axis.
    pub fn argmax(&mut self, x: TensorId) -> Result<TensorId> {
        let (rows, cols, xs) = self.row_op_dims("argmax", x)?;
        self.push(
            Op::Argmax(ArgmaxParams { rows, cols }),
            &[Some(x)],
            DType::U32,
            &xs[..xs.len() - 1],
        )
    }

    /// Gumbel-max sampling along the last axis (see [`GumbelParams`]); `uniforms` (same shape
    /// as the logits) replaces the generator when given.
    pub fn gumbel(
        &mut self,
        logits: TensorId,
        uniforms: Option<TensorId>,
        temperature: f32,
        seed: u64,
        counter: u64,
    ) -> Result<TensorId> {
        let (rows, cols, xs) = self.row_op_dims("gumbel", logits)?;
        if let Some(u) = uniforms {
            let us = &self.check("gumbel", "uniforms", u, &[DType::F32])?.shape;
            if *us != xs {
                return Err(self.err(
                    "gumbel",
                    format!("uniforms {us:?} must match logits {xs:?}"),
                ));
            }
        }
        let p = GumbelParams {
            rows,
            cols,
            temperature,
            seed,
            counter,
        };
        self.push(
            Op::Gumbel(p),
            &[Some(logits), uniforms],
            DType::U32,
            &xs[..xs.len() - 1],
        )
    }
}
