//! The blob log writer and reader against Azurite: Storage Analytics naming,
//! metadata, flush by size and time, no overwrite after a restart, window reads across files.

mod common;

use std::time::Duration;

use tablekit_azure::{BlobCondition, RequestKind, RetryPolicy, Settings, UploadOptions};
use tablekit_core::ErrorKind;
use tablekit_logtail::{BlobLogReader, BlobLogWriter, FlushPolicy, Level, LogRecord};
use tablekit_testkit::fixtures::proxied;
use tablekit_testkit::{Fault, Matcher, Occurrences, Rule};

fn record(time: &str, level: Level, message: &str) -> LogRecord {
    LogRecord::new(common::at(time), level, message)
}

fn never() -> FlushPolicy {
    FlushPolicy::default()
        .with_max_bytes(1 << 20)
        .with_max_age(Duration::from_secs(3_600))
}

#[tokio::test]
async fn an_hour_prefix_lists_its_files_and_no_other_hour() {
    let container = common::container("queuelogs").await;
    let metrics = container.account().metrics().clone();
    let writer = BlobLogWriter::new(container.clone(), "queue", never()).unwrap();
    metrics.reset();
    let buffered = writer
        .append(&record("2014-07-31T18:04:05.5Z", Level::Error, "a"))
        .await
        .unwrap();
    assert!(buffered.is_none());
    common::assert_requests(&metrics.snapshot(), None, 0); // appending only buffers
    writer
        .append(&record("2014-07-31T18:59:00Z", Level::Information, "b"))
        .await
        .unwrap();
    // A record of the next hour writes the previous hour's file first.
    metrics.reset();
    let flushed = writer
        .append(&record("2014-07-31T19:10:00Z", Level::Warning, "c"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(flushed.name, "queue/2014/07/31/1800/000001.log");
    assert_eq!(flushed.entries, 2);
    let spent = metrics.snapshot();
    common::assert_requests(&spent, Some(RequestKind::BlobList), 1); // first file of the hour
    common::assert_requests(&spent, Some(RequestKind::BlobPut), 1);
    common::assert_requests(&spent, None, 2);
    let last = writer.flush().await.unwrap().unwrap();
    assert_eq!(last.name, "queue/2014/07/31/1900/000001.log");
    assert!(writer.flush().await.unwrap().is_none());

    let listed = container.list("queue/2014/07/31/1800").await.unwrap();
    let names: Vec<_> = listed.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["queue/2014/07/31/1800/000001.log"]);
    assert_eq!(
        listed[0].metadata["first"],
        "2014-07-31T18:04:05.500000000Z"
    );
    assert_eq!(listed[0].metadata["last"], "2014-07-31T18:59:00.000000000Z");
    assert_eq!(listed[0].metadata["entries"], "2");
    container.delete_container().await.unwrap();
}

#[tokio::test]
async fn a_window_spanning_two_files_returns_exactly_its_records_in_order() {
    let container = common::container("winlogs").await;
    let metrics = container.account().metrics().clone();
    let writer = BlobLogWriter::new(container.clone(), "app", never()).unwrap();
    let times = [
        "2014-07-31T14:58:00Z",
        "2014-07-31T14:59:30Z",
        "2014-07-31T15:03:59.999Z",
        "2014-07-31T15:04:00Z",
        "2014-07-31T15:05:00Z",
        "2014-07-31T15:05:59.999999999Z",
        "2014-07-31T15:06:00Z",
    ];
    for (i, t) in times.iter().enumerate() {
        let level = if i % 2 == 0 {
            Level::Error
        } else {
            Level::Critical
        };
        writer
            .append(&record(t, level, &format!("line {i}\nsecond; part")))
            .await
            .unwrap();
        if i == 4 {
            // 15:00–15:05 and 15:05–15:06 end up in two files of the same hour.
            writer.flush().await.unwrap();
        }
    }
    writer.flush().await.unwrap();
    // A file of the same hour entirely after the window: listed, but never downloaded.
    writer
        .append(&record("2014-07-31T15:40:00Z", Level::Error, "late"))
        .await
        .unwrap();
    writer.flush().await.unwrap();
    let names: Vec<_> = container
        .list("app/2014/07/31")
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(
        names,
        [
            "app/2014/07/31/1400/000001.log",
            "app/2014/07/31/1500/000001.log",
            "app/2014/07/31/1500/000002.log",
            "app/2014/07/31/1500/000003.log",
        ]
    );

    let reader = BlobLogReader::new(container.clone(), "app").unwrap();
    metrics.reset();
    let files = reader
        .files(
            common::at("2014-07-31T14:30:00Z"),
            common::at("2014-07-31T15:06:00Z"),
        )
        .await
        .unwrap();
    common::assert_requests(&metrics.snapshot(), None, 2); // one listing per hour touched
    assert_eq!(
        files.len(),
        3,
        "the 15:40 file is ruled out by its metadata"
    );
    metrics.reset();
    let read = reader
        .entries(
            common::at("2014-07-31T15:04:00Z"),
            common::at("2014-07-31T15:06:00Z"),
        )
        .await
        .unwrap();
    let spent = metrics.snapshot();
    common::assert_requests(&spent, Some(RequestKind::BlobList), 1); // one hour touched
    common::assert_requests(&spent, Some(RequestKind::BlobGet), 2); // two files overlap
    let got: Vec<_> = read.iter().map(|r| r.time).collect();
    assert_eq!(
        got,
        times[3..6]
            .iter()
            .map(|t| common::at(t))
            .collect::<Vec<_>>()
    );
    assert_eq!(read[0].message, "line 3\nsecond; part");
    assert_eq!(read[1].level, Level::Error);

    // A window across the hour boundary reads both hours, in time order.
    let across = reader
        .entries(
            common::at("2014-07-31T14:59:00Z"),
            common::at("2014-07-31T15:04:00Z"),
        )
        .await
        .unwrap();
    let got: Vec<_> = across
        .iter()
        .map(|r| r.message.lines().next().unwrap().to_owned())
        .collect();
    assert_eq!(got, ["line 1", "line 2"]);
    let errors: Vec<_> = reader
        .entries(
            common::at("2014-07-31T14:00:00Z"),
            common::at("2014-07-31T16:00:00Z"),
        )
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.level >= Level::Error)
        .collect();
    assert_eq!(errors.len(), times.len() + 1);
    assert!(
        reader
            .entries(
                common::at("2014-07-31T15:00:00Z"),
                common::at("2014-07-31T15:00:00Z")
            )
            .await
            .unwrap()
            .is_empty()
    );
    container.delete_container().await.unwrap();
}

#[tokio::test]
async fn a_restarted_writer_never_overwrites_a_file() {
    let container = common::container("restart").await;
    let metrics = container.account().metrics().clone();
    let hour = "2014-07-31T18:10:00Z";
    let first = BlobLogWriter::new(container.clone(), "queue", never()).unwrap();
    first
        .append(&record(hour, Level::Error, "one"))
        .await
        .unwrap();
    first.flush().await.unwrap();
    metrics.reset();
    first
        .append(&record(hour, Level::Error, "two"))
        .await
        .unwrap();
    let second_file = first.flush().await.unwrap().unwrap();
    assert_eq!(second_file.name, "queue/2014/07/31/1800/000002.log");
    common::assert_requests(&metrics.snapshot(), None, 1); // the next number is known: one upload

    // A new writer (a restart) continues after the existing files.
    let restarted = BlobLogWriter::new(container.clone(), "queue", never()).unwrap();
    restarted
        .append(&record(hour, Level::Error, "three"))
        .await
        .unwrap();
    assert_eq!(
        restarted.flush().await.unwrap().unwrap().name,
        "queue/2014/07/31/1800/000003.log"
    );
    // Another writer takes the next name meanwhile: the conflict moves this one on.
    container
        .upload(
            "queue/2014/07/31/1800/000004.log",
            "1.0;2014-07-31T18:11:00.000000000Z;error;other writer\n",
            UploadOptions::default().with_condition(BlobCondition::IfNotExists),
        )
        .await
        .unwrap();
    metrics.reset();
    restarted
        .append(&record(hour, Level::Error, "four"))
        .await
        .unwrap();
    assert_eq!(
        restarted.flush().await.unwrap().unwrap().name,
        "queue/2014/07/31/1800/000005.log"
    );
    common::assert_requests(&metrics.snapshot(), Some(RequestKind::BlobPut), 2);

    let reader = BlobLogReader::new(container.clone(), "queue").unwrap();
    let all = reader
        .entries(
            common::at("2014-07-31T18:00:00Z"),
            common::at("2014-07-31T19:00:00Z"),
        )
        .await
        .unwrap();
    let messages: Vec<_> = all.iter().map(|r| r.message.as_str()).collect();
    assert_eq!(messages, ["one", "two", "three", "four", "other writer"]);
    container.delete_container().await.unwrap();
}

#[tokio::test]
async fn a_failed_flush_is_settled_as_the_same_file_and_never_written_twice() {
    // No retries: each upload is one attempt, and its fault is the flush's outcome.
    let p = proxied(Settings::default().with_retry(RetryPolicy::none()));
    let container = common::container_on(&p.account, "settleflush").await;
    let metrics = container.account().metrics().clone();
    let writer = BlobLogWriter::new(container.clone(), "queue", never()).unwrap();
    let hour = "2014-07-31T18:10:00Z";
    let put = |fault| {
        Rule::new(
            Matcher::any().with_method("PUT"),
            Occurrences::Nth(1),
            fault,
        )
    };
    writer
        .append(&record(hour, Level::Error, "one"))
        .await
        .unwrap();
    // The upload is applied and its response lost: the flush fails, yet file 1 exists.
    p.blob.add_rule(put(Fault::DropResponse));
    assert_eq!(
        writer.flush().await.unwrap_err().kind(),
        ErrorKind::Transport
    );
    p.blob.clear();
    // The next append first sends the same records under the same name: the name is taken
    // by that very file (one download tells), so it is counted written, not written again.
    metrics.reset();
    let settled = writer
        .append(&record(hour, Level::Error, "two"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (settled.name.as_str(), settled.entries),
        ("queue/2014/07/31/1800/000001.log", 1)
    );
    let spent = metrics.snapshot();
    common::assert_requests(&spent, Some(RequestKind::BlobPut), 1);
    common::assert_requests(&spent, Some(RequestKind::BlobGet), 1);
    common::assert_requests(&spent, None, 2);

    // An upload that never reached the service, and another writer takes its name: the
    // download shows another writer's file, and the records go to the next name.
    p.blob.add_rule(put(Fault::Reset));
    assert!(writer.flush().await.is_err());
    p.blob.clear();
    container
        .upload(
            "queue/2014/07/31/1800/000002.log",
            "1.0;2014-07-31T18:11:00.000000000Z;error;other writer\n",
            UploadOptions::default().with_condition(BlobCondition::IfNotExists),
        )
        .await
        .unwrap();
    assert_eq!(
        writer.flush_if_due().await.unwrap().unwrap().name,
        "queue/2014/07/31/1800/000003.log",
        "a failed flush is due at once"
    );

    let reader = BlobLogReader::new(container.clone(), "queue").unwrap();
    let all = reader
        .entries(
            common::at("2014-07-31T18:00:00Z"),
            common::at("2014-07-31T19:00:00Z"),
        )
        .await
        .unwrap();
    let messages: Vec<_> = all.iter().map(|r| r.message.as_str()).collect();
    assert_eq!(messages, ["one", "two", "other writer"]);
    assert_eq!(container.list("queue/").await.unwrap().len(), 3);
    container.delete_container().await.unwrap();
}

#[tokio::test]
async fn buffers_flush_by_size_and_by_time() {
    let container = common::container("flushes").await;
    let metrics = container.account().metrics().clone();
    let line = |i: usize| {
        record(
            "2014-07-31T18:00:00Z",
            Level::Information,
            &format!("{i:040}"),
        )
    };
    // Each line is about 85 bytes: a 200-byte buffer holds two.
    let by_size = BlobLogWriter::new(
        container.clone(),
        "size",
        FlushPolicy::default()
            .with_max_bytes(200)
            .with_max_age(Duration::from_secs(3_600)),
    )
    .unwrap();
    let mut flushed = Vec::new();
    for i in 0..5 {
        flushed.extend(by_size.append(&line(i)).await.unwrap());
    }
    assert_eq!(
        flushed.iter().map(|f| f.entries).collect::<Vec<_>>(),
        [2, 2]
    );
    assert!(flushed.iter().all(|f| f.bytes <= 200));

    let by_time = BlobLogWriter::new(
        container.clone(),
        "time",
        FlushPolicy::default()
            .with_max_bytes(1 << 20)
            .with_max_age(Duration::ZERO),
    )
    .unwrap();
    metrics.reset();
    assert!(by_time.flush_if_due().await.unwrap().is_none());
    common::assert_requests(&metrics.snapshot(), None, 0);
    by_time.append(&line(0)).await.unwrap();
    assert_eq!(by_time.flush_if_due().await.unwrap().unwrap().entries, 1);

    let patient = BlobLogWriter::new(container.clone(), "patient", never()).unwrap();
    patient.append(&line(0)).await.unwrap();
    metrics.reset();
    assert!(patient.flush_if_due().await.unwrap().is_none());
    common::assert_requests(&metrics.snapshot(), None, 0);
    container.delete_container().await.unwrap();
}

#[tokio::test]
async fn bad_input_and_failures_are_typed_and_keep_the_buffer() {
    let container = common::container("badlogs").await;
    for prefix in ["", "/queue", "queue/"] {
        assert_eq!(
            BlobLogWriter::new(container.clone(), prefix, never())
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
    }
    let reader = BlobLogReader::new(container.clone(), "queue").unwrap();
    let now = chrono::Utc::now();
    let err = reader
        .entries(now, now - chrono::Duration::seconds(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);

    // A missing container fails the flush; the records stay buffered for the next attempt.
    let missing = common::account()
        .container(&tablekit_testkit::unique_container_name("missing"))
        .unwrap();
    let writer = BlobLogWriter::new(missing.clone(), "queue", never()).unwrap();
    writer
        .append(&record("2014-07-31T18:00:00Z", Level::Error, "kept"))
        .await
        .unwrap();
    assert_eq!(
        writer.flush().await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    missing.create().await.unwrap();
    assert_eq!(writer.flush().await.unwrap().unwrap().entries, 1);
    missing.delete_container().await.unwrap();

    // A file that is not in the line format is reported with its name and line.
    container
        .upload(
            "queue/2014/07/31/1800/000001.log",
            "garbage\n",
            UploadOptions::default(),
        )
        .await
        .unwrap();
    let err = reader
        .entries(
            common::at("2014-07-31T18:00:00Z"),
            common::at("2014-07-31T19:00:00Z"),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("000001.log") && err.to_string().contains("line 1"),
        "{err}"
    );
    container.delete_container().await.unwrap();
}
