//! `kinema._kinema`: the Python binding of kinema's host API (issue 15 part 3).
//!
//! It wraps `kinema::{Engine, Kimodo, MotionBricks, Agent, TextEncoder}` and nothing else: no model logic lives
//! here, only argument conversion (numpy in, numpy out), the progress callback and the
//! mapping of `kinema::Error` to Python exceptions. Every model call releases the GIL
//! (`Python::detach`) and takes it back only to call the progress callback. The pure-Python
//! package `kinema` (`python/kinema/`) re-exports these classes with its type stubs.

mod agent;
mod arrays;
mod engine;
mod errors;
mod kimodo;
mod motionbricks;
mod progress;
mod text;

use pyo3::prelude::*;

/// The native half of the `kinema` package; import `kinema` instead.
#[pymodule]
fn _kinema(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<engine::Engine>()?;
    m.add_class::<kimodo::Kimodo>()?;
    m.add_class::<motionbricks::MotionBricks>()?;
    m.add_class::<agent::Agent>()?;
    m.add_class::<text::TextEncoder>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
