//! Shared access signatures: a table service SAS scoped by PartitionKey/RowKey ranges (which
//! the SDK does not offer), and an account SAS for queues and blobs.
//!
//! A SAS lets a device reach storage directly with limited, expiring rights, without the
//! account key (checklist item 7). Issue tokens where the key is safe (a service), hand them to
//! clients, and build their [`Account`] with [`Account::from_sas`].

use std::fmt;

use azure_core::auth::Secret;
use chrono::{DateTime, SecondsFormat, Utc};
use tablekit_core::limits::validate_table_name;
use tablekit_core::{Error, Result};

use crate::account::{Account, SasToken};

/// The signed-version tablekit issues tokens with.
pub const SAS_VERSION: &str = "2019-02-02";

/// The signed-version of table SAS tokens for the Cosmos DB Table API, which refuses table
/// tokens of later versions (403). The string to sign has the same fields in both versions.
pub const COSMOS_TABLE_SAS_VERSION: &str = "2017-07-29";

/// The signed-version of a table SAS for `account`'s table service.
fn table_sas_version(account: &Account) -> &'static str {
    match account.settings().table_service {
        crate::TableService::Cosmos => COSMOS_TABLE_SAS_VERSION,
        _ => SAS_VERSION,
    }
}

/// Which protocols a token may be used over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SasProtocol {
    /// HTTPS only (`spr=https`).
    #[default]
    Https,
    /// HTTPS or HTTP (`spr=https,http`); needed for Azurite over plain HTTP.
    HttpsAndHttp,
}

impl SasProtocol {
    fn as_str(self) -> &'static str {
        match self {
            SasProtocol::Https => "https",
            SasProtocol::HttpsAndHttp => "https,http",
        }
    }
}

/// What a table SAS allows: read (query), add (insert), update (replace, merge, upserts),
/// delete.
///
/// [`TablePermissions::READ`], [`TablePermissions::ALL`], or [`TablePermissions::default`]
/// (nothing) and the `with_*` setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct TablePermissions {
    /// Query entities.
    pub read: bool,
    /// Insert entities (upserts need add and update).
    pub add: bool,
    /// Replace and merge entities.
    pub update: bool,
    /// Delete entities.
    pub delete: bool,
}

impl TablePermissions {
    /// Read only.
    pub const READ: Self = Self {
        read: true,
        add: false,
        update: false,
        delete: false,
    };
    /// Everything.
    pub const ALL: Self = Self {
        read: true,
        add: true,
        update: true,
        delete: true,
    };

    /// Sets whether entities may be queried.
    #[must_use]
    pub fn with_read(mut self, read: bool) -> Self {
        self.read = read;
        self
    }

    /// Sets whether entities may be inserted.
    #[must_use]
    pub fn with_add(mut self, add: bool) -> Self {
        self.add = add;
        self
    }

    /// Sets whether entities may be replaced and merged.
    #[must_use]
    pub fn with_update(mut self, update: bool) -> Self {
        self.update = update;
        self
    }

    /// Sets whether entities may be deleted.
    #[must_use]
    pub fn with_delete(mut self, delete: bool) -> Self {
        self.delete = delete;
        self
    }

    fn as_string(self) -> String {
        [
            (self.read, 'r'),
            (self.add, 'a'),
            (self.update, 'u'),
            (self.delete, 'd'),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, c)| *c)
        .collect()
    }
}

fn sas_time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A table service SAS: one table, permissions, a validity window, and optionally a
/// PartitionKey/RowKey range. Built with [`TableSas::new`] and signed with the account key by
/// [`TableSas::sign`].
///
/// Azure enforces the key range on every request; Azurite checks the signature (which covers
/// the range), the permissions and the expiry, but not the range itself.
#[derive(Clone, PartialEq, Eq)]
pub struct TableSas {
    table: String,
    permissions: TablePermissions,
    start: Option<DateTime<Utc>>,
    expiry: DateTime<Utc>,
    start_pk: Option<String>,
    start_rk: Option<String>,
    end_pk: Option<String>,
    end_rk: Option<String>,
    protocol: SasProtocol,
    ip: Option<String>,
    identifier: Option<String>,
}

impl fmt::Debug for TableSas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableSas")
            .field("table", &self.table)
            .field("permissions", &self.permissions.as_string())
            .field("expiry", &self.expiry)
            .field("partition_keys", &(&self.start_pk, &self.end_pk))
            .field("row_keys", &(&self.start_rk, &self.end_rk))
            .finish_non_exhaustive()
    }
}

impl TableSas {
    /// A token for `table` with `permissions`, valid until `expiry`, over HTTPS.
    pub fn new(table: &str, permissions: TablePermissions, expiry: DateTime<Utc>) -> Self {
        Self {
            table: table.to_owned(),
            permissions,
            start: None,
            expiry,
            start_pk: None,
            start_rk: None,
            end_pk: None,
            end_rk: None,
            protocol: SasProtocol::Https,
            ip: None,
            identifier: None,
        }
    }

    /// Valid from `start` (default: immediately).
    #[must_use]
    pub fn with_start(mut self, start: DateTime<Utc>) -> Self {
        self.start = Some(start);
        self
    }

    /// Only partitions from `start` to `end` inclusive. Use the same value twice for one
    /// partition (e.g. per-user tokens when PartitionKey is the user id).
    #[must_use]
    pub fn with_partition_range(
        mut self,
        start: impl Into<String>,
        end: impl Into<String>,
    ) -> Self {
        self.start_pk = Some(start.into());
        self.end_pk = Some(end.into());
        self
    }

    /// Only rows from (`start_pk`, `start_rk`) to (`end_pk`, `end_rk`), inclusive; requires a
    /// partition range.
    #[must_use]
    pub fn with_row_range(mut self, start: impl Into<String>, end: impl Into<String>) -> Self {
        self.start_rk = Some(start.into());
        self.end_rk = Some(end.into());
        self
    }

    /// Allowed protocols.
    #[must_use]
    pub fn with_protocol(mut self, protocol: SasProtocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Allowed client IP or range (`168.1.5.60` or `168.1.5.60-168.1.5.70`).
    #[must_use]
    pub fn with_ip(mut self, ip: impl Into<String>) -> Self {
        self.ip = Some(ip.into());
        self
    }

    /// The string the signature covers, in the documented format of the Table service SAS
    /// (version 2018-11-09 and later): permissions, start, expiry, `/table/{account}/{table}`
    /// (table name lower-cased), identifier, IP, protocol, version, then the start and end
    /// PartitionKey and RowKey, separated by newlines.
    #[cfg(test)]
    pub(crate) fn string_to_sign(&self, account: &str) -> String {
        self.string_to_sign_as(account, SAS_VERSION)
    }

    fn string_to_sign_as(&self, account: &str, version: &str) -> String {
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        [
            self.permissions.as_string(),
            self.start.as_ref().map(sas_time).unwrap_or_default(),
            sas_time(&self.expiry),
            format!("/table/{account}/{}", self.table.to_lowercase()),
            opt(&self.identifier),
            opt(&self.ip),
            self.protocol.as_str().to_owned(),
            version.to_owned(),
            opt(&self.start_pk),
            opt(&self.start_rk),
            opt(&self.end_pk),
            opt(&self.end_rk),
        ]
        .join("\n")
    }

    /// Signs the token with the account key. No request is sent. The signed-version is
    /// [`SAS_VERSION`], or [`COSMOS_TABLE_SAS_VERSION`] for an account on the Cosmos DB Table
    /// API ([`Settings::table_service`](crate::Settings::table_service)).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `credentials` when the account has no key (a SAS
    /// account cannot issue tokens; neither can an account authenticated with Microsoft Entra
    /// ID tokens, since a table SAS is signed with the key), and when no permission is
    /// granted, a row range has no partition range, or the table name is invalid.
    pub fn sign(&self, account: &Account) -> Result<SasToken> {
        validate_table_name(&self.table)?;
        let invalid = |part: &str, reason: &str| Error::InvalidConfig {
            part: part.into(),
            reason: reason.into(),
        };
        if self.permissions.as_string().is_empty() {
            return Err(invalid("permissions", "grant at least one permission"));
        }
        if (self.start_rk.is_some() || self.end_rk.is_some()) && self.start_pk.is_none() {
            return Err(invalid(
                "row range",
                "a RowKey range needs a PartitionKey range",
            ));
        }
        let version = table_sas_version(account);
        let signature = sign(account, &self.string_to_sign_as(account.name(), version))?;
        let mut pairs = vec![
            ("sv", version.to_owned()),
            ("tn", self.table.clone()),
            ("sp", self.permissions.as_string()),
        ];
        if let Some(start) = &self.start {
            pairs.push(("st", sas_time(start)));
        }
        pairs.push(("se", sas_time(&self.expiry)));
        for (name, value) in [
            ("spk", &self.start_pk),
            ("srk", &self.start_rk),
            ("epk", &self.end_pk),
            ("erk", &self.end_rk),
            ("sip", &self.ip),
        ] {
            if let Some(v) = value {
                pairs.push((name, v.clone()));
            }
        }
        pairs.push(("spr", self.protocol.as_str().to_owned()));
        pairs.push(("sig", signature));
        Ok(SasToken::from_pairs(
            pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        ))
    }
}

/// Services an account SAS covers: [`SasServices::default`] (none) and the `with_*`
/// setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct SasServices {
    /// Blob service.
    pub blob: bool,
    /// Queue service.
    pub queue: bool,
    /// Table service.
    pub table: bool,
}

impl SasServices {
    /// Sets whether the SAS covers the blob service.
    #[must_use]
    pub fn with_blob(mut self, blob: bool) -> Self {
        self.blob = blob;
        self
    }

    /// Sets whether the SAS covers the queue service.
    #[must_use]
    pub fn with_queue(mut self, queue: bool) -> Self {
        self.queue = queue;
        self
    }

    /// Sets whether the SAS covers the table service.
    #[must_use]
    pub fn with_table(mut self, table: bool) -> Self {
        self.table = table;
        self
    }
}

/// An account SAS (for queues and blobs, where a service SAS per resource is not needed):
/// services, permissions (`racwdlup` letters), resource types (`s`ervice, `c`ontainer,
/// `o`bject) and a validity window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountSas {
    services: SasServices,
    permissions: String,
    resource_types: String,
    start: Option<DateTime<Utc>>,
    expiry: DateTime<Utc>,
    protocol: SasProtocol,
}

impl AccountSas {
    /// An account SAS. `permissions` are letters from `racwdlup` (read, add, create, write,
    /// delete, list, update, process), `resource_types` from `sco`.
    pub fn new(
        services: SasServices,
        permissions: &str,
        resource_types: &str,
        expiry: DateTime<Utc>,
    ) -> Self {
        Self {
            services,
            permissions: permissions.to_owned(),
            resource_types: resource_types.to_owned(),
            start: None,
            expiry,
            protocol: SasProtocol::Https,
        }
    }

    /// Allowed protocols.
    #[must_use]
    pub fn with_protocol(mut self, protocol: SasProtocol) -> Self {
        self.protocol = protocol;
        self
    }

    fn services(&self) -> String {
        [
            (self.services.blob, 'b'),
            (self.services.queue, 'q'),
            (self.services.table, 't'),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, c)| *c)
        .collect()
    }

    /// The string the signature covers (account SAS, versions before 2020-12-06): account,
    /// permissions, services, resource types, start, expiry, IP, protocol, version, each
    /// followed by a newline.
    pub(crate) fn string_to_sign(&self, account: &str) -> String {
        format!(
            "{account}\n{}\n{}\n{}\n{}\n{}\n\n{}\n{SAS_VERSION}\n",
            self.permissions,
            self.services(),
            self.resource_types,
            self.start.as_ref().map(sas_time).unwrap_or_default(),
            sas_time(&self.expiry),
            self.protocol.as_str()
        )
    }

    /// Signs the token with the account key.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] without an account key (a SAS account or a Microsoft Entra ID
    /// token account: an account SAS is signed with the key) or with invalid letters.
    pub fn sign(&self, account: &Account) -> Result<SasToken> {
        let invalid = |part: &str, reason: &str| Error::InvalidConfig {
            part: part.into(),
            reason: reason.into(),
        };
        if self.permissions.is_empty() || !self.permissions.chars().all(|c| "racwdlup".contains(c))
        {
            return Err(invalid("permissions", "letters from `racwdlup`"));
        }
        if self.resource_types.is_empty() || !self.resource_types.chars().all(|c| "sco".contains(c))
        {
            return Err(invalid("resource_types", "letters from `sco`"));
        }
        if self.services().is_empty() {
            return Err(invalid("services", "choose at least one service"));
        }
        let signature = sign(account, &self.string_to_sign(account.name()))?;
        let mut pairs = vec![
            ("sv", SAS_VERSION.to_owned()),
            ("ss", self.services()),
            ("srt", self.resource_types.clone()),
            ("sp", self.permissions.clone()),
        ];
        if let Some(start) = &self.start {
            pairs.push(("st", sas_time(start)));
        }
        pairs.push(("se", sas_time(&self.expiry)));
        pairs.push(("spr", self.protocol.as_str().to_owned()));
        pairs.push(("sig", signature));
        Ok(SasToken::from_pairs(
            pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        ))
    }
}

fn sign(account: &Account, string_to_sign: &str) -> Result<String> {
    let key = account.key().ok_or_else(|| Error::InvalidConfig {
        part: "credentials".into(),
        reason: if account.uses_token() {
            // Checked before anything is sent: a token cannot stand in for the key here.
            "this account authenticates with Microsoft Entra ID tokens, and a table or \
             account SAS is signed with the account key; issue it from an account with the \
             key (a user delegation SAS, signed with a token, exists for blobs only)"
                .into()
        } else {
            "issuing a SAS needs the account key".into()
        },
    })?;
    azure_core::hmac::hmac_sha256(string_to_sign, &Secret::new(key.to_owned())).map_err(|_| {
        Error::InvalidConfig {
            part: "AccountKey".into(),
            reason: "cannot sign with this key".into(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn the_table_string_to_sign_follows_the_documented_format() {
        let expiry = Utc.with_ymd_and_hms(2030, 1, 2, 3, 4, 5).unwrap();
        let start = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let sas = TableSas::new(
            "Employees",
            TablePermissions::default()
                .with_read(true)
                .with_add(true)
                .with_update(false)
                .with_delete(true),
            expiry,
        )
        .with_start(start)
        .with_partition_range("Sales", "Sales")
        .with_row_range("000100", "000199")
        .with_protocol(SasProtocol::HttpsAndHttp)
        .with_ip("10.0.0.1");
        assert_eq!(
            sas.string_to_sign("acme"),
            "rad\n2030-01-01T00:00:00Z\n2030-01-02T03:04:05Z\n/table/acme/employees\n\n10.0.0.1\nhttps,http\n2019-02-02\nSales\n000100\nSales\n000199"
        );
        let bare = TableSas::new("T1x", TablePermissions::READ, expiry);
        assert_eq!(
            bare.string_to_sign("a"),
            "r\n\n2030-01-02T03:04:05Z\n/table/a/t1x\n\n\nhttps\n2019-02-02\n\n\n\n"
        );
    }

    #[test]
    fn the_account_string_to_sign_ends_with_a_newline() {
        let expiry = Utc.with_ymd_and_hms(2030, 1, 2, 3, 4, 5).unwrap();
        let sas = AccountSas::new(
            SasServices::default()
                .with_blob(true)
                .with_queue(true)
                .with_table(false),
            "rl",
            "co",
            expiry,
        );
        assert_eq!(
            sas.string_to_sign("acme"),
            "acme\nrl\nbq\nco\n\n2030-01-02T03:04:05Z\n\nhttps\n2019-02-02\n"
        );
    }

    #[test]
    fn signing_needs_a_key_and_the_signature_matches_hmac_sha256() {
        let account = Account::emulator();
        let expiry = Utc.with_ymd_and_hms(2030, 1, 2, 3, 4, 5).unwrap();
        let sas = TableSas::new("Employees", TablePermissions::READ, expiry)
            .with_partition_range("Sales", "Sales");
        let token = sas.sign(&account).unwrap();
        let expected = azure_core::hmac::hmac_sha256(
            &sas.string_to_sign("devstoreaccount1"),
            &Secret::new(crate::account::EMULATOR_KEY),
        )
        .unwrap();
        assert_eq!(token.get("sig"), Some(expected.as_str()));
        assert_eq!(
            (token.get("spk"), token.get("epk"), token.get("tn")),
            (Some("Sales"), Some("Sales"), Some("Employees"))
        );
        let no_range =
            TableSas::new("Employees", TablePermissions::READ, expiry).with_row_range("a", "b");
        assert!(no_range.sign(&account).is_err());
        let sas_account = Account::from_sas(
            "devstoreaccount1",
            account.endpoints().clone(),
            &token.to_query(),
        )
        .unwrap();
        assert!(
            sas.sign(&sas_account).is_err(),
            "a SAS account cannot issue tokens"
        );
    }

    /// A credential that must never be asked.
    #[derive(Debug)]
    struct Unused;

    #[async_trait::async_trait]
    impl azure_core::auth::TokenCredential for Unused {
        async fn get_token(&self, _: &[&str]) -> azure_core::Result<azure_core::auth::AccessToken> {
            panic!("signing a SAS asked the token credential")
        }
        async fn clear_cache(&self) -> azure_core::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_token_account_cannot_sign_a_sas_and_says_why() {
        let endpoints = crate::Endpoints {
            table: "https://acme.table.core.windows.net".parse().unwrap(),
            queue: "https://acme.queue.core.windows.net".parse().unwrap(),
            blob: "https://acme.blob.core.windows.net".parse().unwrap(),
        };
        let account =
            Account::from_token_credential("acme", endpoints, std::sync::Arc::new(Unused)).unwrap();
        assert!(account.uses_token() && !account.has_key());
        let expiry = Utc.with_ymd_and_hms(2030, 1, 2, 3, 4, 5).unwrap();
        let table = TableSas::new("Employees", TablePermissions::READ, expiry).sign(&account);
        let services = SasServices::default()
            .with_blob(true)
            .with_queue(true)
            .with_table(false);
        let account_sas = AccountSas::new(services, "rl", "co", expiry).sign(&account);
        for result in [table, account_sas] {
            match result {
                Err(Error::InvalidConfig { part, reason }) => {
                    assert_eq!(part, "credentials");
                    for words in ["Entra ID", "account key", "user delegation", "blobs"] {
                        assert!(reason.contains(words), "{words}: {reason}");
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(account.metrics().snapshot().requests(), 0);
    }
}
