//! Locating the pinned Azurite installation.

use std::path::{Path, PathBuf};

use crate::AzuriteError;

/// The Azurite version tablekit pins (3.36+ need Node 22).
pub const AZURITE_VERSION: &str = "3.35.0";

/// The command that installs the pinned Azurite into `target/azurite`.
pub const INSTALL_COMMAND: &str = "cargo xtask install-azurite";

/// Environment variable naming the directory Azurite is installed in (overrides the default
/// `<workspace>/target/azurite`).
pub const AZURITE_DIR_ENV: &str = "TABLEKIT_AZURITE_DIR";

/// A located, version-checked Azurite installation.
#[derive(Debug, Clone)]
pub struct AzuriteInstall {
    dir: PathBuf,
}

impl AzuriteInstall {
    /// Finds the installation: `$TABLEKIT_AZURITE_DIR` if set, else `<workspace>/target/azurite`.
    ///
    /// # Errors
    /// [`AzuriteError::NotInstalled`] (naming [`INSTALL_COMMAND`]) when Azurite is missing or is
    /// not version [`AZURITE_VERSION`].
    pub fn locate() -> Result<Self, AzuriteError> {
        Self::at(default_dir())
    }

    /// Checks the installation in `dir` (the directory holding `node_modules/azurite`).
    ///
    /// # Errors
    /// As [`AzuriteInstall::locate`].
    pub fn at(dir: impl Into<PathBuf>) -> Result<Self, AzuriteError> {
        let dir = dir.into();
        let manifest = dir.join("node_modules/azurite/package.json");
        let text = std::fs::read_to_string(&manifest).map_err(|_| AzuriteError::NotInstalled {
            dir: dir.clone(),
            found: None,
        })?;
        let found = package_version(&text);
        if found.as_deref() != Some(AZURITE_VERSION) || !dir.join("launch.js").is_file() {
            return Err(AzuriteError::NotInstalled { dir, found });
        }
        Ok(Self { dir })
    }

    /// The installation directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The launcher script: runs Azurite in-process and exits when its stdin closes, so an
    /// emulator never outlives the process that started it.
    pub fn launcher(&self) -> PathBuf {
        self.dir.join("launch.js")
    }
}

/// The directory the pinned Azurite is (or will be) installed in.
pub(crate) fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(AZURITE_DIR_ENV) {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/azurite")
}

fn package_version(manifest: &str) -> Option<String> {
    // A full JSON parser is not worth a dependency here: the field is a plain string.
    let start = manifest.find("\"version\"")? + "\"version\"".len();
    let rest = manifest[start..]
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    let rest = rest.strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_version_field() {
        let text = "{\n  \"name\": \"azurite\",\n  \"version\" : \"3.35.0\",\n  \"x\": 1 }";
        assert_eq!(package_version(text).as_deref(), Some("3.35.0"));
        assert_eq!(package_version("{}"), None);
    }

    #[test]
    fn a_missing_install_names_the_install_command() {
        let err = AzuriteInstall::at("/nonexistent/tablekit").unwrap_err();
        let text = err.to_string();
        assert!(text.contains(INSTALL_COMMAND), "{text}");
        assert!(!text.contains('\n'), "one line: {text}");
    }
}
