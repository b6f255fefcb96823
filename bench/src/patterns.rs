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
                .page_size(1_000)
                .collect(),
        )
        .await?,
    );
    out.push(count(account, "Table::delete_table", 1, table.delete_table()).await?);
    Ok(out)
}
