//! With tracing at TRACE level (and every `log` record) captured while a token account works —
//! tables, queues, blobs, an SDK client, refused tokens, a refresh — the output holds no
//! bearer token. One test per process: it installs the global subscriber.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablekit_azure::{SendOptions, UploadOptions};
use tablekit_core::{Entity, Keys, Properties};
use tablekit_testkit::fixtures::token_account;
use tablekit_testkit::{
    Claims, MintingCredential, unique_container_name, unique_queue_name, unique_table_name,
};
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
async fn trace_output_never_contains_a_bearer_token() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(capture.clone()).unwrap();
    log::set_boxed_logger(Box::new(capture.clone())).unwrap();
    log::set_max_level(log::LevelFilter::Trace);

    // Tokens inside the refresh margin: every request gets (and logs about) a new one.
    let credential = Arc::new(MintingCredential::new(Claims::expiring_in(
        Duration::from_secs(240),
    )));
    let account = token_account(credential.clone());
    let table = account.table(&unique_table_name("traced")).unwrap();
    table.create().await.unwrap();
    let entity = Entity::new(Keys::new("p", "r").unwrap(), Properties::new().with("V", 1));
    table.insert(&entity).await.unwrap();
    let _ = table.insert(&entity).await.unwrap_err();
    table
        .get::<Properties>(&entity.keys)
        .await
        .unwrap()
        .unwrap();
    let queue = account.queue(&unique_queue_name("traced")).unwrap();
    queue.create().await.unwrap();
    queue
        .send(b"payload", SendOptions::default())
        .await
        .unwrap();
    queue.delete_queue().await.unwrap();
    let container = account.container(&unique_container_name("traced")).unwrap();
    container.create().await.unwrap();
    container
        .upload("b", &b"x"[..], UploadOptions::default())
        .await
        .unwrap();
    // The SDK's own pipeline logs whole requests at DEBUG level.
    container.client().get_properties().await.unwrap();
    container.delete_container().await.unwrap();
    table.delete_table().await.unwrap();

    let expired = Arc::new(MintingCredential::new(Claims::expired()));
    let refused = token_account(expired.clone());
    let _ = refused
        .table(&unique_table_name("refused"))
        .unwrap()
        .create()
        .await
        .unwrap_err();
    tracing::info!(account = ?account, refused = ?refused, "debug output of accounts");

    let text = capture.0.lock().unwrap().clone();
    assert!(
        text.len() > 1_000 && text.contains("passed to the transport policy: Request {"),
        "the scenario was traced, the SDK's log of whole requests included: {} bytes",
        text.len()
    );
    let tokens: Vec<String> = credential
        .minted()
        .into_iter()
        .chain(expired.minted())
        .collect();
    assert!(tokens.len() >= 10, "{}", tokens.len());
    for token in &tokens {
        // The claims and the signature are what make a token; the header is the same in all.
        for part in token.split('.').skip(1) {
            if let Some(at) = text.find(part) {
                let start = text[..at].len().saturating_sub(3000);
                eprintln!("LEAK CONTEXT: {}", &text[start..at]);
            }
            assert!(!text.contains(part), "a token was traced");
        }
    }
    println!(
        "{} bytes of TRACE output, {} tokens, none of them in it",
        text.len(),
        tokens.len()
    );
}
