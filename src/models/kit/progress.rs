//! Progress on stderr for the commands, drawn by `indicatif`: a bar only when stderr is a
//! terminal, nothing with `--quiet`. In a log (stderr redirected) a converter stage that
//! took a while prints one line when it ends, so the log shows where the time went.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use super::convert::Progress;

/// A bar of sampling steps: `[####      ] 3/10 steps  1.2 s  eta 2.8 s`.
pub struct StepBar {
    bar: ProgressBar,
}

impl StepBar {
    /// A bar on stderr; hidden when `quiet` or when stderr is not a terminal.
    pub fn new(quiet: bool) -> StepBar {
        let target = if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let style = ProgressStyle::with_template(
            "  [{bar:30}] {pos}/{len} steps  {elapsed_s}  eta {eta_s} ",
        )
        .expect("the template is valid")
        .progress_chars("## ")
        .with_key(
            "elapsed_s",
            |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.1} s", s.elapsed().as_secs_f64());
            },
        )
        .with_key("eta_s", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.1} s", s.eta().as_secs_f64());
        });
        StepBar {
            bar: ProgressBar::with_draw_target(None, target).with_style(style),
        }
    }

    /// Whether the bar is drawn at all.
    pub fn is_visible(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// `done` of `total` steps finished; the bar ends (and stays on screen) at `total`.
    pub fn update(&self, done: usize, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
        if done >= total && !self.bar.is_finished() {
            self.bar.finish();
            // The finished bar stays on screen; what follows starts on the next line.
            if self.is_visible() {
                eprintln!();
            }
        }
    }
}

/// The stages of a conversion ([`Progress`]) as one redrawn line on a terminal, or one line
/// per large finished stage in a log.
pub struct ConvertProgress {
    out: PathBuf,
    quiet: bool,
    bar: Option<ProgressBar>,
    terminal: bool,
}

/// A stage counts as large (worth a log line) from this many bytes.
const LARGE: u64 = 64 << 20;

impl ConvertProgress {
    /// Progress of a conversion writing `out`.
    pub fn new(out: &Path, quiet: bool) -> ConvertProgress {
        ConvertProgress {
            out: out.to_path_buf(),
            quiet,
            bar: None,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// Shows one progress report.
    pub fn show(&mut self, p: Progress) {
        if self.quiet {
            return;
        }
        let (line, finished, large) = describe(p, &self.out);
        if self.terminal {
            let bar = self.bar.get_or_insert_with(|| {
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                bar.set_style(ProgressStyle::with_template("{msg}").expect("valid template"));
                bar
            });
            bar.set_message(line);
            if finished {
                bar.finish_and_clear();
                self.bar = None;
            }
        } else if finished && large {
            eprintln!("{line}");
        }
    }
}

/// The line for one report, whether it ends its stage, and whether the stage is large.
fn describe(p: Progress, out: &Path) -> (String, bool, bool) {
    const MIB: f64 = (1u64 << 20) as f64;
    match p {
        Progress::Checking { done, total } => (
            format!("checking tensors: {done} / {total}"),
            done >= total,
            false,
        ),
        Progress::Hashing { file, done, total } => (
            format!(
                "hashing {file}: {:.1} / {:.1} MiB",
                done as f64 / MIB,
                total as f64 / MIB
            ),
            done >= total,
            total >= LARGE,
        ),
        Progress::Writing { done, total } => (
            format!(
                "writing {}: {:.1} / {:.1} MiB",
                out.display(),
                done as f64 / MIB,
                total as f64 / MIB
            ),
            done >= total,
            total >= LARGE,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_end_their_stage_and_large_stages_are_logged() {
        let out = Path::new("m.gguf");
        let (line, fin, large) = describe(Progress::Checking { done: 3, total: 72 }, out);
        assert_eq!(
            (line.as_str(), fin, large),
            ("checking tensors: 3 / 72", false, false)
        );
        let (line, fin, large) = describe(
            Progress::Hashing {
                file: "model.safetensors",
                done: 128 << 20,
                total: 128 << 20,
            },
            out,
        );
        assert_eq!(line, "hashing model.safetensors: 128.0 / 128.0 MiB");
        assert!(fin && large);
        let (line, fin, large) = describe(Progress::Writing { done: 1, total: 2 }, out);
        assert!(line.starts_with("writing m.gguf: 0.0 / 0.0 MiB") && !fin && !large);
        // Quiet progress draws nothing, whatever stderr is.
        assert!(!StepBar::new(true).is_visible());
    }
}
