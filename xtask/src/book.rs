//! Checks that every `{{#include file:anchor}}` in the book points at an existing file and
//! anchor, so recipes can never show code that is not in an example.

use std::path::{Path, PathBuf};

/// Problems found in the book's includes, one line each.
pub(crate) fn check_includes(book_src: &Path) -> Result<usize, Vec<String>> {
    let mut problems = Vec::new();
    let mut count = 0;
    for page in markdown_files(book_src) {
        let Ok(text) = std::fs::read_to_string(&page) else {
            problems.push(format!("{}: unreadable", page.display()));
            continue;
        };
        for (line_no, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(start) = rest.find("{{#include ") {
                let after = &rest[start + "{{#include ".len()..];
                let Some(end) = after.find("}}") else { break };
                count += 1;
                if let Err(problem) = check_one(&page, after[..end].trim()) {
                    problems.push(format!("{}:{}: {problem}", page.display(), line_no + 1));
                }
                rest = &after[end..];
            }
        }
    }
    if problems.is_empty() {
        Ok(count)
    } else {
        Err(problems)
    }
}

fn check_one(page: &Path, spec: &str) -> Result<(), String> {
    // `path`, `path:anchor` or `path:start:end` (line ranges are not used by the book).
    let (path, anchor) = match spec.split_once(':') {
        Some((p, a)) => (p, Some(a)),
        None => (spec, None),
    };
    let file = page.parent().unwrap_or(Path::new(".")).join(path);
    let text = std::fs::read_to_string(&file).map_err(|_| format!("{path}: no such file"))?;
    if let Some(anchor) = anchor {
        if anchor.chars().all(|c| c.is_ascii_digit() || c == ':') {
            return Ok(());
        }
        let has = |marker: &str| {
            text.lines().any(|l| {
                l.trim_start()
                    .trim_start_matches("//")
                    .trim_start()
                    .strip_prefix(marker)
                    .is_some_and(|r| r.trim() == anchor)
            })
        };
        if !has("ANCHOR:") || !has("ANCHOR_END:") {
            return Err(format!("{path}: no ANCHOR/ANCHOR_END `{anchor}`"));
        }
    }
    Ok(())
}

fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(markdown_files(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_and_anchors_are_reported() {
        let dir = std::env::temp_dir().join(format!("tablekit-book-check-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(
            dir.join("code.rs"),
            "// ANCHOR: here\nfn f() {}\n// ANCHOR_END: here\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("src/page.md"),
            "{{#include ../code.rs:here}}\n{{#include ../code.rs:gone}}\n{{#include ../nope.rs}}\n",
        )
        .unwrap();
        let problems = check_includes(&dir.join("src")).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("gone") && problems[1].contains("nope.rs"),
            "{problems:?}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
