//! Installing the pinned Azurite into `target/azurite` with `npm ci`.

use std::path::{Path, PathBuf};
use std::process::Command;

use tablekit_testkit::AzuriteInstall;

/// The workspace root (the parent of this crate).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A command for `program` (cargo, or what runs cargo) without the variables `cargo run` set
/// for xtask itself. A build script that reads one of them (ring's reads `CARGO_MANIFEST_DIR`
/// and `CARGO_PKG_*`) would see other values than in a build started from a shell: cargo would
/// rerun it and rebuild every crate above it, at each `cargo xtask` command and after it.
pub(crate) fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_") || name.starts_with("CARGO_MANIFEST_") {
            command.env_remove(name.as_ref());
        }
    }
    command
}

/// Where Azurite is installed: `$TABLEKIT_AZURITE_DIR`, else `<workspace>/target/azurite`.
pub(crate) fn install_dir() -> PathBuf {
    std::env::var_os("TABLEKIT_AZURITE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/azurite"))
}

/// Installs Azurite unless the pinned version is already there; returns the installation.
pub(crate) fn ensure() -> Result<AzuriteInstall, String> {
    let dir = install_dir();
    let source = workspace_root().join("xtask/azurite");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // The launcher is tiny and may change with the repository: always refresh it.
    for file in ["package.json", "package-lock.json", "launch.js"] {
        let (from, to) = (source.join(file), dir.join(file));
        let same = std::fs::read(&from).ok() == std::fs::read(&to).ok();
        if !same {
            std::fs::copy(&from, &to)
                .map_err(|e| format!("cannot copy {}: {e}", from.display()))?;
        }
    }
    if let Ok(install) = AzuriteInstall::at(&dir) {
        return Ok(install);
    }
    check_node()?;
    eprintln!(
        "xtask: installing azurite@{} into {} (npm ci)",
        tablekit_testkit::AZURITE_VERSION,
        dir.display()
    );
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .status()
        .map_err(|e| format!("could not run npm ({e}); install Node.js >= 20 with npm"))?;
    if !status.success() {
        return Err(format!("`npm ci` in {} failed ({status})", dir.display()));
    }
    AzuriteInstall::at(&dir).map_err(|e| e.to_string())
}

fn check_node() -> Result<(), String> {
    let out = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|e| format!("could not run node ({e}); install Node.js >= 20"))?;
    let version = String::from_utf8_lossy(&out.stdout);
    let major: u32 = version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 20 {
        return Err(format!(
            "Node.js >= 20 is required, found {}",
            version.trim()
        ));
    }
    Ok(())
}
