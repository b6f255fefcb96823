//! The policy as a [`Table`]'s codec: every entity an encrypting handle writes is encrypted,
//! every entity it reads decrypted, and what encryption cannot support refused before any
//! request.

use std::sync::Arc;

use tablekit_azure::{CodecFilter, EntityCodec, Table};
use tablekit_core::filter::Filter;
use tablekit_core::{Error, Keys, OperationKind, Properties, Result};

use crate::RESERVED_PROPERTIES;
use crate::key::BoxFuture;
use crate::policy::EncryptionPolicy;

impl EncryptionPolicy {
    /// `table` encrypting through this policy: a handle on the same table whose writes
    /// encrypt ([`encrypt`](Self::encrypt)), whose reads and queries decrypt
    /// ([`decrypt`](Self::decrypt)), and which refuses merges and filters on encrypted
    /// properties before any request ([`Table::with_codec`]). Every pattern built on the
    /// returned handle stores and reads encrypted entities without knowing it. No request is
    /// sent.
    ///
    /// Requests: every operation of the handle sends exactly the requests it sends without
    /// encryption; the key-encryption key is called once per entity written or read, less
    /// with data-key reuse and a key cache (local
    /// keys send nothing).
    ///
    /// # Examples
    /// ```no_run
    /// use std::sync::Arc;
    /// use tablekit_core::Properties;
    /// use tablekit_encryption::{AesKeyWrap, EncryptionPolicy};
    ///
    /// # async fn f(account: &tablekit_azure::Account) -> tablekit_core::Result<()> {
    /// let kek = Arc::new(AesKeyWrap::new("employees-2026", &[7u8; 32])?);
    /// let policy = EncryptionPolicy::builder(kek).properties(["Email"]).build()?;
    /// let employees = policy.table(&account.table("Employees")?);
    /// // Stored as ciphertext, read back as text.
    /// let stored = employees.get::<Properties>(("Sales", "000223")).await?;
    /// # let _ = stored; Ok(()) }
    /// ```
    #[must_use]
    pub fn table(&self, table: &Table) -> Table {
        table.with_codec(Arc::new(self.clone()))
    }
}

/// Encryption as a codec: `encode` refuses merges, then encrypts (the table's writer checks
/// the encrypted entity's size, as [`EncryptionPolicy::encrypt`] does); `check_encode` makes
/// every check of `encode` that needs no key — so that a bulk write encrypts each transaction
/// just before sending it — and leaves an entity close to 1 MiB to be encrypted up front;
/// `decode` decrypts a whole entity ([`EncryptionPolicy::decrypt`]: every property the
/// metadata lists must be there); `check_filter` refuses filters on listed encrypted
/// properties; a projection also asks for the encryption metadata (tablekit's and the legacy
/// format's) and for every property the policy protects by name, so that the item it returns
/// is whole and verifies like a full read.
impl EntityCodec for EncryptionPolicy {
    fn encode<'a>(
        &'a self,
        _table: &'a str,
        keys: &'a Keys,
        properties: Properties,
        kind: OperationKind,
    ) -> BoxFuture<'a, Result<Properties>> {
        Box::pin(async move {
            self.refuse_merge(kind)?;
            // The table writes what this returns with tablekit's writer, which checks the
            // encrypted entity's size.
            self.encrypt_unchecked(keys, properties).await
        })
    }

    fn decode<'a>(
        &'a self,
        table: &'a str,
        keys: &'a Keys,
        properties: Properties,
    ) -> BoxFuture<'a, Result<Properties>> {
        // The table does not tell a projection from a full read here, so every read is held
        // to a full read's rule (nothing listed may be missing), and `projection` asks for
        // what that needs.
        Box::pin(self.decrypt(table, keys, properties))
    }

    fn check_filter(&self, filter: &Filter) -> Result<()> {
        EncryptionPolicy::check_filter(self, filter)
    }

    /// Equalities with encrypted properties that have a beacon are sent as equalities with
    /// the beacon ([`beacon_filter`](EncryptionPolicy::beacon_filter)), and the entities whose
    /// decrypted value differs — a beacon shared by truncation — are dropped.
    fn prepare_filter(&self, filter: &Filter) -> Result<CodecFilter> {
        if EncryptionPolicy::check_filter(self, filter).is_ok() {
            return Ok(CodecFilter::unchanged(filter.clone()));
        }
        let rewritten = self.beacon_filter(filter)?;
        let reads: Vec<String> = rewritten.equalities().map(|(p, _)| p.to_owned()).collect();
        let sent = rewritten.filter().clone();
        Ok(CodecFilter::rewritten(sent, reads, move |decrypted| {
            rewritten.matches(decrypted)
        }))
    }

    fn check_encode(
        &self,
        _table: &str,
        keys: &Keys,
        properties: &Properties,
        kind: OperationKind,
    ) -> Result<bool> {
        self.refuse_merge(kind)?;
        self.check_encrypt(keys, properties)
    }

    fn projection(&self, selected: &[String]) -> Result<Vec<String>> {
        let Some(protected) = self.protected_by_name() else {
            return Err(Error::invalid_argument(
                "select",
                "a projection through an encrypting table whose policy chooses properties with \
                 a function cannot be verified: the table cannot ask for the properties the \
                 function protects; read whole entities, or project through a handle without the \
                 policy and use EncryptionPolicy::decrypt_projection",
            ));
        };
        let mut requested = selected.to_vec();
        for name in RESERVED_PROPERTIES.into_iter().chain(protected) {
            if !requested.iter().any(|s| s == name) {
                requested.push(name.to_owned());
            }
        }
        Ok(requested)
    }
}
