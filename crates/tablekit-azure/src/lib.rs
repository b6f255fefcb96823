#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod account;
mod container;
pub mod deadline;
mod governor;
mod listing;
mod metrics;
mod progress;
mod queue;
mod retry;
mod sas;
mod send;
mod settings;
mod sharded;
mod table;
mod telemetry;
mod transport;
mod url;

pub use account::identity;
pub use account::{
    ACCOUNT_NAME_ENV, Account, AccountBuilder, BLOB_ENDPOINT_ENV, CONNECTION_STRING_ENV,
    ENDPOINT_SUFFIX_ENV, Endpoints, QUEUE_ENDPOINT_ENV, ROOT_CERTIFICATE_ENV, SasToken,
    TABLE_ENDPOINT_ENV, TOKEN_SCOPE_ENV, TokenScope,
};
pub use container::{Blob, BlobCondition, BlobInfo, Container, UploadOptions};
// Named by their module (`deadline::Deadline`); these paths stay for tablekit's own crates.
#[doc(hidden)]
pub use deadline::{Deadline, track_landing};
pub use governor::ThroughputPolicy;
pub use listing::{ListToken, Listing};
pub use metrics::{Metrics, MetricsSnapshot, RequestKind};
pub use progress::{Progress, ProgressCallback};
pub use queue::{MAX_VISIBILITY, Message, MessageTtl, Queue, SendOptions};
pub use retry::{ConflictRetry, RetryPolicy};
pub use sas::{
    AccountSas, COSMOS_TABLE_SAS_VERSION, SAS_VERSION, SasProtocol, SasServices, TablePermissions,
    TableSas,
};
pub use settings::{ScanAction, ScanPolicy, Settings, TableService};
pub use sharded::{
    SHARD_HASH_VERSION, SHARD_MARKER_PARTITION, ShardedAccount, ShardedScan, ShardedTable,
    ShardedTransaction, shard_hash,
};
pub use table::{
    BulkOptions, BulkReport, CodecFilter, ConflictLoop, ContinuationToken, EntityCheck,
    EntityCodec, EntityError, EntityResult, OperationOutcome, Page, PerEntity, Query, Table,
    Transaction, TransactionOutcome, TypedTable, TypedTransaction, WriteMode, WriteOutcome,
    WriteReport,
};
pub use tablekit_core as core;
pub use telemetry::{
    DB_SYSTEM_COSMOS, DB_SYSTEM_TABLE_STORAGE, Telemetry, operation_name, step_span,
};
