//! Throughput governance: the rate meter and the admission control in every account's request
//! path. Each table request is charged its cost in entities against a budget of its partition
//! and one of the account (see [`ThroughputPolicy`]); the meter counts what the service counts
//! (as far as the client can see it) over a sliding window.

mod answer;
mod budget;
mod meter;
mod policy;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub(crate) use answer::{Refusal, throttling};
pub use policy::ThroughputPolicy;

use budget::Budget;
use meter::Window;
use tablekit_core::ThrottleScope;

/// The name a partition has in the meter and the budgets: `{table}/{partition key}` (neither
/// can contain `/` before it). A partition of the service is a PartitionKey of one table.
pub(crate) fn partition_name(table: &str, pk: &str) -> String {
    format!("{table}/{pk}")
}

/// What one request costs, and where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Charge {
    partition: Option<String>,
    cost: u32,
    mode: Mode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Not governed (queue and blob requests: their services have targets of their own).
    Free,
    /// Charged before it is sent.
    Upfront,
    /// Admitted while a token is left; charged by what it returns.
    Query,
}

impl Charge {
    /// Not charged.
    pub(crate) fn free() -> Self {
        Self {
            partition: None,
            cost: 0,
            mode: Mode::Free,
        }
    }

    /// `cost` entities against the account only.
    pub(crate) fn account(cost: u32) -> Self {
        Self {
            partition: None,
            cost,
            mode: Mode::Upfront,
        }
    }

    /// `cost` entities in partition `pk` of `table` (and the account).
    pub(crate) fn partition(table: &str, pk: &str, cost: u32) -> Self {
        Self {
            partition: Some(partition_name(table, pk)),
            cost,
            mode: Mode::Upfront,
        }
    }

    /// A query page of `table`, confined to partition `pinned` when its filter fixes the
    /// PartitionKey.
    pub(crate) fn query(table: &str, pinned: Option<&str>) -> Self {
        Self {
            partition: pinned.map(|pk| partition_name(table, pk)),
            cost: 0,
            mode: Mode::Query,
        }
    }

    pub(crate) fn is_free(&self) -> bool {
        self.mode == Mode::Free
    }

    /// The entities counted when the request is answered (a query's count when it is parsed).
    pub(crate) fn upfront_cost(&self) -> u32 {
        if self.mode == Mode::Upfront {
            self.cost
        } else {
            0
        }
    }

    pub(crate) fn partition_key(&self) -> Option<&str> {
        self.partition.as_deref()
    }
}

#[derive(Debug)]
struct Scope {
    budget: Budget,
    /// When this partition was last refused.
    refused_at: Option<Instant>,
    meter: Window,
    /// Entities this scope's budget let through (the meter counts those the service served).
    sent: Window,
    /// Whether its rate was last seen above `warn_at` of its target (logged once per episode).
    hot: bool,
    touched: Instant,
}

impl Scope {
    fn new(target: f64, policy: &ThroughputPolicy, now: Instant) -> Self {
        Self {
            budget: Budget::new(target, policy, now),
            refused_at: None,
            meter: Window::new(policy.window, now),
            sent: Window::new(policy.window, now),
            hot: false,
            touched: now,
        }
    }
}

/// What the partitions of one table share: the service's per-partition target is the same
/// for all of them, so one probe of it serves every partition, and a rate one was served
/// tells the others what they can ask for.
#[derive(Debug, Default)]
struct TableShare {
    /// The partition probing above its rate (a [`partition_name`]), and since when: the
    /// table's other partitions do not probe until its turn ends ([`probe_turn`]).
    prober: Option<(String, Instant)>,
    /// The rate the last cut of one of its partitions set, and when.
    learned: Option<(f64, Instant)>,
}

#[derive(Debug)]
struct State {
    account: Scope,
    partitions: HashMap<String, Scope>,
    /// Per table (by name).
    tables: HashMap<String, TableShare>,
    lookups: u32,
    /// Requests admitted so far: a probe waits for enough of them (see `budget`).
    requests: u64,
    /// The target the last throttling answer that named one named, and when it came.
    named: Option<(ThrottleScope, Instant)>,
}

/// Partitions are looked up this many times between sweeps of idle entries.
const SWEEP_EVERY: u32 = 4_096;

impl State {
    fn partition(&mut self, pk: &str, policy: &ThroughputPolicy, now: Instant) -> &mut Scope {
        self.lookups = self.lookups.wrapping_add(1);
        if self.lookups % SWEEP_EVERY == 0 {
            // An entry idle this long with its budget at rest is what a new one would be; one
            // idle for a minute has learned nothing that still holds.
            let idle = policy
                .window
                .max(policy.recovery)
                .max(policy.burst)
                .max(policy.probe_after);
            self.partitions.retain(|_, s| {
                let quiet = now.saturating_duration_since(s.touched);
                quiet < idle || (quiet < FORGET_AFTER && !s.budget.is_at_rest(now, policy.burst))
            });
            let recent = |at: &Instant| now.saturating_duration_since(*at) < FORGET_AFTER;
            self.tables.retain(|_, t| {
                t.learned.as_ref().is_some_and(|(_, at)| recent(at))
                    || t.prober.as_ref().is_some_and(|(_, at)| recent(at))
            });
        }
        let (may_probe, learned) = match self.tables.get(table_of(pk)) {
            None => (true, None),
            Some(t) => (
                t.prober.as_ref().is_none_or(|(prober, since)| {
                    prober == pk || now.saturating_duration_since(*since) >= probe_turn(policy)
                }),
                t.learned
                    .filter(|(_, at)| now.saturating_duration_since(*at) < FORGET_AFTER)
                    .map(|(rate, _)| rate),
            ),
        };
        // Looked up before inserting: no allocation for a partition already known (a bulk
        // write's scheduler asks about each partition it considers).
        if !self.partitions.contains_key(pk) {
            self.partitions
                .insert(pk.to_owned(), Scope::new(policy.per_partition, policy, now));
        }
        let scope = self
            .partitions
            .get_mut(pk)
            .expect("inserted above when missing");
        scope.touched = now;
        scope.budget.allow_probe(may_probe);
        if let Some(rate) = learned {
            scope.budget.adopt(rate, now, policy);
        }
        scope
    }

    /// What the partitions of partition `pk`'s table share (made when missing).
    fn share_of(&mut self, pk: &str) -> &mut TableShare {
        let table = table_of(pk);
        if !self.tables.contains_key(table) {
            self.tables.insert(table.to_owned(), TableShare::default());
        }
        self.tables
            .get_mut(table)
            .expect("inserted above when missing")
    }

    /// Partition `pk`'s budget probes: it has its table's turn (unless another's turn is
    /// still running). Called only for a probing budget: no lookup on the admission path
    /// otherwise.
    fn note_probe(&mut self, pk: &str, policy: &ThroughputPolicy, now: Instant) {
        let share = self.share_of(pk);
        let free = share.prober.as_ref().is_none_or(|(prober, since)| {
            prober != pk && now.saturating_duration_since(*since) >= probe_turn(policy)
        });
        if free {
            share.prober = Some((pk.to_owned(), now));
        }
    }

    /// Partition `pk`'s budget was cut: its table learns the rate the cut set, and its
    /// probe, if it had the turn, is over.
    fn note_cut(&mut self, pk: &str, now: Instant) {
        let Some(rate) = self.partitions.get(pk).map(|s| s.budget.base_rate()) else {
            return;
        };
        let share = self.share_of(pk);
        share.learned = Some((rate, now));
        if share
            .prober
            .as_ref()
            .is_some_and(|(prober, _)| prober == pk)
        {
            share.prober = None;
        }
    }

    /// Whether the refusal of partition `pk` is the partition's own: it has no budget (the
    /// Cosmos DB Table API), runs near its budget, carries nearly all of the account's
    /// traffic, or was refused already less than
    /// [`REPEAT`] before (`before`) and is at least twice as busy as the mean of the partitions
    /// served in the window. An account over its budget refuses whichever partitions send at
    /// that moment — one that just had two transactions served looks busy for a second, but
    /// is rarely refused twice; a partition over its own budget is refused again and again.
    fn blames_partition(
        &mut self,
        pk: &str,
        before: Option<Instant>,
        policy: &ThroughputPolicy,
        now: Instant,
    ) -> bool {
        let account = self.account.meter.rate(now);
        let scope = self.partition(pk, policy, now);
        let measured = scope.meter.rate(now);
        let budget = scope.budget.rate(now);
        if budget.is_infinite() || measured >= 0.5 * budget {
            return true;
        }
        // It carries (nearly) all of the account's traffic: the meter cannot tell the two
        // apart, and a cut of its budget bounds the account's rate as well — with a floor a
        // tenth of the account's, which may sit above what one partition serves.
        if measured > 0.0 && measured >= 0.9 * account {
            return true;
        }
        let repeat = before.is_some_and(|at| now.saturating_duration_since(at) < REPEAT);
        if !repeat || measured <= 0.0 {
            return false;
        }
        // Twice the mean: at least this many partitions were served in the window.
        let needed = 2.0 * account / measured;
        let mut active = 0.0;
        for scope in self.partitions.values_mut() {
            if scope.meter.rate(now) > 0.0 {
                active += 1.0;
                if active >= needed && active >= 2.0 {
                    return true;
                }
            }
        }
        false
    }
}

#[cfg(test)]
impl State {
    /// The rate partition `pk`'s budget (or the account's) admits at `now`.
    fn limit_at(&self, pk: Option<&str>, now: Instant) -> f64 {
        match pk {
            Some(pk) => self.partitions[pk].budget.rate(now),
            None => self.account.budget.rate(now),
        }
    }
}

/// How long one partition's probe has its table to itself ([`TableShare`]): long enough to
/// grow to `probe_limit` × its rate and hear the refusal that ends it. A probe that was
/// refused ends its turn at once.
fn probe_turn(policy: &ThroughputPolicy) -> Duration {
    let growth = policy.probe_limit.max(1.0).ln() / policy.probe.ln_1p().max(1e-3);
    Duration::from_secs_f64(growth.min(60.0)) + policy.window
}

/// A partition refused again within this long is over its own budget.
const REPEAT: Duration = Duration::from_secs(5);

/// A partition's entry idle this long is dropped even though its budget learned something.
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// The live budgets and meters of one account.
#[derive(Debug)]
pub(crate) struct Governor {
    policy: ThroughputPolicy,
    state: Mutex<State>,
}

impl Governor {
    pub(crate) fn new(policy: ThroughputPolicy) -> Self {
        let now = Instant::now();
        Self {
            state: Mutex::new(State {
                account: Scope::new(policy.per_account, &policy, now),
                partitions: HashMap::new(),
                tables: HashMap::new(),
                lookups: 0,
                requests: 0,
                named: None,
            }),
            policy,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Budgets are plain numbers: a panic elsewhere cannot leave them inconsistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn governs(&self, charge: &Charge) -> bool {
        !charge.is_free() && self.policy.is_governed()
    }

    /// Waits until `charge` fits its budgets and takes it, but not past `until`: returns the
    /// time waited, or `None` (having taken nothing) as soon as the budgets cannot hold it by
    /// then.
    pub(crate) async fn admit(&self, charge: &Charge, until: Option<Instant>) -> Option<Duration> {
        if !self.governs(charge) {
            return Some(Duration::ZERO);
        }
        let start = Instant::now();
        loop {
            let now = Instant::now();
            let wait = self.try_admit(charge, now, true);
            if wait.is_zero() {
                return Some(start.elapsed());
            }
            if until.is_some_and(|until| now + wait > until) {
                return None;
            }
            // Never spin: a wait shorter than the timer's resolution is rounded up.
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }

    /// How long after `now` `cost` entities in partition `pk` of `table` fit the budgets
    /// (zero: at once), in whole milliseconds. A scheduler comparing partitions asks about
    /// each at one instant.
    pub(crate) fn ready_in_at(&self, table: &str, pk: &str, cost: u32, now: Instant) -> Duration {
        let wait = self.try_admit(&Charge::partition(table, pk, cost), now, false);
        // In whole milliseconds, rounded up: no wait is shorter than the timer's resolution,
        // and partitions whose budgets differ by less than that tie, so that the scheduler's
        // turn decides between them.
        let micros = wait.as_micros();
        Duration::from_millis(u64::try_from(micros.div_ceil(1_000)).unwrap_or(u64::MAX))
    }

    fn try_admit(&self, charge: &Charge, now: Instant, take: bool) -> Duration {
        let policy = &self.policy;
        let cost = f64::from(charge.upfront_cost());
        let mut state = self.lock();
        let requests = state.requests;
        let mut wait = state.account.budget.wait_for(cost, now, requests, policy);
        if let Some(pk) = charge.partition_key() {
            let scope = state.partition(pk, policy, now);
            wait = wait.max(scope.budget.wait_for(cost, now, requests, policy));
            if take && wait.is_zero() {
                scope.budget.take(cost, now, requests, policy);
                scope.sent.add(cost as u64, now);
            }
            if scope.budget.probing() {
                state.note_probe(pk, policy, now);
            }
        }
        if take && wait.is_zero() {
            state.account.budget.take(cost, now, requests, policy);
            state.account.sent.add(cost as u64, now);
            state.requests += 1;
        }
        wait
    }

    /// Counts `n` entities served in partition `pk` (a [`partition_name`]; or the account
    /// only) by a request sent at `sent` (`None`: not known), and for query results also
    /// takes them from the budgets (which may go into debt).
    pub(crate) fn served(&self, pk: Option<&str>, n: u64, take: bool, sent: Option<Instant>) {
        self.served_at(pk, n, take, sent, Instant::now());
    }

    fn served_at(&self, pk: Option<&str>, n: u64, take: bool, sent: Option<Instant>, now: Instant) {
        if n == 0 {
            return;
        }
        let policy = &self.policy;
        let mut state = self.lock();
        let take = take && policy.is_governed();
        let requests = state.requests;
        if let Some(pk) = pk {
            let scope = state.partition(pk, policy, now);
            if take {
                scope.budget.take(n as f64, now, requests, policy);
            }
            scope.meter.add(n, now);
            let rate = scope.meter.rate(now);
            // A partition's few large transactions make a cut's figure miss much when an
            // answer comes late; the account's many answers make it miss little.
            scope.budget.revise(n as f64, sent, now, policy);
            note_heat(scope, rate, policy.per_partition, policy.warn_at, Some(pk));
            if take && scope.budget.probing() {
                state.note_probe(pk, policy, now);
            }
        }
        let account = &mut state.account;
        if take {
            account.budget.take(n as f64, now, requests, policy);
        }
        account.meter.add(n, now);
        let rate = account.meter.rate(now);
        note_heat(account, rate, policy.per_account, policy.warn_at, None);
    }

    /// A throttling answer to `charge`: cut the budget it hit and honour the server's hint.
    /// Returns whether a budget was cut.
    pub(crate) fn throttled(&self, charge: &Charge, refusal: Refusal) -> bool {
        self.throttled_at(charge, refusal, Instant::now())
    }

    /// The budget an answer blames: the one it names ([`ThrottleScope`]), else the one the
    /// last answer that named one named, less than [`REPEAT`] before, else the one
    /// [`State::blames_partition`] infers.
    fn throttled_at(&self, charge: &Charge, refusal: Refusal, now: Instant) -> bool {
        if !self.governs(charge) {
            return false;
        }
        let policy = &self.policy;
        let cooldown = policy.window;
        let mut state = self.lock();
        let requests = state.requests;
        let mut cut = false;
        let mut blamed_partition = false;
        // An answer that does not name its target (Azure's 500 OperationTimedOut) is judged
        // as the named ones around it: the service answers a partition over its target with
        // 503 ServerBusy and 500 OperationTimedOut alike.
        let named = match (refusal.scope, state.named) {
            (ThrottleScope::Unspecified, Some((named, at)))
                if now.saturating_duration_since(at) < REPEAT =>
            {
                named
            }
            (ThrottleScope::Unspecified, _) => ThrottleScope::Unspecified,
            (named, _) => {
                state.named = Some((named, now));
                named
            }
        };
        let account_scoped = named == ThrottleScope::Account;
        match charge.partition_key() {
            Some(pk) if !account_scoped => {
                let scope = state.partition(pk, policy, now);
                if let Some(hint) = refusal.hint {
                    scope.budget.pause(now + hint);
                }
                let partition_cooling = scope.budget.cooling(now, cooldown);
                let before = scope.refused_at.replace(now);
                blamed_partition = match named {
                    ThrottleScope::Partition => true,
                    _ => {
                        // Both budgets were cut in this episode: nothing to decide.
                        if partition_cooling && state.account.budget.cooling(now, cooldown) {
                            return false;
                        }
                        state.blames_partition(pk, before, policy, now)
                    }
                };
                if blamed_partition && policy.adaptive {
                    let scope = state.partition(pk, policy, now);
                    let measured = (scope.meter.rate(now), scope.sent.rate(now));
                    cut = scope
                        .budget
                        .decrease(now, measured, requests, policy, cooldown);
                    if cut {
                        state.note_cut(pk, now);
                    }
                }
            }
            _ => {
                if let Some(hint) = refusal.hint {
                    state.account.budget.pause(now + hint);
                }
            }
        }
        if !blamed_partition && policy.adaptive {
            let account = &mut state.account;
            let measured = (account.meter.rate(now), account.sent.rate(now));
            cut = state
                .account
                .budget
                .decrease(now, measured, requests, policy, cooldown);
        }
        if cut {
            // The table only: a partition key may be personal data (see `Telemetry`).
            let table = charge
                .partition_key()
                .filter(|_| blamed_partition)
                .map(table_of);
            tracing::info!(target: "tablekit", partition_of = table, "throttled: budget cut");
        }
        cut
    }

    /// The account's metered rate and the `n` partitions with the highest rates, highest
    /// first (entities per second over the window).
    pub(crate) fn rates(&self, n: usize) -> (f64, Vec<(String, f64)>) {
        let now = Instant::now();
        let mut state = self.lock();
        let account = state.account.meter.rate(now);
        let mut partitions: Vec<(String, f64)> = state
            .partitions
            .iter_mut()
            .map(|(pk, s)| (pk.clone(), s.meter.rate(now)))
            .filter(|(_, r)| *r > 0.0)
            .collect();
        partitions.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        partitions.truncate(n);
        (account, partitions)
    }

    /// The rate a partition's budget (`pk` a [`partition_name`]), or the account's, admits
    /// now, entities per second (infinite: no budget).
    pub(crate) fn limit(&self, pk: Option<&str>) -> f64 {
        let now = Instant::now();
        let state = self.lock();
        match pk {
            Some(pk) => state
                .partitions
                .get(pk)
                .map_or(self.policy.per_partition * self.policy.utilization, |s| {
                    s.budget.rate(now)
                }),
            None => state.account.budget.rate(now),
        }
    }

    /// Forgets the metered rates (budgets keep their levels).
    pub(crate) fn reset_meter(&self) {
        let now = Instant::now();
        let mut state = self.lock();
        state.account.meter = Window::new(self.policy.window, now);
        for scope in state.partitions.values_mut() {
            scope.meter = Window::new(self.policy.window, now);
        }
    }
}

/// The table of a partition name (`{table}/{pk}`).
fn table_of(partition: &str) -> &str {
    partition.split('/').next().unwrap_or_default()
}

/// Logs once when a scope's rate passes `warn_at` of its target, and again only after it fell
/// back below 90 % of that.
fn note_heat(scope: &mut Scope, rate: f64, target: f64, warn_at: f64, pk: Option<&str>) {
    if !target.is_finite() {
        return;
    }
    let threshold = warn_at * target;
    if !scope.hot && rate >= threshold {
        scope.hot = true;
        match pk {
            Some(pk) => {
                let table = table_of(pk);
                tracing::info!(target: "tablekit", partition_of = table, rate, target, "partition near its scalability target")
            }
            None => {
                tracing::info!(target: "tablekit", rate, target, "account near its scalability target")
            }
        }
    } else if scope.hot && rate < 0.9 * threshold {
        scope.hot = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Partitions `p{i}` of table "t", for each `i` of `ids`, served `n` entities at `at`.
    fn serve_each(g: &Governor, ids: std::ops::Range<u32>, n: u64, at: Instant) {
        for i in ids {
            serve(g, &format!("p{i}"), n, at);
        }
    }

    /// `n` entities of table "t"'s partition `pk` served at `at`, by a request sent then.
    fn serve(g: &Governor, pk: &str, n: u64, at: Instant) {
        g.served_at(Some(&partition_name("t", pk)), n, false, Some(at), at);
    }

    /// A throttling answer that does not name its target.
    const UNSAID: Refusal = Refusal {
        hint: None,
        scope: ThrottleScope::Unspecified,
    };

    #[test]
    fn an_answer_that_names_its_target_cuts_that_budget() {
        // Ten partitions served alike, none twice the mean: without a word from the
        // service, a first refusal of one of them is blamed on the account.
        let policy = ThroughputPolicy::default().with_targets(200.0, 2_000.0);
        let at = |t0: Instant, ms| t0 + Duration::from_millis(ms);
        let refused = Charge::partition("t", "p3", 100);
        let said = |scope| Refusal { hint: None, scope };

        let g = Governor::new(policy.clone());
        let t0 = Instant::now();
        serve_each(&g, 0..10, 90, t0);
        assert!(g.throttled_at(&refused, UNSAID, at(t0, 100)));
        let limit = |g: &Governor, pk: Option<&str>| g.lock().limit_at(pk, at(t0, 100));
        assert!(limit(&g, None) < 2_000.0 * 0.95, "unsaid: the account's");
        assert_eq!(limit(&g, Some("t/p3")), 200.0 * 0.95);

        let g = Governor::new(policy.clone());
        serve_each(&g, 0..10, 90, t0);
        assert!(g.throttled_at(&refused, said(ThrottleScope::Partition), at(t0, 100)));
        assert!(
            limit(&g, Some("t/p3")) < 200.0 * 0.95,
            "the partition's, named"
        );
        assert_eq!(limit(&g, None), 2_000.0 * 0.95, "not the account's");

        // A partition carrying the whole account's traffic would be blamed without a word;
        // named, the account is.
        let g = Governor::new(policy);
        serve(&g, "p3", 190, t0);
        assert!(g.throttled_at(&refused, said(ThrottleScope::Account), at(t0, 100)));
        assert!(limit(&g, None) < 2_000.0 * 0.95, "the account's, named");
        assert_eq!(limit(&g, Some("t/p3")), 200.0 * 0.95);
    }

    #[test]
    fn an_answer_that_names_no_target_is_judged_as_the_named_ones_just_before() {
        let policy = ThroughputPolicy::default().with_targets(200.0, 2_000.0);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let g = Governor::new(policy);
        serve_each(&g, 0..10, 90, t0);
        let named = Refusal {
            hint: None,
            scope: ThrottleScope::Partition,
        };
        let limit = |pk: Option<&str>, ms| g.lock().limit_at(pk, at(ms));
        assert!(g.throttled_at(&Charge::partition("t", "p1", 100), named, at(100)));
        // A 500 OperationTimedOut of another partition in the same second: that partition's.
        assert!(g.throttled_at(&Charge::partition("t", "p2", 100), UNSAID, at(200)));
        assert!(limit(Some("t/p2"), 200) < 200.0 * 0.95);
        assert_eq!(limit(None, 200), 2_000.0 * 0.95, "not the account's");
        // Long after the last named answer, the inference is back: the account's.
        serve_each(&g, 0..10, 90, at(6_000));
        assert!(g.throttled_at(&Charge::partition("t", "p4", 100), UNSAID, at(6_100)));
        assert!(limit(None, 6_100) < 2_000.0 * 0.95);
        assert_eq!(limit(Some("t/p4"), 6_100), 200.0 * 0.95);
    }

    #[test]
    fn partitions_of_a_table_probe_one_at_a_time_and_take_the_rate_one_was_served() {
        // Told 100/s per partition (95 used); the service serves more.
        let g = Governor::new(ThroughputPolicy::default().with_targets(100.0, 100_000.0));
        let t0 = Instant::now();
        let table_t: Vec<String> = (0..3)
            .map(|i| partition_name("t", &format!("p{i}")))
            .collect();
        let other = partition_name("u", "p0");
        let limit = |pk: &str, now| g.lock().limit_at(Some(pk), now);
        // Every partition asks for 500 entities/s: its requests always wait.
        let mut now = t0;
        let mut press = |until: Duration| {
            while now < t0 + until {
                now += Duration::from_millis(10);
                for pk in table_t.iter().chain([&other]) {
                    let (table, key) = pk.split_once('/').unwrap();
                    g.try_admit(&Charge::partition(table, key, 5), now, true);
                }
            }
            now
        };
        let now = press(Duration::from_secs(8));
        let probing: Vec<&String> = table_t.iter().filter(|pk| limit(pk, now) > 95.0).collect();
        assert_eq!(probing.len(), 1, "one probe per table: {probing:?}");
        assert!(
            limit(&other, now) > 95.0,
            "another table's partition probes on its own"
        );
        let prober = probing[0].clone();
        assert!(
            limit(&prober, now) >= 150.0 / 0.9,
            "{}",
            limit(&prober, now)
        );

        // The service serves the prober 150/s and refuses it: the others take 0.95 × 150.
        g.served_at(Some(&prober), 150, false, Some(now), now);
        let refused = Charge::partition("t", prober.split_once('/').unwrap().1, 5);
        let said = Refusal {
            hint: None,
            scope: ThrottleScope::Partition,
        };
        assert!(g.throttled_at(&refused, said, now));
        let learned = g.lock().partitions[&prober].budget.base_rate();
        assert!((learned - 0.95 * 150.0).abs() < 1e-9, "{learned}");
        // Taken when a partition is next asked about.
        for pk in table_t.iter().filter(|pk| **pk != prober) {
            assert_eq!(limit(pk, now), 95.0, "{pk}");
            g.ready_in_at("t", pk.split_once('/').unwrap().1, 1, now);
            assert_eq!(limit(pk, now), learned, "{pk}");
        }
        let new = partition_name("t", "p9");
        assert_eq!(g.ready_in_at("t", "p9", 1, now), Duration::ZERO);
        assert_eq!(
            limit(&new, now),
            learned,
            "a new partition of the table starts there"
        );
        assert!(
            limit(&other, now) > learned,
            "another table's partition keeps its own"
        );
        // A lower rate learned later never lowers a partition that was not cut itself.
        let later = now + Duration::from_secs(2);
        g.served_at(Some(&new), 50, false, Some(later), later);
        let refused = Charge::partition("t", "p9", 5);
        assert!(g.throttled_at(&refused, said, later));
        assert!(g.lock().partitions[&new].budget.base_rate() < learned);
        let bystander = &table_t[usize::from(prober == table_t[0])];
        g.ready_in_at("t", bystander.split_once('/').unwrap().1, 1, later);
        assert_eq!(limit(bystander, later), learned);
    }

    #[test]
    fn heat_is_noted_once_per_episode() {
        let policy = ThroughputPolicy::default();
        let now = Instant::now();
        let mut scope = Scope::new(100.0, &policy, now);
        note_heat(&mut scope, 79.0, 100.0, 0.8, Some("t/p"));
        assert!(!scope.hot);
        note_heat(&mut scope, 80.0, 100.0, 0.8, Some("t/p"));
        assert!(scope.hot);
        // Still above 90 % of the threshold: the same episode.
        note_heat(&mut scope, 73.0, 100.0, 0.8, Some("t/p"));
        assert!(scope.hot);
        note_heat(&mut scope, 71.0, 100.0, 0.8, Some("t/p"));
        assert!(!scope.hot);
        // No target, no heat.
        note_heat(&mut scope, 1e9, f64::INFINITY, 0.8, None);
        assert!(!scope.hot);
    }

    #[test]
    fn partitions_of_different_tables_have_budgets_of_their_own() {
        let g = Governor::new(ThroughputPolicy::default().with_targets(100.0, 10_000.0));
        assert!(g.ready_in_at("A", "p", 95, Instant::now()).is_zero());
        g.try_admit(&Charge::partition("A", "p", 95), Instant::now(), true);
        assert!(
            !g.ready_in_at("A", "p", 95, Instant::now()).is_zero(),
            "spent"
        );
        assert!(
            g.ready_in_at("B", "p", 95, Instant::now()).is_zero(),
            "another table's partition"
        );
        g.served(Some(&partition_name("A", "p")), 40, false, None);
        let (account, hottest) = g.rates(5);
        assert_eq!(account, 40.0);
        assert_eq!(hottest, vec![("A/p".to_owned(), 40.0)]);
    }

    #[test]
    fn partitions_waiting_for_the_account_tie_in_whole_milliseconds() {
        let g = Governor::new(ThroughputPolicy::default().with_targets(1_000.0, 1_000.0));
        let t0 = Instant::now();
        // The account's bucket (950 deep at 950/s) is spent.
        g.try_admit(&Charge::partition("A", "p0", 950), t0, true);
        let first = g.ready_in_at("A", "p1", 100, t0);
        let later = g.ready_in_at("A", "p2", 100, t0 + Duration::from_micros(30));
        assert!(first > Duration::ZERO);
        assert_eq!(first, later, "asked 30 µs apart, they tie");
        assert_eq!(first.subsec_micros() % 1_000, 0);
    }

    #[test]
    fn answers_that_come_after_a_cut_count_toward_the_rate_it_set() {
        // Told 400/s per partition (380 used); the service serves 200/s.
        let g = Governor::new(ThroughputPolicy::default().with_targets(400.0, 100_000.0));
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let said = Refusal {
            hint: None,
            scope: ThrottleScope::Partition,
        };
        let base = |pk: &str| {
            g.lock().partitions[&partition_name("t", pk)]
                .budget
                .base_rate()
        };
        // Each partition sends three 100-entity transactions at once; the service admits two
        // and refuses the third, whose answer comes back before the second admitted one's.
        for pk in ["p0", "p1"] {
            for _ in 0..3 {
                assert!(
                    g.try_admit(&Charge::partition("t", pk, 100), t0, true)
                        .is_zero()
                );
            }
            g.served_at(Some(&partition_name("t", pk)), 100, false, Some(t0), ms(5));
            assert!(g.throttled_at(&Charge::partition("t", pk, 100), said, ms(10)));
            assert!((base(pk) - 95.0).abs() < 1e-9, "{}", base(pk));
        }
        // "p0"'s second answer comes within the cut's cooldown: 0.95 × 200.
        g.served_at(
            Some(&partition_name("t", "p0")),
            100,
            false,
            Some(t0),
            ms(40),
        );
        assert!((base("p0") - 190.0).abs() < 1e-9, "{}", base("p0"));
        // "p1"'s comes after it: a new episode's answer, not the cut's.
        g.served_at(
            Some(&partition_name("t", "p1")),
            100,
            false,
            Some(t0),
            ms(1_100),
        );
        assert!((base("p1") - 95.0).abs() < 1e-9, "{}", base("p1"));
    }

    #[test]
    fn answers_to_requests_sent_after_a_cut_do_not_raise_it() {
        // One partition read alone, one entity a read; the service serves 200/s with a second
        // of burst; tablekit keeps Azure's targets.
        let g = Governor::new(ThroughputPolicy::default());
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let pk = partition_name("t", "scan");
        let read = Charge::partition("t", "scan", 1);
        let said = Refusal {
            hint: None,
            scope: ThrottleScope::Partition,
        };
        let base = || g.lock().partitions[&pk].budget.base_rate();
        // The service's burst: 150 reads answered in the first 30 ms, then a refusal.
        for i in 0..150 {
            assert!(g.try_admit(&read, t0, true).is_zero());
            g.served_at(Some(&pk), 1, false, Some(t0), ms(i / 5));
        }
        assert!(g.throttled_at(&read, said, ms(30)));
        let cut = base();
        assert!((cut - 0.95 * 150.0).abs() < 1e-6, "{cut}");
        // Through the cut's cooldown the service admits, at its 200/s, the reads sent after
        // the cut: what it admits of the lower rate says nothing of the rate before.
        for i in 0..180 {
            g.served_at(Some(&pk), 1, false, Some(ms(31 + 5 * i)), ms(35 + 5 * i));
        }
        assert_eq!(base(), cut, "raised by answers to reads sent after the cut");
        // An answer to a read sent before the cut, coming late, does count.
        g.served_at(Some(&pk), 10, false, Some(ms(29)), ms(940));
        assert!((base() - 0.95 * 160.0).abs() < 1e-6, "{}", base());
    }

    #[test]
    fn a_partition_is_blamed_when_refused_again_not_for_one_busy_second() {
        let g = Governor::new(ThroughputPolicy::default());
        let t0 = Instant::now();
        // 100 partitions served 20 entities each; "p0" had two transactions (200).
        serve_each(&g, 1..100, 20, t0);
        serve(&g, "p0", 200, t0);
        let refused = Charge::partition("t", "p0", 100);
        let at = |ms| t0 + Duration::from_millis(ms);
        assert!(g.throttled_at(&refused, UNSAID, at(100)));
        let limit = |pk: Option<&str>, ms| g.lock().limit_at(pk, at(ms));
        assert!(
            limit(None, 100) < 19_000.0,
            "a first refusal: the account's"
        );
        assert_eq!(limit(Some("t/p0"), 100), 2_000.0 * 0.95);
        // Refused again 2 s later, still twice as busy as the others: its own.
        serve(&g, "p0", 200, at(2_000));
        serve_each(&g, 1..100, 20, at(2_000));
        assert!(g.throttled_at(&refused, UNSAID, at(2_100)));
        assert!(limit(Some("t/p0"), 2_100) < 2_000.0 * 0.95 * 0.5);
    }

    #[test]
    fn a_partition_that_carries_the_accounts_traffic_is_blamed_for_its_refusal() {
        // One partition read alone (the service serves it 200 entities/s, tablekit was not
        // told): the account's floor (5 % of 20,000/s) is 5x what the partition serves, so a
        // cut of the account's budget would not stop the refusals.
        let g = Governor::new(ThroughputPolicy::default());
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        serve(&g, "scan", 250, at(0));
        assert!(g.throttled_at(&Charge::partition("t", "scan", 1), UNSAID, at(100)));
        let limit = |pk: Option<&str>| g.lock().limit_at(pk, at(100));
        assert!(
            limit(Some("t/scan")) <= 0.7 * 0.95 * 250.0 + 1e-9,
            "{}",
            limit(Some("t/scan"))
        );
        assert_eq!(limit(None), 20_000.0 * 0.95, "not the account's");
    }

    #[test]
    fn ungoverned_charges_never_wait() {
        let g = Governor::new(ThroughputPolicy::unlimited());
        for _ in 0..100 {
            assert!(g.ready_in_at("A", "p", 100, Instant::now()).is_zero());
            g.try_admit(&Charge::partition("A", "p", 100), Instant::now(), true);
        }
        assert!(!g.throttled(&Charge::partition("A", "p", 1), UNSAID));
        assert_eq!(g.limit(None), f64::INFINITY);
    }
}

/// The adaptation against a simulated service, on a simulated clock: no timing, no requests.
#[cfg(test)]
mod simulation;
