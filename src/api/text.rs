//! [`TextEncoder`]: prompts in, LLM2Vec embeddings out, through the same
//! [`encode::prepare`] and [`encode::encode`] as `kinema encode`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::engine::Engine;
use crate::backend::Backend;
use crate::device::BackendVisitor;
use crate::models::kit::identity::ModelIdentity;
use crate::models::llm2vec::LlamaModel;
use crate::models::llm2vec::encode::{self, Prepared};
pub use crate::models::llm2vec::encode::{LongText, TemplateChoice as ChatTemplate};
use crate::{Error, Result};

/// Text features: `rows` vectors of `dim` floats, row-major. What a text encoder returns for
/// a list of prompts (one row each) and what [`super::GenerateRequest::text`] takes one row of.
#[derive(Clone, Debug, PartialEq)]
pub struct Embeddings {
    dim: usize,
    values: Vec<f32>,
}

impl Embeddings {
    /// `values.len() / dim` rows of `dim` floats; an error when `dim` is 0 or does not divide
    /// the length.
    pub fn new(dim: usize, values: Vec<f32>) -> Result<Embeddings> {
        if dim == 0 || !values.len().is_multiple_of(dim) {
            return Err(Error::Shape(format!(
                "Embeddings: {} values are not whole rows of {dim}",
                values.len()
            )));
        }
        Ok(Embeddings { dim, values })
    }

    /// The width of a row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// How many rows.
    pub fn rows(&self) -> usize {
        self.values.len() / self.dim
    }

    /// Row `i`, or `None` past the end.
    pub fn row(&self, i: usize) -> Option<&[f32]> {
        self.values.chunks_exact(self.dim).nth(i)
    }

    /// All values, row-major.
    pub fn as_slice(&self) -> &[f32] {
        &self.values
    }
}

/// How a [`TextEncoder`] turns prompts into token ids. The defaults are `kinema encode`'s:
/// the chat template as the model file says (`auto`), over-long prompts cut word by word as
/// upstream LLM2Vec does.
///
/// ```
/// use kinema::{ChatTemplate, TextOptions};
/// let opts = TextOptions { chat_template: ChatTemplate::Off, ..TextOptions::default() };
/// # let _ = opts;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextOptions {
    /// `Auto` (the file's `llm2vec.chat_template_default`: what upstream does for that
    /// model), `On` (the Llama-3 user header and `<|eot_id|>`) or `Off` (BOS + text).
    pub chat_template: ChatTemplate,
    /// Prompts over LLM2Vec's text-token limit (`doc_max_length`, 400): `Trim` (cut word by
    /// word, upstream's rule) or `Refuse`.
    pub long_text: LongText,
}

impl Default for TextOptions {
    fn default() -> TextOptions {
        TextOptions {
            chat_template: ChatTemplate::Auto,
            long_text: LongText::Trim,
        }
    }
}

/// A loaded LLM2Vec (Llama) text model on an [`Engine`]. Cheap to clone (clones share the
/// weights) and `Send + Sync`: several threads may encode at once, each call building its
/// own graph and buffers.
#[derive(Clone)]
pub struct TextEncoder {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    model: LlamaModel,
    path: PathBuf,
    options: TextOptions,
    /// The chat template resolved for this model.
    template: bool,
    identity: ModelIdentity,
}

impl TextEncoder {
    /// Opens a Llama text model (`kinema convert llm2vec`, or a llama.cpp `llama` GGUF)
    /// memory-mapped and checked, with the default [`TextOptions`].
    pub fn load(engine: &Engine, path: impl AsRef<Path>) -> Result<TextEncoder> {
        TextEncoder::load_with(engine, path, TextOptions::default())
    }

    /// [`TextEncoder::load`] with `options`. A chat template the tokenizer cannot render
    /// (no Llama-3 header tokens) is refused here, before any prompt.
    pub fn load_with(
        engine: &Engine,
        path: impl AsRef<Path>,
        options: TextOptions,
    ) -> Result<TextEncoder> {
        let path = path.as_ref();
        let model = LlamaModel::load(path)?.for_backend(&engine.info())?;
        let template = options.chat_template.resolve(&model);
        encode::check_template(&model, template)?;
        let identity = model.identity(path)?;
        Ok(TextEncoder {
            inner: Arc::new(Inner {
                engine: engine.clone(),
                model,
                path: path.to_path_buf(),
                options,
                template,
                identity,
            }),
        })
    }

    /// The width of an embedding (the model's hidden size; 4096 for LLM2Vec).
    pub fn dim(&self) -> usize {
        self.inner.model.config.hidden
    }

    /// Whether the chat template wraps the prompts (the options' choice, resolved).
    pub fn chat_template(&self) -> bool {
        self.inner.template
    }

    /// The options it was loaded with.
    pub fn options(&self) -> TextOptions {
        self.inner.options
    }

    /// The file's identity (size, converter version, source hashes, name): what
    /// `kinema generate --prompt` keys its embedding cache on.
    pub fn identity(&self) -> &ModelIdentity {
        &self.inner.identity
    }

    /// The model as the internals hold it.
    pub fn model(&self) -> &LlamaModel {
        &self.inner.model
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The engine it runs on.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The embeddings of `prompts`, one row each in order: the mean of the final hidden
    /// states over the positions upstream pools. An empty prompt (only whitespace) embeds to
    /// zeros, as upstream does. Errors: no prompt, an over-long prompt with
    /// [`LongText::Refuse`], a prompt over the model's context.
    pub fn encode(&self, prompts: &[&str]) -> Result<Embeddings> {
        if prompts.is_empty() {
            return Err(Error::InvalidArgument(
                "TextEncoder::encode: no prompt given (pass at least one)".into(),
            ));
        }
        let i = &*self.inner;
        let prepared = prompts
            .iter()
            .enumerate()
            .map(|(n, s)| encode::prepare(&i.model, n, s, i.template, i.options.long_text))
            .collect::<Result<Vec<_>>>()?;
        let values = i.engine.backend().visit(Run {
            model: &i.model,
            prepared: &prepared,
        })?;
        Embeddings::new(self.dim(), values)
    }
}

impl std::fmt::Debug for TextEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextEncoder")
            .field("path", &self.inner.path)
            .field("dim", &self.dim())
            .field("chat_template", &self.inner.template)
            .field("engine", &self.inner.engine)
            .finish()
    }
}

/// [`encode::encode`] on the engine's backend.
struct Run<'a> {
    model: &'a LlamaModel,
    prepared: &'a [Prepared],
}

impl BackendVisitor for Run<'_> {
    type Output = Result<Vec<f32>>;
    fn visit<B: Backend>(self, b: &B) -> Result<Vec<f32>> {
        Ok(encode::encode(b, self.model, self.prepared)?.0)
    }
}
