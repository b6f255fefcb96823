//! Key templates: literal text with `{field}` placeholders.

/// How a placeholder formats its field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Format {
    /// `{field}`: `Display`.
    Display,
    /// `{field:0N}`: an integer, zero-padded to exactly `N` digits.
    Padded(usize),
    /// `{field:ticks}`: a `DateTime<Utc>` as 19-digit .NET ticks (oldest first).
    Ticks,
    /// `{field:inverted_ticks}`: a `DateTime<Utc>` as 19-digit inverted ticks (newest first).
    InvertedTicks,
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Text copied into the key.
    Literal(String),
    /// A field's value.
    Field { name: String, format: Format },
}

/// The widest zero padding a key can hold (512 UTF-16 code units).
const MAX_WIDTH: usize = 512;

/// Parses a template, or says what is wrong with it.
pub(crate) fn parse(template: &str) -> Result<Vec<Segment>, String> {
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '}' => {
                return Err(
                    "unmatched `}` in key template (write `}}` for a literal brace)".into(),
                );
            }
            '{' => {
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => inner.push(c),
                        None => {
                            return Err(format!(
                                "unclosed `{{{inner}` in key template (write `{{{{` for a literal brace)"
                            ));
                        }
                    }
                }
                if !literal.is_empty() {
                    segments.push(Segment::Literal(std::mem::take(&mut literal)));
                }
                segments.push(placeholder(&inner)?);
            }
            c => {
                if let Some(reason) = forbidden(c) {
                    return Err(format!("{c:?} cannot appear in a key: {reason}"));
                }
                literal.push(c);
            }
        }
    }
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    Ok(segments)
}

fn placeholder(inner: &str) -> Result<Segment, String> {
    let (name, spec) = match inner.split_once(':') {
        Some((name, spec)) => (name.trim(), Some(spec.trim())),
        None => (inner.trim(), None),
    };
    // A raw identifier names its field with or without `r#`: `{r#type}` or `{type}`.
    let name = name.strip_prefix("r#").unwrap_or(name);
    if name.is_empty() {
        return Err(format!(
            "`{{{inner}}}` names no field: placeholders are `{{field}}`, `{{field:06}}`, \
             `{{field:ticks}}` or `{{field:inverted_ticks}}`"
        ));
    }
    let format = match spec {
        None => Format::Display,
        Some("ticks") => Format::Ticks,
        Some("inverted_ticks") => Format::InvertedTicks,
        Some(spec) => padded(spec).ok_or_else(|| {
            format!(
                "unknown format `{spec}` in `{{{inner}}}`: use `{{{name}}}` (Display), \
                 `{{{name}:06}}` (an integer zero-padded to 6 digits), `{{{name}:ticks}}` or \
                 `{{{name}:inverted_ticks}}` (a DateTime<Utc>)"
            )
        })?,
    };
    if let Format::Padded(width) = format {
        if width == 0 || width > MAX_WIDTH {
            return Err(format!(
                "zero-padding width {width} in `{{{inner}}}`: it must be 1 to {MAX_WIDTH}"
            ));
        }
    }
    Ok(Segment::Field {
        name: name.to_owned(),
        format,
    })
}

/// `0N`: a zero followed by the width in digits. Plain `N` (space padding) is refused: spaces
/// before digits do not keep numeric order.
fn padded(spec: &str) -> Option<Format> {
    let digits = spec.strip_prefix('0')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Format::Padded)
}

/// Why the service refuses `c` in keys (the rule of `tablekit_core::keys::validate_key`).
fn forbidden(c: char) -> Option<&'static str> {
    match c {
        '/' | '\\' | '#' | '?' => Some("the service forbids / \\ # ? in keys"),
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => {
            Some("control characters are not allowed in keys")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, format: Format) -> Segment {
        Segment::Field {
            name: name.into(),
            format,
        }
    }

    #[test]
    fn templates_parse_into_literals_and_fields() {
        assert_eq!(
            parse("empid_{id:06}_{year}").unwrap(),
            vec![
                Segment::Literal("empid_".into()),
                field("id", Format::Padded(6)),
                Segment::Literal("_".into()),
                field("year", Format::Display),
            ]
        );
        assert_eq!(
            parse("{at:inverted_ticks}{{x}}{at:ticks}").unwrap(),
            vec![
                field("at", Format::InvertedTicks),
                Segment::Literal("{x}".into()),
                field("at", Format::Ticks),
            ]
        );
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("{r#type}").unwrap(), parse("{type}").unwrap());
    }

    #[test]
    fn bad_templates_say_why() {
        for (template, needle) in [
            ("{id:6}", "unknown format `6`"),
            ("{id:x}", "unknown format `x`"),
            ("{id:00}", "width 0"),
            ("{id:0513}", "width 513"),
            ("{}", "names no field"),
            ("{id", "unclosed"),
            ("a}", "unmatched"),
            ("a/{id}", "cannot appear in a key"),
            ("a\t", "control characters"),
        ] {
            let err = parse(template).unwrap_err();
            assert!(err.contains(needle), "{template:?}: {err}");
        }
    }
}
