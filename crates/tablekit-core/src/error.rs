//! The one error type shared by every tablekit crate.
//!
//! This module depends only on the plain data it names ([`Keys`], [`QueryShape`]); the
//! modules that validate keys, names and limits depend on it, not the other way round. The
//! limits' maximums ([`Limit::max`]) are implemented next to their constants in
//! [`crate::limits`].

use std::fmt;
use std::time::Duration;

use crate::address::Keys;
use crate::query_shape::QueryShape;

/// A boxed error from a lower layer (HTTP client, I/O).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with tablekit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which key of an entity a key error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyKind {
    /// The `PartitionKey`.
    PartitionKey,
    /// The `RowKey`.
    RowKey,
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyKind::PartitionKey => "PartitionKey",
            KeyKind::RowKey => "RowKey",
        })
    }
}

/// What kind of name an [`Error::InvalidName`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NameKind {
    /// A table name (`^[A-Za-z][A-Za-z0-9]{2,62}$`, not `tables`).
    Table,
    /// A property name (≤ 255 characters, identifier-like, not a system name).
    Property,
    /// A queue name (3–63 lowercase letters, digits and single hyphens).
    Queue,
    /// A blob container name (same rules as queues).
    Container,
    /// A blob name.
    Blob,
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Table => "table",
            NameKind::Property => "property",
            NameKind::Queue => "queue",
            NameKind::Container => "container",
            NameKind::Blob => "blob",
        })
    }
}

/// A service limit that a request would exceed. [`Limit::max`] gives the largest value allowed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// Size of a PartitionKey or RowKey: 1 KiB, counted as UTF-16 code units × 2.
    KeyBytes(KeyKind),
    /// User properties per entity: 252 (255 including PartitionKey, RowKey, Timestamp).
    UserProperties,
    /// Size of an entity: 1 MiB, counted the way the service counts.
    EntityBytes,
    /// Size of one String (UTF-16 units × 2) or Binary property: 64 KiB.
    PropertyBytes {
        /// The property.
        property: String,
    },
    /// Length of a property name: 255 characters.
    PropertyNameChars,
    /// Operations in one entity group transaction: 100.
    TransactionOperations,
    /// Request body of one entity group transaction: less than 4 MiB.
    TransactionBytes,
    /// Entities per query page (`$top` / page size): 1,000.
    PageSize,
    /// Queue message size: 64 KiB (of base64-encoded text).
    QueueMessageBytes,
    /// A limit set by the caller (e.g. a pattern's declared capacity).
    Custom {
        /// What is limited.
        what: String,
        /// The largest value allowed.
        max: usize,
    },
}

/// The kind of resource a request addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ResourceKind {
    /// A table (or an entity in it).
    #[default]
    Table,
    /// A storage queue (or a message in it).
    Queue,
    /// A blob container.
    Container,
    /// A blob (`container/name`).
    Blob,
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResourceKind::Table => "table",
            ResourceKind::Queue => "queue",
            ResourceKind::Container => "container",
            ResourceKind::Blob => "blob",
        })
    }
}

/// What a failed request addressed: a table, queue, container or blob and, for entities,
/// the keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    /// The kind of resource.
    pub kind: ResourceKind,
    /// Its name (`container/blob` for blobs; empty when not known).
    pub table: String,
    /// The entity's keys, when the request addressed one entity (boxed to keep [`Error`]
    /// small on the happy path).
    pub keys: Option<Box<Keys>>,
}

impl Target {
    /// A target naming a table only.
    pub fn table(table: impl Into<String>) -> Self {
        Self {
            kind: ResourceKind::Table,
            table: table.into(),
            keys: None,
        }
    }

    /// A target naming one entity of a table.
    pub fn entity(table: impl Into<String>, keys: Keys) -> Self {
        Self {
            kind: ResourceKind::Table,
            table: table.into(),
            keys: Some(Box::new(keys)),
        }
    }

    /// A target naming a queue, container or blob.
    pub fn resource(kind: ResourceKind, name: impl Into<String>) -> Self {
        Self {
            kind,
            table: name.into(),
            keys: None,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.keys {
            Some(keys) => write!(f, "entity {keys} in {} `{}`", self.kind, self.table),
            None => write!(f, "{} `{}`", self.kind, self.table),
        }
    }
}

/// Every failure tablekit reports. Match on [`Error::kind`] for a stable classification; the
/// variants carry the context (table, keys, operation index, limit) needed to act on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The table or entity does not exist (HTTP 404).
    #[error("{target} not found")]
    NotFound {
        /// What was addressed.
        target: Target,
    },
    /// The table or entity already exists (HTTP 409 on create or insert).
    #[error("{target} already exists")]
    AlreadyExists {
        /// What was addressed.
        target: Target,
    },
    /// The ETag condition did not hold: someone else changed the entity (HTTP 412).
    #[error("{target} was changed by another writer (ETag condition not met)")]
    PreconditionFailed {
        /// What was addressed.
        target: Target,
    },
    /// The service is throttling or timed out (HTTP 503, 500 OperationTimedOut, 429).
    #[error("throttled by the service (HTTP {status}{}){}{ids}", code.as_deref().map(|c| format!(", {c}")).unwrap_or_default(), if message.is_empty() { String::new() } else { format!(": {message}") })]
    Throttled {
        /// The HTTP status.
        status: u16,
        /// The service's error code.
        code: Option<String>,
        /// The service's message (empty when it gave none).
        message: String,
        /// Which of the service's targets the answer says was exceeded.
        scope: ThrottleScope,
        /// How long the service asked us to wait, if it said.
        retry_after: Option<Duration>,
        /// The request's ids, to follow it into the service's logs.
        ids: RequestIds,
    },
    /// A PartitionKey or RowKey contains a character the service does not allow.
    #[error(
        "invalid {kind}: character {character:?} at position {position} is not allowed ({reason})"
    )]
    InvalidKey {
        /// Which key.
        kind: KeyKind,
        /// The offending character.
        character: char,
        /// Its position, counted in characters from 0.
        position: usize,
        /// Why it is not allowed.
        reason: &'static str,
    },
    /// A table, property, queue, container or blob name breaks the naming rules.
    #[error("invalid {kind} name {name:?}: {reason}")]
    InvalidName {
        /// What kind of name.
        kind: NameKind,
        /// The name given.
        name: String,
        /// The rule it breaks.
        reason: String,
    },
    /// A filter cannot be rendered or is not supported.
    #[error("invalid filter: {reason}")]
    InvalidFilter {
        /// Why.
        reason: String,
    },
    /// A value cannot be stored: it has no representation in the Table service's type system
    /// (a `u64` above `i64::MAX`, a date before 1601, a nested struct), or cannot become a
    /// key (a negative zero-padded number, a time outside .NET's range). Refused before any
    /// request.
    #[error("{}", describe_encode(property, reason))]
    Encode {
        /// The property (or key component); empty for a whole entity.
        property: String,
        /// Why.
        reason: String,
    },
    /// Stored data does not fit the requested type: a property missing or of another type
    /// than the field it is read into, JSON that is not an entity.
    #[error("{}", describe_decode(target, property, reason))]
    Decode {
        /// The entity read, when known (the table is empty when not).
        target: Target,
        /// The property; empty for the entity as a whole.
        property: String,
        /// Why.
        reason: String,
    },
    /// Stored data breaks a pattern's own invariants: a blob reference to a missing blob, a
    /// checksum that does not match, a torn wide entity, a row of another shape where a
    /// pattern's row is expected. Nothing was written over it.
    #[error("{} is corrupt: {reason}", describe_target(target))]
    Corrupt {
        /// What was read.
        target: Target,
        /// Which invariant it breaks.
        reason: String,
    },
    /// An argument outside its domain: an unknown name, a width of 0, options that contradict
    /// each other. Refused before any request.
    #[error("invalid argument `{argument}`: {reason}")]
    InvalidArgument {
        /// The argument (or option) at fault.
        argument: String,
        /// Why.
        reason: String,
    },
    /// A request would exceed a service limit. Nothing was sent.
    #[error("{limit} exceeded: {actual}")]
    LimitExceeded {
        /// The limit, including its maximum.
        limit: Limit,
        /// The value the request would have had.
        actual: usize,
    },
    /// Two operations in one transaction address the same entity.
    #[error(
        "operations {first} and {second} both address {keys}; a transaction may touch an entity once"
    )]
    DuplicateInTransaction {
        /// The entity.
        keys: Keys,
        /// The caller's index of the first operation.
        first: usize,
        /// The caller's index of the second operation.
        second: usize,
    },
    /// Operations that must be atomic span more than one partition.
    #[error(
        "operations {first} and {second} are in different partitions ({a:?} and {b:?}); a transaction covers one partition"
    )]
    CrossPartitionTransaction {
        /// The caller's index of an operation in the first partition.
        first: usize,
        /// The caller's index of an operation in another partition.
        second: usize,
        /// The first partition.
        a: String,
        /// The other partition.
        b: String,
    },
    /// An operation of an entity group transaction failed; the whole transaction was rolled
    /// back. `index` is the caller's index of the failing operation.
    #[error("transaction failed at operation {index}: {source}")]
    BatchFailed {
        /// The caller's index of the failing operation.
        index: usize,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },
    /// The scan policy refused a query before it was sent.
    #[error("{shape:?} refused by the scan policy: {filter}")]
    ScanDenied {
        /// The query's shape.
        shape: QueryShape,
        /// The rendered filter.
        filter: String,
    },
    /// A configuration value (connection string, SAS, settings) is malformed.
    #[error("invalid configuration `{part}`: {reason}")]
    InvalidConfig {
        /// The offending part (a connection-string key, a setting name). Never a secret value.
        part: String,
        /// Why.
        reason: String,
    },
    /// The service did not accept the credentials (HTTP 401, or 403 `AuthenticationFailed`):
    /// an expired or malformed token, a token for another audience, a bad key or SAS
    /// signature, an expired SAS, Shared Key access disabled on the account. Fix the
    /// credentials; retrying the same request cannot succeed.
    #[error("credentials not accepted for {target} (HTTP {status}{}): {message}{ids}", code.as_deref().map(|c| format!(", {c}")).unwrap_or_default())]
    Unauthorized {
        /// What was addressed.
        target: Target,
        /// The HTTP status.
        status: u16,
        /// The service's error code.
        code: Option<String>,
        /// The service's message.
        message: String,
        /// The request's ids, to follow it into the service's logs.
        ids: RequestIds,
    },
    /// The credentials were accepted but do not allow the request (HTTP 403): a principal
    /// without the needed role assignment, a SAS without the permission or outside its key
    /// range, a firewall or protocol rule. Fix the grant; retrying cannot succeed.
    #[error("not permitted on {target} (HTTP {status}{}): {message}{ids}", code.as_deref().map(|c| format!(", {c}")).unwrap_or_default())]
    Forbidden {
        /// What was addressed.
        target: Target,
        /// The HTTP status.
        status: u16,
        /// The service's error code.
        code: Option<String>,
        /// The service's message.
        message: String,
        /// The request's ids, to follow it into the service's logs.
        ids: RequestIds,
    },
    /// Any other error response from the service.
    #[error("service error on {target} (HTTP {status}{}): {message}{ids}", code.as_deref().map(|c| format!(", {c}")).unwrap_or_default())]
    Service {
        /// What was addressed.
        target: Target,
        /// The HTTP status.
        status: u16,
        /// The service's error code.
        code: Option<String>,
        /// The service's message.
        message: String,
        /// The request's ids, to follow it into the service's logs.
        ids: RequestIds,
    },
    /// No connection could be made to the service, for a named reason: its TLS certificate
    /// was refused, its host name did not resolve, or it refused the connection. Nothing was
    /// sent. TLS failures are not retried (the same certificate will be refused again);
    /// [`ConnectionFailure::Dns`] and [`ConnectionFailure::Refused`] are, as transport errors
    /// are (a service restarting refuses connections for a moment).
    #[error("cannot connect to the service ({failure}): {message}")]
    Connection {
        /// What failed.
        failure: ConnectionFailure,
        /// The underlying reason, as the TLS stack or the resolver gave it.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The request did not complete: connection reset, timeout, body error.
    #[error("transport error: {message}")]
    Transport {
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The outcome of a write is unknown (its response was lost and the state could not be
    /// verified).
    #[error("outcome unknown for {target}: {reason}")]
    Indeterminate {
        /// What was written.
        target: Target,
        /// Why it could not be verified.
        reason: String,
    },
    /// A request was not sent because it could have landed after the deadline it was bound
    /// to: its own (the account's `Settings::write_settles_within` from its start), or one
    /// the caller set around it (a queued job's, a worker's message lease). An attempt
    /// refused this way never reaches the service; earlier attempts of the same request may
    /// have.
    #[error("not sent: {target} could have landed after its deadline ({reason})")]
    DeadlineExceeded {
        /// What was to be sent.
        target: Target,
        /// Which deadline, and how far it was.
        reason: String,
    },
}

/// The ids of a request, to follow it into the service's logs (what Azure support asks for):
/// the one the service gave it (`x-ms-request-id`) and the one the client sent
/// (`x-ms-client-request-id`). Shown by the errors that carry them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RequestIds(Option<Box<Ids>>);

/// The ids themselves, boxed: most errors carry none, and every error stays small.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Ids {
    service: Option<String>,
    client: Option<String>,
}

impl RequestIds {
    /// Ids of a request: the service's (if it answered) and the client's.
    pub fn new(service: Option<String>, client: Option<String>) -> Self {
        if service.is_none() && client.is_none() {
            return Self(None);
        }
        Self(Some(Box::new(Ids { service, client })))
    }

    /// The service's id of the request (`x-ms-request-id`), when it answered.
    pub fn service(&self) -> Option<&str> {
        self.0.as_ref().and_then(|ids| ids.service.as_deref())
    }

    /// The id the client sent (`x-ms-client-request-id`), the same for every attempt of
    /// one operation.
    pub fn client(&self) -> Option<&str> {
        self.0.as_ref().and_then(|ids| ids.client.as_deref())
    }

    /// Whether neither is known.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

impl fmt::Display for RequestIds {
    /// ` (request id …, client request id …)`, or nothing when neither is known.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.service(), self.client()) {
            (None, None) => Ok(()),
            (Some(s), None) => write!(f, " (request id {s})"),
            (None, Some(c)) => write!(f, " (client request id {c})"),
            (Some(s), Some(c)) => write!(f, " (request id {s}, client request id {c})"),
        }
    }
}

/// Why no connection could be made ([`Error::Connection`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionFailure {
    /// The server's certificate is not signed by an authority the client trusts (a private
    /// or emulator authority that was not added with the account's root certificates).
    UntrustedCertificate,
    /// The server presented a certificate authority's own certificate (`CA:TRUE`, what
    /// `openssl req -x509` makes) as its certificate: make a server certificate signed by
    /// that authority, and trust the authority.
    CaCertificateAsServer,
    /// The certificate is not valid for the host name the client connected to.
    NameMismatch,
    /// The certificate has expired, or is not valid yet.
    ExpiredCertificate,
    /// Another TLS failure (handshake, protocol, a certificate refused for another reason).
    Tls,
    /// The host name did not resolve.
    Dns,
    /// The host refused the connection (nothing listens on the port).
    Refused,
}

impl ConnectionFailure {
    /// Whether this is a TLS failure (never retried).
    pub fn is_tls(self) -> bool {
        !matches!(self, ConnectionFailure::Dns | ConnectionFailure::Refused)
    }
}

impl fmt::Display for ConnectionFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectionFailure::UntrustedCertificate => "untrusted TLS certificate",
            ConnectionFailure::CaCertificateAsServer => {
                "TLS certificate of an authority used as the server's"
            }
            ConnectionFailure::NameMismatch => "TLS certificate for another host name",
            ConnectionFailure::ExpiredCertificate => "expired or not yet valid TLS certificate",
            ConnectionFailure::Tls => "TLS failure",
            ConnectionFailure::Dns => "host name not found",
            ConnectionFailure::Refused => "connection refused",
        })
    }
}

/// Which scalability target a throttling answer ([`Error::Throttled`]) says was exceeded.
///
/// Azure Table storage answers both a partition and an account over its target with
/// `503 ServerBusy`, and tells them apart only in the message: "… is over the account limit"
/// for the account (operations per second, ingress or egress), "The server is busy." for the
/// server holding the partition. Its other throttling answer, `500 OperationTimedOut`, and the
/// Cosmos DB Table API's `429 TooManyRequests` do not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ThrottleScope {
    /// The storage account as a whole is over its target.
    Account,
    /// The partition addressed (or the server holding it) is over its target.
    Partition,
    /// The answer does not say.
    Unspecified,
}

impl ThrottleScope {
    /// The scope a throttling answer with `status`, `code` and `message` names.
    pub fn of_answer(status: u16, code: Option<&str>, message: &str) -> Self {
        if status != 503 || code.is_some_and(|c| c != "ServerBusy") {
            return ThrottleScope::Unspecified;
        }
        if message.contains("over the account limit") {
            ThrottleScope::Account
        } else if message.starts_with("The server is busy") {
            ThrottleScope::Partition
        } else {
            ThrottleScope::Unspecified
        }
    }
}

/// A stable classification of [`Error`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// 404: table or entity missing.
    NotFound,
    /// 409: table or entity exists.
    AlreadyExists,
    /// 412: ETag condition not met.
    PreconditionFailed,
    /// 429/500/503: the service asks us to slow down.
    Throttled,
    /// Bad input refused before any request (keys, names, filters, transactions, config).
    InvalidInput,
    /// A value cannot be stored ([`Error::Encode`]); nothing was sent.
    Encode,
    /// Stored data does not fit the requested type ([`Error::Decode`]).
    Decode,
    /// Stored data breaks a pattern's invariants ([`Error::Corrupt`]).
    Corrupt,
    /// An argument outside its domain ([`Error::InvalidArgument`]); nothing was sent.
    InvalidArgument,
    /// A service limit would be exceeded; nothing was sent.
    LimitExceeded,
    /// 401 or 403 `AuthenticationFailed`: the credentials were not accepted.
    Unauthorized,
    /// 403 otherwise: the credentials were accepted but lack the permission.
    Forbidden,
    /// Another service error.
    Service,
    /// Network failure or timeout.
    Transport,
    /// The server's TLS certificate was refused ([`Error::Connection`] with a TLS failure).
    Tls,
    /// The outcome of a write is unknown.
    Indeterminate,
    /// A request was not sent: it could have landed after its deadline.
    DeadlineExceeded,
}

impl Error {
    /// The classification of this error. For [`Error::BatchFailed`], that of its cause.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            Error::PreconditionFailed { .. } => ErrorKind::PreconditionFailed,
            Error::Throttled { .. } => ErrorKind::Throttled,
            Error::InvalidKey { .. }
            | Error::InvalidName { .. }
            | Error::InvalidFilter { .. }
            | Error::DuplicateInTransaction { .. }
            | Error::CrossPartitionTransaction { .. }
            | Error::ScanDenied { .. }
            | Error::InvalidConfig { .. } => ErrorKind::InvalidInput,
            Error::Encode { .. } => ErrorKind::Encode,
            Error::Decode { .. } => ErrorKind::Decode,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            Error::LimitExceeded { .. } => ErrorKind::LimitExceeded,
            Error::BatchFailed { source, .. } => source.kind(),
            Error::Unauthorized { .. } => ErrorKind::Unauthorized,
            Error::Forbidden { .. } => ErrorKind::Forbidden,
            Error::Service { .. } => ErrorKind::Service,
            Error::Transport { .. } => ErrorKind::Transport,
            Error::Connection { failure, .. } if failure.is_tls() => ErrorKind::Tls,
            Error::Connection { .. } => ErrorKind::Transport,
            Error::Indeterminate { .. } => ErrorKind::Indeterminate,
            Error::DeadlineExceeded { .. } => ErrorKind::DeadlineExceeded,
        }
    }

    /// Whether retrying the same request may succeed: throttling, timeouts (408, 500, 502, 503,
    /// 504) and transport failures. Never 400, 401, 403, 404, 409 or 412 — a 412 belongs to
    /// the caller's ETag loop, not to a blind retry.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Throttled { .. } | Error::Transport { .. } => true,
            Error::Connection { failure, .. } => !failure.is_tls(),
            Error::Service { status, .. } => is_retryable_status(*status),
            Error::BatchFailed { source, .. } => source.is_retryable(),
            _ => false,
        }
    }

    /// The HTTP status behind this error, if it came from a response.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::NotFound { .. } => Some(404),
            Error::AlreadyExists { .. } => Some(409),
            Error::PreconditionFailed { .. } => Some(412),
            Error::Throttled { status, .. }
            | Error::Unauthorized { status, .. }
            | Error::Forbidden { status, .. }
            | Error::Service { status, .. } => Some(*status),
            Error::BatchFailed { source, .. } => source.status(),
            _ => None,
        }
    }

    /// The ids of the request behind this error, when the service answered it
    /// ([`Error::Service`], [`Error::Throttled`], [`Error::Unauthorized`],
    /// [`Error::Forbidden`], also inside [`Error::BatchFailed`]).
    pub fn request_ids(&self) -> Option<&RequestIds> {
        match self {
            Error::Throttled { ids, .. }
            | Error::Unauthorized { ids, .. }
            | Error::Forbidden { ids, .. }
            | Error::Service { ids, .. } => Some(ids),
            Error::BatchFailed { source, .. } => source.request_ids(),
            _ => None,
        }
    }

    /// This error with the request's ids, for the variants that carry them (others are
    /// returned unchanged).
    #[must_use]
    pub fn with_request_ids(mut self, request: RequestIds) -> Self {
        match &mut self {
            Error::Throttled { ids, .. }
            | Error::Unauthorized { ids, .. }
            | Error::Forbidden { ids, .. }
            | Error::Service { ids, .. } => *ids = request,
            Error::BatchFailed { source, .. } => {
                let inner = std::mem::replace(
                    source.as_mut(),
                    Error::Transport {
                        message: String::new(),
                        source: None,
                    },
                );
                **source = inner.with_request_ids(request);
            }
            _ => {}
        }
        self
    }

    /// A transport error with a message and its cause.
    pub fn transport(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Transport {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An [`Error::Encode`]: `property`'s value cannot be stored.
    pub fn encode(property: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Encode {
            property: property.into(),
            reason: reason.into(),
        }
    }

    /// An [`Error::Decode`]: `property` of the entity at `target` does not fit the requested
    /// type. Use [`Target::default`] when the entity is not known.
    pub fn decode(target: Target, property: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Decode {
            target,
            property: property.into(),
            reason: reason.into(),
        }
    }

    /// An [`Error::Corrupt`]: what was read at `target` breaks a pattern's invariants.
    pub fn corrupt(target: Target, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            target,
            reason: reason.into(),
        }
    }

    /// An [`Error::InvalidArgument`]: `argument` is outside its domain.
    pub fn invalid_argument(argument: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            argument: argument.into(),
            reason: reason.into(),
        }
    }

    /// This error with the gaps of its target filled in from `target`: the table (and kind)
    /// when it names none, the keys when it has none. For [`Error::Decode`] and
    /// [`Error::Corrupt`] found in a body or a property bag, which does not say where it was
    /// read from, by the caller who knows. Other errors are returned unchanged.
    #[must_use]
    pub fn with_target(self, target: Target) -> Self {
        let fill = |mut t: Target| {
            if t.table.is_empty() {
                t.kind = target.kind;
                t.table = target.table;
            }
            if t.keys.is_none() {
                t.keys = target.keys;
            }
            t
        };
        match self {
            Error::Decode {
                target: t,
                property,
                reason,
            } => Error::Decode {
                target: fill(t),
                property,
                reason,
            },
            Error::Corrupt { target: t, reason } => Error::Corrupt {
                target: fill(t),
                reason,
            },
            other => other,
        }
    }

    /// Whether this error means "another writer got there first", the signal an optimistic
    /// concurrency loop retries on: a 412 (the ETag changed since the read), or a 409 on an
    /// insert (an entity — or a create-only blob — was created since the read); also as the
    /// cause of [`Error::BatchFailed`]. Not a 409 on creating a table, queue or container.
    ///
    /// A 404 on a conditional write of a row read a moment ago is also a lost race (the row
    /// was deleted since); code that knows it wrote conditionally turns it into a conflict
    /// with [`Error::not_found_as_conflict`].
    pub fn is_conflict(&self) -> bool {
        match self {
            Error::PreconditionFailed { .. } => true,
            Error::AlreadyExists { target } => {
                target.keys.is_some() || target.kind == ResourceKind::Blob
            }
            Error::BatchFailed { source, .. } => source.is_conflict(),
            _ => false,
        }
    }

    /// This error, with a 404 about an entity (also as the cause of [`Error::BatchFailed`])
    /// turned into [`Error::PreconditionFailed`] for the same entity.
    ///
    /// For the error of a write conditioned on an ETag just read: a 404 then means another
    /// writer deleted the entity in between, the same lost race as a changed ETag, so an
    /// optimistic-concurrency loop should start again from the read. A 404 about the table
    /// is left as it is.
    #[must_use]
    pub fn not_found_as_conflict(self) -> Self {
        match self {
            Error::NotFound { target } if target.keys.is_some() => {
                Error::PreconditionFailed { target }
            }
            Error::BatchFailed { index, source } => Error::BatchFailed {
                index,
                source: Box::new(source.not_found_as_conflict()),
            },
            other => other,
        }
    }
}

fn describe_target(target: &Target) -> String {
    if target.table.is_empty() {
        match &target.keys {
            Some(keys) => format!("entity {keys}"),
            None => "the value".to_owned(),
        }
    } else {
        target.to_string()
    }
}

fn describe_encode(property: &str, reason: &str) -> String {
    if property.is_empty() {
        format!("cannot store the value: {reason}")
    } else {
        format!("cannot store property `{property}`: {reason}")
    }
}

fn describe_decode(target: &Target, property: &str, reason: &str) -> String {
    let what = describe_target(target);
    if property.is_empty() {
        format!("cannot read {what}: {reason}")
    } else {
        format!("cannot read property `{property}` of {what}: {reason}")
    }
}

/// Whether an HTTP status is transient: 408, 429, 500, 502, 503, 504.
pub(crate) fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keys;

    #[test]
    fn errors_of_answered_requests_show_their_ids() {
        let e = crate::wire::error_from_response(
            500,
            Some("InternalError".into()),
            "boom".into(),
            Target::table("T"),
            None,
        )
        .with_request_ids(RequestIds::new(Some("srv-1".into()), Some("cli-2".into())));
        assert!(
            e.to_string()
                .ends_with("(request id srv-1, client request id cli-2)"),
            "{e}"
        );
        assert_eq!(e.request_ids().unwrap().service(), Some("srv-1"));
        let inner =
            crate::wire::error_from_response(403, None, "no".into(), Target::table("T"), None);
        let batch = Error::BatchFailed {
            index: 2,
            source: Box::new(inner),
        }
        .with_request_ids(RequestIds::new(None, Some("cli-3".into())));
        assert_eq!(batch.request_ids().unwrap().client(), Some("cli-3"));
        assert!(
            batch.to_string().contains("client request id cli-3"),
            "{batch}"
        );
        // Errors of requests never answered carry none.
        let none = Error::transport("reset", std::io::Error::other("x"))
            .with_request_ids(RequestIds::new(Some("s".into()), None));
        assert!(none.request_ids().is_none());
        assert_eq!(RequestIds::default().to_string(), "");
    }

    fn keys() -> Keys {
        Keys::new("Sales", "000223").unwrap()
    }

    #[test]
    fn conflicts_are_412s_and_409s_on_inserts_also_inside_a_transaction() {
        let entity = || Target::entity("T", keys());
        let precondition = Error::PreconditionFailed { target: entity() };
        let inserted = Error::AlreadyExists { target: entity() };
        let blob = Error::AlreadyExists {
            target: Target::resource(ResourceKind::Blob, "c/b"),
        };
        for e in [&precondition, &inserted, &blob] {
            assert!(e.is_conflict(), "{e}");
        }
        let in_batch = Error::BatchFailed {
            index: 3,
            source: Box::new(Error::AlreadyExists { target: entity() }),
        };
        assert!(in_batch.is_conflict());
        for e in [
            Error::AlreadyExists {
                target: Target::table("T"),
            },
            Error::AlreadyExists {
                target: Target::resource(ResourceKind::Queue, "q"),
            },
            Error::NotFound { target: entity() },
            Error::Throttled {
                status: 503,
                code: None,
                message: String::new(),
                scope: ThrottleScope::Unspecified,
                retry_after: None,
                ids: RequestIds::default(),
            },
            Error::encode("P", "x"),
        ] {
            assert!(!e.is_conflict(), "{e}");
        }
    }

    #[test]
    fn an_entity_404_becomes_a_conflict_on_request_and_a_table_404_does_not() {
        let gone = Error::NotFound {
            target: Target::entity("T", keys()),
        };
        assert!(gone.not_found_as_conflict().is_conflict());
        let in_batch = Error::BatchFailed {
            index: 1,
            source: Box::new(Error::NotFound {
                target: Target::entity("T", keys()),
            }),
        }
        .not_found_as_conflict();
        assert!(
            matches!(&in_batch, Error::BatchFailed { index: 1, source } if source.kind() == ErrorKind::PreconditionFailed)
        );
        let table = Error::NotFound {
            target: Target::table("T"),
        }
        .not_found_as_conflict();
        assert_eq!(table.kind(), ErrorKind::NotFound);
    }

    #[test]
    fn each_new_variant_has_its_own_kind_and_says_what_happened() {
        let e = Error::encode("Salary", "18446744073709551615 is above i64::MAX");
        assert_eq!(e.kind(), ErrorKind::Encode);
        assert_eq!(
            e.to_string(),
            "cannot store property `Salary`: 18446744073709551615 is above i64::MAX"
        );
        let e = Error::decode(Target::entity("Employees", keys()), "Age", "not a number");
        assert_eq!(e.kind(), ErrorKind::Decode);
        assert!(
            e.to_string().contains("Employees") && e.to_string().contains("`Age`"),
            "{e}"
        );
        let e = Error::corrupt(Target::entity("Employees", keys()), "checksum mismatch");
        assert_eq!(e.kind(), ErrorKind::Corrupt);
        assert!(
            e.to_string().ends_with("is corrupt: checksum mismatch"),
            "{e}"
        );
        let e = Error::invalid_argument("width", "must be 1 to 512");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(e.to_string(), "invalid argument `width`: must be 1 to 512");
        for e in [
            Error::encode("", ""),
            Error::decode(Target::default(), "", ""),
            Error::corrupt(Target::default(), ""),
            Error::invalid_argument("", ""),
        ] {
            assert!(!e.is_retryable() && e.status().is_none(), "{e}");
        }
    }

    #[test]
    fn auth_failures_name_the_target_and_tell_credentials_from_permissions() {
        let t = || Target::resource(ResourceKind::Queue, "jobs");
        let check = |e: &Error, kind: ErrorKind, status: u16| {
            assert_eq!(e.kind(), kind, "{e}");
            let target = match e {
                Error::Unauthorized { target, .. } | Error::Forbidden { target, .. } => target,
                other => panic!("{other:?}"),
            };
            assert_eq!(*target, t());
            assert!(!e.is_retryable());
            assert_eq!(e.status(), Some(status));
            assert!(e.to_string().contains("queue `jobs`"), "{e}");
        };
        // The credentials themselves were not accepted: an expired or malformed token, a
        // token for another audience, a bad signature, key access disabled.
        for (status, code) in [
            (401, Some("InvalidAuthenticationInfo")),
            (401, None),
            (403, Some("AuthenticationFailed")),
            (403, Some("KeyBasedAuthenticationNotPermitted")),
        ] {
            let e = crate::wire::error_from_response(
                status,
                code.map(Into::into),
                "no".into(),
                t(),
                None,
            );
            check(&e, ErrorKind::Unauthorized, status);
        }
        // Accepted credentials without the right to do this: a missing role assignment, a
        // SAS without the permission, a firewall rule.
        for code in [
            Some("AuthorizationPermissionMismatch"),
            Some("AuthorizationFailure"),
            None,
        ] {
            let e =
                crate::wire::error_from_response(403, code.map(Into::into), "no".into(), t(), None);
            check(&e, ErrorKind::Forbidden, 403);
        }
        // Azurite's answer to a bad table-SAS signature is `AuthorizationFailure` with the
        // message of an authentication failure; Azure's firewall refusal has its own message.
        let failed = "Server failed to authenticate the request. Make sure the value of the \
                      Authorization header is formed correctly including the signature.";
        let refused = "This request is not authorized to perform this operation.";
        for (message, kind) in [
            (failed, ErrorKind::Unauthorized),
            (refused, ErrorKind::Forbidden),
        ] {
            let code = Some("AuthorizationFailure".to_owned());
            let e = crate::wire::error_from_response(403, code, message.into(), t(), None);
            check(&e, kind, 403);
        }
    }

    #[test]
    fn errors_stay_small() {
        // The largest variants: a target, a status, a code, a message and the request ids
        // (one pointer: boxed, as most errors carry none).
        assert!(
            std::mem::size_of::<Error>() <= 104,
            "{}",
            std::mem::size_of::<Error>()
        );
    }

    #[test]
    fn messages_carry_context() {
        let e = Error::NotFound {
            target: Target::entity("Employees", keys()),
        };
        let text = e.to_string();
        assert!(
            text.contains("Employees") && text.contains("Sales") && text.contains("000223"),
            "{text}"
        );
        let e = Error::LimitExceeded {
            limit: Limit::UserProperties,
            actual: 253,
        };
        assert_eq!(
            e.to_string(),
            "user properties per entity (max 252) exceeded: 253"
        );
        let e = Error::BatchFailed {
            index: 7,
            source: Box::new(Error::AlreadyExists {
                target: Target::entity("T", keys()),
            }),
        };
        assert_eq!(e.kind(), ErrorKind::AlreadyExists);
        assert!(
            e.to_string()
                .starts_with("transaction failed at operation 7")
        );
    }
}
