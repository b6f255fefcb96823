//! The fault-schedule explorer's scenarios: one per public write operation and pattern read,
//! each with the invariants that must hold after every fault schedule. `tests/explore.rs`
//! runs their single-fault schedules in `cargo xtask test`; the `explore` binary runs them
//! for `cargo xtask explore`. The other cross-crate scenarios live in `tests/`.

pub mod explore;
