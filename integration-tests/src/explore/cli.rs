//! The `tablekit` tool, run as a process: an export read page by page, under every fault and
//! every page split, ends (after `--resume` when it failed or was killed) with exactly the
//! lines the fault-free export wrote.
//!
//! The tool is found next to the running binary (`target/<profile>/tablekit`): `cargo test
//! --workspace` and `cargo xtask explore` build it first.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::Value;
use tablekit_azure::Account;
use tablekit_core::{Entity, Keys, Properties};
use tablekit_testkit::explore::{Entry, Scenario};

use super::model::{ensure, new_table};

/// The scenarios of this module.
pub fn entries() -> Vec<Entry> {
    vec![Entry::new(Export)]
}

/// The `tablekit` binary beside the running one (a test binary runs from `deps/`).
fn tool() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let tool = dir.join(format!("tablekit{}", std::env::consts::EXE_SUFFIX));
    if tool.exists() {
        Ok(tool)
    } else {
        Err(format!(
            "{} is missing: build the tool first (cargo build -p tablekit-cli)",
            tool.display()
        ))
    }
}

/// The connection string of `account`, with its endpoints: the emulator's well-known key.
fn connection_string(account: &Account) -> String {
    let e = account.endpoints();
    tablekit_testkit::fixtures::connection_string(&tablekit_testkit::Endpoints::new(
        e.blob.as_str().trim_end_matches('/').to_owned(),
        e.queue.as_str().trim_end_matches('/').to_owned(),
        e.table.as_str().trim_end_matches('/').to_owned(),
    ))
}

/// The export's lines with what differs between two copies of the same data removed (the
/// service's Timestamp and ETag), in file order.
fn lines(text: &str) -> Result<Vec<Value>, String> {
    text.lines()
        .map(|line| {
            let mut v: Value =
                serde_json::from_str(line).map_err(|e| format!("not JSON: {e}: {line}"))?;
            if let Value::Object(map) = &mut v {
                map.retain(|k, _| !k.starts_with("Timestamp") && !k.starts_with("odata.etag"));
            }
            Ok(v)
        })
        .collect()
}

/// `tablekit export` of a table of 3 partitions × 8 entities, 7 entities a page.
pub struct Export;

/// The table and the run's output file.
pub struct ExportCtx {
    table: String,
    out: PathBuf,
}

/// Runs the tool; `Ok(exit code)`.
async fn run(account: &Account, args: &[&str]) -> Result<i32, String> {
    let status = tokio::process::Command::new(tool()?)
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .arg("--connection-string")
        .arg(connection_string(account))
        .args(["--quiet", "--retries", "2"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // A stopped process is killed with the future that awaits it.
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|e| format!("running the tool: {e}"))?;
    Ok(status.code().unwrap_or(-1))
}

impl Scenario for Export {
    type Ctx = ExportCtx;
    type Report = i32;

    fn name(&self) -> &'static str {
        "cli.export"
    }

    fn invariant(&self) -> &'static str {
        "the export — resumed after a failure or a kill — holds exactly the fault-free export's entities, in its order, every property and type"
    }

    async fn prepare(&self, direct: &Account) -> Result<ExportCtx, String> {
        tool()?;
        let table = new_table(direct, "xexport").await?;
        let handle = direct.table(&table).map_err(|e| e.to_string())?;
        for p in 0..3 {
            for r in 0..8 {
                let props = Properties::new()
                    .with("Big", (1_i64 << 53) + r)
                    .with("Text", format!("it's «{p}/{r}»"))
                    .with("Bytes", vec![0_u8, 255, r as u8])
                    .with("Ratio", 1.0_f64);
                let keys =
                    Keys::new(format!("p'{p}"), format!("r{r:02}")).map_err(|e| e.to_string())?;
                handle
                    .insert(&Entity::new(keys, props))
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        let dir = std::env::temp_dir().join("tablekit-explore");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let out = dir.join(format!("{table}.jsonl"));
        Ok(ExportCtx { table, out })
    }

    async fn operate(&self, ctx: &ExportCtx, account: &Account) -> i32 {
        let out = ctx.out.to_string_lossy().into_owned();
        let args = ["export", &ctx.table, "--out", &out, "--page-size", "7"];
        run(account, &args).await.unwrap_or(-1)
    }

    /// As the tool says after a failure: run it again with `--resume` (or from the start when
    /// it stopped before its first checkpoint).
    async fn recover(
        &self,
        ctx: &ExportCtx,
        account: &Account,
        report: Option<&i32>,
    ) -> Result<(), String> {
        if report == Some(&0) {
            return Ok(());
        }
        let out = ctx.out.to_string_lossy().into_owned();
        let checkpoint = PathBuf::from(format!("{out}.checkpoint"));
        let again = if checkpoint.exists() {
            "--resume"
        } else {
            "--overwrite"
        };
        let args = [
            "export",
            &ctx.table,
            "--out",
            &out,
            "--page-size",
            "7",
            again,
        ];
        match run(account, &args).await? {
            0 => Ok(()),
            code => Err(format!("the export, run again with {again}, exited {code}")),
        }
    }

    async fn check(
        &self,
        ctx: &ExportCtx,
        _direct: &Account,
        _report: Option<&i32>,
        _baseline: Option<&i32>,
    ) -> Result<(), String> {
        let text =
            std::fs::read_to_string(&ctx.out).map_err(|e| format!("{}: {e}", ctx.out.display()))?;
        let got = lines(&text)?;
        let _ = std::fs::remove_file(&ctx.out);
        let _ = std::fs::remove_file(format!("{}.checkpoint", ctx.out.display()));
        ensure(got.len() == 24, || format!("{} lines, not 24", got.len()))?;
        // The fault-free run's table holds the same data: compare with what it must be.
        let mut expected = Vec::new();
        for p in 0..3 {
            for r in 0..8 {
                expected.push((format!("p'{p}"), format!("r{r:02}")));
            }
        }
        for (line, (pk, rk)) in got.iter().zip(&expected) {
            let keys = (line["PartitionKey"].as_str(), line["RowKey"].as_str());
            ensure(keys == (Some(pk.as_str()), Some(rk.as_str())), || {
                format!("expected {pk}/{rk} in this place, found {line}")
            })?;
            let r = rk[1..].parse::<i64>().unwrap_or(-1);
            ensure(
                line["Big"] == Value::String(((1_i64 << 53) + r).to_string()),
                || format!("{pk}/{rk}: Big is {}", line["Big"]),
            )?;
            ensure(line["Big@odata.type"] == "Edm.Int64", || {
                format!("{pk}/{rk}: Big's type")
            })?;
        }
        Ok(())
    }
}
