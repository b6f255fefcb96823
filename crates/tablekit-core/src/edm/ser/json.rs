//! JSON string literals, escaped for JSON and for JavaScript line terminators.

/// Appends `s` as a JSON string literal.
pub(crate) fn write_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    write_json_escaped(out, s);
    out.push(b'"');
}

/// Appends `s` escaped for a JSON string, without quotes. Besides what JSON requires, U+2028
/// and U+2029 are escaped: they are line terminators in JavaScript, and Azurite's batch parser
/// fails on them (HTTP 500, with part of the transaction applied).
pub(super) fn write_json_escaped(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    let mut run = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let (escape, width): (&[u8], usize) = match b {
            b'"' => (b"\\\"", 1),
            b'\\' => (b"\\\\", 1),
            b'\n' => (b"\\n", 1),
            b'\r' => (b"\\r", 1),
            b'\t' => (b"\\t", 1),
            0..=0x1f => (b"", 1),
            0xE2 if bytes.get(i + 1) == Some(&0x80)
                && matches!(bytes.get(i + 2), Some(0xA8 | 0xA9)) =>
            {
                (
                    if bytes[i + 2] == 0xA8 {
                        b"\\u2028"
                    } else {
                        b"\\u2029"
                    },
                    3,
                )
            }
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&bytes[run..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        i += width;
        run = i;
    }
    out.extend_from_slice(&bytes[run..]);
}

#[cfg(test)]
mod json_tests {
    use super::*;

    #[test]
    fn strings_are_escaped_for_json_and_javascript() {
        let mut out = Vec::new();
        write_json_str(&mut out, "a\"b\\c\n\u{1}\u{2028}\u{2029}é\u{2027}");
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "\"a\\\"b\\\\c\\n\\u0001\\u2028\\u2029é\u{2027}\"");
        let back: String = serde_json::from_str(&text).unwrap();
        assert_eq!(back, "a\"b\\c\n\u{1}\u{2028}\u{2029}é\u{2027}");
    }
}
