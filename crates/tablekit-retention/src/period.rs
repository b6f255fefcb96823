//! Periods (hour, day, month) and the table-name suffixes that stand for them.

use std::fmt;

use chrono::{DateTime, Datelike as _, Months, NaiveDate, TimeDelta, Timelike as _, Utc};
use tablekit_core::{Error, Result};

/// How much time one table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Period {
    /// One table per hour: suffix `yyyyMMddHH` (`Signins2026112210`).
    Hour,
    /// One table per day: suffix `yyyyMMdd` (`Signins20261122`).
    Day,
    /// One table per month: suffix `yyyyMM` (`Signins202611`).
    Month,
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Period::Hour => "hour",
            Period::Day => "day",
            Period::Month => "month",
        })
    }
}

fn out_of_range(t: DateTime<Utc>) -> Error {
    Error::invalid_argument(
        "time",
        format!("{t} is outside the years 0001-9999 that period table names can hold"),
    )
}

impl Period {
    /// The number of digits of this period's suffix (10, 8 or 6).
    pub(crate) fn digits(self) -> usize {
        match self {
            Period::Hour => 10,
            Period::Day => 8,
            Period::Month => 6,
        }
    }

    /// The start of the period `t` falls in (UTC).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside the years 1 to 9999.
    pub fn start_of(self, t: DateTime<Utc>) -> Result<DateTime<Utc>> {
        if !(1..=9999).contains(&t.year()) {
            return Err(out_of_range(t));
        }
        let (day, hour) = match self {
            Period::Hour => (t.day(), t.hour()),
            Period::Day => (t.day(), 0),
            Period::Month => (1, 0),
        };
        NaiveDate::from_ymd_opt(t.year(), t.month(), day)
            .and_then(|d| d.and_hms_opt(hour, 0, 0))
            .map(|n| n.and_utc())
            .ok_or_else(|| out_of_range(t))
    }

    /// The start of the period after the one starting at `start`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] past 9999-12-31.
    pub fn next(self, start: DateTime<Utc>) -> Result<DateTime<Utc>> {
        let next = match self {
            Period::Hour => start.checked_add_signed(TimeDelta::hours(1)),
            Period::Day => start.checked_add_signed(TimeDelta::days(1)),
            Period::Month => start.checked_add_months(Months::new(1)),
        };
        next.filter(|n| n.year() <= 9999)
            .ok_or_else(|| out_of_range(start))
    }

    /// The table-name suffix of the period starting at `start`: `yyyyMMddHH`, `yyyyMMdd` or
    /// `yyyyMM`.
    pub(crate) fn suffix(self, start: DateTime<Utc>) -> String {
        let (y, mo, d, h) = (start.year(), start.month(), start.day(), start.hour());
        match self {
            Period::Hour => format!("{y:04}{mo:02}{d:02}{h:02}"),
            Period::Day => format!("{y:04}{mo:02}{d:02}"),
            Period::Month => format!("{y:04}{mo:02}"),
        }
    }

    /// The period start a suffix stands for, if it is exactly one of this period's suffixes
    /// (right length, all digits, a real date and hour).
    pub(crate) fn parse_suffix(self, suffix: &str) -> Option<DateTime<Utc>> {
        if suffix.len() != self.digits() || !suffix.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let number = |range: std::ops::Range<usize>| suffix.get(range)?.parse::<u32>().ok();
        let year = i32::try_from(number(0..4)?).ok()?;
        let month = number(4..6)?;
        let (day, hour) = match self {
            Period::Hour => (number(6..8)?, number(8..10)?),
            Period::Day => (number(6..8)?, 0),
            Period::Month => (1, 0),
        };
        let start = NaiveDate::from_ymd_opt(year, month, day)?
            .and_hms_opt(hour, 0, 0)?
            .and_utc();
        (year >= 1 && self.suffix(start) == suffix).then_some(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn suffixes_round_trip_for_every_period() {
        let at = t("2026-11-22T10:59:59.999Z");
        for (period, suffix, start) in [
            (Period::Hour, "2026112210", "2026-11-22T10:00:00Z"),
            (Period::Day, "20261122", "2026-11-22T00:00:00Z"),
            (Period::Month, "202611", "2026-11-01T00:00:00Z"),
        ] {
            let s = period.start_of(at).unwrap();
            assert_eq!(s, t(start));
            assert_eq!(period.suffix(s), suffix);
            assert_eq!(period.parse_suffix(suffix), Some(s));
            assert_eq!(suffix.len(), period.digits());
        }
    }

    #[test]
    fn next_periods_cross_month_and_year_ends() {
        assert_eq!(
            Period::Month.next(t("2026-12-01T00:00:00Z")).unwrap(),
            t("2027-01-01T00:00:00Z")
        );
        assert_eq!(
            Period::Day.next(t("2028-02-28T00:00:00Z")).unwrap(),
            t("2028-02-29T00:00:00Z")
        );
        assert_eq!(
            Period::Hour.next(t("2026-11-22T23:00:00Z")).unwrap(),
            t("2026-11-23T00:00:00Z")
        );
        assert!(Period::Day.next(t("9999-12-31T00:00:00Z")).is_err());
    }

    #[test]
    fn foreign_suffixes_are_not_periods() {
        for bad in [
            "2026112",
            "202611223",
            "20261322",
            "20260230",
            "2026a122",
            "00001122",
        ] {
            assert_eq!(Period::Day.parse_suffix(bad), None, "{bad}");
        }
        assert_eq!(Period::Hour.parse_suffix("2026112224"), None);
        assert_eq!(Period::Month.parse_suffix("202613"), None);
        assert!(Period::Day.start_of(t("0000-12-31T00:00:00Z")).is_err());
    }
}
