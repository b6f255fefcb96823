//! Zero padding and prefix ranges.

use proptest::prelude::*;
use tablekit_core::keys::{KeyRange, pad_number, prefix_range};
use tablekit_core::{Error, Limit};

use super::common::{tricky_char, tricky_string};

#[test]
fn unpadded_numbers_sort_as_text_padded_ones_as_numbers() {
    assert!("10" < "9", "ordinal order puts 10 before 9");
    let (nine, ten) = (pad_number(9, 8).unwrap(), pad_number(10, 8).unwrap());
    assert_eq!((nine.as_str(), ten.as_str()), ("00000009", "00000010"));
    assert!(nine < ten);
}

#[test]
fn pad_number_refuses_numbers_wider_than_the_width() {
    assert_eq!(pad_number(0, 1).unwrap(), "0");
    assert_eq!(pad_number(u64::MAX, 20).unwrap(), "18446744073709551615");
    for (n, width, digits) in [(1000, 3, 4), (0, 0, 1), (u64::MAX, 19, 20)] {
        match pad_number(n, width) {
            Err(Error::LimitExceeded {
                limit: Limit::Custom { max, .. },
                actual,
            }) => {
                assert_eq!((max, actual), (width, digits), "{n} in {width}");
            }
            other => panic!("{n} in {width}: {other:?}"),
        }
    }
    assert!(
        pad_number(1, 513).is_err(),
        "no key holds more than 512 characters"
    );
    assert_eq!(pad_number(1, 512).unwrap().len(), 512);
}

proptest! {
    #[test]
    fn padded_numbers_sort_numerically(a in 0u64..100_000_000, b in 0u64..100_000_000) {
        let (pa, pb) = (pad_number(a, 8).unwrap(), pad_number(b, 8).unwrap());
        prop_assert_eq!(pa.len(), 8);
        prop_assert_eq!(pa.cmp(&pb), a.cmp(&b));
        prop_assert_eq!(pa.parse::<u64>().unwrap(), a);
    }
}

fn bounds(range: &KeyRange) -> (&str, Option<&str>) {
    (range.start.as_str(), range.end.as_deref())
}

#[test]
fn prefix_range_of_the_docs_example() {
    let range = prefix_range("email_a");
    assert_eq!(bounds(&range), ("email_a", Some("email_b")));
    for inside in [
        "email_a",
        "email_a@contoso.com",
        "email_azzzz",
        "email_a\u{10ffff}",
    ] {
        assert!(range.contains(inside), "{inside:?}");
    }
    for outside in [
        "email_",
        "email_b",
        "email_B",
        "email_`",
        "empid_000123",
        "",
    ] {
        assert!(!range.contains(outside), "{outside:?}");
    }
}

#[test]
fn prefix_range_carries_and_skips_the_surrogate_gap() {
    let cases = [
        ("", None),
        ("\u{10ffff}", None),
        ("\u{10ffff}\u{10ffff}", None),
        ("a\u{10ffff}", Some("b")),
        ("ab\u{10ffff}\u{10ffff}", Some("ac")),
        ("x\u{d7ff}", Some("x\u{e000}")),
        ("x\u{ffff}", Some("x\u{10000}")),
        ("a.", Some("a/")),
        ("~", Some("\u{7f}")),
    ];
    for (prefix, end) in cases {
        assert_eq!(bounds(&prefix_range(prefix)), (prefix, end), "{prefix:?}");
    }
}

#[test]
fn key_range_emptiness() {
    assert!(!KeyRange::all().is_empty());
    assert!(KeyRange::all().contains(""));
    let range = KeyRange {
        start: "b".into(),
        end: Some("b".into()),
    };
    assert!(range.is_empty() && !range.contains("b"));
}

proptest! {
    #[test]
    fn every_extension_of_the_prefix_is_inside(prefix in tricky_string(6), rest in tricky_string(6)) {
        let range = prefix_range(&prefix);
        let key = format!("{prefix}{rest}");
        prop_assert!(range.contains(&key), "{:?} not in {:?}", key, range);
    }

    #[test]
    fn a_string_is_inside_iff_it_starts_with_the_prefix(
        prefix in tricky_string(5),
        keep in 0usize..6,
        tail in prop::collection::vec(tricky_char(), 0..5),
    ) {
        // Share a random part of the prefix so that near misses are common.
        let shared: String = prefix.chars().take(keep).collect();
        let candidate = format!("{shared}{}", String::from_iter(tail));
        let range = prefix_range(&prefix);
        prop_assert_eq!(range.contains(&candidate), candidate.starts_with(&prefix), "{:?} vs {:?}", candidate, range);
    }
}
