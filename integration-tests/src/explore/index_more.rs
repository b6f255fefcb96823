//! The index crate's other public operations: intra-partition writes, inter-partition
//! inserts, deletes and jobs, the index entities (options 1, 2 and 3), denormalized copies,
//! compound keys, heterogeneous rows, backfills, and the reads (lookups, range reads resumed
//! from their token, list lookups, verify and repair) under page splits.

use std::sync::{Mutex, PoisonError};

use tablekit_azure::Account;
use tablekit_core::edm::from_properties;
use tablekit_core::{ErrorKind, Properties, Stored};
use tablekit_testkit::explore::{Entry, Plan, Scenario};

use super::model::{Employee, ensure, rows, text};
use super::outcome::Outcome;

/// The scenarios of this module.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry::new(intra::Write(intra::Op::Insert)),
        Entry::new(intra::Write(intra::Op::Put)),
        Entry::new(intra::Write(intra::Op::Replace)),
        Entry::new(intra::Write(intra::Op::Delete)),
        Entry::new(inter::Write(inter::Op::Insert)),
        Entry::new(inter::Write(inter::Op::Delete)),
        Entry::new(inter::Job(None)),
        Entry::new(inter::Job(Some(inter::CUT))),
        Entry::new(lists::Eventual(lists::Store::Separate, lists::Op::Insert)),
        Entry::new(lists::Eventual(lists::Store::Separate, lists::Op::Put)),
        Entry::new(lists::Eventual(lists::Store::Separate, lists::Op::Delete)),
        Entry::new(lists::Eventual(lists::Store::Blobs, lists::Op::Insert)),
        Entry::new(lists::Eventual(lists::Store::Blobs, lists::Op::Put)),
        Entry::new(lists::Eventual(lists::Store::Blobs, lists::Op::Delete)),
        Entry::new(lists::Same(lists::Op::Insert)),
        Entry::new(lists::Same(lists::Op::Put)),
        Entry::new(lists::Same(lists::Op::Delete)),
        Entry::new(relations::DenormalizedWrite),
        Entry::new(relations::DenormalizedRefresh),
        Entry::new(relations::CompoundWrite),
        Entry::new(relations::TypedWrite),
        Entry::new(backfill::Backfill(backfill::Layout::Intra)),
        Entry::new(backfill::Backfill(backfill::Layout::Inter)),
        Entry::new(reads::Lookups(reads::Layout::Intra)),
        Entry::new(reads::Lookups(reads::Layout::Inter)),
        Entry::new(reads::ListLookup(reads::ListKind::Eventual)),
        Entry::new(reads::ListLookup(reads::ListKind::Same)),
        Entry::new(reads::CompoundRead),
        Entry::new(reads::TypedRead),
        Entry::new(reads::Audit(reads::Layout::Intra, reads::Audit::VERIFY)),
        Entry::new(reads::Audit(reads::Layout::Intra, reads::Audit::REPAIR)),
        Entry::new(reads::Audit(reads::Layout::Inter, reads::Audit::VERIFY)),
        Entry::new(reads::Audit(reads::Layout::Inter, reads::Audit::REPAIR)),
    ]
}

/// What the suite test runs of the scenarios here whose every run takes a second or more (a
/// worker drained, a partition of a thousand rows scanned): every `stride`-th of their
/// single-fault schedules, so that the module's test stays within minutes; `cargo xtask
/// explore` runs every single-fault schedule of each. The rest run all of theirs.
fn sampled(stride: u64) -> Plan {
    Plan::SingleFaultsEvery { stride }
}

/// The values a concurrent actor stored (its writes through the direct account have a
/// definite outcome), for the checks: a state the actor wrote is allowed whatever the
/// operation returned.
#[derive(Default)]
struct Acted(Mutex<Vec<Employee>>);

impl Acted {
    fn record(&self, e: &Employee) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(e.clone());
    }

    fn all(&self) -> Vec<Employee> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The employee of the scenarios: Jones 223 of Sales, email `a@contoso.com`.
fn prepared() -> Employee {
    Employee {
        email: "a@contoso.com".into(),
        ..Employee::jones("Sales", 223)
    }
}

/// What the operation writes: a new email (the indexed value) and age.
fn written() -> Employee {
    Employee {
        email: "b@contoso.com".into(),
        age: 40,
        ..prepared()
    }
}

/// What the concurrent actor writes: another email and age.
fn actor_value() -> Employee {
    Employee {
        email: "x@contoso.com".into(),
        age: 50,
        ..prepared()
    }
}

/// Checks the entity's state against what the operation returned: `Ok` ⇒ `after`; a refusal
/// ⇒ `before`; `Indeterminate` or a stopped process ⇒ either. A value the actor stored is
/// allowed in every case (it may have written after the operation, or before a write that
/// then failed on its condition).
fn judge(
    report: Option<&Outcome>,
    state: Option<&Employee>,
    before: Option<&Employee>,
    after: Option<&Employee>,
    acted: &Acted,
) -> Result<(), String> {
    let mut allowed: Vec<Option<Employee>> = match report {
        Some(Outcome::Ok) => vec![after.cloned()],
        Some(o) if o.is(ErrorKind::Indeterminate) => vec![before.cloned(), after.cloned()],
        None => vec![before.cloned(), after.cloned()],
        Some(_) => vec![before.cloned()],
    };
    allowed.extend(acted.all().into_iter().map(Some));
    let state = state.cloned();
    ensure(allowed.contains(&state), || {
        format!("the operation returned {report:?}; the entity is {state:?}, allowed {allowed:?}")
    })
}

/// As [`judge`], for the plain table operations under the patterns (`CompoundRows`,
/// `TypedRows`): only a definite answer (409, 412, 404) is a refusal; any other error
/// leaves the outcome open, as the book says of a plain write that failed.
fn judge_plain<V: PartialEq + std::fmt::Debug + Clone>(
    report: &Outcome,
    state: Option<&V>,
    before: Option<&V>,
    after: Option<&V>,
    others: &[V],
) -> Result<(), String> {
    let definite = [
        ErrorKind::AlreadyExists,
        ErrorKind::PreconditionFailed,
        ErrorKind::NotFound,
    ];
    let mut allowed: Vec<Option<V>> = match report {
        Outcome::Ok => vec![after.cloned()],
        Outcome::Err { kind, .. } if definite.contains(kind) => vec![before.cloned()],
        Outcome::Err { .. } => vec![before.cloned(), after.cloned()],
    };
    allowed.extend(others.iter().cloned().map(Some));
    let state = state.cloned();
    ensure(allowed.contains(&state), || {
        format!("the operation returned {report:?}; the row is {state:?}, allowed {allowed:?}")
    })
}

/// Whether a read's error is one the faults explain (the service or the network failed it
/// after every retry): such a read returns no data, not wrong data.
fn read_failed(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Err { kind, .. } if matches!(
            kind,
            ErrorKind::Transport
                | ErrorKind::Throttled
                | ErrorKind::Service
                | ErrorKind::DeadlineExceeded
        )
    )
}

/// A read's result when it succeeded, as text to compare with the fault-free run's; its
/// outcome otherwise.
type Read = Result<Vec<String>, Outcome>;

/// Checks a read against the fault-free run's: the same result, or a failure the faults
/// explain.
fn same_as_baseline(read: Option<&Read>, baseline: Option<&Read>) -> Result<(), String> {
    match (read, baseline) {
        (Some(Err(outcome)), _) if read_failed(outcome) => Ok(()),
        (Some(read), Some(Ok(baseline))) => ensure(read.as_ref() == Ok(baseline), || {
            format!("read {read:?}, the fault-free run read {baseline:?}")
        }),
        (Some(Err(outcome)), None) => Err(format!("the fault-free read failed: {outcome:?}")),
        (Some(Ok(_)), None) | (None, _) => Ok(()),
        (Some(_), Some(Err(outcome))) => Err(format!("the fault-free read failed: {outcome:?}")),
    }
}

/// A stored row as the employee it holds.
fn employee_of(row: &Stored<Properties>) -> Result<Employee, String> {
    from_properties::<Employee>(&row.value).map_err(|e| format!("{}: {e}", row.keys))
}

/// The intra-partition secondary index: every write one transaction.
mod intra {
    use super::*;
    use tablekit_index::{IndexRead as _, IntraPartitionIndex};

    use crate::explore::model::{directory, new_table};

    pub(super) fn index(account: &Account, table: &str) -> IntraPartitionIndex<Employee> {
        IntraPartitionIndex::new(account.table(table).expect("table name"), directory().spec)
    }

    /// The employees of partition `pk`, each checked to have exactly its family: its email
    /// copy holding what its primary holds, and no copy without its primary. `verify` must
    /// agree.
    pub(super) async fn families(
        direct: &Account,
        table: &str,
        pk: &str,
    ) -> Result<Vec<Employee>, String> {
        let all = rows(&direct.table(table).map_err(|e| e.to_string())?, pk).await?;
        let primaries: Vec<&Stored<Properties>> = all
            .iter()
            .filter(|r| r.keys.rk().starts_with("empid_"))
            .collect();
        let mut copies: Vec<&Stored<Properties>> = all
            .iter()
            .filter(|r| r.keys.rk().starts_with("email_"))
            .collect();
        let mut found = Vec::new();
        for p in primaries {
            let e = employee_of(p)?;
            let at = format!("email_{}", e.email);
            let Some(i) = copies.iter().position(|c| c.keys.rk() == at) else {
                return Err(format!("{}: its copy {at} is missing", p.keys));
            };
            let copy = copies.remove(i);
            ensure(copy.value == p.value, || {
                format!(
                    "{}: stale copy {:?}, primary {:?}",
                    copy.keys, copy.value, p.value
                )
            })?;
            found.push(e);
        }
        let orphans: Vec<&str> = copies.iter().map(|c| c.keys.rk()).collect();
        ensure(orphans.is_empty(), || {
            format!("orphaned copies {orphans:?}")
        })?;
        let report = index(direct, table)
            .verify(pk)
            .await
            .map_err(|e| e.to_string())?;
        ensure(report.is_consistent(), || {
            format!("the rows are consistent, but verify reports {report:?}")
        })?;
        Ok(found)
    }

    /// Which write.
    #[derive(Clone, Copy)]
    pub(super) enum Op {
        Insert,
        Put,
        Replace,
        Delete,
    }

    /// `insert` of a new employee; `upsert` changing the email; `replace` of the entity as read
    /// changing the email; `delete` of the entity as read with its ETag.
    pub(super) struct Write(pub(super) Op);

    pub(super) struct Ctx {
        table: String,
        acted: Acted,
    }

    impl Write {
        fn before(&self) -> Option<Employee> {
            match self.0 {
                Op::Insert => None,
                _ => Some(prepared()),
            }
        }

        fn after(&self) -> Option<Employee> {
            match self.0 {
                Op::Insert => Some(prepared()),
                Op::Put | Op::Replace => Some(written()),
                Op::Delete => None,
            }
        }
    }

    impl Scenario for Write {
        type Ctx = Ctx;
        type Report = Outcome;

        fn name(&self) -> &'static str {
            match self.0 {
                Op::Insert => "index.intra.insert",
                Op::Put => "index.intra.upsert",
                Op::Replace => "index.intra.replace",
                Op::Delete => "index.intra.delete",
            }
        }

        fn invariant(&self) -> &'static str {
            "no stale or missing copy (verify reports nothing); Ok ⇒ the family is as written, a refusal ⇒ unchanged, Indeterminate ⇒ one or the other, complete (or what the concurrent writer stored)"
        }

        fn actors(&self) -> u8 {
            1
        }

        fn suite_plan(&self) -> Plan {
            Plan::SingleFaults
        }

        async fn prepare(&self, direct: &Account) -> Result<Ctx, String> {
            let table = new_table(direct, "xintrawrite").await?;
            if let Some(e) = self.before() {
                index(direct, &table)
                    .insert(&e)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(Ctx {
                table,
                acted: Acted::default(),
            })
        }

        async fn operate(&self, ctx: &Ctx, account: &Account) -> Outcome {
            let index = index(account, &ctx.table);
            let id = prepared().id;
            let result = match self.0 {
                Op::Insert => index.insert(&prepared()).await.map(drop),
                Op::Put => index.upsert(&written()).await.map(drop),
                Op::Replace => {
                    async {
                        let current = index.get("Sales", id.as_str()).await?.expect("prepared");
                        index.replace(&current, &written()).await.map(drop)
                    }
                    .await
                }
                Op::Delete => {
                    async {
                        let current = index.get("Sales", id.as_str()).await?.expect("prepared");
                        index.delete(&current.value, current.if_match()).await
                    }
                    .await
                }
            };
            Outcome::of(&result)
        }

        /// Another writer through the index: for an insert, an `upsert` of the same employee
        /// with another email; otherwise a `replace` of the entity it reads (if any) with
        /// another email.
        async fn act(&self, ctx: &Ctx, direct: &Account, _actor: u8) {
            let index = index(direct, &ctx.table);
            let x = actor_value();
            let stored = match self.0 {
                Op::Insert => index.upsert(&x).await.is_ok(),
                _ => match index.get("Sales", x.id.as_str()).await {
                    Ok(Some(current)) => index.replace(&current, &x).await.is_ok(),
                    _ => false,
                },
            };
            if stored {
                ctx.acted.record(&x);
            }
        }

        async fn check(
            &self,
            ctx: &Ctx,
            direct: &Account,
            report: Option<&Outcome>,
            _baseline: Option<&Outcome>,
        ) -> Result<(), String> {
            let found = families(direct, &ctx.table, "Sales").await?;
            ensure(found.len() <= 1, || format!("two employees: {found:?}"))?;
            judge(
                report,
                found.first(),
                self.before().as_ref(),
                self.after().as_ref(),
                &ctx.acted,
            )
        }
    }
}

/// The inter-partition secondary index: the primary at once, the copies by queued jobs.
mod inter {
    use super::*;
    use tablekit_core::IfMatch;
    use tablekit_index::{IndexRead as _, InterPartitionIndex};
    use tablekit_testkit::unique_queue_name;

    use crate::explore::model::{SKEW, directory, left_on, new_table, worker_options};

    pub(super) struct Names {
        pub(super) table: String,
        pub(super) queue: String,
        pub(super) acted: Acted,
    }

    pub(super) fn index(account: &Account, names: &Names) -> InterPartitionIndex<Employee> {
        let table = account.table(&names.table).expect("table name");
        let queue = account.queue(&names.queue).expect("queue name");
        InterPartitionIndex::builder(table, directory().spec, queue)
            .with_clock_skew_allowance(SKEW)
            .build()
            .expect("index")
    }

    pub(super) async fn create(direct: &Account, prefix: &str) -> Result<Names, String> {
        let names = Names {
            table: new_table(direct, prefix).await?,
            queue: unique_queue_name(prefix),
            acted: Acted::default(),
        };
        index(direct, &names)
            .create()
            .await
            .map_err(|e| e.to_string())?;
        Ok(names)
    }

    pub(super) async fn drain(account: &Account, names: &Names) -> Result<(), String> {
        index(account, names)
            .worker(worker_options())
            .drain()
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// The primary of the employee, read directly; and, when no job is queued or poisoned,
    /// every email copy of the partition checked against it (and `verify` clean).
    pub(super) async fn settled(
        direct: &Account,
        names: &Names,
    ) -> Result<(Option<Employee>, bool), String> {
        let index = index(direct, names);
        let primary = index
            .get("Sales", prepared().id.as_str())
            .await
            .map_err(|e| e.to_string())?
            .map(|s| s.value);
        let (queued, poisoned) = left_on(&index.jobs()).await?;
        if queued + poisoned > 0 {
            return Ok((primary, false));
        }
        let table = direct.table(&names.table).map_err(|e| e.to_string())?;
        let copies = rows(&table, "email_Sales").await?;
        let found: Vec<&str> = copies.iter().map(|c| c.keys.rk()).collect();
        match &primary {
            None => ensure(copies.is_empty(), || {
                format!("the entity is gone, its email copies {found:?} stayed, nothing queued")
            })?,
            Some(p) => {
                ensure(found == [p.email.as_str()], || {
                    format!(
                        "the primary's email is {}, the copies are {found:?}, nothing queued",
                        p.email
                    )
                })?;
                let copy = employee_of(&copies[0])?;
                ensure(copy == *p, || {
                    format!("the copy holds {copy:?}, the primary {p:?}")
                })?;
                ensure(text(&copies[0], "IndexWriteId").is_none(), || {
                    "the copy holds the write stamp".into()
                })?;
            }
        }
        let report = index.verify("Sales").await.map_err(|e| e.to_string())?;
        ensure(report.is_consistent(), || {
            format!("nothing queued, but verify reports {report:?}")
        })?;
        Ok((primary, true))
    }

    /// Which write.
    #[derive(Clone, Copy)]
    pub(super) enum Op {
        Insert,
        Delete,
    }

    /// `insert` of a new employee, or `delete` by partition and id (read, enqueue, delete),
    /// the worker draining afterwards.
    pub(super) struct Write(pub(super) Op);

    impl Scenario for Write {
        type Ctx = Names;
        type Report = Outcome;

        fn name(&self) -> &'static str {
            match self.0 {
                Op::Insert => "index.inter.insert",
                Op::Delete => "index.inter.delete",
            }
        }

        fn invariant(&self) -> &'static str {
            "after the workers drain, every copy matches its primary (verify clean), or a job for it is queued or poisoned; the primary is as written on Ok, unchanged on a refusal, one or the other on Indeterminate"
        }

        fn actors(&self) -> u8 {
            1
        }

        fn suite_plan(&self) -> Plan {
            sampled(4)
        }

        async fn prepare(&self, direct: &Account) -> Result<Names, String> {
            let names = create(direct, "xinterwrite").await?;
            if let Op::Delete = self.0 {
                index(direct, &names)
                    .insert(&prepared())
                    .await
                    .map_err(|e| e.to_string())?;
                drain(direct, &names).await?;
            }
            Ok(names)
        }

        async fn operate(&self, names: &Names, account: &Account) -> Outcome {
            let index = index(account, names);
            let result = match self.0 {
                Op::Insert => index.insert(&prepared()).await.map(drop),
                Op::Delete => {
                    index
                        .delete(("Sales", prepared().id.as_str()), IfMatch::Any)
                        .await
                }
            };
            Outcome::of(&result)
        }

        async fn recover(
            &self,
            names: &Names,
            account: &Account,
            _report: Option<&Outcome>,
        ) -> Result<(), String> {
            drain(account, names).await
        }

        /// Another writer through the index: for an insert, an `upsert` of the same employee
        /// with another email; for a delete, an `upsert` with another email if it is there.
        async fn act(&self, names: &Names, direct: &Account, _actor: u8) {
            let index = index(direct, names);
            let x = actor_value();
            let present = matches!(index.get("Sales", x.id.as_str()).await, Ok(Some(_)));
            if (present || matches!(self.0, Op::Insert)) && index.upsert(&x).await.is_ok() {
                names.acted.record(&x);
            }
        }

        async fn check(
            &self,
            names: &Names,
            direct: &Account,
            report: Option<&Outcome>,
            _baseline: Option<&Outcome>,
        ) -> Result<(), String> {
            let (primary, _) = settled(direct, names).await?;
            let (before, after) = match self.0 {
                Op::Insert => (None, Some(prepared())),
                Op::Delete => (Some(prepared()), None),
            };
            judge(
                report,
                primary.as_ref(),
                before.as_ref(),
                after.as_ref(),
                &names.acted,
            )
        }
    }

    /// The job of a write runs (the operation is the drain) — a copy write in flight when
    /// the process stops, say — then a second write changes the value again and its job
    /// runs, then the first job's message comes back. Prepared: inserted with email A and
    /// drained, then `upsert` with email B (job 1 queued). Recovery: `upsert` with email C, drain.
    ///
    /// With `Some(cut)`, the worker's process stops `cut` after it starts — long after a
    /// fault-free drain ends, long before a copy write applied late lands — so a single late
    /// copy write is in flight when it stops, and job 2 runs before it lands: the case the
    /// copies a job's own write made (`CopyJob::fresh`) are cleaned up for, which without
    /// the cut takes two faults (a late copy write and a stop at the next request).
    pub(super) struct Job(pub(super) Option<std::time::Duration>);

    /// How long the worker of `index.inter.job.cut` runs before its process stops.
    pub(super) const CUT: std::time::Duration = std::time::Duration::from_millis(400);

    /// What the worker of [`Job`] did (read through `Debug`, in the explorer's reports).
    #[derive(Debug)]
    #[allow(dead_code)]
    pub(super) enum Drained {
        Done(Outcome),
        /// Its process stopped (the cut), the drain unfinished.
        Stopped,
    }

    fn email(e: &str) -> Employee {
        Employee {
            email: e.into(),
            ..prepared()
        }
    }

    impl Scenario for Job {
        type Ctx = Names;
        type Report = Drained;

        fn name(&self) -> &'static str {
            match self.0 {
                None => "index.inter.job",
                Some(_) => "index.inter.job.cut",
            }
        }

        fn invariant(&self) -> &'static str {
            "after the workers drain, every copy matches its primary (verify clean) — no copy a cut-off delivery wrote is left behind — or a job for it is queued or poisoned; the primary holds the last write (email C)"
        }

        fn actors(&self) -> u8 {
            1
        }

        fn suite_plan(&self) -> Plan {
            sampled(6)
        }

        async fn prepare(&self, direct: &Account) -> Result<Names, String> {
            let names = create(direct, "xinterjob").await?;
            let index = index(direct, &names);
            index
                .insert(&email("a@contoso.com"))
                .await
                .map_err(|e| e.to_string())?;
            drain(direct, &names).await?;
            index
                .upsert(&email("b@contoso.com"))
                .await
                .map_err(|e| e.to_string())?;
            Ok(names)
        }

        async fn operate(&self, names: &Names, account: &Account) -> Drained {
            let worker = index(account, names).worker(worker_options());
            let Some(cut) = self.0 else {
                return Drained::Done(Outcome::of(&worker.drain().await));
            };
            // Dropping the drain drops its handlers, as a stopped process would: what they
            // sent still lands, nothing more is sent, their messages stay hidden.
            tokio::select! {
                drained = worker.drain() => Drained::Done(Outcome::of(&drained)),
                () = tokio::time::sleep(cut) => Drained::Stopped,
            }
        }

        async fn recover(
            &self,
            names: &Names,
            account: &Account,
            _report: Option<&Drained>,
        ) -> Result<(), String> {
            index(account, names)
                .upsert(&email("c@contoso.com"))
                .await
                .map_err(|e| e.to_string())?;
            drain(account, names).await
        }

        /// Another writer through the index changes the age, keeping the email.
        async fn act(&self, names: &Names, direct: &Account, _actor: u8) {
            let index = index(direct, names);
            if let Ok(Some(current)) = index.get("Sales", prepared().id.as_str()).await {
                let mut e = current.value.clone();
                e.age += 100;
                let _ = index.upsert(&e).await;
            }
        }

        async fn check(
            &self,
            names: &Names,
            direct: &Account,
            _report: Option<&Drained>,
            _baseline: Option<&Drained>,
        ) -> Result<(), String> {
            let (primary, _) = settled(direct, names).await?;
            let email = primary.map(|p| p.email);
            ensure(email.as_deref() == Some("c@contoso.com"), || {
                format!("the primary's email is {email:?}, not the last write's")
            })
        }
    }
}

/// Index entities: lists of the entities sharing a last name, apart (options 3 and 1, kept by
/// queued jobs) or in the entities' partition (option 2, one transaction per write).
mod lists {
    use super::*;
    use tablekit_core::IfMatch;
    use tablekit_index::{EventualList, ListSpec, SamePartitionList};
    use tablekit_testkit::{unique_container_name, unique_queue_name};

    use crate::explore::model::{SKEW, left_on, new_table, worker_options};

    /// The last names the scenarios' writes give.
    const NAMES: [&str; 3] = ["Jones", "Smith", "Brown"];

    /// Jones 223, the employee written; listed under Jones when prepared.
    fn jones() -> Employee {
        prepared()
    }

    /// Jones 152, listed under Jones throughout: the list is never only the written one's.
    fn neighbour() -> Employee {
        Employee::jones("Sales", 152)
    }

    /// What an `upsert` makes of Jones 223: Smith.
    fn smith() -> Employee {
        Employee {
            last_name: "Smith".into(),
            age: 40,
            ..jones()
        }
    }

    /// Jones 224, whom the concurrent actor hires: its list row is the one the operation
    /// changes.
    fn hire() -> Employee {
        Employee::jones("Sales", 224)
    }

    /// What the concurrent actor makes of Jones 223: Brown.
    fn brown() -> Employee {
        Employee {
            last_name: "Brown".into(),
            age: 50,
            ..jones()
        }
    }

    /// Every stored employee is listed exactly once, under its last name, and under no other;
    /// every listed id is a stored employee with that last name.
    fn listed_once(stored: &[Employee], lists: &[(&str, Vec<String>)]) -> Result<(), String> {
        for (name, ids) in lists {
            for id in ids {
                let holds = stored.iter().any(|e| e.id == *id && e.last_name == *name);
                ensure(holds, || {
                    format!("{id} is listed under {name}; the stored employees are {stored:?}")
                })?;
            }
            for e in stored {
                let times = ids.iter().filter(|id| **id == e.id).count();
                let expected = usize::from(e.last_name == *name);
                ensure(times == expected, || {
                    format!(
                        "{} ({}) is listed {times} times under {name}: {ids:?}",
                        e.id, e.last_name
                    )
                })?;
            }
        }
        Ok(())
    }

    /// The employees stored in partition Sales (list rows aside).
    async fn stored(direct: &Account, table: &str) -> Result<Vec<Employee>, String> {
        let all = rows(&direct.table(table).map_err(|e| e.to_string())?, "Sales").await?;
        all.iter()
            .filter(|r| !r.keys.rk().starts_with("lastname_"))
            .map(employee_of)
            .collect()
    }

    /// Jones 223 among the stored employees, checked against what the operation returned.
    fn judge_jones(
        op: Op,
        stored: &[Employee],
        report: Option<&Outcome>,
        acted: &Acted,
    ) -> Result<(), String> {
        let mut expected = vec![neighbour()];
        let acted = acted.all();
        if acted.contains(&hire()) {
            expected.push(hire());
        }
        let others: Vec<Employee> = stored
            .iter()
            .filter(|e| e.id != jones().id)
            .cloned()
            .collect();
        ensure(others == expected, || {
            format!("the others are {others:?}, expected {expected:?}")
        })?;
        let writes = Acted::default();
        for e in acted.iter().filter(|e| e.id == jones().id) {
            writes.record(e);
        }
        let state = stored.iter().find(|e| e.id == jones().id);
        let (before, after) = match op {
            Op::Insert => (None, Some(jones())),
            Op::Put => (Some(jones()), Some(smith())),
            Op::Delete => (Some(jones()), None),
        };
        judge(report, state, before.as_ref(), after.as_ref(), &writes)
    }

    /// Which write.
    #[derive(Clone, Copy)]
    pub(super) enum Op {
        Insert,
        Put,
        Delete,
    }

    /// Where an eventual list keeps its lists.
    #[derive(Clone, Copy)]
    pub(super) enum Store {
        /// Option 3: in partitions of their own (here, of the entities' table).
        Separate,
        /// Option 1: in blobs.
        Blobs,
    }

    /// `EventualList::insert` (Jones 223), `upsert` (Jones → Smith) or `delete` (by keys), the
    /// worker draining afterwards; Jones 152 stays listed throughout.
    pub(super) struct Eventual(pub(super) Store, pub(super) Op);

    pub(super) struct EventualCtx {
        table: String,
        queue: String,
        container: Option<String>,
        acted: Acted,
    }

    fn eventual(account: &Account, ctx: &EventualCtx) -> EventualList<Employee> {
        let table = account.table(&ctx.table).expect("table name");
        let queue = account.queue(&ctx.queue).expect("queue name");
        let spec = ListSpec::builder("lastname", Employee::LAST_NAME)
            .with_prefix("lastname_")
            .with_property("EmployeeDetails")
            .build()
            .expect("spec");
        let list = match &ctx.container {
            Some(name) => {
                let container = account.container(name).expect("container name");
                EventualList::blobs(table, container, spec, queue)
            }
            None => EventualList::separate(table.clone(), table, spec, queue),
        };
        list.with_clock_skew_allowance(SKEW)
    }

    async fn drain(account: &Account, ctx: &EventualCtx) -> Result<(), String> {
        eventual(account, ctx)
            .worker(worker_options())
            .drain()
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    impl Scenario for Eventual {
        type Ctx = EventualCtx;
        type Report = Outcome;

        fn name(&self) -> &'static str {
            match (self.0, self.1) {
                (Store::Separate, Op::Insert) => "index.list.eventual.separate.insert",
                (Store::Separate, Op::Put) => "index.list.eventual.separate.upsert",
                (Store::Separate, Op::Delete) => "index.list.eventual.separate.delete",
                (Store::Blobs, Op::Insert) => "index.list.eventual.blobs.insert",
                (Store::Blobs, Op::Put) => "index.list.eventual.blobs.upsert",
                (Store::Blobs, Op::Delete) => "index.list.eventual.blobs.delete",
            }
        }

        fn invariant(&self) -> &'static str {
            "after the workers drain, every stored entity is listed exactly once, under its current value only, or a job for it is queued or poisoned; the entity is as written on Ok, unchanged on a refusal, one or the other on Indeterminate"
        }

        fn actors(&self) -> u8 {
            2
        }

        fn suite_plan(&self) -> Plan {
            sampled(6)
        }

        async fn prepare(&self, direct: &Account) -> Result<EventualCtx, String> {
            let ctx = EventualCtx {
                table: new_table(direct, "xevlist").await?,
                queue: unique_queue_name("xevlist"),
                container: matches!(self.0, Store::Blobs).then(|| unique_container_name("xevlist")),
                acted: Acted::default(),
            };
            let list = eventual(direct, &ctx);
            list.create().await.map_err(|e| e.to_string())?;
            let mut first = vec![neighbour()];
            if !matches!(self.1, Op::Insert) {
                first.push(jones());
            }
            for e in &first {
                list.insert(e).await.map_err(|e| e.to_string())?;
            }
            drain(direct, &ctx).await?;
            Ok(ctx)
        }

        async fn operate(&self, ctx: &EventualCtx, account: &Account) -> Outcome {
            let list = eventual(account, ctx);
            let result = match self.1 {
                Op::Insert => list.insert(&jones()).await.map(drop),
                Op::Put => list.upsert(&smith()).await.map(drop),
                Op::Delete => list.delete(&jones(), IfMatch::Any).await,
            };
            Outcome::of(&result)
        }

        async fn recover(
            &self,
            ctx: &EventualCtx,
            account: &Account,
            _report: Option<&Outcome>,
        ) -> Result<(), String> {
            drain(account, ctx).await
        }

        /// Two other writers through the list: actor 0 hires Jones 224 (onto the list the
        /// operation changes); actor 1 makes Jones 223 a Brown (`upsert`) — for an insert,
        /// whether it is there or not; otherwise only if it is there.
        async fn act(&self, ctx: &EventualCtx, direct: &Account, actor: u8) {
            let list = eventual(direct, ctx);
            if actor == 0 {
                if list.insert(&hire()).await.is_ok() {
                    ctx.acted.record(&hire());
                }
                return;
            }
            let present = matches!(list.table().get::<Properties>(&jones()).await, Ok(Some(_)));
            if (present || matches!(self.1, Op::Insert)) && list.upsert(&brown()).await.is_ok() {
                ctx.acted.record(&brown());
            }
        }

        async fn check(
            &self,
            ctx: &EventualCtx,
            direct: &Account,
            report: Option<&Outcome>,
            _baseline: Option<&Outcome>,
        ) -> Result<(), String> {
            let stored = stored(direct, &ctx.table).await?;
            judge_jones(self.1, &stored, report, &ctx.acted)?;
            let list = eventual(direct, ctx);
            let (queued, poisoned) = left_on(&list.jobs()).await?;
            if queued + poisoned > 0 {
                return Ok(());
            }
            let mut lists = Vec::new();
            for name in NAMES {
                let ids = list.ids(name).await.map_err(|e| e.to_string())?;
                let foreign: Vec<&(String, String)> =
                    ids.iter().filter(|(pk, _)| pk != "Sales").collect();
                ensure(foreign.is_empty(), || {
                    format!("{name} lists entities of no partition written: {foreign:?}")
                })?;
                lists.push((name, ids.into_iter().map(|(_, rk)| rk).collect()));
            }
            listed_once(&stored, &lists)
        }
    }

    /// `SamePartitionList::insert` (Jones 223), `upsert` (Jones → Smith) or `delete` (by keys);
    /// Jones 152 stays listed throughout.
    pub(super) struct Same(pub(super) Op);

    pub(super) struct SameCtx {
        table: String,
        acted: Acted,
    }

    fn same(account: &Account, table: &str) -> SamePartitionList<Employee> {
        let spec = ListSpec::builder("lastname", Employee::LAST_NAME)
            .with_prefix("lastname_")
            .build()
            .expect("spec");
        SamePartitionList::new(account.table(table).expect("table name"), spec).expect("list")
    }

    impl Scenario for Same {
        type Ctx = SameCtx;
        type Report = Outcome;

        fn name(&self) -> &'static str {
            match self.0 {
                Op::Insert => "index.list.same_partition.insert",
                Op::Put => "index.list.same_partition.upsert",
                Op::Delete => "index.list.same_partition.delete",
            }
        }

        fn invariant(&self) -> &'static str {
            "every id in exactly one list, its current value's, and every listed id stored; the entity is as written on Ok, unchanged on a refusal, one or the other on Indeterminate"
        }

        fn actors(&self) -> u8 {
            2
        }

        fn suite_plan(&self) -> Plan {
            Plan::SingleFaults
        }

        async fn prepare(&self, direct: &Account) -> Result<SameCtx, String> {
            let ctx = SameCtx {
                table: new_table(direct, "xsamelist").await?,
                acted: Acted::default(),
            };
            let list = same(direct, &ctx.table);
            let mut first = vec![neighbour()];
            if !matches!(self.0, Op::Insert) {
                first.push(jones());
            }
            for e in &first {
                list.insert(e).await.map_err(|e| e.to_string())?;
            }
            Ok(ctx)
        }

        async fn operate(&self, ctx: &SameCtx, account: &Account) -> Outcome {
            let list = same(account, &ctx.table);
            let result = match self.0 {
                Op::Insert => list.insert(&jones()).await.map(drop),
                Op::Put => list.upsert(&smith()).await.map(drop),
                Op::Delete => list.delete(&jones(), IfMatch::Any).await,
            };
            Outcome::of(&result)
        }

        /// Two other writers through the list: actor 0 hires Jones 224 (onto the list the
        /// operation changes); actor 1 makes Jones 223 a Brown — an `upsert` for an insert,
        /// otherwise a `replace` of the entity it reads, if any.
        async fn act(&self, ctx: &SameCtx, direct: &Account, actor: u8) {
            let list = same(direct, &ctx.table);
            if actor == 0 {
                if list.insert(&hire()).await.is_ok() {
                    ctx.acted.record(&hire());
                }
                return;
            }
            let stored = match self.0 {
                Op::Insert => list.upsert(&brown()).await.is_ok(),
                _ => match list.table().get::<Employee>(&jones()).await {
                    Ok(Some(current)) => list.replace(&current, &brown()).await.is_ok(),
                    _ => false,
                },
            };
            if stored {
                ctx.acted.record(&brown());
            }
        }

        async fn check(
            &self,
            ctx: &SameCtx,
            direct: &Account,
            report: Option<&Outcome>,
            _baseline: Option<&Outcome>,
        ) -> Result<(), String> {
            let stored = stored(direct, &ctx.table).await?;
            judge_jones(self.0, &stored, report, &ctx.acted)?;
            let list = same(direct, &ctx.table);
            let mut lists = Vec::new();
            for name in NAMES {
                let ids = list.ids("Sales", name).await.map_err(|e| e.to_string())?;
                lists.push((name, ids));
            }
            listed_once(&stored, &lists)
        }
    }
}

/// Denormalized copies, compound keys and heterogeneous rows.
mod relations {
    use super::*;
    use serde::{Deserialize, Serialize};
    use tablekit::TableEntity;
    use tablekit_core::keys::CompoundKey;
    use tablekit_core::{IfMatch, Keys};
    use tablekit_index::{CompoundRows, DenormalizedCopy, EntityKind, SourceWrite, TypedRows};

    use crate::explore::model::new_table;

    /// The department row of Sales: its manager's details, and how many employees it has.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(super) struct Department {
        manager_id: String,
        #[serde(default)]
        manager_name: String,
        #[serde(default)]
        manager_email: String,
        #[serde(default)]
        employee_count: i64,
    }

    fn department() -> Keys {
        Keys::new("Sales", "Department").expect("keys")
    }

    /// The copy: the manager's name and email, and a count of employees that moves only for
    /// a new one.
    fn copy(account: &Account, table: &str) -> DenormalizedCopy<Employee, Department> {
        DenormalizedCopy::new(
            account.table(table).expect("table name"),
            |before: Option<&Employee>, after: &Employee, d: &mut Department| {
                if before.is_none() {
                    d.employee_count += 1;
                }
                if after.id == d.manager_id {
                    d.manager_name = after.last_name.clone();
                    d.manager_email = after.email.clone();
                }
            },
        )
    }

    /// The employees of Sales and its department row, read directly.
    async fn sales(direct: &Account, table: &str) -> Result<(Vec<Employee>, Department), String> {
        let all = rows(&direct.table(table).map_err(|e| e.to_string())?, "Sales").await?;
        let mut employees = Vec::new();
        let mut department = None;
        for row in &all {
            if row.keys.rk() == "Department" {
                department =
                    Some(from_properties::<Department>(&row.value).map_err(|e| e.to_string())?);
            } else {
                employees.push(employee_of(row)?);
            }
        }
        Ok((employees, department.ok_or("the department row is gone")?))
    }

    /// The department carries its manager's current details and counts every employee
    /// stored, once.
    fn in_step(employees: &[Employee], d: &Department) -> Result<(), String> {
        let count = i64::try_from(employees.len()).unwrap_or(i64::MAX);
        ensure(d.employee_count == count, || {
            format!(
                "the department counts {} employees; {count} are stored",
                d.employee_count
            )
        })?;
        let manager = employees.iter().find(|e| e.id == d.manager_id);
        let copied =
            manager.is_some_and(|m| m.last_name == d.manager_name && m.email == d.manager_email);
        ensure(copied, || {
            format!("the department holds {d:?}; the manager is {manager:?}")
        })
    }

    fn manager() -> Employee {
        prepared()
    }

    /// A new employee of Sales.
    fn newcomer() -> Employee {
        Employee {
            last_name: "Smith".into(),
            email: "smith@contoso.com".into(),
            ..Employee::jones("Sales", 224)
        }
    }

    /// The manager with a new email.
    fn moved_manager() -> Employee {
        Employee {
            email: "m@contoso.com".into(),
            age: 40,
            ..manager()
        }
    }

    /// The employee the concurrent actor adds.
    fn actors_hire() -> Employee {
        Employee {
            last_name: "Brown".into(),
            ..Employee::jones("Sales", 225)
        }
    }

    async fn with_department(direct: &Account, prefix: &str) -> Result<String, String> {
        let table = new_table(direct, prefix).await?;
        let t = direct.table(&table).map_err(|e| e.to_string())?;
        let d = Department {
            manager_id: manager().id,
            ..Department::default()
        };
        t.insert(&tablekit_core::Entity::new(department(), &d))
            .await
            .map_err(|e| e.to_string())?;
        copy(direct, &table)
            .write(&manager(), SourceWrite::Insert, department())
            .await
            .map_err(|e| e.to_string())?;
        Ok(table)
    }

    pub(super) struct Ctx {
        table: String,
        acted: Acted,
    }

    /// `DenormalizedCopy::write`: a new employee by upsert (the count moves), then the
    /// manager's new email by `Replace(IfMatch::Any)` (the copy follows, the count does not).
    /// Recovery retries a write whose outcome is unknown, as a caller would.
    pub(super) struct DenormalizedWrite;

    impl Scenario for DenormalizedWrite {
        type Ctx = Ctx;
        type Report = Vec<Outcome>;

        fn name(&self) -> &'static str {
            "index.denormalized.write"
        }

        fn invariant(&self) -> &'static str {
            "the target carries its source's details and a summary count that moved only for a new source — exact after recovery retries what was unknown; each write as written on Ok, not at all on a refusal"
        }

        fn actors(&self) -> u8 {
            1
        }

        fn suite_plan(&self) -> Plan {
            Plan::SingleFaults
        }

        async fn prepare(&self, direct: &Account) -> Result<Ctx, String> {
            Ok(Ctx {
                table: with_department(direct, "xdenorm").await?,
                acted: Acted::default(),
            })
        }

        async fn operate(&self, ctx: &Ctx, account: &Account) -> Vec<Outcome> {
            let copy = copy(account, &ctx.table);
            let hired = copy
                .write(&newcomer(), SourceWrite::Upsert, department())
                .await;
            let moved = copy
                .write(
                    &moved_manager(),
                    SourceWrite::Replace(IfMatch::Any),
                    department(),
                )
                .await;
            vec![Outcome::of(&hired), Outcome::of(&moved)]
        }

        async fn recover(
            &self,
            ctx: &Ctx,
            account: &Account,
            report: Option<&Vec<Outcome>>,
        ) -> Result<(), String> {
            let copy = copy(account, &ctx.table);
            let unknown = |i: usize| report.is_none_or(|r| r[i].is(ErrorKind::Indeterminate));
            if unknown(0) {
                copy.write(&newcomer(), SourceWrite::Upsert, department())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            if unknown(1) {
                let how = SourceWrite::Replace(IfMatch::Any);
                copy.write(&moved_manager(), how, department())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }

        /// Another writer hires an employee through the copy.
        async fn act(&self, ctx: &Ctx, direct: &Account, _actor: u8) {
            let hired = copy(direct, &ctx.table)
                .write(&actors_hire(), SourceWrite::Insert, department())
                .await;
            if hired.is_ok() {
                ctx.acted.record(&actors_hire());
            }
        }

        async fn check(
            &self,
            ctx: &Ctx,
            direct: &Account,
            report: Option<&Vec<Outcome>>,
            _baseline: Option<&Vec<Outcome>>,
        ) -> Result<(), String> {
            let (employees, d) = sales(direct, &ctx.table).await?;
            in_step(&employees, &d)?;
            let find = |id: &str| employees.iter().find(|e| e.id == id);
            let acted = ctx.acted.all();
            ensure(
                find(&actors_hire().id).is_some() != acted.is_empty(),
                || format!("the actor hired {acted:?}; stored {employees:?}"),
            )?;
            // Recovery retried what was unknown: both writes landed unless refused.
            let outcome = |i: usize| match report {
                Some(r) if r[i].is(ErrorKind::Indeterminate) => Outcome::Ok,
                Some(r) => r[i].clone(),
                None => Outcome::Ok,
            };
            let none = Acted::default();
            judge(
                Some(&outcome(0)),
                find(&newcomer().id),
                None,
                Some(&newcomer()),
                &none,
            )?;
            judge(
                Some(&outcome(1)),
                find(&manager().id),
                Some(&manager()),
                Some(&moved_manager()),
                &none,
            )
        }
    }

    /// `DenormalizedCopy::refresh` after the manager's email was changed outside the copy.
    pub(super) struct DenormalizedRefresh;

    impl Scenario for DenormalizedRefresh {
        type Ctx = Ctx;
        type Report = Outcome;

        fn name(&self) -> &'static str {
            "index.denormalized.refresh"
        }

        fn invariant(&self) -> &'static str {
            "on Ok (or after recovery retried an unknown outcome) the target carries its source's current details; a refusal leaves it as it was; the count never moves"
        }

        fn actors(&self) -> u8 {
            1
        }

        fn suite_plan(&self) -> Plan {
            Plan::SingleFaults
        }

        async fn prepare(&self, direct: &Account) -> Result<Ctx, String> {
            let table = with_department(direct, "xdenormref").await?;
            // Behind the copy's back: the department still says a@contoso.com.
            direct
                .table(&table)
                .map_err(|e| e.to_string())?
                .upsert_replace(&moved_manager())
                .await
                .map_err(|e| e.to_string())?;
            Ok(Ctx {
                table,
                acted: Acted::default(),
            })
        }

        async fn operate(&self, ctx: &Ctx, account: &Account) -> Outcome {
            let refreshed = copy(account, &ctx.table)
                .refresh(&manager(), department())
                .await;
            Outcome::of(&refreshed)
        }

        async fn recover(
            &self,
            ctx: &Ctx,
            account: &Account,
            report: Option<&Outcome>,
        ) -> Result<(), String> {
            if report.is_none_or(|r| r.is(ErrorKind::Indeterminate)) {
                copy(account, &ctx.table)
                    .refresh(&manager(), department())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }

        /// Another writer changes the manager's email through the copy.
        async fn act(&self, ctx: &Ctx, direct: &Account, _actor: u8) {
            let e = Employee {
                email: "x@contoso.com".into(),
                ..moved_manager()
            };
            let written = copy(direct, &ctx.table)
                .write(&e, SourceWrite::Upsert, department())
                .await;
            if written.is_ok() {
                ctx.acted.record(&e);
            }
        }

        async fn check(
            &self,
            ctx: &Ctx,
            direct: &Account,
            report: Option<&Outcome>,
            _baseline: Option<&Outcome>,
        ) -> Result<(), String> {
            let (employees, d) = sales(direct, &ctx.table).await?;
            let refused = report.is_some_and(|r| !matches!(r, Outcome::Ok))
                && report.is_some_and(|r| !r.is(ErrorKind::Indeterminate));
            if refused && ctx.acted.all().is_empty() {
                ensure(
                    d.manager_email == "a@contoso.com" && d.employee_count == 1,
                    || format!("{report:?} (a refusal), but the department holds {d:?}"),
                )
            } else {
                in_step(&employees, &d)
            }
        }
    }

    fn reviews(account: &Account, table: &str) -> CompoundRows {
        CompoundRows::new(
            account.table(table).expect("table name"),
            CompoundKey::new('_').with_width(1, 6).with_width(2, 4),
        )
    }

    fn row(name: &str, value: i32) -> Properties {
        Properties::new().with(name, value)
    }

    pub(super) struct CompoundCtx {
        table: String,
        acted: Mutex<Vec<Properties>>,
    }

    /// `CompoundRows::upsert` of a review (2013) and `delete` of another (2012) of employee 123,
    /// beside employee 124's rows.
    pub(super) struct CompoundWrite;

    impl Scenario for CompoundWrite {
        type Ctx = CompoundCtx;
        type Report = Vec<Outcome>;

        fn name(&self) -> &'static str {
            "index.compound.write"
        }

        fn invariant(&self) -> &'static str {
            "the employee's prefix holds exactly its row and its reviews, each as written on Ok, as before on a definite refusal, either after an open failure; the neighbour's rows are untouched"
        }

        fn actors(&self) -> u8 {
            1
        }

        fn suite_plan(&self) -> Plan {
            Plan::SingleFaults
        }

        async fn prepare(&self, direct: &Account) -> Result<CompoundCtx, String> {
            let table = new_table(direct, "xcompound").await?;
            let rows = reviews(direct, &table);
            let puts: [(&[&str], Properties); 4] = [
                (&["empid", "123"], row("Age", 34)),
                (&["empid", "123", "2012"], row("Rating", 3)),
                (&["empid", "124"], row("Age", 40)),
                (&["empid", "124", "2012"], row("Rating", 4)),
            ];
            for (components, value) in puts {
                rows.upsert("Sales", components, &value)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(CompoundCtx {
                table,
                acted: Mutex::default(),
            })
        }

        async fn operate(&self, ctx: &CompoundCtx, account: &Account) -> Vec<Outcome> {
            let rows = reviews(account, &ctx.table);
            let put = rows
                .upsert("Sales", ["empid", "123", "2013"], &row("Rating", 5))
                .await;
            let deleted = rows
                .delete("Sales", ["empid", "123", "2012"], IfMatch::Any)
                .await;
            vec![Outcome::of(&put), Outcome::of(&deleted)]
        }

        /// Another writer replaces employee 123's own row.
        async fn act(&self, ctx: &CompoundCtx, direct: &Account, _actor: u8) {
            let value = row("Age", 35);
            if reviews(direct, &ctx.table)
                .upsert("Sales", ["empid", "123"], &value)
                .await
                .is_ok()
            {
                ctx.acted
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(value);
            }
        }

        async fn check(
            &self,
            ctx: &CompoundCtx,
            direct: &Account,
            report: Option<&Vec<Outcome>>,
            _baseline: Option<&Vec<Outcome>>,
        ) -> Result<(), String> {
            let rows = reviews(direct, &ctx.table);
            let read: Vec<Stored<Properties>> = rows
                .with_prefix("Sales", ["empid", "123"])
                .map_err(|e| e.to_string())?
                .collect()
                .await
                .map_err(|e| e.to_string())?;
            let at = |rk: &str| read.iter().find(|r| r.keys.rk() == rk).map(|r| &r.value);
            let keys: Vec<&str> = read.iter().map(|r| r.keys.rk()).collect();
            for rk in &keys {
                let parsed = rows.components(rk).map_err(|e| e.to_string())?;
                ensure(parsed[..2] == ["empid", "000123"], || {
                    format!("{rk} read under employee 123's prefix: {parsed:?}")
                })?;
            }
            ensure(
                keys.iter().all(|k| {
                    ["empid_000123", "empid_000123_2012", "empid_000123_2013"].contains(k)
                }),
                || format!("rows under the prefix: {keys:?}"),
            )?;
            let acted = ctx
                .acted
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            ensure(
                at("empid_000123") == Some(&row("Age", 34))
                    || acted.iter().any(|a| Some(a) == at("empid_000123")),
                || format!("employee 123's row: {:?}", at("empid_000123")),
            )?;
            let neighbour: Option<Stored<Properties>> = rows
                .get("Sales", ["empid", "124", "2012"])
                .await
                .map_err(|e| e.to_string())?;
            ensure(
                neighbour.is_some_and(|n| n.value == row("Rating", 4)),
                || "employee 124's review changed".into(),
            )?;
            let Some(report) = report else {
                return Ok(());
            };
            judge_plain(
                &report[0],
                at("empid_000123_2013"),
                None,
                Some(&row("Rating", 5)),
                &[],
            )?;
            judge_plain(
                &report[1],
                at("empid_000123_2012"),
                Some(&row("Rating", 3)),
                None,
                &[],
            )
        }
    }

    /// A department row among its employees: `DEPARTMENT_Sales`.
    #[derive(Debug, Clone, PartialEq, TableEntity)]
    #[table(partition_key = "{name}", row_key = "DEPARTMENT_{name}")]
    pub(super) struct Dept {
        pub(super) name: String,
        pub(super) head_count: i64,
    }

    impl EntityKind for Dept {
        const ENTITY_TYPE: &'static str = "Department";
        const ROW_PREFIX: &'static str = "DEPARTMENT_";
    }

    /// An employee among its department's rows: `EMPLOYEE_000123`.
    #[derive(Debug, Clone, PartialEq, TableEntity)]
    #[table(partition_key = "{department}", row_key = "EMPLOYEE_{id}")]
    pub(super) struct Staff {
        pub(super) department: String,
        pub(super) id: String,
        pub(super) name: String,
    }

    impl EntityKind for Staff {
        const ENTITY_TYPE: &'static str = "Employee";
        const ROW_PREFIX: &'static str = "EMPLOYEE_";
    }

    pub(super) fn staff(id: u32, name: &str) -> Staff {
        Staff {
            department: "Sales".into(),
            id: format!("{id:06}"),
            name: name.into(),
        }
    }

    pub(super) struct TypedCtx {
        table: String,
        acted: Mutex<Vec<Staff>>,
    }

    /// `TypedRows::upsert` of employee 123 (renamed) and `insert` of employee 124 beside the
    /// department row.
    pub(super) struct TypedWrite;

    impl Scenario for TypedWrite {
        type Ctx = TypedCtx;
        type Report = Vec<Outcome>;

        fn name(&self) -> &'static str {
            "index.typed.write"
        }

        fn invariant(&self) -> &'static str {
            "every row carries the EntityType its RowKey prefix says and reads back as its kind; each write as written on Ok, as before on a definite refusal, either after an open failure"
        }

        fn actors(&self) -> u8 {
            1
        }

        fn suite_plan(&self) -> Plan {
            Plan::SingleFaults
        }

        async fn prepare(&self, direct: &Account) -> Result<TypedCtx, String> {
            let table = new_table(direct, "xtyped").await?;
            let rows = TypedRows::new(direct.table(&table).map_err(|e| e.to_string())?);
            rows.insert(&Dept {
                name: "Sales".into(),
                head_count: 1,
            })
            .await
            .map_err(|e| e.to_string())?;
            rows.insert(&staff(123, "Jones"))
                .await
                .map_err(|e| e.to_string())?;
            Ok(TypedCtx {
                table,
                acted: Mutex::default(),
            })
        }

        async fn operate(&self, ctx: &TypedCtx, account: &Account) -> Vec<Outcome> {
            let rows = TypedRows::new(account.table(&ctx.table).expect("table name"));
            let renamed = rows.upsert(&staff(123, "Jun Jones")).await;
            let hired = rows.insert(&staff(124, "Smith")).await;
            vec![Outcome::of(&renamed), Outcome::of(&hired)]
        }

        /// Another writer renames employee 123.
        async fn act(&self, ctx: &TypedCtx, direct: &Account, _actor: u8) {
            let rows = TypedRows::new(direct.table(&ctx.table).expect("table name"));
            let e = staff(123, "J. Jones");
            if rows.upsert(&e).await.is_ok() {
                ctx.acted
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(e);
            }
        }

        async fn check(
            &self,
            ctx: &TypedCtx,
            direct: &Account,
            report: Option<&Vec<Outcome>>,
            _baseline: Option<&Vec<Outcome>>,
        ) -> Result<(), String> {
            let table = direct.table(&ctx.table).map_err(|e| e.to_string())?;
            for r in rows(&table, "Sales").await? {
                let kind = text(&r, "EntityType");
                let expected = if r.keys.rk().starts_with("EMPLOYEE_") {
                    "Employee"
                } else {
                    "Department"
                };
                ensure(kind == Some(expected), || {
                    format!("{} has EntityType {kind:?}", r.keys)
                })?;
            }
            let rows = TypedRows::new(table);
            let get = |id: &'static str| {
                let rows = rows.clone();
                async move {
                    rows.get::<Staff>(TypedRows::keys::<Staff>("Sales", id)?)
                        .await
                }
            };
            let jones = get("000123")
                .await
                .map_err(|e| e.to_string())?
                .map(|s| s.value);
            let smith = get("000124")
                .await
                .map_err(|e| e.to_string())?
                .map(|s| s.value);
            let dept: Option<Stored<Dept>> = rows
                .get(TypedRows::keys::<Dept>("Sales", "Sales").map_err(|e| e.to_string())?)
                .await
                .map_err(|e| e.to_string())?;
            ensure(dept.is_some_and(|d| d.value.head_count == 1), || {
                "the department row changed".into()
            })?;
            let Some(report) = report else {
                return Ok(());
            };
            let acted = ctx
                .acted
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            judge_plain(
                &report[0],
                jones.as_ref(),
                Some(&staff(123, "Jones")),
                Some(&staff(123, "Jun Jones")),
                &acted,
            )?;
            judge_plain(
                &report[1],
                smith.as_ref(),
                None,
                Some(&staff(124, "Smith")),
                &[],
            )
        }
    }
}

/// Backfills of a newly declared copy, resumed after a stop.
mod backfill {
    use super::*;
    use tablekit_core::Keys;
    use tablekit_index::{
        BackfillOptions, BackfillState, Checkpoint as _, CopySpec, IndexSpec, TableCheckpoint,
    };

    use crate::explore::model::new_table;

    /// Where the copies go.
    #[derive(Clone, Copy)]
    pub(super) enum Layout {
        Intra,
        Inter,
    }

    /// The employees stored before the email copy was declared: 7 of Sales, 4 of Marketing.
    fn employees() -> Vec<Employee> {
        let sales = (100..107).map(|id| Employee::jones("Sales", id));
        let marketing = (200..204).map(|id| Employee::jones("Marketing", id));
        sales.chain(marketing).collect()
    }

    fn checkpoint(account: &Account, table: &str) -> TableCheckpoint {
        TableCheckpoint::new(
            account.table(table).expect("table name"),
            Keys::new("backfill", "state").expect("keys"),
        )
    }

    /// Three entities a page: several pages, and a checkpoint after each.
    fn options() -> BackfillOptions {
        BackfillOptions::default().with_page_size(3)
    }

    pub(super) struct Ctx {
        table: String,
        queue: String,
        acted: Acted,
    }

    fn inter_names(ctx: &Ctx) -> inter::Names {
        inter::Names {
            table: ctx.table.clone(),
            queue: ctx.queue.clone(),
            acted: Acted::default(),
        }
    }

    /// `backfill` of the email copy over entities stored with the primary alone, three per
    /// page, checkpointed in the table; recovery runs it again from the checkpoint (and, for
    /// the inter-partition index, drains the jobs of the concurrent writer).
    pub(super) struct Backfill(pub(super) Layout);

    impl Backfill {
        async fn run(&self, ctx: &Ctx, account: &Account) -> tablekit_core::Result<BackfillState> {
            let checkpoint = checkpoint(account, &ctx.table);
            match self.0 {
                Layout::Intra => {
                    intra::index(account, &ctx.table)
                        .backfill(&checkpoint, options())
                        .await
                }
                Layout::Inter => {
                    inter::index(account, &inter_names(ctx))
                        .backfill(&checkpoint, options())
                        .await
                }
            }
        }
    }

    impl Scenario for Backfill {
        type Ctx = Ctx;
        type Report = Outcome;

        fn name(&self) -> &'static str {
            match self.0 {
                Layout::Intra => "index.intra.backfill",
                Layout::Inter => "index.inter.backfill",
            }
        }

        fn invariant(&self) -> &'static str {
            "resumed from its checkpoint after a stop or a failure, the backfill ends done with every entity counted once (written or left to a concurrent writer) and each entity's copies written once: the index verifies clean"
        }

        fn actors(&self) -> u8 {
            1
        }

        fn suite_plan(&self) -> Plan {
            sampled(3)
        }

        async fn prepare(&self, direct: &Account) -> Result<Ctx, String> {
            let table = new_table(direct, "xbackfill").await?;
            let ctx = Ctx {
                queue: tablekit_testkit::unique_queue_name("xbackfill"),
                table,
                acted: Acted::default(),
            };
            let t = direct.table(&ctx.table).map_err(|e| e.to_string())?;
            // The primaries alone, as an index declared without the email copy stored them.
            let mut spec = IndexSpec::builder(Employee::DEPARTMENT);
            spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
            let spec = spec.build().map_err(|e| e.to_string())?;
            match self.0 {
                Layout::Intra => {
                    let old = tablekit_index::IntraPartitionIndex::new(t, spec);
                    for e in employees() {
                        old.insert(&e).await.map_err(|e| e.to_string())?;
                    }
                }
                Layout::Inter => {
                    inter::index(direct, &inter_names(&ctx))
                        .create()
                        .await
                        .map_err(|e| e.to_string())?;
                    for e in employees() {
                        let keys = Keys::new(format!("empid_{}", e.department), &e.id)
                            .map_err(|e| e.to_string())?;
                        t.insert(&tablekit_core::Entity::new(keys, &e))
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                }
            }
            Ok(ctx)
        }

        async fn operate(&self, ctx: &Ctx, account: &Account) -> Outcome {
            Outcome::of(&self.run(ctx, account).await)
        }

        async fn recover(
            &self,
            ctx: &Ctx,
            account: &Account,
            _report: Option<&Outcome>,
        ) -> Result<(), String> {
            let state = self.run(ctx, account).await.map_err(|e| e.to_string())?;
            ensure(state.done, || format!("the backfill stopped: {state:?}"))?;
            if let Layout::Inter = self.0 {
                inter::drain(account, &inter_names(ctx)).await?;
            }
            Ok(())
        }

        /// Another writer changes an employee's email through the index (the new
        /// declaration: its own write stores its copies).
        async fn act(&self, ctx: &Ctx, direct: &Account, _actor: u8) {
            let e = Employee {
                email: "moved@contoso.com".into(),
                ..Employee::jones("Sales", 104)
            };
            let written = match self.0 {
                Layout::Intra => intra::index(direct, &ctx.table).upsert(&e).await.is_ok(),
                Layout::Inter => inter::index(direct, &inter_names(ctx))
                    .upsert(&e)
                    .await
                    .is_ok(),
            };
            if written {
                ctx.acted.record(&e);
            }
        }

        async fn check(
            &self,
            ctx: &Ctx,
            direct: &Account,
            _report: Option<&Outcome>,
            _baseline: Option<&Outcome>,
        ) -> Result<(), String> {
            let state = checkpoint(direct, &ctx.table)
                .load()
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no checkpoint saved")?;
            let n = employees().len() as u64;
            ensure(
                state.done && state.written + state.skipped == n && state.scanned == n,
                || format!("{n} entities, the checkpoint says {state:?}"),
            )?;
            let mut stored = Vec::new();
            for pk in ["Sales", "Marketing"] {
                match self.0 {
                    Layout::Intra => stored.extend(intra::families(direct, &ctx.table, pk).await?),
                    Layout::Inter => {
                        let index = inter::index(direct, &inter_names(ctx));
                        let report = index.verify(pk).await.map_err(|e| e.to_string())?;
                        ensure(
                            report.is_consistent() && report.checked == report.primaries,
                            || format!("{pk}: verify reports {report:?}"),
                        )?;
                        let t = direct.table(&ctx.table).map_err(|e| e.to_string())?;
                        for r in rows(&t, &format!("empid_{pk}")).await? {
                            stored.push(employee_of(&r)?);
                        }
                    }
                }
            }
            let mut expected = employees();
            for e in ctx.acted.all() {
                if let Some(slot) = expected.iter_mut().find(|x| x.id == e.id) {
                    *slot = e;
                }
            }
            stored.sort_by(|a, b| a.id.cmp(&b.id));
            expected.sort_by(|a, b| a.id.cmp(&b.id));
            ensure(stored == expected, || {
                format!("stored {stored:?}, expected {expected:?}")
            })
        }
    }
}

/// Reads under page splits and read faults: each equals the fault-free run's.
mod reads {
    use super::*;
    use serde::Deserialize;
    use tablekit_azure::ContinuationToken;
    use tablekit_core::keys::CompoundKey;
    use tablekit_core::{Entity, Keys, OrUnknown};
    use tablekit_index::{
        CompoundRows, CopyHandle, EventualList, IndexRange, IndexRead, InterPartitionIndex,
        IntraPartitionIndex, ListSpec, RepairReport, SamePartitionList, TypedRows, VerifyReport,
    };
    use tablekit_testkit::unique_queue_name;

    use super::relations::{Dept, Staff, staff};
    use crate::explore::model::{SKEW, directory, new_table, worker_options};

    /// Which index.
    #[derive(Clone, Copy)]
    pub(super) enum Layout {
        Intra,
        Inter,
    }

    /// Employee `id` of Sales with email `e<id>@contoso.com`.
    fn numbered(id: u32) -> Employee {
        Employee {
            email: format!("e{id:06}@contoso.com"),
            ..Employee::jones("Sales", id)
        }
    }

    fn show<V: std::fmt::Debug>(rows: &[Stored<V>]) -> Vec<String> {
        rows.iter()
            .map(|r| format!("{} {:?}", r.keys, r.value))
            .collect()
    }

    fn failed<T>(result: tablekit_core::Result<T>) -> Result<T, Outcome> {
        result.map_err(|e| Outcome::of::<()>(&Err(e)))
    }

    /// Reads a range as a caller resuming it in another process would: the first page, its
    /// token carried as text, then the rest from the token.
    async fn resumed(range: IndexRange<Employee>) -> tablekit_core::Result<Vec<String>> {
        let first = range.clone().page().await?;
        let mut read = show(&first.items);
        if let Some(token) = first.continuation {
            let token: ContinuationToken = token.to_string().parse()?;
            read.extend(show(&range.resume(token).collect().await?));
        }
        Ok(read)
    }

    /// Every lookup of [`IndexRead`]: by the primary, by the email copy, a range of ids and
    /// a prefix of emails (four rows a page, each resumed from its first page's token).
    async fn lookups<I: IndexRead<Employee>>(
        index: &I,
        by_email: &CopyHandle<Employee>,
    ) -> tablekit_core::Result<Vec<String>> {
        let by_id = index.spec().primary_handle();
        let mut read = Vec::new();
        let one = index.get("Sales", "000105").await?;
        read.push(format!("get {:?}", one.map(|s| s.value)));
        let found = index
            .get_by(by_email, "Sales", "e000111@contoso.com")
            .await?;
        read.push(format!("get_by {:?}", found.map(|s| s.value)));
        let ids = index
            .range_by(&by_id, "Sales", "000103".."000117")?
            .with_page_size(4);
        read.extend(resumed(ids).await?);
        let emails = index
            .range_by_prefix(by_email, "Sales", "e00011")?
            .with_page_size(4);
        read.extend(resumed(emails).await?);
        Ok(read)
    }

    pub(super) struct Names {
        table: String,
        queue: String,
    }

    impl Names {
        async fn new(direct: &Account, prefix: &str) -> Result<Self, String> {
            Ok(Self {
                table: new_table(direct, prefix).await?,
                queue: unique_queue_name(prefix),
            })
        }

        fn intra(
            &self,
            account: &Account,
        ) -> (IntraPartitionIndex<Employee>, CopyHandle<Employee>) {
            let d = directory();
            let table = account.table(&self.table).expect("table name");
            (IntraPartitionIndex::new(table, d.spec), d.by_email)
        }

        fn inter(
            &self,
            account: &Account,
        ) -> (InterPartitionIndex<Employee>, CopyHandle<Employee>) {
            let d = directory();
            let table = account.table(&self.table).expect("table name");
            let queue = account.queue(&self.queue).expect("queue name");
            let index = InterPartitionIndex::builder(table, d.spec, queue)
                .with_clock_skew_allowance(SKEW)
                .build()
                .expect("index");
            (index, d.by_email)
        }
    }

    /// `get`, `get_by`, `range_by` and `range_by_prefix` of an index holding 20 employees,
    /// the ranges four rows a page and resumed from their first page's token.
    pub(super) struct Lookups(pub(super) Layout);

    impl Scenario for Lookups {
        type Ctx = Names;
        type Report = Read;

        fn name(&self) -> &'static str {
            match self.0 {
                Layout::Intra => "index.intra.read",
                Layout::Inter => "index.inter.read",
            }
        }

        fn invariant(&self) -> &'static str {
            "point lookups and range reads resumed from their first page's token return what the fault-free run returned, or fail with the fault"
        }

        fn suite_plan(&self) -> Plan {
            sampled(4)
        }

        async fn prepare(&self, direct: &Account) -> Result<Names, String> {
            let names = Names::new(direct, "xlookup").await?;
            let employees = (100..120).map(numbered);
            match self.0 {
                Layout::Intra => {
                    let (index, _) = names.intra(direct);
                    for e in employees {
                        index.insert(&e).await.map_err(|e| e.to_string())?;
                    }
                }
                Layout::Inter => {
                    let (index, _) = names.inter(direct);
                    index.create().await.map_err(|e| e.to_string())?;
                    for e in employees {
                        index.insert(&e).await.map_err(|e| e.to_string())?;
                    }
                    index
                        .worker(worker_options())
                        .drain()
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            Ok(names)
        }

        async fn operate(&self, names: &Names, account: &Account) -> Read {
            failed(match self.0 {
                Layout::Intra => {
                    let (index, by_email) = names.intra(account);
                    lookups(&index, &by_email).await
                }
                Layout::Inter => {
                    let (index, by_email) = names.inter(account);
                    lookups(&index, &by_email).await
                }
            })
        }

        async fn check(
            &self,
            _names: &Names,
            _direct: &Account,
            report: Option<&Read>,
            baseline: Option<&Read>,
        ) -> Result<(), String> {
            same_as_baseline(report, baseline)
        }
    }

    /// Which list.
    #[derive(Clone, Copy)]
    pub(super) enum ListKind {
        /// Option 3, its lists in partitions of their own.
        Eventual,
        /// Option 2.
        Same,
    }

    /// Small lists: three entries a row, so ten Joneses take a base row and three overflow
    /// rows, read with one range query.
    fn list_spec(property: &str, bytes: usize) -> ListSpec<Employee> {
        ListSpec::builder("lastname", Employee::LAST_NAME)
            .with_prefix("lastname_")
            .with_property(property)
            .with_max_list_bytes(bytes)
            .build()
            .expect("spec")
    }

    fn eventual(account: &Account, names: &Names) -> EventualList<Employee> {
        let table = account.table(&names.table).expect("table name");
        let queue = account.queue(&names.queue).expect("queue name");
        EventualList::separate(
            table.clone(),
            table,
            list_spec("EmployeeDetails", 128),
            queue,
        )
        .with_clock_skew_allowance(SKEW)
    }

    fn same(account: &Account, names: &Names) -> SamePartitionList<Employee> {
        let table = account.table(&names.table).expect("table name");
        SamePartitionList::new(table, list_spec("EmployeeIDs", 64)).expect("list")
    }

    /// The Joneses: ten, listed over a base row and overflow rows; and two Smiths.
    fn listed() -> Vec<Employee> {
        let joneses = (100..110).map(|id| Employee::jones("Sales", id));
        let smiths = (110..112).map(|id| Employee {
            last_name: "Smith".into(),
            ..Employee::jones("Sales", id)
        });
        joneses.chain(smiths).collect()
    }

    /// `EventualList::lookup` or `SamePartitionList::lookup` of a list spread over a base
    /// row and three overflow rows.
    pub(super) struct ListLookup(pub(super) ListKind);

    impl Scenario for ListLookup {
        type Ctx = Names;
        type Report = Read;

        fn name(&self) -> &'static str {
            match self.0 {
                ListKind::Eventual => "index.list.eventual.lookup",
                ListKind::Same => "index.list.same_partition.lookup",
            }
        }

        fn invariant(&self) -> &'static str {
            "a lookup of a list spread over overflow rows returns what the fault-free run returned, every entity once, or fails with the fault"
        }

        fn suite_plan(&self) -> Plan {
            sampled(4)
        }

        async fn prepare(&self, direct: &Account) -> Result<Names, String> {
            let names = Names::new(direct, "xlistread").await?;
            match self.0 {
                ListKind::Eventual => {
                    let list = eventual(direct, &names);
                    list.create().await.map_err(|e| e.to_string())?;
                    for e in listed() {
                        list.insert(&e).await.map_err(|e| e.to_string())?;
                    }
                    list.worker(worker_options())
                        .drain()
                        .await
                        .map_err(|e| e.to_string())?;
                }
                ListKind::Same => {
                    let list = same(direct, &names);
                    for e in listed() {
                        list.insert(&e).await.map_err(|e| e.to_string())?;
                    }
                }
            }
            Ok(names)
        }

        async fn operate(&self, names: &Names, account: &Account) -> Read {
            failed(match self.0 {
                // Jobs list entities in the order they run, which varies from run to run:
                // compared in key order.
                ListKind::Eventual => eventual(account, names)
                    .lookup("Jones")
                    .collect()
                    .await
                    .map(|found| {
                        let mut read = show(&found);
                        read.sort();
                        read
                    }),
                ListKind::Same => same(account, names)
                    .lookup("Sales", "Jones")
                    .collect()
                    .await
                    .map(|found| show(&found)),
            })
        }

        async fn check(
            &self,
            _names: &Names,
            _direct: &Account,
            report: Option<&Read>,
            baseline: Option<&Read>,
        ) -> Result<(), String> {
            if let Some(Ok(read)) = report {
                ensure(read.len() == 10, || format!("ten Joneses, found {read:?}"))?;
            }
            same_as_baseline(report, baseline)
        }
    }

    fn reviews(account: &Account, table: &str) -> CompoundRows {
        CompoundRows::new(
            account.table(table).expect("table name"),
            CompoundKey::new('_').with_width(1, 6).with_width(2, 4),
        )
    }

    /// `CompoundRows::with_prefix` (three rows a page) and `get`: employee 123 with its seven
    /// reviews, between employees 122 and 124 and theirs.
    pub(super) struct CompoundRead;

    impl Scenario for CompoundRead {
        type Ctx = Names;
        type Report = Read;

        fn name(&self) -> &'static str {
            "index.compound.read"
        }

        fn invariant(&self) -> &'static str {
            "a prefix read returns exactly the parent and its children in key order, and a point read its row, as the fault-free run did, or fails with the fault"
        }

        fn suite_plan(&self) -> Plan {
            Plan::SingleFaults
        }

        async fn prepare(&self, direct: &Account) -> Result<Names, String> {
            let names = Names::new(direct, "xcompoundread").await?;
            let rows = reviews(direct, &names.table);
            let mut puts: Vec<(Vec<String>, Properties)> = Vec::new();
            for id in ["122", "123", "124"] {
                puts.push((
                    vec!["empid".into(), id.into()],
                    Properties::new().with("Age", 30),
                ));
                let years = if id == "123" { 2010..2017 } else { 2012..2014 };
                for year in years {
                    puts.push((
                        vec!["empid".into(), id.into(), year.to_string()],
                        Properties::new().with("Rating", year - 2008),
                    ));
                }
            }
            for (components, value) in puts {
                rows.upsert("Sales", &components, &value)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(names)
        }

        async fn operate(&self, names: &Names, account: &Account) -> Read {
            let rows = reviews(account, &names.table);
            failed(
                async {
                    let all: Vec<Stored<Properties>> = rows
                        .with_prefix("Sales", ["empid", "123"])?
                        .with_page_size(3)
                        .collect()
                        .await?;
                    let mut read = show(&all);
                    let one: Option<Stored<Properties>> =
                        rows.get("Sales", ["empid", "123", "2013"]).await?;
                    read.push(format!("get {:?}", one.map(|s| s.value)));
                    Ok(read)
                }
                .await,
            )
        }

        async fn check(
            &self,
            _names: &Names,
            _direct: &Account,
            report: Option<&Read>,
            baseline: Option<&Read>,
        ) -> Result<(), String> {
            same_as_baseline(report, baseline)
        }
    }

    /// What a partition of mixed rows reads as.
    #[derive(Debug, Deserialize)]
    #[serde(tag = "EntityType")]
    enum Mixed {
        Department(Dept),
        Employee(Staff),
    }

    /// `TypedRows::all` (a department, eight employees and a row of a type the reader does
    /// not know) and `of_kind` (the employees), three rows a page.
    pub(super) struct TypedRead;

    impl Scenario for TypedRead {
        type Ctx = Names;
        type Report = Read;

        fn name(&self) -> &'static str {
            "index.typed.read"
        }

        fn invariant(&self) -> &'static str {
            "a partition of mixed rows reads as each row's kind (unknown kinds as property bags), and one kind's range as that kind, as the fault-free run did, or fails with the fault"
        }

        fn suite_plan(&self) -> Plan {
            Plan::SingleFaults
        }

        async fn prepare(&self, direct: &Account) -> Result<Names, String> {
            let names = Names::new(direct, "xtypedread").await?;
            let table = direct.table(&names.table).map_err(|e| e.to_string())?;
            let rows = TypedRows::new(table.clone());
            rows.insert(&Dept {
                name: "Sales".into(),
                head_count: 8,
            })
            .await
            .map_err(|e| e.to_string())?;
            for id in 120..128 {
                rows.insert(&staff(id, "Jones"))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let project = Entity::new(
                Keys::new("Sales", "PROJECT_apollo").map_err(|e| e.to_string())?,
                Properties::new()
                    .with("EntityType", "Project")
                    .with("Budget", 5),
            );
            table.insert(&project).await.map_err(|e| e.to_string())?;
            Ok(names)
        }

        async fn operate(&self, names: &Names, account: &Account) -> Read {
            let rows = TypedRows::new(account.table(&names.table).expect("table name"));
            failed(
                async {
                    let all = rows
                        .all::<Mixed>("Sales")
                        .with_page_size(3)
                        .collect()
                        .await?;
                    let mut read: Vec<String> = all
                        .iter()
                        .map(|r| match &r.value {
                            OrUnknown::Known(Mixed::Department(d)) => {
                                format!("{} department {d:?}", r.keys)
                            }
                            OrUnknown::Known(Mixed::Employee(e)) => {
                                format!("{} employee {e:?}", r.keys)
                            }
                            OrUnknown::Unknown(bag) => format!("{} unknown {bag:?}", r.keys),
                        })
                        .collect();
                    let staff: Vec<Stored<Staff>> = rows
                        .of_kind::<Staff>("Sales")
                        .with_page_size(3)
                        .collect()
                        .await?;
                    read.extend(show(&staff));
                    Ok(read)
                }
                .await,
            )
        }

        async fn check(
            &self,
            _names: &Names,
            _direct: &Account,
            report: Option<&Read>,
            baseline: Option<&Read>,
        ) -> Result<(), String> {
            if let Some(Ok(read)) = report {
                ensure(read.len() == 10 + 8, || format!("read {read:?}"))?;
            }
            same_as_baseline(report, baseline)
        }
    }

    /// Employees in the audited partition: more than a page of 1,000.
    const AUDITED: u32 = 1_050;

    /// What `verify` or `repair` returned.
    #[derive(Debug, Clone, PartialEq)]
    pub(super) enum Audited {
        Verify(VerifyReport),
        Repair(RepairReport),
        Failed(Outcome),
    }

    /// `verify` or `repair` of a partition of 1,050 employees — two pages a range — whose
    /// copies drifted: some missing, some stale, some orphaned, around the page boundary.
    pub(super) struct Audit(pub(super) Layout, pub(super) bool);

    impl Audit {
        pub(super) const VERIFY: bool = false;
        pub(super) const REPAIR: bool = true;

        async fn run(&self, names: &Names, account: &Account) -> Audited {
            let result = match (self.0, self.1) {
                (Layout::Intra, false) => names
                    .intra(account)
                    .0
                    .verify("Sales")
                    .await
                    .map(Audited::Verify),
                (Layout::Intra, true) => names
                    .intra(account)
                    .0
                    .repair("Sales")
                    .await
                    .map(Audited::Repair),
                (Layout::Inter, false) => names
                    .inter(account)
                    .0
                    .verify("Sales")
                    .await
                    .map(Audited::Verify),
                (Layout::Inter, true) => names
                    .inter(account)
                    .0
                    .repair("Sales")
                    .await
                    .map(Audited::Repair),
            };
            result.unwrap_or_else(|e| Audited::Failed(Outcome::of::<()>(&Err(e))))
        }
    }

    /// The keys of employee `id`'s primary and email copy in `layout`.
    fn keys_of(layout: Layout, e: &Employee) -> (Keys, Keys) {
        let keys = match layout {
            Layout::Intra => (
                Keys::new("Sales", format!("empid_{}", e.id)),
                Keys::new("Sales", format!("email_{}", e.email)),
            ),
            Layout::Inter => (
                Keys::new("empid_Sales", &e.id),
                Keys::new("email_Sales", &e.email),
            ),
        };
        (keys.0.expect("keys"), keys.1.expect("keys"))
    }

    impl Scenario for Audit {
        type Ctx = Names;
        type Report = Audited;

        fn name(&self) -> &'static str {
            match (self.0, self.1) {
                (Layout::Intra, false) => "index.intra.verify",
                (Layout::Intra, true) => "index.intra.repair",
                (Layout::Inter, false) => "index.inter.verify",
                (Layout::Inter, true) => "index.inter.repair",
            }
        }

        fn invariant(&self) -> &'static str {
            if self.1 {
                "repair of a partition larger than a page, its scan split anywhere, repairs exactly what the fault-free repair did (the same report), and after recovery the index verifies clean"
            } else {
                "verify of a partition larger than a page, its scan split anywhere, reports exactly what the fault-free verify did, or fails with the fault"
            }
        }

        fn suite_plan(&self) -> Plan {
            sampled(6)
        }

        async fn prepare(&self, direct: &Account) -> Result<Names, String> {
            let names = Names::new(direct, "xaudit").await?;
            if let Layout::Inter = self.0 {
                names
                    .inter(direct)
                    .0
                    .create()
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let mut ops = Vec::new();
            let put = |keys: Keys, e: &Employee| {
                tablekit_core::batch::Operation::insert(&Entity::new(keys, e))
                    .map_err(|e| e.to_string())
            };
            for id in 0..AUDITED {
                let e = numbered(id);
                let (primary, copy) = keys_of(self.0, &e);
                ops.push(put(primary, &e)?);
                // Missing copies at the start, at each side of the page boundary, at the end.
                if ![0, 999, 1_000, AUDITED - 1].contains(&id) {
                    // Stale copies: an older age.
                    let held = if [500, 1_001].contains(&id) {
                        Employee {
                            age: 20,
                            ..e.clone()
                        }
                    } else {
                        e.clone()
                    };
                    ops.push(put(copy, &held)?);
                }
            }
            // Orphans: copies no primary calls for, one each side of the boundary.
            for (id, email) in [(999, "e000999z@contoso.com"), (10, "a@contoso.com")] {
                let e = Employee {
                    email: email.into(),
                    ..numbered(id)
                };
                ops.push(put(keys_of(self.0, &e).1, &e)?);
            }
            // Two thousand rows into one partition, which the emulator scans on every insert:
            // loaded with a request timeout that waits for it, not the scenario's second.
            let loader = tablekit_testkit::fixtures::emulator_account(
                direct
                    .settings()
                    .clone()
                    .with_request_timeout(std::time::Duration::from_secs(30)),
            );
            let report = loader
                .table(&names.table)
                .map_err(|e| e.to_string())?
                .bulk_write(ops, tablekit_azure::BulkOptions::default())
                .await
                .map_err(|e| e.to_string())?;
            ensure(report.written() == report.outcomes.len(), || {
                format!(
                    "prepare wrote {} of {}",
                    report.written(),
                    report.outcomes.len()
                )
            })?;
            Ok(names)
        }

        async fn operate(&self, names: &Names, account: &Account) -> Audited {
            self.run(names, account).await
        }

        /// A failed repair is run again, as its documentation says.
        async fn recover(
            &self,
            names: &Names,
            account: &Account,
            report: Option<&Audited>,
        ) -> Result<(), String> {
            if self.1 && !matches!(report, Some(Audited::Repair(_))) {
                if let Audited::Failed(e) = self.run(names, account).await {
                    return Err(format!("repair again: {e:?}"));
                }
            }
            Ok(())
        }

        async fn check(
            &self,
            names: &Names,
            direct: &Account,
            report: Option<&Audited>,
            baseline: Option<&Audited>,
        ) -> Result<(), String> {
            if let Some(Audited::Verify(r) | Audited::Repair(RepairReport { found: r, .. })) =
                baseline
            {
                ensure(
                    r.missing.len() == 4 && r.stale.len() == 2 && r.orphaned.len() == 2,
                    || format!("the fault-free audit found {r:?}"),
                )?;
            }
            match report {
                Some(Audited::Failed(e)) => ensure(read_failed(e) || self.1, || {
                    format!("the audit failed: {e:?}")
                })?,
                Some(read) => ensure(baseline.is_none_or(|b| b == read), || {
                    format!("returned {read:?}, the fault-free run {baseline:?}")
                })?,
                None => {}
            }
            if self.1 {
                let clean = match self.0 {
                    Layout::Intra => names.intra(direct).0.verify("Sales").await,
                    Layout::Inter => names.inter(direct).0.verify("Sales").await,
                }
                .map_err(|e| e.to_string())?;
                ensure(
                    clean.is_consistent() && clean.primaries == AUDITED as usize,
                    || format!("after the repair, verify reports {clean:?}"),
                )?;
            }
            Ok(())
        }
    }
}
