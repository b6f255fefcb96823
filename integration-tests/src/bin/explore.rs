//! `cargo xtask explore`: runs the fault-schedule explorer's scenarios.
//!
//! ```text
//! explore [--only NAME] [--parallel N]                every single-fault schedule
//! explore --random N --seed S [--only NAME]          N seeded random multi-fault schedules in
//!                                                    all, shared evenly by the scenarios
//! explore --seed S --replay K --only NAME            random schedule K of seed S again
//! explore --baseline [--only NAME]                   the fault-free runs' requests only
//! explore ... --markdown FILE                        also write the table of what ran
//! ```
//!
//! Exits 1 when a schedule breaks an invariant, printing the schedule, the seed and the
//! requests of the run.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use tablekit_integration_tests::explore;
use tablekit_testkit::explore::{Plan, ScenarioReport};

/// The table's fault columns: each column's heading and the step kinds it counts.
const COLUMNS: &[(&str, &[&str])] = &[
    ("refused (503, 500)", &["503", "500 OperationTimedOut"]),
    ("reset", &["reset before sending"]),
    ("response lost", &["response lost"]),
    (
        "applied late",
        &["applied late", "applied past the deadline"],
    ),
    ("process stopped", &["process stopped"]),
    (
        "outages",
        &[
            "outage: refused",
            "outage: resets",
            "outage: responses lost",
            "outage: applied late",
        ],
    ),
    ("concurrent actor", &["concurrent actor"]),
    ("page split", &["page split"]),
];

/// The markdown table of what the explorer ran: a row per scenario, its schedules by fault,
/// and the invariant it checks.
fn markdown(reports: &[ScenarioReport]) -> String {
    let mut out = String::from("| Scenario | Requests |");
    for (heading, _) in COLUMNS {
        let _ = write!(out, " {heading} |");
    }
    out.push_str(" Schedules | Violations | Invariant checked |\n|---|---:|");
    for _ in COLUMNS {
        out.push_str("---:|");
    }
    out.push_str("---:|---:|---|\n");
    let mut total = 0;
    for r in reports {
        let _ = write!(out, "| `{}` | {} |", r.name, r.baseline.len());
        for (_, kinds) in COLUMNS {
            let n: u64 = kinds.iter().filter_map(|k| r.by_kind.get(k)).sum();
            let _ = write!(
                out,
                " {} |",
                if n == 0 {
                    "—".to_owned()
                } else {
                    n.to_string()
                }
            );
        }
        total += r.schedules;
        let _ = writeln!(
            out,
            " {} | {} | {} |",
            r.schedules,
            r.violations.len(),
            r.invariant
        );
    }
    let _ = writeln!(out, "\n{total} schedules over {} scenarios.", reports.len());
    out
}

fn value(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn number(args: &[String], name: &str) -> Result<Option<u64>, String> {
    value(args, name)
        .map(|v| {
            v.parse()
                .map_err(|_| format!("{name} takes a number, not `{v}`"))
        })
        .transpose()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = (|| {
        let seed = number(&args, "--seed")?;
        let plan = match (number(&args, "--random")?, number(&args, "--replay")?, seed) {
            (Some(count), None, Some(seed)) => Plan::Random { seed, count },
            (Some(count), None, None) => Plan::Random {
                seed: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_secs()),
                count,
            },
            (None, Some(index), Some(seed)) => Plan::Replay { seed, index },
            (None, None, _) if args.iter().any(|a| a == "--baseline") => {
                Plan::Random { seed: 0, count: 0 }
            }
            (None, None, _) => Plan::SingleFaults,
            _ => return Err("--replay needs --seed, and excludes --random".to_owned()),
        };
        let parallel = number(&args, "--parallel")?.unwrap_or(8) as usize;
        Ok::<_, String>((plan, parallel, value(&args, "--only")))
    })();
    let (plan, parallel, only) = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("explore: {e}");
            return ExitCode::from(2);
        }
    };
    let entries: Vec<_> = explore::all()
        .into_iter()
        .filter(|e| only.as_deref().is_none_or(|o| e.name().starts_with(o)))
        .collect();
    // `--random N` is N schedules in all: each scenario gets its share.
    let plan = match plan {
        Plan::Random { seed, count } => {
            let each = count.div_ceil(entries.len().max(1) as u64);
            println!(
                "explore: {count} random schedules, {each} per scenario over {}, seed {seed}",
                entries.len()
            );
            Plan::Random { seed, count: each }
        }
        other => other,
    };
    let runtime = explore::runtime();
    let start = Instant::now();
    let mut failed = false;
    let mut total = 0;
    let mut reports = Vec::new();
    for entry in entries {
        let report = runtime.block_on(entry.explore(plan, parallel));
        total += report.schedules;
        print!("{report}");
        if args.iter().any(|a| a == "--baseline") {
            for record in &report.baseline {
                println!("  {}", record.describe());
            }
        }
        failed |= !report.passed();
        reports.push(report);
    }
    if let Some(path) = value(&args, "--markdown") {
        if let Err(e) = std::fs::write(&path, markdown(&reports)) {
            eprintln!("explore: could not write {path}: {e}");
            return ExitCode::from(2);
        }
        println!("explore: the table is in {path}");
    }
    println!(
        "explore: {total} schedules in {:.0} s{}",
        start.elapsed().as_secs_f64(),
        if failed {
            ", violations found"
        } else {
            ", no violation"
        }
    );
    if let (true, Plan::Random { seed, .. }) = (failed, plan) {
        println!("explore: replay one with --seed {seed} --replay K --only SCENARIO");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
