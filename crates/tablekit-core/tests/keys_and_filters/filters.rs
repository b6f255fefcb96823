//! Filter rendering, escaping, parsing and round trips.

use std::ops::Bound;

use chrono::{TimeZone, Utc};
use proptest::prelude::*;
use tablekit_core::Keys;
use tablekit_core::filter::{CmpOp, Filter};
use tablekit_core::keys::{CompoundKey, DOTNET_MAX_TICKS, from_dotnet_ticks};
use tablekit_core::{EdmValue, Error, NameKind};
use uuid::Uuid;

use super::common::tricky_string;

fn render(f: &Filter) -> String {
    f.render().unwrap()
}

#[test]
fn the_guides_filters_render_as_documented() {
    let point = Filter::point(&Keys::new("Sales", "2").unwrap());
    assert_eq!(
        render(&point),
        "(PartitionKey eq 'Sales') and (RowKey eq '2')"
    );
    let emails = Filter::row_prefix("Sales", "email_a");
    assert_eq!(
        render(&emails),
        "(PartitionKey eq 'Sales') and (RowKey ge 'email_a') and (RowKey lt 'email_b')"
    );
    let ids = Filter::row_range(
        "Sales",
        Bound::Included("empid_000100"),
        Bound::Included("empid_000199"),
    );
    assert_eq!(
        render(&ids),
        "(PartitionKey eq 'Sales') and (RowKey ge 'empid_000100') and (RowKey le 'empid_000199')"
    );
    let reviews = CompoundKey::new('_')
        .with_width(1, 6)
        .range_for_prefix(["empid", "123"])
        .unwrap();
    assert_eq!(
        render(&Filter::row_key_range("Sales", &reviews)),
        "(PartitionKey eq 'Sales') and (RowKey ge 'empid_000123') and (RowKey lt 'empid_000123`')"
    );
    let open = Filter::row_range("Sales", Bound::Excluded("a"), Bound::Unbounded);
    assert_eq!(
        render(&open),
        "(PartitionKey eq 'Sales') and (RowKey gt 'a')"
    );
    assert_eq!(
        render(&Filter::row_prefix("Sales", "")),
        "PartitionKey eq 'Sales'"
    );
}

#[test]
fn every_literal_form_renders() {
    let dt = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
    let guid = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    let cases: Vec<(EdmValue, &str)> = vec![
        ("O'Brien".into(), "'O''Brien'"),
        ("".into(), "''"),
        (34.into(), "34"),
        ((-34).into(), "-34"),
        (5_000_000_000_i64.into(), "5000000000L"),
        (1.0.into(), "1.0"),
        (2.5e-8.into(), "2.5E-8"),
        (true.into(), "true"),
        (false.into(), "false"),
        (dt.into(), "datetime'2026-11-22T10:00:00.0000000Z'"),
        (guid.into(), "guid'01234567-89ab-cdef-0123-456789abcdef'"),
        (vec![0x0a_u8, 0xff].into(), "X'0aff'"),
    ];
    for (value, literal) in cases {
        let f = Filter::eq("P", value);
        assert_eq!(render(&f), format!("P eq {literal}"));
        assert_eq!(Filter::parse(&render(&f)).unwrap(), f, "{literal}");
    }
}

#[test]
fn values_a_filter_cannot_express_are_refused() {
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert!(
            matches!(
                Filter::eq("P", v).render(),
                Err(Error::InvalidFilter { .. })
            ),
            "{v}"
        );
    }
    let far = Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap();
    assert!(matches!(
        Filter::eq("P", far).render(),
        Err(Error::InvalidFilter { .. })
    ));
}

#[test]
fn property_names_must_be_identifiers() {
    let long = "a".repeat(256);
    for name in [
        "Manager Rating",
        "",
        "1abc",
        "a-b",
        "E-mail",
        "a.b",
        "Name'",
    ] {
        match Filter::eq(name, 1).render() {
            Err(Error::InvalidName {
                kind: NameKind::Property,
                name: n,
                ..
            }) => assert_eq!(n, name),
            other => panic!("{name:?}: {other:?}"),
        }
    }
    // One past the 255-character limit is a limit error, like every other limit.
    assert!(matches!(
        Filter::eq(long.as_str(), 1).render(),
        Err(Error::LimitExceeded {
            limit: tablekit_core::Limit::PropertyNameChars,
            actual: 256
        })
    ));
    // The bad name is found wherever it sits in the tree.
    assert!(
        Filter::partition("S")
            .and(Filter::eq("Peer Rating", 1).not())
            .render()
            .is_err()
    );
    for name in ["_x", "Größe", "RowKey", "a1", &"a".repeat(255)] {
        assert!(Filter::eq(name, 1).render().is_ok(), "{name:?}");
    }
}

#[test]
fn combinators_parenthesize_and_keep_their_structure() {
    let (a, b, c) = (Filter::eq("A", 1), Filter::eq("B", 2), Filter::eq("C", 3));
    let left = a.clone().and(b.clone()).and(c.clone());
    assert_eq!(render(&left), "(A eq 1) and (B eq 2) and (C eq 3)");
    let right = a.clone().and(b.clone().and(c.clone()));
    assert_eq!(render(&right), "(A eq 1) and ((B eq 2) and (C eq 3))");
    let mixed = a.clone().or(b.clone()).and(c.clone());
    assert_eq!(render(&mixed), "((A eq 1) or (B eq 2)) and (C eq 3)");
    assert_eq!(render(&a.clone().not()), "not (A eq 1)");
    assert_eq!(!a.clone(), a.clone().not());
    assert_eq!(a.clone() & b.clone(), a.clone().and(b.clone()));
    assert_eq!(a.clone() | b.clone(), a.clone().or(b.clone()));
    for f in [left, right, mixed, !(a | b) & !c] {
        assert_eq!(Filter::parse(&render(&f)).unwrap(), f);
    }
}

#[test]
fn raw_text_is_explicit_verbatim_and_detectable() {
    let raw = Filter::raw("startswith(RowKey, 'a')");
    assert!(raw.is_raw() && raw.contains_raw());
    assert_eq!(render(&raw), "startswith(RowKey, 'a')");
    let mixed = Filter::partition("Sales").and(Filter::raw("A eq 1 or B eq 2"));
    assert!(!mixed.is_raw() && mixed.contains_raw());
    assert_eq!(
        render(&mixed),
        "(PartitionKey eq 'Sales') and (A eq 1 or B eq 2)"
    );
    assert!(!Filter::partition("Sales").contains_raw());
    assert_eq!(mixed.comparison_count(), 2);
}

#[test]
fn parsing_ignores_keyword_case_and_accepts_the_other_literal_spellings() {
    let parsed =
        Filter::parse("PartitionKey EQ 'Sales' AND NOT (RowKey Lt 'x') Or Flag eq TRUE").unwrap();
    let built = Filter::partition("Sales")
        .and(Filter::lt("RowKey", "x").not())
        .or(Filter::eq("Flag", true));
    assert_eq!(parsed, built);
    let cases: Vec<(&str, EdmValue)> = vec![
        ("binary'0AFF'", vec![0x0a_u8, 0xff].into()),
        ("x'00'", vec![0_u8].into()),
        ("2.0d", 2.0.into()),
        ("1e3", 1000.0.into()),
        ("5000000000", 5_000_000_000_i64.into()),
        ("-2147483648", i32::MIN.into()),
        ("7l", 7_i64.into()),
        (
            "guid'01234567-89AB-CDEF-0123-456789ABCDEF'",
            Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef).into(),
        ),
        (
            "DateTime'2026-11-22T10:00:00Z'",
            Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap().into(),
        ),
    ];
    for (literal, value) in cases {
        assert_eq!(
            Filter::parse(&format!("P eq {literal}")).unwrap(),
            Filter::eq("P", value),
            "{literal}"
        );
    }
    // Operator names and keywords may also be property names.
    assert_eq!(Filter::parse("not eq 1").unwrap(), Filter::eq("not", 1));
    assert_eq!(Filter::parse("and ge 'x'").unwrap(), Filter::ge("and", "x"));
}

#[test]
fn unsupported_and_corrupted_filters_are_refused() {
    let deep = format!("{}A eq 1{}", "(".repeat(100), ")".repeat(100));
    let many = vec!["A eq 1"; 300].join(" and ");
    let refused = [
        "startswith(RowKey, 'a')",
        "startswith(RowKey, 'a') eq true",
        "substringof('x', Name) eq true",
        "Age add 1 eq 2",
        "Name eq null",
        "A eq B",
        "'Sales' eq PartitionKey",
        "PartitionKey eq 'Sales' och RowKey ge 'S'",
        "PartitionKey eq \u{2019}Sales\u{2019}",
        "PartitionKey eq \"empid_Sales\"",
        "Email eq email_jonesj@contoso.com",
        "(A eq 1",
        "A eq 1)",
        "A eq 'x",
        "not A eq 1",
        "A eq 1e999",
        "A eq NaN",
        "A eq 1.5L",
        "A eq 12abc",
        "A eq 1.",
        "A eq -.5",
        "A eq 1e",
        "A eq 1.5.3",
        "A eq 0x1F",
        "A eq -",
        "A eq 1E5L",
        "A eq time'10:00'",
        "A eq datetime'yesterday'",
        "A eq X'abc'",
        "A eq",
        "A",
        "",
        "A eq 1 and",
        deep.as_str(),
        many.as_str(),
    ];
    for text in refused {
        match Filter::parse(text) {
            Err(Error::InvalidFilter { .. }) => {}
            other => panic!("{text:?}: {other:?}"),
        }
    }
    let long = format!("{} eq 1", "a".repeat(256));
    assert!(matches!(
        Filter::parse(&long),
        Err(Error::LimitExceeded { .. })
    ));
}

/// A tokenizer written independently of the crate's parser: words, parentheses and
/// single-quoted strings (with `''` for a quote); anything else is reported as `Other`.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Open,
    Close,
    Word(String),
    Str(String),
    Other(String),
}

fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            ' ' => {}
            '(' => tokens.push(Token::Open),
            ')' => tokens.push(Token::Close),
            '\'' => {
                let mut s = String::new();
                loop {
                    match (chars.get(i), chars.get(i + 1)) {
                        (Some('\''), Some('\'')) => {
                            s.push('\'');
                            i += 2;
                        }
                        (Some('\''), _) => {
                            i += 1;
                            tokens.push(Token::Str(s));
                            break;
                        }
                        (Some(&c), _) => {
                            s.push(c);
                            i += 1;
                        }
                        (None, _) => {
                            tokens.push(Token::Other(format!("unterminated '{s}")));
                            break;
                        }
                    }
                }
            }
            c if c.is_ascii_alphanumeric() => {
                let mut w = c.to_string();
                while let Some(&c) = chars.get(i).filter(|c| c.is_ascii_alphanumeric()) {
                    w.push(c);
                    i += 1;
                }
                tokens.push(Token::Word(w));
            }
            other => tokens.push(Token::Other(other.to_string())),
        }
    }
    tokens
}

fn word(w: &str) -> Token {
    Token::Word(w.to_owned())
}

fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        tricky_string(24),
        Just("' or true or '".to_owned()),
        Just("x') or (RowKey ne '".to_owned()),
        Just("''''".to_owned()),
        Just("%27 or 1 eq 1 %00".to_owned()),
        Just("\u{2019}Sales\u{2019}".to_owned()),
        Just("a\nb\r\u{0}\u{7f}".to_owned()),
    ]
}

proptest! {
    #[test]
    fn a_string_literal_never_escapes_its_quotes(s in hostile_string(), t in hostile_string()) {
        let single = render(&Filter::eq("Name", s.as_str()));
        prop_assert_eq!(tokenize(&single), vec![word("Name"), word("eq"), Token::Str(s.clone())]);

        let both = render(&Filter::eq("Name", s.as_str()).and(Filter::ne("Other", t.as_str())));
        let expected = vec![
            Token::Open, word("Name"), word("eq"), Token::Str(s.clone()), Token::Close,
            word("and"),
            Token::Open, word("Other"), word("ne"), Token::Str(t.clone()), Token::Close,
        ];
        prop_assert_eq!(tokenize(&both), expected);
        prop_assert_eq!(Filter::parse(&both).unwrap().render().unwrap(), both);
    }
}

fn property() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[A-Za-z_][A-Za-z0-9_]{0,12}",
        1 => prop::sample::select(vec!["PartitionKey", "RowKey", "not", "and", "or", "true", "X", "datetime", "Größe"])
            .prop_map(str::to_owned),
    ]
}

fn value() -> impl Strategy<Value = EdmValue> {
    let finite = prop::num::f64::POSITIVE
        | prop::num::f64::NEGATIVE
        | prop::num::f64::NORMAL
        | prop::num::f64::SUBNORMAL
        | prop::num::f64::ZERO;
    prop_oneof![
        tricky_string(12).prop_map(EdmValue::String),
        any::<i32>().prop_map(EdmValue::Int32),
        any::<i64>().prop_map(EdmValue::Int64),
        finite.prop_map(EdmValue::Double),
        any::<bool>().prop_map(EdmValue::Boolean),
        (0..=DOTNET_MAX_TICKS).prop_map(|t| EdmValue::DateTime(from_dotnet_ticks(t).unwrap())),
        any::<u128>().prop_map(|g| EdmValue::Guid(Uuid::from_u128(g))),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(EdmValue::Binary),
    ]
}

fn op() -> impl Strategy<Value = CmpOp> {
    prop::sample::select(vec![
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Gt,
        CmpOp::Ge,
        CmpOp::Lt,
        CmpOp::Le,
    ])
}

pub(crate) fn filter() -> impl Strategy<Value = Filter> {
    let leaf = (property(), op(), value()).prop_map(|(p, op, v)| Filter::compare(p, op, v));
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.and(b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.or(b)),
            inner.prop_map(Filter::not),
        ]
    })
}

proptest! {
    #[test]
    fn parse_inverts_render(f in filter()) {
        let text = f.render().unwrap();
        prop_assert_eq!(Filter::parse(&text).unwrap(), f, "{}", text);
    }
}
