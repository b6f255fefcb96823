//! Key builders, key encoding, inverted ticks, typed filters and query shapes, checked
//! against the claims of PATTERNS.md §9.

mod keys_and_filters {
    pub(crate) mod common;
    mod compound;
    mod encoder;
    mod filters;
    mod ranges;
    mod shape;
    mod ticks;
}
