//! tablekit's own stored formats (see the crate README's "Format" section): version 3, which
//! this crate writes, and versions 1 and 2, which it still reads. What they share: the
//! metadata property, the length-prefixed fields of associated data and signed messages, the
//! percent-encoding of text fields, and nonces numbered from a counter.

pub(crate) mod v2;
pub(crate) mod v3;

/// The name of the metadata property tablekit writes next to encrypted properties.
pub const METADATA_PROPERTY: &str = "_TablekitEncryption";
/// The format version written: the first field of the metadata.
pub const FORMAT_VERSION: u32 = 3;
/// The content-encryption algorithm of every version (`"alg"` in version 1's metadata).
pub const CONTENT_ALGORITHM: &str = "A256GCM";
/// The algorithm suite of format version 3, stored in its metadata and named in every label
/// it derives keys and authenticates with: AES-256-GCM for the encrypted properties,
/// HMAC-SHA-256 for the item, both under keys HKDF-SHA-256 derives from the content key.
pub const ALGORITHM_SUITE: &str = "A256GCM-HS256";
/// Length of an AES-GCM nonce. Version 1 stored a random one before each ciphertext; later
/// versions number them (see [`OVERHEAD`]).
pub const NONCE_LEN: usize = 12;
/// Length of an AES-GCM tag, stored after each ciphertext.
pub const TAG_LEN: usize = 16;
/// Bytes an encrypted property stores beyond its UTF-8 plaintext, in the format written: the
/// tag. Its nonce is not stored: the key it is encrypted under is derived for one entity
/// write, so the nonce is the property's position in the metadata's list.
pub const OVERHEAD: usize = TAG_LEN;

/// Why stored metadata could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MetadataError {
    /// Not in the documented shape.
    Malformed(String),
    /// A version, algorithm suite or flag this crate does not read.
    Unsupported(String),
}

impl MetadataError {
    pub(crate) fn malformed(why: impl Into<String>) -> Self {
        MetadataError::Malformed(why.into())
    }
}

/// The metadata of an encrypted entity, whichever version stored it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    /// Versions 1 and 2: the content key itself encrypts, a seal authenticates the list.
    Sealed(v2::Metadata),
    /// Version 3: keys derived per purpose, an item MAC and an optional signature.
    V3(v3::Metadata),
}

impl Stored {
    /// Reads the metadata property's value: version 3 or 2 (`3;…`, `2;…`) or version 1 (a
    /// JSON object). The version is read first, so that another version is reported as
    /// unsupported rather than malformed.
    pub(crate) fn decode(text: &str) -> Result<Self, MetadataError> {
        if text.starts_with('{') {
            return v2::Metadata::decode_v1(text).map(Stored::Sealed);
        }
        let fields: Vec<&str> = text.split(';').collect();
        match fields.first().map(|v| v.parse::<u32>()) {
            Some(Ok(3)) => v3::Metadata::decode(&fields).map(Stored::V3),
            Some(Ok(2)) => v2::Metadata::decode_v2(&fields).map(Stored::Sealed),
            Some(Ok(v)) => Err(MetadataError::Unsupported(format!("version {v}"))),
            _ => Err(MetadataError::malformed(
                "neither a version number nor JSON",
            )),
        }
    }
}

/// Whether `c` is percent-encoded in a text field of the metadata.
fn is_escaped(c: char) -> bool {
    matches!(c, '%' | ';' | ',') || c.is_control()
}

pub(crate) fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        if is_escaped(c) {
            let mut utf8 = [0u8; 4];
            for b in c.encode_utf8(&mut utf8).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
}

pub(crate) fn unescape(field: &str, what: &str) -> Result<String, MetadataError> {
    if !field.contains('%') {
        return Ok(field.to_owned());
    }
    let malformed = || MetadataError::Malformed(format!("{what}: bad percent-encoding"));
    let mut bytes = Vec::with_capacity(field.len());
    let mut rest = field.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = tail.get(..2).ok_or_else(malformed)?;
            let hex = std::str::from_utf8(hex).map_err(|_| malformed())?;
            bytes.push(u8::from_str_radix(hex, 16).map_err(|_| malformed())?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).map_err(|_| malformed())
}

/// Appends `field` with its length (u32, big-endian) in front, so that no two sequences of
/// fields encode to the same bytes.
pub(crate) fn push_field(out: &mut Vec<u8>, field: &[u8]) {
    // Keys, names, ids, wrapped keys and values are far below 4 GiB.
    let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(field);
}

/// The nonce numbered `counter`: the number as a 96-bit big-endian integer. Every key that
/// uses these nonces encrypts one entity write, each value under its own number, so no nonce
/// repeats under a key.
pub(crate) fn counter_nonce(counter: u64) -> [u8; NONCE_LEN] {
    let mut nonce = [0u8; NONCE_LEN];
    nonce[4..].copy_from_slice(&counter.to_be_bytes());
    nonce
}

/// Base64 (standard alphabet, padded) of a field, with the field named in the error.
pub(crate) fn base64_field(field: &str, what: &str) -> Result<Vec<u8>, MetadataError> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(field)
        .map_err(|e| MetadataError::Malformed(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_versions_are_unsupported_and_other_shapes_malformed() {
        let unsupported = |t: &str| matches!(Stored::decode(t), Err(MetadataError::Unsupported(_)));
        let malformed = |t: &str| matches!(Stored::decode(t), Err(MetadataError::Malformed(_)));
        assert!(unsupported("4;a;b;c;d;e"));
        assert!(unsupported(r#"{"v":7}"#));
        assert!(malformed("x;a;b;c;d;e"));
        assert!(malformed(""));
        assert!(malformed(r#"{"v":1}"#), "version 1 without its members");
    }

    #[test]
    fn nonces_are_numbered_and_never_repeat_within_an_entity() {
        let nonces: std::collections::BTreeSet<_> = (0..300).map(counter_nonce).collect();
        assert_eq!(nonces.len(), 300);
        assert_eq!(counter_nonce(0), [0; NONCE_LEN]);
    }
}
