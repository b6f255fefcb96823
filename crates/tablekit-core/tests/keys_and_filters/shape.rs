//! Query classification (claims 22–26) and the PartitionKey-range lint.

use std::ops::Bound;

use proptest::prelude::*;
use tablekit_core::Keys;
use tablekit_core::QueryShape::{self, PartitionScan, Point, Range, TableScan};
use tablekit_core::filter::Filter;

fn shape_of(text: &str) -> QueryShape {
    let parsed = Filter::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let shape = parsed.shape();
    assert_eq!(
        Filter::raw(text).shape(),
        shape,
        "a raw filter is classified by parsing it: {text:?}"
    );
    shape
}

#[test]
fn the_guides_filters_have_the_shapes_it_names() {
    let cases = [
        // 22: point.
        ("(PartitionKey eq 'Sales') and (RowKey eq '2')", Point),
        // 23: range.
        (
            "PartitionKey eq 'Sales' and RowKey ge 'S' and RowKey lt 'T'",
            Range,
        ),
        (
            "(PartitionKey eq 'Sales') and (RowKey ge 'empid_000100') and (RowKey le 'empid_000199')",
            Range,
        ),
        (
            "(PartitionKey eq 'email_Sales') and (RowKey ge 'a') and (RowKey lt 'b')",
            Range,
        ),
        // 24: partition scan.
        (
            "PartitionKey eq 'Sales' and LastName eq 'Smith'",
            PartitionScan,
        ),
        // 25: `or` over RowKeys is a partition scan, not a point or range query.
        (
            "PartitionKey eq 'Sales' and (RowKey eq '121' or RowKey eq '322')",
            PartitionScan,
        ),
        // 26: no PartitionKey.
        ("RowKey eq 'x'", TableScan),
        ("LastName eq 'Jones'", TableScan),
        ("RowKey ge 'a' and RowKey lt 'b'", TableScan),
    ];
    for (text, expected) in cases {
        assert_eq!(shape_of(text), expected, "{text}");
    }
}

#[test]
fn the_edges_of_the_classification() {
    let cases = [
        // `ne` on RowKey scans the partition.
        ("PartitionKey eq 'Sales' and RowKey ne 'x'", PartitionScan),
        // A point lookup stays a point with extra non-key predicates (no `or`) ...
        (
            "PartitionKey eq 'Sales' and RowKey eq '2' and Age gt 30",
            Point,
        ),
        // ... but not with a disjunction anywhere in the conjunction.
        (
            "PartitionKey eq 'Sales' and RowKey eq '2' and (Age gt 30 or Age lt 5)",
            PartitionScan,
        ),
        (
            "PartitionKey eq 'Sales' and RowKey ge 'a' and (RowKey lt 'b' or RowKey gt 'x')",
            PartitionScan,
        ),
        // The whole partition is one index range.
        ("PartitionKey eq 'Sales'", Range),
        // `or` at the top means the PartitionKey is not fixed.
        ("PartitionKey eq 'Sales' or RowKey eq 'x'", TableScan),
        (
            "(PartitionKey eq 'a' and RowKey eq 'b') or (PartitionKey eq 'a' and RowKey eq 'c')",
            TableScan,
        ),
        // Two different partitions cannot both hold; nothing is fixed to one value.
        ("PartitionKey eq 'a' and PartitionKey eq 'b'", TableScan),
        (
            "PartitionKey eq 'a' and PartitionKey eq 'a' and RowKey eq 'k'",
            Point,
        ),
        // Only string literals fix a key.
        ("PartitionKey eq 1", TableScan),
        ("PartitionKey eq 'Sales' and RowKey gt 5", PartitionScan),
        ("not (PartitionKey ne 'Sales')", TableScan),
        (
            "PartitionKey eq 'Sales' and not (RowKey eq 'x')",
            PartitionScan,
        ),
        // PartitionKey ranges cross partitions.
        ("PartitionKey ge 'a' and PartitionKey lt 'b'", TableScan),
    ];
    for (text, expected) in cases {
        assert_eq!(shape_of(text), expected, "{text}");
    }
}

#[test]
fn key_aware_constructors_have_the_shapes_they_promise() {
    let keys = Keys::new("Sales", "000223").unwrap();
    assert_eq!(Filter::point(&keys).shape(), Point);
    assert_eq!(Filter::row_prefix("Sales", "email_a").shape(), Range);
    assert_eq!(
        Filter::row_range("Sales", Bound::Included("a"), Bound::Excluded("b")).shape(),
        Range
    );
    assert_eq!(Filter::partition("Sales").shape(), Range);
    assert_eq!(
        Filter::partition("Sales")
            .and(Filter::eq("LastName", "Smith"))
            .shape(),
        PartitionScan
    );
}

#[test]
fn raw_text_is_classified_by_parsing_it() {
    assert_eq!(Filter::raw("startswith(RowKey, 'a')").shape(), TableScan);
    assert_eq!(
        Filter::raw("PartitionKey eq 'Sales' and RowKey eq '2'").shape(),
        Point
    );
    // Unparseable text inside a conjunction can only narrow the partition, and may hide `or`.
    let narrowed = Filter::partition("Sales")
        .and(Filter::eq("RowKey", "2"))
        .and(Filter::raw("f(x)"));
    assert_eq!(narrowed.shape(), PartitionScan);
    assert_eq!(narrowed.partition_key(), Some("Sales"));
    let nested = Filter::raw("PartitionKey eq 'Sales'").and(Filter::raw("RowKey ge 'a'"));
    assert_eq!(nested.shape(), Range);
    assert_eq!(nested.partition_key(), Some("Sales"));
}

#[test]
fn the_partition_key_and_the_partition_range_lint() {
    let f = Filter::parse("RowKey ge 'a' and PartitionKey eq 'Sales' and X eq 1").unwrap();
    assert_eq!(f.partition_key(), Some("Sales"));
    assert!(!f.has_partition_key_range());
    assert_eq!(
        Filter::parse("LastName eq 'Jones'")
            .unwrap()
            .partition_key(),
        None
    );
    assert_eq!(
        Filter::parse("PartitionKey eq 'a' and PartitionKey eq 'b'")
            .unwrap()
            .partition_key(),
        None
    );
    for text in [
        "PartitionKey ge 'a' and PartitionKey lt 'b'",
        "PartitionKey gt 'a'",
        "X eq 1 or PartitionKey le 'z'",
        "not (PartitionKey lt 'm')",
    ] {
        assert!(
            Filter::parse(text).unwrap().has_partition_key_range(),
            "{text}"
        );
        assert!(Filter::raw(text).has_partition_key_range(), "{text}");
    }
    for text in [
        "PartitionKey eq 'a'",
        "PartitionKey eq 'a' and PartitionKey lt 'b'",
        "PartitionKey ne 'a'",
    ] {
        assert!(
            !Filter::parse(text).unwrap().has_partition_key_range(),
            "{text}"
        );
    }
}

proptest! {
    #[test]
    fn a_table_scan_is_exactly_a_filter_without_one_fixed_partition(f in super::filters::filter()) {
        prop_assert_eq!(f.shape() == TableScan, f.partition_key().is_none());
    }

    #[test]
    fn rendered_parsed_and_raw_forms_classify_alike(f in super::filters::filter()) {
        let text = f.render().unwrap();
        prop_assert_eq!(Filter::parse(&text).unwrap().shape(), f.shape());
        prop_assert_eq!(Filter::raw(text.as_str()).shape(), f.shape());
        let raw = Filter::raw(text.as_str());
        prop_assert_eq!(raw.partition_key(), f.partition_key());
        let fixed = Filter::partition("Sales").and(f.clone());
        prop_assert_eq!(Filter::raw(fixed.render().unwrap()).shape(), fixed.shape());
    }
}
