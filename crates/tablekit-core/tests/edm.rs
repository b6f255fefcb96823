//! EDM typing: what ordinary serde types are written as, and that everything reads back —
//! including JSON written by other SDKs, with full, minimal or no metadata.

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tablekit_core::edm::{self, Binary, parse_entity, parse_page, to_entity_json};
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Keys, Limit, OrUnknown, Stored};
use uuid::Uuid;

fn keys() -> Keys {
    Keys::new("Sales", "000223").unwrap()
}

fn write<T: Serialize>(value: &T) -> Value {
    let (json, _) = to_entity_json(&keys(), value).unwrap();
    serde_json::from_slice(&json).unwrap()
}

/// Writes `value`, then reads it back as the service would return it (plus an etag).
fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(value: &T) -> Stored<T> {
    let (json, _) = to_entity_json(&keys(), value).unwrap();
    let mut obj: serde_json::Map<String, Value> = serde_json::from_slice(&json).unwrap();
    obj.insert("odata.etag".into(), "W/\"1\"".into());
    obj.insert("Timestamp".into(), "2026-11-22T10:00:00.1234567Z".into());
    obj.insert("Timestamp@odata.type".into(), "Edm.DateTime".into());
    parse_entity(&serde_json::to_vec(&obj).unwrap(), None).unwrap()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Everything {
    name: String,
    age: i32,
    big: i64,
    small: u16,
    count: u32,
    ratio: f64,
    active: bool,
    hired: DateTime<Utc>,
    id: Uuid,
    photo: Vec<u8>,
    #[serde(with = "serde_bytes")]
    thumb: Vec<u8>,
    nickname: Option<String>,
    level: Level,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum Level {
    Junior,
    Senior,
}

fn everything() -> Everything {
    Everything {
        name: "Jun O'Cao \"\\ é 東京".into(),
        age: 47,
        big: 5_000_000_000,
        small: 7,
        count: 4_000_000_000,
        ratio: 1.0,
        active: true,
        hired: Utc.with_ymd_and_hms(2014, 8, 22, 0, 50, 32).unwrap()
            + chrono::Duration::nanoseconds(1_234_500),
        id: Uuid::parse_str("a1b2c3d4-0000-4000-8000-00000000abcd").unwrap(),
        photo: vec![0, 1, 2, 255],
        thumb: b"0123456789".to_vec(),
        nickname: None,
        level: Level::Senior,
    }
}

#[test]
fn ordinary_types_are_written_with_the_annotations_other_sdks_expect() {
    let json = write(&everything());
    assert_eq!(json["PartitionKey"], "Sales");
    assert_eq!(json["RowKey"], "000223");
    assert_eq!(json["Big"], "5000000000");
    assert_eq!(json["Big@odata.type"], "Edm.Int64");
    assert_eq!(json["Count"], "4000000000");
    assert_eq!(json["Count@odata.type"], "Edm.Int64");
    assert_eq!(json["Age"], 47);
    assert!(
        json.get("Age@odata.type").is_none(),
        "Int32 needs no annotation"
    );
    assert_eq!(json["Ratio@odata.type"], "Edm.Double");
    assert_eq!(json["Hired"], "2014-08-22T00:50:32.0012345Z");
    assert_eq!(json["Hired@odata.type"], "Edm.DateTime");
    assert_eq!(json["Id"], "a1b2c3d4-0000-4000-8000-00000000abcd");
    assert_eq!(json["Id@odata.type"], "Edm.Guid");
    assert_eq!(json["Photo"], "AAEC/w==");
    assert_eq!(json["Photo@odata.type"], "Edm.Binary");
    assert_eq!(json["Thumb@odata.type"], "Edm.Binary");
    assert_eq!(json["Level"], "Senior");
    assert!(json.get("Nickname").is_none(), "None omits the property");
    assert_eq!(json["Name"], "Jun O'Cao \"\\ é 東京");
}

#[test]
fn everything_reads_back_exactly() {
    let value = everything();
    let stored = round_trip(&value);
    assert_eq!(stored.value, value);
    assert_eq!(stored.keys, keys());
    assert_eq!(stored.etag.as_str(), "W/\"1\"");
    assert_eq!(
        stored.timestamp.unwrap().timestamp_subsec_nanos(),
        123_456_700
    );
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct N {
    n: i64,
}

#[test]
fn int64_extremes_and_beyond_2_pow_53_round_trip() {
    for n in [i64::MIN, i64::MAX, (1 << 53) + 1, -(1 << 53) - 1, 0, -1] {
        assert_eq!(round_trip(&N { n }).value.n, n);
    }
}

#[test]
fn python_sdk_int64_json_reads_into_i64() {
    let json = br#"{"odata.etag":"W/\"x\"","PartitionKey":"p","RowKey":"r","n@odata.type":"Edm.Int64","n":"5000000000"}"#;
    let stored: Stored<N> = parse_entity(json, None).unwrap();
    assert_eq!(stored.value.n, 5_000_000_000);
}

#[test]
fn full_and_no_metadata_responses_read_too() {
    // Full metadata, as the .NET SDK and the raw Rust SDK request it.
    let full =
        br#"{"odata.type":"acct.Emp","odata.id":"https://x/Emp(PartitionKey='p',RowKey='r')",
        "odata.etag":"W/\"x\"","odata.editLink":"Emp(PartitionKey='p',RowKey='r')",
        "PartitionKey":"p","RowKey":"r","Timestamp@odata.type":"Edm.DateTime",
        "Timestamp":"2026-01-01T00:00:00Z","n@odata.type":"Edm.Int64","n":"-7"}"#;
    assert_eq!(parse_entity::<N>(full, None).unwrap().value.n, -7);
    // No metadata: no annotations at all, the ETag comes from the header.
    let none = br#"{"PartitionKey":"p","RowKey":"r","n":"123456789012"}"#;
    let stored = parse_entity::<N>(none, Some("W/\"h\"")).unwrap();
    assert_eq!(
        (stored.value.n, stored.etag.as_str()),
        (123_456_789_012, "W/\"h\"")
    );
    // Without an ETag anywhere, the read is refused with a clear reason.
    let err = parse_entity::<N>(none, None).unwrap_err();
    assert!(err.to_string().contains("ETag"), "{err}");
}

#[test]
fn datetimes_keep_100ns_precision() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct D {
        at: DateTime<Utc>,
    }
    let at = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap()
        + chrono::Duration::nanoseconds(123_456_700);
    assert_eq!(round_trip(&D { at }).value.at, at);
    for at in [edm::min_datetime(), edm::max_datetime()] {
        assert_eq!(round_trip(&D { at }).value.at, at);
    }
    let too_early = Utc.with_ymd_and_hms(1600, 12, 31, 23, 59, 59).unwrap();
    let err = to_entity_json(&keys(), &D { at: too_early }).unwrap_err();
    assert!(
        matches!(&err, Error::Encode { property, .. } if property == "at"),
        "{err}"
    );
}

#[test]
fn unrepresentable_values_are_typed_errors() {
    #[derive(Serialize)]
    struct U {
        u: u64,
    }
    let err = to_entity_json(&keys(), &U { u: u64::MAX }).unwrap_err();
    assert!(
        matches!(&err, Error::Encode { property, .. } if property == "u"),
        "{err}"
    );
    assert!(to_entity_json(&keys(), &U { u: i64::MAX as u64 }).is_ok());

    #[derive(Serialize)]
    struct Nested {
        inner: N,
    }
    let err = to_entity_json(&keys(), &Nested { inner: N { n: 1 } }).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("inner") && text.contains("edm::json"),
        "{text}"
    );

    #[derive(Serialize)]
    struct Spaces {
        #[serde(rename = "Manager Rating")]
        rating: i32,
    }
    assert!(matches!(
        to_entity_json(&keys(), &Spaces { rating: 1 }),
        Err(Error::InvalidName { .. })
    ));

    #[derive(Serialize)]
    struct Reserved {
        #[serde(rename = "Timestamp")]
        ts: i32,
    }
    assert!(matches!(
        to_entity_json(&keys(), &Reserved { ts: 1 }),
        Err(Error::InvalidName { .. })
    ));
}

#[test]
fn special_doubles_are_stored_and_read() {
    #[derive(Debug, Serialize, Deserialize)]
    struct F {
        f: f64,
    }
    for f in [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        1e-300,
        f64::MAX,
    ] {
        let back = round_trip(&F { f }).value.f;
        assert!(
            back.to_bits() == f.to_bits() || (f.is_nan() && back.is_nan()),
            "{f} -> {back}"
        );
    }
}

#[test]
fn a_16_byte_binary_needs_the_binary_wrapper() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct B {
        digest: Binary,
        raw: [u8; 16],
    }
    let value = B {
        digest: Binary(vec![7; 16]),
        raw: [9; 16],
    };
    let json = write(&value);
    assert_eq!(json["digest@odata.type"], "Edm.Binary");
    assert_eq!(
        json["raw@odata.type"], "Edm.Binary",
        "arrays serialize element-wise, not as Guid"
    );
    assert_eq!(round_trip(&value).value, value);
}

#[test]
fn guids_read_as_strings_and_strings_never_become_guids() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct S {
        id: String,
        when: String,
    }
    let value = S {
        id: "a1b2c3d4-0000-4000-8000-00000000abcd".into(),
        when: "2026-11-22T10:00:00Z".into(),
    };
    let json = write(&value);
    assert!(
        json.get("id@odata.type").is_none() && json.get("when@odata.type").is_none(),
        "{json}"
    );
    assert_eq!(round_trip(&value).value, value);

    #[derive(Debug, Serialize)]
    struct G {
        id: Uuid,
    }
    let id = Uuid::new_v4();
    let (json, _) = to_entity_json(&keys(), &G { id }).unwrap();
    let mut v: serde_json::Map<String, Value> = serde_json::from_slice(&json).unwrap();
    v.insert("odata.etag".into(), "e".into());
    let as_string: Stored<S2> = parse_entity(&serde_json::to_vec(&v).unwrap(), None).unwrap();
    assert_eq!(as_string.value.id, id.to_string());
}

#[derive(Deserialize)]
struct S2 {
    id: String,
}

#[test]
fn nested_values_go_through_the_json_adapter() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Tags {
        #[serde(with = "tablekit_core::edm::json")]
        tags: Vec<String>,
    }
    let value = Tags {
        tags: vec!["a".into(), "b'c".into()],
    };
    assert_eq!(write(&value)["tags"], r#"["a","b'c"]"#);
    assert_eq!(round_trip(&value).value, value);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "EntityType")]
enum AnyEntity {
    Employee {
        #[serde(rename = "FirstName")]
        first_name: String,
        #[serde(rename = "Salary")]
        salary: i64,
    },
    Department {
        #[serde(rename = "DepartmentName")]
        name: String,
        #[serde(rename = "EmployeeCount")]
        count: i32,
    },
}

#[test]
fn heterogeneous_tables_work_with_internally_tagged_enums() {
    let employee = AnyEntity::Employee {
        first_name: "Don".into(),
        salary: 9_007_199_254_740_993,
    };
    let department = AnyEntity::Department {
        name: "Marketing".into(),
        count: 153,
    };
    assert_eq!(write(&employee)["EntityType"], "Employee");
    assert_eq!(round_trip(&employee).value, employee);
    assert_eq!(round_trip(&department).value, department);

    // Unknown entity types fall back to a property bag instead of failing the whole read.
    let other = Properties::new()
        .with("EntityType", "Project")
        .with("Budget", 5_000_000_000i64);
    let read = round_trip(&OrUnknown::<AnyEntity>::Unknown(other.clone())).value;
    assert_eq!(read, OrUnknown::Unknown(other));
    let read = round_trip(&OrUnknown::Known(department.clone())).value;
    assert_eq!(read, OrUnknown::Known(department));
}

#[test]
fn the_property_bag_keeps_every_type() {
    let bag = Properties::new()
        .with("s", "2026-11-22T10:00:00Z")
        .with("i", 5)
        .with("l", 5i64)
        .with("d", 2.0)
        .with("b", false)
        .with("t", Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap())
        .with("g", Uuid::nil())
        .with("x", vec![1u8; 16]);
    let back = round_trip(&bag).value;
    assert_eq!(back, bag);
    assert_eq!(back.get("l"), Some(&EdmValue::Int64(5)));
    assert_eq!(
        back.get("s"),
        Some(&EdmValue::String("2026-11-22T10:00:00Z".into()))
    );
    // And a typed value converts to a bag and back.
    let props = edm::to_properties(&everything()).unwrap();
    assert_eq!(props.get("Big"), Some(&EdmValue::Int64(5_000_000_000)));
    assert_eq!(
        edm::from_properties::<Everything>(&props).unwrap(),
        everything()
    );
}

#[test]
fn a_query_page_reads_in_order_and_names_a_bad_entity() {
    let body = br#"{"odata.metadata":"x","value":[
        {"odata.etag":"e1","PartitionKey":"p","RowKey":"1","n@odata.type":"Edm.Int64","n":"1"},
        {"odata.etag":"e2","PartitionKey":"p","RowKey":"2","n":2}]}"#;
    let page: Vec<Stored<N>> = parse_page(body).unwrap();
    assert_eq!(
        page.iter()
            .map(|s| (s.keys.rk(), s.value.n))
            .collect::<Vec<_>>(),
        [("1", 1), ("2", 2)]
    );
    let bad = br#"{"value":[{"odata.etag":"e","PartitionKey":"p","RowKey":"9","n":"x"}]}"#;
    let err = parse_page::<N>(bad).unwrap_err().to_string();
    assert!(err.contains("`n`") && err.contains("\"9\""), "{err}");
    let empty: Vec<Stored<N>> = parse_page(br#"{"value":[]}"#).unwrap();
    assert!(empty.is_empty());
}

fn size_of(value: &impl Serialize) -> Result<usize, Error> {
    to_entity_json(&Keys::new("", "").unwrap(), value).map(|(_, stats)| stats.size_bytes)
}

#[test]
fn property_count_limit_is_exact() {
    let props = |n: usize| {
        (0..n)
            .map(|i| (format!("P{i}"), EdmValue::Int32(1)))
            .collect::<Properties>()
    };
    assert!(size_of(&props(252)).is_ok());
    assert!(matches!(
        size_of(&props(253)),
        Err(Error::LimitExceeded {
            limit: Limit::UserProperties,
            actual: 253
        })
    ));
}

#[test]
fn property_size_limits_are_exact_and_count_utf16() {
    let s = |units: usize| Properties::new().with("s", "a".repeat(units));
    assert!(size_of(&s(32_768)).is_ok(), "64 KiB of UTF-16");
    assert!(matches!(
        size_of(&s(32_769)),
        Err(Error::LimitExceeded {
            limit: Limit::PropertyBytes { .. },
            actual: 65_538
        })
    ));
    // 16,384 emoji are 32,768 UTF-16 units: still exactly 64 KiB.
    assert!(size_of(&Properties::new().with("s", "😀".repeat(16_384))).is_ok());
    let b = |len: usize| Properties::new().with("b", vec![0u8; len]);
    assert!(size_of(&b(65_536)).is_ok());
    assert!(matches!(
        size_of(&b(65_537)),
        Err(Error::LimitExceeded { actual: 65_537, .. })
    ));
}

#[test]
fn entity_size_limit_is_exact() {
    // Size = 4 (empty keys) + Σ (8 + 2·|name| + 4 + len) for binary properties.
    let build = |total: usize| {
        let mut props = Properties::new();
        let mut remaining = total - 4;
        let mut i = 0;
        while remaining > 0 {
            let name = format!("B{i:02}");
            let overhead = 8 + 2 * name.len() + 4;
            let len = (remaining - overhead).min(65_536);
            props.insert(name, vec![0u8; len]);
            remaining -= overhead + len;
            i += 1;
        }
        props
    };
    assert_eq!(size_of(&build(1 << 20)).unwrap(), 1 << 20);
    assert!(matches!(
        size_of(&build((1 << 20) + 1)),
        Err(Error::LimitExceeded { limit: Limit::EntityBytes, actual }) if actual == (1 << 20) + 1
    ));
}

fn edm_datetime() -> impl Strategy<Value = DateTime<Utc>> {
    let min = edm::min_datetime().timestamp();
    let max = edm::max_datetime().timestamp();
    (min..=max, 0u32..10_000_000)
        .prop_map(|(s, ticks)| DateTime::from_timestamp(s, ticks * 100).unwrap())
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Arbitrary {
    s: String,
    l: i64,
    i: i32,
    f: f64,
    t: DateTime<Utc>,
    g: Uuid,
    #[serde(with = "serde_bytes")]
    b: Vec<u8>,
}

proptest! {
    #[test]
    fn arbitrary_values_round_trip(
        s in any::<String>(),
        l in any::<i64>(),
        i in any::<i32>(),
        f in any::<f64>().prop_filter("NaN != NaN", |f| !f.is_nan()),
        t in edm_datetime(),
        g in any::<u128>(),
        b in proptest::collection::vec(any::<u8>(), 0..64).prop_filter("16 bytes read as Guid", |b| b.len() != 16),
    ) {
        let value = Arbitrary { s, l, i, f, t, g: Uuid::from_u128(g), b };
        prop_assert_eq!(round_trip(&value).value, value);
    }
}

#[test]
fn an_unbounded_bag_skips_only_the_entity_limits() {
    let days: std::collections::BTreeMap<String, i64> =
        (1..=365).map(|d| (format!("D{d:03}"), d)).collect();
    assert!(matches!(
        edm::to_properties(&days),
        Err(Error::LimitExceeded {
            limit: Limit::UserProperties,
            actual: 365
        })
    ));
    let bag = edm::to_properties_unbounded(&days).unwrap();
    assert_eq!(bag.len(), 365);
    assert_eq!(bag.get("D365"), Some(&EdmValue::Int64(365)));
    let big: std::collections::BTreeMap<String, String> = (0..20)
        .map(|i| (format!("P{i:02}"), "x".repeat(32 * 1024)))
        .collect();
    assert!(edm::to_properties(&big).is_err(), "over 1 MiB");
    assert_eq!(edm::to_properties_unbounded(&big).unwrap().len(), 20);
    // Per-property rules still hold.
    let too_long = Properties::new().with("S", "x".repeat(32 * 1024 + 1));
    assert!(matches!(
        edm::to_properties_unbounded(&too_long),
        Err(Error::LimitExceeded {
            limit: Limit::PropertyBytes { .. },
            ..
        })
    ));
    let bad_name = Properties::new().with("a-b", 1);
    assert!(edm::to_properties_unbounded(&bad_name).is_err());
}

#[test]
fn map_keys_must_be_strings() {
    let by_number: std::collections::BTreeMap<u32, i32> = [(1, 2)].into();
    let err = to_entity_json(&keys(), &by_number).unwrap_err();
    assert!(
        matches!(&err, Error::Encode { reason, .. } if reason.contains("map keys")),
        "{err}"
    );
    let by_name: std::collections::BTreeMap<String, i32> = [("Count".to_owned(), 2)].into();
    assert!(to_entity_json(&keys(), &by_name).is_ok());
}

#[test]
fn or_unknown_falls_back_only_for_a_missing_or_unknown_entity_type() {
    let read = |props: Properties| {
        let (json, _) = to_entity_json(&keys(), &props).unwrap();
        parse_entity::<OrUnknown<AnyEntity>>(&json, Some("W/\"1\"")).map(|s| s.value)
    };
    // A type the enum does not know, or no discriminator at all: a property bag.
    let project = Properties::new()
        .with("EntityType", "Project")
        .with("Budget", 5_000_000_000i64);
    assert_eq!(read(project.clone()).unwrap(), OrUnknown::Unknown(project));
    let untyped = Properties::new().with("Budget", 5i64);
    assert_eq!(read(untyped.clone()).unwrap(), OrUnknown::Unknown(untyped));

    // A type it knows whose data does not fit: a decode error naming the entity, not a silent
    // fallback that would let a reader skip broken data. (Serde reads a tagged enum's fields
    // from a buffer, so a field of the wrong type is not named; a missing one is.)
    let broken = Properties::new()
        .with("EntityType", "Employee")
        .with("FirstName", "Don")
        .with("Salary", "a lot");
    let err = read(broken).unwrap_err();
    assert_eq!(err.kind(), tablekit_core::ErrorKind::Decode, "{err}");
    match &err {
        Error::Decode { target, .. } => {
            assert_eq!(target.keys.as_deref(), Some(&keys()), "{err}");
        }
        other => panic!("{other:?}"),
    }
    let incomplete = Properties::new()
        .with("EntityType", "Department")
        .with("DepartmentName", "Marketing");
    let err = read(incomplete).unwrap_err();
    assert!(
        matches!(&err, Error::Decode { property, .. } if property == "EmployeeCount"),
        "{err}"
    );
}

#[test]
fn a_read_that_does_not_fit_is_a_decode_error_naming_the_keys() {
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Wanted {
        n: i64,
    }
    let body = br#"{"PartitionKey":"Sales","RowKey":"000223","odata.etag":"W/\"1\"","n":"seven"}"#;
    let err = parse_entity::<Wanted>(body, None).unwrap_err();
    assert_eq!(err.kind(), tablekit_core::ErrorKind::Decode);
    match &err {
        Error::Decode {
            target, property, ..
        } => {
            assert_eq!(property, "n");
            assert_eq!(
                target.keys.as_deref(),
                Some(&Keys::new("Sales", "000223").unwrap())
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("000223"), "{err}");
    let missing = br#"{"PartitionKey":"Sales","RowKey":"000223","odata.etag":"W/\"1\""}"#;
    let err = parse_entity::<Wanted>(missing, None).unwrap_err();
    assert!(
        matches!(&err, Error::Decode { property, .. } if property == "n"),
        "{err}"
    );
}

#[test]
fn a_null_property_reads_as_absent_in_a_bag() {
    // Azure answers a projection naming a property an entity lacks with that property as
    // null (Azurite leaves it out); the service never stores a null, so it is absent.
    let page = br#"{"value":[{"odata.etag":"W/\"1\"","PartitionKey":"p","RowKey":"r","Email":"a@b.example","Nickname":null}]}"#;
    let rows = tablekit_core::edm::parse_page::<Properties>(page).unwrap();
    assert_eq!(
        rows[0].value,
        Properties::new().with("Email", "a@b.example")
    );
    let one = br#"{"odata.etag":"W/\"1\"","PartitionKey":"p","RowKey":"r","Nickname":null}"#;
    let entity = tablekit_core::edm::parse_entity::<Properties>(one, None).unwrap();
    assert!(entity.value.is_empty());
}
