//! The crate docs' tour, run against Azurite through the prelude and the patterns' modules.

use serde::{Deserialize, Serialize};
use tablekit::index::{CopySpec, IndexRead, IndexSpec, IntraPartitionIndex};
use tablekit::logtail::LogTail;
use tablekit::prelude::*;
use tablekit::series::{Series, SeriesLayout};
use tablekit_testkit::{TestStorage, unique_table_name};

#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    department: String,
    id: String,
    email: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Expense {
    amount: i64,
}

#[tokio::test]
async fn the_tour_runs() {
    let account =
        Account::from_connection_string(TestStorage::shared().unwrap().connection_string())
            .unwrap();
    let employees = account.table(&unique_table_name("Employees")).unwrap();
    employees.create_if_not_exists().await.unwrap();
    let mut spec = IndexSpec::builder(|e: &Employee| e.department.clone());
    spec.primary(CopySpec::new("empid", |e: &Employee| e.id.clone()).with_width(6));
    let by_email = spec.secondary(CopySpec::new("email", |e: &Employee| e.email.clone()));
    let spec = spec.build().unwrap();
    let index = IntraPartitionIndex::new(employees.clone(), spec);
    index
        .insert(&Employee {
            department: "Sales".into(),
            id: "000223".into(),
            email: "jonesj@contoso.com".into(),
        })
        .await
        .unwrap();
    let before = account.metrics().snapshot();
    let found = index
        .get_by(&by_email, "Sales", "jonesj@contoso.com")
        .await
        .unwrap()
        .expect("indexed");
    assert_eq!(found.value.id, "000223");
    assert_eq!(account.metrics().snapshot().since(&before).requests(), 1);

    let expenses = account.table(&unique_table_name("Expenses")).unwrap();
    expenses.create_if_not_exists().await.unwrap();
    let log = LogTail::<Expense>::new(expenses.clone());
    for amount in [1, 2, 3] {
        log.append("000223", &Expense { amount }).await.unwrap();
    }
    let latest = log.latest("000223", 10).await.unwrap();
    assert_eq!(
        latest.iter().map(|e| e.value.amount).collect::<Vec<_>>(),
        [3, 2, 1],
        "newest first"
    );

    let counts = account.table(&unique_table_name("ImCounts")).unwrap();
    counts.create_if_not_exists().await.unwrap();
    let series = Series::<i64>::new(counts.clone(), SeriesLayout::hours());
    let keys = Keys::new("Sales", "000223").unwrap();
    series.add(&keys, "H13", 1).await.unwrap();
    assert_eq!(series.add(&keys, "H13", 1).await.unwrap(), 2);
    for t in [employees, expenses, counts] {
        t.delete_table().await.unwrap();
    }
}
