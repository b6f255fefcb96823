//! The API gates `cargo xtask test` runs besides the tests: feature combinations of the facade,
//! the minimum supported Rust version, public-API snapshots, and the rules about what the
//! published documentation may say.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::install::workspace_root;

/// The minimum supported Rust version (the workspace's `rust-version`).
pub(crate) const MSRV: &str = "1.85";

/// The nightly toolchain whose rustdoc JSON the public-API snapshots are rendered from. Pinned:
/// the JSON format changes between nightlies, and the `public-api` library reads one format.
pub(crate) const NIGHTLY: &str = "nightly-2026-05-19";

/// Crates whose public API is snapshotted in `public-api/<crate>.txt`.
pub(crate) const PUBLISHED: &[&str] = &[
    "tablekit",
    "tablekit-core",
    "tablekit-azure",
    "tablekit-derive",
    "tablekit-index",
    "tablekit-eventual",
    "tablekit-logtail",
    "tablekit-retention",
    "tablekit-series",
    "tablekit-large",
    "tablekit-encryption",
    "tablekit-testkit",
];

/// Pattern crates: no SDK (`azure_*`) type may appear in their public API.
const PATTERN_CRATES: &[&str] = &[
    "tablekit-index",
    "tablekit-eventual",
    "tablekit-logtail",
    "tablekit-retention",
    "tablekit-series",
    "tablekit-large",
    "tablekit-encryption",
];

/// Whether the gates' commands run at the lowest CPU priority (`nice -n 19`): set while they
/// run beside the test suite, so they use only the CPU the tests leave idle.
static IN_BACKGROUND: AtomicBool = AtomicBool::new(false);

/// Runs the gates' commands at the lowest CPU priority from now on (see [`IN_BACKGROUND`]).
pub(crate) fn run_in_background() {
    IN_BACKGROUND.store(true, Ordering::Relaxed);
}

fn run(program: &str, args: &[&str], envs: &[(&str, &str)]) -> Result<String, String> {
    run_in(&workspace_root(), program, args, envs)
}

/// [`run`] in the directory `dir`.
fn run_in(
    dir: &Path,
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Result<String, String> {
    let mut cmd = if IN_BACKGROUND.load(Ordering::Relaxed) {
        let mut nice = crate::install::command("nice");
        nice.args(["-n", "19", program]);
        nice
    } else {
        crate::install::command(program)
    };
    cmd.args(args).current_dir(dir);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let output = cmd
        .output()
        .map_err(|e| format!("could not run {program}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({}):\n{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// The facade builds with no feature and with each feature alone.
pub(crate) fn features() -> Result<(), String> {
    let manifest = std::fs::read_to_string(workspace_root().join("crates/tablekit/Cargo.toml"))
        .map_err(|e| format!("crates/tablekit/Cargo.toml: {e}"))?;
    let features = facade_features(&manifest);
    eprintln!(
        "xtask: the facade with no feature and each of {} alone",
        features.len()
    );
    let cargo = cargo();
    run(
        &cargo,
        &[
            "check",
            "--quiet",
            "-p",
            "tablekit",
            "--no-default-features",
        ],
        &[],
    )?;
    for feature in &features {
        run(
            &cargo,
            &[
                "check",
                "--quiet",
                "-p",
                "tablekit",
                "--no-default-features",
                "--features",
                feature,
            ],
            &[],
        )?;
    }
    Ok(())
}

/// The feature names of the facade's `[features]` table, except `default`.
fn facade_features(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[features]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim().to_owned()))
        .filter(|name| !name.is_empty() && name != "default" && !name.starts_with('#'))
        .collect()
}

/// Whether `rustup` has `toolchain` installed; installs it (minimal profile) if not.
fn ensure_toolchain(toolchain: &str, components: &[&str]) -> Result<(), String> {
    let installed = run("rustup", &["toolchain", "list"], &[])?;
    let has = installed.lines().any(|l| l.starts_with(toolchain));
    if !has {
        eprintln!("xtask: installing the {toolchain} toolchain (rustup, minimal profile)");
        let mut args = vec!["toolchain", "install", toolchain, "--profile", "minimal"];
        for c in components {
            args.extend(["--component", c]);
        }
        run("rustup", &args, &[])?;
    }
    Ok(())
}

/// Ends each manifest line that only builds with a newer Rust than the MSRV: an optional
/// dependency that needs it, the feature that enables it, what turns that feature on for
/// tests. The MSRV check drops these lines (a feature stays, enabling nothing), as a user who
/// leaves the feature off never resolves those dependencies.
const NEWER_RUST: &str = "# newer Rust: not in the MSRV check";

/// Every library and binary of the workspace builds with the MSRV toolchain, without the
/// features that need a newer Rust.
///
/// It builds a copy of the workspace (in `target/msrv-workspace`) whose manifests drop the
/// lines marked [`NEWER_RUST`], with the committed lockfile. That lockfile may hold versions
/// only those features require (the 1.x Azure SDK crates need `time` 0.3.47, which needs Rust
/// 1.88): the packages cargo names as too new for the MSRV are moved, in the copy, to the
/// newest versions the MSRV supports — what a user's lockfile without the features holds —
/// and the check runs again. Every other version stays as committed.
pub(crate) fn msrv() -> Result<(), String> {
    ensure_toolchain(MSRV, &[])?;
    let root = workspace_root();
    let copy = root.join("target/msrv-workspace");
    copy_without_newer_rust(&root, &copy)?;
    // xtask itself is left out: it is not published, and `public-api` needs Rust 1.88.
    eprintln!("xtask: cargo +{MSRV} check --workspace --exclude xtask --lib --bins");
    let target = root.join("target/msrv");
    let check = || {
        run_in(
            &copy,
            "cargo",
            &[
                &format!("+{MSRV}"),
                "check",
                "--quiet",
                "--workspace",
                "--exclude",
                "xtask",
                "--lib",
                "--bins",
            ],
            &[("CARGO_TARGET_DIR", target.to_string_lossy().as_ref())],
        )
    };
    let message = match check() {
        Ok(_) => return Ok(()),
        Err(message) => message,
    };
    let newer = too_new_for_msrv(&message);
    if newer.is_empty() {
        return Err(message);
    }
    eprintln!(
        "xtask: cargo +{MSRV} update {} (locked for newer-Rust features)",
        newer.join(" ")
    );
    let mut args = vec![format!("+{MSRV}"), "update".into(), "--quiet".into()];
    args.extend(newer);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_in(
        &copy,
        "cargo",
        &args,
        &[("CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS", "fallback")],
    )?;
    check().map(drop)
}

/// The packages (`name@version`) cargo's error `message` names as needing a newer rustc
/// ("rustc 1.85.1 is not supported by the following packages: time@0.3.55 requires rustc
/// 1.88.0 …"), each once.
fn too_new_for_msrv(message: &str) -> Vec<String> {
    let mut packages: Vec<String> = message
        .lines()
        .skip_while(|line| !line.contains("is not supported by the following packages"))
        .skip(1)
        .map_while(|line| {
            let (package, _) = line.trim().split_once(" requires rustc ")?;
            package.contains('@').then(|| package.to_owned())
        })
        .collect();
    packages.sort();
    packages.dedup();
    packages
}

/// Copies the workspace at `root` but `target` and `.git` to `copy` (anew, keeping
/// modification times so unchanged crates are not rebuilt), and drops every manifest line
/// marked [`NEWER_RUST`].
fn copy_without_newer_rust(root: &Path, copy: &Path) -> Result<(), String> {
    if copy.exists() {
        std::fs::remove_dir_all(copy).map_err(|e| format!("{}: {e}", copy.display()))?;
    }
    std::fs::create_dir_all(copy).map_err(|e| format!("{}: {e}", copy.display()))?;
    let entries = std::fs::read_dir(root).map_err(|e| format!("{}: {e}", root.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path.file_name().unwrap_or_default();
        if name == "target" || name == ".git" {
            continue;
        }
        let (from, to) = (path.to_string_lossy(), copy.to_string_lossy());
        run("cp", &["-a", from.as_ref(), to.as_ref()], &[])?;
    }
    strip_newer_rust(copy)
}

/// Drops the lines marked [`NEWER_RUST`] from every `Cargo.toml` under `dir`.
fn strip_newer_rust(dir: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            strip_newer_rust(&path)?;
        } else if path.file_name().is_some_and(|n| n == "Cargo.toml") {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if text.contains(NEWER_RUST) {
                std::fs::write(&path, without_newer_rust(&text))
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
    }
    Ok(())
}

/// `manifest` without its lines marked [`NEWER_RUST`], but for the features among them, which
/// stay, enabling nothing (so that `cfg(feature = …)` still names a known feature).
fn without_newer_rust(manifest: &str) -> String {
    let mut out = String::with_capacity(manifest.len());
    for line in manifest.lines() {
        if !line.trim_end().ends_with(NEWER_RUST) {
            out.push_str(line);
            out.push('\n');
        } else if let Some((name, value)) = line.split_once('=') {
            // A feature's value is an array; a dependency's a string or a table.
            if value.trim_start().starts_with('[') {
                out.push_str(name.trim_end());
                out.push_str(" = []\n");
            }
        }
    }
    out
}

fn snapshot_path(krate: &str) -> PathBuf {
    workspace_root().join(format!("public-api/{krate}.txt"))
}

/// The current public API of `krate`, one item per line, as `cargo public-api -sss` 0.52.0
/// renders it.
fn public_api(krate: &str) -> Result<String, String> {
    // The rustdoc JSON of every crate is built with the pinned nightly, in its own target
    // directory so the stable builds are not invalidated. The flags are those
    // `cargo-public-api` 0.52.0 passes (through `rustdoc-json` 0.9), so the snapshots stay the
    // same: the library target with its default features, lints capped at `warn`.
    let target = workspace_root().join("target/public-api");
    run(
        "cargo",
        &[
            &format!("+{NIGHTLY}"),
            "rustdoc",
            "--quiet",
            "--package",
            krate,
            "--lib",
            "--target-dir",
            target.to_string_lossy().as_ref(),
            "--",
            "-Z",
            "unstable-options",
            "--output-format",
            "json",
            "--cap-lints",
            "warn",
        ],
        &[],
    )?;
    let json = target.join(format!("doc/{}.json", krate.replace('-', "_")));
    // `-sss`: without blanket, auto-trait and auto-derived impls, which would repeat the same
    // lines for every type.
    let api = public_api::Builder::from_rustdoc_json(&json)
        .omit_blanket_impls(true)
        .omit_auto_trait_impls(true)
        .omit_auto_derived_impls(true)
        .build()
        .map_err(|e| format!("{}: {e}", json.display()))?;
    Ok(api.items().map(|item| format!("{item}\n")).collect())
}

/// Compares each published crate's public API with its committed snapshot (`bless`: rewrites
/// the snapshots instead), and checks that no pattern crate exposes an SDK type.
pub(crate) fn public_api_snapshots(bless: bool) -> Result<(), String> {
    ensure_toolchain(NIGHTLY, &["rust-docs-json"]).or_else(|_| ensure_toolchain(NIGHTLY, &[]))?;
    let mut problems = Vec::new();
    for krate in PUBLISHED {
        let current = public_api(krate)?;
        let path = snapshot_path(krate);
        if bless {
            std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))
                .map_err(|e| e.to_string())?;
            std::fs::write(&path, &current).map_err(|e| format!("{}: {e}", path.display()))?;
        } else {
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            if committed != current {
                problems.push(format!(
                    "{krate}: the public API differs from public-api/{krate}.txt:\n{}",
                    diff(&committed, &current)
                ));
            }
        }
        if PATTERN_CRATES.contains(krate) {
            let leaks: Vec<&str> = current
                .lines()
                .filter(|l| {
                    [
                        "azure_core::",
                        "azure_storage",
                        "azure_data_tables::",
                        "azure_identity::",
                    ]
                    .iter()
                    .any(|sdk| l.contains(sdk))
                })
                .take(5)
                .collect();
            if !leaks.is_empty() {
                problems.push(format!(
                    "{krate}: SDK types in the public API:\n  {}",
                    leaks.join("\n  ")
                ));
            }
        }
    }
    if problems.is_empty() {
        eprintln!(
            "xtask: public API of {} crates {}",
            PUBLISHED.len(),
            if bless { "written" } else { "unchanged" }
        );
        Ok(())
    } else {
        Err(format!(
            "{}\n(run `cargo xtask public-api --bless` if the change is intended)",
            problems.join("\n")
        ))
    }
}

/// Lines only in `old` (`-`) and only in `new` (`+`): enough to see what changed in a sorted
/// item list.
fn diff(old: &str, new: &str) -> String {
    let old_lines: std::collections::BTreeSet<&str> = old.lines().collect();
    let new_lines: std::collections::BTreeSet<&str> = new.lines().collect();
    let mut out: Vec<String> = old_lines
        .difference(&new_lines)
        .map(|l| format!("  - {l}"))
        .chain(new_lines.difference(&old_lines).map(|l| format!("  + {l}")))
        .collect();
    let total = out.len();
    out.truncate(40);
    if total > 40 {
        out.push(format!("  … and {} more", total - 40));
    }
    out.join("\n")
}

/// Every crate denies missing docs, and the published documentation (READMEs, the book,
/// rustdoc comments) refers to no file outside the repository and to no numbered claim.
pub(crate) fn docs_rules() -> Result<(), String> {
    let root = workspace_root();
    let mut problems = Vec::new();
    for krate in crate_dirs(&root) {
        let lib = krate.join("src/lib.rs");
        let is_proc_macro_or_lib = lib.is_file();
        if is_proc_macro_or_lib {
            let text = std::fs::read_to_string(&lib).unwrap_or_default();
            if !text.contains("#![deny(missing_docs)]") {
                problems.push(format!("{}: no #![deny(missing_docs)]", lib.display()));
            }
        }
    }
    let mut files = vec![root.join("README.md")];
    files.extend(walk(&root.join("docs/src"), "md"));
    for krate in crate_dirs(&root) {
        files.push(krate.join("README.md"));
        files.extend(walk(&krate.join("src"), "rs"));
    }
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let is_rust = file.extension().is_some_and(|e| e == "rs");
        for (n, line) in text.lines().enumerate() {
            let doc = !is_rust || {
                let t = line.trim_start();
                t.starts_with("///") || t.starts_with("//!")
            };
            if !doc {
                continue;
            }
            if let Some(why) = forbidden_reference(line) {
                problems.push(format!("{}:{}: {why}", file.display(), n + 1));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "documentation rules broken:\n  {}",
            problems.join("\n  ")
        ))
    }
}

/// Why a documentation line may not be published as it is, if it may not.
fn forbidden_reference(line: &str) -> Option<&'static str> {
    if line.contains("PATTERNS.md") || line.contains("DESIGN.md") || line.contains("../shared") {
        return Some("refers to a file outside the repository");
    }
    let lower = line.to_ascii_lowercase();
    for word in ["claim ", "claims ", "claim_"] {
        let mut rest = lower.as_str();
        while let Some(at) = rest.find(word) {
            let after = &rest[at + word.len()..];
            if after.starts_with(|c: char| c.is_ascii_digit()) {
                return Some("refers to a numbered claim");
            }
            rest = after;
        }
    }
    None
}

fn crate_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs
}

fn walk(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path, extension));
        } else if path.extension().is_some_and(|e| e == extension) {
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
    fn the_packages_too_new_for_the_msrv_are_read_from_cargo_s_error() {
        let message = "`cargo +1.85 check` failed (exit status: 101):\nerror: rustc 1.85.1 is not supported by the following packages:\n  time@0.3.55 requires rustc 1.88.0\n  time-core@0.1.9 requires rustc 1.88.0\n  time-core@0.1.9 requires rustc 1.88.0\nEither upgrade rustc or select compatible dependency versions with\n";
        assert_eq!(
            too_new_for_msrv(message),
            ["time-core@0.1.9", "time@0.3.55"]
        );
        assert!(too_new_for_msrv("error[E0658]: use of unstable library feature").is_empty());
    }

    #[test]
    fn the_msrv_check_drops_the_lines_marked_for_a_newer_rust() {
        let manifest = format!(
            "[dependencies]\na = \"1\"\nb = {{ version = \"1\", optional = true }} {NEWER_RUST}\n\n[features]\nb = [\"dep:b\"] {NEWER_RUST}\n"
        );
        assert_eq!(
            without_newer_rust(&manifest),
            "[dependencies]\na = \"1\"\n\n[features]\nb = []\n"
        );
    }

    #[test]
    fn the_facade_features_are_read_from_its_manifest() {
        let manifest = "[package]\nname = \"x\"\n\n[features]\ndefault = [\"a\"]\na = []\nb = [\"dep:y\"]\n\n[dependencies]\ny = \"1\"\n";
        assert_eq!(facade_features(manifest), ["a", "b"]);
    }

    #[test]
    fn outside_files_and_numbered_claims_are_refused_in_docs() {
        assert!(forbidden_reference("see PATTERNS.md §4").is_some());
        assert!(forbidden_reference("proves claim 34").is_some());
        assert!(forbidden_reference("`claim_5_a_failed_transaction`").is_some());
        assert!(forbidden_reference("Claims 15 and 27").is_some());
        assert!(forbidden_reference("a claim that holds").is_none());
        assert!(forbidden_reference("the design guide's checklist").is_none());
    }

    #[test]
    fn the_diff_shows_removed_and_added_lines() {
        let d = diff("a\nb\n", "b\nc\n");
        assert!(d.contains("- a") && d.contains("+ c") && !d.contains("b"));
    }
}
