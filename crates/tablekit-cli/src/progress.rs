//! Progress output: a bar on a terminal, a plain line every few seconds otherwise, nothing
//! with `--quiet`. Also the adapter from tablekit's bulk-write progress.

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tablekit::azure::BulkOptions;

/// How often a plain progress line is printed when stderr is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Counts entities for one command and shows the count. Cheap to clone; shared by the
/// command's parallel tasks.
#[derive(Clone)]
pub(crate) struct Reporter {
    inner: Arc<Inner>,
}

struct Inner {
    label: String,
    bar: Option<ProgressBar>,
    plain: bool,
    done: AtomicU64,
    started: Instant,
    last_line: Mutex<Instant>,
}

impl Reporter {
    /// A reporter for `label` ("export", "import", …); `total` when known.
    pub(crate) fn new(label: &str, total: Option<u64>, quiet: bool) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = (!quiet && terminal).then(|| {
            let bar = match total {
                Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
                None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
            };
            let template = if total.is_some() {
                "{prefix}: {wide_bar} {pos}/{len} entities ({rate}, {eta})"
            } else {
                "{prefix}: {spinner} {pos} entities ({rate}, {elapsed})"
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.with_key(
                    "rate",
                    |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{:.0}/s", state.per_sec());
                    },
                ));
            }
            bar.set_prefix(label.to_owned());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        let now = Instant::now();
        Self {
            inner: Arc::new(Inner {
                label: label.to_owned(),
                bar,
                plain: !quiet && !terminal,
                done: AtomicU64::new(0),
                started: now,
                last_line: Mutex::new(now),
            }),
        }
    }

    /// Counts `n` more entities.
    pub(crate) fn add(&self, n: u64) {
        let done = self.inner.done.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(bar) = &self.inner.bar {
            bar.set_position(done);
        } else if self.inner.plain {
            let mut last = self
                .inner
                .last_line
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if last.elapsed() >= PLAIN_EVERY {
                *last = Instant::now();
                let secs = self.inner.started.elapsed().as_secs_f64().max(0.001);
                eprintln!(
                    "{}: {done} entities ({:.0}/s)",
                    self.inner.label,
                    done as f64 / secs
                );
            }
        }
    }

    /// Prints a message without breaking the bar (unless `--quiet`).
    pub(crate) fn note(&self, message: &str) {
        match &self.inner.bar {
            Some(bar) => bar.println(message),
            None if self.inner.plain => eprintln!("{message}"),
            None => {}
        }
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.inner.bar {
            bar.finish_and_clear();
        }
    }
}

/// `options` with a progress callback that adds each transaction's newly settled operations
/// to `reporter`. One adapter per bulk write: tablekit reports cumulative counts per call.
pub(crate) fn bulk_options(reporter: &Reporter, options: BulkOptions) -> BulkOptions {
    let reporter = reporter.clone();
    let seen = AtomicUsize::new(0);
    options.with_progress(move |progress| {
        let before = seen.swap(progress.done, Ordering::Relaxed);
        reporter.add(progress.done.saturating_sub(before) as u64);
    })
}
