//! The index crate's other public operations: intra-partition writes, inter-partition
//! inserts, deletes and jobs, and the index entities (options 1, 2 and 3).

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
    ]
}

/// What the suite test runs of most scenarios here: a seeded sample of random multi-fault
/// schedules, so that the module's test stays within minutes; `cargo xtask explore` runs
/// every single-fault schedule of each (about 15 minutes for the module). The strong writes'
/// core — intra `put` and `delete`, `SamePartitionList::put`, `DenormalizedCopy::write` —
/// runs its single faults in the suite too.
fn sampled() -> Plan {
    Plan::Random { seed: 29, count: 3 }
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

    /// `insert` of a new employee; `put` changing the email; `replace` of the entity as read
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
                Op::Put => "index.intra.put",
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
            match self.0 {
                Op::Put | Op::Delete => Plan::SingleFaults,
                Op::Insert | Op::Replace => sampled(),
            }
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
                Op::Put => index.put(&written()).await.map(drop),
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

        /// Another writer through the index: for an insert, a `put` of the same employee
        /// with another email; otherwise a `replace` of the entity it reads (if any) with
        /// another email.
        async fn act(&self, ctx: &Ctx, direct: &Account, _actor: u8) {
            let index = index(direct, &ctx.table);
            let x = actor_value();
            let stored = match self.0 {
                Op::Insert => index.put(&x).await.is_ok(),
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
            sampled()
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

        /// Another writer through the index: for an insert, a `put` of the same employee
        /// with another email; for a delete, a `put` with another email if it is there.
        async fn act(&self, names: &Names, direct: &Account, _actor: u8) {
            let index = index(direct, names);
            let x = actor_value();
            let present = matches!(index.get("Sales", x.id.as_str()).await, Ok(Some(_)));
            if (present || matches!(self.0, Op::Insert)) && index.put(&x).await.is_ok() {
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
    /// drained, then `put` with email B (job 1 queued). Recovery: `put` with email C, drain.
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
            sampled()
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
                .put(&email("b@contoso.com"))
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
                .put(&email("c@contoso.com"))
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
                let _ = index.put(&e).await;
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

    /// What a `put` makes of Jones 223: Smith.
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

    /// `EventualList::insert` (Jones 223), `put` (Jones → Smith) or `delete` (by keys), the
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
                (Store::Separate, Op::Put) => "index.list.eventual.separate.put",
                (Store::Separate, Op::Delete) => "index.list.eventual.separate.delete",
                (Store::Blobs, Op::Insert) => "index.list.eventual.blobs.insert",
                (Store::Blobs, Op::Put) => "index.list.eventual.blobs.put",
                (Store::Blobs, Op::Delete) => "index.list.eventual.blobs.delete",
            }
        }

        fn invariant(&self) -> &'static str {
            "after the workers drain, every stored entity is listed exactly once, under its current value only, or a job for it is queued or poisoned; the entity is as written on Ok, unchanged on a refusal, one or the other on Indeterminate"
        }

        fn actors(&self) -> u8 {
            1
        }

        fn suite_plan(&self) -> Plan {
            sampled()
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
                Op::Put => list.put(&smith()).await.map(drop),
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

        /// Another writer through the list hires Jones 224 (onto the list the operation
        /// changes), then makes Jones 223 a Brown (`put`): for an insert, whether it is there
        /// or not; otherwise only if it is there.
        async fn act(&self, ctx: &EventualCtx, direct: &Account, _actor: u8) {
            let list = eventual(direct, ctx);
            if list.insert(&hire()).await.is_ok() {
                ctx.acted.record(&hire());
            }
            let present = matches!(list.table().get::<Properties>(&jones()).await, Ok(Some(_)));
            if (present || matches!(self.1, Op::Insert)) && list.put(&brown()).await.is_ok() {
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

    /// `SamePartitionList::insert` (Jones 223), `put` (Jones → Smith) or `delete` (by keys);
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
                Op::Put => "index.list.same_partition.put",
                Op::Delete => "index.list.same_partition.delete",
            }
        }

        fn invariant(&self) -> &'static str {
            "every id in exactly one list, its current value's, and every listed id stored; the entity is as written on Ok, unchanged on a refusal, one or the other on Indeterminate"
        }

        fn actors(&self) -> u8 {
            1
        }

        fn suite_plan(&self) -> Plan {
            match self.0 {
                Op::Put => Plan::SingleFaults,
                Op::Insert | Op::Delete => sampled(),
            }
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
                Op::Put => list.put(&smith()).await.map(drop),
                Op::Delete => list.delete(&jones(), IfMatch::Any).await,
            };
            Outcome::of(&result)
        }

        /// Another writer through the list hires Jones 224 (onto the list the operation
        /// changes), then makes Jones 223 a Brown: a `put` for an insert, otherwise a
        /// `replace` of the entity it reads, if any.
        async fn act(&self, ctx: &SameCtx, direct: &Account, _actor: u8) {
            let list = same(direct, &ctx.table);
            if list.insert(&hire()).await.is_ok() {
                ctx.acted.record(&hire());
            }
            let stored = match self.0 {
                Op::Insert => list.put(&brown()).await.is_ok(),
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
