//! [`BlobLogReader`]: the records of a time window, from the files a [`crate::BlobLogWriter`]
//! wrote.

use chrono::{DateTime, Utc};
use futures::{StreamExt as _, TryStreamExt as _};
use tablekit_azure::{BlobInfo, Container};
use tablekit_core::{Error, Result};

use super::line::{LogRecord, decode_file, parse_time};
use super::naming::{hour_prefix, hours_touched, validate_prefix};

/// Reads the files under a prefix: lists the hours a window touches by prefix, skips files
/// whose `first`/`last` metadata lie outside the window, downloads the rest and returns the
/// window's records in time order.
#[derive(Debug, Clone)]
pub struct BlobLogReader {
    container: Container,
    prefix: String,
}

impl BlobLogReader {
    /// A reader of the files under `prefix` in `container`. No request is sent.
    ///
    /// # Errors
    /// As [`crate::BlobLogWriter::new`] for a bad prefix.
    ///
    /// # Examples
    /// ```no_run
    /// use chrono::{Duration, Utc};
    /// use tablekit_azure::Account;
    /// use tablekit_logtail::BlobLogReader;
    ///
    /// # async fn run() -> tablekit_core::Result<()> {
    /// let logs = Account::emulator().container("analytics-logs")?;
    /// let reader = BlobLogReader::new(logs, "web-01")?;
    /// let now = Utc::now();
    /// // One listing per hour the window touches, one download per file overlapping it.
    /// for record in reader.entries(now - Duration::hours(1), now).await? {
    ///     println!("{} {}", record.time, record.message);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn new(container: Container, prefix: &str) -> Result<Self> {
        validate_prefix(prefix)?;
        Ok(Self {
            container,
            prefix: prefix.to_owned(),
        })
    }

    /// The files that may hold records of `[from, to)`, in name order: every file listed
    /// under the hours the window touches whose metadata range overlaps it (files without
    /// readable `first`/`last` metadata are kept, since they cannot be ruled out).
    ///
    /// Requests: one listing per hour touched (per 5,000 files). Consistency: files written
    /// before the listing are seen.
    ///
    /// # Errors
    /// Before any request: `from > to`, a time outside the years 1–9999. Then
    /// [`Error::NotFound`] for a missing container.
    pub async fn files(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<BlobInfo>> {
        check_window(from, to)?;
        let mut files = Vec::new();
        if from == to {
            return Ok(files);
        }
        for hour in hours_touched(from, to)? {
            let listed = self
                .container
                .list(&format!("{}/", hour_prefix(&self.prefix, hour)))
                .await?;
            files.extend(listed.into_iter().filter(|b| overlaps(b, from, to)));
        }
        Ok(files)
    }

    /// The records whose time is in `[from, to)`, oldest first (records of equal time keep
    /// their file and line order).
    ///
    /// Requests: one listing per hour touched, plus one download per file whose metadata
    /// overlaps the window (downloads run with the account's bounded concurrency). Memory:
    /// the overlapping files' records. Consistency: every file flushed before the listing is
    /// read whole (files are never partly written).
    ///
    /// # Errors
    /// As [`BlobLogReader::files`]; [`Error::Decode`] naming the file and line for a
    /// line that is not in the documented format.
    pub async fn entries(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<LogRecord>> {
        let files = self.files(from, to).await?;
        let concurrency = self.container.account().settings().concurrency;
        let per_file: Vec<Vec<LogRecord>> = futures::stream::iter(files)
            .map(|info| async move {
                match self.container.download(&info.name).await? {
                    // Deleted since it was listed: nothing to read.
                    None => Ok(Vec::new()),
                    Some(blob) => decode_file(&info.name, &blob.data),
                }
            })
            .buffered(concurrency.max(1))
            .try_collect()
            .await?;
        let mut records: Vec<LogRecord> = per_file
            .into_iter()
            .flatten()
            .filter(|r| from <= r.time && r.time < to)
            .collect();
        records.sort_by_key(|r| r.time);
        Ok(records)
    }
}

fn check_window(from: DateTime<Utc>, to: DateTime<Utc>) -> Result<()> {
    if from > to {
        return Err(Error::invalid_argument(
            "window",
            format!("the window starts ({from}) after it ends ({to})"),
        ));
    }
    Ok(())
}

/// Whether a file's `[first, last]` metadata range meets `[from, to)`.
fn overlaps(info: &BlobInfo, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
    let get = |k: &str| info.metadata.get(k).and_then(|v| parse_time(v));
    match (get("first"), get("last")) {
        (Some(first), Some(last)) => first < to && last >= from,
        _ => true,
    }
}
