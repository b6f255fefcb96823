//! The Table service's wire format: transaction bodies and responses, entity paths, error
//! responses.
//!
//! **Not a public API.** These items are for tablekit's own crates (`tablekit-azure` sends
//! what they encode); they are exempt from semantic versioning and may change in any release.
//! Applications use `tablekit_azure::Table`, which speaks this format for them.

mod multipart;
mod path;
mod response;
mod status;

pub use multipart::{EncodedTransaction, encode};
pub use path::entity_path;
pub use response::{PartResponse, error_message, parse_response};
pub use status::error_from_response;
