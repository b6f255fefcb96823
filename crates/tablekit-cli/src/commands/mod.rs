//! The commands, one module each, and what they share.

mod copy;
mod entity;
mod export;
mod import;
mod index;
mod purge;
mod query;
mod queue;
mod retention;
mod tables;
mod transfer;

use std::io::IsTerminal as _;

use tablekit::azure::Account;

use crate::cli::{Cli, Command, OutputMode};
use crate::connect::{self, ConnectOptions};
use crate::exit::{CliResult, Exit};
use crate::interrupt::Interrupt;

/// What every command gets besides its arguments.
#[derive(Clone)]
pub(crate) struct Ctx {
    /// `--retries`, for the accounts a command connects to itself.
    pub(crate) retries: Option<usize>,
    /// `--root-certificate` (or `$TABLEKIT_ROOT_CERTIFICATE`), for the accounts a command
    /// connects to itself.
    pub(crate) root_certificate: Option<std::path::PathBuf>,
    /// `--quiet`.
    pub(crate) quiet: bool,
    /// `--verbose`.
    pub(crate) verbose: bool,
    /// The stop request (Ctrl-C or the testing hook).
    pub(crate) interrupt: Interrupt,
    /// `--output`: how the final summary is printed.
    pub(crate) output: OutputMode,
    /// Whether stdout carries the command's data (`--out -`): a JSON summary then goes to
    /// stderr.
    pub(crate) stdout_is_data: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Ctx {
    /// Prints a command's final summary: `text` on stderr (unless `--quiet` or empty), or with
    /// `--output json` the object `json` as one line on stdout (on stderr when stdout carries
    /// the command's data).
    pub(crate) fn summary(&self, text: &str, json: serde_json::Value) {
        match self.output {
            OutputMode::Text => {
                if !text.is_empty() {
                    self.status(text);
                }
            }
            OutputMode::Json => {
                if self
                    .stdout_is_data
                    .load(std::sync::atomic::Ordering::Relaxed)
                {
                    eprintln!("{json}");
                } else {
                    println!("{json}");
                }
            }
        }
    }

    /// Prints a status line on stderr unless `--quiet`.
    pub(crate) fn status(&self, message: &str) {
        if !self.quiet {
            eprintln!("{message}");
        }
    }

    /// With `--verbose`, prints the requests `account` sent, by kind.
    pub(crate) fn report_requests(&self, role: &str, account: &Account) {
        if !self.verbose {
            return;
        }
        let m = account.metrics().snapshot();
        let kinds: Vec<String> = m
            .requests_by_kind
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{}={n}", k.name()))
            .collect();
        eprintln!(
            "requests ({role}): {} [{}], retries {}, throttled {}, entities read {}, written {}",
            m.requests(),
            kinds.join(" "),
            m.retries,
            m.throttled,
            m.entities_read,
            m.entities_written
        );
    }
}

/// Runs the parsed command line; returns the exit status.
pub(crate) async fn run(cli: Cli) -> u8 {
    let ctx =
        Ctx {
            retries: cli.global.retries,
            root_certificate: cli.global.connection.root_certificate.clone().or_else(|| {
                std::env::var_os(tablekit::azure::ROOT_CERTIFICATE_ENV).map(Into::into)
            }),
            quiet: cli.global.quiet,
            verbose: cli.global.verbose,
            interrupt: Interrupt::install(cli.global.interrupt_after),
            output: cli.global.output,
            stdout_is_data: Default::default(),
        };
    let c = &cli.global.connection;
    let source = ConnectOptions {
        connection_string: c.connection_string.clone(),
        sas: c.sas.clone(),
        table_endpoint: c.table_endpoint.clone(),
        account: c.account.clone(),
        endpoint_suffix: c.endpoint_suffix.clone(),
        queue_endpoint: c.queue_endpoint.clone(),
        blob_endpoint: c.blob_endpoint.clone(),
        token_scope: c.token_scope.clone(),
        root_certificate: c.root_certificate.clone(),
        use_env: true,
        retries: cli.global.retries,
    };
    let result: CliResult = async {
        let account = connect::connect(&source)?;
        if ctx.verbose {
            eprintln!("{}", connect::describe(&account));
        }
        let result = match cli.command {
            Command::Tables { command } => tables::run(&ctx, &account, command).await,
            Command::Query(args) => query::run(&ctx, &account, args).await,
            Command::Export(args) => export::run(&ctx, &account, args).await,
            Command::Import(args) => import::run(&ctx, &account, args).await,
            Command::Copy(args) => copy::run(&ctx, &account, args).await,
            Command::Entity { command } => entity::run(&ctx, &account, command).await,
            Command::Purge(args) => purge::run(&ctx, &account, args).await,
            Command::Index { command } => index::run(&ctx, &account, command).await,
            Command::Queue { command } => queue::run(&ctx, &account, command).await,
            Command::Retention { command } => retention::run(&ctx, &account, command).await,
        };
        ctx.report_requests("source", &account);
        result
    }
    .await;
    match result {
        Ok(exit) => exit.code(),
        Err(e) => {
            eprintln!("error: {e}");
            e.exit.code()
        }
    }
}

/// Whether stdin is a terminal (a person who can answer a question).
pub(crate) fn interactive() -> bool {
    std::io::stdin().is_terminal()
}

/// Asks `question` on a terminal unless `yes`; without a terminal, `--yes` is required.
///
/// # Errors
/// A usage error (exit 2, nothing done) when not confirmed; `without_yes` says what the
/// command would do.
pub(crate) fn confirm(yes: bool, question: &str, without_yes: &str) -> CliResult<()> {
    if yes {
        return Ok(());
    }
    if !interactive() {
        return Err(crate::exit::CliError::usage(format!(
            "{without_yes}: pass --yes to confirm"
        )));
    }
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| crate::exit::CliError::failure(e.to_string()))?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(crate::exit::CliError::usage("not confirmed; nothing done"))
    }
}

/// Ends a command: interrupted if a stop was requested, else `done`.
pub(crate) fn ended(ctx: &Ctx, done: Exit) -> Exit {
    if ctx.interrupt.requested() {
        Exit::Interrupted
    } else {
        done
    }
}

/// Writes `bytes` to stdout and flushes; a reader that went away (`| head`) is not an error.
///
/// # Errors
/// A failure for other write errors.
pub(crate) fn write_stdout(bytes: &[u8]) -> CliResult<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(crate::exit::CliError::failure(format!(
            "writing the output: {e}"
        ))),
    }
}
