//! The token buckets behind a [`super::Throttle`]: one per partition and one for the account,
//! refilled continuously, with the debt a charge beyond their tokens leaves.

use std::collections::HashMap;
use std::time::Instant;

use super::cost::Cost;
use super::throttle::{ThrottleModel, ThrottleStats};

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

/// The buckets of one [`ThrottleModel`] and what they admitted. Every method takes the
/// instant it acts at, so tests drive the clock.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) model: ThrottleModel,
    account: Bucket,
    partitions: HashMap<String, Bucket>,
    pub(crate) stats: ThrottleStats,
    /// `(instant, entities)` of every charge, in time order.
    pub(crate) log: Vec<(Instant, u64)>,
}

impl State {
    pub(crate) fn new(model: ThrottleModel, now: Instant) -> Self {
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

    /// New rates from `now` on, as a service that scaled: every bucket is first refilled at
    /// the old rate up to `now`, then keeps what it holds up to its new depth (a debt stays).
    pub(crate) fn set_rates(&mut self, per_partition: f64, per_account: f64, now: Instant) {
        let old = self.model;
        self.account
            .refill(old.per_account, old.account_depth(), now);
        for bucket in self.partitions.values_mut() {
            bucket.refill(old.per_partition, old.partition_depth(), now);
        }
        // The next refill caps each bucket at its new depth.
        self.model.per_partition = per_partition;
        self.model.per_account = per_account;
    }

    /// Fills every bucket, as after a long idle period.
    pub(crate) fn refill(&mut self, now: Instant) {
        self.account = Bucket::full(self.model.account_depth(), now);
        self.partitions.clear();
    }

    pub(crate) fn admit(&mut self, cost: &Cost, now: Instant) -> Result<(), Refusal> {
        self.check(cost, now)?;
        self.stats.admitted_requests += 1;
        self.charge(cost, now);
        Ok(())
    }

    pub(crate) fn admit_query(
        &mut self,
        pinned: Option<&str>,
        now: Instant,
    ) -> Result<(), Refusal> {
        let probe = match pinned {
            Some(pk) => Cost::partition(pk, 1),
            None => Cost::account(1),
        };
        self.check(&probe, now)?;
        self.stats.admitted_requests += 1;
        Ok(())
    }

    pub(crate) fn charge(&mut self, cost: &Cost, now: Instant) {
        for (pk, n) in cost.partitions() {
            if let Some(bucket) = self.partition(pk, now) {
                bucket.tokens -= n as f64;
            }
            // The stats are by PartitionKey, summed over tables.
            *self
                .stats
                .admitted_by_partition
                .entry(super::cost::key_of(pk).to_owned())
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
    use std::time::Duration;

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
    fn new_rates_apply_from_the_instant_they_are_set() {
        let mut c = Clocked::new(10.0, 100.0, 1_000);
        assert_eq!(c.burst(0, "a", 100), 10);
        // Half a second at 10/s earned 5; from then on 20/s with a depth of 20.
        let now = c.at(500);
        c.state.set_rates(20.0, 100.0, now);
        assert_eq!(c.burst(500, "a", 100), 5);
        assert_eq!(c.burst(1_000, "a", 100), 10, "half a second at 20/s");
        assert_eq!(c.burst(5_000, "a", 100), 20, "the new depth");
        // Halved: a full bucket keeps no more than the new depth.
        let now = c.at(10_000);
        c.state.set_rates(5.0, 100.0, now);
        assert_eq!(c.burst(10_000, "a", 100), 5);
        assert_eq!(c.burst(11_000, "a", 100), 5);
        // The account's too.
        let now = c.at(20_000);
        c.state.set_rates(f64::INFINITY, 3.0, now);
        assert_eq!(c.burst(20_000, "b", 100), 3);
    }

    #[test]
    fn unlimited_buckets_never_refuse() {
        let mut c = Clocked::new(f64::INFINITY, f64::INFINITY, 1_000);
        assert_eq!(c.burst(0, "a", 10_000), 10_000);
        assert_eq!(c.admit(0, &Cost::account(1_000_000)), Ok(()));
    }
}
