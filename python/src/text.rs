//! `kinema.TextEncoder`: `kinema::TextEncoder` (LLM2Vec) with prompts in and a numpy array of
//! embeddings out, as `kinema encode` writes them.

use std::path::PathBuf;

use kinema::{ChatTemplate, LongText, TextOptions};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::arrays::array;
use crate::engine::Engine;
use crate::errors::{invalid, to_py};

/// An LLM2Vec text encoder (a GGUF written by `kinema convert llm2vec`) on an Engine: prompts
/// in, text features out (what Kimodo takes). Thread-safe; the GIL is released while it runs.
///
/// TextEncoder(engine, path, *, chat_template="auto", long_text="trim")
///
/// chat_template: "auto" (what upstream does for this model, recorded at conversion), "on"
///     (the Llama-3 user header) or "off" (BOS + text).
/// long_text: prompts over LLM2Vec's 400 text tokens: "trim" (cut word by word, upstream's
///     rule) or "refuse".
#[pyclass(frozen, module = "kinema")]
pub struct TextEncoder {
    pub inner: kinema::TextEncoder,
}

#[pymethods]
impl TextEncoder {
    #[new]
    #[pyo3(signature = (engine, path, *, chat_template = "auto", long_text = "trim"))]
    fn new(
        py: Python<'_>,
        engine: &Engine,
        path: PathBuf,
        chat_template: &str,
        long_text: &str,
    ) -> PyResult<TextEncoder> {
        let options = TextOptions {
            chat_template: ChatTemplate::parse(chat_template).map_err(to_py)?,
            long_text: LongText::parse(long_text).map_err(to_py)?,
        };
        let e = engine.inner.clone();
        let inner = py
            .detach(|| kinema::TextEncoder::load_with(&e, &path, options))
            .map_err(to_py)?;
        Ok(TextEncoder { inner })
    }

    /// The width of an embedding (4096 for LLM2Vec).
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// Whether the Llama-3 chat template wraps the prompts (the resolved choice).
    #[getter]
    fn chat_template(&self) -> bool {
        self.inner.chat_template()
    }

    /// The file it was loaded from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// The embeddings of `prompts` (one string or a list of strings): float32
    /// `[len(prompts), dim]`, one row per prompt in order, as `kinema encode` writes them.
    fn encode<'py>(
        &self,
        py: Python<'py>,
        prompts: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let list: Vec<String> = if let Ok(s) = prompts.downcast::<PyString>() {
            vec![s.extract::<String>()?]
        } else {
            prompts
                .extract()
                .map_err(|_| invalid("prompts: expected a string or a list of strings"))?
        };
        let enc = &self.inner;
        let e = py
            .detach(|| {
                let refs: Vec<&str> = list.iter().map(String::as_str).collect();
                enc.encode(&refs)
            })
            .map_err(to_py)?;
        let (rows, dim) = (e.rows(), e.dim());
        array(py, e.as_slice().to_vec(), &[rows, dim])
    }

    fn __repr__(&self) -> String {
        format!(
            "kinema.TextEncoder({:?}, dim={}, chat_template={}, engine={})",
            self.inner.path().display().to_string(),
            self.inner.dim(),
            self.inner.chat_template(),
            self.inner.engine().info().kind
        )
    }
}
