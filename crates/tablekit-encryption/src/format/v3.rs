//! Format version 3, written by this crate: keys derived per purpose from the content key
//! (HKDF-SHA-256 with a per-write salt and labels naming the format, the purpose and the
//! algorithm suite), AES-256-GCM for the encrypted properties, an HMAC-SHA-256 over the whole
//! item, and room for a signature by a key of its own.

use std::borrow::Cow;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tablekit_core::EdmValue;
use tablekit_core::edm::format_datetime;
use zeroize::Zeroizing;

use super::{
    ALGORITHM_SUITE, MetadataError, TAG_LEN, base64_field, counter_nonce, escape_into, push_field,
    unescape,
};
use crate::key::{CONTENT_KEY_LEN, ContentKey, MAX_KEY_ID, is_key_id};

/// Length of the random salt each write draws: the per-purpose keys of an entity are unique
/// to it even when a content key is reused (see `DataKeyReuse`).
pub(crate) const SALT_LEN: usize = 16;
/// Length of the item MAC (HMAC-SHA-256, untruncated).
pub(crate) const MAC_LEN: usize = 32;
/// The largest wrapped content key read or written: four times what RSA-8192 wraps to.
pub(crate) const MAX_WRAPPED_KEY: usize = 4096;
/// The largest signature read or written.
pub(crate) const MAX_SIGNATURE: usize = 1024;

/// The flag stored when a logical table name is bound into the item.
const FLAG_TABLE: &str = "table";

const LABEL_ENCRYPT: &str = "tablekit-encryption/3/A256GCM-HS256/encrypt";
const LABEL_MAC: &str = "tablekit-encryption/3/A256GCM-HS256/mac";
const LABEL_PROPERTY: &str = "tablekit-encryption/3/A256GCM-HS256/property";
const LABEL_ITEM: &str = "tablekit-encryption/3/A256GCM-HS256/item";

/// How a listed property is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Encrypted (an `Edm.Binary` of ciphertext ‖ tag) and covered by the item MAC.
    Encrypted,
    /// Stored as written, covered by the item MAC.
    SignOnly,
}

impl Kind {
    fn letter(self) -> &'static str {
        match self {
            Kind::Encrypted => "e",
            Kind::SignOnly => "s",
        }
    }
}

/// A property the metadata lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) kind: Kind,
    pub(crate) name: String,
}

/// The signing key an item names: its id and algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signer {
    pub(crate) id: String,
    pub(crate) algorithm: String,
}

/// The metadata of an entity stored in version 3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Metadata {
    /// The key-encryption key's id.
    pub(crate) kid: String,
    /// Its wrapping algorithm.
    pub(crate) wrap_alg: String,
    /// The wrapped content key.
    pub(crate) wrapped: Vec<u8>,
    /// The salt of the per-purpose keys.
    pub(crate) salt: [u8; SALT_LEN],
    /// Whether a logical table name is bound into the item (the name itself is not stored).
    pub(crate) table_bound: bool,
    /// The encrypted and sign-only properties, in stored order: the order that numbers the
    /// encrypted ones' nonces and that the item MAC covers them in.
    pub(crate) entries: Vec<Entry>,
    /// The signing key, when the item is signed.
    pub(crate) signer: Option<Signer>,
    /// HMAC-SHA-256 of [`Metadata::message`] under the MAC key.
    pub(crate) mac: Vec<u8>,
    /// The signer's signature of [`Metadata::message`]; empty when unsigned.
    pub(crate) signature: Vec<u8>,
}

/// Checks a stored key id: not empty, no control characters, at most [`MAX_KEY_ID`] bytes.
fn key_id(field: &str, what: &str) -> Result<String, MetadataError> {
    let id = unescape(field, what)?;
    if !is_key_id(&id) {
        return Err(MetadataError::Malformed(format!(
            "{what}: not 1 to {MAX_KEY_ID} bytes of text without control characters"
        )));
    }
    Ok(id)
}

/// Checks a stored algorithm name: 1 to 64 printable ASCII characters.
fn algorithm(field: &str, what: &str) -> Result<String, MetadataError> {
    let name = unescape(field, what)?;
    if name.is_empty() || name.len() > 64 || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(MetadataError::Malformed(format!(
            "{what}: not 1 to 64 printable ASCII characters"
        )));
    }
    Ok(name)
}

impl Metadata {
    /// The metadata property's value: twelve fields separated by `;` —
    /// `3;kid;wrap_alg;base64(wrapped);entries;base64(mac);suite;base64(salt);flags;
    /// signer id;signer algorithm;base64(signature)` — text fields percent-encoded as in
    /// version 2, entries `e:name` or `s:name` separated by `,`. The first five fields have
    /// the places (and, but for the entries' kind, the meanings) they had in version 2.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::with_capacity(
            160 + self.kid.len()
                + 4 * (self.wrapped.len() + self.signature.len()) / 3
                + 16 * self.entries.len(),
        );
        out.push_str("3;");
        escape_into(&mut out, &self.kid);
        out.push(';');
        escape_into(&mut out, &self.wrap_alg);
        out.push(';');
        BASE64.encode_string(&self.wrapped, &mut out);
        out.push(';');
        for (i, entry) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(entry.kind.letter());
            out.push(':');
            escape_into(&mut out, &entry.name);
        }
        out.push(';');
        BASE64.encode_string(&self.mac, &mut out);
        out.push(';');
        out.push_str(ALGORITHM_SUITE);
        out.push(';');
        BASE64.encode_string(self.salt, &mut out);
        out.push(';');
        out.push_str(self.flags());
        out.push(';');
        if let Some(signer) = &self.signer {
            escape_into(&mut out, &signer.id);
            out.push(';');
            escape_into(&mut out, &signer.algorithm);
        } else {
            out.push(';');
        }
        out.push(';');
        BASE64.encode_string(&self.signature, &mut out);
        out
    }

    /// The flags field: `table` when a logical table name is bound, else empty.
    fn flags(&self) -> &'static str {
        if self.table_bound { FLAG_TABLE } else { "" }
    }

    /// Reads the twelve fields (the version already checked).
    pub(crate) fn decode(fields: &[&str]) -> Result<Self, MetadataError> {
        let [
            _,
            kid,
            wrap_alg,
            wrapped,
            entries,
            mac,
            suite,
            salt,
            flags,
            signer_id,
            signer_alg,
            signature,
        ] = fields[..]
        else {
            return Err(MetadataError::malformed(
                "version 3 metadata has twelve fields separated by ';'",
            ));
        };
        if suite != ALGORITHM_SUITE {
            return Err(MetadataError::Unsupported(format!(
                "algorithm suite {:?}",
                unescape(suite, "the suite").unwrap_or_default()
            )));
        }
        let mut table_bound = false;
        for flag in flags.split(',').filter(|f| !f.is_empty()) {
            match flag {
                FLAG_TABLE if !table_bound => table_bound = true,
                FLAG_TABLE => return Err(MetadataError::malformed("a flag is listed twice")),
                other => {
                    return Err(MetadataError::Unsupported(format!(
                        "flag {:?}",
                        unescape(other, "a flag").unwrap_or_default()
                    )));
                }
            }
        }
        let mut listed = Vec::new();
        for entry in entries.split(',').filter(|e| !e.is_empty()) {
            let (kind, name) = match entry.split_once(':') {
                Some(("e", name)) => (Kind::Encrypted, name),
                Some(("s", name)) => (Kind::SignOnly, name),
                _ => {
                    return Err(MetadataError::malformed(
                        "a listed property is not `e:name` or `s:name`",
                    ));
                }
            };
            let name = unescape(name, "a property name")?;
            if name.is_empty() {
                return Err(MetadataError::malformed("an empty property name"));
            }
            if listed.iter().any(|e: &Entry| e.name == name) {
                return Err(MetadataError::malformed("a property is listed twice"));
            }
            listed.push(Entry { kind, name });
        }
        let signer = match (signer_id, signer_alg) {
            ("", "") => None,
            (_, "") | ("", _) => {
                return Err(MetadataError::malformed(
                    "a signer needs both an id and an algorithm",
                ));
            }
            (id, alg) => Some(Signer {
                id: key_id(id, "the signer's key id")?,
                algorithm: algorithm(alg, "the signature algorithm")?,
            }),
        };
        let wrapped = base64_field(wrapped, "wrapped key")?;
        if wrapped.is_empty() || wrapped.len() > MAX_WRAPPED_KEY {
            return Err(MetadataError::Malformed(format!(
                "the wrapped key is not 1 to {MAX_WRAPPED_KEY} bytes"
            )));
        }
        let salt = base64_field(salt, "salt")?
            .try_into()
            .map_err(|_| MetadataError::malformed("the salt is not 16 bytes"))?;
        let mac = base64_field(mac, "MAC")?;
        if mac.len() != MAC_LEN {
            return Err(MetadataError::malformed("the MAC is not 32 bytes"));
        }
        let signature = base64_field(signature, "signature")?;
        if signature.len() > MAX_SIGNATURE || signature.is_empty() != signer.is_none() {
            return Err(MetadataError::malformed(
                "a signature is present exactly when a signer is named, and at most 1 KiB",
            ));
        }
        Ok(Metadata {
            kid: key_id(kid, "the key id")?,
            wrap_alg: algorithm(wrap_alg, "the wrapping algorithm")?,
            wrapped,
            salt,
            table_bound,
            entries: listed,
            signer,
            mac,
            signature,
        })
    }

    /// What the item MAC and the signature cover: the label, the bound logical table name
    /// (empty when none is bound), PartitionKey, RowKey, key id, wrapping algorithm, wrapped
    /// key, salt, flags, signer id and algorithm, the number of listed properties, then for
    /// each in stored order its kind (`e`/`s`), name, EDM type and value as stored
    /// ([`canonical`]). `values` are the listed properties' stored values, in the same order.
    pub(crate) fn message(
        &self,
        binding: &str,
        pk: &str,
        rk: &str,
        values: &[&EdmValue],
    ) -> Vec<u8> {
        debug_assert_eq!(values.len(), self.entries.len());
        let size: usize = values.iter().map(|v| 48 + canonical(v).len()).sum();
        let mut out = Vec::with_capacity(256 + size + self.wrapped.len());
        let (signer_id, signer_alg) = self
            .signer
            .as_ref()
            .map_or(("", ""), |s| (s.id.as_str(), s.algorithm.as_str()));
        for field in [LABEL_ITEM, binding, pk, rk, &self.kid, &self.wrap_alg] {
            push_field(&mut out, field.as_bytes());
        }
        push_field(&mut out, &self.wrapped);
        push_field(&mut out, &self.salt);
        for field in [self.flags(), signer_id, signer_alg] {
            push_field(&mut out, field.as_bytes());
        }
        let count = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&count.to_be_bytes());
        for (entry, value) in self.entries.iter().zip(values) {
            push_field(&mut out, entry.kind.letter().as_bytes());
            push_field(&mut out, entry.name.as_bytes());
            push_field(&mut out, value.edm_type().as_str().as_bytes());
            push_field(&mut out, &canonical(value));
        }
        out
    }
}

/// The bytes of a value the item MAC covers: UTF-8 for a string, big-endian for numbers
/// (a double's IEEE 754 bits, with every NaN as the one quiet NaN and −0 as 0, which the
/// service may return for them), 0 or 1 for a Boolean, the seven-digit text tablekit writes for
/// a DateTime (100 ns resolution, as stored), the 16 bytes of a Guid, a Binary's bytes.
pub(crate) fn canonical(value: &EdmValue) -> Cow<'_, [u8]> {
    match value {
        EdmValue::String(text) => Cow::Borrowed(text.as_bytes()),
        EdmValue::Int32(v) => Cow::Owned(v.to_be_bytes().to_vec()),
        EdmValue::Int64(v) => Cow::Owned(v.to_be_bytes().to_vec()),
        EdmValue::Double(v) => {
            let bits = if v.is_nan() {
                f64::NAN.to_bits()
            } else if *v == 0.0 {
                0
            } else {
                v.to_bits()
            };
            Cow::Owned(bits.to_be_bytes().to_vec())
        }
        EdmValue::Boolean(v) => Cow::Owned(vec![u8::from(*v)]),
        EdmValue::DateTime(dt) => Cow::Owned(format_datetime(dt).into_bytes()),
        EdmValue::Guid(id) => Cow::Borrowed(id.as_bytes()),
        EdmValue::Binary(bytes) => Cow::Borrowed(bytes),
    }
}

/// The associated data of an encrypted property: label, bound logical table name (empty when
/// none), PartitionKey, RowKey, name.
pub(crate) fn property_ad(binding: &str, pk: &str, rk: &str, name: &str) -> Vec<u8> {
    let mut ad = Vec::with_capacity(96 + binding.len() + pk.len() + rk.len() + name.len());
    for field in [LABEL_PROPERTY, binding, pk, rk, name] {
        push_field(&mut ad, field.as_bytes());
    }
    ad
}

/// The keys of one entity write, derived from its content key and salt: HKDF-SHA-256 with the
/// salt, expanded once per purpose under a label naming the format, the suite and the purpose.
/// The content key itself encrypts nothing, so a wrapped key copied into another format or
/// mode opens nothing there.
pub(crate) struct ItemKeys {
    aead: Aes256Gcm,
    mac: Zeroizing<[u8; 32]>,
}

impl ItemKeys {
    pub(crate) fn derive(content_key: &ContentKey, salt: &[u8; SALT_LEN]) -> Self {
        let hkdf = Hkdf::<Sha256>::new(Some(salt), content_key.expose());
        let mut encrypt = Zeroizing::new([0u8; CONTENT_KEY_LEN]);
        let mut mac = Zeroizing::new([0u8; 32]);
        // 32 bytes is far below HKDF-SHA-256's limit of 8,160.
        hkdf.expand(LABEL_ENCRYPT.as_bytes(), encrypt.as_mut())
            .expect("32 bytes of HKDF output");
        hkdf.expand(LABEL_MAC.as_bytes(), mac.as_mut())
            .expect("32 bytes of HKDF output");
        Self {
            aead: Aes256Gcm::new((&*encrypt).into()),
            mac,
        }
    }

    /// Encrypts `plaintext` in place under the nonce numbered `index` (the property's position
    /// in the list) and returns ciphertext ‖ tag. In place: no plaintext copy is left behind.
    pub(crate) fn seal(&self, mut plaintext: Vec<u8>, index: usize, ad: &[u8]) -> Vec<u8> {
        let nonce = counter_nonce(index as u64);
        let tag = self
            .aead
            .encrypt_in_place_detached(Nonce::from_slice(&nonce), ad, &mut plaintext)
            .expect("AES-GCM encrypts anything under 64 GiB");
        plaintext.extend_from_slice(&tag);
        plaintext
    }

    /// Opens ciphertext ‖ tag under the nonce numbered `index`; `None` when it is too short or
    /// does not authenticate with `ad`.
    pub(crate) fn open(&self, stored: &[u8], index: usize, ad: &[u8]) -> Option<Vec<u8>> {
        if stored.len() < TAG_LEN {
            return None;
        }
        let (ciphertext, tag) = stored.split_at(stored.len() - TAG_LEN);
        let mut buffer = ciphertext.to_vec();
        self.aead
            .decrypt_in_place_detached(
                Nonce::from_slice(&counter_nonce(index as u64)),
                ad,
                &mut buffer,
                Tag::from_slice(tag),
            )
            .ok()?;
        Some(buffer)
    }

    fn hmac(&self, message: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.mac.as_ref())
            .expect("HMAC takes a key of any length");
        mac.update(message);
        mac
    }

    /// The item MAC of `message`.
    pub(crate) fn mac(&self, message: &[u8]) -> Vec<u8> {
        self.hmac(message).finalize().into_bytes().to_vec()
    }

    /// Whether `tag` is the item MAC of `message`, compared in constant time.
    pub(crate) fn verify(&self, message: &[u8], tag: &[u8]) -> bool {
        self.hmac(message).verify_slice(tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::super::Stored;
    use super::*;

    fn sample() -> Metadata {
        Metadata {
            kid: "https://vault.example/keys/k;1,%".into(),
            wrap_alg: "A256KW".into(),
            wrapped: vec![1; 40],
            salt: [3; SALT_LEN],
            table_bound: true,
            entries: vec![
                Entry {
                    kind: Kind::Encrypted,
                    name: "Email".into(),
                },
                Entry {
                    kind: Kind::SignOnly,
                    name: "Na;me,%:x".into(),
                },
            ],
            signer: Some(Signer {
                id: "signer;1".into(),
                algorithm: "EdDSA".into(),
            }),
            mac: vec![2; MAC_LEN],
            signature: vec![4; 64],
        }
    }

    #[test]
    fn version_3_metadata_reads_back_what_was_written_whatever_its_text_holds() {
        let m = sample();
        let text = m.encode();
        assert!(
            text.starts_with("3;https://vault.example/keys/k%3B1%2C%25;A256KW;"),
            "{text}"
        );
        assert!(text.contains(";e:Email,s:Na%3Bme%2C%25:x;"), "{text}");
        assert!(text.contains(";A256GCM-HS256;"), "{text}");
        assert!(text.contains(";table;signer%3B1;EdDSA;"), "{text}");
        assert_eq!(Stored::decode(&text), Ok(Stored::V3(m.clone())));
        let unsigned = Metadata {
            signer: None,
            signature: Vec::new(),
            table_bound: false,
            entries: Vec::new(),
            ..m
        };
        assert_eq!(Stored::decode(&unsigned.encode()), Ok(Stored::V3(unsigned)));
    }

    #[test]
    fn malformed_or_unknown_version_3_metadata_is_refused() {
        const KID: usize = 1;
        const WRAP_ALG: usize = 2;
        const WRAPPED: usize = 3;
        const ENTRIES: usize = 4;
        const MAC: usize = 5;
        const SUITE: usize = 6;
        const SALT: usize = 7;
        const FLAGS: usize = 8;
        const SIGNER_ALG: usize = 10;
        const SIGNATURE: usize = 11;
        let text = sample().encode();
        let fields: Vec<&str> = text.split(';').collect();
        let with = |i: usize, value: &str| {
            let mut f = fields.clone();
            f[i] = value;
            f.join(";")
        };
        let unsupported = |t: &str| matches!(Stored::decode(t), Err(MetadataError::Unsupported(_)));
        let malformed = |t: &str| matches!(Stored::decode(t), Err(MetadataError::Malformed(_)));
        let long_key = BASE64.encode(vec![0; MAX_WRAPPED_KEY + 1]);
        let long_id = "k".repeat(MAX_KEY_ID + 1);
        assert!(unsupported(&with(SUITE, "A128GCM-HS256")));
        assert!(unsupported(&with(FLAGS, "table,tenant")));
        let cases = [
            (with(FLAGS, "table,table"), "a flag twice"),
            (fields[..11].join(";"), "eleven fields"),
            (text.clone() + ";", "thirteen fields"),
            (with(KID, ""), "an empty key id"),
            (with(KID, &long_id), "a long key id"),
            (
                with(WRAP_ALG, "A256 KW"),
                "a wrapping algorithm with a space",
            ),
            (with(WRAPPED, ""), "no wrapped key"),
            (with(WRAPPED, &long_key), "a wrapped key over 4 KiB"),
            (with(SALT, "AAAA"), "a short salt"),
            (with(ENTRIES, "x:Email"), "an unknown kind"),
            (with(ENTRIES, "e:Email,s:Email"), "a name twice"),
            (with(ENTRIES, "e:"), "an empty name"),
            (with(SIGNER_ALG, ""), "a signer without algorithm"),
            (with(MAC, "AAAA"), "a short MAC"),
            (with(SIGNATURE, ""), "a signer without signature"),
        ];
        for (text, what) in cases {
            assert!(malformed(&text), "{what}");
        }
    }

    #[test]
    fn canonical_values_are_what_the_service_returns_for_them() {
        assert_eq!(
            canonical(&EdmValue::Double(-0.0)),
            canonical(&EdmValue::Double(0.0))
        );
        assert_eq!(
            canonical(&EdmValue::Double(f64::from_bits(0x7ff8_0000_0000_0001))),
            canonical(&EdmValue::Double(f64::NAN))
        );
        assert_ne!(
            canonical(&EdmValue::Double(1.0)),
            canonical(&EdmValue::Double(-1.0))
        );
        // A DateTime is covered at the service's resolution of 100 ns.
        let a = tablekit_core::edm::parse_datetime("2026-01-02T03:04:05.1234567Z").unwrap();
        let b = tablekit_core::edm::parse_datetime("2026-01-02T03:04:05.12345678Z").unwrap();
        assert_eq!(
            canonical(&EdmValue::DateTime(a)),
            canonical(&EdmValue::DateTime(b))
        );
    }

    #[test]
    fn the_per_purpose_keys_are_not_the_content_key_and_differ_per_salt() {
        let key = ContentKey::from_bytes(&[9; 32]).unwrap();
        let a = ItemKeys::derive(&key, &[1; SALT_LEN]);
        let b = ItemKeys::derive(&key, &[2; SALT_LEN]);
        let raw = Aes256Gcm::new(key.expose().into());
        let sealed = a.seal(b"text".to_vec(), 0, b"ad");
        assert_eq!(a.open(&sealed, 0, b"ad").as_deref(), Some(&b"text"[..]));
        assert!(b.open(&sealed, 0, b"ad").is_none(), "another salt");
        let (ct, tag) = sealed.split_at(4);
        let mut buffer = ct.to_vec();
        assert!(
            raw.decrypt_in_place_detached(
                Nonce::from_slice(&counter_nonce(0)),
                b"ad",
                &mut buffer,
                Tag::from_slice(tag)
            )
            .is_err(),
            "the content key itself opens nothing"
        );
        assert_ne!(a.mac(b"m"), b.mac(b"m"));
    }
}
