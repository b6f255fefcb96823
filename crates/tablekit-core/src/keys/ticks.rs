//! .NET ticks and inverted-tick keys, for newest-first RowKeys (the log tail pattern).
//!
//! A .NET tick is 100 ns; .NET counts ticks from 0001-01-01T00:00:00 and its largest
//! `DateTime` is 9999-12-31T23:59:59.9999999. The keys produced here are bit-for-bit those of
//! `string.Format("{0:D19}", DateTime.MaxValue.Ticks - t.Ticks)`, so Rust and .NET writers can
//! share a table.

use chrono::{DateTime, Utc};

use crate::error::{Error, Result, Target};

/// `DateTime.MaxValue.Ticks` in .NET: 9999-12-31T23:59:59.9999999.
pub const DOTNET_MAX_TICKS: i64 = 3_155_378_975_999_999_999;

/// .NET ticks at the Unix epoch, 1970-01-01T00:00:00Z.
pub const DOTNET_TICKS_AT_UNIX_EPOCH: i64 = 621_355_968_000_000_000;

const TICKS_PER_SECOND: i64 = 10_000_000;
const NANOS_PER_TICK: u32 = 100;
const INVERTED_TICKS_DIGITS: usize = 19;

/// The .NET tick count of `t`: 100 ns units since 0001-01-01T00:00:00Z, sub-100 ns precision
/// truncated.
///
/// Instants outside .NET's range (0001-01-01 to 9999-12-31) give values outside
/// `0..=DOTNET_MAX_TICKS`, saturating at the `i64` limits.
pub fn dotnet_ticks(t: DateTime<Utc>) -> i64 {
    // Leap-second nanos (>= 1e9) stay in the last tick of their second, as in format_datetime.
    let nanos = t.timestamp_subsec_nanos().min(999_999_999);
    let ticks = i128::from(t.timestamp()) * i128::from(TICKS_PER_SECOND)
        + i128::from(nanos / NANOS_PER_TICK)
        + i128::from(DOTNET_TICKS_AT_UNIX_EPOCH);
    i64::try_from(ticks).unwrap_or(if ticks < 0 { i64::MIN } else { i64::MAX })
}

/// The instant `ticks` .NET ticks after 0001-01-01T00:00:00Z.
///
/// # Errors
/// [`Error::InvalidArgument`] when `ticks` is outside `0..=DOTNET_MAX_TICKS`.
pub fn from_dotnet_ticks(ticks: i64) -> Result<DateTime<Utc>> {
    let refuse = || Error::invalid_argument("ticks", out_of_range(format!("{ticks} ticks")));
    if !(0..=DOTNET_MAX_TICKS).contains(&ticks) {
        return Err(refuse());
    }
    let unix_ticks = ticks - DOTNET_TICKS_AT_UNIX_EPOCH;
    let seconds = unix_ticks.div_euclid(TICKS_PER_SECOND);
    // rem_euclid is below 10^7, so the product fits a u32.
    let nanos =
        u32::try_from(unix_ticks.rem_euclid(TICKS_PER_SECOND)).unwrap_or(0) * NANOS_PER_TICK;
    DateTime::from_timestamp(seconds, nanos).ok_or_else(refuse)
}

fn out_of_range(what: String) -> String {
    format!("{what} is outside .NET's DateTime range 0001-01-01..9999-12-31")
}

/// A RowKey that sorts newest first: `DOTNET_MAX_TICKS - dotnet_ticks(t)` as 19 zero-padded
/// digits, exactly what .NET's `string.Format("{0:D19}", DateTime.MaxValue.Ticks - t.Ticks)`
/// gives. Later instants give smaller keys.
///
/// Instants outside .NET's range are clamped to its ends (so every key has 19 digits and sorts
/// correctly); use [`try_inverted_ticks`] to refuse them instead. Two instants within the same
/// 100 ns tick give the same key: append a unique suffix when that can happen.
///
/// # Example
/// ```
/// use tablekit_core::keys::{from_inverted_ticks, inverted_ticks};
/// let t = chrono::DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z").unwrap().to_utc();
/// assert_eq!(inverted_ticks(t), "2516069591999999999");
/// assert_eq!(from_inverted_ticks("2516069591999999999").unwrap(), t);
/// ```
pub fn inverted_ticks(t: DateTime<Utc>) -> String {
    format_inverted(dotnet_ticks(t).clamp(0, DOTNET_MAX_TICKS))
}

/// [`inverted_ticks`], refusing instants .NET cannot represent.
///
/// # Errors
/// [`Error::Encode`] (property `RowKey`) when `t` is before 0001-01-01 or after
/// 9999-12-31T23:59:59.9999999: it has no inverted-ticks key.
pub fn try_inverted_ticks(t: DateTime<Utc>) -> Result<String> {
    let ticks = dotnet_ticks(t);
    if !(0..=DOTNET_MAX_TICKS).contains(&ticks) {
        return Err(Error::encode("RowKey", out_of_range(t.to_rfc3339())));
    }
    Ok(format_inverted(ticks))
}

fn format_inverted(ticks: i64) -> String {
    format!(
        "{:0width$}",
        DOTNET_MAX_TICKS - ticks,
        width = INVERTED_TICKS_DIGITS
    )
}

/// The instant an [`inverted_ticks`] key stands for (at 100 ns resolution).
///
/// # Errors
/// [`Error::Decode`] (property `RowKey`) unless `key` is exactly 19 ASCII digits whose value
/// is at most `DOTNET_MAX_TICKS`.
pub fn from_inverted_ticks(key: &str) -> Result<DateTime<Utc>> {
    let malformed = || {
        Error::decode(
            Target::default(),
            "RowKey",
            format!("{key:?} is not an inverted-ticks key (19 digits, at most {DOTNET_MAX_TICKS})"),
        )
    };
    if key.len() != INVERTED_TICKS_DIGITS || !key.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed());
    }
    let inverted: i64 = key.parse().map_err(|_| malformed())?;
    if inverted > DOTNET_MAX_TICKS {
        return Err(malformed());
    }
    from_dotnet_ticks(DOTNET_MAX_TICKS - inverted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
            .single()
            .expect("valid test date")
    }

    #[test]
    fn the_ends_of_dotnet_range_map_to_the_ends_of_the_key_space() {
        let min = utc(1, 1, 1, 0, 0, 0);
        assert_eq!(dotnet_ticks(min), 0);
        assert_eq!(inverted_ticks(min), "3155378975999999999");
        let max = utc(9999, 12, 31, 23, 59, 59) + chrono::Duration::nanoseconds(999_999_999);
        assert_eq!(dotnet_ticks(max), DOTNET_MAX_TICKS);
        assert_eq!(inverted_ticks(max), "0000000000000000000");
        assert_eq!(
            dotnet_ticks(utc(1970, 1, 1, 0, 0, 0)),
            DOTNET_TICKS_AT_UNIX_EPOCH
        );
    }

    #[test]
    fn out_of_range_instants_are_clamped_or_refused() {
        let early = utc(1, 1, 1, 0, 0, 0) - chrono::Duration::nanoseconds(100);
        assert_eq!(dotnet_ticks(early), -1);
        assert_eq!(inverted_ticks(early), "3155378975999999999");
        assert!(try_inverted_ticks(early).is_err());
        assert!(from_dotnet_ticks(-1).is_err());
        assert!(from_dotnet_ticks(DOTNET_MAX_TICKS + 1).is_err());
        assert_eq!(dotnet_ticks(DateTime::<Utc>::MAX_UTC), i64::MAX);
        assert_eq!(dotnet_ticks(DateTime::<Utc>::MIN_UTC), i64::MIN);
    }

    #[test]
    fn sub_tick_precision_is_truncated() {
        let t = utc(2026, 11, 22, 10, 0, 0) + chrono::Duration::nanoseconds(199);
        let back = from_inverted_ticks(&inverted_ticks(t)).unwrap();
        assert_eq!(
            back,
            utc(2026, 11, 22, 10, 0, 0) + chrono::Duration::nanoseconds(100)
        );
        let before_epoch =
            utc(1969, 12, 31, 23, 59, 59) + chrono::Duration::nanoseconds(999_999_950);
        assert_eq!(dotnet_ticks(before_epoch), DOTNET_TICKS_AT_UNIX_EPOCH - 1);
    }

    #[test]
    fn malformed_keys_are_refused() {
        for key in [
            "",
            "123",
            "251606959199999999x",
            "-516069591999999999",
            "9999999999999999999",
            "25160695919999999990",
        ] {
            assert!(
                matches!(from_inverted_ticks(key), Err(Error::Decode { .. })),
                "{key:?}"
            );
        }
    }
}
