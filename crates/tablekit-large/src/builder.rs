//! [`LargeEntitiesBuilder`]: the options of a [`LargeEntities`] store, checked once.

use std::time::Duration;

use tablekit_azure::{Container, Table};
use tablekit_core::limits::{validate_blob_name, validate_property_identifier};
use tablekit_core::{Error, Result};

use crate::reference::Names;
use crate::store::LargeEntities;

/// The default grace period of a store: one hour, whatever the settings of its handles.
const DEFAULT_GRACE: Duration = Duration::from_secs(3600);

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
    grace: Duration,
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
    /// attempt starts again with a new one. Part of [`LargeEntities::required_grace`].
    #[must_use]
    pub fn with_commit_deadline(mut self, deadline: Duration) -> Self {
        self.commit_deadline = deadline;
        self
    }

    /// The margin kept between a write's last possible landing and the end of the grace
    /// period, for the service's clocks (default 1 minute, at least 1 second): an entity write
    /// lands at the latest the grace period *less this* after its blob's upload started. The
    /// sweeper measures a blob's age between two readings of the service's clock — the blob's
    /// `Last-Modified` and the listing response's `Date` — which have a resolution of one
    /// second and may come from different servers of the service; this machine's clock is
    /// not involved. Part of [`LargeEntities::required_grace`].
    #[must_use]
    pub fn with_clock_allowance(mut self, allowance: Duration) -> Self {
        self.clock_allowance = allowance;
        self
    }

    /// The store's grace period (default 1 hour): how long after its upload a blob is left
    /// alone by [`LargeEntities::sweep`], and the bound every entity write of this handle
    /// keeps — it lands, if ever, within the grace period less the clock allowance after the
    /// upload of the blob it references started.
    ///
    /// It is a property of the store, not of one process: give every handle of a store — its
    /// writers and its sweepers — the same value. Each blob records the grace its writer
    /// used ([`GRACE_METADATA`](crate::GRACE_METADATA)), and a sweep never applies a shorter
    /// one to it, so a sweeper configured with less still waits for a writer configured
    /// with more. A handle whose own writes could land later — its
    /// [`LargeEntities::required_grace`] exceeds this — refuses to write.
    #[must_use]
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
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
    /// under 1 second, or a grace period no longer than the two together (no write could
    /// ever fit in it).
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
        if self.grace <= self.commit_deadline.saturating_add(self.clock_allowance) {
            return Err(Error::InvalidConfig {
                part: "grace".into(),
                reason: format!(
                    "{:?} leaves no time for an entity write after the commit deadline ({:?}) and the clock allowance ({:?})",
                    self.grace, self.commit_deadline, self.clock_allowance
                ),
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
            grace: self.grace,
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
    /// photos.upsert(&photo, jpeg).await?; // 3 requests: read, upload, insert
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
            grace: DEFAULT_GRACE,
            content_type: None,
        }
    }
}
