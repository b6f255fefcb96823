#![doc = include_str!("../README.md")]

pub mod blob;
mod entry;
pub mod key;
pub mod spread;
mod tail;

pub use blob::{BlobLogReader, BlobLogWriter, FlushPolicy, Flushed, Level, LogRecord};
pub use entry::{AppendReport, Appended, LogEntry};
pub use spread::SpreadLog;
pub use tail::LogTail;
