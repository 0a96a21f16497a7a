//! Building a graph: tensors, op nodes and their shape checks.

use crate::error::{Error, Result};
use crate::ops::*;
use crate::tensor::{DType, HostTensor, MAX_RANK};

/// A tensor of a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub(crate) usize);

impl TensorId {
    pub fn index(self) -> usize {
        self.0
    }
}

#[derive(Clone, Debug)]
pub enum TensorKind {
    /// Written by the host before each run.
    Input,
    /// Written by the host once (or rarely): the nodes that depend only on constants and
    /// weights run in the graph's prepare pass, again only after a constant was rewritten.
    Constant,
    /// Bound once from a host tensor (read in place on the CPU).
    Weight(HostTensor),
    /// Produced by a node.
    Value,
    /// The same elements as another tensor, with another shape (a reshape).
    Alias(TensorId),
}

#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub kind: TensorKind,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// An input operand of a node: a tensor read from `offset` elements in (attention reads q, k
/// and v in place from one fused projection this way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    pub tensor: TensorId,
    pub offset: usize,
}

impl From<TensorId> for Operand {
    fn from(tensor: TensorId) -> Operand {
        Operand { tensor, offset: 0 }
    }
}

#[derive(Clone, Debug)]
pub struct Node {
    pub op: Op,
    /// One entry per input role of the op ([`Op::inputs`]), `None` for an absent optional
    /// input: what the graph hands to [`crate::Backend::record`] through [`Call::bind`].
    pub inputs: Vec<Option<Operand>>,
    pub output: TensorId,
    /// For concat pieces: this node writes part of an output another node created, so the
    /// output must not be treated as defined here first.
    pub accumulates: bool,
}

impl Node {
    /// The tensors the node reads, in role order.
    pub fn reads(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.inputs.iter().flatten().map(|o| o.tensor)
    }
}

/// A graph under construction.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) outputs: Vec<TensorId>,
    /// `(from, into)`: after every run, `from` is copied into the input `into`.
    pub(crate) carries: Vec<(TensorId, TensorId)>,
}

fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    pub fn tensor(&self, t: TensorId) -> &TensorInfo {
        &self.tensors[t.0]
    }
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    fn err(&self, op: &'static str, msg: impl Into<String>) -> Error {
        Error::Graph {
            node: self.nodes.len(),
            op,
            msg: msg.into(),
        }
    }

    fn add_tensor(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        kind: TensorKind,
    ) -> Result<TensorId> {
        if shape.len() > MAX_RANK {
            return Err(Error::Shape(format!(
                "tensor {name:?}: rank {} exceeds {MAX_RANK}",
                shape.len()
            )));
        }
        let n = numel(shape)
            .ok_or_else(|| Error::Shape(format!("tensor {name:?}: shape {shape:?} overflows")))?;
        if dtype.bytes_for(n).is_none() {
            return Err(Error::Shape(format!(
                "tensor {name:?}: {n} elements is not a whole number of {dtype} blocks"
            )));
        }
        self.tensors.push(TensorInfo {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            kind,
        });
        Ok(TensorId(self.tensors.len() - 1))
    }

    /// A tensor the host writes before every run.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<TensorId> {
        self.add_tensor(name, dtype, shape, TensorKind::Input)
    }

    /// A tensor the host writes once (see [`TensorKind::Constant`]).
    pub fn constant(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<TensorId> {
        self.add_tensor(name, dtype, shape, TensorKind::Constant)
    }

    /// After every run, copy `from` (kept alive to the end of the run) into the input
    /// `into`, so state such as a diffusion loop's `x_t` stays on the device between runs.
    pub fn carry(&mut self, from: TensorId, into: TensorId) -> Result<()> {
        const OP: &str = "carry";
        let f = self.check(OP, "from", from, &DType::ALL)?.clone();
        let i = self.check(OP, "into", into, &DType::ALL)?.clone();
        if !matches!(i.kind, TensorKind::Input) {
            return Err(self.err(OP, format!("{} is not a per-run input", i.name)));
        }
        if f.dtype != i.dtype || f.numel() != i.numel() {
            return Err(self.err(
                OP,
                format!(
                    "{} ({} {:?}) does not fit {} ({} {:?})",
                    f.name, f.dtype, f.shape, i.name, i.dtype, i.shape
                ),
            ));
        }
        if self.carries.iter().any(|&(_, t)| t == into) {
            return Err(self.err(OP, format!("{} already receives a carry", i.name)));
        }
        self.carries.push((from, into));
        Ok(())
    }

    pub fn carries(&self) -> &[(TensorId, TensorId)] {
        &self.carries
    }

    /// A weight bound from a host tensor (borrowed without copying on the CPU).
    pub fn weight(&mut self, name: &str, t: HostTensor) -> Result<TensorId> {
        let (dtype, shape) = (t.dtype, t.shape.clone());
        self.add_tensor(name, dtype, &shape, TensorKind::Weight(t))
    }

    /// Mark a tensor as a result to read after runs (keeps it and its producers alive).
    pub fn output(&mut self, t: TensorId) {
        if !self.outputs.contains(&t) {
            self.outputs.push(t);
        }
    }

    fn check(
        &self,
        op: &'static str,
        what: &str,
        t: TensorId,
        dtypes: &[DType],
    ) -> Result<&TensorInfo> {
        let info = self.tensors.get(t.0).ok_or_else(|| {
            self.err(
                op,
                format!("{what} refers to tensor {} that does not exist", t.0),
            )
        })?;
        if !dtypes.contains(&info.dtype) {
            return Err(self.err(
                op,
                format!(
                    "{what} ({}) is {}, expected {}",
                    info.name,
                    info.dtype,
                    dtypes
                        .iter()
                        .map(|d| d.name())
                        .collect::<Vec<_>>()
                        .join("/")
                ),
            ));
        }
        Ok(info)
    }

    /// A node reading whole tensors (`inputs` by role, as [`Graph::push_operands`]).
    fn push(
        &mut self,
        op: Op,
        inputs: &[Option<TensorId>],
        dtype: DType,
        shape: &[usize],
    ) -> Result<TensorId> {
        let inputs = inputs.iter().map(|t| t.map(Operand::from)).collect();
        self.push_operands(op.name(), op, inputs, dtype, shape)
    }

    /// A node with its inputs by role ([`Op::inputs`]) and a new output tensor named after
    /// `label` and the node.
    fn push_operands(
        &mut self,
        label: &'static str,
        op: Op,
        inputs: Vec<Option<Operand>>,
        dtype: DType,
        shape: &[usize],
    ) -> Result<TensorId> {
        let present: Vec<Option<()>> = inputs.iter().map(|i| i.map(|_| ())).collect();
        Call::bind(&op, &present, ()).map_err(|e| self.err(label, e.to_string()))?;
        let name = format!("{label}#{}", self.nodes.len());
        let out = self
            .add_tensor(&name, dtype, shape, TensorKind::Value)
            .map_err(|e| self.err(label, e.to_string()))?;
        self.nodes.push(Node {
            op,
            inputs,
            output: out,
            accumulates: false,
        });
        Ok(out)
    }

    fn shape_of(&self, t: TensorId) -> Vec<usize> {
        self.tensors[t.0].shape.clone()
    }

    // ---- ops -------------------------------------------------------------------------------

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

    fn row_op_dims(&self, op: &'static str, x: TensorId) -> Result<(usize, usize, Vec<usize>)> {
        let xs = self.check(op, "x", x, &[DType::F32])?.shape.clone();
        let cols = *xs
            .last()
            .ok_or_else(|| self.err(op, "x must have at least one dimension"))?;
        if cols == 0 {
            return Err(self.err(op, "the last dimension is empty"));
        }
        Ok((xs.iter().product::<usize>() / cols, cols, xs))
    }

    fn check_vec(&self, op: &'static str, what: &str, t: TensorId, len: usize) -> Result<()> {
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
        let (rows, cols, xs) = self.row_op_dims(OP, x)?;
        for (what, t) in [("gamma", gamma), ("beta", beta)] {
            if let Some(t) = t {
                self.check_vec(OP, what, t, cols)?;
            }
        }
        self.push(
            Op::LayerNorm(NormParams { rows, cols, eps }),
            &[Some(x), gamma, beta],
            DType::F32,
            &xs,
        )
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
        match (kind, mask) {
            (MaskKind::KeyPadding, Some(m)) => {
                let ms = &self.check(OP, "mask", m, &[DType::U32])?.shape;
                if ms.as_slice() != [qs[0], ks[1]] {
                    return Err(self.err(OP, format!("mask {ms:?} must be [{}, {}]", qs[0], ks[1])));
                }
            }
            (MaskKind::KeyPadding, None) => {
                return Err(self.err(OP, "a key-padding mask needs a mask tensor"));
            }
            (_, Some(_)) => {
                return Err(self.err(
                    OP,
                    format!("a mask tensor was given for mask kind {kind:?}"),
                ));
            }
            (_, None) => {}
        }
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
        match (kind, mask) {
            (MaskKind::KeyPadding, Some(m)) => {
                let ms = &self.check(OP, "mask", m, &[DType::U32])?.shape;
                if ms.as_slice() != [s[0], s[1]] {
                    return Err(self.err(OP, format!("mask {ms:?} must be [{}, {}]", s[0], s[1])));
                }
            }
            (MaskKind::KeyPadding, None) => {
                return Err(self.err(OP, "a key-padding mask needs a mask tensor"));
            }
            (_, Some(_)) => {
                return Err(self.err(
                    OP,
                    format!("a mask tensor was given for mask kind {kind:?}"),
                ));
            }
            (_, None) => {}
        }
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
        self.push(
            Op::Swiglu(SwigluParams),
            &[Some(gate), Some(up)],
            DType::F32,
            &gs,
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

    /// Sinusoidal positional-encoding rows `start..start+len` of width `dim`.
    pub fn posenc(&mut self, start: usize, len: usize, dim: usize) -> Result<TensorId> {
        if !dim.is_multiple_of(2) {
            return Err(self.err("posenc", format!("dim {dim} must be even")));
        }
        self.push(
            Op::PosEnc(PosEncParams { start, len, dim }),
            &[],
            DType::F32,
            &[len, dim],
        )
    }

    /// One DDIM update; `coef` is an f32 `[4]` tensor (usually an input written every step).
    pub fn ddim(&mut self, x_t: TensorId, x0: TensorId, coef: TensorId) -> Result<TensorId> {
        const OP: &str = "ddim";
        let xs = self.check(OP, "x_t", x_t, &[DType::F32])?.shape.clone();
        let x0s = self.check(OP, "x0", x0, &[DType::F32])?.shape.clone();
        if xs != x0s {
            return Err(self.err(OP, format!("x_t {xs:?} and x0 {x0s:?} differ")));
        }
        self.check_vec(OP, "coef", coef, 4)?;
        self.push(
            Op::Ddim(DdimParams {
                n: xs.iter().product(),
            }),
            &[Some(x_t), Some(x0), Some(coef)],
            DType::F32,
            &xs,
        )
    }

    /// Classifier-free guidance over `rows [r, ..]` (r = 2 or 3): output `rows.shape[1..]`.
    pub fn cfg(&mut self, rows: TensorId, w_text: f32, w_constraint: f32) -> Result<TensorId> {
        const OP: &str = "cfg";
        let rs = self.check(OP, "rows", rows, &[DType::F32])?.shape.clone();
        if rs.len() < 2 || !(rs[0] == 2 || rs[0] == 3) {
            return Err(self.err(OP, format!("rows {rs:?} must be [2 or 3, ..]")));
        }
        let p = CfgParams {
            n: rs[1..].iter().product(),
            rows: rs[0],
            w_text,
            w_constraint,
        };
        self.push(Op::Cfg(p), &[Some(rows)], DType::F32, &rs[1..])
    }

    /// Kimodo's global-to-local root bridge (see [`RootBridgeParams`]): `x [p.rows,
    /// p.frames, 5]` -> `[p.rows, p.frames, 4]`.
    pub fn root_bridge(&mut self, x: TensorId, p: &RootBridgeParams) -> Result<TensorId> {
        const OP: &str = "root_bridge";
        let xs = self.check(OP, "x", x, &[DType::F32])?.shape.clone();
        if xs != [p.rows, p.frames, 5] {
            return Err(self.err(
                OP,
                format!("x {xs:?} must be [{}, {}, 5]", p.rows, p.frames),
            ));
        }
        if p.frames < 2 {
            return Err(self.err(
                OP,
                format!(
                    "{} frame(s); the root velocities need at least 2 frames",
                    p.frames
                ),
            ));
        }
        self.push(
            Op::RootBridge(*p),
            &[Some(x)],
            DType::F32,
            &[p.rows, p.frames, 4],
        )
    }
}
