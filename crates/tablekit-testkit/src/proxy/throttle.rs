//! A model of the Table service's scalability targets: a token bucket per partition and one per
//! account, refilled continuously, that refuses what exceeds them as the service does.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::buckets::{Refusal, State};
use super::cost::Cost;

/// How the proxy refuses a request its [`ThrottleModel`] has no budget for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ThrottleMode {
    /// Azure Table storage: `503 Server Busy` with error code `ServerBusy` and no retry hint;
    /// the message tells an account over its target from a partition over its own.
    #[default]
    ServerBusy,
    /// Azure Table storage with both of its throttling answers: as
    /// [`ThrottleMode::ServerBusy`], except that a partition's refusals alternate between
    /// `503 ServerBusy` and `500 Internal Server Error` with error code `OperationTimedOut`
    /// (the second, fourth, … refusal of a partition over its target). An account over its
    /// target is always answered `503 ServerBusy`.
    ServerBusyOrTimedOut,
    /// The Cosmos DB Table API: `429 Too Many Requests` with error code `TooManyRequests`,
    /// `x-ms-retry-after-ms` (milliseconds), `Retry-After` (whole seconds, rounded up) and
    /// `x-ms-request-charge` ([`ThrottleMode::THROTTLED_REQUEST_CHARGE`] request units).
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
///
/// Entities are counted in KiB units, as Azure states its targets for entities of 1 KiB: an
/// entity whose JSON is up to 1 KiB counts 1, each further KiB begun 1 more; a request that
/// carries no entity (a point read, a delete) counts 1.
///
/// The fields are public for reading; build a model from `Default` and the `with_*` setters.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
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

impl ThrottleMode {
    /// The request units a [`ThrottleMode::TooManyRequests`] refusal reports in
    /// `x-ms-request-charge`.
    pub const THROTTLED_REQUEST_CHARGE: f64 = super::synthetic::THROTTLED_REQUEST_CHARGE;
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
    /// Entities charged to each PartitionKey, summed over the tables that have it (each
    /// table's partition has a bucket of its own; requests whose partition is unknown are in
    /// [`ThrottleStats::admitted_entities`] only).
    pub admitted_by_partition: BTreeMap<String, u64>,
}

impl ThrottleStats {
    /// Entities charged to PartitionKey `pk`, in every table (0 if none).
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

    /// Changes the model's rates from now on, as a service that scaled down or up (a Cosmos DB
    /// account's autoscale, a partition moved to another server): each bucket keeps the tokens
    /// it earned at the old rate, up to its new depth (`rate × burst`). Every proxy sharing
    /// these buckets sees the new rates at once.
    ///
    /// # Panics
    /// If a rate is not positive (NaN, zero or negative); `f64::INFINITY` turns that bucket off.
    pub fn set_rates(&self, per_partition: f64, per_account: f64) {
        let mut state = self.lock();
        let model = ThrottleModel {
            per_partition,
            per_account,
            ..state.model
        };
        model.check();
        let now = Instant::now();
        state.set_rates(per_partition, per_account, now);
    }

    /// Fills every bucket, as after a long idle period.
    pub fn refill(&self) {
        self.lock().refill(Instant::now());
    }

    /// The answer to a request `refusal` refused, in the model's [`ThrottleMode`]. Partition
    /// refusals are numbered by their count so far, so alternating answers are deterministic.
    pub(crate) fn answer(&self, refusal: Refusal, head_only: bool, close: bool) -> Vec<u8> {
        let (mode, nth) = {
            let state = self.lock();
            (state.model.mode, state.stats.throttled_by_partition)
        };
        super::synthetic::throttled(mode, refusal, nth, head_only, close)
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

#[cfg(test)]
mod tests {
    use super::*;

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
