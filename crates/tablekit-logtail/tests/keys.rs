//! Claims 17 and 18 for log-tail RowKeys, suffixes included: later instants sort first, the
//! time part is always 19 digits, and the time comes back from the key at 100 ns resolution.

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use tablekit_logtail::key::{row_key, time_of, truncate_to_tick, window_filter};

/// .NET's range in ticks: 0001-01-01T00:00:00 to 9999-12-31T23:59:59.9999999.
const MAX_TICKS: i64 = 3_155_378_975_999_999_999;
const UNIX_EPOCH_TICKS: i64 = 621_355_968_000_000_000;

/// The instant `ticks` .NET ticks after 0001-01-01, plus `sub` nanoseconds (< 100).
fn instant(ticks: i64, sub: u32) -> DateTime<Utc> {
    let unix = ticks - UNIX_EPOCH_TICKS;
    let nanos = u32::try_from(unix.rem_euclid(10_000_000)).unwrap() * 100 + sub;
    DateTime::from_timestamp(unix.div_euclid(10_000_000), nanos).unwrap()
}

fn suffix() -> impl Strategy<Value = Option<String>> {
    prop::option::of("[a-f][0-9a-f]{0,31}")
}

proptest! {
    #[test]
    fn later_instants_sort_first_with_or_without_suffixes(
        a in 0..MAX_TICKS, b in 0..MAX_TICKS, sa in suffix(), sb in suffix()
    ) {
        prop_assume!(a != b);
        let (earlier, later) = (instant(a.min(b), 0), instant(a.max(b), 0));
        let ke = row_key(earlier, sa.as_deref()).unwrap();
        let kl = row_key(later, sb.as_deref()).unwrap();
        prop_assert!(kl.as_str() < ke.as_str());
        prop_assert!(ke.as_bytes()[..19].iter().all(u8::is_ascii_digit));
        prop_assert!(kl.len() == 19 || kl.as_bytes()[19] == b'_');
    }

    #[test]
    fn the_time_comes_back_at_100ns(ticks in 0..=MAX_TICKS, sub in 0u32..100, s in suffix()) {
        let t = instant(ticks, sub);
        let key = row_key(t, s.as_deref()).unwrap();
        let back = time_of(&key).unwrap();
        prop_assert_eq!(back, instant(ticks, 0));
        prop_assert_eq!(back, truncate_to_tick(t).unwrap());
    }

    #[test]
    fn windows_hold_exactly_their_ticks(from in 0..MAX_TICKS, len in 0i64..1_000, offset in -5i64..1_005, s in suffix()) {
        let at = (from + offset).clamp(0, MAX_TICKS);
        let to = (from + len).min(MAX_TICKS);
        let filter = window_filter("p", instant(from, 0), instant(to, 0)).unwrap();
        let rendered = filter.render().unwrap();
        let bound = |op: &str| {
            let start = rendered.find(&format!("RowKey {op} '")).unwrap() + 11;
            rendered[start..start + 19].to_owned()
        };
        let (lower, upper) = (bound("ge"), bound("lt"));
        let key = row_key(instant(at, 0), s.as_deref()).unwrap();
        let inside = lower.as_str() <= key.as_str() && key.as_str() < upper.as_str();
        prop_assert_eq!(inside, from <= at && at < to);
    }
}
