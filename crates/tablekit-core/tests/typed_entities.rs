//! Entities that know their keys: `TableEntity` implemented by hand, the ways to name keys
//! (`IntoKeys`), what writes accept (`AsEntity`), and typed property handles (`Property`).

use std::borrow::Cow;

use chrono::{TimeZone, Utc};
use serde::{Deserialize, Serialize};
use tablekit_core::edm::{Binary, to_entity_json};
use tablekit_core::filter::{CmpOp, Filter, Property};
use tablekit_core::keys::pad_number;
use tablekit_core::{AsEntity, Entity, Error, IntoKeys, KeyKind, Keys, Result, TableEntity};
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    department: String,
    id: u32,
    email: String,
}

impl TableEntity for Employee {
    fn keys(&self) -> Result<Keys> {
        Keys::new(&self.department, pad_number(u64::from(self.id), 6)?)
    }
}

fn employee(department: &str) -> Employee {
    Employee {
        department: department.into(),
        id: 223,
        email: "jonesj@contoso.com".into(),
    }
}

/// What a read or delete method taking `impl IntoKeys` sees.
fn address(keys: impl IntoKeys) -> Result<Keys> {
    keys.into_keys()
}

#[test]
fn every_form_of_keys_names_the_same_entity() {
    let keys = Keys::new("Sales", "000223").unwrap();
    let (pk, rk) = (String::from("Sales"), String::from("000223"));
    let e = employee("Sales");
    for found in [
        address(keys.clone()),
        address(&keys),
        address(("Sales", "000223")),
        address((pk.clone(), rk.clone())),
        address((&pk, &rk)),
        address(("Sales", format!("{:06}", 223))),
        address(&e),
    ] {
        assert_eq!(found.unwrap(), keys);
    }
}

#[test]
fn invalid_keys_are_refused_with_the_typed_error() {
    for result in [
        address(("Sales", "a/b")),
        address((String::from("Sales"), String::from("a/b"))),
    ] {
        match result {
            Err(Error::InvalidKey {
                kind,
                character,
                position,
                ..
            }) => assert_eq!((kind, character, position), (KeyKind::RowKey, '/', 1)),
            other => panic!("{other:?}"),
        }
    }
    match address(&employee("Sales#1")) {
        Err(Error::InvalidKey { kind, .. }) => assert_eq!(kind, KeyKind::PartitionKey),
        other => panic!("{other:?}"),
    }
}

/// What a write method taking `&impl AsEntity` does with it.
fn body<E: AsEntity + ?Sized>(entity: &E) -> Result<String> {
    let (json, _) = to_entity_json(&entity.entity_keys()?, entity.entity_value())?;
    Ok(String::from_utf8(json).unwrap())
}

#[test]
fn an_entity_and_a_table_entity_write_the_same_body() {
    let e = employee("Sales");
    let explicit = Entity::new(e.keys().unwrap(), e.clone());
    assert_eq!(body(&e).unwrap(), body(&explicit).unwrap());
    assert_eq!(
        body(&e).unwrap(),
        r#"{"PartitionKey":"Sales","RowKey":"000223","Department":"Sales","Id@odata.type":"Edm.Int64","Id":"223","Email":"jonesj@contoso.com"}"#
    );
    // An `Entity` keeps accepting values that are not table entities, such as maps.
    let map = Entity::new(
        Keys::new("p", "r").unwrap(),
        std::collections::BTreeMap::from([("Color", "blue")]),
    );
    assert_eq!(
        body(&map).unwrap(),
        r#"{"PartitionKey":"p","RowKey":"r","Color":"blue"}"#
    );
    // Bad keys stop the write before a body exists.
    assert!(matches!(
        body(&employee("a?b")),
        Err(Error::InvalidKey { .. })
    ));
}

#[test]
fn properties_compare_with_values_of_their_stored_type() {
    const NAME: Property<String> = Property::new("Name");
    const SMALL: Property<i32> = Property::new("Small");
    const BIG: Property<i64> = Property::new("Big");
    const COUNT: Property<u32> = Property::new("Count");
    const LEVEL: Property<u8> = Property::new("Level");
    const RATIO: Property<f64> = Property::new("Ratio");
    const ACTIVE: Property<bool> = Property::new("Active");
    const AT: Property<chrono::DateTime<Utc>> = Property::new("At");
    const BADGE: Property<Uuid> = Property::new("Badge");
    const PHOTO: Property<Vec<u8>> = Property::new("Photo");
    const THUMB: Property<Binary> = Property::new("Thumb");
    const NICK: Property<Option<String>> = Property::new("Nick");
    const AGE: Property<Option<u32>> = Property::new("Age");

    let at = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
    let owned = String::from("b");
    let cases = [
        (NAME.eq("O'Brien"), "Name eq 'O''Brien'"),
        (NAME.ne(owned.clone()), "Name ne 'b'"),
        (NAME.gt(&owned), "Name gt 'b'"),
        (NAME.ge(Cow::Borrowed("c")), "Name ge 'c'"),
        // Unsuffixed literals take the property's type.
        (SMALL.lt(5), "Small lt 5"),
        (BIG.le(5), "Big le 5L"),
        (COUNT.eq(4_000_000_000), "Count eq 4000000000L"),
        (LEVEL.eq(3), "Level eq 3"),
        (RATIO.gt(0.5), "Ratio gt 0.5"),
        (ACTIVE.eq(true), "Active eq true"),
        (AT.ge(at), "At ge datetime'2026-11-22T10:00:00.0000000Z'"),
        (
            BADGE.eq(Uuid::from_u128(1)),
            "Badge eq guid'00000000-0000-0000-0000-000000000001'",
        ),
        (PHOTO.eq(vec![1u8, 255]), "Photo eq X'01ff'"),
        (THUMB.eq(&[0u8][..]), "Thumb eq X'00'"),
        (NICK.eq("JJ"), "Nick eq 'JJ'"),
        (AGE.ge(30), "Age ge 30L"),
        (
            NAME.compare(CmpOp::Le, "z").and(COUNT.ne(0)),
            "(Name le 'z') and (Count ne 0L)",
        ),
    ];
    for (filter, expected) in cases {
        assert_eq!(filter.render().unwrap(), expected);
    }
    // The typed comparison builds exactly the untyped one.
    assert_eq!(COUNT.eq(7), Filter::eq("Count", 7u32));
}

#[test]
fn a_property_handle_is_a_copyable_name() {
    const EMAIL: Property<String> = Property::new("Email");
    let copy = EMAIL;
    assert_eq!(copy, EMAIL);
    assert_eq!(EMAIL.name(), "Email");
    assert_eq!(format!("{EMAIL:?}"), r#"Property("Email")"#);
    // A handle is Copy even for a type that is not.
    fn is_copy<T: Copy + Send + Sync>(_: T) {}
    is_copy(Property::<Vec<String>>::new("Tags"));
    // A malformed name is refused when the filter is rendered, as with `Filter::eq`.
    let bad: Property<String> = Property::new("E-mail");
    assert!(matches!(
        bad.eq("x").render(),
        Err(Error::InvalidName { .. })
    ));
}
