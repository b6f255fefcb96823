//! The intra-partition secondary index against Azurite: the guide's keys and ranges, request
//! counts, concurrency, audits, copy handles, deletes, resumed ranges.

mod common;

use common::{Directory, Employee, directory, employee, measured, table};
use futures::TryStreamExt as _;
use tablekit_azure::RequestKind;
use tablekit_core::Properties;
use tablekit_core::filter::{Filter, ROW_KEY};
use tablekit_core::{ETag, Entity, Error, ErrorKind, IfMatch, Keys, QueryShape};
use tablekit_index::{IndexRead as _, IntraPartitionIndex};

async fn index(prefix: &str) -> (IntraPartitionIndex<Employee>, Directory) {
    let directory = directory();
    let index = IntraPartitionIndex::new(table(prefix).await, directory.spec.clone());
    (index, directory)
}

#[tokio::test]
async fn both_copies_are_point_readable_and_written_together() {
    let (index, d) = index("intra28").await;
    let table = index.table().clone();
    let jones = employee("Sales", 223, "Jones", "jonesj@contoso.com");

    let (etag, spent) = measured(&table, index.insert(&jones)).await;
    etag.unwrap();
    assert_eq!(spent.requests(), 1, "a new entity is one transaction");
    assert_eq!(spent.requests_of(RequestKind::Transaction), 1);

    for rk in ["empid_000223", "email_jonesj@contoso.com"] {
        let keys = Keys::new("Sales", rk).unwrap();
        let (row, spent) = measured(&table, table.get::<Properties>(&keys)).await;
        assert!(row.unwrap().is_some(), "{rk} is point-retrievable");
        assert_eq!(spent.requests_of(RequestKind::Get), 1);
    }
    let (card, spent) = measured(
        &table,
        index.get_by(&d.by_email, "Sales", "jonesj@contoso.com"),
    )
    .await;
    assert_eq!(card.unwrap().unwrap().value.id, "000223");
    assert_eq!(spent.requests(), 1, "get_by is one point query");
    let (full, spent) = measured(&table, index.get("Sales", "000223")).await;
    assert_eq!(full.unwrap().unwrap().value, jones);
    assert_eq!(spent.requests(), 1);

    // Either both exist or neither: a second employee claiming the same email is refused as
    // a whole, so not even its id copy is written.
    let clash = employee("Sales", 224, "Jonas", "jonesj@contoso.com");
    let err = index.insert(&clash).await.unwrap_err();
    match &err {
        Error::BatchFailed { index, source } => {
            assert_eq!(*index, 1, "the email copy is refused");
            assert_eq!(source.kind(), ErrorKind::AlreadyExists);
        }
        other => panic!("{other:?}"),
    }
    assert!(index.get("Sales", "000224").await.unwrap().is_none());
    // And inserting the same entity twice is refused on the primary.
    let again = index.insert(&jones).await.unwrap_err();
    assert!(matches!(again, Error::BatchFailed { index: 0, .. }));
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn put_reads_once_and_commits_once_even_when_the_email_changes() {
    let (index, d) = index("intraput").await;
    let table = index.table().clone();
    let mut jones = employee("Sales", 223, "Jones", "jonesj@contoso.com");

    let (etag, spent) = measured(&table, index.upsert(&jones)).await;
    etag.unwrap();
    assert_eq!(
        (
            spent.requests_of(RequestKind::Get),
            spent.requests_of(RequestKind::Transaction),
            spent.requests()
        ),
        (1, 1, 2),
        "put of a new entity: a read that finds nothing, one transaction"
    );

    jones.email = "jun.jones@contoso.com".into();
    let (etag, spent) = measured(&table, index.upsert(&jones)).await;
    let etag = etag.unwrap();
    assert_eq!(spent.requests(), 2, "read + one transaction");
    assert_eq!(spent.requests_of(RequestKind::Transaction), 1);
    assert!(
        index
            .get_by(&d.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap()
            .is_none(),
        "the stale copy went in the same transaction"
    );
    let moved = index
        .get_by(&d.by_email, "Sales", "jun.jones@contoso.com")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(moved.value.email, "jun.jones@contoso.com");
    let primary = index.get("Sales", "000223").await.unwrap().unwrap();
    assert_eq!(primary.etag, etag, "put returns the primary's new ETag");

    // Unchanged values: still two requests, the copy rewritten in place.
    jones.age = 35;
    let (r, spent) = measured(&table, index.upsert(&jones)).await;
    r.unwrap();
    assert_eq!(spent.requests(), 2);
    assert_eq!(
        index
            .get("Sales", "000223")
            .await
            .unwrap()
            .unwrap()
            .value
            .age,
        35
    );
    assert!(index.verify("Sales").await.unwrap().is_consistent());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn replace_and_delete_use_the_etag_read() {
    let (index, d) = index("intrarepl").await;
    let table = index.table().clone();
    let jones = employee("Sales", 223, "Jones", "jonesj@contoso.com");
    index.insert(&jones).await.unwrap();
    let current = index.get("Sales", "000223").await.unwrap().unwrap();

    let changed = Employee {
        email: "j2@contoso.com".into(),
        ..jones.clone()
    };
    let (r, spent) = measured(&table, index.replace(&current, &changed)).await;
    r.unwrap();
    assert_eq!(
        spent.requests(),
        1,
        "replace of a read entity is one transaction"
    );
    // The ETag read before is stale now: refused as a whole.
    let stale = index.replace(&current, &jones).await.unwrap_err();
    assert!(
        matches!(&stale, Error::BatchFailed { index: 0, source } if source.kind() == ErrorKind::PreconditionFailed),
        "{stale:?}"
    );
    assert!(
        index
            .get_by(&d.by_email, "Sales", "j2@contoso.com")
            .await
            .unwrap()
            .is_some()
    );
    // Moving an entity is refused before any request.
    let moved = Employee {
        department: "Marketing".into(),
        ..changed.clone()
    };
    let fresh = index.get("Sales", "000223").await.unwrap().unwrap();
    let (r, spent) = measured(&table, index.replace(&fresh, &moved)).await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(spent.requests(), 0);

    // By id: the primary is read to find the copies, then one transaction.
    let (r, spent) = measured(&table, index.delete(("Sales", "000223"), IfMatch::Any)).await;
    r.unwrap();
    assert_eq!(spent.requests(), 2, "read + one transaction");
    let rows = table
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .collect()
        .await
        .unwrap();
    assert!(rows.is_empty(), "every copy deleted: {rows:?}");

    // The entity as read, under its ETag: the copies are computed from it, one transaction.
    index.insert(&jones).await.unwrap();
    let current = index.get("Sales", "000223").await.unwrap().unwrap();
    let (r, spent) = measured(&table, index.delete(&current.value, current.if_match())).await;
    r.unwrap();
    assert_eq!(spent.requests(), 1);
    assert!(
        index
            .get_by(&d.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap()
            .is_none()
    );

    // A stale ETag deletes nothing, by entity or by id.
    index.insert(&jones).await.unwrap();
    let stale = index.get("Sales", "000223").await.unwrap().unwrap();
    index.upsert(&changed).await.unwrap();
    let by_entity = index.delete(&stale.value, stale.if_match()).await;
    assert_eq!(by_entity.unwrap_err().kind(), ErrorKind::PreconditionFailed);
    let (by_id, spent) =
        measured(&table, index.delete(("Sales", "000223"), stale.if_match())).await;
    assert_eq!(by_id.unwrap_err().kind(), ErrorKind::PreconditionFailed);
    assert_eq!(
        spent.requests(),
        1,
        "the read shows another ETag: nothing sent"
    );
    assert!(index.get("Sales", "000223").await.unwrap().is_some());
    assert!(index.verify("Sales").await.unwrap().is_consistent());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn delete_of_a_missing_entity_is_not_found_and_delete_if_exists_says_false() {
    let (index, _) = index("intramissing").await;
    let table = index.table().clone();
    let jones = employee("Sales", 223, "Jones", "jonesj@contoso.com");
    for if_match in [
        IfMatch::Any,
        IfMatch::ETag(ETag::new("W/\"datetime'2024-01-01T00%3A00%3A00Z'\"")),
    ] {
        let (r, spent) = measured(&table, index.delete(("Sales", "000223"), if_match)).await;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::NotFound);
        assert_eq!(spent.requests(), 1, "one read finds nothing");
    }
    let (r, spent) = measured(&table, index.delete(&jones, IfMatch::Any)).await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(spent.requests(), 1);
    let (r, spent) = measured(&table, index.delete_if_exists(("Sales", "000223"))).await;
    assert!(!r.unwrap());
    assert_eq!(spent.requests(), 1);

    index.insert(&jones).await.unwrap();
    let (r, spent) = measured(&table, index.delete_if_exists(&jones)).await;
    assert!(r.unwrap());
    assert_eq!(spent.requests(), 2, "read + one transaction");
    assert!(index.get("Sales", "000223").await.unwrap().is_none());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn ranges_are_sorted_by_the_index_and_hold_only_its_copies() {
    let (index, d) = index("intrarange").await;
    let table = index.table().clone();
    let emails = ["alice", "bob", "adam", "zoe", "anna", "carl"];
    let mut ids = Vec::new();
    for (n, id) in [95u32, 100, 123, 150, 199, 200, 223]
        .into_iter()
        .enumerate()
    {
        let name = emails[n % emails.len()];
        let e = employee("Sales", id, "Jones", &format!("{name}{id}@contoso.com"));
        index.insert(&e).await.unwrap();
        ids.push(id);
    }
    // Another partition's copies are never in range.
    index
        .insert(&employee("Marketing", 150, "Hall", "ahall@contoso.com"))
        .await
        .unwrap();

    // Ids 100 to 199, as the guide writes the filter.
    let literal = Filter::partition("Sales")
        .and(Filter::ge(ROW_KEY, "empid_000100"))
        .and(Filter::le(ROW_KEY, "empid_000199"));
    let rows = table
        .query::<Properties>()
        .filter(literal)
        .collect()
        .await
        .unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r.keys.rk()).collect();
    assert_eq!(
        keys,
        [
            "empid_000100",
            "empid_000123",
            "empid_000150",
            "empid_000199"
        ]
    );

    let range = index
        .range_by(&d.by_id, "Sales", "000100"..="000199")
        .unwrap();
    assert_eq!(range.shape(), QueryShape::Range);
    let (found, spent) = measured(&table, range.collect()).await;
    let found: Vec<String> = found.unwrap().into_iter().map(|s| s.value.id).collect();
    assert_eq!(found, ["000100", "000123", "000150", "000199"]);
    assert_eq!(spent.requests(), 1);

    // Emails starting with "a", sorted by email.
    let literal = Filter::partition("Sales")
        .and(Filter::ge(ROW_KEY, "email_a"))
        .and(Filter::lt(ROW_KEY, "email_b"));
    let rows = table
        .query::<Properties>()
        .filter(literal)
        .collect()
        .await
        .unwrap();
    let by_filter: Vec<String> = rows
        .iter()
        .map(|r| r.value.get_str("Email").unwrap().unwrap().to_owned())
        .collect();
    let range = index.range_by_prefix(&d.by_email, "Sales", "a").unwrap();
    let (found, spent) = measured(&table, range.collect()).await;
    let found: Vec<String> = found.unwrap().into_iter().map(|s| s.value.email).collect();
    assert_eq!(spent.requests(), 1);
    assert_eq!(found, by_filter);
    let mut expected: Vec<String> = (0..ids.len())
        .map(|n| format!("{}{}@contoso.com", emails[n % emails.len()], ids[n]))
        .filter(|e| e.starts_with('a'))
        .collect();
    expected.sort();
    assert_eq!(found, expected);
    assert!(found.len() >= 3);
    // The whole email index, in email order.
    let all = index
        .range_by(&d.by_email, "Sales", ..)
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(all.len(), ids.len());
    assert!(all.windows(2).all(|w| w[0].value.email < w[1].value.email));
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn compound_rows_next_to_fixed_width_copies_are_not_taken_for_copies() {
    let (index, d) = index("intrawidth").await;
    let table = index.table().clone();
    index
        .insert(&employee("Sales", 123, "Jones", "a@x"))
        .await
        .unwrap();
    let review = Entity::new(
        Keys::new("Sales", "empid_000123_2012").unwrap(),
        Properties::new().with("Comments", "good"),
    );
    table.insert(&review).await.unwrap();
    let found = index
        .range_by(&d.by_id, "Sales", "000100"..="000199")
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].keys.rk(), "empid_000123");
    assert!(index.verify("Sales").await.unwrap().is_consistent());
    // Values of the wrong width are refused before any request.
    let (r, spent) = measured(
        &table,
        index.insert(&Employee {
            id: "123".into(),
            ..employee("Sales", 1, "J", "b@x")
        }),
    )
    .await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Encode);
    assert_eq!(spent.requests(), 0);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn concurrent_writers_never_leave_a_stale_or_missing_copy() {
    let (index, d) = index("intrarace").await;
    let table = index.table().clone();
    index
        .insert(&employee("Sales", 223, "Jones", "start@contoso.com"))
        .await
        .unwrap();
    let writers: Vec<_> = (0..8)
        .map(|n| {
            let index = index.clone();
            tokio::spawn(async move {
                let e = employee("Sales", 223, "Jones", &format!("writer{n}@contoso.com"));
                index.upsert(&e).await
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    let winner = index
        .get("Sales", "000223")
        .await
        .unwrap()
        .unwrap()
        .value
        .email;
    let emails = index
        .range_by(&d.by_email, "Sales", ..)
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(emails.len(), 1, "exactly one email copy: {emails:?}");
    assert_eq!(emails[0].value.email, winner);
    let report = index.verify("Sales").await.unwrap();
    assert!(report.is_consistent(), "{report:?}");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn verify_finds_drift_and_repair_fixes_it() {
    let (index, _) = index("intraaudit").await;
    let table = index.table().clone();
    for (id, email) in [(1, "a@x"), (2, "b@x"), (3, "c@x")] {
        index
            .insert(&employee("Sales", id, "Jones", email))
            .await
            .unwrap();
    }
    let (report, spent) = measured(&table, index.verify("Sales")).await;
    assert!(report.unwrap().is_consistent());
    assert_eq!(spent.requests(), 2, "one range query per copy");

    // Drift made outside the index: a copy deleted, a copy edited, an orphan left behind.
    table
        .delete(&Keys::new("Sales", "email_a@x").unwrap(), IfMatch::Any)
        .await
        .unwrap();
    let edited = Entity::new(
        Keys::new("Sales", "email_b@x").unwrap(),
        Properties::new()
            .with("Email", "b@x")
            .with("LastName", "Wrong"),
    );
    table.upsert_replace(&edited).await.unwrap();
    let orphan = Entity::new(
        Keys::new("Sales", "email_gone@x").unwrap(),
        Properties::new().with("Email", "gone@x"),
    );
    table.insert(&orphan).await.unwrap();

    let report = index.verify("Sales").await.unwrap();
    assert_eq!(report.missing.len(), 1);
    assert_eq!(report.missing[0].keys.rk(), "email_a@x");
    assert_eq!(
        report.missing[0].primary.as_ref().unwrap().rk(),
        "empid_000001"
    );
    assert_eq!(report.stale.len(), 1);
    assert_eq!(report.stale[0].keys.rk(), "email_b@x");
    assert_eq!(report.orphaned.len(), 1);
    assert_eq!(report.orphaned[0].keys.rk(), "email_gone@x");

    let (repaired, spent) = measured(&table, index.repair("Sales")).await;
    let repaired = repaired.unwrap();
    assert_eq!(
        (repaired.rewritten, repaired.deleted, repaired.skipped),
        (2, 1, 0)
    );
    assert_eq!(
        spent.requests(),
        2 + 1 + 1,
        "audit (2 ranges) + one transaction for both entities + one for the orphan"
    );
    let after = index.verify("Sales").await.unwrap();
    assert!(after.is_consistent(), "{after:?}");

    // A put of an entity whose stale copy is already gone still succeeds (one more request).
    table
        .delete(&Keys::new("Sales", "email_c@x").unwrap(), IfMatch::Any)
        .await
        .unwrap();
    let (r, spent) = measured(&table, index.upsert(&employee("Sales", 3, "Jones", "c2@x"))).await;
    r.unwrap();
    assert_eq!(
        spent.requests(),
        3,
        "read, a transaction refused on the missing copy, the rest"
    );
    assert!(index.verify("Sales").await.unwrap().is_consistent());
    table.delete_table().await.unwrap();
}

/// The rows of `partition`'s copies, by RowKey.
async fn row_keys(table: &tablekit_azure::Table, partition: &str) -> Vec<String> {
    table
        .query::<Properties>()
        .filter(Filter::partition(partition))
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.keys.rk().to_owned())
        .collect()
}

#[tokio::test]
async fn a_partition_change_moves_the_whole_family_or_leaves_it_where_it_was() {
    let (index, _) = index("intramove").await;
    let table = index.table().clone();
    let mut jones = employee("Sales", 223, "Jones", "jonesj@contoso.com");
    index.insert(&jones).await.unwrap();
    index
        .insert(&employee("Sales", 100, "Lee", "lee@contoso.com"))
        .await
        .unwrap();
    let lee_only = ["email_lee@contoso.com", "empid_000100"];
    let current = index.get("Sales", "000223").await.unwrap().unwrap();
    jones.department = "Marketing".into();

    // `replace` keeps an entity in its partition: refused unsent, pointing at `relocate`.
    let (r, spent) = measured(&table, index.replace(&current, &jones)).await;
    let err = r.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("relocate"), "{err}");
    assert_eq!(spent.requests(), 0);

    // `relocate`: the family inserted in Marketing, then deleted from Sales.
    let (r, spent) = measured(&table, index.relocate(&current, &jones)).await;
    let etag = r.unwrap();
    assert_eq!(spent.requests_of(RequestKind::Transaction), 2);
    assert_eq!(spent.requests(), 2, "two transactions, no read");
    assert_eq!(
        row_keys(&table, "Sales").await,
        lee_only,
        "nothing left behind"
    );
    assert_eq!(
        row_keys(&table, "Marketing").await,
        ["email_jonesj@contoso.com", "empid_000223"]
    );
    let moved = index.get("Marketing", "000223").await.unwrap().unwrap();
    assert_eq!(
        (moved.value.department.as_str(), &moved.etag),
        ("Marketing", &etag)
    );
    assert!(index.verify("Sales").await.unwrap().is_consistent());
    assert!(index.verify("Marketing").await.unwrap().is_consistent());

    // A stale `current`: the second step fails, the first is undone, nothing moves.
    let stale = moved.clone();
    let mut renamed = moved.value.clone();
    renamed.first_name = "Ana".into();
    index.upsert(&renamed).await.unwrap();
    jones = renamed.clone();
    jones.department = "Sales".into();
    let (r, spent) = measured(&table, index.relocate(&stale, &jones)).await;
    let err = r.unwrap_err();
    assert!(
        matches!(&err, Error::BatchFailed { index: 0, source } if source.kind() == ErrorKind::PreconditionFailed),
        "{err:?}"
    );
    assert_eq!(
        spent.requests_of(RequestKind::Transaction),
        3,
        "insert, refused delete, undo"
    );
    assert_eq!(
        row_keys(&table, "Sales").await,
        lee_only,
        "the insert was undone"
    );
    let kept = index.get("Marketing", "000223").await.unwrap().unwrap();
    assert_eq!(kept.value, renamed);

    // The new partition already holds the id: refused at the first step, nothing written.
    index
        .insert(&employee("Marketing", 100, "Lee", "lee2@contoso.com"))
        .await
        .unwrap();
    let marketing = row_keys(&table, "Marketing").await;
    let lee = index.get("Sales", "000100").await.unwrap().unwrap();
    let mut moved_lee = lee.value.clone();
    moved_lee.department = "Marketing".into();
    let (r, spent) = measured(&table, index.relocate(&lee, &moved_lee)).await;
    let err = r.unwrap_err();
    assert!(
        matches!(&err, Error::BatchFailed { index: 0, source } if source.kind() == ErrorKind::AlreadyExists),
        "{err:?}"
    );
    assert_eq!(spent.requests(), 1);
    assert_eq!(row_keys(&table, "Sales").await, lee_only);
    assert_eq!(row_keys(&table, "Marketing").await, marketing);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_move_whose_delete_the_service_refuses_is_undone() {
    use tablekit_testkit::fixtures::{fast_retries, proxied, table_on};
    use tablekit_testkit::{Fault, Matcher, Occurrences, Rule};

    let p = proxied(fast_retries());
    let table = table_on(&p.account, "intramovefault").await;
    let index = IntraPartitionIndex::new(table.clone(), directory().spec);
    let jones = employee("Sales", 223, "Jones", "jonesj@contoso.com");
    index.insert(&jones).await.unwrap();
    let current = index.get("Sales", "000223").await.unwrap().unwrap();
    let mut moved = jones.clone();
    moved.department = "Marketing".into();

    // The second transaction from now on (the delete in Sales) is refused by the service.
    p.table.add_rule(Rule::new(
        Matcher::any().with_path_contains("$batch"),
        Occurrences::Nth(2),
        Fault::Status(400),
    ));
    let err = index.relocate(&current, &moved).await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err:?}");
    assert_eq!(p.table.stats().faults_injected.total(), 1);
    assert!(
        row_keys(&table, "Marketing").await.is_empty(),
        "the insert was undone"
    );
    assert_eq!(
        row_keys(&table, "Sales").await,
        ["email_jonesj@contoso.com", "empid_000223"]
    );
    assert_eq!(
        index.get("Sales", "000223").await.unwrap().unwrap().etag,
        current.etag
    );

    // With the service answering again, the same move goes through.
    p.table.clear();
    index.relocate(&current, &moved).await.unwrap();
    assert!(row_keys(&table, "Sales").await.is_empty());
    assert_eq!(
        row_keys(&table, "Marketing").await,
        ["email_jonesj@contoso.com", "empid_000223"]
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_handle_of_another_declaration_is_refused_before_any_request() {
    let (index, d) = index("intrahandle").await;
    let table = index.table().clone();
    // Two declarations of the same type: each one's handles name its own copies only.
    let other = directory();
    let inter = tablekit_index::InterPartitionIndex::new(
        table.clone(),
        d.spec.clone(),
        table
            .account()
            .queue(&tablekit_testkit::unique_queue_name("intrahandle"))
            .unwrap(),
    );
    let (r, spent) = measured(&table, async {
        let get = index.get_by(&other.by_email, "Sales", "jonesj@contoso.com");
        let range = index.range_by(&other.by_id, "Sales", ..).map(drop);
        let inter_get = inter.get_by(&other.by_email, "Sales", "jonesj@contoso.com");
        let keys = inter.keys_by(&other.by_id, "Sales", 223).map(drop);
        [get.await.map(drop), range, inter_get.await.map(drop), keys]
    })
    .await;
    for refused in r {
        assert_eq!(refused.unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
    assert_eq!(spent.requests(), 0);
    // Its own handles work on both, and a clone of the declaration keeps them.
    assert_eq!(
        index.keys_by(&d.by_email, "Sales", "a@x").unwrap(),
        Keys::new("Sales", "email_a@x").unwrap()
    );
    assert_eq!(
        inter.keys_by(&d.by_id, "Sales", 223).unwrap(),
        Keys::new("empid_Sales", "000223").unwrap()
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_resumed_range_reads_the_same_pages_as_an_unresumed_one() {
    let (index, d) = index("intraresume").await;
    let table = index.table().clone();
    for id in [100, 110, 120, 130, 140, 150, 160] {
        index
            .insert(&employee("Sales", id, "Jones", &format!("e{id}@x")))
            .await
            .unwrap();
    }
    let keys =
        |pages: &[tablekit_azure::Page<tablekit_core::Stored<Employee>>]| -> Vec<Vec<String>> {
            pages
                .iter()
                .map(|p| p.items.iter().map(|s| s.value.id.clone()).collect())
                .collect()
        };
    let range = || {
        index
            .range_by(&d.by_id, "Sales", 100..)
            .unwrap()
            .with_page_size(2)
    };
    let (all, spent) = measured(&table, range().pages().try_collect::<Vec<_>>()).await;
    let all = all.unwrap();
    assert_eq!(spent.requests(), all.len() as u64, "one request per page");
    assert_eq!(
        keys(&all).concat(),
        [
            "000100", "000110", "000120", "000130", "000140", "000150", "000160"
        ]
    );
    assert!(all.len() >= 4, "pages of at most two");

    // The token after the first page, as another process would get it: text.
    let token: tablekit_azure::ContinuationToken = all[0]
        .continuation
        .clone()
        .expect("more pages")
        .to_string()
        .parse()
        .unwrap();
    let rest = range()
        .resume(token.clone())
        .pages()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert_eq!(keys(&rest), keys(&all[1..]));
    // One page at a time, too.
    let second = range().resume(token).page().await.unwrap();
    assert_eq!(keys(&[second]), keys(&all[1..2]));
    // Projected: only the properties asked for are read.
    let ids = index
        .range_by(&d.by_id, "Sales", 100..=120)
        .unwrap()
        .select(["Id"])
        .as_type::<Id>()
        .collect()
        .await
        .unwrap();
    assert_eq!(ids.len(), 3);
    table.delete_table().await.unwrap();
}

/// Just the id, for a projected read.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct Id {
    #[allow(dead_code)]
    id: String,
}

/// An employee whose id is a number: the key is its zero-padded text.
#[derive(Debug, Clone, PartialEq, tablekit::TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Staff {
    department: String,
    id: u32,
    email: String,
}

#[tokio::test]
async fn a_property_and_a_closure_give_the_same_rows() {
    use tablekit_index::{CopySpec, IndexSpec};

    let by_properties = {
        let mut spec = IndexSpec::<Staff>::builder(Staff::DEPARTMENT);
        spec.primary(CopySpec::new("empid", Staff::ID).with_width(6));
        spec.secondary(CopySpec::new("email", Staff::EMAIL));
        spec.build().unwrap()
    };
    let by_closures = {
        let mut spec = IndexSpec::builder(|s: &Staff| s.department.clone());
        spec.primary(CopySpec::new("empid", |s: &Staff| format!("{:06}", s.id)).with_width(6));
        spec.secondary(CopySpec::new("email", |s: &Staff| s.email.clone()));
        spec.build().unwrap()
    };
    let a = IntraPartitionIndex::new(table("intrasrca").await, by_properties);
    let b = IntraPartitionIndex::new(table("intrasrcb").await, by_closures);
    for (id, email) in [(7, "ann@x"), (223, "jun@x"), (999_999, "max@x")] {
        let staff = Staff {
            department: "Sales".into(),
            id,
            email: email.into(),
        };
        a.insert(&staff).await.unwrap();
        b.insert(&staff).await.unwrap();
    }
    let rows = |index: &IntraPartitionIndex<Staff>| {
        let table = index.table().clone();
        async move {
            table
                .query::<Properties>()
                .filter(Filter::partition("Sales"))
                .collect()
                .await
                .unwrap()
                .into_iter()
                .map(|r| (r.keys, r.value))
                .collect::<Vec<_>>()
        }
    };
    let rows_a = rows(&a).await;
    assert_eq!(rows_a.len(), 6);
    assert_eq!(rows_a, rows(&b).await);
    assert!(rows_a.iter().any(|(k, _)| k.rk() == "empid_000007"));
    // An integer lookup is padded to the copy's width, text must have it already.
    let by_number = a.get("Sales", 7).await.unwrap().unwrap();
    let by_text = b.get("Sales", "000007").await.unwrap().unwrap();
    assert_eq!(by_number.value, by_text.value);
    let (r, spent) = measured(a.table(), a.get("Sales", "7")).await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Encode);
    assert_eq!(spent.requests(), 0);
    // A number too wide for its width is refused before any request, both ways.
    let wide = Staff {
        department: "Sales".into(),
        id: 1_000_000,
        email: "wide@x".into(),
    };
    for index in [&a, &b] {
        let (r, spent) = measured(index.table(), index.insert(&wide)).await;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Encode);
        assert_eq!(spent.requests(), 0);
    }
    a.table().delete_table().await.unwrap();
    b.table().delete_table().await.unwrap();
}
