#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod job;
mod options;
mod poison;
mod queue;
mod signal;
mod steps;
mod worker;

pub use job::{Handler, Job, MAX_JOB_BYTES, POISON_HEADROOM};
pub use options::{HandlerRetry, WorkerOptions};
pub use poison::{MAX_REASON_BYTES, POISON_MAGIC, PoisonRecord, Poisoned};
pub use queue::{JobQueue, POISON_SUFFIX};
pub use signal::shutdown_signal;
pub use steps::Steps;
pub use worker::Worker;
pub use worker::report::WorkerReport;
