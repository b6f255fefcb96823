//! `tablekit queue peek` and `tablekit queue poison list | replay | purge`: every use of
//! `tablekit::eventual` is in this module.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tablekit::azure::Account;
use tablekit::eventual::{Job, JobQueue, PoisonRecord, Poisoned};

use super::{Ctx, confirm};
use crate::cli::{PoisonCommand, QueueCommand};
use crate::exit::{CliError, CliResult, Exit};

/// Any job: the tool never decodes a job, it only moves payloads byte for byte, but
/// [`JobQueue`] is typed by the job it carries.
#[derive(Serialize, Deserialize)]
struct AnyJob(serde_json::Value);

impl Job for AnyJob {
    const KIND: &'static str = "*";
}

/// How long taken poison messages stay hidden while a replay or purge goes through the
/// queue; the ones it leaves are made visible again at the end.
const HOLD: Duration = Duration::from_secs(300);

/// Runs a `queue` subcommand.
///
/// Requests: `peek` and `poison list` 1. `poison replay` and `poison purge`: 1 per batch of up
/// to 32 poison messages taken (+1 for the last, empty, batch), 2 per job replayed (put,
/// delete), 1 per record purged, 1 per record taken and left (made visible again).
pub(crate) async fn run(ctx: &Ctx, account: &Account, command: QueueCommand) -> CliResult {
    match command {
        QueueCommand::Peek {
            queue,
            max,
            payload,
        } => {
            check_max(max)?;
            let jobs = jobs(account, &queue)?;
            let messages = jobs
                .queue()
                .peek(max)
                .await
                .map_err(|e| CliError::context(&format!("peeking {queue}"), &e))?;
            let mut out = std::io::stdout().lock();
            for bytes in &messages {
                let kind = kind_of(bytes).unwrap_or_else(|| "-".into());
                write_line(&mut out, &format!("{kind}\t{} bytes", bytes.len()))?;
                if payload {
                    write_line(&mut out, &format!("  {}", String::from_utf8_lossy(bytes)))?;
                }
            }
            ctx.stdout_carries_data();
            ctx.summary(
                &format!("{} message(s) shown", messages.len()),
                serde_json::json!({"shown": messages.len()}),
            );
            Ok(Exit::Success)
        }
        QueueCommand::Poison { command } => poison(ctx, account, command).await,
    }
}

async fn poison(ctx: &Ctx, account: &Account, command: PoisonCommand) -> CliResult {
    match command {
        PoisonCommand::List {
            queue,
            max,
            payload,
        } => {
            check_max(max)?;
            ctx.stdout_carries_data();
            let jobs = jobs(account, &queue)?;
            let records = jobs
                .peek_poisoned(max)
                .await
                .map_err(|e| CliError::context(&format!("reading {}", jobs.poison().name()), &e))?;
            let mut out = std::io::stdout().lock();
            write_line(&mut out, "ID\tKIND\tDEQUEUED\tPOISONED AT\tREASON")?;
            for record in &records {
                write_line(&mut out, &describe(record))?;
                if payload {
                    write_line(
                        &mut out,
                        &format!("  {}", String::from_utf8_lossy(&record.payload)),
                    )?;
                }
            }
            if records.len() == usize::from(max) {
                ctx.status(&format!(
                    "{max} shown; the poison queue may hold more (a peek shows at most 32)"
                ));
            }
            Ok(Exit::Success)
        }
        PoisonCommand::Replay {
            queue,
            id,
            all,
            yes,
        } => {
            let jobs = jobs(account, &queue)?;
            let what = match &id {
                Some(id) => format!("poisoned job {id}"),
                None if all => "every poisoned job".to_owned(),
                None => return Err(CliError::usage("give --id ID or --all")),
            };
            confirm(
                yes,
                &format!("replay {what} of {queue}? (its handler runs again)"),
                &format!("replaying {what} of {queue} runs it again"),
            )?;
            let selected = |p: &Poisoned| match &id {
                Some(id) => p.record.message_id == *id || p.message().id == *id,
                // Messages someone put on the poison queue by hand are no jobs of QUEUE.
                None => !p.record.source_queue.is_empty(),
            };
            let outcome = sweep(&jobs, selected, id.is_some(), Action::Replay).await?;
            ctx.summary(
                "",
                serde_json::json!({"replayed": outcome.done, "left": outcome.left}),
            );
            ctx.status(&format!(
                "replayed {} job(s) onto {queue}; {} left on {}",
                outcome.done,
                outcome.left,
                jobs.poison().name()
            ));
            if id.is_some() && outcome.done == 0 {
                return Err(CliError::failure(format!(
                    "no poisoned job {what} on {}",
                    jobs.poison().name()
                )));
            }
            Ok(Exit::Success)
        }
        PoisonCommand::Purge {
            queue,
            older_than,
            yes,
        } => {
            let jobs = jobs(account, &queue)?;
            let cutoff = match &older_than {
                Some(text) => {
                    let age = parse_duration(text)?;
                    let age = chrono::Duration::from_std(age)
                        .map_err(|_| CliError::usage(format!("--older-than {text}: too long")))?;
                    Some(Utc::now() - age)
                }
                None => None,
            };
            let what = match &older_than {
                Some(text) => format!("the poisoned jobs of {queue} older than {text}"),
                None => format!("every poisoned job of {queue}"),
            };
            confirm(
                yes,
                &format!("delete {what} for good?"),
                &format!("purging deletes {what} for good"),
            )?;
            let selected = |p: &Poisoned| cutoff.is_none_or(|c| p.record.poisoned_at <= c);
            let outcome = sweep(&jobs, selected, false, Action::Discard).await?;
            ctx.summary(
                "",
                serde_json::json!({"purged": outcome.done, "left": outcome.left}),
            );
            ctx.status(&format!(
                "purged {} poisoned job(s); {} left on {}",
                outcome.done,
                outcome.left,
                jobs.poison().name()
            ));
            Ok(Exit::Success)
        }
    }
}

/// What a sweep does with the selected poison messages.
#[derive(Clone, Copy)]
enum Action {
    Replay,
    Discard,
}

/// The result of a sweep.
struct Swept {
    done: usize,
    left: usize,
}

/// Takes the poison queue's messages in batches, acts on the selected ones and makes the
/// others visible again at the end (not at once: they would be taken again). Stops when
/// the queue shows nothing more, when a message comes round a second time (the hold ran
/// out), or after the first match when `one`.
async fn sweep(
    jobs: &JobQueue<AnyJob>,
    selected: impl Fn(&Poisoned) -> bool,
    one: bool,
    action: Action,
) -> CliResult<Swept> {
    let poison = jobs.poison().name().to_owned();
    let failed =
        |doing: &str, e: &tablekit::core::Error| CliError::context(&format!("{doing} {poison}"), e);
    let mut seen = HashSet::new();
    let mut left = Vec::new();
    let mut done = 0;
    loop {
        let batch = jobs
            .take_poisoned(32, HOLD)
            .await
            .map_err(|e| failed("reading", &e))?;
        if batch.is_empty() {
            break;
        }
        let mut stop = false;
        for p in batch {
            if stop {
                left.push(p);
                continue;
            }
            if !seen.insert(p.message().id.clone()) {
                // Taken again: only the newest receipt can release it.
                left.retain(|l: &Poisoned| l.message().id != p.message().id);
                left.push(p);
                stop = true;
                continue;
            }
            if !selected(&p) {
                left.push(p);
                continue;
            }
            match action {
                Action::Replay => jobs.requeue(&p).await,
                Action::Discard => jobs.discard(&p).await,
            }
            .map_err(|e| failed("moving a job from", &e))?;
            done += 1;
            stop = one;
        }
        if stop {
            break;
        }
    }
    for p in &left {
        jobs.poison()
            .update(p.message(), Duration::ZERO)
            .await
            .map_err(|e| failed("releasing a message of", &e))?;
    }
    Ok(Swept {
        done,
        left: left.len(),
    })
}

fn jobs(account: &Account, queue: &str) -> CliResult<JobQueue<AnyJob>> {
    Ok(JobQueue::new(account.queue(queue)?))
}

fn check_max(max: u8) -> CliResult<()> {
    if (1..=32).contains(&max) {
        Ok(())
    } else {
        Err(CliError::usage(format!(
            "--max {max}: a peek shows 1 to 32 messages"
        )))
    }
}

/// One line of `poison list`.
fn describe(record: &PoisonRecord) -> String {
    let id = if record.message_id.is_empty() {
        "-"
    } else {
        &record.message_id
    };
    let when: DateTime<Utc> = record.poisoned_at;
    format!(
        "{id}\t{}\t{}\t{}\t{}",
        record.kind.as_deref().unwrap_or("-"),
        record.dequeue_count,
        when.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        record.reason.replace(['\n', '\t'], " ")
    )
}

/// The kind a job envelope names (`{"kind":"…","job":…}`).
fn kind_of(payload: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    value.get("kind")?.as_str().map(str::to_owned)
}

fn write_line(out: &mut impl std::io::Write, line: &str) -> CliResult<()> {
    writeln!(out, "{line}").map_err(|e| CliError::failure(e.to_string()))
}

/// `90s`, `45m`, `12h`, `30d`.
///
/// # Errors
/// A usage error naming the text.
pub(crate) fn parse_duration(text: &str) -> CliResult<Duration> {
    let bad = || {
        CliError::usage(format!(
            "{text:?}: a duration is a number and a unit, s, m, h or d (90s, 45m, 12h, 30d)"
        ))
    };
    let text = text.trim();
    let split = text.len().checked_sub(1).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_a_number_and_a_unit() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_duration("30d").unwrap(),
            Duration::from_secs(30 * 86_400)
        );
        for bad in ["", "d", "30", "30w", "-1h", "1.5h", "99999999999999999d"] {
            assert_eq!(
                parse_duration(bad).unwrap_err().exit,
                Exit::Usage,
                "{bad:?}"
            );
        }
    }
}
