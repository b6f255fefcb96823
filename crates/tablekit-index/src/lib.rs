#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod backfill;
mod compound;
mod denormalize;
mod effects;
mod follow;
mod hetero;
mod inter;
mod intra;
mod list;
mod moved;
mod range;
mod read;
mod spec;
mod verify;

pub use backfill::{BackfillOptions, BackfillState, Checkpoint, MemoryCheckpoint, TableCheckpoint};
pub use compound::CompoundRows;
pub use denormalize::{DenormalizedCopy, DenormalizedWrite, SourceWrite};
pub use follow::{DEFAULT_CLOCK_SKEW, FollowedWrite, WRITE_ID_PROPERTY};
pub use hetero::{EntityKind, TypedRows};
pub use inter::{CopyHandler, CopyJob, InterPartitionIndex, InterPartitionIndexBuilder};
pub use intra::IntraPartitionIndex;
pub use list::{
    EventualList, ListHandler, ListJob, ListLookup, ListSpec, ListSpecBuilder, LookupToken,
    SamePartitionList,
};
pub use range::IndexRange;
pub use read::{IndexEntry, IndexRead};
pub use spec::key::{KeyPart, KeySource, ValueRange};
pub use spec::{CopyHandle, CopyId, CopySpec, IndexSpec, IndexSpecBuilder};
pub use verify::{CopyIssue, RepairReport, VerifyReport};
