//! Telling lost races (retry from the read) from real failures.

use tablekit_core::{Error, ErrorKind};

/// Whether an error kind is what a conditional write gets when another writer got there
/// first: the ETag changed (412), the row was created (409) or deleted (404) since the read.
pub(crate) fn is_race(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::PreconditionFailed | ErrorKind::AlreadyExists | ErrorKind::NotFound
    )
}

/// A lost race as the conflict an ETag loop retries: a 404 on a row read a moment ago means
/// it was deleted since — the same situation as a changed ETag.
pub(crate) fn as_conflict(error: Error) -> Error {
    match error {
        Error::BatchFailed { source, .. } if source.kind() == ErrorKind::NotFound => {
            match *source {
                Error::NotFound { target } => Error::PreconditionFailed { target },
                other => other,
            }
        }
        Error::NotFound { target } => Error::PreconditionFailed { target },
        other => other,
    }
}
