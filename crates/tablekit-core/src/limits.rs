//! The Table service's limits, checked before any request is sent (Azurite does not enforce
//! all of them; Azure does).

/// Properties per entity including PartitionKey, RowKey and Timestamp.
pub const MAX_PROPERTIES_INCL_SYSTEM: usize = 255;
/// User properties per entity.
pub const MAX_USER_PROPERTIES: usize = 252;
/// Size of an entity, counted the way the service counts (see [`crate::limits`]).
pub const MAX_ENTITY_BYTES: usize = 1 << 20;
/// Size of a PartitionKey or RowKey (UTF-16 code units × 2).
pub const MAX_KEY_BYTES: usize = 1024;
/// Size of one String (UTF-16 code units × 2) or Binary property.
pub const MAX_PROPERTY_BYTES: usize = 64 * 1024;
/// Length of a property name, in characters.
pub const MAX_PROPERTY_NAME_CHARS: usize = 255;
/// Operations in one entity group transaction.
pub const MAX_TRANSACTION_OPERATIONS: usize = 100;
/// Largest allowed request body of an entity group transaction: the service requires it to be
/// *less than* 4 MiB.
pub const MAX_TRANSACTION_BYTES: usize = (4 << 20) - 1;
/// Entities per query response page.
pub const MAX_PAGE_SIZE: usize = 1000;
/// Seconds a query segment may run before the service returns a continuation token.
pub const QUERY_MAX_EXECUTION_SECS: u64 = 5;
/// Size of a queue message's text.
pub const MAX_QUEUE_MESSAGE_BYTES: usize = 64 * 1024;
/// Entities per second one partition is designed to serve (1 KiB entities).
pub const TARGET_ENTITIES_PER_SEC_PARTITION: u32 = 2_000;
/// Entities per second one account is designed to serve (1 KiB entities).
pub const TARGET_ENTITIES_PER_SEC_ACCOUNT: u32 = 20_000;

pub mod cosmos;

use std::fmt;

use crate::error::{Error, Limit, NameKind, Result};

impl Limit {
    /// The largest value allowed.
    pub fn max(&self) -> usize {
        match self {
            Limit::KeyBytes(_) => MAX_KEY_BYTES,
            Limit::UserProperties => MAX_USER_PROPERTIES,
            Limit::EntityBytes => MAX_ENTITY_BYTES,
            Limit::PropertyBytes { .. } => MAX_PROPERTY_BYTES,
            Limit::PropertyNameChars => MAX_PROPERTY_NAME_CHARS,
            Limit::TransactionOperations => MAX_TRANSACTION_OPERATIONS,
            Limit::TransactionBytes => MAX_TRANSACTION_BYTES,
            Limit::PageSize => MAX_PAGE_SIZE,
            Limit::QueueMessageBytes => MAX_QUEUE_MESSAGE_BYTES,
            Limit::Custom { max, .. } => *max,
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::KeyBytes(kind) => write!(f, "{kind} size in bytes"),
            Limit::UserProperties => f.write_str("user properties per entity"),
            Limit::EntityBytes => f.write_str("entity size in bytes"),
            Limit::PropertyBytes { property } => {
                write!(f, "size in bytes of property `{property}`")
            }
            Limit::PropertyNameChars => f.write_str("property name length"),
            Limit::TransactionOperations => f.write_str("operations per transaction"),
            Limit::TransactionBytes => f.write_str("transaction body size in bytes"),
            Limit::PageSize => f.write_str("entities per page"),
            Limit::QueueMessageBytes => f.write_str("queue message size in bytes"),
            Limit::Custom { what, .. } => f.write_str(what),
        }?;
        write!(f, " (max {})", self.max())
    }
}

/// Names the service reserves for system properties.
pub const SYSTEM_PROPERTIES: [&str; 3] = ["PartitionKey", "RowKey", "Timestamp"];

/// Checks a table name: `^[A-Za-z][A-Za-z0-9]{2,62}$`, and not the reserved `tables`.
///
/// # Errors
/// [`Error::InvalidName`] saying which rule is broken.
#[doc(hidden)]
pub fn validate_table_name(name: &str) -> Result<()> {
    let fail = |reason: &str| {
        Err(Error::InvalidName {
            kind: NameKind::Table,
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if !(3..=63).contains(&name.len()) {
        return fail("must be 3 to 63 characters long");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return fail("must start with a letter");
    }
    if let Some(c) = name.chars().find(|c| !c.is_ascii_alphanumeric()) {
        return fail(&format!("may contain only letters and digits, not {c:?}"));
    }
    if name.eq_ignore_ascii_case("tables") {
        return fail("`tables` is reserved");
    }
    Ok(())
}

/// Checks that `name` can name a property: 1 to 255 characters, an identifier (letters,
/// digits, `_`; not starting with a digit). System names are allowed: filters and `$select`
/// use them.
///
/// # Errors
/// [`Error::LimitExceeded`] for a name over 255 characters, [`Error::InvalidName`] otherwise.
#[doc(hidden)]
pub fn validate_property_identifier(name: &str) -> Result<()> {
    let fail = |reason: String| {
        Err(Error::InvalidName {
            kind: NameKind::Property,
            name: name.to_owned(),
            reason,
        })
    };
    let chars = name.chars().count();
    if chars == 0 {
        return fail("must not be empty".into());
    }
    if chars > MAX_PROPERTY_NAME_CHARS {
        return Err(Error::LimitExceeded {
            limit: Limit::PropertyNameChars,
            actual: chars,
        });
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        return fail("must not start with a digit".into());
    }
    if let Some(c) = name.chars().find(|&c| !(c.is_alphanumeric() || c == '_')) {
        return fail(format!(
            "may contain only letters, digits and `_`, not {c:?}"
        ));
    }
    Ok(())
}

/// Checks a user property name for an entity body: a valid identifier (see
/// [`validate_property_identifier`]) that is not a system property name.
///
/// # Errors
/// As [`validate_property_identifier`]; [`Error::InvalidName`] for `PartitionKey`, `RowKey`
/// and `Timestamp`.
#[doc(hidden)]
pub fn validate_property_name(name: &str) -> Result<()> {
    validate_property_identifier(name)?;
    if SYSTEM_PROPERTIES.contains(&name) {
        return Err(Error::InvalidName {
            kind: NameKind::Property,
            name: name.to_owned(),
            reason: format!(
                "`{name}` is a system property; keys go in `Keys`, the server sets Timestamp"
            ),
        });
    }
    Ok(())
}

/// Checks a queue or blob container name: 3 to 63 characters of lowercase letters, digits and
/// single hyphens, starting and ending with a letter or digit.
///
/// # Errors
/// [`Error::InvalidName`] saying which rule is broken.
#[doc(hidden)]
pub fn validate_dns_name(kind: NameKind, name: &str) -> Result<()> {
    let fail = |reason: &str| {
        Err(Error::InvalidName {
            kind,
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if !(3..=63).contains(&name.len()) {
        return fail("must be 3 to 63 characters long");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return fail(&format!(
            "may contain only lowercase letters, digits and `-`, not {c:?}"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return fail("must start and end with a letter or digit");
    }
    if name.contains("--") {
        return fail("must not contain two hyphens in a row");
    }
    Ok(())
}

/// Checks a blob name: 1 to 1,024 characters, no control characters, not ending with `.` or
/// `/` (which the service would silently drop or reject).
///
/// # Errors
/// [`Error::InvalidName`] saying which rule is broken.
#[doc(hidden)]
pub fn validate_blob_name(name: &str) -> Result<()> {
    let fail = |reason: &str| {
        Err(Error::InvalidName {
            kind: NameKind::Blob,
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    let chars = name.chars().count();
    if chars == 0 || chars > 1024 {
        return fail("must be 1 to 1024 characters long");
    }
    if name.chars().any(char::is_control) {
        return fail("must not contain control characters");
    }
    if name.ends_with('.') || name.ends_with('/') {
        return fail("must not end with `.` or `/`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_follow_the_service_rules() {
        for ok in [
            "abc",
            "Employees",
            "Signins20261122",
            &format!("a{}", "b".repeat(62)),
        ] {
            assert!(validate_table_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ab",
            "1abc",
            "a-b",
            "tables",
            "Tables",
            &format!("a{}", "b".repeat(63)),
            "ab_c",
        ] {
            assert!(
                matches!(
                    validate_table_name(bad),
                    Err(Error::InvalidName {
                        kind: NameKind::Table,
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn queue_container_and_blob_names_follow_the_service_rules() {
        for ok in ["abc", "employee-archive", "q1-poison", &"a".repeat(63)] {
            assert!(validate_dns_name(NameKind::Queue, ok).is_ok(), "{ok}");
        }
        for bad in ["ab", "Abc", "a--b", "-ab", "ab-", "a_b", &"a".repeat(64)] {
            assert!(
                validate_dns_name(NameKind::Container, bad).is_err(),
                "{bad}"
            );
        }
        assert!(validate_blob_name("queue/2014/07/31/1800/000001.log").is_ok());
        for bad in ["", "a/", "a.", "a\nb"] {
            assert!(
                validate_blob_name(&bad.replace("\\n", "\n")).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn property_names_follow_the_service_rules() {
        for ok in [
            "Email",
            "EmployeeCount",
            "_x",
            "H00",
            "Überstunden",
            &"p".repeat(255),
        ] {
            assert!(validate_property_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Manager Rating",
            "E-mail",
            "1st",
            "PartitionKey",
            "RowKey",
            "Timestamp",
            "a.b",
        ] {
            assert!(validate_property_name(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            validate_property_name(&"p".repeat(256)),
            Err(Error::LimitExceeded {
                limit: Limit::PropertyNameChars,
                actual: 256
            })
        ));
    }
}
