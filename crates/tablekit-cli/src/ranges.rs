//! PartitionKey ranges for parallel reads: from a file, or sampled with `--split N`.
//!
//! Sampling costs a few one-entity queries, never a scan: the smallest PartitionKey (one
//! query), the largest one's first characters (a binary search per character, about seven
//! queries per ASCII character, until four characters past where it differs from the
//! smallest), then N−1 probe points spread evenly between the two over those characters,
//! each moved to the first PartitionKey at or after it (one query each). Boundaries are whole
//! PartitionKeys, so a partition is never split between two parts; ranges are even in key
//! space, not in entity count, so skewed key distributions give uneven parts (list ranges
//! with `--partitions-from` then).

use std::path::Path;

use serde::{Deserialize, Serialize};
use tablekit::azure::Table;
use tablekit::core::filter::Filter;
use tablekit::core::{PartitionKey, Properties, Result};

use crate::exit::{CliError, CliResult};

/// A set of whole partitions read as one part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum KeyRange {
    /// The whole table.
    All,
    /// One partition.
    Partition(String),
    /// PartitionKeys from `start` (inclusive) to `end` (exclusive); `None` is unbounded.
    Between {
        /// Inclusive lower bound.
        start: Option<String>,
        /// Exclusive upper bound.
        end: Option<String>,
    },
}

impl KeyRange {
    /// The filter that selects this range (`None` for the whole table).
    pub(crate) fn filter(&self) -> Option<Filter> {
        match self {
            KeyRange::All => None,
            KeyRange::Partition(pk) => Some(Filter::partition(pk)),
            KeyRange::Between { start, end } => {
                let lower = start.as_deref().map(|s| Filter::ge("PartitionKey", s));
                let upper = end.as_deref().map(|e| Filter::lt("PartitionKey", e));
                match (lower, upper) {
                    (Some(l), Some(u)) => Some(l.and(u)),
                    (l, u) => l.or(u),
                }
            }
        }
    }

    /// A short description for messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            KeyRange::All => "the whole table".to_owned(),
            KeyRange::Partition(pk) => format!("partition {pk:?}"),
            KeyRange::Between { start, end } => format!(
                "PartitionKey in [{}, {})",
                start
                    .as_deref()
                    .map_or("-∞".to_owned(), |s| format!("{s:?}")),
                end.as_deref().map_or("+∞".to_owned(), |e| format!("{e:?}")),
            ),
        }
    }
}

/// Reads `--partitions-from`: one PartitionKey a line, or `START<TAB>END` for a range
/// (either side empty for unbounded). Empty lines and lines starting with `#` (a character
/// keys cannot contain) are skipped. A trailing `\r` is ignored.
///
/// # Errors
/// Usage errors naming the line of an invalid key, or an empty file.
pub(crate) fn read_partitions_file(path: &Path) -> CliResult<Vec<KeyRange>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("--partitions-from {}: {e}", path.display())))?;
    let mut ranges = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let check = |key: &str| {
            PartitionKey::new(key)
                .map(|_| ())
                .map_err(|e| CliError::usage(format!("{}:{}: {e}", path.display(), n + 1)))
        };
        let range = match line.split_once('\t') {
            Some((start, end)) => {
                let bound = |s: &str| (!s.is_empty()).then(|| s.to_owned());
                check(start)?;
                check(end)?;
                KeyRange::Between {
                    start: bound(start),
                    end: bound(end),
                }
            }
            None => {
                check(line)?;
                KeyRange::Partition(line.to_owned())
            }
        };
        ranges.push(range);
    }
    if ranges.is_empty() {
        return Err(CliError::usage(format!(
            "--partitions-from {}: no partitions listed",
            path.display()
        )));
    }
    Ok(ranges)
}

/// Characters compared per probe point: enough to spread probes over a few thousand
/// distinct positions.
const WIDTH: usize = 4;
/// The longest prefix of the largest key that is searched for.
const MAX_DEPTH: usize = 24;
/// Printable ASCII (0x20–0x7E) counts as 95 digits; other characters as the last one.
const RADIX: u128 = 95;

fn digit(c: Option<char>) -> u128 {
    match c {
        None => 0,
        Some(c) => u128::from((c as u32).clamp(0x20, 0x7E) - 0x20),
    }
}

fn value(chars: &[char], from: usize) -> u128 {
    (0..WIDTH).fold(0, |v, i| v * RADIX + digit(chars.get(from + i).copied()))
}

fn text(mut v: u128) -> String {
    let mut out = vec![' '; WIDTH];
    for slot in out.iter_mut().rev() {
        *slot = char::from_u32(0x20 + (v % RADIX) as u32).unwrap_or(' ');
        v /= RADIX;
    }
    out.into_iter().collect::<String>().trim_end().to_owned()
}

/// The `n − 1` probe points spread evenly between `min` and the largest key's known prefix
/// `max`, over the [`WIDTH`] characters after their common prefix.
pub(crate) fn probe_points(min: &str, max: &str, n: usize) -> Vec<String> {
    let (min, max): (Vec<char>, Vec<char>) = (min.chars().collect(), max.chars().collect());
    let common = min.iter().zip(&max).take_while(|(a, b)| a == b).count();
    let lo = value(&min, common);
    let hi = value(&max, common) + 1;
    if n < 2 || hi <= lo + 1 {
        return Vec::new();
    }
    let prefix: String = min[..common].iter().collect();
    let mut points: Vec<String> = (1..n as u128)
        .map(|i| format!("{prefix}{}", text(lo + (hi - lo) * i / n as u128)))
        .filter(|p| p.as_str() > min.iter().collect::<String>().as_str())
        .collect();
    points.dedup();
    points
}

/// The first PartitionKey at or after `at`.
async fn first_at_or_after(table: &Table, at: Option<&str>) -> Result<Option<String>> {
    let mut query = table
        .query::<Properties>()
        .allow_scan()
        .select(Vec::<String>::new());
    if let Some(at) = at {
        query = query.filter(Filter::ge("PartitionKey", at));
    }
    Ok(query.first().await?.map(|s| s.keys.pk().to_owned()))
}

/// The largest character `c` in `[lo, hi]` such that a key at or after `prefix + c` exists
/// (`None` when none does), by binary search.
async fn largest_next(table: &Table, prefix: &str, lo: u32, hi: u32) -> Result<Option<char>> {
    let at = |c: u32| format!("{prefix}{}", char::from_u32(c).unwrap_or('\u{E000}'));
    if first_at_or_after(table, Some(&at(lo))).await?.is_none() {
        return Ok(None);
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if first_at_or_after(table, Some(&at(mid))).await?.is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(char::from_u32(lo).or(Some('\u{E000}')))
}

/// Splits the table into at most `n` ranges of whole partitions (fewer when the keys do not
/// spread that far), by the sampling described in the module documentation.
///
/// Requests: 1 + about 7 per ASCII character of the largest key's searched prefix (16 for
/// other characters) + n − 1.
pub(crate) async fn split(table: &Table, n: usize) -> Result<Vec<KeyRange>> {
    let Some(min) = first_at_or_after(table, None).await? else {
        return Ok(vec![KeyRange::All]);
    };
    let min_chars: Vec<char> = min.chars().collect();
    let mut max = String::new();
    let mut depth = 0;
    while depth < MAX_DEPTH {
        let differs_at = min_chars
            .iter()
            .zip(max.chars())
            .take_while(|(a, b)| **a == *b)
            .count();
        if differs_at < depth && depth >= differs_at + WIDTH {
            break;
        }
        let beyond_ascii = first_at_or_after(table, Some(&format!("{max}\u{A0}"))).await?;
        let next = if beyond_ascii.is_some() {
            largest_next(table, &max, 0xA0, 0xFFFF).await?
        } else {
            largest_next(table, &max, 0x20, 0x7E).await?
        };
        match next {
            Some(c) => max.push(c),
            None => break,
        }
        depth += 1;
    }
    let mut boundaries: Vec<String> = Vec::new();
    for point in probe_points(&min, &max, n) {
        if let Some(pk) = first_at_or_after(table, Some(&point)).await? {
            if pk > min && boundaries.last() != Some(&pk) && !boundaries.contains(&pk) {
                boundaries.push(pk);
            }
        }
    }
    boundaries.sort();
    let mut ranges = Vec::with_capacity(boundaries.len() + 1);
    let mut start = None;
    for b in boundaries {
        ranges.push(KeyRange::Between {
            start: start.take(),
            end: Some(b.clone()),
        });
        start = Some(b);
    }
    ranges.push(KeyRange::Between { start, end: None });
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_points_spread_between_the_smallest_and_largest_keys() {
        let points = probe_points("p00", "p99", 4);
        assert_eq!(points.len(), 3, "{points:?}");
        assert!(points.windows(2).all(|w| w[0] < w[1]), "{points:?}");
        assert!(
            points
                .iter()
                .all(|p| p.as_str() > "p00" && p.as_str() < "p9:")
        );
        assert!(
            points[1].starts_with("p4") || points[1].starts_with("p5"),
            "{points:?}"
        );
        assert!(probe_points("a", "a", 4).is_empty(), "one key: one range");
        assert!(probe_points("a", "b", 1).is_empty());
    }

    #[test]
    fn ranges_render_as_partition_key_bounds() {
        let r = KeyRange::Between {
            start: Some("a".into()),
            end: Some("m".into()),
        };
        assert_eq!(
            r.filter().unwrap().render().unwrap(),
            "(PartitionKey ge 'a') and (PartitionKey lt 'm')"
        );
        assert_eq!(KeyRange::All.filter(), None);
        assert_eq!(
            KeyRange::Partition("it's".into())
                .filter()
                .unwrap()
                .render()
                .unwrap(),
            "PartitionKey eq 'it''s'"
        );
    }

    #[test]
    fn a_partitions_file_lists_keys_and_tab_separated_ranges() {
        let path = std::env::temp_dir().join(format!("tablekit-cli-parts-{}", std::process::id()));
        std::fs::write(&path, "# comment\np1\r\n\na\tm\n\tb\n").unwrap();
        let ranges = read_partitions_file(&path).unwrap();
        assert_eq!(
            ranges,
            [
                KeyRange::Partition("p1".into()),
                KeyRange::Between {
                    start: Some("a".into()),
                    end: Some("m".into())
                },
                KeyRange::Between {
                    start: None,
                    end: Some("b".into())
                },
            ]
        );
        std::fs::write(&path, "ok\nbad/key\n").unwrap();
        let e = read_partitions_file(&path).unwrap_err();
        assert!(e.message.contains(":2:"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }
}
