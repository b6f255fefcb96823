//! Query shapes, from cheapest to most expensive.

/// How the service will execute a query (PATTERNS.md §2.1), from cheapest to most expensive.
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
