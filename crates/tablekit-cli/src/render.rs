//! Text forms of entities for `query`: aligned columns and CSV.
//!
//! Both need their columns before the first row: they are the `--select` list when given,
//! else the properties of the first page. A property that first appears in a later page is
//! not shown; a note on stderr says so (use `--select`, or the JSON formats).

use std::collections::BTreeSet;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use tablekit::core::edm::format_datetime;
use tablekit::core::{EdmValue, Properties};

/// The longest value shown in the `table` format; longer ones end with `…`.
pub(crate) const MAX_CELL: usize = 40;

/// A value as text: numbers and booleans as JSON writes them, DateTime with seven fractional
/// digits, Guid hyphenated, Binary as base64.
pub(crate) fn value_text(value: &EdmValue) -> String {
    match value {
        EdmValue::String(s) => s.clone(),
        EdmValue::Int32(n) => n.to_string(),
        EdmValue::Int64(n) => n.to_string(),
        EdmValue::Double(d) if d.is_nan() => "NaN".into(),
        EdmValue::Double(d) if d.is_infinite() => {
            if *d > 0.0 { "Infinity" } else { "-Infinity" }.into()
        }
        EdmValue::Double(d) => serde_json::to_string(d).unwrap_or_default(),
        EdmValue::Boolean(b) => b.to_string(),
        EdmValue::DateTime(dt) => format_datetime(dt),
        EdmValue::Guid(g) => g.hyphenated().to_string(),
        EdmValue::Binary(b) => base64::engine::general_purpose::STANDARD.encode(b),
    }
}

/// The columns: keys, Timestamp, then `select` or the properties seen in `first`.
pub(crate) fn columns<'a>(
    select: Option<&[String]>,
    first: impl Iterator<Item = &'a Properties>,
) -> Vec<String> {
    let mut out = vec![
        "PartitionKey".to_owned(),
        "RowKey".to_owned(),
        "Timestamp".to_owned(),
    ];
    match select {
        Some(names) => out.extend(
            names
                .iter()
                .filter(|n| !out.contains(n))
                .cloned()
                .collect::<Vec<_>>(),
        ),
        None => {
            let names: BTreeSet<&str> = first.flat_map(|p| p.iter().map(|(n, _)| n)).collect();
            out.extend(names.into_iter().map(str::to_owned));
        }
    }
    out
}

/// One row's cells under `columns` (empty for absent properties).
pub(crate) fn cells(
    columns: &[String],
    pk: &str,
    rk: &str,
    timestamp: Option<&DateTime<Utc>>,
    properties: &Properties,
) -> Vec<String> {
    columns
        .iter()
        .map(|c| match c.as_str() {
            "PartitionKey" => pk.to_owned(),
            "RowKey" => rk.to_owned(),
            "Timestamp" => timestamp.map(format_datetime).unwrap_or_default(),
            name => properties.get(name).map(value_text).unwrap_or_default(),
        })
        .collect()
}

/// A cell for a terminal: control characters escaped, at most [`MAX_CELL`] characters.
pub(crate) fn terminal_cell(text: &str) -> String {
    let escaped: String = text
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    if escaped.chars().count() > MAX_CELL {
        let mut cut: String = escaped.chars().take(MAX_CELL - 1).collect();
        cut.push('…');
        cut
    } else {
        escaped
    }
}

/// Lines of aligned cells: each column as wide as its widest cell in `rows` and the header.
pub(crate) fn aligned(widths: &[usize], row: &[String]) -> String {
    let mut line = String::new();
    for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
        if i > 0 {
            line.push_str("  ");
        }
        line.push_str(cell);
        if i + 1 < row.len() {
            let pad = width.saturating_sub(cell.chars().count());
            line.extend(std::iter::repeat_n(' ', pad));
        }
    }
    line
}

/// Column widths for `header` and `rows` of terminal cells.
pub(crate) fn widths(header: &[String], rows: &[Vec<String>]) -> Vec<usize> {
    header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([h.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// One CSV record (RFC 4180): fields with a comma, quote, CR or LF are quoted, quotes
/// doubled.
pub(crate) fn csv_record(fields: &[String]) -> String {
    let mut line = String::new();
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        if f.contains([',', '"', '\r', '\n']) {
            line.push('"');
            line.push_str(&f.replace('"', "\"\""));
            line.push('"');
        } else {
            line.push_str(f);
        }
    }
    line.push_str("\r\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_needs_quoting() {
        let r = csv_record(&["a".into(), "b,c".into(), "say \"hi\"".into(), "x\ny".into()]);
        assert_eq!(r, "a,\"b,c\",\"say \"\"hi\"\"\",\"x\ny\"\r\n");
    }

    #[test]
    fn terminal_cells_are_escaped_and_truncated() {
        assert_eq!(terminal_cell("a\nb"), "a\\nb");
        let long = "x".repeat(100);
        let cell = terminal_cell(&long);
        assert_eq!(cell.chars().count(), MAX_CELL);
        assert!(cell.ends_with('…'));
        let w = widths(
            &["ab".into(), "c".into()],
            &[vec!["abcd".into(), "e".into()]],
        );
        assert_eq!(w, [4, 1]);
        assert_eq!(aligned(&w, &["ab".into(), "c".into()]), "ab    c");
    }

    #[test]
    fn columns_come_from_the_selection_or_the_first_rows() {
        let p = Properties::new().with("B", 1_i32).with("A", "x");
        assert_eq!(
            columns(None, [&p].into_iter()),
            ["PartitionKey", "RowKey", "Timestamp", "A", "B"]
        );
        assert_eq!(
            columns(Some(&["B".into(), "RowKey".into()]), std::iter::empty()),
            ["PartitionKey", "RowKey", "Timestamp", "B"]
        );
        assert_eq!(value_text(&EdmValue::Double(1.0)), "1.0");
    }
}
