#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod reference;
mod store;
mod sweep;

pub use reference::{BlobRef, PK_METADATA, RK_METADATA};
pub use store::{Large, LargeEntities, LargeEntitiesBuilder, LargeWritten};
pub use sweep::{SweepOptions, SweepReport};
