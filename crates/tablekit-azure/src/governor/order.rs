//! The order in which waiting requests are admitted, on a simulated clock: requests arrive at
//! set instants and step as [`Governor::admit`] steps them (again after each wait it is told,
//! never sooner than a millisecond), in the order a timer wakes them when several are due at
//! once — first come first, or last come first. No timing, no requests.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::{Charge, Governor, Step, ThroughputPolicy, Waiter};

/// A request of the simulation.
struct Arrival {
    at: Duration,
    charge: Charge,
    /// Its deadline, from the start.
    until: Option<Duration>,
    /// When its caller gives up waiting (drops the future).
    dropped_at: Option<Duration>,
}

fn arrival(at_ms: u64, charge: Charge) -> Arrival {
    Arrival {
        at: Duration::from_millis(at_ms),
        charge,
        until: None,
        dropped_at: None,
    }
}

/// In which order requests due at the same instant step.
#[derive(Debug, Clone, Copy)]
enum Ties {
    FirstComeFirst,
    LastComeFirst,
}

/// What became of each request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    /// Admitted this long after the start.
    Admitted(Duration),
    Refused(Duration),
    Dropped,
    Waiting,
}

impl Outcome {
    fn admitted(self) -> Duration {
        match self {
            Outcome::Admitted(at) => at,
            other => panic!("not admitted: {other:?}"),
        }
    }
}

/// Runs `arrivals` (in order of arrival) through `governor` for at most a minute.
fn run(governor: &Governor, arrivals: &[Arrival], ties: Ties) -> Vec<Outcome> {
    let start = Instant::now();
    let mut outcomes = vec![Outcome::Waiting; arrivals.len()];
    let mut waiters: Vec<Option<Waiter<'_>>> = arrivals.iter().map(|_| None).collect();
    // (when, tie, request, is a drop)
    let mut due = BinaryHeap::new();
    let tie = |i: usize| match ties {
        Ties::FirstComeFirst => i,
        Ties::LastComeFirst => usize::MAX - i,
    };
    for (i, a) in arrivals.iter().enumerate() {
        due.push(Reverse((a.at, tie(i), i, false)));
        if let Some(at) = a.dropped_at {
            due.push(Reverse((at, tie(i), i, true)));
        }
    }
    while let Some(Reverse((at, _, i, drop))) = due.pop() {
        if at > Duration::from_secs(60) {
            break;
        }
        if outcomes[i] != Outcome::Waiting {
            continue;
        }
        if drop {
            // As dropping the future does, at this instant; those woken step again now.
            let moved_up = waiters[i].take().is_some_and(|mut w| w.leave(start + at));
            outcomes[i] = Outcome::Dropped;
            if moved_up {
                for (j, outcome) in outcomes.iter().enumerate() {
                    if *outcome == Outcome::Waiting && waiters[j].is_some() {
                        due.push(Reverse((at, tie(j), j, false)));
                    }
                }
            }
            continue;
        }
        let a = &arrivals[i];
        let waiter = waiters[i]
            .get_or_insert_with(|| Waiter::new(governor, &a.charge, a.until.map(|u| start + u)));
        match waiter.step(start + at) {
            Step::Admitted => outcomes[i] = Outcome::Admitted(at),
            Step::Refused => outcomes[i] = Outcome::Refused(at),
            Step::Wait(wait) => due.push(Reverse((
                at + wait.max(Duration::from_millis(1)),
                tie(i),
                i,
                false,
            ))),
        }
        if outcomes[i] != Outcome::Waiting {
            waiters[i] = None;
        }
    }
    outcomes
}

/// 100 entities/s for the account, one second deep; 1,000 per partition; no probing.
fn governor(per_partition: f64) -> Governor {
    Governor::new(
        ThroughputPolicy::default()
            .with_targets(per_partition, 100.0)
            .with_utilization(1.0)
            .with_probe(0.0),
    )
}

/// A full account bucket's worth, spent at the start.
fn spend_the_account() -> Arrival {
    arrival(0, Charge::partition("t", "first", 100))
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// Each admitted no later than when its budget could pay for it and for everything that came
/// before it (`rate` entities/s from an empty bucket), give or take the timer's millisecond;
/// in the order they came.
fn assert_first_come_first_served(arrivals: &[Arrival], outcomes: &[Outcome], rate: f64) {
    let mut paid = 0.0;
    let mut last = Duration::ZERO;
    for (i, (a, outcome)) in arrivals.iter().zip(outcomes).enumerate().skip(1) {
        let at = outcome.admitted();
        paid += f64::from(a.charge.upfront_cost());
        let due = Duration::from_secs_f64(paid / rate);
        assert!(
            at <= due + ms(2),
            "request {i} (came at {:?}) admitted at {at:?}, its turn was at {due:?}: {outcomes:?}",
            a.at
        );
        assert!(
            at >= last,
            "request {i} admitted at {at:?}, before one that came earlier (at {last:?}): {outcomes:?}"
        );
        last = at;
    }
}

#[test]
fn a_request_that_came_first_is_admitted_first_though_later_ones_are_smaller() {
    // Half a bucket waits; then requests of a tenth come every 20 ms, five times what the
    // account serves, for 600 ms.
    let mut arrivals = vec![spend_the_account()];
    arrivals.push(arrival(10, Charge::partition("t", "big", 50)));
    for i in 0..30 {
        arrivals.push(arrival(
            30 + 20 * i,
            Charge::partition("t", &format!("p{i}"), 10),
        ));
    }
    for ties in [Ties::FirstComeFirst, Ties::LastComeFirst] {
        let outcomes = run(&governor(1_000.0), &arrivals, ties);
        assert_eq!(outcomes[0], Outcome::Admitted(Duration::ZERO));
        // The big one's turn is after 0.5 s of the account's budget, not after everything.
        assert!(outcomes[1].admitted() <= ms(502), "{ties:?}: {outcomes:?}");
        assert_first_come_first_served(&arrivals, &outcomes, 100.0);
    }
}

#[test]
fn equal_requests_are_admitted_in_the_order_they_came_however_the_timer_wakes_them() {
    // 30 requests of a tenth of the bucket, one every 20 ms: the last waits about 30 slots.
    let mut arrivals = vec![spend_the_account()];
    for i in 0..30 {
        arrivals.push(arrival(
            1 + 20 * i,
            Charge::partition("t", &format!("p{i}"), 10),
        ));
    }
    for ties in [Ties::FirstComeFirst, Ties::LastComeFirst] {
        let outcomes = run(&governor(1_000.0), &arrivals, ties);
        assert_first_come_first_served(&arrivals, &outcomes, 100.0);
        let longest = arrivals
            .iter()
            .zip(&outcomes)
            .skip(1)
            .map(|(a, o)| o.admitted() - a.at)
            .max()
            .unwrap();
        assert!(
            longest <= ms(30 * 100 + 2),
            "{ties:?}: waited up to {longest:?}"
        );
    }
}

/// Checks that what was admitted by each admission never exceeded a full bucket of `rate`
/// entities/s (one second deep) plus its refill since the start.
fn assert_within(
    arrivals: &[Arrival],
    outcomes: &[Outcome],
    rate: f64,
    of: impl Fn(&Charge) -> bool,
) {
    let mut admitted: Vec<(Duration, u32)> = arrivals
        .iter()
        .zip(outcomes)
        .filter(|(a, _)| of(&a.charge))
        .filter_map(|(a, o)| match o {
            Outcome::Admitted(at) => Some((*at, a.charge.upfront_cost())),
            _ => None,
        })
        .collect();
    admitted.sort();
    let mut sum = 0.0;
    for (at, cost) in admitted {
        sum += f64::from(cost);
        // A cost above the bucket's depth is admitted on a full bucket.
        let allowed = rate + rate * at.as_secs_f64() + f64::from(cost) - f64::from(cost).min(rate);
        assert!(
            sum <= allowed + 1e-6,
            "{sum} admitted by {at:?}: {outcomes:?}"
        );
    }
}

#[test]
fn a_request_waiting_for_its_partition_does_not_hold_up_the_others() {
    // "hot" serves 10 entities/s: its second and third requests wait 1 and 2 s for it. The
    // others, which came after them, are admitted at the account's pace meanwhile.
    let mut arrivals = vec![spend_the_account()];
    for i in 0..3 {
        arrivals.push(arrival(1 + i, Charge::partition("t", "hot", 10)));
    }
    for i in 0..5 {
        arrivals.push(arrival(
            10 + 10 * i,
            Charge::partition("t", &format!("c{i}"), 10),
        ));
    }
    for ties in [Ties::FirstComeFirst, Ties::LastComeFirst] {
        let outcomes = run(&governor(10.0), &arrivals, ties);
        let at = |i: usize| outcomes[i].admitted();
        assert!(at(1) <= ms(102), "{ties:?}: {outcomes:?}");
        for (i, turn) in (4..9).zip(2..) {
            assert!(at(i) <= ms(100 * turn + 2), "{ties:?}: {outcomes:?}");
        }
        assert!(
            at(2) >= ms(1_001) && at(2) <= ms(1_003),
            "{ties:?}: {outcomes:?}"
        );
        assert!(
            at(3) >= ms(2_001) && at(3) <= ms(2_003),
            "{ties:?}: {outcomes:?}"
        );
        assert_within(&arrivals, &outcomes, 100.0, |_| true);
        assert_within(&arrivals[1..], &outcomes[1..], 10.0, |c| {
            c.partition_key() == Some("t/hot")
        });
    }
}

#[test]
fn a_request_that_leaves_the_line_gives_its_place_to_those_behind() {
    // Slots of 100 ms: the second request's caller gives up at 50 ms; the ones behind it move
    // up a slot, and one that comes later is not delayed by it.
    let mut arrivals = vec![spend_the_account()];
    for i in 0..4 {
        arrivals.push(arrival(1 + i, Charge::partition("t", &format!("p{i}"), 10)));
    }
    arrivals[2].dropped_at = Some(ms(50));
    arrivals.push(arrival(250, Charge::partition("t", "late", 10)));
    for ties in [Ties::FirstComeFirst, Ties::LastComeFirst] {
        let outcomes = run(&governor(1_000.0), &arrivals, ties);
        assert_eq!(outcomes[2], Outcome::Dropped);
        let at = |i: usize| outcomes[i].admitted();
        for (i, turn) in [(1, 100), (3, 200), (4, 300), (5, 400)] {
            assert!(
                at(i) >= ms(turn) && at(i) <= ms(turn + 2),
                "{ties:?}: request {i} at {:?}, its turn {turn} ms: {outcomes:?}",
                at(i)
            );
        }
    }
}

#[test]
fn a_request_that_cannot_be_admitted_by_its_deadline_is_refused_and_takes_nothing() {
    let mut arrivals = vec![spend_the_account()];
    for i in 0..3 {
        arrivals.push(arrival(1 + i, Charge::partition("t", &format!("p{i}"), 10)));
    }
    // Its turn would be at 400 ms.
    arrivals.push(Arrival {
        until: Some(ms(250)),
        ..arrival(4, Charge::partition("t", "hurried", 10))
    });
    arrivals.push(arrival(5, Charge::partition("t", "next", 10)));
    let outcomes = run(&governor(1_000.0), &arrivals, Ties::FirstComeFirst);
    assert_eq!(
        outcomes[4],
        Outcome::Refused(ms(4)),
        "at once: {outcomes:?}"
    );
    let next = outcomes[5].admitted();
    assert!(next >= ms(400) && next <= ms(402), "{outcomes:?}");
}

#[test]
fn a_request_refused_in_the_accounts_line_gives_back_its_partitions_tokens() {
    // "p" serves 20 entities/s. The first request passes it (taking half its bucket) and
    // waits in the account's line; a pause of the account then makes it miss its deadline.
    let g = governor(20.0);
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    assert_eq!(
        g.try_admit(&Charge::partition("t", "first", 100), start, true),
        Duration::ZERO
    );
    let charge = Charge::partition("t", "p", 10);
    let mut waiter = Waiter::new(&g, &charge, Some(at(500)));
    assert_eq!(waiter.step(at(1)), Step::Wait(ms(99)));
    g.throttled_at(&Charge::account(1), Some(Duration::from_secs(1)), at(50));
    assert_eq!(waiter.step(at(100)), Step::Refused);
    // A full bucket of "p" is there again (the account's pause aside).
    let mut state = g.lock();
    let requests = state.requests;
    let scope = state.partition("t/p", &g.policy, at(100));
    assert_eq!(
        scope.budget.wait_for(20.0, at(100), requests, &g.policy),
        Duration::ZERO
    );
}
