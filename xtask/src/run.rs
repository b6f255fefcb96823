//! The `demo`, `test` and `azurite` commands.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use tablekit_testkit::{Azurite, FaultProxy};

use crate::install::{self, workspace_root};

/// Runs `cargo` with `args` in the workspace root; fails with the command line on error.
fn cargo(args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = install::command(cargo);
    cmd.args(args).current_dir(workspace_root());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = cmd
        .status()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

pub(crate) fn test(long: bool) -> Result<(), String> {
    let install = install::ensure()?;
    let dir = install.dir().to_string_lossy().into_owned();
    let mut envs = vec![("TABLEKIT_AZURITE_DIR", dir.as_str())];
    if long {
        envs.push(("TABLEKIT_LONG", "1"));
    }
    cargo(&["fmt", "--all", "--check"], &[])?;
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--quiet",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    check_book()?;
    crate::gates::docs_rules()?;
    cargo(
        &["doc", "--workspace", "--no-deps", "--quiet"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    // Every test binary runs even if one fails, and the gates run after failed tests, so a
    // run reports all failures at once. The public-API snapshots build in a target directory
    // of their own, so they run beside the tests at the lowest CPU priority, using the CPU
    // the tests leave idle while they wait on the emulator.
    let jobs = crate::suite::build(&envs)?;
    // Each test binary starts an emulator of its own, the longest three at once: start one
    // here first, so a broken installation fails once with its reason, and the time a start
    // takes on this machine is in the log beside any test that gave up waiting for one.
    let started = std::time::Instant::now();
    Azurite::builder()
        .with_install(install.clone())
        .start()
        .map_err(|e| format!("the test emulator does not start: {e}"))?
        .stop();
    eprintln!(
        "xtask: an emulator started in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The public-API snapshots, the facade-feature builds and the MSRV build each use a
    // toolchain or a target directory of their own, so they run one after another beside the
    // tests, at the lowest CPU priority.
    let beside = std::thread::spawn(|| {
        crate::gates::run_in_background();
        [
            ("public API", crate::gates::public_api_snapshots(false)),
            ("facade features", crate::gates::features()),
            ("MSRV", crate::gates::msrv()),
        ]
    });
    let mut results = vec![("tests", crate::suite::run(jobs))];
    results.extend(
        beside
            .join()
            .map_err(|_| "the gates beside the tests panicked".to_owned())?,
    );
    let mut failures = Vec::new();
    for (name, result) in results {
        if let Err(message) = result {
            eprintln!("xtask: {name} failed: {message}");
            failures.push(name);
        }
    }
    if failures.is_empty() {
        eprintln!("xtask: all checks passed");
        Ok(())
    } else {
        Err(format!("failed: {}", failures.join(", ")))
    }
}

/// The API gates (see [`crate::gates`]), each reported by name.
pub(crate) fn gates() -> Result<(), String> {
    crate::gates::docs_rules()?;
    crate::gates::features()?;
    crate::gates::msrv()?;
    crate::gates::public_api_snapshots(false)
}

/// Fails if a book page includes a missing file or anchor.
fn check_book() -> Result<(), String> {
    match crate::book::check_includes(&workspace_root().join("docs/src")) {
        Ok(count) => {
            eprintln!("xtask: book: {count} includes resolve");
            Ok(())
        }
        Err(problems) => Err(format!(
            "book includes are broken:\n  {}",
            problems.join("\n  ")
        )),
    }
}

pub(crate) fn demo() -> Result<(), String> {
    let install = install::ensure()?;
    let bin_dir = workspace_root().join("examples/src/bin");
    let examples = example_names(&bin_dir)?;
    cargo(
        &[
            "build",
            "--quiet",
            "-p",
            "tablekit-examples",
            "-p",
            "tablekit-cli",
            "--bins",
        ],
        &[],
    )?;
    let azurite = Azurite::builder()
        .with_install(install.clone())
        .start()
        .map_err(|e| e.to_string())?;
    // Every example talks to Azurite through counting proxies, so the demo measures the
    // requests each one sends itself.
    let e = azurite.endpoints();
    let proxy = |endpoint: &str| {
        let authority = endpoint
            .split("://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap_or_default();
        let addr = authority
            .parse()
            .map_err(|err| format!("{endpoint}: {err}"))?;
        FaultProxy::start(addr).map_err(|err| err.to_string())
    };
    let proxies = [proxy(&e.table)?, proxy(&e.queue)?, proxy(&e.blob)?];
    let connection_string = format!(
        "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};TableEndpoint={};QueueEndpoint={};BlobEndpoint={}",
        tablekit_testkit::ACCOUNT,
        tablekit_testkit::ACCOUNT_KEY,
        proxies[0].endpoint_for(&e.table),
        proxies[1].endpoint_for(&e.queue),
        proxies[2].endpoint_for(&e.blob),
    );
    let requests = || proxies.iter().map(|p| p.stats().requests_seen).sum::<u64>();
    let mut summary = Vec::new();
    for name in &examples {
        let about = first_doc_line(&bin_dir.join(format!("{name}.rs")));
        println!("\n=== {name}: {about} ===");
        if name == ENTRA_EXAMPLE {
            let (requests, result) = run_entra_example(&install);
            summary.push((name.clone(), about, requests, result));
            continue;
        }
        let before = requests();
        let result = cargo(
            &["run", "--quiet", "-p", "tablekit-examples", "--bin", name],
            &[("AZURE_STORAGE_CONNECTION_STRING", &connection_string)],
        );
        summary.push((name.clone(), about, requests() - before, result));
    }
    println!("\n=== tablekit: export → import → export round trip with the tool ===");
    let before = requests();
    let result = tool_round_trip(&connection_string);
    if let Err(e) = &result {
        println!("round trip FAILED: {e}");
    }
    summary.push((
        "tablekit (the tool)".into(),
        "an export imported into another table exports to the same bytes, as JSON Lines and as CSV"
            .into(),
        requests() - before,
        result,
    ));
    drop(proxies);
    azurite.stop();
    println!("\n| example | what it demonstrates | requests | result |\n|---|---|---|---|");
    for (name, about, requests, result) in &summary {
        let outcome = if result.is_ok() { "ok" } else { "FAILED" };
        println!("| {name} | {about} | {requests} | {outcome} |");
    }
    let failed: Vec<String> = summary
        .iter()
        .filter_map(|(n, _, _, r)| r.as_ref().err().map(|e| format!("{n}: {e}")))
        .collect();
    println!(
        "\n=== demo: {} of {} examples succeeded ===",
        summary.len() - failed.len(),
        summary.len()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// Entities the demo's round trip writes: 4 partitions of 10, every EDM type the service
/// keeps (Int64 above 2^53, DateTime to 100 ns, Guid, Binary, Double, Int32, unicode text).
fn round_trip_lines() -> String {
    let mut text = String::new();
    for p in 0..4 {
        for r in 0..10 {
            let i = p * 10 + r;
            text.push_str(&format!(
                concat!(
                    r#"{{"PartitionKey":"demo-p{p}","RowKey":"r{r:03}","#,
                    r#""Big@odata.type":"Edm.Int64","Big":"{big}","#,
                    r#""Bytes@odata.type":"Edm.Binary","Bytes":"3q2+7w==","Count":{i},"#,
                    r#""Id@odata.type":"Edm.Guid","Id":"6f9619ff-8b86-d011-b42d-00c04fc9{i:04x}","#,
                    r#""Name":"it's «{i}» \"quoted\"","#,
                    r#""Ratio@odata.type":"Edm.Double","Ratio":{i}.5,"#,
                    r#""When@odata.type":"Edm.DateTime","When":"2026-11-22T10:00:{i:02}.1234567Z"}}"#,
                    "\n"
                ),
                p = p,
                r = r,
                i = i,
                big = (1_i64 << 53) + 1 + i as i64,
            ));
        }
    }
    text
}

/// An export without its Timestamps (which the service sets on every write, so a copy's
/// differ): the rest is what a round trip must keep byte for byte.
fn without_timestamps(export: &str) -> String {
    const FIELD: &str = r#","Timestamp@odata.type":"Edm.DateTime","Timestamp":""#;
    export
        .lines()
        .map(|line| match line.find(FIELD) {
            Some(at) => {
                let rest = &line[at + FIELD.len()..];
                let end = rest.find('"').map_or(rest.len(), |e| e + 1);
                format!("{}{}\n", &line[..at], &rest[end..])
            }
            None => format!("{line}\n"),
        })
        .collect()
}

/// The target directory cargo builds into.
pub(crate) fn target_dir() -> std::path::PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").map(std::path::PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// The demo's round trip with the built `tablekit` binary: generated lines imported into a
/// new table, exported, imported into another table, exported again; both exports and the
/// generated lines must agree byte for byte (Timestamps aside), and `copy --verify-only`
/// must find the two tables equal.
fn tool_round_trip(connection_string: &str) -> Result<(), String> {
    let tool = target_dir().join(format!("debug/tablekit{}", std::env::consts::EXE_SUFFIX));
    let dir = target_dir().join("demo-round-trip");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let suffix = std::process::id();
    let (first, second) = (format!("DemoTool{suffix}"), format!("DemoToolCopy{suffix}"));
    let third = format!("DemoToolCsv{suffix}");
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let (input, a, b) = (file("input.jsonl"), file("a.jsonl"), file("b.jsonl"));
    let lines = round_trip_lines();
    std::fs::write(&input, &lines).map_err(|e| format!("{input}: {e}"))?;
    let tablekit = |step: &str, args: &[&str]| -> Result<(), String> {
        let output = Command::new(&tool)
            .env_remove("AZURE_STORAGE_CONNECTION_STRING")
            .args(["--connection-string", connection_string])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("could not run {}: {e}", tool.display()))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("done");
        if output.status.success() {
            println!("tablekit {step}: {last}");
            Ok(())
        } else {
            Err(format!(
                "tablekit {step} failed ({}): {stderr}",
                output.status
            ))
        }
    };
    let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"));
    let run = || -> Result<(), String> {
        tablekit(
            &format!("import {first} (40 generated entities)"),
            &["import", &first, "--in", &input, "--create"],
        )?;
        tablekit(&format!("export {first}"), &["export", &first, "--out", &a])?;
        tablekit(
            &format!("import {second} from the export"),
            &["import", &second, "--in", &a, "--create"],
        )?;
        tablekit(
            &format!("export {second}"),
            &["export", &second, "--out", &b],
        )?;
        let (first_export, second_export) = (
            without_timestamps(&read(&a)?),
            without_timestamps(&read(&b)?),
        );
        if first_export != lines {
            return Err(format!(
                "the export of {first} differs from the imported lines"
            ));
        }
        if second_export != first_export {
            return Err(format!("the exports of {first} and {second} differ"));
        }
        println!(
            "compare: both exports hold the 40 imported entities byte for byte (Timestamps aside)"
        );
        // The same round trip through Storage Explorer's typed CSV.
        let (csv, c) = (file("a.csv"), file("c.jsonl"));
        tablekit(
            &format!("export {first} as CSV"),
            &["export", &first, "--out", &csv],
        )?;
        tablekit(
            &format!("import {third} from the CSV"),
            &["import", &third, "--in", &csv, "--create"],
        )?;
        tablekit(&format!("export {third}"), &["export", &third, "--out", &c])?;
        if without_timestamps(&read(&c)?) != first_export {
            return Err(format!("{third}, imported from CSV, differs from {first}"));
        }
        println!("compare: the CSV round trip gives the same 40 entities (Timestamps aside)");
        tablekit(
            &format!("copy {first} {second} --verify-only"),
            &["copy", &first, &second, "--verify-only"],
        )
    };
    let result = run();
    for table in [&first, &second, &third] {
        let _ = tablekit(
            &format!("tables delete {table}"),
            &["--quiet", "tables", "delete", table, "--yes"],
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The example that authenticates with Microsoft Entra ID tokens.
const ENTRA_EXAMPLE: &str = "entra-id";

/// Runs the Entra ID example against an Azurite of its own that serves HTTPS and accepts
/// bearer tokens (which plain HTTP never carries), configured as a real account would be:
/// an account name, endpoints, a token scope, and the emulator's certificate authority.
/// Azurite knows no identity, so the example mints its own tokens. HTTPS traffic cannot go
/// through the counting proxies: the requests are the count the example reports itself.
fn run_entra_example(install: &tablekit_testkit::AzuriteInstall) -> (u64, Result<(), String>) {
    let azurite = match Azurite::builder()
        .with_install(install.clone())
        .with_oauth()
        .start()
    {
        Ok(azurite) => azurite,
        Err(e) => return (0, Err(e.to_string())),
    };
    let e = azurite.endpoints();
    let ca = azurite
        .ca_certificate_path()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let envs = [
        ("AZURE_STORAGE_ACCOUNT_NAME", tablekit_testkit::ACCOUNT),
        ("AZURE_STORAGE_TABLE_ENDPOINT", e.table.as_str()),
        ("AZURE_STORAGE_QUEUE_ENDPOINT", e.queue.as_str()),
        ("AZURE_STORAGE_BLOB_ENDPOINT", e.blob.as_str()),
        ("AZURE_STORAGE_TOKEN_SCOPE", "account"),
        ("TABLEKIT_ROOT_CERTIFICATE", ca.as_str()),
        ("TABLEKIT_DEMO_MINTED_TOKENS", "1"),
    ];
    let output = cargo_output(
        &[
            "run",
            "--quiet",
            "-p",
            "tablekit-examples",
            "--bin",
            ENTRA_EXAMPLE,
        ],
        &envs,
        // A connection string in the caller's environment would take precedence.
        &["AZURE_STORAGE_CONNECTION_STRING"],
    );
    azurite.stop();
    match output {
        Ok(text) => {
            let requests = text
                .lines()
                .rev()
                .find_map(|l| l.strip_suffix(" requests in total"))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|n| n.parse().ok());
            match requests {
                Some(n) => (n, Ok(())),
                None => (0, Err("no request count in its output".into())),
            }
        }
        Err(e) => (0, Err(e)),
    }
}

/// Like [`cargo`], with `removed` variables taken out of the environment, printing and
/// returning its standard output.
fn cargo_output(args: &[&str], envs: &[(&str, &str)], removed: &[&str]) -> Result<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = install::command(cargo);
    cmd.args(args)
        .current_dir(workspace_root())
        .stdout(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    for k in removed {
        cmd.env_remove(k);
    }
    eprintln!("xtask: cargo {}", args.join(" "));
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    let mut text = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
            text.push_str(&line);
            text.push('\n');
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if status.success() {
        Ok(text)
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

/// The first line of an example's `//!` documentation: what it demonstrates.
fn first_doc_line(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let doc: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .collect();
    // The first sentence of the first paragraph.
    let paragraph = doc
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let sentence = paragraph
        .split(". ")
        .next()
        .unwrap_or_default()
        .trim_end_matches('.');
    sentence.to_owned()
}

/// Where the Guarantees chapter keeps the table of explored schedules.
const GUARANTEES: &str = "docs/src/guarantees.md";
const TABLE_BEGIN: &str = "<!-- explored schedules: begin (cargo xtask explore --bless-docs) -->";
const TABLE_END: &str = "<!-- explored schedules: end -->";

/// `cargo xtask explore`: the explorer binary of the integration tests over every scenario,
/// with the arguments given; `--bless-docs` writes its table into the Guarantees chapter.
pub(crate) fn explore(args: &[String]) -> Result<(), String> {
    let install = install::ensure()?;
    let dir = install.dir().to_string_lossy().into_owned();
    let bless = args.iter().any(|a| a == "--bless-docs");
    let table = workspace_root().join("target/explore/table.md");
    // The `cli.*` scenarios run the `tablekit` binary beside the explorer's: build it first,
    // as `cargo test` does for the suite.
    build_tool(false)?;
    let mut cmd: Vec<String> = [
        "run",
        "--quiet",
        "-p",
        "tablekit-integration-tests",
        "--bin",
        "explore",
        "--",
    ]
    .map(String::from)
    .to_vec();
    cmd.extend(args.iter().filter(|a| *a != "--bless-docs").cloned());
    if bless {
        std::fs::create_dir_all(table.parent().unwrap_or(&workspace_root()))
            .map_err(|e| format!("target/explore: {e}"))?;
        cmd.push("--markdown".into());
        cmd.push(table.to_string_lossy().into_owned());
    }
    let started = std::time::Instant::now();
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let result = cargo(&refs, &[("TABLEKIT_AZURITE_DIR", dir.as_str())]);
    eprintln!(
        "xtask: explore took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    result?;
    if bless {
        let generated =
            std::fs::read_to_string(&table).map_err(|e| format!("{}: {e}", table.display()))?;
        let path = workspace_root().join(GUARANTEES);
        let chapter = std::fs::read_to_string(&path).map_err(|e| format!("{GUARANTEES}: {e}"))?;
        let spliced = splice(&chapter, &generated)?;
        std::fs::write(&path, spliced).map_err(|e| format!("{GUARANTEES}: {e}"))?;
        eprintln!("xtask: rewrote the explored-schedules table in {GUARANTEES}");
    }
    Ok(())
}

/// `chapter` with the text between the table markers replaced by `table`.
fn splice(chapter: &str, table: &str) -> Result<String, String> {
    let (Some(begin), Some(end)) = (chapter.find(TABLE_BEGIN), chapter.find(TABLE_END)) else {
        return Err(format!(
            "{GUARANTEES} has no `{TABLE_BEGIN}` … `{TABLE_END}` markers"
        ));
    };
    let start = begin + TABLE_BEGIN.len();
    if end < start {
        return Err(format!("{GUARANTEES}: the table's end marker comes first"));
    }
    Ok(format!(
        "{}\n\n{}\n{}",
        &chapter[..start],
        table.trim(),
        &chapter[end..]
    ))
}

pub(crate) fn bench(args: &[String]) -> Result<(), String> {
    let install = install::ensure()?;
    let dir = install.dir().to_string_lossy().into_owned();
    // Workload 10 runs the `tablekit` binary that sits beside the bench's: the same profile.
    build_tool(true)?;
    let mut cmd = vec!["run", "--release", "--quiet", "-p", "tablekit-bench", "--"];
    cmd.extend(args.iter().map(String::as_str));
    cargo(&cmd, &[("TABLEKIT_AZURITE_DIR", dir.as_str())])
}

/// Builds the `tablekit` tool, in the release profile or the dev one.
fn build_tool(release: bool) -> Result<(), String> {
    let mut args = vec![
        "build",
        "--quiet",
        "-p",
        "tablekit-cli",
        "--bin",
        "tablekit",
    ];
    if release {
        args.insert(1, "--release");
    }
    cargo(&args, &[])
}

/// The mdBook version the book is built with.
const MDBOOK_VERSION: &str = "0.4.40";

pub(crate) fn docs() -> Result<(), String> {
    check_book()?;
    let root = workspace_root();
    let install_root = root.join("target/mdbook");
    let mdbook = install_root.join("bin/mdbook");
    let installed = Command::new(&mdbook)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(MDBOOK_VERSION));
    if !installed {
        let dir = install_root.to_string_lossy().into_owned();
        cargo(
            &[
                "install",
                "mdbook",
                "--version",
                MDBOOK_VERSION,
                "--locked",
                "--no-default-features",
                "--root",
                &dir,
            ],
            &[],
        )?;
    }
    eprintln!("xtask: mdbook build docs");
    let status = Command::new(&mdbook)
        .args(["build", "docs"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("could not run {}: {e}", mdbook.display()))?;
    if !status.success() {
        return Err(format!("mdbook build failed ({status})"));
    }
    cargo(
        &["doc", "--workspace", "--no-deps", "--quiet"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    eprintln!("xtask: book in target/book, API docs in target/doc");
    Ok(())
}

pub(crate) fn azurite_foreground() -> Result<(), String> {
    let install = install::ensure()?;
    let azurite = Azurite::builder()
        .with_install(install)
        .with_ports(10000, 10001, 10002)
        .with_inherited_output()
        .start()
        .map_err(|e| e.to_string())?;
    println!("Azurite is running; connect with UseDevelopmentStorage=true. Ctrl-C stops it.");
    azurite.wait().map_err(|e| e.to_string())?;
    Ok(())
}

fn example_names(dir: &Path) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_explored_table_replaces_what_lies_between_its_markers() {
        let chapter = format!("# G\n\n{TABLE_BEGIN}\nold table\n{TABLE_END}\n\nafter\n");
        let out = splice(&chapter, "| new |\n").unwrap();
        assert_eq!(
            out,
            format!("# G\n\n{TABLE_BEGIN}\n\n| new |\n{TABLE_END}\n\nafter\n")
        );
        assert_eq!(
            splice(&out, "| new |").unwrap(),
            out,
            "blessing twice changes nothing"
        );
        assert!(splice("# G\n", "x").is_err());
    }
}
