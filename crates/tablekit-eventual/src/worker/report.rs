//! [`WorkerReport`]: what a worker did, counted live.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! report {
    ($($field:ident: $doc:literal,)*) => {
        /// What a worker did: counts of messages and requests by outcome.
        ///
        /// [`crate::Worker::run_until`] and [`crate::Worker::drain`] return the counts of
        /// their call; [`crate::Worker::stats`] gives the running totals at any time.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct WorkerReport {
            $(#[doc = $doc] pub $field: u64,)*
        }

        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $(pub(crate) $field: AtomicU64,)*
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> WorkerReport {
                WorkerReport { $($field: self.$field.load(Ordering::Relaxed),)* }
            }
        }

        impl WorkerReport {
            /// The counts since `earlier` (a report of the same worker).
            pub fn since(&self, earlier: &WorkerReport) -> WorkerReport {
                WorkerReport { $($field: self.$field.saturating_sub(earlier.$field),)* }
            }
        }
    };
}

report! {
    dequeued: "Messages received from the queue (one per delivery).",
    processed: "Messages whose handler succeeded.",
    deferred: "Deliveries the handler deferred (`Steps::defer`): the message was made to reappear later, the delivery not counted as an attempt.",
    deleted: "Messages deleted after their handler succeeded.",
    failed_attempts: "Handler attempts that failed (after their in-dequeue re-runs): the message was left to reappear, or poisoned.",
    retries: "Re-runs of a handler within one dequeue (transient failures and conflicts).",
    poisoned: "Messages moved to the poison queue.",
    released: "Messages made visible again at shutdown, unfinished: taken by a dequeue that completed after the shutdown signal (never started), or whose handler was still running when the grace period ended (cancelled).",
    extensions: "Visibility extensions of messages whose handler was still running.",
    lost_receipts: "Messages this worker no longer held when it extended, deleted, released or delayed them: their visibility ended and another consumer took them, or they were already deleted. The work is done again there, idempotently.",
    dequeue_errors: "Dequeue requests that failed (after the account's retries).",
    queue_errors: "Other queue requests that failed (delete, poison move, release, delay): the message reappears at the end of its visibility timeout and is handled again.",
}

/// Adds one to a counter.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}
