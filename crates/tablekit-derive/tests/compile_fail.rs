//! Mistakes that must not compile, each with the error message a user sees (the `.stderr`
//! snapshots in `tests/ui/`; regenerate with `TRYBUILD=overwrite` and review the diff).

#[test]
fn mistakes_are_compile_errors() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
