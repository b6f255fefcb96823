//! [`LargeEntitiesBuilder`]: the options of a [`LargeEntities`] store, checked once.

use std::time::Duration;

use tablekit_azure::{Container, Table};
use tablekit_core::limits::{validate_blob_name, validate_property_identifier};
use tablekit_core::{Error, Result};

use crate::reference::Names;
use crate::store::LargeEntities;

/// Builds a [`LargeEntities`] store; see its setters for the defaults.
#[derive(Debug, Clone)]
pub struct LargeEntitiesBuilder {
    table: Table,
    container: Container,
    property: String,
    prefix: Option<String>,
    inline_max: usize,
    commit_deadline: Duration,
    clock_allowance: Duration,
    content_type: Option<String>,
}

impl LargeEntitiesBuilder {
    /// The payload's name (default `Payload`): the entity stores the reference in
    /// `{name}Blob`, `{name}Length` and `{name}Sha256`, or an inline payload in `{name}`.
    #[must_use]
    pub fn with_property(mut self, name: impl Into<String>) -> Self {
        self.property = name.into();
        self
    }

    /// The prefix of every blob name (default `{table name}/`); the sweeper lists it.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Payloads of at most `bytes` (≤ 64 KiB) are stored in the entity as `Edm.Binary`
    /// instead of a blob, so reading them takes one request. Default 0: always a blob.
    #[must_use]
    pub fn with_inline_max(mut self, bytes: usize) -> Self {
        self.inline_max = bytes;
        self
    }

    /// How long after its upload started a blob may still be offered to an entity write
    /// (default 10 minutes, at least 1 second). When the upload and whatever delays the
    /// process between it and the entity write take longer, the blob is dropped and the
    /// attempt starts again with a new one. Part of [`LargeEntities::min_sweep_grace`].
    #[must_use]
    pub fn with_commit_deadline(mut self, deadline: Duration) -> Self {
        self.commit_deadline = deadline;
        self
    }

    /// The margin [`LargeEntities::min_sweep_grace`] adds for the service's clocks (default
    /// 1 minute, at least 1 second). The sweeper measures a blob's age between two readings
    /// of the service's clock — the blob's `Last-Modified` and the listing response's `Date`
    /// — which have a resolution of one second and may come from different servers of the
    /// service; this machine's clock is not involved.
    #[must_use]
    pub fn with_clock_allowance(mut self, allowance: Duration) -> Self {
        self.clock_allowance = allowance;
        self
    }

    /// The blobs' `Content-Type` (default `application/octet-stream`).
    #[must_use]
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    /// The store. No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the property name does not make valid property names or
    /// the prefix is not a valid start of a blob name; [`Error::InvalidArgument`] for an inline
    /// limit above 64 KiB; [`Error::InvalidConfig`] for a commit deadline or a clock allowance
    /// under 1 second.
    pub fn build(self) -> Result<LargeEntities> {
        let names = Names::new(&self.property);
        for name in names.all() {
            validate_property_identifier(name)?;
        }
        let prefix = self
            .prefix
            .unwrap_or_else(|| format!("{}/", self.table.name()));
        validate_blob_name(&format!("{prefix}{}", uuid::Uuid::nil()))?;
        if self.commit_deadline < Duration::from_secs(1) {
            return Err(Error::InvalidConfig {
                part: "commit_deadline".into(),
                reason: "must be at least 1 second".into(),
            });
        }
        if self.clock_allowance < Duration::from_secs(1) {
            return Err(Error::InvalidConfig {
                part: "clock_allowance".into(),
                reason: "must be at least 1 second, the resolution of the service's timestamps"
                    .into(),
            });
        }
        if self.inline_max > tablekit_core::limits::MAX_PROPERTY_BYTES {
            return Err(Error::invalid_argument(
                "inline_max",
                "an inline payload is one Edm.Binary property: at most 64 KiB",
            ));
        }
        Ok(LargeEntities {
            table: self.table,
            container: self.container,
            names,
            prefix,
            inline_max: self.inline_max,
            commit_deadline: self.commit_deadline,
            clock_allowance: self.clock_allowance,
            content_type: self.content_type,
        })
    }
}

impl LargeEntities {
    /// A builder for a store of `table`'s entities with payloads in `container` (which must
    /// exist; create it with [`Container::create_if_not_exists`]).
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit::TableEntity;
    /// use tablekit_azure::Account;
    /// use tablekit_large::{Large, LargeEntities};
    ///
    /// /// An employee's photo: these properties in the entity, the image in a blob.
    /// #[derive(TableEntity)]
    /// #[table(partition_key = "{department}", row_key = "{id:06}")]
    /// struct Photo {
    ///     department: String,
    ///     id: u32,
    ///     caption: String,
    /// }
    ///
    /// # async fn run(jpeg: Vec<u8>) -> tablekit_core::Result<()> {
    /// let account = Account::emulator();
    /// let photos = LargeEntities::builder(account.table("Photos")?, account.container("photos")?)
    ///     .with_property("Image") // ImageBlob, ImageLength, ImageSha256
    ///     .build()?;
    /// let photo = Photo { department: "Sales".into(), id: 223, caption: "Jun".into() };
    /// photos.put(&photo, jpeg).await?; // 3 requests: read, upload, insert
    /// let read: Option<Large<Photo>> = photos.get(&photo).await?; // 2 requests: entity, blob
    /// # let _ = read; Ok(()) }
    /// ```
    pub fn builder(table: Table, container: Container) -> LargeEntitiesBuilder {
        LargeEntitiesBuilder {
            table,
            container,
            property: "Payload".into(),
            prefix: None,
            inline_max: 0,
            commit_deadline: Duration::from_secs(600),
            clock_allowance: Duration::from_secs(60),
            content_type: None,
        }
    }
}
