//! The interceptor of an explored run: numbers the requests of the operation and its
//! recovery across the table, queue and blob proxies, applies the schedule's step to the
//! k-th, holds a request while a concurrent actor runs, stops the process, and records what
//! each request came to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::schedule::{Schedule, Step};
use crate::proxy::{Answer, Decision, Fault, Intercept, RequestInfo};

/// One request of an explored run, as the service saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// Its number in the run, 1-based.
    pub seq: u64,
    /// `"table"`, `"queue"` or `"blob"`.
    pub service: String,
    /// The request method.
    pub method: String,
    /// The request path.
    pub path: String,
    /// The step the schedule applied to it.
    pub step: Option<Step>,
    /// The status the client received, if any.
    pub status: Option<u16>,
    /// Whether it reached the service.
    pub forwarded: bool,
    /// For an entity query the service answered: the entities on its page.
    pub entities: Option<usize>,
}

impl Record {
    /// Whether the request can change state: anything but a read, and a queue `GET` that
    /// dequeues (it hides the messages and counts a delivery).
    pub fn writes(&self) -> bool {
        let read =
            self.method.eq_ignore_ascii_case("GET") || self.method.eq_ignore_ascii_case("HEAD");
        !read || (self.service == "queue" && self.path.ends_with("/messages"))
    }

    /// One line: `3 table POST /devstoreaccount1/$batch → 202 (lost response)`.
    pub fn describe(&self) -> String {
        let status = match (self.status, self.forwarded) {
            (Some(s), _) => s.to_string(),
            (None, true) => "applied, no answer".into(),
            (None, false) => "not sent".into(),
        };
        let step = self.step.map(|s| format!(" [{s}]")).unwrap_or_default();
        let entities = self
            .entities
            .map(|n| format!(", {n} entities"))
            .unwrap_or_default();
        format!(
            "{:>3} {} {} {} → {status}{entities}{step}",
            self.seq, self.service, self.method, self.path
        )
    }
}

/// A request held for a concurrent actor: the run drives the actor, then sends `done`.
pub(crate) struct ActorCall {
    pub(crate) actor: u8,
    pub(crate) done: oneshot::Sender<()>,
}

/// How long the late-apply steps hold a request, and how many requests an outage spans.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holds {
    pub(crate) late: Duration,
    pub(crate) past_deadline: Duration,
    pub(crate) outage: u64,
}

struct State {
    armed: bool,
    /// The process stopped: every request until [`Recorder::restarted`] hangs.
    stopped: bool,
    seq: u64,
    log: Vec<Record>,
    /// Request ids the proxies have not finished, with their index in `log` if counted.
    in_flight: HashMap<u64, Option<usize>>,
}

/// The [`Intercept`] of one run.
pub(crate) struct Recorder {
    schedule: Schedule,
    holds: Holds,
    state: Mutex<State>,
    actors: mpsc::UnboundedSender<ActorCall>,
    stop: watch::Sender<bool>,
    idle: watch::Sender<usize>,
}

impl Recorder {
    pub(crate) fn new(
        schedule: Schedule,
        holds: Holds,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<ActorCall>) {
        let (actors, calls) = mpsc::unbounded_channel();
        let recorder = Arc::new(Self {
            schedule,
            holds,
            state: Mutex::new(State {
                armed: false,
                stopped: false,
                seq: 0,
                log: Vec::new(),
                in_flight: HashMap::new(),
            }),
            actors,
            stop: watch::channel(false).0,
            idle: watch::channel(0).0,
        });
        (recorder, calls)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts and faults requests from now on.
    pub(crate) fn arm(&self) {
        self.lock().armed = true;
    }

    /// Neither counts nor faults requests any more (in-flight ones are still tracked).
    pub(crate) fn disarm(&self) {
        self.lock().armed = false;
    }

    /// A receiver that turns `true` when the schedule stops the process.
    pub(crate) fn stopped(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// The stopped process was replaced: requests are served again.
    pub(crate) fn restarted(&self) {
        self.lock().stopped = false;
        self.stop.send_replace(false);
    }

    /// The requests counted so far.
    pub(crate) fn log(&self) -> Vec<Record> {
        self.lock().log.clone()
    }

    /// Waits until no request is in flight at the proxies (late applies have landed), at most
    /// `limit`. Returns whether that happened.
    pub(crate) async fn quiesce(&self, limit: Duration) -> bool {
        let mut idle = self.idle.subscribe();
        let done = async {
            loop {
                if self.lock().in_flight.is_empty() {
                    return;
                }
                if idle.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(limit, done).await.is_ok()
    }

    fn fault_of(&self, step: Step) -> Option<Fault> {
        Some(match step {
            Step::Refuse503 => Fault::Status(503),
            Step::Refuse500 => Fault::Status(500),
            Step::Reset => Fault::Reset,
            Step::LoseResponse => Fault::DropResponse,
            Step::ApplyLate => Fault::Delay(self.holds.late),
            Step::ApplyPastDeadline => Fault::Delay(self.holds.past_deadline),
            Step::Stop => Fault::Hang,
            Step::SplitPage(keep) => Fault::SplitPage { keep },
            Step::Outage(outage) => return self.fault_of(outage.step()),
            Step::Actor(_) => return None,
        })
    }
}

impl Intercept for Recorder {
    fn request(&self, request: &RequestInfo) -> Decision {
        let mut state = self.lock();
        if state.stopped {
            state.in_flight.insert(request.id, None);
            return Box::pin(async { Some(Fault::Hang) });
        }
        if !state.armed {
            state.in_flight.insert(request.id, None);
            return Box::pin(async { None });
        }
        state.seq += 1;
        let seq = state.seq;
        let step = self.schedule.at(seq, self.holds.outage);
        state.log.push(Record {
            seq,
            service: request.service.clone(),
            method: request.method.clone(),
            path: request.path.clone(),
            step,
            status: None,
            forwarded: false,
            entities: None,
        });
        let index = state.log.len() - 1;
        state.in_flight.insert(request.id, Some(index));
        match step {
            Some(Step::Stop) => {
                state.stopped = true;
                drop(state);
                self.stop.send_replace(true);
                Box::pin(async { Some(Fault::Hang) })
            }
            Some(Step::Actor(actor)) => {
                drop(state);
                let (done, finished) = oneshot::channel();
                let sent = self.actors.send(ActorCall { actor, done }).is_ok();
                Box::pin(async move {
                    if sent {
                        // The run drops the sender if it ends first: go on either way.
                        let _ = finished.await;
                    }
                    None
                })
            }
            Some(step) => {
                let fault = self.fault_of(step);
                Box::pin(async move { fault })
            }
            None => Box::pin(async { None }),
        }
    }

    fn finished(&self, request: &RequestInfo, answer: Answer) {
        let mut state = self.lock();
        if let Some(Some(index)) = state.in_flight.remove(&request.id) {
            if let Some(record) = state.log.get_mut(index) {
                record.status = answer.status;
                record.forwarded = answer.forwarded;
                record.entities = answer.entities;
            }
        }
        let left = state.in_flight.len();
        drop(state);
        self.idle.send_replace(left);
    }
}
