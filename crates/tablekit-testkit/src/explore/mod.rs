//! The fault-schedule explorer (feature `azure`): runs an operation once without faults —
//! with its documented recovery — recording its requests, then once per (request × fault),
//! or per seeded random multi-fault schedule, and checks the operation's invariants after
//! every run.
//!
//! A [`Scenario`] prepares the state an operation starts from, performs the operation
//! through an account whose every request passes the explorer's proxies, recovers as the
//! documentation says a caller does (drains workers, repairs, retries what was reported
//! unknown), and checks what must hold afterwards, reading through an account the proxies do
//! not see. [`explore`] runs a scenario under a [`Plan`] and reports every violated
//! schedule with the requests of its run.
//!
//! Each run has tables, queues and containers of its own (the scenario names them with
//! [`unique_table_name`](crate::unique_table_name) and its kin) and proxies of its own, so
//! runs go on in parallel on one emulator.

mod recorder;
mod schedule;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tablekit_azure::{Account, RetryPolicy, Settings, ThroughputPolicy};

pub use recorder::Record;
pub use schedule::{Outage, Schedule, Step, random, single_fault};

use crate::fixtures::{self, Proxied};
use recorder::{ActorCall, Holds, Recorder};

/// The settings explored accounts use unless a scenario chooses others: a 1 s request
/// timeout and three fast retries, so that late applies and deadlines come within seconds,
/// and no throughput budgets.
pub fn settings() -> Settings {
    Settings::default()
        .with_retry(
            RetryPolicy::default()
                .with_schedule([25, 50, 100].map(Duration::from_millis).to_vec())
                .with_jitter(0.2)
                .with_immediate_first_retry_on_connection_error(true)
                .with_max_retry_after(Duration::from_millis(100)),
        )
        .with_request_timeout(Duration::from_secs(1))
        .with_concurrency(4)
        .with_throughput(ThroughputPolicy::unlimited())
}

/// How often the steps no fault is meant to reach — making the state, the last fault-free
/// recovery, reading the state to judge it — are tried when a request of theirs fails: a
/// slow emulator on a busy machine is no fault of the schedule.
const UNFAULTED_TRIES: u32 = 3;

/// Whether `message` is a request that did not complete (a timeout, a reset), rather than
/// an answer: what a check may try again.
fn incomplete(message: &str) -> bool {
    message.contains("transport error") || message.contains("did not complete")
}

/// One operation to explore, with what it starts from, how a caller recovers, and what must
/// hold afterwards.
///
/// `Ctx` is plain data (names, values) made by [`prepare`](Scenario::prepare); every phase
/// builds its handles from the account it is given, because after a [`Step::Stop`] the
/// recovery runs with a new account, as a new process would.
pub trait Scenario: Send + Sync + 'static {
    /// What [`prepare`](Scenario::prepare) made: names and values the phases share.
    type Ctx: Send + Sync + 'static;
    /// What [`operate`](Scenario::operate) returned, as the checks need it.
    type Report: fmt::Debug + Send + Sync + 'static;

    /// A stable name: `index.intra.relocate`.
    fn name(&self) -> &'static str;

    /// What [`check`](Scenario::check) proves, in one sentence, for the report.
    fn invariant(&self) -> &'static str;

    /// The settings of the explored (and the direct) account. Default [`settings`].
    fn settings(&self) -> Settings {
        settings()
    }

    /// How late [`Step::ApplyPastDeadline`] holds a request: past every deadline the
    /// operation has. Default: twice [`Settings::write_settles_within`] plus 2 s (an index
    /// job's deadline is twice that plus a clock allowance).
    fn deadline(&self) -> Duration {
        self.settings().write_settles_within() * 2 + Duration::from_secs(2)
    }

    /// The number of concurrent actors ([`Scenario::act`]); 0 by default.
    fn actors(&self) -> u8 {
        0
    }

    /// What a test suite runs of this scenario: every single-fault schedule by default. A
    /// scenario whose every run takes many seconds by design (one that waits out a
    /// throughput budget past a deadline) may ask for a seeded random sample instead, when
    /// another scenario explores the same operation's single faults.
    fn suite_plan(&self) -> Plan {
        Plan::SingleFaults
    }

    /// Makes the state the operation starts from, through `direct` (not faulted, not
    /// counted; tried again after a failure: a slow emulator is no fault of the schedule).
    fn prepare(&self, direct: &Account) -> impl Future<Output = Result<Self::Ctx, String>> + Send;

    /// The operation, through `account`: every request passes the proxies.
    fn operate(
        &self,
        ctx: &Self::Ctx,
        account: &Account,
    ) -> impl Future<Output = Self::Report> + Send;

    /// What a caller does afterwards, per the documentation: drain the workers, repair,
    /// retry what was reported unknown. `report` is `None` when the process stopped during
    /// the operation. Its requests are counted and faulted too; an `Err` (or a stop) runs it
    /// again in a new process a second later, up to five times. Once every request held in
    /// the network has landed, it runs once more without faults (a caller's workers keep
    /// running), so it must be safe to run again.
    fn recover(
        &self,
        ctx: &Self::Ctx,
        account: &Account,
        report: Option<&Self::Report>,
    ) -> impl Future<Output = Result<(), String>> + Send {
        let _ = (ctx, account, report);
        async { Ok(()) }
    }

    /// Concurrent actor `actor`: runs through `direct` while the scheduled request is held.
    fn act(&self, ctx: &Self::Ctx, direct: &Account, actor: u8) -> impl Future<Output = ()> + Send {
        let _ = (ctx, direct, actor);
        async {}
    }

    /// What must hold once recovery ran and every request held in the network has landed,
    /// read through `direct` (tried again when a request of it did not complete). `baseline` is
    /// the fault-free run's report (`None` while that run is being made).
    fn check(
        &self,
        ctx: &Self::Ctx,
        direct: &Account,
        report: Option<&Self::Report>,
        baseline: Option<&Self::Report>,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

/// Which schedules [`explore`] runs. More plans may be added, so a `match` on it needs a
/// wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Plan {
    /// Every single-fault schedule of the fault-free run ([`single_fault`]).
    SingleFaults,
    /// Every `stride`-th single-fault schedule — the first, then every `stride`-th after it:
    /// a deterministic part of [`SingleFaults`](Plan::SingleFaults) for a scenario whose every
    /// run takes seconds, numbered as in the whole plan.
    SingleFaultsEvery {
        /// One schedule in this many runs (1: all of them).
        stride: u64,
    },
    /// `count` random schedules of 2–3 faults and maybe an actor ([`random`]).
    Random {
        /// The seed.
        seed: u64,
        /// How many.
        count: u64,
    },
    /// Random schedule `index` of `seed` alone.
    Replay {
        /// The seed.
        seed: u64,
        /// The schedule's number.
        index: u64,
    },
}

/// A schedule whose run broke the scenario's invariant.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Violation {
    /// Its number in the plan (for [`Plan::Random`], the `--replay` index).
    pub index: u64,
    /// The schedule.
    pub schedule: Schedule,
    /// What the check (or the run) said.
    pub message: String,
    /// What the operation returned.
    pub report: String,
    /// The requests of the run.
    pub requests: Vec<Record>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "schedule #{} — {}", self.index, self.schedule)?;
        writeln!(f, "  violated: {}", self.message)?;
        writeln!(f, "  operation returned: {}", self.report)?;
        for record in &self.requests {
            writeln!(f, "  {}", record.describe())?;
        }
        Ok(())
    }
}

/// What exploring one scenario found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScenarioReport {
    /// [`Scenario::name`].
    pub name: &'static str,
    /// [`Scenario::invariant`].
    pub invariant: &'static str,
    /// The requests of the fault-free run.
    pub baseline: Vec<Record>,
    /// Schedules run, by [`Step::kind`] (a multi-fault schedule counts under each of its
    /// kinds).
    pub by_kind: BTreeMap<&'static str, u64>,
    /// Schedules run in all.
    pub schedules: u64,
    /// The runs that broke the invariant.
    pub violations: Vec<Violation>,
    /// Wall time.
    pub elapsed: Duration,
}

impl ScenarioReport {
    /// Whether no schedule broke the invariant.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for ScenarioReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} schedules over {} requests, {} violations, {:.1} s",
            self.name,
            self.schedules,
            self.baseline.len(),
            self.violations.len(),
            self.elapsed.as_secs_f64()
        )?;
        for v in &self.violations {
            write!(f, "{v}")?;
        }
        Ok(())
    }
}

/// A scenario of any type, for a list of them: its name, its invariant, and how to explore it.
pub struct Entry {
    name: &'static str,
    invariant: &'static str,
    suite_plan: Plan,
    run: Box<Runner>,
}

/// How an [`Entry`] explores its scenario.
type Runner = dyn Fn(Plan, usize) -> std::pin::Pin<Box<dyn Future<Output = ScenarioReport> + Send>>
    + Send
    + Sync;

impl Entry {
    /// An entry exploring `scenario`.
    pub fn new<S: Scenario>(scenario: S) -> Self {
        let scenario = Arc::new(scenario);
        Self {
            name: scenario.name(),
            invariant: scenario.invariant(),
            suite_plan: scenario.suite_plan(),
            run: Box::new(move |plan, parallel| {
                Box::pin(explore(scenario.clone(), plan, parallel))
            }),
        }
    }

    /// [`Scenario::name`].
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// [`Scenario::invariant`].
    pub fn invariant(&self) -> &'static str {
        self.invariant
    }

    /// [`Scenario::suite_plan`].
    pub fn suite_plan(&self) -> Plan {
        self.suite_plan
    }

    /// [`explore`]s the scenario.
    pub fn explore(
        &self,
        plan: Plan,
        parallel: usize,
    ) -> impl Future<Output = ScenarioReport> + Send + use<> {
        (self.run)(plan, parallel)
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The result of one run.
struct RunOutcome {
    requests: Vec<Record>,
    report: String,
    verdict: Result<(), String>,
}

/// Runs `scenario` under `plan` with up to `parallel` runs at once, and reports what broke.
///
/// The fault-free run comes first; its failing check is reported as a violation of
/// schedule #0 and nothing else runs.
pub async fn explore<S: Scenario>(scenario: Arc<S>, plan: Plan, parallel: usize) -> ScenarioReport {
    let start = Instant::now();
    let (baseline, base_report) = run_one(&*scenario, Schedule::none(), None).await;
    let mut report = ScenarioReport {
        name: scenario.name(),
        invariant: scenario.invariant(),
        baseline: baseline.requests.clone(),
        by_kind: BTreeMap::new(),
        schedules: 0,
        violations: Vec::new(),
        elapsed: Duration::ZERO,
    };
    if let Err(message) = baseline.verdict {
        report.violations.push(Violation {
            index: 0,
            schedule: Schedule::none(),
            message,
            report: baseline.report,
            requests: baseline.requests,
        });
        report.elapsed = start.elapsed();
        return report;
    }
    let requests = report.baseline.len() as u64;
    let actors = scenario.actors();
    let schedules: Vec<(u64, Schedule)> = match plan {
        Plan::SingleFaults => single_fault(&report.baseline, actors)
            .into_iter()
            .zip(1..)
            .map(|(s, i)| (i, s))
            .collect(),
        Plan::SingleFaultsEvery { stride } => single_fault(&report.baseline, actors)
            .into_iter()
            .zip(1..)
            .filter(|(_, i)| (i - 1) % stride.max(1) == 0)
            .map(|(s, i)| (i, s))
            .collect(),
        Plan::Random { seed, count } => (0..count)
            .map(|i| (i, random(seed, i, scenario.name(), requests, actors)))
            .collect(),
        Plan::Replay { seed, index } => {
            vec![(
                index,
                random(seed, index, scenario.name(), requests, actors),
            )]
        }
    };
    for (_, schedule) in &schedules {
        report.schedules += 1;
        let mut kinds: Vec<&'static str> = schedule.steps.iter().map(|(_, s)| s.kind()).collect();
        kinds.dedup();
        for kind in kinds {
            *report.by_kind.entry(kind).or_default() += 1;
        }
    }
    let queue = Arc::new(Mutex::new(VecDeque::from(schedules)));
    let baseline_report = Arc::new(base_report);
    let found = Arc::new(Mutex::new(Vec::new()));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..parallel.max(1) {
        let (scenario, queue, found, baseline_report) = (
            scenario.clone(),
            queue.clone(),
            found.clone(),
            baseline_report.clone(),
        );
        workers.spawn(async move {
            loop {
                let next = queue
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .pop_front();
                let Some((index, schedule)) = next else {
                    return;
                };
                let (outcome, _) = run_one(
                    &*scenario,
                    schedule.clone(),
                    baseline_report.as_ref().as_ref(),
                )
                .await;
                if let Err(message) = outcome.verdict {
                    found
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Violation {
                            index,
                            schedule,
                            message,
                            report: outcome.report,
                            requests: outcome.requests,
                        });
                }
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        if let Err(e) = done {
            found
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Violation {
                    index: u64::MAX,
                    schedule: Schedule::none(),
                    message: format!("a run panicked: {e}"),
                    report: String::new(),
                    requests: Vec::new(),
                });
        }
    }
    let mut violations = std::mem::take(&mut *found.lock().unwrap_or_else(PoisonError::into_inner));
    violations.sort_by_key(|v| v.index);
    report.violations = violations;
    report.elapsed = start.elapsed();
    report
}

/// How long one phase of a run may take before the run is reported as stuck.
const PHASE_LIMIT: Duration = Duration::from_secs(120);

/// Runs `schedule` once: prepare, operate and recover through fresh proxies, wait for every
/// held request to land, check.
async fn run_one<S: Scenario>(
    scenario: &S,
    schedule: Schedule,
    baseline: Option<&S::Report>,
) -> (RunOutcome, Option<S::Report>) {
    let settings = scenario.settings();
    let holds = Holds {
        late: settings.request_timeout + Duration::from_millis(250),
        past_deadline: scenario.deadline(),
        outage: u64::from(settings.retry.max_attempts()),
    };
    let (recorder, mut calls) = Recorder::new(schedule, holds);
    let proxies = fixtures::proxied(settings.clone());
    install(&proxies, &recorder);
    // The direct view is never throttled by the client: it stands for the state itself.
    let direct = fixtures::emulator_account(
        settings
            .clone()
            .with_throughput(ThroughputPolicy::unlimited()),
    );
    let fail = |message: String, recorder: &Recorder| RunOutcome {
        requests: recorder.log(),
        report: String::new(),
        verdict: Err(message),
    };
    // Scenario futures are large in debug builds: they live on the heap, not the stack.
    let mut prepared = Err(String::new());
    for attempt in 0..UNFAULTED_TRIES {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        prepared = Box::pin(scenario.prepare(&direct)).await;
        if prepared.is_ok() {
            break;
        }
    }
    let ctx = match prepared {
        Ok(ctx) => ctx,
        Err(e) => return (fail(format!("prepare failed: {e}"), &recorder), None),
    };
    recorder.arm();
    let mut account = proxies.account.clone();
    let operated = drive(
        Box::pin(scenario.operate(&ctx, &account)),
        &recorder,
        &mut calls,
        scenario,
        &ctx,
        &direct,
    )
    .await;
    let report = match operated {
        Driven::Done(report) => Some(report),
        Driven::Stopped => {
            account = restart(&proxies, &recorder, &settings);
            None
        }
        Driven::Stuck => return (fail("the operation did not finish".into(), &recorder), None),
    };
    let mut recovered = Err("not run".to_owned());
    for round in 0..5 {
        if round > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let run = drive(
            Box::pin(scenario.recover(&ctx, &account, report.as_ref())),
            &recorder,
            &mut calls,
            scenario,
            &ctx,
            &direct,
        )
        .await;
        match run {
            Driven::Done(Ok(())) => {
                recovered = Ok(());
                break;
            }
            Driven::Done(Err(e)) => recovered = Err(e),
            Driven::Stopped => recovered = Err("the process stopped".into()),
            Driven::Stuck => {
                return (
                    fail("the recovery did not finish".into(), &recorder),
                    report,
                );
            }
        }
        account = restart(&proxies, &recorder, &settings);
    }
    recorder.disarm();
    // Drop the clients first: a request held for a stopped process ends when its
    // connection closes.
    drop(account);
    if !recorder.quiesce(PHASE_LIMIT).await {
        return (
            fail(
                "requests held at the proxies never finished".into(),
                &recorder,
            ),
            report,
        );
    }
    // Late requests have landed: recovery runs once more, without faults, as a caller's
    // workers keep running — a duplicate job whose put landed late is processed, for one.
    // What is still wrong after that is wrong for good.
    let settled = match recovered {
        Err(e) => Err(format!("recovery failed five times: {e}")),
        Ok(()) => {
            let mut last = Err(String::new());
            for attempt in 0..UNFAULTED_TRIES {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                let again = proxies.account_again(settings.clone());
                last = match drive(
                    Box::pin(scenario.recover(&ctx, &again, report.as_ref())),
                    &recorder,
                    &mut calls,
                    scenario,
                    &ctx,
                    &direct,
                )
                .await
                {
                    Driven::Done(Ok(())) => Ok(()),
                    Driven::Done(Err(e)) => {
                        Err(format!("recovery after the late requests landed: {e}"))
                    }
                    Driven::Stopped | Driven::Stuck => {
                        Err("recovery after the late requests landed did not finish".into())
                    }
                };
                if last.is_ok() {
                    break;
                }
            }
            last
        }
    };
    let verdict = match settled {
        Err(e) => Err(e),
        Ok(()) => {
            let mut verdict = Ok(());
            for attempt in 0..UNFAULTED_TRIES {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                verdict = Box::pin(scenario.check(&ctx, &direct, report.as_ref(), baseline)).await;
                if !verdict.as_ref().is_err_and(|e| incomplete(e)) {
                    break;
                }
            }
            verdict
        }
    };
    let outcome = RunOutcome {
        requests: recorder.log(),
        report: format!("{report:?}"),
        verdict,
    };
    (outcome, report)
}

fn install(proxies: &Proxied, recorder: &Arc<Recorder>) {
    let intercept: Arc<dyn crate::Intercept> = recorder.clone();
    proxies.table.set_intercept("table", intercept.clone());
    proxies.queue.set_intercept("queue", intercept.clone());
    proxies.blob.set_intercept("blob", intercept);
}

/// A new process: a new account through the same proxies (new connections, new budgets).
fn restart(proxies: &Proxied, recorder: &Recorder, settings: &Settings) -> Account {
    recorder.restarted();
    proxies.account_again(settings.clone())
}

enum Driven<T> {
    Done(T),
    Stopped,
    Stuck,
}

/// Polls `phase` until it ends, runs the actors its held requests call for, and drops it
/// when the schedule stops the process.
async fn drive<S: Scenario, T>(
    phase: impl Future<Output = T>,
    recorder: &Recorder,
    calls: &mut tokio::sync::mpsc::UnboundedReceiver<ActorCall>,
    scenario: &S,
    ctx: &S::Ctx,
    direct: &Account,
) -> Driven<T> {
    let mut stopped = recorder.stopped();
    let limit = tokio::time::sleep(PHASE_LIMIT);
    tokio::pin!(phase, limit);
    loop {
        tokio::select! {
            out = &mut phase => return Driven::Done(out),
            changed = stopped.changed() => {
                if changed.is_err() {
                    // The recorder is gone (never while a run lasts): stop watching.
                    std::future::pending::<()>().await;
                }
                if *stopped.borrow_and_update() {
                    return Driven::Stopped;
                }
            }
            Some(call) = calls.recv() => {
                Box::pin(scenario.act(ctx, direct, call.actor)).await;
                let _ = call.done.send(());
            }
            () = &mut limit => return Driven::Stuck,
        }
    }
}
