//! placeholder
use tablekit::azure::Account;

use super::Ctx;
use crate::cli::IndexCommand;
use crate::exit::{CliError, CliResult};

pub(crate) async fn run(_ctx: &Ctx, _account: &Account, _command: IndexCommand) -> CliResult {
    Err(CliError::failure("not yet"))
}
