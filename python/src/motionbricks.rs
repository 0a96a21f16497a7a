//! `kinema.MotionBricks`: `kinema::MotionBricks` with upstream `predict`'s arguments as
//! numpy arrays (`motionbricks/motion_backbone/inference/motion_inference.py#L44-126`).

use std::path::PathBuf;
use std::sync::Arc;

use kinema::models::motionbricks::dims;
use kinema::models::motionbricks::plan::PlanOutput;
use kinema::{Draws, PlanRequest, Sampling};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::arrays::{array, check_shape, flags, floats, ints, put};
use crate::engine::Engine;
use crate::errors::{invalid, to_py};
use crate::progress;

/// A MotionBricks model (a GGUF written by `kinema convert motionbricks`) loaded on an
/// Engine: keyframe context and commands in, a G1 motion plan out. Thread-safe: plans may run
/// from several Python threads at once (the GIL is released while they run).
///
/// MotionBricks(engine, path)
#[pyclass(frozen, module = "kinema")]
pub struct MotionBricks {
    /// Shared with the agents made from it.
    pub(crate) inner: Arc<kinema::MotionBricks>,
}

/// `predict`'s float inputs and their widths per keyframe.
const FLOATS: [(&str, usize); 3] = [
    ("global_root_values", dims::GLOBAL_ROOT),
    ("local_root_values", dims::LOCAL_ROOT),
    ("local_poses", dims::EXTERNAL_POSE),
];

/// `predict`'s per-keyframe flags.
const FLAGS: [&str; 3] = [
    "has_global_root_values",
    "has_local_root_values",
    "has_local_poses",
];

/// The inputs of one call, by name, as given (None: not given).
struct Inputs<'a, 'py> {
    floats: [Option<&'a Bound<'py, PyAny>>; 3],
    flags: [Option<&'a Bound<'py, PyAny>>; 3],
    num_tokens: Option<&'a Bound<'py, PyAny>>,
    allowed: Option<&'a Bound<'py, PyAny>>,
}

#[pymethods]
impl MotionBricks {
    #[new]
    fn new(py: Python<'_>, engine: &Engine, path: PathBuf) -> PyResult<MotionBricks> {
        let e = engine.inner.clone();
        let inner = py
            .detach(|| kinema::MotionBricks::load(&e, &path))
            .map_err(to_py)?;
        let inner = Arc::new(inner);
        Ok(MotionBricks { inner })
    }

    /// Frames per token (4).
    #[getter]
    fn frames_per_token(&self) -> usize {
        self.inner.config().frames_per_token()
    }

    /// Keyframes of the inputs, K = 2 x frames per token (8).
    #[getter]
    fn num_keyframes(&self) -> usize {
        2 * self.inner.config().frames_per_token()
    }

    /// The shortest plan in tokens.
    #[getter]
    fn min_tokens(&self) -> usize {
        self.inner.config().min_tokens
    }

    /// The longest plan in tokens; `num_tokens = max_tokens + 2` lets the model choose.
    #[getter]
    fn max_tokens(&self) -> usize {
        self.inner.config().max_tokens
    }

    /// Frames of the (padded) outputs: max_tokens x frames per token.
    #[getter]
    fn max_frames(&self) -> usize {
        self.inner.config().max_frames()
    }

    /// Code heads per token.
    #[getter]
    fn code_heads(&self) -> usize {
        self.inner.config().code_heads
    }

    /// Codes per head.
    #[getter]
    fn codes(&self) -> usize {
        self.inner.config().codes
    }

    /// The file the model was loaded from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// One batch of plans, as `kinema plan` makes them. Inputs are upstream `predict`'s
    /// arguments (unnormalised), any left out given as "nothing": no keyframes, the length
    /// left to the model (`num_tokens` None), every length allowed. Returns a dict with the
    /// keys of `kinema plan`'s npz, batch axis always kept: `num_tokens [B]`, `pose_tokens
    /// [B, max_tokens, heads]` (int64), `features [B, frames, 414]`, `qpos [B, frames, 36]`,
    /// and with `diagnostics=True` the root output, logits, decoder output and uniforms.
    #[pyo3(signature = (
        global_root_values = None, has_global_root_values = None, local_root_values = None,
        has_local_root_values = None, local_poses = None, has_local_poses = None,
        num_tokens = None, allowed_pred_num_tokens = None, *, batch = None,
        sampling = "gumbel", seed = 0, uniforms = None, diagnostics = false, progress = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn plan<'py>(
        &self,
        py: Python<'py>,
        global_root_values: Option<&Bound<'py, PyAny>>,
        has_global_root_values: Option<&Bound<'py, PyAny>>,
        local_root_values: Option<&Bound<'py, PyAny>>,
        has_local_root_values: Option<&Bound<'py, PyAny>>,
        local_poses: Option<&Bound<'py, PyAny>>,
        has_local_poses: Option<&Bound<'py, PyAny>>,
        num_tokens: Option<&Bound<'py, PyAny>>,
        allowed_pred_num_tokens: Option<&Bound<'py, PyAny>>,
        batch: Option<usize>,
        sampling: &str,
        seed: u64,
        uniforms: Option<&Bound<'py, PyAny>>,
        diagnostics: bool,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let inputs = Inputs {
            floats: [global_root_values, local_root_values, local_poses],
            flags: [
                has_global_root_values,
                has_local_root_values,
                has_local_poses,
            ],
            num_tokens,
            allowed: allowed_pred_num_tokens,
        };
        let sampling: Sampling = sampling.parse().map_err(to_py)?;
        let req = self.request(&inputs, batch, sampling, seed, uniforms)?;
        let b = req.batch();
        let out = self.run(py, &req, progress.as_ref())?;
        self.plan_dict(py, out, b, diagnostics)
    }

    /// Upstream's `motion_inference.predict(...)`: the same arguments, returning
    /// `(features [B, frames, 414], num_tokens [B])`. `config` takes the keys of upstream's
    /// that kinema follows: `pose_token_sampling_use_argmax` (default False: Gumbel, as
    /// upstream's default; the released agent passes True), `num_inference_step` (1), and
    /// `allow_pred_out_of_reach_num_tokens`, `skip_ending_target_cond`, `smooth_root_traj`
    /// (False). Gumbel draws come from `seed` (plan `b` from `seed + b`) or `uniforms`.
    #[pyo3(signature = (
        global_root_values, has_global_root_values, local_root_values, has_local_root_values,
        local_poses, has_local_poses, num_tokens = None, text_embeddings = None,
        has_text_embeddings = None, allowed_pred_num_tokens = None, config = None, info = None,
        *, seed = 0, uniforms = None, progress = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        global_root_values: &Bound<'py, PyAny>,
        has_global_root_values: &Bound<'py, PyAny>,
        local_root_values: &Bound<'py, PyAny>,
        has_local_root_values: &Bound<'py, PyAny>,
        local_poses: &Bound<'py, PyAny>,
        has_local_poses: &Bound<'py, PyAny>,
        num_tokens: Option<&Bound<'py, PyAny>>,
        text_embeddings: Option<&Bound<'py, PyAny>>,
        has_text_embeddings: Option<&Bound<'py, PyAny>>,
        allowed_pred_num_tokens: Option<&Bound<'py, PyAny>>,
        config: Option<&Bound<'py, PyDict>>,
        info: Option<&Bound<'py, PyAny>>,
        seed: u64,
        uniforms: Option<&Bound<'py, PyAny>>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        // `info` is upstream's out-parameter for debugging values; kinema fills nothing in it.
        let _ = info;
        if text_embeddings.is_some_and(|t| !t.is_none())
            || has_text_embeddings.is_some_and(|t| !t.is_none())
        {
            return Err(invalid(
                "text_embeddings: the released MotionBricks models take no text (their configs \
                 say text_embeddings: null)",
            ));
        }
        let sampling = sampling_of(config)?;
        let inputs = Inputs {
            floats: [
                Some(global_root_values),
                Some(local_root_values),
                Some(local_poses),
            ],
            flags: [
                Some(has_global_root_values),
                Some(has_local_root_values),
                Some(has_local_poses),
            ],
            num_tokens,
            allowed: allowed_pred_num_tokens,
        };
        let req = self.request(&inputs, None, sampling, seed, uniforms)?;
        let b = req.batch();
        let out = self.run(py, &req, progress.as_ref())?;
        let frames = self.inner.config().max_frames();
        let features = array(py, out.features, &[b, frames, dims::GLOBAL_REP])?;
        let n: Vec<i64> = out.num_tokens.into_iter().map(i64::from).collect();
        PyTuple::new(py, [features, array(py, n, &[b])?])
    }

    fn __repr__(&self) -> String {
        format!(
            "kinema.MotionBricks({:?}, engine={})",
            self.inner.path().display().to_string(),
            self.inner.engine().info().kind
        )
    }
}

impl MotionBricks {
    /// The request for `inputs`: the batch from the first array given (or `batch`, or 1),
    /// every array's shape checked against it.
    fn request(
        &self,
        inputs: &Inputs<'_, '_>,
        batch: Option<usize>,
        sampling: Sampling,
        seed: u64,
        uniforms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PlanRequest> {
        let c = self.inner.config();
        let k = 2 * c.frames_per_token();
        let classes = c.max_tokens - c.min_tokens + 1;
        let mut given = Vec::new();
        for ((name, _), obj) in FLOATS.iter().zip(inputs.floats) {
            if let Some(o) = obj {
                given.push((*name, floats(o, name)?));
            }
        }
        let from_arrays = given.first().and_then(|(_, (s, _))| s.first().copied());
        let b = match (batch, from_arrays) {
            (Some(b), Some(a)) if a != b => {
                return Err(invalid(format!(
                    "batch = {b}, but {} has {a} rows",
                    given[0].0
                )));
            }
            (_, Some(a)) => a,
            (Some(b), None) => b,
            (None, None) => 1,
        };
        let mut req = self.inner.request(b).map_err(to_py)?;
        for (name, (shape, v)) in given {
            let width = FLOATS
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, w)| *w);
            check_shape(name, &shape, &[b, k, width])?;
            req.set_floats(name, &v).map_err(to_py)?;
        }
        for (name, obj) in FLAGS.iter().zip(inputs.flags) {
            if let Some(o) = obj {
                let (shape, v) = flags(o, name)?;
                check_shape(name, &shape, &[b, k])?;
                req.set_flags(name, &v).map_err(to_py)?;
            }
        }
        if let Some(o) = inputs.allowed.filter(|o| !o.is_none()) {
            let name = "allowed_pred_num_tokens";
            let (shape, v) = flags(o, name)?;
            check_shape(name, &shape, &[b, classes])?;
            req.set_flags(name, &v).map_err(to_py)?;
        }
        if let Some(o) = inputs.num_tokens.filter(|o| !o.is_none()) {
            let n = match o.extract::<i64>() {
                Ok(n) => vec![n; b],
                Err(_) => {
                    let (shape, v) = ints(o, "num_tokens")?;
                    if !(shape == [b] || shape == [b, 1]) {
                        return Err(invalid(format!(
                            "num_tokens has shape {shape:?}, expected [{b}] or [{b}, 1]"
                        )));
                    }
                    v
                }
            };
            req.set_num_tokens(&n).map_err(to_py)?;
        }
        req.sampling = sampling;
        req.draws = match uniforms {
            None => Draws::Seed(seed),
            Some(u) => {
                let (shape, v) = floats(u, "uniforms")?;
                let full = [b, c.max_tokens, c.code_heads, c.codes];
                if !(shape == full || (b == 1 && shape == full[1..])) {
                    return Err(invalid(format!(
                        "uniforms has shape {shape:?}, expected {full:?}"
                    )));
                }
                Draws::Uniforms(v)
            }
        };
        Ok(req)
    }

    /// Plans `req` with the GIL released.
    fn run(
        &self,
        py: Python<'_>,
        req: &PlanRequest,
        progress: Option<&Py<PyAny>>,
    ) -> PyResult<PlanOutput> {
        let model = &self.inner;
        progress::run(py, progress, |cb| {
            model
                .plan_with_progress(req, &mut |s, i, n| cb.call(s, i, n))
                .map(kinema::Plan::into_output)
        })
    }

    /// The plan's arrays under the npz keys of `kinema plan`, batch axis kept.
    fn plan_dict<'py>(
        &self,
        py: Python<'py>,
        o: PlanOutput,
        b: usize,
        diagnostics: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let c = self.inner.config();
        let (t, h, k, f) = (c.max_tokens, c.code_heads, c.codes, c.max_frames());
        let wide = |v: Vec<u32>| v.into_iter().map(i64::from).collect::<Vec<i64>>();
        let d = PyDict::new(py);
        d.set_item("num_tokens", array(py, wide(o.num_tokens), &[b])?)?;
        d.set_item("pose_tokens", array(py, wide(o.pose_tokens), &[b, t, h])?)?;
        put(&d, "features", o.features, &[b, f, dims::GLOBAL_REP])?;
        put(&d, "qpos", o.qpos, &[b, f, dims::QPOS])?;
        if diagnostics {
            let cl = c.length_classes();
            put(&d, "root_output", o.root_global, &[b, f, dims::GLOBAL_ROOT])?;
            put(&d, "local_root", o.root_local, &[b, f, dims::LOCAL_ROOT])?;
            put(&d, "duration_logits", o.length_logits_raw, &[b, cl])?;
            put(&d, "duration_logits_masked", o.length_logits, &[b, cl])?;
            put(&d, "pose_logits", o.pose_logits, &[b, t, h, k])?;
            put(&d, "decoder_output", o.decoded, &[b, f, dims::LOCAL_REP])?;
            if !o.uniforms.is_empty() {
                put(&d, "uniforms", o.uniforms, &[b, t, h, k])?;
            }
        }
        Ok(d)
    }
}

/// The sampling mode of upstream's `config` dict; keys kinema does not follow, or values it
/// does not implement, are refused by name.
fn sampling_of(config: Option<&Bound<'_, PyDict>>) -> PyResult<Sampling> {
    let mut sampling = Sampling::Gumbel;
    let Some(config) = config else {
        return Ok(sampling);
    };
    for (key, value) in config.iter() {
        let key: String = key.extract()?;
        match key.as_str() {
            "pose_token_sampling_use_argmax" => {
                if value.is_truthy()? {
                    sampling = Sampling::Argmax;
                }
            }
            "num_inference_step" => {
                if value.extract::<i64>().ok() != Some(1) {
                    return Err(invalid(format!(
                        "config[\"num_inference_step\"] = {value}: kinema runs the released \
                         single pose pass (1)"
                    )));
                }
            }
            "allow_pred_out_of_reach_num_tokens"
            | "skip_ending_target_cond"
            | "smooth_root_traj" => {
                if value.is_truthy()? {
                    return Err(invalid(format!(
                        "config[{key:?}] = {value}: kinema implements False only"
                    )));
                }
            }
            _ => {
                return Err(invalid(format!(
                    "config[{key:?}]: not a key kinema follows (pose_token_sampling_use_argmax, \
                     num_inference_step, allow_pred_out_of_reach_num_tokens, \
                     skip_ending_target_cond, smooth_root_traj)"
                )));
            }
        }
    }
    Ok(sampling)
}
