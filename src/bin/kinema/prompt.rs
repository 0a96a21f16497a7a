//! The text phase of `kinema generate` with prompts (issue 11, part 6): every prompt of the
//! run (`--prompt`s, `--prompts-file`, timeline prompts) embedded through the cache with one
//! load of the text model, its time and peak memory recorded in each prompt's sidecar record.
//! Without `--keep-text-loaded` the text model is freed before the motion model loads, so the
//! two are never resident together; with it the text model stays loaded through the motion
//! phase.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kinema::Backend;
use kinema::backend::MemoryUse;
use kinema::device::{BackendVisitor, Selection};
use kinema::formats::read_capped;
use kinema::models::kimodo::generate::TextPhase;
use kinema::models::llm2vec::encode::TemplateChoice;
use kinema::models::llm2vec::prompt_cache::{self, PromptEmbedding, TextSession};
use kinema::models::llm2vec::tokenizer::strings::{MAX_STRINGS_FILE_BYTES, parse_strings};

/// `1.2 GiB (vulkan buffers)`, or `unknown (process rss)`.
pub fn describe_memory(m: &MemoryUse) -> String {
    match m.peak_bytes {
        Some(b) if b >= 1 << 30 => {
            format!("{:.2} GiB ({})", b as f64 / (1u64 << 30) as f64, m.what)
        }
        Some(b) => format!("{:.1} MiB ({})", b as f64 / (1u64 << 20) as f64, m.what),
        None => format!("unknown ({})", m.what),
    }
}

/// A `--prompts-file`: a JSON list of strings, not empty.
pub fn read_prompts_file(f: &Path) -> kinema::Result<Vec<String>> {
    let bytes = read_capped(f, MAX_STRINGS_FILE_BYTES, "prompts file")?;
    let list = parse_strings(&bytes).map_err(|e| {
        kinema::Error::InvalidArgument(format!("--prompts-file {}: {e}", f.display()))
    })?;
    if list.is_empty() {
        return Err(kinema::Error::InvalidArgument(format!(
            "--prompts-file {}: the list is empty",
            f.display()
        )));
    }
    Ok(list)
}

/// What the text phase leaves for the motion phase: each prompt's embedding file and its
/// record, the temporary folders that hold uncached embeddings, and the text model when
/// `--keep-text-loaded` keeps it. Dropping it frees all three.
pub struct TextPhaseOutput {
    /// Per prompt, in order: the embedding's `.npy` and its sidecar record.
    pub prompts: Vec<(PathBuf, TextPhase)>,
    _scratch: Vec<ScratchDir>,
    _session: Option<TextSession>,
}

/// What the text phase takes from `kinema generate`'s options.
pub struct TextPhaseOptions<'a> {
    /// The Kimodo model file (its text-feature width).
    pub model: &'a Path,
    /// `--chat-template`.
    pub chat_template: &'a str,
    /// `--no-cache`.
    pub no_cache: bool,
    /// `--cache-dir`.
    pub cache_dir: Option<&'a Path>,
    /// `--keep-text-loaded`.
    pub keep_text_loaded: bool,
    /// `--quiet`.
    pub quiet: bool,
}

/// The text phase of `kinema generate`: every prompt embedded (through the cache) with one
/// load of the text model, its time and peak memory recorded for each prompt's sidecar.
pub fn text_phase(
    o: &TextPhaseOptions<'_>,
    selection: &Selection,
    prompts: &[String],
    text_model: &Path,
) -> kinema::Result<TextPhaseOutput> {
    let template = TemplateChoice::parse(o.chat_template)?;
    let llm_dim = kinema::models::kimodo::config::KimodoModel::load(o.model)?
        .config
        .llm_dim;
    let cache = if o.no_cache {
        None
    } else {
        o.cache_dir
            .map(Path::to_path_buf)
            .or_else(prompt_cache::default_cache_dir)
    };
    let keep = o.keep_text_loaded;
    let n = prompts.len();
    let t = Instant::now();
    selection.backend.visit(ResetPeak);
    let mut session = TextSession::open(text_model, template, llm_dim)?;
    let mut done = Vec::with_capacity(n);
    let mut scratch = Vec::new();
    for (i, prompt) in prompts.iter().enumerate() {
        // Prompts after this one reuse the prepared model; the last one keeps it only for
        // --keep-text-loaded.
        let e = selection.backend.visit(Embed {
            session: &mut session,
            prompt,
            cache: cache.as_deref(),
            keep: keep || i + 1 < n,
        })?;
        if !o.quiet {
            for note in &e.notes {
                eprintln!("note: {note}");
            }
            eprintln!(
                "kinema: {} embedded ({} tokens, chat template {}): {}",
                if n > 1 {
                    format!("prompt {i}")
                } else {
                    "prompt".into()
                },
                e.tokens,
                if e.template { "on" } else { "off" },
                if e.cache_hit {
                    "from the cache".to_string()
                } else {
                    format!("{:.2} s", e.encode_s)
                }
            );
        }
        let (path, dir) = embedding_file(&e)?;
        scratch.extend(dir);
        done.push((path, e));
    }
    let session = if keep {
        Some(session)
    } else {
        drop(session);
        None
    };
    let memory = selection.backend.visit(Memory);
    let seconds = t.elapsed().as_secs_f64();
    let prompts = done
        .into_iter()
        .zip(prompts)
        .map(|((path, e), prompt)| {
            let record = TextPhase {
                text_model: text_model.display().to_string(),
                prompt: prompt.clone(),
                chat_template: if e.template { "on" } else { "off" },
                tokens: e.tokens,
                cache: match (&e.cache_entry, e.cache_hit) {
                    (None, _) => "off",
                    (Some(_), true) => "hit",
                    (Some(_), false) => "miss",
                },
                cache_entry: e.cache_entry.as_ref().map(|p| p.display().to_string()),
                kept_loaded: keep,
                seconds,
                memory,
            };
            (path, record)
        })
        .collect();
    Ok(TextPhaseOutput {
        prompts,
        _scratch: scratch,
        _session: session,
    })
}

/// The embedding's `.npy`: the cache entry, or a temporary file (with the folder that holds
/// it, removed on drop) when the cache is off or could not be written.
fn embedding_file(e: &PromptEmbedding) -> kinema::Result<(PathBuf, Option<ScratchDir>)> {
    match &e.cache_entry {
        Some(p) if p.exists() => Ok((p.clone(), None)),
        _ => {
            let dir = ScratchDir::new()?;
            let p = dir.0.join("embedding.npy");
            let a = kinema::formats::NpyArray::from_f32(&[1, e.embedding.len()], &e.embedding)?;
            kinema::formats::npy::write_file(&p, &a)?;
            Ok((p, Some(dir)))
        }
    }
}

/// [`TextSession::embed`] on the selected backend.
struct Embed<'a> {
    session: &'a mut TextSession,
    prompt: &'a str,
    cache: Option<&'a Path>,
    keep: bool,
}

impl BackendVisitor for Embed<'_> {
    type Output = kinema::Result<PromptEmbedding>;
    fn visit<B: Backend>(self, b: &B) -> Self::Output {
        self.session.embed(b, self.prompt, self.cache, self.keep)
    }
}

/// [`Backend::reset_peak_memory`] on the selected backend.
struct ResetPeak;

impl BackendVisitor for ResetPeak {
    type Output = ();
    fn visit<B: Backend>(self, b: &B) {
        b.reset_peak_memory()
    }
}

/// [`Backend::memory_use`] on the selected backend.
struct Memory;

impl BackendVisitor for Memory {
    type Output = MemoryUse;
    fn visit<B: Backend>(self, b: &B) -> MemoryUse {
        b.memory_use()
    }
}

/// A private temporary folder, removed on drop.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> kinema::Result<ScratchDir> {
        let base = std::env::temp_dir();
        for i in 0..100u32 {
            let p = base.join(format!("kinema-prompt-{}-{i}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(ScratchDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(kinema::Error::io(&p, e)),
            }
        }
        Err(kinema::Error::InvalidArgument(format!(
            "could not make a temporary folder in {}",
            base.display()
        )))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
