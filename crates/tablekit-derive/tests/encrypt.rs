//! `#[table(encrypt)]`: the fields marked for client-side encryption, listed by their stored
//! property names in `TableEntity::encrypted_properties`.

use tablekit::TableEntity;
use tablekit::core::TableEntity as _;

#[derive(Debug, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    #[table(encrypt)]
    email: String,
    #[table(encrypt)]
    #[serde(rename = "Home")]
    home_address: Option<String>,
    first_name: String,
}

#[derive(Debug, TableEntity)]
#[table(
    partition_key = "{department}",
    row_key = "{id:06}",
    rename_all = "camelCase"
)]
struct Camel {
    department: String,
    id: u32,
    #[table(encrypt)]
    home_address: String,
}

#[derive(Debug, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Plain {
    department: String,
    id: u32,
}

#[test]
fn marked_fields_are_listed_under_their_property_names() {
    assert_eq!(Employee::encrypted_properties(), ["Email", "Home"]);
    assert_eq!(Camel::encrypted_properties(), ["homeAddress"]);
    assert!(Plain::encrypted_properties().is_empty());
}

#[derive(Debug, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Actions {
    department: String,
    id: u32,
    #[table(encrypt)]
    email: String,
    #[table(sign)]
    salary: i64,
    #[table(sign)]
    #[serde(rename = "Lvl")]
    level: u8,
    #[table(plain)]
    last_login: String,
    nickname: String,
}

#[test]
fn signed_and_plain_fields_are_listed_for_the_policy() {
    assert_eq!(Actions::encrypted_properties(), ["Email"]);
    assert_eq!(Actions::signed_properties(), ["Salary", "Lvl"]);
    assert_eq!(Actions::plain_properties(), ["LastLogin"]);
}
