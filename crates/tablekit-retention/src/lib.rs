#![doc = include_str!("../README.md")]

mod period;
mod purge;
mod tables;

pub use period::Period;
pub use purge::{PurgeOptions, PurgeProgress, delete_keys, purge_partition, purge_where};
pub use tables::{DropReport, PeriodTable, PeriodTables};
