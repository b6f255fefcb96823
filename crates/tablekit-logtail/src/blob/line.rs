//! Log records and their line format.
//!
//! One record per line, fields separated by `;`:
//!
//! ```text
//! 1.0;2014-07-31T18:04:05.123456789Z;error;disk full\nretrying in 5 s
//! ```
//!
//! 1. the format version, `1.0`;
//! 2. the time, RFC 3339 in UTC with exactly nine fractional digits (fixed width, so lines
//!    of one file also sort as text);
//! 3. the level: `verbose`, `information`, `warning`, `error` or `critical`;
//! 4. the message, to the end of the line, with `\` written as `\\`, a line feed as `\n` and
//!    a carriage return as `\r`. A `;` needs no escape: the message is the last field.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use tablekit_core::{Error, ResourceKind, Result, Target};

/// The version written as the first field of every line.
pub const FORMAT_VERSION: &str = "1.0";

/// How severe a record is, from least to most (`Ord` follows severity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Level {
    /// Diagnostic detail.
    Verbose,
    /// Normal operation.
    Information,
    /// Something unexpected that was handled.
    Warning,
    /// An operation failed.
    Error,
    /// The application cannot continue as intended.
    Critical,
}

impl Level {
    /// The level as written in a line.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Verbose => "verbose",
            Level::Information => "information",
            Level::Warning => "warning",
            Level::Error => "error",
            Level::Critical => "critical",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Level {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        [
            Level::Verbose,
            Level::Information,
            Level::Warning,
            Level::Error,
            Level::Critical,
        ]
        .into_iter()
        .find(|l| l.as_str() == s)
        .ok_or_else(|| Error::decode(Target::default(), "level", format!("unknown level {s:?}")))
    }
}

/// One log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// When it happened (kept to the nanosecond).
    pub time: DateTime<Utc>,
    /// How severe it is.
    pub level: Level,
    /// The message; any text, line breaks included.
    pub message: String,
}

impl LogRecord {
    /// A record.
    pub fn new(time: DateTime<Utc>, level: Level, message: impl Into<String>) -> Self {
        Self {
            time,
            level,
            message: message.into(),
        }
    }
}

/// The fixed-width RFC 3339 form used in lines and in blob metadata.
pub(crate) fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

pub(crate) fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.to_utc())
}

/// Appends the record's line, newline included, to `out`.
pub(crate) fn encode_line(record: &LogRecord, out: &mut String) {
    out.push_str(FORMAT_VERSION);
    out.push(';');
    out.push_str(&format_time(record.time));
    out.push(';');
    out.push_str(record.level.as_str());
    out.push(';');
    for c in record.message.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('\n');
}

/// Parses one line (without its newline).
pub(crate) fn decode_line(line: &str) -> std::result::Result<LogRecord, String> {
    let mut fields = line.splitn(4, ';');
    let (Some(version), Some(time), Some(level), Some(message)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err("expected 4 fields separated by `;`".into());
    };
    if version != FORMAT_VERSION {
        return Err(format!("unsupported format version {version:?}"));
    }
    let time = parse_time(time).ok_or_else(|| format!("bad time {time:?}"))?;
    let level = level.parse::<Level>().map_err(|e| e.to_string())?;
    let mut text = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            text.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => text.push('\\'),
            Some('n') => text.push('\n'),
            Some('r') => text.push('\r'),
            other => return Err(format!("bad escape \\{}", other.unwrap_or(' '))),
        }
    }
    Ok(LogRecord {
        time,
        level,
        message: text,
    })
}

/// The target of a decode error in the log file `blob`.
fn file(blob: &str) -> Target {
    Target::resource(ResourceKind::Blob, blob)
}

/// Every record of a log file.
pub(crate) fn decode_file(blob: &str, data: &[u8]) -> Result<Vec<LogRecord>> {
    let text = std::str::from_utf8(data)
        .map_err(|_| Error::decode(file(blob), "", "a log file must be UTF-8"))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(i, l)| {
            decode_line(l).map_err(|reason| {
                Error::decode(file(blob), "", format!("line {}: {reason}", i + 1))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(message: &str) -> LogRecord {
        let t = DateTime::parse_from_rfc3339("2014-07-31T18:04:05.1234567Z")
            .unwrap()
            .to_utc();
        LogRecord::new(t, Level::Error, message)
    }

    #[test]
    fn lines_have_the_documented_shape() {
        let mut out = String::new();
        encode_line(&record("disk full\nretry; later \\ now\r"), &mut out);
        assert_eq!(
            out,
            "1.0;2014-07-31T18:04:05.123456700Z;error;disk full\\nretry; later \\\\ now\\r\n"
        );
    }

    #[test]
    fn every_message_round_trips() {
        for message in [
            "",
            "plain",
            "a;b;c",
            "\\n is not a newline",
            "\n\r\\",
            "東京 😀",
        ] {
            let mut out = String::new();
            encode_line(&record(message), &mut out);
            assert_eq!(out.matches('\n').count(), 1, "{message:?}");
            let back = decode_file("f", out.as_bytes()).unwrap();
            assert_eq!(back, vec![record(message)], "{message:?}");
        }
    }

    #[test]
    fn bad_lines_are_reported_with_their_number() {
        let bad = "1.0;2014-07-31T18:04:05.123456700Z;error;ok\n2.0;x;y;z\n";
        let err = decode_file("q/1.log", bad.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        for line in [
            "1.0;nope;error;m",
            "1.0;2014-07-31T18:04:05Z;loud;m",
            "1.0;a",
            "1.0;2014-07-31T18:04:05Z;error;\\x",
        ] {
            assert!(decode_line(line).is_err(), "{line}");
        }
        assert!(Level::Critical > Level::Error && Level::Error > Level::Warning);
    }
}
