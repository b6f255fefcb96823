//! The writes the eventually consistent parts are made of — reads, upserts, deletes that
//! accept absence, ETag-conditioned writes, blob overwrites — behind one trait, so the same
//! convergence code runs inside a queue worker (through its `Steps`) and directly (repairs).

use std::future::Future;

use tablekit_azure::{Blob, Container, Table, UploadOptions};
use tablekit_core::Properties;
use tablekit_core::batch::BatchPlan;
use tablekit_core::{ETag, Entity, Error, IfMatch, Keys, Result, Stored};
use tablekit_eventual::Steps;

/// Idempotent or conditional operations, one request each.
pub(crate) trait Effects: Sync {
    fn get(
        &self,
        table: &Table,
        keys: &Keys,
    ) -> impl Future<Output = Result<Option<Stored<Properties>>>> + Send;

    fn upsert_replace(
        &self,
        table: &Table,
        entity: &Entity<Properties>,
    ) -> impl Future<Output = Result<ETag>> + Send;

    fn upsert_merge(
        &self,
        table: &Table,
        entity: &Entity<Properties>,
    ) -> impl Future<Output = Result<ETag>> + Send;

    fn delete_if_exists(
        &self,
        table: &Table,
        keys: &Keys,
    ) -> impl Future<Output = Result<bool>> + Send;

    fn replace_if_match(
        &self,
        table: &Table,
        entity: &Entity<Properties>,
        etag: &ETag,
    ) -> impl Future<Output = Result<ETag>> + Send;

    /// One atomic transaction of upserts and ETag-conditioned writes.
    fn submit(&self, table: &Table, plan: &BatchPlan) -> impl Future<Output = Result<()>> + Send;

    fn get_blob(
        &self,
        container: &Container,
        name: &str,
    ) -> impl Future<Output = Result<Option<Blob>>> + Send;

    fn put_blob(
        &self,
        container: &Container,
        name: &str,
        data: Vec<u8>,
        options: UploadOptions,
    ) -> impl Future<Output = Result<ETag>> + Send;
}

/// Refuses a job that names another index than the handler's: two indexes sharing a queue
/// would otherwise apply each other's jobs.
///
/// # Errors
/// [`Error::Decode`] naming both indexes.
pub(crate) fn check_index(job: &str, handler: &str) -> Result<()> {
    if job == handler {
        return Ok(());
    }
    Err(Error::decode(
        tablekit_core::Target::default(),
        "index",
        format!("a job of index {job:?} reached the handler of {handler:?}"),
    ))
}

/// Straight to the service, outside any worker.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Direct;

impl Effects for Direct {
    async fn get(&self, table: &Table, keys: &Keys) -> Result<Option<Stored<Properties>>> {
        table.get(keys).await
    }

    async fn upsert_replace(&self, table: &Table, entity: &Entity<Properties>) -> Result<ETag> {
        table.upsert_replace(entity).await
    }

    async fn upsert_merge(&self, table: &Table, entity: &Entity<Properties>) -> Result<ETag> {
        table.upsert_merge(entity).await
    }

    async fn delete_if_exists(&self, table: &Table, keys: &Keys) -> Result<bool> {
        table.delete_if_exists(keys).await
    }

    async fn replace_if_match(
        &self,
        table: &Table,
        entity: &Entity<Properties>,
        etag: &ETag,
    ) -> Result<ETag> {
        table.replace(entity, etag.into()).await
    }

    async fn submit(&self, table: &Table, plan: &BatchPlan) -> Result<()> {
        // The same rules as inside a worker: a repair may run alongside jobs.
        Steps::detached().submit(table, plan).await
    }

    async fn get_blob(&self, container: &Container, name: &str) -> Result<Option<Blob>> {
        container.download(name).await
    }

    async fn put_blob(
        &self,
        container: &Container,
        name: &str,
        data: Vec<u8>,
        options: UploadOptions,
    ) -> Result<ETag> {
        container.upload(name, data, options).await
    }
}

/// Inside a worker: every step through the job's [`Steps`].
impl Effects for Steps {
    async fn get(&self, table: &Table, keys: &Keys) -> Result<Option<Stored<Properties>>> {
        Steps::get(self, table, keys).await
    }

    async fn upsert_replace(&self, table: &Table, entity: &Entity<Properties>) -> Result<ETag> {
        Steps::upsert_replace(self, table, entity).await
    }

    async fn upsert_merge(&self, table: &Table, entity: &Entity<Properties>) -> Result<ETag> {
        Steps::upsert_merge(self, table, entity).await
    }

    async fn delete_if_exists(&self, table: &Table, keys: &Keys) -> Result<bool> {
        Steps::delete_if_exists(self, table, keys).await
    }

    async fn replace_if_match(
        &self,
        table: &Table,
        entity: &Entity<Properties>,
        etag: &ETag,
    ) -> Result<ETag> {
        Steps::replace(self, table, entity, IfMatch::ETag(etag.clone())).await
    }

    async fn submit(&self, table: &Table, plan: &BatchPlan) -> Result<()> {
        Steps::submit(self, table, plan).await
    }

    async fn get_blob(&self, container: &Container, name: &str) -> Result<Option<Blob>> {
        Steps::download_blob(self, container, name).await
    }

    async fn put_blob(
        &self,
        container: &Container,
        name: &str,
        data: Vec<u8>,
        options: UploadOptions,
    ) -> Result<ETag> {
        Steps::upload_blob(self, container, name, data.into(), options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_of_another_index_is_refused() {
        assert!(check_index("Employees/email", "Employees/email").is_ok());
        let e = check_index("Employees/email", "Employees/lastname").unwrap_err();
        assert!(e.to_string().contains("Employees/lastname"), "{e}");
    }
}
