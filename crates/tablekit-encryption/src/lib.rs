#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod beacon;
mod cache;
mod codec;
mod error;
mod format;
mod key;
mod legacy;
mod local;
mod policy;
mod read;
mod search;
mod sign;
mod write;

pub use beacon::{
    BEACON_PREFIX, BeaconKey, MAX_BEACON_BITS, MIN_BEACON_BITS, NormalizeFn, StandardBeacon,
};
pub use cache::{DataKeyReuse, KeyCache, MAX_DATA_KEY_USES};
pub use error::{Cause, DecryptionFailure};
pub use format::{
    ALGORITHM_SUITE, CONTENT_ALGORITHM, FORMAT_VERSION, METADATA_PROPERTY, NONCE_LEN, OVERHEAD,
    TAG_LEN,
};
pub use key::{
    BoxFuture, CONTENT_KEY_LEN, ContentKey, KeyEncryptionKey, KeyResolver, KeyRing, UnwrapError,
    WrappedKey,
};
pub use legacy::{LEGACY_METADATA_1, LEGACY_METADATA_2};
pub use local::{AesKeyWrap, RsaOaepKey};
pub use policy::{Action, ClassifyFn, EncryptionPolicy, EncryptionPolicyBuilder, SelectFn};
pub use search::BeaconFilter;
pub use sign::{Ed25519SigningKey, HmacSigningKey, SigningKey};

/// The property names reserved for encryption metadata: tablekit's and the legacy format's.
/// A bag to encrypt may not hold them, and a policy may not select them.
pub const RESERVED_PROPERTIES: [&str; 3] =
    [METADATA_PROPERTY, LEGACY_METADATA_1, LEGACY_METADATA_2];
