//! The export format: one entity per line, in the Table service's own JSON entity shape.
//!
//! ```text
//! {"PartitionKey":"p","RowKey":"r","Timestamp@odata.type":"Edm.DateTime","Timestamp":"2026-11-22T10:00:00.1234567Z",
//!  "Big@odata.type":"Edm.Int64","Big":"9007199254740993","Name":"x","Ratio@odata.type":"Edm.Double","Ratio":1.0}
//! ```
//!
//! PartitionKey, RowKey and Timestamp come first, then the properties in name order. Edm.String,
//! Edm.Int32 and Edm.Boolean are plain JSON; every other type carries its `@odata.type`
//! annotation before its value: Int64 as a decimal string, DateTime with seven fractional
//! digits, Guid hyphenated, Binary as base64, Double as a number (or `"NaN"`, `"Infinity"`,
//! `"-Infinity"`). Writing is deterministic, so an export resumed from a checkpoint is byte for
//! byte the same as an uninterrupted one.

use std::io::Write as _;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use tablekit::core::edm::{format_datetime, parse_datetime};
use tablekit::core::{EdmType, EdmValue, Properties};

const ANNOTATION: &str = "@odata.type";

fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn annotated(out: &mut Vec<u8>, name: &str, ty: EdmType) {
    out.push(b',');
    json_str(out, &format!("{name}{ANNOTATION}"));
    out.push(b':');
    json_str(out, ty.as_str());
}

/// Appends one entity as a line (with its `\n`).
pub(crate) fn write_line(
    out: &mut Vec<u8>,
    pk: &str,
    rk: &str,
    timestamp: Option<&DateTime<Utc>>,
    properties: &Properties,
) {
    out.extend_from_slice(b"{\"PartitionKey\":");
    json_str(out, pk);
    out.extend_from_slice(b",\"RowKey\":");
    json_str(out, rk);
    if let Some(ts) = timestamp {
        out.extend_from_slice(b",\"Timestamp@odata.type\":\"Edm.DateTime\",\"Timestamp\":");
        json_str(out, &format_datetime(ts));
    }
    for (name, value) in properties.iter() {
        let ty = value.edm_type();
        if !matches!(ty, EdmType::String | EdmType::Int32 | EdmType::Boolean) {
            annotated(out, name, ty);
        }
        out.push(b',');
        json_str(out, name);
        out.push(b':');
        match value {
            EdmValue::String(s) => json_str(out, s),
            EdmValue::Int32(n) => {
                let _ = write!(out, "{n}");
            }
            EdmValue::Int64(n) => json_str(out, &n.to_string()),
            EdmValue::Double(d) if d.is_nan() => json_str(out, "NaN"),
            EdmValue::Double(d) if d.is_infinite() => {
                json_str(out, if *d > 0.0 { "Infinity" } else { "-Infinity" })
            }
            EdmValue::Double(d) => {
                let _ = serde_json::to_writer(&mut *out, d);
            }
            EdmValue::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            EdmValue::DateTime(dt) => json_str(out, &format_datetime(dt)),
            EdmValue::Guid(g) => json_str(out, &g.hyphenated().to_string()),
            EdmValue::Binary(bytes) => json_str(
                out,
                &base64::engine::general_purpose::STANDARD.encode(bytes),
            ),
        }
    }
    out.extend_from_slice(b"}\n");
}

/// An entity read from a line: its keys (not yet validated) and typed properties.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) pk: String,
    pub(crate) rk: String,
    pub(crate) properties: Properties,
}

/// Reads one line of the export format — or any entity JSON in the service's shape, with or
/// without annotations. `Timestamp` and `odata.*` metadata are ignored; `null` properties are
/// absent.
///
/// # Errors
/// Why the line is refused: malformed JSON, missing or non-string keys, an unknown EDM type,
/// an annotation without its property, a value that does not fit its annotated type, or a
/// nested value.
pub(crate) fn read_line(line: &str) -> Result<Row, String> {
    let mut map: Map<String, Value> =
        serde_json::from_str(line).map_err(|e| format!("malformed JSON: {e}"))?;
    let key = |map: &mut Map<String, Value>, name: &str| match map.remove(name) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("{name} is not a string")),
        None => Err(format!("no {name}")),
    };
    let pk = key(&mut map, "PartitionKey")?;
    let rk = key(&mut map, "RowKey")?;
    let mut types = Vec::new();
    let mut values = Vec::new();
    for (name, value) in map {
        if let Some(property) = name.strip_suffix(ANNOTATION) {
            let Value::String(ty) = value else {
                return Err(format!("{name} is not a string"));
            };
            let ty = EdmType::parse(&ty)
                .ok_or_else(|| format!("property `{property}`: unknown EDM type {ty:?}"))?;
            types.push((property.to_owned(), ty));
        } else if name != "Timestamp" && !name.starts_with("odata.") {
            values.push((name, value));
        }
    }
    for (property, _) in &types {
        if property != "Timestamp" && !values.iter().any(|(name, _)| name == property) {
            return Err(format!("annotation for `{property}` without its value"));
        }
    }
    let mut properties = Properties::new();
    for (name, value) in values {
        let ty = types.iter().find(|(p, _)| *p == name).map(|(_, t)| *t);
        if let Some(value) = typed(ty, value).map_err(|e| format!("property `{name}`: {e}"))? {
            properties.insert(name, value);
        }
    }
    Ok(Row { pk, rk, properties })
}

/// A JSON value as the EDM type it is annotated with, or the type JSON implies.
fn typed(ty: Option<EdmType>, value: Value) -> Result<Option<EdmValue>, String> {
    let mismatch = |ty: EdmType, value: &Value| format!("{value} is not a valid {ty}");
    let value =
        match (ty, value) {
            (_, Value::Null) => return Ok(None),
            (_, v @ (Value::Array(_) | Value::Object(_))) => {
                return Err(format!("nested values are not supported ({v})"));
            }
            (None | Some(EdmType::String), Value::String(s)) => EdmValue::String(s),
            (None | Some(EdmType::Boolean), Value::Bool(b)) => EdmValue::Boolean(b),
            (None, Value::Number(n)) => match n.as_i64() {
                Some(i) => i32::try_from(i).map_or(EdmValue::Int64(i), EdmValue::Int32),
                None if n.is_u64() => return Err(format!("{n} is above the Int64 range")),
                None => EdmValue::Double(n.as_f64().ok_or_else(|| format!("{n} is not a number"))?),
            },
            (Some(EdmType::Int32), Value::Number(n)) => n
                .as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .map(EdmValue::Int32)
                .ok_or_else(|| mismatch(EdmType::Int32, &Value::Number(n)))?,
            (Some(EdmType::Int64), Value::String(s)) => s
                .parse::<i64>()
                .map(EdmValue::Int64)
                .map_err(|_| mismatch(EdmType::Int64, &Value::String(s)))?,
            (Some(EdmType::Int64), Value::Number(n)) => n
                .as_i64()
                .map(EdmValue::Int64)
                .ok_or_else(|| mismatch(EdmType::Int64, &Value::Number(n)))?,
            (Some(EdmType::Double), Value::Number(n)) => n
                .as_f64()
                .map(EdmValue::Double)
                .ok_or_else(|| mismatch(EdmType::Double, &Value::Number(n)))?,
            (Some(EdmType::Double), Value::String(s)) => match s.as_str() {
                "NaN" => EdmValue::Double(f64::NAN),
                "Infinity" | "INF" => EdmValue::Double(f64::INFINITY),
                "-Infinity" | "-INF" => EdmValue::Double(f64::NEG_INFINITY),
                other => other
                    .parse::<f64>()
                    .map(EdmValue::Double)
                    .map_err(|_| mismatch(EdmType::Double, &Value::String(s.clone())))?,
            },
            (Some(EdmType::DateTime), Value::String(s)) => parse_datetime(&s)
                .map(EdmValue::DateTime)
                .ok_or_else(|| mismatch(EdmType::DateTime, &Value::String(s)))?,
            (Some(EdmType::Guid), Value::String(s)) => uuid::Uuid::parse_str(&s)
                .map(EdmValue::Guid)
                .map_err(|_| mismatch(EdmType::Guid, &Value::String(s)))?,
            (Some(EdmType::Binary), Value::String(s)) => base64::engine::general_purpose::STANDARD
                .decode(&s)
                .map(EdmValue::Binary)
                .map_err(|_| mismatch(EdmType::Binary, &Value::String(s)))?,
            (Some(ty), value) => return Err(mismatch(ty, &value)),
        };
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablekit::core::Stored;
    use tablekit::core::edm::parse_entity;

    fn every_type() -> Properties {
        Properties::new()
            .with("Big", (1_i64 << 53) + 1)
            .with("Min", i64::MIN)
            .with("Small", 7_i32)
            .with("Ratio", 1.0_f64)
            .with("Nan", f64::NAN)
            .with("Inf", f64::NEG_INFINITY)
            .with("Flag", false)
            .with(
                "When",
                parse_datetime("2026-11-22T10:00:00.1234567Z").unwrap(),
            )
            .with(
                "Id",
                uuid::Uuid::parse_str("6f9619ff-8b86-d011-b42d-00c04fc964ff").unwrap(),
            )
            .with("Bytes", vec![0_u8, 255, 1])
            .with("Empty", "")
            .with("Text", "it's \"quoted\"\n\u{2028}é")
            .with("Looks", "2026-11-22T10:00:00Z")
    }

    fn same(a: &Properties, b: &Properties) -> bool {
        a.len() == b.len()
            && a.iter().zip(b.iter()).all(|((n1, v1), (n2, v2))| {
                n1 == n2
                    && match (v1, v2) {
                        (EdmValue::Double(x), EdmValue::Double(y)) => x.to_bits() == y.to_bits(),
                        _ => v1 == v2,
                    }
            })
    }

    #[test]
    fn every_edm_type_round_trips_exactly_through_a_line() {
        let props = every_type();
        let ts = parse_datetime("2026-01-01T00:00:00.0000001Z").unwrap();
        let mut out = Vec::new();
        write_line(&mut out, "p'1", "r/é", Some(&ts), &props);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.ends_with("}\n") && text.matches('\n').count() == 1,
            "{text}"
        );
        assert!(text.contains(r#""Big@odata.type":"Edm.Int64","Big":"9007199254740993""#));
        assert!(text.contains(r#""Ratio@odata.type":"Edm.Double","Ratio":1.0"#));
        assert!(text.contains(r#""When":"2026-11-22T10:00:00.1234567Z""#));
        let row = read_line(text.trim_end()).unwrap();
        assert_eq!((row.pk.as_str(), row.rk.as_str()), ("p'1", "r/é"));
        assert!(same(&row.properties, &props), "{:?}", row.properties);
    }

    #[test]
    fn a_line_is_the_service_json_shape_that_tablekit_reads_back() {
        let props = every_type();
        let mut out = Vec::new();
        write_line(&mut out, "p", "r", None, &props);
        let stored: Stored<Properties> = parse_entity(&out, Some("W/\"x\"")).unwrap();
        assert!(same(&stored.value, &props), "{:?}", stored.value);
    }

    #[test]
    fn bad_lines_are_refused_with_the_reason() {
        for (line, expected) in [
            ("{", "malformed JSON"),
            (r#"{"RowKey":"r"}"#, "no PartitionKey"),
            (r#"{"PartitionKey":1,"RowKey":"r"}"#, "not a string"),
            (
                r#"{"PartitionKey":"p","RowKey":"r","n@odata.type":"Edm.Decimal","n":"1"}"#,
                "unknown EDM type",
            ),
            (
                r#"{"PartitionKey":"p","RowKey":"r","n@odata.type":"Edm.Int64","n":"x1"}"#,
                "not a valid Edm.Int64",
            ),
            (
                r#"{"PartitionKey":"p","RowKey":"r","g@odata.type":"Edm.Guid","g":"nope"}"#,
                "Edm.Guid",
            ),
            (
                r#"{"PartitionKey":"p","RowKey":"r","n@odata.type":"Edm.Int32"}"#,
                "without its value",
            ),
            (r#"{"PartitionKey":"p","RowKey":"r","o":{"a":1}}"#, "nested"),
        ] {
            let e = read_line(line).unwrap_err();
            assert!(e.contains(expected), "{line}: {e}");
        }
    }

    #[test]
    fn unannotated_json_gets_the_types_json_implies() {
        let row = read_line(
            r#"{"PartitionKey":"p","RowKey":"r","odata.etag":"x","Timestamp":"t","i":5,"l":5000000000,"d":2.5,"b":true,"s":"x","z":null}"#,
        )
        .unwrap();
        let p = &row.properties;
        assert_eq!(p.get("i"), Some(&EdmValue::Int32(5)));
        assert_eq!(p.get("l"), Some(&EdmValue::Int64(5_000_000_000)));
        assert_eq!(p.get("d"), Some(&EdmValue::Double(2.5)));
        assert_eq!(p.get("b"), Some(&EdmValue::Boolean(true)));
        assert_eq!(p.len(), 5, "null is absent, metadata ignored");
    }
}
