//! Property bags against Azurite: a `Properties` of every EDM type written and read back keeps
//! each value's type, and the typed getters read what was written.

mod common;

use chrono::{TimeZone as _, Utc};
use tablekit_core::{EdmType, Entity, Keys, Properties};
use uuid::Uuid;

#[tokio::test]
async fn every_edm_type_round_trips_through_the_typed_getters() {
    let table = common::table("bags").await;
    let at = Utc.with_ymd_and_hms(2026, 11, 27, 10, 30, 15).unwrap()
        + chrono::Duration::microseconds(123_456);
    let guid = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    let written = Properties::new()
        .with("Name", "Jun Cao")
        .with("Age", 47_i32)
        .with("Salary", 9_007_199_254_740_993_i64)
        .with("Ratio", 3.0_f64)
        .with("Active", true)
        .with("Hired", at)
        .with("Badge", guid)
        .with("Photo", vec![0_u8, 1, 2, 254, 255]);
    let keys = Keys::new("Sales", "000223").unwrap();
    table
        .insert(&Entity::new(keys.clone(), &written))
        .await
        .unwrap();

    let read = table.get::<Properties>(&keys).await.unwrap().unwrap().value;
    assert_eq!(read, written, "every value keeps its EDM type");
    assert_eq!(read.get_str("Name").unwrap(), Some("Jun Cao"));
    assert_eq!(read.get_i32("Age"), Ok(Some(47)));
    assert_eq!(read.get_i64("Salary").unwrap(), Some(9_007_199_254_740_993));
    assert_eq!(read.get_f64("Ratio"), Ok(Some(3.0)));
    assert_eq!(
        read.get("Ratio").map(|v| v.edm_type()),
        Some(EdmType::Double)
    );
    assert_eq!(read.get_bool("Active"), Ok(Some(true)));
    assert_eq!(read.get_datetime("Hired"), Ok(Some(at)));
    assert_eq!(read.get_guid("Badge"), Ok(Some(guid)));
    assert_eq!(
        read.get_binary("Photo"),
        Ok(Some(&[0_u8, 1, 2, 254, 255][..]))
    );
    assert_eq!(read.get_i32("Nickname"), Ok(None), "absent is not an error");
    let wrong = read.get_i32("Salary").unwrap_err();
    assert_eq!(
        (wrong.property(), wrong.expected(), wrong.found()),
        ("Salary", EdmType::Int32, EdmType::Int64),
        "an Int64 that the service returned as an Int64 is not read as an Int32"
    );
    table.delete_table().await.unwrap();
}
