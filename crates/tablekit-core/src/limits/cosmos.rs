//! The Cosmos DB Table API's limits where they are stricter than Azure Table storage's, checked
//! before any request to a Cosmos DB account (the shared limits in [`crate::limits`] apply
//! too).
//!
//! - A RowKey is at most 255 bytes (counted here as UTF-8 bytes).
//! - A transaction's request body is at most 2 MB (counted here as 2,000,000 bytes, the
//!   stricter reading).
//! - Some property names are reserved: `id`, `rid`, `etag`, `ts`, `ResourceId` and the
//!   underscore-prefixed system names (`_rid`, `_self`, `_etag`, `_attachments`, `_ts`),
//!   compared without regard to case.
//!
//! A PartitionKey keeps Azure Table storage's 1 KiB limit, which is the stricter one.

use crate::error::{Error, KeyKind, Limit, NameKind, Result};

/// Largest RowKey, in UTF-8 bytes.
pub const MAX_ROW_KEY_BYTES: usize = 255;

/// Largest request body of an entity group transaction, in bytes.
pub const MAX_TRANSACTION_BYTES: usize = 2_000_000;

/// Property names the Cosmos DB Table API reserves (compared case-insensitively).
pub const RESERVED_PROPERTY_NAMES: [&str; 10] = [
    "id",
    "rid",
    "etag",
    "ts",
    "ResourceId",
    "_rid",
    "_self",
    "_etag",
    "_attachments",
    "_ts",
];

/// Checks a RowKey against the 255-byte limit.
///
/// # Errors
/// [`Error::LimitExceeded`] with a [`Limit::Custom`] naming the limit.
#[doc(hidden)]
pub fn validate_row_key(row_key: &str) -> Result<()> {
    if row_key.len() > MAX_ROW_KEY_BYTES {
        return Err(Error::LimitExceeded {
            limit: Limit::Custom {
                what: format!(
                    "{} size in UTF-8 bytes on the Cosmos DB Table API",
                    KeyKind::RowKey
                ),
                max: MAX_ROW_KEY_BYTES,
            },
            actual: row_key.len(),
        });
    }
    Ok(())
}

/// Checks that `name` is not reserved.
///
/// # Errors
/// [`Error::InvalidName`] for a reserved name.
#[doc(hidden)]
pub fn validate_property_name(name: &str) -> Result<()> {
    if RESERVED_PROPERTY_NAMES
        .iter()
        .any(|r| r.eq_ignore_ascii_case(name))
    {
        return Err(Error::InvalidName {
            kind: NameKind::Property,
            name: name.to_owned(),
            reason: "the Cosmos DB Table API reserves this name".into(),
        });
    }
    Ok(())
}

/// Checks an entity's JSON body (as an operation sends it): its RowKey and every property
/// name (type annotations, `Name@odata.type`, are checked by the name they annotate).
///
/// # Errors
/// As [`validate_row_key`] and [`validate_property_name`]; [`Error::Encode`] for a body that
/// is not a JSON object.
#[doc(hidden)]
pub fn validate_entity_body(body: &[u8]) -> Result<()> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).map_err(|e| Error::Encode {
            property: String::new(),
            reason: format!("the entity body is not a JSON object ({e})"),
        })?;
    for (name, value) in &map {
        let base = name.split('@').next().unwrap_or(name);
        if base == "RowKey" {
            if let Some(rk) = value.as_str() {
                validate_row_key(rk)?;
            }
            continue;
        }
        if !base.is_empty() {
            validate_property_name(base)?;
        }
    }
    Ok(())
}

/// Checks a transaction's request body size.
///
/// # Errors
/// [`Error::LimitExceeded`] with a [`Limit::Custom`] naming the limit.
#[doc(hidden)]
pub fn validate_transaction_bytes(bytes: usize) -> Result<()> {
    if bytes > MAX_TRANSACTION_BYTES {
        return Err(Error::LimitExceeded {
            limit: Limit::Custom {
                what: "transaction body size in bytes on the Cosmos DB Table API".into(),
                max: MAX_TRANSACTION_BYTES,
            },
            actual: bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_keys_over_255_bytes_are_refused() {
        validate_row_key(&"a".repeat(255)).unwrap();
        let err = validate_row_key(&"é".repeat(128)).unwrap_err(); // 256 bytes
        assert!(
            matches!(err, Error::LimitExceeded { actual: 256, .. }),
            "{err}"
        );
    }

    #[test]
    fn reserved_names_are_refused_whatever_their_case() {
        for name in ["id", "ID", "Rid", "ETag", "ts", "resourceid", "_ts"] {
            assert!(validate_property_name(name).is_err(), "{name}");
        }
        for name in ["Id2", "Timestamp2", "Email", "tsv"] {
            validate_property_name(name).unwrap();
        }
    }

    #[test]
    fn entity_bodies_are_checked_by_their_names_and_row_key() {
        validate_entity_body(br#"{"PartitionKey":"p","RowKey":"r","Name":"x","Age@odata.type":"Edm.Int64","Age":"1"}"#).unwrap();
        assert!(
            validate_entity_body(br#"{"RowKey":"r","id@odata.type":"Edm.Int64","id":"1"}"#)
                .is_err()
        );
        let long = format!(r#"{{"RowKey":"{}"}}"#, "r".repeat(300));
        assert!(validate_entity_body(long.as_bytes()).is_err());
        assert!(validate_entity_body(b"[1]").is_err());
    }

    #[test]
    fn transactions_over_2_mb_are_refused() {
        validate_transaction_bytes(MAX_TRANSACTION_BYTES).unwrap();
        assert!(validate_transaction_bytes(MAX_TRANSACTION_BYTES + 1).is_err());
    }
}
