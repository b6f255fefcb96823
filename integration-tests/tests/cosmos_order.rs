//! On the Cosmos DB Table API query results are not sorted by RowKey: the log tail's "newest
//! n" reads (one `$top` query per partition, merged for spread logs) would return arbitrary
//! entries, so they refuse before any request, saying why.

use tablekit_azure::Settings;
use tablekit_core::{Error, Properties};
use tablekit_logtail::{LogTail, SpreadLog};
use tablekit_testkit::fixtures;

#[tokio::test]
async fn newest_entries_refuse_on_cosmos_before_any_request() {
    let account = fixtures::account_with(Settings::cosmos());
    let table = account
        .table(&tablekit_testkit::unique_table_name("cosmostail"))
        .unwrap();
    let tail = LogTail::<Properties>::new(table.clone());
    let err = tail.latest("device-1", 10).await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { reason, .. } if reason.contains("LogTail::latest")),
        "{err:?}"
    );
    let spread = SpreadLog::<Properties>::new(table, "device", 4).unwrap();
    let err = spread.latest(10).await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { reason, .. } if reason.contains("SpreadLog::latest")),
        "{err:?}"
    );
    assert_eq!(account.metrics().snapshot().requests(), 0);

    // The same reads on Azure Table storage are sent (the table does not exist here).
    let storage = fixtures::account();
    let table = storage
        .table(&tablekit_testkit::unique_table_name("storagetail"))
        .unwrap();
    let err = LogTail::<Properties>::new(table)
        .latest("device-1", 10)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
}
