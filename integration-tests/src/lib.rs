//! Cross-crate scenarios live in `tests/`; this library is intentionally empty.
