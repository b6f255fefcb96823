//! The errors of a move between two partitions (`relocate`), which say where the entity is.

use tablekit_core::{Error, ErrorKind, Keys, Target};

/// A move between two partitions, for the errors that say where the entity is.
pub(crate) struct Moved<'a> {
    pub(crate) table: &'a str,
    pub(crate) from: &'a Keys,
    pub(crate) to: &'a Keys,
}

impl Moved<'_> {
    fn error(&self, reason: String) -> Error {
        Error::Indeterminate {
            target: Target::entity(self.table, self.to.clone()),
            reason,
        }
    }

    /// The insert's outcome is unknown: nothing was deleted.
    pub(crate) fn perhaps_in_new(&self, insert: &Error) -> Error {
        self.error(format!(
            "moving from {}: the entity is in its old partition, and perhaps also in the new \
             one (the insert's outcome is unknown: {insert}); read the new partition, then \
             delete one of them",
            self.from
        ))
    }

    /// The delete's outcome is unknown: the insert stays.
    pub(crate) fn perhaps_still_in_old(&self, delete: &Error) -> Error {
        self.error(format!(
            "moving from {}: the entity is in its new partition, and perhaps still in the old \
             one (the delete's outcome is unknown: {delete}); read the old partition, then \
             delete it there if it is",
            self.from
        ))
    }

    /// The delete was refused and the undo failed.
    pub(crate) fn undo_failed(&self, failed: &Error, undo: &Error) -> Error {
        if undo.kind() == ErrorKind::Indeterminate {
            return self.error(format!(
                "moving from {}: the entity is in its old partition, and perhaps also in the \
                 new one: its old copies could not be deleted ({failed}) and undoing the \
                 insert has an unknown outcome ({undo})",
                self.from
            ));
        }
        self.error(format!(
            "moving from {}: the entity is in both partitions: its old copies could not be \
             deleted ({failed}) nor the new ones undone ({undo})",
            self.from
        ))
    }
}
