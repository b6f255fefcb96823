//! Fault schedules: what happens to which request of a run, enumerated exhaustively (one fault
//! at every request) or drawn at random from a seed.

use std::fmt;

use super::recorder::Record;

/// What can happen to one request of an explored run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Step {
    /// Refused before any work: 503 `ServerBusy`.
    Refuse503,
    /// Refused with 500 `OperationTimedOut` (not applied, but the client cannot know).
    Refuse500,
    /// The connection is reset before the request is sent: never applied.
    Reset,
    /// Applied, and its response lost.
    LoseResponse,
    /// Held past the client's request timeout, then applied: the client retried or gave up
    /// meanwhile.
    ApplyLate,
    /// Held past the operation's deadline, then applied — as late as the service allows (a
    /// request is finished within the `timeout` it carries; without one, it is applied after
    /// the deadline).
    ApplyPastDeadline,
    /// The process stops just before this request: it and everything after it in this
    /// process never happen (the future is dropped, the worker killed); recovery runs in a
    /// new process.
    Stop,
    /// The scenario's concurrent actor number `n` (a second writer, a second worker) runs to
    /// completion while this request is held, then the request goes on.
    Actor(u8),
    /// An entity query's answer is cut after this many entities, with a continuation to the
    /// next one (an empty page with a continuation for 0).
    SplitPage(u32),
    /// An outage: the fault hits this request and the next ones, as many as the client's
    /// retry policy makes attempts, so the request it starts fails after all its retries
    /// (when nothing else runs in between).
    Outage(Outage),
}

/// The faults an [`Step::Outage`] repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Outage {
    /// Every attempt refused with 503.
    Refused,
    /// Every attempt's connection reset before sending.
    Reset,
    /// Every attempt applied, its response lost.
    ResponsesLost,
    /// Every attempt held past the client's timeout, then applied.
    Late,
}

impl Outage {
    /// Every outage.
    pub const ALL: [Outage; 4] = [
        Outage::Refused,
        Outage::Reset,
        Outage::ResponsesLost,
        Outage::Late,
    ];

    /// The step each request of the outage gets.
    pub fn step(self) -> Step {
        match self {
            Outage::Refused => Step::Refuse503,
            Outage::Reset => Step::Reset,
            Outage::ResponsesLost => Step::LoseResponse,
            Outage::Late => Step::ApplyLate,
        }
    }
}

impl Step {
    /// The faults of single-fault exploration that apply to any request.
    pub const FAULTS: [Step; 7] = [
        Step::Refuse503,
        Step::Refuse500,
        Step::Reset,
        Step::LoseResponse,
        Step::ApplyLate,
        Step::ApplyPastDeadline,
        Step::Stop,
    ];

    /// The name used in reports: the step's kind, without its argument.
    pub fn kind(self) -> &'static str {
        match self {
            Step::Refuse503 => "503",
            Step::Refuse500 => "500 OperationTimedOut",
            Step::Reset => "reset before sending",
            Step::LoseResponse => "response lost",
            Step::ApplyLate => "applied late",
            Step::ApplyPastDeadline => "applied past the deadline",
            Step::Stop => "process stopped",
            Step::Actor(_) => "concurrent actor",
            Step::SplitPage(_) => "page split",
            Step::Outage(Outage::Refused) => "outage: refused",
            Step::Outage(Outage::Reset) => "outage: resets",
            Step::Outage(Outage::ResponsesLost) => "outage: responses lost",
            Step::Outage(Outage::Late) => "outage: applied late",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Actor(n) => write!(f, "actor {n}"),
            Step::SplitPage(keep) => write!(f, "page split after {keep}"),
            other => f.write_str(other.kind()),
        }
    }
}

/// The faults of one run: at request `k` (1-based, counted over the table, queue and blob
/// requests of the operation and its recovery, in the order they reach the service), `step`.
///
/// Built by [`Schedule::none`], [`Schedule::one`], [`single_fault`] and [`random`]; the steps
/// are public for reading.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Schedule {
    /// `(k, step)` pairs; at most one per request.
    pub steps: Vec<(u64, Step)>,
}

impl Schedule {
    /// No fault: the baseline run.
    pub fn none() -> Self {
        Self::default()
    }

    /// One step at request `k`.
    pub fn one(k: u64, step: Step) -> Self {
        Self {
            steps: vec![(k, step)],
        }
    }

    /// The step at request `k`, if any, with outages of `span` requests spelled out into
    /// the step of each of their requests. A step scheduled at `k` itself wins over an
    /// outage covering it.
    pub fn at(&self, k: u64, span: u64) -> Option<Step> {
        let exact = self.steps.iter().find(|(at, _)| *at == k).map(|(_, s)| *s);
        match exact {
            Some(Step::Outage(outage)) => Some(outage.step()),
            Some(step) => Some(step),
            None => self.steps.iter().find_map(|(at, step)| match step {
                Step::Outage(outage) if *at < k && k < at + span => Some(outage.step()),
                _ => None,
            }),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.steps.is_empty() {
            return f.write_str("no fault");
        }
        for (i, (k, step)) in self.steps.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{step} at request {k}")?;
        }
        Ok(())
    }
}

/// Every single-fault schedule of a run whose fault-free requests are `baseline`: each fault
/// of [`Step::FAULTS`] and each [`Outage`] at every request (late applies only at requests
/// that write), each of `actors` concurrent actors before every request, and every query page
/// that held entities cut after none, one, half and all but one of them.
pub fn single_fault(baseline: &[Record], actors: u8) -> Vec<Schedule> {
    let mut out = Vec::new();
    for record in baseline {
        let k = record.seq;
        for step in Step::FAULTS {
            let late = matches!(step, Step::ApplyLate | Step::ApplyPastDeadline);
            if late && !record.writes() {
                continue;
            }
            out.push(Schedule::one(k, step));
        }
        for outage in Outage::ALL {
            if outage == Outage::Late && !record.writes() {
                continue;
            }
            out.push(Schedule::one(k, Step::Outage(outage)));
        }
        for actor in 0..actors {
            out.push(Schedule::one(k, Step::Actor(actor)));
        }
        if let Some(n) = record.entities.filter(|&n| n > 0) {
            let mut keeps = vec![0, 1, n / 2, n - 1];
            keeps.retain(|&keep| keep < n);
            keeps.sort_unstable();
            keeps.dedup();
            for keep in keeps {
                out.push(Schedule::one(
                    k,
                    Step::SplitPage(u32::try_from(keep).unwrap_or(u32::MAX)),
                ));
            }
        }
    }
    out
}

/// Random schedule number `index` for `seed`: 2 or 3 faults at distinct requests among the
/// first `requests + 3` (a faulted run sends more than the fault-free one), and with even odds
/// one of `actors` concurrent actors at another. The same seed, index and inputs give the
/// same schedule.
pub fn random(seed: u64, index: u64, scenario: &str, requests: u64, actors: u8) -> Schedule {
    let mut rng = SplitMix64(seed ^ fnv(scenario) ^ SplitMix64(index).next());
    let span = requests.max(1) + 3;
    let faults = 2 + rng.below(2);
    let mut steps: Vec<(u64, Step)> = Vec::new();
    let draw_k = |rng: &mut SplitMix64, steps: &[(u64, Step)]| loop {
        let k = 1 + rng.below(span);
        if steps.iter().all(|(at, _)| *at != k) {
            break k;
        }
    };
    for _ in 0..faults {
        let k = draw_k(&mut rng, &steps);
        let pick = rng.below((Step::FAULTS.len() + Outage::ALL.len()) as u64) as usize;
        let step = match Step::FAULTS.get(pick) {
            Some(step) => *step,
            None => Step::Outage(Outage::ALL[pick - Step::FAULTS.len()]),
        };
        steps.push((k, step));
    }
    if actors > 0 && rng.below(2) == 0 {
        let k = draw_k(&mut rng, &steps);
        steps.push((k, Step::Actor(rng.below(u64::from(actors)) as u8)));
    }
    steps.sort_by_key(|(k, _)| *k);
    Schedule { steps }
}

/// FNV-1a of a name: mixes the scenario into a random schedule's seed.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The splitmix64 generator: small and good enough to spread schedules; no cryptographic use.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, method: &str, entities: Option<usize>) -> Record {
        Record {
            seq,
            service: "table".into(),
            method: method.into(),
            path: "/a/T()".into(),
            step: None,
            status: Some(200),
            forwarded: true,
            entities,
        }
    }

    #[test]
    fn single_faults_cover_every_request_and_split_every_page() {
        let baseline = [record(1, "POST", None), record(2, "GET", Some(5))];
        let all = single_fault(&baseline, 2);
        // Request 1 (a write): 7 faults, 4 outages, 2 actors. Request 2 (a read of 5
        // entities): 5 faults and 3 outages (no late applies), 2 actors, splits after 0, 1,
        // 2 and 4.
        assert_eq!(all.len(), 13 + 10 + 4);
        assert!(all.contains(&Schedule::one(1, Step::ApplyPastDeadline)));
        assert!(!all.contains(&Schedule::one(2, Step::ApplyLate)));
        for keep in [0, 1, 2, 4] {
            assert!(all.contains(&Schedule::one(2, Step::SplitPage(keep))));
        }
        assert!(!all.contains(&Schedule::one(2, Step::SplitPage(5))));
        assert!(!all.contains(&Schedule::one(2, Step::Outage(Outage::Late))));
    }

    #[test]
    fn an_outage_covers_the_attempts_of_a_request_and_a_step_of_its_own_wins() {
        let s = Schedule {
            steps: vec![
                (2, Step::Outage(Outage::ResponsesLost)),
                (4, Step::Refuse503),
            ],
        };
        let steps: Vec<Option<Step>> = (1..=7).map(|k| s.at(k, 4)).collect();
        let lost = Some(Step::LoseResponse);
        assert_eq!(
            steps,
            [None, lost, lost, Some(Step::Refuse503), lost, None, None]
        );
    }

    #[test]
    fn random_schedules_replay_and_differ() {
        let a = random(7, 3, "x", 10, 1);
        assert_eq!(a, random(7, 3, "x", 10, 1));
        let distinct: std::collections::HashSet<_> =
            (0..50).map(|i| random(7, i, "x", 10, 1)).collect();
        assert!(distinct.len() > 40);
        for i in 0..200 {
            let s = random(11, i, "y", 4, 2);
            let faults = s
                .steps
                .iter()
                .filter(|(_, st)| !matches!(st, Step::Actor(_)));
            assert!((2..=3).contains(&faults.count()), "{s}");
            let mut ks: Vec<u64> = s.steps.iter().map(|(k, _)| *k).collect();
            assert!(ks.iter().all(|&k| (1..=7).contains(&k)));
            ks.dedup();
            assert_eq!(ks.len(), s.steps.len(), "distinct requests: {s}");
        }
        assert_ne!(random(7, 3, "x", 10, 1), random(7, 3, "z", 10, 1));
    }
}
