//! The per-model side of the model-level commands: `kinema bench <model>` times one whole run
//! on synthetic weights, `kinema drift --model FILE` runs one model on every backend and
//! precision and compares each run with a strict CPU reference. A model implements
//! [`ModelHarness`] (and [`DriftRun`] for its loaded drift study) once; the commands are
//! written once, generic over them, and pick the backends themselves.

use std::path::Path;

use crate::backend::Backend;
use crate::drift::Drift;
use crate::error::Result;

/// What `kinema bench <model>` reports.
pub trait BenchReport: serde::Serialize {
    /// The report as one line of text (`--json` prints the serialized report instead).
    fn text(&self) -> String;
}

/// One model as `kinema bench` and `kinema drift --model` see it.
pub trait ModelHarness {
    /// The model's name on the command line (`kinema bench <NAME>`).
    const NAME: &'static str;

    /// What to time.
    type BenchOptions;
    /// What a timed run reports.
    type BenchReport: BenchReport;
    /// Times one whole run on `b` with deterministic synthetic weights (no file needed).
    fn bench<B: Backend>(b: &B, o: &Self::BenchOptions) -> Result<Self::BenchReport>;

    /// What to compare (inputs and run length).
    type DriftOptions;
    /// The model loaded for comparison.
    type Drift: DriftRun;
    /// Loads the model file `path` for `kinema drift --model`.
    fn drift(path: &Path, o: &Self::DriftOptions) -> Result<Self::Drift>;
}

/// A model loaded for `kinema drift --model`: it runs on any backend and compares two runs.
pub trait DriftRun {
    /// What one run records for comparison (intermediate and final values).
    type Trace;
    /// The run's size for the table's heading, e.g. `30 frames, 10 steps, 2 rows`.
    fn describe(&self) -> String;
    /// One run on `b`, in `b`'s precision (in fast mode with the weights narrowed to what the
    /// backend multiplies, as a real run does).
    fn trace<B: Backend>(&self, b: &B) -> Result<Self::Trace>;
    /// One [`Drift`] row per recorded value of `got` against `reference`, labelled `label`.
    fn compare(&self, label: &str, reference: &Self::Trace, got: &Self::Trace) -> Vec<Drift>;
}

/// The `q`-quantile of sorted `v` by nearest rank (p50 and p99 of the model benches).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 100.0);
        assert_eq!(quantile(&v, 0.99), 198.0);
        assert_eq!(quantile(&[3.0], 0.99), 3.0);
    }
}
