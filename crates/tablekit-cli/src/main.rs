//! `tablekit`: back up, copy, migrate and query Azure Table storage tables from the command
//! line, with tablekit's typed entities, checked filters and bulk writes.
//!
//! Run `tablekit --help`, or see the "The tablekit tool" chapter of the book.
#![deny(missing_docs)]

mod checkpoint;
mod cli;
mod commands;
mod connect;
mod csv;
mod entity_json;
mod exit;
mod files;
mod hash;
mod interrupt;
mod progress;
mod ranges;
mod render;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser as _;

fn main() -> ExitCode {
    // Usage errors exit 2 and `--help` / `--version` exit 0, from clap itself.
    let cli = cli::Cli::parse();
    // Generated from the command tree: no connection, no runtime.
    let generated = match &cli.command {
        cli::Command::Completions { shell } => {
            let mut command = <cli::Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut command, "tablekit", &mut script);
            Some(Ok(script))
        }
        cli::Command::Man => {
            let command = <cli::Cli as clap::CommandFactory>::command();
            let mut page = Vec::new();
            Some(
                clap_mangen::Man::new(command)
                    .render(&mut page)
                    .map(|()| page),
            )
        }
        _ => None,
    };
    if let Some(text) = generated {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        return match text.and_then(|t| out.write_all(&t).and_then(|()| out.flush())) {
            Ok(()) => ExitCode::SUCCESS,
            // The reader went away (`| head`): that is where the output ends.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: writing the output: {e}");
                ExitCode::from(exit::Exit::Failure.code())
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::Exit::Failure.code());
        }
    };
    let code = runtime.block_on(commands::run(cli));
    // A page requested ahead of need may still be in flight; it is not waited for.
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}
