//! The `multipart/mixed` request body of an entity group transaction.

use super::path::entity_path;
use crate::batch::{BatchPlan, OperationKind, Planned};
use crate::error::{Error, Limit, Result};
use crate::keys::PartitionKey;
use crate::limits::{MAX_TRANSACTION_BYTES, MAX_TRANSACTION_OPERATIONS};

/// One transaction ready to send: `POST {service}/$batch` with this content type and body.
#[derive(Clone, PartialEq, Eq)]
pub struct EncodedTransaction {
    /// The partition every operation addresses.
    pub partition_key: PartitionKey,
    /// The caller's index of each operation, in body order (a service error names the
    /// operation by its position in this list).
    pub indices: Vec<usize>,
    /// The request's `Content-Type` (`multipart/mixed; boundary=batch_…`).
    pub content_type: String,
    /// The exact request body; always below 4 MiB.
    pub body: Vec<u8>,
}

impl std::fmt::Debug for EncodedTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The body can be megabytes: show its size, not its bytes.
        f.debug_struct("EncodedTransaction")
            .field("partition_key", &self.partition_key)
            .field("indices", &self.indices)
            .field("content_type", &self.content_type)
            .field("body_len", &self.body.len())
            .finish()
    }
}

const CRLF: &[u8] = b"\r\n";

struct Builder {
    batch: String,
    changeset: String,
    body: Vec<u8>,
    indices: Vec<usize>,
}

impl Builder {
    fn new() -> Self {
        let batch = format!("batch_{}", uuid::Uuid::new_v4());
        let changeset = format!("changeset_{}", uuid::Uuid::new_v4());
        let mut body = Vec::with_capacity(64 * 1024);
        body.extend_from_slice(b"--");
        body.extend_from_slice(batch.as_bytes());
        body.extend_from_slice(b"\r\nContent-Type: multipart/mixed; boundary=");
        body.extend_from_slice(changeset.as_bytes());
        body.extend_from_slice(b"\r\n\r\n");
        Self {
            batch,
            changeset,
            body,
            indices: Vec::new(),
        }
    }

    /// Length of the closing boundaries that [`Builder::finish`] appends.
    fn epilogue_len(&self) -> usize {
        2 + self.changeset.len() + 4 + 2 + self.batch.len() + 4
    }

    fn push(&mut self, service_url: &str, table: &str, planned: &Planned) {
        let op = &planned.operation;
        let b = &mut self.body;
        b.extend_from_slice(b"--");
        b.extend_from_slice(self.changeset.as_bytes());
        b.extend_from_slice(
            b"\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n",
        );
        b.extend_from_slice(op.kind().method().as_bytes());
        b.push(b' ');
        b.extend_from_slice(service_url.as_bytes());
        b.push(b'/');
        if op.kind() == OperationKind::Insert {
            b.extend_from_slice(table.as_bytes());
        } else {
            b.extend_from_slice(entity_path(table, op.keys()).as_bytes());
        }
        b.extend_from_slice(b" HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nDataServiceVersion: 3.0;\r\n");
        if let Some(if_match) = op.if_match() {
            b.extend_from_slice(b"If-Match: ");
            b.extend_from_slice(if_match.header_value().as_bytes());
            b.extend_from_slice(CRLF);
        }
        match op.body() {
            Some(json) => {
                b.extend_from_slice(
                    b"Content-Type: application/json\r\nPrefer: return-no-content\r\n\r\n",
                );
                b.extend_from_slice(json);
                b.extend_from_slice(CRLF);
            }
            None => b.extend_from_slice(CRLF),
        }
        self.indices.push(planned.index);
    }

    fn finish(mut self, partition_key: &PartitionKey) -> EncodedTransaction {
        self.body.extend_from_slice(b"--");
        self.body.extend_from_slice(self.changeset.as_bytes());
        self.body.extend_from_slice(b"--\r\n--");
        self.body.extend_from_slice(self.batch.as_bytes());
        self.body.extend_from_slice(b"--\r\n");
        EncodedTransaction {
            partition_key: partition_key.clone(),
            indices: self.indices,
            content_type: format!("multipart/mixed; boundary={}", self.batch),
            body: self.body,
        }
    }
}

/// Encodes `plan` into transaction request bodies for `table` of the service at
/// `service_url` (e.g. `https://acct.table.core.windows.net`), splitting best-effort plans at
/// 100 operations and wherever the exact encoded body would reach 4 MiB.
///
/// # Errors
/// [`Error::LimitExceeded`] with [`Limit::TransactionBytes`] when an atomic plan's body would
/// reach 4 MiB.
pub fn encode(plan: &BatchPlan, service_url: &str, table: &str) -> Result<Vec<EncodedTransaction>> {
    let mut out = Vec::new();
    for (pk, ops) in plan.groups() {
        encode_group(service_url, table, pk, ops, plan.is_atomic(), &mut out)?;
    }
    Ok(out)
}

/// Encodes one partition's operations, splitting (or, when atomic, refusing) at the limits.
fn encode_group(
    service_url: &str,
    table: &str,
    partition_key: &PartitionKey,
    ops: &[Planned],
    atomic: bool,
    out: &mut Vec<EncodedTransaction>,
) -> Result<()> {
    let mut tx = Builder::new();
    if atomic {
        // One transaction by definition: encode it whole and refuse it if it is too large.
        for planned in ops {
            tx.push(service_url, table, planned);
        }
        let size = tx.body.len() + tx.epilogue_len();
        if size > MAX_TRANSACTION_BYTES {
            return Err(Error::LimitExceeded {
                limit: Limit::TransactionBytes,
                actual: size,
            });
        }
        out.push(tx.finish(partition_key));
        return Ok(());
    }
    for planned in ops {
        let mark = tx.body.len();
        tx.push(service_url, table, planned);
        let size = tx.body.len() + tx.epilogue_len();
        if tx.indices.len() <= MAX_TRANSACTION_OPERATIONS && size <= MAX_TRANSACTION_BYTES {
            continue;
        }
        // Take the operation back out and start the next transaction with it.
        tx.body.truncate(mark);
        tx.indices.pop();
        if tx.indices.is_empty() {
            // Unreachable for valid entities (1 MiB each), kept as a guard against a loop.
            return Err(Error::LimitExceeded {
                limit: Limit::TransactionBytes,
                actual: size,
            });
        }
        out.push(std::mem::replace(&mut tx, Builder::new()).finish(partition_key));
        tx.push(service_url, table, planned);
    }
    if !tx.indices.is_empty() {
        out.push(tx.finish(partition_key));
    }
    Ok(())
}
