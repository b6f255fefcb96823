//! Error kinds at real call sites against Azurite: a value that cannot be stored (`Encode`,
//! before any request), stored data that does not fit the type asked for (`Decode`, naming the
//! table, the keys and the property), an argument outside its domain (`InvalidArgument`,
//! before any request).

mod common;

use serde::{Deserialize, Serialize};
use tablekit_core::batch::BatchPlan;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, ErrorKind, Keys, Properties};

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    first_name: String,
    age: i32,
}

#[tokio::test]
async fn a_value_the_service_cannot_store_is_an_encode_error_before_any_request() {
    let table = common::table("errencode").await;
    let metrics = table.account().metrics().clone();
    metrics.reset();
    #[derive(Serialize)]
    #[serde(rename_all = "PascalCase")]
    struct Counter {
        count: i32,
        huge: u64,
    }
    let err = table
        .insert(&Entity::new(
            Keys::new("p", "r").unwrap(),
            Counter {
                count: 1,
                huge: u64::MAX,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Encode, "{err}");
    assert!(
        matches!(&err, Error::Encode { property, .. } if property == "Huge"),
        "{err}"
    );
    assert_eq!(
        metrics.snapshot().requests(),
        0,
        "refused before any request"
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn stored_data_of_another_type_is_a_decode_error_naming_table_keys_and_property() {
    let table = common::table("errdecode").await;
    let keys = Keys::new("Sales", "000223").unwrap();
    table
        .insert(&Entity::new(
            keys.clone(),
            Properties::new()
                .with("FirstName", "Jun")
                .with("Age", "forty-seven"),
        ))
        .await
        .unwrap();

    let check = |err: Error| {
        assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
        match &err {
            Error::Decode {
                target, property, ..
            } => {
                assert_eq!(target.table, table.name(), "{err}");
                assert_eq!(target.keys.as_deref(), Some(&keys), "{err}");
                assert_eq!(property, "Age", "{err}");
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains(table.name()), "{err}");
    };
    check(table.get::<Employee>(&keys).await.unwrap_err());
    check(
        table
            .query::<Employee>()
            .filter(Filter::partition("Sales"))
            .collect()
            .await
            .unwrap_err(),
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn an_argument_outside_its_domain_is_refused_before_any_request() {
    let table = common::table("errarg").await;
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let err = table
        .bulk_write(Vec::new(), Default::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let err = BatchPlan::atomic(Vec::new()).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { argument, .. } if argument == "operations"),
        "{err}"
    );
    assert_eq!(metrics.snapshot().requests(), 0);
    table.delete_table().await.unwrap();
}

/// Records the client request id of every request a proxy sees.
#[derive(Default)]
struct ClientIds(std::sync::Mutex<Vec<Option<String>>>);

impl tablekit_testkit::Intercept for ClientIds {
    fn request(&self, request: &tablekit_testkit::RequestInfo) -> tablekit_testkit::Decision {
        let id = request.header("x-ms-client-request-id").map(str::to_owned);
        self.0.lock().unwrap().push(id);
        Box::pin(async { None })
    }

    fn finished(&self, _: &tablekit_testkit::RequestInfo, _: tablekit_testkit::Answer) {}
}

#[tokio::test]
async fn errors_of_answered_requests_carry_the_service_and_client_request_ids() {
    use std::sync::Arc;
    use tablekit_testkit::{Fault, fixtures};

    // Every attempt refused: the error names the last answer's request id and the client id
    // every attempt of the request carried.
    let p = fixtures::proxied(fixtures::fast_retries());
    let table = p.account.table("RequestIds").unwrap();
    let seen = Arc::new(ClientIds::default());
    p.table.set_intercept("table", seen.clone());
    p.table.add_rule(tablekit_testkit::Rule::new(
        tablekit_testkit::Matcher::any(),
        tablekit_testkit::Occurrences::All,
        Fault::Status(503),
    ));
    let e = table
        .get::<Properties>(&Keys::new("p", "r").unwrap())
        .await
        .unwrap_err();
    let ids = e
        .request_ids()
        .expect("an answered request's error")
        .clone();
    let sent = seen.0.lock().unwrap().clone();
    assert_eq!(sent.len(), 5, "the first attempt and 4 retries: {sent:?}");
    assert!(
        sent.iter().all(|id| id.is_some() && *id == sent[0]),
        "{sent:?}"
    );
    assert_eq!(ids.client(), sent[0].as_deref());
    assert!(ids.service().is_some(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "client request id {}",
            sent[0].as_deref().unwrap()
        )),
        "{text}"
    );
    // Another request has another client id.
    seen.0.lock().unwrap().clear();
    let _ = table.get::<Properties>(&Keys::new("p", "r").unwrap()).await;
    assert_ne!(seen.0.lock().unwrap()[0], sent[0]);

    // Azurite's own answer: the service's request id is its `x-ms-request-id`. A read-only
    // SAS asked to write is refused with 403.
    let table = common::table("errids").await;
    let account = table.account().clone();
    let expiry = chrono::Utc::now() + chrono::Duration::minutes(10);
    let token =
        tablekit_azure::TableSas::new(table.name(), tablekit_azure::TablePermissions::READ, expiry)
            .with_protocol(tablekit_azure::SasProtocol::HttpsAndHttp)
            .sign(&account)
            .unwrap();
    let reader = tablekit_azure::Account::from_sas(
        account.name(),
        account.endpoints().clone(),
        &token.to_query(),
    )
    .unwrap();
    let e = reader
        .table(table.name())
        .unwrap()
        .insert(&Entity::new(
            Keys::new("p", "r").unwrap(),
            Properties::new().with("V", 1),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Forbidden, "{e}");
    let ids = e.request_ids().expect("ids of Azurite's answer");
    assert!(ids.service().is_some() && ids.client().is_some(), "{e}");
    assert!(e.to_string().contains("request id"), "{e}");
}
