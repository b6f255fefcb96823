//! Listing the tables of an account, by name prefix (table-per-period retention needs it).

use azure_core::Method;
use azure_storage::clients::ServiceType;
use serde::Deserialize;
use tablekit_core::filter::Filter;
use tablekit_core::keys::prefix_range;
use tablekit_core::{Error, Result, Target};

use super::{ACCEPT_NONE, table_request};
use crate::account::Account;
use crate::listing::Listing;
use crate::metrics::RequestKind;
use crate::url::join;

#[derive(Deserialize)]
struct TableList {
    #[serde(default)]
    value: Vec<TableRow>,
}

#[derive(Deserialize)]
struct TableRow {
    #[serde(rename = "TableName")]
    name: String,
}

/// `TableName ge 'prefix' and TableName lt '<prefix with its last character incremented>'`:
/// every name that starts with `prefix`, as a range the service can answer from its index.
fn prefix_filter(prefix: &str) -> Option<Filter> {
    if prefix.is_empty() {
        return None;
    }
    let range = prefix_range(prefix);
    let lower = Filter::ge("TableName", range.start);
    Some(match range.end {
        Some(end) => lower.and(Filter::lt("TableName", end)),
        None => lower,
    })
}

impl Account {
    /// The names of the tables whose name starts with `prefix` (all tables for `""`), in the
    /// service's order (ascending by name).
    ///
    /// The comparison is case-sensitive on the name as created, although table names are
    /// otherwise case-insensitive: list with the casing the tables were created with.
    ///
    /// A lazy [`Listing`]: nothing is sent until a page is asked for or the listing is
    /// awaited (`account.list_tables("Signins").await?` collects every page).
    ///
    /// Requests: one per 1,000 tables listed (the service pages table listings).
    /// Consistency: each page reflects the tables that existed when it was read; a table
    /// being deleted may still be listed.
    ///
    /// # Errors
    /// Of each page: transport and service errors.
    pub fn list_tables(&self, prefix: &str) -> Listing<String> {
        let (account, prefix) = (self.clone(), prefix.to_owned());
        Listing::new(move |next, size| {
            let (account, prefix) = (account.clone(), prefix.clone());
            async move { account.list_tables_page(&prefix, next, size).await }
        })
    }

    /// One page of [`list_tables`](Self::list_tables), from the `NextTableName` marker
    /// `next` (`None`: the first page) with at most `size` names, and the marker of the page
    /// after it.
    async fn list_tables_page(
        &self,
        prefix: &str,
        next: Option<String>,
        size: Option<u32>,
    ) -> Result<(Vec<String>, Option<String>)> {
        let filter = prefix_filter(prefix).map(|f| f.render()).transpose()?;
        let target = Target::table(format!("{prefix}*"));
        let top = size.map(|n| n.to_string());
        let mut query: Vec<(&str, &str)> = Vec::with_capacity(3);
        if let Some(f) = &filter {
            query.push(("$filter", f));
        }
        if let Some(top) = &top {
            query.push(("$top", top));
        }
        if let Some(n) = &next {
            query.push(("NextTableName", n));
        }
        let url = join(&self.endpoints().table, "Tables", &query);
        let outcome = self
            .send(ServiceType::Table, RequestKind::TableList, &target, || {
                table_request(Method::Get, url.clone(), &[("accept", ACCEPT_NONE)], None)
            })
            .await;
        let response = outcome.result?;
        let page: TableList = serde_json::from_slice(&response.body)
            .map_err(|e| Error::transport("the table listing could not be read", Box::new(e)))?;
        let names = page.value.into_iter().map(|row| row.name).collect();
        let next = response
            .header("x-ms-continuation-nexttablename")
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        Ok((names, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_becomes_a_name_range() {
        assert_eq!(prefix_filter(""), None);
        assert_eq!(
            prefix_filter("Signins").unwrap().render().unwrap(),
            "(TableName ge 'Signins') and (TableName lt 'Signint')"
        );
    }
}
