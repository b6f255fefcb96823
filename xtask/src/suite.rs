//! The test phase of `cargo xtask test`: builds every test binary of the workspace, then runs
//! them and the doctests a few at once, the longest first.
//!
//! Most test binaries spend their time waiting on an Azurite of their own, so several at once
//! use the CPU that one alone leaves idle. Each runs as `cargo test` runs it: in its package's
//! directory, with the environment cargo gives a test binary, and with `--quiet`.

use std::collections::{BTreeMap, HashMap};
use std::env::{join_paths, split_paths, var_os};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::Instant;

use serde_json::Value;

use crate::install::{self, workspace_root};

/// How many jobs run at once unless `TABLEKIT_TEST_JOBS` says otherwise.
const DEFAULT_JOBS: usize = 3;

/// Without recorded times these start first, the longest measured first; then the rest of the
/// packages that hold most long binaries.
const LONG_BINARIES: &[&str] = &[
    "tablekit-integration-tests/explore",
    "tablekit-integration-tests/patterns_under_faults",
    "tablekit-index/jobs_follow_writes",
    "tablekit-cli/copy_faults",
    "tablekit-derive/compile_fail",
    "tablekit-integration-tests/load",
];
const LONG_PACKAGES: &[&str] = &["tablekit-integration-tests", "tablekit-cli"];

/// One job of the pool: a test binary, or the workspace's doctests.
pub(crate) struct Job {
    /// `package/target`, with the target's kind unless it is an integration test.
    name: String,
    command: Command,
}

/// A finished job.
struct Outcome {
    name: String,
    ok: bool,
    secs: f64,
    /// Passed, failed and ignored tests over the output's `test result:` lines.
    counts: [u64; 3],
    output: String,
}

/// A JSON string, or `""`.
fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

/// Builds the test binaries (`cargo test --no-run`, with `envs`) and returns them and the
/// doctests as jobs, each ready to run as `cargo test` would run it.
pub(crate) fn build(envs: &[(&str, &str)]) -> Result<Vec<Job>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let metadata = cargo_stdout(
        &cargo,
        &["metadata", "--no-deps", "--format-version=1"],
        &[],
    )?;
    let metadata: Value = serde_json::from_str(&metadata).map_err(|e| e.to_string())?;
    let packages: HashMap<&str, &Value> = (metadata["packages"].as_array().into_iter().flatten())
        .map(|p| (text(&p["id"]), p))
        .collect();
    eprintln!("xtask: cargo test --workspace --quiet --no-run");
    let build = [
        "test",
        "--workspace",
        "--quiet",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ];
    let messages = cargo_stdout(&cargo, &build, envs)?;
    let artifacts: Vec<Value> = (messages.lines())
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["executable"].is_string())
        .collect();
    let mut jobs = Vec::new();
    for test in artifacts.iter().filter(|a| a["profile"]["test"] == true) {
        let id = text(&test["package_id"]);
        let package = packages
            .get(id)
            .ok_or(format!("{id} is not in `cargo metadata`"))?;
        let (target, kind) = (
            text(&test["target"]["name"]),
            text(&test["target"]["kind"][0]),
        );
        let executable = Path::new(text(&test["executable"]));
        let mut command = Command::new(executable);
        command.arg("--quiet").envs(envs.iter().copied());
        package_env(&mut command, package, &cargo);
        // Cargo also gives integration tests the paths of their package's binaries...
        if kind == "test" {
            let bins = artifacts.iter().filter(|a| {
                a["package_id"] == id
                    && a["profile"]["test"] == false
                    && a["target"]["kind"][0] == "bin"
            });
            for bin in bins {
                let var = format!("CARGO_BIN_EXE_{}", text(&bin["target"]["name"]));
                command.env(var, text(&bin["executable"]));
            }
        }
        // ...and every test binary the output directory and its `deps` as library paths.
        let deps = executable.parent().unwrap_or(Path::new("."));
        let old = var_os("LD_LIBRARY_PATH").unwrap_or_default();
        let paths = [deps.parent().unwrap_or(deps), deps].map(Path::to_path_buf);
        let paths = join_paths(paths.into_iter().chain(split_paths(&old)));
        command.env("LD_LIBRARY_PATH", paths.map_err(|e| e.to_string())?);
        let name = match kind {
            "test" => format!("{}/{target}", text(&package["name"])),
            _ => format!("{}/{target} ({kind})", text(&package["name"])),
        };
        jobs.push(Job { name, command });
    }
    let mut doctests = install::command(&cargo);
    doctests
        .args(["test", "--workspace", "--doc", "--quiet"])
        .envs(envs.iter().copied());
    doctests.current_dir(workspace_root());
    jobs.push(Job {
        name: "doctests".into(),
        command: doctests,
    });
    Ok(jobs)
}

/// The directory and the variables cargo gives a test binary of `package` when it runs it
/// (those it sets only while compiling, such as `CARGO_CRATE_NAME`, it does not set here).
fn package_env(command: &mut Command, package: &Value, cargo: &str) {
    let manifest = Path::new(text(&package["manifest_path"]));
    let dir = manifest.parent().unwrap_or(Path::new("."));
    let version = text(&package["version"]);
    let (numbers, pre) = version.split_once('-').unwrap_or((version, ""));
    let numbers = numbers.split('+').next().unwrap_or_default().split('.');
    let authors = (package["authors"].as_array().into_iter().flatten()).map(text);
    command
        .current_dir(dir)
        .env("CARGO", cargo)
        .env("CARGO_MANIFEST_DIR", dir)
        .env("CARGO_MANIFEST_PATH", manifest)
        .env("CARGO_PKG_VERSION", version)
        .env("CARGO_PKG_VERSION_PRE", pre)
        .env("CARGO_PKG_AUTHORS", authors.collect::<Vec<_>>().join(":"));
    for (part, number) in ["MAJOR", "MINOR", "PATCH"].iter().zip(numbers) {
        command.env(format!("CARGO_PKG_VERSION_{part}"), number);
    }
    let keys = "name description homepage repository license license_file rust_version readme";
    for key in keys.split(' ') {
        let var = format!("CARGO_PKG_{}", key.to_ascii_uppercase());
        command.env(var, text(&package[key]));
    }
}

/// Runs `jobs`, `TABLEKIT_TEST_JOBS` (default 3) at once, the longest first; prints a line as
/// each finishes, with the whole output of one that failed; fails at the end naming them.
pub(crate) fn run(mut jobs: Vec<Job>) -> Result<(), String> {
    let workers = (std::env::var("TABLEKIT_TEST_JOBS").ok())
        .and_then(|n| n.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(DEFAULT_JOBS);
    let times_file = crate::run::target_dir().join("xtask/test-times.json");
    let times: HashMap<String, f64> = (std::fs::read_to_string(&times_file).ok())
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    jobs.sort_by(|a, b| rank(&times, &a.name).total_cmp(&rank(&times, &b.name)));
    eprintln!(
        "xtask: {} test binaries and the doctests, {workers} at once",
        jobs.len() - 1
    );
    let started = Instant::now();
    let queue = Mutex::new(jobs.into_iter());
    let (sender, finished) = mpsc::channel();
    let mut outcomes = Vec::new();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let (sender, queue) = (sender.clone(), &queue);
            scope.spawn(move || {
                while let Some(job) = queue.lock().map(|mut q| q.next()).unwrap_or_default() {
                    let _ = sender.send(run_one(job));
                }
            });
        }
        drop(sender);
        for outcome in finished {
            let [passed, failed, ignored] = outcome.counts;
            let status = if outcome.ok { "ok" } else { "FAILED" };
            eprintln!(
                "xtask: {status:<6} {:>6.1} s  {}  ({passed} passed, {failed} failed, {ignored} ignored)",
                outcome.secs, outcome.name,
            );
            // At once, so a run stopped before its end still shows it.
            if !outcome.ok {
                eprintln!("===== output of {}:\n{}", outcome.name, outcome.output);
            }
            outcomes.push(outcome);
        }
    });
    let secs = started.elapsed().as_secs_f64();
    eprintln!("xtask: the tests took {secs:.1} s");
    let recorded: BTreeMap<&str, f64> = (outcomes.iter())
        .map(|o| (o.name.as_str(), (o.secs * 10.0).round() / 10.0))
        .collect();
    // The times only order the next run: failing to keep them fails nothing.
    let _ = std::fs::create_dir_all(times_file.parent().unwrap_or(Path::new(".")));
    let _ = std::fs::write(
        &times_file,
        serde_json::to_string_pretty(&recorded).unwrap_or_default(),
    );
    let [passed, failed, ignored]: [u64; 3] =
        std::array::from_fn(|i| outcomes.iter().map(|o| o.counts[i]).sum());
    println!("tests: {passed} passed, {failed} failed, {ignored} skipped");
    let failed: Vec<&str> = (outcomes.iter().filter(|o| !o.ok))
        .map(|o| o.name.as_str())
        .collect();
    match failed.len() {
        0 => Ok(()),
        n => Err(format!("{n} failed: {}", failed.join(", "))),
    }
}

/// Sort key, smallest first: minus a job's recorded time; without recorded times, the binaries
/// known to be long, then the packages that hold them, then the rest.
fn rank(times: &HashMap<String, f64>, name: &str) -> f64 {
    if !times.is_empty() {
        // A job not seen before may be long: it starts first.
        return -times.get(name).copied().unwrap_or(f64::MAX);
    }
    let package = name.split('/').next().unwrap_or_default();
    let known = LONG_BINARIES.iter().position(|b| *b == name);
    let long_package = LONG_PACKAGES.contains(&package);
    known.unwrap_or(LONG_BINARIES.len() + usize::from(!long_package)) as f64
}

fn run_one(mut job: Job) -> Outcome {
    let started = Instant::now();
    let program = job.command.get_program().to_owned();
    let (ok, output) = match job.command.stdin(Stdio::null()).output() {
        Ok(o) => (o.status.success(), [o.stdout, o.stderr].concat()),
        Err(e) => (
            false,
            format!("could not run {program:?}: {e}").into_bytes(),
        ),
    };
    let output = String::from_utf8_lossy(&output).into_owned();
    let secs = started.elapsed().as_secs_f64();
    Outcome {
        counts: counts(&output),
        name: job.name,
        ok,
        secs,
        output,
    }
}

/// Passed, failed and ignored tests over every `test result:` line of libtest's output.
fn counts(output: &str) -> [u64; 3] {
    let lines = output.lines().filter(|l| l.starts_with("test result:"));
    let count = |line: &str, word: &str| -> Option<u64> {
        let part = line.split(';').find_map(|part| part.strip_suffix(word))?;
        part.trim().rsplit(' ').next()?.parse().ok()
    };
    lines.fold([0; 3], |[p, f, i], line| {
        let n = |word| count(line, word).unwrap_or(0);
        [p + n(" passed"), f + n(" failed"), i + n(" ignored")]
    })
}

/// Runs cargo with `args` in the workspace root, its standard error shown, and returns its
/// standard output.
fn cargo_stdout(cargo: &str, args: &[&str], envs: &[(&str, &str)]) -> Result<String, String> {
    let output = install::command(cargo)
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(workspace_root())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("`cargo {}` failed ({})", args[0], output.status));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_add_up_over_every_result_line() {
        let output = "running 3 tests\n...\n\
            test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\
            test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n";
        assert_eq!(counts(output), [5, 1, 1]);
    }

    #[test]
    fn recorded_times_start_the_longest_first_and_new_jobs_before_them() {
        let times = HashMap::from([("a/x".to_owned(), 5.0), ("b/y".to_owned(), 50.0)]);
        assert!(rank(&times, "c/new") < rank(&times, "b/y"));
        assert!(rank(&times, "b/y") < rank(&times, "a/x"));
    }

    #[test]
    fn without_times_the_known_long_binaries_then_their_packages_start_first() {
        let order = [
            "tablekit-integration-tests/patterns_under_faults",
            "tablekit-derive/compile_fail",
            "tablekit-cli/query",
            "tablekit-core/tablekit_core (lib)",
        ];
        let none = HashMap::new();
        assert!(
            order
                .windows(2)
                .all(|w| rank(&none, w[0]) < rank(&none, w[1]))
        );
    }
}
