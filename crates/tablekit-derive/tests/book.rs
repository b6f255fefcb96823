//! The code of the book's "Typed entities" chapter, run as a test.

use tablekit::core::edm::to_entity_json;
use tablekit::core::{AsEntity, Error, IntoKeys, Keys, TableEntity as _};

// ANCHOR: model
use tablekit::TableEntity;

#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "empid_{id:06}")]
struct Employee {
    department: String,
    id: u32,
    email: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    manager: Option<u32>,
}
// ANCHOR_END: model

#[test]
fn the_chapter_code_runs() -> Result<(), Error> {
    // ANCHOR: keys
    let jones = Employee {
        department: "Sales".into(),
        id: 223,
        email: "jonesj@contoso.com".into(),
        manager: Some(17),
    };
    // The keys come from the fields; invalid text is a typed error, before any request.
    assert_eq!(jones.keys()?, Keys::new("Sales", "empid_000223")?);
    // Anything that names an entity's address can be turned into keys.
    assert_eq!(
        ("Sales", "empid_000223").into_keys()?,
        (&jones).into_keys()?
    );
    // ANCHOR_END: keys

    // ANCHOR: body
    // What a write sends: the computed keys, then every field under its PascalCase name.
    let (body, _) = to_entity_json(&jones.entity_keys()?, jones.entity_value())?;
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"PartitionKey":"Sales","RowKey":"empid_000223","Department":"Sales","Id@odata.type":"Edm.Int64","Id":"223","Email":"jonesj@contoso.com","Manager@odata.type":"Edm.Int64","Manager":"17"}"#
    );
    // ANCHOR_END: body

    // ANCHOR: filters
    // One constant per property: a typo does not compile, nor does `Employee::ID.eq("223")`.
    let managed_by_17 = Employee::DEPARTMENT
        .eq("Sales")
        .and(Employee::MANAGER.eq(17))
        .and(Employee::ID.lt(1000));
    assert_eq!(
        managed_by_17.render()?,
        "(Department eq 'Sales') and (Manager eq 17L) and (Id lt 1000L)"
    );
    // ANCHOR_END: filters
    Ok(())
}
