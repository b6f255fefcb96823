//! Index entities (the design guide's index entities pattern): lists of the entities that
//! share a value.

mod eventual;
mod lookup;
mod rows;
mod same_partition;
mod spec;

pub use eventual::{EventualList, ListHandler, ListJob};
pub use lookup::{ListLookup, LookupToken};
pub use same_partition::SamePartitionList;
pub use spec::{ListSpec, ListSpecBuilder};
