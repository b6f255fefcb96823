//! Measurements: process CPU time, peak RSS, and summary statistics of repeated runs.

use std::time::{Duration, Instant};

use serde::Serialize;

/// User + system CPU time of this whole process (every thread, including exited ones), from
/// `/proc/self/stat`, in clock ticks of 10 ms. Coarse, so CPU workloads run long enough.
pub(crate) fn process_cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let fields: Vec<&str> = text
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the command.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// Peak resident set size of this process so far, in bytes (`VmHWM`).
pub(crate) fn peak_rss() -> u64 {
    status_kib("VmHWM:") * 1024
}

/// Current resident set size in bytes (`VmRSS`).
pub(crate) fn rss() -> u64 {
    status_kib("VmRSS:") * 1024
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Several runs of one figure: the median and the spread.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figure {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) runs: Vec<f64>,
    pub(crate) unit: &'static str,
}

impl Figure {
    pub(crate) fn of(mut runs: Vec<f64>, unit: &'static str) -> Self {
        let original = runs.clone();
        runs.sort_by(f64::total_cmp);
        let median = match runs.len() {
            0 => 0.0,
            n if n % 2 == 1 => runs[n / 2],
            n => (runs[n / 2 - 1] + runs[n / 2]) / 2.0,
        };
        Self {
            median,
            min: *runs.first().unwrap_or(&0.0),
            max: *runs.last().unwrap_or(&0.0),
            runs: original,
            unit,
        }
    }

    /// `12,345 entities/s (11,900–12,800)`.
    pub(crate) fn show(&self) -> String {
        format!(
            "{} {} ({}–{})",
            fmt(self.median),
            self.unit,
            fmt(self.min),
            fmt(self.max)
        )
    }
}

pub(crate) fn fmt(v: f64) -> String {
    if v >= 100.0 {
        let n = v.round() as u64;
        let s = n.to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Times `f`, returning its result and the elapsed time.
pub(crate) async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let start = Instant::now();
    let out = f.await;
    (out, start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_spreads() {
        let f = Figure::of(vec![3.0, 1.0, 2.0], "x");
        assert_eq!((f.median, f.min, f.max), (2.0, 1.0, 3.0));
        assert_eq!(Figure::of(vec![1.0, 4.0], "x").median, 2.5);
        assert_eq!(fmt(12_345.4), "12,345");
        assert!(process_cpu() < Duration::from_secs(3600));
        let now = rss();
        assert!(
            now > 0 && peak_rss() >= now,
            "the peak is read after the current size"
        );
    }
}
