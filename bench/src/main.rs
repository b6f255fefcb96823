//! `cargo xtask bench`: tablekit against the raw SDK (and optionally the Python SDK), in one
//! run against one in-memory Azurite, reporting medians, spreads and ratios.
//!
//! Usage: `tablekit-bench [--quick] [--with-python] [--throughput-only | --adaptive-only |
//! --reads-only | --sharded-only | --encryption-only | --tool-only]` (run through `cargo
//! xtask bench`, which builds it and the `tablekit` tool in release mode and passes the flags
//! on; `--throughput-only` runs workload 9 alone, `--adaptive-only` workload 14 (budgets not
//! told; about 7 minutes, whatever `--quick`), `--reads-only` workloads 12 and 13 (latency,
//! pattern reads), `--sharded-only` 15, `--encryption-only` 11, `--tool-only` 10, each
//! printing its table and checks). Writes `target/bench/report.json` (and workload
//! 14's plots, `target/bench/*.svg`) and prints a markdown table; exits non-zero if an
//! acceptance criterion fails.

mod adaptive;
mod ceiling;
mod data;
mod encryption;
mod latency;
mod measure;
mod memory;
mod patterns;
mod python;
mod raw;
mod reads;
mod report;
mod sharded;
mod svg;
mod throughput;
mod tool;
mod workloads;

use std::path::PathBuf;
use std::process::ExitCode;

use tablekit_azure::{Account, ScanPolicy, Settings, ThroughputPolicy};
use tablekit_testkit::Azurite;

use crate::workloads::Sizes;

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tablekit-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.first().map(String::as_str) == Some("stream-child") {
        let partitions = args.get(3).and_then(|p| p.parse().ok()).unwrap_or(0);
        return match runtime.block_on(memory::child(&args[1], &args[2], partitions)) {
            Ok(streamed) => {
                println!("{}", serde_json::to_string(&streamed).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    let quick = args.iter().any(|a| a == "--quick");
    if args.iter().any(|a| a == "--tool-only") {
        let sizes = if quick { Sizes::quick() } else { Sizes::full() };
        return runtime.block_on(tool_only(sizes));
    }
    if args.iter().any(|a| a == "--encryption-only") {
        let sizes = if quick { Sizes::quick() } else { Sizes::full() };
        return runtime.block_on(encryption_only(sizes));
    }
    if args.iter().any(|a| a == "--sharded-only") {
        let sizes = if quick { Sizes::quick() } else { Sizes::full() };
        return runtime.block_on(sharded_only(sizes));
    }
    if args.iter().any(|a| a == "--throughput-only") {
        let sizes = if quick { Sizes::quick() } else { Sizes::full() };
        return runtime.block_on(throughput_only(sizes));
    }
    if args.iter().any(|a| a == "--adaptive-only") {
        let sizes = if quick { Sizes::quick() } else { Sizes::full() };
        return runtime.block_on(adaptive_only(sizes));
    }
    if args.iter().any(|a| a == "--reads-only") {
        let sizes = if quick { Sizes::quick() } else { Sizes::full() };
        return runtime.block_on(reads_only(sizes));
    }
    let with_python = args.iter().any(|a| a == "--with-python");
    match runtime.block_on(run(
        if quick { Sizes::quick() } else { Sizes::full() },
        with_python,
    )) {
        Ok(report) => {
            println!("{}", report.markdown());
            let dir = target_dir().join("bench");
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join("report.json");
            match serde_json::to_string_pretty(&report).map(|json| std::fs::write(&path, json)) {
                Ok(Ok(())) => eprintln!("tablekit-bench: wrote {}", path.display()),
                _ => eprintln!("tablekit-bench: could not write {}", path.display()),
            }
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("tablekit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Workload 10 alone (`--tool-only`): its table and checks, no report file.
async fn tool_only(sizes: Sizes) -> ExitCode {
    let result = async {
        let azurite = Azurite::start().map_err(|e| e.to_string())?;
        let cs = azurite.connection_string();
        let account = Account::from_connection_string(&cs)
            .and_then(|a| {
                a.with_settings(Settings::default().with_throughput(ThroughputPolicy::unlimited()))
            })
            .map_err(|e| e.to_string())?;
        let scratch = target_dir().join("bench/tool");
        tool::tool(&account, &cs, None, sizes, &scratch).await
    }
    .await;
    match result {
        Ok(t) => {
            println!("{}", report::tool_section(&t));
            print_checks(&report::tool_checks(&t))
        }
        Err(e) => {
            eprintln!("tablekit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints checks as table rows; success when all pass.
fn print_checks(checks: &[report::Check]) -> ExitCode {
    for c in checks {
        println!(
            "| {} | {} | {} |",
            c.criterion,
            c.measured,
            if c.pass { "pass" } else { "FAIL" }
        );
    }
    if checks.iter().all(|c| c.pass) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Workload 11 alone (`--encryption-only`): its table and check, no report file.
async fn encryption_only(sizes: Sizes) -> ExitCode {
    let result = async {
        let azurite = Azurite::start().map_err(|e| e.to_string())?;
        let account = unlimited_account(&azurite.connection_string())?;
        encryption::encryption(&account, sizes).await
    }
    .await;
    match result {
        Ok(e) => {
            println!("{}", encryption::section(&e, &sizes));
            print_checks(&encryption::checks(&e))
        }
        Err(e) => {
            eprintln!("tablekit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// An account on `cs` without throughput governance (the workloads run alone use it).
pub(crate) fn unlimited_account(cs: &str) -> Result<Account, String> {
    Account::from_connection_string(cs)
        .and_then(|a| {
            a.with_settings(Settings::default().with_throughput(ThroughputPolicy::unlimited()))
        })
        .map_err(|e| e.to_string())
}

/// Workloads 12 and 13 alone (`--reads-only`): point-read latency and the patterns' reads,
/// with the emulator's load during each; their tables and checks, no report file.
async fn reads_only(sizes: Sizes) -> ExitCode {
    let result = async {
        let azurite = Azurite::start().map_err(|e| e.to_string())?;
        let account = unlimited_account(&azurite.connection_string())?;
        let endpoint = azurite.endpoints().table.clone();
        let pid = azurite.pid();
        let table = workloads::scan_table(&account, sizes.scan).await?;
        let sampler = ceiling::Sampler::start(pid);
        let latency = latency::latency(&table, &endpoint, sizes.scan, latency_reads(sizes)).await?;
        let mut loads: Vec<_> = sampler
            .finish("12. point-read latency")
            .into_iter()
            .collect();
        table.delete_table().await.map_err(|e| e.to_string())?;
        let sampler = ceiling::Sampler::start(pid);
        let reads = reads::reads(&account, &endpoint).await?;
        loads.extend(sampler.finish("13. pattern reads"));
        Ok::<_, String>((latency, reads, loads))
    }
    .await;
    match result {
        Ok((latency, reads, loads)) => {
            println!("{}", latency::section(&latency));
            println!("{}", reads::section(&reads));
            println!("{}", ceiling::section(&loads));
            let mut checks = latency::checks(&latency);
            checks.extend(reads::checks(&reads));
            print_checks(&checks)
        }
        Err(e) => {
            eprintln!("tablekit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Reads per run of workload 12: at least 2,000, so that p99.9 rests on two reads.
fn latency_reads(sizes: Sizes) -> usize {
    (2 * sizes.point_reads).max(2_000)
}

/// Workload 15 alone (`--sharded-only`): its table and check, no report file.
async fn sharded_only(sizes: Sizes) -> ExitCode {
    match sharded::sharded(sizes).await {
        Ok(s) => {
            println!("{}", sharded::section(&s));
            print_checks(&sharded::checks(&s))
        }
        Err(e) => {
            eprintln!("tablekit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Workload 9 alone (`--throughput-only`): its table and checks, no report file.
async fn throughput_only(sizes: Sizes) -> ExitCode {
    let result = async {
        let azurite = Azurite::start().map_err(|e| e.to_string())?;
        let account = unlimited_account(&azurite.connection_string())?;
        let endpoint = azurite.endpoints().table.clone();
        throughput::throughput(&account, &endpoint, sizes).await
    }
    .await;
    match result {
        Ok(t) => {
            println!("{}", report::throughput_section(&t));
            let checks = report::throughput_checks(&t);
            for c in &checks {
                println!(
                    "| {} | {} | {} |",
                    c.criterion,
                    c.measured,
                    if c.pass { "pass" } else { "FAIL" }
                );
            }
            if checks.iter().all(|c| c.pass) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("tablekit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes workload 14's plots into `target/bench/`.
fn plots(a: &adaptive::Adaptive) {
    match adaptive::write_plots(a, &target_dir().join("bench")) {
        Ok(paths) => {
            for p in paths {
                eprintln!("tablekit-bench: wrote {}", p.display());
            }
        }
        Err(e) => eprintln!("tablekit-bench: plots: {e}"),
    }
}

/// Workload 14 alone (`--adaptive-only`): its table, checks and plots; its figures in
/// `target/bench/adaptive.json`.
async fn adaptive_only(sizes: Sizes) -> ExitCode {
    let result = async {
        let azurite = Azurite::start().map_err(|e| e.to_string())?;
        let account = unlimited_account(&azurite.connection_string())?;
        let endpoint = azurite.endpoints().table.clone();
        adaptive::adaptive(&account, &endpoint, sizes.concurrency).await
    }
    .await;
    match result {
        Ok(a) => {
            println!("{}", report::adaptive_section(&a));
            plots(&a);
            let path = target_dir().join("bench/adaptive.json");
            if let Ok(json) = serde_json::to_string_pretty(&a) {
                let _ = std::fs::write(&path, json);
            }
            print_checks(&report::adaptive_checks(&a))
        }
        Err(e) => {
            eprintln!("tablekit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(sizes: Sizes, with_python: bool) -> Result<report::Report, String> {
    let azurite = Azurite::start().map_err(|e| e.to_string())?;
    let cs = azurite.connection_string();
    let endpoint = azurite.endpoints().table.clone();
    let account = Account::from_connection_string(&cs)
        .and_then(|a| {
            // Workloads 1-7 compare client efficiency against the raw SDK on an emulator that
            // does not throttle: budgets sized for Azure would only cap them (a scan of one
            // partition at 2,000 entities/s). Workload 9 measures governance.
            a.with_settings(
                Settings::default()
                    .with_scan_policy(ScanPolicy::allow_all())
                    .with_throughput(ThroughputPolicy::unlimited()),
            )
        })
        .map_err(|e| e.to_string())?;
    let step = |name: &str| eprintln!("tablekit-bench: {name}");
    // The emulator's load during each workload, against its one-core ceiling.
    let pid = azurite.pid();
    let mut emulator = Vec::new();
    let mut sampler = ceiling::Sampler::start(pid);
    let mut sampled = |name: &str, sampler: &mut ceiling::Sampler| {
        let done = std::mem::replace(sampler, ceiling::Sampler::start(pid));
        emulator.extend(done.finish(name));
    };

    step("1, 4. bulk load and client CPU");
    let bulk = workloads::bulk(&account, &endpoint, sizes).await?;
    sampled("1, 4. bulk load", &mut sampler);
    step("2, 3. scan and point reads");
    let scan_table = workloads::scan_table(&account, sizes.scan).await?;
    sampler = ceiling::Sampler::start(pid);
    let scan = workloads::scan(&scan_table, &endpoint, sizes.scan).await?;
    let points = workloads::points(&scan_table, &endpoint, sizes.scan, sizes.point_reads).await?;
    sampled("2, 3. scan and point reads", &mut sampler);
    step("12. point-read latency");
    let latency =
        latency::latency(&scan_table, &endpoint, sizes.scan, latency_reads(sizes)).await?;
    sampled("12. point-read latency", &mut sampler);
    step("13. pattern reads against the raw SDK");
    let reads = reads::reads(&account, &endpoint).await?;
    sampled("13. pattern reads", &mut sampler);
    step("6. connections");
    let connections =
        workloads::connections(&account, &scan_table, &endpoint, sizes.connection_requests).await?;
    step("7. request counts");
    let mut patterns = patterns::table_operations(&account).await?;
    patterns.extend(patterns::pattern_operations(&account).await?);
    step("5. memory");
    let large = memory::load(&account, sizes.memory_large).await?;
    let small = memory::measure(&cs, large.name(), sizes.memory_small.div_ceil(1_000))?;
    let large_run = memory::measure(&cs, large.name(), sizes.memory_large.div_ceil(1_000))?;
    if small.entities != sizes.memory_small || large_run.entities != sizes.memory_large {
        return Err("memory runs streamed the wrong number of entities".into());
    }
    step("10. the tablekit tool: export, copy, export memory");
    // The memory workload's table serves the large export when it has the size asked for.
    let reuse = (sizes.memory_large == sizes.tool_memory_large).then_some(&large);
    let tool = tool::tool(
        &account,
        &cs,
        reuse,
        sizes,
        &target_dir().join("bench/tool"),
    )
    .await?;
    large.delete_table().await.map_err(|e| e.to_string())?;
    let python = if with_python {
        step("8. Python SDK");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/bench.py");
        Some(python::bench(
            &target_dir(),
            &script,
            &cs,
            scan_table.name(),
            sizes,
        )?)
    } else {
        None
    };
    scan_table.delete_table().await.map_err(|e| e.to_string())?;
    step("9. throughput governance against the throttle model");
    sampler = ceiling::Sampler::start(pid);
    let throughput = throughput::throughput(&account, &endpoint, sizes).await?;
    sampled("9. throughput governance", &mut sampler);
    step("14. budgets not told: unknown, changing, skewed, 10,000 partitions");
    let adaptive = adaptive::adaptive(&account, &endpoint, sizes.concurrency).await?;
    sampled("14. budgets not told", &mut sampler);
    plots(&adaptive);
    step("11. client-side encryption");
    sampler = ceiling::Sampler::start(pid);
    let encryption = encryption::encryption(&account, sizes).await?;
    sampled("11. client-side encryption", &mut sampler);
    step("15. sharded accounts against four throttle models");
    let sharded = sharded::sharded(sizes).await?;
    let mut report = report::Report {
        machine: report::Machine::read(),
        sizes,
        partition_sizes: format!(
            "bulk {} × {}; scan 1 × {}; memory {} × 1,000; the tool: export 1 × {}, copy {} × {}, \
             export memory {} and {} × 1,000",
            sizes.bulk_partitions,
            sizes.bulk / sizes.bulk_partitions,
            sizes.scan,
            sizes.memory_large.div_ceil(1_000),
            sizes.tool,
            sizes.bulk_partitions,
            sizes.tool / sizes.bulk_partitions,
            sizes.tool_memory_small.div_ceil(1_000),
            sizes.tool_memory_large.div_ceil(1_000),
        ),
        bulk,
        scan,
        points,
        memory: memory::Memory {
            small,
            large: large_run,
        },
        connections,
        patterns,
        python,
        throughput,
        adaptive,
        tool,
        encryption,
        sharded,
        latency,
        reads,
        emulator,
        checks: Vec::new(),
    };
    report.evaluate();
    drop(azurite);
    Ok(report)
}
