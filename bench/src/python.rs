//! Workload 8 (optional): workloads 1–3 through the official Python SDK, in a venv under
//! `target/bench/python`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::measure::Figure;
use crate::workloads::{Result, Sizes};

/// The pinned Python SDK.
pub(crate) const PACKAGE: &str = "azure-data-tables==12.7.0";

#[derive(Debug, Deserialize)]
struct Raw {
    bulk: Vec<f64>,
    scan: Vec<f64>,
    points_sequential: Vec<f64>,
    points_parallel: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Python {
    pub(crate) package: &'static str,
    pub(crate) bulk: Figure,
    pub(crate) scan: Figure,
    pub(crate) points_sequential: Figure,
    pub(crate) points_parallel: Figure,
}

fn venv(target: &Path) -> Result<PathBuf> {
    let dir = target.join("bench/python");
    let python = dir.join("bin/python");
    if !python.exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir))?;
    }
    let marker = dir.join(".installed");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(PACKAGE) {
        run(Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            PACKAGE,
        ]))?;
        std::fs::write(&marker, PACKAGE).map_err(|e| e.to_string())?;
    }
    Ok(python)
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}

pub(crate) fn bench(
    target: &Path,
    script: &Path,
    connection_string: &str,
    scan_table: &str,
    sizes: Sizes,
) -> Result<Python> {
    let python = venv(target)?;
    let out = Command::new(python)
        .arg(script)
        .args([
            connection_string,
            scan_table,
            &serde_json::to_string(&sizes).map_err(|e| e.to_string())?,
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "python benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let raw: Raw =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("python output: {e}"))?;
    Ok(Python {
        package: PACKAGE,
        bulk: Figure::of(raw.bulk, "entities/s"),
        scan: Figure::of(raw.scan, "entities/s"),
        points_sequential: Figure::of(raw.points_sequential, "reads/s"),
        points_parallel: Figure::of(raw.points_parallel, "reads/s"),
    })
}
