//! Format versions 1 and 2, read only: the content key itself is the AES-256-GCM key of every
//! encrypted property, and a seal (AES-GCM of an empty plaintext) authenticates the metadata.
//! A replace rewrites such an entity in version 3.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use serde::Deserialize;

use super::{
    CONTENT_ALGORITHM, MetadataError, NONCE_LEN, TAG_LEN, base64_field, counter_nonce, push_field,
    unescape,
};
use crate::key::ContentKey;

/// Version 1 stored a random nonce before each ciphertext and the seal.
const V1_OVERHEAD: usize = NONCE_LEN + TAG_LEN;

/// The nonce counter of the seal in version 2; property `index` of the list has `index + 1`.
pub(crate) const SEAL_COUNTER: u64 = 0;

/// Which of the two versions stored an entity.
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

/// The metadata of an entity stored in version 1 or 2.
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
    /// Version 2's six fields, separated by `;` — `2;kid;wrap_alg;base64(wrapped);
    /// name,name,…;base64(seal)` — the version already checked.
    pub(crate) fn decode_v2(fields: &[&str]) -> Result<Self, MetadataError> {
        let [_, kid, wrap_alg, wrapped, names, seal] = fields[..] else {
            return Err(MetadataError::malformed(
                "version 2 metadata has six fields separated by ';'",
            ));
        };
        let props = names
            .split(',')
            .map(|n| match unescape(n, "a property name")? {
                name if name.is_empty() => Err(MetadataError::malformed("an empty property name")),
                name => Ok(name),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let seal = base64_field(seal, "seal")?;
        if seal.len() != TAG_LEN {
            return Err(MetadataError::malformed("the seal is not a 16-byte tag"));
        }
        Ok(Metadata {
            version: Version::V2,
            kid: unescape(kid, "the key id")?,
            wrap_alg: unescape(wrap_alg, "the wrapping algorithm")?,
            wrapped: base64_field(wrapped, "wrapped key")?,
            props,
            seal,
        })
    }

    /// Version 1's JSON object.
    pub(crate) fn decode_v1(json: &str) -> Result<Self, MetadataError> {
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
        Ok(Metadata {
            version: Version::V1,
            wrapped: base64_field(&m.wrapped, "wrapped key")?,
            seal: base64_field(&m.seal, "seal")?,
            kid: m.kid,
            wrap_alg: m.wrap_alg,
            props: m.props,
        })
    }

    /// Version 2's text, as the second release wrote it: for the tests that check it still
    /// reads.
    #[cfg(test)]
    pub(crate) fn encode_v2(&self) -> String {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut out = String::from("2;");
        super::escape_into(&mut out, &self.kid);
        out.push(';');
        super::escape_into(&mut out, &self.wrap_alg);
        out.push(';');
        out.push_str(&b64.encode(&self.wrapped));
        out.push(';');
        for (i, name) in self.props.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            super::escape_into(&mut out, name);
        }
        out.push(';');
        out.push_str(&b64.encode(&self.seal));
        out
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

/// The associated data of an encrypted property: label, PartitionKey, RowKey, name.
pub(crate) fn property_ad(version: Version, pk: &str, rk: &str, name: &str) -> Vec<u8> {
    let mut ad = Vec::with_capacity(64 + pk.len() + rk.len() + name.len());
    let (label, _) = version.labels();
    for field in [label, pk, rk, name] {
        push_field(&mut ad, field.as_bytes());
    }
    ad
}

/// The nonce counter of the property at `index` of the metadata's list in version 2.
pub(crate) fn property_counter(index: usize) -> u64 {
    index as u64 + 1
}

/// AES-256-GCM under the content key itself, as versions 1 and 2 use it.
pub(crate) struct Opener(Aes256Gcm);

impl Opener {
    pub(crate) fn new(key: &ContentKey) -> Self {
        Self(Aes256Gcm::new(key.expose().into()))
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
            Version::V2 if stored.len() >= TAG_LEN => (counter_nonce(counter), stored),
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
    use super::super::Stored;
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
        assert_eq!(Stored::decode(&text), Ok(Stored::Sealed(m)));
    }

    #[test]
    fn malformed_version_2_metadata_is_malformed() {
        let malformed = |t: &str| matches!(Stored::decode(t), Err(MetadataError::Malformed(_)));
        assert!(malformed("2;a;b;AAAA;d"), "five fields");
        assert!(malformed("2;a;b;AAAA;d;e;f"), "seven fields");
        assert!(malformed("2;a;b;not base64!;d;AAAAAAAAAAAAAAAAAAAAAA=="));
        assert!(
            malformed("2;a%4;b;AAAA;d;AAAAAAAAAAAAAAAAAAAAAA=="),
            "cut escape"
        );
        assert!(malformed("2;a;b;AAAA;d;AAAA"), "short seal");
    }
}
