//! [`Queue`]: the storage-queue operations the eventually consistent patterns need.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use azure_storage_queues::{
    MessageTTL, NumberOfMessages, PopReceipt, QueueClient, VisibilityTimeout,
};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use tablekit_core::limits::{MAX_QUEUE_MESSAGE_BYTES, validate_dns_name};
use tablekit_core::{Error, ErrorKind, Limit, NameKind, ResourceKind, Result, Target};
use tracing::Instrument as _;

use crate::account::Account;
use crate::metrics::RequestKind;

/// Largest visibility timeout or delay the service accepts: 7 days.
pub const MAX_VISIBILITY: Duration = Duration::from_secs(7 * 24 * 3600);

/// A handle on one storage queue. Cheap to clone.
///
/// Payloads are bytes, sent base64-encoded (so any bytes survive XML and every SDK can read
/// them back); messages written by other clients without encoding are returned as their text.
#[derive(Clone)]
pub struct Queue {
    account: Account,
    name: Arc<str>,
    client: QueueClient,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.name)
            .field("account", &self.account.name())
            .finish()
    }
}

/// A dequeued message: invisible to other consumers until its visibility timeout ends, then
/// visible again with a higher dequeue count unless deleted.
#[derive(Clone, PartialEq, Eq)]
pub struct Message {
    /// The message id (stable across dequeues).
    pub id: String,
    /// The receipt of this dequeue, needed to update or delete the message.
    pub pop_receipt: String,
    /// How many times the message has been dequeued, this time included.
    pub dequeue_count: u64,
    /// The payload as it was put.
    pub payload: Vec<u8>,
    /// When the message was first put.
    pub inserted: DateTime<Utc>,
    /// When it becomes visible again unless deleted or updated.
    pub next_visible: DateTime<Utc>,
    /// When the service drops it.
    pub expires: DateTime<Utc>,
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.id)
            .field("dequeue_count", &self.dequeue_count)
            .field("payload_len", &self.payload.len())
            .field("next_visible", &self.next_visible)
            .finish_non_exhaustive()
    }
}

/// Options of [`Queue::put`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// Keep the message invisible for this long first (at most 7 days).
    pub visibility_delay: Option<Duration>,
    /// Drop the message after this long (service default: 7 days).
    pub ttl: Option<Duration>,
}

fn to_chrono(t: time::OffsetDateTime) -> DateTime<Utc> {
    DateTime::from_timestamp(t.unix_timestamp(), t.nanosecond()).unwrap_or_default()
}

fn decode(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_else(|_| text.as_bytes().to_vec())
}

fn check_visibility(what: &str, d: Duration) -> Result<()> {
    if d > MAX_VISIBILITY {
        return Err(Error::InvalidConfig {
            part: what.into(),
            reason: "at most 7 days".into(),
        });
    }
    Ok(())
}

impl Account {
    /// A handle on the queue `name`. No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for names breaking the queue naming rules.
    pub fn queue(&self, name: &str) -> Result<Queue> {
        validate_dns_name(NameKind::Queue, name)?;
        Ok(Queue {
            account: self.clone(),
            name: Arc::from(name),
            client: self.queue_service().queue_client(name),
        })
    }
}

impl Queue {
    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The account this queue belongs to.
    pub fn account(&self) -> &Account {
        &self.account
    }

    fn target(&self) -> Target {
        Target::resource(ResourceKind::Queue, self.name.as_ref())
    }

    /// Creates the queue; succeeds if it already exists (without metadata).
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// Transport and service errors.
    pub async fn create(&self) -> Result<()> {
        let span = tracing::debug_span!("tablekit.queue.create", queue = %self.name);
        self.account
            .run_sdk(RequestKind::QueueCreate, &self.target(), |ctx| {
                self.client.create().context(ctx).into_future()
            })
            .instrument(span)
            .await
            .result
            .map(|_| ())
    }

    /// Deletes the queue and its messages.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::NotFound`] if it does not exist.
    pub async fn delete(&self) -> Result<()> {
        let outcome = self
            .account
            .run_sdk(RequestKind::QueueDelete, &self.target(), |ctx| {
                self.client.delete().context(ctx).into_future()
            })
            .await;
        match outcome.result {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound && outcome.attempts > 1 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Puts a message.
    ///
    /// Requests: 1. Not idempotent: a retry after a lost response can put the message twice,
    /// so consumers must be idempotent (as the patterns require anyway).
    ///
    /// # Errors
    /// Before any request: [`Error::LimitExceeded`] when the encoded message exceeds 64 KiB,
    /// [`Error::InvalidConfig`] for a delay over 7 days. [`Error::NotFound`] if the queue does
    /// not exist.
    pub async fn put(&self, payload: &[u8], options: PutOptions) -> Result<String> {
        let text = base64::engine::general_purpose::STANDARD.encode(payload);
        if text.len() > MAX_QUEUE_MESSAGE_BYTES {
            return Err(Error::LimitExceeded {
                limit: Limit::QueueMessageBytes,
                actual: text.len(),
            });
        }
        if let Some(d) = options.visibility_delay {
            check_visibility("visibility_delay", d)?;
        }
        let span =
            tracing::debug_span!("tablekit.queue.put", queue = %self.name, bytes = payload.len());
        let outcome = self
            .account
            .run_sdk(RequestKind::QueuePut, &self.target(), |ctx| {
                let mut put = self.client.put_message(text.clone()).context(ctx);
                if let Some(d) = options.visibility_delay {
                    put = put.visibility_timeout(VisibilityTimeout::new(d));
                }
                if let Some(ttl) = options.ttl {
                    put = put.ttl(MessageTTL::new(ttl));
                }
                put.into_future()
            })
            .instrument(span)
            .await;
        outcome.result.map(|r| r.queue_message.message_id)
    }

    /// Dequeues up to `max` (1–32) messages, hiding them for `visibility_timeout`.
    ///
    /// Requests: 1 (an empty queue returns an empty list).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for `max` outside 1–32 or a timeout over 7 days.
    pub async fn get(&self, max: u8, visibility_timeout: Duration) -> Result<Vec<Message>> {
        if !(1..=32).contains(&max) {
            return Err(Error::InvalidConfig {
                part: "max".into(),
                reason: "1 to 32 messages per request".into(),
            });
        }
        check_visibility("visibility_timeout", visibility_timeout)?;
        let outcome = self
            .account
            .run_sdk(RequestKind::QueueGet, &self.target(), |ctx| {
                self.client
                    .get_messages()
                    .number_of_messages(NumberOfMessages::new(max))
                    .visibility_timeout(VisibilityTimeout::new(
                        visibility_timeout.max(Duration::from_secs(1)),
                    ))
                    .context(ctx)
                    .into_future()
            })
            .await;
        let messages = outcome.result?.messages;
        Ok(messages
            .into_iter()
            .map(|m| Message {
                payload: decode(&m.message_text),
                id: m.message_id,
                pop_receipt: m.pop_receipt,
                dequeue_count: m.dequeue_count,
                inserted: to_chrono(m.insertion_time),
                next_visible: to_chrono(m.time_next_visible),
                expires: to_chrono(m.expiration_time),
            })
            .collect())
    }

    /// Extends (or shortens) a dequeued message's invisibility to `visibility_timeout` from
    /// now, keeping its payload. Returns the message with its new receipt, which replaces the
    /// old one for later updates and the delete.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::PreconditionFailed`] when the receipt is stale (the message reappeared and was
    /// dequeued by another consumer), [`Error::NotFound`] when the message is gone.
    pub async fn update(&self, message: &Message, visibility_timeout: Duration) -> Result<Message> {
        check_visibility("visibility_timeout", visibility_timeout)?;
        let text = base64::engine::general_purpose::STANDARD.encode(&message.payload);
        let receipt = PopReceipt::new(message.id.clone(), message.pop_receipt.clone());
        let outcome = self
            .account
            .run_sdk(RequestKind::QueueUpdate, &self.target(), |ctx| {
                self.client
                    .pop_receipt_client(receipt.clone())
                    .update(text.clone(), VisibilityTimeout::new(visibility_timeout))
                    .context(ctx)
                    .into_future()
            })
            .await;
        let updated = outcome.result?;
        Ok(Message {
            pop_receipt: updated.pop_receipt,
            next_visible: to_chrono(updated.time_next_visible),
            ..message.clone()
        })
    }

    /// Deletes a dequeued message.
    ///
    /// Requests: 1. Idempotent with respect to lost responses: a retry that finds the message
    /// gone counts as success.
    ///
    /// # Errors
    /// [`Error::PreconditionFailed`] when the receipt is stale (the message reappeared and was
    /// dequeued by another consumer), [`Error::NotFound`] when the message is already gone.
    pub async fn delete_message(&self, message: &Message) -> Result<()> {
        let receipt = PopReceipt::new(message.id.clone(), message.pop_receipt.clone());
        let outcome = self
            .account
            .run_sdk(RequestKind::QueueDeleteMessage, &self.target(), |ctx| {
                self.client
                    .pop_receipt_client(receipt.clone())
                    .delete()
                    .context(ctx)
                    .into_future()
            })
            .await;
        match outcome.result {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound && outcome.attempts > 1 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The approximate number of messages (visible or not).
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::NotFound`] if the queue does not exist.
    pub async fn approximate_count(&self) -> Result<usize> {
        let outcome = self
            .account
            .run_sdk(RequestKind::QueueMetadata, &self.target(), |ctx| {
                self.client.get_metadata().context(ctx).into_future()
            })
            .await;
        outcome.result.map(|r| r.approximate_messages_count)
    }

    /// The payloads of up to `max` (1–32) visible messages, without dequeuing them.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for `max` outside 1–32.
    pub async fn peek(&self, max: u8) -> Result<Vec<Vec<u8>>> {
        if !(1..=32).contains(&max) {
            return Err(Error::InvalidConfig {
                part: "max".into(),
                reason: "1 to 32 messages per request".into(),
            });
        }
        let outcome = self
            .account
            .run_sdk(RequestKind::QueuePeek, &self.target(), |ctx| {
                self.client
                    .peek_messages()
                    .number_of_messages(NumberOfMessages::new(max))
                    .context(ctx)
                    .into_future()
            })
            .await;
        Ok(outcome
            .result?
            .messages
            .into_iter()
            .map(|m| decode(&m.message_text))
            .collect())
    }
}
