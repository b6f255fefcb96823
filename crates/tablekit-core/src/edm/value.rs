//! Typed property values of the Table service's Entity Data Model.

use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, Timelike, Utc};
use uuid::Uuid;

use crate::error::{Error, Result};

/// The EDM types a property can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EdmType {
    /// `Edm.String`: UTF-16 text, at most 64 KiB.
    String,
    /// `Edm.Int32`.
    Int32,
    /// `Edm.Int64`: written in JSON as a string with a type annotation.
    Int64,
    /// `Edm.Double`.
    Double,
    /// `Edm.Boolean`.
    Boolean,
    /// `Edm.DateTime`: UTC, 100 ns resolution, 1601-01-01 to 9999-12-31.
    DateTime,
    /// `Edm.Guid`.
    Guid,
    /// `Edm.Binary`: base64 in JSON, at most 64 KiB.
    Binary,
}

impl EdmType {
    /// The OData type name, e.g. `Edm.Int64`.
    pub fn as_str(self) -> &'static str {
        match self {
            EdmType::String => "Edm.String",
            EdmType::Int32 => "Edm.Int32",
            EdmType::Int64 => "Edm.Int64",
            EdmType::Double => "Edm.Double",
            EdmType::Boolean => "Edm.Boolean",
            EdmType::DateTime => "Edm.DateTime",
            EdmType::Guid => "Edm.Guid",
            EdmType::Binary => "Edm.Binary",
        }
    }

    /// Parses an OData type name (`Edm.Int64`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "Edm.String" => EdmType::String,
            "Edm.Int32" => EdmType::Int32,
            "Edm.Int64" => EdmType::Int64,
            "Edm.Double" => EdmType::Double,
            "Edm.Boolean" => EdmType::Boolean,
            "Edm.DateTime" => EdmType::DateTime,
            "Edm.Guid" => EdmType::Guid,
            "Edm.Binary" => EdmType::Binary,
            _ => return None,
        })
    }
}

impl fmt::Display for EdmType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A typed property value.
#[derive(Debug, Clone, PartialEq)]
pub enum EdmValue {
    /// `Edm.String`.
    String(String),
    /// `Edm.Int32`.
    Int32(i32),
    /// `Edm.Int64`.
    Int64(i64),
    /// `Edm.Double` (NaN and ±infinity are allowed in entities, not in filters).
    Double(f64),
    /// `Edm.Boolean`.
    Boolean(bool),
    /// `Edm.DateTime`.
    DateTime(DateTime<Utc>),
    /// `Edm.Guid`.
    Guid(Uuid),
    /// `Edm.Binary`.
    Binary(Vec<u8>),
}

impl EdmValue {
    /// This value's type.
    pub fn edm_type(&self) -> EdmType {
        match self {
            EdmValue::String(_) => EdmType::String,
            EdmValue::Int32(_) => EdmType::Int32,
            EdmValue::Int64(_) => EdmType::Int64,
            EdmValue::Double(_) => EdmType::Double,
            EdmValue::Boolean(_) => EdmType::Boolean,
            EdmValue::DateTime(_) => EdmType::DateTime,
            EdmValue::Guid(_) => EdmType::Guid,
            EdmValue::Binary(_) => EdmType::Binary,
        }
    }

    /// The string, if this is an `Edm.String`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            EdmValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is an `Edm.Int32` or `Edm.Int64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            EdmValue::Int32(v) => Some(i64::from(*v)),
            EdmValue::Int64(v) => Some(*v),
            _ => None,
        }
    }

    /// The number, if this is an `Edm.Double` (or an integer, converted).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            EdmValue::Double(v) => Some(*v),
            EdmValue::Int32(v) => Some(f64::from(*v)),
            EdmValue::Int64(v) => Some(*v as f64),
            _ => None,
        }
    }

    /// The boolean, if this is an `Edm.Boolean`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            EdmValue::Boolean(v) => Some(*v),
            _ => None,
        }
    }

    /// The date-time, if this is an `Edm.DateTime`.
    pub fn as_datetime(&self) -> Option<DateTime<Utc>> {
        match self {
            EdmValue::DateTime(v) => Some(*v),
            _ => None,
        }
    }

    /// The GUID, if this is an `Edm.Guid`.
    pub fn as_guid(&self) -> Option<Uuid> {
        match self {
            EdmValue::Guid(v) => Some(*v),
            _ => None,
        }
    }

    /// The bytes, if this is an `Edm.Binary`.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            EdmValue::Binary(v) => Some(v),
            _ => None,
        }
    }
}

macro_rules! from_impls {
    ($($t:ty => $variant:ident $(via $conv:expr)?),* $(,)?) => {$(
        impl From<$t> for EdmValue {
            fn from(v: $t) -> Self {
                EdmValue::$variant($( $conv )?(v))
            }
        }
    )*};
}

from_impls! {
    String => String,
    &str => String via str::to_owned,
    &String => String via String::clone,
    i32 => Int32,
    i16 => Int32 via i32::from,
    u16 => Int32 via i32::from,
    i8 => Int32 via i32::from,
    u8 => Int32 via i32::from,
    i64 => Int64,
    u32 => Int64 via i64::from,
    f64 => Double,
    f32 => Double via f64::from,
    bool => Boolean,
    DateTime<Utc> => DateTime,
    Uuid => Guid,
    Vec<u8> => Binary,
    &[u8] => Binary via <[u8]>::to_vec,
}

/// The earliest `Edm.DateTime`: 1601-01-01T00:00:00Z.
pub fn min_datetime() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(1601, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| d.and_utc())
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The latest `Edm.DateTime`: 9999-12-31T23:59:59.9999999Z.
pub fn max_datetime() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(9999, 12, 31)
        .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 999_999_900))
        .map(|d| d.and_utc())
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Checks that `dt` is within the `Edm.DateTime` range (1601–9999).
///
/// # Errors
/// [`Error::Encode`] naming `property`.
pub fn check_datetime(property: &str, dt: &DateTime<Utc>) -> Result<()> {
    if (1601..=9999).contains(&dt.year()) {
        Ok(())
    } else {
        Err(Error::encode(
            property,
            format!("{dt} is outside the Edm.DateTime range 1601-01-01..9999-12-31"),
        ))
    }
}

/// Formats an `Edm.DateTime` the way .NET's round-trip format does:
/// `2026-11-22T10:00:00.1234567Z` (always seven fractional digits; sub-100 ns precision is
/// truncated, as .NET ticks are 100 ns).
pub fn format_datetime(dt: &DateTime<Utc>) -> String {
    let mut out = String::with_capacity(28);
    write_datetime(&mut out, dt);
    out
}

/// Appends [`format_datetime`]'s text to `out` without an intermediate allocation.
pub fn write_datetime(out: &mut String, dt: &DateTime<Utc>) {
    use std::fmt::Write as _;
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:07}Z",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        // Leap-second nanos (>= 1e9) are clamped into the last tick of the second.
        (dt.nanosecond().min(999_999_999)) / 100
    );
}

/// Parses an `Edm.DateTime` as the service and other SDKs write it (RFC 3339, any number of
/// fractional digits, `Z` or an offset).
pub fn parse_datetime(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|d| d.with_timezone(&Utc))
        .or_else(|| {
            // Some writers omit the zone designator; the service's values are UTC.
            chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                .ok()
                .map(|d| d.and_utc())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_format_with_seven_digits_and_parse_back() {
        let dt = parse_datetime("2026-11-22T10:00:00.1234567Z").unwrap();
        assert_eq!(format_datetime(&dt), "2026-11-22T10:00:00.1234567Z");
        let dt = parse_datetime("2026-11-22T10:00:00Z").unwrap();
        assert_eq!(format_datetime(&dt), "2026-11-22T10:00:00.0000000Z");
        let dt = parse_datetime("2026-11-22T11:00:00+01:00").unwrap();
        assert_eq!(format_datetime(&dt), "2026-11-22T10:00:00.0000000Z");
        assert_eq!(
            format_datetime(&min_datetime()),
            "1601-01-01T00:00:00.0000000Z"
        );
        assert_eq!(
            format_datetime(&max_datetime()),
            "9999-12-31T23:59:59.9999999Z"
        );
    }

    #[test]
    fn the_datetime_range_is_checked() {
        assert!(check_datetime("d", &min_datetime()).is_ok());
        assert!(check_datetime("d", &max_datetime()).is_ok());
        let too_early = min_datetime() - chrono::Duration::nanoseconds(100);
        assert!(check_datetime("d", &too_early).is_err());
    }

    #[test]
    fn type_names_round_trip() {
        for t in [
            EdmType::String,
            EdmType::Int32,
            EdmType::Int64,
            EdmType::Double,
            EdmType::Boolean,
            EdmType::DateTime,
            EdmType::Guid,
            EdmType::Binary,
        ] {
            assert_eq!(EdmType::parse(t.as_str()), Some(t));
        }
        assert_eq!(EdmType::parse("Edm.Decimal"), None);
    }
}
