//! Scenario 8: with tracing at TRACE level (and every `log` record) captured for a whole
//! scenario — key and SAS accounts, successes, failures, retries — the output contains no
//! account key and no SAS signature.

mod common;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use tablekit_azure::{Account, SasProtocol, SendOptions, TablePermissions, TableSas};
use tablekit_core::{Entity, Keys, Properties};
use tablekit_testkit::{Fault, unique_queue_name};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Everything logged, as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<String>>);

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut out = self.0.lock().unwrap();
        let _ = write!(out, "\nspan {}", span.metadata().name());
        span.record(&mut Fields(&mut out));
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        values.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut out = self.0.lock().unwrap();
        let _ = write!(
            out,
            "\n{} {}",
            event.metadata().level(),
            event.metadata().target()
        );
        event.record(&mut Fields(&mut out));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let _ = write!(
            self.0.lock().unwrap(),
            "\nlog {} {}",
            record.target(),
            record.args()
        );
    }
    fn flush(&self) {}
}

#[tokio::test]
async fn trace_output_never_contains_a_key_or_a_signature() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(capture.clone()).unwrap();
    log::set_boxed_logger(Box::new(capture.clone())).unwrap();
    log::set_max_level(log::LevelFilter::Trace);

    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "secrets").await;
    let keys = Keys::new("p", "r").unwrap();
    p.table.fail_nth(1, Fault::Status(503));
    table
        .insert(&Entity::new(keys.clone(), Properties::new().with("V", 1)))
        .await
        .unwrap();
    let _ = table
        .insert(&Entity::new(keys.clone(), Properties::new()))
        .await
        .unwrap_err();
    let sas = TableSas::new(
        table.name(),
        TablePermissions::READ,
        Utc::now() + chrono::Duration::minutes(5),
    )
    .with_protocol(SasProtocol::HttpsAndHttp)
    .sign(&p.account)
    .unwrap();
    let signature = sas.get("sig").unwrap().to_owned();
    let reader = Account::from_sas(
        p.account.name(),
        p.account.endpoints().clone(),
        &sas.to_query(),
    )
    .unwrap();
    let reader_table = reader.table(table.name()).unwrap();
    p.table.fail_nth(1, Fault::Reset);
    reader_table
        .get::<Properties>(&keys)
        .await
        .unwrap()
        .unwrap();
    let _ = reader_table
        .insert(&Entity::new(
            Keys::new("p", "x").unwrap(),
            Properties::new(),
        ))
        .await
        .unwrap_err();
    let queue = p.account.queue(&unique_queue_name("secrets")).unwrap();
    queue.create().await.unwrap();
    queue
        .send(b"payload", SendOptions::default())
        .await
        .unwrap();
    queue.delete_queue().await.unwrap();
    tracing::info!(account = ?p.account, reader = ?reader, "debug output of accounts");
    table.delete_table().await.unwrap();
    let key_values = pattern_operations(&p.account).await;

    let text = capture.0.lock().unwrap().clone();
    assert!(
        text.len() > 1_000,
        "the scenario was traced: {} bytes",
        text.len()
    );
    let key = tablekit_testkit::ACCOUNT_KEY;
    for secret in [key, &key[..24], signature.as_str(), &signature[..16]] {
        if let Some(at) = text.find(secret) {
            let start = text[..at]
                .char_indices()
                .rev()
                .nth(1500)
                .map_or(0, |(i, _)| i);
            eprintln!("LEAK CONTEXT: {}", &text[start..at]);
        }
        assert!(!text.contains(secret), "secret found in trace output");
    }
    let encoded_sig = signature
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D");
    for line in text.lines().filter(|l| l.contains(&encoded_sig[..16])) {
        eprintln!("LEAK: {}", &line[..line.len().min(400)]);
    }
    assert!(
        !text.contains(&encoded_sig[..16]),
        "encoded signature found in trace output"
    );
    // Nor a PartitionKey or RowKey value: no pattern records one without `record_keys`.
    for value in key_values {
        let leaks: Vec<&str> = text.lines().filter(|l| l.contains(value)).collect();
        assert!(leaks.is_empty(), "{value} in trace output: {leaks:#?}");
    }
    println!(
        "scenario 8: {} bytes of TRACE output, no key, no SAS signature, no key value",
        text.len()
    );
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Claim {
    #[serde(rename = "Amount")]
    amount: i64,
}

/// The key-addressed operations of the series, wide-entity and log patterns, on keys no
/// other part of the scenario uses; returns those key values.
async fn pattern_operations(account: &Account) -> [&'static str; 4] {
    const PK: &str = "Pk5ecretQ7";
    const RK: &str = "Rk5ecretW3";
    const BASE: &str = "Net5ecretZ1";
    const SPREAD: &str = "Emp5ecretJ4";
    let table = common::table(account, "secretkeys").await;
    let keys = Keys::new(PK, RK).unwrap();
    let series =
        tablekit_series::Series::<i64>::new(table.clone(), tablekit_series::SeriesLayout::hours());
    series.upsert_slot(&keys, "H00", 5).await.unwrap();
    series.add(&keys, "H01", 1).await.unwrap();
    assert!(series.get(&keys).await.unwrap().is_some());
    series.delete_if_exists(&keys).await.unwrap();
    let wide = tablekit_series::WideEntities::new(table.clone());
    let days: Properties = (1..=300)
        .map(|d| (format!("D{d:03}"), tablekit_core::EdmValue::Int64(d)))
        .collect();
    wide.insert(&Entity::new(keys.clone(), days)).await.unwrap();
    assert!(wide.get::<Properties>(&keys).await.unwrap().is_some());
    wide.delete(&keys, tablekit_core::IfMatch::Any)
        .await
        .unwrap();
    let tail = tablekit_logtail::LogTail::<Claim>::new(table.clone());
    tail.append(PK, &Claim { amount: 1 }).await.unwrap();
    assert_eq!(tail.latest(PK, 5).await.unwrap().len(), 1);
    let spread = tablekit_logtail::SpreadLog::<Claim>::new(table.clone(), BASE, 2).unwrap();
    spread.append(SPREAD, &Claim { amount: 2 }).await.unwrap();
    assert_eq!(spread.latest(5).await.unwrap().len(), 1);
    table.delete_table().await.unwrap();
    [PK, RK, BASE, SPREAD]
}
