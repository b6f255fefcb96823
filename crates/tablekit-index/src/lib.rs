#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod backfill;
mod intra;
mod range;
mod spec;
mod verify;

pub use backfill::{BackfillOptions, BackfillState, Checkpoint, MemoryCheckpoint, TableCheckpoint};
pub use intra::IntraPartitionIndex;
pub use range::IndexRange;
pub use spec::{CopySpec, IndexSpec, IndexSpecBuilder};
pub use verify::{CopyIssue, RepairReport, VerifyReport};
