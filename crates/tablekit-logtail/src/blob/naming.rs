//! Storage Analytics-style blob names: `{prefix}/{yyyy}/{MM}/{dd}/{HHmm}/{seq:06}.log`, one
//! directory per hour (`HHmm` is the hour's start, so `mm` is `00`), files numbered from
//! `000001` within it.

use chrono::{DateTime, Datelike as _, DurationRound as _, TimeDelta, Timelike as _, Utc};
use tablekit_core::limits::validate_blob_name;
use tablekit_core::{Error, Limit, Result};

/// The largest sequence number a file name can carry (six digits).
pub const MAX_SEQUENCE: u32 = 999_999;

/// The start of the hour `t` falls in.
///
/// # Errors
/// [`Error::InvalidArgument`] outside the years 1 to 9999 (names have four-digit years).
pub fn hour_start(t: DateTime<Utc>) -> Result<DateTime<Utc>> {
    if !(1..=9999).contains(&t.year()) {
        return Err(Error::invalid_argument(
            "time",
            format!("{t} is outside the years 0001-9999 that log names can hold"),
        ));
    }
    t.duration_trunc(TimeDelta::hours(1))
        .map_err(|e| Error::invalid_argument("time", e.to_string()))
}

/// The listing prefix of one hour's files: `{prefix}/{yyyy}/{MM}/{dd}/{HH}00`
/// (e.g. `queue/2014/07/31/1800`). `hour` must be an hour start.
pub fn hour_prefix(prefix: &str, hour: DateTime<Utc>) -> String {
    format!(
        "{prefix}/{:04}/{:02}/{:02}/{:02}00",
        hour.year(),
        hour.month(),
        hour.day(),
        hour.hour()
    )
}

/// The name of file `seq` of an hour: `{prefix}/{yyyy}/{MM}/{dd}/{HH}00/{seq:06}.log`.
pub fn blob_name(prefix: &str, hour: DateTime<Utc>, seq: u32) -> String {
    format!("{}/{seq:06}.log", hour_prefix(prefix, hour))
}

/// The sequence number of a file listed under `hour_prefix`, if it is one of ours.
pub(crate) fn sequence_of(hour_prefix: &str, name: &str) -> Option<u32> {
    let file = name.strip_prefix(hour_prefix)?.strip_prefix('/')?;
    let digits = file.strip_suffix(".log")?;
    (digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Checks a writer's or reader's prefix: a valid blob name of its own, without leading or
/// trailing `/`, so `{prefix}/2014/…` is a valid name too.
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.starts_with('/') || prefix.ends_with('/') {
        return Err(Error::invalid_argument(
            "prefix",
            format!("{prefix:?}: a log prefix is non-empty and neither starts nor ends with `/`"),
        ));
    }
    validate_blob_name(&format!("{prefix}/0000/00/00/0000/000000.log"))
}

/// The error for an hour whose six-digit sequence numbers are used up.
pub(crate) fn sequence_exhausted(hour_prefix: &str) -> Error {
    Error::LimitExceeded {
        limit: Limit::Custom {
            what: format!("log files under {hour_prefix}"),
            max: MAX_SEQUENCE as usize,
        },
        actual: MAX_SEQUENCE as usize + 1,
    }
}

/// The hour starts from the hour of `from` up to (excluding) `to`.
pub(crate) fn hours_touched(from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<DateTime<Utc>>> {
    let mut hour = hour_start(from)?;
    hour_start(to)?;
    let mut hours = Vec::new();
    while hour < to {
        hours.push(hour);
        hour += TimeDelta::hours(1);
    }
    Ok(hours)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn names_follow_storage_analytics() {
        let hour = hour_start(t("2014-07-31T18:59:59.9Z")).unwrap();
        assert_eq!(hour, t("2014-07-31T18:00:00Z"));
        assert_eq!(hour_prefix("queue", hour), "queue/2014/07/31/1800");
        assert_eq!(
            blob_name("queue", hour, 1),
            "queue/2014/07/31/1800/000001.log"
        );
        assert_eq!(
            sequence_of("queue/2014/07/31/1800", "queue/2014/07/31/1800/000042.log"),
            Some(42)
        );
        assert_eq!(
            sequence_of("queue/2014/07/31/1800", "queue/2014/07/31/1800/42.log"),
            None
        );
        assert_eq!(
            sequence_of("queue/2014/07/31/1800", "queue/2014/07/31/1900/000001.log"),
            None
        );
    }

    #[test]
    fn windows_touch_the_hours_they_overlap() {
        let hours = hours_touched(t("2014-07-31T17:30:00Z"), t("2014-07-31T19:00:00Z")).unwrap();
        assert_eq!(
            hours,
            vec![t("2014-07-31T17:00:00Z"), t("2014-07-31T18:00:00Z")]
        );
        let one = hours_touched(t("2014-07-31T15:04:00Z"), t("2014-07-31T15:06:00Z")).unwrap();
        assert_eq!(one, vec![t("2014-07-31T15:00:00Z")]);
    }

    #[test]
    fn prefixes_are_checked() {
        assert!(validate_prefix("queue").is_ok());
        assert!(validate_prefix("logs/app-1").is_ok());
        for bad in ["", "/q", "q/", "a\u{7}"] {
            assert!(validate_prefix(bad).is_err(), "{bad:?}");
        }
    }
}
