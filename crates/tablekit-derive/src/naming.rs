//! Property names (casing rules, the service's naming rules) and constant names.

/// How field names become property names: `#[table(rename_all = "...")]`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Casing {
    /// `first_name` → `FirstName` (the default: the convention of the Table service and of
    /// every other SDK).
    Pascal,
    /// `first_name` → `firstName`.
    Camel,
    /// `first_name` → `first_name`, `firstName` → `firstname`.
    Lower,
    /// `first_name` → `FIRST_NAME`.
    Upper,
    /// The field name unchanged.
    AsIs,
}

impl Casing {
    /// The rule named `name`, or why there is none.
    pub(crate) fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "PascalCase" => Casing::Pascal,
            "camelCase" => Casing::Camel,
            "snake_case" | "lowercase" => Casing::Lower,
            "SCREAMING_SNAKE_CASE" | "UPPERCASE" => Casing::Upper,
            "as-is" => Casing::AsIs,
            "kebab-case" | "SCREAMING-KEBAB-CASE" => {
                return Err(format!(
                    "`{name}` would put `-` in property names, which the Table service refuses; \
                     use \"PascalCase\", \"camelCase\", \"snake_case\", \"lowercase\", \
                     \"UPPERCASE\", \"SCREAMING_SNAKE_CASE\" or \"as-is\""
                ));
            }
            _ => {
                return Err(format!(
                    "unknown rename_all rule `{name}`; use \"PascalCase\" (the default), \
                     \"camelCase\", \"snake_case\", \"lowercase\", \"UPPERCASE\", \
                     \"SCREAMING_SNAKE_CASE\" or \"as-is\""
                ));
            }
        })
    }

    /// The property name of field `field` (without `r#`).
    pub(crate) fn apply(self, field: &str) -> String {
        match self {
            Casing::Pascal => pascal(field),
            Casing::Camel => {
                let pascal = pascal(field);
                let mut chars = pascal.chars();
                match chars.next() {
                    Some(first) => first.to_lowercase().chain(chars).collect(),
                    None => pascal,
                }
            }
            Casing::Lower => field.to_lowercase(),
            Casing::Upper => field.to_uppercase(),
            Casing::AsIs => field.to_owned(),
        }
    }
}

/// `first_name` → `FirstName`: the first character and every one after `_` upper-cased, the
/// underscores dropped (serde's PascalCase rule).
fn pascal(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut capitalize = true;
    for c in field.chars() {
        if c == '_' {
            capitalize = true;
        } else if capitalize {
            out.extend(c.to_uppercase());
            capitalize = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The name of a field's property constant: `first_name` → `FIRST_NAME`, `firstName` →
/// `FIRST_NAME`.
pub(crate) fn constant_name(field: &str) -> String {
    let mut out = String::with_capacity(field.len() + 4);
    let mut previous_lower = false;
    for c in field.chars() {
        if c.is_uppercase() && previous_lower {
            out.push('_');
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        out.extend(c.to_uppercase());
    }
    out
}

/// Names the service or the JSON format reserve: a user property of that name would be
/// refused or silently taken for the system value.
const RESERVED: [&str; 4] = ["PartitionKey", "RowKey", "Timestamp", "ETag"];

/// Why `name` cannot name a user property, if it cannot: the rules of
/// `tablekit_core::limits::validate_property_name` plus `ETag`, checked at compile time.
pub(crate) fn property_name_problem(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!(
            "`{name}` is reserved for a system property; keys come from the key templates, \
             and the service sets Timestamp and ETag. Rename the field or give it \
             #[serde(rename = \"...\")]"
        ));
    }
    if name.starts_with("odata.") {
        return Some(format!(
            "`{name}`: names starting with `odata.` are reserved"
        ));
    }
    let chars = name.chars().count();
    if chars == 0 {
        return Some("a property name must not be empty".into());
    }
    if chars > 255 {
        return Some(format!(
            "property names have at most 255 characters; this one has {chars}"
        ));
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        return Some(format!(
            "`{name}`: a property name must not start with a digit"
        ));
    }
    if let Some(c) = name.chars().find(|&c| !(c.is_alphanumeric() || c == '_')) {
        return Some(format!(
            "`{name}`: property names may contain only letters, digits and `_`, not {c:?}"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casing_rules() {
        assert_eq!(Casing::Pascal.apply("first_name"), "FirstName");
        assert_eq!(Casing::Pascal.apply("id"), "Id");
        assert_eq!(Casing::Pascal.apply("e_tag"), "ETag");
        assert_eq!(Casing::Camel.apply("first_name"), "firstName");
        assert_eq!(Casing::Lower.apply("First_Name"), "first_name");
        assert_eq!(Casing::Upper.apply("first_name"), "FIRST_NAME");
        assert_eq!(Casing::AsIs.apply("first_name"), "first_name");
        assert!(Casing::parse("kebab-case").is_err());
        assert!(Casing::parse("Pascal").is_err());
    }

    #[test]
    fn constant_names() {
        assert_eq!(constant_name("email"), "EMAIL");
        assert_eq!(constant_name("first_name"), "FIRST_NAME");
        assert_eq!(constant_name("firstName"), "FIRST_NAME");
        assert_eq!(constant_name("line2"), "LINE2");
    }

    #[test]
    fn reserved_and_malformed_names() {
        for bad in [
            "PartitionKey",
            "RowKey",
            "Timestamp",
            "ETag",
            "odata.etag",
            "",
            "1a",
            "a-b",
        ] {
            assert!(property_name_problem(bad).is_some(), "{bad:?}");
        }
        for good in ["Email", "partitionKey", "_x", "Naïve", "A1"] {
            assert!(property_name_problem(good).is_none(), "{good:?}");
        }
        assert!(property_name_problem(&"a".repeat(256)).is_some());
    }
}
