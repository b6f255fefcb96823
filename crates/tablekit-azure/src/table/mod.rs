//! [`Table`]: table lifecycle, single-entity operations, queries, transactions and ETag loops.

mod batch;
mod bulk;
mod codec;
mod entity;
mod list;
mod query;
mod service_limits;
mod transaction;
mod typed;
mod update;

use std::fmt;
use std::sync::Arc;

use azure_core::headers::HeaderName;
use azure_core::{Method, Request, Url};
use azure_data_tables::clients::{TableClient, TableServiceClientBuilder};
use azure_storage::clients::ServiceType;
use bytes::Bytes;
use tablekit_core::limits::validate_table_name;
use tablekit_core::{Error, ErrorKind, Result, Target};

pub use batch::TransactionOutcome;
pub use bulk::{BulkOptions, BulkReport, OperationOutcome, WriteOutcome, WriteReport};
pub use codec::{CodecFilter, EntityCheck, EntityCodec};
pub use query::{ContinuationToken, EntityError, EntityResult, Page, PerEntity, Query};
pub use transaction::{Transaction, TypedTransaction};
pub(crate) use transaction::{
    plan as transaction_plan, step_kinds as transaction_step_kinds, transaction_steps,
};
pub use typed::{TypedTable, WriteMode};
pub use update::ConflictLoop;

use crate::account::Account;
use crate::metrics::RequestKind;
use crate::url::join;

pub(crate) const ACCEPT_MINIMAL: &str = "application/json;odata=minimalmetadata";
pub(crate) const ACCEPT_NONE: &str = "application/json;odata=nometadata";

/// A handle on one table of an [`Account`]. Cheap to clone; holds no connection of its own.
///
/// A handle may carry an [`EntityCodec`] ([`Table::with_codec`]) that every entity it writes
/// and reads passes through — client-side encryption, for instance. The codec belongs to the
/// handle: clones carry it, [`Account::table`] makes handles without one.
#[derive(Clone)]
pub struct Table {
    account: Account,
    name: Arc<str>,
    codec: Option<Arc<dyn EntityCodec>>,
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("name", &self.name)
            .field("account", &self.account.name())
            .field("codec", &self.codec)
            .finish()
    }
}

impl Account {
    /// A handle on the table `name`, without a codec ([`Table::with_codec`]). No request is
    /// sent.
    ///
    /// # Errors
    /// [`Error::InvalidName`](tablekit_core::Error::InvalidName) when `name` breaks the table naming rules
    /// (`^[A-Za-z][A-Za-z0-9]{2,62}$`, not `tables`).
    pub fn table(&self, name: &str) -> Result<Table> {
        validate_table_name(name)?;
        Ok(Table {
            account: self.clone(),
            name: Arc::from(name),
            codec: None,
        })
    }
}

impl Table {
    /// A handle for the table an SDK client addresses, on `account` (whose credentials and
    /// settings are used).
    ///
    /// # Errors
    /// [`Error::InvalidName`](tablekit_core::Error::InvalidName) for an invalid table name.
    pub fn from_client(account: &Account, client: &TableClient) -> Result<Self> {
        account.table(client.table_name())
    }

    /// An SDK client for this table with the same credentials, endpoint and HTTP stack, for
    /// anything tablekit does not cover. Requests made through it are counted in the
    /// account's metrics but are not retried by tablekit, and do not pass through this
    /// handle's codec ([`Table::with_codec`]).
    pub fn client(&self) -> TableClient {
        TableServiceClientBuilder::with_location(
            self.account.location(ServiceType::Table),
            self.account.storage_credentials().clone(),
        )
        .client_options(self.account.client_options().clone())
        .build()
        .table_client(self.name.to_string())
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The account this table belongs to.
    pub fn account(&self) -> &Account {
        &self.account
    }

    pub(crate) fn target(&self) -> Target {
        Target::table(self.name.as_ref())
    }

    /// A read's error with this table named in its target: a response body names the
    /// entity's keys, not its table.
    pub(crate) fn in_table(&self, error: Error) -> Error {
        error.with_target(self.target())
    }

    fn url(&self, path: &str, query: &[(&str, &str)]) -> Url {
        join(&self.account.endpoints().table, path, query)
    }

    /// Builds a signed-on-send table request.
    pub(crate) fn request(
        &self,
        method: Method,
        url: Url,
        headers: &[(&'static str, &str)],
        body: Option<&Bytes>,
    ) -> Result<Request> {
        table_request(method, url, headers, body)
    }

    /// Creates the table.
    ///
    /// Requests: 1. Consistency: the table exists when this returns.
    ///
    /// # Errors
    /// [`Error::AlreadyExists`](tablekit_core::Error::AlreadyExists) if it exists; [`Error::Service`](tablekit_core::Error::Service) with code
    /// `TableBeingDeleted` shortly after a delete of the same name (use fresh names).
    pub async fn create(&self) -> Result<()> {
        let body = Bytes::from(format!("{{\"TableName\":\"{}\"}}", self.name));
        let url = self.url("Tables", &[]);
        let headers = [
            ("accept", ACCEPT_NONE),
            ("content-type", "application/json"),
            ("prefer", "return-no-content"),
        ];
        let outcome = self
            .account
            .send(
                ServiceType::Table,
                RequestKind::TableCreate,
                &self.target(),
                || self.request(Method::Post, url.clone(), &headers, Some(&body)),
            )
            .await;
        outcome.done_if_retried(|e| e.kind() == ErrorKind::AlreadyExists)
    }

    /// Creates the table unless it exists. Returns whether it was created.
    ///
    /// Requests: 1. Errors: as [`Table::create`], except that an existing table is `Ok(false)`.
    ///
    /// # Errors
    /// See [`Table::create`].
    pub async fn create_if_not_exists(&self) -> Result<bool> {
        match self.create().await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes the table and every entity in it, in one request (the high-volume delete
    /// pattern). The name may be unavailable for a while afterwards on Azure.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::NotFound`](tablekit_core::Error::NotFound) if the table does not exist.
    pub async fn delete_table(&self) -> Result<()> {
        let url = self.url(&format!("Tables('{}')", self.name), &[]);
        let outcome = self
            .account
            .send(
                ServiceType::Table,
                RequestKind::TableDelete,
                &self.target(),
                || {
                    self.request(
                        Method::Delete,
                        url.clone(),
                        &[("accept", ACCEPT_NONE)],
                        None,
                    )
                },
            )
            .await;
        outcome.done_if_retried(|e| e.kind() == ErrorKind::NotFound)
    }

    /// Deletes the table if it exists. Returns whether it existed.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// Transport and service errors other than "not found".
    pub async fn delete_table_if_exists(&self) -> Result<bool> {
        match self.delete_table().await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Builds a signed-on-send request to the Table service: the OData 3.0 headers plus `headers`.
pub(crate) fn table_request(
    method: Method,
    url: Url,
    headers: &[(&'static str, &str)],
    body: Option<&Bytes>,
) -> Result<Request> {
    let standard = [
        ("dataserviceversion", "3.0;NetFx"),
        ("maxdataserviceversion", "3.0;NetFx"),
    ];
    let all = standard
        .iter()
        .chain(headers)
        .map(|(n, v)| (HeaderName::from_static(n), (*v).to_owned()));
    crate::send::build_request(method, url, all, body)
}
