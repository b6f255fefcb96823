//! Row keys of a log tail: 19 digits of inverted .NET ticks, optionally followed by `_` and a
//! unique suffix.
//!
//! The 19 digits are exactly what the design guide's C# writes
//! (`string.Format("{0:D19}", DateTime.MaxValue.Ticks - t.Ticks)`), so keys written by a
//! .NET application and by this crate sort together and are read back the same way. The
//! suffix only breaks ties between entries of the same 100 ns tick: a key without one (as
//! .NET writes it) sorts just before the suffixed keys of its tick.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use tablekit_core::filter::Filter;
use tablekit_core::keys::{
    DOTNET_MAX_TICKS, dotnet_ticks, from_inverted_ticks, try_inverted_ticks,
};
use tablekit_core::{Error, Result, RowKey, Target};

use crate::id::AppendId;

/// The number of digits of the time part of a key.
pub const TICK_DIGITS: usize = 19;

/// What separates the time part of a key from its unique suffix.
pub const SUFFIX_SEPARATOR: char = '_';

/// `time` truncated to .NET's 100 ns tick: the precision a key keeps.
///
/// # Errors
/// [`Error::Encode`] for instants outside .NET's range (0001-01-01 to 9999-12-31).
pub fn truncate_to_tick(time: DateTime<Utc>) -> Result<DateTime<Utc>> {
    time_of(&try_inverted_ticks(time)?)
}

/// The RowKey of an entry at `time`: its inverted ticks, then `_suffix` when a suffix is
/// given. Later instants give smaller keys, so a partition reads newest first.
///
/// # Errors
/// Before any request: [`Error::Encode`] for instants outside .NET's range, and the key
/// errors of [`RowKey::new`] for a suffix with forbidden characters or too long a key.
///
/// # Example
/// ```
/// use tablekit_logtail::key::{row_key, time_of};
/// let t = chrono::DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z").unwrap().to_utc();
/// assert_eq!(row_key(t, None).unwrap().as_str(), "2516069591999999999");
/// let k = row_key(t, Some("a1")).unwrap();
/// assert_eq!(k.as_str(), "2516069591999999999_a1");
/// assert_eq!(time_of(&k).unwrap(), t);
/// ```
pub fn row_key(time: DateTime<Utc>, suffix: Option<&str>) -> Result<RowKey> {
    let ticks = try_inverted_ticks(time)?;
    match suffix {
        None => RowKey::new(ticks),
        Some(s) => RowKey::new(format!("{ticks}{SUFFIX_SEPARATOR}{s}")),
    }
}

/// The time an entry's RowKey stands for (at 100 ns resolution). Accepts the guide's plain
/// 19-digit keys and keys with any suffix that does not start with a digit.
///
/// # Errors
/// [`Error::Decode`] when the key does not start with 19 digits of inverted ticks (at
/// most `DateTime.MaxValue.Ticks`), or when a digit follows them.
pub fn time_of(row_key: &str) -> Result<DateTime<Utc>> {
    let ticks = row_key
        .get(..TICK_DIGITS)
        .ok_or_else(|| malformed(row_key))?;
    if row_key[TICK_DIGITS..].starts_with(|c: char| c.is_ascii_digit()) {
        return Err(malformed(row_key));
    }
    from_inverted_ticks(ticks)
}

fn malformed(row_key: &str) -> Error {
    Error::decode(
        Target::default(),
        "RowKey",
        format!(
            "{row_key:?} is not a log-tail key (19 digits of inverted ticks, optionally `_suffix`)"
        ),
    )
}

/// The filter selecting the entries of partition `pk` whose time (truncated to the tick) is
/// in `[from, to)`: one RowKey range, newest first.
///
/// Later instants have smaller keys, so the range runs from just above `to`'s key to just
/// above `from`'s: `RowKey ge '{inv(to) + 1}' and RowKey lt '{inv(from) + 1}'`, both as 19
/// digits. Suffixed keys of a tick lie between its plain key and the next tick's, so they
/// fall on the same side of both bounds.
///
/// # Errors
/// Before any request: [`Error::InvalidArgument`] when `from > to`, [`Error::Encode`] when
/// either is outside .NET's range.
pub fn window_filter(pk: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Filter> {
    let (lower, upper) = window_bounds(from, to)?;
    Ok(Filter::row_range(
        pk,
        Bound::Included(&lower),
        Bound::Excluded(&upper),
    ))
}

/// The RowKey bounds `[lower, upper)` of the window `[from, to)`.
pub(crate) fn window_bounds(from: DateTime<Utc>, to: DateTime<Utc>) -> Result<(String, String)> {
    if from > to {
        return Err(Error::invalid_argument(
            "window",
            format!("the window starts ({from}) after it ends ({to})"),
        ));
    }
    // Validates both ends against .NET's range.
    try_inverted_ticks(from)?;
    try_inverted_ticks(to)?;
    let above = |t: DateTime<Utc>| format!("{:019}", DOTNET_MAX_TICKS - dotnet_ticks(t) + 1);
    Ok((above(to), above(from)))
}

/// Unique suffixes for the keys one process writes: a per-writer random id, so processes never
/// collide, after an inverted per-writer counter, so that within one tick a writer's later
/// entries sort first (newest first holds even inside a tick).
#[derive(Debug)]
pub(crate) struct SuffixSource {
    writer: u64,
    counter: AtomicU64,
}

impl SuffixSource {
    pub(crate) fn new() -> Self {
        Self {
            writer: uuid::Uuid::new_v4().as_u64_pair().0,
            counter: AtomicU64::new(0),
        }
    }

    /// 32 lowercase hex digits, never repeated by this source.
    pub(crate) fn next(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}{:016x}", u64::MAX - n, self.writer)
    }

    /// A new append id: [`SuffixSource::next`] as an [`AppendId`].
    pub(crate) fn next_id(&self) -> AppendId {
        AppendId::minted(self.next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use tablekit_core::keys::inverted_ticks;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn keys_are_the_dotnet_digits_plus_an_optional_suffix() {
        let at = t("2026-11-22T10:00:00.1234567Z");
        let plain = row_key(at, None).unwrap();
        assert_eq!(plain.as_str(), inverted_ticks(at));
        assert_eq!(plain.len(), 19);
        assert_eq!(time_of(&plain).unwrap(), at);
        let suffixed = row_key(at, Some("x")).unwrap();
        assert!(plain.as_str() < suffixed.as_str());
        assert_eq!(time_of(&suffixed).unwrap(), at);
        assert!(row_key(at, Some("a/b")).is_err());
    }

    #[test]
    fn malformed_keys_are_refused() {
        for key in [
            "",
            "123",
            "251606959199999999x",
            "25160695919999999990",
            "abc",
        ] {
            assert!(time_of(key).is_err(), "{key:?}");
        }
        assert!(time_of("2516069591999999999-anything").is_ok());
    }

    #[test]
    fn suffixes_are_unique_and_later_ones_sort_first() {
        let source = SuffixSource::new();
        let a = source.next();
        let b = source.next();
        assert_ne!(a, b);
        assert!(b < a, "{b} should sort before {a}");
        assert_eq!(a.len(), 32);
        assert_ne!(SuffixSource::new().next()[16..], a[16..]);
    }

    #[test]
    fn append_ids_are_key_safe_text_that_round_trips() {
        let minted = SuffixSource::new().next_id();
        assert_eq!(AppendId::new(minted.as_str()).unwrap(), minted);
        assert_eq!(minted.to_string().parse::<AppendId>().unwrap(), minted);
        let uuid = uuid::Uuid::new_v4().to_string();
        assert!(AppendId::new(uuid).is_ok());
        for bad in [
            "",
            "a b",
            "a/b",
            "a#b",
            "é",
            &"x".repeat(AppendId::MAX_LEN + 1),
        ] {
            assert!(AppendId::new(bad).is_err(), "{bad:?}");
        }
        let at = t("2026-11-22T10:00:00Z");
        let key = row_key(at, Some(AppendId::new("0abc").unwrap().as_str())).unwrap();
        assert_eq!(time_of(&key).unwrap(), at, "an id may start with a digit");
    }

    #[test]
    fn a_window_selects_exactly_its_ticks() {
        let from = t("2026-11-22T10:00:00Z");
        let to = t("2026-11-22T10:05:00Z");
        let (lower, upper) = window_bounds(from, to).unwrap();
        let inside = |at: DateTime<Utc>, suffix: Option<&str>| {
            let k = row_key(at, suffix).unwrap();
            lower.as_str() <= k.as_str() && k.as_str() < upper.as_str()
        };
        let tick = chrono::Duration::nanoseconds(100);
        for suffix in [None, Some("ffff")] {
            assert!(inside(from, suffix));
            assert!(inside(to - tick, suffix));
            assert!(!inside(to, suffix));
            assert!(!inside(from - tick, suffix));
        }
        assert!(window_bounds(to, from).is_err());
        let min = Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap();
        assert!(window_bounds(min, from).is_ok());
        assert!(window_bounds(min - tick, from).is_err());
    }
}
