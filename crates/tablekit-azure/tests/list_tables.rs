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

/// A listing is lazy and pages: nothing is sent until a page is asked for, each page is one
/// request of at most the page size, and a page's token resumes the listing — here after a
/// round trip through its text, as another process would.
#[tokio::test]
async fn a_table_listing_pages_and_resumes_from_a_token() {
    use futures::TryStreamExt;
    use tablekit_azure::ListToken;

    let account = common::account();
    let prefix = unique_table_name("Pages");
    let mut expected = Vec::new();
    for i in 0..5 {
        let table = account.table(&format!("{prefix}{i}")).unwrap();
        table.create().await.unwrap();
        expected.push(table.name().to_owned());
    }

    account.metrics().reset();
    let listing = account.list_tables(&prefix).with_page_size(2).unwrap();
    assert_eq!(
        account.metrics().snapshot().requests(),
        0,
        "nothing sent yet"
    );
    let first = listing.page().await.unwrap();
    assert_eq!(first.items, expected[..2]);
    let token: ListToken = first
        .continuation
        .expect("more pages")
        .to_string()
        .parse()
        .unwrap();
    let rest: Vec<_> = account
        .list_tables(&prefix)
        .with_page_size(2)
        .unwrap()
        .resume(token)
        .pages()
        .try_collect()
        .await
        .unwrap();
    let sizes: Vec<usize> = rest.iter().map(|page| page.items.len()).collect();
    assert_eq!(sizes, [2, 1], "pages of at most two");
    assert!(rest.last().unwrap().is_last());
    let mut all = first.items.clone();
    all.extend(rest.into_iter().flat_map(|page| page.items));
    assert_eq!(all, expected);
    assert_eq!(
        account
            .metrics()
            .snapshot()
            .requests_of(RequestKind::TableList),
        3,
        "one request per page"
    );
    assert!(account.list_tables(&prefix).with_page_size(0).is_err());

    for name in &expected {
        account.table(name).unwrap().delete_table().await.unwrap();
    }
}
