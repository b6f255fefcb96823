//! [`ThroughputPolicy`]: the entity budgets an account keeps to, and how they adapt.

use std::time::Duration;

use tablekit_core::limits::{TARGET_ENTITIES_PER_SEC_ACCOUNT, TARGET_ENTITIES_PER_SEC_PARTITION};
use tablekit_core::{Error, Result};

/// The entity budgets an [`Account`](crate::Account) keeps its table requests within, so that
/// the service's scalability targets are used without being exceeded.
///
/// Every table request is charged, before it is sent, with its cost in entities — 1 for an
/// operation on one entity, 1 per operation for a transaction — to a token bucket of its
/// partition and one of the account; a query is admitted while its buckets hold a token and
/// is charged by the entities it returned. A request the buckets cannot pay for waits until
/// they can: that wait is latency, not an error, and is counted in
/// [`MetricsSnapshot::budget_wait`](crate::MetricsSnapshot::budget_wait).
///
/// With [`adaptive`](Self::adaptive) on, the budgets learn what the service serves, whatever
/// the targets say (Azure's are "up to"; a Cosmos DB account's throughput changes with
/// autoscale). A throttling answer (503 Server Busy, 500 Operation Timed Out, 429) cuts the
/// budget it names ([`tablekit_core::ThrottleScope`]: Azure's 503 says whether the account
/// or the partition's server is over its target). An answer that does not say is judged as
/// the last one that did, within 5 s; without one, it cuts the budget of the partition it
/// hit — or the account's, when that partition was neither near its budget, nor carrying
/// nearly all of the account's traffic, nor much busier than the other active partitions. The cut is to [`decrease`](Self::decrease) ×
/// the rate the service admitted over the last [`window`](Self::window) (for a partition, a
/// refusal can come back before the admitted requests sent with it: their answers within the
/// next `window` count too); the budget climbs back
/// to [`utilization`](Self::utilization) × that rate over [`recovery`](Self::recovery) and holds
/// there. Once requests have waited for it for [`probe_after`](Self::probe_after) (1.25× that
/// after a probe that found nothing more) and it admitted 50 requests since the cut (before
/// any cut: 25 requests of the whole account), it
/// probes: it grows by [`probe`](Self::probe) per second for as long as requests wait for it,
/// up to [`probe_limit`](Self::probe_limit) × the target, until the service refuses again.
/// That refusal finds more only when the service admitted over 1.25 × what the probe's start
/// and the burst it could have saved since it last refused explain (a probe spends that burst
/// first); otherwise the budget returns to where the probe started. The partitions of a table probe one at a time, and one never cut takes the rate a cut of
/// another partition of its table set when that is higher (the service's per-partition
/// target is the same for all of them). So a
/// budget configured too high comes down within a few refusals, one configured too low (or a
/// service that scaled up) is found by probing, and a probe that finds nothing new costs the
/// requests in flight when the service starts refusing (one to a few). A `Retry-After` or
/// `x-ms-retry-after-ms` hint also holds back the partition's (or the account's) next requests
/// for that long.
///
/// The default is Azure Table storage's documented targets: 2,000 entities/s per partition
/// and 20,000 per account, of which [`utilization`](Self::utilization) (95 %) is used.
/// [`ThroughputPolicy::unlimited`] turns governance off: requests are sent as they come.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ThroughputPolicy {
    /// Entities per second one partition serves. `f64::INFINITY`: no partition budget.
    pub per_partition: f64,
    /// Entities per second the account serves. `f64::INFINITY`: no account budget.
    pub per_account: f64,
    /// Fraction of the targets the client admits (0–1], leaving room for the difference
    /// between when the client charges a request and when the service counts it. Default
    /// 0.95.
    pub utilization: f64,
    /// Depth of each bucket, as seconds of its rate: how much a burst after an idle period
    /// may send at once. Default 1 s. A request costing more than a full bucket is sent when
    /// the bucket is full, putting it into debt (as the service serves a 100-operation
    /// transaction).
    pub burst: Duration,
    /// Adapt the budgets to throttling answers (see the type's documentation). Default on.
    pub adaptive: bool,
    /// Fraction of the rate the service admitted that a throttling answer cuts a budget to
    /// (of the budget's own rate when nothing was admitted). Default 0.7.
    pub decrease: f64,
    /// Time a cut budget takes to climb back linearly to `utilization` × the rate the service
    /// admitted. Default 2 s.
    pub recovery: Duration,
    /// Time requests must have waited for a budget, after it climbed back, before it probes
    /// above the rate the service admitted (or, before any throttling answer, above the
    /// target). 1.25 × this after a probe that found nothing more, and back to this when a cut
    /// finds the service's rate moved. Default 4 s.
    pub probe_after: Duration,
    /// Growth per second of a probing budget (compounded), while requests wait for it.
    /// Default 0.4. 0: never grow above what the service admitted or the target.
    pub probe: f64,
    /// Highest multiple of its target a budget probes up to. Default 4. 1: never above the
    /// target.
    pub probe_limit: f64,
    /// The lowest fraction of its target a budget is cut to. Default 0.05.
    pub floor: f64,
    /// Width of the sliding window the rate meter averages over. Default 1 s.
    pub window: Duration,
    /// Fraction of a target at which the meter logs that a partition or the account runs
    /// close to it (`tracing`, target `tablekit`). Default 0.8.
    pub warn_at: f64,
}

impl Default for ThroughputPolicy {
    /// Azure Table storage's scalability targets.
    fn default() -> Self {
        Self {
            per_partition: f64::from(TARGET_ENTITIES_PER_SEC_PARTITION),
            per_account: f64::from(TARGET_ENTITIES_PER_SEC_ACCOUNT),
            utilization: 0.95,
            burst: Duration::from_secs(1),
            adaptive: true,
            decrease: 0.7,
            recovery: Duration::from_secs(2),
            probe_after: Duration::from_secs(4),
            probe: 0.4,
            probe_limit: 4.0,
            floor: 0.05,
            window: Duration::from_secs(1),
            warn_at: 0.8,
        }
    }
}

impl ThroughputPolicy {
    /// No governance: no budgets, no adaptation, no waiting. The rate meter still counts.
    pub fn unlimited() -> Self {
        Self {
            per_partition: f64::INFINITY,
            per_account: f64::INFINITY,
            adaptive: false,
            ..Self::default()
        }
    }

    /// The Cosmos DB Table API: throughput is provisioned per account (request units), not
    /// fixed per partition, so there is no static budget; the budgets are learned from its
    /// 429 answers (the first one sets a budget from the rate the service admitted until
    /// then, see the type's documentation) and honour its `x-ms-retry-after-ms` hints.
    pub fn cosmos() -> Self {
        Self {
            per_partition: f64::INFINITY,
            per_account: f64::INFINITY,
            ..Self::default()
        }
    }

    /// Sets both targets (entities per second).
    #[must_use]
    pub fn with_targets(mut self, per_partition: f64, per_account: f64) -> Self {
        self.per_partition = per_partition;
        self.per_account = per_account;
        self
    }

    /// Sets [`utilization`](Self::utilization).
    #[must_use]
    pub fn with_utilization(mut self, fraction: f64) -> Self {
        self.utilization = fraction;
        self
    }

    /// Sets [`burst`](Self::burst).
    #[must_use]
    pub fn with_burst(mut self, burst: Duration) -> Self {
        self.burst = burst;
        self
    }

    /// Sets [`adaptive`](Self::adaptive).
    #[must_use]
    pub fn with_adaptive(mut self, adaptive: bool) -> Self {
        self.adaptive = adaptive;
        self
    }

    /// Sets [`decrease`](Self::decrease).
    #[must_use]
    pub fn with_decrease(mut self, decrease: f64) -> Self {
        self.decrease = decrease;
        self
    }

    /// Sets [`recovery`](Self::recovery).
    #[must_use]
    pub fn with_recovery(mut self, recovery: Duration) -> Self {
        self.recovery = recovery;
        self
    }

    /// Sets [`probe_after`](Self::probe_after).
    #[must_use]
    pub fn with_probe_after(mut self, probe_after: Duration) -> Self {
        self.probe_after = probe_after;
        self
    }

    /// Sets [`probe`](Self::probe).
    #[must_use]
    pub fn with_probe(mut self, probe: f64) -> Self {
        self.probe = probe;
        self
    }

    /// Sets [`probe_limit`](Self::probe_limit).
    #[must_use]
    pub fn with_probe_limit(mut self, probe_limit: f64) -> Self {
        self.probe_limit = probe_limit;
        self
    }

    /// Sets [`floor`](Self::floor).
    #[must_use]
    pub fn with_floor(mut self, floor: f64) -> Self {
        self.floor = floor;
        self
    }

    /// Sets [`window`](Self::window).
    #[must_use]
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Sets [`warn_at`](Self::warn_at).
    #[must_use]
    pub fn with_warn_at(mut self, warn_at: f64) -> Self {
        self.warn_at = warn_at;
        self
    }

    /// Whether requests may wait for budget: a finite target, or adaptation that may set one.
    pub fn is_governed(&self) -> bool {
        self.adaptive || self.per_partition.is_finite() || self.per_account.is_finite()
    }

    /// Checks the values are in range.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the field and its range.
    pub fn validate(&self) -> Result<()> {
        let bad = |part: &str, reason: &str| {
            Err(Error::InvalidConfig {
                part: format!("throughput.{part}"),
                reason: reason.into(),
            })
        };
        for (name, rate) in [
            ("per_partition", self.per_partition),
            ("per_account", self.per_account),
        ] {
            if rate.is_nan() || rate <= 0.0 {
                return bad(name, "must be positive (f64::INFINITY for no budget)");
            }
        }
        if !(0.0..=1.0).contains(&self.utilization) || self.utilization == 0.0 {
            return bad("utilization", "must be in (0, 1]");
        }
        if self.burst.is_zero() {
            return bad("burst", "must be positive");
        }
        if !(0.0..1.0).contains(&self.decrease) || self.decrease == 0.0 {
            return bad("decrease", "must be in (0, 1)");
        }
        if !(0.0..=1.0).contains(&self.floor) || self.floor == 0.0 {
            return bad("floor", "must be in (0, 1]");
        }
        if self.recovery.is_zero() || self.window.is_zero() {
            return bad("recovery/window", "must be positive");
        }
        if !self.probe.is_finite() || self.probe < 0.0 {
            return bad("probe", "must be 0 or more");
        }
        if self.probe_limit.is_nan() || self.probe_limit < 1.0 {
            return bad("probe_limit", "must be at least 1");
        }
        if self.warn_at.is_nan() || self.warn_at <= 0.0 {
            return bad("warn_at", "must be positive");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_targets_and_unlimited_is_ungoverned() {
        let p = ThroughputPolicy::default();
        assert_eq!((p.per_partition, p.per_account), (2_000.0, 20_000.0));
        assert!(p.is_governed());
        p.validate().unwrap();
        let off = ThroughputPolicy::unlimited();
        assert!(!off.is_governed());
        off.validate().unwrap();
        assert!(ThroughputPolicy::cosmos().is_governed(), "adapts to 429s");
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        for (p, field) in [
            (
                ThroughputPolicy::default().with_targets(0.0, 1.0),
                "per_partition",
            ),
            (
                ThroughputPolicy::default().with_targets(1.0, f64::NAN),
                "per_account",
            ),
            (
                ThroughputPolicy::default().with_utilization(1.5),
                "utilization",
            ),
            (
                ThroughputPolicy::default().with_burst(Duration::ZERO),
                "burst",
            ),
            (
                ThroughputPolicy {
                    probe_limit: 0.5,
                    ..ThroughputPolicy::default()
                },
                "probe_limit",
            ),
            (
                ThroughputPolicy {
                    probe: -1.0,
                    ..ThroughputPolicy::default()
                },
                "probe",
            ),
        ] {
            match p.validate() {
                Err(Error::InvalidConfig { part, .. }) => assert!(part.ends_with(field), "{part}"),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
