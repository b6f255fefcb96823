//! Entity group transactions: `submit` (all-or-nothing, failures named by the caller's index)
//! and `bulk_write` (plan, split, bounded parallel submission, per-operation outcomes).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use azure_core::Method;
use azure_storage::clients::ServiceType;
use bytes::Bytes;
use futures::StreamExt as _;
use tablekit_core::batch::{
    BatchPlan, EncodedTransaction, Operation, OperationKind, PartResponse, parse_response,
};
use tablekit_core::edm::Properties;
use tablekit_core::filter::Filter;
use tablekit_core::{ETag, Error, ErrorKind, Result, Target};
use tracing::Instrument as _;

use super::Table;
use super::entity::written_by;
use crate::metrics::RequestKind;

/// The result of one committed transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct TransactionOutcome {
    /// The caller's indices of its operations, in order.
    pub indices: Vec<usize>,
    /// The new ETag of each operation (absent for deletes), in the same order.
    pub etags: Vec<Option<ETag>>,
}

/// What happened to one operation of a [`Table::bulk_write`].
#[derive(Debug)]
pub enum OperationOutcome {
    /// Written; the new ETag (absent for deletes).
    Written(Option<ETag>),
    /// Refused by the service; nothing of it was written.
    Failed(Error),
}

impl OperationOutcome {
    /// Whether the operation was written.
    pub fn is_written(&self) -> bool {
        matches!(self, OperationOutcome::Written(_))
    }
}

/// Progress of a bulk write, reported after each transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Operations with a final outcome so far.
    pub done: usize,
    /// Operations that failed so far.
    pub failed: usize,
    /// Operations in the bulk write.
    pub total: usize,
    /// Transactions committed so far.
    pub transactions: usize,
}

/// Options of [`Table::bulk_write`].
#[derive(Clone, Default)]
pub struct BulkOptions {
    /// Transactions in flight (default: the account's `concurrency` setting).
    pub concurrency: Option<usize>,
    /// Called after each transaction with the progress so far.
    pub on_progress: Option<Arc<dyn Fn(Progress) + Send + Sync>>,
}

impl fmt::Debug for BulkOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkOptions")
            .field("concurrency", &self.concurrency)
            .field("on_progress", &self.on_progress.is_some())
            .finish()
    }
}

impl BulkOptions {
    /// Sets the number of transactions in flight.
    #[must_use]
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// Sets the progress callback.
    #[must_use]
    pub fn on_progress(mut self, f: impl Fn(Progress) + Send + Sync + 'static) -> Self {
        self.on_progress = Some(Arc::new(f));
        self
    }
}

/// The outcome of a [`Table::bulk_write`]: one entry per operation, by the caller's index.
#[derive(Debug)]
pub struct BulkReport {
    /// Outcome of each operation, indexed like the input.
    pub outcomes: Vec<OperationOutcome>,
    /// Transactions sent (including re-submissions after a failed operation was taken out).
    pub transactions: usize,
}

impl BulkReport {
    /// Operations written.
    pub fn written(&self) -> usize {
        self.outcomes.iter().filter(|o| o.is_written()).count()
    }

    /// The failed operations and why, by caller index.
    pub fn failures(&self) -> impl Iterator<Item = (usize, &Error)> {
        self.outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| match o {
                OperationOutcome::Failed(e) => Some((i, e)),
                OperationOutcome::Written(_) => None,
            })
    }

    /// Whether every operation was written.
    pub fn is_complete(&self) -> bool {
        self.outcomes.iter().all(OperationOutcome::is_written)
    }
}

impl Table {
    fn service_url(&self) -> String {
        self.account
            .endpoints()
            .table
            .as_str()
            .trim_end_matches('/')
            .to_owned()
    }

    /// Runs the plan's entity group transactions in order.
    ///
    /// Requests: one per transaction (an atomic plan is exactly one). Consistency: each
    /// transaction is all-or-nothing; an atomic plan is one transaction. A best-effort plan
    /// stops at the first failed transaction; earlier ones stay committed.
    ///
    /// # Errors
    /// Before any request: [`Error::LimitExceeded`] for a body of 4 MiB or more.
    /// [`Error::BatchFailed`] with the caller's index of the operation the service refused
    /// and its cause (e.g. [`Error::AlreadyExists`]); nothing of that transaction was written.
    pub async fn submit(&self, plan: &BatchPlan) -> Result<Vec<TransactionOutcome>> {
        let transactions = plan.encode(&self.service_url(), self.name())?;
        let mut outcomes = Vec::with_capacity(transactions.len());
        for tx in &transactions {
            outcomes.push(self.send_transaction(plan, tx).await?);
        }
        Ok(outcomes)
    }

    /// Sends one encoded transaction and interprets the multipart response.
    pub(crate) async fn send_transaction(
        &self,
        plan: &BatchPlan,
        tx: &EncodedTransaction,
    ) -> Result<TransactionOutcome> {
        let url = self.url("$batch", &[]);
        let body = Bytes::copy_from_slice(&tx.body);
        let headers = [
            ("content-type", tx.content_type.as_str()),
            ("accept", "application/json"),
        ];
        let span = tracing::debug_span!("tablekit.transaction", table = %self.name, pk = %tx.partition_key, operations = tx.indices.len());
        let target = Target::table(self.name.as_ref());
        let outcome = self
            .account
            .send(
                ServiceType::Table,
                RequestKind::Transaction,
                &target,
                || self.request(Method::Post, url.clone(), &headers, Some(&body)),
            )
            .instrument(span.clone())
            .await;
        let response = outcome.result?;
        let text = String::from_utf8_lossy(&response.body);
        let parts = parse_response(&text);
        let failed = parts.iter().enumerate().find(|(_, p)| !p.is_success());
        let result = match failed {
            None if parts.len() == tx.indices.len() => Ok(TransactionOutcome {
                indices: tx.indices.clone(),
                etags: parts.into_iter().map(|p| p.etag.map(ETag::new)).collect(),
            }),
            None => Err(Error::Service {
                target,
                status: 202,
                code: None,
                message: format!(
                    "{} operation responses for {} operations",
                    parts.len(),
                    tx.indices.len()
                ),
            }),
            Some((slot, part)) => Err(self.part_error(plan, tx, slot, part)),
        };
        match result {
            Ok(done) => {
                self.account.metrics().entities_written(done.indices.len());
                Ok(done)
            }
            // A retried transaction whose first attempt committed fails on its own writes.
            Err(error) if outcome.maybe_applied => {
                self.verify_transaction(plan, tx, error)
                    .instrument(span)
                    .await
            }
            Err(error) => Err(error),
        }
    }

    /// The error of a failed transaction, naming the caller's index of the refused operation.
    fn part_error(
        &self,
        plan: &BatchPlan,
        tx: &EncodedTransaction,
        slot: usize,
        part: &PartResponse,
    ) -> Error {
        // The service names the operation by position ("2:…"); a single error part without a
        // position refers to the operation it answers when the counts line up, else the first.
        let position = part
            .position
            .unwrap_or(if tx.indices.len() == 1 { 0 } else { slot })
            .min(tx.indices.len() - 1);
        let index = tx.indices[position];
        let target = match plan.operation(index) {
            Some(op) => Target::entity(self.name.as_ref(), op.keys().clone()),
            None => Target::table(self.name.as_ref()),
        };
        let source = Error::from_response(
            part.status,
            part.code.clone(),
            part.message.clone().unwrap_or_default(),
            target,
            None,
        );
        self.account.metrics().error(&source);
        Error::BatchFailed {
            index,
            source: Box::new(source),
        }
    }

    /// After a retried transaction failed the way an applied earlier attempt would make it
    /// fail, reads the affected entities (one range query) and accepts the transaction if
    /// every operation's effect is in place.
    async fn verify_transaction(
        &self,
        plan: &BatchPlan,
        tx: &EncodedTransaction,
        error: Error,
    ) -> Result<TransactionOutcome> {
        let explained = matches!(
            (&error, error.kind()),
            (
                Error::BatchFailed { .. },
                ErrorKind::AlreadyExists | ErrorKind::PreconditionFailed | ErrorKind::NotFound
            )
        );
        let ops: Vec<&Operation> = tx
            .indices
            .iter()
            .filter_map(|&i| plan.operation(i))
            .collect();
        if !explained || ops.len() != tx.indices.len() {
            return Err(error);
        }
        let (min, max) = ops
            .iter()
            .fold((None::<&str>, None::<&str>), |(lo, hi), op| {
                let rk = op.keys().rk();
                (
                    Some(lo.map_or(rk, |l| l.min(rk))),
                    Some(hi.map_or(rk, |h| h.max(rk))),
                )
            });
        let (Some(min), Some(max)) = (min, max) else {
            return Err(error);
        };
        let filter = Filter::row_range(
            tx.partition_key.as_str(),
            std::ops::Bound::Included(min),
            std::ops::Bound::Included(max),
        );
        let stored: HashMap<String, _> = self
            .query::<Properties>()
            .filter(filter)
            .allow_scan()
            .collect()
            .await?
            .into_iter()
            .map(|s| (s.keys.rk().to_owned(), s))
            .collect();
        let mut etags = Vec::with_capacity(ops.len());
        for op in ops {
            match (op.kind(), stored.get(op.keys().rk())) {
                (OperationKind::Delete, None) => etags.push(None),
                (OperationKind::Delete, Some(_)) | (_, None) => return Err(error),
                (_, Some(s)) if written_by(op, &s.value) => etags.push(Some(s.etag.clone())),
                (_, Some(_)) => return Err(error),
            }
        }
        self.account.metrics().entities_written(tx.indices.len());
        Ok(TransactionOutcome {
            indices: tx.indices.clone(),
            etags,
        })
    }

    /// Writes many operations: grouped by partition, split into transactions of at most 100
    /// operations and less than 4 MiB, sent with bounded concurrency.
    ///
    /// An operation the service refuses is taken out and the rest of its transaction is sent
    /// again, so one bad operation does not block the others; every operation gets an outcome.
    ///
    /// Requests: ⌈operations per partition / 100⌉ transactions per partition (more when a
    /// body reaches 4 MiB), plus one per refused operation. Consistency: each transaction is
    /// atomic; the bulk write as a whole is not.
    ///
    /// # Errors
    /// Before any request: [`Error::DuplicateInTransaction`] for two operations on one entity,
    /// [`Error::InvalidValue`] for an empty list. Per-operation failures are in the report.
    pub async fn bulk_write(
        &self,
        operations: Vec<Operation>,
        options: BulkOptions,
    ) -> Result<BulkReport> {
        let total = operations.len();
        let plan = BatchPlan::best_effort(operations)?;
        let transactions = plan.encode(&self.service_url(), self.name())?;
        let concurrency = options
            .concurrency
            .unwrap_or(self.account.settings().concurrency)
            .max(1);
        let mut outcomes: Vec<Option<OperationOutcome>> = (0..total).map(|_| None).collect();
        let mut progress = Progress {
            done: 0,
            failed: 0,
            total,
            transactions: 0,
        };
        let mut sent = 0;
        let plan_ref = &plan;
        let mut results = futures::stream::iter(transactions)
            .map(|tx| async move { self.write_resilient(plan_ref, tx).await })
            .buffer_unordered(concurrency);
        while let Some((done, tx_count)) = results.next().await {
            sent += tx_count;
            progress.transactions += tx_count;
            for (index, outcome) in done {
                progress.done += 1;
                if !outcome.is_written() {
                    progress.failed += 1;
                }
                outcomes[index] = Some(outcome);
            }
            if let Some(callback) = &options.on_progress {
                callback(progress);
            }
        }
        let outcomes = outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    OperationOutcome::Failed(Error::invalid_value("", "operation was not sent"))
                })
            })
            .collect();
        Ok(BulkReport {
            outcomes,
            transactions: sent,
        })
    }

    /// Sends a transaction; when one operation is refused, records it and resends the rest.
    async fn write_resilient(
        &self,
        plan: &BatchPlan,
        first: EncodedTransaction,
    ) -> (Vec<(usize, OperationOutcome)>, usize) {
        let mut done = Vec::with_capacity(first.indices.len());
        let mut pending = Some(first);
        let mut sent = 0;
        while let Some(tx) = pending.take() {
            sent += 1;
            match self.send_transaction(plan, &tx).await {
                Ok(outcome) => {
                    done.extend(
                        outcome
                            .indices
                            .into_iter()
                            .zip(outcome.etags)
                            .map(|(i, e)| (i, OperationOutcome::Written(e))),
                    );
                }
                Err(Error::BatchFailed { index, source }) => {
                    done.push((index, OperationOutcome::Failed(*source)));
                    let rest: Vec<usize> =
                        tx.indices.iter().copied().filter(|&i| i != index).collect();
                    match self.reencode(plan, &rest) {
                        Ok(Some(next)) => pending = Some(next),
                        Ok(None) => {}
                        Err(e) => done.extend(
                            rest.into_iter()
                                .map(|i| (i, OperationOutcome::Failed(clone_error(&e)))),
                        ),
                    }
                }
                // The whole transaction failed (transport, throttling beyond retries, …).
                Err(e) => done.extend(
                    tx.indices
                        .iter()
                        .map(|&i| (i, OperationOutcome::Failed(clone_error(&e)))),
                ),
            }
        }
        (done, sent)
    }

    /// A transaction of the given operations of `plan` (keeping their caller indices).
    fn reencode(&self, plan: &BatchPlan, indices: &[usize]) -> Result<Option<EncodedTransaction>> {
        if indices.is_empty() {
            return Ok(None);
        }
        let ops: Vec<Operation> = indices
            .iter()
            .filter_map(|&i| plan.operation(i).cloned())
            .collect();
        let sub = BatchPlan::atomic(ops)?;
        let mut encoded = sub.encode(&self.service_url(), self.name())?;
        let mut tx = encoded
            .pop()
            .ok_or_else(|| Error::invalid_value("", "empty transaction"))?;
        tx.indices = tx.indices.iter().map(|&i| indices[i]).collect();
        Ok(Some(tx))
    }
}

/// Errors are not `Clone` (they may hold a source); a transaction-wide failure is reported for
/// each of its operations with the same kind and message.
fn clone_error(e: &Error) -> Error {
    match e {
        Error::Transport { message, .. } => Error::Transport {
            message: message.clone(),
            source: None,
        },
        Error::Throttled {
            status,
            code,
            retry_after,
        } => Error::Throttled {
            status: *status,
            code: code.clone(),
            retry_after: *retry_after,
        },
        Error::Service {
            target,
            status,
            code,
            message,
        } => Error::Service {
            target: target.clone(),
            status: *status,
            code: code.clone(),
            message: message.clone(),
        },
        Error::NotFound { target } => Error::NotFound {
            target: target.clone(),
        },
        Error::Unauthorized {
            target,
            status,
            code,
            message,
        } => Error::Unauthorized {
            target: target.clone(),
            status: *status,
            code: code.clone(),
            message: message.clone(),
        },
        Error::Forbidden {
            target,
            status,
            code,
            message,
        } => Error::Forbidden {
            target: target.clone(),
            status: *status,
            code: code.clone(),
            message: message.clone(),
        },
        other => Error::Service {
            target: Target::default(),
            status: other.status().unwrap_or(0),
            code: None,
            message: other.to_string(),
        },
    }
}
