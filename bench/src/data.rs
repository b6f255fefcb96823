//! The benchmark entity: about 500 bytes on the wire, ten properties of mixed EDM types.

use base64::Engine as _;
use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The entity as tablekit writes it (typed: Int64, DateTime, Guid, Binary annotations).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Record {
    pub(crate) name: String,
    pub(crate) email: String,
    pub(crate) age: i32,
    pub(crate) salary: i64,
    pub(crate) score: f64,
    pub(crate) active: bool,
    pub(crate) hired: DateTime<Utc>,
    pub(crate) id: Uuid,
    pub(crate) code: Vec<u8>,
    pub(crate) notes: String,
}

/// The same data as a raw-SDK user writes it: keys inside the struct, bytes as base64 text
/// (the SDK would send a `Vec<u8>` as a JSON array, which the service refuses).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct RawRecord {
    pub(crate) partition_key: String,
    pub(crate) row_key: String,
    pub(crate) name: String,
    pub(crate) email: String,
    pub(crate) age: i32,
    // The 0.21 SDK cannot read an Edm.Int64 (a JSON string) into an i64: a careful raw-SDK
    // user adds this.
    #[serde(deserialize_with = "int64")]
    pub(crate) salary: i64,
    pub(crate) score: f64,
    pub(crate) active: bool,
    pub(crate) hired: DateTime<Utc>,
    pub(crate) id: Uuid,
    pub(crate) code: String,
    pub(crate) notes: String,
}

fn int64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Number(i64),
        Text(String),
    }
    match Either::deserialize(d)? {
        Either::Number(n) => Ok(n),
        Either::Text(t) => t.parse().map_err(serde::de::Error::custom),
    }
}

pub(crate) fn record(i: usize) -> Record {
    Record {
        name: format!("Employee {i:08}"),
        email: format!("employee{i:08}@contoso.com"),
        age: 20 + (i % 45) as i32,
        salary: 50_000_000_000 + i as i64,
        score: i as f64 / 7.0,
        active: i % 3 != 0,
        hired: Utc
            .with_ymd_and_hms(2014, 8, 22, 0, 50, 32)
            .single()
            .unwrap_or_default()
            + chrono::Duration::seconds(i as i64),
        id: Uuid::from_u128(0x1234_5678_9abc_def0_0000_0000_0000_0000 + i as u128),
        code: (0..32).map(|b| (b as u8).wrapping_mul(i as u8)).collect(),
        notes: "n".repeat(230),
    }
}

pub(crate) fn raw_record(pk: &str, rk: &str, i: usize) -> RawRecord {
    let r = record(i);
    RawRecord {
        partition_key: pk.to_owned(),
        row_key: rk.to_owned(),
        name: r.name,
        email: r.email,
        age: r.age,
        salary: r.salary,
        score: r.score,
        active: r.active,
        hired: r.hired,
        id: r.id,
        code: base64::engine::general_purpose::STANDARD.encode(&r.code),
        notes: r.notes,
    }
}

/// Partition and row key of entity `i` when `n` entities spread over `partitions`.
pub(crate) fn keys(i: usize, partitions: usize) -> (String, String) {
    (format!("p{:03}", i % partitions), format!("{i:08}"))
}
