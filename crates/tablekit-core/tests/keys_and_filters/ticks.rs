//! Inverted ticks: .NET compatibility and newest-first order.

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use tablekit_core::keys::{
    DOTNET_MAX_TICKS, DOTNET_TICKS_AT_UNIX_EPOCH, dotnet_ticks, from_dotnet_ticks,
    from_inverted_ticks, inverted_ticks,
};

fn at(ticks: i64) -> DateTime<Utc> {
    from_dotnet_ticks(ticks).unwrap()
}

#[test]
fn inverted_ticks_match_the_dotnet_formula_computed_by_hand() {
    // Days from 1970-01-01 to 2026-01-01: 56 years, 14 of them leap (1972, 1976, …, 2024).
    let days_to_2026 = 56 * 365 + 14;
    // 2026 is not a leap year: January to October, then 21 more days to reach the 22nd.
    let days_into_2026 = 31 + 28 + 31 + 30 + 31 + 30 + 31 + 31 + 30 + 31 + 21;
    let unix_seconds: i64 = (days_to_2026 + days_into_2026) * 86_400 + 10 * 3_600;
    assert_eq!(unix_seconds, 1_795_341_600);
    let ticks = unix_seconds * 10_000_000 + 621_355_968_000_000_000;
    let expected = format!("{:019}", 3_155_378_975_999_999_999_i64 - ticks);
    assert_eq!(expected, "2516069591999999999");

    let t = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
    assert_eq!(dotnet_ticks(t), ticks);
    assert_eq!(inverted_ticks(t), expected);
    assert_eq!(from_inverted_ticks(&expected).unwrap(), t);
}

#[test]
fn keys_sort_newest_first() {
    let times: Vec<DateTime<Utc>> = [
        (2026, 11, 22, 10),
        (2026, 11, 22, 9),
        (2027, 1, 1, 0),
        (1999, 12, 31, 23),
    ]
    .into_iter()
    .map(|(y, m, d, h)| Utc.with_ymd_and_hms(y, m, d, h, 0, 0).unwrap())
    .collect();
    let mut keys: Vec<String> = times.iter().map(|&t| inverted_ticks(t)).collect();
    keys.sort();
    let newest_first: Vec<DateTime<Utc>> = keys
        .iter()
        .map(|k| from_inverted_ticks(k).unwrap())
        .collect();
    let mut expected = times.clone();
    expected.sort_by(|a, b| b.cmp(a));
    assert_eq!(newest_first, expected);
}

#[test]
fn the_constants_are_the_dotnet_ones() {
    // 0001-01-01 to 1970-01-01 is 719,162 days; .NET's max is one tick before 10000-01-01,
    // 3,652,059 days after 0001-01-01.
    assert_eq!(DOTNET_TICKS_AT_UNIX_EPOCH, 719_162 * 86_400 * 10_000_000);
    assert_eq!(DOTNET_MAX_TICKS, 3_652_059 * 86_400 * 10_000_000 - 1);
}

proptest! {
    #[test]
    fn later_instants_give_smaller_19_digit_keys(a in 0..=DOTNET_MAX_TICKS, b in 0..=DOTNET_MAX_TICKS) {
        let (ka, kb) = (inverted_ticks(at(a)), inverted_ticks(at(b)));
        prop_assert_eq!(ka.len(), 19);
        prop_assert_eq!(kb.len(), 19);
        prop_assert_eq!(ka.cmp(&kb), b.cmp(&a));
    }

    #[test]
    fn round_trip_at_100ns(ticks in 0..=DOTNET_MAX_TICKS, sub_tick in 0i64..100) {
        let t = at(ticks);
        prop_assert_eq!(dotnet_ticks(t), ticks);
        prop_assert_eq!(from_inverted_ticks(&inverted_ticks(t)).unwrap(), t);
        let blurred = t + chrono::Duration::nanoseconds(sub_tick);
        prop_assert_eq!(from_inverted_ticks(&inverted_ticks(blurred)).unwrap(), t);
    }

    #[test]
    fn the_key_is_the_dotnet_d19_format(ticks in 0..=DOTNET_MAX_TICKS) {
        let key = inverted_ticks(at(ticks));
        prop_assert_eq!(key.trim_start_matches('0').parse::<i64>().unwrap_or(0), DOTNET_MAX_TICKS - ticks);
        prop_assert!(key.bytes().all(|b| b.is_ascii_digit()));
    }
}
