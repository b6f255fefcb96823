//! Strategies shared by the test modules.

use proptest::prelude::*;

/// Characters that sit on the boundaries the code cares about, mixed with arbitrary ones: the
/// forbidden key characters, the escape and separator characters, the order-preserving leads,
/// the surrogate gap and the top of Unicode.
pub(crate) fn tricky_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => any::<char>(),
        3 => prop::sample::select(vec!['a', 'b', 'z', 'A', 'Z', '0', '9', 'é', '東']),
        4 => prop::sample::select(vec![
            '/', '\\', '#', '?', '!', '_', ' ', '.', '>', '[', '~', '"', '$', '-', '\'', '%',
            '\u{0}', '\u{1f}', '\u{7f}', '\u{85}', '\u{9f}', '\u{a0}',
            '\u{d7ff}', '\u{e000}', '\u{ffff}', '\u{10000}', '\u{10fffe}', '\u{10ffff}',
        ]),
    ]
}

/// Strings of up to `max` [`tricky_char`]s.
pub(crate) fn tricky_string(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(tricky_char(), 0..=max).prop_map(String::from_iter)
}
