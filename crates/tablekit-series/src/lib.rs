#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod layout;
mod series;
mod split;
mod wide;

pub use layout::{SeriesLayout, SlotValue};
pub use series::{ADDS_KEPT, ADDS_PROPERTY, Series, SeriesValues};
pub use split::{MAX_SHARDS, Shard, WideSplit};
pub use wide::{ShardRef, WideEntities, WideStored, WideVersion};
