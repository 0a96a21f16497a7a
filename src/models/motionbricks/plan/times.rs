//! Where a timed plan spends its wall-clock time.

use std::time::Instant;

use crate::Result;
use crate::backend::Backend;
use crate::graph::Executable;

/// Where one [`Planner::plan_timed`](super::Planner::plan_timed) run spent its wall-clock time, phase by phase in order:
/// the host steps (`host: ...`) and, per graph (`root1`, `root2`, `pose`), building and writing
/// its inputs (`upload`), submitting it and waiting for it (`run`: the kernels plus the
/// submission round trip) and reading its outputs back (`download`).
#[derive(Clone, Debug, Default)]
pub struct PlanTimes {
    /// `(phase, milliseconds)`.
    pub phases: Vec<(&'static str, f64)>,
}

/// Laps of [`PlanTimes`] when timing (`on`); nothing otherwise.
pub(super) struct Clock {
    on: bool,
    last: Instant,
    pub(super) times: PlanTimes,
}

impl Clock {
    pub(super) fn new(on: bool) -> Clock {
        Clock {
            on,
            last: Instant::now(),
            times: PlanTimes::default(),
        }
    }

    /// The time since the previous lap, as `phase`.
    pub(super) fn lap(&mut self, phase: &'static str) {
        if self.on {
            let now = Instant::now();
            let ms = (now - self.last).as_secs_f64() * 1e3;
            self.times.phases.push((phase, ms));
            self.last = now;
        }
    }

    /// Run a compiled graph; when timing, also wait for it, so that its time is not counted
    /// as the download's (untimed, the download's wait covers it: one host wait fewer).
    pub(super) fn run<B: Backend>(&self, x: &Executable<'_, B>) -> Result<()> {
        x.run()?;
        if self.on {
            x.backend().sync()?;
        }
        Ok(())
    }
}
