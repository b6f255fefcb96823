//! Rewriting copies from their primaries in bulk: repair after an audit, and backfill of a
//! newly declared copy.

use futures::{StreamExt as _, TryStreamExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::{BulkOptions, OperationOutcome, Table};
use tablekit_core::Properties;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::edm::from_properties;
use tablekit_core::filter::{Filter, ROW_KEY};
use tablekit_core::keys::prefix_range;
use tablekit_core::limits::{MAX_TRANSACTION_BYTES, MAX_TRANSACTION_OPERATIONS};
use tablekit_core::{Error, ErrorKind, IfMatch, Result, Stored};

use super::IntraPartitionIndex;
use super::plan::{self, Plan, Role};
use crate::backfill::{self, BackfillOptions, BackfillState, Checkpoint, PageOutcome};
use crate::spec::Layout;
use crate::verify::RepairReport;

/// Room left in a transaction body for the multipart framing of each operation.
const FRAMING_BYTES: usize = 1024;

/// Packs family plans into transactions — one partition each, at most 100 operations and
/// under 4 MiB, a family never split — and submits them with bounded concurrency. A family
/// whose guard fails (a writer changed the entity since it was read) is left out and the rest
/// sent again. Returns the families written and left out, and the transactions sent.
pub(crate) async fn submit_families(
    table: &Table,
    plans: Vec<Plan>,
    concurrency: usize,
) -> Result<PageOutcome> {
    let mut chunks: Vec<(String, Vec<Plan>, usize, usize)> = Vec::new();
    for plan in plans {
        let pk = plan.ops[0].keys().pk().to_owned();
        let ops = plan.ops.len();
        let bytes: usize = plan
            .ops
            .iter()
            .map(|op| op.body().map_or(0, <[u8]>::len) + FRAMING_BYTES)
            .sum();
        let fits = |c: &(String, Vec<Plan>, usize, usize)| {
            c.0 == pk
                && c.2 + ops <= MAX_TRANSACTION_OPERATIONS
                && c.3 + bytes < MAX_TRANSACTION_BYTES
        };
        match chunks.iter_mut().rev().find(|c| fits(c)) {
            Some(chunk) => {
                chunk.1.push(plan);
                chunk.2 += ops;
                chunk.3 += bytes;
            }
            None => chunks.push((pk, vec![plan], ops, bytes)),
        }
    }
    futures::stream::iter(chunks)
        .map(|(_, families, _, _)| submit_chunk(table, families))
        .buffer_unordered(concurrency.max(1))
        .try_fold(PageOutcome::default(), |sum, chunk| async move {
            Ok(PageOutcome {
                written: sum.written + chunk.written,
                skipped: sum.skipped + chunk.skipped,
                requests: sum.requests + chunk.requests,
            })
        })
        .await
}

async fn submit_chunk(table: &Table, mut families: Vec<Plan>) -> Result<PageOutcome> {
    let mut outcome = PageOutcome::default();
    while !families.is_empty() {
        outcome.requests += 1;
        let ops: Vec<Operation> = families
            .iter()
            .flat_map(|p| p.ops.iter().cloned())
            .collect();
        match table.submit(&BatchPlan::atomic(ops)?).await {
            Ok(_) => {
                outcome.written = families.len() as u64;
                return Ok(outcome);
            }
            Err(Error::BatchFailed { index, source }) => {
                let mut offset = 0;
                let mut at = None;
                for (f, plan) in families.iter().enumerate() {
                    if index < offset + plan.ops.len() {
                        at = Some((f, index - offset));
                        break;
                    }
                    offset += plan.ops.len();
                }
                let Some((f, op)) = at else {
                    return Err(Error::BatchFailed { index, source });
                };
                match (families[f].roles[op], source.kind()) {
                    (Role::Guard, ErrorKind::PreconditionFailed | ErrorKind::NotFound) => {
                        families.remove(f);
                        outcome.skipped += 1;
                    }
                    (Role::Release, ErrorKind::NotFound) => families[f].without(op),
                    _ => return Err(Error::BatchFailed { index, source }),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(outcome)
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> IntraPartitionIndex<T> {
    /// Audits one partition (as [`verify`](Self::verify)) and fixes what it found: every
    /// entity with a missing or stale copy gets all its copies rewritten from its primary, in
    /// transactions guarded by the primary's ETag (an entity written since the audit is left
    /// alone: that write fixed it); orphaned copies are deleted under the ETag they were read
    /// with. Contested copies (two entities, one value) are reported, not touched.
    ///
    /// **Requests:** the audit's (one range query per copy per page), plus one transaction
    /// per up to 100 rewritten copies, plus one per up to 100 orphans. **Consistency:** safe
    /// alongside concurrent writers.
    ///
    /// # Errors
    /// As [`verify`](Self::verify); transport and service errors, including an orphan delete
    /// whose outcome is unknown (run the repair again: it audits afresh).
    pub async fn repair(&self, partition: &str) -> Result<RepairReport> {
        // The partition is not recorded: keys may be personal data.
        let span = tablekit_azure::step_span("index repair", self.table().name());
        tracing::Instrument::instrument(self.repair_partition(partition), span).await
    }

    async fn repair_partition(&self, partition: &str) -> Result<RepairReport> {
        let audit = self.audit(partition).await?;
        let mut report = RepairReport {
            found: audit.report,
            ..RepairReport::default()
        };
        let plans = audit
            .broken
            .iter()
            .map(|b| plan::rewrite(&b.family, &b.primary.etag, None))
            .collect::<Result<Vec<_>>>()?;
        if !plans.is_empty() {
            let concurrency = self.table().account().settings().concurrency;
            let outcome = submit_families(self.table(), plans, concurrency).await?;
            report.rewritten = outcome.written as usize;
            report.skipped += outcome.skipped as usize;
        }
        if !audit.orphans.is_empty() {
            let deletes = audit
                .orphans
                .iter()
                .map(|o| Operation::delete(o.keys.clone(), IfMatch::ETag(o.etag.clone())))
                .collect::<Result<Vec<_>>>()?;
            let outcome = self
                .table()
                .bulk_write(deletes, BulkOptions::default())
                .await?;
            for result in outcome.outcomes {
                match result {
                    OperationOutcome::Written(_) => report.deleted += 1,
                    OperationOutcome::Failed(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::PreconditionFailed | ErrorKind::NotFound
                        ) =>
                    {
                        report.skipped += 1
                    }
                    // Neither deleted nor known to be there: a rerun audits it again.
                    OperationOutcome::Failed(e) | OperationOutcome::Unknown(e) => return Err(e),
                }
            }
        }
        Ok(report)
    }

    /// Writes the copies of entities stored before those copies were declared: pages through
    /// the primary copies (every partition, or `options.partition`), and for each page writes
    /// the copies in transactions packed per partition, each entity guarded by its primary's
    /// ETag (an empty merge) so a concurrent writer's newer copies are never overwritten.
    /// After each page the continuation token is saved in `checkpoint`; a run stopped by
    /// `options.max_pages`, `options.stop`, an error or a crash resumes from the last saved
    /// page. Copies are keyed by value, so a page done twice writes the same rows again: no
    /// duplicates.
    ///
    /// Deploy the new declaration to every writer first: entities they write afterwards get
    /// their copies from them.
    ///
    /// **Requests:** 1 to load the checkpoint; per page: 1 query (up to 1,000 rows), one
    /// transaction per up to 100 operations (an entity with `k` copies to write takes
    /// `1 + k`), and 1 checkpoint save. **Consistency:** each entity's copies are written
    /// atomically with its guard; the backfill as a whole is not atomic.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a copy of another declaration, or the primary, in
    /// `options.copies` (before any request); [`Error::Decode`] for an entity that does not
    /// fit `T`; checkpoint, transport and service errors (the checkpoint keeps the last
    /// completed page).
    pub async fn backfill<C: Checkpoint>(
        &self,
        checkpoint: &C,
        options: BackfillOptions,
    ) -> Result<BackfillState> {
        let spec = &self.placement.spec;
        let only = spec.backfill_targets(options.copies.as_deref())?;
        let prefix = spec.primary().prefix();
        let mut filter = Filter::ge(ROW_KEY, prefix);
        if let Some(end) = prefix_range(prefix).end {
            filter = filter.and(Filter::lt(ROW_KEY, end));
        }
        if let Some(pk) = &options.partition {
            filter = Filter::partition(pk).and(filter);
        }
        let mut query = self
            .table()
            .query::<Properties>()
            .filter(filter)
            .allow_scan();
        if let Some(n) = options.page_size {
            query = query.with_page_size(n);
        }
        let concurrency = options
            .concurrency
            .unwrap_or(self.table().account().settings().concurrency);
        let write = |rows: Vec<Stored<Properties>>| {
            let only = only.clone();
            async move {
                let mut plans = Vec::with_capacity(rows.len());
                for row in rows {
                    if spec.value_in(Layout::Intra, 0, &row.keys).is_none() {
                        continue;
                    }
                    let family = self.family(&from_properties::<T>(&row.value)?)?;
                    plans.push(plan::rewrite(&family, &row.etag, only.as_deref())?);
                }
                if plans.is_empty() {
                    return Ok(PageOutcome::default());
                }
                submit_families(self.table(), plans, concurrency).await
            }
        };
        backfill::run(checkpoint, &options, query, write).await
    }
}
