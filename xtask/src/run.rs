//! The `demo`, `test` and `azurite` commands.

use std::path::Path;
use std::process::Command;

use tablekit_testkit::Azurite;

use crate::install::{self, workspace_root};

/// Runs `cargo` with `args` in the workspace root; fails with the command line on error.
fn cargo(args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(args).current_dir(workspace_root());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = cmd
        .status()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

pub(crate) fn test(long: bool) -> Result<(), String> {
    let install = install::ensure()?;
    let dir = install.dir().to_string_lossy().into_owned();
    let mut envs = vec![("TABLEKIT_AZURITE_DIR", dir.as_str())];
    if long {
        envs.push(("TABLEKIT_LONG", "1"));
    }
    cargo(&["fmt", "--all", "--check"], &[])?;
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--quiet",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    check_book()?;
    cargo(
        &["doc", "--workspace", "--no-deps", "--quiet"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    // Every test binary runs even if one fails, so a run reports all failures at once.
    cargo(&["test", "--workspace", "--quiet", "--no-fail-fast"], &envs)?;
    eprintln!("xtask: all checks passed");
    Ok(())
}

/// Fails if a book page includes a missing file or anchor.
fn check_book() -> Result<(), String> {
    match crate::book::check_includes(&workspace_root().join("docs/src")) {
        Ok(count) => {
            eprintln!("xtask: book: {count} includes resolve");
            Ok(())
        }
        Err(problems) => Err(format!(
            "book includes are broken:\n  {}",
            problems.join("\n  ")
        )),
    }
}

pub(crate) fn demo() -> Result<(), String> {
    let install = install::ensure()?;
    let examples = example_names(&workspace_root().join("examples/src/bin"))?;
    cargo(
        &["build", "--quiet", "-p", "tablekit-examples", "--bins"],
        &[],
    )?;
    let azurite = Azurite::builder()
        .with_install(install)
        .start()
        .map_err(|e| e.to_string())?;
    let connection_string = azurite.connection_string();
    let mut failed = Vec::new();
    for name in &examples {
        println!("\n=== example `{name}` ===");
        let ok = cargo(
            &["run", "--quiet", "-p", "tablekit-examples", "--bin", name],
            &[("AZURE_STORAGE_CONNECTION_STRING", &connection_string)],
        );
        if let Err(e) = ok {
            failed.push(format!("{name}: {e}"));
        }
    }
    azurite.stop();
    println!(
        "\n=== demo: {} of {} examples succeeded ===",
        examples.len() - failed.len(),
        examples.len()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

pub(crate) fn bench(args: &[String]) -> Result<(), String> {
    let install = install::ensure()?;
    let dir = install.dir().to_string_lossy().into_owned();
    let mut cmd = vec!["run", "--release", "--quiet", "-p", "tablekit-bench", "--"];
    cmd.extend(args.iter().map(String::as_str));
    cargo(&cmd, &[("TABLEKIT_AZURITE_DIR", dir.as_str())])
}

/// The mdBook version the book is built with.
const MDBOOK_VERSION: &str = "0.4.40";

pub(crate) fn docs() -> Result<(), String> {
    check_book()?;
    let root = workspace_root();
    let install_root = root.join("target/mdbook");
    let mdbook = install_root.join("bin/mdbook");
    let installed = Command::new(&mdbook)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(MDBOOK_VERSION));
    if !installed {
        let dir = install_root.to_string_lossy().into_owned();
        cargo(
            &[
                "install",
                "mdbook",
                "--version",
                MDBOOK_VERSION,
                "--locked",
                "--no-default-features",
                "--root",
                &dir,
            ],
            &[],
        )?;
    }
    eprintln!("xtask: mdbook build docs");
    let status = Command::new(&mdbook)
        .args(["build", "docs"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("could not run {}: {e}", mdbook.display()))?;
    if !status.success() {
        return Err(format!("mdbook build failed ({status})"));
    }
    cargo(
        &["doc", "--workspace", "--no-deps", "--quiet"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    eprintln!("xtask: book in target/book, API docs in target/doc");
    Ok(())
}

pub(crate) fn azurite_foreground() -> Result<(), String> {
    let install = install::ensure()?;
    let azurite = Azurite::builder()
        .with_install(install)
        .with_ports(10000, 10001, 10002)
        .with_inherited_output()
        .start()
        .map_err(|e| e.to_string())?;
    println!("Azurite is running; connect with UseDevelopmentStorage=true. Ctrl-C stops it.");
    azurite.wait().map_err(|e| e.to_string())?;
    Ok(())
}

fn example_names(dir: &Path) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names)
}
