//! `tablekit-large`: large entities whose payload is a blob the entity references.
//!
//! Every scenario's store has a short grace period that its writers' settings fit in, so
//! that a recovery can wait it out: the sweep a caller runs (nightly, say) is the recovery
//! of a failed write, and it runs once every unreferenced blob is past its grace.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tablekit_azure::{Account, BlobCondition, RetryPolicy, Settings, UploadOptions};
use tablekit_core::{ETag, Entity, ErrorKind, IfMatch, Keys, Properties};
use tablekit_large::{GRACE_METADATA, LargeEntities, PK_METADATA, RK_METADATA, SweepOptions};
use tablekit_testkit::explore::{Entry, Scenario};
use tablekit_testkit::fixtures::{self, Proxied};
use tablekit_testkit::{Fault, Matcher, Occurrences, Rule, unique_container_name};

use super::model::{ensure, new_table};
use super::outcome::Outcome;

/// The scenarios of this module.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry::new(Put { existing: false }),
        Entry::new(Put { existing: true }),
        Entry::new(Replace { any: false }),
        Entry::new(Replace { any: true }),
        Entry::new(Delete),
        Entry::new(Sweep::default()),
    ]
}

/// The entity every scenario writes.
const KEYS: (&str, &str) = ("Sales", "000223");

/// The store's commit deadline and clock allowance: one machine, one clock.
const COMMIT: Duration = Duration::from_secs(1);
const ALLOWANCE: Duration = Duration::from_secs(1);

fn keys() -> Keys {
    Keys::new(KEYS.0, KEYS.1).expect("keys")
}

/// The payload `by` writes: distinct per writer, so a read tells whose it is.
fn payload(by: &str) -> Vec<u8> {
    let seed = by
        .bytes()
        .fold(7u8, |h, b| h.wrapping_mul(31).wrapping_add(b));
    (0..4096u32)
        .map(|i| (i as u8).wrapping_mul(seed) ^ seed)
        .collect()
}

/// The entity `by` writes: its name in `By`, next to the payload.
fn entity(by: &str) -> Entity<Properties> {
    Entity::new(keys(), Properties::new().with("By", by))
}

/// The names a run's store lives under, and its grace period.
#[derive(Debug, Clone)]
pub struct Names {
    table: String,
    container: String,
    grace: Duration,
}

impl Names {
    async fn create(direct: &Account, prefix: &str, grace: Duration) -> Result<Self, String> {
        let table = new_table(direct, prefix).await?;
        let container = unique_container_name(prefix);
        direct
            .container(&container)
            .map_err(|e| e.to_string())?
            .create()
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self {
            table,
            container,
            grace,
        })
    }

    /// The store on `account`, as every process of the scenario builds it.
    fn store(&self, account: &Account) -> LargeEntities {
        let store = LargeEntities::builder(
            account.table(&self.table).expect("table name"),
            account.container(&self.container).expect("container name"),
        )
        .with_commit_deadline(COMMIT)
        .with_clock_allowance(ALLOWANCE)
        .with_grace(self.grace)
        .build()
        .expect("store");
        assert!(
            store.required_grace() <= store.grace(),
            "the scenario's writers must fit its grace: {:?} > {:?}",
            store.required_grace(),
            store.grace()
        );
        store
    }
}

/// The shortest whole-second grace the writes of `settings` fit in.
fn grace_for(settings: &Settings) -> Duration {
    let required = COMMIT + settings.write_settles_within() + ALLOWANCE;
    Duration::from_secs(required.as_secs() + 1)
}

/// What the store holds for the scenario's entity, read directly and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    Absent,
    /// A complete value, written by this writer.
    By(String),
}

/// The entity's value, verified against its blob; an error when it references a missing
/// blob, does not match it, or mixes two writers.
async fn held(store: &LargeEntities) -> Result<Held, String> {
    let read = store
        .get::<Properties>(keys())
        .await
        .map_err(|e| format!("reading the entity: {e}"))?;
    let Some(read) = read else {
        return Ok(Held::Absent);
    };
    let by = read
        .entity
        .value
        .get_str("By")
        .ok()
        .flatten()
        .unwrap_or("?")
        .to_owned();
    ensure(read.payload.as_ref() == payload(&by).as_slice(), || {
        format!("the entity says it is {by}'s, but its payload is not")
    })?;
    Ok(Held::By(by))
}

/// The blobs under the store's prefix that the entity does not reference, read directly.
async fn unreferenced(store: &LargeEntities) -> Result<Vec<String>, String> {
    let current = store
        .get_entity::<Properties>(keys())
        .await
        .map_err(|e| format!("reading the entity: {e}"))?
        .and_then(|(_, reference)| reference.map(|r| r.name));
    let blobs = store
        .container()
        .list(store.prefix())
        .await
        .map_err(|e| format!("listing the blobs: {e}"))?;
    Ok(blobs
        .into_iter()
        .map(|b| b.name)
        .filter(|name| Some(name) != current.as_ref())
        .collect())
}

/// The recovery of a failed or abandoned write, as a caller runs it: a sweep with the
/// store's grace, once every unreferenced blob is past its grace. The wait is worked out
/// through `direct` (the scenario's stand-in for time passing); the sweep goes through
/// `account`, faults and all.
async fn sweep_past_grace(
    names: &Names,
    account: &Account,
    direct: &Account,
) -> Result<(), String> {
    let view = names.store(direct);
    let orphans = unreferenced(&view).await?;
    if !orphans.is_empty() {
        let (blobs, now) = view
            .container()
            .list_with_service_time(view.prefix())
            .await
            .map_err(|e| format!("listing the blobs: {e}"))?;
        let now = now.ok_or("the listing carried no Date")?;
        let mut wait = Duration::ZERO;
        for blob in blobs.iter().filter(|b| orphans.contains(&b.name)) {
            let recorded = blob
                .metadata
                .get(GRACE_METADATA)
                .and_then(|g| g.parse().ok())
                .map_or(Duration::ZERO, Duration::from_secs);
            let grace = names.grace.max(recorded);
            let age = blob
                .last_modified
                .and_then(|t| (now - t).to_std().ok())
                .unwrap_or_default();
            wait = wait.max(grace.saturating_sub(age));
        }
        // Both stamps have a resolution of one second.
        tokio::time::sleep(wait + Duration::from_millis(1500)).await;
    }
    names
        .store(account)
        .sweep(SweepOptions::default())
        .await
        .map(drop)
        .map_err(|e| format!("the sweep failed: {e}"))
}

/// The direct (unfaulted) account a recovery uses to see what it must wait for.
fn direct_view(settings: &Settings) -> Account {
    fixtures::emulator_account(settings.clone())
}

/// A run's store, and what its concurrent writer did.
pub struct PutCtx {
    names: Names,
    actor_ran: AtomicBool,
}

/// `LargeEntities::upsert`, of a new entity or over an existing one, with a concurrent `upsert`
/// of another value as the actor.
pub struct Put {
    existing: bool,
}

impl Scenario for Put {
    type Ctx = PutCtx;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        if self.existing {
            "large.upsert.overwrite"
        } else {
            "large.upsert.new"
        }
    }

    fn invariant(&self) -> &'static str {
        "the entity reads back, verified, one writer's whole value — the upsert's on Ok (or a concurrent upsert's, when one ran), the old one or the new one after an error — never a reference to a missing blob, and after a sweep past the store's grace no unreferenced blob is left"
    }

    fn settings(&self) -> Settings {
        quick_settings()
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<PutCtx, String> {
        let names = Names::create(direct, "xlargeput", grace_for(&self.settings())).await?;
        if self.existing {
            names
                .store(direct)
                .upsert(&entity("old"), payload("old"))
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(PutCtx {
            names,
            actor_ran: AtomicBool::new(false),
        })
    }

    async fn operate(&self, ctx: &PutCtx, account: &Account) -> Outcome {
        let store = ctx.names.store(account);
        Outcome::of(&store.upsert(&entity("op"), payload("op")).await)
    }

    async fn recover(
        &self,
        ctx: &PutCtx,
        account: &Account,
        _report: Option<&Outcome>,
    ) -> Result<(), String> {
        sweep_past_grace(&ctx.names, account, &direct_view(&self.settings())).await
    }

    /// Another process puts its own value.
    async fn act(&self, ctx: &PutCtx, direct: &Account, _actor: u8) {
        let store = ctx.names.store(direct);
        if store
            .upsert(&entity("actor"), payload("actor"))
            .await
            .is_ok()
        {
            ctx.actor_ran.store(true, Ordering::SeqCst);
        }
    }

    async fn check(
        &self,
        ctx: &PutCtx,
        direct: &Account,
        report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        let store = ctx.names.store(direct);
        let now = held(&store).await?;
        let actor = ctx.actor_ran.load(Ordering::SeqCst);
        let old = if self.existing {
            Held::By("old".into())
        } else {
            Held::Absent
        };
        let by = |who: &str| now == Held::By(who.into());
        match report {
            Some(Outcome::Ok) => ensure(by("op") || (actor && by("actor")), || {
                format!("Ok, but the entity holds {now:?} (a concurrent put ran: {actor})")
            })?,
            _ => ensure(now == old || by("op") || (actor && by("actor")), || {
                format!("{report:?}, but the entity holds {now:?} (a concurrent put ran: {actor})")
            })?,
        }
        let left = unreferenced(&store).await?;
        ensure(left.is_empty(), || {
            format!("unreferenced blobs after a sweep past the grace: {left:?}")
        })
    }
}

/// A replace's store, the ETag of the value it replaces, and what its concurrent writer did.
pub struct ReplaceCtx {
    names: Names,
    etag: ETag,
    actor_ran: AtomicBool,
}

/// `LargeEntities::replace` conditioned on the ETag of the stored value (or on
/// `IfMatch::Any`), with a concurrent `upsert` of another value as the actor.
pub struct Replace {
    any: bool,
}

impl Scenario for Replace {
    type Ctx = ReplaceCtx;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        if self.any {
            "large.replace.any"
        } else {
            "large.replace"
        }
    }

    fn invariant(&self) -> &'static str {
        if self.any {
            return "Ok ⇒ the replace's value reads back verified (or a concurrent upsert's, which ran after its write); an error ⇒ one writer's whole value; never a reference to a missing blob, and after a sweep past the store's grace no unreferenced blob is left";
        }
        "Ok ⇒ the replace's value reads back verified (or a concurrent upsert's, which ran after its write); PreconditionFailed or NotFound ⇒ not the replace's value: the old one, or the concurrent upsert's that changed the ETag first; another error ⇒ one writer's whole value; never a reference to a missing blob, and after a sweep past the store's grace no unreferenced blob is left"
    }

    fn settings(&self) -> Settings {
        quick_settings()
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<ReplaceCtx, String> {
        let names = Names::create(direct, "xlargerepl", grace_for(&self.settings())).await?;
        let written = names
            .store(direct)
            .upsert(&entity("old"), payload("old"))
            .await
            .map_err(|e| e.to_string())?;
        Ok(ReplaceCtx {
            names,
            etag: written.etag,
            actor_ran: AtomicBool::new(false),
        })
    }

    async fn operate(&self, ctx: &ReplaceCtx, account: &Account) -> Outcome {
        let store = ctx.names.store(account);
        let if_match = if self.any {
            IfMatch::Any
        } else {
            IfMatch::ETag(ctx.etag.clone())
        };
        Outcome::of(&store.replace(&entity("op"), payload("op"), if_match).await)
    }

    async fn recover(
        &self,
        ctx: &ReplaceCtx,
        account: &Account,
        _report: Option<&Outcome>,
    ) -> Result<(), String> {
        sweep_past_grace(&ctx.names, account, &direct_view(&self.settings())).await
    }

    /// Another process upserts its own value.
    async fn act(&self, ctx: &ReplaceCtx, direct: &Account, _actor: u8) {
        let store = ctx.names.store(direct);
        if store
            .upsert(&entity("actor"), payload("actor"))
            .await
            .is_ok()
        {
            ctx.actor_ran.store(true, Ordering::SeqCst);
        }
    }

    async fn check(
        &self,
        ctx: &ReplaceCtx,
        direct: &Account,
        report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        let store = ctx.names.store(direct);
        let now = held(&store).await?;
        let actor = ctx.actor_ran.load(Ordering::SeqCst);
        let by = |who: &str| now == Held::By(who.into());
        // The actor runs to its end while one request of the replace is held: before the
        // replace's entity write is sent, it changes the ETag and the replace must fail;
        // after, it writes last. Either way, once it ran, its value is the one stored.
        if self.any {
            // The replace starts again after a concurrent write: it may come after the
            // upsert (its value) or before it (the upsert's).
            let whole = by("old") || by("op") || (actor && by("actor"));
            let ok = by("op") || (actor && by("actor"));
            ensure(
                if report == Some(&Outcome::Ok) {
                    ok
                } else {
                    whole
                },
                || {
                    format!(
                        "{report:?}, but the entity holds {now:?} (a concurrent upsert ran: {actor})"
                    )
                },
            )?;
            let left = unreferenced(&store).await?;
            return ensure(left.is_empty(), || {
                format!("unreferenced blobs after a sweep past the grace: {left:?}")
            });
        }
        let expected_ok = if actor { "actor" } else { "op" };
        let expected_refused = if actor { "actor" } else { "old" };
        match report {
            Some(Outcome::Ok) => ensure(by(expected_ok), || {
                format!("Ok, but the entity holds {now:?} (a concurrent upsert ran: {actor})")
            })?,
            Some(o) if o.is(ErrorKind::PreconditionFailed) || o.is(ErrorKind::NotFound) => {
                ensure(by(expected_refused), || {
                    format!(
                        "{o:?}, but the entity holds {now:?} (a concurrent upsert ran: {actor})"
                    )
                })?
            }
            _ => ensure(by("old") || by("op") || (actor && by("actor")), || {
                format!(
                    "{report:?}, but the entity holds {now:?} (a concurrent upsert ran: {actor})"
                )
            })?,
        }
        let left = unreferenced(&store).await?;
        ensure(left.is_empty(), || {
            format!("unreferenced blobs after a sweep past the grace: {left:?}")
        })
    }
}

/// `LargeEntities::delete` with `IfMatch::Any`, with a concurrent `upsert` as the actor.
pub struct Delete;

impl Scenario for Delete {
    type Ctx = PutCtx;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        "large.delete"
    }

    fn invariant(&self) -> &'static str {
        "Ok ⇒ the entity and its blob are gone (or a concurrent upsert's value, written after the delete, is there whole); an error ⇒ the old value whole or nothing; never a reference to a missing blob, and after a sweep past the store's grace no unreferenced blob is left"
    }

    fn settings(&self) -> Settings {
        quick_settings()
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<PutCtx, String> {
        let names = Names::create(direct, "xlargedel", grace_for(&self.settings())).await?;
        names
            .store(direct)
            .upsert(&entity("old"), payload("old"))
            .await
            .map_err(|e| e.to_string())?;
        Ok(PutCtx {
            names,
            actor_ran: AtomicBool::new(false),
        })
    }

    async fn operate(&self, ctx: &PutCtx, account: &Account) -> Outcome {
        let store = ctx.names.store(account);
        Outcome::of(&store.delete(keys(), IfMatch::Any).await)
    }

    async fn recover(
        &self,
        ctx: &PutCtx,
        account: &Account,
        _report: Option<&Outcome>,
    ) -> Result<(), String> {
        sweep_past_grace(&ctx.names, account, &direct_view(&self.settings())).await
    }

    /// Another process puts a value of its own.
    async fn act(&self, ctx: &PutCtx, direct: &Account, _actor: u8) {
        let store = ctx.names.store(direct);
        if store
            .upsert(&entity("actor"), payload("actor"))
            .await
            .is_ok()
        {
            ctx.actor_ran.store(true, Ordering::SeqCst);
        }
    }

    async fn check(
        &self,
        ctx: &PutCtx,
        direct: &Account,
        report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        let store = ctx.names.store(direct);
        let now = held(&store).await?;
        let actor = ctx.actor_ran.load(Ordering::SeqCst);
        let actors = actor && now == Held::By("actor".into());
        match report {
            Some(Outcome::Ok) => ensure(now == Held::Absent || actors, || {
                format!("Ok, but the entity holds {now:?} (a concurrent put ran: {actor})")
            })?,
            Some(o) if o.is(ErrorKind::NotFound) => ensure(now == Held::Absent || actors, || {
                format!("{o:?}, but the entity holds {now:?}")
            })?,
            _ => ensure(
                now == Held::Absent || now == Held::By("old".into()) || actors,
                || format!("{report:?}, but the entity holds {now:?}"),
            )?,
        }
        let left = unreferenced(&store).await?;
        ensure(left.is_empty(), || {
            format!("unreferenced blobs after a sweep past the grace: {left:?}")
        })
    }
}

/// The settings of every scenario here: the explorer's, with two quick retries instead of
/// three, so that the grace the writers fit in — and the waits for blobs to be past it —
/// are short (8 s).
fn quick_settings() -> Settings {
    tablekit_testkit::explore::settings().with_retry(
        RetryPolicy::default()
            .with_schedule(vec![Duration::from_millis(10), Duration::from_millis(20)])
            .with_jitter(0.0)
            .with_immediate_first_retry_on_connection_error(false)
            .with_max_retry_after(Duration::ZERO),
    )
}

/// How long the actor's entity write is held at its proxy: within its request timeout, so
/// it lands once, while the sweep goes on.
const HELD_WRITE: Duration = Duration::from_millis(900);

/// A sweep's store: the entity (its old blob referenced), an orphan of it and one of an
/// entity that does not exist, all past the grace.
#[derive(Debug, Clone)]
struct Aged {
    names: Names,
    orphans: Vec<String>,
}

impl Aged {
    /// A new store with its blobs, not yet past the grace.
    async fn create(direct: &Account, grace: Duration) -> Result<Self, String> {
        let names = Names::create(direct, "xlargesweep", grace).await?;
        let store = names.store(direct);
        store
            .upsert(&entity("old"), payload("old"))
            .await
            .map_err(|e| e.to_string())?;
        // What failed writes leave: a blob of the entity it no longer references, and one of
        // an entity whose insert never landed.
        let mut orphans = Vec::new();
        for (n, rk) in [(1, KEYS.1), (2, "000224")] {
            let name = format!("{}orphan-{n}", store.prefix());
            let metadata = [
                (PK_METADATA, KEYS.0.to_owned()),
                (RK_METADATA, rk.to_owned()),
                (GRACE_METADATA, grace.as_secs().to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
            let options = UploadOptions::default()
                .with_metadata(metadata)
                .with_condition(BlobCondition::IfNotExists);
            store
                .container()
                .upload(&name, payload("orphan"), options)
                .await
                .map_err(|e| e.to_string())?;
            orphans.push(name);
        }
        Ok(Self { names, orphans })
    }
}

/// How many stores the sweep scenario ages at once: every run needs blobs past the grace,
/// and waiting it out once for many runs keeps the suite short.
const AGED_AT_ONCE: usize = 32;

/// A sweep's store, and the concurrent writer, if it ran.
pub struct SweepCtx {
    names: Names,
    orphans: Vec<String>,
    writer: Mutex<Option<tokio::task::JoinHandle<Result<String, String>>>>,
    /// The writer's proxies, kept while it runs.
    proxies: Mutex<Option<Arc<Proxied>>>,
}

/// `LargeEntities::sweep` with the store's grace, with an `upsert` of the entity in flight as the
/// actor: started while the sweep's request is held, its upload done, its entity write held
/// at a proxy of its own while the sweep goes on.
#[derive(Default)]
pub struct Sweep {
    /// Stores whose blobs are past the grace, for the next runs.
    aged: tokio::sync::Mutex<Vec<Aged>>,
}

impl Scenario for Sweep {
    type Ctx = SweepCtx;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        "large.sweep"
    }

    fn invariant(&self) -> &'static str {
        "with an upsert in flight, the entity never references a missing blob — the sweep leaves the upsert's young blob alone — and every unreferenced blob past the grace is deleted by the sweep or, after an error, by the next one"
    }

    fn settings(&self) -> Settings {
        quick_settings()
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<SweepCtx, String> {
        let mut aged = self.aged.lock().await;
        if aged.is_empty() {
            let grace = grace_for(&self.settings());
            let made = futures::future::try_join_all(
                (0..AGED_AT_ONCE).map(|_| Aged::create(direct, grace)),
            )
            .await?;
            // Everything is past the grace when the sweep lists it (stamps have a resolution
            // of one second).
            tokio::time::sleep(grace + Duration::from_millis(1500)).await;
            aged.extend(made);
        }
        let Aged { names, orphans } = aged.pop().ok_or("no aged store")?;
        Ok(SweepCtx {
            names,
            orphans,
            writer: Mutex::new(None),
            proxies: Mutex::new(None),
        })
    }

    async fn operate(&self, ctx: &SweepCtx, account: &Account) -> Outcome {
        let store = ctx.names.store(account);
        Outcome::of(&store.sweep(SweepOptions::default()).await)
    }

    async fn recover(
        &self,
        ctx: &SweepCtx,
        account: &Account,
        report: Option<&Outcome>,
    ) -> Result<(), String> {
        if report == Some(&Outcome::Ok) {
            return Ok(());
        }
        // The next sweep, as the documentation says of a failed one.
        ctx.names
            .store(account)
            .sweep(SweepOptions::default())
            .await
            .map(drop)
            .map_err(|e| format!("the sweep failed: {e}"))
    }

    /// Another process puts a new value, through proxies of its own that hold its entity
    /// write: returns once the write is held (its blob uploaded), and the put goes on.
    async fn act(&self, ctx: &SweepCtx, _direct: &Account, _actor: u8) {
        let proxies = Arc::new(fixtures::proxied(self.settings()));
        proxies.table.add_rule(Rule::new(
            Matcher::any().with_method("PUT"),
            Occurrences::Nth(1),
            Fault::Delay(HELD_WRITE),
        ));
        let store = ctx.names.store(&proxies.account);
        let writer = tokio::spawn(async move {
            store
                .upsert(&entity("actor"), payload("actor"))
                .await
                .map(|w| w.reference.map(|r| r.name).unwrap_or_default())
                .map_err(|e| format!("the concurrent put failed: {e}"))
        });
        for _ in 0..500 {
            if proxies.table.stats().faults_injected.delay > 0 || writer.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        *ctx.writer.lock().unwrap_or_else(PoisonError::into_inner) = Some(writer);
        *ctx.proxies.lock().unwrap_or_else(PoisonError::into_inner) = Some(proxies);
    }

    async fn check(
        &self,
        ctx: &SweepCtx,
        direct: &Account,
        report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        let writer = ctx
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let written = match writer {
            Some(task) => Some(
                task.await
                    .map_err(|e| format!("the writer panicked: {e}"))??,
            ),
            None => None,
        };
        let store = ctx.names.store(direct);
        let now = held(&store).await?;
        let expected = if written.is_some() { "actor" } else { "old" };
        ensure(now == Held::By(expected.into()), || {
            format!("{report:?}: the entity holds {now:?}, not {expected}'s value")
        })?;
        let blobs: Vec<String> = store
            .container()
            .list(store.prefix())
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|b| b.name)
            .collect();
        let left: Vec<&String> = ctx.orphans.iter().filter(|o| blobs.contains(o)).collect();
        ensure(left.is_empty(), || {
            format!(
                "{report:?}: orphans past the grace left after the sweep and its recovery: {left:?}"
            )
        })?;
        let extra = unreferenced(&store).await?;
        ensure(extra.is_empty(), || {
            format!("{report:?}: unreferenced blobs left: {extra:?}")
        })
    }
}
