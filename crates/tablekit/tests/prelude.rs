//! The prelude stays the core path: at most 25 names, exactly those the API guidelines list,
//! none from a pattern crate, and the patterns reachable by their module path instead.

// Every name the prelude promises, imported one by one: a name taken out fails to compile.
#[allow(unused_imports)]
use tablekit::prelude::{
    Account, AsEntity, BulkOptions, ContinuationToken, ETag, Entity, Error, ErrorKind, Filter,
    IfMatch, IntoKeys, Keys, Page, Properties, Property, Query, Stored, Table, TableEntity,
    TypedTable, WriteMode,
};
// Patterns by their module path.
#[allow(unused_imports)]
use tablekit::{
    core::batch::BatchPlan, core::keys::CompoundKey, eventual::JobQueue,
    index::IntraPartitionIndex, large::LargeEntities, logtail::LogTail, retention::PeriodTables,
    series::Series,
};

/// The names the prelude's `pub use` items bring, read from the facade's source.
fn prelude_names() -> Vec<String> {
    let source = include_str!("../src/lib.rs");
    let start = source
        .find("pub mod prelude {")
        .expect("the facade has a prelude");
    let block = &source[start..];
    let block = &block[..block.find("\n}").expect("the prelude block ends")];
    let mut names = Vec::new();
    for item in block.split("pub use ").skip(1) {
        let item = &item[..item.find(';').expect("a use item ends")];
        let list = match (item.find('{'), item.rfind('}')) {
            (Some(open), Some(close)) => &item[open + 1..close],
            _ => item.rsplit("::").next().unwrap_or(item),
        };
        for name in list.split(',') {
            let name = name.trim();
            if !name.is_empty() && !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
    }
    names.sort();
    names
}

/// The names the API guidelines list for the prelude: the code-formatted names of its bullet,
/// up to the sentence on `Result`, which it leaves out.
fn documented_names() -> Vec<String> {
    let guidelines = include_str!("../../../docs/src/api-guidelines.md");
    let start = guidelines
        .find("**`tablekit::prelude` holds")
        .expect("the guidelines list the prelude");
    let bullet = &guidelines[start + "**`tablekit::prelude`".len()..];
    let bullet = &bullet[..bullet
        .find("`Result`")
        .expect("the bullet names what is left out")];
    let mut names: Vec<String> = bullet
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_prelude_is_the_listed_core_path_in_at_most_25_names() {
    let names = prelude_names();
    assert!(
        names.len() <= 25,
        "{} names in the prelude: {names:?}",
        names.len()
    );
    assert!(names.iter().any(|n| n == "TypedTable"), "{names:?}");
    assert_eq!(
        names,
        documented_names(),
        "the prelude and docs/src/api-guidelines.md list the same names"
    );
}

#[test]
fn no_pattern_crate_is_in_the_prelude() {
    let source = include_str!("../src/lib.rs");
    let prelude = &source[source.find("pub mod prelude {").expect("a prelude")..];
    for pattern in [
        "tablekit_index",
        "tablekit_eventual",
        "tablekit_logtail",
        "tablekit_retention",
        "tablekit_series",
        "tablekit_large",
        "tablekit_encryption",
        "tablekit_testkit",
    ] {
        assert!(
            !prelude.contains(pattern),
            "{pattern} is used by its module path, not through the prelude"
        );
    }
}
