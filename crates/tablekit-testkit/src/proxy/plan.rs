//! Which requests get which fault: rules, the n-th-request shortcut and seeded random faults.

use std::time::Duration;

/// A fault the proxy can inject into one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// Closes the client connection (abortively, with a TCP reset) instead of forwarding the
    /// request: upstream never sees it, the client sees the connection fail.
    Reset,
    /// Waits this long, then forwards the request normally (on a new upstream connection if
    /// upstream closed the idle one meanwhile).
    Delay(Duration),
    /// Answers with a synthetic error response of this status in the Table service's JSON error
    /// format, without contacting upstream. The error code follows the status: 400
    /// `InvalidInput`, 403 `AuthenticationFailed`, 404 `ResourceNotFound`, 408 and 500
    /// `OperationTimedOut`, 409 `EntityAlreadyExists`, 412 `UpdateConditionNotSatisfied`,
    /// 413 `RequestBodyTooLarge`, 503 `ServerBusy`, other 4xx `InvalidInput`, other 5xx
    /// `InternalError`. The message of a 503 names neither the account nor a partition
    /// (`tablekit_core::ThrottleScope::Unspecified`); the throttle model's refusals do.
    Status(u16),
    /// Forwards the request, reads the complete upstream response (so the operation took effect)
    /// and closes the client connection (with a reset, as [`Fault::Reset`]) without sending any
    /// of the response.
    DropResponse,
    /// Holds the request and never forwards it: the client gets no answer until it gives up
    /// and closes the connection. Stands for a client process that stopped (or lost its
    /// network) just before this request: everything before it happened, it never does.
    Hang,
    /// Forwards the request; when it is an entity query whose answer holds more than `keep`
    /// entities, the client gets only the first `keep` of them (possibly none) with a
    /// continuation pointing at the next one, as Azure answers at partition-range boundaries
    /// and after about five seconds of work. The next page, asked for with that
    /// continuation, starts there. Other requests and shorter pages pass unchanged.
    SplitPage {
        /// Entities left on the page.
        keep: u32,
    },
}

/// Which requests a [`Rule`] applies to. Every `None` field matches anything, so
/// [`Matcher::any`] (or `Matcher::default()`) matches every request; the `with_*` setters
/// narrow it. The fields are public for reading; build one from [`Matcher::any`].
///
/// ```
/// use tablekit_testkit::Matcher;
///
/// let table_puts = Matcher::any().with_method("PUT").with_path_contains("/Tables");
/// assert!(table_puts.matches("put", "/devstoreaccount1/Tables", ""));
/// assert!(!table_puts.matches("GET", "/devstoreaccount1/Tables", ""));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Matcher {
    /// The request method, compared ignoring ASCII case (`"PUT"`, `"GET"`, …).
    pub method: Option<String>,
    /// A substring of the request path (the target before any `?`), e.g. `"/Tables"`.
    pub path_contains: Option<String>,
    /// A substring of the query string (after the `?`, exactly as sent), e.g. `"comp=list"`.
    pub query_contains: Option<String>,
}

impl Matcher {
    /// A matcher that accepts every request.
    pub fn any() -> Self {
        Self::default()
    }

    /// Also requires this method (ignoring ASCII case).
    #[must_use]
    pub fn with_method(mut self, method: impl Into<String>) -> Self {
        self.method = Some(method.into());
        self
    }

    /// Also requires the path to contain `needle`.
    #[must_use]
    pub fn with_path_contains(mut self, needle: impl Into<String>) -> Self {
        self.path_contains = Some(needle.into());
        self
    }

    /// Also requires the query string to contain `needle`.
    #[must_use]
    pub fn with_query_contains(mut self, needle: impl Into<String>) -> Self {
        self.query_contains = Some(needle.into());
        self
    }

    /// Whether a request with this method, path and query matches.
    pub fn matches(&self, method: &str, path: &str, query: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
            && self
                .query_contains
                .as_deref()
                .is_none_or(|q| query.contains(q))
    }
}

/// Which of the requests a rule sees it faults. Counts are 1-based; a count of 0 never occurs.
///
/// More selections may be added (every k-th request, say), so a `match` on it needs a
/// wildcard arm; [`Occurrences::selects`] answers for every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Occurrences {
    /// Only the k-th.
    Nth(u64),
    /// Every one.
    All,
    /// The k-th and every later one.
    FromNth(u64),
    /// The a-th through the b-th, both included.
    Range(u64, u64),
}

impl Occurrences {
    /// Whether the `count`-th request a rule sees (1-based) is faulted.
    pub fn selects(self, count: u64) -> bool {
        match self {
            Self::Nth(k) => count == k,
            Self::All => true,
            Self::FromNth(k) => count >= k,
            Self::Range(a, b) => (a..=b).contains(&count),
        }
    }
}

/// A fault-injection rule: the requests it matches, which of them it faults, and how.
///
/// Rules are checked in the order they were added. A rule *sees* a request when no earlier rule
/// faulted it and its matcher accepts it; [`Occurrences`] count the requests the rule has seen,
/// over all connections, since the rule was added. The first rule that selects a request
/// faults it.
///
/// Build one with [`Rule::new`]; the fields are public for reading.
///
/// ```no_run
/// use std::net::SocketAddr;
/// use tablekit_testkit::{Fault, FaultProxy, Matcher, Occurrences, Rule};
///
/// let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], 10002)))?;
/// // The second and third batch requests are answered 503 ServerBusy.
/// proxy.add_rule(Rule::new(
///     Matcher::any().with_path_contains("$batch"),
///     Occurrences::Range(2, 3),
///     Fault::Status(503),
/// ));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rule {
    /// The requests the rule considers.
    pub matcher: Matcher,
    /// Which of the considered requests it faults.
    pub occurrences: Occurrences,
    /// The fault to inject.
    pub fault: Fault,
}

impl Rule {
    /// A rule that injects `fault` into the requests `matcher` accepts that `occurrences`
    /// selects.
    pub fn new(matcher: Matcher, occurrences: Occurrences, fault: Fault) -> Self {
        Self {
            matcher,
            occurrences,
            fault,
        }
    }
}

#[derive(Debug)]
struct ActiveRule {
    rule: Rule,
    seen: u64,
}

#[derive(Debug)]
struct RandomFaults {
    rate: f64,
    faults: Vec<Fault>,
    seed: u64,
    seen: u64,
}

/// The rules and random settings in force, with their counters. Guarded by one mutex so a
/// request's decision and the counters it advances are consistent across connections.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    rules: Vec<ActiveRule>,
    random: Option<RandomFaults>,
}

impl Plan {
    pub(crate) fn add_rule(&mut self, rule: Rule) {
        self.rules.push(ActiveRule { rule, seen: 0 });
    }

    pub(crate) fn set_random(&mut self, rate: f64, faults: Vec<Fault>, seed: u64) {
        // NaN would compare false everywhere; treat it as "never".
        let rate = if rate.is_nan() {
            0.0
        } else {
            rate.clamp(0.0, 1.0)
        };
        self.random = Some(RandomFaults {
            rate,
            faults,
            seed,
            seen: 0,
        });
    }

    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    /// Decides the fault for the next request and advances the counters it passes.
    pub(crate) fn decide(&mut self, method: &str, path: &str, query: &str) -> Option<Fault> {
        // Random mode numbers every request since `set_random`, faulted by a rule or not, so
        // the numbers a seed faults do not shift when rules change.
        let random_pick = self.random.as_mut().and_then(|r| {
            r.seen += 1;
            random_fault(r.seed, r.seen, r.rate, &r.faults)
        });
        for active in &mut self.rules {
            if !active.rule.matcher.matches(method, path, query) {
                continue;
            }
            active.seen += 1;
            if active.rule.occurrences.selects(active.seen) {
                return Some(active.rule.fault);
            }
        }
        random_pick
    }
}

/// The random-mode decision for request `seq`: a pure function of the seed and the number, so a
/// run can be replayed exactly.
fn random_fault(seed: u64, seq: u64, rate: f64, faults: &[Fault]) -> Option<Fault> {
    if faults.is_empty() {
        return None;
    }
    let mut rng = SplitMix64(seed ^ SplitMix64(seq).next());
    // 53 random bits give every f64 in [0, 1) on a uniform grid.
    let draw = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    if draw >= rate {
        return None;
    }
    let index = rng.next() % faults.len() as u64;
    faults.get(usize::try_from(index).ok()?).copied()
}

/// The splitmix64 generator: tiny, fast, and good enough to spread fault decisions; no
/// cryptographic use.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occurrences_select_the_documented_counts() {
        let picked = |o: Occurrences| (1..=8).filter(|&c| o.selects(c)).collect::<Vec<_>>();
        assert_eq!(picked(Occurrences::Nth(3)), [3]);
        assert_eq!(picked(Occurrences::Nth(0)), Vec::<u64>::new());
        assert_eq!(picked(Occurrences::All), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(picked(Occurrences::FromNth(6)), [6, 7, 8]);
        assert_eq!(picked(Occurrences::Range(2, 4)), [2, 3, 4]);
        assert_eq!(picked(Occurrences::Range(4, 2)), Vec::<u64>::new());
    }

    #[test]
    fn matcher_fields_all_have_to_match() {
        let m = Matcher::any()
            .with_method("put")
            .with_path_contains("/Tables")
            .with_query_contains("comp=");
        assert!(m.matches("PUT", "/devstoreaccount1/Tables", "comp=x"));
        assert!(!m.matches("GET", "/devstoreaccount1/Tables", "comp=x"));
        assert!(!m.matches("PUT", "/devstoreaccount1/x", "comp=x"));
        assert!(!m.matches("PUT", "/devstoreaccount1/Tables", ""));
        assert!(Matcher::any().matches("DELETE", "/", ""));
    }

    #[test]
    fn later_rules_count_only_requests_earlier_rules_let_through() {
        let mut plan = Plan::default();
        plan.add_rule(Rule::new(Matcher::any(), Occurrences::Nth(2), Fault::Reset));
        plan.add_rule(Rule::new(
            Matcher::any(),
            Occurrences::Nth(2),
            Fault::DropResponse,
        ));
        let got: Vec<_> = (0..5).map(|_| plan.decide("GET", "/", "")).collect();
        // Request 2 is the first rule's; the second rule sees 1, 3, 4, … and takes request 3.
        assert_eq!(
            got,
            [
                None,
                Some(Fault::Reset),
                Some(Fault::DropResponse),
                None,
                None
            ]
        );
    }

    #[test]
    fn unmatched_requests_do_not_advance_a_rule() {
        let mut plan = Plan::default();
        let puts = Matcher::any().with_method("PUT");
        plan.add_rule(Rule::new(puts, Occurrences::Nth(2), Fault::Status(503)));
        assert_eq!(plan.decide("PUT", "/", ""), None);
        assert_eq!(plan.decide("GET", "/", ""), None);
        assert_eq!(plan.decide("PUT", "/", ""), Some(Fault::Status(503)));
        plan.clear();
        assert_eq!(plan.decide("PUT", "/", ""), None);
    }

    #[test]
    fn random_decisions_replay_for_a_seed_and_differ_between_seeds() {
        let faults = [Fault::Reset, Fault::Status(503)];
        let run = |seed| {
            (1..=2000)
                .filter(|&n| random_fault(seed, n, 0.1, &faults).is_some())
                .collect::<Vec<u64>>()
        };
        let (a, b, c) = (run(7), run(7), run(8));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!((150..=250).contains(&a.len()), "{} of 2000", a.len());
        let kinds: std::collections::HashSet<_> = (1..=2000)
            .filter_map(|n| random_fault(7, n, 0.1, &faults))
            .collect();
        assert_eq!(kinds.len(), 2, "both faults are chosen");
        assert!((1..=100).all(|n| random_fault(7, n, 0.0, &faults).is_none()));
        assert!((1..=100).all(|n| random_fault(7, n, 1.0, &faults).is_some()));
    }

    #[test]
    fn random_mode_restarts_its_numbering_when_set_again() {
        let mut plan = Plan::default();
        let run = |plan: &mut Plan| {
            plan.set_random(0.3, vec![Fault::Reset], 42);
            (0..50)
                .map(|_| plan.decide("GET", "/", ""))
                .collect::<Vec<_>>()
        };
        let first = run(&mut plan);
        assert_eq!(first, run(&mut plan));
        plan.set_random(f64::NAN, vec![Fault::Reset], 42);
        assert_eq!(plan.decide("GET", "/", ""), None);
    }
}
