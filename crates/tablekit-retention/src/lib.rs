#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod period;
mod purge;
mod query;
mod tables;

pub use period::Period;
pub use purge::{PurgeOptions, PurgeReport, purge_partition, purge_where};
pub use query::{PeriodQuery, PeriodToken};
pub use tables::{DropReport, PeriodTable, PeriodTables};

#[cfg(test)]
mod send_tests {
    //! Every operation's future is `Send`, so it can be spawned on a multi-threaded runtime.

    use chrono::Utc;
    use tablekit_core::filter::Filter;
    use tablekit_core::{Entity, Properties};

    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn futures_are_send() {
        let account = tablekit_azure::Account::emulator();
        let table = account.table("SendCheck").unwrap();
        let tables = PeriodTables::new(&account, "Send", Period::Day).unwrap();
        let entity = Entity::try_new("p", "r", Properties::new()).unwrap();
        let now = Utc::now();
        let options = PurgeOptions::default();
        assert_send(&tables.insert(now, &entity));
        assert_send(&tables.upsert_replace(now, &entity));
        assert_send(&tables.create_if_not_exists(now));
        assert_send(&tables.create_ahead(now));
        assert_send(&tables.list());
        assert_send(&tables.drop_older_than(now));
        assert_send(&tables.drop_expired(now));
        assert_send(&purge_partition(&table, "p", options.clone()));
        assert_send(&purge_where(&table, Filter::partition("p"), options));
        assert_send(&tables.query::<Properties>(now, now).page());
    }
}
