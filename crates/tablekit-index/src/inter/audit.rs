//! Audits, repairs and backfills of an [`InterPartitionIndex`].

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::ops::Bound;

use futures::TryStreamExt as _;
use tablekit_azure::{BulkOptions, OperationOutcome, track_landing};
use tablekit_core::Properties;
use tablekit_core::batch::Operation;
use tablekit_core::edm::from_properties;
use tablekit_core::filter::{Filter, PARTITION_KEY, ROW_KEY};
use tablekit_core::keys::prefix_range;
use tablekit_core::{Entity, ErrorKind, IfMatch, Result, Stored};

use super::InterPartitionIndex;
use crate::backfill::{self, BackfillOptions, BackfillState, Checkpoint, PageOutcome};
use crate::effects::{Direct, Effects as _};
use crate::spec::Layout;
use crate::verify::{Audit, RepairReport, VerifyReport, audit};

/// A primary a backfill page wrote copies for: its row as read, and the (copy name, value)
/// pairs of those copies.
type Backfilled = (Stored<Properties>, Vec<(String, String)>);
impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> InterPartitionIndex<T> {
    async fn audit(&self, partition: &str) -> Result<Audit> {
        let context = &self.context;
        let read = |copy: usize| {
            let pk = format!(
                "{}{partition}",
                context.placement.spec.copies()[copy].prefix()
            );
            context.placement.tables[copy]
                .query::<Properties>()
                .filter(Filter::partition(pk))
                .collect()
        };
        let primaries = read(0).await?;
        let mut copies = Vec::with_capacity(context.placement.tables.len() - 1);
        for copy in 1..context.placement.tables.len() {
            copies.push(read(copy).await?);
        }
        audit(
            &context.placement.spec,
            Layout::Inter,
            partition,
            primaries,
            &copies,
        )
    }

    /// Audits one partition (`Sales`): reads the primary partition (`empid_Sales`) and each
    /// copy's partition (`email_Sales`), and reports copies that are missing (a job has not
    /// run yet, or was lost), stale, orphaned or contested.
    ///
    /// **Requests:** 1 + one per secondary copy, per page of 1,000 rows.
    /// **Consistency:** a snapshot per partition; copies whose jobs are still queued show up
    /// as issues until those jobs run.
    ///
    /// # Errors
    /// Key errors; [`Error::Decode`](tablekit_core::Error::Decode) when a primary does not fit `T`.
    pub async fn verify(&self, partition: &str) -> Result<VerifyReport> {
        Ok(self.audit(partition).await?.report)
    }

    /// Audits one partition and fixes what it found without the queue: every entity with a
    /// missing or stale copy is brought in line by the same steps a job takes, and every
    /// orphaned copy is deleted under the ETag it was read with (a copy rewritten since is
    /// left alone). Contested copies are reported, not touched.
    ///
    /// **Requests:** the audit's; per entity fixed, 2 reads and one upsert per secondary copy;
    /// 1 per orphan. **Consistency:** safe alongside workers and writers (every step is
    /// idempotent or conditional).
    ///
    /// # Errors
    /// As [`verify`](Self::verify); transport and service errors.
    pub async fn repair(&self, partition: &str) -> Result<RepairReport> {
        // The partition is not recorded: keys may be personal data.
        let span =
            tablekit_azure::step_span("index repair", self.context.placement.tables[0].name());
        tracing::Instrument::instrument(self.repair_partition(partition), span).await
    }

    async fn repair_partition(&self, partition: &str) -> Result<RepairReport> {
        let audit = self.audit(partition).await?;
        let mut report = RepairReport {
            found: audit.report,
            ..RepairReport::default()
        };
        for broken in &audit.broken {
            let family = &broken.family;
            let primary = &family.primary().keys;
            // Outside the queue there is no write to wait for: converge to the primary as it
            // is now.
            let current = Direct
                .get(&self.context.placement.tables[0], primary)
                .await?;
            let partition = &primary.pk()[self.context.placement.spec.primary().prefix().len()..];
            self.context
                .converge(&Direct, partition, &family.primary().value, &[], current)
                .await?;
            report.rewritten += 1;
        }
        for orphan in &audit.orphans {
            let table = &self.context.placement.tables[orphan.copy];
            match table
                .delete(&orphan.keys, IfMatch::ETag(orphan.etag.clone()))
                .await
            {
                Ok(()) => report.deleted += 1,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::PreconditionFailed | ErrorKind::NotFound
                    ) =>
                {
                    report.skipped += 1
                }
                Err(e) => return Err(e),
            }
        }
        Ok(report)
    }

    /// Writes the copies of entities stored before those copies were declared: pages through
    /// the primary partitions (`empid_*`, or `empid_<options.partition>`), and for each page
    /// upserts the copies, grouped into transactions per copy partition (up to 100 each).
    /// After each page the continuation token is saved in `checkpoint`, so a stopped or
    /// failed run resumes from the last saved page; copies are keyed by value, so a page
    /// done twice writes the same rows: no duplicates.
    ///
    /// The copies are written from the page as read, unconditionally. A write racing the
    /// backfill has its own job, but that job may run before the backfill's copy lands (a
    /// write held in the network lands up to a client timeout late) and the copy would then
    /// bring back what the job removed. So once none of the page's writes can land any more
    /// (at once, unless an attempt got no answer), the page's primaries are read again, and
    /// each one that changed since the page was read, or is gone, has its copies converged
    /// as its job does.
    ///
    /// **Requests:** 1 to load the checkpoint; per page: 1 query, one transaction per copy
    /// partition per up to 100 copies, 1 query reading the page's primaries again (more if
    /// the service splits it), per primary changed meanwhile 2 reads, 1 upsert per copy and
    /// 1 delete per stale copy, and 1 checkpoint save. **Consistency:** eventual; the index
    /// verifies clean once the jobs of writes racing the backfill have run.
    ///
    /// # Errors
    /// [`tablekit_core::Error::InvalidArgument`] for a copy of another declaration, or the
    /// primary, in `options.copies` (before any request); [`tablekit_core::Error::Decode`]
    /// for an entity that does not fit `T`; the first copy the service refuses or whose write
    /// has an unknown outcome (the page is then not checkpointed, and a rerun writes it
    /// again); checkpoint, transport and service errors.
    pub async fn backfill<C: Checkpoint>(
        &self,
        checkpoint: &C,
        options: BackfillOptions,
    ) -> Result<BackfillState> {
        let spec = &self.context.placement.spec;
        let only = spec.backfill_targets(options.copies.as_deref())?;
        let prefix = spec.primary().prefix();
        let filter = match &options.partition {
            Some(pk) => Filter::partition(format!("{prefix}{pk}")),
            None => {
                let mut f = Filter::ge(PARTITION_KEY, prefix);
                if let Some(end) = prefix_range(prefix).end {
                    f = f.and(Filter::lt(PARTITION_KEY, end));
                }
                f
            }
        };
        let mut query = self.context.placement.tables[0]
            .query::<Properties>()
            .filter(filter)
            .allow_scan();
        if let Some(n) = options.page_size {
            query = query.with_page_size(n);
        }
        let mut bulk = BulkOptions::default();
        if let Some(n) = options.concurrency {
            bulk = bulk.with_concurrency(n);
        }
        let write = |rows: Vec<Stored<Properties>>| {
            let only = only.clone();
            let bulk = bulk.clone();
            async move {
                let copies = self.context.placement.tables.len();
                let mut ops: Vec<Vec<Operation>> = vec![Vec::new(); copies];
                let mut outcome = PageOutcome::default();
                // Per primary written: its row as read, and the (copy name, value) pairs of
                // the copies written for it.
                let mut written: Vec<Backfilled> = Vec::new();
                for row in rows {
                    if spec.value_in(Layout::Inter, 0, &row.keys).is_none() {
                        continue;
                    }
                    let family = self.family(&from_properties::<T>(&row.value)?)?;
                    let mut values = Vec::new();
                    for (i, copy) in family.copies.iter().enumerate().skip(1) {
                        if only.as_ref().is_some_and(|o| !o.contains(&i)) {
                            continue;
                        }
                        let entity = Entity::new(copy.keys.clone(), &copy.props);
                        ops[i].push(Operation::upsert_replace(&entity)?);
                        values.push((spec.copies()[i].name().to_owned(), copy.value.clone()));
                    }
                    written.push((row, values));
                    outcome.written += 1;
                }
                let writes = async {
                    for (i, ops) in ops.into_iter().enumerate() {
                        if ops.is_empty() {
                            continue;
                        }
                        let report = self.context.placement.tables[i]
                            .bulk_write(ops, bulk.clone())
                            .await?;
                        outcome.requests += report.transactions + report.read_backs;
                        // A copy whose write is unknown is not counted as written: the page
                        // is not checkpointed, and a rerun writes it again (upserts are
                        // idempotent).
                        if let Some(failed) = report.outcomes.into_iter().find_map(|o| match o {
                            OperationOutcome::Failed(e) | OperationOutcome::Unknown(e) => Some(e),
                            OperationOutcome::Written(_) => None,
                        }) {
                            return Err(failed);
                        }
                    }
                    Ok(())
                };
                // The copies are written unconditionally from the page as read. A writer that
                // changed a primary since may have had its job run before these writes landed
                // (an attempt held in the network lands up to a client timeout late): the job
                // removed or rewrote the copy, and the backfill's write then brought the old
                // one back. So once none of the writes can still land, the page's primaries
                // are read again, and every one that changed is converged as its job does.
                let (done, lands_by) = track_landing(writes).await;
                done?;
                if let Some(lands_by) = lands_by {
                    tokio::time::sleep_until(lands_by.into()).await;
                }
                outcome.requests += self.converge_changed(written).await?;
                Ok(outcome)
            }
        };
        backfill::run(checkpoint, &options, query, write).await
    }

    /// Reads the primaries of a backfilled page again (one range query over the page's keys)
    /// and converges the copies of every one whose ETag changed since the page was read, or
    /// that is gone, with the copies the backfill wrote for it as possibly stale. Returns the
    /// requests sent.
    async fn converge_changed(&self, written: Vec<Backfilled>) -> Result<usize> {
        let (Some((first, _)), Some((last, _))) = (written.first(), written.last()) else {
            return Ok(0);
        };
        let (first, last) = (first.keys.clone(), last.keys.clone());
        let range = if first.pk() == last.pk() {
            Filter::row_range(
                first.pk(),
                Bound::Included(first.rk()),
                Bound::Included(last.rk()),
            )
        } else {
            Filter::eq(PARTITION_KEY, first.pk())
                .and(Filter::ge(ROW_KEY, first.rk()))
                .or(Filter::gt(PARTITION_KEY, first.pk()).and(Filter::lt(PARTITION_KEY, last.pk())))
                .or(Filter::eq(PARTITION_KEY, last.pk()).and(Filter::le(ROW_KEY, last.rk())))
        };
        let table = &self.context.placement.tables[0];
        let (mut requests, now) = table
            .query::<Properties>()
            .filter(range)
            .allow_scan()
            .pages()
            .try_fold((0, Vec::new()), |(pages, mut rows), page| async move {
                rows.extend(page.items);
                Ok((pages + 1, rows))
            })
            .await?;
        let spec = &self.context.placement.spec;
        let prefix_len = spec.primary().prefix().len();
        for (row, values) in written {
            let current = now.iter().find(|s| s.keys == row.keys);
            if current.is_some_and(|s| s.etag == row.etag) {
                continue;
            }
            let Some(id) = spec.value_in(Layout::Inter, 0, &row.keys) else {
                continue;
            };
            let partition = &row.keys.pk()[prefix_len..];
            self.context
                .converge(&Direct, partition, &id, &values, current.cloned())
                .await?;
            // A read of the primary, the copy writes, a second read: at least.
            requests += 2 + values.len();
        }
        Ok(requests)
    }
}
