//! Per-op GPU time from timestamp queries written around every dispatch (`KINEMA_PROFILE=1`).

use std::collections::HashMap;
use std::fmt::Write;

/// GPU time of one op over one submission.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileRow {
    pub op: &'static str,
    /// Dispatches recorded for the op (a split op counts each part).
    pub count: usize,
    pub total_ms: f64,
}

impl ProfileRow {
    pub fn mean_us(&self) -> f64 {
        self.total_ms * 1e3 / self.count.max(1) as f64
    }
}

/// Rows from `(start, end)` tick pairs, one per dispatch named by `ops`, slowest op first.
pub(crate) fn aggregate(
    ops: &[&'static str],
    ticks: &[u64],
    period_ns: f32,
    valid_bits: u32,
) -> Vec<ProfileRow> {
    let mask = if valid_bits >= 64 {
        u64::MAX
    } else {
        (1u64 << valid_bits) - 1
    };
    let mut by_op: HashMap<&'static str, ProfileRow> = HashMap::new();
    for (op, t) in ops.iter().zip(ticks.chunks_exact(2)) {
        let dt = (t[1] & mask).wrapping_sub(t[0] & mask) & mask;
        let row = by_op.entry(op).or_insert(ProfileRow {
            op,
            count: 0,
            total_ms: 0.0,
        });
        row.count += 1;
        row.total_ms += dt as f64 * f64::from(period_ns) * 1e-6;
    }
    let mut rows: Vec<ProfileRow> = by_op.into_values().collect();
    rows.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then(a.op.cmp(b.op)));
    rows
}

/// The table printed after each profiled submission.
pub(crate) fn table(device: &str, rows: &[ProfileRow]) -> String {
    let total: f64 = rows.iter().map(|r| r.total_ms).sum();
    let mut s = format!("kinema profile ({device}): {total:.3} ms GPU\n");
    let _ = writeln!(
        s,
        "{:<20} {:>7} {:>11} {:>11}",
        "op", "count", "total ms", "mean us"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<20} {:>7} {:>11.3} {:>11.1}",
            r.op,
            r.count,
            r.total_ms,
            r.mean_us()
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_by_op_and_masks_ticks() {
        let rows = aggregate(
            &["linear", "scale", "linear"],
            &[10, 1010, 2000, 2100, 5000, 7000],
            1.0,
            64,
        );
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].op, rows[0].count), ("linear", 2));
        assert!((rows[0].total_ms - 0.003).abs() < 1e-12);
        assert!((rows[0].mean_us() - 1.5).abs() < 1e-9);
        // A 32-bit counter that wrapped between the two timestamps.
        let rows = aggregate(&["x"], &[0xffff_fff0, 0x10], 2.0, 32);
        assert!((rows[0].total_ms - 64e-6).abs() < 1e-15);
        assert!(table("dev", &rows).contains("x "));
    }
}
