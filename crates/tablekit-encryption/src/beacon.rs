//! Searchable encryption: standard beacons. A beacon is a truncated HMAC of an encrypted
//! property's (normalized) value under a key derived for that property from a root beacon
//! key, stored as a plain, signed property beside the ciphertext, so that equality can be
//! asked of the service without the value.

use std::fmt;
use std::sync::Arc;

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tablekit_core::limits::validate_property_name;
use tablekit_core::{Error, Result};
use zeroize::Zeroizing;

use crate::key::check_key_id;

/// The prefix of the property a beacon is stored in: the beacon of `Email` is
/// `_Beacon_Email`. Names with this prefix are reserved: a bag to encrypt may not hold them.
pub const BEACON_PREFIX: &str = "_Beacon_";

/// The fewest bits a beacon keeps.
pub const MIN_BEACON_BITS: u32 = 1;
/// The most bits a beacon keeps.
pub const MAX_BEACON_BITS: u32 = 64;

/// The shortest root beacon key, in bytes.
const MIN_SECRET: usize = 32;

const LABEL: &str = "tablekit-encryption/beacon/1/HS256";

/// A normalization applied to a value before its beacon is computed.
pub type NormalizeFn = dyn Fn(&str) -> String + Send + Sync;

/// The root key beacons are derived from: a secret of at least 32 bytes, kept apart from the
/// key-encryption key (whoever holds it can test guesses of a value against its beacon).
/// Each [`StandardBeacon`] gets a key of its own, derived with HKDF-SHA-256 from this secret
/// and a label naming the property and the beacon's length, so that two beacons of one value
/// (of two properties, or of two lengths) cannot be matched with each other. `Debug` shows
/// the id only; the secret is wiped when this is dropped.
///
/// ```
/// use tablekit_encryption::BeaconKey;
/// let root = BeaconKey::new("hr-beacons-2026", &[9u8; 32]).unwrap();
/// let email = root.standard_beacon("Email", 16).unwrap();
/// assert_eq!(email.value("jun@contoso.example").len(), 4); // 16 bits, 4 hex digits
/// assert!(BeaconKey::new("short", &[9u8; 16]).is_err());
/// ```
pub struct BeaconKey {
    id: String,
    secret: Zeroizing<Vec<u8>>,
}

impl BeaconKey {
    /// A root beacon key named `id` from `secret` (at least 32 bytes, from a random
    /// generator or a key store).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a secret under 32 bytes or an invalid id.
    pub fn new(id: impl Into<String>, secret: &[u8]) -> Result<Self> {
        let id = id.into();
        check_key_id(&id)?;
        if secret.len() < MIN_SECRET {
            return Err(Error::InvalidConfig {
                part: "beacon key".into(),
                reason: format!("a root beacon key has at least {MIN_SECRET} bytes"),
            });
        }
        Ok(Self {
            id,
            secret: Zeroizing::new(secret.to_vec()),
        })
    }

    /// The key's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The standard beacon of the encrypted property `property`, keeping `bits` bits of the
    /// HMAC ([`MIN_BEACON_BITS`] to [`MAX_BEACON_BITS`]): fewer bits, more values share a
    /// beacon (more false positives to decrypt and drop, less told about equal values).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a length outside 1 to 64 bits; [`Error::InvalidName`]
    /// for a property name that is not a valid name, or too long once prefixed with
    /// [`BEACON_PREFIX`].
    pub fn standard_beacon(&self, property: &str, bits: u32) -> Result<StandardBeacon> {
        if !(MIN_BEACON_BITS..=MAX_BEACON_BITS).contains(&bits) {
            return Err(Error::InvalidConfig {
                part: "beacon".into(),
                reason: format!(
                    "a beacon keeps {MIN_BEACON_BITS} to {MAX_BEACON_BITS} bits, not {bits}"
                ),
            });
        }
        validate_property_name(property)?;
        let stored_name = format!("{BEACON_PREFIX}{property}");
        validate_property_name(&stored_name)?;
        let hkdf = Hkdf::<Sha256>::new(None, &self.secret);
        let mut key = Zeroizing::new([0u8; 32]);
        let mut info = Vec::with_capacity(LABEL.len() + property.len() + 8);
        for field in [LABEL.as_bytes(), property.as_bytes(), &bits.to_be_bytes()] {
            crate::format::push_field(&mut info, field);
        }
        hkdf.expand(&info, key.as_mut())
            .expect("32 bytes of HKDF output");
        Ok(StandardBeacon {
            inner: Arc::new(Inner {
                property: property.to_owned(),
                stored_name,
                bits,
                key,
                normalize: None,
            }),
        })
    }
}

impl fmt::Debug for BeaconKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BeaconKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

struct Inner {
    property: String,
    stored_name: String,
    bits: u32,
    key: Zeroizing<[u8; 32]>,
    normalize: Option<Arc<NormalizeFn>>,
}

/// The standard beacon of one encrypted property: HMAC-SHA-256 of the normalized value's
/// UTF-8 bytes under the beacon's own key, truncated to its length in bits, written as
/// lowercase hexadecimal (`bits / 4` digits, rounded up; unused high bits of the first digit
/// are zero). Given to a policy ([`EncryptionPolicyBuilder::beacon`](crate::EncryptionPolicyBuilder::beacon)),
/// every entity written with the property gets its beacon in the plain, signed property
/// [`stored_name`](Self::stored_name), and equality filters on the property are rewritten to
/// it ([`EncryptionPolicy::search`](crate::EncryptionPolicy::search)). Cheap to clone.
///
/// For an index copy keyed by the property, key the copy by
/// [`index_value`](Self::index_value) and look it up with
/// [`index_prefix`](Self::index_prefix): the copy's keys then hold the beacon, never the
/// value (see the crate documentation).
#[derive(Clone)]
pub struct StandardBeacon {
    inner: Arc<Inner>,
}

impl StandardBeacon {
    /// Normalizes values with `normalize` before computing their beacons (for instance
    /// `|v| v.trim().to_lowercase()` for e-mail addresses): values that normalize alike share
    /// a beacon. Queries still compare the exact value after decryption.
    #[must_use]
    pub fn with_normalization(
        self,
        normalize: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(Inner {
                property: inner.property.clone(),
                stored_name: inner.stored_name.clone(),
                bits: inner.bits,
                key: inner.key.clone(),
                normalize: Some(Arc::new(normalize)),
            }),
        }
    }

    /// The encrypted property this is the beacon of.
    pub fn property(&self) -> &str {
        &self.inner.property
    }

    /// The plain property the beacon is stored in: [`BEACON_PREFIX`] and the property's name.
    pub fn stored_name(&self) -> &str {
        &self.inner.stored_name
    }

    /// How many bits of the HMAC the beacon keeps.
    pub fn bits(&self) -> u32 {
        self.inner.bits
    }

    /// The beacon of `value`, as stored.
    pub fn value(&self, value: &str) -> String {
        let normalized;
        let text = match &self.inner.normalize {
            Some(normalize) => {
                normalized = normalize(value);
                normalized.as_str()
            }
            None => value,
        };
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.inner.key.as_ref())
            .expect("HMAC takes a key of any length");
        mac.update(text.as_bytes());
        let digest = mac.finalize().into_bytes();
        let first = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
        let bits = self.inner.bits;
        let kept = first >> (64 - bits);
        let digits = bits.div_ceil(4) as usize;
        format!("{kept:0digits$x}")
    }

    /// The value an index copy keyed by this property is keyed by: the beacon of `value`,
    /// `_`, and `unique` — the entity's own identity (its id), so that two entities whose
    /// values share a beacon get two copies rather than a conflict.
    pub fn index_value(&self, value: &str, unique: impl fmt::Display) -> String {
        format!("{}_{unique}", self.value(value))
    }

    /// The prefix of the index values ([`index_value`](Self::index_value)) of every entity
    /// whose property may equal `value`: look a copy up by it (a prefix range), then keep the
    /// entities whose decrypted value is `value`.
    pub fn index_prefix(&self, value: &str) -> String {
        format!("{}_", self.value(value))
    }
}

impl fmt::Debug for StandardBeacon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandardBeacon")
            .field("property", &self.inner.property)
            .field("bits", &self.inner.bits)
            .field("normalized", &self.inner.normalize.is_some())
            .finish_non_exhaustive()
    }
}

/// Whether `name` is a beacon property's name.
pub(crate) fn is_beacon_name(name: &str) -> bool {
    name.starts_with(BEACON_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> BeaconKey {
        BeaconKey::new("b", &[5; 32]).unwrap()
    }

    #[test]
    fn a_beacon_keeps_its_bits_and_depends_on_the_key_the_property_and_the_length() {
        let email = root().standard_beacon("Email", 10).unwrap();
        let value = email.value("jun@contoso.example");
        assert_eq!(value.len(), 3);
        assert!(u64::from_str_radix(&value, 16).unwrap() < 1 << 10);
        assert_eq!(value, email.value("jun@contoso.example"));
        let wide = root().standard_beacon("Email", 64).unwrap();
        assert_eq!(wide.value("jun@contoso.example").len(), 16);
        // Another root key, property or length: unrelated beacons (64 bits each, so equal
        // only by a 2^-64 chance).
        let other_key = BeaconKey::new("b", &[6; 32]).unwrap();
        let beacons = [
            wide.value("jun@contoso.example"),
            other_key
                .standard_beacon("Email", 64)
                .unwrap()
                .value("jun@contoso.example"),
            root()
                .standard_beacon("Mail", 64)
                .unwrap()
                .value("jun@contoso.example"),
            wide.value("mei@contoso.example"),
        ];
        for (i, a) in beacons.iter().enumerate() {
            for b in &beacons[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // A shorter beacon is not a truncation of a longer one: each length has its key.
        let narrow = root().standard_beacon("Email", 60).unwrap();
        assert_ne!(
            &wide.value("jun@contoso.example")[..15],
            narrow.value("jun@contoso.example")
        );
    }

    #[test]
    fn normalization_maps_values_to_one_beacon() {
        let email = root()
            .standard_beacon("Email", 32)
            .unwrap()
            .with_normalization(|v| v.trim().to_lowercase());
        assert_eq!(
            email.value(" Jun@Contoso.example"),
            email.value("jun@contoso.example")
        );
        let exact = root().standard_beacon("Email", 32).unwrap();
        assert_ne!(
            exact.value("Jun@Contoso.example"),
            exact.value("jun@contoso.example")
        );
        assert_eq!(
            exact.value("jun@contoso.example"),
            email.value("JUN@contoso.example")
        );
    }

    #[test]
    fn bad_lengths_names_and_keys_are_refused() {
        assert!(root().standard_beacon("Email", 0).is_err());
        assert!(root().standard_beacon("Email", 65).is_err());
        assert!(root().standard_beacon("", 8).is_err());
        assert!(root().standard_beacon(&"E".repeat(250), 8).is_err());
        assert!(BeaconKey::new("b", &[1; 31]).is_err());
        let debug = format!("{:?} {:?}", root(), root().standard_beacon("Email", 8));
        assert!(!debug.contains("5, 5"), "{debug}");
    }
}
