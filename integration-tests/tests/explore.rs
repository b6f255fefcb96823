//! The fault-schedule explorer over every scenario, one test per module of scenarios: each
//! scenario's suite plan — every single-fault schedule (every fault at every request of the
//! operation and its recovery, each concurrent actor before every request, every query page
//! split), or for the few whose every run waits out seconds by design a seeded sample — runs
//! with 0 violations. `cargo xtask explore` runs the single-fault schedules of all, and seeded
//! random multi-fault schedules with `--random`.

use std::collections::BTreeSet;

use tablekit_integration_tests::explore;

/// Runs the suite plan of every scenario of module `name` and fails on any violation.
fn module(name: &str) {
    let (_, entries) = explore::modules()
        .into_iter()
        .find(|(m, _)| *m == name)
        .unwrap_or_else(|| panic!("no module of scenarios named {name}"));
    let runtime = explore::runtime();
    let mut failed = Vec::new();
    for entry in entries {
        let report = runtime.block_on(entry.explore(entry.suite_plan(), 6));
        println!("{report}");
        if !report.passed() || report.schedules == 0 {
            failed.push(report.to_string());
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

macro_rules! modules {
    ($($name:ident)*) => {
        $(
            #[test]
            fn $name() {
                module(stringify!($name));
            }
        )*

        /// Every module has its test here, and scenario names are unique.
        #[test]
        fn every_module_is_explored_and_every_name_is_unique() {
            let tested = [$(stringify!($name)),*];
            for (name, _) in explore::modules() {
                assert!(tested.contains(&name), "module {name} has no test");
            }
            let mut names = BTreeSet::new();
            for entry in explore::all() {
                assert!(names.insert(entry.name()), "{} twice", entry.name());
            }
        }
    };
}

modules! {
    azure
    azure_more
    cli
    encrypted
    eventual
    index
    index_more
    lists
    large
    logtail
    retention
    series
}
