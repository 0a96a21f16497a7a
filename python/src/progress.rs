//! The Python progress callback `(stage, step, total) -> bool | None` behind the Rust API's
//! `ProgressFn`, and the one place a model call releases the GIL.

use kinema::{Progress, Stage};
use pyo3::prelude::*;

use crate::errors::to_py;

/// A Python progress callback (or none) and the exception it raised, if any.
pub struct Callback<'a> {
    f: Option<&'a Py<PyAny>>,
    raised: Option<PyErr>,
}

impl<'a> Callback<'a> {
    pub fn new(f: Option<&'a Py<PyAny>>) -> Callback<'a> {
        Callback { f, raised: None }
    }

    /// Calls the callback with the GIL taken back: `False` (or any falsy value but `None`)
    /// cancels; an exception cancels and is kept to be raised in place of `Cancelled`.
    pub fn call(&mut self, stage: Stage, step: usize, total: usize) -> Progress {
        let Some(f) = self.f else {
            return Progress::Continue;
        };
        Python::attach(|py| {
            let go_on = f
                .bind(py)
                .call1((stage.name(), step, total))
                .and_then(|r| Ok(r.is_none() || r.is_truthy()?));
            match go_on {
                Ok(true) => Progress::Continue,
                Ok(false) => Progress::Cancel,
                Err(e) => {
                    self.raised = Some(e);
                    Progress::Cancel
                }
            }
        })
    }
}

/// Runs `work` with the GIL released, handing it the callback; a Rust error becomes its
/// Python exception, or the callback's own exception when the callback raised.
pub fn run<T: Send>(
    py: Python<'_>,
    progress: Option<&Py<PyAny>>,
    work: impl FnOnce(&mut Callback<'_>) -> kinema::Result<T> + Send,
) -> PyResult<T> {
    let mut cb = Callback::new(progress);
    let result = py.detach(|| work(&mut cb));
    result.map_err(|e| cb.raised.take().unwrap_or_else(|| to_py(e)))
}
