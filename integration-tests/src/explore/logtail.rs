//! Scenarios of this part (none yet).

use tablekit_testkit::explore::Entry;

/// The scenarios of this module.
pub fn entries() -> Vec<Entry> {
    Vec::new()
}
