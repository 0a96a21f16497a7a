//! Planning: which nodes the outputs need, and which intermediate tensors can share a
//! buffer because their lifetimes do not overlap.

use super::build::{Graph, TensorId, TensorKind};

/// The result of planning a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Indices of the nodes to run, in execution (topological) order.
    pub live_nodes: Vec<usize>,
    /// For every node: whether it depends only on weights and constants, so it runs in the
    /// prepare pass and its output has a buffer of its own (never in a slot).
    pub prepared: Vec<bool>,
    /// For every tensor: the slot holding a node-produced value (through aliases), if any.
    pub slot_of: Vec<Option<usize>>,
    /// Bytes each slot must hold.
    pub slot_bytes: Vec<usize>,
    /// Intermediate values that were given a slot (for reporting reuse).
    pub values: usize,
}

/// The tensor whose storage `t` uses (itself unless it is a reshape alias).
pub fn root(g: &Graph, t: TensorId) -> TensorId {
    match g.tensors[t.0].kind {
        TensorKind::Alias(b) => b,
        _ => t,
    }
}

fn bytes(g: &Graph, t: TensorId) -> usize {
    let info = &g.tensors[t.0];
    // Checked when the tensor was added.
    info.dtype.bytes_for(info.numel()).unwrap_or(0)
}

/// Plan a graph: prune to the outputs, then assign slots greedily in execution order (best
/// fit among free slots, a slot freed after the last reader of its value). A node's output is
/// placed before its inputs are released, so an output never shares a buffer with an input.
pub fn plan(g: &Graph) -> Plan {
    let nt = g.tensors.len();
    // Liveness backwards from the outputs.
    let mut needed = vec![false; nt];
    let kept = || g.outputs.iter().chain(g.carries.iter().map(|(f, _)| f));
    for &o in kept() {
        needed[root(g, o).0] = true;
    }
    let mut live = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate().rev() {
        if needed[root(g, n.output).0] {
            live[i] = true;
            for inp in n.reads() {
                needed[root(g, inp).0] = true;
            }
        }
    }
    let live_nodes: Vec<usize> = (0..g.nodes.len()).filter(|&i| live[i]).collect();

    // Constant propagation: a node is prepared when all its inputs are weights, constants or
    // prepared values; a tensor written by several nodes (concat) only when all its writers
    // are. Repeat until nothing changes (a later dynamic writer demotes earlier ones).
    let mut static_root = vec![false; nt];
    for (t, info) in g.tensors.iter().enumerate() {
        static_root[t] = matches!(info.kind, TensorKind::Weight(_) | TensorKind::Constant);
    }
    let mut prepared = vec![false; g.nodes.len()];
    loop {
        let mut changed = false;
        for &i in &live_nodes {
            let n = &g.nodes[i];
            let s = n.reads().all(|t| static_root[root(g, t).0])
                && live_nodes.iter().all(|&j| {
                    root(g, g.nodes[j].output) != root(g, n.output)
                        || g.nodes[j].reads().all(|t| static_root[root(g, t).0])
                });
            if s != prepared[i] {
                prepared[i] = s;
                changed = true;
            }
            let r = root(g, n.output).0;
            let all_writers = live_nodes
                .iter()
                .filter(|&&j| root(g, g.nodes[j].output).0 == r)
                .all(|&j| if j == i { s } else { prepared[j] });
            if static_root[r] != all_writers {
                static_root[r] = all_writers;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }

    // Last reader of every root.
    let mut last_use = vec![None::<usize>; nt];
    for &i in &live_nodes {
        for inp in g.nodes[i].reads() {
            last_use[root(g, inp).0] = Some(i);
        }
    }
    let is_output: Vec<bool> = {
        let mut v = vec![false; nt];
        for &o in kept() {
            v[root(g, o).0] = true;
        }
        v
    };

    let mut slot_of_root = vec![None::<usize>; nt];
    let mut slot_bytes: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut values = 0;
    for &i in live_nodes.iter().filter(|&&i| !prepared[i]) {
        let n = &g.nodes[i];
        let r = root(g, n.output);
        if slot_of_root[r.0].is_none() {
            values += 1;
            let need = bytes(g, r);
            let pick = free
                .iter()
                .enumerate()
                .filter(|(_, s)| slot_bytes[**s] >= need)
                .min_by_key(|(_, s)| slot_bytes[**s])
                .or_else(|| free.iter().enumerate().max_by_key(|(_, s)| slot_bytes[**s]))
                .map(|(k, _)| k);
            let slot = match pick {
                Some(k) => free.swap_remove(k),
                None => {
                    slot_bytes.push(0);
                    slot_bytes.len() - 1
                }
            };
            slot_bytes[slot] = slot_bytes[slot].max(need);
            slot_of_root[r.0] = Some(slot);
        }
        // Release values whose last reader is this node (outputs stay).
        let mut released: Vec<TensorId> = n.reads().map(|t| root(g, t)).collect();
        released.sort();
        released.dedup();
        for t in released {
            if last_use[t.0] == Some(i)
                && !is_output[t.0]
                && let Some(s) = slot_of_root[t.0]
            {
                free.push(s);
            }
        }
        // A value nobody reads (and that is not an output) is dead right after it is made;
        // it only exists because a concat piece or a pruned reader needed the node.
        if last_use[r.0].is_none()
            && !is_output[r.0]
            && !free.contains(&slot_of_root[r.0].expect("assigned above"))
        {
            let later_writer = live_nodes
                .iter()
                .any(|&j| j > i && root(g, g.nodes[j].output) == r);
            if !later_writer {
                free.push(slot_of_root[r.0].expect("assigned above"));
            }
        }
    }
    let slot_of = (0..nt)
        .map(|t| slot_of_root[root(g, TensorId(t)).0])
        .collect();
    Plan {
        live_nodes,
        prepared,
        slot_of,
        slot_bytes,
        values,
    }
}
