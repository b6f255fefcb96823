//! CSV with typed columns, in Azure Storage Explorer's form: `PartitionKey`, `RowKey`,
//! `Timestamp`, then for every property a value column `Name` and a type column `Name@type`
//! (`Edm.String`, `Edm.Int32`, `Edm.Int64`, `Edm.Double`, `Edm.Boolean`, `Edm.DateTime`,
//! `Edm.Guid`, `Edm.Binary`). A property an entity does not have leaves both cells empty;
//! an empty string has an empty value and the type `Edm.String`.
//!
//! Records follow RFC 4180: CRLF after each record; a field with a comma, a quote, CR or LF is
//! quoted, quotes doubled; nothing is trimmed. Values are written as the export format writes
//! them (Int64 in decimal, DateTime with seven fractional digits, Guid hyphenated, Binary as
//! base64, Double in its shortest exact form or `NaN`, `Infinity`, `-Infinity`), so a CSV
//! export imports back to the same entities.

use std::io::BufRead;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use tablekit::core::edm::{format_datetime, parse_datetime};
use tablekit::core::{EdmType, EdmValue, Properties};

use crate::entity_json::Row;
use crate::render::{csv_record, value_text};

/// The suffix of type columns.
const TYPE_SUFFIX: &str = "@type";

/// The header record for these property names.
pub(crate) fn header(names: &[String]) -> String {
    let mut cells = vec![
        "PartitionKey".to_owned(),
        "RowKey".to_owned(),
        "Timestamp".to_owned(),
    ];
    for name in names {
        cells.push(name.clone());
        cells.push(format!("{name}{TYPE_SUFFIX}"));
    }
    csv_record(&cells)
}

/// One entity as a record under `names`.
pub(crate) fn record(
    names: &[String],
    pk: &str,
    rk: &str,
    timestamp: Option<&DateTime<Utc>>,
    properties: &Properties,
) -> String {
    let mut cells = vec![
        pk.to_owned(),
        rk.to_owned(),
        timestamp.map(format_datetime).unwrap_or_default(),
    ];
    for name in names {
        match properties.get(name) {
            Some(value) => {
                cells.push(value_text(value));
                cells.push(value.edm_type().as_str().to_owned());
            }
            None => cells.extend([String::new(), String::new()]),
        }
    }
    csv_record(&cells)
}

/// Reads RFC 4180 records: each with the line it starts on.
pub(crate) struct Records<R> {
    input: R,
    line: u64,
}

impl<R: BufRead> Records<R> {
    pub(crate) fn new(input: R) -> Self {
        Self { input, line: 0 }
    }

    /// The next record and the line it starts on; `None` at the end.
    ///
    /// # Errors
    /// I/O errors, and `InvalidData` for a quote inside an unquoted field or text after a
    /// closing quote, or a quoted field the input ends in.
    pub(crate) fn next_record(&mut self) -> std::io::Result<Option<(u64, Vec<String>)>> {
        let invalid = |line: u64, what: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("line {line}: {what}"),
            )
        };
        let mut fields = Vec::new();
        let mut field = Vec::<u8>::new();
        let mut quoted = false;
        let mut in_quotes = false;
        let mut after_quote = false;
        let mut started = false;
        let start = self.line + 1;
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = self.input.read_until(b'\n', &mut buf)?;
            if n == 0 {
                if in_quotes {
                    return Err(invalid(start, "the input ends inside a quoted field"));
                }
                if !started {
                    return Ok(None);
                }
                fields.push(to_string(field, start)?);
                return Ok(Some((start, fields)));
            }
            self.line += 1;
            started = true;
            let mut i = 0;
            while i < buf.len() {
                let b = buf[i];
                if in_quotes {
                    if b == b'"' {
                        if buf.get(i + 1) == Some(&b'"') {
                            field.push(b'"');
                            i += 1;
                        } else {
                            in_quotes = false;
                            after_quote = true;
                        }
                    } else {
                        field.push(b);
                    }
                } else {
                    match b {
                        b',' => {
                            fields.push(to_string(std::mem::take(&mut field), start)?);
                            quoted = false;
                            after_quote = false;
                        }
                        b'\r' if buf.get(i + 1) == Some(&b'\n') => {}
                        b'\n' => {
                            fields.push(to_string(std::mem::take(&mut field), start)?);
                            return Ok(Some((start, fields)));
                        }
                        b'"' if field.is_empty() && !quoted => {
                            quoted = true;
                            in_quotes = true;
                        }
                        b'"' => return Err(invalid(self.line, "a quote inside an unquoted field")),
                        _ if after_quote => {
                            return Err(invalid(self.line, "text after a closing quote"));
                        }
                        _ => field.push(b),
                    }
                }
                i += 1;
            }
        }
    }
}

fn to_string(bytes: Vec<u8>, line: u64) -> std::io::Result<String> {
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("line {line}: not UTF-8"),
        )
    })
}

/// The columns of a header record: where the keys are, and each property's value and type
/// columns.
#[derive(Debug)]
pub(crate) struct Columns {
    pk: usize,
    rk: usize,
    /// (name, value column, type column).
    properties: Vec<(String, usize, Option<usize>)>,
}

impl Columns {
    /// Reads a header.
    ///
    /// # Errors
    /// Why the header is refused: no PartitionKey or RowKey column, a repeated column, a type
    /// column without its value column.
    pub(crate) fn parse(header: &[String]) -> Result<Self, String> {
        let find = |name: &str| header.iter().position(|h| h == name);
        let pk = find("PartitionKey").ok_or("the header has no PartitionKey column")?;
        let rk = find("RowKey").ok_or("the header has no RowKey column")?;
        let mut seen = std::collections::HashSet::new();
        for h in header {
            if !seen.insert(h) {
                return Err(format!("the header repeats the column {h:?}"));
            }
        }
        let mut properties = Vec::new();
        for (i, h) in header.iter().enumerate() {
            if let Some(name) = h.strip_suffix(TYPE_SUFFIX) {
                if find(name).is_none() {
                    return Err(format!("the type column {h:?} has no column {name:?}"));
                }
                continue;
            }
            if matches!(h.as_str(), "PartitionKey" | "RowKey" | "Timestamp") {
                continue;
            }
            properties.push((h.clone(), i, find(&format!("{h}{TYPE_SUFFIX}"))));
        }
        Ok(Self { pk, rk, properties })
    }

    /// One record as a row.
    ///
    /// # Errors
    /// Why the record is refused: a wrong number of cells, an unknown type, a value that is
    /// not of its type, a value without a type where the header has a type column.
    pub(crate) fn row(&self, record: &[String], width: usize) -> Result<Row, String> {
        if record.len() != width {
            return Err(format!("{} cells, the header has {width}", record.len()));
        }
        let mut properties = Properties::new();
        for (name, value_at, type_at) in &self.properties {
            let value = &record[*value_at];
            let ty = type_at.map(|t| record[t].as_str()).unwrap_or("Edm.String");
            if ty.is_empty() {
                if !value.is_empty() {
                    return Err(format!("property `{name}`: a value without a type"));
                }
                continue;
            }
            let ty = EdmType::parse(ty)
                .or_else(|| EdmType::parse(&format!("Edm.{ty}")))
                .ok_or_else(|| format!("property `{name}`: unknown type {ty:?}"))?;
            let typed = parse_value(ty, value).map_err(|e| format!("property `{name}`: {e}"))?;
            properties.insert(name.clone(), typed);
        }
        Ok(Row {
            pk: record[self.pk].clone(),
            rk: record[self.rk].clone(),
            properties,
        })
    }
}

/// A cell's text as a value of `ty`.
fn parse_value(ty: EdmType, text: &str) -> Result<EdmValue, String> {
    let bad = || format!("{text:?} is not a valid {ty}");
    Ok(match ty {
        EdmType::String => EdmValue::String(text.to_owned()),
        EdmType::Int32 => EdmValue::Int32(text.parse().map_err(|_| bad())?),
        EdmType::Int64 => EdmValue::Int64(text.parse().map_err(|_| bad())?),
        EdmType::Double => EdmValue::Double(match text {
            "NaN" => f64::NAN,
            "Infinity" | "INF" => f64::INFINITY,
            "-Infinity" | "-INF" => f64::NEG_INFINITY,
            _ => text.parse().map_err(|_| bad())?,
        }),
        EdmType::Boolean => EdmValue::Boolean(match text {
            "true" | "True" | "TRUE" => true,
            "false" | "False" | "FALSE" => false,
            _ => return Err(bad()),
        }),
        EdmType::DateTime => EdmValue::DateTime(parse_datetime(text).ok_or_else(bad)?),
        EdmType::Guid => EdmValue::Guid(uuid::Uuid::parse_str(text).map_err(|_| bad())?),
        EdmType::Binary => EdmValue::Binary(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| bad())?,
        ),
        #[allow(unreachable_patterns)]
        _ => return Err(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_keep_every_byte_of_quoted_fields() {
        let text = "a,b\r\n\"x,\"\"y\"\"\r\nz\", \n\"\",\"\r\"\n";
        let mut r = Records::new(text.as_bytes());
        assert_eq!(
            r.next_record().unwrap(),
            Some((1, vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            r.next_record().unwrap(),
            Some((2, vec!["x,\"y\"\r\nz".into(), " ".into()]))
        );
        assert_eq!(
            r.next_record().unwrap(),
            Some((4, vec![String::new(), "\r".into()]))
        );
        assert_eq!(r.next_record().unwrap(), None);
        assert!(Records::new("\"open".as_bytes()).next_record().is_err());
        assert!(Records::new("a\"b\n".as_bytes()).next_record().is_err());
    }

    #[test]
    fn every_edm_type_round_trips_through_a_record() {
        let props = Properties::new()
            .with("Big", i64::MIN)
            .with("Small", -7_i32)
            .with("Ratio", 0.1_f64 + 0.2)
            .with("Nan", f64::NAN)
            .with("Inf", f64::NEG_INFINITY)
            .with("Zero", -0.0_f64)
            .with("Flag", false)
            .with(
                "When",
                parse_datetime("2026-11-22T10:00:00.1234567Z").unwrap(),
            )
            .with("Id", uuid::Uuid::from_u128(7))
            .with("Bytes", vec![0_u8, 255, 1])
            .with("Empty", "")
            .with("Text", " a,\"b\"\r\nc\r\u{2028}é ");
        let names: Vec<String> = props.iter().map(|(n, _)| n.to_owned()).collect();
        let mut names_plus = names.clone();
        names_plus.push("Absent".into());
        let text = format!(
            "{}{}",
            header(&names_plus),
            record(&names_plus, "p,'\"", " r\n", None, &props)
        );
        let mut records = Records::new(text.as_bytes());
        let (_, head) = records.next_record().unwrap().unwrap();
        let columns = Columns::parse(&head).unwrap();
        let (_, rec) = records.next_record().unwrap().unwrap();
        let row = columns.row(&rec, head.len()).unwrap();
        assert_eq!((row.pk.as_str(), row.rk.as_str()), ("p,'\"", " r\n"));
        assert_eq!(
            row.properties.len(),
            props.len(),
            "the absent one stays absent"
        );
        for ((n1, v1), (n2, v2)) in row.properties.iter().zip(props.iter()) {
            assert_eq!(n1, n2);
            match (v1, v2) {
                (EdmValue::Double(a), EdmValue::Double(b)) => assert_eq!(a.to_bits(), b.to_bits()),
                _ => assert_eq!(v1, v2),
            }
        }
    }
}
