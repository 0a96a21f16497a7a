//! `kinema.Engine`: `kinema::Engine` with its options as keyword arguments.

use kinema::{BackendChoice, EngineOptions, PrecisionChoice};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::to_py;

/// One backend (the CPU kernels and their thread pool, or one Vulkan device), shared by the
/// models loaded on it. Thread-safe; nothing is global, so several engines may coexist.
///
/// Engine(backend="auto", precision="auto", threads=None, device=None)
///
/// backend: "auto" (a real GPU through Vulkan when there is one, else the CPU), "cpu" or
///     "vulkan".
/// precision: "auto", "strict" (f32 everywhere), "fast" (16-bit weights) or "split" (strict,
/// but the large linears and the attention split f32 operands into f16 parts for a GPU's
/// matrix cores).
/// threads: CPU threads (1 to 1024); asks for the CPU. Default: the machine's.
/// device: a Vulkan device index as `kinema info` lists them; asks for Vulkan.
///
/// Raises InvalidArgumentError (a ValueError) for a bad option, KinemaError when the backend
/// cannot start.
#[pyclass(frozen, module = "kinema")]
pub struct Engine {
    pub inner: kinema::Engine,
}

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (backend = "auto", precision = "auto", threads = None, device = None))]
    fn new(
        py: Python<'_>,
        backend: &str,
        precision: &str,
        threads: Option<usize>,
        device: Option<usize>,
    ) -> PyResult<Engine> {
        let opts = EngineOptions {
            backend: BackendChoice::parse(backend).map_err(to_py)?,
            precision: PrecisionChoice::parse(precision).map_err(to_py)?,
            threads,
            device,
        };
        let inner = py.detach(|| kinema::Engine::new(opts)).map_err(to_py)?;
        Ok(Engine { inner })
    }

    /// "cpu" or "vulkan".
    #[getter]
    fn backend(&self) -> &'static str {
        self.inner.info().kind
    }

    /// The Vulkan device's name, or the CPU's ISA.
    #[getter]
    fn device(&self) -> String {
        self.inner.info().device
    }

    /// The resolved precision: "strict", "fast" or "split".
    #[getter]
    fn precision(&self) -> &'static str {
        self.inner.info().precision.name()
    }

    /// CPU threads (1 on Vulkan).
    #[getter]
    fn threads(&self) -> usize {
        self.inner.info().threads
    }

    /// Why "auto" did not take Vulkan, when it took the CPU; else None.
    #[getter]
    fn vulkan_unavailable(&self) -> Option<String> {
        self.inner.vulkan_unavailable().map(str::to_owned)
    }

    /// backend, device, precision and threads as a dict.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let i = self.inner.info();
        let d = PyDict::new(py);
        d.set_item("backend", i.kind)?;
        d.set_item("device", i.device)?;
        d.set_item("precision", i.precision.name())?;
        d.set_item("threads", i.threads)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let i = self.inner.info();
        format!(
            "kinema.Engine(backend={:?}, device={:?}, precision={:?}, threads={})",
            i.kind,
            i.device,
            i.precision.name(),
            i.threads
        )
    }
}
