//! `cargo xtask` — tablekit's developer commands.
//!
//! - `cargo xtask demo` — install and start Azurite, run every example against it, stop it.
//! - `cargo xtask test [--long]` — install Azurite, then fmt check, clippy, the book's includes,
//!   the documentation rules, rustdoc, the whole test suite and, beside it, the public-API
//!   snapshots, the facade-feature builds and the MSRV build. The test binaries run
//!   `TABLEKIT_TEST_JOBS` (default 3) at once, the longest first.
//! - `cargo xtask bench [--quick] [--with-python]` — the benchmark suite.
//! - `cargo xtask explore [--random N --seed S | --seed S --replay K] [--only NAME]
//!   [--bless-docs]` — the fault-schedule explorer over every scenario.
//! - `cargo xtask docs` — build the book (pinned mdBook) and the API docs.
//! - `cargo xtask gates` — the API gates alone: facade features, MSRV, public-API snapshots,
//!   documentation rules.
//! - `cargo xtask public-api [--bless]` — compare (or rewrite) the public-API snapshots.
//! - `cargo xtask azurite` — run Azurite in the foreground on the standard ports until Ctrl-C.
//! - `cargo xtask install-azurite` — install the pinned Azurite into `target/azurite`.

mod book;
mod gates;
mod install;
mod run;
mod suite;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  demo              install and start Azurite, run every example against it, stop it
  test [--long]     install Azurite, then fmt check, clippy, docs, the whole test suite
                    and the API gates (--long runs the load scenario for 60 s instead of 10 s);
                    the test binaries run TABLEKIT_TEST_JOBS at once (default 3), the
                    longest first by the times kept in target/xtask/test-times.json
  bench [--quick] [--with-python] [--throughput-only] [--tool-only] [--encryption-only]
                    benchmarks against the raw SDK (and the Python SDK) on an in-memory
                    Azurite; prints a table and writes target/bench/report.json
  explore [--only NAME] [--random N --seed S | --seed S --replay K] [--bless-docs]
                    the fault-schedule explorer: every single-fault schedule of every
                    scenario (or N seeded random multi-fault schedules in all, shared by the
                    scenarios, or one again with --only SCENARIO);
                    --bless-docs rewrites the explored-schedules table of the Guarantees
                    chapter from a single-fault run
  docs              check the book's includes, build the book (pinned mdBook, installed into
                    target/mdbook if missing) into target/book, and the API docs
  gates             the API gates alone: every facade feature builds, the MSRV builds,
                    public-API snapshots match, documentation rules hold
  public-api [--bless]
                    compare the public API of each published crate with public-api/*.txt
                    (--bless rewrites the snapshots)
  azurite           run Azurite in the foreground on ports 10000-10002 until Ctrl-C
  install-azurite   install the pinned Azurite into target/azurite";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") => run::demo(),
        Some("test") => run::test(args[1..].iter().any(|a| a == "--long")),
        Some("azurite") => run::azurite_foreground(),
        Some("bench") => run::bench(&args[1..]),
        Some("explore") => run::explore(&args[1..]),
        Some("docs") => run::docs(),
        Some("gates") => run::gates(),
        Some("public-api") => gates::public_api_snapshots(args[1..].iter().any(|a| a == "--bless")),
        Some("install-azurite") => install::ensure().map(|_| ()),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(format!(
            "unknown command {}\n\n{USAGE}",
            other.map_or_else(|| "(none)".to_owned(), |o| format!("`{o}`"))
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
