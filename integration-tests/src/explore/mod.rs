//! Every explored scenario.

pub mod azure;
pub mod index_intra;
pub mod list_same;
pub mod model;
pub mod outcome;

use tablekit_testkit::explore::Entry;

/// Every scenario, in a stable order.
pub fn all() -> Vec<Entry> {
    vec![
        Entry::new(azure::Submit),
        Entry::new(azure::BulkWrite),
        Entry::new(index_intra::Relocate),
        Entry::new(list_same::Relocate),
    ]
}
