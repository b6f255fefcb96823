//! One scope's budget (a partition's or the account's): a token bucket whose rate adapts —
//! multiplicative decrease on throttling, additive increase while none is seen — and a pause
//! the service can ask for. Pure: every method takes the current instant.

use std::time::{Duration, Instant};

use super::ThroughputPolicy;

#[derive(Debug, Clone)]
pub(super) struct Budget {
    /// The rate the budget grows back to: target × utilization (infinite for none).
    ceiling: f64,
    /// The rate at `since` (infinite until a throttling answer sets one).
    limit: f64,
    /// Additive increase, entities/s per second since `since`.
    step: f64,
    since: Instant,
    level: f64,
    refilled: Instant,
    paused_until: Option<Instant>,
    last_decrease: Option<Instant>,
}

impl Budget {
    pub(super) fn new(target: f64, policy: &ThroughputPolicy, now: Instant) -> Self {
        let ceiling = target * policy.utilization;
        Self {
            ceiling,
            limit: ceiling,
            step: 0.0,
            since: now,
            level: ceiling * policy.burst.as_secs_f64(),
            refilled: now,
            paused_until: None,
            last_decrease: None,
        }
    }

    /// Entities per second admitted at `now` (infinite: no budget).
    pub(super) fn rate(&self, now: Instant) -> f64 {
        if self.limit.is_infinite() {
            return f64::INFINITY;
        }
        let grown =
            self.limit + self.step * now.saturating_duration_since(self.since).as_secs_f64();
        grown.min(self.ceiling)
    }

    fn depth(&self, now: Instant, burst: Duration) -> f64 {
        self.rate(now) * burst.as_secs_f64()
    }

    fn refill(&mut self, now: Instant, burst: Duration) {
        let rate = self.rate(now);
        if rate.is_finite() {
            let dt = now.saturating_duration_since(self.refilled).as_secs_f64();
            self.level = (self.level + rate * dt).min(self.depth(now, burst));
        }
        self.refilled = now;
    }

    /// How long until this budget can pay `cost` (0 for a query: it needs one token and takes
    /// none); zero when it can now. A cost above the bucket's depth needs a full bucket.
    pub(super) fn wait_for(&mut self, cost: f64, now: Instant, burst: Duration) -> Duration {
        let paused = self
            .paused_until
            .map_or(Duration::ZERO, |until| until.saturating_duration_since(now));
        let rate = self.rate(now);
        if rate.is_infinite() {
            return paused;
        }
        self.refill(now, burst);
        let need = cost.max(1.0).min(self.depth(now, burst));
        let short = need - self.level;
        let refill = if short <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((short / rate).min(3_600.0))
        };
        refill.max(paused)
    }

    /// Takes `cost` tokens (the level may go negative: debt the refill pays off first).
    pub(super) fn take(&mut self, cost: f64, now: Instant, burst: Duration) {
        if self.rate(now).is_finite() {
            self.refill(now, burst);
            self.level -= cost;
        }
    }

    /// A throttling answer: cut the rate (once per `cooldown`, as the requests in flight when
    /// the service started refusing all come back refused), starting from `measured` when no
    /// rate was set. Returns whether it was cut.
    pub(super) fn decrease(
        &mut self,
        now: Instant,
        measured: f64,
        policy: &ThroughputPolicy,
        cooldown: Duration,
    ) -> bool {
        if self
            .last_decrease
            .is_some_and(|at| now.saturating_duration_since(at) < cooldown)
        {
            return false;
        }
        self.refill(now, policy.burst);
        let current = self.rate(now);
        let base = if current.is_finite() {
            current
        } else {
            measured.max(1.0)
        };
        let (floor, step) = if self.ceiling.is_finite() {
            (
                self.ceiling * policy.floor,
                self.ceiling / policy.recovery.as_secs_f64(),
            )
        } else {
            (1.0, base / policy.recovery.as_secs_f64())
        };
        self.limit = (base * policy.decrease).max(floor);
        self.step = step;
        self.since = now;
        // The service has just refused: no burst right after.
        self.level = self.level.min(0.0);
        self.last_decrease = Some(now);
        true
    }

    /// Holds requests back until `until` (a server's retry hint).
    pub(super) fn pause(&mut self, until: Instant) {
        self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
    }

    /// Whether the budget is back to its initial state: full, not cut, not paused. Such a
    /// partition's entry can be dropped and made anew.
    pub(super) fn is_at_rest(&self, now: Instant, burst: Duration) -> bool {
        let rate = self.rate(now);
        let unpaused = self.paused_until.is_none_or(|until| until <= now);
        let recovered = rate.is_infinite() || rate >= self.ceiling;
        let full = rate.is_infinite() || {
            let dt = now.saturating_duration_since(self.refilled).as_secs_f64();
            self.level + rate * dt >= self.depth(now, burst)
        };
        unpaused && recovered && full && (self.limit.is_infinite() == self.ceiling.is_infinite())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ThroughputPolicy {
        ThroughputPolicy::default().with_utilization(1.0)
    }

    #[test]
    fn a_full_bucket_pays_then_refills_at_its_rate() {
        let p = policy();
        let t0 = Instant::now();
        let mut b = Budget::new(100.0, &p, t0);
        assert_eq!(b.wait_for(100.0, t0, p.burst), Duration::ZERO);
        b.take(100.0, t0, p.burst);
        let wait = b.wait_for(50.0, t0, p.burst);
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9, "{wait:?}");
        let later = t0 + Duration::from_millis(500);
        assert_eq!(b.wait_for(50.0, later, p.burst), Duration::ZERO);
    }

    #[test]
    fn a_cost_above_the_depth_needs_a_full_bucket_and_leaves_debt() {
        let p = policy();
        let t0 = Instant::now();
        let mut b = Budget::new(50.0, &p, t0); // depth 50
        assert_eq!(b.wait_for(100.0, t0, p.burst), Duration::ZERO);
        b.take(100.0, t0, p.burst); // level -50
        let wait = b.wait_for(1.0, t0, p.burst);
        assert!((wait.as_secs_f64() - 51.0 / 50.0).abs() < 1e-9, "{wait:?}");
    }

    #[test]
    fn throttling_halves_the_rate_which_grows_back_linearly_to_the_ceiling() {
        let p = policy();
        let t0 = Instant::now();
        let mut b = Budget::new(1_000.0, &p, t0);
        assert!(b.decrease(t0, 0.0, &p, Duration::from_secs(1)));
        assert_eq!(b.rate(t0), 500.0);
        // A second refusal within the cooldown is the same episode.
        assert!(!b.decrease(
            t0 + Duration::from_millis(10),
            0.0,
            &p,
            Duration::from_secs(1)
        ));
        // Additive increase: the target over `recovery` (10 s) per second.
        assert!((b.rate(t0 + Duration::from_secs(2)) - 700.0).abs() < 1e-6);
        assert_eq!(b.rate(t0 + Duration::from_secs(60)), 1_000.0);
        // Again, from where it is: never below the floor.
        let t1 = t0 + Duration::from_secs(2);
        for i in 0..20 {
            b.decrease(
                t1 + Duration::from_secs(2 * i),
                0.0,
                &p,
                Duration::from_secs(1),
            );
        }
        assert!(b.rate(t1 + Duration::from_secs(38)) >= 1_000.0 * p.floor);
    }

    #[test]
    fn without_a_target_the_first_refusal_sets_one_from_the_measured_rate() {
        let p = ThroughputPolicy::cosmos();
        let t0 = Instant::now();
        let mut b = Budget::new(f64::INFINITY, &p, t0);
        assert_eq!(b.wait_for(1e9, t0, p.burst), Duration::ZERO);
        b.decrease(t0, 800.0, &p, Duration::from_secs(1));
        assert_eq!(b.rate(t0), 400.0);
        assert!(
            b.wait_for(1.0, t0, p.burst) > Duration::ZERO,
            "no burst after a 429"
        );
        assert!(b.rate(t0 + Duration::from_secs(5)) > 400.0, "grows back");
    }

    #[test]
    fn a_pause_holds_back_even_an_unlimited_budget() {
        let p = ThroughputPolicy::unlimited();
        let t0 = Instant::now();
        let mut b = Budget::new(f64::INFINITY, &p, t0);
        b.pause(t0 + Duration::from_millis(300));
        assert_eq!(b.wait_for(1.0, t0, p.burst), Duration::from_millis(300));
        assert_eq!(
            b.wait_for(1.0, t0 + Duration::from_millis(300), p.burst),
            Duration::ZERO
        );
        assert!(b.is_at_rest(t0 + Duration::from_secs(1), p.burst));
    }
}
