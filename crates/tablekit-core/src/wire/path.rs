//! Resource paths of entities: the OData key predicate, escaped correctly.
//!
//! The 0.21 SDK puts keys into URLs without doubling `'`, so `O'Brien` addresses a different
//! (invalid) entity and gets 404. Here quotes are doubled as OData requires, then every byte
//! that is not unreserved in a URL path is percent-encoded.

use std::fmt::Write as _;

use crate::keys::Keys;

/// The path of one entity relative to the service root:
/// `Employees(PartitionKey='O%27%27Brien',RowKey='000223')`.
pub fn entity_path(table: &str, keys: &Keys) -> String {
    let mut out = String::with_capacity(table.len() + keys.pk().len() + keys.rk().len() + 32);
    out.push_str(table);
    out.push_str("(PartitionKey='");
    push_key(&mut out, keys.pk());
    out.push_str("',RowKey='");
    push_key(&mut out, keys.rk());
    out.push_str("')");
    out
}

fn push_key(out: &mut String, key: &str) {
    for b in key.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b))
            }
            // A quote inside an OData string literal is written twice.
            b'\'' => out.push_str("%27%27"),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_doubled_and_everything_unsafe_is_encoded() {
        let keys = Keys::new("O'Brien", "a%20b x+y").unwrap();
        assert_eq!(
            entity_path("T", &keys),
            "T(PartitionKey='O%27%27Brien',RowKey='a%2520b%20x%2By')"
        );
        let keys = Keys::new("naïve", "東").unwrap();
        assert_eq!(
            entity_path("T", &keys),
            "T(PartitionKey='na%C3%AFve',RowKey='%E6%9D%B1')"
        );
    }
}
