//! [`QueryShape`]: how the service executes a query, as plain data.
//!
//! It depends on nothing else in the crate, so that [`crate::error`] can name a shape without
//! depending on the filters that compute one ([`crate::filter::Filter::shape`]).

/// How the service will execute a query, from cheapest to most expensive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QueryShape {
    /// PartitionKey and RowKey fixed by `eq`: at most one entity, one index seek.
    Point,
    /// PartitionKey fixed and RowKey bounded (`gt ge lt le`): an index range in one partition.
    Range,
    /// PartitionKey fixed, anything else (other properties, `or`, `ne`): scans the partition.
    PartitionScan,
    /// PartitionKey not fixed to one value: scans every partition.
    TableScan,
}
