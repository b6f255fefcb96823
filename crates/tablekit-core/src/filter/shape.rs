//! How a filter is classified into a [`QueryShape`].

use crate::edm::EdmValue;
use crate::query_shape::QueryShape;

use super::ast::{CmpOp, Filter, PARTITION_KEY, ROW_KEY};

/// A conjunct of the top-level conjunction: a filter, or raw text that does not parse.
#[derive(Clone, Copy)]
enum Conjunct<'a> {
    Known(&'a Filter),
    Opaque,
}

/// Flattens the top-level `and`s, looking through raw text that parses.
fn conjuncts<'a>(filter: &'a Filter, out: &mut Vec<Conjunct<'a>>) {
    match filter {
        Filter::And(left, right) => {
            conjuncts(left, out);
            conjuncts(right, out);
        }
        Filter::Raw(raw) => match raw.parsed() {
            Some(parsed) => conjuncts(parsed, out),
            None => out.push(Conjunct::Opaque),
        },
        other => out.push(Conjunct::Known(other)),
    }
}

/// The string `filter` compares `property` with, if it is a string comparison by `op`.
fn string_comparison<'a>(
    filter: Conjunct<'a>,
    property: &str,
    ops: fn(CmpOp) -> bool,
) -> Option<&'a str> {
    match filter {
        Conjunct::Known(Filter::Compare {
            property: p,
            op,
            value: EdmValue::String(s),
        }) if p == property && ops(*op) => Some(s),
        _ => None,
    }
}

fn fixes_partition_key(c: Conjunct<'_>) -> Option<&str> {
    string_comparison(c, PARTITION_KEY, |op| op == CmpOp::Eq)
}

/// Whether `or` may occur in `filter`; text that does not parse may hold anything.
fn may_have_disjunction(filter: &Filter) -> bool {
    match filter {
        Filter::Or(..) => true,
        Filter::Compare { .. } => false,
        Filter::And(left, right) => may_have_disjunction(left) || may_have_disjunction(right),
        Filter::Not(inner) => may_have_disjunction(inner),
        Filter::Raw(raw) => raw.parsed().is_none_or(may_have_disjunction),
    }
}

/// Whether `filter` compares PartitionKey with `gt ge lt le` anywhere.
fn bounds_partition_key(filter: &Filter) -> bool {
    match filter {
        Filter::Compare { property, op, .. } => property == PARTITION_KEY && op.is_range(),
        Filter::And(left, right) | Filter::Or(left, right) => {
            bounds_partition_key(left) || bounds_partition_key(right)
        }
        Filter::Not(inner) => bounds_partition_key(inner),
        Filter::Raw(raw) => raw.parsed().is_some_and(bounds_partition_key),
    }
}

impl Filter {
    /// How the service will execute this filter, by the design guide's classification of queries
    /// applied to the top-level conjunction (`a and b and …`):
    ///
    /// 1. no conjunct `PartitionKey eq '…'` (or several with different values) →
    ///    [`QueryShape::TableScan`];
    /// 2. a conjunct `RowKey eq '…'` and no `or` anywhere → [`QueryShape::Point`];
    /// 3. every other conjunct is `RowKey gt|ge|lt|le '…'`, no `or` → [`QueryShape::Range`]
    ///    (this includes a PartitionKey alone: the whole partition is one index range);
    /// 4. anything else → [`QueryShape::PartitionScan`], including `or` over RowKeys and
    ///    `RowKey ne '…'`.
    ///
    /// Raw text is classified by parsing it; text that does not parse counts as an unknown
    /// condition that may contain `or` (a raw filter alone is then a table scan).
    pub fn shape(&self) -> QueryShape {
        let mut all = Vec::new();
        conjuncts(self, &mut all);
        if self.partition_key().is_none() {
            return QueryShape::TableScan;
        }
        let no_disjunction = all.iter().all(|c| match c {
            Conjunct::Known(f) => !may_have_disjunction(f),
            Conjunct::Opaque => false,
        });
        let row_key_eq =
            |c: &Conjunct<'_>| string_comparison(*c, ROW_KEY, |op| op == CmpOp::Eq).is_some();
        if no_disjunction && all.iter().any(row_key_eq) {
            return QueryShape::Point;
        }
        let row_key_bound = |c: &Conjunct<'_>| {
            fixes_partition_key(*c).is_some()
                || string_comparison(*c, ROW_KEY, CmpOp::is_range).is_some()
        };
        if no_disjunction && all.iter().all(row_key_bound) {
            return QueryShape::Range;
        }
        QueryShape::PartitionScan
    }

    /// The one PartitionKey this filter is confined to: the value of its top-level
    /// `PartitionKey eq '…'` conjuncts, when there is at least one and they all agree.
    pub fn partition_key(&self) -> Option<&str> {
        let mut all = Vec::new();
        conjuncts(self, &mut all);
        let mut values = all.into_iter().filter_map(fixes_partition_key);
        let first = values.next()?;
        values.all(|v| v == first).then_some(first)
    }

    /// Lint: whether the filter bounds PartitionKey with `gt ge lt le` without fixing it to one
    /// value. Such a query crosses partitions: it scans like a table scan and returns a
    /// continuation token at every partition boundary.
    pub fn has_partition_key_range(&self) -> bool {
        self.partition_key().is_none() && bounds_partition_key(self)
    }
}
