//! `tablekit retention list | drop-older-than`: every use of `tablekit::retention` is in
//! this module.

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use tablekit::azure::Account;
use tablekit::retention::{Period, PeriodTable, PeriodTables};

use super::{Ctx, confirm};
use crate::cli::{PeriodArg, RetentionCommand};
use crate::exit::{CliError, CliResult, Exit};

/// Runs a `retention` subcommand.
///
/// Requests: `list` and `drop-older-than --dry-run` 1 per 1,000 tables with the prefix;
/// `drop-older-than` that listing (to show what goes), the drop's own listing, and 1 per
/// dropped table.
pub(crate) async fn run(ctx: &Ctx, account: &Account, command: RetentionCommand) -> CliResult {
    match command {
        RetentionCommand::List { prefix, period } => {
            let set = PeriodTables::new(account, &prefix, period_of(period))?;
            let tables = list(&set).await?;
            let mut out = std::io::stdout().lock();
            for t in &tables {
                write_line(&mut out, &line(t))?;
            }
            ctx.stdout_carries_data();
            ctx.summary(
                &format!("{} table(s)", tables.len()),
                serde_json::json!({"tables": tables.len()}),
            );
            Ok(Exit::Success)
        }
        RetentionCommand::DropOlderThan {
            prefix,
            period,
            cutoff,
            dry_run,
            yes,
        } => {
            let cutoff = parse_cutoff(&cutoff)?;
            ctx.stdout_carries_data();
            let set = PeriodTables::new(account, &prefix, period_of(period))?;
            if !dry_run && !yes && !super::interactive() {
                // Refused before the listing: a script learns at once that it needs --yes.
                return Err(CliError::usage(format!(
                    "dropping the tables of {prefix} deletes every entity in them: pass --yes to confirm (or --dry-run)"
                )));
            }
            let expired: Vec<PeriodTable> = list(&set)
                .await?
                .into_iter()
                .filter(|t| t.end <= cutoff)
                .collect();
            let stamp = cutoff.to_rfc3339_opts(SecondsFormat::Secs, true);
            if dry_run || expired.is_empty() {
                let mut out = std::io::stdout().lock();
                for t in &expired {
                    write_line(&mut out, &line(t))?;
                }
                ctx.status(&format!(
                    "{} table(s) ended at or before {stamp}{}",
                    expired.len(),
                    if dry_run {
                        "; dry run, nothing dropped"
                    } else {
                        ""
                    }
                ));
                return Ok(Exit::Success);
            }
            let names: Vec<&str> = expired.iter().map(|t| t.name.as_str()).collect();
            confirm(
                yes,
                &format!(
                    "drop {} table(s) with every entity in them: {}?",
                    names.len(),
                    names.join(", ")
                ),
                &format!(
                    "dropping {} table(s) of {prefix} deletes every entity in them",
                    names.len()
                ),
            )?;
            let report = set
                .drop_older_than(cutoff)
                .await
                .map_err(|e| CliError::context(&format!("dropping tables of {prefix}"), &e))?;
            let mut out = std::io::stdout().lock();
            for name in &report.dropped {
                write_line(&mut out, name)?;
            }
            ctx.summary(
                "",
                serde_json::json!({"dropped": report.dropped.len(), "kept": report.kept.len()}),
            );
            ctx.status(&format!(
                "dropped {} table(s), kept {}",
                report.dropped.len(),
                report.kept.len()
            ));
            Ok(Exit::Success)
        }
    }
}

async fn list(set: &PeriodTables) -> CliResult<Vec<PeriodTable>> {
    set.list()
        .await
        .map_err(|e| CliError::context(&format!("listing tables of {}", set.prefix()), &e))
}

fn period_of(period: PeriodArg) -> Period {
    match period {
        PeriodArg::Hour => Period::Hour,
        PeriodArg::Day => Period::Day,
        PeriodArg::Month => Period::Month,
    }
}

/// `NAME<TAB>START<TAB>END`.
fn line(t: &PeriodTable) -> String {
    format!(
        "{}\t{}\t{}",
        t.name,
        t.start.to_rfc3339_opts(SecondsFormat::Secs, true),
        t.end.to_rfc3339_opts(SecondsFormat::Secs, true)
    )
}

fn write_line(out: &mut impl std::io::Write, line: &str) -> CliResult<()> {
    writeln!(out, "{line}").map_err(|e| CliError::failure(e.to_string()))
}

/// A UTC date (`2026-09-01`, midnight) or an RFC 3339 time.
///
/// # Errors
/// A usage error naming the text.
fn parse_cutoff(text: &str) -> CliResult<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or_else(|| {
            CliError::usage(format!(
                "--cutoff {text:?}: a UTC date (2026-09-01) or an RFC 3339 time (2026-09-01T06:00:00Z)"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cutoff_is_a_date_or_an_rfc3339_time() {
        assert_eq!(
            parse_cutoff("2026-09-01").unwrap().to_rfc3339(),
            "2026-09-01T00:00:00+00:00"
        );
        assert_eq!(
            parse_cutoff("2026-09-01T08:00:00+02:00")
                .unwrap()
                .to_rfc3339(),
            "2026-09-01T06:00:00+00:00"
        );
        for bad in ["", "yesterday", "2026-13-01", "01/09/2026"] {
            assert_eq!(parse_cutoff(bad).unwrap_err().exit, Exit::Usage, "{bad:?}");
        }
    }
}
