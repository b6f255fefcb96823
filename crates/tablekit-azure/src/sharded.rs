//! [`ShardedAccount`] and [`ShardedTable`]: one logical table spread over several storage
//! accounts by a stable hash of the PartitionKey, so that a workload can use the throughput
//! of N accounts (each account has its own request budget, its own governor and its own
//! credentials).
//!
//! A partition lives in exactly one shard, so everything the service does per partition —
//! point reads, partition queries, entity group transactions — stays what it is on one
//! account. What spans partitions (a scan, a bulk write) fans out to the shards.
//!
//! Re-sharding is not supported; it is refused. Each shard's table holds one marker entity
//! (PartitionKey [`SHARD_MARKER_PARTITION`]) that records the hash version, the shard's index,
//! the shard count and the shard set's id. A handle checks every marker before its first
//! request, so a changed account list — another count, another order, another account — is
//! an error, never a silent misrouting.

use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::stream::{self, Stream, StreamExt as _};
use serde::de::DeserializeOwned;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::{
    AsEntity, ETag, Error, ErrorKind, IfMatch, IntoKeys, Keys, Properties, Result, Stored, Target,
};
use tokio::sync::OnceCell;

use crate::account::Account;
use crate::progress::Progress;
use crate::table::{BulkOptions, BulkReport, OperationOutcome, Query, Table, TransactionOutcome};

/// The version of the shard hash, [`shard_hash`]. Recorded in every shard marker; a future
/// hash would get a new version, and tables marked with this one would keep this hash.
pub const SHARD_HASH_VERSION: i32 = 1;

/// The PartitionKey of the marker entity in each shard's table. Reserved: writes to it are
/// refused before any request, and scans leave it out.
pub const SHARD_MARKER_PARTITION: &str = "~tablekit-shard";

/// The RowKey of the marker entity.
const MARKER_ROW: &str = "marker";

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The shard hash, version 1 ([`SHARD_HASH_VERSION`]): 64-bit FNV-1a over the UTF-8 bytes of
/// `partition_key`, then MurmurHash3's 64-bit finalizer (`fmix64`) — the same function as
/// the spread log's `stable_hash` in `tablekit-logtail`. FNV-1a alone mixes its last bytes
/// poorly, so sequential keys would crowd into few shards; the finalizer spreads every input
/// bit over every output bit. A partition's shard is `(hash × shard count) >> 64`
/// ([`ShardedAccount::shard_of`]), which gives each shard an equal share of the hash space.
///
/// This function never changes: data written by one release is found by every later one.
/// Tests pin its values (`shard_hash("a") = 0x82a2a958a9bece5b`).
pub fn shard_hash(partition_key: &str) -> u64 {
    let fnv = partition_key.bytes().fold(FNV_OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    });
    fmix64(fnv)
}

/// MurmurHash3's 64-bit finalizer.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The shard (`0..shards`) of a hash: `(hash × shards) >> 64`.
fn reduce(hash: u64, shards: usize) -> usize {
    let product = u128::from(hash) * shards as u128;
    // A u64 times a usize, shifted right by 64, is below the usize.
    usize::try_from(product >> 64).unwrap_or(0)
}

/// Several storage accounts used as one: partitions are spread over them by
/// [`shard_hash`] of the PartitionKey modulo the number of accounts.
///
/// The order of the accounts is part of the layout: account `i` is shard `i`. Keep the list
/// and its order fixed for the life of the data; a table created with one list refuses to be
/// used with another (see [`ShardedTable`]).
///
/// Each account keeps its own credentials (key, SAS or token), settings, [`Metrics`](crate::Metrics) and
/// throughput governor; nothing is shared between shards. Cheap to clone.
///
/// # Examples
/// ```no_run
/// use tablekit_azure::{Account, ShardedAccount};
///
/// # fn f(a: Account, b: Account) -> tablekit_core::Result<()> {
/// let shards = ShardedAccount::new(vec![a, b])?;
/// println!("Sales lives in shard {}", shards.shard_of("Sales"));
/// let orders = shards.table("Orders")?; // no request yet
/// # let _ = orders; Ok(()) }
/// ```
#[derive(Clone)]
pub struct ShardedAccount {
    shards: Arc<[Account]>,
    set_id: Arc<str>,
}

impl fmt::Debug for ShardedAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedAccount")
            .field(
                "shards",
                &self.shards.iter().map(Account::name).collect::<Vec<_>>(),
            )
            .field("set_id", &self.set_id)
            .finish()
    }
}

/// How a shard is identified: its Table endpoint, without a trailing slash.
fn identity(account: &Account) -> String {
    account
        .endpoints()
        .table
        .as_str()
        .trim_end_matches('/')
        .to_owned()
}

impl ShardedAccount {
    /// Uses `accounts` as shards 0, 1, … in the order given. Sends nothing.
    ///
    /// The shard set's id ([`ShardedAccount::set_id`]) is derived from the shard count and
    /// each account's Table endpoint, in order: the same list always gives the same id.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list, or for two accounts with the same Table
    /// endpoint (the same account twice would put two shards in one budget, and its markers
    /// would collide).
    pub fn new(accounts: Vec<Account>) -> Result<Self> {
        if accounts.is_empty() {
            return Err(Error::invalid_argument(
                "accounts",
                "a sharded account needs at least one account",
            ));
        }
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, account) in accounts.iter().enumerate() {
            if let Some(first) = seen.insert(identity(account), i) {
                return Err(Error::invalid_argument(
                    "accounts",
                    format!(
                        "accounts {first} and {i} are the same account ({}): each shard needs an account of its own",
                        identity(account)
                    ),
                ));
            }
        }
        let mut description = format!("v{SHARD_HASH_VERSION}\n{}", accounts.len());
        for account in &accounts {
            description.push('\n');
            description.push_str(&identity(account));
        }
        let set_id = format!("{:016x}", shard_hash(&description));
        Ok(Self {
            shards: accounts.into(),
            set_id: set_id.into(),
        })
    }

    /// The number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The accounts, by shard index.
    pub fn shards(&self) -> &[Account] {
        &self.shards
    }

    /// The id of this shard set (16 hex digits), written into every shard marker.
    pub fn set_id(&self) -> &str {
        &self.set_id
    }

    /// The shard that holds `partition_key`: `(`[`shard_hash`]`(partition_key) × shard_count)
    /// >> 64`. Stable across releases.
    pub fn shard_of(&self, partition_key: &str) -> usize {
        reduce(shard_hash(partition_key), self.shards.len())
    }

    /// The account that holds `partition_key`.
    pub fn account_for(&self, partition_key: &str) -> &Account {
        &self.shards[self.shard_of(partition_key)]
    }

    /// A handle on the table `name` in every shard. No request is sent; the shard markers
    /// are checked before the handle's first request (see [`ShardedTable`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] when `name` breaks the table naming rules.
    pub fn table(&self, name: &str) -> Result<ShardedTable> {
        let tables = self
            .shards
            .iter()
            .map(|account| account.table(name))
            .collect::<Result<Vec<_>>>()?;
        Ok(ShardedTable {
            account: self.clone(),
            tables: tables.into(),
            verified: Arc::new(OnceCell::new()),
        })
    }
}

/// One table spread over the shards of a [`ShardedAccount`]: a [`Table`] of the same name in
/// every shard, each entity in the shard of its PartitionKey.
///
/// **Shard markers.** [`ShardedTable::create_if_not_exists`] writes a marker entity into each
/// shard's table (PartitionKey [`SHARD_MARKER_PARTITION`]) recording the hash version, the
/// shard's index, the shard count and the set id. Before its first request, a handle reads
/// every shard's marker — N point reads, concurrently, once per handle and its clones — and
/// refuses to go on if any differs from what its account list says: a shard count that
/// changed, accounts reordered, an account replaced, a table created some other way. After
/// that check, operations send exactly what the [`Table`] operation they route to sends.
/// [`ShardedTable::verify`] runs the check at a time of the caller's choosing.
///
/// **What spans shards.** A single-entity operation, a partition query and a transaction go
/// to one shard. A scan and a bulk write fan out. A transaction covers one partition, hence
/// one shard: nothing is atomic across shards.
///
/// Cheap to clone.
#[derive(Clone)]
pub struct ShardedTable {
    account: ShardedAccount,
    tables: Arc<[Table]>,
    verified: Arc<OnceCell<()>>,
}

impl fmt::Debug for ShardedTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedTable")
            .field("name", &self.name())
            .field("account", &self.account)
            .field("verified", &self.verified.initialized())
            .finish()
    }
}

/// What one shard's table holds where the marker should be.
enum Found {
    /// The table does not exist in this shard.
    NoTable,
    /// The table exists without a marker.
    NoMarker,
    /// The table's marker.
    Marker(Marker),
}

/// A shard marker's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Marker {
    version: i32,
    index: i32,
    count: i32,
    set_id: String,
}

impl Marker {
    fn properties(&self) -> Properties {
        Properties::new()
            .with("HashVersion", self.version)
            .with("ShardIndex", self.index)
            .with("ShardCount", self.count)
            .with("ShardSet", self.set_id.as_str())
    }

    fn read(stored: &Stored<Properties>, target: &Target) -> Result<Self> {
        let corrupt = |reason: String| Error::Corrupt {
            target: target.clone(),
            reason,
        };
        let int = |name: &str| match stored.value.get_i32(name) {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(corrupt(format!("the shard marker has no {name}"))),
            Err(e) => Err(corrupt(format!("the shard marker's {name}: {e}"))),
        };
        Ok(Self {
            version: int("HashVersion")?,
            index: int("ShardIndex")?,
            count: int("ShardCount")?,
            set_id: stored
                .value
                .get_str("ShardSet")
                .ok()
                .flatten()
                .ok_or_else(|| corrupt("the shard marker has no ShardSet".into()))?
                .to_owned(),
        })
    }
}

fn marker_keys() -> Keys {
    Keys::new(SHARD_MARKER_PARTITION, MARKER_ROW).expect("the marker's keys are valid")
}

/// Refuses the reserved marker partition before any request.
fn check_partition(keys: &Keys) -> Result<()> {
    if keys.partition_key.as_str() == SHARD_MARKER_PARTITION {
        return Err(Error::invalid_argument(
            "PartitionKey",
            format!("{SHARD_MARKER_PARTITION:?} is reserved for the shard marker"),
        ));
    }
    Ok(())
}

/// `usize` → `i32` for marker fields; a shard count above `i32::MAX` cannot be built.
fn small(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl ShardedTable {
    /// The table's name (the same in every shard).
    pub fn name(&self) -> &str {
        self.tables[0].name()
    }

    /// The sharded account this table belongs to.
    pub fn account(&self) -> &ShardedAccount {
        &self.account
    }

    /// The table in each shard, by shard index. Requests made through these handles are not
    /// routed nor checked against the markers: use them to read one shard's data directly.
    pub fn shards(&self) -> &[Table] {
        &self.tables
    }

    /// The shard index of `partition_key` ([`ShardedAccount::shard_of`]).
    pub fn shard_of(&self, partition_key: &str) -> usize {
        self.account.shard_of(partition_key)
    }

    /// The table of the shard that holds `partition_key`. Requests made through it are not
    /// checked against the markers (see [`ShardedTable::verify`]).
    pub fn shard_for(&self, partition_key: &str) -> &Table {
        &self.tables[self.shard_of(partition_key)]
    }

    fn expected(&self, index: usize) -> Marker {
        Marker {
            version: SHARD_HASH_VERSION,
            index: small(index),
            count: small(self.tables.len()),
            set_id: self.account.set_id.to_string(),
        }
    }

    /// Reads shard `index`'s marker (1 point read).
    async fn found(&self, index: usize) -> Result<Found> {
        let table = &self.tables[index];
        match table.get::<Properties>(marker_keys()).await {
            Ok(Some(stored)) => Ok(Found::Marker(Marker::read(
                &stored,
                &Target::entity(table.name(), marker_keys()),
            )?)),
            Ok(None) => Ok(Found::NoMarker),
            Err(Error::NotFound { target }) if target.keys.is_none() => Ok(Found::NoTable),
            Err(e) => Err(e),
        }
    }

    /// Every shard's marker, read concurrently (N point reads).
    async fn found_all(&self) -> Result<Vec<Found>> {
        futures::future::join_all((0..self.tables.len()).map(|i| self.found(i)))
            .await
            .into_iter()
            .collect()
    }

    /// The error for shard `index`, whose marker is `found` where `expected` was due.
    fn mismatch(&self, index: usize, found: &Marker) -> Error {
        let expected = self.expected(index);
        let account = identity(self.tables[index].account());
        let reason = if found.version != expected.version {
            format!(
                "shard {index} ({account}) was marked with shard hash version {}, this release uses version {}",
                found.version, expected.version
            )
        } else if found.count != expected.count {
            format!(
                "table {} was created over {} shards and is now used over {}: re-sharding is not supported, and the data would be misrouted",
                self.name(),
                found.count,
                expected.count
            )
        } else {
            // The set id covers the order and each account, so a reorder lands here too.
            format!(
                "shard {index} ({account}) holds shard {} of {} of shard set {}, but this account list makes it shard {index} of set {}: the accounts were reordered or replaced",
                found.index, found.count, found.set_id, expected.set_id
            )
        };
        Error::InvalidConfig {
            part: "shards".into(),
            reason,
        }
    }

    /// Checks every shard's marker against this handle's account list, once per handle (its
    /// clones share the result); later calls return at once. Every routed operation runs it
    /// first, so calling it is only a way to choose when the check happens.
    ///
    /// Requests: N point reads (N = shard count), concurrently, the first time; none after
    /// it succeeded. A failed check is not remembered: the next call reads again.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the table exists in no shard. [`Error::InvalidConfig`] (part
    /// `shards`) when a shard's marker disagrees with the list — another shard count, another
    /// order, another account, another hash version — or a shard has no table or no marker
    /// (the set is incomplete: [`ShardedTable::create_if_not_exists`] completes it).
    /// [`Error::Corrupt`] when a marker cannot be read as one. Transport and service errors
    /// of the reads.
    pub async fn verify(&self) -> Result<()> {
        self.verified
            .get_or_try_init(|| async {
                let found = self.found_all().await?;
                if found.iter().all(|f| matches!(f, Found::NoTable)) {
                    return Err(Error::NotFound {
                        target: Target::table(self.name()),
                    });
                }
                for (index, found) in found.iter().enumerate() {
                    let account = identity(self.tables[index].account());
                    match found {
                        Found::Marker(m) if *m == self.expected(index) => {}
                        Found::Marker(m) => return Err(self.mismatch(index, m)),
                        Found::NoTable => {
                            return Err(Error::InvalidConfig {
                                part: "shards".into(),
                                reason: format!(
                                    "shard {index} ({account}) has no table {}: the shard set is incomplete (create_if_not_exists completes it)",
                                    self.name()
                                ),
                            });
                        }
                        Found::NoMarker => {
                            return Err(Error::InvalidConfig {
                                part: "shards".into(),
                                reason: format!(
                                    "table {} in shard {index} ({account}) has no shard marker: it was not created as a sharded table",
                                    self.name()
                                ),
                            });
                        }
                    }
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// Creates the table in every shard and marks each shard. Returns whether anything was
    /// created or marked (`false`: the sharded table existed, every marker in place).
    ///
    /// Idempotent, so it also completes a set an interrupted call left half-made, and two
    /// processes may run it at once. A shard's table that exists without a marker is marked
    /// only if it is empty: entities written there before could belong to other shards.
    ///
    /// Requests: N marker reads first (nothing is created if one of them disagrees), then
    /// per shard: 1 create for a missing table, 1 query (`$top=1`) for an existing table
    /// without a marker, and 1 insert per marker written (plus 1 read when another process
    /// wrote it first). For a new table: 3N.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] (part `shards`) when a shard's marker disagrees with the
    /// account list (see [`ShardedTable::verify`]) or a table without a marker holds
    /// entities; nothing is created then. Transport and service errors; a call that fails
    /// part way leaves some shards created, which the next call completes.
    pub async fn create_if_not_exists(&self) -> Result<bool> {
        let found = self.found_all().await?;
        for (index, f) in found.iter().enumerate() {
            if let Found::Marker(m) = f {
                if *m != self.expected(index) {
                    return Err(self.mismatch(index, m));
                }
            }
        }
        let made = futures::future::join_all(
            found
                .into_iter()
                .enumerate()
                .map(|(index, found)| self.complete(index, found)),
        )
        .await
        .into_iter()
        .collect::<Result<Vec<bool>>>()?;
        // Every marker is now known to match.
        let _ = self.verified.set(());
        Ok(made.into_iter().any(|m| m))
    }

    /// Makes shard `index` hold its table and its marker. Returns whether it changed it.
    async fn complete(&self, index: usize, found: Found) -> Result<bool> {
        let table = &self.tables[index];
        match found {
            Found::Marker(_) => return Ok(false),
            Found::NoTable => {
                table.create_if_not_exists().await?;
            }
            Found::NoMarker => {
                let any = table
                    .query::<Properties>()
                    .allow_scan()
                    .with_read_ahead(false)
                    .first()
                    .await?;
                if let Some(entity) = any {
                    return Err(Error::InvalidConfig {
                        part: "shards".into(),
                        reason: format!(
                            "table {} in shard {index} ({}) holds entities (e.g. {}) but no shard marker: its data was not placed by this shard set",
                            self.name(),
                            identity(table.account()),
                            entity.keys
                        ),
                    });
                }
            }
        }
        let marker = tablekit_core::Entity::new(marker_keys(), self.expected(index).properties());
        match table.insert(&marker).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => match self.found(index).await? {
                Found::Marker(m) if m == self.expected(index) => Ok(false),
                Found::Marker(m) => Err(self.mismatch(index, &m)),
                _ => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// Creates the sharded table: [`ShardedTable::create_if_not_exists`], failing if it
    /// existed already.
    ///
    /// Requests: as [`ShardedTable::create_if_not_exists`].
    ///
    /// # Errors
    /// [`Error::AlreadyExists`] when every shard already had its table and marker; otherwise
    /// as [`ShardedTable::create_if_not_exists`].
    pub async fn create(&self) -> Result<()> {
        if self.create_if_not_exists().await? {
            Ok(())
        } else {
            Err(Error::AlreadyExists {
                target: Target::table(self.name()),
            })
        }
    }

    /// Deletes the table, with its marker, in every shard where it exists.
    ///
    /// Requests: N marker reads, then 1 delete per shard (concurrently).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] (part `shards`) when a shard's marker names another shard
    /// set, count or order: nothing is deleted then (delete such a shard's table through
    /// [`ShardedTable::shards`]). [`Error::NotFound`] when the table exists in no shard.
    /// Transport and service errors.
    pub async fn delete_table(&self) -> Result<()> {
        let found = self.found_all().await?;
        for (index, f) in found.iter().enumerate() {
            if let Found::Marker(m) = f {
                if *m != self.expected(index) {
                    return Err(self.mismatch(index, m));
                }
            }
        }
        let existed = futures::future::join_all(
            self.tables
                .iter()
                .map(|table| async move { table.delete_table_if_exists().await }),
        )
        .await
        .into_iter()
        .collect::<Result<Vec<bool>>>()?;
        if existed.iter().any(|e| *e) {
            Ok(())
        } else {
            Err(Error::NotFound {
                target: Target::table(self.name()),
            })
        }
    }

    /// The shard table for `keys`, after the marker check and the reserved-partition check.
    async fn route(&self, keys: &Keys) -> Result<&Table> {
        check_partition(keys)?;
        self.verify().await?;
        Ok(self.shard_for(keys.partition_key.as_str()))
    }

    /// Reads one entity from its shard ([`Table::get`]).
    ///
    /// Requests: 1 (plus the first-use marker check). Consistency: strong.
    ///
    /// # Errors
    /// As [`Table::get`]; [`Error::InvalidArgument`] for the reserved marker partition; the
    /// marker check's errors ([`ShardedTable::verify`]).
    pub async fn get<T: DeserializeOwned>(&self, keys: impl IntoKeys) -> Result<Option<Stored<T>>> {
        let keys = keys.into_keys()?;
        self.route(&keys).await?.get(keys).await
    }

    /// Inserts an entity into its shard ([`Table::insert`]).
    ///
    /// Requests: 1 (plus the first-use marker check).
    ///
    /// # Errors
    /// As [`Table::insert`]; [`Error::InvalidArgument`] for the reserved marker partition; the
    /// marker check's errors.
    pub async fn insert(&self, entity: &impl AsEntity) -> Result<ETag> {
        let keys = entity.entity_keys()?;
        self.route(&keys).await?.insert(entity).await
    }

    /// Replaces an entity in its shard ([`Table::replace`]).
    ///
    /// Requests: 1 (plus the first-use marker check).
    ///
    /// # Errors
    /// As [`Table::replace`]; as [`ShardedTable::insert`] before any request.
    pub async fn replace(&self, entity: &impl AsEntity, if_match: IfMatch) -> Result<ETag> {
        let keys = entity.entity_keys()?;
        self.route(&keys).await?.replace(entity, if_match).await
    }

    /// Merges into an entity in its shard ([`Table::merge`]).
    ///
    /// Requests: 1 (plus the first-use marker check).
    ///
    /// # Errors
    /// As [`Table::merge`]; as [`ShardedTable::insert`] before any request.
    pub async fn merge(&self, entity: &impl AsEntity, if_match: IfMatch) -> Result<ETag> {
        let keys = entity.entity_keys()?;
        self.route(&keys).await?.merge(entity, if_match).await
    }

    /// Inserts or replaces an entity in its shard ([`Table::upsert_replace`]).
    ///
    /// Requests: 1 (plus the first-use marker check). Idempotent.
    ///
    /// # Errors
    /// As [`Table::upsert_replace`]; as [`ShardedTable::insert`] before any request.
    pub async fn upsert_replace(&self, entity: &impl AsEntity) -> Result<ETag> {
        let keys = entity.entity_keys()?;
        self.route(&keys).await?.upsert_replace(entity).await
    }

    /// Inserts or merges an entity in its shard ([`Table::upsert_merge`]).
    ///
    /// Requests: 1 (plus the first-use marker check). Idempotent.
    ///
    /// # Errors
    /// As [`Table::upsert_merge`]; as [`ShardedTable::insert`] before any request.
    pub async fn upsert_merge(&self, entity: &impl AsEntity) -> Result<ETag> {
        let keys = entity.entity_keys()?;
        self.route(&keys).await?.upsert_merge(entity).await
    }

    /// Deletes an entity from its shard if `if_match` holds ([`Table::delete`]).
    ///
    /// Requests: 1 (plus the first-use marker check).
    ///
    /// # Errors
    /// As [`Table::delete`]; as [`ShardedTable::insert`] before any request.
    pub async fn delete(&self, keys: impl IntoKeys, if_match: IfMatch) -> Result<()> {
        let keys = keys.into_keys()?;
        self.route(&keys).await?.delete(keys, if_match).await
    }

    /// Deletes an entity from its shard whatever its ETag ([`Table::delete_if_exists`]).
    /// Returns whether it existed.
    ///
    /// Requests: 1 (plus the first-use marker check).
    ///
    /// # Errors
    /// As [`Table::delete_if_exists`]; as [`ShardedTable::insert`] before any request.
    pub async fn delete_if_exists(&self, keys: impl IntoKeys) -> Result<bool> {
        let keys = keys.into_keys()?;
        self.route(&keys).await?.delete_if_exists(keys).await
    }

    /// A query on one partition, on the shard that holds it: [`Table::query`] filtered to
    /// `partition_key`. Add filters, a projection or a page size to it as to any [`Query`].
    /// Async only for the first-use marker check; the query itself is sent when it is read.
    ///
    /// Requests: one per page, all to one shard (plus the first-use marker check).
    ///
    /// # Errors
    /// Key errors and [`Error::InvalidArgument`] for the reserved marker partition, before
    /// any request; the marker check's errors.
    pub async fn query_partition<T: DeserializeOwned + Send + 'static>(
        &self,
        partition_key: &str,
    ) -> Result<Query<T>> {
        let keys = Keys::new(partition_key, "")?;
        let table = self.route(&keys).await?;
        Ok(table.query::<T>().filter(Filter::partition(partition_key)))
    }

    /// A query over every shard (see [`ShardedScan`]). Nothing is sent until it is read.
    pub fn scan<T: DeserializeOwned + Send + 'static>(&self) -> ShardedScan<T> {
        ShardedScan {
            table: self.clone(),
            filter: None,
            select: None,
            page_size: None,
            allow_scan: false,
            _t: std::marker::PhantomData,
        }
    }

    /// An empty entity group transaction on this table ([`ShardedTransaction`]), sent to the
    /// shard of its partition when it is submitted. No request is sent until then.
    pub fn transaction(&self) -> ShardedTransaction {
        ShardedTransaction {
            table: self.clone(),
            steps: Vec::new(),
        }
    }

    /// Runs the plan's transactions, each on the shard of its partition, in plan order,
    /// stopping at the first that fails (as [`Table::submit`]).
    ///
    /// A transaction covers one partition, so it runs on one shard; an atomic plan is one
    /// transaction. Outcomes and [`Error::BatchFailed`] carry the caller's indices.
    ///
    /// Requests: one per transaction, each to its shard (plus the first-use marker check).
    /// Consistency: each transaction is all-or-nothing; a plan over several partitions is
    /// not, whether they share a shard or not.
    ///
    /// # Errors
    /// Before any request: [`Error::InvalidArgument`] for the reserved marker partition;
    /// [`Error::CrossPartitionTransaction`] for an atomic plan over partitions of different
    /// shards (an atomic plan over two partitions is refused when it is built); each shard's
    /// own limit checks, for every transaction before the first is sent. Then as
    /// [`Table::submit`].
    pub async fn submit(&self, plan: &BatchPlan) -> Result<Vec<TransactionOutcome>> {
        let groups: Vec<_> = plan.groups().collect();
        for (pk, ops) in &groups {
            if pk.as_str() == SHARD_MARKER_PARTITION {
                check_partition(ops[0].operation.keys())?;
            }
        }
        if plan.is_atomic() {
            let shards: Vec<usize> = groups
                .iter()
                .map(|(pk, _)| self.shard_of(pk.as_str()))
                .collect();
            if let Some(other) = shards.iter().position(|s| *s != shards[0]) {
                return Err(Error::CrossPartitionTransaction {
                    first: groups[0].1[0].index,
                    second: groups[other].1[0].index,
                    a: groups[0].0.to_string(),
                    b: groups[other].0.to_string(),
                });
            }
        }
        self.verify().await?;
        // Each partition's operations as a plan of their own, with the caller's indices.
        let mut parts = Vec::with_capacity(groups.len());
        for (pk, ops) in &groups {
            let table = self.shard_for(pk.as_str());
            let sub = if plan.is_atomic() {
                BatchPlan::atomic(ops.iter().map(|p| p.operation.clone()))?
            } else {
                BatchPlan::best_effort(ops.iter().map(|p| p.operation.clone()))?
            };
            table.check_plan(&sub)?;
            let indices: Vec<usize> = ops.iter().map(|p| p.index).collect();
            parts.push((table, sub, indices));
        }
        let mut outcomes = Vec::new();
        for (table, sub, indices) in parts {
            match table.submit(&sub).await {
                Ok(done) => outcomes.extend(done.into_iter().map(|mut o| {
                    for i in &mut o.indices {
                        *i = indices[*i];
                    }
                    o
                })),
                Err(Error::BatchFailed { index, source }) => {
                    return Err(Error::BatchFailed {
                        index: indices.get(index).copied().unwrap_or(index),
                        source,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(outcomes)
    }

    /// Writes many operations over the shards: split by shard, each shard's part written by
    /// its [`Table::bulk_write`] with `options`, the shards concurrently. One report, in
    /// input order.
    ///
    /// `options` apply to each shard: [`BulkOptions::concurrency`] is per shard (each shard
    /// has its own account, connection pool and governor), so up to N × that many
    /// transactions are in flight. The progress callback sees the totals over every shard.
    ///
    /// Requests: the sum of each shard's [`Table::bulk_write`] requests (plus the first-use
    /// marker check); [`BulkReport::transactions`] and [`BulkReport::read_backs`] are summed.
    /// Consistency: each transaction is atomic (one partition, one shard); the bulk write is
    /// not.
    ///
    /// # Errors
    /// Before any request: [`Error::InvalidArgument`] for an empty list or the reserved marker
    /// partition, [`Error::DuplicateInTransaction`] for two operations on one entity, each
    /// shard's limit checks (Cosmos DB Table API limits), the marker check's errors.
    /// Per-operation failures are in the report.
    pub async fn bulk_write(
        &self,
        operations: Vec<Operation>,
        options: BulkOptions,
    ) -> Result<BulkReport> {
        let total = operations.len();
        if total == 0 {
            return Err(Error::invalid_argument(
                "operations",
                "a bulk write needs at least one operation",
            ));
        }
        let mut seen: HashMap<&Keys, usize> = HashMap::with_capacity(total);
        for (index, op) in operations.iter().enumerate() {
            check_partition(op.keys())?;
            if let Some(first) = seen.insert(op.keys(), index) {
                return Err(Error::DuplicateInTransaction {
                    keys: op.keys().clone(),
                    first,
                    second: index,
                });
            }
        }
        drop(seen);
        let n = self.tables.len();
        let mut parts: Vec<(Vec<usize>, Vec<Operation>)> =
            (0..n).map(|_| Default::default()).collect();
        for (index, op) in operations.into_iter().enumerate() {
            let shard = self.shard_of(op.keys().partition_key.as_str());
            parts[shard].0.push(index);
            parts[shard].1.push(op);
        }
        self.verify().await?;
        for (shard, (_, ops)) in parts.iter().enumerate() {
            if !ops.is_empty() {
                self.tables[shard].check_plan(&BatchPlan::best_effort(ops.iter().cloned())?)?;
            }
        }
        let shared = options
            .progress
            .clone()
            .map(|callback| (callback, Arc::new(Mutex::new(vec![Progress::default(); n]))));
        let runs = parts
            .into_iter()
            .enumerate()
            .filter(|(_, (indices, _))| !indices.is_empty())
            .map(|(shard, (indices, ops))| {
                let mut options = options.clone();
                if let Some((callback, totals)) = &shared {
                    let (callback, totals) = (Arc::clone(callback), Arc::clone(totals));
                    options.progress = Some(Arc::new(move |p: &Progress| {
                        let sum = {
                            let mut totals = totals.lock().unwrap_or_else(|e| e.into_inner());
                            totals[shard] = *p;
                            totals.iter().fold(
                                Progress {
                                    total: Some(total),
                                    ..Progress::default()
                                },
                                |mut s, p| {
                                    s.done += p.done;
                                    s.failed += p.failed;
                                    s.unknown += p.unknown;
                                    s.requests += p.requests;
                                    s
                                },
                            )
                        };
                        callback(&sum);
                    }));
                }
                let table = &self.tables[shard];
                async move { (shard, indices, table.bulk_write(ops, options).await) }
            });
        let mut outcomes: Vec<Option<OperationOutcome>> = (0..total).map(|_| None).collect();
        let (mut transactions, mut read_backs) = (0, 0);
        for (shard, indices, result) in futures::future::join_all(runs).await {
            match result {
                Ok(report) => {
                    transactions += report.transactions;
                    read_backs += report.read_backs;
                    for (i, outcome) in indices.into_iter().zip(report.outcomes) {
                        outcomes[i] = Some(outcome);
                    }
                }
                // Checked above, so not expected: the shard refused its part before sending.
                Err(e) => {
                    for i in indices {
                        outcomes[i] = Some(OperationOutcome::Failed(Error::invalid_argument(
                            "operations",
                            format!("shard {shard} refused its part before sending it: {e}"),
                        )));
                    }
                }
            }
        }
        Ok(BulkReport {
            outcomes: outcomes
                .into_iter()
                .map(|o| {
                    o.unwrap_or_else(|| {
                        OperationOutcome::Failed(Error::Transport {
                            message: "the operation was not sent".into(),
                            source: None,
                        })
                    })
                })
                .collect(),
            transactions,
            read_backs,
        })
    }
}

/// One entity group transaction on a [`ShardedTable`], built step by step as a
/// [`Transaction`](crate::Transaction) on a [`Table`]: the steps never fail, and
/// [`submit`](Self::submit) refuses the whole transaction before sending anything. Its
/// partition decides its shard; a transaction cannot span partitions, hence shards.
///
/// # Examples
/// ```no_run
/// use tablekit_core::{Entity, IfMatch, Properties};
///
/// # async fn f(orders: &tablekit_azure::ShardedTable) -> tablekit_core::Result<()> {
/// let refund = Entity::try_new("customer-042", "refund-7", Properties::new().with("Cents", -525))?;
/// orders
///     .transaction()
///     .insert(&refund)
///     .delete(("customer-042", "order-7"), IfMatch::Any)
///     .submit() // one request, to customer-042's shard
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "a transaction sends nothing until it is submitted"]
pub struct ShardedTransaction {
    table: ShardedTable,
    steps: Vec<Result<Operation>>,
}

impl fmt::Debug for ShardedTransaction {
    // Neither keys nor bodies, as a table's transaction.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedTransaction")
            .field("table", &self.table.name())
            .field("steps", &crate::table::transaction_step_kinds(&self.steps))
            .finish()
    }
}

impl ShardedTransaction {
    crate::table::transaction_steps!();

    /// Sends the transaction to the shard of its partition: every operation is applied, or
    /// none is.
    ///
    /// Requests: 1, to one shard (plus the first-use marker check), as
    /// [`Transaction::submit`](crate::Transaction::submit); none when it is refused before
    /// sending. Outcomes as [`Table::submit`].
    ///
    /// # Errors
    /// Before any request: [`Error::BatchFailed`] with the index of the first step that
    /// could not be encoded; [`Error::CrossPartitionTransaction`] for steps in two partitions
    /// (in one shard or in two); [`Error::DuplicateInTransaction`],
    /// [`Error::LimitExceeded`], [`Error::InvalidArgument`] for no steps or the reserved
    /// marker partition; the marker check's errors. Then as [`ShardedTable::submit`].
    pub async fn submit(self) -> Result<TransactionOutcome> {
        let Self { table, steps } = self;
        let plan = crate::table::transaction_plan(steps)?;
        table.submit(&plan).await?.pop().ok_or_else(|| {
            // An atomic plan is one transaction, so one outcome.
            Error::invalid_argument("steps", "the transaction produced no outcome")
        })
    }
}

/// A query over every shard of a [`ShardedTable`], built with [`ShardedTable::scan`]. The
/// marker entities are left out (a filter `PartitionKey ne '~tablekit-shard'` is added).
///
/// **Order:** the entities come in (PartitionKey, RowKey) order over the whole table, as
/// from one table: each shard is read in its own key order and the shards' streams are
/// merged (keys compared as strings). A filter that pins one partition
/// ([`Filter::partition`]) reads only that partition's shard.
///
/// Requests: one per page in every shard read — at least N for N shards, 1 for a filter
/// pinned to one partition — (plus the first-use marker check). Each shard's first page is
/// requested at once. Consistency: each page is consistent; nothing is a snapshot across
/// pages or shards.
pub struct ShardedScan<T> {
    table: ShardedTable,
    filter: Option<Filter>,
    select: Option<Vec<String>>,
    page_size: Option<usize>,
    allow_scan: bool,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for ShardedScan<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedScan")
            .field("table", &self.table.name())
            .field("filter", &self.filter.as_ref().map(Filter::render))
            .field("select", &self.select)
            .field("page_size", &self.page_size)
            .finish_non_exhaustive()
    }
}

type Entities<T> = Pin<Box<dyn Stream<Item = Result<Stored<T>>> + Send>>;

impl<T: DeserializeOwned + Send + 'static> ShardedScan<T> {
    /// Only entities matching `filter`; called again, the filters are combined with `and`
    /// (as [`Query::filter`]).
    #[must_use]
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filter = Some(match self.filter.take() {
            Some(earlier) => earlier.and(filter),
            None => filter,
        });
        self
    }

    /// Projection (`$select`), as [`Query::select`].
    #[must_use]
    pub fn select<I, S>(mut self, properties: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.select = Some(properties.into_iter().map(Into::into).collect());
        self
    }

    /// At most `n` entities per page in each shard (1 to 1,000), as [`Query::with_page_size`].
    #[must_use]
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = Some(n);
        self
    }

    /// Send each shard's query even if its account's [`ScanPolicy`](crate::ScanPolicy)
    /// would refuse its shape, as [`Query::allow_scan`].
    #[must_use]
    pub fn allow_scan(mut self) -> Self {
        self.allow_scan = true;
        self
    }

    /// The query sent to each shard read: every shard, or the one a pinned partition is in.
    fn queries(&self) -> Vec<Query<T>> {
        let pinned = self
            .filter
            .as_ref()
            .and_then(Filter::partition_key)
            .map(|pk| self.table.shard_of(pk));
        self.table
            .tables
            .iter()
            .enumerate()
            .filter(|(i, _)| pinned.is_none_or(|p| p == *i))
            .map(|(_, table)| {
                let mut query = table
                    .query::<T>()
                    .filter(Filter::ne("PartitionKey", SHARD_MARKER_PARTITION));
                if let Some(filter) = &self.filter {
                    query = query.filter(filter.clone());
                }
                if let Some(select) = &self.select {
                    query = query.select(select.iter().cloned());
                }
                if let Some(n) = self.page_size {
                    query = query.with_page_size(n);
                }
                if self.allow_scan {
                    query = query.allow_scan();
                }
                query
            })
            .collect()
    }

    /// The entities, in (PartitionKey, RowKey) order over every shard read. An error ends
    /// the stream after it is yielded.
    ///
    /// # Errors
    /// Each item: as [`Query::stream`], and the marker check's errors
    /// ([`ShardedTable::verify`]) first.
    pub fn stream(self) -> impl Stream<Item = Result<Stored<T>>> + Send + 'static {
        let table = self.table.clone();
        stream::once(async move { table.verify().await.map(|()| self) })
            .map(|checked| match checked {
                Ok(scan) => merged(
                    scan.queries()
                        .into_iter()
                        .map(|q| Box::pin(q.stream()) as Entities<T>)
                        .collect(),
                )
                .left_stream(),
                Err(e) => stream::once(async move { Err(e) }).right_stream(),
            })
            .flatten()
    }

    /// Every entity, in (PartitionKey, RowKey) order.
    ///
    /// # Errors
    /// As [`ShardedScan::stream`]: the first error.
    pub async fn collect(self) -> Result<Vec<Stored<T>>> {
        let mut out = Vec::new();
        let mut entities = std::pin::pin!(self.stream());
        while let Some(entity) = entities.next().await {
            out.push(entity?);
        }
        Ok(out)
    }
}

/// Merges streams each in key order into one in key order. The first error ends it.
fn merged<T: Send + 'static>(
    streams: Vec<Entities<T>>,
) -> impl Stream<Item = Result<Stored<T>>> + Send + 'static {
    struct State<T> {
        streams: Vec<Entities<T>>,
        heads: Vec<Option<Stored<T>>>,
        primed: bool,
        /// An error met while refilling a head, yielded after the entity taken before it.
        pending: Option<Error>,
        done: bool,
    }
    let state = State {
        heads: streams.iter().map(|_| None).collect(),
        streams,
        primed: false,
        pending: None,
        done: false,
    };
    stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        if let Some(e) = s.pending.take() {
            s.done = true;
            return Some((Err(e), s));
        }
        if !s.primed {
            s.primed = true;
            // Every shard's first page is asked for at once.
            let firsts = futures::future::join_all(s.streams.iter_mut().map(|st| st.next())).await;
            for (i, first) in firsts.into_iter().enumerate() {
                match first {
                    Some(Ok(entity)) => s.heads[i] = Some(entity),
                    Some(Err(e)) => {
                        s.done = true;
                        return Some((Err(e), s));
                    }
                    None => {}
                }
            }
        }
        let next = s
            .heads
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.as_ref().map(|h| (i, h)))
            .min_by(|(_, a), (_, b)| {
                (a.keys.partition_key.as_str(), a.keys.row_key.as_str())
                    .cmp(&(b.keys.partition_key.as_str(), b.keys.row_key.as_str()))
            })
            .map(|(i, _)| i)?;
        let entity = s.heads[next].take()?;
        match s.streams[next].next().await {
            Some(Ok(following)) => s.heads[next] = Some(following),
            Some(Err(e)) => s.pending = Some(e),
            None => {}
        }
        Some((Ok(entity), s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_hash_v1_never_changes() {
        // FNV-1a's published vectors, through fmix64; the same values as the spread log's
        // pinned ones. A change here moves data between shards.
        assert_eq!(shard_hash(""), 0xefd0_1f60_ba99_2926);
        assert_eq!(shard_hash("a"), 0x82a2_a958_a9be_ce5b);
        assert_eq!(shard_hash("foobar"), 0x2c22_1949_22d1_672b);
        assert_eq!(SHARD_HASH_VERSION, 1);
    }

    #[test]
    fn sequential_keys_spread_evenly_over_four_shards() {
        let mut counts = [0u32; 4];
        for i in 0..8_000 {
            counts[reduce(shard_hash(&format!("customer-{i}")), 4)] += 1;
        }
        assert!(
            counts.iter().all(|n| (1_800..=2_200).contains(n)),
            "uneven shards: {counts:?}"
        );
        assert_eq!(reduce(u64::MAX, 4), 3);
        assert_eq!(reduce(0, 4), 0);
        assert_eq!(reduce(u64::MAX, 1), 0);
    }
}
