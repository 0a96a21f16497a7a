//! The tensor graph: typed op nodes whose shapes are checked as the graph is built (errors
//! name the node), pruning to what the outputs need, buffer reuse planned from liveness,
//! weights bound from (memory-mapped) host tensors, and one recording that is re-submitted for
//! every run with new inputs, so a 100-step diffusion loop builds and records nothing twice.
//!
//! Nodes can only consume tensors that already exist, so insertion order is a topological
//! order; [`Graph::compile`] executes the live nodes in that order.
//!
//! Two features serve loops such as diffusion sampling: nodes that depend only on weights and
//! [`Graph::constant`] inputs form a prepare pass, run once and again only after a constant is
//! rewritten, with their results in buffers of their own; and [`Graph::carry`] copies a value
//! into a per-run input at the end of every run, so loop state never leaves the device.

mod build;
mod exec;
mod plan;

pub use build::{Graph, Node, Operand, TensorId, TensorInfo, TensorKind};
pub use exec::Executable;
pub use plan::{Plan, plan};
