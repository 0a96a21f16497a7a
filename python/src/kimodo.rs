//! `kinema.Kimodo`: `kinema::Kimodo` with numpy in and out, and an upstream-shaped
//! `__call__` (`kimodo/model/kimodo_model.py#L343-531`) for scripts moving from `kimodo`.

use std::path::PathBuf;

use kinema::{Constraints, GenerateRequest, Motion, MotionParts, Noise, Segment, TextInput};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::arrays::{floats, put};
use crate::engine::Engine;
use crate::errors::{invalid, to_py};
use crate::progress;
use crate::text::TextEncoder;

/// A Kimodo model (a GGUF written by `kinema convert kimodo`) loaded on an Engine:
/// text feature in, skeleton motion out. Thread-safe: generations may run from several
/// Python threads at once (the GIL is released while they run).
///
/// Kimodo(engine, path, text_encoder=None)
///
/// text_encoder: a kinema.TextEncoder (LLM2Vec) that embeds prompts given as text (it must
///     fit the model: its width, bidirectional attention).
#[pyclass(frozen, module = "kinema")]
pub struct Kimodo {
    inner: kinema::Kimodo,
}

/// The options of one generation, shared by every sample of a call.
struct Options {
    steps: usize,
    cfg_text: Option<f32>,
    cfg_constraint: Option<f32>,
    cfg_rows: Option<usize>,
    diagnostics: bool,
    constraints: Option<Constraints>,
    postprocess: bool,
}

#[pymethods]
impl Kimodo {
    #[new]
    #[pyo3(signature = (engine, path, text_encoder = None))]
    fn new(
        py: Python<'_>,
        engine: &Engine,
        path: PathBuf,
        text_encoder: Option<&TextEncoder>,
    ) -> PyResult<Kimodo> {
        let e = engine.inner.clone();
        let text = text_encoder.map(|t| t.inner.clone());
        let inner = py
            .detach(|| {
                let k = kinema::Kimodo::load(&e, &path)?;
                match text {
                    Some(t) => k.with_text_encoder(t),
                    None => Ok(k),
                }
            })
            .map_err(to_py)?;
        Ok(Kimodo { inner })
    }

    /// Whether the model has a text encoder (prompts may be given as text).
    #[getter]
    fn has_text_encoder(&self) -> bool {
        self.inner.text_encoder().is_some()
    }

    /// The width of the text feature the model takes (4096 for LLM2Vec).
    #[getter]
    fn embedding_dim(&self) -> usize {
        self.inner.embedding_dim()
    }

    /// The most frames one generation may have.
    #[getter]
    fn max_frames(&self) -> usize {
        self.inner.max_frames()
    }

    /// Frames per second of the motion (30).
    #[getter]
    fn fps(&self) -> f32 {
        self.inner.config().fps
    }

    /// The width of the motion features (the `features` output's last axis).
    #[getter]
    fn feature_dim(&self) -> usize {
        self.inner.config().motion_dim
    }

    /// The model's skeleton ("soma30", "g1", "smplx22"); SOMA30 models return SOMA77 motion,
    /// as upstream does.
    #[getter]
    fn skeleton(&self) -> &'static str {
        self.inner.config().skeleton.name()
    }

    /// The DDIM steps the model was trained with: the most `steps` may be.
    #[getter]
    fn num_base_steps(&self) -> usize {
        self.inner.config().num_base_steps
    }

    /// The file the model was loaded from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// One motion from one text feature (or a prompt, with a text encoder), as
    /// `kinema generate --embedding` makes it: a dict of numpy arrays with the keys and arrays
    /// of its npz (upstream's seven keys, `features`, and with `diagnostics=True` the first
    /// step's stage outputs, with constraints also `constraint_features` and
    /// `constraint_mask`), no batch axis. `constraints`: upstream's constraints as a path to a
    /// `constraints.json`, its JSON text, or a list of its objects (dicts), applied as
    /// `kinema generate --constraints` applies them (3 guidance rows unless `cfg_rows` says).
    #[pyo3(signature = (
        embedding, num_frames, *, steps = 100, seed = 0, noise = None, cfg_text = None,
        cfg_constraint = None, cfg_rows = None, heading = 0.0, diagnostics = false,
        constraints = None, postprocess = true, progress = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        embedding: &Bound<'py, PyAny>,
        num_frames: usize,
        steps: usize,
        seed: u64,
        noise: Option<&Bound<'py, PyAny>>,
        cfg_text: Option<f32>,
        cfg_constraint: Option<f32>,
        cfg_rows: Option<usize>,
        heading: f32,
        diagnostics: bool,
        constraints: Option<&Bound<'py, PyAny>>,
        postprocess: bool,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let text = if let Ok(prompt) = embedding.downcast::<PyString>() {
            TextInput::Prompt(prompt.extract::<String>()?)
        } else {
            let (shape, e) = floats(embedding, "embedding")?;
            let d = self.inner.embedding_dim();
            if !(shape == [d] || shape == [1, d] || shape == [1, 1, d]) {
                return Err(invalid(format!(
                    "embedding has shape {shape:?}, expected [{d}] (or [1, {d}], [1, 1, {d}]): \
                     one text feature of the model's width"
                )));
            }
            TextInput::Embedding(e)
        };
        let noise = match noise {
            None => Noise::Seed(seed),
            Some(n) => Noise::Values(self.noise(n, num_frames, 1)?.remove(0)),
        };
        let opts = Options {
            steps,
            cfg_text,
            cfg_constraint,
            cfg_rows,
            diagnostics,
            constraints: constraints_of(constraints)?,
            postprocess,
        };
        let req = request(text, num_frames, noise, heading, &opts);
        let motions = self.run(py, vec![req], progress.as_ref())?;
        motion_dict(py, motions, false)
    }

    /// Upstream's call, `KimodoModel.__call__(prompts, num_frames, num_denoising_steps, ...)`,
    /// with text features in place of prompts: `prompts` is one embedding `[D]` (one motion,
    /// no batch axis, as upstream's single prompt) or `[B, D]` (a batch); with a text
    /// encoder, also a prompt or a list of prompts. Returns upstream's dict of numpy arrays
    /// (as `return_numpy=True`) plus `features`. Sample `i` starts from `seed + i` (as
    /// `kinema generate --samples`), or from `noise[i]`; `progress` runs once per sample.
    /// `constraint_lst` (upstream's constraints as JSON objects, JSON text or a file path) is
    /// applied to every sample; `post_processing` defaults to False, as upstream's.
    #[pyo3(signature = (
        prompts, num_frames, num_denoising_steps = 100, multi_prompt = false,
        constraint_lst = None, cfg_weight = None, num_samples = None, cfg_type = None,
        return_numpy = true, first_heading_angle = None, post_processing = false, *, seed = 0,
        noise = None, progress = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        prompts: &Bound<'py, PyAny>,
        num_frames: &Bound<'py, PyAny>,
        num_denoising_steps: usize,
        multi_prompt: bool,
        constraint_lst: Option<&Bound<'py, PyAny>>,
        cfg_weight: Option<&Bound<'py, PyAny>>,
        num_samples: Option<usize>,
        cfg_type: Option<&str>,
        return_numpy: bool,
        first_heading_angle: Option<&Bound<'py, PyAny>>,
        post_processing: bool,
        seed: u64,
        noise: Option<&Bound<'py, PyAny>>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        // kinema returns numpy arrays either way (upstream's `return_numpy=False` gives torch
        // tensors, which kinema does not depend on).
        let _ = return_numpy;
        // An empty list is no constraints (the exact 2-row shortcut), as upstream's None.
        let constraints = match constraint_lst {
            Some(c) if c.len().map(|n| n > 0).unwrap_or(true) => constraints_of(Some(c))?,
            _ => None,
        };
        let is_text = prompts.is_instance_of::<PyString>()
            || prompts
                .downcast::<PyList>()
                .is_ok_and(|l| l.iter().any(|x| x.is_instance_of::<PyString>()));
        if is_text && !self.has_text_encoder() {
            return Err(PyTypeError::new_err(
                "kinema.Kimodo takes text features, not prompts: pass the LLM2Vec embedding of \
                 each prompt ([D] or [B, D] floats; `kinema encode` writes them), or load the \
                 model with a text encoder (Kimodo(engine, path, text_encoder=TextEncoder(...)))",
            ));
        }
        let (cfg_text, cfg_constraint) = cfg(cfg_type, cfg_weight)?;
        if constraints.is_some() && cfg_type == Some("regular") {
            return Err(invalid(
                "cfg_type=\"regular\" with constraint_lst: kinema runs separated guidance with \
                 constraints (rows [text, constraint, uncond]); regular guidance equals it only \
                 without constraints",
            ));
        }

        let (texts, rows, batched): (Vec<TextInput>, usize, bool) = if is_text {
            if let Ok(p) = prompts.downcast::<PyString>() {
                let one = vec![TextInput::Prompt(p.extract::<String>()?)];
                (one, 1, num_samples.is_some())
            } else {
                let list: Vec<String> = prompts
                    .extract()
                    .map_err(|_| invalid("prompts: a list of prompts holds only strings"))?;
                let n = list.len();
                if n == 0 {
                    return Err(invalid("prompts: the list is empty"));
                }
                (list.into_iter().map(TextInput::Prompt).collect(), n, true)
            }
        } else {
            let (shape, e) = floats(prompts, "prompts")?;
            let d = self.inner.embedding_dim();
            let (rows, batched) = match shape.as_slice() {
                [x] if *x == d => (1, num_samples.is_some()),
                [b, x] if *x == d => (*b, true),
                [b, 1, x] if *x == d => (*b, true),
                _ => {
                    return Err(invalid(format!(
                        "prompts has shape {shape:?}, expected [{d}] or [B, {d}]: text features \
                         of the model's width"
                    )));
                }
            };
            let texts = e
                .chunks_exact(d)
                .map(|r| TextInput::Embedding(r.to_vec()))
                .collect();
            (texts, rows, batched)
        };
        let opts = Options {
            steps: num_denoising_steps,
            cfg_text,
            cfg_constraint,
            cfg_rows: None,
            diagnostics: false,
            constraints,
            postprocess: post_processing,
        };
        if multi_prompt && rows > 1 {
            // Upstream's `_multiprompt`: the prompts are consecutive segments of ONE motion,
            // stitched with transitions (one prompt is the plain call, as upstream's CLI).
            return self.call_segments(
                py,
                texts,
                num_frames,
                num_samples,
                first_heading_angle,
                noise,
                seed,
                &opts,
                progress.as_ref(),
            );
        }
        let samples = match (num_samples, rows) {
            (None, r) => r,
            (Some(0), _) => return Err(invalid("num_samples = 0: generate at least one motion")),
            (Some(n), 1) => n,
            (Some(n), r) if n == r => r,
            (Some(n), r) => {
                return Err(invalid(format!(
                    "num_samples = {n} with {r} text features: give one feature, or as many as \
                     samples"
                )));
            }
        };
        let frames = frames_of(num_frames, samples)?;
        let headings = headings(first_heading_angle, samples)?;
        let noises = match noise {
            None => (0..samples)
                .map(|i| {
                    seed.checked_add(i as u64).map(Noise::Seed).ok_or_else(|| {
                        invalid(format!(
                            "seed {seed} with {samples} samples runs past 2^64 - 1"
                        ))
                    })
                })
                .collect::<PyResult<Vec<_>>>()?,
            Some(n) => self
                .noise(n, frames, if batched { samples } else { 1 })?
                .into_iter()
                .map(Noise::Values)
                .collect(),
        };
        let reqs = noises
            .into_iter()
            .zip(headings)
            .enumerate()
            .map(|(i, (n, h))| {
                let row = if rows == 1 { 0 } else { i };
                request(texts[row].clone(), frames, n, h, &opts)
            })
            .collect();
        let motions = self.run(py, reqs, progress.as_ref())?;
        motion_dict(py, motions, batched)
    }

    fn __repr__(&self) -> String {
        format!(
            "kinema.Kimodo({:?}, skeleton={:?}, engine={})",
            self.inner.path().display().to_string(),
            self.inner.config().skeleton.name(),
            self.inner.engine().info().kind
        )
    }
}

impl Kimodo {
    /// Runs the requests one after the other with the GIL released.
    /// `__call__(..., multi_prompt=True)` with several prompts: one motion whose segment `i`
    /// follows prompt `i` for `num_frames[i]` frames (an int: every segment that long), the
    /// noise of each segment drawn from `seed` as `kinema generate` draws a timeline's.
    #[allow(clippy::too_many_arguments)]
    fn call_segments<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<TextInput>,
        num_frames: &Bound<'py, PyAny>,
        num_samples: Option<usize>,
        first_heading_angle: Option<&Bound<'py, PyAny>>,
        noise: Option<&Bound<'py, PyAny>>,
        seed: u64,
        opts: &Options,
        progress: Option<&Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let n = texts.len();
        if let Some(s) = num_samples.filter(|&s| s != 1) {
            return Err(invalid(format!(
                "num_samples = {s} with multi_prompt: kinema stitches one motion per call; call \
                 once per sample (seed + i)"
            )));
        }
        if noise.is_some() {
            return Err(invalid(
                "noise with multi_prompt: each segment draws its x_T from seed; pass seed= \
                 instead",
            ));
        }
        let lengths: Vec<usize> = match num_frames.extract::<usize>() {
            Ok(f) => vec![f; n],
            Err(_) => num_frames.extract().map_err(|_| {
                invalid("num_frames: an int or a list of ints, one per prompt (multi_prompt)")
            })?,
        };
        if lengths.len() != n {
            return Err(invalid(format!(
                "num_frames: {} lengths for {n} prompts (multi_prompt: one per segment)",
                lengths.len()
            )));
        }
        let heading = headings(first_heading_angle, 1)?[0];
        let mut parts = texts.into_iter().zip(lengths);
        let Some((text, frames)) = parts.next() else {
            return Err(invalid("prompts: the list is empty"));
        };
        let mut req = request(text, frames, Noise::Seed(seed), heading, opts);
        req.segments = parts
            .map(|(text, frames)| Segment { text, frames })
            .collect();
        let motions = self.run(py, vec![req], progress)?;
        motion_dict(py, motions, num_samples.is_some())
    }

    fn run(
        &self,
        py: Python<'_>,
        reqs: Vec<GenerateRequest>,
        progress: Option<&Py<PyAny>>,
    ) -> PyResult<Vec<Motion>> {
        let model = &self.inner;
        progress::run(py, progress, |cb| {
            reqs.iter()
                .map(|r| model.generate_with_progress(r, &mut |s, i, n| cb.call(s, i, n)))
                .collect()
        })
    }

    /// Given noise: `[batch, T, dim]`, or `[T, dim]` for one motion.
    fn noise(&self, n: &Bound<'_, PyAny>, frames: usize, batch: usize) -> PyResult<Vec<Vec<f32>>> {
        let (shape, v) = floats(n, "noise")?;
        let dim = self.inner.config().motion_dim;
        let b = batch;
        let ok = shape == [b, frames, dim] || (b == 1 && shape == [frames, dim]);
        if !ok {
            return Err(invalid(format!(
                "noise has shape {shape:?}, expected [{b}, {frames}, {dim}] (x_T of each sample: \
                 [samples, num_frames, feature_dim])"
            )));
        }
        Ok(v.chunks_exact(frames * dim).map(<[f32]>::to_vec).collect())
    }
}

fn request(
    text: TextInput,
    frames: usize,
    noise: Noise,
    heading: f32,
    o: &Options,
) -> GenerateRequest {
    GenerateRequest {
        text,
        steps: o.steps,
        noise,
        cfg_text: o.cfg_text,
        cfg_constraint: o.cfg_constraint,
        cfg_rows: o.cfg_rows,
        constraints: o.constraints.clone(),
        postprocess: o.postprocess,
        heading,
        diagnostics: o.diagnostics,
        ..GenerateRequest::new(Vec::new(), frames)
    }
}

/// Upstream's constraints from Python: None; a `str` holding JSON text (it starts with `[`
/// or `{`) or else a path; an `os.PathLike`; `bytes` of JSON; or a list of upstream's JSON
/// objects (dicts, numpy arrays allowed), serialised by Python's `json`
/// (`kinema._constraints.to_json`).
fn constraints_of(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Constraints>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    let parsed = if let Ok(s) = obj.downcast::<PyString>() {
        let s: String = s.extract()?;
        if s.trim_start().starts_with(['[', '{']) {
            Constraints::from_json(&s)
        } else {
            Constraints::from_path(&s)
        }
    } else if let Ok(b) = obj.downcast::<PyBytes>() {
        Constraints::from_json_bytes(b.as_bytes())
    } else if obj.hasattr("__fspath__")? {
        Constraints::from_path(obj.extract::<PathBuf>()?)
    } else {
        let json = obj
            .py()
            .import("kinema._constraints")?
            .call_method1("to_json", (obj,))?;
        Constraints::from_json(&json.extract::<String>()?)
    };
    parsed.map(Some).map_err(to_py)
}

/// Upstream's `cfg_type`/`cfg_weight` as kinema's text and constraint weights. kinema runs
/// separated guidance (`kimodo/model/cfg.py#L96-131`); without constraints its constraint
/// row equals the unconditional one, so `regular` with weight `w` is separated with text
/// weight `w`, term for term (`cfg.py#L72-94`). `nocfg` (one unguided pass) is not built.
fn cfg(
    cfg_type: Option<&str>,
    weight: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Option<f32>, Option<f32>)> {
    match cfg_type {
        None | Some("separated") => match weight {
            None => Ok((None, None)),
            Some(w) => match w.extract::<Vec<f32>>().as_deref() {
                Ok([t, c]) => Ok((Some(*t), Some(*c))),
                _ => Err(invalid(
                    "cfg_weight: separated guidance takes two weights [text, constraint]",
                )),
            },
        },
        Some("regular") => match weight.map(|w| w.extract::<f32>()) {
            Some(Ok(w)) => Ok((Some(w), None)),
            _ => Err(invalid(
                "cfg_weight: regular guidance takes one float weight",
            )),
        },
        Some("nocfg") => Err(invalid(
            "cfg_type=\"nocfg\" is not in kinema: it runs separated guidance (or regular, its \
             special case without constraints)",
        )),
        Some(other) => Err(invalid(format!(
            "cfg_type {other:?}: expected \"separated\", \"regular\" or None"
        ))),
    }
}

/// `num_frames`: one int, or a list of one int per sample (all equal: kinema does not pad
/// clips of several lengths into one batch).
fn frames_of(n: &Bound<'_, PyAny>, samples: usize) -> PyResult<usize> {
    if let Ok(f) = n.extract::<usize>() {
        return Ok(f);
    }
    let v: Vec<usize> = n
        .extract()
        .map_err(|_| invalid("num_frames: expected an int or a list of ints"))?;
    if v.len() != samples {
        return Err(invalid(format!(
            "num_frames: {} lengths for {samples} samples",
            v.len()
        )));
    }
    if v.iter().any(|&f| f != v[0]) {
        return Err(invalid(format!(
            "num_frames {v:?}: kinema generates a batch at one length; call once per length"
        )));
    }
    Ok(v[0])
}

/// `first_heading_angle`: None (0), one angle, or one per sample.
fn headings(h: Option<&Bound<'_, PyAny>>, samples: usize) -> PyResult<Vec<f32>> {
    let Some(h) = h else {
        return Ok(vec![0.0; samples]);
    };
    let (shape, v) = floats(h, "first_heading_angle")?;
    match v.len() {
        1 => Ok(vec![v[0]; samples]),
        n if n == samples && shape.len() == 1 => Ok(v),
        _ => Err(invalid(format!(
            "first_heading_angle has shape {shape:?}: expected one angle or [{samples}]"
        ))),
    }
}

/// The arrays of `motions` in a dict, under the npz keys of `kinema generate`; with `batched`
/// each array gains a leading sample axis (one copy into the stacked array), else the one
/// motion's vectors become the arrays without a copy.
fn motion_dict<'py>(
    py: Python<'py>,
    motions: Vec<Motion>,
    batched: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let first = &motions[0];
    let (t, j, dim) = (first.frames(), first.joints(), first.feature_dim());
    let lead: Vec<usize> = if batched { vec![motions.len()] } else { vec![] };
    let shape = |rest: &[usize]| [lead.as_slice(), rest].concat();
    let mut parts: Vec<MotionParts> = motions.into_iter().map(Motion::into_parts).collect();
    let d = PyDict::new(py);
    put(
        &d,
        "local_rot_mats",
        stack(&mut parts, |p| &mut p.motion.local_rot_mats),
        &shape(&[t, j, 3, 3]),
    )?;
    put(
        &d,
        "global_rot_mats",
        stack(&mut parts, |p| &mut p.motion.global_rot_mats),
        &shape(&[t, j, 3, 3]),
    )?;
    put(
        &d,
        "posed_joints",
        stack(&mut parts, |p| &mut p.motion.posed_joints),
        &shape(&[t, j, 3]),
    )?;
    put(
        &d,
        "root_positions",
        stack(&mut parts, |p| &mut p.motion.root_positions),
        &shape(&[t, 3]),
    )?;
    put(
        &d,
        "smooth_root_pos",
        stack(&mut parts, |p| &mut p.motion.smooth_root_pos),
        &shape(&[t, 3]),
    )?;
    put(
        &d,
        "foot_contacts",
        stack(&mut parts, |p| &mut p.motion.foot_contacts),
        &shape(&[t, 4]),
    )?;
    put(
        &d,
        "global_root_heading",
        stack(&mut parts, |p| &mut p.motion.global_root_heading),
        &shape(&[t, 2]),
    )?;
    put(
        &d,
        "features",
        stack(&mut parts, |p| &mut p.features),
        &shape(&[t, dim]),
    )?;
    if parts[0].diagnostics.is_some() {
        let mut diags: Vec<_> = parts
            .iter_mut()
            .filter_map(|p| p.diagnostics.take())
            .collect();
        let rows = diags[0].root_stage_step0.len() / (t * 5);
        put(
            &d,
            "root_stage_step0",
            stack(&mut diags, |x| &mut x.root_stage_step0),
            &shape(&[rows, t, 5]),
        )?;
        put(
            &d,
            "body_stage_step0",
            stack(&mut diags, |x| &mut x.body_stage_step0),
            &shape(&[rows, t, dim - 5]),
        )?;
        put(
            &d,
            "x0_step0",
            stack(&mut diags, |x| &mut x.x0_step0),
            &shape(&[t, dim]),
        )?;
        // With constraints, the npz of `kinema generate --diagnostics` holds their conditions.
        if parts[0].conditions.is_some() {
            let mut conds: Vec<_> = parts
                .iter_mut()
                .filter_map(|p| p.conditions.take())
                .collect();
            put(
                &d,
                "constraint_features",
                stack(&mut conds, |c| &mut c.features),
                &shape(&[t, dim]),
            )?;
            put(
                &d,
                "constraint_mask",
                stack(&mut conds, |c| &mut c.mask),
                &shape(&[t, dim]),
            )?;
        }
    }
    Ok(d)
}

/// One array of every motion, taken out of them: the vector itself for one motion (no copy),
/// the concatenation for several.
fn stack<P, T>(parts: &mut [P], f: impl Fn(&mut P) -> &mut Vec<T>) -> Vec<T> {
    if let [one] = parts {
        return std::mem::take(f(one));
    }
    let mut out = Vec::new();
    for p in parts {
        out.append(f(p));
    }
    out
}
