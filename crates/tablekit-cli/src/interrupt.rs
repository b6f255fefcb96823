//! Ctrl-C (SIGINT) and SIGTERM (what containers and Kubernetes send before killing a
//! process): the first one asks the running command to stop at its next safe point (after
//! the page or chunk in hand is written and checkpointed); the second one ends the process at
//! once. Checkpoints are replaced atomically, so even then the last one written is whole.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use crate::exit::Exit;

/// The stop request shared by a command's tasks. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Interrupt {
    stop: Arc<watch::Sender<bool>>,
    /// Units of work (pages, chunks) completed; with `after`, the testing hook.
    units: Arc<AtomicU64>,
    after: Option<u64>,
}

impl Interrupt {
    /// Listens for Ctrl-C (SIGINT) on the current runtime. `after` is the hidden testing
    /// hook: behave as if Ctrl-C was pressed once this many units of work are done.
    pub(crate) fn install(after: Option<u64>) -> Self {
        let (stop, _) = watch::channel(false);
        let interrupt = Self {
            stop: Arc::new(stop),
            units: Arc::new(AtomicU64::new(0)),
            after,
        };
        let stop = interrupt.stop.clone();
        tokio::spawn(async move {
            let mut signals = Signals::new();
            if !signals.next().await {
                return;
            }
            eprintln!(
                "interrupted: finishing the work in hand and writing the checkpoint (Ctrl-C again to abort)"
            );
            stop.send_replace(true);
            if signals.next().await {
                eprintln!("aborted");
                std::process::exit(i32::from(Exit::Interrupted.code()));
            }
        });
        interrupt
    }

    /// Whether a stop was requested.
    pub(crate) fn requested(&self) -> bool {
        *self.stop.borrow()
    }

    /// Resolves when a stop is requested.
    pub(crate) async fn wait(&self) {
        let mut rx = self.stop.subscribe();
        let _ = rx.wait_for(|stop| *stop).await;
    }

    /// Records one completed unit of work (a page written, a chunk imported); the testing
    /// hook requests a stop when its count is reached.
    pub(crate) fn unit_done(&self) {
        let done = self.units.fetch_add(1, Ordering::SeqCst) + 1;
        if self.after.is_some_and(|after| done >= after) {
            self.stop.send_replace(true);
        }
    }
}

/// SIGINT and, on Unix, SIGTERM, as one stream of stop requests.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        Self {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    /// Resolves with `true` at the next signal; `false` when no signal can be received.
    async fn next(&mut self) -> bool {
        #[cfg(unix)]
        if let Some(term) = &mut self.term {
            return tokio::select! {
                r = tokio::signal::ctrl_c() => r.is_ok(),
                r = term.recv() => r.is_some(),
            };
        }
        tokio::signal::ctrl_c().await.is_ok()
    }
}
