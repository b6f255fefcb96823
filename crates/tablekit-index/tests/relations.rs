//! Denormalized copies, compound keys and heterogeneous rows against Azurite.

mod common;

use common::{Employee, employee, measured, table};
use serde::{Deserialize, Serialize};
use tablekit::TableEntity;
use tablekit_azure::{Query, RequestKind, Table, TypedTable};
use tablekit_core::Properties;
use tablekit_core::batch::BatchPlan;
use tablekit_core::filter::{Filter, ROW_KEY};
use tablekit_core::keys::CompoundKey;
use tablekit_core::{ENTITY_TYPE, Entity, Error, ErrorKind, IfMatch, Keys, OrUnknown, Stored};
use tablekit_index::{CompoundRows, DenormalizedCopy, EntityKind, SourceWrite, TypedRows};

/// A department: among its employees as a typed row (`Sales/DEPARTMENT_Sales`), or as the
/// target of a denormalized copy at keys of the test's choosing.
#[derive(Debug, Clone, Default, PartialEq, TableEntity)]
#[table(partition_key = "{name}", row_key = "DEPARTMENT_{name}")]
struct Department {
    name: String,
    manager_id: String,
    #[serde(default)]
    manager_name: String,
    #[serde(default)]
    manager_email: String,
    #[serde(default)]
    employee_count: i64,
}

fn departments(table: &Table) -> TypedTable<Department> {
    table.typed()
}

fn employees(table: &Table) -> TypedTable<Employee> {
    table.typed()
}

fn manager_copy(table: &Table) -> DenormalizedCopy<Employee, Department> {
    DenormalizedCopy::new(
        table.clone(),
        |_: Option<&Employee>, manager: &Employee, department: &mut Department| {
            department.manager_name = format!("{} {}", manager.first_name, manager.last_name);
            department.manager_email = manager.email.clone();
        },
    )
}

#[tokio::test]
async fn the_department_carries_its_managers_details_in_step() {
    let table = table("denorm").await;
    let department = Keys::new("Sales", "Department").unwrap();
    let sales = Department {
        name: "Sales".into(),
        manager_id: "000223".into(),
        ..Department::default()
    };
    table
        .insert(&Entity::new(department.clone(), &sales))
        .await
        .unwrap();
    let copy = manager_copy(&table);
    let mut manager = employee("Sales", 223, "Jones", "jonesj@contoso.com");
    let keys = Keys::new("Sales", "000223").unwrap();

    let (written, spent) = measured(
        &table,
        copy.write(&manager, SourceWrite::Insert, &department),
    )
    .await;
    let written = written.unwrap();
    assert_eq!(spent.requests(), 2, "read the department, one transaction");
    let (read, spent) = measured(&table, departments(&table).get(&department)).await;
    let read = read.unwrap().unwrap();
    assert_eq!(spent.requests(), 1, "one point read answers everything");
    assert_eq!(
        (
            read.value.manager_name.as_str(),
            read.value.manager_email.as_str()
        ),
        ("Jun Jones", "jonesj@contoso.com")
    );
    assert_eq!(read.etag, written.target);

    // A new email goes to both entities at once, conditioned on the manager's ETag.
    manager.email = "jun@contoso.com".into();
    let entity = manager.clone();
    let written = copy
        .write(
            &entity,
            SourceWrite::Replace(written.source.clone().into()),
            &department,
        )
        .await
        .unwrap();
    assert_eq!(
        departments(&table)
            .get(&department)
            .await
            .unwrap()
            .unwrap()
            .value
            .manager_email,
        "jun@contoso.com"
    );
    // A stale source ETag refuses the whole transaction.
    let stale = copy
        .write(
            &entity,
            SourceWrite::Replace(read.etag.clone().into()),
            &department,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&stale, Error::BatchFailed { index: 0, source } if source.kind() == ErrorKind::PreconditionFailed),
        "{stale:?}"
    );
    assert_eq!(
        departments(&table)
            .get(&department)
            .await
            .unwrap()
            .unwrap()
            .etag,
        written.target
    );

    // The manager changed behind the copy's back: refresh copies the current data.
    table
        .upsert_replace(&Employee {
            last_name: "Smith".into(),
            ..manager
        })
        .await
        .unwrap();
    let (r, spent) = measured(&table, copy.refresh(&keys, &department)).await;
    r.unwrap();
    assert_eq!(spent.requests(), 3, "two reads, one transaction");
    assert_eq!(
        departments(&table)
            .get(&department)
            .await
            .unwrap()
            .unwrap()
            .value
            .manager_name,
        "Jun Smith"
    );

    // Source and target in different partitions cannot share a transaction: refused unsent.
    let elsewhere = Keys::new("Marketing", "Department").unwrap();
    let (r, spent) = measured(&table, copy.write(&entity, SourceWrite::Upsert, &elsewhere)).await;
    assert!(matches!(
        r.unwrap_err(),
        Error::CrossPartitionTransaction { .. }
    ));
    assert_eq!(spent.requests(), 0);
    // A missing target is an error, and nothing is written.
    let nowhere = Keys::new("Sales", "Nowhere").unwrap();
    let other = employee("Sales", 999, "X", "x@x");
    assert_eq!(
        copy.write(&other, SourceWrite::Insert, &nowhere)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert!(employees(&table).get(&other).await.unwrap().is_none());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_summary_count_stays_exact_under_concurrent_inserts() {
    let table = table("denormcount").await;
    let department = Keys::new("Sales", "Department").unwrap();
    table
        .insert(&Entity::new(department.clone(), Department::default()))
        .await
        .unwrap();
    let count = DenormalizedCopy::new(
        table.clone(),
        |before: Option<&Employee>, _: &Employee, d: &mut Department| {
            if before.is_none() {
                d.employee_count += 1
            }
        },
    );
    let writers: Vec<_> = (0..8u32)
        .map(|n| {
            let (count, department) = (count.clone(), department.clone());
            tokio::spawn(async move {
                let e = employee("Sales", n, "Jones", "j@x");
                count.write(&e, SourceWrite::Insert, &department).await
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    assert_eq!(
        departments(&table)
            .get(&department)
            .await
            .unwrap()
            .unwrap()
            .value
            .employee_count,
        8
    );
    table.delete_table().await.unwrap();
}

async fn employee_count(table: &Table, department: &Keys) -> i64 {
    departments(table)
        .get(department)
        .await
        .unwrap()
        .unwrap()
        .value
        .employee_count
}

#[tokio::test]
async fn a_summary_count_moves_only_when_a_source_is_new() {
    let table = table("denormexact").await;
    let department = Keys::new("Sales", "Department").unwrap();
    table
        .insert(&Entity::new(department.clone(), Department::default()))
        .await
        .unwrap();
    let count = DenormalizedCopy::new(
        table.clone(),
        |before: Option<&Employee>, _: &Employee, d: &mut Department| {
            if before.is_none() {
                d.employee_count += 1
            }
        },
    );
    let mut e = employee("Sales", 1, "Jones", "j@x");
    let first = count
        .write(&e, SourceWrite::Upsert, &department)
        .await
        .unwrap();
    assert_eq!(employee_count(&table, &department).await, 1, "a new source");

    // Rewriting the same employee, by upsert or by replace, leaves the count alone.
    e.age = 35;
    let (r, spent) = measured(&table, count.write(&e, SourceWrite::Upsert, &department)).await;
    r.unwrap();
    assert_eq!(spent.requests_of(RequestKind::Transaction), 1);
    assert_eq!(
        spent.requests(),
        3,
        "source and target read, one transaction"
    );
    assert_eq!(employee_count(&table, &department).await, 1, "upsert");
    let stored = employees(&table).get(&e).await.unwrap().unwrap();
    assert_ne!(stored.etag, first.source);
    e.age = 36;
    count
        .write(
            &e,
            SourceWrite::Replace(stored.etag.clone().into()),
            &department,
        )
        .await
        .unwrap();
    assert_eq!(employee_count(&table, &department).await, 1, "replace");
    e.age = 37;
    count
        .write(&e, SourceWrite::Replace(IfMatch::Any), &department)
        .await
        .unwrap();
    assert_eq!(
        employee_count(&table, &department).await,
        1,
        "replace, any ETag"
    );
    // A second employee counts.
    count
        .write(
            &employee("Sales", 2, "Lee", "l@x"),
            SourceWrite::Upsert,
            &department,
        )
        .await
        .unwrap();
    assert_eq!(employee_count(&table, &department).await, 2);
    // Replacing a source that does not exist writes nothing.
    let (r, spent) = measured(
        &table,
        count.write(
            &employee("Sales", 3, "Cao", "c@x"),
            SourceWrite::Replace(IfMatch::Any),
            &department,
        ),
    )
    .await;
    let err = r.unwrap_err();
    assert!(
        matches!(&err, Error::BatchFailed { index: 0, source } if source.kind() == ErrorKind::NotFound),
        "{err:?}"
    );
    assert_eq!(spent.requests_of(RequestKind::Transaction), 0);
    assert_eq!(employee_count(&table, &department).await, 2);
    // Two writers upserting each of five new employees at once: each counted once.
    let writers: Vec<_> = (0..10u32)
        .map(|n| {
            let (count, department) = (count.clone(), department.clone());
            let e = employee("Sales", 10 + n % 5, "Jones", &format!("{n}@x"));
            tokio::spawn(async move { count.write(&e, SourceWrite::Upsert, &department).await })
        })
        .collect();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    assert_eq!(employee_count(&table, &department).await, 7);
    table.delete_table().await.unwrap();
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Review {
    manager_rating: i32,
    peer_rating: i32,
    comments: String,
}

fn review(n: i32) -> Review {
    Review {
        manager_rating: n,
        peer_rating: n + 1,
        comments: format!("year {n}"),
    }
}

#[tokio::test]
async fn compound_keys_group_an_employee_with_its_reviews() {
    let table = table("compound").await;
    let rows = CompoundRows::new(
        table.clone(),
        CompoundKey::new('_').with_width(1, 6).with_width(2, 4),
    );
    let (r, spent) = measured(
        &table,
        rows.upsert(
            "Sales",
            ["empid", "123"],
            &employee("Sales", 123, "Jones", "a@x"),
        ),
    )
    .await;
    r.unwrap();
    assert_eq!(spent.requests(), 1);
    rows.upsert(
        "Sales",
        ["empid", "124"],
        &employee("Sales", 124, "Hall", "b@x"),
    )
    .await
    .unwrap();
    // An employee and a review written in one transaction.
    let plan = BatchPlan::atomic([
        rows.insert_operation("Sales", ["empid", "123", "2012"], &review(3))
            .unwrap(),
        rows.insert_operation("Sales", ["empid", "123", "2013"], &review(4))
            .unwrap(),
        rows.insert_operation("Sales", ["empid", "124", "2012"], &review(5))
            .unwrap(),
    ])
    .unwrap();
    table.submit(&plan).await.unwrap();

    let employee_123: Query<Properties> = rows.with_prefix("Sales", ["empid", "123"]).unwrap();
    let (found, spent) = measured(&table, employee_123.collect()).await;
    let keys: Vec<String> = found
        .unwrap()
        .into_iter()
        .map(|r| r.keys.rk().to_owned())
        .collect();
    assert_eq!(
        keys,
        ["empid_000123", "empid_000123_2012", "empid_000123_2013"]
    );
    assert_eq!(spent.requests(), 1);
    // An employee and its reviews, as the guide writes the filter.
    let literal = Filter::partition("Sales")
        .and(Filter::ge(ROW_KEY, "empid_000123"))
        .and(Filter::lt(ROW_KEY, "empid_000124"));
    let same = table
        .query::<Properties>()
        .filter(literal.clone())
        .collect()
        .await
        .unwrap();
    assert_eq!(same.iter().map(|r| r.keys.rk()).collect::<Vec<_>>(), keys);
    // One translation of the guide ends at 'lt 000123_2012', below its lower bound: no rows.
    let below = Filter::partition("Sales")
        .and(Filter::ge(ROW_KEY, "empid_000123"))
        .and(Filter::lt(ROW_KEY, "000123_2012"));
    assert!(
        table
            .query::<Properties>()
            .filter(below)
            .collect()
            .await
            .unwrap()
            .is_empty()
    );

    // The projection, with valid property names; the guide's `Manager Rating` is refused
    // before any request.
    let projected = table
        .query::<Properties>()
        .filter(literal.clone())
        .select(["RowKey", "ManagerRating", "PeerRating", "Comments"])
        .collect()
        .await
        .unwrap();
    assert!(
        projected[1].value.contains("ManagerRating") && !projected[1].value.contains("LastName")
    );
    let (r, spent) = measured(
        &table,
        table
            .query::<Properties>()
            .filter(literal)
            .select(["Manager Rating"])
            .collect(),
    )
    .await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(spent.requests(), 0);

    let (one, spent) = measured(&table, rows.get("Sales", ["empid", "123", "2013"])).await;
    let one: Stored<Review> = one.unwrap().unwrap();
    assert_eq!(one.value, review(4));
    assert_eq!(spent.requests(), 1, "{spent:?}");
    assert_eq!(
        rows.components("empid_000123_2013").unwrap(),
        ["empid", "000123", "2013"]
    );
    let (gone, spent) = measured(
        &table,
        rows.delete("Sales", ["empid", "123", "2013"], IfMatch::Any),
    )
    .await;
    gone.unwrap();
    assert_eq!(spent.requests(), 1, "{spent:?}");
    // Gone: `delete` says so, `delete_if_exists` answers false.
    let gone = rows.delete("Sales", ["empid", "123", "2013"], IfMatch::Any);
    assert_eq!(gone.await.unwrap_err().kind(), ErrorKind::NotFound);
    let gone = rows.delete_if_exists("Sales", ["empid", "123", "2013"]);
    assert!(!gone.await.unwrap());
    table.delete_table().await.unwrap();
}

#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "EMPLOYEE_{id}")]
struct Staff {
    department: String,
    id: String,
    first_name: String,
    last_name: String,
}

impl EntityKind for Staff {
    const ENTITY_TYPE: &'static str = "Employee";
    const ROW_PREFIX: &'static str = "EMPLOYEE_";
}

impl EntityKind for Department {
    const ENTITY_TYPE: &'static str = "Department";
    const ROW_PREFIX: &'static str = "DEPARTMENT_";
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "EntityType")]
enum Row {
    Employee(Staff),
    Department(Department),
}

fn staff(id: &str, last: &str) -> Staff {
    Staff {
        department: "Sales".into(),
        id: id.into(),
        first_name: "Jun".into(),
        last_name: last.into(),
    }
}

#[tokio::test]
async fn employees_and_departments_share_a_partition_each_type_contiguous() {
    let table = table("hetero").await;
    let rows = TypedRows::new(table.clone());
    let sales = Department {
        name: "Sales".into(),
        manager_id: "000223".into(),
        employee_count: 3,
        ..Department::default()
    };
    // Mixed types in one transaction: they share the partition.
    let plan = BatchPlan::atomic([
        TypedRows::insert_operation(&staff("000223", "Jones")).unwrap(),
        TypedRows::insert_operation(&sales).unwrap(),
        TypedRows::insert_operation(&staff("000123", "Hall")).unwrap(),
    ])
    .unwrap();
    table.submit(&plan).await.unwrap();
    let (r, spent) = measured(&table, rows.insert(&staff("000300", "Cao"))).await;
    r.unwrap();
    assert_eq!(spent.requests(), 1);
    // Another type the reader does not know.
    let project = Entity::new(
        Keys::new("Sales", "PROJECT_apollo").unwrap(),
        Properties::new()
            .with(ENTITY_TYPE, "Project")
            .with("Budget", 5i64),
    );
    table.insert(&project).await.unwrap();

    let (staff_rows, spent) = measured(&table, rows.of_kind("Sales").collect()).await;
    let staff_rows: Vec<Stored<Staff>> = staff_rows.unwrap();
    assert_eq!(spent.requests(), 1, "one range query, no other type read");
    let names: Vec<&str> = staff_rows
        .iter()
        .map(|s| s.value.last_name.as_str())
        .collect();
    assert_eq!(names, ["Hall", "Jones", "Cao"], "in id order");

    let (all, spent) = measured(&table, rows.all("Sales").collect()).await;
    let all: Vec<Stored<OrUnknown<Row>>> = all.unwrap();
    assert_eq!(spent.requests(), 1, "one partition query");
    let kinds: Vec<&str> = all
        .iter()
        .map(|s| match &s.value {
            OrUnknown::Known(Row::Department(_)) => "Department",
            OrUnknown::Known(Row::Employee(_)) => "Employee",
            OrUnknown::Unknown(props) => props.get_str(ENTITY_TYPE).unwrap().unwrap(),
        })
        .collect();
    assert_eq!(
        kinds,
        ["Department", "Employee", "Employee", "Employee", "Project"]
    );
    assert!(matches!(&all[0].value, OrUnknown::Known(Row::Department(d)) if *d == sales));

    let renamed = Department {
        employee_count: 4,
        ..sales.clone()
    };
    let (r, spent) = measured(&table, rows.upsert(&renamed)).await;
    r.unwrap();
    assert_eq!(spent.requests(), 1);
    let sales = renamed;
    // One row, addressed as every method that addresses one entity is: by its keys, a
    // (PartitionKey, RowKey) pair or the value itself.
    let keys = TypedRows::keys::<Department>("Sales", "Sales").unwrap();
    let (d, spent) = measured(&table, rows.get(&keys)).await;
    let d: Stored<Department> = d.unwrap().unwrap();
    assert_eq!(d.value, sales);
    assert_eq!(spent.requests(), 1);
    let by_pair: Option<Stored<Department>> =
        rows.get(("Sales", "DEPARTMENT_Sales")).await.unwrap();
    let by_value: Option<Stored<Department>> = rows.get(&sales).await.unwrap();
    assert_eq!(by_pair.unwrap().value, sales);
    assert_eq!(by_value.unwrap().value, sales);
    let none: Option<Stored<Department>> = rows.get(("Sales", "DEPARTMENT_None")).await.unwrap();
    assert!(none.is_none());
    // Keys outside the kind's prefix, or not keys at all, are refused before any request.
    let (outside, spent) = measured(&table, rows.get::<Department>(("Sales", "Sales"))).await;
    assert_eq!(outside.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(spent.requests(), 0);
    let (bad, spent) = measured(&table, rows.get::<Department>(("Sales", "DEPARTMENT_a/b"))).await;
    assert_eq!(bad.unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(spent.requests(), 0);
    // A row whose EntityType does not match the kind asked for is an error, not a guess.
    let liar = Entity::new(
        TypedRows::keys::<Department>("Sales", "Fake").unwrap(),
        Properties::new()
            .with(ENTITY_TYPE, "Employee")
            .with("Name", "x"),
    );
    table.insert(&liar).await.unwrap();
    let fake: tablekit_core::Result<Option<Stored<Department>>> = rows.get(&liar.keys).await;
    assert_eq!(fake.unwrap_err().kind(), ErrorKind::Decode);
    // A value whose keys lie outside its kind's prefix is refused before any request.
    let outside = Department {
        name: "Sales".into(),
        ..Department::default()
    };
    let (r, spent) = measured(&table, rows.insert(&Mislabelled(outside))).await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(spent.requests(), 0);
    table.delete_table().await.unwrap();
}

/// A department whose keys forget its kind's prefix.
#[derive(Debug, Serialize, Deserialize)]
struct Mislabelled(Department);

impl tablekit_core::TableEntity for Mislabelled {
    fn keys(&self) -> tablekit_core::Result<Keys> {
        Keys::new(&self.0.name, &self.0.name)
    }
}

impl EntityKind for Mislabelled {
    const ENTITY_TYPE: &'static str = "Department";
    const ROW_PREFIX: &'static str = "DEPARTMENT_";
}
