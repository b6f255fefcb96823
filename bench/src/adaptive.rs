//! Workload 14: governance of budgets tablekit is not told. Bulk loads through the fault proxy's
//! throttle model (200 entities/s per partition, 2,000 per account, 1 s burst, refusals 503
//! ServerBusy or 500 OperationTimedOut), each sampled every half second:
//!
//! - **unknown budget**: tablekit keeps Azure's default targets (10× the model's), or is told
//!   2× or 0.5× the model's rates; the raw SDK beside it. Measured after a 10 s warm-up.
//! - **budget change**: the model's rates halve, then double back, mid-run (autoscale down and
//!   up); how long until goodput is back to 0.85 of the new capacity.
//! - **skew**: one hot partition written by one `bulk_write` while another writes 99 cold
//!   partitions, on one account.
//! - **scale**: client CPU per transaction dispatched over 100 and 10,000 partitions (no
//!   throttling: the cost of the scheduling and the governor's bookkeeping).
//!
//! Every figure is a ratio to the model's capacity in the same run (or, for scale, to the other
//! partition count in the same run), never a property of the emulator.

use std::future::Future;
use std::time::{Duration, Instant};

use serde::Serialize;
use tablekit_azure::{Account, BulkOptions, Settings, ThroughputPolicy};
use tablekit_core::{Entity, Keys, Operation};
use tablekit_testkit::{FaultProxy, Throttle};

use crate::data::{raw_record, record};
use crate::measure::process_cpu;
use crate::raw;
use crate::throughput::{PER_ACCOUNT, PER_PARTITION, model, upstream};
use crate::workloads::{Result, err};

/// Seconds before the unknown-budget figures are measured.
pub(crate) const WARM_UP: f64 = 10.0;
/// Seconds measured after the warm-up.
const MEASURED: f64 = 20.0;
/// The sampling period.
const SAMPLE: Duration = Duration::from_millis(500);
/// Partition counts of the unknown-budget loads: 10 (partition and account budgets equal) and
/// 100 (the account's budget binds).
const UNKNOWN_PARTITIONS: [usize; 2] = [10, 100];
/// Partitions of the budget-change load.
const CHANGE_PARTITIONS: usize = 100;
/// When the model's rates halve and double back, seconds into the run, and its end.
const HALVE_AT: f64 = 12.0;
const DOUBLE_AT: f64 = 26.0;
const CHANGE_END: f64 = 40.0;
/// Seconds of the skew load.
const SKEW_SECONDS: f64 = 25.0;
/// Work beyond what the model can admit in a run's time, so that no load runs out of work.
const MARGIN: f64 = 1.3;

/// One sample: cumulative counts at `t` seconds into the run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sample {
    pub(crate) t: f64,
    /// Entities the model admitted so far.
    pub(crate) admitted: u64,
    /// Requests refused so far, and of them for a partition's budget.
    pub(crate) throttled: u64,
    pub(crate) throttled_by_partition: u64,
    /// Requests (admitted or refused) so far.
    pub(crate) requests: u64,
    /// The model's capacity at `t`, entities/s.
    pub(crate) capacity: f64,
    /// The rate tablekit's account budget admitted at `t` (none for the raw SDK).
    pub(crate) budget: Option<f64>,
    /// Entities admitted in the hot partition so far (skew only).
    pub(crate) hot: u64,
}

/// A sampled load.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Timed {
    pub(crate) samples: Vec<Sample>,
    /// Entities admitted after the warm-up over the model's capacity in that time.
    pub(crate) goodput: f64,
    /// Requests refused and made after the warm-up.
    pub(crate) throttled: u64,
    pub(crate) requests: u64,
    /// The load's error, or that it ran out of work before the end.
    pub(crate) error: Option<String>,
}

impl Timed {
    pub(crate) fn throttled_fraction(&self) -> f64 {
        self.throttled as f64 / self.requests.max(1) as f64
    }

    /// The sample nearest to `t` seconds (at or before it).
    fn at(&self, t: f64) -> Option<&Sample> {
        self.samples.iter().rev().find(|s| s.t <= t + 1e-9)
    }

    /// Admitted entities per second between `from` and `to` over the capacity then.
    fn fraction_between(&self, from: f64, to: f64) -> f64 {
        let (Some(a), Some(b)) = (self.at(from), self.at(to)) else {
            return 0.0;
        };
        let capacity: f64 = self
            .samples
            .windows(2)
            .filter(|w| w[0].t >= a.t - 1e-9 && w[1].t <= b.t + 1e-9)
            .map(|w| w[0].capacity * (w[1].t - w[0].t))
            .sum();
        if capacity <= 0.0 {
            0.0
        } else {
            (b.admitted - a.admitted) as f64 / capacity
        }
    }

    fn summarize(samples: Vec<Sample>, from: f64, error: Option<String>) -> Self {
        let mut out = Self {
            samples,
            goodput: 0.0,
            throttled: 0,
            requests: 0,
            error,
        };
        let end = out.samples.last().map_or(0.0, |s| s.t);
        out.goodput = out.fraction_between(from, end);
        if let (Some(a), Some(b)) = (out.at(from), out.at(end)) {
            let (throttled, requests) = (b.throttled - a.throttled, b.requests - a.requests);
            out.throttled = throttled;
            out.requests = requests;
        }
        out
    }
}

/// tablekit told `told` (or Azure's defaults) over `partitions`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct UnknownRow {
    pub(crate) partitions: usize,
    pub(crate) told: &'static str,
    pub(crate) per_partition: f64,
    pub(crate) per_account: f64,
    pub(crate) tablekit: Timed,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Change {
    pub(crate) partitions: usize,
    pub(crate) halve_at: f64,
    pub(crate) double_at: f64,
    pub(crate) tablekit: Timed,
    pub(crate) raw_sdk: Timed,
    /// Seconds from each change until a 2-s window ending then served ≥ 0.85 of the new
    /// capacity (none: not within the phase).
    pub(crate) recovered_after_halving: Option<f64>,
    pub(crate) recovered_after_doubling: Option<f64>,
    pub(crate) raw_recovered_after_halving: Option<f64>,
    pub(crate) raw_recovered_after_doubling: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Skew {
    pub(crate) hot_entities: usize,
    pub(crate) cold_partitions: usize,
    pub(crate) cold_entities: usize,
    /// The hot partition's admitted rate after the warm-up over its partition budget.
    pub(crate) hot: f64,
    /// Everything admitted after the warm-up over the account's budget.
    pub(crate) account: f64,
    pub(crate) throttled: u64,
    pub(crate) requests: u64,
    pub(crate) run: Timed,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ScaleRow {
    pub(crate) partitions: usize,
    pub(crate) entities_per_partition: usize,
    pub(crate) bulk_writes: usize,
    pub(crate) entities: usize,
    pub(crate) transactions: usize,
    pub(crate) cpu_us_per_entity: f64,
    pub(crate) cpu_us_per_transaction: f64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Adaptive {
    pub(crate) per_partition: f64,
    pub(crate) per_account: f64,
    pub(crate) concurrency: usize,
    pub(crate) warm_up: f64,
    pub(crate) measured: f64,
    pub(crate) unknown: Vec<UnknownRow>,
    /// The raw SDK over each partition count of `unknown`.
    pub(crate) raw_sdk: Vec<(usize, Timed)>,
    pub(crate) change: Change,
    pub(crate) skew: Skew,
    pub(crate) scale: Vec<ScaleRow>,
}

/// The model's capacity over `partitions` at the given rates.
fn capacity(partitions: usize, per_partition: f64, per_account: f64) -> f64 {
    per_account.min(partitions as f64 * per_partition)
}

/// Runs `load` for `seconds` against the model installed as `throttle`, sampling every
/// [`SAMPLE`]; at each `(at, per_partition, per_account)` of `changes` sets the model's rates.
/// The load is dropped (its requests abandoned) at the end.
async fn sampled<F>(
    throttle: &Throttle,
    partitions: usize,
    load: F,
    seconds: f64,
    changes: &[(f64, f64, f64)],
    budget: Option<&Account>,
    hot: Option<&str>,
) -> (Vec<Sample>, Option<String>)
where
    F: Future<Output = Option<String>>,
{
    let mut rates = (PER_PARTITION, PER_ACCOUNT);
    let mut pending = changes.iter().peekable();
    let mut samples = Vec::new();
    let start = Instant::now();
    let take = |rates: (f64, f64)| {
        let stats = throttle.stats();
        Sample {
            t: start.elapsed().as_secs_f64(),
            admitted: stats.admitted_entities,
            throttled: stats.throttled,
            throttled_by_partition: stats.throttled_by_partition,
            requests: stats.admitted_requests + stats.throttled,
            capacity: capacity(partitions, rates.0, rates.1),
            budget: budget.map(|a| a.metrics().account_budget_rate()),
            hot: hot.map_or(0, |pk| stats.admitted_in(pk)),
        }
    };
    let mut load = std::pin::pin!(load);
    let mut tick = tokio::time::interval(SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let error = loop {
        tokio::select! {
            error = &mut load => {
                break Some(error.unwrap_or_else(|| "the load ran out of work".to_owned()));
            }
            _ = tick.tick() => {
                let t = start.elapsed().as_secs_f64();
                while let Some(&&(at, pp, pa)) = pending.peek() {
                    if t + 1e-3 < at {
                        break;
                    }
                    throttle.set_rates(pp, pa);
                    rates = (pp, pa);
                    pending.next();
                }
                samples.push(take(rates));
                if t >= seconds {
                    break None;
                }
            }
        }
    };
    (samples, error)
}

fn account(through_cs: &str, policy: ThroughputPolicy, concurrency: usize) -> Result<Account> {
    Account::from_connection_string(through_cs)
        .and_then(|a| {
            a.with_settings(
                Settings::default()
                    .with_throughput(policy)
                    .with_concurrency(concurrency),
            )
        })
        .map_err(err)
}

fn insert(pk: &str, i: usize) -> Operation {
    Operation::insert(&Entity::new(
        Keys::new(pk, format!("{i:08}")).expect("valid keys"),
        record(i),
    ))
    .expect("valid entity")
}

/// `n` inserts spread round-robin over partitions `{prefix}{0..partitions}`.
fn spread(prefix: &str, n: usize, partitions: usize) -> Vec<Operation> {
    (0..n)
        .map(|i| insert(&format!("{prefix}{:05}", i % partitions), i))
        .collect()
}

/// A table made directly (so that only the load goes through the model); deleted by `drop_table`.
async fn table(base: &Account, prefix: &str) -> Result<String> {
    let name = tablekit_testkit::unique_table_name(prefix);
    base.table(&name)
        .map_err(err)?
        .create()
        .await
        .map_err(err)?;
    Ok(name)
}

async fn drop_table(base: &Account, name: &str) -> Result<()> {
    base.table(name)
        .map_err(err)?
        .delete_table()
        .await
        .map_err(err)
}

/// What a finished bulk write reports as the load's error.
fn bulk_error(report: tablekit_core::Result<tablekit_azure::BulkReport>) -> Option<String> {
    match report {
        Ok(r) => r
            .failures()
            .next()
            .map(|(i, e)| format!("operation {i}: {e}")),
        Err(e) => Some(e.to_string()),
    }
}

struct Setup<'a> {
    base: &'a Account,
    proxy: &'a FaultProxy,
    through: String,
    through_cs: String,
    concurrency: usize,
}

impl Setup<'_> {
    #[allow(clippy::too_many_arguments)]
    async fn tablekit(
        &self,
        policy: ThroughputPolicy,
        partitions: usize,
        seconds: f64,
        from: f64,
        changes: &[(f64, f64, f64)],
        entities: usize,
    ) -> Result<Timed> {
        let account = account(&self.through_cs, policy, self.concurrency)?;
        let name = table(self.base, "benchadapt").await?;
        let handle = account.table(&name).map_err(err)?;
        let ops = spread("p", entities, partitions);
        let throttle = self.proxy.set_throttle(model());
        let load = async { bulk_error(handle.bulk_write(ops, BulkOptions::default()).await) };
        let (samples, error) = sampled(
            &throttle,
            partitions,
            load,
            seconds,
            changes,
            Some(&account),
            None,
        )
        .await;
        self.proxy.clear_throttle();
        drop_table(self.base, &name).await?;
        Ok(Timed::summarize(samples, from, error))
    }

    async fn raw(
        &self,
        partitions: usize,
        seconds: f64,
        from: f64,
        changes: &[(f64, f64, f64)],
        entities: usize,
    ) -> Result<Timed> {
        let name = table(self.base, "benchadaptraw").await?;
        // A careful raw-SDK user: a pooled client, the SDK's default retry policy, transactions
        // round-robin across partitions.
        let client = raw::table_client(&self.through, &name, true);
        let rows: Vec<_> = (0..entities)
            .map(|i| raw_record(&format!("p{:05}", i % partitions), &format!("{i:08}"), i))
            .collect();
        let throttle = self.proxy.set_throttle(model());
        let concurrency = self.concurrency;
        let load = async {
            raw::bulk_insert(&client, rows, concurrency, raw::Order::RoundRobin)
                .await
                .err()
        };
        let (samples, error) =
            sampled(&throttle, partitions, load, seconds, changes, None, None).await;
        self.proxy.clear_throttle();
        drop_table(self.base, &name).await?;
        Ok(Timed::summarize(samples, from, error))
    }
}

/// Seconds from `at` until a 2-s window ending within `at + 12` s served ≥ 0.85 of the
/// capacity (the end of the first such window, minus `at`).
fn recovery(run: &Timed, at: f64, until: f64) -> Option<f64> {
    let mut end = at + 2.0;
    while end <= until + 1e-9 {
        if run.fraction_between(end - 2.0, end) >= 0.85 {
            return Some(end - at);
        }
        end += SAMPLE.as_secs_f64();
    }
    None
}

pub(crate) async fn adaptive(
    base: &Account,
    endpoint: &str,
    concurrency: usize,
) -> Result<Adaptive> {
    let proxy = FaultProxy::start(upstream(endpoint)?).map_err(err)?;
    let through = proxy.endpoint_for(endpoint);
    let through_cs = format!(
        "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};TableEndpoint={through}",
        tablekit_testkit::ACCOUNT,
        tablekit_testkit::ACCOUNT_KEY
    );
    let setup = Setup {
        base,
        proxy: &proxy,
        through,
        through_cs,
        concurrency,
    };
    let seconds = WARM_UP + MEASURED;
    let step = |what: &str| eprintln!("tablekit-bench: 14. {what}");

    let mut unknown = Vec::new();
    let mut raw_sdk = Vec::new();
    for partitions in UNKNOWN_PARTITIONS {
        let entities =
            (MARGIN * seconds * capacity(partitions, PER_PARTITION, PER_ACCOUNT)) as usize;
        for (told, per_partition, per_account) in [
            (
                "Azure's targets (10×)",
                f64::from(tablekit_core::limits::TARGET_ENTITIES_PER_SEC_PARTITION),
                f64::from(tablekit_core::limits::TARGET_ENTITIES_PER_SEC_ACCOUNT),
            ),
            ("2× the model's", 2.0 * PER_PARTITION, 2.0 * PER_ACCOUNT),
            ("0.5× the model's", 0.5 * PER_PARTITION, 0.5 * PER_ACCOUNT),
        ] {
            step(&format!(
                "unknown budget: told {told}, {partitions} partitions"
            ));
            let policy = ThroughputPolicy::default().with_targets(per_partition, per_account);
            let tablekit = setup
                .tablekit(policy, partitions, seconds, WARM_UP, &[], entities)
                .await?;
            unknown.push(UnknownRow {
                partitions,
                told,
                per_partition,
                per_account,
                tablekit,
            });
        }
        step(&format!(
            "unknown budget: the raw SDK, {partitions} partitions"
        ));
        raw_sdk.push((
            partitions,
            setup
                .raw(partitions, seconds, WARM_UP, &[], entities)
                .await?,
        ));
    }

    step("budget change: halves, then doubles back");
    let changes = [
        (HALVE_AT, PER_PARTITION / 2.0, PER_ACCOUNT / 2.0),
        (DOUBLE_AT, PER_PARTITION, PER_ACCOUNT),
    ];
    let cap = capacity(CHANGE_PARTITIONS, PER_PARTITION, PER_ACCOUNT);
    let entities =
        (MARGIN * cap * (HALVE_AT + (DOUBLE_AT - HALVE_AT) / 2.0 + (CHANGE_END - DOUBLE_AT)))
            as usize;
    let tablekit = setup
        .tablekit(
            ThroughputPolicy::default(),
            CHANGE_PARTITIONS,
            CHANGE_END,
            WARM_UP,
            &changes,
            entities,
        )
        .await?;
    let raw_run = setup
        .raw(CHANGE_PARTITIONS, CHANGE_END, WARM_UP, &changes, entities)
        .await?;
    let change = Change {
        partitions: CHANGE_PARTITIONS,
        halve_at: HALVE_AT,
        double_at: DOUBLE_AT,
        recovered_after_halving: recovery(&tablekit, HALVE_AT, DOUBLE_AT),
        recovered_after_doubling: recovery(&tablekit, DOUBLE_AT, CHANGE_END),
        raw_recovered_after_halving: recovery(&raw_run, HALVE_AT, DOUBLE_AT),
        raw_recovered_after_doubling: recovery(&raw_run, DOUBLE_AT, CHANGE_END),
        tablekit,
        raw_sdk: raw_run,
    };

    step("skew: one hot partition beside 99 cold ones");
    let skew = skew(&setup).await?;
    step("scale: 100 and 10,000 partitions");
    let scale = vec![
        scale_row(&setup, 100, 100).await?,
        scale_row(&setup, 10_000, 1).await?,
    ];
    Ok(Adaptive {
        per_partition: PER_PARTITION,
        per_account: PER_ACCOUNT,
        concurrency,
        warm_up: WARM_UP,
        measured: MEASURED,
        unknown,
        raw_sdk,
        change,
        skew,
        scale,
    })
}

/// The hot partition's key.
const HOT: &str = "hot";
const COLD_PARTITIONS: usize = 99;

async fn skew(setup: &Setup<'_>) -> Result<Skew> {
    let account = account(
        &setup.through_cs,
        ThroughputPolicy::default(),
        setup.concurrency,
    )?;
    let name = table(setup.base, "benchskew").await?;
    let handle = account.table(&name).map_err(err)?;
    let hot_entities = (MARGIN * SKEW_SECONDS * PER_PARTITION) as usize;
    let cold_entities = (MARGIN * SKEW_SECONDS * PER_ACCOUNT) as usize;
    let hot_ops: Vec<Operation> = (0..hot_entities).map(|i| insert(HOT, i)).collect();
    let cold_ops = spread("cold", cold_entities, COLD_PARTITIONS);
    let throttle = setup.proxy.set_throttle(model());
    let load = async {
        let (hot, cold) = futures::join!(
            handle.bulk_write(hot_ops, BulkOptions::default()),
            handle.bulk_write(cold_ops, BulkOptions::default())
        );
        bulk_error(hot).or(bulk_error(cold))
    };
    let (samples, error) = sampled(
        &throttle,
        COLD_PARTITIONS + 1,
        load,
        SKEW_SECONDS,
        &[],
        Some(&account),
        Some(HOT),
    )
    .await;
    setup.proxy.clear_throttle();
    drop_table(setup.base, &name).await?;
    let run = Timed::summarize(samples, WARM_UP, error);
    let (hot, account_fraction) = match (run.at(WARM_UP), run.samples.last()) {
        (Some(a), Some(b)) if b.t > a.t => {
            let dt = b.t - a.t;
            (
                (b.hot - a.hot) as f64 / dt / PER_PARTITION,
                (b.admitted - a.admitted) as f64 / dt / PER_ACCOUNT,
            )
        }
        _ => (0.0, 0.0),
    };
    Ok(Skew {
        hot_entities,
        cold_partitions: COLD_PARTITIONS,
        cold_entities,
        hot,
        account: account_fraction,
        throttled: run.throttled,
        requests: run.requests,
        run,
    })
}

/// 10,000 transactions of 2 entities: `bulk_writes` bulk writes, each over `partitions`
/// partitions of 2 entities, governed by the default policy through the proxy without a
/// throttle model. Client CPU from before the operations are built to the last answer.
async fn scale_row(setup: &Setup<'_>, partitions: usize, bulk_writes: usize) -> Result<ScaleRow> {
    const PER_PARTITION_ENTITIES: usize = 2;
    let account = account(
        &setup.through_cs,
        ThroughputPolicy::default(),
        setup.concurrency,
    )?;
    let name = table(setup.base, "benchscale").await?;
    let handle = account.table(&name).map_err(err)?;
    let cpu = process_cpu();
    let mut transactions = 0;
    let mut entities = 0;
    for round in 0..bulk_writes {
        let ops: Vec<Operation> = (0..partitions * PER_PARTITION_ENTITIES)
            .map(|i| insert(&format!("r{round:04}p{:05}", i % partitions), i))
            .collect();
        entities += ops.len();
        let report = handle
            .bulk_write(ops, BulkOptions::default())
            .await
            .map_err(err)?;
        if let Some((i, e)) = report.failures().next() {
            return Err(format!("operation {i}: {e}"));
        }
        transactions += report.transactions;
    }
    let cpu = process_cpu().saturating_sub(cpu).as_secs_f64() * 1e6;
    drop_table(setup.base, &name).await?;
    Ok(ScaleRow {
        partitions,
        entities_per_partition: PER_PARTITION_ENTITIES,
        bulk_writes,
        entities,
        transactions,
        cpu_us_per_entity: cpu / entities.max(1) as f64,
        cpu_us_per_transaction: cpu / transactions.max(1) as f64,
    })
}

/// A short name for a row's telling, for file names.
fn slug(told: &str) -> &'static str {
    if told.starts_with("Azure") {
        "defaults"
    } else if told.starts_with("2×") {
        "2x"
    } else {
        "half"
    }
}

/// Writes the plots into `dir`; returns their paths.
pub(crate) fn write_plots(a: &Adaptive, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).map_err(err)?;
    let mut written = Vec::new();
    let mut write = |name: String, svg: String| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, svg).map_err(err)?;
        written.push(path);
        Ok(())
    };
    for row in &a.unknown {
        let Some((_, raw)) = a.raw_sdk.iter().find(|(p, _)| *p == row.partitions) else {
            continue;
        };
        let title = format!(
            "Unknown budget, {} partitions: the model serves {} entities/s per partition, {} per account; tablekit told {}",
            row.partitions, a.per_partition, a.per_account, row.told
        );
        write(
            format!("unknown-{}-{}.svg", row.partitions, slug(row.told)),
            crate::svg::side_by_side(
                &title,
                (&format!("tablekit, told {}", row.told), &row.tablekit),
                ("raw SDK (default retry)", raw),
                a.warm_up,
            ),
        )?;
    }
    let c = &a.change;
    write(
        "budget-change.svg".to_owned(),
        crate::svg::side_by_side(
            &format!(
                "Budget change, {} partitions: the model's rates halve at {} s and double back at {} s; tablekit keeps Azure's targets",
                c.partitions, c.halve_at, c.double_at
            ),
            ("tablekit", &c.tablekit),
            ("raw SDK (default retry)", &c.raw_sdk),
            a.warm_up,
        ),
    )?;
    Ok(written)
}
