//! Checkpoint files: small JSON documents replaced atomically, tied to the options they were
//! written with by a hash, so that `--resume` never continues a different job.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest as _, Sha256};

use crate::exit::{CliError, CliResult};
use crate::files::replace_atomically;

/// The version of the checkpoint documents; a different one is not resumed.
pub(crate) const VERSION: u32 = 1;

/// A hex SHA-256 over `parts`, each length-prefixed so that no two lists collide.
pub(crate) fn options_hash(parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hex(&hash.finalize())
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// `path` with `suffix` appended to its file name (`out.jsonl` → `out.jsonl.checkpoint`).
pub(crate) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Reads a checkpoint, `None` when there is none.
///
/// # Errors
/// A failure (exit 1) when the file cannot be read or parsed.
pub(crate) fn load<T: DeserializeOwned>(path: &Path) -> CliResult<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            CliError::failure(format!("{}: not a valid checkpoint ({e})", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::io(path, &e)),
    }
}

/// Writes a checkpoint atomically.
///
/// # Errors
/// A failure (exit 1) on I/O errors.
pub(crate) fn store<T: Serialize>(path: &Path, value: &T) -> CliResult<()> {
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| CliError::failure(format!("{}: {e}", path.display())))?;
    replace_atomically(path, &bytes).map_err(|e| CliError::io(path, &e))
}

/// Refuses to resume from a checkpoint of other options or another version.
///
/// # Errors
/// A usage error (exit 2) naming the checkpoint.
pub(crate) fn check_same(
    path: &Path,
    version: u32,
    options: &str,
    expected: &str,
) -> CliResult<()> {
    if version != VERSION || options != expected {
        return Err(CliError::usage(format!(
            "{} was written by a run with other options (table, ranges, page size, compression or mode); resume with the same options, or start over with --overwrite / without --resume after removing it",
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_hash_separates_its_parts() {
        assert_ne!(options_hash(&["ab", "c"]), options_hash(&["a", "bc"]));
        assert_eq!(options_hash(&["a"]), options_hash(&["a"]));
        assert_eq!(options_hash(&[]).len(), 64);
    }
}
