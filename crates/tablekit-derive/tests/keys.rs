//! Key templates: literal text, Display, zero padding, ticks and inverted ticks, and the typed
//! errors of keys that cannot be stored.

use chrono::{DateTime, TimeZone, Utc};
use tablekit::TableEntity;
use tablekit::core::keys::{dotnet_ticks, from_inverted_ticks, inverted_ticks};
use tablekit::core::{AsEntity, Error, IntoKeys, KeyKind, Keys, Limit, TableEntity as _};

#[derive(Debug, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    email: String,
}

fn employee(department: &str, id: u32) -> Employee {
    Employee {
        department: department.into(),
        id,
        email: "jonesj@contoso.com".into(),
    }
}

#[test]
fn keys_come_from_the_fields_zero_padded() {
    assert_eq!(
        employee("Sales", 223).keys().unwrap(),
        Keys::new("Sales", "000223").unwrap()
    );
    // Padding keeps numeric order as text order.
    let (nine, ten) = (
        employee("S", 9).keys().unwrap(),
        employee("S", 10).keys().unwrap(),
    );
    assert!(nine.rk() < ten.rk());
}

#[test]
fn a_number_wider_than_its_padding_is_refused() {
    match employee("Sales", 1_000_000).keys() {
        Err(Error::LimitExceeded {
            limit: Limit::Custom { max, .. },
            actual,
        }) => assert_eq!((max, actual), (6, 7)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_field_with_a_forbidden_character_is_a_typed_key_error() {
    match employee("Sales/EMEA", 1).keys() {
        Err(Error::InvalidKey {
            kind,
            character,
            position,
            ..
        }) => assert_eq!((kind, character, position), (KeyKind::PartitionKey, '/', 5)),
        other => panic!("{other:?}"),
    }
    match employee(&"x".repeat(513), 1).keys() {
        Err(Error::LimitExceeded {
            limit: Limit::KeyBytes(KeyKind::PartitionKey),
            actual,
        }) => assert_eq!(actual, 1026),
        other => panic!("{other:?}"),
    }
    // The same error, whichever way the keys are asked for.
    let bad = employee("a#b", 1);
    assert!(matches!((&bad).into_keys(), Err(Error::InvalidKey { .. })));
    assert!(matches!(bad.entity_keys(), Err(Error::InvalidKey { .. })));
}

#[derive(Debug, TableEntity)]
#[table(partition_key = "reviews", row_key = "empid_{id:06}_{year}")]
struct Review {
    id: u32,
    year: i32,
    rating: u8,
}

#[test]
fn compound_keys_are_templates() {
    let review = Review {
        id: 123,
        year: 2012,
        rating: 4,
    };
    assert_eq!(
        review.keys().unwrap(),
        Keys::new("reviews", "empid_000123_2012").unwrap()
    );
    assert_eq!(review.rating, 4);
}

#[derive(Debug, TableEntity)]
#[table(
    partition_key = "{user}_{{{at:ticks}}}",
    row_key = "{at:inverted_ticks}"
)]
struct Event {
    user: String,
    at: DateTime<Utc>,
}

#[test]
fn ticks_and_inverted_ticks_match_dotnet() {
    let at = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
    let event = Event {
        user: "u1".into(),
        at,
    };
    let keys = event.keys().unwrap();
    assert_eq!(keys.pk(), format!("u1_{{{:019}}}", dotnet_ticks(at)));
    assert_eq!(keys.pk(), "u1_{0639309384000000000}");
    assert_eq!(keys.rk(), "2516069591999999999");
    assert_eq!(keys.rk(), inverted_ticks(at));
    assert_eq!(from_inverted_ticks(keys.rk()).unwrap(), at);
    // Later events get smaller RowKeys: newest first.
    let later = Event {
        user: "u1".into(),
        at: at + chrono::Duration::seconds(1),
    };
    assert!(later.keys().unwrap().rk() < keys.rk());
}

#[test]
fn a_time_dotnet_cannot_represent_is_refused() {
    let event = Event {
        user: "u1".into(),
        at: DateTime::<Utc>::MAX_UTC,
    };
    match event.keys() {
        Err(Error::Encode { property, .. }) => assert_eq!(property, "At"),
        other => panic!("{other:?}"),
    }
}

#[derive(Debug, TableEntity)]
#[table(partition_key = "{balance:04}", row_key = "")]
struct Account {
    balance: i64,
}

#[test]
fn negative_numbers_are_not_zero_padded() {
    assert_eq!(
        Account { balance: 42 }.keys().unwrap(),
        Keys::new("0042", "").unwrap()
    );
    match (Account { balance: -42 }).keys() {
        Err(Error::Encode { property, reason }) => {
            assert_eq!(property, "Balance");
            assert!(reason.contains("negative"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
