//! The canonical digest `copy --verify` compares.
//!
//! An entity's digest is SHA-256 over its PartitionKey, RowKey and every property in name
//! order — name, EDM type and value in a fixed binary form — each field length-prefixed.
//! Timestamp and ETag are left out: they differ between a source and its copy by nature.
//! Values: String as UTF-8; Int32, Int64 as big-endian; Double by its IEEE bits (every NaN
//! as one); Boolean as one byte; DateTime as 100 ns ticks since 0001-01-01; Guid as its 16
//! bytes; Binary as is. A partition's digest is SHA-256 over its entities' digests in RowKey
//! order — the order in which the service returns them on every account.

use chrono::{DateTime, Utc};
use sha2::{Digest as _, Sha256};
use tablekit::core::{EdmValue, Properties};

/// Ticks (100 ns) from 0001-01-01 to the Unix epoch, as .NET counts them.
const UNIX_EPOCH_TICKS: i64 = 621_355_968_000_000_000;

fn field(hash: &mut Sha256, bytes: &[u8]) {
    hash.update((bytes.len() as u64).to_be_bytes());
    hash.update(bytes);
}

fn ticks(dt: &DateTime<Utc>) -> i64 {
    dt.timestamp() * 10_000_000 + i64::from(dt.timestamp_subsec_nanos() / 100) + UNIX_EPOCH_TICKS
}

/// The canonical digest of one entity.
pub(crate) fn entity_digest(pk: &str, rk: &str, properties: &Properties) -> [u8; 32] {
    let mut hash = Sha256::new();
    field(&mut hash, pk.as_bytes());
    field(&mut hash, rk.as_bytes());
    for (name, value) in properties.iter() {
        field(&mut hash, name.as_bytes());
        field(&mut hash, value.edm_type().as_str().as_bytes());
        match value {
            EdmValue::String(s) => field(&mut hash, s.as_bytes()),
            EdmValue::Int32(n) => field(&mut hash, &n.to_be_bytes()),
            EdmValue::Int64(n) => field(&mut hash, &n.to_be_bytes()),
            EdmValue::Double(d) => {
                let bits = if d.is_nan() {
                    f64::NAN.to_bits()
                } else {
                    d.to_bits()
                };
                field(&mut hash, &bits.to_be_bytes());
            }
            EdmValue::Boolean(b) => field(&mut hash, &[u8::from(*b)]),
            EdmValue::DateTime(dt) => field(&mut hash, &ticks(dt).to_be_bytes()),
            EdmValue::Guid(g) => field(&mut hash, g.as_bytes()),
            EdmValue::Binary(b) => field(&mut hash, b),
        }
    }
    hash.finalize().into()
}

/// One partition's entity count and digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionSummary {
    /// The PartitionKey.
    pub(crate) pk: String,
    /// Entities in it.
    pub(crate) count: u64,
    /// SHA-256 over the entity digests in RowKey order.
    pub(crate) digest: [u8; 32],
}

/// Folds entities, in (PartitionKey, RowKey) order, into partition summaries.
#[derive(Default)]
pub(crate) struct Summarizer {
    current: Option<(String, u64, Sha256)>,
}

impl Summarizer {
    /// Adds an entity; returns the previous partition's summary when this one starts a new
    /// partition.
    pub(crate) fn add(
        &mut self,
        pk: &str,
        rk: &str,
        properties: &Properties,
    ) -> Option<PartitionSummary> {
        let digest = entity_digest(pk, rk, properties);
        let finished = match &self.current {
            Some((current, ..)) if current == pk => None,
            _ => self.finish(),
        };
        let (_, count, hash) = self
            .current
            .get_or_insert_with(|| (pk.to_owned(), 0, Sha256::new()));
        *count += 1;
        hash.update(digest);
        finished
    }

    /// The last partition's summary, if any.
    pub(crate) fn finish(&mut self) -> Option<PartitionSummary> {
        self.current
            .take()
            .map(|(pk, count, hash)| PartitionSummary {
                pk,
                count,
                digest: hash.finalize().into(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablekit::core::edm::parse_datetime;

    #[test]
    fn the_digest_sees_types_values_and_keys_but_not_property_order() {
        let a = Properties::new().with("A", 1_i32).with("B", "x");
        let b = Properties::new().with("B", "x").with("A", 1_i32);
        assert_eq!(entity_digest("p", "r", &a), entity_digest("p", "r", &b));
        let int64 = Properties::new().with("A", 1_i64).with("B", "x");
        assert_ne!(entity_digest("p", "r", &a), entity_digest("p", "r", &int64));
        assert_ne!(entity_digest("p", "r", &a), entity_digest("p", "r2", &a));
        assert_ne!(entity_digest("pr", "", &a), entity_digest("p", "r", &a));
        let t1 = parse_datetime("2026-01-01T00:00:00.0000001Z").unwrap();
        let t2 = parse_datetime("2026-01-01T00:00:00.0000002Z").unwrap();
        assert_ne!(
            entity_digest("p", "r", &Properties::new().with("T", t1)),
            entity_digest("p", "r", &Properties::new().with("T", t2))
        );
        assert_eq!(ticks(&parse_datetime("0001-01-01T00:00:00Z").unwrap()), 0);
    }

    #[test]
    fn entities_fold_into_one_summary_per_partition() {
        let p = Properties::new();
        let mut s = Summarizer::default();
        assert_eq!(s.add("a", "1", &p), None);
        assert_eq!(s.add("a", "2", &p), None);
        let a = s.add("b", "1", &p).unwrap();
        assert_eq!((a.pk.as_str(), a.count), ("a", 2));
        let b = s.finish().unwrap();
        assert_eq!((b.pk.as_str(), b.count), ("b", 1));
        assert_eq!(s.finish(), None);
    }
}
