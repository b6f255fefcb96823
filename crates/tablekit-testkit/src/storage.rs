//! The storage account a test runs against: a shared Azurite, or one named by the environment.

use std::sync::OnceLock;

use crate::{Azurite, AzuriteError};

/// Environment variable that makes tests reuse a running emulator or a real storage account
/// instead of starting Azurite.
pub const CONNECTION_STRING_ENV: &str = "TABLEKIT_TEST_CONNECTION_STRING";

/// The storage a test process uses. Tests share one per process and isolate themselves with
/// unique table, queue and container names ([`crate::unique_table_name`]).
#[derive(Debug)]
pub struct TestStorage {
    connection_string: String,
    emulator: Option<Azurite>,
}

static SHARED: OnceLock<Result<TestStorage, String>> = OnceLock::new();

impl TestStorage {
    /// The process-wide storage: `$TABLEKIT_TEST_CONNECTION_STRING` if set, otherwise an
    /// Azurite started on first use on free ports. That emulator lives as long as the test
    /// process and exits with it.
    ///
    /// # Errors
    /// The start-up error, as one line saying what to do.
    pub fn shared() -> Result<&'static TestStorage, String> {
        SHARED
            .get_or_init(|| Self::from_env_or_start().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    fn from_env_or_start() -> Result<Self, AzuriteError> {
        match std::env::var(CONNECTION_STRING_ENV) {
            Ok(cs) if !cs.trim().is_empty() => Ok(Self {
                connection_string: cs,
                emulator: None,
            }),
            _ => {
                let emulator = Azurite::start()?;
                Ok(Self {
                    connection_string: emulator.connection_string(),
                    emulator: Some(emulator),
                })
            }
        }
    }

    /// The connection string to use.
    pub fn connection_string(&self) -> &str {
        &self.connection_string
    }

    /// The emulator started for this process, if one was started.
    pub fn emulator(&self) -> Option<&Azurite> {
        self.emulator.as_ref()
    }

    /// Whether the storage is a local Azurite (started here, or named by a connection string
    /// pointing at loopback). Tests that depend on emulator-only behaviour check this.
    pub fn is_emulator(&self) -> bool {
        self.emulator.is_some()
            || self.connection_string.contains("127.0.0.1")
            || self.connection_string.contains("localhost")
            || self
                .connection_string
                .contains("UseDevelopmentStorage=true")
    }
}
