#![doc = include_str!("../README.md")]

mod account;
mod metrics;
mod retry;
mod send;
mod settings;
mod table;
mod transport;
mod url;

pub use account::{Account, CONNECTION_STRING_ENV, Endpoints, SasToken};
pub use metrics::{Metrics, MetricsSnapshot, RequestKind};
pub use retry::{ConflictRetry, RetryPolicy};
pub use settings::{ScanAction, ScanPolicy, Settings};
pub use table::{
    BulkOptions, BulkReport, ConflictLoop, ContinuationToken, OperationOutcome, Page, Progress,
    Query, Table, TransactionOutcome, is_conflict,
};
pub use tablekit_core as core;
