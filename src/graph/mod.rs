//! The tensor graph: typed op nodes whose shapes are checked as the graph is built (errors
//! name the node), pruning to what the outputs need, buffer reuse planned from liveness,
//! weights bound from (memory-mapped) host tensors, and one recording that is re-submitted for
//! every run with new inputs, so a 100-step diffusion loop builds and records nothing twice.
//!
//! Nodes can only consume tensors that already exist, so insertion order is a topological
//! order; [`Graph::compile`] executes the live nodes in that order.

mod build;
mod exec;
mod plan;

pub use build::{Graph, Node, Op, TensorId, TensorInfo, TensorKind};
pub use exec::Executable;
pub use plan::{Plan, plan};
