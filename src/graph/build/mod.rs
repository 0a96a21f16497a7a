//! Building a graph: tensors, op nodes and their shape checks.

mod data;
mod motion;
mod nn;

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
    /// Bound once from host tensors stacked along their first dimension (one tensor: read in
    /// place on the CPU; several: [`Backend::bind_host_rows`](crate::backend::Backend::bind_host_rows)).
    Weight(Vec<HostTensor>),
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
        self.add_tensor(name, dtype, &shape, TensorKind::Weight(vec![t]))
    }

    /// One weight whose rows are the rows of `parts` in order (`[n_1 + n_2 + .., k]` from
    /// parts `[n_i, k]` of one dtype): projections that read the same input fused into one
    /// linear. A backend whose [`BackendInfo::stacks_weights_in_place`] is set uploads the parts
    /// into one buffer; another copies them together on the host.
    ///
    /// [`BackendInfo::stacks_weights_in_place`]: crate::backend::BackendInfo
    pub fn weight_rows(&mut self, name: &str, parts: Vec<HostTensor>) -> Result<TensorId> {
        let bad = |why: String| Error::Shape(format!("stacked weight {name:?}: {why}"));
        let first = parts.first().ok_or_else(|| bad("no parts".into()))?;
        let (dtype, tail) = (first.dtype, first.shape.get(1..).unwrap_or(&[]).to_vec());
        if first.shape.len() < 2 {
            return Err(bad(format!(
                "part 0 has shape {:?}, not [rows, ..]",
                first.shape
            )));
        }
        let mut rows = 0usize;
        for (i, p) in parts.iter().enumerate() {
            if p.dtype != dtype || p.shape.get(1..) != Some(&tail[..]) {
                return Err(bad(format!(
                    "part {i} is {} {:?}, part 0 {dtype} {:?}: the parts must share the dtype \
                     and every dimension but the first",
                    p.dtype, p.shape, first.shape
                )));
            }
            rows = rows
                .checked_add(p.shape[0])
                .ok_or_else(|| bad("too many rows".into()))?;
        }
        let mut shape = vec![rows];
        shape.extend_from_slice(&tail);
        self.add_tensor(name, dtype, &shape, TensorKind::Weight(parts))
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
}
