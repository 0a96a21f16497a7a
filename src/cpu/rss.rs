//! The CPU backend's memory report: the process's resident set (Linux `/proc/self/status`
//! `VmRSS` and `VmHWM`), its peak reset by writing `5` to `/proc/self/clear_refs` (Linux 4.0
//! on). The CPU backend holds no device memory of its own: weights are memory-mapped pages
//! and buffers are host allocations, so the resident set is what a phase costs. Elsewhere the
//! values are unknown (`None`).

use crate::backend::MemoryUse;

/// `VmRSS` and `VmHWM` in bytes.
fn status() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = s.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The process's resident set now and at peak.
pub(crate) fn memory_use() -> MemoryUse {
    let s = status();
    MemoryUse {
        what: "process rss",
        current_bytes: s.map(|s| s.0),
        peak_bytes: s.map(|s| s.1),
    }
}

/// Resets the process's peak resident set to its current one (best effort: nothing happens
/// where `/proc/self/clear_refs` cannot be written).
pub(crate) fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", b"5");
}
