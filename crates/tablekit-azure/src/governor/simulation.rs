//! The governor's adaptation against a simulated service, on a simulated clock: a bulk load of
//! 100-entity transactions, 8 in flight, answered 20 ms after they are sent by token buckets
//! like the service's (one per partition, one for the account, each one second deep), which
//! refuse what they cannot pay. Each test states what the governor was told and what the
//! service serves; none depends on the machine's speed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tablekit_core::ThrottleScope;

use super::{Charge, Governor, Refusal, ThroughputPolicy, partition_name};

const TABLE: &str = "t";
const TRANSACTION: u32 = 100;
const IN_FLIGHT: usize = 8;
const ROUND_TRIP: Duration = Duration::from_millis(20);
const TICK: Duration = Duration::from_millis(5);

/// A token bucket `rate` entities/s, one second deep.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, rate: f64, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + rate * dt).min(rate);
        self.at = now;
    }
}

/// The service: partition and account buckets whose rates may change at run time.
struct Service {
    per_partition: f64,
    per_account: f64,
    account: Bucket,
    partitions: HashMap<String, Bucket>,
}

impl Service {
    fn new(per_partition: f64, per_account: f64, now: Instant) -> Self {
        Self {
            per_partition,
            per_account,
            account: Bucket {
                tokens: per_account,
                at: now,
            },
            partitions: HashMap::new(),
        }
    }

    /// Admits `cost` entities in `pk` if both buckets hold them; takes nothing otherwise and
    /// names the bucket that was short, as Azure's answers do (the account's first).
    fn admit(&mut self, pk: &str, cost: f64, now: Instant) -> Result<(), ThrottleScope> {
        let rate = self.per_partition;
        let partition = self.partitions.entry(pk.to_owned()).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        partition.refill(rate, now);
        self.account.refill(self.per_account, now);
        if self.account.tokens < cost {
            return Err(ThrottleScope::Account);
        }
        if partition.tokens < cost {
            return Err(ThrottleScope::Partition);
        }
        partition.tokens -= cost;
        self.account.tokens -= cost;
        Ok(())
    }

    /// New rates from `now` on (the buckets keep what they hold, up to their new depth).
    fn set_rates(&mut self, per_partition: f64, per_account: f64, now: Instant) {
        self.account.refill(self.per_account, now);
        self.account.tokens = self.account.tokens.min(per_account);
        for bucket in self.partitions.values_mut() {
            bucket.refill(self.per_partition, now);
            bucket.tokens = bucket.tokens.min(per_partition);
        }
        (self.per_partition, self.per_account) = (per_partition, per_account);
    }
}

#[derive(Debug, Clone)]
enum Slot {
    Idle,
    Waiting(String),
    InFlight {
        pk: String,
        answered_at: Instant,
        answer: Result<(), ThrottleScope>,
    },
}

/// What a run served: entities admitted per 100 ms, requests and refusals per 100 ms.
#[derive(Debug, Default)]
struct Run {
    admitted: Vec<u64>,
    requests: Vec<u64>,
    refused: Vec<u64>,
    /// Entities admitted per partition after the warm-up.
    by_partition: HashMap<String, u64>,
}

const SLICE_MS: u64 = 100;
/// The tests measure after this.
const WARM_UP: Duration = Duration::from_secs(10);

impl Run {
    fn bump(v: &mut Vec<u64>, slice: usize, n: u64) {
        if v.len() <= slice {
            v.resize(slice + 1, 0);
        }
        v[slice] += n;
    }

    /// Entities per second admitted between `from` and `to` seconds.
    fn goodput(&self, from: f64, to: f64) -> f64 {
        let (a, b) = self.slices(from, to);
        let sum: u64 = self.admitted.get(a..b).unwrap_or_default().iter().sum();
        sum as f64 / (to - from)
    }

    /// The fraction of requests refused between `from` and `to` seconds.
    fn refused_fraction(&self, from: f64, to: f64) -> f64 {
        let (a, b) = self.slices(from, to);
        let refused: u64 = self.refused.get(a..b).unwrap_or_default().iter().sum();
        let requests: u64 = self.requests.get(a..b).unwrap_or_default().iter().sum();
        refused as f64 / requests.max(1) as f64
    }

    fn slices(&self, from: f64, to: f64) -> (usize, usize) {
        let per_second = 1_000 / SLICE_MS;
        let a = (from * per_second as f64) as usize;
        let b = ((to * per_second as f64) as usize).min(self.admitted.len());
        (a.min(b), b)
    }
}

/// A change of the service's rates `at` seconds into the run.
struct Change {
    at: f64,
    per_partition: f64,
    per_account: f64,
}

/// Runs bulk writes for `seconds` with `policy` against a service of `per_partition` and
/// `per_account` entities/s (changed by `changes`). Each writer is `(first, partitions)`: it
/// writes partitions `p{first}`, `p{first + 1}`, … (always with work), with its own 8
/// transactions in flight, sharing the one governor, as concurrent `bulk_write` calls on one
/// account do.
fn simulate(
    policy: ThroughputPolicy,
    (per_partition, per_account): (f64, f64),
    writers: &[(usize, usize)],
    seconds: u64,
    changes: &[Change],
) -> Run {
    let governor = Governor::new(policy);
    let start = Instant::now();
    let mut service = Service::new(per_partition, per_account, start);
    let orders: Vec<Vec<String>> = writers
        .iter()
        .map(|&(first, n)| (first..first + n).map(|i| format!("p{i}")).collect())
        .collect();
    let mut next = vec![0; writers.len()];
    // (writer, slot) for each slot.
    let mut slots: Vec<(usize, Slot)> = (0..writers.len())
        .flat_map(|w| std::iter::repeat_n((w, Slot::Idle), IN_FLIGHT))
        .collect();
    let mut run = Run::default();
    let mut pending = changes.iter().peekable();
    let ticks = Duration::from_secs(seconds).as_millis() / TICK.as_millis();
    for tick in 0..ticks as u32 {
        let now = start + TICK * tick;
        let slice = (u128::from(tick) * TICK.as_millis() / u128::from(SLICE_MS)) as usize;
        while let Some(change) = pending.next_if(|c| now >= start + Duration::from_secs_f64(c.at)) {
            service.set_rates(change.per_partition, change.per_account, now);
        }
        for i in 0..slots.len() {
            if let Slot::InFlight {
                pk,
                answered_at,
                answer,
            } = &slots[i].1
            {
                if *answered_at > now {
                    continue;
                }
                let name = partition_name(TABLE, pk);
                match *answer {
                    Ok(()) => governor.served_at(
                        Some(&name),
                        u64::from(TRANSACTION),
                        false,
                        Some(*answered_at - ROUND_TRIP),
                        now,
                    ),
                    Err(scope) => {
                        let refusal = Refusal { hint: None, scope };
                        governor.throttled_at(
                            &Charge::partition(TABLE, pk, TRANSACTION),
                            refusal,
                            now,
                        );
                    }
                }
                slots[i].1 = Slot::Idle;
            }
            let writer = slots[i].0;
            let order = &orders[writer];
            if matches!(slots[i].1, Slot::Idle) {
                // As a bulk write's scheduler: the next partition in turn with fewer than half
                // the slots and budget now, else the one whose budget is ready soonest.
                let busy = |pk: &str| {
                    slots
                        .iter()
                        .filter(|(w, _)| *w == writer)
                        .filter(|(_, s)| match s {
                            Slot::Waiting(p) | Slot::InFlight { pk: p, .. } => p == pk,
                            Slot::Idle => false,
                        })
                        .count()
                };
                let mut best: Option<(usize, Duration)> = None;
                for step in 0..order.len() {
                    let at = (next[writer] + step) % order.len();
                    if busy(&order[at]) >= IN_FLIGHT / 2 {
                        continue;
                    }
                    let charge = Charge::partition(TABLE, &order[at], TRANSACTION);
                    let wait = governor.try_admit(&charge, now, false);
                    if best.is_none_or(|(_, w)| wait < w) {
                        best = Some((at, wait));
                    }
                    if wait.is_zero() {
                        break;
                    }
                }
                if let Some((at, _)) = best {
                    slots[i].1 = Slot::Waiting(order[at].clone());
                    next[writer] = at + 1;
                }
            }
            if let Slot::Waiting(pk) = &slots[i].1 {
                let pk = pk.clone();
                let charge = Charge::partition(TABLE, &pk, TRANSACTION);
                if governor.try_admit(&charge, now, true).is_zero() {
                    let answer = service.admit(&pk, f64::from(TRANSACTION), now);
                    let admitted = answer.is_ok();
                    Run::bump(&mut run.requests, slice, 1);
                    if admitted {
                        Run::bump(&mut run.admitted, slice, u64::from(TRANSACTION));
                    } else {
                        Run::bump(&mut run.refused, slice, 1);
                    }
                    if now >= start + WARM_UP {
                        *run.by_partition.entry(pk.clone()).or_default() +=
                            if admitted { u64::from(TRANSACTION) } else { 0 };
                    }
                    slots[i].1 = Slot::InFlight {
                        pk,
                        answered_at: now + ROUND_TRIP,
                        answer,
                    };
                }
            }
        }
    }
    run
}

/// The service of the benchmark's model: 200 entities/s per partition, 2,000 per account.
const SERVICE: (f64, f64) = (200.0, 2_000.0);

fn told(per_partition: f64, per_account: f64) -> ThroughputPolicy {
    ThroughputPolicy::default().with_targets(per_partition, per_account)
}

/// After a 10 s warm-up: at least 0.85 of what the service serves, under 2 % refused.
fn assert_discovered(run: &Run, capacity: f64, what: &str) {
    let goodput = run.goodput(10.0, 60.0) / capacity;
    let refused = run.refused_fraction(10.0, 60.0);
    assert!(
        goodput >= 0.85 && refused < 0.02,
        "{what}: goodput {goodput:.3} of the capacity, {:.2} % refused",
        100.0 * refused
    );
}

#[test]
fn budgets_not_told_are_discovered_from_too_high_and_too_low() {
    for (policy, what) in [
        (
            ThroughputPolicy::default(),
            "Azure's targets, 10x the service",
        ),
        (told(400.0, 4_000.0), "told 2x the service"),
        (told(100.0, 1_000.0), "told half the service"),
        (ThroughputPolicy::cosmos(), "no targets"),
    ] {
        for partitions in [10, 100] {
            let run = simulate(policy.clone(), SERVICE, &[(0, partitions)], 60, &[]);
            assert_discovered(&run, 2_000.0, &format!("{what}, {partitions} partitions"));
        }
    }
}

#[test]
fn one_partition_alone_is_held_to_what_it_serves() {
    // One partition carries all the traffic: refusals cut its budget, not only the account's
    // (whose floor, 5 % of its target, is above what the partition serves).
    for (policy, what) in [
        (
            ThroughputPolicy::default(),
            "Azure's targets, 10x the service",
        ),
        (told(400.0, 4_000.0), "told 2x the service"),
        (ThroughputPolicy::cosmos(), "no targets"),
    ] {
        let run = simulate(policy, SERVICE, &[(0, 1)], 60, &[]);
        assert_discovered(&run, SERVICE.0, &format!("{what}, one partition"));
    }
}

#[test]
fn a_budget_told_right_is_kept_without_refusals_before_the_first_probe() {
    // The first probe comes after `probe_after` (4 s) of requests waiting for the budget.
    let run = simulate(told(200.0, 2_000.0), SERVICE, &[(0, 10)], 4, &[]);
    let refused: u64 = run.refused.iter().sum();
    assert_eq!(refused, 0, "the configured target is trusted at first");
    assert!(run.goodput(1.0, 4.0) >= 0.9 * 2_000.0, "{run:?}");
}

#[test]
fn a_budget_that_halves_and_doubles_is_followed_within_ten_seconds() {
    let changes = [
        Change {
            at: 20.0,
            per_partition: 100.0,
            per_account: 1_000.0,
        },
        Change {
            at: 40.0,
            per_partition: 200.0,
            per_account: 2_000.0,
        },
    ];
    let run = simulate(
        ThroughputPolicy::default(),
        SERVICE,
        &[(0, 100)],
        60,
        &changes,
    );
    for (at, capacity) in [(20.0, 1_000.0), (40.0, 2_000.0)] {
        // Recovered: some 2-s window starting after the change and ending within 10 s of it
        // serves at least 0.85 of the new capacity.
        let recovered = (0..=80)
            .map(|tenth| at + f64::from(tenth) / 10.0)
            .find(|from| run.goodput(*from, from + 2.0) >= 0.85 * capacity);
        assert!(
            recovered.is_some(),
            "after the change at {at} s: goodput per second {:?}",
            (0..12)
                .map(|s| run
                    .goodput(at + f64::from(s), at + f64::from(s) + 1.0)
                    .round())
                .collect::<Vec<_>>()
        );
        // And it stays there.
        let settled = run.goodput(at + 10.0, at + 20.0) / capacity;
        assert!(settled >= 0.85, "{settled} of the capacity after {at} s");
    }
    assert!(run.refused_fraction(50.0, 60.0) < 0.02);
}

#[test]
fn without_adaptation_a_budget_told_too_high_is_refused_all_along() {
    let run = simulate(
        ThroughputPolicy::default().with_adaptive(false),
        SERVICE,
        &[(0, 10)],
        30,
        &[],
    );
    assert!(
        run.refused_fraction(10.0, 30.0) > 0.2,
        "the simulation can fail"
    );
}

#[test]
fn one_hot_partition_keeps_its_share_while_the_others_fill_the_account() {
    // One writer on partition p0 alone, another on p1..p99, at the same time.
    let run = simulate(
        ThroughputPolicy::default(),
        SERVICE,
        &[(0, 1), (1, 99)],
        40,
        &[],
    );
    let hot = run.by_partition.get("p0").copied().unwrap_or(0) as f64 / 30.0;
    let total = run.goodput(10.0, 40.0);
    assert!(
        hot >= 0.9 * 200.0 && total >= 0.85 * 2_000.0,
        "hot partition {hot} entities/s, account {total}"
    );
    assert!(run.refused_fraction(10.0, 40.0) < 0.02);
}
