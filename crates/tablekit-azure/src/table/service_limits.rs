//! The limits of the table service behind an account where they are stricter than Azure
//! Table storage's (the Cosmos DB Table API's), checked before any request.

use tablekit_core::Result;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::limits::cosmos;
use tablekit_core::wire::EncodedTransaction;

use super::Table;
use crate::settings::TableService;

impl Table {
    fn is_cosmos(&self) -> bool {
        self.account.settings().table_service == TableService::Cosmos
    }

    /// Checks one operation against the service's own limits: on the Cosmos DB Table API, a
    /// RowKey of at most 255 bytes and no reserved property name.
    pub(crate) fn check_operation(&self, op: &Operation) -> Result<()> {
        if !self.is_cosmos() {
            return Ok(());
        }
        cosmos::validate_row_key(op.keys().rk())?;
        match op.body() {
            Some(body) => cosmos::validate_entity_body(body),
            None => Ok(()),
        }
    }

    /// Checks every operation of `plan` ([`Table::check_operation`]).
    pub(crate) fn check_plan(&self, plan: &BatchPlan) -> Result<()> {
        if !self.is_cosmos() {
            return Ok(());
        }
        plan.groups()
            .flat_map(|(_, ops)| ops.iter())
            .try_for_each(|p| self.check_operation(&p.operation))
    }

    /// The largest transaction body the service takes, when it is below Azure Table
    /// storage's (which encoding already keeps to).
    pub(crate) fn max_transaction_bytes(&self) -> Option<usize> {
        self.is_cosmos().then_some(cosmos::MAX_TRANSACTION_BYTES)
    }

    /// Checks encoded transactions against the service's body limit.
    pub(crate) fn check_transactions(&self, transactions: &[EncodedTransaction]) -> Result<()> {
        match self.max_transaction_bytes() {
            Some(_) => transactions
                .iter()
                .try_for_each(|tx| cosmos::validate_transaction_bytes(tx.body.len())),
            None => Ok(()),
        }
    }
}
