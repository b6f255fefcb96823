//! Parsing the supported OData `$filter` subset back into a [`Filter`].

use uuid::Uuid;

use crate::edm::{EdmValue, parse_datetime};
use crate::error::{Error, Result};

use super::ast::{CmpOp, Filter};
use crate::limits::validate_property_identifier as check_property_name;

/// Nesting deeper than this (parentheses and `not`) is refused, so that hostile input cannot
/// exhaust the stack.
const MAX_DEPTH: usize = 64;
/// More comparisons than this are refused; the service itself accepts at most 15.
const MAX_COMPARISONS: usize = 256;

impl Filter {
    /// Parses `$filter` text (already URL-decoded) in the subset this crate renders:
    /// comparisons `property op literal` with `eq ne gt ge lt le`, `and`, `or`, `not`,
    /// parentheses, and every literal form [`Filter::render`] writes (also `binary'…'`, and a
    /// `d` suffix on Doubles). Keywords are case-insensitive; property names are not. An
    /// unsuffixed integer is an Int32, or an Int64 when it does not fit.
    ///
    /// `parse(render(f)) == f` for every filter without raw text whose doubles are finite and
    /// whose dates are within 0001–9999 at 100 ns resolution.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`] for anything outside the subset — functions (`startswith`,
    /// `substringof`), arithmetic, `null`, comparisons between two properties or with the
    /// literal first, unbalanced quotes or parentheses, stray characters (typographic or double
    /// quotes) — naming the position; [`Error::InvalidName`] for an over-long property name.
    pub fn parse(text: &str) -> Result<Filter> {
        let tokens = lex(text)?;
        let mut parser = Parser {
            tokens,
            pos: 0,
            depth: 0,
            comparisons: 0,
        };
        let filter = parser.or()?;
        match parser.peek() {
            None => Ok(filter),
            Some((at, tok)) => Err(invalid(at, format!("unexpected {}", tok.describe()))),
        }
    }
}

fn invalid(at: usize, what: String) -> Error {
    Error::InvalidFilter {
        reason: format!("{what} at byte {at}"),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok<'a> {
    Open,
    Close,
    Word(&'a str),
    Str(String),
    /// `prefix'body'`, e.g. `datetime'…'`.
    Typed(&'a str, String),
    Number(&'a str),
}

impl Tok<'_> {
    fn describe(&self) -> String {
        match self {
            Tok::Open => "`(`".into(),
            Tok::Close => "`)`".into(),
            Tok::Word(w) => format!("`{w}`"),
            Tok::Str(_) | Tok::Typed(..) | Tok::Number(_) => "literal".into(),
        }
    }
}

fn is_word_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn lex(text: &str) -> Result<Vec<(usize, Tok<'_>)>> {
    let mut tokens = Vec::new();
    let mut rest = text.char_indices().peekable();
    while let Some(&(at, c)) = rest.peek() {
        let tok = match c {
            _ if c.is_ascii_whitespace() => {
                rest.next();
                continue;
            }
            '(' | ')' => {
                rest.next();
                if c == '(' { Tok::Open } else { Tok::Close }
            }
            '\'' => Tok::Str(quoted(text, &mut rest)?),
            '-' | '0'..='9' => {
                let end = number_end(text, at);
                while rest.next_if(|&(i, _)| i < end).is_some() {}
                Tok::Number(&text[at..end])
            }
            _ if is_word_start(c) => {
                while rest.next_if(|&(_, c)| is_word_char(c)).is_some() {}
                let end = rest.peek().map_or(text.len(), |&(i, _)| i);
                let word = &text[at..end];
                if rest.peek().is_some_and(|&(_, c)| c == '\'') {
                    Tok::Typed(word, quoted(text, &mut rest)?)
                } else {
                    Tok::Word(word)
                }
            }
            _ => return Err(invalid(at, format!("unexpected character {c:?}"))),
        };
        tokens.push((at, tok));
    }
    Ok(tokens)
}

/// Reads a single-quoted literal starting at the quote; `''` stands for one quote.
fn quoted(text: &str, rest: &mut std::iter::Peekable<std::str::CharIndices<'_>>) -> Result<String> {
    let Some((start, _)) = rest.next() else {
        return Err(invalid(text.len(), "expected a quote".into()));
    };
    let mut value = String::new();
    while let Some((_, c)) = rest.next() {
        // A quote ends the literal unless it is doubled.
        if c == '\'' && rest.next_if(|&(_, c)| c == '\'').is_none() {
            return Ok(value);
        }
        value.push(c);
    }
    Err(invalid(start, "unterminated quoted literal".into()))
}

/// The end of a number token: an optional `-`, digits, `.` digits, an exponent, and one
/// suffix letter; a letter or digit straight after it is swallowed so it is reported whole.
fn number_end(text: &str, start: usize) -> usize {
    let bytes = text.as_bytes();
    let mut i = start + 1;
    let digits = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    digits(&mut i);
    if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
        i += 1;
        digits(&mut i);
    }
    if i < bytes.len() && matches!(bytes[i], b'e' | b'E') {
        let sign = usize::from(i + 1 < bytes.len() && matches!(bytes[i + 1], b'+' | b'-'));
        if i + 1 + sign < bytes.len() && bytes[i + 1 + sign].is_ascii_digit() {
            i += 1 + sign;
            digits(&mut i);
        }
    }
    // Any letters, digits or dots that follow belong to the same (possibly malformed) token.
    let tail = text[i..]
        .find(|c: char| !(is_word_char(c) || c == '.'))
        .map_or(text.len(), |n| i + n);
    tail.max(i)
}

fn number(at: usize, text: &str) -> Result<EdmValue> {
    let bad = || invalid(at, format!("malformed number `{text}`"));
    let (body, suffix) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() && !c.eq_ignore_ascii_case(&'e') => {
            (&text[..i], Some(c.to_ascii_uppercase()))
        }
        _ => (text, None),
    };
    let is_double = body.contains(['.', 'e', 'E']);
    if !is_decimal(body) {
        return Err(bad());
    }
    match (suffix, is_double) {
        (Some('L'), false) => body.parse().map(EdmValue::Int64).map_err(|_| bad()),
        (Some('D'), _) | (None, true) => match body.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(EdmValue::Double(v)),
            _ => Err(invalid(at, format!("`{text}` is not a finite Double"))),
        },
        (None, false) => body
            .parse()
            .map(EdmValue::Int32)
            .or_else(|_| body.parse().map(EdmValue::Int64))
            .map_err(|_| bad()),
        _ => Err(bad()),
    }
}

/// `-?digits(.digits)?([eE][+-]?digits)?`: stricter than Rust's float syntax, which would
/// also take `1.` or `.5`.
fn is_decimal(body: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let unsigned = body.strip_prefix('-').unwrap_or(body);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e.strip_prefix(['+', '-']).unwrap_or(e))),
        None => (unsigned, None),
    };
    let whole_and_fraction = match mantissa.split_once('.') {
        Some((whole, fraction)) => digits(whole) && digits(fraction),
        None => digits(mantissa),
    };
    whole_and_fraction && exponent.is_none_or(digits)
}

fn typed(at: usize, prefix: &str, body: &str) -> Result<EdmValue> {
    let bad = |what: &str| invalid(at, format!("malformed {what} literal `{prefix}'{body}'`"));
    if prefix.eq_ignore_ascii_case("datetime") {
        parse_datetime(body)
            .map(EdmValue::DateTime)
            .ok_or_else(|| bad("datetime"))
    } else if prefix.eq_ignore_ascii_case("guid") {
        Uuid::parse_str(body)
            .map(EdmValue::Guid)
            .map_err(|_| bad("guid"))
    } else if prefix.eq_ignore_ascii_case("x") || prefix.eq_ignore_ascii_case("binary") {
        hex(body).map(EdmValue::Binary).ok_or_else(|| bad("binary"))
    } else {
        Err(invalid(
            at,
            format!("literal type `{prefix}'…'` is not supported"),
        ))
    }
}

fn hex(body: &str) -> Option<Vec<u8>> {
    if body.len() % 2 != 0 {
        return None;
    }
    let digits: Option<Vec<u8>> = body
        .chars()
        .map(|c| c.to_digit(16).and_then(|d| u8::try_from(d).ok()))
        .collect();
    Some(
        digits?
            .chunks_exact(2)
            .map(|pair| (pair[0] << 4) | pair[1])
            .collect(),
    )
}

struct Parser<'a> {
    tokens: Vec<(usize, Tok<'a>)>,
    pos: usize,
    depth: usize,
    comparisons: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<(usize, &Tok<'a>)> {
        self.tokens.get(self.pos).map(|(at, tok)| (*at, tok))
    }

    fn peek_word(&self, offset: usize) -> Option<&'a str> {
        match self.tokens.get(self.pos + offset) {
            Some((_, Tok::Word(w))) => Some(w),
            _ => None,
        }
    }

    fn next(&mut self) -> Result<(usize, Tok<'a>)> {
        let end = self.tokens.last().map_or(0, |(at, _)| *at);
        let tok = self
            .tokens
            .get(self.pos)
            .cloned()
            .ok_or_else(|| invalid(end, "unexpected end of filter".into()))?;
        self.pos += 1;
        Ok(tok)
    }

    fn eat_keyword(&mut self, keyword: &str) -> bool {
        let found = self
            .peek_word(0)
            .is_some_and(|w| w.eq_ignore_ascii_case(keyword));
        self.pos += usize::from(found);
        found
    }

    fn nest(&mut self, at: usize) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(invalid(at, format!("nesting deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Filter> {
        let mut left = self.and()?;
        while self.eat_keyword("or") {
            left = left.or(self.and()?);
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Filter> {
        let mut left = self.unary()?;
        while self.eat_keyword("and") {
            left = left.and(self.unary()?);
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Filter> {
        let negation = self
            .peek_word(0)
            .is_some_and(|w| w.eq_ignore_ascii_case("not"))
            && self.peek_word(1).is_none_or(|w| CmpOp::parse(w).is_none());
        if !negation {
            return self.primary();
        }
        let (at, _) = self.next()?;
        let followed_by_group = matches!(self.peek(), Some((_, Tok::Open)))
            || self
                .peek_word(0)
                .is_some_and(|w| w.eq_ignore_ascii_case("not"));
        if !followed_by_group {
            return Err(invalid(
                at,
                "`not` must be followed by a parenthesized expression".into(),
            ));
        }
        self.nest(at)?;
        let inner = self.unary()?;
        self.depth -= 1;
        Ok(inner.not())
    }

    fn primary(&mut self) -> Result<Filter> {
        match self.next()? {
            (at, Tok::Open) => {
                self.nest(at)?;
                let inner = self.or()?;
                self.depth -= 1;
                match self.next()? {
                    (_, Tok::Close) => Ok(inner),
                    (at, tok) => Err(invalid(
                        at,
                        format!("expected `)`, found {}", tok.describe()),
                    )),
                }
            }
            (at, Tok::Word(property)) => self.comparison(at, property),
            (at, tok) => Err(invalid(
                at,
                format!("expected a property name, found {}", tok.describe()),
            )),
        }
    }

    fn comparison(&mut self, at: usize, property: &str) -> Result<Filter> {
        if matches!(self.peek(), Some((_, Tok::Open))) {
            return Err(invalid(
                at,
                format!("function `{property}(…)` is not supported"),
            ));
        }
        let op = match self.next()? {
            (at, Tok::Word(w)) => CmpOp::parse(w)
                .ok_or_else(|| invalid(at, format!("operator `{w}` is not supported")))?,
            (at, tok) => {
                return Err(invalid(
                    at,
                    format!("expected an operator, found {}", tok.describe()),
                ));
            }
        };
        let value = match self.next()? {
            (_, Tok::Str(s)) => EdmValue::String(s),
            (at, Tok::Number(n)) => number(at, n)?,
            (at, Tok::Typed(prefix, body)) => typed(at, prefix, &body)?,
            (_, Tok::Word(w)) if w.eq_ignore_ascii_case("true") => EdmValue::Boolean(true),
            (_, Tok::Word(w)) if w.eq_ignore_ascii_case("false") => EdmValue::Boolean(false),
            (at, Tok::Word(w)) => {
                return Err(invalid(
                    at,
                    format!(
                        "expected a literal, found `{w}` (null and property-to-property comparisons are not supported)"
                    ),
                ));
            }
            (at, tok) => {
                return Err(invalid(
                    at,
                    format!("expected a literal, found {}", tok.describe()),
                ));
            }
        };
        check_property_name(property)?;
        self.comparisons += 1;
        if self.comparisons > MAX_COMPARISONS {
            return Err(invalid(
                at,
                format!("more than {MAX_COMPARISONS} comparisons"),
            ));
        }
        Ok(Filter::compare(property, op, value))
    }
}
