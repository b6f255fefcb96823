//! [`Container`]: the blob operations the patterns need (large entities, blob indexes, logs).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use azure_core::headers::{HeaderName, Headers};
use azure_core::{Method, Url};
use azure_storage::clients::ServiceType;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tablekit_core::limits::{validate_blob_name, validate_dns_name, validate_property_identifier};
use tablekit_core::{ETag, Error, ErrorKind, IfMatch, NameKind, ResourceKind, Result, Target};

use crate::account::Account;
use crate::listing::Listing;
use crate::metrics::RequestKind;
use crate::url::{encode_component, join};

/// A handle on one blob container. Cheap to clone.
#[derive(Clone)]
pub struct Container {
    account: Account,
    name: Arc<str>,
}

impl fmt::Debug for Container {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Container")
            .field("name", &self.name)
            .field("account", &self.account.name())
            .finish()
    }
}

/// The condition of a blob write.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BlobCondition {
    /// Write whatever exists (overwrite).
    #[default]
    None,
    /// Create only: fail with [`Error::AlreadyExists`] or [`Error::PreconditionFailed`] if the
    /// blob exists.
    IfNotExists,
    /// Overwrite only the blob with this ETag: fail with [`Error::PreconditionFailed`]
    /// otherwise.
    IfMatch(ETag),
}

/// Options of [`Container::upload`]: [`UploadOptions::default`] and the `with_*` setters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UploadOptions {
    /// `Content-Type` (default `application/octet-stream`).
    pub content_type: Option<String>,
    /// User metadata (`x-ms-meta-*`): identifier names, ASCII values.
    pub metadata: BTreeMap<String, String>,
    /// When the write may happen.
    pub condition: BlobCondition,
}

impl UploadOptions {
    /// Sets the blob's `Content-Type`.
    #[must_use]
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    /// Sets the blob's user metadata, replacing any set before.
    #[must_use]
    pub fn with_metadata(mut self, metadata: BTreeMap<String, String>) -> Self {
        self.metadata = metadata;
        self
    }

    /// Sets when the write may happen.
    #[must_use]
    pub fn with_condition(mut self, condition: BlobCondition) -> Self {
        self.condition = condition;
        self
    }
}

/// A blob's properties and metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    /// The blob's name.
    pub name: String,
    /// Its ETag.
    pub etag: ETag,
    /// Its size in bytes.
    pub len: u64,
    /// Its content type.
    pub content_type: Option<String>,
    /// When it was last written.
    pub last_modified: Option<DateTime<Utc>>,
    /// Its user metadata (names lower-cased by the service).
    pub metadata: BTreeMap<String, String>,
}

/// A downloaded blob.
#[derive(Clone, PartialEq, Eq)]
pub struct Blob {
    /// Properties and metadata.
    pub info: BlobInfo,
    /// The content.
    pub data: Bytes,
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blob")
            .field("info", &self.info)
            .field("data_len", &self.data.len())
            .finish()
    }
}

fn check_metadata(metadata: &BTreeMap<String, String>) -> Result<()> {
    for (k, v) in metadata {
        validate_property_identifier(k)?;
        if !v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(Error::encode(k, "metadata values must be printable ASCII"));
        }
    }
    Ok(())
}

fn info_from_headers(name: &str, headers: &Headers) -> BlobInfo {
    let get = |n: &'static str| {
        headers
            .get_optional_str(&HeaderName::from_static(n))
            .map(str::to_owned)
    };
    let metadata = headers
        .iter()
        .filter_map(|(k, v)| {
            k.as_str()
                .strip_prefix("x-ms-meta-")
                .map(|m| (m.to_owned(), v.as_str().to_owned()))
        })
        .collect();
    BlobInfo {
        name: name.to_owned(),
        etag: ETag::new(get("etag").unwrap_or_default()),
        len: get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0),
        content_type: get("content-type"),
        last_modified: get("last-modified")
            .and_then(|t| DateTime::parse_from_rfc2822(&t).ok())
            .map(|t| t.with_timezone(&Utc)),
        metadata,
    }
}

impl Account {
    /// A handle on the blob container `name`. No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for names breaking the container naming rules.
    pub fn container(&self, name: &str) -> Result<Container> {
        validate_dns_name(NameKind::Container, name)?;
        Ok(Container {
            account: self.clone(),
            name: Arc::from(name),
        })
    }
}

impl Container {
    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The account this container belongs to.
    pub fn account(&self) -> &Account {
        &self.account
    }

    /// An SDK client for this container with the same credentials, endpoint and HTTP stack,
    /// for anything tablekit does not cover (leases, tiers, block lists). Requests made
    /// through it are counted in the account's metrics but are not retried by tablekit.
    pub fn client(&self) -> azure_storage_blobs::prelude::ContainerClient {
        azure_storage_blobs::prelude::ClientBuilder::with_location(
            self.account.location(ServiceType::Blob),
            self.account.storage_credentials().clone(),
        )
        .client_options(self.account.client_options().clone())
        .container_client(self.name.to_string())
    }

    fn blob_target(&self, blob: &str) -> Target {
        Target::resource(ResourceKind::Blob, format!("{}/{blob}", self.name))
    }

    fn url(&self, blob: Option<&str>, query: &[(&str, &str)]) -> Url {
        let mut path = encode_component(&self.name);
        if let Some(blob) = blob {
            for segment in blob.split('/') {
                path.push('/');
                path.push_str(&encode_component(segment));
            }
        }
        join(&self.account.endpoints().blob, &path, query)
    }

    fn request(
        &self,
        method: Method,
        url: Url,
        headers: Vec<(String, String)>,
        body: Option<&Bytes>,
    ) -> Result<azure_core::Request> {
        crate::send::build_request(
            method,
            url,
            headers.into_iter().map(|(n, v)| (HeaderName::from(n), v)),
            body,
        )
    }

    async fn send(
        &self,
        kind: RequestKind,
        target: &Target,
        build: impl Fn() -> Result<azure_core::Request>,
    ) -> crate::send::Outcome<crate::send::Collected> {
        self.account
            .send(ServiceType::Blob, kind, target, build)
            .await
    }

    /// Creates the container (private access).
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::AlreadyExists`] if it exists.
    pub async fn create(&self) -> Result<()> {
        let url = self.url(None, &[("restype", "container")]);
        let target = Target::resource(ResourceKind::Container, self.name.as_ref());
        let outcome = self
            .send(RequestKind::ContainerCreate, &target, || {
                self.request(Method::Put, url.clone(), Vec::new(), None)
            })
            .await;
        outcome.done_if_retried(|e| e.kind() == ErrorKind::AlreadyExists)
    }

    /// Creates the container unless it exists; returns whether it was created.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// Transport and service errors.
    pub async fn create_if_not_exists(&self) -> Result<bool> {
        match self.create().await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes the container and every blob in it.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::NotFound`] if it does not exist.
    pub async fn delete_container(&self) -> Result<()> {
        let url = self.url(None, &[("restype", "container")]);
        let target = Target::resource(ResourceKind::Container, self.name.as_ref());
        let outcome = self
            .send(RequestKind::ContainerDelete, &target, || {
                self.request(Method::Delete, url.clone(), Vec::new(), None)
            })
            .await;
        outcome.done_if_retried(|e| e.kind() == ErrorKind::NotFound)
    }

    /// Uploads (creates or overwrites) a block blob in one request, under `options.condition`.
    /// Returns the new ETag.
    ///
    /// Requests: 1. Overwriting is idempotent; a create-only write retried after a lost
    /// response is verified by comparing the stored ETag's content length and metadata.
    ///
    /// # Errors
    /// Before any request: invalid blob name or metadata. [`Error::PreconditionFailed`] or
    /// [`Error::AlreadyExists`] when the condition does not hold; [`Error::NotFound`] if the
    /// container does not exist.
    pub async fn upload(
        &self,
        blob: &str,
        data: impl Into<Bytes>,
        options: UploadOptions,
    ) -> Result<ETag> {
        validate_blob_name(blob)?;
        check_metadata(&options.metadata)?;
        let data: Bytes = data.into();
        let url = self.url(Some(blob), &[]);
        let mut headers = vec![
            ("x-ms-blob-type".to_owned(), "BlockBlob".to_owned()),
            (
                "content-type".to_owned(),
                options
                    .content_type
                    .clone()
                    .unwrap_or_else(|| "application/octet-stream".into()),
            ),
        ];
        headers.extend(
            options
                .metadata
                .iter()
                .map(|(k, v)| (format!("x-ms-meta-{k}"), v.clone())),
        );
        match &options.condition {
            BlobCondition::None => {}
            BlobCondition::IfNotExists => headers.push(("if-none-match".into(), "*".into())),
            BlobCondition::IfMatch(tag) => {
                headers.push(("if-match".into(), tag.as_str().to_owned()))
            }
        }
        let target = self.blob_target(blob);
        let outcome = self
            .send(RequestKind::BlobPut, &target, || {
                self.request(Method::Put, url.clone(), headers.clone(), Some(&data))
            })
            .await;
        match outcome.result {
            Ok(response) => Ok(ETag::new(response.header("etag").unwrap_or_default())),
            Err(e)
                if outcome.maybe_applied
                    && matches!(
                        e.kind(),
                        ErrorKind::AlreadyExists | ErrorKind::PreconditionFailed
                    ) =>
            {
                // An earlier attempt may have written it: accept if the stored blob is ours.
                match self.download(blob).await? {
                    Some(stored)
                        if stored.data == data
                            && stored.info.metadata == lowercase(&options.metadata) =>
                    {
                        Ok(stored.info.etag)
                    }
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Downloads a blob; `None` if it does not exist.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::NotFound`] if the *container* does not exist.
    pub async fn download(&self, blob: &str) -> Result<Option<Blob>> {
        validate_blob_name(blob)?;
        let url = self.url(Some(blob), &[]);
        let target = self.blob_target(blob);
        let outcome = self
            .send(RequestKind::BlobGet, &target, || {
                self.request(Method::Get, url.clone(), Vec::new(), None)
            })
            .await;
        match outcome.result {
            Ok(response) => {
                let mut info = info_from_headers(blob, &response.headers);
                info.len = response.body.len() as u64;
                Ok(Some(Blob {
                    info,
                    data: response.body,
                }))
            }
            Err(e) if is_missing_blob(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A blob's properties and metadata without its content; `None` if it does not exist.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// Transport and service errors.
    pub async fn properties(&self, blob: &str) -> Result<Option<BlobInfo>> {
        validate_blob_name(blob)?;
        let url = self.url(Some(blob), &[]);
        let target = self.blob_target(blob);
        let outcome = self
            .send(RequestKind::BlobProperties, &target, || {
                self.request(Method::Head, url.clone(), Vec::new(), None)
            })
            .await;
        match outcome.result {
            Ok(response) => Ok(Some(info_from_headers(blob, &response.headers))),
            Err(e) if is_missing_blob(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Replaces a blob's metadata: only if its ETag is still the one `if_match` names, or
    /// whatever it is with [`IfMatch::Any`] (the blob must exist either way). Returns the new
    /// ETag.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::PreconditionFailed`].
    pub async fn set_metadata(
        &self,
        blob: &str,
        metadata: &BTreeMap<String, String>,
        if_match: IfMatch,
    ) -> Result<ETag> {
        validate_blob_name(blob)?;
        check_metadata(metadata)?;
        let url = self.url(Some(blob), &[("comp", "metadata")]);
        let mut headers: Vec<(String, String)> = metadata
            .iter()
            .map(|(k, v)| (format!("x-ms-meta-{k}"), v.clone()))
            .collect();
        headers.push(("if-match".into(), if_match.header_value().to_owned()));
        let target = self.blob_target(blob);
        let outcome = self
            .send(RequestKind::BlobMetadata, &target, || {
                self.request(Method::Put, url.clone(), headers.clone(), None)
            })
            .await;
        outcome
            .result
            .map(|r| ETag::new(r.header("etag").unwrap_or_default()))
    }

    /// Deletes a blob: only if its ETag is still the one `if_match` names, or whatever it is
    /// with [`IfMatch::Any`]. [`delete_blob_if_exists`](Self::delete_blob_if_exists) treats a
    /// missing blob as deleted.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::PreconditionFailed`].
    pub async fn delete_blob(&self, blob: &str, if_match: IfMatch) -> Result<()> {
        validate_blob_name(blob)?;
        let url = self.url(Some(blob), &[]);
        let headers = vec![("if-match".to_owned(), if_match.header_value().to_owned())];
        let target = self.blob_target(blob);
        let outcome = self
            .send(RequestKind::BlobDelete, &target, || {
                self.request(Method::Delete, url.clone(), headers.clone(), None)
            })
            .await;
        outcome.done_if_retried(is_missing_blob)
    }

    /// Deletes a blob if it exists; returns whether it existed. Idempotent.
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// Transport and service errors other than "not found".
    pub async fn delete_blob_if_exists(&self, blob: &str) -> Result<bool> {
        match self.delete_blob(blob, IfMatch::Any).await {
            Ok(()) => Ok(true),
            Err(e) if is_missing_blob(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The blobs whose name starts with `prefix`, in name order, with metadata: a lazy
    /// [`Listing`] — nothing is sent until a page is asked for or the listing is awaited
    /// (`container.list("2014/").await?` collects every page).
    ///
    /// Requests: one per 5,000 blobs (a listing page).
    ///
    /// # Errors
    /// Of each page: [`Error::NotFound`] if the container does not exist; transport and
    /// service errors.
    pub fn list(&self, prefix: &str) -> Listing<BlobInfo> {
        let (container, prefix) = (self.clone(), prefix.to_owned());
        Listing::new(move |marker, size| {
            let (container, prefix) = (container.clone(), prefix.clone());
            async move {
                let (blobs, next, _) = container.list_page(&prefix, marker, size).await?;
                Ok((blobs, next))
            }
        })
    }

    /// Like [`Container::list`], read whole, with the service's clock reading when it
    /// answered: the `Date` of the first listing response (`None` if it carried none).
    ///
    /// Each blob's [`BlobInfo::last_modified`] was set by the same service, so subtracting it
    /// from this time gives the blob's age without involving this machine's clock. Listing
    /// pages that follow the first were answered later, so an age measured against the first
    /// page's time is never more than the blob's age when its page was listed. Both headers
    /// have a resolution of one second.
    ///
    /// Requests: one per 5,000 blobs (a listing page).
    ///
    /// # Errors
    /// [`Error::NotFound`] if the container does not exist.
    pub async fn list_with_service_time(
        &self,
        prefix: &str,
    ) -> Result<(Vec<BlobInfo>, Option<DateTime<Utc>>)> {
        let mut out = Vec::new();
        let mut service_time: Option<Option<DateTime<Utc>>> = None;
        let mut marker: Option<String> = None;
        loop {
            let (blobs, next, time) = self.list_page(prefix, marker, None).await?;
            service_time.get_or_insert(time);
            out.extend(blobs);
            match next {
                Some(m) => marker = Some(m),
                None => return Ok((out, service_time.flatten())),
            }
        }
    }

    /// One listing page from `marker` (`None`: the first) of at most `size` blobs: its blobs,
    /// the marker of the next page, and the response's `Date`.
    async fn list_page(
        &self,
        prefix: &str,
        marker: Option<String>,
        size: Option<u32>,
    ) -> Result<(Vec<BlobInfo>, Option<String>, Option<DateTime<Utc>>)> {
        let size = size.map(|n| n.to_string());
        let target = Target::resource(ResourceKind::Container, self.name.as_ref());
        let mut query = vec![
            ("restype", "container"),
            ("comp", "list"),
            ("include", "metadata"),
        ];
        if !prefix.is_empty() {
            query.push(("prefix", prefix));
        }
        if let Some(m) = &marker {
            query.push(("marker", m));
        }
        if let Some(n) = &size {
            query.push(("maxresults", n));
        }
        let url = self.url(None, &query);
        let outcome = self
            .send(RequestKind::BlobList, &target, || {
                self.request(Method::Get, url.clone(), Vec::new(), None)
            })
            .await;
        let response = outcome.result?;
        let service_time = response
            .header("date")
            .and_then(|t| DateTime::parse_from_rfc2822(t).ok())
            .map(|t| t.with_timezone(&Utc));
        let page: EnumerationResults = azure_core::xml::read_xml(&response.body)
            .map_err(|e| Error::transport("malformed blob listing", e))?;
        let blobs = page
            .blobs
            .blob
            .into_iter()
            .map(|b| BlobInfo {
                etag: ETag::new(b.properties.etag),
                len: b.properties.content_length,
                content_type: b.properties.content_type.filter(|c| !c.is_empty()),
                last_modified: DateTime::parse_from_rfc2822(&b.properties.last_modified)
                    .ok()
                    .map(|t| t.with_timezone(&Utc)),
                metadata: b
                    .metadata
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), v))
                    .collect(),
                name: b.name,
            })
            .collect();
        let next = page.next_marker.filter(|m| !m.is_empty());
        Ok((blobs, next, service_time))
    }
}

/// The parts of a List Blobs response tablekit reads.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EnumerationResults {
    #[serde(default)]
    blobs: ListedBlobs,
    #[serde(default)]
    next_marker: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct ListedBlobs {
    #[serde(default)]
    blob: Vec<ListedBlob>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListedBlob {
    name: String,
    properties: ListedProperties,
    #[serde(default)]
    metadata: Option<std::collections::HashMap<String, String>>,
}

#[derive(Deserialize)]
struct ListedProperties {
    #[serde(rename = "Etag")]
    etag: String,
    #[serde(rename = "Content-Length")]
    content_length: u64,
    #[serde(rename = "Content-Type", default)]
    content_type: Option<String>,
    #[serde(rename = "Last-Modified")]
    last_modified: String,
}

fn lowercase(metadata: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    metadata
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect()
}

/// A 404 about a blob rather than its container.
fn is_missing_blob(e: &Error) -> bool {
    matches!(e, Error::NotFound { target } if target.kind == ResourceKind::Blob)
}
