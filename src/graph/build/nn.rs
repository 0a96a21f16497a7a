//! The graph's neural-network ops: linear, matmul, norms, softmax, attention, activations,
//! RoPE, conv1d, upsampling and the elementwise arithmetic.

use super::*;

impl Graph {
    /// `x [.., k] . w[n, k]^T + b[n]`, then `act`: output `[.., n]`.
    pub fn linear(
        &mut self,
        x: TensorId,
        w: TensorId,
        b: Option<TensorId>,
        act: Activation,
    ) -> Result<TensorId> {
        const OP: &str = "linear";
        let xs = self.check(OP, "x", x, &[DType::F32])?.shape.clone();
        let ws = self
            .check(
                OP,
                "weight",
                w,
                &[DType::F32, DType::F16, DType::BF16, DType::Q8_0],
            )?
            .shape
            .clone();
        if ws.len() != 2 || xs.is_empty() || xs[xs.len() - 1] != ws[1] {
            return Err(self.err(
                OP,
                format!("x {xs:?} and weight {ws:?} do not fit: need x [.., k] and weight [n, k]"),
            ));
        }
        let (n, k) = (ws[0], ws[1]);
        if let Some(b) = b {
            let bs = self.check(OP, "bias", b, &[DType::F32])?.shape.clone();
            if bs != [n] {
                return Err(self.err(OP, format!("bias {bs:?} must be [{n}]")));
            }
        }
        let m = xs[..xs.len() - 1].iter().product();
        let mut out = xs.clone();
        *out.last_mut().expect("non-empty") = n;
        self.push(
            Op::Linear(LinearParams {
                m,
                n,
                k,
                activation: act,
            }),
            &[Some(x), Some(w), b],
            DType::F32,
            &out,
        )
    }

    /// `c[b] = alpha a[b] . op(b[b])` for `a [batch, m, k]` and `b [batch, k, n]` (or
    /// `[batch, n, k]` with `trans_b`). A rank-2 `b` is broadcast over the batch.
    pub fn batched_matmul(
        &mut self,
        a: TensorId,
        b: TensorId,
        trans_b: bool,
        alpha: f32,
    ) -> Result<TensorId> {
        const OP: &str = "batched_matmul";
        let as_ = self.check(OP, "a", a, &[DType::F32])?.shape.clone();
        let bs = self.check(OP, "b", b, &[DType::F32])?.shape.clone();
        if as_.len() != 3 || !(bs.len() == 3 || bs.len() == 2) {
            return Err(self.err(
                OP,
                format!("a {as_:?} must be [batch, m, k] and b {bs:?} [batch, k, n] or [k, n]"),
            ));
        }
        let (batch, m, k) = (as_[0], as_[1], as_[2]);
        let (bb, r, c) = if bs.len() == 3 {
            (bs[0], bs[1], bs[2])
        } else {
            (batch, bs[0], bs[1])
        };
        let (bk, n) = if trans_b { (c, r) } else { (r, c) };
        if bb != batch || bk != k {
            return Err(self.err(
                OP,
                format!("a {as_:?} and b {bs:?} (trans_b {trans_b}) do not fit"),
            ));
        }
        let p = BatchedMatmulParams {
            batch,
            m,
            n,
            k,
            trans_b,
            alpha,
            a_batch_stride: m * k,
            b_batch_stride: if bs.len() == 3 { k * n } else { 0 },
        };
        self.push(
            Op::BatchedMatmul(p),
            &[Some(a), Some(b)],
            DType::F32,
            &[batch, m, n],
        )
    }

    pub(super) fn row_op_dims(
        &self,
        op: &'static str,
        x: TensorId,
    ) -> Result<(usize, usize, Vec<usize>)> {
        let xs = self.check(op, "x", x, &[DType::F32])?.shape.clone();
        let cols = *xs
            .last()
            .ok_or_else(|| self.err(op, "x must have at least one dimension"))?;
        if cols == 0 {
            return Err(self.err(op, "the last dimension is empty"));
        }
        Ok((xs.iter().product::<usize>() / cols, cols, xs))
    }

    pub(super) fn check_vec(
        &self,
        op: &'static str,
        what: &str,
        t: TensorId,
        len: usize,
    ) -> Result<()> {
        let s = &self.check(op, what, t, &[DType::F32])?.shape;
        if s.as_slice() != [len] {
            return Err(self.err(op, format!("{what} {s:?} must be [{len}]")));
        }
        Ok(())
    }

    pub fn layer_norm(
        &mut self,
        x: TensorId,
        gamma: Option<TensorId>,
        beta: Option<TensorId>,
        eps: f32,
    ) -> Result<TensorId> {
        const OP: &str = "layer_norm";
        let (p, xs) = self.layer_norm_dims(OP, x, gamma, beta, eps)?;
        self.push(Op::LayerNorm(p), &[Some(x), gamma, beta], DType::F32, &xs)
    }

    /// `layer_norm(x + r)` in one op (a post-norm block's residual and norm): `r` has `x`'s
    /// shape; the result is bit-identical to [`Graph::add`] then [`Graph::layer_norm`].
    pub fn add_layer_norm(
        &mut self,
        x: TensorId,
        r: TensorId,
        gamma: Option<TensorId>,
        beta: Option<TensorId>,
        eps: f32,
    ) -> Result<TensorId> {
        const OP: &str = "add_layer_norm";
        let (p, xs) = self.layer_norm_dims(OP, x, gamma, beta, eps)?;
        let rs = &self.check(OP, "r", r, &[DType::F32])?.shape;
        if *rs != xs {
            return Err(self.err(OP, format!("x {xs:?} and r {rs:?} differ")));
        }
        let ins = [Some(x), Some(r), gamma, beta];
        self.push(Op::AddLayerNorm(p), &ins, DType::F32, &xs)
    }

    /// The parameters and shape of a LayerNorm over `x`'s last dimension, with gamma and beta
    /// checked against it.
    fn layer_norm_dims(
        &self,
        op: &'static str,
        x: TensorId,
        gamma: Option<TensorId>,
        beta: Option<TensorId>,
        eps: f32,
    ) -> Result<(NormParams, Vec<usize>)> {
        let (rows, cols, xs) = self.row_op_dims(op, x)?;
        for (what, t) in [("gamma", gamma), ("beta", beta)] {
            if let Some(t) = t {
                self.check_vec(op, what, t, cols)?;
            }
        }
        Ok((NormParams { rows, cols, eps }, xs))
    }

    pub fn rms_norm(&mut self, x: TensorId, gamma: Option<TensorId>, eps: f32) -> Result<TensorId> {
        const OP: &str = "rms_norm";
        let (rows, cols, xs) = self.row_op_dims(OP, x)?;
        if let Some(g) = gamma {
            self.check_vec(OP, "gamma", g, cols)?;
        }
        self.push(
            Op::RmsNorm(NormParams { rows, cols, eps }),
            &[Some(x), gamma],
            DType::F32,
            &xs,
        )
    }

    pub fn softmax(&mut self, x: TensorId, scale: f32) -> Result<TensorId> {
        let (rows, cols, xs) = self.row_op_dims("softmax", x)?;
        self.push(
            Op::Softmax(SoftmaxParams { rows, cols, scale }),
            &[Some(x)],
            DType::F32,
            &xs,
        )
    }

    /// Attention over `q [batch, q_len, q_heads*head_dim]`, `k`/`v [batch, kv_len,
    /// kv_heads*head_dim]`; output `[batch, q_len, q_heads*head_dim]`. `mask` (u32
    /// `[batch, kv_len]`) is required for [`MaskKind::KeyPadding`].
    pub fn attention(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        q_heads: usize,
        kv_heads: usize,
        kind: MaskKind,
    ) -> Result<TensorId> {
        const OP: &str = "attention";
        let qs = self.check(OP, "q", q, &[DType::F32])?.shape.clone();
        let ks = self.check(OP, "k", k, &[DType::F32])?.shape.clone();
        let vs = self.check(OP, "v", v, &[DType::F32])?.shape.clone();
        if qs.len() != 3 || ks.len() != 3 || ks != vs || qs[0] != ks[0] {
            return Err(self.err(
                OP,
                format!(
                    "q {qs:?}, k {ks:?}, v {vs:?} must be [batch, len, heads*head_dim] with k == v"
                ),
            ));
        }
        if q_heads == 0
            || kv_heads == 0
            || qs[2] % q_heads != 0
            || !q_heads.is_multiple_of(kv_heads)
        {
            return Err(self.err(
                OP,
                format!(
                    "{q_heads} query heads / {kv_heads} kv heads do not divide width {} evenly",
                    qs[2]
                ),
            ));
        }
        let head_dim = qs[2] / q_heads;
        if ks[2] != kv_heads * head_dim {
            return Err(self.err(
                OP,
                format!("k width {} is not {kv_heads} heads of {head_dim}", ks[2]),
            ));
        }
        self.check_mask(OP, kind, mask, qs[0], ks[1])?;
        let p = AttentionParams {
            batch: qs[0],
            q_len: qs[1],
            kv_len: ks[1],
            q_heads,
            kv_heads,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            mask: kind,
            q_row_stride: qs[2],
            kv_row_stride: ks[2],
        };
        self.push(
            Op::Attention(p),
            &[Some(q), Some(k), Some(v), mask],
            DType::F32,
            &qs,
        )
    }

    /// An attention mask: a `[batch, kv_len]` U32 tensor for a key-padding mask, none for
    /// the other kinds.
    fn check_mask(
        &self,
        op: &'static str,
        kind: MaskKind,
        mask: Option<TensorId>,
        batch: usize,
        kv_len: usize,
    ) -> Result<()> {
        match (kind, mask) {
            (MaskKind::KeyPadding, Some(m)) => {
                let ms = &self.check(op, "mask", m, &[DType::U32])?.shape;
                if ms.as_slice() != [batch, kv_len] {
                    return Err(self.err(op, format!("mask {ms:?} must be [{batch}, {kv_len}]")));
                }
            }
            (MaskKind::KeyPadding, None) => {
                return Err(self.err(op, "a key-padding mask needs a mask tensor"));
            }
            (_, Some(_)) => {
                return Err(self.err(
                    op,
                    format!("a mask tensor was given for mask kind {kind:?}"),
                ));
            }
            (_, None) => {}
        }
        Ok(())
    }

    /// Attention reading q, k and v in place from one fused projection
    /// `qkv [batch, len, (q_heads + 2 kv_heads) * head_dim]` (q columns first, then k, then
    /// v, as PyTorch's `in_proj`); output `[batch, len, q_heads * head_dim]`.
    pub fn attention_qkv(
        &mut self,
        qkv: TensorId,
        mask: Option<TensorId>,
        q_heads: usize,
        kv_heads: usize,
        kind: MaskKind,
    ) -> Result<TensorId> {
        const OP: &str = "attention_qkv";
        let s = self.check(OP, "qkv", qkv, &[DType::F32])?.shape.clone();
        let heads = q_heads + 2 * kv_heads;
        if s.len() != 3
            || q_heads == 0
            || kv_heads == 0
            || !q_heads.is_multiple_of(kv_heads)
            || !s[2].is_multiple_of(heads)
        {
            return Err(self.err(
                OP,
                format!(
                    "qkv {s:?} must be [batch, len, (q_heads + 2 kv_heads) * head_dim] \
                     for {q_heads} query and {kv_heads} kv heads"
                ),
            ));
        }
        let head_dim = s[2] / heads;
        self.check_mask(OP, kind, mask, s[0], s[1])?;
        let p = AttentionParams {
            batch: s[0],
            q_len: s[1],
            kv_len: s[1],
            q_heads,
            kv_heads,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            mask: kind,
            q_row_stride: s[2],
            kv_row_stride: s[2],
        };
        // q, k and v are column blocks of each row, read in place through the row strides.
        let at = |offset: usize| {
            Some(Operand {
                tensor: qkv,
                offset,
            })
        };
        let (qw, kw) = (q_heads * head_dim, kv_heads * head_dim);
        self.push_operands(
            OP,
            Op::Attention(p),
            vec![at(0), at(qw), at(qw + kw), mask.map(Operand::from)],
            DType::F32,
            &[s[0], s[1], q_heads * head_dim],
        )
    }

    pub fn activation(&mut self, x: TensorId, act: Activation) -> Result<TensorId> {
        let xs = self
            .check("activation", "x", x, &[DType::F32])?
            .shape
            .clone();
        self.push(Op::Activation(act), &[Some(x)], DType::F32, &xs)
    }

    pub fn swiglu(&mut self, gate: TensorId, up: TensorId) -> Result<TensorId> {
        let gs = self
            .check("swiglu", "gate", gate, &[DType::F32])?
            .shape
            .clone();
        let us = self.check("swiglu", "up", up, &[DType::F32])?.shape.clone();
        if gs != us {
            return Err(self.err("swiglu", format!("gate {gs:?} and up {us:?} differ")));
        }
        let n =
            numel(&gs).ok_or_else(|| self.err("swiglu", format!("gate {gs:?} is too large")))?;
        self.push(
            Op::Swiglu(SwigluParams::contiguous(n)),
            &[Some(gate), Some(up)],
            DType::F32,
            &gs,
        )
    }

    /// `silu(gate) * up` of one fused gate/up projection `x [.., 2 f]` (each row the gate's f
    /// values, then the up's): `[.., f]`, the halves read in place.
    pub fn swiglu_fused(&mut self, x: TensorId) -> Result<TensorId> {
        const OP: &str = "swiglu_fused";
        let xs = self.check(OP, "x", x, &[DType::F32])?.shape.clone();
        let Some((&width, lead)) = xs.split_last().filter(|(w, _)| **w > 0 && *w % 2 == 0) else {
            return Err(self.err(OP, format!("x {xs:?} must be [.., 2 f] with f > 0")));
        };
        let cols = width / 2;
        let rows = numel(lead).ok_or_else(|| self.err(OP, format!("x {xs:?} is too large")))?;
        let mut ys = lead.to_vec();
        ys.push(cols);
        let at = |offset: usize| Some(Operand { tensor: x, offset });
        self.push_operands(
            OP,
            Op::Swiglu(SwigluParams {
                rows,
                cols,
                stride: width,
            }),
            vec![at(0), at(cols)],
            DType::F32,
            &ys,
        )
    }

    /// RoPE on `x [tokens, heads*head_dim]` with i32 positions `[tokens]` and inv_freq
    /// `[head_dim/2]`.
    pub fn rope(
        &mut self,
        x: TensorId,
        positions: TensorId,
        inv_freq: TensorId,
        heads: usize,
        pairing: RopePairing,
    ) -> Result<TensorId> {
        const OP: &str = "rope";
        let xs = self.check(OP, "x", x, &[DType::F32])?.shape.clone();
        if xs.len() < 2 || heads == 0 || xs[xs.len() - 1] % (2 * heads) != 0 {
            return Err(self.err(OP, format!("x {xs:?} must be [.., tokens, heads*head_dim] with an even head_dim over {heads} heads")));
        }
        let head_dim = xs[xs.len() - 1] / heads;
        self.rope_leading(x, positions, inv_freq, heads, head_dim, pairing)
    }

    /// RoPE on the first `heads` heads of `head_dim` values of each row of `x [.., tokens,
    /// row]` (a fused Q/K/V projection's query and key heads), with i32 positions `[tokens]`
    /// and inv_freq `[head_dim/2]`; the rest of each row (the values) is copied.
    pub fn rope_leading(
        &mut self,
        x: TensorId,
        positions: TensorId,
        inv_freq: TensorId,
        heads: usize,
        head_dim: usize,
        pairing: RopePairing,
    ) -> Result<TensorId> {
        const OP: &str = "rope";
        let xs = self.check(OP, "x", x, &[DType::F32])?.shape.clone();
        let row = xs.last().copied().unwrap_or(0);
        if xs.len() < 2
            || heads == 0
            || head_dim == 0
            || !head_dim.is_multiple_of(2)
            || heads.checked_mul(head_dim).is_none_or(|r| r > row)
        {
            return Err(self.err(
                OP,
                format!(
                    "x {xs:?} must be [.., tokens, row] with {heads} leading heads of an even \
                     head_dim {head_dim} in each row"
                ),
            ));
        }
        let tokens = xs[..xs.len() - 1].iter().product();
        let ps = &self.check(OP, "positions", positions, &[DType::I32])?.shape;
        if numel(ps) != Some(tokens) {
            return Err(self.err(OP, format!("positions {ps:?} must hold {tokens} values")));
        }
        self.check_vec(OP, "inv_freq", inv_freq, head_dim / 2)?;
        self.push(
            Op::Rope(RopeParams {
                tokens,
                heads,
                head_dim,
                pairing,
                row_stride: row,
            }),
            &[Some(x), Some(positions), Some(inv_freq)],
            DType::F32,
            &xs,
        )
    }

    /// `x [batch, c_in, len]`, `w [c_out, c_in, kernel]`.
    pub fn conv1d(
        &mut self,
        x: TensorId,
        w: TensorId,
        b: Option<TensorId>,
        padding: usize,
        dilation: usize,
    ) -> Result<TensorId> {
        const OP: &str = "conv1d";
        let xs = self.check(OP, "x", x, &[DType::F32])?.shape.clone();
        let ws = self.check(OP, "weight", w, &[DType::F32])?.shape.clone();
        if xs.len() != 3 || ws.len() != 3 || ws[1] != xs[1] || dilation == 0 || ws[2] == 0 {
            return Err(self.err(OP, format!("x {xs:?} must be [batch, c_in, len] and weight {ws:?} [c_out, c_in, kernel], dilation >= 1")));
        }
        let p = Conv1dParams {
            batch: xs[0],
            c_in: xs[1],
            c_out: ws[0],
            len: xs[2],
            kernel: ws[2],
            padding,
            dilation,
        };
        let out_len = p.out_len().map_err(|e| self.err(OP, e.to_string()))?;
        if let Some(b) = b {
            self.check_vec(OP, "bias", b, p.c_out)?;
        }
        self.push(
            Op::Conv1d(p),
            &[Some(x), Some(w), b],
            DType::F32,
            &[p.batch, p.c_out, out_len],
        )
    }

    /// Nearest x2 along the last axis.
    pub fn upsample_nearest2x(&mut self, x: TensorId) -> Result<TensorId> {
        let (rows, len, mut xs) = self.row_op_dims("upsample_nearest2x", x)?;
        *xs.last_mut().expect("checked") = 2 * len;
        self.push(
            Op::Upsample(UpsampleParams { rows, len }),
            &[Some(x)],
            DType::F32,
            &xs,
        )
    }

    /// `a op b` where `b`'s shape is a suffix of `a`'s (repeated over the leading dims).
    pub fn binary(&mut self, op: BinaryOp, a: TensorId, b: TensorId) -> Result<TensorId> {
        const OP: &str = "binary";
        let as_ = self.check(OP, "a", a, &[DType::F32])?.shape.clone();
        let bs = self.check(OP, "b", b, &[DType::F32])?.shape.clone();
        if bs.len() > as_.len() || as_[as_.len() - bs.len()..] != bs[..] {
            return Err(self.err(OP, format!("b {bs:?} must be a trailing part of a {as_:?}")));
        }
        let (n, b_len) = (as_.iter().product::<usize>(), bs.iter().product::<usize>());
        if b_len == 0 && n != 0 {
            return Err(self.err(OP, "b is empty"));
        }
        self.push(
            Op::Binary(BinaryParams {
                op,
                n,
                b_len: b_len.max(1),
            }),
            &[Some(a), Some(b)],
            DType::F32,
            &as_,
        )
    }

    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Add, a, b)
    }
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Mul, a, b)
    }

    /// `(act(pre_mask ? x * m : x) + r * m) * m` in one op ([`MaskedActParams`]): `x`, `m`
    /// and `r` of one shape, bit-identical to the chain of `mul`, `activation` and `add`.
    pub fn masked_act(
        &mut self,
        x: TensorId,
        m: TensorId,
        r: Option<TensorId>,
        act: Activation,
        pre_mask: bool,
    ) -> Result<TensorId> {
        const OP: &str = "masked_act";
        let xs = self.check(OP, "x", x, &[DType::F32])?.shape.clone();
        let mut operands = vec![("m", m)];
        operands.extend(r.map(|r| ("r", r)));
        for (what, t) in operands {
            let ts = self.check(OP, what, t, &[DType::F32])?.shape.clone();
            if ts != xs {
                return Err(self.err(OP, format!("{what} {ts:?} and x {xs:?} differ")));
            }
        }
        let p = MaskedActParams {
            n: xs.iter().product(),
            act,
            pre_mask,
        };
        self.push(Op::MaskedAct(p), &[Some(x), Some(m), r], DType::F32, &xs)
    }

    pub fn scale(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        let xs = self.check("scale", "x", x, &[DType::F32])?.shape.clone();
        self.push(Op::Scale(ScaleParams { s }), &[Some(x)], DType::F32, &xs)
    }

    /// `a*x + b*y`.
    pub fn axpby(&mut self, a: f32, x: TensorId, b: f32, y: TensorId) -> Result<TensorId> {
        let xs = self.check("axpby", "x", x, &[DType::F32])?.shape.clone();
        let ys = self.check("axpby", "y", y, &[DType::F32])?.shape.clone();
        if xs != ys {
            return Err(self.err("axpby", format!("x {xs:?} and y {ys:?} differ")));
        }
        self.push(
            Op::Axpby(AxpbyParams { a, b }),
            &[Some(x), Some(y)],
            DType::F32,
            &xs,
        )
    }
}
