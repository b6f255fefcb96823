//! Rendering filters as OData `$filter` text.

use std::fmt::Write as _;

use chrono::Datelike;

use crate::edm::{EdmValue, write_datetime};
use crate::error::{Error, Result};

use super::ast::Filter;
use crate::limits::validate_property_identifier as check_property_name;

impl Filter {
    /// Renders the filter as `$filter` text (not yet URL-encoded).
    ///
    /// Literals: strings in single quotes with `'` doubled; Int32 plain (`34`); Int64 with an
    /// `L` suffix (`5000000000L`); Double in its shortest exact form, always with a `.` or an
    /// exponent (`1.0`, `2.5E-8`); `true`/`false`; `datetime'2026-11-22T10:00:00.0000000Z'`;
    /// `guid'…'`; `X'0aff'`. Operands of `and`/`or` are parenthesized, except that a chain of
    /// the same operator is written flat: `(a) and (b) and (c)`. Raw text is written verbatim.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a property name that is not an identifier;
    /// [`Error::InvalidFilter`] for a NaN or infinite Double, or a date outside years
    /// 0001–9999.
    pub fn render(&self) -> Result<String> {
        let mut out = String::new();
        self.write(&mut out)?;
        Ok(out)
    }

    fn write(&self, out: &mut String) -> Result<()> {
        match self {
            Filter::Compare {
                property,
                op,
                value,
            } => {
                check_property_name(property)?;
                out.push_str(property);
                out.push(' ');
                out.push_str(op.as_str());
                out.push(' ');
                write_literal(out, value)
            }
            Filter::And(left, right) => {
                left.write_operand(out, matches!(**left, Filter::And(..)))?;
                out.push_str(" and ");
                right.write_operand(out, false)
            }
            Filter::Or(left, right) => {
                left.write_operand(out, matches!(**left, Filter::Or(..)))?;
                out.push_str(" or ");
                right.write_operand(out, false)
            }
            Filter::Not(inner) => {
                out.push_str("not ");
                inner.write_operand(out, false)
            }
            Filter::Raw(raw) => {
                out.push_str(raw.as_str());
                Ok(())
            }
        }
    }

    /// Writes an operand, parenthesized unless it continues a left-leaning chain of the same
    /// operator (which the parser rebuilds the same way, as `and`/`or` associate to the left).
    fn write_operand(&self, out: &mut String, flat: bool) -> Result<()> {
        if flat {
            return self.write(out);
        }
        out.push('(');
        self.write(out)?;
        out.push(')');
        Ok(())
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidFilter { reason }
}

/// Appends `value` as an OData literal.
pub(crate) fn write_literal(out: &mut String, value: &EdmValue) -> Result<()> {
    match value {
        EdmValue::String(s) => {
            out.push('\'');
            out.push_str(&s.replace('\'', "''"));
            out.push('\'');
        }
        EdmValue::Int32(v) => {
            let _ = write!(out, "{v}");
        }
        EdmValue::Int64(v) => {
            let _ = write!(out, "{v}L");
        }
        EdmValue::Double(v) => {
            let text = format_double(*v).ok_or_else(|| {
                invalid(format!(
                    "{v} cannot be written in a filter; only finite numbers can"
                ))
            })?;
            out.push_str(&text);
        }
        EdmValue::Boolean(v) => out.push_str(if *v { "true" } else { "false" }),
        EdmValue::DateTime(dt) => {
            if !(1..=9999).contains(&dt.year()) {
                return Err(invalid(format!("{dt} is outside the years 0001-9999")));
            }
            out.push_str("datetime'");
            write_datetime(out, dt);
            out.push('\'');
        }
        EdmValue::Guid(g) => {
            let _ = write!(out, "guid'{}'", g.hyphenated());
        }
        EdmValue::Binary(bytes) => {
            out.push_str("X'");
            for b in bytes {
                let _ = write!(out, "{b:02x}");
            }
            out.push('\'');
        }
    }
    Ok(())
}

/// The shortest text that parses back to exactly `v`, always recognisable as a Double: with
/// a `.` in positional form (`1.0`, `0.001`, `-0.0`), or with an exponent outside
/// 1e-5..1e15 (`2.5E-8`, `1.0E300`). `None` for NaN and infinities, which OData filters
/// cannot express.
pub(crate) fn format_double(v: f64) -> Option<String> {
    if !v.is_finite() {
        return None;
    }
    // `{:e}` gives the shortest digits that round-trip; only the layout is chosen here.
    let scientific = format!("{v:e}");
    let (mantissa, exponent) = scientific.split_once('e')?;
    let exponent: i32 = exponent.parse().ok()?;
    let mut text = if (-5..15).contains(&exponent) {
        v.to_string()
    } else {
        mantissa.to_owned()
    };
    if !text.contains('.') {
        text.push_str(".0");
    }
    if !(-5..15).contains(&exponent) {
        let _ = write!(text, "E{exponent}");
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_always_read_as_doubles_and_round_trip() {
        let cases = [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (2.5e-8, "2.5E-8"),
            (1e-5, "0.00001"),
            (123456789012345.0, "123456789012345.0"),
            (1e15, "1.0E15"),
            (-1.5e300, "-1.5E300"),
            (5e-324, "5.0E-324"),
            (f64::MAX, "1.7976931348623157E308"),
        ];
        for (v, text) in cases {
            assert_eq!(format_double(v).as_deref(), Some(text));
            assert_eq!(
                text.parse::<f64>().unwrap().to_bits(),
                v.to_bits(),
                "{text}"
            );
        }
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(format_double(v), None);
        }
    }
}
