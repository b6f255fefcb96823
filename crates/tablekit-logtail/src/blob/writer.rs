//! [`BlobLogWriter`]: buffers records and writes them as numbered files per hour.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tablekit_azure::{BlobCondition, Container, UploadOptions};
use tablekit_core::{Error, ErrorKind, Result};
use tokio::sync::Mutex;
use tracing::Instrument as _;

use super::line::{LogRecord, encode_line, format_time};
use super::naming::{
    MAX_SEQUENCE, blob_name, hour_prefix, hour_start, sequence_exhausted, sequence_of,
    validate_prefix,
};

/// When a [`BlobLogWriter`] writes its buffer out: [`FlushPolicy::default`] and the `with_*`
/// setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlushPolicy {
    /// Write the buffer before it would grow beyond this many bytes (default 4 MiB). A
    /// single larger record is written alone.
    pub max_bytes: usize,
    /// Write the buffer once its oldest record has waited this long (default 60 s), on the
    /// next [`BlobLogWriter::append`] or [`BlobLogWriter::flush_if_due`].
    pub max_age: Duration,
}

impl Default for FlushPolicy {
    fn default() -> Self {
        Self {
            max_bytes: 4 << 20,
            max_age: Duration::from_secs(60),
        }
    }
}

impl FlushPolicy {
    /// Sets the buffer size, in bytes, that a flush keeps it under.
    #[must_use]
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Sets how long the oldest buffered record may wait before a flush.
    #[must_use]
    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }
}

/// A file a flush wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Flushed {
    /// The blob's name, e.g. `queue/2014/07/31/1800/000001.log`.
    pub name: String,
    /// Records in it.
    pub entries: usize,
    /// Its size in bytes.
    pub bytes: usize,
    /// The earliest record's time (metadata `first`).
    pub first: DateTime<Utc>,
    /// The latest record's time (metadata `last`).
    pub last: DateTime<Utc>,
}

#[derive(Default)]
struct Buffer {
    hour: Option<DateTime<Utc>>,
    text: String,
    entries: usize,
    first: Option<DateTime<Utc>>,
    last: Option<DateTime<Utc>>,
    opened: Option<Instant>,
    /// The next free sequence number of an hour, once known.
    next_seq: Option<(DateTime<Utc>, u32)>,
    /// The sequence number of the file an upload of exactly this buffer may have created: set
    /// before each upload and cleared once the records are known to be in a file, so after a
    /// failed (or abandoned) upload the next write sends the same records under the same name
    /// and, finding the name taken, checks whether that file is this one.
    unsettled: Option<u32>,
}

impl Buffer {
    fn clear(&mut self) {
        self.hour = None;
        self.text.clear();
        self.entries = 0;
        self.first = None;
        self.last = None;
        self.opened = None;
        self.unsettled = None;
    }
}

/// The log-data anti-pattern's fix: log records go to blobs named like
/// Azure Storage Analytics logs, `{prefix}/{yyyy}/{MM}/{dd}/{HHmm}/{seq:06}.log`, buffered in
/// memory and written a file at a time, with the first and last record times in each file's
/// metadata so readers can skip files outside a time window.
///
/// A file holds records of one hour (by record time); files of an hour are numbered from
/// `000001`. Each flush writes a new file with a create-only condition, so a restarted writer
/// — or another writer sharing the prefix — never overwrites one: on a name conflict it moves
/// to the next number.
///
/// Every flushed record is in exactly one file. A flush whose upload fails keeps its records
/// buffered, unchanged, until a later write settles them: that write sends the same file under
/// the same name again, so if the failed upload was applied after all (its response lost, or
/// held in the network past the client's timeout), the file it created is found — the same
/// bytes and metadata — and counted as written, never written a second time under another
/// name. Until then, [`BlobLogWriter::append`] writes them before buffering anything new.
///
/// Buffered records are lost if the process dies before a flush: that is the price of
/// fewer, larger writes (§5.13 weighs reliability against cost). Call
/// [`BlobLogWriter::flush`] before shutting down. (A file whose upload was under way when the
/// process died may still appear, once: its records are then in exactly one file.)
///
/// Appends and flushes are serialized by an internal lock, held during the upload.
pub struct BlobLogWriter {
    container: Container,
    prefix: String,
    policy: FlushPolicy,
    buffer: Mutex<Buffer>,
}

impl fmt::Debug for BlobLogWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobLogWriter")
            .field("container", &self.container.name())
            .field("prefix", &self.prefix)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl BlobLogWriter {
    /// A writer of files under `prefix` (e.g. `queue`, or `logs/web-01`) in `container`
    /// (which must exist). No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] or [`Error::InvalidName`] for an empty prefix, one starting
    /// or ending with `/`, or one that makes invalid blob names; [`Error::InvalidArgument`]
    /// for a zero `max_bytes`.
    ///
    /// # Examples
    /// ```no_run
    /// use chrono::Utc;
    /// use tablekit_azure::Account;
    /// use tablekit_logtail::{BlobLogWriter, FlushPolicy, Level, LogRecord};
    ///
    /// # async fn run() -> tablekit_core::Result<()> {
    /// let logs = Account::emulator().container("analytics-logs")?;
    /// let writer = BlobLogWriter::new(logs, "web-01", FlushPolicy::default())?;
    /// // Buffered in memory: no request until the policy says a file is due.
    /// writer.append(&LogRecord::new(Utc::now(), Level::Information, "started")).await?;
    /// writer.flush().await?; // 1 request: the file with the buffered records
    /// # Ok(()) }
    /// ```
    pub fn new(container: Container, prefix: &str, policy: FlushPolicy) -> Result<Self> {
        validate_prefix(prefix)?;
        if policy.max_bytes == 0 {
            return Err(Error::invalid_argument("max_bytes", "must be at least 1"));
        }
        Ok(Self {
            container,
            prefix: prefix.to_owned(),
            policy,
            buffer: Mutex::new(Buffer::default()),
        })
    }

    /// The container.
    pub fn container(&self) -> &Container {
        &self.container
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Buffers a record. First, if the buffer holds records of another hour, would grow past
    /// `max_bytes`, has waited `max_age`, or holds the records of a failed flush, it is
    /// written out; that file is returned.
    ///
    /// Requests: 0 when the record is only buffered; a flush's requests otherwise (see
    /// [`BlobLogWriter::flush`]). Consistency: a buffered record is in memory only; it is
    /// durable and readable once a flush has written it.
    ///
    /// # Errors
    /// Before any request: a time outside the years 1–9999. A failed flush's error; then the
    /// record was **not** buffered and the earlier records are still buffered, unchanged
    /// (append again to retry: that writes them first, as the same file).
    pub async fn append(&self, record: &LogRecord) -> Result<Option<Flushed>> {
        let hour = hour_start(record.time)?;
        let mut line = String::with_capacity(record.message.len() + 48);
        encode_line(record, &mut line);
        let mut buffer = self.buffer.lock().await;
        // The records of a failed upload are written before the buffer changes: a file that
        // upload created must hold exactly what is sent again.
        let must_flush = buffer.entries > 0
            && (buffer.hour != Some(hour)
                || buffer.text.len() + line.len() > self.policy.max_bytes
                || self.is_due(&buffer)
                || buffer.unsettled.is_some());
        let flushed = if must_flush {
            self.write(&mut buffer).await?
        } else {
            None
        };
        if buffer.entries == 0 {
            buffer.hour = Some(hour);
            buffer.opened = Some(Instant::now());
        }
        buffer.text.push_str(&line);
        buffer.entries += 1;
        buffer.first = Some(buffer.first.map_or(record.time, |f| f.min(record.time)));
        buffer.last = Some(buffer.last.map_or(record.time, |l| l.max(record.time)));
        Ok(flushed)
    }

    /// Writes the buffered records, if any, as the hour's next file.
    ///
    /// Requests: 0 with an empty buffer. Otherwise 1 upload, plus 1 listing of the hour's
    /// files the first time this writer writes to an hour (to continue after the files that
    /// already exist), plus 1 upload per name found taken meanwhile by another writer. After
    /// a failed flush, the records go again under the name that flush used; if that name is
    /// taken, +1 download to tell the failed upload's own file (then written: nothing more is
    /// sent) from another writer's.
    /// Consistency: the file is written with one create-only upload, so it is complete or
    /// absent, and readable when this returns; no existing file is ever overwritten, and no
    /// record is written to two files.
    ///
    /// # Errors
    /// Transport and service errors ([`Error::NotFound`] for a missing container); the
    /// records stay buffered, unchanged, and the next flush (or [`BlobLogWriter::append`],
    /// or a due [`BlobLogWriter::flush_if_due`]) sends them again as the same file: a file
    /// the failed upload created anyway is found, not written twice. Flush again to retry.
    /// [`Error::LimitExceeded`] when an hour already has 999,999 files.
    pub async fn flush(&self) -> Result<Option<Flushed>> {
        let mut buffer = self.buffer.lock().await;
        self.write(&mut buffer).await
    }

    /// Flushes if the oldest buffered record has waited `max_age`, or a flush of the buffered
    /// records failed: call it from a timer (e.g. `tokio::time::interval`) so a quiet writer
    /// still writes its records out.
    ///
    /// Requests: as [`BlobLogWriter::flush`] when due, else 0.
    ///
    /// # Errors
    /// As [`BlobLogWriter::flush`].
    pub async fn flush_if_due(&self) -> Result<Option<Flushed>> {
        let mut buffer = self.buffer.lock().await;
        if self.is_due(&buffer) || buffer.unsettled.is_some() {
            self.write(&mut buffer).await
        } else {
            Ok(None)
        }
    }

    fn is_due(&self, buffer: &Buffer) -> bool {
        buffer
            .opened
            .is_some_and(|opened| opened.elapsed() >= self.policy.max_age)
    }

    async fn write(&self, buffer: &mut Buffer) -> Result<Option<Flushed>> {
        let span = tracing::debug_span!("tablekit.bloblog.flush", container = %self.container.name(), prefix = %self.prefix, entries = buffer.entries);
        self.write_file(buffer).instrument(span).await
    }

    async fn write_file(&self, buffer: &mut Buffer) -> Result<Option<Flushed>> {
        let (Some(hour), Some(first), Some(last)) = (buffer.hour, buffer.first, buffer.last) else {
            return Ok(None);
        };
        let dir = hour_prefix(&self.prefix, hour);
        // The name an earlier upload of these very records may have taken.
        let resent = buffer.unsettled;
        let mut seq = match (resent, buffer.next_seq) {
            (Some(seq), _) => seq,
            (None, Some((h, seq))) if h == hour => seq,
            _ => self.next_free(&dir).await?,
        };
        let metadata = BTreeMap::from([
            ("first".to_owned(), format_time(first)),
            ("last".to_owned(), format_time(last)),
            ("entries".to_owned(), buffer.entries.to_string()),
        ]);
        let data = buffer.text.clone().into_bytes();
        loop {
            if seq > MAX_SEQUENCE {
                return Err(sequence_exhausted(&dir));
            }
            let name = blob_name(&self.prefix, hour, seq);
            let options = UploadOptions::default()
                .with_content_type("text/plain; charset=utf-8")
                .with_metadata(metadata.clone())
                .with_condition(BlobCondition::IfNotExists);
            // Marked before sending, so that an upload that fails — or whose future is
            // dropped — leaves the name to check.
            buffer.unsettled = Some(seq);
            let written = match self.container.upload(&name, data.clone(), options).await {
                Ok(_) => true,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::AlreadyExists | ErrorKind::PreconditionFailed
                    ) =>
                {
                    // A failed earlier write of these records may have created this file: it
                    // is ours if it holds exactly these bytes and metadata. Another writer's
                    // file means ours never landed there, and never will (create-only).
                    resent == Some(seq) && self.is_own(&name, &data, &metadata).await?
                }
                Err(e) => return Err(e),
            };
            if written {
                let flushed = Flushed {
                    name,
                    entries: buffer.entries,
                    bytes: data.len(),
                    first,
                    last,
                };
                buffer.next_seq = Some((hour, seq + 1));
                buffer.clear();
                return Ok(Some(flushed));
            }
            tracing::debug!(target: "tablekit", blob = %name, "log file name taken; trying the next");
            buffer.unsettled = None;
            seq += 1;
        }
    }

    /// Whether the file `name` holds exactly `data` with `metadata`: a file an earlier upload
    /// of the same records created.
    async fn is_own(
        &self,
        name: &str,
        data: &[u8],
        metadata: &BTreeMap<String, String>,
    ) -> Result<bool> {
        Ok(self
            .container
            .download(name)
            .await?
            .is_some_and(|blob| blob.data == data && blob.info.metadata == *metadata))
    }

    /// One more than the highest sequence number listed under `dir` (1 when there is none).
    async fn next_free(&self, dir: &str) -> Result<u32> {
        let listed = self.container.list(&format!("{dir}/")).await?;
        Ok(listed
            .iter()
            .filter_map(|b| sequence_of(dir, &b.name))
            .max()
            .map_or(1, |s| s.saturating_add(1)))
    }
}
