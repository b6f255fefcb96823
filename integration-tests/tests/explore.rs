//! The fault-schedule explorer over every scenario: each scenario's single-fault schedules —
//! every fault at every request of the operation and its recovery, each concurrent actor
//! before every request, every query page split — run with 0 violations. `cargo xtask
//! explore` runs the same set, and seeded random multi-fault schedules with `--random`.

use tablekit_integration_tests::explore;

/// Runs the schedules of the scenario named `name` its suite plan asks for (every
/// single-fault schedule, for all but the slowest) and fails on any violation.
fn single_faults(name: &str) {
    let entry = explore::all()
        .into_iter()
        .find(|e| e.name() == name)
        .unwrap_or_else(|| panic!("no scenario named {name}"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let report = runtime.block_on(entry.explore(entry.suite_plan(), 6));
    println!("{report}");
    assert!(report.passed(), "{report}");
    assert!(report.schedules > 0, "{name}: no schedule ran");
}

macro_rules! scenarios {
    ($($test:ident => $name:literal;)*) => {
        $(
            #[test]
            fn $test() {
                single_faults($name);
            }
        )*

        /// Every scenario has its test here.
        #[test]
        fn every_scenario_is_explored_in_the_suite() {
            let tested = [$($name),*];
            for entry in explore::all() {
                assert!(tested.contains(&entry.name()), "{} has no test", entry.name());
            }
        }
    };
}

scenarios! {
    azure_submit => "azure.submit";
    azure_bulk_write => "azure.bulk_write";
    index_intra_relocate => "index.intra.relocate";
    index_list_same_partition_relocate => "index.list.same_partition.relocate";
    index_inter_put => "index.inter.put";
    index_list_eventual_insert_governed => "index.list.eventual.insert_governed";
}
