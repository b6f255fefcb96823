//! Exit codes and the one mapping from errors to them.

use std::fmt;
use std::path::Path;

use tablekit::core::{Error, ErrorKind};

/// How the tool ends. The numbers are part of the interface: scripts branch on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Everything asked for was done.
    Success,
    /// A request or an I/O operation failed; what was done up to then is kept (and
    /// checkpointed where the command has a checkpoint).
    Failure,
    /// Invalid command line or input, refused before any request was sent.
    Usage,
    /// Done, except for rows that were refused or whose outcome stayed unknown, or entities
    /// that could not be read.
    Partial,
    /// A verification ran to its end and found differences (not a failure of the tool).
    Differences,
    /// Stopped by Ctrl-C (SIGINT) or SIGTERM after writing the checkpoint.
    Interrupted,
}

impl Exit {
    /// The process exit status.
    pub(crate) fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::Partial => 3,
            Exit::Differences => 4,
            Exit::Interrupted => 130,
        }
    }
}

/// A failure with the exit code it ends the tool with and a message for stderr. Messages
/// never contain account keys or SAS signatures: they are built from tablekit's errors,
/// which redact them, and from file paths and names.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) exit: Exit,
    pub(crate) message: String,
}

impl CliError {
    /// Bad command line or input, refused before any request.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            exit: Exit::Usage,
            message: message.into(),
        }
    }

    /// A failure after requests may have been sent.
    pub(crate) fn failure(message: impl Into<String>) -> Self {
        Self {
            exit: Exit::Failure,
            message: message.into(),
        }
    }

    /// An I/O failure on `path`.
    pub(crate) fn io(path: &Path, error: &std::io::Error) -> Self {
        Self::failure(format!("{}: {error}", path.display()))
    }

    /// A tablekit error, with what was being done.
    pub(crate) fn context(doing: &str, error: &Error) -> Self {
        Self {
            exit: exit_for(error),
            message: format!("{doing}: {error}"),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Error> for CliError {
    fn from(error: Error) -> Self {
        Self {
            exit: exit_for(&error),
            message: error.to_string(),
        }
    }
}

/// Errors tablekit raises before sending anything (bad names, keys, filters, arguments,
/// values that cannot be stored, configuration, limits) are usage errors; everything else is a failure.
pub(crate) fn exit_for(error: &Error) -> Exit {
    match error.kind() {
        ErrorKind::InvalidInput
        | ErrorKind::InvalidArgument
        | ErrorKind::Encode
        | ErrorKind::LimitExceeded => Exit::Usage,
        _ => Exit::Failure,
    }
}

/// `Result` of a command: how it ended, or why it failed.
pub(crate) type CliResult<T = Exit> = Result<T, CliError>;
