//! The key encoder: round trips, validity, identity on ordinary strings, and the documented
//! order rule.

use std::cmp::Ordering;

use proptest::prelude::*;
use tablekit_core::KeyKind;
use tablekit_core::keys::{ESCAPE_CHAR, KeyEncoder, validate_key};

use super::common::tricky_string;

/// Whether the encoder escapes `c`, by the rule its documentation states (an independent
/// restatement, not the encoder's own table).
fn escaped(c: char) -> bool {
    matches!(c, '/' | '\\' | '#' | '?' | '!' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

proptest! {
    #[test]
    fn decode_inverts_encode_and_the_result_is_a_valid_key(text in tricky_string(40)) {
        let enc = KeyEncoder::new();
        let key = enc.encode(&text).unwrap();
        prop_assert!(validate_key(KeyKind::RowKey, &key).is_ok(), "{:?}", key);
        prop_assert_eq!(enc.decode(&key).unwrap(), text);
    }

    #[test]
    fn decode_inverts_encode_for_arbitrary_unicode(text in any::<String>()) {
        let enc = KeyEncoder::new();
        let key = enc.encode(&text).unwrap();
        prop_assert!(validate_key(KeyKind::RowKey, &key).is_ok());
        prop_assert_eq!(enc.decode(&key).unwrap(), text);
    }

    #[test]
    fn strings_without_special_characters_encode_to_themselves(text in tricky_string(30)) {
        let text: String = text.chars().filter(|&c| !escaped(c)).collect();
        prop_assert_eq!(KeyEncoder::new().encode(&text).unwrap(), text);
    }

    #[test]
    fn order_follows_the_documented_rule(a in tricky_string(6), b in tricky_string(6)) {
        let enc = KeyEncoder::new();
        let (ea, eb) = (enc.encode(&a).unwrap(), enc.encode(&b).unwrap());
        let diff = a.chars().zip(b.chars()).find(|(x, y)| x != y);
        let expected = match diff {
            None => a.cmp(&b),
            Some((x, y)) => match (escaped(x), escaped(y)) {
                (true, false) => ESCAPE_CHAR.cmp(&y),
                (false, true) => x.cmp(&ESCAPE_CHAR),
                _ => x.cmp(&y),
            },
        };
        prop_assert_eq!(ea.cmp(&eb), expected, "{:?} / {:?}", ea, eb);
        if diff.is_none_or(|(x, y)| escaped(x) == escaped(y)) {
            prop_assert_eq!(ea.cmp(&eb), a.cmp(&b));
        }
    }
}

#[test]
fn the_order_changes_only_across_the_escape_character() {
    let enc = KeyEncoder::new();
    let cmp = |a: &str, b: &str| enc.encode(a).unwrap().cmp(&enc.encode(b).unwrap());
    assert_eq!(
        cmp("a-b", "a/b"),
        Ordering::Greater,
        "'-' lies between '!' and '/'"
    );
    assert_eq!(cmp("a/b", "a0"), Ordering::Less);
    assert_eq!(
        cmp("a\u{1}", "a "),
        Ordering::Greater,
        "' ' lies between U+0001 and '!'"
    );
    assert_eq!(cmp("a\u{1}", "a\u{2}"), Ordering::Less);
}
