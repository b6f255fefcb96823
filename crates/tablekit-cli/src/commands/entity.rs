//! `tablekit entity get | put | merge | delete`: one entity, in the export format.

use std::io::Read as _;

use serde_json::{Map, Value};
use tablekit::azure::{Account, Table};
use tablekit::core::{ETag, Entity, IfMatch, Keys, Properties};

use super::{Ctx, confirm, transfer};
use crate::cli::{EntityCommand, EntityKeys, EntityWrite};
use crate::entity_json::{read_line, write_line};
use crate::exit::{CliError, CliResult, Exit};

/// Runs an `entity` subcommand.
///
/// Requests: one each (`get`, `put`, `merge`, `delete`); none when the keys, the JSON or the
/// entity is refused.
pub(crate) async fn run(ctx: &Ctx, account: &Account, command: EntityCommand) -> CliResult {
    match command {
        EntityCommand::Get(keys) => get(ctx, account, &keys).await,
        EntityCommand::Put(write) => put_or_merge(ctx, account, &write, false).await,
        EntityCommand::Merge(write) => put_or_merge(ctx, account, &write, true).await,
        EntityCommand::Delete {
            keys,
            if_match,
            yes,
        } => delete(ctx, account, &keys, if_match.as_deref(), yes).await,
    }
}

fn open(account: &Account, keys: &EntityKeys) -> CliResult<(Table, Keys)> {
    let table = account.table(&keys.table)?;
    let k = Keys::new(keys.partition_key.clone(), keys.row_key.clone())
        .map_err(|e| CliError::context("keys", &e))?;
    Ok((table, k))
}

fn describe(keys: &Keys) -> String {
    format!("({:?}, {:?})", keys.pk(), keys.rk())
}

fn condition(text: &str) -> IfMatch {
    if text == "*" {
        IfMatch::Any
    } else {
        IfMatch::ETag(ETag::new(text))
    }
}

async fn get(ctx: &Ctx, account: &Account, keys: &EntityKeys) -> CliResult {
    let (table, k) = open(account, keys)?;
    let stored = table
        .get::<Properties>(&k)
        .await
        .map_err(|e| CliError::context(&format!("reading {}", table.name()), &e))?;
    let Some(stored) = stored else {
        return Err(CliError::failure(format!(
            "{} {}: no such entity",
            table.name(),
            describe(&k)
        )));
    };
    let mut line = Vec::new();
    write_line(
        &mut line,
        stored.keys.pk(),
        stored.keys.rk(),
        stored.timestamp.as_ref(),
        &stored.value,
    );
    // The ETag first: readers of the export format ignore `odata.*` members.
    let mut out = b"{\"odata.etag\":".to_vec();
    out.extend_from_slice(
        serde_json::to_string(stored.etag.as_str())
            .unwrap_or_default()
            .as_bytes(),
    );
    out.push(b',');
    out.extend_from_slice(&line[1..]);
    // The entity is the output, in either --output mode.
    ctx.stdout_carries_data();
    super::write_stdout(&out)?;
    Ok(Exit::Success)
}

/// The properties of an entity given as JSON in the export format; keys in it must be the
/// arguments'.
fn properties(text: &str, keys: &Keys) -> CliResult<Properties> {
    let mut map: Map<String, Value> = serde_json::from_str(text.trim())
        .map_err(|e| CliError::usage(format!("the entity JSON: {e}")))?;
    for (name, given) in [("PartitionKey", keys.pk()), ("RowKey", keys.rk())] {
        match map.get(name) {
            None => {
                map.insert(name.to_owned(), Value::String(given.to_owned()));
            }
            Some(Value::String(s)) if s == given => {}
            Some(other) => {
                return Err(CliError::usage(format!(
                    "the entity JSON has {name} {other}, the arguments {given:?}"
                )));
            }
        }
    }
    read_line(&Value::Object(map).to_string())
        .map(|row| row.properties)
        .map_err(|e| CliError::usage(format!("the entity JSON: {e}")))
}

fn read_input(write: &EntityWrite) -> CliResult<String> {
    if let Some(json) = &write.json {
        return Ok(json.clone());
    }
    let mut text = String::new();
    match write.input.as_deref() {
        Some(path) if path.as_os_str() == "-" => {
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CliError::usage(format!("stdin: {e}")))?;
        }
        Some(path) => {
            text = std::fs::read_to_string(path)
                .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
        }
        None => return Err(CliError::usage("give the entity with --json or --in")),
    }
    Ok(text)
}

async fn put_or_merge(ctx: &Ctx, account: &Account, write: &EntityWrite, merge: bool) -> CliResult {
    let (table, k) = open(account, &write.keys)?;
    let props = properties(&read_input(write)?, &k)?;
    let entity = Entity::new(k.clone(), props);
    // Checked as a bulk write would check it: the service's own limits included.
    let check = if merge {
        tablekit::core::batch::Operation::upsert_merge(&entity)
    } else {
        tablekit::core::batch::Operation::upsert_replace(&entity)
    }
    .and_then(|op| transfer::check_for_service(&table, &op));
    check.map_err(|e| CliError::context(&format!("{} {}", table.name(), describe(&k)), &e))?;
    let result = match (merge, write.if_match.as_deref()) {
        (false, None) => table.upsert_replace(&entity).await,
        (true, None) => table.upsert_merge(&entity).await,
        (false, Some(c)) => table.replace(&entity, condition(c)).await,
        (true, Some(c)) => table.merge(&entity, condition(c)).await,
    };
    let verb = if merge { "merged" } else { "put" };
    let etag = result.map_err(|e| {
        CliError::context(&format!("writing {} {}", table.name(), describe(&k)), &e)
    })?;
    ctx.summary(
        &format!("{verb} {} {}: etag {}", table.name(), describe(&k), etag.as_str()),
        serde_json::json!({
            "table": table.name(), "PartitionKey": k.pk(), "RowKey": k.rk(), "etag": etag.as_str()}),
    );
    Ok(Exit::Success)
}

async fn delete(
    ctx: &Ctx,
    account: &Account,
    keys: &EntityKeys,
    if_match: Option<&str>,
    yes: bool,
) -> CliResult {
    let (table, k) = open(account, keys)?;
    confirm(
        yes,
        &format!("delete {} {}?", table.name(), describe(&k)),
        &format!("deleting {} {}", table.name(), describe(&k)),
    )?;
    table
        .delete(&k, if_match.map_or(IfMatch::Any, condition))
        .await
        .map_err(|e| {
            CliError::context(&format!("deleting {} {}", table.name(), describe(&k)), &e)
        })?;
    ctx.summary(
        &format!("deleted {} {}", table.name(), describe(&k)),
        serde_json::json!({"table": table.name(),
            "PartitionKey": k.pk(), "RowKey": k.rk()}),
    );
    Ok(Exit::Success)
}
