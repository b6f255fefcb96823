//! Audits, repairs and backfills of an [`InterPartitionIndex`].

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::{BulkOptions, OperationOutcome};
use tablekit_core::batch::Operation;
use tablekit_core::edm::{Properties, from_properties};
use tablekit_core::filter::{Filter, PARTITION_KEY};
use tablekit_core::keys::prefix_range;
use tablekit_core::{Entity, ErrorKind, IfMatch, Result, Stored};

use super::InterPartitionIndex;
use crate::backfill::{self, BackfillOptions, BackfillState, Checkpoint, PageOutcome};
use crate::effects::{Direct, Effects as _};
use crate::spec::Layout;
use crate::verify::{Audit, RepairReport, VerifyReport, audit};

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
    /// The copies are written from the page as read. A write racing the backfill is followed
    /// by its own job, which fixes a copy the backfill wrote stale; run
    /// [`verify`](Self::verify) after the backfill to be sure.
    ///
    /// **Requests:** 1 to load the checkpoint; per page: 1 query, one transaction per copy
    /// partition per up to 100 copies, 1 checkpoint save. **Consistency:** eventual.
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
        let bulk = BulkOptions {
            concurrency: options.concurrency,
            ..BulkOptions::default()
        };
        let write = |rows: Vec<Stored<Properties>>| {
            let only = only.clone();
            let bulk = bulk.clone();
            async move {
                let copies = self.context.placement.tables.len();
                let mut ops: Vec<Vec<Operation>> = vec![Vec::new(); copies];
                let mut outcome = PageOutcome::default();
                for row in rows {
                    if spec.value_in(Layout::Inter, 0, &row.keys).is_none() {
                        continue;
                    }
                    let family = self.family(&from_properties::<T>(&row.value)?)?;
                    for (i, copy) in family.copies.iter().enumerate().skip(1) {
                        if only.as_ref().is_some_and(|o| !o.contains(&i)) {
                            continue;
                        }
                        let entity = Entity::new(copy.keys.clone(), &copy.props);
                        ops[i].push(Operation::upsert_replace(&entity)?);
                    }
                    outcome.written += 1;
                }
                for (i, ops) in ops.into_iter().enumerate() {
                    if ops.is_empty() {
                        continue;
                    }
                    let report = self.context.placement.tables[i]
                        .bulk_write(ops, bulk.clone())
                        .await?;
                    outcome.requests += report.transactions + report.read_backs;
                    // A copy whose write is unknown is not counted as written: the page is
                    // not checkpointed, and a rerun writes it again (upserts are idempotent).
                    if let Some(failed) = report.outcomes.into_iter().find_map(|o| match o {
                        OperationOutcome::Failed(e) | OperationOutcome::Unknown(e) => Some(e),
                        OperationOutcome::Written(_) => None,
                    }) {
                        return Err(failed);
                    }
                }
                Ok(outcome)
            }
        };
        backfill::run(checkpoint, &options, query, write).await
    }
}
