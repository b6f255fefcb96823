//! Entity group transactions: `submit` (all-or-nothing, failures named by the caller's index),
//! sending one transaction with what its failure leaves open, and reading a transaction's rows
//! back to settle an outcome a lost response or timeout left unknown.

use std::collections::HashMap;
use std::time::Instant;

use azure_core::Method;
use azure_storage::clients::ServiceType;
use bytes::Bytes;
use tablekit_core::Properties;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::wire::{
    EncodedTransaction, PartResponse, encode, error_from_response, parse_response,
};
use tablekit_core::{ETag, Error, ErrorKind, Result, Stored, Target};

use super::Table;
use crate::governor::Charge;
use crate::metrics::RequestKind;
use crate::send::may_have_applied;

/// The result of one committed transaction.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TransactionOutcome {
    /// The caller's indices of its operations, in order.
    pub indices: Vec<usize>,
    /// The new ETag of each operation (absent for deletes), in the same order.
    pub etags: Vec<Option<ETag>>,
}

/// A sent transaction: its result, whether a failure leaves its outcome open, and until when
/// an attempt of it may still land.
pub(crate) struct Sent {
    pub(crate) result: Result<TransactionOutcome>,
    /// The transaction failed, but an attempt may have been applied (or may still be): a lost
    /// response, a timeout, a broken connection, a 5xx other than 503, an answer that could
    /// not be read. `false` when every attempt was refused (503, 429, or an operation the
    /// service named) or never sent.
    pub(crate) open: bool,
    /// When every attempt that got no definite answer has landed or never will (each
    /// attempt's send instant plus `Settings::late_landing`); `None` when every attempt got
    /// one.
    pub(crate) lands_by: Option<Instant>,
}

/// What a transaction's rows, read back, say about it.
pub(crate) enum ReadBack {
    /// Every operation's effect is in place: the ETags, in the transaction's order.
    Applied(Vec<Option<ETag>>),
    /// No operation's effect is in place: the transaction has not been applied (so far).
    NotApplied,
    /// Some effects are there and some are not: another writer touched these rows, so the
    /// rows cannot tell.
    Mixed,
}

/// The rows of a transaction's range, by RowKey.
pub(crate) type Rows = HashMap<String, Stored<Properties>>;

impl Table {
    pub(crate) fn service_url(&self) -> String {
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
    /// With a codec ([`Table::with_codec`]), each operation's properties are encoded before
    /// the transaction is built (deletes are sent as they are).
    ///
    /// **Outcomes:** `Ok` — every transaction is stored. [`Error::Indeterminate`] — the
    /// failed transaction may or may not be stored (it is all or nothing); read its rows
    /// before deciding. Any other error — the failed transaction is not stored, and no
    /// attempt of it can be any more. When a transaction fails after an attempt that may
    /// have been applied (a lost response, a timeout, a broken connection, a 5xx other than
    /// 503), its rows are read back (1 range query): all there is `Ok`; none there is read
    /// again once every attempt has landed or never will (waiting up to
    /// [`Settings::late_landing`](crate::Settings::late_landing) after the last one was
    /// sent), and is the error if still none; anything else is `Indeterminate`.
    ///
    /// # Errors
    /// Before any request: [`Error::LimitExceeded`] for a body of 4 MiB or more (2 MB on
    /// the Cosmos DB Table API, where a RowKey over 255 bytes is refused the same way and a
    /// reserved property name with [`Error::InvalidName`]); an operation the handle's codec
    /// refuses (encryption refuses merges).
    /// [`Error::BatchFailed`] with the caller's index of the operation the service refused
    /// and its cause (e.g. [`Error::AlreadyExists`]); nothing of that transaction was written.
    /// [`Error::Indeterminate`] as above; transport, throttling and service errors that
    /// outlast the retries, the transaction not stored.
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit_core::batch::{BatchPlan, Operation};
    /// use tablekit_core::{Entity, IfMatch, Keys, Properties};
    ///
    /// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
    /// // Two writes in one partition: both happen or neither does.
    /// let moved = Entity::new(
    ///     Keys::new("Sales", "email_jonesj@contoso.com")?,
    ///     Properties::new().with("EmployeeId", "000223"),
    /// );
    /// let plan = BatchPlan::atomic([
    ///     Operation::insert(&moved)?,
    ///     Operation::delete(("Sales", "email_jones@contoso.com"), IfMatch::Any)?,
    /// ])?;
    /// table.submit(&plan).await?; // one request
    /// # Ok(()) }
    /// ```
    pub async fn submit(&self, plan: &BatchPlan) -> Result<Vec<TransactionOutcome>> {
        // With a codec, the operations' properties are encoded first; the caller's plan stays
        // what outcomes are named and read-backs compared by. Limits apply to what is sent.
        let sent = self.encode_plan(plan).await?;
        self.check_plan(&sent)?;
        let transactions = encode(&sent, &self.service_url(), self.name())?;
        self.check_transactions(&transactions)?;
        let mut outcomes = Vec::with_capacity(transactions.len());
        for tx in &transactions {
            let sent = self.send_tracked(plan, tx).await;
            let outcome = match sent.result {
                Ok(outcome) => outcome,
                Err(error) if sent.open => self.settle(plan, tx, error, sent.lands_by).await?,
                Err(error) => return Err(error),
            };
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// Settles a transaction whose failure left its outcome open: its rows read back are
    /// all there (`Ok`), none there once no attempt can land any more (`error`), or anything
    /// else ([`Error::Indeterminate`]).
    async fn settle(
        &self,
        plan: &BatchPlan,
        tx: &EncodedTransaction,
        error: Error,
        lands_by: Option<Instant>,
    ) -> Result<TransactionOutcome> {
        let mut read = self.read_back(plan, tx).await;
        if let (Ok(ReadBack::NotApplied), Some(lands_by)) = (&read, lands_by) {
            if lands_by > Instant::now() {
                tokio::time::sleep_until(lands_by.into()).await;
                read = self.read_back(plan, tx).await;
            }
        }
        let reason = match read {
            Ok(ReadBack::Applied(etags)) => {
                return Ok(TransactionOutcome {
                    indices: tx.indices.clone(),
                    etags,
                });
            }
            Ok(ReadBack::NotApplied) => return Err(error),
            Ok(ReadBack::Mixed) => format!(
                "some of its rows hold what it wrote and others not: another writer changed \
                 them since an attempt that may have been applied ({error})"
            ),
            Err(read) => format!("its rows could not be read back ({read}) after: {error}"),
        };
        let first = tx.indices.first().and_then(|&i| plan.operation(i));
        Err(Error::Indeterminate {
            target: match first {
                Some(op) => Target::entity(self.name(), op.keys().clone()),
                None => self.target(),
            },
            reason: format!(
                "the transaction in partition {:?}: {reason}",
                tx.partition_key.as_str()
            ),
        })
    }

    /// Sends one encoded transaction and tells whether a failure leaves its outcome open.
    pub(crate) async fn send_tracked(&self, plan: &BatchPlan, tx: &EncodedTransaction) -> Sent {
        let url = self.url("$batch", &[]);
        let body = Bytes::copy_from_slice(&tx.body);
        let headers = [
            ("content-type", tx.content_type.as_str()),
            ("accept", "application/json"),
        ];
        let target = Target::table(self.name.as_ref());
        let outcome = self
            .account
            .send_charged(
                ServiceType::Table,
                RequestKind::Transaction,
                &target,
                &Charge::partition(
                    &self.name,
                    tx.partition_key.as_str(),
                    tx.indices.len() as u32,
                ),
                || self.request(Method::Post, url.clone(), &headers, Some(&body)),
            )
            .await;
        let lands_by = outcome.lands_by;
        let span = outcome.span;
        let response = match outcome.result {
            Ok(response) => response,
            Err(error) => {
                // Earlier attempts may have been applied; so may the last one, unless it was
                // refused before any work or answered with a permanent status.
                let open =
                    outcome.maybe_applied || (error.is_retryable() && may_have_applied(&error));
                return Sent {
                    result: Err(error),
                    open,
                    lands_by,
                };
            }
        };
        let text = String::from_utf8_lossy(&response.body);
        let parts = parse_response(&text);
        let failed = parts.iter().enumerate().find(|(_, p)| !p.is_success());
        if let Some((_, part)) = failed {
            // The request succeeded; the transaction did not.
            span.record("db.response.status_code", i64::from(part.status));
        }
        let result = match failed {
            None if parts.len() == tx.indices.len() => Ok(TransactionOutcome {
                indices: tx.indices.clone(),
                etags: parts.into_iter().map(|p| p.etag.map(ETag::new)).collect(),
            }),
            // The service answered, but not readably: it may have committed.
            None => {
                return Sent {
                    result: Err(Error::Service {
                        target,
                        status: 202,
                        code: None,
                        message: format!(
                            "{} operation responses for {} operations",
                            parts.len(),
                            tx.indices.len()
                        ),
                        ids: response.ids.clone(),
                    }),
                    open: true,
                    lands_by,
                };
            }
            Some((slot, part)) => Err(self
                .part_error(plan, tx, slot, part)
                .with_request_ids(response.ids.clone())),
        };
        if let Err(error) = &result {
            crate::telemetry::record_failure(&span, error);
        }
        match result {
            Ok(done) => {
                self.account.metrics().entities_written(done.indices.len());
                Sent {
                    result: Ok(done),
                    open: false,
                    lands_by,
                }
            }
            // A retried transaction whose first attempt committed fails on its own writes.
            Err(error) if outcome.maybe_applied => {
                let (result, open) = self.verify_transaction(plan, tx, error, lands_by).await;
                Sent {
                    result,
                    open,
                    lands_by,
                }
            }
            // The service refused an operation, so this attempt was rolled back, and no
            // earlier one may have been applied.
            Err(error) => Sent {
                result: Err(error),
                open: false,
                lands_by,
            },
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
        let source = error_from_response(
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
    /// every operation's effect is in place. Returns whether the outcome stays open: when the
    /// read failed; when some effects are there and others not (another writer changed some
    /// of the rows after an earlier attempt may have been applied: the rows cannot tell); and
    /// when none are there while an earlier attempt may still land (`lands_by`).
    async fn verify_transaction(
        &self,
        plan: &BatchPlan,
        tx: &EncodedTransaction,
        error: Error,
        lands_by: Option<Instant>,
    ) -> (Result<TransactionOutcome>, bool) {
        let explained = matches!(
            (&error, error.kind()),
            (
                Error::BatchFailed { .. },
                ErrorKind::AlreadyExists | ErrorKind::PreconditionFailed | ErrorKind::NotFound
            )
        );
        if !explained {
            return (Err(error), false);
        }
        match self.read_back(plan, tx).await {
            Ok(ReadBack::Applied(etags)) => (
                Ok(TransactionOutcome {
                    indices: tx.indices.clone(),
                    etags,
                }),
                false,
            ),
            Ok(ReadBack::NotApplied) => {
                let landed = lands_by.is_none_or(|t| t <= Instant::now());
                (Err(error), !landed)
            }
            Ok(ReadBack::Mixed) | Err(_) => (Err(error), true),
        }
    }

    /// Reads a transaction's rows back (one range query over its smallest to largest RowKey)
    /// and tells whether its effects are in place. The transaction is atomic, so it is either
    /// all there or not there at all, unless another writer touched the same rows.
    pub(crate) async fn read_back(
        &self,
        plan: &BatchPlan,
        tx: &EncodedTransaction,
    ) -> Result<ReadBack> {
        let rows = self.read_rows(plan, tx).await?;
        let ops: Vec<&Operation> = tx
            .indices
            .iter()
            .filter_map(|&i| plan.operation(i))
            .collect();
        if ops.len() != tx.indices.len() {
            return Ok(ReadBack::Mixed);
        }
        let in_place: Vec<bool> = ops
            .iter()
            .map(|op| op.is_in_place(rows.get(op.keys().rk()).map(|s| &s.value)))
            .collect();
        if in_place.iter().all(|&b| b) {
            self.account.metrics().entities_written(ops.len());
            let etags = ops
                .iter()
                .map(|op| rows.get(op.keys().rk()).map(|s| s.etag.clone()))
                .collect();
            Ok(ReadBack::Applied(etags))
        } else if in_place.iter().any(|&b| b) {
            Ok(ReadBack::Mixed)
        } else {
            Ok(ReadBack::NotApplied)
        }
    }

    /// The stored rows of the transaction's operations, read with one query over the
    /// partition between its smallest and largest RowKey (more pages only if over 1,000 other
    /// rows lie in between). With a codec, the rows are decoded — only the transaction's own,
    /// so that another row in the range cannot fail the read.
    pub(crate) async fn read_rows(
        &self,
        plan: &BatchPlan,
        tx: &EncodedTransaction,
    ) -> Result<Rows> {
        let keys = tx
            .indices
            .iter()
            .filter_map(|&i| plan.operation(i))
            .map(|op| op.keys().rk());
        let (Some(min), Some(max)) = (keys.clone().min(), keys.clone().max()) else {
            return Ok(Rows::new());
        };
        let filter = Filter::row_range(
            tx.partition_key.as_str(),
            std::ops::Bound::Included(min),
            std::ops::Bound::Included(max),
        );
        let rows = self
            .without_codec()
            .query::<Properties>()
            .filter(filter)
            .allow_scan()
            .collect()
            .await?;
        let mut out = Rows::with_capacity(tx.indices.len());
        for row in rows {
            let rk = row.keys.rk().to_owned();
            match &self.codec {
                None => {
                    out.insert(rk, row);
                }
                Some(codec) if keys.clone().any(|k| k == rk) => {
                    out.insert(rk, self.decode_stored(codec.as_ref(), row).await?);
                }
                Some(_) => {}
            }
        }
        Ok(out)
    }
}

/// Errors are not `Clone` (they may hold a source); a transaction-wide failure is reported for
/// each of its operations with the same kind and message.
pub(crate) fn clone_error(e: &Error) -> Error {
    match e {
        Error::Transport { message, .. } => Error::Transport {
            message: message.clone(),
            source: None,
        },
        Error::Connection {
            failure, message, ..
        } => Error::Connection {
            failure: *failure,
            message: message.clone(),
            source: None,
        },
        Error::Throttled {
            status,
            code,
            message,
            scope,
            retry_after,
            ids,
        } => Error::Throttled {
            status: *status,
            code: code.clone(),
            message: message.clone(),
            scope: *scope,
            retry_after: *retry_after,
            ids: ids.clone(),
        },
        Error::Service {
            target,
            status,
            code,
            message,
            ids,
        } => Error::Service {
            target: target.clone(),
            status: *status,
            code: code.clone(),
            message: message.clone(),
            ids: ids.clone(),
        },
        Error::NotFound { target } => Error::NotFound {
            target: target.clone(),
        },
        Error::AlreadyExists { target } => Error::AlreadyExists {
            target: target.clone(),
        },
        Error::PreconditionFailed { target } => Error::PreconditionFailed {
            target: target.clone(),
        },
        Error::Unauthorized {
            target,
            status,
            code,
            message,
            ids,
        } => Error::Unauthorized {
            target: target.clone(),
            status: *status,
            code: code.clone(),
            message: message.clone(),
            ids: ids.clone(),
        },
        Error::Forbidden {
            target,
            status,
            code,
            message,
            ids,
        } => Error::Forbidden {
            target: target.clone(),
            status: *status,
            code: code.clone(),
            message: message.clone(),
            ids: ids.clone(),
        },
        other => Error::Service {
            target: Target::default(),
            status: other.status().unwrap_or(0),
            code: None,
            message: other.to_string(),
            ids: other.request_ids().cloned().unwrap_or_default(),
        },
    }
}
