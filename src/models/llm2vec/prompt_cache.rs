//! One prompt to one embedding for `kinema generate --prompt` (issue 11, part 6), with an
//! on-disk cache: the text model is loaded, run and dropped here, before the motion model is
//! loaded, so the encoder and the denoiser are never resident together.
//!
//! Cache entries are `<dir>/<key>.npy` (float32 `[1, hidden]`), `key` = SHA-256 of the text
//! model's identity (its size, converter version, source hashes and name, as the GGUF records
//! them), the template mode and the exact UTF-8 prompt. An entry that does not parse, has
//! another shape or holds a non-finite value is ignored and rewritten, never trusted. Entries
//! are written atomically (a temporary file, then a rename).

use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::config::{AttentionMode, keys};
use super::encode::{self, LongText, TemplateChoice};
use super::load::LlamaModel;
use crate::backend::Backend;
use crate::formats::{NpyArray, npy};
use crate::models::kit::identity::ModelIdentity;
use crate::{Error, Result};

/// Where the cache lives by default: `$KINEMA_CACHE_DIR`, else `$XDG_CACHE_HOME/kinema`, else
/// `$HOME/.cache/kinema`; embeddings go to its `embeddings/` folder. `None` when none is set.
pub fn default_cache_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let root = var("KINEMA_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|p| p.join("kinema")))
        .or_else(|| var("HOME").map(|p| p.join(".cache").join("kinema")))?;
    Some(root.join("embeddings"))
}

/// What [`embed_prompt`] did.
#[derive(Clone, Debug)]
pub struct PromptEmbedding {
    /// `[hidden]` f32.
    pub embedding: Vec<f32>,
    /// The chat template was applied.
    pub template: bool,
    /// Token ids run through the model (0 for an empty prompt, which embeds to zeros).
    pub tokens: usize,
    /// The cache entry (read or written), when a cache was used.
    pub cache_entry: Option<PathBuf>,
    /// The entry was read, not computed.
    pub cache_hit: bool,
    /// Seconds spent loading, compiling and running the text model (0 on a cache hit).
    pub encode_s: f64,
    /// Notes for the user (an ignored corrupt entry, an empty prompt).
    pub notes: Vec<String>,
}

/// The cache key of `prompt` under the text model `identity` and template mode.
pub fn cache_key(identity: &ModelIdentity, template: bool, prompt: &str) -> Result<String> {
    let id = serde_json::to_vec(identity)
        .map_err(|e| Error::InvalidArgument(format!("text model identity: {e}")))?;
    let mut h = Sha256::new();
    h.update(b"kinema-llm2vec-embedding-v1\0");
    h.update((id.len() as u64).to_le_bytes());
    h.update(&id);
    h.update([u8::from(template)]);
    h.update(prompt.as_bytes());
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// A cache entry's embedding if it is a float32 `[1, hidden]` array of finite values.
fn read_entry(path: &Path, hidden: usize) -> std::result::Result<Vec<f32>, String> {
    let a = npy::read_file(path).map_err(|e| e.to_string())?;
    if a.shape != [1, hidden] {
        return Err(format!("shape {:?}, expected [1, {hidden}]", a.shape));
    }
    let v = a.to_f32().map_err(|e| e.to_string())?;
    if let Some(x) = v.iter().find(|x| !x.is_finite()) {
        return Err(format!("holds {x}"));
    }
    Ok(v)
}

/// Checks that the text model `model` (at `path`, named `label` in errors) can condition a
/// motion model taking `expect_hidden`-wide text features: it must give embeddings of that
/// width, and be an LLM2Vec encoder (bidirectional attention, as `kinema convert llm2vec`
/// records it), not a causal language model whose pooled states no Kimodo model was trained
/// on. The Kimodo file records no encoder identity beyond the width, so these are the checks
/// there are.
pub fn check_fits(
    model: &LlamaModel,
    path: &Path,
    label: &str,
    expect_hidden: usize,
) -> Result<()> {
    let hidden = model.config.hidden;
    if hidden != expect_hidden {
        return Err(Error::Shape(format!(
            "{label} {} gives {hidden}-wide embeddings, but the motion model takes \
             {expect_hidden}-wide text features: use the text model the motion model was \
             trained with",
            path.display()
        )));
    }
    if model.config.attention != AttentionMode::Bidirectional {
        return Err(Error::InvalidArgument(format!(
            "{label} {} is a causal language model ({} = {}), not an LLM2Vec encoder: Kimodo's \
             text features come from LLM2Vec's bidirectional model (kinema convert llm2vec)",
            path.display(),
            keys::ATTENTION,
            model.config.attention.name()
        )));
    }
    Ok(())
}

/// A text model opened for `generate --prompt`: checked against the motion model's width,
/// its template resolved and its identity read. [`TextSession::embed`] moves the weights to
/// the backend only on a cache miss; with `keep`, they stay there for the next prompt (what
/// `--keep-text-loaded` asks), else they are dropped after each prompt.
pub struct TextSession {
    path: PathBuf,
    /// The model: as loaded from the file (memory-mapped), or prepared for the backend
    /// when `resident`; `None` once dropped (reopened when needed).
    model: Option<LlamaModel>,
    resident: bool,
    hidden: usize,
    template: bool,
    identity: ModelIdentity,
}

impl TextSession {
    /// Opens and checks the text model at `text_model` for a motion model taking
    /// `expect_hidden`-wide features, before any work.
    pub fn open(
        text_model: &Path,
        template: TemplateChoice,
        expect_hidden: usize,
    ) -> Result<TextSession> {
        let model = LlamaModel::load(text_model)?;
        check_fits(&model, text_model, "--text-model", expect_hidden)?;
        let use_template = template.resolve(&model);
        encode::check_template(&model, use_template)?;
        let identity = model.identity(text_model)?;
        Ok(TextSession {
            path: text_model.to_path_buf(),
            hidden: model.config.hidden,
            model: Some(model),
            resident: false,
            template: use_template,
            identity,
        })
    }

    /// Whether the model prepared for the backend is held (after a miss with `keep`).
    pub fn is_resident(&self) -> bool {
        self.resident
    }

    /// Drops the model (it is reopened if another prompt needs it).
    pub fn release(&mut self) {
        self.model = None;
        self.resident = false;
    }

    /// The model, reopened from the file when it was dropped.
    fn model(&mut self) -> Result<&LlamaModel> {
        if self.model.is_none() {
            self.model = Some(LlamaModel::load(&self.path)?);
            self.resident = false;
        }
        Ok(self.model.as_ref().expect("just loaded"))
    }

    /// The embedding of `prompt`, from the cache in `cache_dir` when an entry is there and
    /// sound, else computed on `backend` and stored. With `keep` the weights prepared for the
    /// backend stay for the next call; without, they are dropped before returning.
    pub fn embed<B: Backend>(
        &mut self,
        backend: &B,
        prompt: &str,
        cache_dir: Option<&Path>,
        keep: bool,
    ) -> Result<PromptEmbedding> {
        let hidden = self.hidden;
        let use_template = self.template;
        let mut notes = Vec::new();
        let entry = match cache_dir {
            Some(d) => Some(d.join(format!(
                "{}.npy",
                cache_key(&self.identity, use_template, prompt)?
            ))),
            None => None,
        };
        let prepared = encode::prepare(self.model()?, 0, prompt, use_template, LongText::Trim)?;
        let tokens = prepared.input.as_ref().map_or(0, |i| i.ids.len());
        if prepared.input.is_none() {
            notes.push(
                "the prompt is empty after stripping whitespace: its embedding is zeros, as \
                 upstream LLM2Vec returns"
                    .into(),
            );
        }
        if let Some(p) = &entry
            && p.exists()
        {
            match read_entry(p, hidden) {
                Ok(embedding) => {
                    return Ok(PromptEmbedding {
                        embedding,
                        template: use_template,
                        tokens,
                        cache_entry: entry,
                        cache_hit: true,
                        encode_s: 0.0,
                        notes,
                    });
                }
                Err(why) => notes.push(format!(
                    "ignored the corrupt cache entry {} ({why}); it is rewritten",
                    p.display()
                )),
            }
        }
        let t = Instant::now();
        self.model()?;
        let mut model = self.model.take().expect("loaded above");
        if !self.resident {
            model = model.for_backend(&backend.info())?;
        }
        self.resident = false;
        let (embedding, _) = encode::encode(backend, &model, std::slice::from_ref(&prepared))?;
        if keep {
            self.model = Some(model);
            self.resident = true;
        } else {
            drop(model);
        }
        let encode_s = t.elapsed().as_secs_f64();
        if let Some(p) = &entry {
            let write = || -> Result<()> {
                if let Some(d) = p.parent() {
                    std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
                }
                let a = NpyArray::from_f32(&[1, hidden], &embedding)?;
                npy::write_file(p, &a)
            };
            // A cache that cannot be written costs speed, not the run.
            if let Err(e) = write() {
                notes.push(format!(
                    "could not write the cache entry {}: {e}",
                    p.display()
                ));
            }
        }
        Ok(PromptEmbedding {
            embedding,
            template: use_template,
            tokens,
            cache_entry: entry,
            cache_hit: false,
            encode_s,
            notes,
        })
    }
}

/// The embedding of `prompt` with the text model at `text_model`, from the cache in
/// `cache_dir` when an entry is there and sound, else computed on `backend` (the model is
/// dropped before returning) and stored. `expect_hidden`: the width the caller needs (the
/// motion model's text-feature size), checked before any work ([`check_fits`]).
pub fn embed_prompt<B: Backend>(
    backend: &B,
    text_model: &Path,
    prompt: &str,
    template: TemplateChoice,
    expect_hidden: usize,
    cache_dir: Option<&Path>,
) -> Result<PromptEmbedding> {
    TextSession::open(text_model, template, expect_hidden)?.embed(backend, prompt, cache_dir, false)
}
