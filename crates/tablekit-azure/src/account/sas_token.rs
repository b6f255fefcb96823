//! A parsed SAS token whose signature never appears in `Debug` or `Display`.

use std::fmt;

use tablekit_core::{Error, Result};

/// A shared access signature token (the query string of a SAS URL, without `?`).
#[derive(Clone, PartialEq, Eq)]
pub struct SasToken {
    pairs: Vec<(String, String)>,
}

impl SasToken {
    /// Parses `sv=…&sp=…&sig=…` (a leading `?` is allowed).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `SharedAccessSignature` when the token has no `sig`, no
    /// `sv`, or a malformed pair.
    pub fn parse(token: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidConfig {
            part: "SharedAccessSignature".into(),
            reason: reason.into(),
        };
        let token = token.trim().trim_start_matches('?');
        let mut pairs = Vec::new();
        for pair in token.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| invalid("expected `key=value` pairs"))?;
            let v = percent_decode(v).ok_or_else(|| invalid("malformed percent-encoding"))?;
            pairs.push((k.to_owned(), v));
        }
        if !pairs.iter().any(|(k, _)| k == "sig") {
            return Err(invalid("no `sig` parameter"));
        }
        if !pairs.iter().any(|(k, _)| k == "sv") {
            return Err(invalid("no `sv` (signed version) parameter"));
        }
        Ok(Self { pairs })
    }

    pub(crate) fn from_pairs(pairs: Vec<(String, String)>) -> Self {
        Self { pairs }
    }

    /// The value of a parameter (`sp`, `se`, `tn`, …).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The decoded parameters, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The token as a query string (values percent-encoded), to append to a URL or hand to a
    /// client. This is the only way the signature is ever rendered.
    pub fn to_query(&self) -> String {
        let mut out = String::new();
        for (i, (k, v)) in self.pairs.iter().enumerate() {
            if i > 0 {
                out.push('&');
            }
            out.push_str(k);
            out.push('=');
            out.push_str(&crate::url::encode_component(v));
        }
        out
    }
}

impl fmt::Debug for SasToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_map();
        for (k, v) in &self.pairs {
            if k == "sig" {
                list.entry(k, &"<redacted>");
            } else {
                list.entry(k, v);
            }
        }
        list.finish()
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_redacted_in_debug_and_kept_in_the_query() {
        let token = SasToken::parse(
            "?sv=2019-02-02&tn=t&sp=r&se=2030-01-01T00%3A00%3A00Z&sig=c2VjcmV0%2Bc2lnbmF0dXJl%3D",
        )
        .unwrap();
        assert_eq!(token.get("se"), Some("2030-01-01T00:00:00Z"));
        assert_eq!(token.get("sig"), Some("c2VjcmV0+c2lnbmF0dXJl="));
        let debug = format!("{token:?}");
        assert!(
            !debug.contains("c2VjcmV0") && debug.contains("redacted"),
            "{debug}"
        );
        assert!(token.to_query().contains("sig=c2VjcmV0%2Bc2lnbmF0dXJl%3D"));
        assert!(SasToken::parse("sv=1&sp=r").is_err());
    }
}
