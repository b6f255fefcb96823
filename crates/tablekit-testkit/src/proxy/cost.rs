//! What a request costs against the Table service's scalability targets: how many entities it
//! touches and in which partitions, read from its URL, its body (inserts and transactions) or
//! its response (queries).

use serde_json::Value;

/// Entities a request is charged, by partition; `None` is the account's budget alone (the
/// partition is unknown, or the request addresses none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Cost {
    parts: Vec<(Option<String>, u64)>,
}

impl Cost {
    /// `n` entities against the account only.
    pub(crate) fn account(n: u64) -> Self {
        let mut cost = Self::default();
        cost.add(None, n);
        cost
    }

    /// `n` entities in partition `pk` (and so in the account).
    pub(crate) fn partition(pk: impl Into<String>, n: u64) -> Self {
        let mut cost = Self::default();
        cost.add(Some(pk.into()), n);
        cost
    }

    pub(crate) fn add(&mut self, pk: Option<String>, n: u64) {
        match self.parts.iter_mut().find(|(p, _)| *p == pk) {
            Some((_, count)) => *count += n,
            None => self.parts.push((pk, n)),
        }
    }

    /// Puts every named partition in `table`: the service's partitions are a table's
    /// PartitionKeys, so the same key in two tables is two partitions with two budgets.
    pub(crate) fn in_table(mut self, table: &str) -> Self {
        for (pk, _) in &mut self.parts {
            if let Some(key) = pk {
                *key = partition_name(table, key);
            }
        }
        self
    }

    /// This cost and `other`'s, partition by partition.
    pub(crate) fn plus(mut self, other: &Cost) -> Self {
        for (pk, n) in &other.parts {
            self.add(pk.clone(), *n);
        }
        self
    }

    /// Every entity, which is what the account is charged.
    pub(crate) fn total(&self) -> u64 {
        self.parts.iter().map(|(_, n)| n).sum()
    }

    /// The entities charged to named partitions, by partition.
    pub(crate) fn partitions(&self) -> impl Iterator<Item = (&str, u64)> {
        self.parts
            .iter()
            .filter_map(|(pk, n)| pk.as_deref().map(|pk| (pk, *n)))
    }
}

/// The name of partition `pk` of `table` in the buckets: `{table}/{pk}`. Neither a table name
/// nor a PartitionKey can contain `/`, so the name is unambiguous.
pub(crate) fn partition_name(table: &str, pk: &str) -> String {
    format!("{table}/{pk}")
}

/// The PartitionKey part of a bucket's partition name (all of it when it names no table).
pub(crate) fn key_of(name: &str) -> &str {
    name.split_once('/').map_or(name, |(_, pk)| pk)
}

/// The table a request path addresses: its last segment up to any `(`, decoded
/// (`Orders(PartitionKey='a',RowKey='b')`, `Orders()` and `Orders` all name `Orders`).
pub(crate) fn table_of(path: &str) -> String {
    let segment = percent_decode(last_segment(path), false);
    segment
        .split_once('(')
        .map_or(segment.as_str(), |(table, _)| table)
        .to_owned()
}

/// What a request is, as far as its cost goes; decided from its head alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Class {
    /// The cost is known from the URL.
    Fixed(Cost),
    /// A `POST` that may insert an entity: the partition is in the JSON body.
    Insert,
    /// `POST …/$batch`: every operation in the multipart body counts.
    Batch,
    /// `GET …/Table()`: charged the entities scanned, after the response. `pinned` is the
    /// partition the filter restricts the query to, when it names exactly one.
    Query { pinned: Option<String> },
}

/// Classifies a request by method, path and query (as sent, percent-encoded).
pub(crate) fn classify(method: &str, path: &str, query: &str) -> Class {
    let segment = last_segment(path);
    let post = method.eq_ignore_ascii_case("POST");
    if post && percent_decode(segment, false) == "$batch" {
        return Class::Batch;
    }
    if let Some(pk) = key_predicate(segment) {
        return Class::Fixed(Cost::partition(pk, 1));
    }
    if method.eq_ignore_ascii_case("GET") && segment.len() > 2 && segment.ends_with("()") {
        return Class::Query {
            pinned: filter_of(query).and_then(|f| pinned_partition(&f)),
        };
    }
    if post && !segment.contains('(') && !segment.eq_ignore_ascii_case("Tables") {
        return Class::Insert;
    }
    Class::Fixed(Cost::account(1))
}

/// What an entity of `bytes` bytes (its JSON) counts against the targets, which Azure states
/// for entities of 1 KiB: one per KiB begun, at least one.
pub(crate) fn entity_units(bytes: usize) -> u64 {
    u64::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u64::MAX)
}

/// The cost of an insert (or any `POST`) with this decoded body: its entity, in KiB units (see
/// [`entity_units`]), in the partition its JSON names, or one against the account when it
/// names none (a queue message, a body that is not an entity).
pub(crate) fn insert_cost(body: &[u8]) -> Cost {
    match entity_partition(body) {
        Some(pk) => Cost::partition(pk, entity_units(body.len())),
        None => Cost::account(1),
    }
}

/// The cost of a query whose response had `status` and this decoded body: each returned entity
/// in its `PartitionKey` (or in `pinned` when a projection left the key out, or else the
/// account). A response without entities (an empty page, an error) costs one, in `pinned` if
/// the query named a partition.
pub(crate) fn query_cost(status: u16, body: &[u8], pinned: Option<&str>) -> Cost {
    let empty = || match pinned {
        Some(pk) => Cost::partition(pk, 1),
        None => Cost::account(1),
    };
    if status != 200 {
        return empty();
    }
    let Ok(json) = serde_json::from_slice::<Value>(body) else {
        return empty();
    };
    let units_of = |entity: &Value| entity_units(entity.to_string().len());
    let partition_of = |entity: &Value| {
        entity
            .get("PartitionKey")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| pinned.map(str::to_owned))
    };
    let mut cost = Cost::default();
    for entity in entities_of(&json) {
        cost.add(partition_of(entity), units_of(entity));
    }
    if cost.total() == 0 {
        return empty();
    }
    cost
}

/// The key conditions that bound what a filtered query scans, when the query may scan entities
/// it does not return: the filter's top-level `and` terms that compare `PartitionKey` or
/// `RowKey` with a string (joined with `and`; empty when there are none, so the scan runs
/// through the table). `None` when every entity scanned is returned: no filter, or a filter of
/// key conditions only.
pub(crate) fn scan_bounds(query: &str) -> Option<String> {
    let filter = filter_of(query)?;
    let terms = conjuncts(&filter);
    let keys: Vec<&str> = terms.iter().copied().filter(|t| is_key_term(t)).collect();
    if keys.len() == terms.len() {
        return None;
    }
    Some(
        keys.iter()
            .map(|t| format!("({t})"))
            .collect::<Vec<_>>()
            .join(" and "),
    )
}

/// The `$top`, `$filter` and `$select` options are the query's own; everything else in its
/// query string (continuation, signature) carries over to a scan of the same range.
pub(crate) fn is_query_option(name: &str) -> bool {
    matches!(
        percent_decode(name, true).as_str(),
        "$top" | "$filter" | "$select"
    )
}

/// The top-level `and` terms of a filter, outer parentheses removed.
fn conjuncts(filter: &str) -> Vec<&str> {
    let filter = strip_parens(filter.trim());
    let mut terms = Vec::new();
    let (mut depth, mut start, mut in_literal) = (0usize, 0, false);
    let bytes = filter.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            // A doubled quote inside a literal toggles twice: the literal goes on.
            b'\'' => in_literal = !in_literal,
            b'(' if !in_literal => depth += 1,
            b')' if !in_literal => depth = depth.saturating_sub(1),
            b' ' if !in_literal && depth == 0 => {
                let rest = &bytes[i + 1..];
                if rest.len() > 4
                    && rest[..3].eq_ignore_ascii_case(b"and")
                    && matches!(rest[3], b' ' | b'(')
                {
                    terms.push(filter[start..i].trim());
                    start = i + 4;
                    i += 4;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    terms.push(filter[start..].trim());
    terms.retain(|t| !t.is_empty());
    if terms.len() < 2 {
        return terms;
    }
    // A term may be a parenthesised conjunction of its own.
    terms.into_iter().flat_map(conjuncts).collect()
}

/// `s` without parentheses that enclose all of it.
fn strip_parens(mut s: &str) -> &str {
    while let Some(inner) = s.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        // `(a) and (b)` starts and ends with parentheses that are not a pair.
        let (mut depth, mut in_literal) = (0usize, false);
        let pair = inner.bytes().all(|b| {
            match b {
                b'\'' => in_literal = !in_literal,
                b'(' if !in_literal => depth += 1,
                b')' if !in_literal => {
                    if depth == 0 {
                        return false;
                    }
                    depth -= 1;
                }
                _ => {}
            }
            true
        });
        if !pair {
            break;
        }
        s = inner.trim();
    }
    s
}

/// A comparison of `PartitionKey` or `RowKey` with a string, which bounds a scan.
fn is_key_term(term: &str) -> bool {
    let ranged = |op: &str| {
        ["eq", "gt", "ge", "lt", "le"]
            .iter()
            .any(|o| op.eq_ignore_ascii_case(o))
    };
    let key = |k: &str| k == "PartitionKey" || k == "RowKey";
    matches!(
        filter_tokens(term).as_slice(),
        [Token::Word(k), Token::Word(op), Token::Literal(_)]
            | [Token::Literal(_), Token::Word(op), Token::Word(k)]
            if key(k) && ranged(op)
    )
}

/// A filter that ends a scan at the entity with keys `(pk, rk)`, included.
pub(crate) fn through(pk: &str, rk: &str) -> String {
    let (pk, rk) = (pk.replace('\'', "''"), rk.replace('\'', "''"));
    format!("(PartitionKey lt '{pk}' or (PartitionKey eq '{pk}' and RowKey le '{rk}'))")
}

/// The entities of a query response (a page's `value`, or a single entity), if it has any.
fn entities_of(json: &Value) -> Vec<&Value> {
    match json.get("value").and_then(Value::as_array) {
        Some(entities) => entities.iter().collect(),
        None if json.get("PartitionKey").is_some() => vec![json],
        None => Vec::new(),
    }
}

/// The keys of the last entity of a query response, when it has them.
pub(crate) fn last_keys(body: &[u8]) -> Option<(String, String)> {
    let json: Value = serde_json::from_slice(body).ok()?;
    let last = *entities_of(&json).last()?;
    let key = |k: &str| last.get(k).and_then(Value::as_str).map(str::to_owned);
    Some((key("PartitionKey")?, key("RowKey")?))
}

/// One per entity of a query response, in its partition.
pub(crate) fn entity_count(body: &[u8]) -> Cost {
    let mut cost = Cost::default();
    if let Ok(json) = serde_json::from_slice::<Value>(body) {
        for entity in entities_of(&json) {
            let pk = entity.get("PartitionKey").and_then(Value::as_str);
            cost.add(pk.map(str::to_owned), 1);
        }
    }
    cost
}

/// What a query costs that returned `returned` (its entities' units, see [`query_cost`]; their
/// number, one each, is `returned_count`) and scanned `scanned` (one per entity): each entity it
/// scanned and did not return costs one more, in its partition.
pub(crate) fn with_scanned(mut returned: Cost, returned_count: &Cost, scanned: &Cost) -> Cost {
    for (pk, n) in scanned.partitions() {
        let kept = returned_count
            .partitions()
            .find(|(p, _)| *p == pk)
            .map_or(0, |(_, n)| n);
        let extra = n.saturating_sub(kept);
        if extra > 0 {
            returned.add(Some(pk.to_owned()), extra);
        }
    }
    returned
}

/// The last non-empty segment of a path.
pub(crate) fn last_segment(path: &str) -> &str {
    path.rsplit('/').find(|s| !s.is_empty()).unwrap_or_default()
}

/// The partition key of an entity path segment such as
/// `Orders(PartitionKey='O%27%27Brien',RowKey='1')`, decoded: percent-encoding undone first,
/// then the OData quote doubling.
pub(crate) fn key_predicate(segment: &str) -> Option<String> {
    let decoded = percent_decode(segment, false);
    let open = decoded.find('(')?;
    let inner = decoded[open + 1..].strip_suffix(')')?;
    // The whole predicate must parse, so a malformed one names no partition.
    let mut rest = inner;
    let mut pk = None;
    loop {
        let (name, after) = rest.split_once('=')?;
        let (value, after) = literal(after.trim_start())?;
        if name.trim() == "PartitionKey" {
            pk = Some(value);
        }
        let after = after.trim_start();
        if after.is_empty() {
            return pk;
        }
        rest = after.strip_prefix(',')?;
    }
}

/// Reads a quoted OData string literal (`'it''s'`) from the start of `s`: its value and what
/// follows it.
fn literal(s: &str) -> Option<(String, &str)> {
    let mut rest = s.strip_prefix('\'')?;
    let mut value = String::new();
    loop {
        let end = rest.find('\'')?;
        value.push_str(&rest[..end]);
        rest = &rest[end + 1..];
        match rest.strip_prefix('\'') {
            Some(after) => {
                value.push('\'');
                rest = after;
            }
            None => return Some((value, rest)),
        }
    }
}

/// The decoded `$filter` of a query string.
fn filter_of(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (percent_decode(name, true) == "$filter").then(|| percent_decode(value, true))
    })
}

/// The partition a filter restricts a query to: a `PartitionKey eq '…'` comparison, in a
/// filter without `or` or `not` (which could widen it to other partitions).
fn pinned_partition(filter: &str) -> Option<String> {
    let tokens = filter_tokens(filter);
    let widening = tokens.iter().any(|t| {
        matches!(t, Token::Word(w) if w.eq_ignore_ascii_case("or") || w.eq_ignore_ascii_case("not"))
    });
    if widening {
        return None;
    }
    tokens.windows(3).find_map(|w| match w {
        [Token::Word(key), Token::Word(op), Token::Literal(pk)]
        | [Token::Literal(pk), Token::Word(op), Token::Word(key)]
            if key == "PartitionKey" && op.eq_ignore_ascii_case("eq") =>
        {
            Some(pk.clone())
        }
        _ => None,
    })
}

#[derive(Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    Literal(String),
}

/// Words and string literals of a filter; parentheses separate words and are dropped.
fn filter_tokens(filter: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut rest = filter;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '(' || c == ')');
        if rest.is_empty() {
            return tokens;
        }
        if rest.starts_with('\'') {
            let Some((value, after)) = literal(rest) else {
                // An unterminated literal: nothing after it can be trusted.
                return tokens;
            };
            tokens.push(Token::Literal(value));
            rest = after;
        } else {
            let end = rest
                .find(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '\''))
                .unwrap_or(rest.len());
            tokens.push(Token::Word(rest[..end].to_owned()));
            rest = &rest[end..];
        }
    }
}

/// Undoes percent-encoding (and, in query strings, `+` for space); malformed escapes stay as
/// they are, and bytes that are not UTF-8 become U+FFFD.
fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: &u8| char::from(*b).to_digit(16);
        match bytes[i] {
            b'%' => match (
                bytes.get(i + 1).and_then(hex),
                bytes.get(i + 2).and_then(hex),
            ) {
                (Some(hi), Some(lo)) => {
                    // Two hex digits make at most 255.
                    out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_is_space => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The partition key of a JSON entity body, if it is one and names it.
pub(crate) fn entity_partition(body: &[u8]) -> Option<String> {
    let json: Value = serde_json::from_slice(body).ok()?;
    json.get("PartitionKey")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(method: &str, path: &str) -> Cost {
        match classify(method, path, "") {
            Class::Fixed(cost) => cost,
            other => panic!("{method} {path}: {other:?}"),
        }
    }

    #[test]
    fn entity_urls_name_their_partition_with_quotes_and_escapes_undone() {
        let cases = [
            ("/devstoreaccount1/T(PartitionKey='a',RowKey='b')", "a"),
            // What tablekit sends for O'Brien: the doubled quote percent-encoded.
            ("/T(PartitionKey='O%27%27Brien',RowKey='1')", "O'Brien"),
            // The same key with the quotes left as they are.
            ("/T(PartitionKey='O''Brien',RowKey='1')", "O'Brien"),
            (
                "/acct/T(PartitionKey='na%C3%AFve%20x%2By',RowKey='%E6%9D%B1')",
                "naïve x+y",
            ),
            // A key that looks like the syntax around it, and keys in the other order.
            (
                "/T(RowKey='PartitionKey=''z'',',PartitionKey='a,b=c)')",
                "a,b=c)",
            ),
            ("/T(PartitionKey=%27%25%27,RowKey=%27r%27)", "%"),
            ("/T(PartitionKey='',RowKey='')", ""),
        ];
        for (path, pk) in cases {
            for method in ["GET", "PUT", "MERGE", "PATCH", "DELETE", "POST"] {
                assert_eq!(
                    fixed(method, path),
                    Cost::partition(pk, 1),
                    "{method} {path}"
                );
            }
        }
    }

    #[test]
    fn requests_without_a_partition_cost_the_account_one() {
        for (method, path) in [
            ("GET", "/devstoreaccount1/Tables"),
            ("POST", "/devstoreaccount1/Tables"),
            ("DELETE", "/devstoreaccount1/Tables('t1')"),
            ("PUT", "/devstoreaccount1/container"),
            ("GET", "/devstoreaccount1/container/blob"),
            ("GET", "/"),
            ("GET", "/T(PartitionKey='unterminated,RowKey='x')"),
        ] {
            assert_eq!(fixed(method, path), Cost::account(1), "{method} {path}");
        }
        assert_eq!(classify("POST", "/acct/T", ""), Class::Insert);
        assert_eq!(classify("post", "/acct/q/messages", ""), Class::Insert);
        assert_eq!(classify("POST", "/acct/$batch", ""), Class::Batch);
        assert_eq!(classify("POST", "/acct/%24batch", ""), Class::Batch);
        assert_eq!(
            insert_cost(br#"{"PartitionKey":"p\"q","RowKey":"r"}"#),
            Cost::partition("p\"q", 1)
        );
        assert_eq!(
            insert_cost(b"<QueueMessage><MessageText>x</MessageText></QueueMessage>"),
            Cost::account(1)
        );
        assert_eq!(insert_cost(br#"{"TableName":"t1"}"#), Cost::account(1));
    }

    #[test]
    fn queries_are_pinned_to_the_one_partition_their_filter_names() {
        let pinned = |query: &str| match classify("GET", "/acct/T()", query) {
            Class::Query { pinned } => pinned,
            other => panic!("{query}: {other:?}"),
        };
        assert_eq!(
            pinned(
                "$filter=PartitionKey%20eq%20%27O%27%27Brien%27%20and%20RowKey%20ge%20%27a%27&$top=5"
            ),
            Some("O'Brien".into())
        );
        assert_eq!(
            pinned("$top=1&%24filter=(PartitionKey+eq+'a')"),
            Some("a".into())
        );
        assert_eq!(pinned("$filter='p'%20eq%20PartitionKey"), Some("p".into()));
        for widened in [
            "$filter=PartitionKey eq 'a' or PartitionKey eq 'b'",
            "$filter=not (PartitionKey eq 'a')",
            "$filter=PartitionKey ge 'a'",
            "$filter=RowKey eq 'PartitionKey eq ''a'''",
            "$top=5",
            "",
        ] {
            assert_eq!(pinned(widened), None, "{widened}");
        }
        // A literal that merely contains "or" does not widen anything.
        assert_eq!(
            pinned("$filter=PartitionKey eq 'a' and Name eq 'x or y'"),
            Some("a".into())
        );
    }

    #[test]
    fn query_pages_cost_their_entities_in_their_partitions() {
        let page = br#"{"odata.metadata":"x","value":[
            {"PartitionKey":"a","RowKey":"1","Note":"}]"},
            {"PartitionKey":"b","RowKey":"2"},
            {"PartitionKey":"a","RowKey":"3","Nested":{"PartitionKey":"c"}},
            {"RowKey":"4"}]}"#;
        let cost = query_cost(200, page, None);
        assert_eq!(cost.total(), 4);
        let mut parts: Vec<_> = cost.partitions().collect();
        parts.sort_unstable();
        assert_eq!(
            parts,
            [("a", 2), ("b", 1)],
            "the fourth has no key: account only"
        );
        // A projection without keys is charged to the partition the filter named.
        let cost = query_cost(200, br#"{"value":[{"Name":"x"},{"Name":"y"}]}"#, Some("p"));
        assert_eq!(cost, Cost::partition("p", 2));
        assert_eq!(query_cost(200, br#"{"value":[]}"#, None), Cost::account(1));
        assert_eq!(
            query_cost(200, br#"{"value":[]}"#, Some("p")),
            Cost::partition("p", 1)
        );
        assert_eq!(
            query_cost(404, br#"{"odata.error":{}}"#, None),
            Cost::account(1)
        );
        assert_eq!(query_cost(200, b"not json", None), Cost::account(1));
    }

    #[test]
    fn a_scan_is_bounded_by_the_filters_top_level_key_conditions() {
        let bounds = |filter: &str| scan_bounds(&format!("$filter={filter}&$top=5"));
        // Key conditions only: every entity scanned is returned.
        for keys_only in [
            "PartitionKey eq 'a'",
            "(PartitionKey eq 'a') and (RowKey ge 'b' and RowKey lt 'c')",
            "((PartitionKey eq 'a'))",
        ] {
            assert_eq!(bounds(keys_only), None, "{keys_only}");
        }
        assert_eq!(scan_bounds("$top=5"), None, "no filter");
        assert_eq!(
            bounds("PartitionKey eq 'a' and N eq 7"),
            Some("(PartitionKey eq 'a')".into())
        );
        assert_eq!(
            bounds("(PartitionKey eq 'a') and ((RowKey ge 'b') and (Name eq 'x'))"),
            Some("(PartitionKey eq 'a') and (RowKey ge 'b')".into())
        );
        // An `or` or a `not` bounds nothing: the scan runs through the table.
        for unbounded in [
            "PartitionKey eq 'a' or PartitionKey eq 'b'",
            "not (PartitionKey eq 'a')",
            "Name eq 'x'",
            "PartitionKey ne 'a'",
        ] {
            assert_eq!(bounds(unbounded), Some(String::new()), "{unbounded}");
        }
        // Words inside literals are not operators; a literal may hold a doubled quote.
        assert_eq!(
            bounds("PartitionKey eq 'x and y' and Note eq 'it''s (and) more'"),
            Some("(PartitionKey eq 'x and y')".into())
        );
        assert_eq!(
            bounds("PartitionKey%20eq%20%27a%27%20and%20N%20eq%207"),
            Some("(PartitionKey eq 'a')".into()),
            "as sent, percent-encoded"
        );
        assert!(is_query_option("%24filter") && is_query_option("$top"));
        assert!(!is_query_option("NextPartitionKey") && !is_query_option("sig"));
    }

    #[test]
    fn a_scanned_query_costs_its_returned_units_and_one_per_other_entity_read() {
        let big = format!(
            r#"{{"PartitionKey":"a","RowKey":"2","N":"{}"}}"#,
            "x".repeat(2_000)
        );
        let page = format!(r#"{{"value":[{{"PartitionKey":"a","RowKey":"1"}},{big}]}}"#);
        let returned = query_cost(200, page.as_bytes(), None);
        assert_eq!(returned, Cost::partition("a", 3), "1 and 2 KiB units");
        let counted = entity_count(page.as_bytes());
        assert_eq!(counted, Cost::partition("a", 2));
        assert_eq!(last_keys(page.as_bytes()), Some(("a".into(), "2".into())));
        let mut scanned = Cost::partition("a", 10);
        scanned.add(Some("b".into()), 4);
        let cost = with_scanned(returned, &counted, &scanned);
        let mut parts: Vec<_> = cost.partitions().collect();
        parts.sort_unstable();
        assert_eq!(parts, [("a", 11), ("b", 4)], "3 units + 8 more read in a");
        assert_eq!(
            through("O'B", "r"),
            "(PartitionKey lt 'O''B' or (PartitionKey eq 'O''B' and RowKey le 'r'))"
        );
        assert_eq!(last_keys(br#"{"value":[]}"#), None);
    }

    #[test]
    fn partitions_are_named_by_table_and_key() {
        for (path, table) in [
            ("/acct/Orders(PartitionKey='a',RowKey='b')", "Orders"),
            ("/acct/Orders()", "Orders"),
            ("/acct/Orders", "Orders"),
            ("/Orders%28PartitionKey='a',RowKey='b'%29", "Orders"),
        ] {
            assert_eq!(table_of(path), table, "{path}");
        }
        let mut cost = Cost::partition("a", 2);
        cost.add(None, 1);
        cost.add(Some("b".into()), 3);
        let cost = cost.in_table("T");
        let mut parts: Vec<_> = cost.partitions().collect();
        parts.sort_unstable();
        assert_eq!(parts, [("T/a", 2), ("T/b", 3)]);
        assert_eq!(cost.total(), 6, "the account part stays the account's");
        assert_eq!(key_of("T/a"), "a");
        assert_eq!(key_of("a"), "a", "a name without a table is its key");
        assert_eq!(key_of(&partition_name("T", "")), "");
    }

    #[test]
    fn entities_count_one_per_kib_begun() {
        assert_eq!(
            (entity_units(0), entity_units(1024), entity_units(1025)),
            (1, 1, 2)
        );
        let big = format!(
            r#"{{"PartitionKey":"a","RowKey":"b","N":"{}"}}"#,
            "x".repeat(3_000)
        );
        assert_eq!(insert_cost(big.as_bytes()), Cost::partition("a", 3));
        let page = format!(r#"{{"value":[{big},{{"PartitionKey":"a","RowKey":"c"}}]}}"#);
        assert_eq!(
            query_cost(200, page.as_bytes(), None),
            Cost::partition("a", 4),
            "3 KiB units and 1"
        );
        let batch = format!(
            "--b\r\nContent-Type: application/http\r\n\r\nPOST /a/T HTTP/1.1\r\n\r\n{big}\r\n\
             --b\r\nContent-Type: application/http\r\n\r\n\
             DELETE /a/T(PartitionKey='a',RowKey='d') HTTP/1.1\r\nIf-Match: *\r\n\r\n--b--\r\n"
        );
        assert_eq!(
            super::super::multipart::batch_cost(batch.as_bytes()),
            Cost::partition("a", 4),
            "the insert's 3 KiB units and the delete's 1"
        );
    }
}
