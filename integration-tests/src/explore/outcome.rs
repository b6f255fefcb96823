//! What an operation returned, kept for the checks.

use std::fmt;

use tablekit_core::{Error, ErrorKind};

/// An operation's result without its value: `Ok`, or the error's kind and text.
#[derive(Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded.
    Ok,
    /// It failed.
    Err {
        /// The error's kind.
        kind: ErrorKind,
        /// The error's text.
        message: String,
    },
}

impl Outcome {
    /// The outcome of `result`.
    pub fn of<T>(result: &Result<T, Error>) -> Self {
        match result {
            Ok(_) => Outcome::Ok,
            Err(e) => Outcome::Err {
                kind: e.kind(),
                message: e.to_string(),
            },
        }
    }

    /// Whether it failed with `kind`.
    pub fn is(&self, kind: ErrorKind) -> bool {
        matches!(self, Outcome::Err { kind: k, .. } if *k == kind)
    }

    /// The error's text, empty for `Ok`.
    pub fn message(&self) -> &str {
        match self {
            Outcome::Ok => "",
            Outcome::Err { message, .. } => message,
        }
    }
}

impl fmt::Debug for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => f.write_str("Ok"),
            Outcome::Err { kind, message } => write!(f, "Err({kind:?}: {message})"),
        }
    }
}
