//! Index entities in the entities' partition (option 2) against Azurite: lost ETag races,
//! a value change moving three entities at once, request counts, eight concurrent writers,
//! overflow rows.

mod common;

use std::collections::BTreeSet;

use common::{Employee, employee, measured, table};
use tablekit_azure::{RequestKind, Table, TypedTable};
use tablekit_core::Properties;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{Entity, Error, ErrorKind, IfMatch, Keys, Stored};
use tablekit_index::{ListSpec, SamePartitionList};

fn spec(max_list_bytes: Option<usize>) -> ListSpec<Employee> {
    let mut builder = ListSpec::builder("lastname", Employee::LAST_NAME)
        .with_prefix("lastname_")
        .with_property("EmployeeIDs");
    if let Some(max) = max_list_bytes {
        builder = builder.with_max_list_bytes(max);
    }
    builder.build().unwrap()
}

/// The employees of `table`, read as themselves.
fn employees(table: &Table) -> TypedTable<Employee> {
    table.typed()
}

async fn list(prefix: &str) -> SamePartitionList<Employee> {
    SamePartitionList::new(table(prefix).await, spec(None)).unwrap()
}

async fn row(table: &Table, rk: &str) -> Option<Stored<Properties>> {
    table
        .get::<Properties>(&Keys::new("Sales", rk).unwrap())
        .await
        .unwrap()
}

fn ids_of(row: &Stored<Properties>) -> Vec<String> {
    serde_json::from_str(row.value.get_str("EmployeeIDs").unwrap().unwrap()).unwrap()
}

fn list_row(ids: &[&str]) -> Properties {
    Properties::new().with("EmployeeIDs", serde_json::to_string(ids).unwrap())
}

fn insert_op(e: &Employee) -> Operation {
    Operation::insert(e).unwrap()
}

#[tokio::test]
async fn the_writer_that_loses_the_etag_race_retries_from_the_read() {
    let list = list("list35").await;
    let table = list.table().clone();
    // The first Jones creates the index entity.
    let (r, spent) = measured(&table, list.insert(&employee("Sales", 223, "Jones", "a@x"))).await;
    r.unwrap();
    assert_eq!(
        spent.requests(),
        2,
        "read the (missing) list, one transaction"
    );
    assert_eq!(
        ids_of(&row(&table, "lastname_Jones").await.unwrap()),
        ["000223"]
    );

    // Both writers read Sales/lastname_Jones and keep the same ETag.
    let seen = row(&table, "lastname_Jones").await.unwrap();
    let jones = Keys::new("Sales", "lastname_Jones").unwrap();
    let a = employee("Sales", 152, "Jones", "b@x");
    let b = employee("Sales", 301, "Jones", "c@x");
    let egt = |e: &Employee| {
        let ids = ["000223", e.id.as_str()];
        BatchPlan::atomic([
            insert_op(e),
            Operation::replace(&Entity::new(jones.clone(), list_row(&ids)), seen.if_match())
                .unwrap(),
        ])
        .unwrap()
    };
    table.submit(&egt(&a)).await.unwrap();
    let lost = table.submit(&egt(&b)).await.unwrap_err();
    match &lost {
        Error::BatchFailed { index, source } => {
            assert_eq!(*index, 1, "the index entity's ETag is stale");
            assert_eq!(source.status(), Some(412));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        employees(&table)
            .get(("Sales", "000301"))
            .await
            .unwrap()
            .is_none(),
        "nothing of the losing transaction was applied"
    );
    // The loser starts again from the read — which is what `insert` does.
    let (r, spent) = measured(&table, list.insert(&b)).await;
    r.unwrap();
    assert_eq!(spent.requests(), 2);
    let ids: BTreeSet<String> = ids_of(&row(&table, "lastname_Jones").await.unwrap())
        .into_iter()
        .collect();
    assert_eq!(ids, ["000152", "000223", "000301"].map(String::from).into());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn eight_concurrent_writers_each_end_up_in_the_list_exactly_once() {
    let list = list("list8").await;
    let table = list.table().clone();
    let writers: Vec<_> = (0..8u32)
        .map(|n| {
            let list = list.clone();
            tokio::spawn(async move {
                list.insert(&employee("Sales", 100 + n, "Jones", "j@x"))
                    .await
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    let ids = list.ids("Sales", "Jones").await.unwrap();
    let expected: Vec<String> = (0..8).map(|n| format!("{:06}", 100 + n)).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, expected, "every id exactly once: {ids:?}");
    let spent = table.account().metrics().snapshot();
    assert_eq!(
        spent.requests_of(RequestKind::Transaction),
        8 + spent.conflict_retries
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_last_name_change_moves_three_entities_together_or_not_at_all() {
    let list = list("list36").await;
    let table = list.table().clone();
    let mut jun = employee("Sales", 152, "Jones", "jun@x");
    list.insert(&jun).await.unwrap();
    list.insert(&employee("Sales", 223, "Jones", "a@x"))
        .await
        .unwrap();
    list.insert(&employee("Sales", 10, "Smith", "s@x"))
        .await
        .unwrap();

    // The guide's transaction, built by hand, with one stale ETag among the three.
    let current = employees(&table)
        .get(("Sales", "000152"))
        .await
        .unwrap()
        .unwrap();
    let jones = row(&table, "lastname_Jones").await.unwrap();
    let smith = row(&table, "lastname_Smith").await.unwrap();
    list.insert(&employee("Sales", 11, "Smith", "t@x"))
        .await
        .unwrap(); // Smith's ETag moves on
    let smith_now = row(&table, "lastname_Smith").await.unwrap();
    jun.last_name = "Smith".into();
    let egt = BatchPlan::atomic([
        Operation::replace(&Entity::new(current.keys.clone(), &jun), current.if_match()).unwrap(),
        Operation::replace(
            &Entity::new(jones.keys.clone(), list_row(&["000223"])),
            jones.if_match(),
        )
        .unwrap(),
        Operation::replace(
            &Entity::new(smith.keys.clone(), list_row(&["000010", "000152"])),
            smith.if_match(),
        )
        .unwrap(),
    ])
    .unwrap();
    let err = table.submit(&egt).await.unwrap_err();
    assert!(
        matches!(&err, Error::BatchFailed { index: 2, source } if source.kind() == ErrorKind::PreconditionFailed),
        "{err:?}"
    );
    let unchanged = employees(&table).get(&current.keys).await.unwrap().unwrap();
    assert_eq!(
        (unchanged.value.last_name.as_str(), &unchanged.etag),
        ("Jones", &current.etag)
    );
    assert_eq!(
        row(&table, "lastname_Jones").await.unwrap().etag,
        jones.etag
    );
    assert_eq!(
        row(&table, "lastname_Smith").await.unwrap().etag,
        smith_now.etag
    );

    // `replace` with a stale employee ETag fails whole, too.
    let stale = Stored {
        etag: tablekit_core::ETag::new("W/\"datetime'2000-01-01T00%3A00%3A00Z'\""),
        ..current.clone()
    };
    let err = list.replace(&stale, &jun).await.unwrap_err();
    assert!(
        matches!(&err, Error::BatchFailed { index: 0, .. }),
        "{err:?}"
    );
    assert_eq!(
        list.ids("Sales", "Smith").await.unwrap(),
        ["000010", "000011"]
    );

    // And with fresh ETags the three entities move together.
    let (r, spent) = measured(&table, list.replace(&current, &jun)).await;
    r.unwrap();
    assert_eq!(spent.requests(), 3, "two list reads, one transaction");
    assert_eq!(list.ids("Sales", "Jones").await.unwrap(), ["000223"]);
    assert_eq!(
        list.ids("Sales", "Smith").await.unwrap(),
        ["000010", "000011", "000152"]
    );
    // Back again through `put`: read the employee, both lists, one transaction.
    jun.last_name = "Jones".into();
    let (r, spent) = measured(&table, list.upsert(&jun)).await;
    r.unwrap();
    assert_eq!(spent.requests(), 4);
    assert_eq!(
        list.ids("Sales", "Jones").await.unwrap(),
        ["000223", "000152"]
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn request_counts_of_every_operation() {
    let list = list("listcount").await;
    let table = list.table().clone();
    let mut a = employee("Sales", 152, "Jones", "a@x");
    let (r, spent) = measured(&table, list.upsert(&a)).await;
    r.unwrap();
    assert_eq!(
        (spent.requests_of(RequestKind::Get), spent.requests()),
        (2, 3),
        "put of a new entity"
    );
    a.age = 50;
    let (r, spent) = measured(&table, list.upsert(&a)).await;
    r.unwrap();
    assert_eq!(spent.requests(), 2, "put with the value unchanged");
    list.insert(&employee("Sales", 223, "Jones", "b@x"))
        .await
        .unwrap();

    let (ids, spent) = measured(&table, list.ids("Sales", "Jones")).await;
    assert_eq!(ids.unwrap(), ["000152", "000223"]);
    assert_eq!(spent.requests(), 1, "one point read");
    let (found, spent) = measured(&table, list.lookup("Sales", "Jones").collect()).await;
    let found = found.unwrap();
    assert_eq!(
        found
            .iter()
            .map(|s| s.value.id.as_str())
            .collect::<Vec<_>>(),
        ["000152", "000223"]
    );
    assert_eq!(found[0].value.age, 50);
    assert_eq!(spent.requests(), 3, "the list, then one point read per id");
    let (missing, spent) = measured(&table, list.ids("Sales", "Nobody")).await;
    assert!(missing.unwrap().is_empty());
    assert_eq!(spent.requests(), 1);

    let (gone, spent) = measured(&table, list.delete(("Sales", "000152"), IfMatch::Any)).await;
    gone.unwrap();
    assert_eq!(
        spent.requests(),
        3,
        "entity read, list read, one transaction"
    );
    assert_eq!(list.ids("Sales", "Jones").await.unwrap(), ["000223"]);
    // The entity as read, under its ETag (read again: the ETag must be its own).
    let b = employees(&table)
        .get(("Sales", "000223"))
        .await
        .unwrap()
        .unwrap();
    let (r, spent) = measured(&table, list.delete(&b.value, b.if_match())).await;
    r.unwrap();
    assert_eq!(spent.requests(), 3);
    assert!(
        row(&table, "lastname_Jones").await.is_none(),
        "an emptied list row is deleted"
    );
    // Gone: `delete` says so, `delete_if_exists` answers false.
    let (gone, spent) = measured(&table, list.delete(("Sales", "000223"), IfMatch::Any)).await;
    assert_eq!(gone.unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(spent.requests(), 1);
    let (gone, spent) = measured(&table, list.delete_if_exists(&b.value)).await;
    assert!(!gone.unwrap());
    assert_eq!(spent.requests(), 1);
    // Inserting an existing entity is an error, not a retry.
    list.insert(&a).await.unwrap();
    let err = list.insert(&a).await.unwrap_err();
    assert!(
        matches!(&err, Error::BatchFailed { index: 0, source } if source.kind() == ErrorKind::AlreadyExists)
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn lists_outgrowing_their_row_split_into_numbered_rows() {
    let table = table("listsplit").await;
    let list = SamePartitionList::new(table.clone(), spec(Some(120))).unwrap();
    for n in 0..30 {
        list.insert(&employee("Sales", n, "Jones", "x@x"))
            .await
            .unwrap();
    }
    let rows = table
        .query::<Properties>()
        .filter(tablekit_core::filter::Filter::row_prefix(
            "Sales",
            "lastname_Jones",
        ))
        .collect()
        .await
        .unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r.keys.rk()).collect();
    assert!(
        keys.starts_with(&["lastname_Jones", "lastname_Jones_1", "lastname_Jones_2"]),
        "{keys:?}"
    );
    for r in &rows {
        let text = r.value.get_str("EmployeeIDs").unwrap().unwrap();
        assert!(text.encode_utf16().count() * 2 <= 120, "{text}");
    }
    let (ids, spent) = measured(&table, list.ids("Sales", "Jones")).await;
    let ids = ids.unwrap();
    let expected: Vec<String> = (0..30).map(|n| format!("{n:06}")).collect();
    assert_eq!(ids, expected, "every id once, in insertion order");
    assert_eq!(
        spent.requests(),
        2,
        "the base row, then one range read of the overflow rows"
    );
    assert_eq!(
        list.lookup("Sales", "Jones").collect().await.unwrap().len(),
        30
    );
    // Removing ids from an overflow row and from the base row.
    list.delete(("Sales", "000000"), IfMatch::Any)
        .await
        .unwrap();
    assert!(list.delete_if_exists(("Sales", "000029")).await.unwrap());
    let left = list.ids("Sales", "Jones").await.unwrap();
    assert_eq!(left, expected[1..29].to_vec());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_value_naming_another_entitys_row_key_overwrites_nothing() {
    let list = list("listclash").await;
    let table = list.table().clone();
    // Another writer's entity already sits where the list of `000152` would go.
    let taken = list.list_keys("Sales", "000152").unwrap();
    let other = employee("Sales", 152, "Jones", "other@x");
    table
        .insert(&Entity::new(taken.clone(), &other))
        .await
        .unwrap();
    let before = table.get::<Properties>(&taken).await.unwrap().unwrap();

    let odd = employee("Sales", 223, "000152", "odd@x");
    let (r, spent) = measured(&table, list.insert(&odd)).await;
    let err = r.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err:?}");
    assert!(
        err.to_string().contains(&taken.to_string()),
        "names the row: {err}"
    );
    assert_eq!(
        spent.requests_of(RequestKind::Transaction),
        0,
        "nothing written"
    );
    assert_eq!(spent.entities_written, 0);
    let after = table.get::<Properties>(&taken).await.unwrap().unwrap();
    assert_eq!(after.etag, before.etag, "the entity survives untouched");
    assert_eq!(after.value, before.value);
    assert!(
        employees(&table)
            .get(("Sales", "000223"))
            .await
            .unwrap()
            .is_none()
    );
    // `put` and `ids` read the same row and refuse it the same way.
    let (r, spent) = measured(&table, list.upsert(&odd)).await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Corrupt);
    assert_eq!(spent.requests_of(RequestKind::Transaction), 0);
    assert_eq!(
        list.ids("Sales", "000152").await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
    assert_eq!(
        table.get::<Properties>(&taken).await.unwrap().unwrap().etag,
        before.etag
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn lists_need_a_prefix_and_entities_keep_out_of_it() {
    let table = table("listprefix").await;
    let bare = ListSpec::<Employee>::builder("lastname", Employee::LAST_NAME)
        .build()
        .unwrap();
    let err = SamePartitionList::new(table.clone(), bare).unwrap_err();
    assert!(matches!(&err, Error::InvalidConfig { .. }), "{err:?}");

    let list = SamePartitionList::new(table.clone(), spec(None)).unwrap();
    // An entity whose RowKey starts with the prefix could meet a list: refused unsent.
    let mut inside = employee("Sales", 1, "Jones", "x@x");
    inside.id = "lastname_Smith".into();
    let (r, spent) = measured(&table, async {
        (
            list.insert(&inside).await,
            list.upsert(&inside).await,
            list.delete(("Sales", "lastname_Smith"), IfMatch::Any).await,
        )
    })
    .await;
    assert_eq!(r.0.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(r.1.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(r.2.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(spent.requests(), 0);

    // With the prefix, a last name equal to another employee's id lists beside it.
    list.insert(&employee("Sales", 152, "Jones", "a@x"))
        .await
        .unwrap();
    list.insert(&employee("Sales", 223, "000152", "b@x"))
        .await
        .unwrap();
    assert_eq!(list.ids("Sales", "000152").await.unwrap(), ["000223"]);
    assert_eq!(list.ids("Sales", "Jones").await.unwrap(), ["000152"]);
    let kept = employees(&table)
        .get(("Sales", "000152"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.value.last_name, "Jones");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_partition_change_moves_the_entity_and_its_list_entry_or_nothing() {
    let list = list("listmove").await;
    let table = list.table().clone();
    let mut jun = employee("Sales", 152, "Jones", "a@x");
    list.insert(&jun).await.unwrap();
    list.insert(&employee("Sales", 223, "Jones", "b@x"))
        .await
        .unwrap();
    let sales_152 = Keys::new("Sales", "000152").unwrap();
    let marketing_152 = Keys::new("Marketing", "000152").unwrap();
    let current = employees(&table).get(&sales_152).await.unwrap().unwrap();
    jun.department = "Marketing".into();

    // `replace` keeps an entity in its partition: refused unsent, pointing at `relocate`.
    let (r, spent) = measured(&table, list.replace(&current, &jun)).await;
    let err = r.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("relocate"), "{err}");
    assert_eq!(spent.requests(), 0);

    // `relocate`: inserted and listed in Marketing, then deleted and unlisted in Sales.
    let (r, spent) = measured(&table, list.relocate(&current, &jun)).await;
    let etag = r.unwrap();
    assert_eq!(spent.requests_of(RequestKind::Transaction), 2);
    assert_eq!(
        spent.requests(),
        4,
        "a list read and a transaction per partition"
    );
    assert!(employees(&table).get(&sales_152).await.unwrap().is_none());
    assert_eq!(list.ids("Sales", "Jones").await.unwrap(), ["000223"]);
    assert_eq!(list.ids("Marketing", "Jones").await.unwrap(), ["000152"]);
    let moved = employees(&table)
        .get(&marketing_152)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((&moved.value, &moved.etag), (&jun, &etag));

    // A stale `current`: the second step fails, the first is undone, nothing moves.
    let mut renamed = jun.clone();
    renamed.first_name = "Ana".into();
    list.upsert(&renamed).await.unwrap();
    let mut back = renamed.clone();
    back.department = "Sales".into();
    let (r, spent) = measured(&table, list.relocate(&moved, &back)).await;
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
    assert!(employees(&table).get(&sales_152).await.unwrap().is_none());
    assert_eq!(list.ids("Sales", "Jones").await.unwrap(), ["000223"]);
    assert_eq!(list.ids("Marketing", "Jones").await.unwrap(), ["000152"]);
    let kept = employees(&table)
        .get(&marketing_152)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.value, renamed);

    // The new partition already holds the id: refused at the first step, nothing written.
    let lee = employee("Sales", 152, "Lee", "c@x");
    list.insert(&lee).await.unwrap();
    let lee_current = employees(&table).get(&sales_152).await.unwrap().unwrap();
    let mut lee_moved = lee.clone();
    lee_moved.department = "Marketing".into();
    let (r, spent) = measured(&table, list.relocate(&lee_current, &lee_moved)).await;
    let err = r.unwrap_err();
    assert!(
        matches!(&err, Error::BatchFailed { index: 0, source } if source.kind() == ErrorKind::AlreadyExists),
        "{err:?}"
    );
    assert_eq!(spent.requests_of(RequestKind::Transaction), 1);
    assert_eq!(list.ids("Sales", "Lee").await.unwrap(), ["000152"]);
    assert!(list.ids("Marketing", "Lee").await.unwrap().is_empty());
    assert_eq!(
        employees(&table)
            .get(&marketing_152)
            .await
            .unwrap()
            .unwrap(),
        kept
    );
    table.delete_table().await.unwrap();
}

/// The ids of a page, in its order.
fn page_ids(items: &[Stored<Employee>]) -> Vec<&str> {
    items.iter().map(|s| s.value.id.as_str()).collect()
}

#[tokio::test]
async fn a_lookup_is_lazy_paged_in_key_order_and_resumable_elsewhere() {
    let list = list("list_lookup_pages").await;
    let table = list.table().clone();
    // Listed in insertion order; a lookup reads them in RowKey order.
    for id in [7, 3, 12, 5, 9] {
        list.insert(&employee("Sales", id, "Jones", "j@x"))
            .await
            .unwrap();
    }
    list.insert(&employee("Sales", 4, "Smith", "s@x"))
        .await
        .unwrap();
    assert_eq!(
        list.ids("Sales", "Jones").await.unwrap(),
        ["000007", "000003", "000012", "000005", "000009"]
    );

    // Building it sends nothing; one page reads the list and its entries' entities.
    let lookup = list.lookup("Sales", "Jones").with_page_size(2);
    let (page, spent) = measured(&table, lookup.page()).await;
    let page = page.unwrap();
    assert_eq!(page_ids(&page.items), ["000003", "000005"]);
    assert_eq!(
        spent.requests(),
        3,
        "the list, then one point read per entry"
    );
    let token = page.continuation.expect("more entries");
    assert_eq!(token.to_string(), "Sales/000005");

    // The token resumes it after a trip through text or serde, as in another process.
    let token: tablekit_index::LookupToken = token.to_string().parse().unwrap();
    let (page, spent) = measured(&table, lookup.clone().resume(token.clone()).page()).await;
    let page = page.unwrap();
    assert_eq!(page_ids(&page.items), ["000007", "000009"]);
    assert_eq!(spent.requests(), 3);
    let token = serde_json::from_str(&serde_json::to_string(&page.continuation).unwrap()).unwrap();
    let (page, spent) = measured(&table, lookup.clone().resume(token).page()).await;
    let page = page.unwrap();
    assert_eq!(page_ids(&page.items), ["000012"]);
    assert!(page.is_last());
    assert_eq!(spent.requests(), 2);

    // A stream of pages reads the list once.
    let (pages, spent) = measured(
        &table,
        futures::TryStreamExt::try_collect::<Vec<_>>(lookup.clone().pages()),
    )
    .await;
    let pages = pages.unwrap();
    let sizes: Vec<usize> = pages.iter().map(|p| p.items.len()).collect();
    assert_eq!(sizes, [2, 2, 1]);
    assert!(pages[2].is_last() && !pages[1].is_last());
    assert_eq!(
        spent.requests(),
        1 + 5,
        "one list read, one point read per entry"
    );

    // `first` reads entries one at a time; an entry whose entity is gone is left out.
    let (first, spent) = measured(&table, lookup.clone().first()).await;
    assert_eq!(first.unwrap().unwrap().value.id, "000003");
    assert_eq!(spent.requests(), 2);
    table
        .delete(("Sales", "000003"), IfMatch::Any)
        .await
        .unwrap();
    let (first, spent) = measured(&table, lookup.clone().first()).await;
    assert_eq!(first.unwrap().unwrap().value.id, "000005");
    assert_eq!(spent.requests(), 3);
    let (page, _) = measured(&table, lookup.page()).await;
    let page = page.unwrap();
    assert_eq!(page_ids(&page.items), ["000005"], "a short page");
    assert!(!page.is_last(), "and still a continuation");

    // A value without a list: one empty page.
    let (pages, spent) = measured(
        &table,
        futures::TryStreamExt::try_collect::<Vec<_>>(list.lookup("Sales", "Nobody").pages()),
    )
    .await;
    let pages = pages.unwrap();
    assert!(pages.len() == 1 && pages[0].items.is_empty() && pages[0].is_last());
    assert_eq!(spent.requests(), 1);

    // Bad page sizes and bad keys are refused before any request.
    for size in [0, 1001] {
        let (r, spent) = measured(
            &table,
            list.lookup("Sales", "Jones").with_page_size(size).collect(),
        )
        .await;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidArgument, "{size}");
        assert_eq!(spent.requests(), 0);
    }
    let (r, spent) = measured(&table, list.lookup("Sales/Marketing", "Jones").page()).await;
    assert_eq!(
        r.unwrap_err().kind(),
        ErrorKind::InvalidInput,
        "not a PartitionKey"
    );
    assert_eq!(spent.requests(), 0);
    assert!("no-slash".parse::<tablekit_index::LookupToken>().is_err());
    table.delete_table().await.unwrap();
}
