//! The command line: global options and the command tree.
//!
//! Commands are grouped by what they act on (`tables`, then whole-table transfers); the
//! pattern commands of later versions (`index …`, `queue …`, `retention …`) are further
//! variants of [`Command`] with their own modules under `commands/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::files::Compression;

const TOP_HELP: &str = "Examples:
  tablekit tables list --prefix Orders
  tablekit query Orders --filter \"PartitionKey eq 'c42'\" --format table
  tablekit export Orders --out orders.jsonl.zst
  tablekit import OrdersCopy --in orders.jsonl.zst --create
  tablekit copy Orders --dst-connection-string \"$BACKUP_CS\" --create --verify
  tablekit entity get Orders c42 2026-0001
  tablekit purge Signins --partition user42 --yes
  tablekit index verify Employees --spec employees.index.json --partition Sales
  tablekit queue poison list archive-jobs
  tablekit retention drop-older-than Signins --period day --cutoff 2026-09-01 --dry-run

Connection:
  --connection-string, else --account NAME (Microsoft Entra ID), else
  $AZURE_STORAGE_CONNECTION_STRING, else $AZURE_STORAGE_ACCOUNT_NAME (Entra ID), else
  UseDevelopmentStorage=true (Azurite on its standard ports). For SAS-only access give --sas
  TOKEN with --table-endpoint URL, or a SAS URL (https://ACCOUNT.table.core.windows.net/?sv=…&sig=…)
  as --table-endpoint. Entra ID uses the default credential chain (AZURE_CLIENT_ID/
  AZURE_TENANT_ID/AZURE_CLIENT_SECRET, workload identity, managed identity, `az login`).
  Secrets are never printed, not even with --verbose.

Exit codes: 0 success, 1 failure, 2 invalid input (refused before any request),
3 partial (some rows refused or of unknown outcome), 4 differences (copy --verify found
some), 130 interrupted by Ctrl-C or SIGTERM (checkpoint written; removed after success).";

/// Back up, copy, migrate and query Azure Table storage tables.
#[derive(Debug, Parser)]
#[command(
    name = "tablekit",
    version,
    about = "Back up, copy, migrate and query Azure Table storage tables",
    after_help = TOP_HELP
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub(crate) struct Global {
    #[command(flatten)]
    pub(crate) connection: Connection,
    /// No progress output; only results and errors.
    #[arg(long, short, global = true)]
    pub(crate) quiet: bool,
    /// Print the account used and, at the end, the requests sent by kind.
    #[arg(long, short, global = true, conflicts_with = "quiet")]
    pub(crate) verbose: bool,
    /// Retries of a request after a transient failure (throttling, timeouts, broken
    /// connections): the account's schedule (2, 4, 10, 30 s) cut to N, or extended by
    /// repeating its longest delay; 0 for none [default: 4].
    #[arg(long, global = true, value_name = "N")]
    pub(crate) retries: Option<usize>,
    /// At most this many entities per second per account (reads and writes alike; a copy
    /// within one account shares it): lowers tablekit's account budget, which otherwise
    /// keeps to the account's target (Azure Table storage: 20,000/s, 95 % used; Cosmos DB:
    /// learned from its 429 answers). Requests wait for budget instead of being throttled.
    #[arg(long, global = true, value_name = "N")]
    pub(crate) max_rate: Option<f64>,
    /// How the final summary is printed: text on stderr, or one JSON object on stdout (on
    /// stderr when stdout carries the data, as with `export --out -`).
    #[arg(long, global = true, value_enum, default_value_t = OutputMode::Text)]
    pub(crate) output: OutputMode,
    /// Testing hook: act as if Ctrl-C was pressed after this many pages (export, copy) or
    /// chunks (import).
    #[arg(long, global = true, hide = true, value_name = "N")]
    pub(crate) interrupt_after: Option<u64>,
}

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputMode {
    /// Human-readable lines on stderr.
    Text,
    /// One JSON object with the counts and outcome (machine-readable).
    Json,
}

/// Where to connect. The environment variable is read by the `connect` module, not by
/// clap, so that its value can never be shown in help or error output.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct Connection {
    /// Storage connection string [default: --account if given, else
    /// $AZURE_STORAGE_CONNECTION_STRING, else $AZURE_STORAGE_ACCOUNT_NAME (Entra ID), else
    /// UseDevelopmentStorage=true].
    #[arg(long, global = true, value_name = "STRING")]
    pub(crate) connection_string: Option<String>,
    /// Shared access signature (query string), with --table-endpoint.
    #[arg(long, global = true, value_name = "TOKEN")]
    pub(crate) sas: Option<String>,
    /// Table service URL, such as `https://ACCOUNT.table.core.windows.net`: for SAS access (a
    /// SAS URL carries its token in the query), or with --account instead of the derived one.
    #[arg(long, global = true, value_name = "URL", visible_alias = "account-url")]
    pub(crate) table_endpoint: Option<String>,
    /// Storage account to reach with Microsoft Entra ID (the default credential chain:
    /// environment, managed identity, Azure CLI) [default: $AZURE_STORAGE_ACCOUNT_NAME when
    /// no connection string is given].
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) account: Option<String>,
    /// DNS suffix of the account's endpoints with --account, e.g. `core.chinacloudapi.cn`
    /// [default: core.windows.net].
    #[arg(long, global = true, value_name = "SUFFIX")]
    pub(crate) endpoint_suffix: Option<String>,
    /// Queue service URL with --account, instead of the derived one.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) queue_endpoint: Option<String>,
    /// Blob service URL with --account, instead of the derived one.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) blob_endpoint: Option<String>,
    /// Token audience with --account: storage (any account), account (this account's
    /// services only), cosmos (Cosmos DB Table API), or a scope URI [default: storage].
    #[arg(long, global = true, value_name = "SCOPE")]
    pub(crate) token_scope: Option<String>,
    /// PEM file of root certificates to trust besides the public ones (an emulator's, a
    /// private endpoint's) [default: $TABLEKIT_ROOT_CERTIFICATE].
    #[arg(long, global = true, value_name = "PEM")]
    pub(crate) root_certificate: Option<PathBuf>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List, create or delete tables.
    #[command(
        after_help = "Examples:\n  tablekit tables list --prefix Orders\n  tablekit tables create Orders\n  tablekit tables delete Orders --yes"
    )]
    Tables {
        #[command(subcommand)]
        command: TablesCommand,
    },
    /// Query a table: typed filter, projection, formats.
    #[command(after_help = QUERY_HELP)]
    Query(QueryArgs),
    /// Export a table to JSON Lines that keep every EDM type exactly.
    #[command(after_help = EXPORT_HELP)]
    Export(ExportArgs),
    /// Import JSON Lines (as written by export) into a table.
    #[command(after_help = IMPORT_HELP)]
    Import(ImportArgs),
    /// Copy a table, within an account or to another one.
    #[command(after_help = COPY_HELP)]
    Copy(CopyArgs),
    /// Read, write or delete one entity.
    #[command(after_help = ENTITY_HELP)]
    Entity {
        #[command(subcommand)]
        command: EntityCommand,
    },
    /// Delete every entity of some partitions, or every entity matching a filter.
    #[command(after_help = PURGE_HELP)]
    Purge(PurgeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  tablekit completions bash > ~/.local/share/bash-completion/completions/tablekit\n  tablekit completions zsh > ~/.zfunc/_tablekit\n  tablekit completions fish > ~/.config/fish/completions/tablekit.fish"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    #[command(
        after_help = "Examples:\n  tablekit man > ~/.local/share/man/man1/tablekit.1\n  tablekit man | man -l -"
    )]
    Man,
    /// Verify, repair or backfill a secondary index declared in a spec file.
    #[command(after_help = INDEX_HELP)]
    Index {
        #[command(subcommand)]
        command: IndexCommand,
    },
    /// Look at a job queue and its poison queue; replay or purge poisoned jobs.
    #[command(after_help = QUEUE_HELP)]
    Queue {
        #[command(subcommand)]
        command: QueueCommand,
    },
    /// List the tables of a table-per-period set; drop the expired ones.
    #[command(after_help = RETENTION_HELP)]
    Retention {
        #[command(subcommand)]
        command: RetentionCommand,
    },
}

const ENTITY_HELP: &str = "Examples:
  tablekit entity get Orders c42 2026-0001
  tablekit entity put Orders c42 2026-0001 --json '{\"Total\":12,\"Big@odata.type\":\"Edm.Int64\",\"Big\":\"9007199254740993\"}'
  tablekit entity get Orders c42 2026-0001 | jq '.Total = 13' | tablekit entity put Orders c42 2026-0001 --in - --if-match '*'
  tablekit entity merge Orders c42 2026-0001 --json '{\"Status\":\"paid\"}' --if-match 'W/\"datetime…\"'
  tablekit entity delete Orders c42 2026-0001 --yes

Entities are JSON in the export format (one object; `@odata.type` annotations keep the EDM
types). `get` prints the entity with its ETag as \"odata.etag\"; put and merge print the new
ETag on stderr. Keys in the JSON, if any, must match the arguments. A missing entity exits 1;
--if-match with an ETag that no longer matches exits 1 (HTTP 412) and writes nothing.";

/// `tablekit entity …`.
#[derive(Debug, Subcommand)]
pub(crate) enum EntityCommand {
    /// Print one entity (export format, with its ETag as \"odata.etag\"); exit 1 if missing.
    #[command(after_help = "Examples:\n  tablekit entity get Orders c42 2026-0001")]
    Get(EntityKeys),
    /// Write one entity: insert or replace; with --if-match, replace only that version.
    #[command(
        after_help = "Examples:\n  tablekit entity put Orders c42 2026-0001 --json '{\"Total\":12}'\n  tablekit entity put Orders c42 2026-0001 --in entity.json --if-match '*'"
    )]
    Put(EntityWrite),
    /// Merge properties into one entity: insert or merge; with --if-match, merge into that
    /// version only.
    #[command(
        after_help = "Examples:\n  tablekit entity merge Orders c42 2026-0001 --json '{\"Status\":\"paid\"}'"
    )]
    Merge(EntityWrite),
    /// Delete one entity (asks unless --yes); with --if-match, that version only.
    #[command(after_help = "Examples:\n  tablekit entity delete Orders c42 2026-0001 --yes")]
    Delete {
        #[command(flatten)]
        keys: EntityKeys,
        /// Delete only if the entity still has this ETag [default: any version; a missing
        /// entity exits 1].
        #[arg(long, value_name = "ETAG")]
        if_match: Option<String>,
        /// Delete without asking (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

/// The entity a command acts on.
#[derive(Debug, Clone, Args)]
pub(crate) struct EntityKeys {
    /// The table.
    pub(crate) table: String,
    /// The PartitionKey.
    pub(crate) partition_key: String,
    /// The RowKey.
    pub(crate) row_key: String,
}

/// `entity put` and `entity merge`.
#[derive(Debug, Clone, Args)]
pub(crate) struct EntityWrite {
    #[command(flatten)]
    pub(crate) keys: EntityKeys,
    /// The properties, as one JSON object in the export format.
    #[arg(
        long,
        value_name = "JSON",
        required_unless_present = "input",
        conflicts_with = "input"
    )]
    pub(crate) json: Option<String>,
    /// Read the JSON object from FILE, or from stdin with `-`.
    #[arg(long = "in", value_name = "FILE|-")]
    pub(crate) input: Option<PathBuf>,
    /// Write only if the entity has this ETag (`*`: any version, but it must exist)
    /// [default: insert or replace / insert or merge].
    #[arg(long, value_name = "ETAG")]
    pub(crate) if_match: Option<String>,
}

const PURGE_HELP: &str = "Examples:
  tablekit purge Signins --partition user42 --dry-run
  tablekit purge Signins --partition user42 --partition user43 --yes
  tablekit purge Signins --filter \"Expired eq true\" --allow-scan --yes

Reads the keys (keys only, page by page) and deletes them in transactions of up to 100 of a
partition, several at a time; an entity already gone counts as deleted, so a purge that
stopped can be run again. --dry-run counts what would be deleted and deletes nothing. A
filter without `PartitionKey eq` reads every partition and needs --allow-scan.";

/// `tablekit purge`.
#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// The table.
    pub(crate) table: String,
    /// A partition to delete (its PartitionKey); repeat for more.
    #[arg(
        long = "partition",
        value_name = "PK",
        required_unless_present = "filter"
    )]
    pub(crate) partitions: Vec<String>,
    /// Delete the entities matching this OData filter (within the partitions, if given).
    #[arg(long, value_name = "EXPR")]
    pub(crate) filter: Option<String>,
    /// Allow a filter that reads every partition (no `PartitionKey eq`).
    #[arg(long)]
    pub(crate) allow_scan: bool,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Delete without asking (required when stdin is not a terminal).
    #[arg(long)]
    pub(crate) yes: bool,
}

const INDEX_HELP: &str = "Examples:
  tablekit index verify Employees --spec employees.index.json --partition Sales
  tablekit index repair Employees --spec employees.index.json --partition Sales --yes
  tablekit index backfill Employees --spec employees.index.json
  tablekit index backfill Employees --spec employees.index.json --resume

The spec file (JSON) declares the index as the application does:
  {\"layout\": \"intra\", \"partition\": \"Department\",
   \"primary\": {\"name\": \"empid\", \"property\": \"Id\", \"width\": 6},
   \"secondaries\": [{\"name\": \"email\", \"property\": \"Email\"}]}
An inter-partition index adds \"queue\" (its job queue) and optionally \"tables\"
({\"copy name\": \"table\"}). A bad spec is refused before any request (exit 2).";

/// `tablekit index …`.
#[derive(Debug, Subcommand)]
pub(crate) enum IndexCommand {
    /// Audit partitions: print every missing, stale, orphaned or contested copy (exit 1 if any).
    #[command(
        after_help = "Examples:\n  tablekit index verify Employees --spec employees.index.json --partition Sales --partition HR"
    )]
    Verify(IndexArgs),
    /// Audit partitions and fix what the audit found (contested copies are only reported).
    #[command(
        after_help = "Examples:\n  tablekit index repair Employees --spec employees.index.json --partition Sales --yes"
    )]
    Repair {
        #[command(flatten)]
        index: IndexArgs,
        /// Repair without asking (required when stdin is not a terminal): orphaned copies
        /// are deleted.
        #[arg(long)]
        yes: bool,
    },
    /// Write the secondary copies of every entity (an index added later), page by page,
    /// with a checkpoint after every page.
    #[command(
        after_help = "Examples:\n  tablekit index backfill Employees --spec employees.index.json\n  tablekit index backfill Employees --spec employees.index.json --copy email --resume"
    )]
    Backfill(BackfillArgs),
}

/// The table and spec every `index` command takes.
#[derive(Debug, Clone, Args)]
pub(crate) struct IndexArgs {
    /// The table of the primary copies.
    pub(crate) table: String,
    /// The index declaration (JSON).
    #[arg(long, value_name = "FILE")]
    pub(crate) spec: PathBuf,
    /// A partition to audit (the partition property's value, e.g. Sales); repeat for more.
    #[arg(long, value_name = "VALUE", required = true)]
    pub(crate) partition: Vec<String>,
}

/// `tablekit index backfill`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BackfillArgs {
    /// The table of the primary copies.
    pub(crate) table: String,
    /// The index declaration (JSON).
    #[arg(long, value_name = "FILE")]
    pub(crate) spec: PathBuf,
    /// Only this partition [default: every partition, a table scan].
    #[arg(long, value_name = "VALUE")]
    pub(crate) partition: Option<String>,
    /// Only this secondary copy; repeat for more [default: every secondary copy].
    #[arg(long = "copy", value_name = "NAME")]
    pub(crate) copies: Vec<String>,
    /// Continue from the checkpoint of an earlier run.
    #[arg(long, conflicts_with = "overwrite")]
    pub(crate) resume: bool,
    /// Start over, replacing an existing checkpoint.
    #[arg(long)]
    pub(crate) overwrite: bool,
    /// Checkpoint file [default: TABLE.backfill-checkpoint].
    #[arg(long, value_name = "FILE")]
    pub(crate) checkpoint: Option<PathBuf>,
    /// Entities per page (1–1000): one query and one checkpoint each.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub(crate) page_size: usize,
}

const QUEUE_HELP: &str = "Examples:
  tablekit queue peek archive-jobs --max 10
  tablekit queue poison list archive-jobs --payload
  tablekit queue poison replay archive-jobs --id 3f2a…
  tablekit queue poison replay archive-jobs --all --yes
  tablekit queue poison purge archive-jobs --older-than 30d --yes

Jobs of tablekit's eventual transactions live on QUEUE; the ones that failed too often on
QUEUE-poison, with their kind, dequeue count, reason and time. Replay puts a job back on
QUEUE (run it again after fixing the cause); purge deletes poison records for good.";

/// `tablekit queue …`.
#[derive(Debug, Subcommand)]
pub(crate) enum QueueCommand {
    /// Show the next messages of a job queue without taking them (kind and size; payload
    /// with --payload).
    #[command(after_help = "Examples:\n  tablekit queue peek archive-jobs --max 5 --payload")]
    Peek {
        /// The job queue.
        queue: String,
        /// At most this many (1–32, the service's limit for a peek).
        #[arg(long, value_name = "N", default_value_t = 32)]
        max: u8,
        /// Print each message's payload too.
        #[arg(long)]
        payload: bool,
    },
    /// The poison queue of a job queue: list, replay or purge poisoned jobs.
    #[command(
        after_help = "Examples:\n  tablekit queue poison list archive-jobs\n  tablekit queue poison replay archive-jobs --all --yes\n  tablekit queue poison purge archive-jobs --older-than 30d --yes"
    )]
    Poison {
        #[command(subcommand)]
        command: PoisonCommand,
    },
}

/// `tablekit queue poison …`.
#[derive(Debug, Subcommand)]
pub(crate) enum PoisonCommand {
    /// List poisoned jobs: id, kind, dequeue count, when and why (payload with --payload).
    #[command(after_help = "Examples:\n  tablekit queue poison list archive-jobs --payload")]
    List {
        /// The job queue (its poison queue is QUEUE-poison).
        queue: String,
        /// At most this many (1–32, the service's limit for a peek).
        #[arg(long, value_name = "N", default_value_t = 32)]
        max: u8,
        /// Print each job's payload too.
        #[arg(long)]
        payload: bool,
    },
    /// Put poisoned jobs back on the job queue, with a fresh dequeue count.
    #[command(
        after_help = "Examples:\n  tablekit queue poison replay archive-jobs --id 3f2a…\n  tablekit queue poison replay archive-jobs --all --yes"
    )]
    Replay {
        /// The job queue.
        queue: String,
        /// The job with this id (as `poison list` shows it).
        #[arg(
            long,
            value_name = "ID",
            required_unless_present = "all",
            conflicts_with = "all"
        )]
        id: Option<String>,
        /// Every poisoned job.
        #[arg(long)]
        all: bool,
        /// Replay without asking (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
    /// Delete poisoned jobs for good.
    #[command(
        after_help = "Examples:\n  tablekit queue poison purge archive-jobs --older-than 30d --yes\n  tablekit queue poison purge archive-jobs --yes"
    )]
    Purge {
        /// The job queue.
        queue: String,
        /// Only jobs poisoned longer ago than this: 90s, 45m, 12h, 30d [default: all].
        #[arg(long, value_name = "DURATION")]
        older_than: Option<String>,
        /// Purge without asking (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

const RETENTION_HELP: &str = "Examples:
  tablekit retention list Signins --period day
  tablekit retention drop-older-than Signins --period day --cutoff 2026-09-01 --dry-run
  tablekit retention drop-older-than Signins --period day --cutoff 2026-09-01 --yes

A set is the tables PREFIX + yyyyMMddHH (hour), yyyyMMdd (day) or yyyyMM (month), UTC.
drop-older-than deletes every table whose whole period ended at or before the cutoff, one
request each, with every entity in it.";

/// `tablekit retention …`.
#[derive(Debug, Subcommand)]
pub(crate) enum RetentionCommand {
    /// List the tables of the set, oldest first, with the period each holds.
    #[command(after_help = "Examples:\n  tablekit retention list Signins --period day")]
    List {
        /// The set's table-name prefix (letters and digits, ending with a letter).
        prefix: String,
        /// How much time one table holds.
        #[arg(long, value_enum)]
        period: PeriodArg,
    },
    /// Delete the tables whose whole period ended at or before the cutoff.
    #[command(
        after_help = "Examples:\n  tablekit retention drop-older-than Signins --period day --cutoff 2026-09-01 --dry-run\n  tablekit retention drop-older-than Signins --period month --cutoff 2026-01-01T00:00:00Z --yes"
    )]
    DropOlderThan {
        /// The set's table-name prefix.
        prefix: String,
        /// How much time one table holds.
        #[arg(long, value_enum)]
        period: PeriodArg,
        /// UTC date (2026-09-01) or RFC 3339 time (2026-09-01T06:00:00Z).
        #[arg(long, value_name = "DATE")]
        cutoff: String,
        /// Only print the tables that would be dropped.
        #[arg(long)]
        dry_run: bool,
        /// Drop without asking (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

/// `--period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PeriodArg {
    /// One table per hour (PREFIXyyyyMMddHH).
    Hour,
    /// One table per day (PREFIXyyyyMMdd).
    Day,
    /// One table per month (PREFIXyyyyMM).
    Month,
}

/// `tablekit tables …`.
#[derive(Debug, Subcommand)]
pub(crate) enum TablesCommand {
    /// List the tables of the account, by name prefix.
    #[command(
        after_help = "Examples:\n  tablekit tables list\n  tablekit tables list --prefix Orders"
    )]
    List {
        /// Only tables whose name starts with this (case-sensitive).
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Create a table (exit 1 if it exists, unless --if-not-exists).
    #[command(
        after_help = "Examples:\n  tablekit tables create Orders\n  tablekit tables create Orders --if-not-exists"
    )]
    Create {
        /// The table name.
        name: String,
        /// Succeed (exit 0) when the table exists already.
        #[arg(long)]
        if_not_exists: bool,
    },
    /// Delete a table and every entity in it.
    #[command(after_help = "Examples:\n  tablekit tables delete Orders --yes")]
    Delete {
        /// The table name.
        name: String,
        /// Delete without asking (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

const QUERY_HELP: &str = "Examples:
  tablekit query Orders --filter \"PartitionKey eq 'c42' and RowKey ge '2026'\"
  tablekit query Orders --filter \"PartitionKey eq 'c42'\" --select Total,Status --format csv
  tablekit query Orders --allow-scan --top 10 --format json

The filter is OData (eq ne gt ge lt le, and or not, typed literals: 42L, 1.5, true,
datetime'2026-01-01T00:00:00Z', guid'…', X'00ff'). It is parsed before anything is sent:
a bad filter is refused with its position (exit 2). The query shape (point, range,
partition scan, table scan) is printed to stderr; table scans need --allow-scan.

Formats: table (aligned, long values truncated; the default on a terminal), jsonl (the
export format, one entity per line; the default otherwise), json (an array), csv.";

/// `tablekit query`.
#[derive(Debug, Args)]
pub(crate) struct QueryArgs {
    /// The table.
    pub(crate) table: String,
    /// OData filter, e.g. "PartitionKey eq 'p1' and RowKey ge 'a'".
    #[arg(long)]
    pub(crate) filter: Option<String>,
    /// Only these properties (comma-separated); the keys and Timestamp are always shown.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub(crate) select: Option<Vec<String>>,
    /// At most this many entities.
    #[arg(long, value_name = "N")]
    pub(crate) top: Option<usize>,
    /// Output format [default: table on a terminal, else jsonl].
    #[arg(long, value_enum)]
    pub(crate) format: Option<Format>,
    /// Allow a query that reads every partition (no `PartitionKey eq` in the filter).
    #[arg(long)]
    pub(crate) allow_scan: bool,
}

/// Output formats of `query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns for terminals; long values truncated.
    Table,
    /// A JSON array of entities (the export format's objects).
    Json,
    /// One entity per line, the export format.
    Jsonl,
    /// Comma-separated values with a header row.
    Csv,
}

/// Options shared by the commands that read a whole table in parallel key ranges.
#[derive(Debug, Clone, Args)]
pub(crate) struct RangeArgs {
    /// Split the table into N PartitionKey ranges read in parallel (boundaries sampled with
    /// a few one-entity probes; see the book).
    #[arg(long, value_name = "N", conflicts_with = "partitions_from")]
    pub(crate) split: Option<usize>,
    /// Read the PartitionKeys (one a line) or ranges (START and END separated by a tab,
    /// either side may be empty) listed in FILE, each in parallel.
    #[arg(long, value_name = "FILE")]
    pub(crate) partitions_from: Option<PathBuf>,
    /// Only this partition (its PartitionKey); repeat for more, each read as its own range
    /// (an export of several needs a directory as --out).
    #[arg(long = "partition", value_name = "PK", conflicts_with_all = ["split", "partitions_from"])]
    pub(crate) partitions: Vec<String>,
    /// Ranges read (and written) at the same time. Each range is read one page at a time;
    /// a partition serves up to 2,000 entities/s and the account 20,000/s, so more ranges
    /// help until the account's target (or --max-rate) is reached.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub(crate) parallel: usize,
    /// Entities per page (1–1000): one request, one checkpoint.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub(crate) page_size: usize,
}

/// What part of each entity set is moved: a filter and a projection.
#[derive(Debug, Clone, Args)]
pub(crate) struct ScopeArgs {
    /// Only entities matching this OData filter (checked as `query` checks it, before any
    /// request), e.g. "Status eq 'open'".
    #[arg(long, value_name = "EXPR")]
    pub(crate) filter: Option<String>,
    /// Only these properties (comma-separated); the keys are always kept.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub(crate) select: Option<Vec<String>>,
}

const EXPORT_HELP: &str = "Examples:
  tablekit export Orders --out orders.jsonl
  tablekit export Orders --out orders.jsonl.zst            # zstd, by extension
  tablekit export Orders --out backup/ --split 8 --compress gzip
  tablekit export Orders --out orders.jsonl --resume       # continue after a failure or Ctrl-C
  tablekit export Orders --out orders.csv                  # Storage Explorer's typed CSV
  tablekit export Orders --out - --compress zstd | ssh backup 'cat > orders.jsonl.zst'
  tablekit export Orders --out c42.jsonl --partition c42 --select Total,Status
  tablekit export Orders --out open.jsonl --filter \"Status eq 'open'\"
  tablekit export Orders --out changes.jsonl --since 2026-11-01T00:00:00Z

--since exports the entities written (Timestamp) at or after a time: a table scan that
cannot see deletes; refused on the Cosmos DB Table API, whose Timestamp filters return
nothing.

Each line is one entity in the Table service's own JSON shape: PartitionKey, RowKey,
Timestamp and every property, with an `@odata.type` annotation wherever JSON alone would
lose the type (Int64 as a string, DateTime at 100 ns, Guid, Binary as base64, Double).
A checkpoint (OUT.checkpoint) is written after every page; --resume appends from it and
produces the same file as an uninterrupted export. The checkpoint is removed once the export
is complete. A .csv output is CSV with a Name@type column beside every property, staged as
JSON Lines (OUT.partial.jsonl) until the export is complete.

An entity whose stored values do not read as their own types (an Int64 that is not a number,
a DateTime that is not a time, written by another client) does not stop the export: it is
reported on stderr with its keys and the property, left out of the output, and the export
goes on; it then exits 3 (partial). With --skip-unreadable it exits 0.";

/// The formats of export and import files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum FileFormat {
    /// JSON Lines in the service's entity shape, with `@odata.type` annotations.
    Jsonl,
    /// CSV with a `Name@type` column beside every property (Azure Storage Explorer's form).
    Csv,
}

impl FileFormat {
    /// The format a file name implies: `.csv` (before any compression extension) is CSV.
    pub(crate) fn from_path(path: &std::path::Path) -> Self {
        let name = path.to_string_lossy().to_ascii_lowercase();
        let name = name
            .strip_suffix(".gz")
            .or_else(|| name.strip_suffix(".zst"))
            .unwrap_or(&name);
        if name.ends_with(".csv") {
            FileFormat::Csv
        } else {
            FileFormat::Jsonl
        }
    }
}

/// `tablekit export`.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The table.
    pub(crate) table: String,
    /// Output file, `-` for stdout, or a directory with --split / --partitions-from /
    /// several --partition (part-00001.jsonl, …).
    #[arg(long, value_name = "FILE|DIR|-")]
    pub(crate) out: PathBuf,
    /// File format [default: csv for a .csv file name (also .csv.gz, .csv.zst), else jsonl].
    #[arg(long, value_enum)]
    pub(crate) format: Option<FileFormat>,
    /// Compression [default: by extension: .gz gzip, .zst zstd, else none].
    #[arg(long, value_enum)]
    pub(crate) compress: Option<Compression>,
    /// Continue an interrupted export from its checkpoint.
    #[arg(long, conflicts_with = "overwrite")]
    pub(crate) resume: bool,
    /// Replace an existing output (and its checkpoint).
    #[arg(long)]
    pub(crate) overwrite: bool,
    /// Only entities written (Timestamp) at or after this UTC time: RFC 3339
    /// (2026-11-01T00:00:00Z) or a date (2026-11-01).
    #[arg(long, value_name = "TIME")]
    pub(crate) since: Option<String>,
    /// Accept an export without the entities whose stored values do not read (exit 0);
    /// without it they are reported, left out, and the export ends with exit 3.
    #[arg(long)]
    pub(crate) skip_unreadable: bool,
    #[command(flatten)]
    pub(crate) scope: ScopeArgs,
    #[command(flatten)]
    pub(crate) ranges: RangeArgs,
}

const IMPORT_HELP: &str = "Examples:
  tablekit import Orders --in orders.jsonl.zst --create
  tablekit import Orders --in backup/ --mode insert --rejects rejects.jsonl
  tablekit import Orders --in orders.jsonl --resume
  tablekit import Orders --in orders.csv --create            # Storage Explorer's typed CSV
  tablekit import Orders --in orders.jsonl --dry-run         # check and count; write nothing
  zstd -dc orders.jsonl.zst | tablekit import Orders --in -

Rows are written in transactions of up to 100 entities of one partition (atomic each).
Invalid rows (keys, sizes, EDM annotations) are refused before sending; rows the service
refuses are reported too — with --rejects as JSON Lines (file, line, keys, reason), else on
stderr — and the rest is imported (exit 3). Rows whose outcome stays unknown after retries
are reported as unknown, never counted as imported. A checkpoint (IN.import-checkpoint, or
next to the directory) records the input line up to which every row has an outcome.

Modes: upsert (insert or replace, the default), insert (refuse existing entities; one that
is identical to the row counts as imported, so a resumed import does not refuse its own
rows), merge (insert or merge properties).";

/// `tablekit import`.
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The table.
    pub(crate) table: String,
    /// Input file, `-` for stdin, or a directory of parts (every *.jsonl and *.csv, also
    /// .gz or .zst, by name).
    #[arg(long = "in", value_name = "FILE|DIR|-")]
    pub(crate) input: PathBuf,
    /// File format [default: by the file name: csv for .csv, else jsonl; jsonl for stdin].
    #[arg(long, value_enum)]
    pub(crate) format: Option<FileFormat>,
    /// Compression of stdin (files: by their extension).
    #[arg(long, value_enum)]
    pub(crate) compress: Option<Compression>,
    /// How rows are written.
    #[arg(long, value_enum, default_value_t = Mode::Upsert)]
    pub(crate) mode: Mode,
    /// Create the table if it does not exist.
    #[arg(long)]
    pub(crate) create: bool,
    /// Continue an interrupted import from its checkpoint.
    #[arg(long)]
    pub(crate) resume: bool,
    /// Write every refused or unknown row here (JSON Lines) instead of to stderr.
    #[arg(long, value_name = "FILE")]
    pub(crate) rejects: Option<PathBuf>,
    /// Rows per checkpoint (each chunk is written with bounded parallelism).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub(crate) chunk: usize,
    /// Transactions in flight (each up to 100 entities of one partition) [default: 8].
    /// Throughput is bounded by the account's targets — 2,000 entities/s per partition,
    /// 20,000 per account — which tablekit's budgets keep to whatever this is.
    #[arg(long, value_name = "N")]
    pub(crate) parallel: Option<usize>,
    /// Read and check every row, count what would be imported and report what would be
    /// refused; write nothing (no table, no checkpoint).
    #[arg(long, conflicts_with_all = ["resume", "create"])]
    pub(crate) dry_run: bool,
}

/// How `import` writes rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// Insert or replace the whole entity.
    Upsert,
    /// Insert; an existing different entity is refused.
    Insert,
    /// Insert or merge the row's properties into the stored entity.
    Merge,
}

const COPY_HELP: &str = "Examples:
  tablekit copy Orders OrdersBackup --create
  tablekit copy Orders --dst-connection-string \"$BACKUP_CS\" --create --split 8 --verify
  tablekit copy Orders --dst-account contosobackup --create --verify    # Entra ID
  tablekit copy Orders OrdersBackup --resume
  tablekit copy Orders OrdersBackup --verify-only
  tablekit copy Orders OrdersBackup --partition c42 --partition c43 --delete-extra --dry-run
  tablekit copy Orders OrdersOpen --filter \"Status eq 'open'\" --select Total,Status --create

Entities are streamed page by page and written as inserts while the destination holds none
of them (into a new table), with insert-or-replace once it holds some that differ, so
memory stays bounded and a copy can be repeated or resumed. The checkpoint (--checkpoint, by default
SRC-to-DST.copy-checkpoint in the current directory) is written after every page.
The destination is the source's account unless given: --dst-connection-string,
--dst-sas with --dst-table-endpoint (or a SAS URL), or --dst-account NAME for Microsoft
Entra ID (with --dst-table-endpoint, --dst-endpoint-suffix, --dst-token-scope and
--dst-root-certificate as for the source). The environment never applies to the destination.
--filter, --partition and --select limit what is copied (and what --verify and
--delete-extra compare). --delete-extra deletes what only the destination holds, after the
copy; with --dry-run it lists those entities (extra PK RK) and deletes nothing.
--verify compares, partition by partition, the entity count and a SHA-256 over each
entity's keys and typed properties (Timestamp and ETag excluded) and lists every
partition that differs (exit 4: differences, not a failure).";

/// `tablekit copy`.
#[derive(Debug, Args)]
pub(crate) struct CopyArgs {
    /// The source table.
    pub(crate) src_table: String,
    /// The destination table [default: the source's name].
    #[arg(conflicts_with = "dst_table_flag")]
    pub(crate) dst_table: Option<String>,
    /// The destination table (alternative to the positional argument).
    #[arg(long = "dst-table", value_name = "NAME")]
    pub(crate) dst_table_flag: Option<String>,
    /// Destination connection string [default: the source account].
    #[arg(long, value_name = "STRING")]
    pub(crate) dst_connection_string: Option<String>,
    /// Destination SAS token, with --dst-table-endpoint.
    #[arg(long, value_name = "TOKEN")]
    pub(crate) dst_sas: Option<String>,
    /// Destination table service URL: for SAS access (with --dst-sas, or a SAS URL), or
    /// with --dst-account instead of the derived one.
    #[arg(long, value_name = "URL")]
    pub(crate) dst_table_endpoint: Option<String>,
    /// Destination storage account reached with Microsoft Entra ID (the default credential
    /// chain, as for the source) — for accounts with Shared Key access disabled.
    #[arg(long, value_name = "NAME")]
    pub(crate) dst_account: Option<String>,
    /// DNS suffix of the destination account's endpoints with --dst-account
    /// [default: core.windows.net].
    #[arg(long, value_name = "SUFFIX")]
    pub(crate) dst_endpoint_suffix: Option<String>,
    /// Token audience with --dst-account: storage, account, cosmos, or a scope URI
    /// [default: storage].
    #[arg(long, value_name = "SCOPE")]
    pub(crate) dst_token_scope: Option<String>,
    /// PEM file of root certificates the destination's endpoint needs [default: the
    /// source's --root-certificate].
    #[arg(long, value_name = "PEM")]
    pub(crate) dst_root_certificate: Option<PathBuf>,
    /// Create the destination table if it does not exist.
    #[arg(long)]
    pub(crate) create: bool,
    /// Continue an interrupted copy from its checkpoint.
    #[arg(long)]
    pub(crate) resume: bool,
    /// Checkpoint file [default: SRC-to-DST.copy-checkpoint].
    #[arg(long, value_name = "FILE")]
    pub(crate) checkpoint: Option<PathBuf>,
    /// After copying, compare both tables partition by partition.
    #[arg(long)]
    pub(crate) verify: bool,
    /// Only compare; copy nothing.
    #[arg(long, conflicts_with_all = ["verify", "resume", "create"])]
    pub(crate) verify_only: bool,
    /// After copying, delete the destination's entities that the source does not hold
    /// (within the partitions, ranges and filter copied), so that both are equal.
    #[arg(long, conflicts_with = "verify_only")]
    pub(crate) delete_extra: bool,
    /// Read the source and check every entity, count what would be copied (and, with
    /// --delete-extra, list what would be deleted); write nothing, no checkpoint.
    #[arg(long, conflicts_with_all = ["verify_only", "resume", "verify"])]
    pub(crate) dry_run: bool,
    #[command(flatten)]
    pub(crate) scope: ScopeArgs,
    #[command(flatten)]
    pub(crate) ranges: RangeArgs,
}
