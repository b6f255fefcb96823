#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod azurite;
#[cfg(feature = "azure")]
pub mod explore;
#[cfg(feature = "azure")]
pub mod fixtures;
mod install;
mod literals;
mod names;
mod proxy;
mod storage;
mod tls;
#[cfg(feature = "azure")]
mod tokens;

pub use azurite::{ACCOUNT, ACCOUNT_KEY, Azurite, AzuriteBuilder, AzuriteError, Endpoints};
pub use install::{AZURITE_DIR_ENV, AZURITE_VERSION, AzuriteInstall, INSTALL_COMMAND};
pub use names::{unique_container_name, unique_queue_name, unique_table_name};
pub use proxy::{
    Answer, Decision, Fault, FaultCounts, FaultProxy, Intercept, Matcher, Occurrences, ProxyStats,
    RequestInfo, Rule,
};
pub use proxy::{Throttle, ThrottleMode, ThrottleModel, ThrottleStats};
pub use storage::{CONNECTION_STRING_ENV, TestStorage};
#[cfg(feature = "azure")]
pub use tokens::{Claims, MintingCredential};
