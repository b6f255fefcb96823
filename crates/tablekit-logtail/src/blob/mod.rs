//! Log data in blobs, the log-data anti-pattern's fix (checklist item 28):
//! a buffered writer of Storage Analytics-style files and a time-window reader.

mod line;
mod naming;
mod reader;
mod writer;

pub use line::{FORMAT_VERSION, Level, LogRecord};
pub use naming::{MAX_SEQUENCE, blob_name, hour_prefix, hour_start};
pub use reader::BlobLogReader;
pub use writer::{BlobLogWriter, FlushPolicy, Flushed};
