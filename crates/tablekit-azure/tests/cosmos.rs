//! The Cosmos DB Table API profile: detection from the endpoint, its stricter limits refused
//! before any request, operations that need sorted query results refused, SAS version, and
//! its 429 answers through the proxy's `TooManyRequests` mode.
//!
//! Requests go to Azurite (with the Cosmos settings applied): what is tested is tablekit's
//! side — what it refuses, splits, signs and records — not a Cosmos DB account's answers.

use std::sync::Arc;
use std::time::Duration;

use tablekit_azure::{
    Account, BulkOptions, COSMOS_TABLE_SAS_VERSION, RequestKind, RetryPolicy, SAS_VERSION,
    Settings, TablePermissions, TableSas, TableService, ThroughputPolicy,
};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{Entity, Error, ErrorKind, Properties};
use tablekit_testkit::fixtures;
use tablekit_testkit::{Claims, MintingCredential, ThrottleMode, ThrottleModel};

const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

fn cosmos_settings() -> Settings {
    Settings::cosmos().with_retry(RetryPolicy::exponential(
        4,
        Duration::from_millis(10),
        Duration::from_millis(100),
    ))
}

#[test]
fn cosmos_endpoints_get_the_cosmos_settings() {
    let cs = format!(
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};TableEndpoint=https://acct.table.cosmos.azure.com:443/"
    );
    let account = Account::from_connection_string(&cs).unwrap();
    assert_eq!(account.settings().table_service, TableService::Cosmos);
    assert_eq!(account.settings().throughput, ThroughputPolicy::cosmos());
    let storage = Account::from_connection_string(&format!(
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};EndpointSuffix=core.windows.net"
    ))
    .unwrap();
    assert_eq!(storage.settings().table_service, TableService::Storage);
    assert_eq!(storage.settings(), &Settings::default());
    // The builder applies it too, unless given settings.
    let built = Account::builder("acct")
        .with_endpoint_suffix("cosmos.azure.com")
        .with_token_credential(Arc::new(MintingCredential::new(Claims::valid())))
        .build()
        .unwrap();
    assert_eq!(built.settings().table_service, TableService::Cosmos);
    let chosen = Account::builder("acct")
        .with_endpoint_suffix("cosmos.azure.com")
        .with_token_credential(Arc::new(MintingCredential::new(Claims::valid())))
        .with_settings(Settings::default())
        .build()
        .unwrap();
    assert_eq!(chosen.settings().table_service, TableService::Storage);
}

#[test]
fn order_dependent_operations_refuse_on_cosmos_with_the_reason() {
    let cosmos = fixtures::account_with(cosmos_settings());
    let err = cosmos
        .require_sorted_queries("`LogTail::latest`")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("LogTail::latest") && text.contains("not") && text.contains("sorted"),
        "{text}"
    );
    fixtures::account()
        .require_sorted_queries("`LogTail::latest`")
        .unwrap();
}

#[test]
fn table_sas_tokens_for_cosmos_use_the_version_it_accepts() {
    let expiry = chrono::Utc::now() + chrono::Duration::hours(1);
    let sas = TableSas::new("Orders", TablePermissions::READ, expiry);
    let cosmos = fixtures::account_with(cosmos_settings());
    let token = sas.sign(&cosmos).unwrap().to_query();
    assert!(
        token.contains(&format!("sv={COSMOS_TABLE_SAS_VERSION}")),
        "{token}"
    );
    let storage = sas.sign(&fixtures::account()).unwrap().to_query();
    assert!(storage.contains(&format!("sv={SAS_VERSION}")), "{storage}");
}

#[tokio::test]
async fn cosmos_limits_are_refused_before_any_request() {
    let account = fixtures::account_with(cosmos_settings());
    let table = fixtures::table_on(&account, "cosmoslimits").await;
    account.metrics().reset();

    // A RowKey of 256 bytes: within Azure Table storage's 1 KiB, over Cosmos DB's 255.
    let long_rk = "r".repeat(256);
    let err = table
        .insert(&Entity::try_new("p", long_rk.as_str(), Properties::new()).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::LimitExceeded { actual: 256, .. }),
        "{err}"
    );
    // A reserved property name, whatever its case.
    let err = table
        .upsert_merge(&Entity::try_new("p", "1", Properties::new().with("Id", 7)).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err}");
    // A transaction body over 2 MB (100 entities of ~30 KB): refused as a whole.
    let big = |i: usize| {
        Operation::insert(
            &Entity::try_new(
                "p",
                format!("{i:03}"),
                Properties::new().with("Blob", "x".repeat(30_000)),
            )
            .unwrap(),
        )
        .unwrap()
    };
    let err = table
        .submit(&BatchPlan::atomic((0..100).map(big)).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { .. }), "{err}");
    // A bulk write with a reserved name anywhere is refused whole.
    let mut ops: Vec<Operation> = (0..10).map(big).collect();
    ops.push(
        Operation::insert(&Entity::try_new("q", "1", Properties::new().with("etag", "x")).unwrap())
            .unwrap(),
    );
    let err = table
        .bulk_write(ops, BulkOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err}");
    assert_eq!(
        account.metrics().snapshot().requests(),
        0,
        "nothing was sent"
    );

    // A bulk write whose transaction would exceed 2 MB is split to fit.
    let report = table
        .bulk_write((0..100).map(big).collect(), BulkOptions::default())
        .await
        .unwrap();
    assert!(report.is_complete());
    assert_eq!(report.transactions, 2, "two halves of ~1.5 MB");
    assert_eq!(
        account
            .metrics()
            .snapshot()
            .requests_of(RequestKind::Transaction),
        2
    );
}

#[tokio::test]
async fn cosmos_429s_are_retried_after_their_hint_and_charges_recorded() {
    let proxied = fixtures::proxied(
        Settings::cosmos().with_retry(
            RetryPolicy::exponential(6, Duration::from_millis(10), Duration::from_millis(100))
                .with_max_retry_after(Duration::from_secs(5)),
        ),
    );
    let account = &proxied.account;
    let table = fixtures::table_on(account, "cosmos429").await;
    let throttle =
        proxied
            .table
            .set_throttle(ThrottleModel::default().with_per_partition(20.0).with_mode(
                ThrottleMode::TooManyRequests {
                    retry_after: Duration::from_millis(200),
                },
            ));
    account.metrics().reset();
    // 60 single inserts in one partition: three seconds of the partition's budget.
    for i in 0..60 {
        table
            .insert(&Entity::try_new("p", format!("{i:03}"), Properties::new()).unwrap())
            .await
            .unwrap();
    }
    let m = account.metrics().snapshot();
    let refused = throttle.stats().throttled;
    assert!(refused >= 1, "the partition ran out of budget");
    assert_eq!(m.throttled_responses, refused);
    assert!(
        refused <= 10,
        "the learned budget kept most requests from being refused: {refused} of {}",
        m.requests()
    );
    assert!(m.retry_delay >= m.retry_after_hints && m.retry_after_hints > Duration::ZERO);
    let expected = refused as f64 * ThrottleMode::THROTTLED_REQUEST_CHARGE;
    assert!((m.request_charge() - expected).abs() < 1e-9, "{m:?}");
}
