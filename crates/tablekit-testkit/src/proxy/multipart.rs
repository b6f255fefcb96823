//! The operations of an entity group transaction (`POST …/$batch`), read from its
//! `multipart/mixed` body for the throttle model: each operation's partition, from its request
//! line or, for an insert, its entity.

use super::cost::{Cost, entity_partition, entity_units, key_predicate, last_segment};

/// The cost of a `$batch` with this decoded multipart body: one entity per operation, in the
/// partition its request line (or, for an insert, its entity) names. A body without any
/// recognisable operation costs one against the account.
pub(crate) fn batch_cost(body: &[u8]) -> Cost {
    let text = String::from_utf8_lossy(body);
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let mut cost = Cost::default();
    multipart(&lines, 0, &mut cost);
    if cost.total() == 0 {
        return Cost::account(1);
    }
    cost
}

/// The table a `$batch`'s operations address, from the first operation's request line (the
/// service refuses a transaction that spans tables). `None` when no operation is found.
pub(crate) fn batch_table(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    text.split('\n').find_map(|line| {
        let mut words = line.split_whitespace();
        let (_, url, version) = (words.next()?, words.next()?, words.next()?);
        version
            .starts_with("HTTP/")
            .then(|| super::cost::table_of(url_path(url)))
    })
}

/// Adds the operations of a multipart body (its lines, line endings removed) to `cost`. The
/// boundary is taken from the first delimiter line, so neither the request's `Content-Type`
/// nor the changeset's header is needed; nested multiparts (a changeset inside the batch)
/// are followed one level deep, as the protocol allows.
fn multipart(lines: &[&str], depth: u8, cost: &mut Cost) {
    let Some(first) = lines.iter().position(|l| l.starts_with("--")) else {
        return;
    };
    let boundary = lines[first][2..].trim_end();
    let delimiter = format!("--{boundary}");
    let close = format!("--{boundary}--");
    let mut start = first + 1;
    for (i, line) in lines.iter().enumerate().skip(first + 1) {
        let line = line.trim_end();
        if line == delimiter || line == close {
            part(&lines[start..i], depth, cost);
            start = i + 1;
            if line == close {
                return;
            }
        }
    }
    // No closing delimiter: what follows the last one is still a part.
    part(&lines[start..], depth, cost);
}

/// One MIME part: a nested multipart, an `application/http` operation, or anything else
/// (ignored).
fn part(lines: &[&str], depth: u8, cost: &mut Cost) {
    let blank = lines
        .iter()
        .position(|l| l.trim().is_empty())
        .unwrap_or(lines.len());
    let content = lines.get(blank + 1..).unwrap_or_default();
    let content_type = lines[..blank]
        .iter()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-type"))
        .map(|(_, value)| value.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if content_type.starts_with("multipart/") {
        if depth < 1 {
            multipart(content, depth + 1, cost);
        }
    } else if content_type.starts_with("application/http") {
        if let Some((pk, n)) = operation(content) {
            cost.add(pk, n);
        }
    }
}

/// The partition of one operation of a transaction: its request line, headers, blank line and
/// body.
fn operation(lines: &[&str]) -> Option<(Option<String>, u64)> {
    let mut lines = lines.iter().skip_while(|l| l.trim().is_empty());
    let request_line = lines.next()?;
    let mut words = request_line.split_whitespace();
    let (Some(method), Some(url), Some(version)) = (words.next(), words.next(), words.next())
    else {
        return None;
    };
    if !version.starts_with("HTTP/") {
        return None;
    }
    let path = url_path(url);
    let body: Vec<&str> = lines
        .skip_while(|l| !l.trim().is_empty())
        .copied()
        .collect();
    let body = body.join("\n");
    let body = body.trim();
    // An operation with an entity counts its KiB units; a delete counts one.
    let units = entity_units(body.len());
    if let Some(pk) = key_predicate(last_segment(path)) {
        return Some((Some(pk), units));
    }
    let pk = method
        .eq_ignore_ascii_case("POST")
        .then(|| entity_partition(body.as_bytes()))
        .flatten();
    Some((pk, units))
}

/// The path of an absolute or origin-form URL, without its query.
fn url_path(url: &str) -> &str {
    let rest = match url.find("://") {
        Some(i) => {
            let after = &url[i + 3..];
            after.find('/').map_or("/", |j| &after[j..])
        }
        None => url,
    };
    rest.split(['?', '#']).next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use tablekit_core::batch::{BatchPlan, Operation};
    use tablekit_core::{Entity, IfMatch, Keys, Properties};

    use super::*;

    fn entity(pk: &str, rk: &str) -> Entity<Properties> {
        Entity::try_new(pk, rk, Properties::new().with("N", 1)).unwrap()
    }

    #[test]
    fn a_transaction_tablekit_encodes_costs_one_per_operation() {
        let mut ops: Vec<Operation> = (0..97)
            .map(|i| Operation::insert(&entity("O'Brien x", &format!("{i:03}"))).unwrap())
            .collect();
        let keys = |rk: &str| Keys::new("O'Brien x", rk).unwrap();
        ops.push(Operation::delete(keys("d"), IfMatch::Any).unwrap());
        ops.push(Operation::merge(&entity("O'Brien x", "m"), IfMatch::Any).unwrap());
        ops.push(Operation::upsert_replace(&entity("O'Brien x", "u")).unwrap());
        let plan = BatchPlan::atomic(ops).unwrap();
        let encoded =
            tablekit_core::wire::encode(&plan, "http://127.0.0.1:10002/devstoreaccount1", "Orders")
                .unwrap();
        assert_eq!(encoded.len(), 1);
        let body = &encoded[0].body;
        assert_eq!(batch_cost(body), Cost::partition("O'Brien x", 100));
        // The same body with bare LF line endings.
        let lf = String::from_utf8(body.clone())
            .unwrap()
            .replace("\r\n", "\n");
        assert_eq!(batch_cost(lf.as_bytes()), Cost::partition("O'Brien x", 100));
    }

    #[test]
    fn a_hand_written_transaction_is_parsed_part_by_part() {
        // Two partitions (Azurite accepts that), a changeset boundary given with quotes and
        // padding, origin-form and absolute URLs, an insert whose entity spans lines, and a
        // part that is not an operation.
        let body = "preamble\r\n\
--batch_1\r\n\
Content-Type: multipart/mixed; boundary=\"changeset_2\"\r\n\
\r\n\
--changeset_2  \r\n\
Content-Type: application/http\r\n\
Content-Transfer-Encoding: binary\r\n\
\r\n\
POST https://acct.table.core.windows.net/T HTTP/1.1\r\n\
Content-Type: application/json\r\n\
\r\n\
{\r\n  \"PartitionKey\": \"a\",\r\n  \"RowKey\": \"--not-a-boundary\"\r\n}\r\n\
--changeset_2\r\n\
Content-Type: application/http\r\n\
\r\n\
DELETE /acct/T(PartitionKey='b',RowKey='1')?timeout=5 HTTP/1.1\r\n\
If-Match: *\r\n\
\r\n\
--changeset_2\r\n\
Content-Type: text/plain\r\n\
\r\n\
GET /T(PartitionKey='ignored',RowKey='x') HTTP/1.1\r\n\
--changeset_2\r\n\
Content-Type: application/http\r\n\
\r\n\
MERGE http://h/acct/T(PartitionKey='a',RowKey='2') HTTP/1.1\r\n\
\r\n\
{\"PartitionKey\":\"a\",\"RowKey\":\"2\"}\r\n\
--changeset_2--\r\n\
--batch_1--\r\n";
        let cost = batch_cost(body.as_bytes());
        let mut parts: Vec<_> = cost.partitions().collect();
        parts.sort_unstable();
        assert_eq!(parts, [("a", 2), ("b", 1)]);
        assert_eq!(cost.total(), 3);
        assert_eq!(batch_table(body.as_bytes()).as_deref(), Some("T"));
        // Nothing recognisable: one against the account.
        assert_eq!(batch_cost(b"garbage"), Cost::account(1));
        assert_eq!(batch_table(b"garbage"), None);
        // An insert without a PartitionKey is an operation all the same.
        let no_key = "--b\nContent-Type: application/http\n\nPOST /T HTTP/1.1\n\n{}\n--b--\n";
        assert_eq!(batch_cost(no_key.as_bytes()), Cost::account(1));
    }
}
