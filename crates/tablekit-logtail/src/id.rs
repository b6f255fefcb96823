//! [`AppendId`]: the unique suffix of an entry's RowKey.

use tablekit_core::{Error, Result};

/// The id of one append: the suffix of its entry's RowKey (`{inverted ticks}_{id}`).
///
/// An entry's keys are its partition, its time and its id, so appending the same item again
/// with the same id and time writes the same keys: the insert meets the entry if it is there
/// and is then "already appended", never a second copy. Ids that
/// [`LogTail::append_id`](crate::LogTail::append_id) mints are unique (an inverted per-writer
/// counter and a random writer id, 32 hex digits) and keep a writer's later entries of one
/// tick first. An id of your own — an event id, a message id — lets a re-append after a crash
/// find the entry too; it must be unique among the entries of its partition and time.
///
/// Kept as text: [`AppendId::as_str`] / [`Display`](std::fmt::Display) and
/// [`AppendId::new`] / [`FromStr`](std::str::FromStr) round-trip, for storing ids next to
/// the items they stand for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppendId(String);

impl AppendId {
    /// The longest id, in characters.
    pub const MAX_LEN: usize = 64;

    /// An id of your own: 1 to [`AppendId::MAX_LEN`] ASCII letters, digits, `-`, `_` or `.`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for anything else.
    ///
    /// # Example
    /// ```
    /// use tablekit_logtail::AppendId;
    /// let id = AppendId::new("order-8812.shipped").unwrap();
    /// assert_eq!(id.as_str(), "order-8812.shipped");
    /// assert!(AppendId::new("a/b").is_err());
    /// assert!(AppendId::new("").is_err());
    /// ```
    pub fn new(id: impl Into<String>) -> Result<Self> {
        let id = id.into();
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if id.is_empty() || id.len() > Self::MAX_LEN || !id.chars().all(allowed) {
            return Err(Error::invalid_argument(
                "AppendId",
                format!(
                    "{id:?}: an append id is 1 to {} ASCII letters, digits, '-', '_' or '.'",
                    Self::MAX_LEN
                ),
            ));
        }
        Ok(Self(id))
    }

    /// An id minted by [`SuffixSource`](crate::key::SuffixSource), valid by construction.
    pub(crate) fn minted(id: String) -> Self {
        Self(id)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for AppendId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for AppendId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::new(s)
    }
}
