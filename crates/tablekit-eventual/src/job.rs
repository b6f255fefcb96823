//! [`Job`] and [`Handler`]: what a queue message describes and the idempotent code that
//! performs it; the JSON envelope a job travels in.

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tablekit_core::limits::MAX_QUEUE_MESSAGE_BYTES;
use tablekit_core::{Error, Limit, Result};

use crate::steps::Steps;

/// A unit of cross-partition work, sent as a queue message.
///
/// The message is serde JSON in a small envelope that records the job kind,
/// `{"kind":"archive-employee","job":{…}}`, so a worker can tell what a message is before
/// decoding it and one queue can carry several job types (see [`crate::Worker`] for how a
/// worker treats a kind it does not handle).
///
/// A job should describe the *intent* ("archive employee 000223 of Sales"), not a snapshot
/// of the data: the handler reads the current state when it runs, which is what makes
/// re-running it safe.
///
/// A [`crate::Worker`] handles one kind and moves messages of any other kind to the poison
/// queue at once, so do not point workers of different job types at one queue. To carry
/// several job types on one queue, make the job an enum (one kind, one worker, one handler
/// that matches on the variant):
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use tablekit_eventual::Job;
///
/// #[derive(Serialize, Deserialize)]
/// #[serde(tag = "type")]
/// enum HrJob {
///     Archive { department: String, employee_id: String },
///     Rehire { department: String, employee_id: String },
/// }
///
/// impl Job for HrJob {
///     const KIND: &'static str = "hr";
/// }
/// ```
///
/// The single-type form:
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use tablekit_eventual::Job;
///
/// #[derive(Serialize, Deserialize)]
/// struct ArchiveEmployee {
///     department: String,
///     employee_id: String,
/// }
///
/// impl Job for ArchiveEmployee {
///     const KIND: &'static str = "archive-employee";
/// }
/// ```
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// A stable name for this job type, e.g. `"archive-employee"`. It is stored in every
    /// message, so changing it strands the messages already enqueued.
    const KIND: &'static str;

    /// The version of the job's meaning: raise it when a job enqueued by this code must not
    /// be run by a worker of an earlier version (it carries a field the earlier handler
    /// would ignore, and ignoring it would be wrong). Default 1.
    ///
    /// Messages of version 1 carry `KIND`; later versions carry `KIND@version`, so a worker
    /// from before versions existed treats them as a kind it does not handle. A worker runs
    /// jobs of its version and every earlier one (decode old messages with
    /// `#[serde(default)]` on the fields added since), and fails a delivery of a later
    /// version — leaving it for an upgraded worker, to the poison queue after
    /// [`crate::WorkerOptions::max_dequeue_count`] deliveries. Upgrade workers before
    /// writers; re-queue what a rolling upgrade poisoned.
    const VERSION: u32 = 1;
}

/// Performs one job type. **`handle` must be idempotent**: the queue delivers a message at
/// least once, so `handle` may run again after a crash at any point (between any two of its
/// requests), and concurrently with a late duplicate of itself on another worker.
///
/// The [`Steps`] it receives offer only primitives that are safe to repeat — upserts,
/// deletes that accept "already gone", ETag-conditioned writes and blob overwrites — so a
/// handler written with them converges whatever the interleaving. The usual shape is:
/// read the current state, then write the target state with upserts, then remove the source
/// with a delete that tolerates absence; when the source is already gone, the job is done.
///
/// A returned error fails this attempt: the worker retries transient failures and
/// conflicts at once (per [`crate::WorkerOptions::handler_retry`]); otherwise the message
/// reappears later and the handler runs again, until the message is moved to the poison
/// queue after [`crate::WorkerOptions::max_dequeue_count`] dequeues.
///
/// Implement it with an `async fn`:
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// use tablekit_azure::Table;
/// use tablekit_core::{Properties, Result, Stored};
/// use tablekit_eventual::{Handler, Job, Steps};
/// # #[derive(Serialize, Deserialize)]
/// # struct ArchiveEmployee { department: String, employee_id: String }
/// # impl Job for ArchiveEmployee { const KIND: &'static str = "archive-employee"; }
///
/// struct Archiver {
///     current: Table,
///     archive: Table,
/// }
///
/// impl Handler<ArchiveEmployee> for Archiver {
///     async fn handle(&self, job: ArchiveEmployee, steps: &Steps) -> Result<()> {
///         let keys = (job.department, job.employee_id);
///         let read: Option<Stored<Properties>> = steps.get(&self.current, keys).await?;
///         let Some(employee) = read else {
///             return Ok(()); // already moved by an earlier attempt
///         };
///         steps.upsert_replace(&self.archive, &employee.clone().into_entity()).await?;
///         steps.delete(&self.current, &employee.keys, employee.if_match()).await?;
///         Ok(())
///     }
/// }
/// ```
pub trait Handler<J: Job>: Send + Sync + 'static {
    /// Performs `job`, using `steps` for every write. See the trait docs for the idempotency
    /// contract.
    fn handle(&self, job: J, steps: &Steps) -> impl Future<Output = Result<()>> + Send;
}

/// Raw bytes kept free in every job message for the poison record's header, so any job
/// message can be moved to the poison queue with its payload intact.
pub const POISON_HEADROOM: usize = 1024;

/// The largest encoded job message [`crate::JobQueue::enqueue`] accepts, in bytes: what fits
/// in a 64 KiB base64-encoded queue message, less [`POISON_HEADROOM`].
pub const MAX_JOB_BYTES: usize = MAX_QUEUE_MESSAGE_BYTES / 4 * 3 - POISON_HEADROOM;

#[derive(Serialize)]
struct EnvelopeOut<'a, J> {
    kind: &'a str,
    job: &'a J,
}

#[derive(Deserialize)]
struct KindOnly {
    kind: String,
    #[serde(default)]
    deferrals: u64,
}

#[derive(Deserialize)]
struct EnvelopeIn<J> {
    job: J,
}

/// The `kind` a job of type `J` is stored under: `KIND`, or `KIND@version` after version 1.
fn stored_kind<J: Job>() -> std::borrow::Cow<'static, str> {
    if J::VERSION <= 1 {
        J::KIND.into()
    } else {
        format!("{}@{}", J::KIND, J::VERSION).into()
    }
}

/// Encodes `job` in its envelope, refusing messages too large to be moved to the poison
/// queue later.
pub(crate) fn encode<J: Job>(job: &J) -> Result<Vec<u8>> {
    let kind = stored_kind::<J>();
    let bytes = serde_json::to_vec(&EnvelopeOut { kind: &kind, job })
        .map_err(|e| Error::encode("", format!("the job does not serialize: {e}")))?;
    if bytes.len() > MAX_JOB_BYTES {
        return Err(Error::LimitExceeded {
            limit: Limit::Custom {
                what: "job message bytes (64 KiB base64 less room for a poison record)".into(),
                max: MAX_JOB_BYTES,
            },
            actual: bytes.len(),
        });
    }
    Ok(bytes)
}

/// The kind recorded in an envelope, if the payload is one.
pub(crate) fn kind_of(payload: &[u8]) -> Option<String> {
    serde_json::from_slice::<KindOnly>(payload)
        .ok()
        .map(|k| k.kind)
}

/// How many times the job was deferred ([`crate::Steps::defer`]): its deliveries that did
/// not count as attempts.
pub(crate) fn deferrals_of(payload: &[u8]) -> u64 {
    serde_json::from_slice::<KindOnly>(payload).map_or(0, |k| k.deferrals)
}

/// The payload with its deferral count set to `deferrals`, everything else unchanged.
pub(crate) fn with_deferrals(payload: &[u8], deferrals: u64) -> Option<Vec<u8>> {
    let mut envelope: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(payload).ok()?;
    envelope.insert("deferrals".into(), deferrals.into());
    serde_json::to_vec(&envelope).ok()
}

/// Why a payload is not a job this worker runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not a job of this kind, or not decodable: permanent, retrying cannot help.
    Foreign(String),
    /// A job of this kind, of a later version than this worker's: for an upgraded worker.
    Newer(String),
}

impl Refused {
    /// Why, in words.
    pub(crate) fn reason(&self) -> &str {
        match self {
            Refused::Foreign(why) | Refused::Newer(why) => why,
        }
    }
}

/// Decodes a payload as a job of type `J`: of its kind and of its version or an earlier one.
pub(crate) fn decode<J: Job>(payload: &[u8]) -> std::result::Result<J, Refused> {
    let kind = kind_of(payload)
        .ok_or_else(|| Refused::Foreign("the message is not a tablekit job envelope".to_owned()))?;
    let (base, version) = match kind.split_once('@') {
        Some((base, v)) => (base, v.parse::<u32>().ok()),
        None => (kind.as_str(), Some(1)),
    };
    if base != J::KIND {
        return Err(Refused::Foreign(format!(
            "job kind `{kind}` has no handler on this worker (it handles `{}`)",
            J::KIND
        )));
    }
    match version {
        Some(v) if v <= J::VERSION => {}
        Some(v) => {
            return Err(Refused::Newer(format!(
                "the `{}` job is of version {v}, newer than this worker's {}: left for an \
                 upgraded worker",
                J::KIND,
                J::VERSION
            )));
        }
        None => {
            return Err(Refused::Foreign(format!(
                "job kind `{kind}`: the version after `@` is not a number"
            )));
        }
    }
    serde_json::from_slice::<EnvelopeIn<J>>(payload)
        .map(|e| e.job)
        .map_err(|e| Refused::Foreign(format!("the `{kind}` job does not decode: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Archive {
        department: String,
        id: u32,
    }
    impl Job for Archive {
        const KIND: &'static str = "archive-employee";
    }

    #[derive(Debug, Serialize, Deserialize)]
    struct Other;
    impl Job for Other {
        const KIND: &'static str = "other";
    }

    #[derive(Serialize, Deserialize)]
    struct Big(String);
    impl Job for Big {
        const KIND: &'static str = "big";
    }

    #[test]
    fn a_job_round_trips_in_a_small_envelope() {
        let job = Archive {
            department: "Sales".into(),
            id: 456,
        };
        let bytes = encode(&job).unwrap();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"kind":"archive-employee","job":{"department":"Sales","id":456}}"#
        );
        assert_eq!(kind_of(&bytes).as_deref(), Some("archive-employee"));
        assert_eq!(decode::<Archive>(&bytes).unwrap(), job);
    }

    #[test]
    fn foreign_kinds_and_garbage_are_permanent_failures() {
        let foreign = |bytes: &[u8]| match decode::<Archive>(bytes).unwrap_err() {
            Refused::Foreign(why) => why,
            other => panic!("{other:?}"),
        };
        let e = foreign(&encode(&Other).unwrap());
        assert!(
            e.contains("`other`") && e.contains("archive-employee"),
            "{e}"
        );
        let e = foreign(b"\xff not json");
        assert!(e.contains("not a tablekit job"), "{e}");
        let e = foreign(br#"{"kind":"archive-employee","job":{"id":"x"}}"#);
        assert!(e.contains("does not decode"), "{e}");
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct ArchiveV2 {
        department: String,
        id: u32,
        #[serde(default)]
        reason: Option<String>,
    }
    impl Job for ArchiveV2 {
        const KIND: &'static str = "archive-employee";
        const VERSION: u32 = 2;
    }

    #[test]
    fn versions_after_the_first_are_stored_in_the_kind_and_decoded_by_their_version_or_later() {
        let v2 = ArchiveV2 {
            department: "Sales".into(),
            id: 456,
            reason: Some("left".into()),
        };
        let bytes = encode(&v2).unwrap();
        assert_eq!(kind_of(&bytes).as_deref(), Some("archive-employee@2"));
        assert_eq!(decode::<ArchiveV2>(&bytes).unwrap(), v2);
        // A version-1 worker leaves it for an upgraded one.
        let e = decode::<Archive>(&bytes).unwrap_err();
        assert!(
            matches!(&e, Refused::Newer(why) if why.contains("version 2")),
            "{e:?}"
        );
        // A version-2 worker runs a job enqueued before versions existed.
        let old = br#"{"kind":"archive-employee","job":{"department":"Sales","id":456}}"#;
        let decoded = decode::<ArchiveV2>(old).unwrap();
        assert_eq!(decoded.reason, None);
        assert!(matches!(
            decode::<Archive>(br#"{"kind":"archive-employee@x","job":{}}"#),
            Err(Refused::Foreign(_))
        ));
    }

    #[test]
    fn deferrals_are_counted_in_the_envelope_and_leave_the_job_alone() {
        let bytes = encode(&Archive {
            department: "Sales".into(),
            id: 456,
        })
        .unwrap();
        assert_eq!(deferrals_of(&bytes), 0);
        let deferred = with_deferrals(&bytes, 3).unwrap();
        assert_eq!(deferrals_of(&deferred), 3);
        assert_eq!(decode::<Archive>(&deferred).unwrap().id, 456);
        assert_eq!(with_deferrals(b"not json", 1), None);
    }

    #[test]
    fn oversized_jobs_are_refused_with_room_left_for_the_poison_header() {
        let overhead = encode(&Big(String::new())).unwrap().len();
        assert!(encode(&Big("x".repeat(MAX_JOB_BYTES - overhead))).is_ok());
        let e = encode(&Big("x".repeat(MAX_JOB_BYTES - overhead + 1))).unwrap_err();
        assert!(matches!(
            e,
            Error::LimitExceeded { actual, .. } if actual == MAX_JOB_BYTES + 1
        ));
        // The largest job plus a full poison header still fits one queue message.
        assert!((MAX_JOB_BYTES + POISON_HEADROOM).div_ceil(3) * 4 <= MAX_QUEUE_MESSAGE_BYTES);
    }
}
