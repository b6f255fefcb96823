//! The filter syntax tree, its constructors and combinators.

use std::fmt;
use std::ops::{BitAnd, BitOr, Bound, Not};

use crate::edm::EdmValue;
use crate::keys::{KeyRange, Keys, prefix_range};

/// The name of the PartitionKey system property.
pub const PARTITION_KEY: &str = "PartitionKey";
/// The name of the RowKey system property.
pub const ROW_KEY: &str = "RowKey";

/// A comparison operator of an OData `$filter`: the six the Table service supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `eq`: equal.
    Eq,
    /// `ne`: not equal.
    Ne,
    /// `gt`: greater than.
    Gt,
    /// `ge`: greater than or equal.
    Ge,
    /// `lt`: less than.
    Lt,
    /// `le`: less than or equal.
    Le,
}

impl CmpOp {
    /// The operator as written in a filter (`eq`, `ge`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
        }
    }

    /// Parses an operator, ignoring ASCII case (`EQ`, `Ge`).
    pub fn parse(word: &str) -> Option<Self> {
        [
            CmpOp::Eq,
            CmpOp::Ne,
            CmpOp::Gt,
            CmpOp::Ge,
            CmpOp::Lt,
            CmpOp::Le,
        ]
        .into_iter()
        .find(|op| op.as_str().eq_ignore_ascii_case(word))
    }

    /// Whether this operator bounds a range (`gt ge lt le`).
    pub fn is_range(self) -> bool {
        matches!(self, CmpOp::Gt | CmpOp::Ge | CmpOp::Lt | CmpOp::Le)
    }
}

impl fmt::Display for CmpOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A typed OData filter: comparisons of a property with a literal, combined with `and`,
/// `or` and `not`.
///
/// Values are typed ([`EdmValue`]) and rendered with the right literal syntax and escaping by
/// [`Filter::render`], so no user string can change a filter's structure. The only way to put
/// unchecked text into a filter is [`Filter::raw`].
///
/// Property names are checked when the filter is rendered: letters, digits and `_`, not
/// starting with a digit, at most 255 characters.
///
/// # Example
/// ```
/// use tablekit_core::QueryShape;
/// use tablekit_core::filter::Filter;
/// let f = Filter::eq("PartitionKey", "Sales").and(Filter::ge("RowKey", "S"));
/// assert_eq!(f.render().unwrap(), "(PartitionKey eq 'Sales') and (RowKey ge 'S')");
/// assert_eq!(f.shape(), QueryShape::Range);
/// assert_eq!(Filter::parse("PartitionKey eq 'Sales' and RowKey ge 'S'").unwrap(), f);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Filter {
    /// `property op value`.
    Compare {
        /// The property name.
        property: String,
        /// The operator.
        op: CmpOp,
        /// The literal compared with.
        value: EdmValue,
    },
    /// Both hold.
    And(Box<Filter>, Box<Filter>),
    /// Either holds.
    Or(Box<Filter>, Box<Filter>),
    /// The inner filter does not hold.
    Not(Box<Filter>),
    /// Unchecked filter text, made by [`Filter::raw`].
    Raw(RawFilter),
}

/// Filter text passed through unchecked, with its parse (if it parses) kept for
/// classification. Two raw filters are equal when their texts are.
#[derive(Debug, Clone)]
pub struct RawFilter {
    text: String,
    parsed: Option<Box<Filter>>,
}

impl RawFilter {
    /// The text, exactly as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The text parsed as a filter, or `None` when it is outside the supported subset.
    pub fn parsed(&self) -> Option<&Filter> {
        self.parsed.as_deref()
    }
}

impl PartialEq for RawFilter {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

macro_rules! comparison_constructors {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(property: impl Into<String>, value: impl Into<EdmValue>) -> Self {
            Self::compare(property, CmpOp::$op, value)
        }
    )*};
}

impl Filter {
    /// `property op value`.
    pub fn compare(property: impl Into<String>, op: CmpOp, value: impl Into<EdmValue>) -> Self {
        Filter::Compare {
            property: property.into(),
            op,
            value: value.into(),
        }
    }

    comparison_constructors! {
        /// `property eq value`.
        eq => Eq,
        /// `property ne value`.
        ne => Ne,
        /// `property gt value`.
        gt => Gt,
        /// `property ge value`.
        ge => Ge,
        /// `property lt value`.
        lt => Lt,
        /// `property le value`.
        le => Le,
    }

    /// Unchecked filter text, rendered verbatim. Use it only for text that never contains
    /// user input; it is the one way to bypass the typed literals. The text is parsed once to
    /// classify it ([`Filter::shape`]); see [`Filter::is_raw`].
    pub fn raw(text: impl Into<String>) -> Self {
        let text = text.into();
        let parsed = Filter::parse(&text).ok().map(Box::new);
        Filter::Raw(RawFilter { text, parsed })
    }

    /// Whether this filter is unchecked text made by [`Filter::raw`].
    pub fn is_raw(&self) -> bool {
        matches!(self, Filter::Raw(_))
    }

    /// Whether unchecked text occurs anywhere in this filter.
    pub fn contains_raw(&self) -> bool {
        match self {
            Filter::Raw(_) => true,
            Filter::Compare { .. } => false,
            Filter::And(l, r) | Filter::Or(l, r) => l.contains_raw() || r.contains_raw(),
            Filter::Not(inner) => inner.contains_raw(),
        }
    }

    /// Both `self` and `other` hold.
    pub fn and(self, other: Filter) -> Self {
        Filter::And(Box::new(self), Box::new(other))
    }

    /// `self` or `other` holds.
    pub fn or(self, other: Filter) -> Self {
        Filter::Or(Box::new(self), Box::new(other))
    }

    /// `self` does not hold.
    // An inherent method (besides `impl Not`) so `.not()` works without importing the trait.
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Self {
        Filter::Not(Box::new(self))
    }

    /// The number of comparisons in the filter (raw text counts as one). The service accepts
    /// at most 15 comparisons in one `$filter`.
    pub fn comparison_count(&self) -> usize {
        match self {
            Filter::Compare { .. } | Filter::Raw(_) => 1,
            Filter::And(l, r) | Filter::Or(l, r) => l.comparison_count() + r.comparison_count(),
            Filter::Not(inner) => inner.comparison_count(),
        }
    }

    /// `PartitionKey eq 'pk'`: every entity of one partition.
    pub fn partition(pk: impl AsRef<str>) -> Self {
        Filter::eq(PARTITION_KEY, pk.as_ref())
    }

    /// `(PartitionKey eq 'pk') and (RowKey eq 'rk')`: a point query.
    pub fn point(keys: &Keys) -> Self {
        Filter::partition(keys.pk()).and(Filter::eq(ROW_KEY, keys.rk()))
    }

    /// The RowKeys of partition `pk` between `lower` and `upper`: `ge`/`gt` and `le`/`lt`
    /// comparisons for included/excluded bounds, none for unbounded ones.
    pub fn row_range(pk: impl AsRef<str>, lower: Bound<&str>, upper: Bound<&str>) -> Self {
        let mut filter = Filter::partition(pk);
        match lower {
            Bound::Included(key) => filter = filter.and(Filter::ge(ROW_KEY, key)),
            Bound::Excluded(key) => filter = filter.and(Filter::gt(ROW_KEY, key)),
            Bound::Unbounded => {}
        }
        match upper {
            Bound::Included(key) => filter = filter.and(Filter::le(ROW_KEY, key)),
            Bound::Excluded(key) => filter = filter.and(Filter::lt(ROW_KEY, key)),
            Bound::Unbounded => {}
        }
        filter
    }

    /// The RowKeys of partition `pk` inside `range` (an empty start is left unbounded).
    /// With [`CompoundKey::range_for_prefix`](crate::keys::CompoundKey::range_for_prefix) this
    /// selects the rows of one compound-key prefix.
    pub fn row_key_range(pk: impl AsRef<str>, range: &KeyRange) -> Self {
        let lower = match range.start.as_str() {
            "" => Bound::Unbounded,
            start => Bound::Included(start),
        };
        let upper = range
            .end
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Excluded);
        Filter::row_range(pk, lower, upper)
    }

    /// The RowKeys of partition `pk` that start with `prefix`, via [`prefix_range`]:
    /// `row_prefix("Sales", "email_a")` is
    /// `(PartitionKey eq 'Sales') and (RowKey ge 'email_a') and (RowKey lt 'email_b')`.
    pub fn row_prefix(pk: impl AsRef<str>, prefix: &str) -> Self {
        Filter::row_key_range(pk, &prefix_range(prefix))
    }
}

impl Not for Filter {
    type Output = Filter;
    fn not(self) -> Filter {
        Filter::Not(Box::new(self))
    }
}

impl BitAnd for Filter {
    type Output = Filter;
    fn bitand(self, other: Filter) -> Filter {
        self.and(other)
    }
}

impl BitOr for Filter {
    type Output = Filter;
    fn bitor(self, other: Filter) -> Filter {
        self.or(other)
    }
}
