//! `tablekit purge`: delete partitions, or the entities matching a filter, through
//! tablekit's purge (keys only, transactions of 100, re-runnable).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt as _;
use tablekit::azure::{Account, ScanPolicy};
use tablekit::core::filter::Filter;
use tablekit::core::{Properties, QueryShape};
use tablekit::retention::{PurgeOptions, PurgeReport, purge_where};

use super::query::describe_shape;
use super::{Ctx, confirm};
use crate::cli::PurgeArgs;
use crate::exit::{CliError, CliResult, Exit};
use crate::progress::Reporter;

/// Runs `purge`.
///
/// Requests: per filter (each `--partition`, or the one filter), ⌈entities / 1,000⌉ pages of
/// keys and ⌈entities of a partition / 100⌉ transactions per page (see
/// `tablekit::retention::purge_where`); a dry run only the pages of keys.
pub(crate) async fn run(ctx: &Ctx, account: &Account, args: PurgeArgs) -> CliResult {
    let table = account.table(&args.table)?;
    let filter = args
        .filter
        .as_deref()
        .map(|text| {
            let filter = Filter::parse(text)?;
            filter.render()?;
            Ok::<_, tablekit::core::Error>(filter)
        })
        .transpose()
        .map_err(|e| CliError::context("--filter", &e))?;
    let mut filters = Vec::new();
    for pk in &args.partitions {
        let pk = tablekit::core::PartitionKey::new(pk.as_str())
            .map_err(|e| CliError::context("--partition", &e))?;
        let partition = Filter::partition(pk);
        filters.push(match &filter {
            Some(f) => partition.and(f.clone()),
            None => partition,
        });
    }
    if filters.is_empty() {
        filters.extend(filter);
    }
    let scan = filters.iter().any(|f| f.shape() == QueryShape::TableScan);
    if let Some(f) = filters.first() {
        ctx.status(&describe_shape(f.shape(), Some(f)));
    }
    if scan && !args.allow_scan {
        return Err(CliError::usage(
            "this filter reads every partition (no `PartitionKey eq '…'`): pass --allow-scan to run it",
        ));
    }
    let table = if scan {
        let mut settings = account.settings().clone();
        settings.scan_policy = ScanPolicy::allow_all();
        account
            .with_settings(settings)
            .map_err(|e| CliError::context("settings", &e))?
            .table(&args.table)?
    } else {
        table
    };
    let what = match (&args.filter, args.partitions.as_slice()) {
        (None, [pk]) => format!("every entity of partition {pk:?} of {}", args.table),
        (None, pks) => format!("every entity of {} partitions of {}", pks.len(), args.table),
        (Some(f), []) => format!("every entity of {} matching {f}", args.table),
        (Some(f), pks) => format!(
            "every entity of {} partition(s) of {} matching {f}",
            pks.len(),
            args.table
        ),
    };
    if args.dry_run {
        return dry_run(ctx, &table, &filters, &what).await;
    }
    confirm(
        args.yes,
        &format!("delete {what}?"),
        &format!("purging deletes {what}"),
    )?;
    let reporter = Reporter::new("purge", None, ctx.quiet);
    let mut total = PurgeReport::default();
    for filter in filters {
        let seen = Arc::new(AtomicUsize::new(0));
        let options = {
            let reporter = reporter.clone();
            let seen = seen.clone();
            PurgeOptions::default().with_progress(move |p| {
                let before = seen.swap(p.done, Ordering::Relaxed);
                reporter.add(p.done.saturating_sub(before) as u64);
            })
        };
        let report = tokio::select! {
            r = purge_where(&table, filter, options) => r,
            // Safe to stop anywhere: a purge is finished by running it again.
            () = ctx.interrupt.wait() => break,
        };
        match report {
            Ok(r) => total += r,
            Err(e) => {
                reporter.finish();
                return Err(CliError::context(&format!("purging {}", args.table), &e));
            }
        }
    }
    reporter.finish();
    if ctx.interrupt.requested() {
        ctx.status("interrupted: run the same command again to finish the purge");
        return Ok(Exit::Interrupted);
    }
    ctx.summary(
        &format!(
            "purged {} entities from {} ({} already gone); {} transactions",
            total.deleted, args.table, total.already_gone, total.transactions
        ),
        serde_json::json!({
            "table": args.table, "deleted": total.deleted,
            "already_gone": total.already_gone, "scanned": total.scanned,
            "transactions": total.transactions,
        }),
    );
    Ok(Exit::Success)
}

/// Counts the entities the filters select (keys only); deletes nothing.
async fn dry_run(
    ctx: &Ctx,
    table: &tablekit::azure::Table,
    filters: &[Filter],
    what: &str,
) -> CliResult {
    let mut count = 0_u64;
    for filter in filters {
        let mut pages = Box::pin(
            table
                .query::<Properties>()
                .filter(filter.clone())
                .select(Vec::<String>::new())
                .pages(),
        );
        while let Some(page) = pages.next().await {
            let page =
                page.map_err(|e| CliError::context(&format!("reading {}", table.name()), &e))?;
            count += page.items.len() as u64;
            if ctx.interrupt.requested() {
                return Ok(Exit::Interrupted);
            }
        }
    }
    ctx.summary(
        &format!("dry run: would delete {count} entities ({what}); nothing deleted"),
        serde_json::json!({"table": table.name(), "dry_run": true,
            "would_delete": count}),
    );
    Ok(Exit::Success)
}
