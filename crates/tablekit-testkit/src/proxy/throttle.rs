//! A model of the Table service's scalability targets: a token bucket per partition and one per
//! account, refilled continuously, that refuses what exceeds them as the service does.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::cost::Cost;

/// How the proxy refuses a request its [`ThrottleModel`] has no budget for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ThrottleMode {
    /// Azure Table storage: `503 Server Busy` with error code `ServerBusy` and no retry hint.
    #[default]
    ServerBusy,
    /// The Cosmos DB Table API: `429 Too Many Requests` with error code `TooManyRequests`,
    /// `x-ms-retry-after-ms` (milliseconds) and `Retry-After` (whole seconds, rounded up).
    TooManyRequests {
        /// The wait the response asks for.
        retry_after: Duration,
    },
}

/// The scalability targets a [`super::FaultProxy`] enforces: entities per second per partition
/// and per account, each a token bucket `burst` seconds deep.
///
/// `Default` is Azure's documented targets: 2,000 entities/s per partition, 20,000 per
/// account, one second of burst, refused with 503 `ServerBusy`. Azurite serves far less than
/// that, so tests scale the budgets down:
///
/// ```
/// use std::time::Duration;
/// use tablekit_testkit::{ThrottleMode, ThrottleModel};
///
/// let model = ThrottleModel::default()
///     .with_per_partition(200.0)
///     .with_per_account(2_000.0)
///     .with_burst(Duration::from_secs(2))
///     .with_mode(ThrottleMode::TooManyRequests { retry_after: Duration::from_millis(500) });
/// assert_eq!(model.partition_depth(), 400.0);
/// ```
///
/// A rate of `f64::INFINITY` turns that bucket off (for example, only an account budget).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleModel {
    /// Entities per second one partition serves.
    pub per_partition: f64,
    /// Entities per second the account (this endpoint, or every proxy sharing the
    /// [`Throttle`]) serves.
    pub per_account: f64,
    /// The depth of each bucket, as seconds of its rate: how much a burst after an idle period
    /// may use at once.
    pub burst: Duration,
    /// How refusals are answered.
    pub mode: ThrottleMode,
}

impl ThrottleModel {
    /// Azure's scalability target per partition: 2,000 entities per second.
    pub const AZURE_PER_PARTITION: f64 = 2_000.0;
    /// Azure's scalability target per storage account: 20,000 entities per second.
    pub const AZURE_PER_ACCOUNT: f64 = 20_000.0;

    /// Sets [`ThrottleModel::per_partition`].
    #[must_use]
    pub fn with_per_partition(mut self, entities_per_second: f64) -> Self {
        self.per_partition = entities_per_second;
        self
    }

    /// Sets [`ThrottleModel::per_account`].
    #[must_use]
    pub fn with_per_account(mut self, entities_per_second: f64) -> Self {
        self.per_account = entities_per_second;
        self
    }

    /// Sets [`ThrottleModel::burst`].
    #[must_use]
    pub fn with_burst(mut self, burst: Duration) -> Self {
        self.burst = burst;
        self
    }

    /// Sets [`ThrottleModel::mode`].
    #[must_use]
    pub fn with_mode(mut self, mode: ThrottleMode) -> Self {
        self.mode = mode;
        self
    }

    /// Tokens (entities) a full partition bucket holds: `per_partition × burst`.
    pub fn partition_depth(&self) -> f64 {
        self.per_partition * self.burst.as_secs_f64()
    }

    /// Tokens (entities) the full account bucket holds: `per_account × burst`.
    pub fn account_depth(&self) -> f64 {
        self.per_account * self.burst.as_secs_f64()
    }

    fn check(&self) {
        for (name, rate) in [
            ("per_partition", self.per_partition),
            ("per_account", self.per_account),
        ] {
            assert!(
                rate > 0.0,
                "ThrottleModel::{name} = {rate}: use a positive rate (f64::INFINITY for no limit)"
            );
        }
        assert!(
            !self.burst.is_zero(),
            "ThrottleModel::burst is zero: a bucket needs a depth (e.g. Duration::from_secs(1))"
        );
    }
}

impl Default for ThrottleModel {
    fn default() -> Self {
        Self {
            per_partition: Self::AZURE_PER_PARTITION,
            per_account: Self::AZURE_PER_ACCOUNT,
            burst: Duration::from_secs(1),
            mode: ThrottleMode::ServerBusy,
        }
    }
}

/// What a [`Throttle`] admitted and refused since it was created or its stats were reset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThrottleStats {
    /// Requests refused (answered 503 or 429 without being forwarded).
    pub throttled: u64,
    /// Refusals because a partition's bucket was short (whatever the account's).
    pub throttled_by_partition: u64,
    /// Refusals because the account's bucket was short while the partitions' were not.
    pub throttled_by_account: u64,
    /// Requests admitted and forwarded.
    pub admitted_requests: u64,
    /// Entities charged to the account: every admitted entity, queried entities included once
    /// their response arrived.
    pub admitted_entities: u64,
    /// Entities charged to each partition (requests whose partition is unknown are in
    /// [`ThrottleStats::admitted_entities`] only).
    pub admitted_by_partition: BTreeMap<String, u64>,
}

impl ThrottleStats {
    /// Entities charged to partition `pk` (0 if none).
    pub fn admitted_in(&self, pk: &str) -> u64 {
        self.admitted_by_partition.get(pk).copied().unwrap_or(0)
    }
}

/// The live buckets of a [`ThrottleModel`], shared by every proxy it is installed in.
///
/// [`super::FaultProxy::set_throttle`] returns one; passing a clone of it to another proxy's
/// `set_throttle` makes both draw on the same buckets, so the table, queue and blob proxies of
/// one account can share one account-wide budget. Cloning is cheap (a reference count).
#[derive(Clone)]
pub struct Throttle {
    state: Arc<Mutex<State>>,
}

impl Throttle {
    /// Buckets for `model`, all full.
    ///
    /// # Panics
    /// If a rate is not positive (NaN, zero or negative) or `burst` is zero.
    pub fn new(model: ThrottleModel) -> Self {
        model.check();
        Self {
            state: Arc::new(Mutex::new(State::new(model, Instant::now()))),
        }
    }

    /// The model these buckets follow.
    pub fn model(&self) -> ThrottleModel {
        self.lock().model
    }

    /// What was admitted and refused since creation or the last [`Throttle::reset_stats`].
    pub fn stats(&self) -> ThrottleStats {
        self.lock().stats.clone()
    }

    /// Entities admitted (charged to the account) at instants in `from..to`, for goodput over a
    /// window: take `Instant::now()` around the part of a run to measure. Queried entities are
    /// charged when their response arrives.
    pub fn admitted_between(&self, from: Instant, to: Instant) -> u64 {
        let state = self.lock();
        let log = &state.log;
        let start = log.partition_point(|&(at, _)| at < from);
        let end = log.partition_point(|&(at, _)| at < to);
        log.get(start..end)
            .unwrap_or_default()
            .iter()
            .map(|&(_, n)| n)
            .sum()
    }

    /// Sets the counters and the admission log back to zero; the buckets keep their levels.
    pub fn reset_stats(&self) {
        let mut state = self.lock();
        state.stats = ThrottleStats::default();
        state.log.clear();
    }

    /// Fills every bucket, as after a long idle period.
    pub fn refill(&self) {
        let mut state = self.lock();
        let now = Instant::now();
        let model = state.model;
        state.account = Bucket::full(model.account_depth(), now);
        state.partitions.clear();
    }

    pub(crate) fn mode(&self) -> ThrottleMode {
        self.lock().model.mode
    }

    /// Takes `cost` if every bucket it touches can give it; refuses it untouched otherwise.
    pub(crate) fn admit(&self, cost: &Cost) -> Result<(), Refusal> {
        let mut state = self.lock();
        // Read under the lock, so the admission log stays in time order.
        let now = Instant::now();
        state.admit(cost, now)
    }

    /// Admits a query if its partition (when known) and the account have a token left, taking
    /// nothing: the query is charged by [`Throttle::charge`] when its response arrives.
    pub(crate) fn admit_query(&self, pinned: Option<&str>) -> Result<(), Refusal> {
        let mut state = self.lock();
        let now = Instant::now();
        state.admit_query(pinned, now)
    }

    /// Charges `cost` whatever the buckets hold, which may put them into debt.
    pub(crate) fn charge(&self, cost: &Cost) {
        let mut state = self.lock();
        let now = Instant::now();
        state.charge(cost, now);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the buckets half-updated; keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl From<ThrottleModel> for Throttle {
    fn from(model: ThrottleModel) -> Self {
        Self::new(model)
    }
}

impl fmt::Debug for Throttle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Throttle")
            .field("model", &state.model)
            .field("stats", &state.stats)
            .finish_non_exhaustive()
    }
}

/// Which bucket refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Partition,
    Account,
}

/// One token bucket. `tokens` may be negative: a debt left by a charge larger than the bucket
/// held (a query's entities, a transaction larger than the depth).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn full(depth: f64, now: Instant) -> Self {
        Self {
            tokens: depth,
            last: now,
        }
    }

    /// Adds what `rate` earned since the last refill, up to `depth`.
    fn refill(&mut self, rate: f64, depth: f64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + rate * elapsed).min(depth);
        self.last = self.last.max(now);
    }

    /// Whether `cost` may be taken. A cost above the depth passes when the bucket is full, and
    /// leaves it in debt: otherwise a request larger than the bucket (a 100-operation
    /// transaction against a depth of 50) could never pass, while the service serves it and
    /// counts it.
    fn can_take(&self, cost: f64, depth: f64) -> bool {
        self.tokens >= cost.min(depth)
    }
}

#[derive(Debug)]
struct State {
    model: ThrottleModel,
    account: Bucket,
    partitions: HashMap<String, Bucket>,
    stats: ThrottleStats,
    /// `(instant, entities)` of every charge, in time order.
    log: Vec<(Instant, u64)>,
}

impl State {
    fn new(model: ThrottleModel, now: Instant) -> Self {
        Self {
            account: Bucket::full(model.account_depth(), now),
            model,
            partitions: HashMap::new(),
            stats: ThrottleStats::default(),
            log: Vec::new(),
        }
    }

    /// The partition bucket of `pk`, refilled to `now` (full when first seen). `None` when
    /// partitions are unlimited.
    fn partition(&mut self, pk: &str, now: Instant) -> Option<&mut Bucket> {
        let (rate, depth) = (self.model.per_partition, self.model.partition_depth());
        if rate.is_infinite() {
            return None;
        }
        let bucket = self
            .partitions
            .entry(pk.to_owned())
            .or_insert_with(|| Bucket::full(depth, now));
        bucket.refill(rate, depth, now);
        Some(bucket)
    }

    /// The account bucket refilled to `now`; `None` when the account is unlimited.
    fn account(&mut self, now: Instant) -> Option<&mut Bucket> {
        let (rate, depth) = (self.model.per_account, self.model.account_depth());
        if rate.is_infinite() {
            return None;
        }
        self.account.refill(rate, depth, now);
        Some(&mut self.account)
    }

    /// Whether every bucket `cost` touches can give its share; a refusal is counted.
    fn check(&mut self, cost: &Cost, now: Instant) -> Result<(), Refusal> {
        let depth = self.model.partition_depth();
        for (pk, n) in cost.partitions() {
            if let Some(bucket) = self.partition(pk, now) {
                if !bucket.can_take(n as f64, depth) {
                    return Err(self.refused(Refusal::Partition));
                }
            }
        }
        let depth = self.model.account_depth();
        if let Some(bucket) = self.account(now) {
            if !bucket.can_take(cost.total() as f64, depth) {
                return Err(self.refused(Refusal::Account));
            }
        }
        Ok(())
    }

    fn refused(&mut self, refusal: Refusal) -> Refusal {
        self.stats.throttled += 1;
        match refusal {
            Refusal::Partition => self.stats.throttled_by_partition += 1,
            Refusal::Account => self.stats.throttled_by_account += 1,
        }
        refusal
    }

    fn admit(&mut self, cost: &Cost, now: Instant) -> Result<(), Refusal> {
        self.check(cost, now)?;
        self.stats.admitted_requests += 1;
        self.charge(cost, now);
        Ok(())
    }

    fn admit_query(&mut self, pinned: Option<&str>, now: Instant) -> Result<(), Refusal> {
        let probe = match pinned {
            Some(pk) => Cost::partition(pk, 1),
            None => Cost::account(1),
        };
        self.check(&probe, now)?;
        self.stats.admitted_requests += 1;
        Ok(())
    }

    fn charge(&mut self, cost: &Cost, now: Instant) {
        for (pk, n) in cost.partitions() {
            if let Some(bucket) = self.partition(pk, now) {
                bucket.tokens -= n as f64;
            }
            *self
                .stats
                .admitted_by_partition
                .entry(pk.to_owned())
                .or_default() += n;
        }
        let total = cost.total();
        if let Some(bucket) = self.account(now) {
            bucket.tokens -= total as f64;
        }
        self.stats.admitted_entities += total;
        self.log.push((now, total));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state whose clock the test drives: `at(ms)` is the instant `ms` after creation.
    struct Clocked {
        state: State,
        start: Instant,
    }

    impl Clocked {
        fn new(per_partition: f64, per_account: f64, burst_ms: u64) -> Self {
            let model = ThrottleModel::default()
                .with_per_partition(per_partition)
                .with_per_account(per_account)
                .with_burst(Duration::from_millis(burst_ms));
            model.check();
            let start = Instant::now();
            Self {
                state: State::new(model, start),
                start,
            }
        }

        fn at(&self, ms: u64) -> Instant {
            self.start + Duration::from_millis(ms)
        }

        fn admit(&mut self, ms: u64, cost: &Cost) -> Result<(), Refusal> {
            let now = self.at(ms);
            self.state.admit(cost, now)
        }

        /// How many single-entity requests to `pk` at instant `ms` pass.
        fn burst(&mut self, ms: u64, pk: &str, n: u64) -> u64 {
            (0..n)
                .filter(|_| self.admit(ms, &Cost::partition(pk, 1)).is_ok())
                .count() as u64
        }
    }

    #[test]
    fn a_full_bucket_gives_its_depth_then_refills_at_its_rate() {
        let mut c = Clocked::new(10.0, f64::INFINITY, 2_000);
        assert_eq!(c.burst(0, "a", 100), 20, "depth = 10/s × 2 s");
        assert_eq!(c.burst(0, "a", 1), 0);
        assert_eq!(c.burst(500, "a", 100), 5, "half a second earns 5");
        assert_eq!(c.burst(600, "a", 100), 1);
        // A long pause refills to the depth, never beyond it.
        assert_eq!(c.burst(60_000, "a", 100), 20);
        let stats = &c.state.stats;
        assert_eq!(stats.admitted_in("a"), 46);
        assert_eq!((stats.admitted_requests, stats.admitted_entities), (46, 46));
        assert_eq!(stats.throttled, 401 - 46);
        assert_eq!(stats.throttled_by_partition, stats.throttled);
    }

    #[test]
    fn partitions_have_their_own_buckets_under_the_accounts() {
        let mut c = Clocked::new(10.0, 25.0, 1_000);
        assert_eq!(c.burst(0, "a", 50), 10);
        assert_eq!(c.burst(0, "b", 50), 10, "a's refusals took nothing from b");
        // 20 of the account's 25 are used: c is refused by the account after 5.
        assert_eq!(c.burst(0, "c", 50), 5);
        assert_eq!(c.admit(0, &Cost::account(1)), Err(Refusal::Account));
        let stats = &c.state.stats;
        assert_eq!(stats.throttled_by_partition, 80);
        assert_eq!(stats.throttled_by_account, 46);
        assert_eq!(stats.admitted_entities, 25);
        // A partition refusal takes nothing from the account: 1 s later both refilled fully.
        assert_eq!(c.burst(1_000, "a", 50), 10);
        assert_eq!(c.burst(1_000, "d", 50), 10);
        assert_eq!(c.burst(1_000, "e", 50), 5);
    }

    #[test]
    fn a_refused_request_takes_nothing_from_any_bucket() {
        let mut c = Clocked::new(5.0, 8.0, 1_000);
        assert_eq!(c.burst(0, "a", 5), 5);
        // Refused by a's partition: the account keeps its 3.
        assert_eq!(
            c.admit(0, &Cost::partition("a", 1)),
            Err(Refusal::Partition)
        );
        assert_eq!(c.burst(0, "b", 3), 3);
        // A two-partition transaction: b has 2 of the 3 it needs, so neither b nor c pays.
        let mut both = Cost::partition("c", 1);
        both.add(Some("b".into()), 3);
        assert_eq!(c.admit(0, &both), Err(Refusal::Partition));
        assert_eq!(c.state.partitions["c"].tokens, 5.0);
        assert_eq!(c.state.partitions["b"].tokens, 2.0);
        assert_eq!(c.state.stats.admitted_entities, 8);
    }

    #[test]
    fn a_cost_above_the_depth_passes_a_full_bucket_and_leaves_a_debt() {
        let mut c = Clocked::new(50.0, f64::INFINITY, 1_000);
        // Not full: refused outright.
        assert_eq!(c.burst(0, "a", 1), 1);
        assert_eq!(
            c.admit(0, &Cost::partition("a", 100)),
            Err(Refusal::Partition)
        );
        // Full (after a second): admitted, 50 in debt; 2 s later it is back to 0, so still
        // nothing passes, and a third second refills 50.
        assert_eq!(c.admit(1_000, &Cost::partition("a", 100)), Ok(()));
        assert_eq!(c.burst(1_000, "a", 1), 0);
        assert_eq!(c.burst(1_999, "a", 1), 0);
        assert_eq!(c.burst(2_020, "a", 1), 1);
        assert_eq!(c.burst(3_100, "a", 100), 50);
        assert_eq!(c.state.stats.admitted_in("a"), 152);
    }

    #[test]
    fn a_query_is_admitted_on_one_token_then_charged_its_entities_into_debt() {
        let mut c = Clocked::new(10.0, 100.0, 1_000);
        let (t0, t1) = (c.at(0), c.at(100));
        assert_eq!(c.state.admit_query(Some("q"), t0), Ok(()));
        // 30 entities came back: q is 20 in debt, the account has 70 left.
        c.state.charge(&Cost::partition("q", 30), t0);
        assert_eq!(c.burst(100, "q", 1), 0);
        assert_eq!(c.state.admit_query(Some("q"), t1), Err(Refusal::Partition));
        // An unpinned query draws on the account only.
        assert_eq!(c.state.admit_query(None, t1), Ok(()));
        assert_eq!(c.burst(2_000, "q", 1), 0, "-20 + 2 s × 10 = 0 < 1");
        assert_eq!(c.burst(2_200, "q", 1), 1);
        let stats = &c.state.stats;
        assert_eq!((stats.admitted_in("q"), stats.admitted_entities), (31, 31));
        assert_eq!(stats.admitted_requests, 3);
    }

    #[test]
    fn unlimited_buckets_never_refuse() {
        let mut c = Clocked::new(f64::INFINITY, f64::INFINITY, 1_000);
        assert_eq!(c.burst(0, "a", 10_000), 10_000);
        assert_eq!(c.admit(0, &Cost::account(1_000_000)), Ok(()));
    }

    #[test]
    fn admissions_are_logged_for_windows() {
        let throttle = Throttle::new(ThrottleModel::default());
        let before = Instant::now();
        throttle.admit(&Cost::partition("a", 3)).unwrap();
        let middle = Instant::now();
        throttle.charge(&Cost::account(4));
        let after = Instant::now();
        assert_eq!(throttle.admitted_between(before, after), 7);
        assert_eq!(throttle.admitted_between(middle, after), 4);
        assert_eq!(throttle.admitted_between(after, after), 0);
        throttle.reset_stats();
        assert_eq!(throttle.admitted_between(before, Instant::now()), 0);
        assert_eq!(throttle.stats(), ThrottleStats::default());
    }

    #[test]
    fn refill_fills_every_bucket_again() {
        let throttle = Throttle::new(
            ThrottleModel::default()
                .with_per_partition(1.0)
                .with_per_account(1.0)
                .with_burst(Duration::from_secs(2)),
        );
        let one = Cost::partition("a", 1);
        assert_eq!(throttle.admit(&one), Ok(()));
        assert_eq!(throttle.admit(&one), Ok(()));
        assert_eq!(throttle.admit(&one), Err(Refusal::Partition));
        assert_eq!(throttle.admit(&Cost::account(1)), Err(Refusal::Account));
        throttle.refill();
        assert_eq!(throttle.admit(&one), Ok(()));
        assert_eq!(throttle.admit(&Cost::account(1)), Ok(()));
        assert_eq!(throttle.stats().throttled, 2, "refilling keeps the stats");
    }

    #[test]
    fn invalid_models_are_refused_with_what_to_change() {
        for model in [
            ThrottleModel::default().with_per_partition(0.0),
            ThrottleModel::default().with_per_account(f64::NAN),
            ThrottleModel::default().with_per_account(-1.0),
            ThrottleModel::default().with_burst(Duration::ZERO),
        ] {
            let panic = std::panic::catch_unwind(|| Throttle::new(model)).unwrap_err();
            let message = match panic.downcast_ref::<&str>() {
                Some(text) => (*text).to_owned(),
                None => panic.downcast_ref::<String>().cloned().unwrap_or_default(),
            };
            assert!(message.starts_with("ThrottleModel::"), "{message}");
        }
        let model = ThrottleModel::default();
        assert_eq!(
            (model.partition_depth(), model.account_depth()),
            (2_000.0, 20_000.0)
        );
    }
}
