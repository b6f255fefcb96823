//! [`Worker`]: the consumer loop — dequeue, run handlers concurrently, shut down gracefully.

mod attempt;
pub(crate) mod report;

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use tablekit_core::{Error, Result};
use tokio::sync::watch;
use tokio::task::{JoinError, JoinSet};
use tracing::Instrument as _;

use crate::job::{Handler, Job};
use crate::options::WorkerOptions;
use crate::queue::JobQueue;
use report::{Counters, WorkerReport, bump};

pub(crate) struct Inner<J, H> {
    queue: JobQueue<J>,
    handler: H,
    options: WorkerOptions,
    counters: Counters,
    job: PhantomData<fn() -> J>,
}

/// Consumes a [`JobQueue`]: dequeues messages with a visibility timeout, runs the handler
/// for each (up to [`WorkerOptions::concurrency`] at once), and deletes a message only after
/// its handler succeeded. Cheap to clone (clones share the handler and the counters).
///
/// For each delivered message the worker
/// 1. moves it to the poison queue at once if its dequeue count already exceeds
///    [`WorkerOptions::max_dequeue_count`] (earlier attempts crashed or timed out), or if it
///    is not a job of type `J` (garbage, or another [`Job::KIND`]: a worker handles one
///    kind; put several job types on one queue as one `enum` job type);
/// 2. runs the handler, re-running it at once on transient failures and conflicts
///    ([`WorkerOptions::handler_retry`]), and meanwhile extends the message's visibility
///    every half timeout, so a slow handler never loses its message to another consumer;
/// 3. on success deletes the message; on failure leaves it to reappear (or delays it, see
///    [`WorkerOptions::failure_backoff`]), and after the last allowed attempt moves it to the
///    poison queue with the failure reason and its payload unchanged.
///
/// **Requests per message:** its share of one dequeue (up to 32 messages each), the
/// handler's steps, and 1 delete — plus 1 per visibility extension, 2 to poison it (put on
/// the poison queue, delete), 1 to delay or release it. An empty poll costs 1 dequeue (and,
/// in [`Worker::drain`], 1 queue-metadata read).
///
/// **Consistency:** at-least-once. A handler may run more than once for one job: after a
/// crash, a lost response, an expired visibility, or because the job was enqueued twice.
/// There is no isolation between a handler's steps. Several workers (tasks or processes) may
/// consume one queue; each message is held by one of them at a time.
pub struct Worker<J: Job, H: Handler<J>> {
    inner: Arc<Inner<J, H>>,
}

impl<J: Job, H: Handler<J>> Clone for Worker<J, H> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<J: Job, H: Handler<J>> fmt::Debug for Worker<J, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("kind", &J::KIND)
            .field("queue", &self.inner.queue)
            .field("options", &self.inner.options)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Whether the consumer loop stops when the queue is empty.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    UntilShutdown,
    Drain,
}

impl<J: Job, H: Handler<J>> Worker<J, H> {
    /// A worker running `handler` on the jobs of `queue`. No request is sent; `options` are
    /// checked when it starts.
    ///
    /// # Examples
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// use serde::{Deserialize, Serialize};
    /// use tablekit_azure::Account;
    /// use tablekit_core::Result;
    /// use tablekit_eventual::{Handler, Job, JobQueue, Steps, Worker, WorkerOptions};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Reindex {
    ///     department: String,
    /// }
    ///
    /// impl Job for Reindex {
    ///     const KIND: &'static str = "reindex";
    /// }
    ///
    /// struct Reindexer;
    ///
    /// impl Handler<Reindex> for Reindexer {
    ///     async fn handle(&self, job: Reindex, _steps: &Steps) -> Result<()> {
    ///         println!("reindexing {}", job.department); // idempotent steps go here
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # async fn run() -> Result<()> {
    /// let jobs: JobQueue<Reindex> = JobQueue::new(Account::emulator().queue("reindex-jobs")?);
    /// let options = WorkerOptions::default()
    ///     .with_concurrency(4)
    ///     .with_failure_backoff(Duration::from_secs(1));
    /// let report = Worker::new(jobs, Reindexer, options).drain().await?;
    /// println!("{} jobs done", report.processed);
    /// # Ok(()) }
    /// ```
    pub fn new(queue: JobQueue<J>, handler: H, options: WorkerOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                queue,
                handler,
                options,
                counters: Counters::default(),
                job: PhantomData,
            }),
        }
    }

    /// The queue it consumes.
    pub fn queue(&self) -> &JobQueue<J> {
        &self.inner.queue
    }

    /// Its handler.
    pub fn handler(&self) -> &H {
        &self.inner.handler
    }

    /// Its options.
    pub fn options(&self) -> &WorkerOptions {
        &self.inner.options
    }

    /// Running totals since the worker was made (also while it runs). Sends no request.
    pub fn stats(&self) -> WorkerReport {
        self.inner.counters.snapshot()
    }

    /// Consumes the queue until `shutdown` resolves, then shuts down gracefully: stops
    /// dequeuing, lets running handlers finish for up to [`WorkerOptions::shutdown_grace`],
    /// then cancels the rest and releases their messages (makes them visible at once, for
    /// another worker). Returns what it did.
    ///
    /// Pass [`crate::shutdown_signal`] to stop on Ctrl-C or SIGTERM. Failed dequeues are
    /// counted, logged and retried after a backoff; they do not stop the worker. Dropping the
    /// returned future instead of resolving `shutdown` aborts running handlers without
    /// releasing their messages: they reappear when their visibility timeout ends.
    ///
    /// **Requests:** see [`Worker`]; while the queue stays empty, one dequeue per poll, the
    /// polls backing off from [`WorkerOptions::poll_interval`] to
    /// [`WorkerOptions::idle_backoff_max`].
    ///
    /// **Errors:** [`Error::InvalidConfig`] for invalid options, before any request.
    pub async fn run_until(&self, shutdown: impl Future<Output = ()>) -> Result<WorkerReport> {
        self.run(shutdown, Mode::UntilShutdown).await
    }

    /// Processes messages until the queue is empty — no message visible, in flight or
    /// delayed (by [`tablekit_azure::Queue::approximate_len`]) — and no handler is running.
    /// Messages another consumer holds, or that wait out a visibility timeout after a
    /// failure, are waited for; a message delayed for hours keeps it waiting for hours. For
    /// tests, backfills and batch jobs.
    ///
    /// **Requests:** see [`Worker`]; each time it finds nothing to do, 1 dequeue and 1
    /// metadata read, backing off as [`Worker::run_until`] does.
    ///
    /// **Errors:** [`Error::InvalidConfig`] for invalid options, before any request; the
    /// first failed dequeue or metadata read (after the account's retries), returned once the
    /// handlers already running have finished (or, after [`WorkerOptions::shutdown_grace`],
    /// been cancelled and their messages released).
    pub async fn drain(&self) -> Result<WorkerReport> {
        self.run(std::future::pending(), Mode::Drain).await
    }

    async fn run(&self, shutdown: impl Future<Output = ()>, mode: Mode) -> Result<WorkerReport> {
        self.inner.options.validate()?;
        self.inner
            .options
            .check_lease(self.inner.queue.queue().account().settings())?;
        let span = tracing::info_span!(
            "tablekit.eventual.worker",
            kind = J::KIND,
            queue = self.inner.queue.queue().name()
        );
        self.consume(shutdown, mode).instrument(span).await
    }

    async fn consume(
        &self,
        shutdown: impl Future<Output = ()>,
        mode: Mode,
    ) -> Result<WorkerReport> {
        let inner = &self.inner;
        let options = &inner.options;
        let start = inner.counters.snapshot();
        let queue = inner.queue.queue();
        let (cancel, cancel_rx) = watch::channel(false);
        let mut tasks: JoinSet<()> = JoinSet::new();
        let shutdown = shutdown.fuse();
        futures::pin_mut!(shutdown);
        let mut idle = options.poll_interval;
        let mut failure: Option<Error> = None;
        loop {
            while let Some(done) = tasks.try_join_next() {
                reap(done);
            }
            if (&mut shutdown).now_or_never().is_some() {
                break;
            }
            let free = options.concurrency - tasks.len();
            if free == 0 {
                tokio::select! {
                    () = &mut shutdown => break,
                    Some(done) = tasks.join_next() => reap(done),
                }
                continue;
            }
            let take = free.min(usize::from(options.batch_size)) as u8;
            // The messages are held from when the dequeue was sent, at the latest.
            let taken_at = tokio::time::Instant::now();
            match queue.receive(take, options.visibility_timeout).await {
                Ok(messages) if !messages.is_empty() => {
                    idle = options.poll_interval;
                    let stopping = (&mut shutdown).now_or_never().is_some();
                    for message in messages {
                        bump(&inner.counters.dequeued);
                        if stopping {
                            self.release(&message).await;
                        } else {
                            tasks.spawn(Box::pin(attempt::process(
                                inner.clone(),
                                message,
                                cancel_rx.clone(),
                                taken_at,
                            )));
                        }
                    }
                    if stopping {
                        break;
                    }
                    continue;
                }
                Ok(_) if mode == Mode::Drain && tasks.is_empty() => {
                    match inner.queue.approximate_len().await {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    bump(&inner.counters.dequeue_errors);
                    tracing::warn!(target: "tablekit", error = %e, "dequeue failed");
                    if mode == Mode::Drain {
                        failure = Some(e);
                        break;
                    }
                }
            }
            // Nothing to take: wait for the backoff, a finished handler, or shutdown.
            let pause = tokio::time::sleep(idle);
            tokio::select! {
                () = &mut shutdown => break,
                Some(done) = tasks.join_next(), if !tasks.is_empty() => reap(done),
                () = pause => idle = (idle * 2).min(options.idle_backoff_max),
            }
        }
        self.wind_down(tasks, cancel, options.shutdown_grace).await;
        match failure {
            Some(e) => Err(e),
            None => Ok(inner.counters.snapshot().since(&start)),
        }
    }

    /// Lets running handlers finish for `grace`, then cancels them (each releases its
    /// message) and waits for them.
    async fn wind_down(
        &self,
        mut tasks: JoinSet<()>,
        cancel: watch::Sender<bool>,
        grace: Duration,
    ) {
        if tasks.is_empty() {
            return;
        }
        tracing::info!(target: "tablekit", running = tasks.len(), ?grace, "worker stopping; waiting for running handlers");
        let deadline = tokio::time::sleep(grace);
        futures::pin_mut!(deadline);
        loop {
            tokio::select! {
                done = tasks.join_next() => match done {
                    Some(done) => reap(done),
                    None => return,
                },
                () = &mut deadline => break,
            }
        }
        let _ = cancel.send(true);
        while let Some(done) = tasks.join_next().await {
            reap(done);
        }
    }

    /// Makes a message taken during shutdown visible again at once.
    async fn release(&self, message: &tablekit_azure::Message) {
        match self
            .inner
            .queue
            .queue()
            .update(message, Duration::ZERO)
            .await
        {
            Ok(_) => bump(&self.inner.counters.released),
            Err(e) => {
                bump(&self.inner.counters.queue_errors);
                tracing::warn!(target: "tablekit", error = %e, "could not release a message at shutdown");
            }
        }
    }
}

fn reap(done: std::result::Result<(), JoinError>) {
    if let Err(e) = done {
        // Handler panics are caught inside the task; this is a bug in the worker itself.
        tracing::error!(target: "tablekit", error = %e, "a worker task failed");
    }
}
