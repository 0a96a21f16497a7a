//! `kinema.Agent`: `kinema::Agent`, the MotionBricks navigation agent, fed commands and
//! stepped for 30 fps G1 qpos frames as numpy arrays.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kinema::{AgentCommand, AgentFrames, AgentOptions, Sampling};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::arrays::array;
use crate::errors::{invalid, to_py};
use crate::motionbricks::MotionBricks;
use crate::progress;

type Inner = kinema::Agent<Arc<kinema::MotionBricks>>;

/// The MotionBricks navigation agent on a model, with the style clips of a `clips.npz`
/// (`kinema agent --clips`): it starts idle, plays 30 fps frames and replans every 16 frames
/// under the command pushed last, exactly as `kinema agent` plays a script. `step` and `poll`
/// release the GIL; one call runs at a time (others wait).
///
/// Agent(model, clips, *, sampling="argmax")
#[pyclass(frozen, module = "kinema")]
pub struct Agent {
    inner: Arc<Mutex<Inner>>,
}

impl Agent {
    /// Runs `f` on the agent with the GIL released (the lock is taken there, so a call that
    /// waits for another does not hold the GIL).
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        progress: Option<&Py<PyAny>>,
        f: impl FnOnce(&mut Inner, &mut kinema::ProgressFn<'_>) -> kinema::Result<T> + Send,
    ) -> PyResult<T> {
        let inner = self.inner.clone();
        progress::run(py, progress, move |cb| {
            let mut a = inner.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut a, &mut |s, i, n| cb.call(s, i, n))
        })
    }
}

fn frames_dict<'py>(py: Python<'py>, out: AgentFrames) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let n = out.frames();
    d.set_item("first_frame", out.first_frame)?;
    let plans = PyList::empty(py);
    for p in &out.plans {
        let e = PyDict::new(py);
        e.set_item("frame", p.frame)?;
        e.set_item("command", p.command)?;
        e.set_item(
            "style",
            kinema::Agent::<Arc<kinema::MotionBricks>>::styles()[p.style],
        )?;
        e.set_item("num_tokens", p.num_tokens)?;
        e.set_item("ms", p.ms)?;
        e.set_item("predict_ms", p.predict_ms)?;
        plans.append(e)?;
    }
    d.set_item("plans", plans)?;
    d.set_item("qpos", array(py, out.qpos, &[n, 36])?)?;
    Ok(d)
}

fn pair(v: Vec<f64>, name: &str) -> PyResult<[f64; 2]> {
    <[f64; 2]>::try_from(v.as_slice()).map_err(|_| {
        invalid(format!(
            "{name}: {} numbers given, expected 2 (world x, y)",
            v.len()
        ))
    })
}

#[pymethods]
impl Agent {
    #[new]
    #[pyo3(signature = (model, clips, *, sampling = "argmax"))]
    fn new(
        py: Python<'_>,
        model: &MotionBricks,
        clips: PathBuf,
        sampling: &str,
    ) -> PyResult<Agent> {
        let sampling: Sampling = sampling.parse().map_err(to_py)?;
        let m = model.inner.clone();
        let inner = py
            .detach(|| kinema::Agent::open(m, &clips, AgentOptions { sampling }))
            .map_err(to_py)?;
        Ok(Agent {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    /// Follow this command from the next frame on (the fields of a `commands.json` entry
    /// without `duration`): `style` a clip of the file, `movement` and `facing` world x, y
    /// directions, `speed` m/s (None: the style's), `waypoint` a world x, y to walk to with
    /// `heading` (radians about z) there, `seed` the clip window and Gumbel seed. A command
    /// the clips cannot serve raises InvalidArgumentError and changes nothing.
    #[pyo3(signature = (
        style, *, movement = vec![1.0, 0.0], facing = vec![1.0, 0.0], speed = None,
        waypoint = None, heading = 0.0, seed = 0
    ))]
    #[allow(clippy::too_many_arguments)]
    fn push(
        &self,
        py: Python<'_>,
        style: String,
        movement: Vec<f64>,
        facing: Vec<f64>,
        speed: Option<f64>,
        waypoint: Option<Vec<f64>>,
        heading: f64,
        seed: u64,
    ) -> PyResult<()> {
        let c = AgentCommand {
            style,
            movement: pair(movement, "movement")?,
            facing: pair(facing, "facing")?,
            speed,
            waypoint: match waypoint {
                Some(w) => Some((pair(w, "waypoint")?, heading)),
                None => None,
            },
            seed,
        };
        self.with(py, None, move |a, _| a.push(&c))
    }

    /// Plays `frames` frames, planning whenever one is due. Returns a dict: `qpos`
    /// float32 `[frames, 36]` (G1 MuJoCo qpos: root xyz, quaternion w x y z, 29 hinges),
    /// `first_frame` (its first frame's number), and `plans`, one dict per plan made (`frame`,
    /// `command`, `style`, `num_tokens`, `ms`, `predict_ms`). `progress(stage, step, total)` is
    /// called before and after each plan; False cancels (raises Cancelled, the agent unchanged).
    #[pyo3(signature = (frames, *, progress = None))]
    fn step<'py>(
        &self,
        py: Python<'py>,
        frames: usize,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let out = self.with(py, progress.as_ref(), move |a, p| {
            a.step_with_progress(frames, p)
        })?;
        frames_dict(py, out)
    }

    /// Plays frames up to and including the next one that plans (at most 16); the dict of
    /// `step`.
    fn poll<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = self.with(py, None, |a, _| a.poll())?;
        frames_dict(py, out)
    }

    /// Frames played so far.
    #[getter]
    fn frames_played(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, None, |a, _| Ok(a.frames_played()))
    }

    /// Plans made so far.
    #[getter]
    fn plans_made(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, None, |a, _| Ok(a.plans_made()))
    }

    /// Frames per second (30).
    #[getter]
    fn fps(&self, py: Python<'_>) -> PyResult<f32> {
        self.with(py, None, |a, _| Ok(a.fps()))
    }

    /// The styles the clip file holds.
    #[getter]
    fn styles(&self, py: Python<'_>) -> PyResult<Vec<&'static str>> {
        self.with(py, None, |a, _| Ok(a.available_styles()))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, None, |a, _| {
            Ok(format!(
                "kinema.Agent(frames_played={}, plans_made={})",
                a.frames_played(),
                a.plans_made()
            ))
        })
    }
}
