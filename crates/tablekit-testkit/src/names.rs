//! Names that never collide between tests, test binaries or concurrent runs in other clones.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A short suffix unique to this process and call: process id, start-time entropy and a counter,
/// all lowercase alphanumeric.
fn unique_suffix() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // Mix so that two processes with the same pid (e.g. in different containers) still differ.
    let mixed = (nanos ^ (u64::from(std::process::id()) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!(
        "{}{:x}{}",
        radix36(u64::from(std::process::id())),
        mixed >> 28,
        radix36(n)
    )
}

fn radix36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

fn clean(prefix: &str, keep: impl Fn(char) -> bool) -> String {
    prefix.chars().filter(|&c| keep(c)).collect()
}

/// A valid, unique table name (`^[A-Za-z][A-Za-z0-9]{2,62}$`) starting with the alphanumeric
/// characters of `prefix` (or `t` when it has none).
pub fn unique_table_name(prefix: &str) -> String {
    let mut base = clean(prefix, |c| c.is_ascii_alphanumeric());
    if !base.starts_with(|c: char| c.is_ascii_alphabetic()) {
        base.insert(0, 't');
    }
    finish(base, 63)
}

/// A valid, unique queue name (lowercase letters, digits and single hyphens, 3–63 characters).
pub fn unique_queue_name(prefix: &str) -> String {
    dns_name(prefix)
}

/// A valid, unique blob container name (same rules as queue names).
pub fn unique_container_name(prefix: &str) -> String {
    dns_name(prefix)
}

fn dns_name(prefix: &str) -> String {
    let mut base = clean(&prefix.to_ascii_lowercase(), |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit()
    });
    if base.is_empty() {
        base.push('q');
    }
    base.push('-');
    finish(base, 63)
}

fn finish(mut base: String, max: usize) -> String {
    let suffix = unique_suffix();
    base.truncate(max - suffix.len().min(max - 1));
    base.push_str(&suffix);
    base.truncate(max);
    base
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn table_names_are_valid_and_unique() {
        let mut seen = HashSet::new();
        for prefix in ["", "1abc", "orders", "x-y_z", &"long".repeat(40)] {
            for _ in 0..200 {
                let name = unique_table_name(prefix);
                assert!((3..=63).contains(&name.len()), "{name}");
                assert!(
                    name.starts_with(|c: char| c.is_ascii_alphabetic()),
                    "{name}"
                );
                assert!(name.chars().all(|c| c.is_ascii_alphanumeric()), "{name}");
                assert!(seen.insert(name.clone()), "duplicate {name}");
            }
        }
    }

    #[test]
    fn queue_names_are_valid() {
        for prefix in ["", "Jobs", "a--b", &"q".repeat(80)] {
            let name = unique_queue_name(prefix);
            assert!((3..=63).contains(&name.len()), "{name}");
            assert!(
                name.starts_with(|c: char| c.is_ascii_alphanumeric()),
                "{name}"
            );
            assert!(!name.ends_with('-') && !name.contains("--"), "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
        }
    }
}
