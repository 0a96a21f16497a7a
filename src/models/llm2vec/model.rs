//! The Llama graph, generic over the backend: embedding gather, `layers` decoder layers
//! ([`EncoderLayer::llama`]: RMSNorm, grouped-query attention with RoPE, SwiGLU), the final
//! RMSNorm, then one of two heads: LLM2Vec's masked mean pooling, or the LM head on one
//! selected row with its argmax (greedy decoding).
//!
//! Sequences of a batch are right-padded to one length: each row's positions run 0..len
//! from its first token (upstream's `cache_position = arange(L)`, llm2vec.md §3.1), and pads
//! come after every real token, so a causal row never sees them and a bidirectional row
//! hides them with a key-padding mask. Either way a padded row computes exactly what the
//! prompt alone computes (llm2vec.md §2.4: upstream's own padded batches do not).

use super::config::names;
use super::load::LlamaModel;
use crate::backend::Backend;
use crate::graph::{Executable, Graph, TensorId};
use crate::models::kit::blocks::{
    EncoderLayer, Linear, LlamaLayerWeights, Norm, Projections, Rope,
};
use crate::ops::{Activation, MaskKind};
use crate::{DType, Error, Result};

/// What the graph computes from the final hidden states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// The mean of the rows a u32 mask `[batch, seq]` selects: `[batch, hidden]` f32
    /// (LLM2Vec's `pooling_mode="mean"` over `embed_mask`, llm2vec.py#L253-276). A row whose
    /// mask is all zeros gives zeros.
    MeanPool,
    /// The LM head on the one row per sequence a one-hot mask selects, and the first
    /// maximum of its logits: u32 `[batch]` token ids (greedy decoding).
    NextToken,
}

/// The tensors a run writes and reads.
#[derive(Clone, Debug)]
pub struct Io {
    /// u32 `[batch, seq]` token ids.
    pub ids: TensorId,
    /// i32 `[batch, seq]` positions.
    pub positions: TensorId,
    /// f32 `[head_dim / 2]` RoPE inverse frequencies (a constant).
    pub inv_freq: TensorId,
    /// u32 `[batch, seq]` keys to attend to, for [`MaskKind::KeyPadding`].
    pub key_mask: Option<TensorId>,
    /// u32 `[batch, seq]`: the rows the head reads.
    pub select: TensorId,
    /// The head's output: pooled `[batch, hidden]` f32 or next tokens u32 `[batch]`.
    pub out: TensorId,
    /// Each requested layer's output `[batch, seq, hidden]` (before the final norm), in the
    /// order asked.
    pub taps: Vec<TensorId>,
    /// The final hidden states `[batch, seq, hidden]` (after the final norm), when asked.
    pub last_hidden: Option<TensorId>,
}

/// The graph's shape and what it reads out.
#[derive(Clone, Debug)]
pub struct GraphSpec {
    pub batch: usize,
    pub seq: usize,
    /// [`MaskKind::None`] (bidirectional, no padding), [`MaskKind::KeyPadding`]
    /// (bidirectional, padded) or [`MaskKind::Causal`].
    pub mask: MaskKind,
    pub head: Head,
    /// Layers (0-based) whose outputs to keep.
    pub taps: Vec<usize>,
    /// Keep the final hidden states too.
    pub last_hidden: bool,
}

/// Builds the graph of `spec` over the model's weights (bound without copying on the CPU).
/// With `stack`, each layer's q/k/v and gate/up weights are bound stacked
/// ([`Graph::weight_rows`]) and run as one linear each, the RoPE on the fused rows' query and
/// key heads and the SwiGLU on the fused rows' halves: five fewer dispatches a layer, and the
/// narrow k and v projections (1024 of 4096 columns at the 8B size) ride on the query's.
/// Callers pass the backend's [`BackendInfo::stacks_weights_in_place`]; on the CPU stacking
/// would copy the memory-mapped weights.
///
/// [`BackendInfo::stacks_weights_in_place`]: crate::backend::BackendInfo
pub fn build(model: &LlamaModel, spec: &GraphSpec, stack: bool) -> Result<(Graph, Io)> {
    let c = &model.config;
    let (batch, seq) = (spec.batch, spec.seq);
    if batch == 0 || seq == 0 {
        return Err(Error::InvalidArgument(format!(
            "a Llama graph needs at least one token: batch {batch}, length {seq}"
        )));
    }
    if let Some(&l) = spec.taps.iter().find(|&&l| l >= c.layers) {
        return Err(Error::InvalidArgument(format!(
            "layer {l} does not exist: the model has {} layers (0-based)",
            c.layers
        )));
    }
    let mut g = Graph::new();
    let ids = g.input("ids", DType::U32, &[batch, seq])?;
    let positions = g.input("positions", DType::I32, &[batch, seq])?;
    let inv_freq = g.constant("inv_freq", DType::F32, &[c.head_dim / 2])?;
    let key_mask = match spec.mask {
        MaskKind::KeyPadding => Some(g.input("key_mask", DType::U32, &[batch, seq])?),
        MaskKind::None | MaskKind::Causal => None,
    };
    let select = g.input("select", DType::U32, &[batch, seq])?;
    let bind = |g: &mut Graph, name: &str| -> Result<TensorId> {
        g.weight(name, model.tensor(name)?.clone())
    };
    let table = bind(&mut g, names::TOKEN_EMBD)?;
    let rope = Rope {
        positions,
        inv_freq,
        pairing: c.pairing,
    };
    let mut x = g.embedding(ids, table)?;
    let mut taps = vec![None; spec.taps.len()];
    for i in 0..c.layers {
        let w = |g: &mut Graph, what: &str| bind(g, &names::blk(i, what));
        let attn_norm = w(&mut g, "attn_norm")?;
        let qkv = projections(&mut g, model, i, ["attn_q", "attn_k", "attn_v"], stack)?;
        let o = w(&mut g, "attn_output")?;
        let ffn_norm = w(&mut g, "ffn_norm")?;
        let gate_up = projections(&mut g, model, i, ["ffn_gate", "ffn_up"], stack)?;
        let weights = LlamaLayerWeights {
            attn_norm,
            qkv,
            o,
            ffn_norm,
            gate_up,
            down: w(&mut g, "ffn_down")?,
        };
        let layer = EncoderLayer::llama(
            &weights, c.eps, c.heads, c.kv_heads, rope, spec.mask, key_mask,
        );
        x = layer.apply(&mut g, x)?;
        for (slot, _) in spec.taps.iter().enumerate().filter(|(_, l)| **l == i) {
            taps[slot] = Some(x);
            g.output(x);
        }
    }
    let norm = Norm::Rms {
        gamma: Some(bind(&mut g, names::OUTPUT_NORM)?),
        eps: c.eps,
    };
    let h = norm.apply(&mut g, x)?;
    if spec.last_hidden {
        g.output(h);
    }
    let picked = g.mean_pool(h, select)?;
    let out = match spec.head {
        Head::MeanPool => picked,
        Head::NextToken => {
            let w = if c.tied_output {
                table
            } else {
                bind(&mut g, names::OUTPUT)?
            };
            let logits = Linear { w, b: None }.apply(&mut g, picked, Activation::None)?;
            g.argmax(logits)?
        }
    };
    g.output(out);
    let taps = taps
        .into_iter()
        .map(|t| t.ok_or_else(|| Error::InvalidArgument("a layer tap was not placed".into())))
        .collect::<Result<_>>()?;
    Ok((
        g,
        Io {
            ids,
            positions,
            inv_freq,
            key_mask,
            select,
            out,
            taps,
            last_hidden: spec.last_hidden.then_some(h),
        },
    ))
}

/// Layer `layer`'s weights `what` (llama.cpp names), bound one by one or stacked into one.
fn projections<const N: usize>(
    g: &mut Graph,
    model: &LlamaModel,
    layer: usize,
    what: [&str; N],
    stack: bool,
) -> Result<Projections<N>> {
    let names = what.map(|w| names::blk(layer, w));
    if stack {
        let parts = names
            .iter()
            .map(|n| model.tensor(n).cloned())
            .collect::<Result<Vec<_>>>()?;
        let name = format!("{}+{}", names[0], what[1..].join("+"));
        return Ok(Projections::Stacked(g.weight_rows(&name, parts)?));
    }
    let ids: Vec<TensorId> = names
        .iter()
        .map(|n| g.weight(n, model.tensor(n)?.clone()))
        .collect::<Result<_>>()?;
    let ids = ids
        .try_into()
        .map_err(|_| Error::InvalidArgument("a projection list changed length".into()))?;
    Ok(Projections::Split(ids))
}

/// A graph compiled on a backend with its constants written: run it with [`Session::run`]
/// as often as needed (weights are bound once).
pub struct Session<'b, B: Backend> {
    exe: Executable<'b, B>,
    io: Io,
    spec: GraphSpec,
}

/// One run's inputs, each `[batch, seq]` row-major.
#[derive(Clone, Debug)]
pub struct RunInputs<'a> {
    pub ids: &'a [u32],
    /// Real tokens per row (the rest is padding); positions count from 0 in every row.
    pub lengths: &'a [usize],
    /// The rows the head reads (nonzero: read).
    pub select: &'a [u32],
}

impl<'b, B: Backend> Session<'b, B> {
    /// Builds and compiles the graph of `spec` on `backend`.
    pub fn new(backend: &'b B, model: &LlamaModel, spec: GraphSpec) -> Result<Session<'b, B>> {
        let (g, io) = build(model, &spec, backend.info().stacks_weights_in_place)?;
        let exe = g.compile(backend)?;
        exe.write_f32(io.inv_freq, &model.inv_freq()?)?;
        Ok(Session { exe, io, spec })
    }

    /// The graph's shape.
    pub fn spec(&self) -> &GraphSpec {
        &self.spec
    }

    /// Writes the inputs and runs the graph once.
    pub fn run(&self, inputs: &RunInputs<'_>) -> Result<()> {
        let (batch, seq) = (self.spec.batch, self.spec.seq);
        let n = batch * seq;
        if inputs.ids.len() != n || inputs.select.len() != n || inputs.lengths.len() != batch {
            return Err(Error::Shape(format!(
                "Llama run: {} ids, {} selected flags and {} lengths for a batch of {batch} x {seq}",
                inputs.ids.len(),
                inputs.select.len(),
                inputs.lengths.len()
            )));
        }
        if let Some(&l) = inputs.lengths.iter().find(|&&l| l == 0 || l > seq) {
            return Err(Error::Shape(format!(
                "Llama run: a row of {l} tokens in a graph of length {seq}"
            )));
        }
        let padded = inputs.lengths.iter().any(|&l| l < seq);
        if padded && self.spec.mask == MaskKind::None {
            return Err(Error::InvalidArgument(
                "Llama run: padded rows need a key-padding or causal mask".into(),
            ));
        }
        let positions: Vec<i32> = (0..batch)
            .flat_map(|_| (0..seq as i32).collect::<Vec<_>>())
            .collect();
        self.exe.write_u32(self.io.ids, inputs.ids)?;
        self.exe.write_i32(self.io.positions, &positions)?;
        if let Some(m) = self.io.key_mask {
            let mask: Vec<u32> = inputs
                .lengths
                .iter()
                .flat_map(|&l| (0..seq).map(move |j| u32::from(j < l)))
                .collect();
            self.exe.write_u32(m, &mask)?;
        }
        self.exe.write_u32(self.io.select, inputs.select)?;
        self.exe.run()
    }

    /// The pooled vectors `[batch, hidden]` of a [`Head::MeanPool`] graph.
    pub fn pooled(&self) -> Result<Vec<f32>> {
        self.expect(Head::MeanPool)?;
        self.exe.read_f32(self.io.out)
    }

    /// The next token of each row of a [`Head::NextToken`] graph.
    pub fn next_tokens(&self) -> Result<Vec<u32>> {
        self.expect(Head::NextToken)?;
        self.exe.read_u32(self.io.out)
    }

    /// The output of the `i`-th requested layer tap, `[batch, seq, hidden]`.
    pub fn tap(&self, i: usize) -> Result<Vec<f32>> {
        let t = self.io.taps.get(i).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tap {i} was not requested (the graph has {})",
                self.io.taps.len()
            ))
        })?;
        self.exe.read_f32(*t)
    }

    /// The final hidden states `[batch, seq, hidden]`, when the spec asked for them.
    pub fn last_hidden(&self) -> Result<Vec<f32>> {
        let t = self.io.last_hidden.ok_or_else(|| {
            Error::InvalidArgument("the graph was built without last_hidden".into())
        })?;
        self.exe.read_f32(t)
    }

    fn expect(&self, head: Head) -> Result<()> {
        if self.spec.head != head {
            return Err(Error::InvalidArgument(format!(
                "the graph's head is {:?}, not {head:?}",
                self.spec.head
            )));
        }
        Ok(())
    }
}
