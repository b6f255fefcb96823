//! Property names as stored (PascalCase by default, renames, `rename_all`), round trips
//! through the EDM serializer, field serde attributes, and the property constants.

use chrono::{DateTime, TimeZone, Utc};
use tablekit::TableEntity;
use tablekit::core::edm::{self, field_names, from_properties, parse_entity, to_properties};
use tablekit::core::filter::{Filter, Property, Untyped};
use tablekit::core::{AsEntity, EdmValue, Keys, TableEntity as _};
use uuid::Uuid;

/// Public, so that the generated public constants must carry docs (`missing_docs` applies).
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
pub struct Employee {
    department: String,
    id: u32,
    first_name: String,
    #[serde(rename = "Mail")]
    email: String,
    hired: DateTime<Utc>,
    salary: i64,
    badge: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nickname: Option<String>,
    #[serde(with = "tablekit::core::edm::json")]
    skills: Vec<String>,
    #[serde(skip)]
    cached_score: u32,
}

fn employee() -> Employee {
    Employee {
        department: "Sales".into(),
        id: 223,
        first_name: "Jun".into(),
        email: "jonesj@contoso.com".into(),
        hired: Utc.with_ymd_and_hms(2014, 8, 22, 0, 50, 32).unwrap(),
        salary: 9_007_199_254_740_993,
        badge: Uuid::from_u128(0xa1b2_c3d4),
        nickname: None,
        skills: vec!["negotiation".into(), "excel".into()],
        cached_score: 0,
    }
}

#[test]
fn properties_are_pascal_case_and_typed_as_the_serializer_types_them() {
    let props = to_properties(&employee()).unwrap();
    let mut names: Vec<&str> = props.iter().map(|(name, _)| name).collect();
    names.sort_unstable();
    // Key fields are stored as properties too; skipped and `None` fields are not.
    assert_eq!(
        names,
        [
            "Badge",
            "Department",
            "FirstName",
            "Hired",
            "Id",
            "Mail",
            "Salary",
            "Skills"
        ]
    );
    assert_eq!(props.get("Id"), Some(&EdmValue::Int64(223)));
    assert_eq!(
        props.get("Salary"),
        Some(&EdmValue::Int64(9_007_199_254_740_993))
    );
    assert_eq!(
        props.get_str("Skills").unwrap(),
        Some(r#"["negotiation","excel"]"#)
    );
    assert!(matches!(props.get("Badge"), Some(EdmValue::Guid(_))));
    assert!(matches!(props.get("Hired"), Some(EdmValue::DateTime(_))));
}

#[test]
fn the_entity_body_carries_the_computed_keys_and_pascal_case_names() {
    let e = employee();
    let (json, stats) = edm::to_entity_json(&e.entity_keys().unwrap(), e.entity_value()).unwrap();
    let text = String::from_utf8(json).unwrap();
    assert!(
        text.starts_with(r#"{"PartitionKey":"Sales","RowKey":"000223","#),
        "{text}"
    );
    assert!(text.contains(r#""FirstName":"Jun""#), "{text}");
    assert!(
        text.contains(r#""Salary@odata.type":"Edm.Int64","Salary":"9007199254740993""#),
        "{text}"
    );
    assert!(!text.contains("cached_score") && !text.contains("CachedScore"));
    assert_eq!(stats.user_properties, 8);
}

#[test]
fn values_round_trip_through_properties_and_service_json() {
    let mut e = employee();
    e.nickname = Some("JJ".into());
    let back: Employee = from_properties(&to_properties(&e).unwrap()).unwrap();
    assert_eq!(back, e);

    // As another SDK returns it: keys, metadata and the same properties.
    let json = br#"{"odata.etag":"W/\"1\"","PartitionKey":"Sales","RowKey":"000223",
        "Timestamp":"2026-11-22T10:00:00Z","Department":"Sales","Id@odata.type":"Edm.Int64",
        "Id":"223","FirstName":"Jun","Mail":"jonesj@contoso.com",
        "Hired@odata.type":"Edm.DateTime","Hired":"2014-08-22T00:50:32Z",
        "Salary@odata.type":"Edm.Int64","Salary":"9007199254740993",
        "Badge@odata.type":"Edm.Guid","Badge":"00000000-0000-0000-0000-0000a1b2c3d4",
        "Skills":"[\"negotiation\",\"excel\"]"}"#;
    let stored = parse_entity::<Employee>(json, None).unwrap();
    assert_eq!(stored.value, employee());
    assert_eq!(stored.keys, stored.value.keys().unwrap());
}

#[test]
fn reads_use_the_stored_names_and_projections_select_them() {
    assert_eq!(
        field_names::<Employee>(),
        Some(
            &[
                "Department",
                "Id",
                "FirstName",
                "Mail",
                "Hired",
                "Salary",
                "Badge",
                "Nickname",
                "Skills",
            ][..]
        )
    );
}

#[test]
fn constants_name_the_stored_properties() {
    let constants: [&str; 9] = [
        Employee::DEPARTMENT.name(),
        Employee::ID.name(),
        Employee::FIRST_NAME.name(),
        Employee::EMAIL.name(),
        Employee::HIRED.name(),
        Employee::SALARY.name(),
        Employee::BADGE.name(),
        Employee::NICKNAME.name(),
        Employee::SKILLS.name(),
    ];
    let stored = field_names::<Employee>().unwrap();
    assert_eq!(&constants[..], stored);
    // The constants are typed by their fields.
    let _: Property<u32> = Employee::ID;
    let _: Property<Option<String>> = Employee::NICKNAME;
    // A field written through `with` has no typed comparisons until told its stored type.
    let _: Property<Untyped> = Employee::SKILLS;
}

#[test]
fn constants_build_filters_with_typed_literals() {
    let hired = Utc.with_ymd_and_hms(2014, 1, 1, 0, 0, 0).unwrap();
    let filter = Employee::DEPARTMENT
        .eq("Sales")
        .and(Employee::ID.ge(100))
        .and(Employee::EMAIL.ne(String::from("O'Brien@contoso.com")))
        .and(Employee::HIRED.lt(hired))
        .and(Employee::SALARY.gt(5_000_000_000))
        .and(Employee::NICKNAME.eq("JJ"))
        .and(Employee::BADGE.eq(Uuid::from_u128(1)));
    assert_eq!(
        filter.render().unwrap(),
        "(Department eq 'Sales') and (Id ge 100L) and (Mail ne 'O''Brien@contoso.com') \
         and (Hired lt datetime'2014-01-01T00:00:00.0000000Z') and (Salary gt 5000000000L) \
         and (Nickname eq 'JJ') and (Badge eq guid'00000000-0000-0000-0000-000000000001')"
    );
    // The same filter through the untyped constructors, with the stored names.
    assert_eq!(
        Employee::ID.le(7u32),
        Filter::le("Id", 7u32),
        "a u32 property compares as Edm.Int64, as it is stored"
    );
}

#[derive(Debug, PartialEq, TableEntity)]
#[table(partition_key = "p", row_key = "{row_id}", rename_all = "camelCase")]
struct Camel {
    row_id: String,
    total_count: i32,
}

#[derive(Debug, PartialEq, TableEntity)]
#[table(partition_key = "p", row_key = "{row_id}", rename_all = "as-is")]
struct AsIs {
    row_id: String,
    #[serde(rename = "Total")]
    total_count: i32,
}

#[test]
fn rename_all_changes_the_casing_and_field_renames_win() {
    let camel = to_properties(&Camel {
        row_id: "r".into(),
        total_count: 3,
    })
    .unwrap();
    assert_eq!(camel.get("totalCount"), Some(&EdmValue::Int32(3)));
    assert_eq!(Camel::TOTAL_COUNT.name(), "totalCount");
    assert_eq!(Camel::ROW_ID.name(), "rowId");

    let as_is = AsIs {
        row_id: "r".into(),
        total_count: 3,
    };
    let props = to_properties(&as_is).unwrap();
    assert_eq!(props.get_str("row_id").unwrap(), Some("r"));
    assert_eq!(props.get("Total"), Some(&EdmValue::Int32(3)));
    assert_eq!(AsIs::TOTAL_COUNT.name(), "Total");
    assert_eq!(from_properties::<AsIs>(&props).unwrap(), as_is);
}

#[derive(Debug, PartialEq, TableEntity)]
#[table(partition_key = "{kind}", row_key = "{id}")]
struct Split {
    kind: String,
    id: String,
    // Read from an older name, written under the new one.
    #[serde(rename(deserialize = "Legacy"))]
    current: i32,
    #[serde(with = "tablekit::core::edm::json")]
    #[table(property_type = "String")]
    tags: Vec<String>,
}

#[test]
fn one_sided_renames_and_typed_custom_fields() {
    let value = Split {
        kind: "k".into(),
        id: "1".into(),
        current: 5,
        tags: vec!["a".into()],
    };
    let props = to_properties(&value).unwrap();
    assert_eq!(props.get("Current"), Some(&EdmValue::Int32(5)));
    assert_eq!(Split::CURRENT.name(), "Current");
    let legacy = props.clone().with("Legacy", 5).without_property("Current");
    assert_eq!(from_properties::<Split>(&legacy).unwrap(), value);
    assert_eq!(
        Split::TAGS.eq(r#"["a"]"#).render().unwrap(),
        r#"Tags eq '["a"]'"#
    );
}

trait WithoutProperty {
    fn without_property(self, name: &str) -> Self;
}

impl WithoutProperty for tablekit::core::Properties {
    fn without_property(mut self, name: &str) -> Self {
        self.remove(name);
        self
    }
}

mod direct_core {
    //! A crate depending on tablekit-core alone points the derive at it.
    use tablekit_core::TableEntity as _;

    #[derive(Debug, PartialEq, tablekit::TableEntity)]
    #[table(crate = "tablekit_core", partition_key = "{pk}", row_key = "{rk}")]
    pub(crate) struct Direct {
        pk: String,
        rk: String,
    }

    #[test]
    fn the_core_path_can_be_overridden() {
        let d = Direct {
            pk: "a".into(),
            rk: "b".into(),
        };
        assert_eq!(
            d.keys().unwrap(),
            tablekit_core::Keys::new("a", "b").unwrap()
        );
        assert_eq!(Direct::PK.name(), "Pk");
    }
}

#[derive(Debug, PartialEq, TableEntity)]
#[table(partition_key = "{series}", row_key = "{index:04}")]
struct Sample<T> {
    series: String,
    index: u16,
    value: T,
}

#[derive(Debug, PartialEq, TableEntity)]
#[table(partition_key = "{series}", row_key = "{index:04}")]
// `default` on a generic field makes serde require `T: Default`: the struct states its bounds.
#[serde(bound(deserialize = "T: serde::Deserialize<'de> + Default"))]
struct Fixed<T: Copy = i32, const N: usize = 2>
where
    T: std::fmt::Debug,
{
    series: String,
    index: usize,
    #[serde(default)]
    first: Option<T>,
}

#[test]
fn generic_structs_are_supported() {
    let fixed: Fixed = Fixed {
        series: "s".into(),
        index: 12,
        first: Some(3),
    };
    assert_eq!(fixed.keys().unwrap(), Keys::new("s", "0012").unwrap());
    let back: Fixed<i32, 2> = from_properties(&to_properties(&fixed).unwrap()).unwrap();
    assert_eq!(back, fixed);
    assert_eq!(Fixed::<i32, 2>::FIRST.eq(3).render().unwrap(), "First eq 3");

    let sample = Sample {
        series: "cpu".into(),
        index: 7,
        value: 0.5f64,
    };
    assert_eq!(sample.keys().unwrap(), Keys::new("cpu", "0007").unwrap());
    let back: Sample<f64> = from_properties(&to_properties(&sample).unwrap()).unwrap();
    assert_eq!(back, sample);
    assert_eq!(
        Sample::<f64>::VALUE.gt(0.25).render().unwrap(),
        "Value gt 0.25"
    );
}

mod through_the_prelude {
    //! `use tablekit::prelude::*` brings both the derive and the trait of the same name.
    use tablekit::prelude::*;

    #[derive(Debug, TableEntity)]
    #[table(partition_key = "{r#type}", row_key = "{ref:03}")]
    pub(crate) struct Raw {
        r#type: String,
        r#ref: u8,
    }

    #[test]
    fn raw_identifiers_and_prelude_imports_work() {
        let raw = Raw {
            r#type: "t".into(),
            r#ref: 7,
        };
        assert_eq!(raw.keys().unwrap(), Keys::new("t", "007").unwrap());
        assert_eq!(Raw::TYPE.name(), "Type");
        assert_eq!(Raw::REF.eq(7).render().unwrap(), "Ref eq 7");
    }
}

#[derive(Debug, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
#[serde(tag = "EntityType")]
struct Tagged {
    department: String,
    id: String,
}

#[test]
fn a_serde_tag_writes_the_entity_type_discriminator() {
    let value = Tagged {
        department: "Sales".into(),
        id: "1".into(),
    };
    let props = to_properties(&value).unwrap();
    assert_eq!(
        props.get_str(tablekit::core::ENTITY_TYPE).unwrap(),
        Some("Tagged")
    );
    assert_eq!(from_properties::<Tagged>(&props).unwrap(), value);
    // serde does not check a struct's own tag when reading: an entity of another type with
    // the same properties reads as this one. Heterogeneous reads go through a tagged enum.
    let other = props
        .clone()
        .with(tablekit::core::ENTITY_TYPE, "Department");
    assert_eq!(from_properties::<Tagged>(&other).unwrap(), value);
}

#[derive(Debug, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:04}")]
#[serde(tag = "EntityType")]
struct Badge {
    department: String,
    id: u32,
    issued: DateTime<Utc>,
}

#[derive(Debug, PartialEq, serde::Deserialize)]
#[serde(tag = "EntityType")]
enum AnyEntity {
    Tagged(Tagged),
    Badge(Badge),
}

#[test]
fn tagged_entities_read_back_through_a_tagged_enum() {
    let badge = Badge {
        department: "Sales".into(),
        id: 7,
        issued: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
    };
    let tagged = Tagged {
        department: "Sales".into(),
        id: "1".into(),
    };
    for (props, expected) in [
        (to_properties(&badge).unwrap(), AnyEntity::Badge(badge)),
        (to_properties(&tagged).unwrap(), AnyEntity::Tagged(tagged)),
    ] {
        assert_eq!(from_properties::<AnyEntity>(&props).unwrap(), expected);
    }
}
