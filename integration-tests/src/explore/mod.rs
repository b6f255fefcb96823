//! Every explored scenario.

pub mod azure;
pub mod index_inter;
pub mod index_intra;
pub mod list_eventual;
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
        Entry::new(index_inter::PutTwice),
        Entry::new(list_eventual::GovernedInsert),
    ]
}
