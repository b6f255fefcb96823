//! Workload 7: every operation's measured request count next to the count its documentation
//! promises. The documented numbers are copied from each operation's `Requests:` line.

use serde::Serialize;
use tablekit_azure::{Account, MetricsSnapshot};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, IfMatch, Keys, Properties};

use crate::workloads::Result;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct PatternCount {
    pub(crate) operation: String,
    pub(crate) measured: u64,
    pub(crate) documented: u64,
}

/// Measures what `op` costs.
pub(crate) async fn count<
    F: std::future::Future<Output = std::result::Result<T, E>>,
    T,
    E: std::fmt::Display,
>(
    account: &Account,
    operation: &str,
    documented: u64,
    op: F,
) -> Result<PatternCount> {
    let before: MetricsSnapshot = account.metrics().snapshot();
    op.await.map_err(|e| format!("{operation}: {e}"))?;
    let measured = account.metrics().snapshot().since(&before).requests();
    Ok(PatternCount {
        operation: operation.to_owned(),
        measured,
        documented,
    })
}

/// The table operations every pattern is built from.
pub(crate) async fn table_operations(account: &Account) -> Result<Vec<PatternCount>> {
    let table = account
        .table(&tablekit_testkit::unique_table_name("benchcounts"))
        .map_err(|e| e.to_string())?;
    table.create().await.map_err(|e| e.to_string())?;
    let keys = Keys::new("p", "r").map_err(|e| e.to_string())?;
    let value = Properties::new().with("N", 1i64);
    let mut out = vec![
        count(
            account,
            "Table::insert",
            1,
            table.insert(&Entity::new(keys.clone(), value.clone())),
        )
        .await?,
        count(account, "Table::get", 1, table.get::<Properties>(&keys)).await?,
        count(
            account,
            "Table::merge",
            1,
            table.merge(&Entity::new(keys.clone(), value.clone()), IfMatch::Any),
        )
        .await?,
        count(
            account,
            "Table::upsert_replace",
            1,
            table.upsert_replace(&Entity::new(keys.clone(), value.clone())),
        )
        .await?,
        count(
            account,
            "Table::update_with (no conflict)",
            2,
            table.update_with::<Properties, _>(&keys, |p| p.unwrap_or_default()),
        )
        .await?,
    ];
    let plan = BatchPlan::atomic((0..100).map(|i| {
        Operation::insert(&Entity::new(
            Keys::new("b", format!("{i:03}")).expect("keys"),
            Properties::new(),
        ))
        .expect("op")
    }))
    .map_err(|e| e.to_string())?;
    out.push(
        count(
            account,
            "Table::submit (one transaction)",
            1,
            table.submit(&plan),
        )
        .await?,
    );
    let ops = (0..2_500)
        .map(|i| {
            Operation::insert(&Entity::new(
                Keys::new("q", format!("{i:05}")).expect("keys"),
                Properties::new(),
            ))
            .expect("op")
        })
        .collect();
    table
        .bulk_write(ops, Default::default())
        .await
        .map_err(|e| e.to_string())?;
    out.push(
        count(
            account,
            "Table::query, 2,500 entities at 1,000 per page",
            3,
            table
                .query::<Properties>()
                .filter(Filter::partition("q"))
                .with_page_size(1_000)
                .collect(),
        )
        .await?,
    );
    out.push(count(account, "Table::delete_table", 1, table.delete_table()).await?);
    Ok(out)
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    department: String,
    id: String,
    email: String,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Claim {
    amount: i64,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Archive {
    id: String,
}

impl tablekit_eventual::Job for Archive {
    const KIND: &'static str = "bench-archive";
}

async fn fresh(account: &Account, prefix: &str) -> Result<tablekit_azure::Table> {
    let table = account
        .table(&tablekit_testkit::unique_table_name(prefix))
        .map_err(|e| e.to_string())?;
    table.create().await.map_err(|e| e.to_string())?;
    Ok(table)
}

/// Each pattern crate's main operations: measured requests next to their documented counts.
pub(crate) async fn pattern_operations(account: &Account) -> Result<Vec<PatternCount>> {
    use tablekit_index::{CopySpec, IndexRead as _, IndexSpec, IntraPartitionIndex};
    let mut out = Vec::new();
    let e = |s: &str| s.to_owned();

    let table = fresh(account, "benchindex").await?;
    let mut spec = IndexSpec::builder(|x: &Employee| x.department.clone());
    spec.primary(CopySpec::new("empid", |x: &Employee| x.id.clone()).with_width(6));
    let by_email = spec.secondary(CopySpec::new("email", |x: &Employee| x.email.clone()));
    let spec = spec.build().map_err(|x| x.to_string())?;
    let index = IntraPartitionIndex::new(table.clone(), spec);
    let mut jones = Employee {
        department: e("Sales"),
        id: e("000223"),
        email: e("jonesj@contoso.com"),
    };
    out.push(
        count(
            account,
            "IntraPartitionIndex::insert (new entity)",
            1,
            index.insert(&jones),
        )
        .await?,
    );
    jones.email = e("jun.jones@contoso.com");
    out.push(
        count(
            account,
            "IntraPartitionIndex::upsert (indexed value changed)",
            2,
            index.upsert(&jones),
        )
        .await?,
    );
    out.push(
        count(
            account,
            "IntraPartitionIndex::get_by",
            1,
            index.get_by(&by_email, "Sales", "jun.jones@contoso.com"),
        )
        .await?,
    );
    table.delete_table().await.map_err(|x| x.to_string())?;

    let table = fresh(account, "benchtail").await?;
    let tail = tablekit_logtail::LogTail::<Claim>::new(table.clone());
    out.push(
        count(
            account,
            "LogTail::append",
            1,
            tail.append("000223", &Claim { amount: 1 }),
        )
        .await?,
    );
    for amount in 0..20 {
        tail.append("000223", &Claim { amount })
            .await
            .map_err(|x| x.to_string())?;
    }
    out.push(
        count(
            account,
            "LogTail::latest(p, 10)",
            1,
            tail.latest("000223", 10),
        )
        .await?,
    );
    let spread = tablekit_logtail::SpreadLog::<Claim>::new(table.clone(), "net", 4)
        .map_err(|x| x.to_string())?;
    for i in 0..20 {
        spread
            .append(&format!("emp{i}"), &Claim { amount: i })
            .await
            .map_err(|x| x.to_string())?;
    }
    out.push(
        count(
            account,
            "SpreadLog::latest(10), 4 buckets",
            4,
            spread.latest(10),
        )
        .await?,
    );
    table.delete_table().await.map_err(|x| x.to_string())?;

    let table = fresh(account, "benchseries").await?;
    let series =
        tablekit_series::Series::<i64>::new(table.clone(), tablekit_series::SeriesLayout::hours());
    let keys = Keys::new("Sales", "000223").map_err(|x| x.to_string())?;
    out.push(
        count(
            account,
            "Series::upsert_slot",
            1,
            series.upsert_slot(&keys, "H00", 5),
        )
        .await?,
    );
    out.push(
        count(
            account,
            "Series::add (no conflict)",
            2,
            series.add(&keys, "H13", 1),
        )
        .await?,
    );
    out.push(count(account, "Series::get", 1, series.get(&keys)).await?);
    let wide = tablekit_series::WideEntities::new(table.clone());
    let days: Properties = (1..=365)
        .map(|d| (format!("D{d:03}"), tablekit_core::EdmValue::Int64(d)))
        .collect();
    let wide_keys = Keys::new("Sales", "year").map_err(|x| x.to_string())?;
    out.push(
        count(
            account,
            "WideEntities::insert (365 properties, 2 shards)",
            1,
            wide.insert(&Entity::new(wide_keys.clone(), days)),
        )
        .await?,
    );
    out.push(
        count(
            account,
            "WideEntities::get",
            1,
            wide.get::<Properties>(&wide_keys),
        )
        .await?,
    );
    table.delete_table().await.map_err(|x| x.to_string())?;

    let table = fresh(account, "benchlarge").await?;
    let container = account
        .container(&tablekit_testkit::unique_container_name("benchlarge"))
        .map_err(|x| x.to_string())?;
    container.create().await.map_err(|x| x.to_string())?;
    let large = tablekit_large::LargeEntities::builder(table.clone(), container.clone())
        .build()
        .map_err(|x| x.to_string())?;
    out.push(
        count(
            account,
            "LargeEntities::upsert (new entity, 1 MiB)",
            3,
            large.upsert(
                &Entity::new(keys.clone(), Properties::new()),
                vec![7u8; 1 << 20],
            ),
        )
        .await?,
    );
    out.push(
        count(
            account,
            "LargeEntities::get",
            2,
            large.get::<Properties>(&keys),
        )
        .await?,
    );
    container
        .delete_container()
        .await
        .map_err(|x| x.to_string())?;
    table.delete_table().await.map_err(|x| x.to_string())?;

    let queue = account
        .queue(&tablekit_testkit::unique_queue_name("benchjobs"))
        .map_err(|x| x.to_string())?;
    let jobs = tablekit_eventual::JobQueue::<Archive>::new(queue);
    jobs.create().await.map_err(|x| x.to_string())?;
    out.push(
        count(
            account,
            "JobQueue::enqueue",
            1,
            jobs.enqueue(&Archive { id: e("000456") }),
        )
        .await?,
    );
    jobs.delete_queues().await.map_err(|x| x.to_string())?;

    let prefix = format!("Bench{}x", std::process::id());
    let periods =
        tablekit_retention::PeriodTables::new(account, &prefix, tablekit_retention::Period::Day)
            .map_err(|x| x.to_string())?;
    let today = chrono::Utc::now();
    for days_ago in 0..5 {
        periods
            .create_if_not_exists(today - chrono::Duration::days(days_ago))
            .await
            .map_err(|x| x.to_string())?;
    }
    let cutoff = today - chrono::Duration::days(1);
    out.push(
        count(
            account,
            "PeriodTables::drop_older_than (5 daily tables, 3 expired)",
            4,
            periods.drop_older_than(cutoff),
        )
        .await?,
    );
    out.push(
        count(
            account,
            "PeriodTables::drop_older_than (re-run, nothing expired)",
            1,
            periods.drop_older_than(cutoff),
        )
        .await?,
    );
    for t in periods.list().await.map_err(|x| x.to_string())? {
        account
            .table(&t.name)
            .map_err(|x| x.to_string())?
            .delete_table_if_exists()
            .await
            .map_err(|x| x.to_string())?;
    }
    Ok(out)
}
