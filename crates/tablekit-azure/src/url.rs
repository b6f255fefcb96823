//! URL building: strict percent-encoding for query values and resource paths.

use std::fmt::Write as _;

/// Percent-encodes everything but unreserved characters (`A-Z a-z 0-9 - . _ ~`). Spaces become
/// `%20`, never `+`, so every server decodes them the same way.
pub(crate) fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b))
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// Builds `base/path?query` from encoded parts.
pub(crate) fn join(base: &azure_core::Url, path: &str, query: &[(&str, &str)]) -> azure_core::Url {
    let mut text = String::with_capacity(base.as_str().len() + path.len() + 64);
    text.push_str(base.as_str().trim_end_matches('/'));
    if !path.is_empty() {
        text.push('/');
        text.push_str(path);
    }
    for (i, (k, v)) in query.iter().enumerate() {
        text.push(if i == 0 { '?' } else { '&' });
        text.push_str(k);
        text.push('=');
        text.push_str(&encode_component(v));
    }
    // Every part is already encoded, so parsing cannot fail on them; the base was a valid URL.
    azure_core::Url::parse(&text).unwrap_or_else(|_| base.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_strictly_encoded() {
        assert_eq!(
            encode_component("PartitionKey eq 'O''Brien' + é"),
            "PartitionKey%20eq%20%27O%27%27Brien%27%20%2B%20%C3%A9"
        );
        let base = azure_core::Url::parse("http://127.0.0.1:1/devstoreaccount1/").unwrap();
        let url = join(&base, "T()", &[("$filter", "a eq 'b c'"), ("$top", "5")]);
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:1/devstoreaccount1/T()?$filter=a%20eq%20%27b%20c%27&$top=5"
        );
    }
}
