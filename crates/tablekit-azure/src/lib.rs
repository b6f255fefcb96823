#![doc = include_str!("../README.md")]

mod account;
mod container;
mod metrics;
mod progress;
mod queue;
mod retry;
mod sas;
mod send;
mod settings;
mod table;
mod transport;
mod url;

pub use account::{Account, CONNECTION_STRING_ENV, Endpoints, SasToken};
pub use container::{Blob, BlobCondition, BlobInfo, Container, PutBlob};
pub use metrics::{Metrics, MetricsSnapshot, RequestKind};
pub use progress::{Progress, ProgressCallback};
pub use queue::{MAX_VISIBILITY, Message, PutOptions, Queue};
pub use retry::{ConflictRetry, RetryPolicy};
pub use sas::{AccountSas, SAS_VERSION, SasProtocol, SasServices, TablePermissions, TableSas};
pub use settings::{ScanAction, ScanPolicy, Settings};
pub use table::{
    BulkOptions, BulkReport, ConflictLoop, ContinuationToken, OperationOutcome, Page, Query, Table,
    TransactionOutcome, TypedTable, WriteMode,
};
pub use tablekit_core as core;
