//! Single-entity operations.

use azure_core::Method;
use azure_storage::clients::ServiceType;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use tablekit_core::Properties;
use tablekit_core::batch::{Operation, OperationKind};
use tablekit_core::edm::parse_entity;
use tablekit_core::wire::entity_path;
use tablekit_core::{AsEntity, ETag, Error, ErrorKind, IfMatch, IntoKeys, Result, Stored, Target};

use super::{ACCEPT_MINIMAL, ACCEPT_NONE, Table};
use crate::metrics::RequestKind;

fn request_kind(kind: OperationKind) -> RequestKind {
    match kind {
        OperationKind::Insert => RequestKind::Insert,
        OperationKind::Replace => RequestKind::Replace,
        OperationKind::Merge => RequestKind::Merge,
        OperationKind::UpsertReplace => RequestKind::UpsertReplace,
        OperationKind::UpsertMerge => RequestKind::UpsertMerge,
        OperationKind::Delete => RequestKind::Delete,
    }
}

/// Whether the stored properties are what `op` wrote (all of them for whole-entity writes,
/// the sent ones for merges).
pub(crate) fn written_by(op: &Operation, stored: &Properties) -> bool {
    op.kind() != OperationKind::Delete && op.is_in_place(Some(stored))
}

impl Table {
    /// Inserts an entity — a [`TableEntity`](tablekit_core::TableEntity), whose keys come from
    /// its fields, or an [`Entity`](tablekit_core::Entity) with explicit keys — ; fails if one
    /// with the same keys exists.
    ///
    /// Requests: 1. Consistency: strong; the entity is readable when this returns.
    /// Returns the new ETag.
    ///
    /// # Errors
    /// Before any request: invalid keys, property names or values ([`Error::Encode`]), limit
    /// violations, and whatever the handle's codec refuses ([`Table::with_codec`]).
    /// [`Error::AlreadyExists`] (409) if the keys are taken;
    /// [`Error::NotFound`] if the table does not exist. After a lost response the insert is
    /// verified: a 409 on a retry counts as success only if the stored entity is the one that
    /// was sent.
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit_core::{Entity, Keys, Properties};
    ///
    /// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
    /// // A value with explicit keys (a `#[derive(TableEntity)]` type is passed as `&employee`).
    /// let jones = Entity::new(
    ///     Keys::new("Sales", "000223")?,
    ///     Properties::new().with("Email", "jonesj@contoso.com"),
    /// );
    /// let etag = table.insert(&jones).await?;
    /// # let _ = etag; Ok(()) }
    /// ```
    pub async fn insert(&self, entity: &impl AsEntity) -> Result<ETag> {
        let op = Operation::insert(entity)?;
        self.execute(&op)
            .await
            .map(|tag| tag.unwrap_or_else(|| ETag::new("")))
    }

    /// Replaces a whole entity (properties not sent are removed) if `if_match` holds.
    ///
    /// Requests: 1. Returns the new ETag.
    ///
    /// # Errors
    /// [`Error::NotFound`] (404) if the entity does not exist, [`Error::PreconditionFailed`]
    /// (412) if its ETag is not `if_match`; encoding errors and the codec's refusals before
    /// any request.
    pub async fn replace(&self, entity: &impl AsEntity, if_match: IfMatch) -> Result<ETag> {
        let op = Operation::replace(entity, if_match)?;
        self.execute(&op)
            .await
            .map(|tag| tag.unwrap_or_else(|| ETag::new("")))
    }

    /// Merges the given properties into an entity (others are kept) if `if_match` holds.
    ///
    /// Requests: 1. Returns the new ETag.
    ///
    /// # Errors
    /// As [`Table::replace`]. A codec that cannot merge (client-side encryption) refuses it
    /// before any request.
    pub async fn merge(&self, entity: &impl AsEntity, if_match: IfMatch) -> Result<ETag> {
        let op = Operation::merge(entity, if_match)?;
        self.execute(&op)
            .await
            .map(|tag| tag.unwrap_or_else(|| ETag::new("")))
    }

    /// Inserts the entity, or replaces it whole if it exists (last writer wins).
    ///
    /// Requests: 1. Idempotent: safe to repeat.
    ///
    /// # Errors
    /// Encoding errors and the codec's refusals before any request; [`Error::NotFound`] if
    /// the table does not exist.
    pub async fn upsert_replace(&self, entity: &impl AsEntity) -> Result<ETag> {
        let op = Operation::upsert_replace(entity)?;
        self.execute(&op)
            .await
            .map(|tag| tag.unwrap_or_else(|| ETag::new("")))
    }

    /// Inserts the entity, or merges its properties into the existing one.
    ///
    /// Requests: 1. Idempotent: safe to repeat.
    ///
    /// # Errors
    /// As [`Table::upsert_replace`]. A codec that cannot merge (client-side encryption)
    /// refuses it before any request.
    pub async fn upsert_merge(&self, entity: &impl AsEntity) -> Result<ETag> {
        let op = Operation::upsert_merge(entity)?;
        self.execute(&op)
            .await
            .map(|tag| tag.unwrap_or_else(|| ETag::new("")))
    }

    /// Deletes an entity if `if_match` holds. `keys` is anything [`IntoKeys`]: [`Keys`](tablekit_core::Keys), a
    /// `(partition_key, row_key)` pair, or a `&TableEntity`.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// Key errors before any request; [`Error::NotFound`] if it does not exist,
    /// [`Error::PreconditionFailed`] if its ETag is not `if_match`.
    pub async fn delete(&self, keys: impl IntoKeys, if_match: IfMatch) -> Result<()> {
        self.execute(&Operation::delete(keys, if_match)?)
            .await
            .map(|_| ())
    }

    /// Deletes an entity whatever its ETag; absent is fine. Returns whether it existed.
    ///
    /// Requests: 1. Idempotent: the step the eventually-consistent patterns rely on.
    ///
    /// # Errors
    /// Key errors before any request; transport and service errors other than "not found" (a
    /// missing *table* is an error).
    pub async fn delete_if_exists(&self, keys: impl IntoKeys) -> Result<bool> {
        match self.execute(&Operation::delete(keys, IfMatch::Any)?).await {
            Ok(_) => Ok(true),
            Err(Error::NotFound { target }) if target.keys.is_some() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads one entity as `T`: a point query. `keys` is anything [`IntoKeys`]: [`Keys`](tablekit_core::Keys), a
    /// `(partition_key, row_key)` pair, or a `&TableEntity`. For a `#[derive(TableEntity)]`
    /// type, [`Table::typed`] reads without naming the type at each call.
    ///
    /// Requests: 1. Consistency: strong (sees every acknowledged write).
    ///
    /// # Errors
    /// Key errors before any request; [`Error::NotFound`] if the *table* does not exist (a
    /// missing entity is `Ok(None)`); [`Error::Decode`] naming the table, keys and property
    /// when the stored data does not fit `T`; with a codec, its decoding errors (for
    /// encryption, [`Error::Corrupt`] naming the entity).
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit_core::Properties;
    ///
    /// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
    /// if let Some(stored) = table.get::<Properties>(("Sales", "000223")).await? {
    ///     println!("{:?} (ETag {})", stored.value.get_str("Email").unwrap(), stored.etag);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get<T: DeserializeOwned>(&self, keys: impl IntoKeys) -> Result<Option<Stored<T>>> {
        let keys = &keys.into_keys()?;
        let url = self.url(&entity_path(&self.name, keys), &[]);
        let target = Target::entity(self.name.as_ref(), keys.clone());
        let outcome = self
            .account
            .send(ServiceType::Table, RequestKind::Get, &target, || {
                self.request(
                    Method::Get,
                    url.clone(),
                    &[("accept", ACCEPT_MINIMAL)],
                    None,
                )
            })
            .await;
        match outcome.result {
            Ok(response) => {
                let stored = match &self.codec {
                    None => parse_entity(&response.body, response.header("etag"))
                        .map_err(|e| self.in_table(e))?,
                    Some(codec) => {
                        let raw =
                            parse_entity::<Properties>(&response.body, response.header("etag"))
                                .map_err(|e| self.in_table(e))?;
                        self.decode_stored(codec.as_ref(), raw).await?
                    }
                };
                self.account.metrics().entities_read(1);
                Ok(Some(stored))
            }
            Err(Error::Service { status: 404, .. }) => Ok(None),
            Err(Error::NotFound { target }) if !is_table_missing(&target) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sends one operation alone, its properties passed through the handle's codec. Returns
    /// the new ETag (none for deletes).
    pub(crate) async fn execute(&self, op: &Operation) -> Result<Option<ETag>> {
        let encoded = self.encode_operation(op).await?;
        let sent = encoded.as_ref().unwrap_or(op);
        // Limits apply to what is stored: the encoded body, ciphertext included.
        self.check_operation(sent)?;
        let keys = op.keys();
        let target = Target::entity(self.name.as_ref(), keys.clone());
        let (method, path) = match op.kind() {
            OperationKind::Insert => (Method::Post, self.name.to_string()),
            OperationKind::Replace | OperationKind::UpsertReplace => {
                (Method::Put, entity_path(&self.name, keys))
            }
            OperationKind::Merge | OperationKind::UpsertMerge => {
                (Method::Merge, entity_path(&self.name, keys))
            }
            OperationKind::Delete => (Method::Delete, entity_path(&self.name, keys)),
        };
        let url = self.url(&path, &[]);
        let body = sent.body().map(Bytes::copy_from_slice);
        let mut headers: Vec<(&'static str, &str)> = vec![("accept", ACCEPT_NONE)];
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        if op.kind() == OperationKind::Insert {
            headers.push(("prefer", "return-no-content"));
        }
        if let Some(if_match) = op.if_match() {
            headers.push(("if-match", if_match.header_value()));
        }
        let kind = request_kind(op.kind());
        let outcome = self
            .account
            .send(ServiceType::Table, kind, &target, || {
                self.request(method, url.clone(), &headers, body.as_ref())
            })
            .await;
        let result = match outcome.result {
            Ok(response) => Ok(response.header("etag").map(ETag::new)),
            Err(error) if outcome.maybe_applied => self.verify(op, error).await,
            Err(error) => Err(error),
        };
        if result.is_ok() && op.kind() != OperationKind::Delete {
            self.account.metrics().entities_written(1);
        }
        result
    }

    /// After a retried write failed in a way an applied earlier attempt explains (its response
    /// was lost), reads the entity and decides. Costs one extra request, only in that case.
    /// `op` is the operation as the caller gave it; with a codec, the entity is read decoded,
    /// so what is compared is what the caller wrote.
    async fn verify(&self, op: &Operation, error: Error) -> Result<Option<ETag>> {
        let explained = matches!(
            (op.kind(), error.kind()),
            (OperationKind::Insert, ErrorKind::AlreadyExists)
                | (
                    OperationKind::Replace | OperationKind::Merge,
                    ErrorKind::PreconditionFailed
                )
                | (OperationKind::Delete, ErrorKind::NotFound)
        );
        if !explained {
            return Err(error);
        }
        tracing::debug!(target: "tablekit", "verifying the outcome of a retried write");
        let current = self.get::<Properties>(op.keys()).await?;
        match (op.kind(), current) {
            (OperationKind::Delete, None) => Ok(None),
            // Gone when the retry came — deleted by an earlier attempt of this delete, or by
            // another writer — and written again since: whether this delete took effect
            // cannot be told, and "not found" would be false if it did.
            (OperationKind::Delete, Some(_)) => Err(Error::Indeterminate {
                target: Target::entity(self.name(), op.keys().clone()),
                reason: format!(
                    "the entity was gone when the delete was retried after an attempt that may \
                     have been applied ({error}), and another writer has written it since: \
                     this delete may or may not have taken effect"
                ),
            }),
            (_, Some(stored)) if written_by(op, &stored.value) => Ok(Some(stored.etag)),
            _ => Err(error),
        }
    }
}

/// Whether a 404 is about the table rather than an entity.
fn is_table_missing(target: &Target) -> bool {
    target.keys.is_none()
}
