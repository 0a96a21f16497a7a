//! Compiling a planned graph onto a backend: buffers allocated once, weights bound once, the
//! live nodes recorded once; every run writes inputs and re-submits the same recording.
//! Nodes that depend only on weights and constants are recorded apart, into the prepare
//! pass, which a run submits first whenever a constant was written since the last run.

use std::cell::Cell;
use std::collections::HashMap;

use super::build::{Graph, TensorId, TensorKind};
use super::plan::{Plan, plan, root};
use crate::backend::{Backend, BufRef};
use crate::error::{Error, Result};
use crate::ops::Call;
use crate::tensor::DType;

/// A graph compiled for one backend.
pub struct Executable<'b, B: Backend> {
    backend: &'b B,
    graph: Graph,
    plan: Plan,
    refs: Vec<Option<BufRef<B::Buffer>>>,
    rec: B::Recording,
    prepare: B::Recording,
    /// Whether a constant was written since the prepare pass last ran.
    stale: Cell<bool>,
}

impl Graph {
    /// Plan, allocate, bind weights and record the graph on `backend`.
    pub fn compile<B: Backend>(self, backend: &B) -> Result<Executable<'_, B>> {
        if self.outputs.is_empty() {
            return Err(Error::InvalidArgument(
                "the graph has no outputs: mark at least one with Graph::output".into(),
            ));
        }
        let plan = plan(&self);
        let slots: Vec<B::Buffer> = plan
            .slot_bytes
            .iter()
            .map(|&b| backend.alloc(DType::U32, b.div_ceil(4)))
            .collect::<Result<_>>()?;
        let mut own: HashMap<usize, B::Buffer> = HashMap::new();
        let mut used = vec![false; self.tensors.len()];
        for &i in &plan.live_nodes {
            for t in self.nodes[i].reads() {
                used[root(&self, t).0] = true;
            }
        }
        for o in self
            .outputs
            .iter()
            .chain(self.carries.iter().flat_map(|(f, i)| [f, i]))
        {
            used[root(&self, *o).0] = true;
        }
        for &i in &plan.live_nodes {
            if plan.prepared[i] {
                used[root(&self, self.nodes[i].output).0] = true;
            }
        }
        for (t, info) in self.tensors.iter().enumerate() {
            if !used[t] {
                continue;
            }
            match &info.kind {
                TensorKind::Input | TensorKind::Constant => {
                    own.insert(t, backend.alloc(info.dtype, info.numel())?);
                }
                TensorKind::Weight(parts) => {
                    let buf = match parts.as_slice() {
                        [one] => backend.bind_host(one)?,
                        _ => backend.bind_host_rows(parts)?,
                    };
                    own.insert(t, buf);
                }
                // A prepared value keeps its own buffer from one prepare pass to the next.
                TensorKind::Value if plan.slot_of[t].is_none() => {
                    own.insert(t, backend.alloc(info.dtype, info.numel())?);
                }
                TensorKind::Value | TensorKind::Alias(_) => {}
            }
        }
        let refs: Vec<Option<BufRef<B::Buffer>>> = (0..self.tensors.len())
            .map(|t| {
                let info = &self.tensors[t];
                let r = root(&self, TensorId(t)).0;
                let buf = match plan.slot_of[t] {
                    Some(s) => Some(slots[s].clone()),
                    None => own.get(&r).cloned(),
                };
                buf.map(|b| BufRef::new(b, info.dtype, info.numel()))
            })
            .collect();
        let mut rec = backend.begin()?;
        let mut prepare = backend.begin()?;
        for &i in &plan.live_nodes {
            let r = if plan.prepared[i] {
                &mut prepare
            } else {
                &mut rec
            };
            record(backend, r, &self, &refs, i).map_err(|e| match e {
                Error::Graph { .. } => e,
                other => Error::Graph {
                    node: i,
                    op: self.nodes[i].op.name(),
                    msg: other.to_string(),
                },
            })?;
        }
        for &(from, into) in &self.carries {
            let (f, t) = (&refs[from.0], &refs[into.0]);
            let (Some(f), Some(t)) = (f, t) else {
                unreachable!("carry operands are marked used above");
            };
            let p = crate::ops::CopyParams {
                shape: vec![f.len],
                src_strides: vec![1],
                src_offset: 0,
                dst_strides: vec![1],
                dst_offset: 0,
            };
            backend.copy(&mut rec, &p, f, t)?;
        }
        Ok(Executable {
            backend,
            graph: self,
            plan,
            refs,
            rec,
            prepare,
            stale: Cell::new(true),
        })
    }
}

/// Record node `i`: its inputs (each from its operand's offset on) and output by role,
/// through the one entry point [`Backend::record`].
fn record<B: Backend>(
    b: &B,
    rec: &mut B::Recording,
    g: &Graph,
    refs: &[Option<BufRef<B::Buffer>>],
    i: usize,
) -> Result<()> {
    let n = &g.nodes[i];
    let get = |t: TensorId| -> Result<&BufRef<B::Buffer>> {
        refs[t.0].as_ref().ok_or_else(|| Error::Graph {
            node: i,
            op: n.op.name(),
            msg: format!("tensor {} has no buffer", g.tensors[t.0].name),
        })
    };
    let ins: Vec<Option<BufRef<B::Buffer>>> = n
        .inputs
        .iter()
        .map(|o| {
            o.map(|o| {
                let r = get(o.tensor)?;
                r.slice(o.offset, r.len.saturating_sub(o.offset))
            })
            .transpose()
        })
        .collect::<Result<_>>()?;
    let ins: Vec<Option<&BufRef<B::Buffer>>> = ins.iter().map(Option::as_ref).collect();
    b.record(rec, Call::bind(&n.op, &ins, get(n.output)?)?)
}

impl<B: Backend> Executable<'_, B> {
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    pub fn backend(&self) -> &B {
        self.backend
    }

    fn buf(&self, t: TensorId) -> Result<&BufRef<B::Buffer>> {
        self.refs.get(t.0).and_then(|r| r.as_ref()).ok_or_else(|| {
            Error::InvalidArgument(format!("tensor {} is not used by the compiled graph", t.0))
        })
    }

    /// Write an input's or a constant's bytes (little-endian, exactly its size).
    pub fn write(&self, t: TensorId, bytes: &[u8]) -> Result<()> {
        let info = &self.graph.tensors[t.0];
        match info.kind {
            TensorKind::Input => {}
            TensorKind::Constant => self.stale.set(true),
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "tensor {} is not a graph input",
                    info.name
                )));
            }
        }
        self.backend.write(self.buf(t)?, bytes)
    }

    pub fn write_f32(&self, t: TensorId, v: &[f32]) -> Result<()> {
        self.write(t, bytemuck::cast_slice(v))
    }
    pub fn write_u32(&self, t: TensorId, v: &[u32]) -> Result<()> {
        self.write(t, bytemuck::cast_slice(v))
    }
    pub fn write_i32(&self, t: TensorId, v: &[i32]) -> Result<()> {
        self.write(t, bytemuck::cast_slice(v))
    }

    /// Run the prepare pass now if a constant changed since it last ran (a run does this
    /// itself; calling it first keeps the one-time work out of a timed run).
    pub fn prepare(&self) -> Result<()> {
        if self.stale.get() {
            self.backend.submit(&self.prepare)?;
            self.stale.set(false);
        }
        Ok(())
    }

    /// Run the recorded graph once (asynchronously where the backend allows), after the
    /// prepare pass when a constant changed since it last ran.
    pub fn run(&self) -> Result<()> {
        self.prepare()?;
        self.backend.submit(&self.rec)
    }

    /// Read a marked output (waits for submitted work).
    pub fn read_bytes(&self, t: TensorId) -> Result<Vec<u8>> {
        if !self.graph.outputs.contains(&t) && !self.graph.carries.iter().any(|c| c.1 == t) {
            return Err(Error::InvalidArgument(format!(
                "tensor {} is not a marked output (its buffer may be reused)",
                self.graph.tensors[t.0].name
            )));
        }
        let r = self.buf(t)?;
        let mut out = vec![0u8; r.dtype.bytes_for(r.len).unwrap_or(0)];
        self.backend.read(r, &mut out)?;
        Ok(out)
    }

    /// Read several marked outputs at once (waits for submitted work): one transfer and one
    /// wait where the backend batches reads ([`Backend::read_many`]).
    pub fn read_many_bytes(&self, ts: &[TensorId]) -> Result<Vec<Vec<u8>>> {
        let mut refs = Vec::with_capacity(ts.len());
        for &t in ts {
            if !self.graph.outputs.contains(&t) && !self.graph.carries.iter().any(|c| c.1 == t) {
                return Err(Error::InvalidArgument(format!(
                    "tensor {} is not a marked output (its buffer may be reused)",
                    self.graph.tensors[t.0].name
                )));
            }
            refs.push(self.buf(t)?);
        }
        let mut outs: Vec<Vec<u8>> = refs
            .iter()
            .map(|r| vec![0u8; r.dtype.bytes_for(r.len).unwrap_or(0)])
            .collect();
        let mut reads: Vec<(&BufRef<B::Buffer>, &mut [u8])> = refs
            .iter()
            .zip(outs.iter_mut())
            .map(|(r, o)| (*r, o.as_mut_slice()))
            .collect();
        self.backend.read_many(&mut reads)?;
        Ok(outs)
    }

    pub fn read_f32(&self, t: TensorId) -> Result<Vec<f32>> {
        Ok(bytemuck::pod_collect_to_vec(&self.read_bytes(t)?))
    }
    pub fn read_u32(&self, t: TensorId) -> Result<Vec<u32>> {
        Ok(bytemuck::pod_collect_to_vec(&self.read_bytes(t)?))
    }
}
