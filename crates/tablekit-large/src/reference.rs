//! What an entity stores about its payload, and how a blob names the entity it belongs to.

use std::fmt;
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Keys, ResourceKind, Result, Target};

/// Blob metadata naming the PartitionKey of the entity a blob was uploaded for.
pub const PK_METADATA: &str = "tablekit_pk";
/// Blob metadata naming the RowKey of the entity a blob was uploaded for.
pub const RK_METADATA: &str = "tablekit_rk";
/// Blob metadata with the grace period, in whole seconds, of the store handle that uploaded
/// the blob: its entity write lands within it after the upload started, and a sweep leaves
/// the blob alone at least that long, whatever grace the sweeper itself was given.
pub const GRACE_METADATA: &str = "tablekit_grace";

/// The [`GRACE_METADATA`] value of `grace`: whole seconds, rounded up so that a sweeper
/// never waits less than the writer's grace.
pub(crate) fn encode_grace(grace: Duration) -> String {
    let secs = grace.as_secs() + u64::from(grace.subsec_nanos() > 0);
    secs.to_string()
}

/// The grace a blob's metadata records: `None` when absent, `Some(None)` when malformed.
pub(crate) fn decode_grace(
    metadata: &std::collections::BTreeMap<String, String>,
) -> Option<Option<Duration>> {
    metadata
        .get(GRACE_METADATA)
        .map(|v| v.parse::<u64>().ok().map(Duration::from_secs))
}

/// Where an entity's payload lives: the blob's name, its length and its SHA-256. Blob names
/// are never reused, so a reference always means one immutable content.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlobRef {
    /// The blob's name in the store's container.
    pub name: String,
    /// The payload's length in bytes.
    pub len: u64,
    /// The payload's SHA-256, 64 lowercase hex digits.
    pub sha256: String,
}

impl BlobRef {
    /// The reference to `payload` stored as blob `name`.
    pub fn for_payload(name: String, payload: &[u8]) -> Self {
        Self {
            name,
            len: payload.len() as u64,
            sha256: sha256_hex(payload),
        }
    }

    /// Checks that `data` is the content this reference names.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the blob when the length or the hash differ.
    pub fn verify(&self, data: &[u8]) -> Result<()> {
        let blob = || Target::resource(ResourceKind::Blob, self.name.as_str());
        if data.len() as u64 != self.len {
            return Err(Error::corrupt(
                blob(),
                format!(
                    "blob has {} bytes, the entity expects {}",
                    data.len(),
                    self.len
                ),
            ));
        }
        if sha256_hex(data) != self.sha256 {
            return Err(Error::corrupt(
                blob(),
                "blob content does not match the SHA-256 the entity records",
            ));
        }
        Ok(())
    }
}

impl fmt::Display for BlobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} bytes, sha256 {})",
            self.name, self.len, self.sha256
        )
    }
}

/// The SHA-256 of `data` as lowercase hex.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = Sha256::digest(data);
    let mut out = String::with_capacity(64);
    for byte in digest {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// The entity property names a payload called `name` uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    /// The payload itself when stored inline (`Edm.Binary`).
    pub(crate) inline: String,
    /// The blob name.
    pub(crate) blob: String,
    /// The payload length.
    pub(crate) length: String,
    /// The payload hash.
    pub(crate) sha256: String,
}

/// What an entity says about its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Payload {
    /// In a blob.
    Blob(BlobRef),
    /// In the entity itself.
    Inline(Vec<u8>),
}

impl Names {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            inline: name.to_owned(),
            blob: format!("{name}Blob"),
            length: format!("{name}Length"),
            sha256: format!("{name}Sha256"),
        }
    }

    pub(crate) fn all(&self) -> [&str; 4] {
        [&self.inline, &self.blob, &self.length, &self.sha256]
    }

    /// Adds the payload's properties to `props`.
    pub(crate) fn write(&self, props: &mut Properties, payload: &Payload) {
        match payload {
            Payload::Blob(r) => {
                props.insert(&self.blob, r.name.as_str());
                props.insert(&self.length, i64::try_from(r.len).unwrap_or(i64::MAX));
                props.insert(&self.sha256, r.sha256.as_str());
            }
            Payload::Inline(bytes) => {
                props.insert(&self.inline, EdmValue::Binary(bytes.clone()));
            }
        }
    }

    /// Takes the payload's properties out of `props`, leaving the caller's properties.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the entity when it has no payload or a malformed reference.
    pub(crate) fn take(&self, keys: &Keys, props: &mut Properties) -> Result<Payload> {
        let blob = props.remove(&self.blob);
        let length = props.remove(&self.length);
        let sha256 = props.remove(&self.sha256);
        let inline = props.remove(&self.inline);
        match (blob, length, sha256, inline) {
            (Some(EdmValue::String(name)), Some(len), Some(EdmValue::String(sha256)), None) => {
                let len = len
                    .as_i64()
                    .and_then(|l| u64::try_from(l).ok())
                    .ok_or_else(|| {
                        Error::corrupt(
                            Target::entity("", keys.clone()),
                            format!("its property {} is malformed", self.length),
                        )
                    })?;
                Ok(Payload::Blob(BlobRef { name, len, sha256 }))
            }
            (None, None, None, Some(EdmValue::Binary(bytes))) => Ok(Payload::Inline(bytes)),
            _ => Err(Error::corrupt(
                Target::entity("", keys.clone()),
                format!(
                    "it has no valid payload reference ({}, {}, {}) or inline {}",
                    self.blob, self.length, self.sha256, self.inline
                ),
            )),
        }
    }
}

/// Encodes a key for blob metadata, which must be printable ASCII without surrounding
/// spaces: every byte outside `A-Z a-z 0-9 - . _ ~` becomes `%XX`.
pub(crate) fn encode_key(key: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Reverses [`encode_key`]; `None` for text it did not produce.
pub(crate) fn decode_key(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_survive_metadata_encoding() {
        for key in [
            "Sales",
            "O'Brien",
            "naïve 東京",
            "a%20b",
            " x ",
            "",
            "email_jonesj@contoso.com",
        ] {
            let encoded = encode_key(key);
            assert!(
                encoded.bytes().all(|b| (0x21..0x7f).contains(&b)),
                "{encoded}"
            );
            assert_eq!(decode_key(&encoded).as_deref(), Some(key));
        }
        assert_eq!(decode_key("%zz"), None);
        assert_eq!(decode_key("%4"), None);
    }

    #[test]
    fn graces_are_recorded_in_whole_seconds_rounded_up() {
        assert_eq!(encode_grace(Duration::from_secs(3600)), "3600");
        assert_eq!(encode_grace(Duration::from_millis(8_001)), "9");
        let meta =
            |v: &str| std::collections::BTreeMap::from([(GRACE_METADATA.to_owned(), v.to_owned())]);
        assert_eq!(decode_grace(&meta("9")), Some(Some(Duration::from_secs(9))));
        assert_eq!(decode_grace(&meta("9.5")), Some(None));
        assert_eq!(decode_grace(&std::collections::BTreeMap::new()), None);
    }

    #[test]
    fn references_verify_length_and_hash() {
        let r = BlobRef::for_payload("t/x".into(), b"abc");
        assert_eq!(
            r.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(r.verify(b"abc").is_ok());
        assert!(r.verify(b"abd").is_err());
        assert!(r.verify(b"ab").is_err());
    }

    #[test]
    fn payload_properties_round_trip_and_malformed_ones_are_refused() {
        let names = Names::new("Photo");
        let keys = Keys::new("Sales", "000223").unwrap();
        let blob = Payload::Blob(BlobRef::for_payload("t/1".into(), b"jpeg"));
        let mut props = Properties::new().with("FirstName", "Jun");
        names.write(&mut props, &blob);
        assert!(props.contains("PhotoBlob") && props.contains("PhotoSha256"));
        assert_eq!(names.take(&keys, &mut props).unwrap(), blob);
        assert_eq!(props, Properties::new().with("FirstName", "Jun"));
        names.write(&mut props, &Payload::Inline(vec![1, 2]));
        assert_eq!(
            names.take(&keys, &mut props).unwrap(),
            Payload::Inline(vec![1, 2])
        );
        assert!(names.take(&keys, &mut props).is_err(), "no payload");
        let mut half = Properties::new().with("PhotoBlob", "t/1");
        assert!(names.take(&keys, &mut half).is_err());
    }
}
