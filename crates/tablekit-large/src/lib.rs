#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod builder;
mod read;
mod reference;
mod store;
mod sweep;

pub use builder::LargeEntitiesBuilder;
pub use read::Large;
pub use reference::{BlobRef, GRACE_METADATA, PK_METADATA, RK_METADATA};
pub use store::{LargeEntities, LargeWritten};
pub use sweep::{SweepOptions, SweepReport};
