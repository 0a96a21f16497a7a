//! Kimodo in the model-level commands (`kinema bench kimodo`, `kinema drift --model`).

use std::path::Path;

use super::bench::{self, BenchOptions, KimodoBench};
use super::drift::{DriftOptions, KimodoDrift};
use crate::backend::Backend;
use crate::error::Result;
use crate::models::harness::{BenchReport, ModelHarness};

/// Kimodo's [`ModelHarness`].
pub struct Kimodo;

impl ModelHarness for Kimodo {
    const NAME: &'static str = "kimodo";

    type BenchOptions = BenchOptions;
    type BenchReport = KimodoBench;
    fn bench<B: Backend>(b: &B, o: &BenchOptions) -> Result<KimodoBench> {
        bench::bench(b, o)
    }

    type DriftOptions = DriftOptions;
    type Drift = KimodoDrift;
    fn drift(path: &Path, o: &DriftOptions) -> Result<KimodoDrift> {
        KimodoDrift::open(path, o)
    }
}

impl BenchReport for KimodoBench {
    fn text(&self) -> String {
        KimodoBench::text(self)
    }
}
