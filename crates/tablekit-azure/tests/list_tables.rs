//! Listing tables by name prefix against Azurite.

mod common;

use tablekit_azure::RequestKind;
use tablekit_testkit::unique_table_name;

#[tokio::test]
async fn list_tables_returns_exactly_the_tables_with_the_prefix_in_one_request() {
    let account = common::account();
    let prefix = unique_table_name("List");
    let mut created = Vec::new();
    // `{prefix}Z` and `{prefix}A…` are in; a name that only shares a shorter prefix is not.
    for suffix in ["B20260101", "A20260102", "Z"] {
        let table = account.table(&format!("{prefix}{suffix}")).unwrap();
        table.create().await.unwrap();
        created.push(table);
    }
    let shorter = &prefix[..prefix.len() - 1];
    let other = if prefix.ends_with('q') { 'r' } else { 'q' };
    let outside = account.table(&format!("{shorter}{other}Other")).unwrap();
    outside.create().await.unwrap();

    account.metrics().reset();
    let names = account.list_tables(&prefix).await.unwrap();
    assert_eq!(account.metrics().snapshot().requests(), 1);
    assert_eq!(
        account
            .metrics()
            .snapshot()
            .requests_of(RequestKind::TableList),
        1
    );
    let mut expected: Vec<String> = created.iter().map(|t| t.name().to_owned()).collect();
    expected.sort();
    assert_eq!(names, expected);

    let all = account.list_tables("").await.unwrap();
    assert!(all.contains(&outside.name().to_owned()));
    assert!(expected.iter().all(|n| all.contains(n)));

    for table in created.iter().chain([&outside]) {
        table.delete_table().await.unwrap();
    }
    assert!(account.list_tables(&prefix).await.unwrap().is_empty());
}
