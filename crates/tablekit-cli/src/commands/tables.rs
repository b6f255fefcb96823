//! `tablekit tables list | create | delete`.

use std::io::Write as _;

use tablekit::azure::Account;

use super::{Ctx, interactive};
use crate::cli::TablesCommand;
use crate::exit::{CliError, CliResult, Exit};

/// Runs a `tables` subcommand.
///
/// Requests: `list` one per 1,000 tables; `create` and `delete` one.
pub(crate) async fn run(ctx: &Ctx, account: &Account, command: TablesCommand) -> CliResult {
    match command {
        TablesCommand::List { prefix } => {
            let names = account
                .list_tables(&prefix)
                .await
                .map_err(|e| CliError::context("listing tables", &e))?;
            if ctx.json() {
                ctx.summary("", serde_json::json!({"tables": names}));
                return Ok(Exit::Success);
            }
            let mut out = std::io::stdout().lock();
            for name in names {
                writeln!(out, "{name}").map_err(|e| CliError::failure(e.to_string()))?;
            }
            Ok(Exit::Success)
        }
        TablesCommand::Create {
            name,
            if_not_exists,
        } => {
            let table = account.table(&name)?;
            let created = if if_not_exists {
                table.create_if_not_exists().await
            } else {
                table.create().await.map(|()| true)
            }
            .map_err(|e| CliError::context(&format!("creating {name}"), &e))?;
            ctx.summary(
                &if created {
                    format!("created {name}")
                } else {
                    format!("{name} exists already")
                },
                serde_json::json!({"table": name, "created": created}),
            );
            Ok(Exit::Success)
        }
        TablesCommand::Delete { name, yes } => {
            let table = account.table(&name)?;
            if !yes {
                if !interactive() {
                    return Err(CliError::usage(format!(
                        "deleting {name} removes every entity in it: pass --yes to confirm"
                    )));
                }
                eprint!("delete table {name} and every entity in it? [y/N] ");
                let mut answer = String::new();
                std::io::stdin()
                    .read_line(&mut answer)
                    .map_err(|e| CliError::failure(e.to_string()))?;
                if !matches!(answer.trim(), "y" | "Y" | "yes") {
                    return Err(CliError::usage("not deleted"));
                }
            }
            table
                .delete_table()
                .await
                .map_err(|e| CliError::context(&format!("deleting {name}"), &e))?;
            ctx.summary(
                &format!("deleted {name}"),
                serde_json::json!({"table": name, "deleted": true}),
            );
            Ok(Exit::Success)
        }
    }
}
