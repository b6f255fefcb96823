//! Compound keys: escaping round trips, order and prefix ranges (33).

use proptest::prelude::*;
use tablekit_core::keys::{CompoundKey, KeyRange, validate_key};
use tablekit_core::{Error, KeyKind};

use super::common::tricky_string;

#[test]
fn the_guides_layout_builds_and_parses() {
    let key = CompoundKey::new('_')
        .build(["empid", "000123", "2012"])
        .unwrap();
    assert_eq!(key, "empid_000123_2012");
    assert_eq!(
        CompoundKey::default().parse(&key).unwrap(),
        ["empid", "000123", "2012"]
    );
}

#[test]
fn separators_and_escapes_inside_components_are_escaped() {
    let ck = CompoundKey::new('_');
    let key = ck.build(["a_b", "c!d", "e/f", ""]).unwrap();
    assert_eq!(key, "a!5Fb_c!21d_e!2Ff_");
    assert_eq!(ck.parse(&key).unwrap(), ["a_b", "c!d", "e/f", ""]);
    let dashed = CompoundKey::new('-');
    assert_eq!(dashed.build(["a_b", "x-y"]).unwrap(), "a_b-x!2Dy");
}

#[test]
fn fixed_width_components_are_zero_padded_numbers() {
    let ck = CompoundKey::new('_').with_width(1, 6);
    assert_eq!(ck.build(["empid", "123"]).unwrap(), "empid_000123");
    assert!(matches!(
        ck.build(["empid", "12a"]),
        Err(Error::Encode { .. })
    ));
    assert!(matches!(
        ck.build(["empid", "1234567"]),
        Err(Error::LimitExceeded { .. })
    ));
    assert!(matches!(ck.parse("empid_123"), Err(Error::Decode { .. })));
    assert!(matches!(
        ck.parse("empid_00012x"),
        Err(Error::Decode { .. })
    ));
    let far = CompoundKey::new('_').with_width(usize::MAX, 3);
    assert_eq!(far.width(usize::MAX), Some(3));
    assert_eq!(far.build(["a", "b"]).unwrap(), "a_b");
}

#[test]
fn bad_separators_empty_lists_and_foreign_keys_are_refused() {
    for sep in ['/', '\\', '#', '?', '!', 'a', '5', 'é', '\u{7f}'] {
        assert!(
            matches!(
                CompoundKey::new(sep).build(["a"]),
                Err(Error::InvalidArgument { .. })
            ),
            "{sep:?}"
        );
    }
    assert!(matches!(
        CompoundKey::new('_').build(Vec::<String>::new()),
        Err(Error::InvalidArgument { .. })
    ));
    match CompoundKey::new('_')
        .with_kind(KeyKind::PartitionKey)
        .parse("ab_c!5")
    {
        Err(Error::InvalidKey {
            kind: KeyKind::PartitionKey,
            character: '!',
            position: 4,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    match CompoundKey::order_preserving().parse("a b.c") {
        Err(Error::InvalidKey {
            character: '.',
            position: 3,
            ..
        }) => {}
        other => panic!("a raw lead is not a valid encoding: {other:?}"),
    }
}

#[test]
fn oversized_keys_are_refused() {
    let err = CompoundKey::new('_')
        .build(["a".repeat(300), "b".repeat(300)])
        .unwrap_err();
    assert!(
        matches!(err, Error::LimitExceeded { actual: 1202, .. }),
        "{err:?}"
    );
}

#[test]
fn variable_width_components_break_order_in_the_default_mode_only() {
    let (shorter, longer) = (["AB", "z"], ["ABC", "a"]);
    assert!(shorter < longer);
    let plain = CompoundKey::new('_');
    assert!(
        plain.build(shorter).unwrap() > plain.build(longer).unwrap(),
        "'_' sorts above 'C'"
    );
    let ordered = CompoundKey::order_preserving();
    assert!(ordered.build(shorter).unwrap() < ordered.build(longer).unwrap());
    assert_eq!(ordered.build(["a.b c", "x"]).unwrap(), "a.2Eb!20c x");
}

fn separator() -> impl Strategy<Value = char> {
    prop::sample::select(vec!['_', '-', '|', ':', '~', ' ', '.', '$', '"', '@', '^'])
}

fn components() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(tricky_string(8), 1..5)
}

proptest! {
    #[test]
    fn parse_inverts_build_for_any_components(sep in separator(), parts in components()) {
        let ck = CompoundKey::new(sep);
        let key = ck.build(&parts).unwrap();
        prop_assert!(validate_key(KeyKind::RowKey, &key).is_ok(), "{:?}", key);
        prop_assert_eq!(ck.parse(&key).unwrap(), parts);
    }

    #[test]
    fn order_preserving_parse_inverts_build(parts in components()) {
        let ck = CompoundKey::order_preserving();
        let key = ck.build(&parts).unwrap();
        prop_assert!(validate_key(KeyKind::RowKey, &key).is_ok(), "{:?}", key);
        prop_assert_eq!(ck.parse(&key).unwrap(), parts);
    }

    #[test]
    fn fixed_width_keys_sort_like_their_tuples(
        a in prop::collection::vec(0u64..1_000_000, 1..4),
        b in prop::collection::vec(0u64..1_000_000, 1..4),
        sep in separator(),
    ) {
        let ck = (0..4).fold(CompoundKey::new(sep), |ck, i| ck.with_width(i, 6));
        let key = |t: &[u64]| ck.build(t.iter().map(u64::to_string)).unwrap();
        prop_assert_eq!(key(&a).cmp(&key(&b)), a.cmp(&b), "{:?} vs {:?}", a, b);
    }

    #[test]
    fn order_preserving_keys_sort_like_their_tuples(a in components(), b in components()) {
        let ck = CompoundKey::order_preserving();
        let (ka, kb) = (ck.build(&a).unwrap(), ck.build(&b).unwrap());
        prop_assert_eq!(ka.cmp(&kb), a.cmp(&b), "{:?} vs {:?}", ka, kb);
    }

    #[test]
    fn ordered_prefix_ranges_hold_exactly_the_tuples_with_that_prefix(
        tuple in components(),
        k in 0usize..4,
        other in components(),
    ) {
        let ck = CompoundKey::order_preserving();
        let prefix = &tuple[..k.min(tuple.len())];
        let range = ck.range_for_prefix(prefix).unwrap();
        for candidate in [tuple.clone(), other.clone(), [prefix, &other[..]].concat()] {
            let inside = range.contains(&ck.build(&candidate).unwrap());
            prop_assert_eq!(inside, candidate.starts_with(prefix), "{:?} / {:?}", candidate, prefix);
        }
    }

    #[test]
    fn extension_ranges_hold_exactly_the_longer_tuples_with_that_prefix(
        sep in separator(),
        tuple in components(),
        k in 1usize..4,
        other in components(),
    ) {
        let ck = CompoundKey::new(sep);
        let prefix = &tuple[..k.min(tuple.len())];
        let range = ck.range_for_extensions(prefix).unwrap();
        for candidate in [tuple.clone(), other.clone(), [prefix, &other[..]].concat()] {
            let inside = range.contains(&ck.build(&candidate).unwrap());
            let expected = candidate.len() > prefix.len() && candidate.starts_with(prefix);
            prop_assert_eq!(inside, expected, "{:?} / {:?}", candidate, prefix);
        }
    }
}

/// Rows of one Sales partition laid out as in PATTERNS.md §5.6: employee rows and their
/// yearly review rows.
fn sales_rows(ck: &CompoundKey) -> Vec<String> {
    let mut rows = Vec::new();
    for id in ["122", "123", "124", "1230"] {
        rows.push(ck.build(["empid", id]).unwrap());
        for year in ["2011", "2012", "2013"] {
            rows.push(ck.build(["empid", id, year]).unwrap());
        }
    }
    rows.push("email_jonesj@contoso.com".to_owned());
    rows
}

#[test]
fn the_employee_range_holds_the_employee_and_its_reviews_only() {
    let ck = CompoundKey::new('_').with_width(1, 6);
    let range = ck.range_for_prefix(["empid", "123"]).unwrap();
    assert_eq!(range.start, "empid_000123");
    let selected: Vec<String> = sales_rows(&ck)
        .into_iter()
        .filter(|k| range.contains(k))
        .collect();
    assert_eq!(
        selected,
        [
            "empid_000123",
            "empid_000123_2011",
            "empid_000123_2012",
            "empid_000123_2013"
        ]
    );
    // The docs' bound `lt 'empid_000124'` selects the same rows of this layout.
    let docs = KeyRange {
        start: "empid_000123".into(),
        end: Some("empid_000124".into()),
    };
    let by_docs: Vec<String> = sales_rows(&ck)
        .into_iter()
        .filter(|k| docs.contains(k))
        .collect();
    assert_eq!(selected, by_docs);
}

#[test]
fn an_upper_bound_without_the_prefix_makes_an_empty_range() {
    let reversed = KeyRange {
        start: "empid_000123".into(),
        end: Some("000123_2012".into()),
    };
    // 'e' (U+0065) sorts above '0' (U+0030): the upper bound lies below the lower one.
    assert!('e' > '0');
    assert!(reversed.is_empty());
    let ck = CompoundKey::new('_').with_width(1, 6);
    assert!(sales_rows(&ck).iter().all(|k| !reversed.contains(k)));
    assert!(!reversed.contains("empid_000123_2012") && !reversed.contains("000123_2012"));
}

proptest! {
    #[test]
    fn no_string_at_all_is_in_a_range_whose_bounds_are_reversed(key in tricky_string(16)) {
        let reversed = KeyRange { start: "empid_000123".into(), end: Some("000123_2012".into()) };
        prop_assert!(!reversed.contains(&key));
    }
}

#[test]
fn prefix_ranges_need_a_fixed_width_last_component_in_the_default_mode() {
    let ck = CompoundKey::new('_').with_width(1, 6);
    assert!(matches!(
        ck.range_for_prefix(["empid"]),
        Err(Error::InvalidArgument { .. })
    ));
    let range = ck.range_for_extensions(["empid"]).unwrap();
    assert_eq!(
        (range.start.as_str(), range.end.as_deref()),
        ("empid_", Some("empid`"))
    );
    assert!(range.contains("empid_000123_2012") && !range.contains("empidA_000001"));
    assert_eq!(
        ck.range_for_prefix(Vec::<&str>::new()).unwrap(),
        KeyRange::all()
    );
}
