//! Fewer key-store calls: a cache of unwrapped content keys for reads, and one content key
//! reused across the entities of a bulk load for writes. Both opt in, both bounded.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tablekit_core::{Error, Result};
use tokio::sync::OnceCell;

use crate::key::{ContentKey, WrappedKey};

/// The most entities one content key may encrypt with [`DataKeyReuse`]: 2³². Each entity
/// draws a 128-bit salt from which its own keys are derived, so two of them share keys (and
/// AES-GCM nonces) with probability at most n² / 2¹²⁹ for n entities under one content key —
/// below 2⁻⁶⁵ at this bound.
pub const MAX_DATA_KEY_USES: u64 = 1 << 32;

/// A cache of unwrapped content keys, for reads: an entity whose stored key id, wrapping
/// algorithm and wrapped key equal those of one read before reuses the content key unwrapped
/// then, with no call to the key-encryption key. Opt in with
/// [`EncryptionPolicyBuilder::cache_content_keys`](crate::EncryptionPolicyBuilder::cache_content_keys).
///
/// Entities share a wrapped key when they were written with [`DataKeyReuse`], or when the
/// same entity is read again. An entry serves at most `max_uses` reads and lives at most
/// `max_age`: a key disabled in the key store keeps decrypting what was cached for up to
/// `max_age`. Concurrent reads of entities that share a wrapped key wait for one unwrap. The
/// cache holds at most `capacity` keys (the oldest is dropped first); the keys are wiped
/// when dropped. Clones of a policy share its cache.
///
/// ```
/// use std::time::Duration;
/// use tablekit_encryption::KeyCache;
/// let cache = KeyCache::new(Duration::from_secs(300), 10_000).with_capacity(1_000);
/// assert_eq!(cache.max_uses(), 10_000);
/// ```
#[derive(Clone)]
pub struct KeyCache {
    max_age: Duration,
    max_uses: u64,
    capacity: usize,
    entries: Arc<Mutex<HashMap<CacheKey, Arc<Entry>>>>,
}

/// What identifies a wrapped content key: key id, wrapping algorithm, wrapped bytes.
type CacheKey = (String, String, Vec<u8>);

struct Entry {
    key: OnceCell<Arc<ContentKey>>,
    created: Instant,
    uses: AtomicU64,
}

impl KeyCache {
    /// The default number of keys held.
    pub const DEFAULT_CAPACITY: usize = 1_000;

    /// A cache whose entries serve at most `max_uses` reads each and live at most `max_age`.
    pub fn new(max_age: Duration, max_uses: u64) -> Self {
        Self {
            max_age,
            max_uses,
            capacity: Self::DEFAULT_CAPACITY,
            entries: Arc::default(),
        }
    }

    /// Holds at most `capacity` keys.
    #[must_use]
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// How long an entry lives.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// How many reads an entry serves.
    pub fn max_uses(&self) -> u64 {
        self.max_uses
    }

    /// How many keys the cache holds now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the cache holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every cached key.
    pub fn clear(&self) {
        self.lock().clear();
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.max_uses == 0 || self.max_age.is_zero() || self.capacity == 0 {
            return Err(Error::InvalidConfig {
                part: "key cache".into(),
                reason: "max_uses, max_age and capacity must be above zero".into(),
            });
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, Arc<Entry>>> {
        // A panic while holding the lock leaves a map that is still consistent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The entry for `key`, fresh or new: an entry past its age or its uses is replaced.
    /// Counts one use.
    fn entry(&self, key: CacheKey) -> Arc<Entry> {
        let now = Instant::now();
        let mut entries = self.lock();
        let usable = |e: &Entry| {
            now.duration_since(e.created) < self.max_age
                && e.uses.load(Ordering::Relaxed) < self.max_uses
        };
        if let Some(entry) = entries.get(&key).filter(|e| usable(e)) {
            entry.uses.fetch_add(1, Ordering::Relaxed);
            return Arc::clone(entry);
        }
        entries.retain(|_, e| usable(e));
        if entries.len() >= self.capacity {
            if let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, e)| e.created)
                .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        let entry = Arc::new(Entry {
            key: OnceCell::new(),
            created: now,
            uses: AtomicU64::new(1),
        });
        entries.insert(key, Arc::clone(&entry));
        entry
    }

    /// The content key `wrapped` under `kid` unwraps to: cached, or from `unwrap`, which
    /// concurrent callers for the same wrapped key wait for rather than repeat. An error of
    /// `unwrap` is returned and not cached.
    pub(crate) async fn get_or_unwrap<F, Fut, E>(
        &self,
        kid: &str,
        wrapped: &WrappedKey,
        unwrap: F,
    ) -> std::result::Result<Arc<ContentKey>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<ContentKey, E>>,
    {
        let cache_key = (
            kid.to_owned(),
            wrapped.algorithm().to_owned(),
            wrapped.bytes().to_vec(),
        );
        let entry = self.entry(cache_key.clone());
        let result = entry
            .key
            .get_or_try_init(|| async { unwrap().await.map(Arc::new) })
            .await
            .cloned();
        if result.is_err() {
            // A wrapped key that does not unwrap (altered bytes) takes no room from the good
            // ones; the next read of it tries again.
            let mut entries = self.lock();
            if entries
                .get(&cache_key)
                .is_some_and(|e| Arc::ptr_eq(e, &entry) && e.key.get().is_none())
            {
                entries.remove(&cache_key);
            }
        }
        result
    }

    /// Caches a content key this process wrapped itself, so that reading back what was
    /// written calls no key.
    pub(crate) fn insert(&self, kid: &str, wrapped: &WrappedKey, key: Arc<ContentKey>) {
        let entry = self.entry((
            kid.to_owned(),
            wrapped.algorithm().to_owned(),
            wrapped.bytes().to_vec(),
        ));
        // The entry was just made (or holds this very key): setting fails only when set.
        let _ = entry.key.set(key);
        // Writing is not a read: the entry keeps its uses for reads.
        entry.uses.fetch_sub(1, Ordering::Relaxed);
    }
}

impl fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyCache")
            .field("max_age", &self.max_age)
            .field("max_uses", &self.max_uses)
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish()
    }
}

/// One content key for many entities written, for bulk loads: instead of a fresh content key
/// (and a key-store `wrap` call) per entity, a policy reuses one for up to `max_uses`
/// entities and `max_age`, then draws the next. Opt in with
/// [`EncryptionPolicyBuilder::reuse_data_keys`](crate::EncryptionPolicyBuilder::reuse_data_keys).
///
/// What stays: each entity still gets its own encryption and MAC keys, derived from the
/// content key with a fresh 128-bit salt, so no nonce repeats (the bound is
/// [`MAX_DATA_KEY_USES`]). What changes: whoever obtains one unwrapped content key reads
/// every entity written with it (up to `max_uses`), and a reader of the table sees which
/// entities share a content key (their wrapped keys are equal). Readers with a [`KeyCache`]
/// unwrap each shared key once. Concurrent writes wait for one wrap.
///
/// ```
/// use std::time::Duration;
/// use tablekit_encryption::DataKeyReuse;
/// let reuse = DataKeyReuse::new(Duration::from_secs(60), 1_000);
/// assert_eq!(reuse.max_uses(), 1_000);
/// ```
#[derive(Clone)]
pub struct DataKeyReuse {
    max_age: Duration,
    max_uses: u64,
    current: Arc<tokio::sync::Mutex<Option<DataKey>>>,
}

/// The content key being reused.
struct DataKey {
    kid: String,
    key: Arc<ContentKey>,
    wrapped: WrappedKey,
    created: Instant,
    uses: u64,
}

impl DataKeyReuse {
    /// Reuses a content key for at most `max_uses` entities (at most [`MAX_DATA_KEY_USES`])
    /// and at most `max_age`.
    pub fn new(max_age: Duration, max_uses: u64) -> Self {
        Self {
            max_age,
            max_uses,
            current: Arc::default(),
        }
    }

    /// How long a content key is reused.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// For how many entities a content key is reused.
    pub fn max_uses(&self) -> u64 {
        self.max_uses
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.max_uses == 0 || self.max_uses > MAX_DATA_KEY_USES || self.max_age.is_zero() {
            return Err(Error::InvalidConfig {
                part: "data key reuse".into(),
                reason: format!("max_uses must be 1 to {MAX_DATA_KEY_USES} and max_age above zero"),
            });
        }
        Ok(())
    }

    /// The content key for the next entity written under `kid`, and its wrapped form: the
    /// current one while it has uses and age left, else a new one from `wrap`. The second
    /// item is true when `wrap` was called.
    pub(crate) async fn next<F, Fut>(
        &self,
        kid: &str,
        wrap: F,
    ) -> Result<(Arc<ContentKey>, WrappedKey, bool)>
    where
        F: FnOnce(Arc<ContentKey>) -> Fut,
        Fut: Future<Output = Result<WrappedKey>>,
    {
        // Held across the wrap, so that concurrent writes wait for one wrap rather than make
        // their own.
        let mut current = self.current.lock().await;
        if let Some(data) = current.as_mut().filter(|d| {
            d.kid == kid && d.uses < self.max_uses && d.created.elapsed() < self.max_age
        }) {
            data.uses += 1;
            return Ok((Arc::clone(&data.key), data.wrapped.clone(), false));
        }
        let key = Arc::new(ContentKey::generate());
        let wrapped = wrap(Arc::clone(&key)).await?;
        *current = Some(DataKey {
            kid: kid.to_owned(),
            key: Arc::clone(&key),
            wrapped: wrapped.clone(),
            created: Instant::now(),
            uses: 1,
        });
        Ok((key, wrapped, true))
    }
}

impl fmt::Debug for DataKeyReuse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataKeyReuse")
            .field("max_age", &self.max_age)
            .field("max_uses", &self.max_uses)
            .finish_non_exhaustive()
    }
}
