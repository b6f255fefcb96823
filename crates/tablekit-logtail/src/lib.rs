#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod blob;
mod entry;
mod id;
pub mod key;
mod query;
pub mod spread;
mod tail;

pub use blob::line::{Level, LogRecord};
pub use blob::reader::BlobLogReader;
pub use blob::writer::{BlobLogWriter, FlushPolicy, Flushed};
pub use entry::{AppendOutcome, AppendReport, Appended, LogEntry};
pub use id::AppendId;
pub use query::LogQuery;
pub use spread::log::SpreadLog;
pub use spread::query::{SpreadQuery, SpreadToken};
pub use tail::LogTail;

#[cfg(test)]
mod send_tests {
    //! Every operation's future is `Send`, so it can be spawned on a multi-threaded runtime.

    use chrono::Utc;
    use tablekit_core::Properties;

    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn futures_are_send() {
        let account = tablekit_azure::Account::emulator();
        let table = account.table("SendCheck").unwrap();
        let container = account.container("send-check").unwrap();
        let tail = LogTail::<Properties>::new(table.clone());
        let spread = SpreadLog::<Properties>::new(table, "b", 4).unwrap();
        let writer = BlobLogWriter::new(container.clone(), "q", FlushPolicy::default()).unwrap();
        let reader = BlobLogReader::new(container, "q").unwrap();
        let value = Properties::new();
        let record = LogRecord::new(Utc::now(), Level::Error, "m");
        let now = Utc::now();
        assert_send(&tail.append("p", &value));
        assert_send(&tail.append_batch("p", &[]));
        assert_send(&tail.latest("p", 1));
        assert_send(&spread.append("v", &value));
        assert_send(&spread.append_batch::<&str>(&[]));
        assert_send(&spread.latest(1));
        assert_send(&writer.append(&record));
        assert_send(&writer.flush());
        assert_send(&writer.flush_if_due());
        assert_send(&reader.entries(now, now));
        assert_send(&reader.files(now, now));
    }
}
