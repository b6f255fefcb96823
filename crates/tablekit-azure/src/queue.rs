//! [`Queue`]: the storage-queue operations the eventually consistent patterns need.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use azure_core::headers::HeaderName;
use azure_core::{Method, Url};
use azure_storage::clients::ServiceType;
use base64::Engine as _;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tablekit_core::limits::{MAX_QUEUE_MESSAGE_BYTES, validate_dns_name};
use tablekit_core::{Error, ErrorKind, Limit, NameKind, ResourceKind, Result, Target};

use crate::account::Account;
use crate::metrics::RequestKind;
use crate::send::{Collected, Outcome, build_request};
use crate::url::{encode_component, join};

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

/// How long the service keeps a message that nobody deletes.
///
/// The service drops an expired message silently — no consumer sees it again and nothing
/// records that it existed — so code that relies on every message being handled (jobs, poison
/// records) puts its messages with [`MessageTtl::Never`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageTtl {
    /// The service's default: 7 days after the put. Sends no `messagettl`.
    #[default]
    ServiceDefault,
    /// This long after the put (at least 1 second; whole seconds, rounded down).
    After(Duration),
    /// Kept until deleted (`messagettl=-1`; the service reports its expiration time as the
    /// end of year 9999).
    Never,
}

impl MessageTtl {
    /// The service's default time to live.
    pub const SERVICE_DEFAULT: Duration = Duration::from_secs(7 * 24 * 3600);

    /// How long a message lives, `None` for ever.
    pub fn duration(self) -> Option<Duration> {
        match self {
            Self::ServiceDefault => Some(Self::SERVICE_DEFAULT),
            Self::After(d) => Some(d),
            Self::Never => None,
        }
    }

    /// The `messagettl` query value, if one is sent.
    fn query_value(self) -> Result<Option<String>> {
        match self {
            Self::ServiceDefault => Ok(None),
            Self::Never => Ok(Some("-1".into())),
            Self::After(d) if d < Duration::from_secs(1) => Err(Error::InvalidConfig {
                part: "ttl".into(),
                reason: "a message's time to live is at least 1 second".into(),
            }),
            Self::After(d) => {
                let secs = i32::try_from(d.as_secs()).map_err(|_| Error::InvalidConfig {
                    part: "ttl".into(),
                    reason: format!(
                        "at most {} seconds; use MessageTtl::Never to keep a message",
                        i32::MAX
                    ),
                })?;
                Ok(Some(secs.to_string()))
            }
        }
    }
}

/// Options of [`Queue::send`]: [`SendOptions::default`] and the `with_*` setters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SendOptions {
    /// Keep the message invisible for this long first (at most 7 days, and less than its
    /// time to live).
    pub visibility_delay: Option<Duration>,
    /// How long the service keeps the message if nobody deletes it (default: the service's
    /// 7 days, after which it is dropped silently).
    pub ttl: MessageTtl,
}

impl SendOptions {
    /// Sets how long the message stays invisible after it is put.
    #[must_use]
    pub fn with_visibility_delay(mut self, delay: Duration) -> Self {
        self.visibility_delay = Some(delay);
        self
    }

    /// Sets how long the service keeps the message if nobody deletes it.
    #[must_use]
    pub fn with_ttl(mut self, ttl: MessageTtl) -> Self {
        self.ttl = ttl;
        self
    }
}

/// The parts of a `QueueMessagesList` response tablekit reads.
#[derive(Deserialize)]
struct QueueMessagesList {
    #[serde(rename = "QueueMessage", default)]
    messages: Vec<RawMessage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawMessage {
    message_id: String,
    #[serde(default)]
    pop_receipt: String,
    #[serde(default)]
    insertion_time: String,
    #[serde(default)]
    expiration_time: String,
    #[serde(default)]
    time_next_visible: String,
    #[serde(default)]
    dequeue_count: u64,
    #[serde(default)]
    message_text: String,
}

impl RawMessage {
    fn into_message(self) -> Message {
        Message {
            payload: decode(&self.message_text),
            id: self.message_id,
            pop_receipt: self.pop_receipt,
            dequeue_count: self.dequeue_count,
            inserted: rfc1123(&self.insertion_time),
            next_visible: rfc1123(&self.time_next_visible),
            expires: rfc1123(&self.expiration_time),
        }
    }
}

fn rfc1123(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc2822(text)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

fn message_body(text: &str) -> Bytes {
    // Base64 text needs no XML escaping.
    Bytes::from(format!(
        "<QueueMessage><MessageText>{text}</MessageText></QueueMessage>"
    ))
}

fn decode(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_else(|_| text.as_bytes().to_vec())
}

/// Refuses a message whose encoded text exceeds the service's 64 KiB.
fn check_message_size(text: &str) -> Result<()> {
    if text.len() > MAX_QUEUE_MESSAGE_BYTES {
        return Err(Error::LimitExceeded {
            limit: Limit::QueueMessageBytes,
            actual: text.len(),
        });
    }
    Ok(())
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

    /// An SDK client for this queue with the same credentials, endpoint and HTTP stack, for
    /// anything tablekit does not cover. Requests made through it are counted in the
    /// account's metrics but are not retried by tablekit.
    pub fn client(&self) -> azure_storage_queues::QueueClient {
        azure_storage_queues::QueueServiceClientBuilder::with_location(
            self.account.location(ServiceType::Queue),
            self.account.storage_credentials().clone(),
        )
        .client_options(self.account.client_options().clone())
        .build()
        .queue_client(self.name.to_string())
    }

    fn target(&self) -> Target {
        Target::resource(ResourceKind::Queue, self.name.as_ref())
    }

    fn url(&self, path: &str, query: &[(&str, &str)]) -> Url {
        let mut full = encode_component(&self.name);
        if !path.is_empty() {
            full.push('/');
            full.push_str(path);
        }
        join(&self.account.endpoints().queue, &full, query)
    }

    async fn request(
        &self,
        kind: RequestKind,
        method: Method,
        url: Url,
        body: Option<Bytes>,
    ) -> Outcome<Collected> {
        let headers = || {
            body.as_ref().map(|_| {
                (
                    HeaderName::from_static("content-type"),
                    "application/xml".to_owned(),
                )
            })
        };
        self.account
            .send(ServiceType::Queue, kind, &self.target(), || {
                build_request(method, url.clone(), headers(), body.as_ref())
            })
            .await
    }

    fn messages(response: &Collected) -> Result<Vec<Message>> {
        let list: QueueMessagesList = azure_core::xml::read_xml(&response.body)
            .map_err(|e| Error::transport("malformed queue response", e))?;
        Ok(list
            .messages
            .into_iter()
            .map(RawMessage::into_message)
            .collect())
    }

    /// Creates the queue; succeeds if it already exists (without metadata).
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// Transport and service errors.
    pub async fn create(&self) -> Result<()> {
        self.request(
            RequestKind::QueueCreate,
            Method::Put,
            self.url("", &[]),
            None,
        )
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
    pub async fn delete_queue(&self) -> Result<()> {
        let outcome = self
            .request(
                RequestKind::QueueDelete,
                Method::Delete,
                self.url("", &[]),
                None,
            )
            .await;
        outcome.done_if_retried(|e| e.kind() == ErrorKind::NotFound)
    }

    /// Puts a message. Returns its id.
    ///
    /// Requests: 1. Not idempotent: a retry after a lost response can put the message twice,
    /// so consumers must be idempotent (as the patterns require anyway). The message lives as
    /// long as `options.ttl` says; with the default, the service drops it after 7 days.
    ///
    /// # Errors
    /// Before any request: [`Error::LimitExceeded`] when the encoded message exceeds 64 KiB;
    /// [`Error::InvalidConfig`] for a delay over 7 days, a [`MessageTtl::After`] under 1 second
    /// (or over `i32::MAX` seconds), or a delay not shorter than the time to live (the message
    /// would expire before anyone could see it). [`Error::NotFound`] if the queue does not
    /// exist.
    pub async fn send(&self, payload: &[u8], options: SendOptions) -> Result<String> {
        let text = base64::engine::general_purpose::STANDARD.encode(payload);
        check_message_size(&text)?;
        let delay = options
            .visibility_delay
            .map(|d| check_visibility("visibility_delay", d).map(|()| d.as_secs().to_string()))
            .transpose()?;
        let ttl = options.ttl.query_value()?;
        if let (Some(delay), Some(ttl)) = (options.visibility_delay, options.ttl.duration()) {
            if delay >= ttl {
                return Err(Error::InvalidConfig {
                    part: "visibility_delay".into(),
                    reason: format!(
                        "a delay of {delay:?} is not shorter than the message's time to live \
                         ({ttl:?}): it would expire before it becomes visible"
                    ),
                });
            }
        }
        let mut query = Vec::new();
        if let Some(d) = &delay {
            query.push(("visibilitytimeout", d.as_str()));
        }
        if let Some(t) = &ttl {
            query.push(("messagettl", t.as_str()));
        }
        let response = self
            .request(
                RequestKind::QueuePut,
                Method::Post,
                self.url("messages", &query),
                Some(message_body(&text)),
            )
            .await
            .result?;
        Self::messages(&response)?
            .into_iter()
            .next()
            .map(|m| m.id)
            .ok_or_else(|| {
                Error::transport(
                    "the service did not return the message",
                    std::io::Error::other("empty list"),
                )
            })
    }

    /// Dequeues up to `max` (1–32) messages, hiding them for `visibility_timeout` (at least
    /// 1 s).
    ///
    /// Requests: 1 (an empty queue returns an empty list).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for `max` outside 1–32 or a timeout over 7 days.
    pub async fn receive(&self, max: u8, visibility_timeout: Duration) -> Result<Vec<Message>> {
        check_count(max)?;
        check_visibility("visibility_timeout", visibility_timeout)?;
        let (n, timeout) = (
            max.to_string(),
            visibility_timeout.as_secs().max(1).to_string(),
        );
        let url = self.url(
            "messages",
            &[("numofmessages", &n), ("visibilitytimeout", &timeout)],
        );
        Self::messages(
            &self
                .request(RequestKind::QueueGet, Method::Get, url, None)
                .await
                .result?,
        )
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
        self.update_payload(message, &message.payload, visibility_timeout)
            .await
    }

    /// Replaces a dequeued message's payload with `payload` and sets its invisibility to
    /// `visibility_timeout` from now. Returns the message with its new payload and receipt.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// As [`Queue::update`]; [`Error::LimitExceeded`] before any request for a payload
    /// larger than a message may be.
    pub async fn update_payload(
        &self,
        message: &Message,
        payload: &[u8],
        visibility_timeout: Duration,
    ) -> Result<Message> {
        check_visibility("visibility_timeout", visibility_timeout)?;
        let text = base64::engine::general_purpose::STANDARD.encode(payload);
        check_message_size(&text)?;
        let timeout = visibility_timeout.as_secs().to_string();
        let url = self.url(
            &format!("messages/{}", encode_component(&message.id)),
            &[
                ("popreceipt", &message.pop_receipt),
                ("visibilitytimeout", &timeout),
            ],
        );
        let response = self
            .request(
                RequestKind::QueueUpdate,
                Method::Put,
                url,
                Some(message_body(&text)),
            )
            .await
            .result?;
        let pop_receipt = response
            .header("x-ms-popreceipt")
            .unwrap_or_default()
            .to_owned();
        let next_visible = response
            .header("x-ms-time-next-visible")
            .map(rfc1123)
            .unwrap_or_default();
        Ok(Message {
            pop_receipt,
            next_visible,
            payload: payload.to_vec(),
            ..message.clone()
        })
    }

    /// Deletes a dequeued message.
    ///
    /// Requests: 1. A retry after a lost response that finds the message gone counts as
    /// success.
    ///
    /// # Errors
    /// [`Error::PreconditionFailed`] when the receipt is stale (the message reappeared and was
    /// dequeued by another consumer), [`Error::NotFound`] when the message is already gone.
    pub async fn delete_message(&self, message: &Message) -> Result<()> {
        let url = self.url(
            &format!("messages/{}", encode_component(&message.id)),
            &[("popreceipt", &message.pop_receipt)],
        );
        let outcome = self
            .request(RequestKind::QueueDeleteMessage, Method::Delete, url, None)
            .await;
        outcome.done_if_retried(|e| e.kind() == ErrorKind::NotFound)
    }

    /// The approximate number of messages (visible or not).
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::NotFound`] if the queue does not exist.
    pub async fn approximate_len(&self) -> Result<usize> {
        let response = self
            .request(
                RequestKind::QueueMetadata,
                Method::Get,
                self.url("", &[("comp", "metadata")]),
                None,
            )
            .await
            .result?;
        Ok(response
            .header("x-ms-approximate-messages-count")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0))
    }

    /// The payloads of up to `max` (1–32) visible messages, without dequeuing them.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for `max` outside 1–32.
    pub async fn peek(&self, max: u8) -> Result<Vec<Vec<u8>>> {
        check_count(max)?;
        let n = max.to_string();
        let url = self.url("messages", &[("numofmessages", &n), ("peekonly", "true")]);
        Ok(Self::messages(
            &self
                .request(RequestKind::QueuePeek, Method::Get, url, None)
                .await
                .result?,
        )?
        .into_iter()
        .map(|m| m.payload)
        .collect())
    }
}

fn check_count(max: u8) -> Result<()> {
    if (1..=32).contains(&max) {
        Ok(())
    } else {
        Err(Error::InvalidConfig {
            part: "max".into(),
            reason: "1 to 32 messages per request".into(),
        })
    }
}
