//! Measurements: process CPU time, peak RSS, and summary statistics of repeated runs.

use std::time::{Duration, Instant};

use serde::Serialize;

/// User + system CPU time of this whole process (every thread, including exited ones), from
/// `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`: nanosecond resolution, where `/proc/self/stat`
/// counts 10 ms ticks.
pub(crate) fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
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

    /// The best run: the highest for a rate, the lowest for a cost (`lower_is_better`). Noise
    /// on a busy machine only ever makes a run slower, so the best of several runs is the
    /// figure closest to what a quiet machine gives every time.
    pub(crate) fn best(&self, lower_is_better: bool) -> f64 {
        if lower_is_better { self.min } else { self.max }
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
        assert_eq!((f.best(false), f.best(true)), (3.0, 1.0));
        // The CPU clock is finer than the 10 ms ticks of /proc/self/stat: a few milliseconds
        // of work show up, and it never runs backwards.
        let before = process_cpu();
        let mut x = 0u64;
        while process_cpu() - before < Duration::from_millis(3) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spent = process_cpu() - before;
        assert!(spent >= Duration::from_millis(3), "{spent:?}");
        assert_ne!(
            spent.as_nanos() % 10_000_000,
            0,
            "not in whole 10 ms ticks: {spent:?}"
        );
        let now = rss();
        assert!(
            now > 0 && peak_rss() >= now,
            "the peak is read after the current size"
        );
    }
}
