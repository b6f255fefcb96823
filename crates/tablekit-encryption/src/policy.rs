//! [`EncryptionPolicy`]: which properties are encrypted, under which key, and the refusals
//! (merge, filters on encrypted properties) that follow from it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use tablekit_core::filter::Filter;
use tablekit_core::limits::validate_property_name;
use tablekit_core::{Error, NameKind, OperationKind, Result, TableEntity};

use crate::RESERVED_PROPERTIES;
use crate::beacon::{StandardBeacon, is_beacon_name};
use crate::cache::{DataKeyReuse, KeyCache};
use crate::key::{KeyEncryptionKey, KeyResolver, check_key_id};
use crate::sign::SigningKey;

/// A function that decides per entity whether a property is encrypted:
/// `(PartitionKey, RowKey, property name) -> bool`.
pub type SelectFn = dyn Fn(&str, &str, &str) -> bool + Send + Sync;

/// A function that classifies a property per entity: `(PartitionKey, RowKey, property name)
/// -> Some(action)`, or `None` to leave it to the lists and the default.
pub type ClassifyFn = dyn Fn(&str, &str, &str) -> Option<Action> + Send + Sync;

/// What a policy does with a property, from least to most protective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Action {
    /// Stored as written and not covered by the item MAC or signature: a writer to the table
    /// may change, add or remove it undetected.
    Plain,
    /// Stored as written — readable, filterable — and covered by the item MAC and signature:
    /// changing it, removing it, or adding it where the item does not list it is a decryption
    /// failure.
    SignOnly,
    /// Encrypted (strings only) and covered by the item MAC and signature.
    EncryptAndSign,
}

/// What to encrypt and with which keys: the properties (a fixed list, a function of the keys
/// and the name, or both — a property is encrypted when either selects it), the
/// key-encryption key for writes, and the resolver that finds keys by id for reads.
///
/// Build one per entity type with [`EncryptionPolicy::builder`]; it is cheap to clone.
///
/// ```
/// use std::sync::Arc;
/// use tablekit_encryption::{AesKeyWrap, EncryptionPolicy};
/// let kek = Arc::new(AesKeyWrap::new("employees-2026", &[7u8; 32]).unwrap());
/// let policy = EncryptionPolicy::builder(kek)
///     .properties(["Email", "HomeAddress"])
///     .build()
///     .unwrap();
/// assert!(policy.selects("Sales", "000223", "Email"));
/// assert!(!policy.selects("Sales", "000223", "FirstName"));
/// ```
#[derive(Clone)]
pub struct EncryptionPolicy {
    pub(crate) kek: Arc<dyn KeyEncryptionKey>,
    pub(crate) resolver: Option<Arc<dyn KeyResolver>>,
    properties: BTreeSet<String>,
    select: Option<Arc<SelectFn>>,
    /// Properties classified as stored as written.
    plain: BTreeSet<String>,
    /// Properties stored as written and covered by the item MAC.
    sign_only: BTreeSet<String>,
    classify: Option<Arc<ClassifyFn>>,
    /// The action of a property nothing classifies.
    default_action: Action,
    /// Whether every string property written must be classified.
    strict: bool,
    /// The key ids under which the legacy format is read; `None`: it is not read.
    pub(crate) legacy_key_ids: Option<BTreeSet<String>>,
    /// The key writes sign with.
    pub(crate) signing_key: Option<Arc<dyn SigningKey>>,
    /// The keys whose signatures reads accept, by id (the signing key among them); when there
    /// are any, every item read must carry one.
    pub(crate) signers: BTreeMap<String, Arc<dyn SigningKey>>,
    /// The logical table name bound into every item written and required of every item read.
    pub(crate) table_binding: Option<String>,
    /// The key ids stored entities may name: the writing key's, the resolver's known ones,
    /// the legacy ones and those listed.
    allowed_ids: BTreeSet<String>,
    /// Prefixes of further key ids stored entities may name.
    allowed_prefixes: Vec<String>,
    /// Unwrapped content keys, for reads.
    pub(crate) key_cache: Option<KeyCache>,
    /// The content key reused across writes.
    pub(crate) data_keys: Option<DataKeyReuse>,
    /// The beacons written beside encrypted properties, by property name.
    pub(crate) beacons: BTreeMap<String, StandardBeacon>,
}

/// Builds an [`EncryptionPolicy`]; see [`EncryptionPolicy::builder`].
pub struct EncryptionPolicyBuilder {
    kek: Arc<dyn KeyEncryptionKey>,
    resolver: Option<Arc<dyn KeyResolver>>,
    properties: Vec<String>,
    select: Option<Arc<SelectFn>>,
    plain: Vec<String>,
    sign_only: Vec<String>,
    classify: Option<Arc<ClassifyFn>>,
    default_action: Action,
    strict: bool,
    legacy_key_ids: Option<Vec<String>>,
    signing_key: Option<Arc<dyn SigningKey>>,
    trusted_signers: Vec<Arc<dyn SigningKey>>,
    table_binding: Option<String>,
    allowed_ids: Vec<String>,
    allowed_prefixes: Vec<String>,
    key_cache: Option<KeyCache>,
    data_keys: Option<DataKeyReuse>,
    beacons: Vec<StandardBeacon>,
}

impl EncryptionPolicy {
    /// Starts a policy whose writes wrap content keys with `kek`.
    pub fn builder(kek: Arc<dyn KeyEncryptionKey>) -> EncryptionPolicyBuilder {
        EncryptionPolicyBuilder {
            kek,
            resolver: None,
            properties: Vec::new(),
            select: None,
            plain: Vec::new(),
            sign_only: Vec::new(),
            classify: None,
            default_action: Action::Plain,
            strict: false,
            legacy_key_ids: None,
            signing_key: None,
            trusted_signers: Vec::new(),
            table_binding: None,
            allowed_ids: Vec::new(),
            allowed_prefixes: Vec::new(),
            key_cache: None,
            data_keys: None,
            beacons: Vec::new(),
        }
    }

    /// A policy encrypting the properties `T` marks with `#[table(encrypt)]`
    /// ([`TableEntity::encrypted_properties`]) under `kek`: the builder with
    /// [`properties_of::<T>()`](EncryptionPolicyBuilder::properties_of), built.
    ///
    /// # Errors
    /// As [`EncryptionPolicyBuilder::build`]: [`Error::InvalidConfig`] when `T` marks no
    /// property.
    pub fn for_type<T: TableEntity>(kek: Arc<dyn KeyEncryptionKey>) -> Result<Self> {
        Self::builder(kek).properties_of::<T>().build()
    }

    /// Whether the property `name` of the entity with these keys is encrypted.
    pub fn selects(&self, pk: &str, rk: &str, name: &str) -> bool {
        self.properties.contains(name) || self.select.as_ref().is_some_and(|f| f(pk, rk, name))
    }

    /// What the policy does with the property `name` of the entity with these keys: the most
    /// protective of what its lists and functions say, or its default action when none of them
    /// classifies it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tablekit_encryption::{Action, AesKeyWrap, EncryptionPolicy};
    /// let kek = Arc::new(AesKeyWrap::new("hr-2026", &[7u8; 32]).unwrap());
    /// let policy = EncryptionPolicy::builder(kek)
    ///     .properties(["Email"])
    ///     .sign_only(["Salary"])
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(policy.action("Sales", "000223", "Email"), Action::EncryptAndSign);
    /// assert_eq!(policy.action("Sales", "000223", "Salary"), Action::SignOnly);
    /// assert_eq!(policy.action("Sales", "000223", "Nickname"), Action::Plain);
    /// ```
    pub fn action(&self, pk: &str, rk: &str, name: &str) -> Action {
        self.classified(pk, rk, name).unwrap_or(self.default_action)
    }

    /// The action the lists and functions give the property, if any does.
    fn classified(&self, pk: &str, rk: &str, name: &str) -> Option<Action> {
        let listed = if self.selects(pk, rk, name) {
            Some(Action::EncryptAndSign)
        } else if self.sign_only.contains(name) {
            Some(Action::SignOnly)
        } else if self.plain.contains(name) {
            Some(Action::Plain)
        } else {
            None
        };
        let by_function = self.classify.as_ref().and_then(|f| f(pk, rk, name));
        listed.max(by_function)
    }

    /// Whether a list or a function classifies the property (the default does not count).
    pub(crate) fn classifies(&self, pk: &str, rk: &str, name: &str) -> bool {
        self.classified(pk, rk, name).is_some()
    }

    /// Whether the policy requires every string property written to be classified.
    pub(crate) fn is_strict(&self) -> bool {
        self.strict
    }

    /// The properties listed by name (those a selection function picks are not included).
    pub fn properties(&self) -> impl Iterator<Item = &str> {
        self.properties.iter().map(String::as_str)
    }

    /// Every property this policy protects, when it can name them all: those listed as
    /// encrypted or signed only. `None` when a function, or a default action that signs, may
    /// protect others.
    pub(crate) fn protected_by_name(&self) -> Option<impl Iterator<Item = &str>> {
        let by_name = self.select.is_none()
            && self.classify.is_none()
            && self.default_action == Action::Plain;
        by_name.then(|| {
            self.properties()
                .chain(self.sign_only.iter().map(String::as_str))
                .chain(self.beacons.values().map(StandardBeacon::stored_name))
        })
    }

    /// The beacon this policy writes beside the encrypted property `property`, if any
    /// ([`EncryptionPolicyBuilder::beacon`]).
    pub fn beacon(&self, property: &str) -> Option<&StandardBeacon> {
        self.beacons.get(property)
    }

    /// Whether stored entities may name the key id `kid`.
    pub(crate) fn allows_key_id(&self, kid: &str) -> bool {
        self.allowed_ids.contains(kid) || self.allowed_prefixes.iter().any(|p| kid.starts_with(p))
    }

    /// The logical table name bound into items ("" when none is): part of the associated
    /// data of every ciphertext and of the item message.
    pub(crate) fn binding(&self) -> &str {
        self.table_binding.as_deref().unwrap_or("")
    }

    /// The id of the key-encryption key writes use.
    pub fn key_id(&self) -> &str {
        self.kek.id()
    }

    /// Refuses the operations that cannot be used on encrypted entities: `Merge` and
    /// `UpsertMerge`. A merge would combine properties encrypted under the stored entity's
    /// content key with new ones under another, and the stored metadata can describe only one;
    /// use replace (read, change, replace with the ETag) instead. Every other operation passes.
    /// Sends no request.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (argument `operation`) for `Merge` and `UpsertMerge`.
    pub fn refuse_merge(&self, kind: OperationKind) -> Result<()> {
        match kind {
            OperationKind::Merge | OperationKind::UpsertMerge => Err(Error::invalid_argument(
                "operation",
                format!(
                    "{kind:?} is refused for encrypted entities: the stored properties may be \
                     encrypted under another content key than the new ones; read the entity and \
                     replace it instead"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Refuses a filter that compares a property this policy lists by name: its stored value
    /// is a ciphertext under a key unique to each entity write, so no comparison can mean
    /// anything (`eq` never matches, `ne` always does). Filter on plain properties and compare
    /// after decryption. Properties a selection function picks cannot be checked here, as a
    /// filter is not tied to one entity. Raw filters are checked through their parse; raw text
    /// that does not parse is refused when any word of it outside quotes is such a name.
    /// Sends no request.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`] naming the property.
    pub fn check_filter(&self, filter: &Filter) -> Result<()> {
        if let Some(name) = self.encrypted_in(filter) {
            if self.beacons.contains_key(&name) {
                return Err(Error::InvalidFilter {
                    reason: format!(
                        "`{name}` is encrypted: its stored value is ciphertext, so the service \
                         cannot compare it; it has a beacon, so an equality with it can be \
                         asked through an encrypting handle's query or EncryptionPolicy::search, \
                         joined to the rest of the filter by `and`; they compare the beacon and \
                         then the decrypted value"
                    ),
                });
            }
            return Err(Error::InvalidFilter {
                reason: format!(
                    "`{name}` is encrypted: its stored value is ciphertext under a key unique to \
                     each entity, so a comparison with it is meaningless; filter on plain \
                     properties and compare after decryption"
                ),
            });
        }
        Ok(())
    }

    fn encrypted_in(&self, filter: &Filter) -> Option<String> {
        match filter {
            Filter::Compare { property, .. } => {
                self.properties.contains(property).then(|| property.clone())
            }
            Filter::And(l, r) | Filter::Or(l, r) => {
                self.encrypted_in(l).or_else(|| self.encrypted_in(r))
            }
            Filter::Not(inner) => self.encrypted_in(inner),
            Filter::Raw(raw) => match raw.parsed() {
                Some(parsed) => self.encrypted_in(parsed),
                None => self.named_in_text(raw.as_str()),
            },
            // A filter form added later: judge its text.
            other => other
                .render()
                .ok()
                .and_then(|text| self.named_in_text(&text)),
        }
    }

    /// The first word outside quoted literals that is a listed property.
    fn named_in_text(&self, text: &str) -> Option<String> {
        let mut unquoted = String::with_capacity(text.len());
        let mut in_quotes = false;
        for c in text.chars() {
            if c == '\'' {
                in_quotes = !in_quotes;
                unquoted.push(' ');
            } else {
                unquoted.push(if in_quotes { ' ' } else { c });
            }
        }
        unquoted
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .find(|word| self.properties.contains(*word))
            .map(str::to_owned)
    }
}

impl EncryptionPolicyBuilder {
    /// Encrypts these properties (added to any listed before).
    #[must_use]
    pub fn properties<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.properties
            .extend(names.into_iter().map(|s| s.as_ref().to_owned()));
        self
    }

    /// Encrypts the properties `T` marks with `#[table(encrypt)]`
    /// ([`TableEntity::encrypted_properties`]), added to any listed before.
    #[must_use]
    pub fn properties_of<T: TableEntity>(self) -> Self {
        self.properties(T::encrypted_properties().iter().copied())
    }

    /// Also encrypts every property for which `select(PartitionKey, RowKey, name)` is true.
    #[must_use]
    pub fn select_with(
        mut self,
        select: impl Fn(&str, &str, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.select = Some(Arc::new(select));
        self
    }

    /// Stores these properties as written and covers them with the item MAC and signature
    /// ([`Action::SignOnly`]), added to any listed before: they stay readable and filterable,
    /// and a writer to the table who changes one, removes it, or adds one the item does not
    /// list makes the entity a decryption failure. Any EDM type can be signed.
    #[must_use]
    pub fn sign_only<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.sign_only
            .extend(names.into_iter().map(|s| s.as_ref().to_owned()));
        self
    }

    /// Classifies properties per entity with `classify(PartitionKey, RowKey, name)`: `Some`
    /// action, or `None` to leave the property to the lists and the default. Where a list
    /// and the function disagree, the more protective action wins.
    #[must_use]
    pub fn classify_with(
        mut self,
        classify: impl Fn(&str, &str, &str) -> Option<Action> + Send + Sync + 'static,
    ) -> Self {
        self.classify = Some(Arc::new(classify));
        self
    }

    /// The action of a property nothing classifies: [`Action::Plain`] (the default) or
    /// [`Action::SignOnly`], to sign every property not listed otherwise — then a writer to
    /// the table can change nothing undetected but the properties listed as
    /// [`plain`](Self::plain). A policy that signs by default cannot name every property it
    /// protects, so projections through its encrypting table are refused (the table does not
    /// tell a projection from a full read).
    #[must_use]
    pub fn default_action(mut self, action: Action) -> Self {
        self.default_action = action;
        self
    }

    /// Stores these properties as written (added to any listed before): neither encrypted
    /// nor covered by the item MAC ([`Action::Plain`]). Listing them classifies them for
    /// [`strict`](Self::strict), and exempts them from a signing
    /// [`default_action`](Self::default_action).
    #[must_use]
    pub fn plain<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.plain
            .extend(names.into_iter().map(|s| s.as_ref().to_owned()));
        self
    }

    /// Requires every `Edm.String` property of an entity written to be classified: listed
    /// (encrypted, [`sign_only`](Self::sign_only) or [`plain`](Self::plain)) or classified by
    /// a function — the [`default_action`](Self::default_action) does not count. An
    /// unclassified one is refused ([`Error::Encode`] naming it) before the key is called, so
    /// that a name misspelled in the policy is an error, not a value stored in the clear.
    /// Applies to writes (and to the checks a bulk write makes before sending anything);
    /// reads are unchanged.
    #[must_use]
    pub fn strict(mut self) -> Self {
        self.strict = true;
        self
    }

    /// Reads find key-encryption keys through `resolver` (for keys rotated out). The writing
    /// key is always found, with or without a resolver. The resolver is asked only for key
    /// ids the policy allows: those it lists itself ([`KeyResolver::known_ids`], as a
    /// [`KeyRing`](crate::KeyRing) does) and those given to
    /// [`allow_key_ids`](Self::allow_key_ids) or
    /// [`allow_key_id_prefix`](Self::allow_key_id_prefix).
    #[must_use]
    pub fn resolver(mut self, resolver: Arc<dyn KeyResolver>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Allows stored entities to name these key ids: reads look them up with the resolver.
    /// A stored id the policy does not allow is a decryption failure
    /// ([`Cause::KeyNotAllowed`](crate::Cause::KeyNotAllowed)) without any resolver call, so
    /// that a writer to the table cannot make the resolver (a key store) fetch keys it names.
    /// The writing key's id, and a [`KeyRing`](crate::KeyRing) resolver's ids, are allowed
    /// without being listed.
    #[must_use]
    pub fn allow_key_ids<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.allowed_ids
            .extend(ids.into_iter().map(|s| s.as_ref().to_owned()));
        self
    }

    /// Allows every key id that starts with `prefix`, for a key store whose ids carry a
    /// version (`https://vault.example/keys/orders/` allows each version of the key
    /// `orders`). See [`allow_key_ids`](Self::allow_key_ids).
    #[must_use]
    pub fn allow_key_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.allowed_prefixes.push(prefix.into());
        self
    }

    /// Also reads entities in the legacy format of the former .NET, Java and Python clients
    /// (`_ClientEncryptionMetadata1`/`2`, AES-256-CBC), when the key id they store is one of
    /// `key_ids` (found like any other: the policy's own key, then the resolver). Without
    /// this, reading such an entity is a decryption failure saying the format is not read.
    ///
    /// The legacy format is **unauthenticated**: a writer to the table can alter its
    /// ciphertexts undetected as long as the padding and UTF-8 survive, so read it only to
    /// migrate (read, then replace), and name only the keys the former clients wrote with —
    /// never a key tablekit's formats 1 and 2 wrapped content keys with: their ciphertexts give
    /// away block-cipher outputs under those content keys, from which a legacy ciphertext of
    /// the attacker's choosing can be made. Every failure of a legacy entity is one error
    /// ([`Cause::Legacy`](crate::Cause::Legacy)), so that errors are no padding oracle.
    #[must_use]
    pub fn read_legacy_format<I, S>(mut self, key_ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.legacy_key_ids
            .get_or_insert_with(Vec::new)
            .extend(key_ids.into_iter().map(|s| s.as_ref().to_owned()));
        self
    }

    /// Signs every item written with `key`, and accepts on reads only items signed by it (or
    /// by a key given to [`trust_signer`](Self::trust_signer)). An entity without such a
    /// signature — unsigned, signed by another key, altered after signing, or in format
    /// version 1 or 2 — is a decryption failure
    /// ([`Cause::Signature`](crate::Cause::Signature)), checked before the key-encryption key
    /// is called.
    ///
    /// This is authenticity that does not rest on the key-encryption key: the item MAC only
    /// proves that the writer could wrap a content key under it — with an RSA key, anyone
    /// holding its public half can. With an [`Ed25519SigningKey`](crate::Ed25519SigningKey),
    /// only holders of its private key write entities the policy accepts, and readers verify
    /// with its public key alone; with an [`HmacSigningKey`](crate::HmacSigningKey), holders
    /// of the shared secret.
    #[must_use]
    pub fn signing_key(mut self, key: Arc<dyn SigningKey>) -> Self {
        self.signing_key = Some(key);
        self
    }

    /// Also accepts items signed by `key` on reads: a signing key rotated out, or the public
    /// half a reader verifies with
    /// ([`Ed25519SigningKey::verifying`](crate::Ed25519SigningKey::verifying)). Like
    /// [`signing_key`](Self::signing_key), it makes every read require a signature by a
    /// trusted key. A policy that trusts signers but has no signing key refuses writes (they
    /// could not be read back).
    #[must_use]
    pub fn trust_signer(mut self, key: Arc<dyn SigningKey>) -> Self {
        self.trusted_signers.push(key);
        self
    }

    /// Binds the logical table name `name` into every item written — its ciphertexts and its
    /// item MAC — and reads only items bound to that same name. An entity copied from a table
    /// whose policy binds another name (or none) is a decryption failure
    /// ([`Cause::TableBinding`](crate::Cause::TableBinding)), as is one in format version 1
    /// or 2, which bind none.
    ///
    /// For tables that share a key-encryption key: a table per tenant, per period, per
    /// region. The name is the application's, not necessarily the table's (so that a table
    /// can be renamed or restored elsewhere); it is not stored, only a flag saying that one is
    /// bound. Entities written without a binding are refused once it is on: re-write them
    /// with a policy that binds the name, reading them with one that does not.
    #[must_use]
    pub fn bind_table(mut self, name: impl Into<String>) -> Self {
        self.table_binding = Some(name.into());
        self
    }

    /// Caches the content keys reads unwrap ([`KeyCache`]): an entity whose wrapped key was
    /// unwrapped before (the same entity read again, or entities written with
    /// [`reuse_data_keys`](Self::reuse_data_keys)) costs no key call. Without it, every entity
    /// read calls the key-encryption key once.
    #[must_use]
    pub fn cache_content_keys(mut self, cache: KeyCache) -> Self {
        self.key_cache = Some(cache);
        self
    }

    /// Reuses one content key across the entities written ([`DataKeyReuse`]), for bulk
    /// loads: one `wrap` call per `max_uses` entities (or per `max_age`) instead of one per
    /// entity. Each entity keeps keys of its own, derived with a fresh salt; see
    /// [`DataKeyReuse`] for what the reuse gives away. With
    /// [`cache_content_keys`](Self::cache_content_keys) too, the keys it wraps are cached for
    /// reads.
    #[must_use]
    pub fn reuse_data_keys(mut self, reuse: DataKeyReuse) -> Self {
        self.data_keys = Some(reuse);
        self
    }

    /// Writes `beacon` beside its encrypted property: every entity written with the property
    /// also stores the beacon of its value in the plain property
    /// [`StandardBeacon::stored_name`] (`_Beacon_Email`), covered by the item MAC and
    /// signature like a sign-only property, and removed again when the entity is read.
    /// Equality filters on the property can then be sent as filters on the beacon
    /// ([`EncryptionPolicy::search`]). The property must be listed as encrypted
    /// ([`properties`](Self::properties) or `#[table(encrypt)]`).
    ///
    /// A beacon tells whoever reads the table which entities hold equal values, and how
    /// often each value occurs; see the crate documentation for what its length trades.
    #[must_use]
    pub fn beacon(mut self, beacon: StandardBeacon) -> Self {
        self.beacons.push(beacon);
        self
    }

    /// The policy.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a listed name that cannot name a property or is reserved
    /// for encryption metadata; [`Error::InvalidConfig`] when a name is in two of the lists
    /// (encrypted, signed only, plain), the default action is to encrypt, nothing is
    /// protected (no name, no function, a plain default), the key's id is empty or contains
    /// control characters,
    /// [`read_legacy_format`](Self::read_legacy_format) names no key id or an invalid one,
    /// two signing keys share an id but not an algorithm, the policy both requires
    /// signatures and reads the legacy format, the bound table name is empty, longer than
    /// 1 KiB or holds control characters, an allowed key id is invalid or a prefix empty, the
    /// resolver does not list its key ids and none are allowed, or a key cache or data-key
    /// reuse has a zero bound (or a reuse above [`MAX_DATA_KEY_USES`](crate::MAX_DATA_KEY_USES)),
    /// or a beacon is given for a property not listed as encrypted, or twice.
    pub fn build(self) -> Result<EncryptionPolicy> {
        check_key_id(self.kek.id())?;
        if let Some(ids) = &self.legacy_key_ids {
            if ids.is_empty() {
                return Err(Error::InvalidConfig {
                    part: "encryption policy".into(),
                    reason: "read_legacy_format names no key id".into(),
                });
            }
            ids.iter().try_for_each(|id| check_key_id(id))?;
        }
        if let Some(cache) = &self.key_cache {
            cache.check()?;
        }
        if let Some(reuse) = &self.data_keys {
            reuse.check()?;
        }
        let mut allowed_ids: BTreeSet<String> = BTreeSet::new();
        allowed_ids.insert(self.kek.id().to_owned());
        for id in &self.allowed_ids {
            check_key_id(id)?;
            allowed_ids.insert(id.clone());
        }
        allowed_ids.extend(self.legacy_key_ids.iter().flatten().cloned());
        if self.allowed_prefixes.iter().any(|p| p.is_empty()) {
            return Err(Error::InvalidConfig {
                part: "encryption policy".into(),
                reason: "an empty key id prefix would allow every key id".into(),
            });
        }
        if let Some(resolver) = &self.resolver {
            match resolver.known_ids() {
                Some(ids) => allowed_ids.extend(ids),
                None if self.allowed_ids.is_empty() && self.allowed_prefixes.is_empty() => {
                    return Err(Error::InvalidConfig {
                        part: "encryption policy".into(),
                        reason: "the resolver does not list its key ids: name the ids it may be \
                                 asked for with allow_key_ids or allow_key_id_prefix"
                            .into(),
                    });
                }
                None => {}
            }
        }
        if let Some(name) = &self.table_binding {
            if name.is_empty() || name.len() > 1024 || name.chars().any(char::is_control) {
                return Err(Error::InvalidConfig {
                    part: "encryption policy".into(),
                    reason: "the bound table name must be 1 to 1,024 bytes of text without \
                             control characters"
                        .into(),
                });
            }
        }
        let mut signers = BTreeMap::new();
        for key in self.signing_key.iter().chain(&self.trusted_signers) {
            check_key_id(key.id())?;
            if let Some(other) = signers.insert(key.id().to_owned(), Arc::clone(key)) {
                if other.algorithm() != key.algorithm() {
                    return Err(Error::InvalidConfig {
                        part: "encryption policy".into(),
                        reason: format!("two signing keys named {:?}", key.id()),
                    });
                }
            }
        }
        if !signers.is_empty() && self.legacy_key_ids.is_some() {
            return Err(Error::InvalidConfig {
                part: "encryption policy".into(),
                reason: "a policy that requires signatures cannot read the legacy format, which \
                         has none: migrate legacy entities with a policy of its own"
                    .into(),
            });
        }
        for name in self
            .properties
            .iter()
            .chain(&self.plain)
            .chain(&self.sign_only)
        {
            validate_property_name(name)?;
            check_not_reserved(name)?;
        }
        let lists = [
            ("encrypted", &self.properties),
            ("signed only", &self.sign_only),
            ("plain", &self.plain),
        ];
        for (i, (first, names)) in lists.iter().enumerate() {
            for (second, others) in &lists[i + 1..] {
                if let Some(name) = names.iter().find(|n| others.contains(n)) {
                    return Err(Error::InvalidConfig {
                        part: "encryption policy".into(),
                        reason: format!("`{name}` is listed both as {first} and as {second}"),
                    });
                }
            }
        }
        if self.default_action == Action::EncryptAndSign {
            return Err(Error::InvalidConfig {
                part: "encryption policy".into(),
                reason: "the default action can be Plain or SignOnly: only strings can be \
                         encrypted, so list them"
                    .into(),
            });
        }
        if self.properties.is_empty()
            && self.sign_only.is_empty()
            && self.select.is_none()
            && self.classify.is_none()
            && self.default_action == Action::Plain
        {
            return Err(Error::InvalidConfig {
                part: "encryption policy".into(),
                reason: "protects no property: list names or give a selection function".into(),
            });
        }
        let mut beacons = BTreeMap::new();
        for beacon in self.beacons {
            let property = beacon.property().to_owned();
            if !self.properties.contains(&property) {
                return Err(Error::InvalidConfig {
                    part: "encryption policy".into(),
                    reason: format!(
                        "a beacon for `{property}`, which the policy does not list as \
                         encrypted: a beacon stands for an encrypted property's value"
                    ),
                });
            }
            if beacons.insert(property.clone(), beacon).is_some() {
                return Err(Error::InvalidConfig {
                    part: "encryption policy".into(),
                    reason: format!("two beacons for `{property}`"),
                });
            }
        }
        Ok(EncryptionPolicy {
            kek: self.kek,
            resolver: self.resolver,
            properties: self.properties.into_iter().collect(),
            select: self.select,
            plain: self.plain.into_iter().collect(),
            sign_only: self.sign_only.into_iter().collect(),
            classify: self.classify,
            default_action: self.default_action,
            strict: self.strict,
            legacy_key_ids: self.legacy_key_ids.map(|ids| ids.into_iter().collect()),
            signing_key: self.signing_key,
            signers,
            table_binding: self.table_binding,
            allowed_ids,
            allowed_prefixes: self.allowed_prefixes,
            key_cache: self.key_cache,
            data_keys: self.data_keys,
            beacons,
        })
    }
}

/// Refuses the names of the encryption metadata properties, and those reserved for beacons, as
/// user properties.
pub(crate) fn check_not_reserved(name: &str) -> Result<()> {
    if is_beacon_name(name) {
        return Err(Error::InvalidName {
            kind: NameKind::Property,
            name: name.to_owned(),
            reason: format!(
                "names starting with {:?} are reserved for beacons",
                crate::BEACON_PREFIX
            ),
        });
    }
    if RESERVED_PROPERTIES.contains(&name) {
        return Err(Error::InvalidName {
            kind: NameKind::Property,
            name: name.to_owned(),
            reason: "reserved for encryption metadata".into(),
        });
    }
    Ok(())
}

impl fmt::Debug for EncryptionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptionPolicy")
            .field("key_id", &self.kek.id())
            .field("wrap_algorithm", &self.kek.algorithm())
            .field("properties", &self.properties)
            .field("select_with", &self.select.is_some())
            .field("sign_only", &self.sign_only)
            .field("plain", &self.plain)
            .field("classify_with", &self.classify.is_some())
            .field("default_action", &self.default_action)
            .field("strict", &self.strict)
            .field("resolver", &self.resolver.is_some())
            .field("legacy_key_ids", &self.legacy_key_ids)
            .field("signing_key", &self.signing_key.as_ref().map(|k| k.id()))
            .field("signers", &self.signers.keys().collect::<Vec<_>>())
            .field("table_binding", &self.table_binding)
            .field("allowed_ids", &self.allowed_ids)
            .field("allowed_prefixes", &self.allowed_prefixes)
            .field("key_cache", &self.key_cache)
            .field("data_keys", &self.data_keys)
            .field("beacons", &self.beacons.values().collect::<Vec<_>>())
            .finish()
    }
}

impl fmt::Debug for EncryptionPolicyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptionPolicyBuilder")
            .field("key_id", &self.kek.id())
            .field("properties", &self.properties)
            .field("select_with", &self.select.is_some())
            .finish_non_exhaustive()
    }
}
