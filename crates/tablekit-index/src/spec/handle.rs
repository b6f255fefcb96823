//! [`CopyHandle`]: what declaring a copy returns, and what lookups through it take.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh identity for an index declaration, so a handle is only accepted by indexes built
/// from the declaration that made it.
pub(super) fn next_spec_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A copy of an [`IndexSpec`](crate::IndexSpec), as returned by
/// [`IndexSpecBuilder::primary`](crate::IndexSpecBuilder::primary) and
/// [`secondary`](crate::IndexSpecBuilder::secondary): lookups (`get_by`, `range_by`, …) take
/// it instead of the copy's name, so a misspelled copy does not compile, and its rows are
/// read as `R` (the entity type `T`, or the type of the copy's projection).
///
/// A handle belongs to the declaration that made it (and its clones): an index built from
/// another declaration refuses it with [`InvalidArgument`](tablekit_core::Error::InvalidArgument)
/// before any request. Handles are `Copy`.
pub struct CopyHandle<T, R = T> {
    pub(crate) id: CopyId,
    _types: PhantomData<fn() -> (T, R)>,
}

impl<T, R> CopyHandle<T, R> {
    pub(super) fn new(spec: u64, position: usize) -> Self {
        Self {
            id: CopyId { spec, position },
            _types: PhantomData,
        }
    }

    /// The handle without its types (what [`BackfillOptions`](crate::BackfillOptions) keeps).
    pub fn id(&self) -> CopyId {
        self.id
    }
}

impl<T, R> Clone for CopyHandle<T, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, R> Copy for CopyHandle<T, R> {}

impl<T, R> PartialEq for CopyHandle<T, R> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl<T, R> Eq for CopyHandle<T, R> {}

impl<T, R> fmt::Debug for CopyHandle<T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CopyHandle")
            .field("spec", &self.id.spec)
            .field("position", &self.id.position)
            .finish()
    }
}

/// A [`CopyHandle`] without its types: which declaration, which copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CopyId {
    pub(crate) spec: u64,
    pub(crate) position: usize,
}

impl<T, R> From<&CopyHandle<T, R>> for CopyId {
    fn from(handle: &CopyHandle<T, R>) -> Self {
        handle.id
    }
}

impl<T, R> From<CopyHandle<T, R>> for CopyId {
    fn from(handle: CopyHandle<T, R>) -> Self {
        handle.id
    }
}
