//! Reversible escaping that makes any string usable as a key, and the escaping core shared with
//! [`CompoundKey`](super::CompoundKey).
//!
//! Every escaped character is below U+0100, so an escape is always a *lead* character followed
//! by exactly two uppercase hex digits. Fixed-width codes keep decoding unambiguous and make
//! escaped characters compare among themselves in their original order.

use crate::error::{Error, KeyKind, Limit, Result};
use crate::limits::MAX_KEY_BYTES;

use super::{forbidden_reason, utf16_bytes};

/// The character that starts every escape sequence of [`KeyEncoder`] (and of the default
/// [`CompoundKey`](super::CompoundKey) mode).
pub const ESCAPE_CHAR: char = '!';

/// Which characters are escaped, and with which lead character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Scheme {
    /// Forbidden characters, `!` and optionally one more character (a compound-key separator)
    /// are escaped as `!XX`. Other characters stand for themselves.
    Plain {
        /// A further character to escape.
        extra: Option<char>,
    },
    /// Order-preserving: each escaped character gets a lead from its own neighbourhood, so
    /// `encode` is strictly monotonic. Every character up to `#` (including the space used as a
    /// separator) is escaped too, so the space sorts below everything an encoded string holds.
    Ordered,
}

impl Scheme {
    /// The lead character that starts `c`'s escape, or `None` when `c` stands for itself.
    ///
    /// Each `Ordered` run is a contiguous interval of code points that contains its lead, and no
    /// unescaped character lies inside a run. So comparing a lead with an unescaped character
    /// gives the same answer as comparing any member of its run with it: that is the whole
    /// order-preservation argument.
    pub(crate) fn lead(self, c: char) -> Option<char> {
        match self {
            Scheme::Plain { extra } => {
                (c == ESCAPE_CHAR || Some(c) == extra || forbidden_reason(c).is_some())
                    .then_some(ESCAPE_CHAR)
            }
            Scheme::Ordered => match c {
                '\u{0}'..='#' => Some('!'),
                '.' | '/' => Some('.'),
                '>' | '?' => Some('>'),
                '[' | '\\' => Some('['),
                '~'..='\u{9f}' => Some('~'),
                _ => None,
            },
        }
    }

    /// Appends the escaped form of `text` to `out`.
    pub(crate) fn escape_into(self, text: &str, out: &mut String) {
        for c in text.chars() {
            match self.lead(c) {
                Some(lead) => {
                    out.push(lead);
                    // Every escaped character is below U+0100 (asserted by a unit test over
                    // the whole range), so two hex digits always suffice.
                    let code = u32::from(c);
                    out.push(hex_digit(code >> 4));
                    out.push(hex_digit(code & 0xF));
                }
                None => out.push(c),
            }
        }
    }

    /// Reverses [`Scheme::escape_into`]. Accepts exactly the strings it can produce.
    ///
    /// # Errors
    /// The position (in characters) and the character where `text` stops being a valid escaped
    /// string, with the reason.
    pub(crate) fn unescape(
        self,
        text: &str,
    ) -> std::result::Result<String, (usize, char, &'static str)> {
        let mut out = String::with_capacity(text.len());
        let mut chars = text.chars().enumerate();
        while let Some((position, c)) = chars.next() {
            match self.lead(c) {
                None => out.push(c),
                Some(lead) if lead == c => {
                    let mut digit = || chars.next().and_then(|(_, d)| hex_value(d));
                    let (Some(high), Some(low)) = (digit(), digit()) else {
                        return Err((
                            position,
                            c,
                            "an escape must be followed by two uppercase hex digits",
                        ));
                    };
                    let original = char::from_u32((high << 4) | low).unwrap_or(c);
                    if self.lead(original) != Some(c) {
                        return Err((
                            position,
                            c,
                            "the escape names a character that is never escaped this way",
                        ));
                    }
                    out.push(original);
                }
                Some(_) => return Err((position, c, "this character must be escaped")),
            }
        }
        Ok(out)
    }
}

fn hex_digit(nibble: u32) -> char {
    char::from_digit(nibble, 16).map_or('0', |d| d.to_ascii_uppercase())
}

/// Only uppercase digits are accepted, so every decoded string has one encoding.
fn hex_value(d: char) -> Option<u32> {
    match d {
        '0'..='9' | 'A'..='F' => d.to_digit(16),
        _ => None,
    }
}

/// Reversibly turns any string into a valid key, and back.
///
/// The characters the service forbids in keys (`/ \ # ?`, U+0000–U+001F, U+007F–U+009F) and the
/// escape character `!` itself are written as `!` plus two uppercase hex digits (`a/b` →
/// `a!2Fb`, `!` → `!21`). Every other character stands for itself, so a string without any of
/// those characters encodes to itself. `!` was chosen over `%` because keys containing `%` are
/// known to trip up URL handling, and because it sorts low, next to most of the characters it
/// replaces.
///
/// **Order.** Compare `s` and `t` at the first character where they differ, say `x` in `s` and
/// `y` in `t`. `encode` keeps their order when one string is a prefix of the other, when
/// neither `x` nor `y` is escaped, or when both are. When only `x` is escaped, the encoded
/// strings compare `!` with `y` instead of `x` with `y`, so the order flips exactly when `y` lies
/// strictly between `!` and `x`. So `a-b` < `a/b`, but `a!2Fb` < `a-b` because `!` < `-`;
/// while `a/b` < `a0` stays `a!2Fb` < `a0`. Use [`CompoundKey::order_preserving`] when the
/// order of arbitrary strings must survive.
///
/// [`CompoundKey::order_preserving`]: super::CompoundKey::order_preserving
///
/// # Example
/// ```
/// use tablekit_core::keys::KeyEncoder;
/// let enc = KeyEncoder::new();
/// assert_eq!(enc.encode("reports/2026#3").unwrap(), "reports!2F2026!233");
/// assert_eq!(enc.decode("reports!2F2026!233").unwrap(), "reports/2026#3");
/// assert_eq!(enc.encode("jones@contoso.com").unwrap(), "jones@contoso.com");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyEncoder {
    kind: KeyKind,
}

impl Default for KeyEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyEncoder {
    const SCHEME: Scheme = Scheme::Plain { extra: None };

    /// An encoder whose errors name the RowKey.
    pub fn new() -> Self {
        Self {
            kind: KeyKind::RowKey,
        }
    }

    /// An encoder whose errors name `kind`.
    pub fn for_kind(kind: KeyKind) -> Self {
        Self { kind }
    }

    /// Encodes `text` into a string that passes [`validate_key`](super::validate_key).
    ///
    /// # Errors
    /// [`Error::LimitExceeded`] with [`Limit::KeyBytes`] when the encoded key is longer than
    /// 1 KiB (escaping triples the length of each escaped character).
    pub fn encode(&self, text: &str) -> Result<String> {
        let mut out = String::with_capacity(text.len());
        Self::SCHEME.escape_into(text, &mut out);
        let bytes = utf16_bytes(&out);
        if bytes > MAX_KEY_BYTES {
            return Err(Error::LimitExceeded {
                limit: Limit::KeyBytes(self.kind),
                actual: bytes,
            });
        }
        Ok(out)
    }

    /// Decodes a key produced by [`KeyEncoder::encode`].
    ///
    /// # Errors
    /// [`Error::InvalidKey`] when `key` is not something `encode` produces: a raw forbidden
    /// character, or a `!` not followed by two uppercase hex digits naming a character that
    /// `encode` escapes.
    pub fn decode(&self, key: &str) -> Result<String> {
        Self::SCHEME
            .unescape(key)
            .map_err(|(position, character, reason)| Error::InvalidKey {
                kind: self.kind,
                character,
                position,
                reason,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::validate_key;

    #[test]
    fn every_escaped_character_fits_two_hex_digits() {
        for scheme in [Scheme::Plain { extra: Some('_') }, Scheme::Ordered] {
            for c in (0..=0x10FFFF).filter_map(char::from_u32) {
                if scheme.lead(c).is_some() {
                    assert!(u32::from(c) < 0x100, "{scheme:?} escapes {c:?}");
                }
            }
        }
    }

    #[test]
    fn leads_escape_themselves_and_are_valid_key_characters() {
        for scheme in [Scheme::Plain { extra: None }, Scheme::Ordered] {
            for c in (0..0x100).filter_map(char::from_u32) {
                if let Some(lead) = scheme.lead(c) {
                    assert_eq!(scheme.lead(lead), Some(lead), "{scheme:?}: lead of {c:?}");
                    assert!(forbidden_reason(lead).is_none());
                }
            }
        }
    }

    #[test]
    fn forbidden_characters_and_the_escape_are_escaped() {
        let enc = KeyEncoder::new();
        assert_eq!(enc.encode("a/b\\c#d?e").unwrap(), "a!2Fb!5Cc!23d!3Fe");
        assert_eq!(
            enc.encode("\u{0}\u{1f}\u{7f}\u{9f}").unwrap(),
            "!00!1F!7F!9F"
        );
        assert_eq!(enc.encode("hi!").unwrap(), "hi!21");
        assert_eq!(
            enc.encode("O'Brien 50% naïve").unwrap(),
            "O'Brien 50% naïve"
        );
        validate_key(KeyKind::RowKey, &enc.encode("a/b\u{85}!").unwrap()).unwrap();
    }

    #[test]
    fn decode_refuses_what_encode_never_produces() {
        let enc = KeyEncoder::for_kind(KeyKind::PartitionKey);
        for (bad, position) in [
            ("a/b", 1),
            ("!2", 0),
            ("x!2f", 1),
            ("!41", 0),
            ("!G0", 0),
            ("ab!", 2),
        ] {
            match enc.decode(bad) {
                Err(Error::InvalidKey {
                    kind: KeyKind::PartitionKey,
                    position: p,
                    ..
                }) => {
                    assert_eq!(p, position, "{bad:?}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_size_limit_applies_to_the_encoded_key() {
        let enc = KeyEncoder::new();
        assert!(enc.encode(&"/".repeat(170)).is_ok());
        match enc.encode(&"/".repeat(171)) {
            Err(Error::LimitExceeded {
                limit: Limit::KeyBytes(KeyKind::RowKey),
                actual,
            }) => {
                assert_eq!(actual, 171 * 3 * 2);
            }
            other => panic!("{other:?}"),
        }
    }
}
