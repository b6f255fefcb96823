//! Builders for keys that sort the way the application reads them: zero-padded numbers,
//! prefix ranges and compound keys.

use std::collections::BTreeMap;

use crate::error::{Error, KeyKind, Limit, Result, Target};
use crate::limits::MAX_KEY_BYTES;

use super::encoder::{ESCAPE_CHAR, Scheme};
use super::validate_key;

/// The widest zero-padded component that can fit in a key at all (a key holds at most 512
/// UTF-16 code units).
const MAX_WIDTH: usize = MAX_KEY_BYTES / 2;

/// Formats `n` with leading zeros to exactly `width` digits, so that numeric keys sort
/// numerically: unpadded, `"10"` < `"9"`; padded, `"00000009"` < `"00000010"`.
///
/// # Errors
/// [`Error::LimitExceeded`] with a [`Limit::Custom`] when `n` has more than `width` digits, or
/// when `width` is wider than a key can be (512).
///
/// # Example
/// ```
/// use tablekit_core::keys::pad_number;
/// assert_eq!(pad_number(123, 6).unwrap(), "000123");
/// assert!(pad_number(1_000_000, 6).is_err());
/// ```
pub fn pad_number(n: u64, width: usize) -> Result<String> {
    pad_digits(&n.to_string(), width)
}

/// Left-pads a string of ASCII digits with zeros to `width`.
fn pad_digits(digits: &str, width: usize) -> Result<String> {
    if width > MAX_WIDTH {
        return Err(Error::LimitExceeded {
            limit: Limit::Custom {
                what: "width of a zero-padded key component".into(),
                max: MAX_WIDTH,
            },
            actual: width,
        });
    }
    if digits.len() > width {
        return Err(Error::LimitExceeded {
            limit: Limit::Custom {
                what: format!("digits of {digits} in a zero-padded key component"),
                max: width,
            },
            actual: digits.len(),
        });
    }
    Ok(format!("{digits:0>width$}"))
}

/// A half-open range of keys: `start` (inclusive) up to `end` (exclusive; `None` = unbounded).
///
/// Ranges assume the service orders keys by ordinal comparison of the key strings, character
/// by character by code point — the order of Rust's `str` comparison. If the service compares
/// UTF-16 code units instead, the two orders differ only between characters U+E000–U+FFFF
/// and characters above U+FFFF; that affects [`prefix_range`] only for prefixes whose last
/// character is U+D7FF, U+FFFF or U+10FFFF.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyRange {
    /// The smallest key in the range.
    pub start: String,
    /// The first key above the range, or `None` when the range has no upper bound.
    pub end: Option<String>,
}

impl KeyRange {
    /// The range of every key.
    pub fn all() -> Self {
        Self {
            start: String::new(),
            end: None,
        }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &str) -> bool {
        key >= self.start.as_str() && self.end.as_deref().is_none_or(|end| key < end)
    }

    /// Whether no string at all lies in the range (its end is at or below its start).
    pub fn is_empty(&self) -> bool {
        self.end
            .as_deref()
            .is_some_and(|end| end <= self.start.as_str())
    }
}

/// The range of exactly the strings that start with `prefix`: `[prefix, next)`, where `next`
/// is `prefix` with its last character replaced by the next Unicode scalar value (skipping
/// the surrogate gap U+D800–U+DFFF). Trailing U+10FFFF characters have no successor and are
/// dropped first (carry); an empty prefix, or one made only of U+10FFFF, has no upper bound.
/// See [`KeyRange`] for the ordering this relies on.
///
/// The upper bound is a comparison value, not a key: it may contain characters keys may not
/// (`a.` gives `a/`), which is harmless in a filter.
///
/// # Example
/// ```
/// use tablekit_core::keys::prefix_range;
/// let range = prefix_range("email_a");
/// assert_eq!((range.start.as_str(), range.end.as_deref()), ("email_a", Some("email_b")));
/// assert!(range.contains("email_alice@contoso.com") && !range.contains("email_b"));
/// ```
pub fn prefix_range(prefix: &str) -> KeyRange {
    let mut end = prefix.to_owned();
    while let Some(last) = end.pop() {
        if let Some(next) = next_scalar(last) {
            end.push(next);
            return KeyRange {
                start: prefix.to_owned(),
                end: Some(end),
            };
        }
    }
    KeyRange {
        start: prefix.to_owned(),
        end: None,
    }
}

fn next_scalar(c: char) -> Option<char> {
    match c {
        '\u{D7FF}' => Some('\u{E000}'),
        _ => char::from_u32(u32::from(c) + 1),
    }
}

/// Builds and parses compound keys such as `empid_000123_2012`: components joined by a
/// separator, each optionally a zero-padded number of fixed width, and escaped so that any
/// component text survives a round trip.
///
/// **Escaping.** In the default mode a component's forbidden characters, the escape
/// character `!` and the separator are written as `!` plus two uppercase hex digits (the
/// separator `_` becomes `!5F`), so the separator never occurs inside a component and
/// `parse(build(c)) == c` for any text. Fixed-width components must be ASCII digits; shorter
/// ones are zero-padded, so they round-trip in their padded form.
///
/// **Order.** In the default mode, key order equals component-tuple order when the
/// components have fixed widths. For variable-width components use
/// [`CompoundKey::order_preserving`]: its separator is a space, the lowest character a key
/// may hold, and its escaping is strictly monotonic with every escaped component made of
/// characters above the space, so key order equals tuple order for any components.
///
/// # Example
/// ```
/// use tablekit_core::keys::CompoundKey;
/// let reviews = CompoundKey::new('_').with_width(1, 6);
/// let key = reviews.build(["empid", "123", "2012"]).unwrap();
/// assert_eq!(key, "empid_000123_2012");
/// assert_eq!(reviews.parse(&key).unwrap(), ["empid", "000123", "2012"]);
/// let employee = reviews.range_for_prefix(["empid", "123"]).unwrap();
/// assert!(employee.contains("empid_000123") && employee.contains(&key));
/// assert!(!employee.contains("empid_000124"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompoundKey {
    separator: char,
    scheme: Scheme,
    /// Fixed widths by component index (a map, so any index is cheap).
    widths: BTreeMap<usize, usize>,
    kind: KeyKind,
}

impl Default for CompoundKey {
    /// `CompoundKey::new('_')`.
    fn default() -> Self {
        Self::new('_')
    }
}

impl CompoundKey {
    /// A compound key in the default mode with the given separator.
    ///
    /// The separator must be a space or ASCII punctuation other than `/ \ # ? !`; otherwise
    /// every method that uses it returns [`Error::InvalidArgument`].
    pub fn new(separator: char) -> Self {
        Self {
            separator,
            scheme: Scheme::Plain {
                extra: Some(separator),
            },
            widths: BTreeMap::new(),
            kind: KeyKind::RowKey,
        }
    }

    /// A compound key whose order equals component-tuple order for components of any width.
    ///
    /// The separator is a space. Each component escapes every character up to `#`, the
    /// characters `. / > ? [ \` and `~` through U+009F, each as a lead from its own
    /// neighbourhood (`!`, `.`, `>`, `[` or `~`) plus two hex digits; so `a.b c` becomes
    /// `a.2Eb!20c`.
    pub fn order_preserving() -> Self {
        Self {
            separator: ' ',
            scheme: Scheme::Ordered,
            widths: BTreeMap::new(),
            kind: KeyKind::RowKey,
        }
    }

    /// Makes component `index` (from 0) a zero-padded number of exactly `width` digits.
    pub fn with_width(mut self, index: usize, width: usize) -> Self {
        self.widths.insert(index, width);
        self
    }

    /// Names `kind` in size errors (the default is the RowKey).
    pub fn with_kind(mut self, kind: KeyKind) -> Self {
        self.kind = kind;
        self
    }

    /// The separator.
    pub fn separator(&self) -> char {
        self.separator
    }

    /// Whether this is the [`order_preserving`](CompoundKey::order_preserving) mode.
    pub fn is_order_preserving(&self) -> bool {
        self.scheme == Scheme::Ordered
    }

    /// The fixed width of component `index`, if it has one.
    pub fn width(&self, index: usize) -> Option<usize> {
        self.widths.get(&index).copied()
    }

    /// A component that cannot become part of a key.
    fn unencodable(&self, reason: String) -> Error {
        Error::encode(self.kind.to_string(), reason)
    }

    fn check_separator(&self) -> Result<()> {
        let s = self.separator;
        if s == ' '
            || (s.is_ascii_punctuation() && !matches!(s, '/' | '\\' | '#' | '?' | ESCAPE_CHAR))
        {
            Ok(())
        } else {
            Err(Error::invalid_argument(
                "separator",
                format!(
                    "compound-key separator {s:?} must be a space or ASCII punctuation other than / \\ # ? !"
                ),
            ))
        }
    }

    /// Joins `components` into a key.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid separator or no components;
    /// [`Error::Encode`] for a fixed-width component that is not ASCII digits;
    /// [`Error::LimitExceeded`] when a fixed-width
    /// component has too many digits or the key exceeds 1 KiB.
    pub fn build<I, S>(&self, components: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.check_separator()?;
        let mut out = String::new();
        let mut count = 0;
        for (index, component) in components.into_iter().enumerate() {
            let component = component.as_ref();
            if index > 0 {
                out.push(self.separator);
            }
            match self.width(index) {
                Some(width) if component.bytes().all(|b| b.is_ascii_digit()) => {
                    out.push_str(&pad_digits(component, width)?);
                }
                Some(width) => {
                    return Err(self.unencodable(format!(
                        "component {index} ({component:?}) must be a number of at most {width} digits"
                    )));
                }
                None => self.scheme.escape_into(component, &mut out),
            }
            count += 1;
        }
        if count == 0 {
            return Err(Error::invalid_argument(
                "components",
                "a compound key needs at least one component",
            ));
        }
        validate_key(self.kind, &out)?;
        Ok(out)
    }

    /// Splits a key made by [`CompoundKey::build`] back into its components (fixed-width ones
    /// in their padded form).
    ///
    /// # Errors
    /// [`Error::InvalidKey`] at the first character that `build` cannot have produced;
    /// [`Error::InvalidArgument`] for an invalid separator; [`Error::Decode`] for a
    /// fixed-width component that is not exactly its width in digits.
    pub fn parse(&self, key: &str) -> Result<Vec<String>> {
        self.check_separator()?;
        let mut components = Vec::new();
        let mut offset = 0;
        for (index, part) in key.split(self.separator).enumerate() {
            match self.width(index) {
                Some(width) => {
                    if part.len() != width || !part.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(Error::decode(
                            Target::default(),
                            self.kind.to_string(),
                            format!("component {index} of {key:?} must be exactly {width} digits"),
                        ));
                    }
                    components.push(part.to_owned());
                }
                None => {
                    let text =
                        self.scheme
                            .unescape(part)
                            .map_err(|(position, character, reason)| Error::InvalidKey {
                                kind: self.kind,
                                character,
                                position: offset + position,
                                reason,
                            })?;
                    components.push(text);
                }
            }
            offset += part.chars().count() + 1;
        }
        Ok(components)
    }

    /// The range of the keys whose leading components are `prefix`: the key with exactly
    /// those components and every longer one (e.g. `empid_000123` and all
    /// `empid_000123_*`, none of `empid_000124`). An empty prefix gives [`KeyRange::all`].
    ///
    /// # Errors
    /// As [`CompoundKey::build`]; and [`Error::InvalidArgument`] in the default mode when the
    /// last prefix component has no fixed width, because then keys whose component merely
    /// starts with it (`emp` vs `empA_1`) sort between the key itself and its extensions, so
    /// no single range is exact. Use [`CompoundKey::range_for_extensions`] or the
    /// order-preserving mode there.
    pub fn range_for_prefix<I, S>(&self, prefix: I) -> Result<KeyRange>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let prefix: Vec<S> = prefix.into_iter().collect();
        let Some(last) = prefix.len().checked_sub(1) else {
            return Ok(KeyRange::all());
        };
        if !self.is_order_preserving() && self.width(last).is_none() {
            return Err(Error::invalid_argument(
                "prefix",
                format!(
                    "component {last} has no fixed width, so the keys starting with these components are not one range; use range_for_extensions"
                ),
            ));
        }
        let start = self.build(&prefix)?;
        let end = prefix_range(&format!("{start}{}", self.separator)).end;
        Ok(KeyRange { start, end })
    }

    /// The range of the keys that have more components than `prefix` and start with it
    /// (`empid_*`, but not `empid` itself). Exact in every mode. An empty prefix gives
    /// [`KeyRange::all`].
    ///
    /// # Errors
    /// As [`CompoundKey::build`].
    pub fn range_for_extensions<I, S>(&self, prefix: I) -> Result<KeyRange>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let prefix: Vec<S> = prefix.into_iter().collect();
        if prefix.is_empty() {
            return Ok(KeyRange::all());
        }
        let start = format!("{}{}", self.build(&prefix)?, self.separator);
        Ok(prefix_range(&start))
    }
}
