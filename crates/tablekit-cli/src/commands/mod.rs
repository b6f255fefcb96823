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
    /// `--max-rate`, for the accounts a command connects to itself.
    pub(crate) max_rate: Option<f64>,
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
    /// Whether stdout carries the command's data (`--out -`, query results): a JSON summary
    /// then goes to stderr.
    pub(crate) stdout_is_data: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The fields of the JSON summary, gathered while the command runs.
    pub(crate) report: std::sync::Arc<std::sync::Mutex<serde_json::Map<String, serde_json::Value>>>,
}

impl Ctx {
    /// A step's summary: `text` on stderr (unless `--quiet` or empty); the fields of `json`
    /// (an object) go into the JSON summary that `--output json` prints at the end.
    pub(crate) fn summary(&self, text: &str, json: serde_json::Value) {
        if self.output == OutputMode::Text && !text.is_empty() {
            self.status(text);
        }
        if let serde_json::Value::Object(fields) = json {
            self.report
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(fields);
        }
    }

    /// Whether summaries are JSON.
    pub(crate) fn json(&self) -> bool {
        self.output == OutputMode::Json
    }

    /// Marks stdout as carrying the command's data.
    pub(crate) fn stdout_carries_data(&self) {
        self.stdout_is_data
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// With `--output json`, prints the summary: one object with the command, its fields,
    /// the exit code and the error, on stdout (stderr when stdout carries data).
    fn print_report(&self, command: &str, code: u8, error: Option<&str>) {
        if self.output != OutputMode::Json {
            return;
        }
        let mut report = serde_json::Map::new();
        report.insert("command".into(), command.into());
        report.extend(
            self.report
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        );
        report.insert("exit".into(), code.into());
        if let Some(error) = error {
            report.insert("error".into(), error.into());
        }
        let line = serde_json::Value::Object(report);
        if self
            .stdout_is_data
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    /// Prints a status line on stderr unless `--quiet`.
    pub(crate) fn status(&self, message: &str) {
        if !self.quiet {
            eprintln!("{message}");
        }
    }

    /// Adds `account`'s throttling to the summary: responses refused for throughput, and
    /// requests that waited for budget and how long; printed for the commands that move
    /// entities (`transfer`), always in the JSON summary. `role` prefixes the JSON names
    /// (`destination_` for a copy's other account).
    pub(crate) fn report_throttling(&self, role: &str, account: &Account, transfer: bool) {
        let m = account.metrics().snapshot();
        let who = if role.is_empty() {
            String::new()
        } else {
            format!(" ({})", role.trim_end_matches('_'))
        };
        let text = transfer.then(|| {
            format!(
                "throttling{who}: {} throttled responses, {} retries; governor: {} waits, {:.1} s in all",
                m.throttled_responses,
                m.retries,
                m.budget_waits,
                m.budget_wait.as_secs_f64()
            )
        });
        let mut fields = serde_json::Map::new();
        fields.insert(
            format!("{role}throttled_responses"),
            m.throttled_responses.into(),
        );
        fields.insert(format!("{role}retries"), m.retries.into());
        fields.insert(format!("{role}governor_waits"), m.budget_waits.into());
        fields.insert(
            format!("{role}governor_wait_seconds"),
            m.budget_wait.as_secs_f64().into(),
        );
        self.summary(
            text.as_deref().unwrap_or(""),
            serde_json::Value::Object(fields),
        );
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
            max_rate: cli.global.max_rate,
            root_certificate: cli.global.connection.root_certificate.clone().or_else(|| {
                std::env::var_os(tablekit::azure::ROOT_CERTIFICATE_ENV).map(Into::into)
            }),
            quiet: cli.global.quiet,
            verbose: cli.global.verbose,
            interrupt: Interrupt::install(cli.global.interrupt_after),
            output: cli.global.output,
            stdout_is_data: Default::default(),
            report: Default::default(),
        };
    let name = command_name(&cli.command);
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
        max_rate: cli.global.max_rate,
    };
    let transfer = matches!(
        cli.command,
        Command::Export(_) | Command::Import(_) | Command::Copy(_) | Command::Purge(_)
    );
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
            // Handled before connecting (see main).
            Command::Completions { .. } | Command::Man => Ok(Exit::Success),
        };
        ctx.report_requests("source", &account);
        ctx.report_throttling("", &account, transfer);
        result
    }
    .await;
    match result {
        Ok(exit) => {
            ctx.print_report(&name, exit.code(), None);
            exit.code()
        }
        Err(e) => {
            eprintln!("error: {e}");
            ctx.print_report(&name, e.exit.code(), Some(&e.message));
            e.exit.code()
        }
    }
}

/// The command's name as typed (`copy`, `entity put`, …), for the JSON summary.
fn command_name(command: &Command) -> String {
    use crate::cli::{EntityCommand, TablesCommand};
    match command {
        Command::Tables { command } => match command {
            TablesCommand::List { .. } => "tables list",
            TablesCommand::Create { .. } => "tables create",
            TablesCommand::Delete { .. } => "tables delete",
        }
        .into(),
        Command::Query(_) => "query".into(),
        Command::Export(_) => "export".into(),
        Command::Import(_) => "import".into(),
        Command::Copy(_) => "copy".into(),
        Command::Entity { command } => match command {
            EntityCommand::Get(_) => "entity get",
            EntityCommand::Put(_) => "entity put",
            EntityCommand::Merge(_) => "entity merge",
            EntityCommand::Delete { .. } => "entity delete",
        }
        .into(),
        Command::Purge(_) => "purge".into(),
        Command::Index { .. } => "index".into(),
        Command::Queue { .. } => "queue".into(),
        Command::Retention { .. } => "retention".into(),
        Command::Completions { .. } => "completions".into(),
        Command::Man => "man".into(),
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
