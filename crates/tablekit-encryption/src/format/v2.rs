//! tablekit's own stored format (see the crate README's "Format" section): version 2, which
//! this crate writes, and version 1, which it still reads — the metadata property, the
//! associated data, and AES-256-GCM sealing and opening.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;

use crate::key::ContentKey;

/// The name of the metadata property tablekit writes next to encrypted properties.
pub const METADATA_PROPERTY: &str = "_TablekitEncryption";
/// The format version written: the first field of the metadata.
pub const FORMAT_VERSION: u32 = 2;
/// The content-encryption algorithm of every version (`"alg"` in version 1's metadata).
pub const CONTENT_ALGORITHM: &str = "A256GCM";
/// Length of an AES-GCM nonce. Version 1 stored a random one before each ciphertext; version
/// 2 derives them (see [`OVERHEAD`]).
pub const NONCE_LEN: usize = 12;
/// Length of an AES-GCM tag, stored after each ciphertext.
pub const TAG_LEN: usize = 16;
/// Bytes an encrypted property stores beyond its UTF-8 plaintext, in the format written: the
/// tag. Its nonce is not stored: each content key encrypts one entity once, so the nonce is
/// the property's position in the metadata's list.
pub const OVERHEAD: usize = TAG_LEN;

/// Version 1's metadata stored random nonces before each ciphertext and seal.
const V1_OVERHEAD: usize = NONCE_LEN + TAG_LEN;

/// What a format version binds into the associated data of a property and of the seal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}

impl Version {
    fn labels(self) -> (&'static str, &'static str) {
        match self {
            Version::V1 => (
                "tablekit-encryption/1/A256GCM/property",
                "tablekit-encryption/1/A256GCM/seal",
            ),
            Version::V2 => (
                "tablekit-encryption/2/A256GCM/property",
                "tablekit-encryption/2/A256GCM/seal",
            ),
        }
    }
}

/// The metadata of an encrypted entity, whichever version stored it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Metadata {
    pub(crate) version: Version,
    /// The key-encryption key's id.
    pub(crate) kid: String,
    /// Its wrapping algorithm.
    pub(crate) wrap_alg: String,
    /// The wrapped content key.
    pub(crate) wrapped: Vec<u8>,
    /// The encrypted properties' names, in stored order (version 2: the order that numbers
    /// their nonces).
    pub(crate) props: Vec<String>,
    /// Version 1: nonce ‖ tag; version 2: the tag. AES-GCM over no plaintext, authenticating
    /// everything above.
    pub(crate) seal: Vec<u8>,
}

/// Why stored metadata could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MetadataError {
    /// Not in the documented shape.
    Malformed(String),
    /// A version this crate does not read.
    Unsupported(String),
}

/// Version 1's metadata: a JSON object. Field order is the order written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonV1 {
    // Read by `JsonVersion` first; listed so that `deny_unknown_fields` accepts it.
    #[serde(rename = "v")]
    _version: u32,
    alg: String,
    kid: String,
    wrap_alg: String,
    wrapped: String,
    props: Vec<String>,
    seal: String,
}

/// Just the version of a JSON metadata value, read first so that another version is reported
/// as unsupported rather than malformed.
#[derive(Deserialize)]
struct JsonVersion {
    v: u32,
}

impl Metadata {
    /// The metadata property's value in version 2: six fields separated by `;` —
    /// `2;kid;wrap_alg;base64(wrapped);name,name,…;base64(seal)` — with `%`, `;`, `,` and
    /// control characters of the text fields percent-encoded. Plain text rather than JSON:
    /// nothing in it needs escaping on the wire.
    pub(crate) fn encode_v2(&self) -> String {
        let mut out = String::with_capacity(
            64 + self.kid.len() + 4 * self.wrapped.len() / 3 + 16 * self.props.len(),
        );
        out.push_str("2;");
        escape_into(&mut out, &self.kid);
        out.push(';');
        escape_into(&mut out, &self.wrap_alg);
        out.push(';');
        BASE64.encode_string(&self.wrapped, &mut out);
        out.push(';');
        for (i, name) in self.props.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            escape_into(&mut out, name);
        }
        out.push(';');
        BASE64.encode_string(&self.seal, &mut out);
        out
    }

    /// Reads the metadata property's value: version 2 (`2;…`) or version 1 (a JSON object).
    pub(crate) fn decode(text: &str) -> Result<Self, MetadataError> {
        if text.starts_with('{') {
            return Self::decode_v1(text);
        }
        let malformed = |why: &str| MetadataError::Malformed(why.to_owned());
        let fields: Vec<&str> = text.split(';').collect();
        match fields.first().map(|v| v.parse::<u32>()) {
            Some(Ok(2)) => {}
            Some(Ok(v)) => return Err(MetadataError::Unsupported(format!("version {v}"))),
            _ => return Err(malformed("neither a version number nor JSON")),
        }
        let [_, kid, wrap_alg, wrapped, names, seal] = fields[..] else {
            return Err(malformed(
                "version 2 metadata has six fields separated by ';'",
            ));
        };
        let base64 = |field: &str, what: &str| {
            BASE64
                .decode(field)
                .map_err(|e| MetadataError::Malformed(format!("{what}: {e}")))
        };
        let props = names
            .split(',')
            .map(|n| match unescape(n, "a property name")? {
                name if name.is_empty() => Err(malformed("an empty property name")),
                name => Ok(name),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let seal = base64(seal, "seal")?;
        if seal.len() != TAG_LEN {
            return Err(malformed("the seal is not a 16-byte tag"));
        }
        Ok(Metadata {
            version: Version::V2,
            kid: unescape(kid, "the key id")?,
            wrap_alg: unescape(wrap_alg, "the wrapping algorithm")?,
            wrapped: base64(wrapped, "wrapped key")?,
            props,
            seal,
        })
    }

    fn decode_v1(json: &str) -> Result<Self, MetadataError> {
        let version: JsonVersion = serde_json::from_str(json)
            .map_err(|e| MetadataError::Malformed(format!("not JSON with \"v\": {e}")))?;
        if version.v != 1 {
            return Err(MetadataError::Unsupported(format!("version {}", version.v)));
        }
        let m: JsonV1 =
            serde_json::from_str(json).map_err(|e| MetadataError::Malformed(e.to_string()))?;
        if m.alg != CONTENT_ALGORITHM {
            return Err(MetadataError::Unsupported(format!("algorithm {:?}", m.alg)));
        }
        let base64 = |field: &str, what: &str| {
            BASE64
                .decode(field)
                .map_err(|e| MetadataError::Malformed(format!("{what}: {e}")))
        };
        Ok(Metadata {
            version: Version::V1,
            wrapped: base64(&m.wrapped, "wrapped key")?,
            seal: base64(&m.seal, "seal")?,
            kid: m.kid,
            wrap_alg: m.wrap_alg,
            props: m.props,
        })
    }

    /// The associated data of the seal: label, PartitionKey, RowKey, key id, wrapping
    /// algorithm, wrapped key, then each listed property name in stored order.
    pub(crate) fn seal_ad(&self, pk: &str, rk: &str) -> Vec<u8> {
        let mut ad = Vec::with_capacity(128 + self.wrapped.len());
        let (_, label) = self.version.labels();
        for field in [label, pk, rk, &self.kid, &self.wrap_alg] {
            push_field(&mut ad, field.as_bytes());
        }
        push_field(&mut ad, &self.wrapped);
        for name in &self.props {
            push_field(&mut ad, name.as_bytes());
        }
        ad
    }
}

/// Whether `c` is percent-encoded in a text field of version 2's metadata.
fn is_escaped(c: char) -> bool {
    matches!(c, '%' | ';' | ',') || c.is_control()
}

fn escape_into(out: &mut String, text: &str) {
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

fn unescape(field: &str, what: &str) -> Result<String, MetadataError> {
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
fn push_field(out: &mut Vec<u8>, field: &[u8]) {
    // Keys, names, ids and wrapped keys are far below 4 GiB.
    let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(field);
}

/// The associated data of an encrypted property: label, PartitionKey, RowKey, name.
pub(crate) fn property_ad(version: Version, pk: &str, rk: &str, name: &str) -> Vec<u8> {
    let mut ad = Vec::with_capacity(64 + pk.len() + rk.len() + name.len());
    let (label, _) = version.labels();
    for field in [label, pk, rk, name] {
        push_field(&mut ad, field.as_bytes());
    }
    ad
}

/// Version 2's nonce of the property at `index` of the metadata's list (counting from 1); 0
/// is the seal's. A content key is fresh for every entity written and seals that entity once,
/// so no nonce repeats under a key.
fn counter_nonce(counter: u64) -> [u8; NONCE_LEN] {
    let mut nonce = [0u8; NONCE_LEN];
    nonce[4..].copy_from_slice(&counter.to_be_bytes());
    nonce
}

/// The nonce counter of the seal in version 2.
pub(crate) const SEAL_COUNTER: u64 = 0;

/// The nonce counter of the property at `index` of the metadata's list in version 2.
pub(crate) fn property_counter(index: usize) -> u64 {
    index as u64 + 1
}

/// AES-256-GCM under one content key.
pub(crate) struct Sealer(Aes256Gcm);

impl Sealer {
    pub(crate) fn new(key: &ContentKey) -> Self {
        Self(Aes256Gcm::new(key.expose().into()))
    }

    /// Version 2: encrypts `plaintext` in place under the nonce numbered `counter` and returns
    /// ciphertext ‖ tag. Encrypting in place leaves no plaintext copy behind.
    pub(crate) fn seal(&self, mut plaintext: Vec<u8>, counter: u64, ad: &[u8]) -> Vec<u8> {
        let nonce = counter_nonce(counter);
        let tag = self
            .0
            .encrypt_in_place_detached(Nonce::from_slice(&nonce), ad, &mut plaintext)
            .expect("AES-GCM encrypts anything under 64 GiB");
        plaintext.extend_from_slice(&tag);
        plaintext
    }

    /// Opens what `version` stored — version 1: nonce ‖ ciphertext ‖ tag; version 2:
    /// ciphertext ‖ tag under the nonce numbered `counter`. `None` when it is too short or
    /// does not authenticate with `ad`.
    pub(crate) fn open(
        &self,
        version: Version,
        stored: &[u8],
        counter: u64,
        ad: &[u8],
    ) -> Option<Vec<u8>> {
        let (nonce, rest) = match version {
            Version::V1 if stored.len() >= V1_OVERHEAD => {
                let (nonce, rest) = stored.split_at(NONCE_LEN);
                (<[u8; NONCE_LEN]>::try_from(nonce).ok()?, rest)
            }
            Version::V2 if stored.len() >= OVERHEAD => (counter_nonce(counter), stored),
            _ => return None,
        };
        let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
        let mut buffer = ciphertext.to_vec();
        self.0
            .decrypt_in_place_detached(
                Nonce::from_slice(&nonce),
                ad,
                &mut buffer,
                Tag::from_slice(tag),
            )
            .ok()?;
        Some(buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Metadata {
        Metadata {
            version: Version::V2,
            kid: "https://vault.example/keys/k;1,%\u{1}".into(),
            wrap_alg: "A256KW".into(),
            wrapped: vec![1; 40],
            props: vec!["Email".into(), "Na;me,%".into()],
            seal: vec![2; TAG_LEN],
        }
    }

    #[test]
    fn version_2_metadata_reads_back_what_was_written_whatever_its_text_holds() {
        let m = sample();
        let text = m.encode_v2();
        assert!(text.starts_with("2;https://vault.example/keys/k%3B1%2C%25%01;A256KW;"));
        assert!(!text.contains('"') && !text.contains('\\'), "{text}");
        assert_eq!(Metadata::decode(&text), Ok(m));
    }

    #[test]
    fn other_versions_are_unsupported_and_other_shapes_malformed() {
        let unsupported =
            |t: &str| matches!(Metadata::decode(t), Err(MetadataError::Unsupported(_)));
        let malformed = |t: &str| matches!(Metadata::decode(t), Err(MetadataError::Malformed(_)));
        assert!(unsupported("3;a;b;c;d;e"));
        assert!(unsupported(r#"{"v":7}"#));
        assert!(malformed("2;a;b;AAAA;d"), "five fields");
        assert!(malformed("2;a;b;AAAA;d;e;f"), "seven fields");
        assert!(malformed("2;a;b;not base64!;d;AAAAAAAAAAAAAAAAAAAAAA=="));
        assert!(
            malformed("2;a%4;b;AAAA;d;AAAAAAAAAAAAAAAAAAAAAA=="),
            "cut escape"
        );
        assert!(malformed("2;a;b;AAAA;d;AAAA"), "short seal");
        assert!(malformed("x;a;b;c;d;e"));
        assert!(malformed(""));
        assert!(malformed(r#"{"v":1}"#), "version 1 without its members");
    }

    #[test]
    fn nonces_are_numbered_from_the_seal_and_never_repeat_within_an_entity() {
        assert_eq!(counter_nonce(SEAL_COUNTER), [0; NONCE_LEN]);
        let nonces: std::collections::BTreeSet<_> = (0..300)
            .map(|i| counter_nonce(property_counter(i)))
            .collect();
        assert_eq!(nonces.len(), 300);
        assert!(!nonces.contains(&counter_nonce(SEAL_COUNTER)));
    }
}
