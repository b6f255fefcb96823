//! Every explored scenario, by module: each module's `entries()` lists its scenarios, and
//! `tests/explore.rs` runs each module's in a test of its own.

pub mod azure;
pub mod azure_more;
pub mod cli;
pub mod encrypted;
pub mod eventual;
pub mod index_inter;
pub mod index_intra;
pub mod index_more;
pub mod large;
pub mod list_eventual;
pub mod list_same;
pub mod logtail;
pub mod model;
pub mod outcome;
pub mod retention;
pub mod series;

use tablekit_testkit::explore::Entry;

/// The modules of scenarios, by name, each with its entries.
pub fn modules() -> Vec<(&'static str, Vec<Entry>)> {
    vec![
        (
            "azure",
            vec![Entry::new(azure::Submit), Entry::new(azure::BulkWrite)],
        ),
        ("azure_more", azure_more::entries()),
        ("cli", cli::entries()),
        ("encrypted", encrypted::entries()),
        ("eventual", eventual::entries()),
        (
            "index",
            vec![
                Entry::new(index_intra::Relocate),
                Entry::new(index_inter::PutTwice),
            ],
        ),
        ("index_more", index_more::entries()),
        (
            "lists",
            vec![
                Entry::new(list_same::Relocate),
                Entry::new(list_eventual::GovernedInsert),
            ],
        ),
        ("large", large::entries()),
        ("logtail", logtail::entries()),
        ("retention", retention::entries()),
        ("series", series::entries()),
    ]
}

/// The runtime the scenarios run on: worker threads with room for the deep futures of
/// debug builds.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(16 << 20)
        .build()
        .expect("a tokio runtime")
}

/// Every scenario, in a stable order.
pub fn all() -> Vec<Entry> {
    modules()
        .into_iter()
        .flat_map(|(_, entries)| entries)
        .collect()
}
