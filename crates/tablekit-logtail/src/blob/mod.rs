//! Log data in blobs, the log-data anti-pattern's fix (checklist item 28):
//! a buffered writer of Storage Analytics-style files ([`BlobLogWriter`](crate::BlobLogWriter))
//! and a time-window reader ([`BlobLogReader`](crate::BlobLogReader)), both at the crate root.
//!
//! This module is the home of the file layout they share — the line format's version and
//! the blob names — for readers of the files written by other tools.

pub(crate) mod line;
mod naming;
pub(crate) mod reader;
pub(crate) mod writer;

pub use line::FORMAT_VERSION;
pub use naming::{MAX_SEQUENCE, blob_name, hour_prefix, hour_start};
