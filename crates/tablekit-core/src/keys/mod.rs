//! PartitionKey and RowKey: validated newtypes, and builders for well-ordered keys.
//!
//! A key is a string of at most 1 KiB that contains none of `/ \ # ?` and no control
//! characters (U+0000–U+001F, U+007F–U+009F). Size is counted as UTF-16 code units × 2, the
//! way the service stores strings (and the conservative reading of "1 KiB"): at most 512
//! UTF-16 code units.

use std::str::FromStr;

use serde::{Deserialize, Deserializer};

// Named at the crate root (`tablekit_core::Keys`): one path per type.
pub(crate) use crate::address::{Keys, PartitionKey, RowKey};
use crate::error::{Error, KeyKind, Limit, Result};
use crate::limits::MAX_KEY_BYTES;

mod builders;
mod encoder;
mod ticks;

pub use builders::{CompoundKey, KeyRange, pad_number, prefix_range};
pub use encoder::{ESCAPE_CHAR, KeyEncoder};
pub use ticks::{
    DOTNET_MAX_TICKS, DOTNET_TICKS_AT_UNIX_EPOCH, dotnet_ticks, from_dotnet_ticks,
    from_inverted_ticks, inverted_ticks, try_inverted_ticks,
};

/// Checks that `value` is a valid key of the given kind.
///
/// # Errors
/// [`Error::LimitExceeded`] with [`Limit::KeyBytes`] when longer than 1 KiB, or
/// [`Error::InvalidKey`] naming the first forbidden character and its position.
#[doc(hidden)]
pub fn validate_key(kind: KeyKind, value: &str) -> Result<()> {
    let bytes = utf16_bytes(value);
    if bytes > MAX_KEY_BYTES {
        return Err(Error::LimitExceeded {
            limit: Limit::KeyBytes(kind),
            actual: bytes,
        });
    }
    for (position, character) in value.chars().enumerate() {
        if let Some(reason) = forbidden_reason(character) {
            return Err(Error::InvalidKey {
                kind,
                character,
                position,
                reason,
            });
        }
    }
    Ok(())
}

/// Why `c` may not appear in a key, or `None` if it may.
pub(crate) fn forbidden_reason(c: char) -> Option<&'static str> {
    match c {
        '/' | '\\' | '#' | '?' => Some("the service forbids / \\ # ? in keys"),
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => {
            Some("control characters are not allowed in keys")
        }
        _ => None,
    }
}

/// The size the service counts for a string: UTF-16 code units × 2.
#[doc(hidden)]
pub fn utf16_bytes(value: &str) -> usize {
    value.chars().map(char::len_utf16).sum::<usize>() * 2
}

macro_rules! validated_key {
    ($name:ident, $kind:expr) => {
        impl $name {
            /// Validates and wraps a key.
            ///
            /// # Errors
            /// See [`validate_key`].
            pub fn new(value: impl Into<String>) -> Result<Self> {
                let value = value.into();
                validate_key($kind, &value)?;
                Ok(Self(value))
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = Error;
            fn try_from(s: String) -> Result<Self> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = Error;
            fn try_from(s: &str) -> Result<Self> {
                Self::new(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

validated_key!(PartitionKey, KeyKind::PartitionKey);
validated_key!(RowKey, KeyKind::RowKey);

impl Keys {
    /// Validates both keys.
    ///
    /// # Errors
    /// See [`validate_key`].
    pub fn new(partition_key: impl Into<String>, row_key: impl Into<String>) -> Result<Self> {
        Ok(Self {
            partition_key: PartitionKey::new(partition_key)?,
            row_key: RowKey::new(row_key)?,
        })
    }
}

impl<'de> Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        // Each key validates itself as it is read.
        #[derive(Deserialize)]
        struct Wire {
            #[serde(rename = "PartitionKey")]
            partition_key: PartitionKey,
            #[serde(rename = "RowKey")]
            row_key: RowKey,
        }
        let Wire {
            partition_key,
            row_key,
        } = Wire::deserialize(d)?;
        Ok(Self {
            partition_key,
            row_key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn forbidden_characters_are_named_with_their_position() {
        for (key, ch, pos) in [
            ("a/b", '/', 1),
            ("\\", '\\', 0),
            ("ab#", '#', 2),
            ("x?", '?', 1),
            ("ok\u{7}", '\u{7}', 2),
            ("é\u{85}", '\u{85}', 1),
        ] {
            match RowKey::new(key) {
                Err(Error::InvalidKey {
                    kind,
                    character,
                    position,
                    ..
                }) => {
                    assert_eq!(
                        (kind, character, position),
                        (KeyKind::RowKey, ch, pos),
                        "{key:?}"
                    );
                }
                other => panic!("{key:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn size_is_counted_in_utf16_units() {
        assert!(PartitionKey::new("a".repeat(512)).is_ok());
        let err = PartitionKey::new("a".repeat(513)).unwrap_err();
        assert!(matches!(
            err,
            Error::LimitExceeded {
                limit: Limit::KeyBytes(KeyKind::PartitionKey),
                actual: 1026
            }
        ));
        assert_eq!(err.kind(), ErrorKind::LimitExceeded);
        // A character outside the BMP is two UTF-16 units.
        assert!(RowKey::new("😀".repeat(256)).is_ok());
        assert!(RowKey::new(format!("{}a", "😀".repeat(256))).is_err());
    }

    #[test]
    fn ordinary_keys_and_awkward_but_legal_ones_pass() {
        for key in [
            "",
            "Sales",
            "O'Brien",
            "a%20b",
            "x+y",
            "naïve 東京",
            "email_jonesj@contoso.com",
        ] {
            assert!(Keys::new(key, key).is_ok(), "{key:?}");
        }
    }

    #[test]
    fn deserializing_validates() {
        let ok: Keys = serde_json::from_str(r#"{"PartitionKey":"a","RowKey":"b"}"#).unwrap();
        assert_eq!((ok.pk(), ok.rk()), ("a", "b"));
        assert!(serde_json::from_str::<Keys>(r#"{"PartitionKey":"a/b","RowKey":"b"}"#).is_err());
    }
}
