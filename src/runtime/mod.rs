//! The worker runtime (SPEC W1-W4, Q13): one claim thread (the coordinator), a fixed pool of
//! named worker threads, one heartbeat thread per live claim, and a LISTEN thread that turns
//! notifications into wake-ups. The coordinator claims as many works as it has free slots in
//! one statement (Q4), and publishes the passes that finish close together in one
//! transaction, which also claims the works for the slots they free (`finalizer`).
//!
//! The coordinator owns all scheduling state; workers and the listener only send `Event`s
//! back over one channel, so every cause of activity is in one `match`. The coordinator never
//! leaves its loop early: it drains until every in-flight pass has reported. Threads are named,
//! stopped by closing channels, and joined.

pub mod budget;
mod finalizer;
mod lease;
pub mod records;

use crate::cancel::LossCause;
use crate::db::DbError;
use crate::queue::{self, Claim};
use crate::reconcile::{Context, LeaseState, Outcome, Pass, PassError, Registry, Report};
use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use postgres::fallible_iterator::FallibleIterator;
use records::Records;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use finalizer::{batch_share, publishers_in_use, PUBLISHERS};
pub use finalizer::{Finalizer, LINGER, MAX_BATCH};
pub use lease::{Heartbeat, Lease};

/// Settings of the runtime itself (the rest is in `Context`).
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    pub concurrency: usize,
    pub poll_interval: Duration,
    pub shutdown_grace: Duration,
    /// Where the LISTEN connection goes; `None` disables notifications (poll only).
    pub listen_url: Option<String>,
    pub db_timeout: Duration,
}

/// Every cause of coordinator activity.
pub enum Event {
    /// A notification: new or released work may be claimable.
    Wake,
    /// A worker finished a pass its publication did not answer (or panicked) and its slot is
    /// free; a published pass's slot was freed when it was batched. Keyed by claim token: the
    /// same work may be claimed again (after its lease ran out) while an old pass still runs.
    Done { token: String },
    /// SIGTERM/SIGINT or an in-process stop request.
    Stop,
    /// The poll interval (or a follow-up after a wake-up) passed without an event.
    Poll,
    /// A worker's finished pass, to publish (its thread waits for the answer).
    Publish(Box<finalizer::Unit>),
    /// A publisher thread finished a publication: its claims, and the slots it reserved.
    Published(Box<finalizer::Published>),
}

/// How long after a wake-up the coordinator claims once more (see `coordinate`).
const FOLLOW_UP: Duration = Duration::from_millis(15);

/// A handle that asks a running worker to stop gracefully.
#[derive(Clone)]
pub struct StopHandle(Sender<Event>, Arc<Progress>);

impl StopHandle {
    /// Marks the worker stopping at once (the coordinator claims nothing more, the listener and
    /// the readiness probe end after their current bounded wait), then wakes the coordinator.
    pub fn stop(&self) {
        self.1.stopping.store(true, Ordering::SeqCst);
        let _ = self.0.send(Event::Stop);
    }
}

/// Liveness and claim bookkeeping read by the health server.
#[derive(Default)]
pub struct Progress {
    last: Mutex<Option<Instant>>,
    /// The class of the coordinator's last claim or recovery failure, until one succeeds.
    claim_failure: Mutex<Option<String>>,
    /// Set by `StopHandle::stop`: nothing new starts.
    stopping: AtomicBool,
}

impl Progress {
    /// Whether a stop was requested (`/readyz` answers 503, nothing new is claimed).
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Records the outcome of the coordinator's last claim or recovery statement.
    pub fn set_claim_failure(&self, cause: Option<String>) {
        *self.claim_failure.lock() = cause;
    }

    /// Why claiming fails, while it does (`/readyz` answers 503).
    pub fn claim_failure(&self) -> Option<String> {
        self.claim_failure.lock().clone()
    }

    pub fn tick(&self) {
        *self.last.lock() = Some(Instant::now());
    }

    /// Time since the coordinator loop last went round; `None` before it started.
    pub fn since(&self) -> Option<Duration> {
        self.last.lock().map(|t| t.elapsed())
    }
}

/// A claimed work for a pool thread: from the job channel, or with the answer to the thread's
/// previous pass (`finalizer::PassAnswer::send`).
pub struct Job {
    claim: Claim,
    lease: Arc<LeaseState>,
}

/// The worker: build it, take a `StopHandle`, then `run` on the current thread.
pub struct Worker {
    ctx: Arc<Context>,
    registry: Arc<Registry>,
    options: RuntimeOptions,
    events_tx: Sender<Event>,
    events_rx: Receiver<Event>,
    pub progress: Arc<Progress>,
}

impl Worker {
    pub fn new(ctx: Arc<Context>, registry: Registry, options: RuntimeOptions) -> Worker {
        let (events_tx, events_rx) = unbounded();
        Worker {
            ctx,
            registry: Arc::new(registry),
            options,
            events_tx,
            events_rx,
            progress: Arc::new(Progress::default()),
        }
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.events_tx.clone(), self.progress.clone())
    }

    /// Runs until stopped; returns after every thread it started has been joined.
    pub fn run(self) -> std::io::Result<()> {
        let Worker {
            ctx,
            registry,
            options,
            events_tx,
            events_rx,
            progress,
        } = self;
        let listening = Arc::new(AtomicBool::new(true));
        let listener = match &options.listen_url {
            Some(url) => Some(spawn_listener(
                url.clone(),
                options.db_timeout,
                events_tx.clone(),
                listening.clone(),
                progress.clone(),
                ctx.events.clone(),
            )?),
            None => None,
        };
        let finalizer = Finalizer::new(events_tx.clone());
        let records = Arc::new(Records::new(options.poll_interval));
        let (jobs_tx, jobs_rx) = crossbeam_channel::bounded::<Job>(options.concurrency);
        let mut workers = Vec::with_capacity(options.concurrency);
        for i in 0..options.concurrency {
            let jobs = jobs_rx.clone();
            let done = events_tx.clone();
            let ctx = ctx.clone();
            let registry = registry.clone();
            let finalizer = finalizer.clone();
            let records = records.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(format!("occ-work-{i}"))
                    .spawn(move || {
                        // This worker's heartbeat thread, kept from one pass to the next.
                        let mut heartbeat = Heartbeat::new(ctx.clone());
                        // The next pass: the one the last answer brought, else the channel's.
                        let mut next = None;
                        while let Some(job) = next.take().or_else(|| jobs.recv().ok()) {
                            let mut guard = DoneGuard {
                                events: &done,
                                token: job.claim.token.clone(),
                                freed: false,
                            };
                            let outcome =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    run_pass(
                                        &ctx,
                                        &registry,
                                        &records,
                                        &finalizer,
                                        &mut heartbeat,
                                        job,
                                    )
                                }));
                            // A pass its publication answered has its slot back already.
                            guard.freed = finalizer.take_answered();
                            next = finalizer.take_next();
                            if outcome.is_err() {
                                ctx.events.emit(
                                    "worker.error",
                                    json!({"code": "WORKER_UNAVAILABLE", "cause": "PassPanicked"}),
                                );
                            }
                            drop(guard);
                        }
                    })?,
            );
        }
        drop(jobs_rx);
        drop(finalizer);

        ctx.events.emit(
            "worker.started",
            json!({
                "computeDriverId": ctx.compute.id(),
                "computeImplementation": ctx.compute.implementation(),
                "concurrency": options.concurrency,
            }),
        );
        // The publisher threads: each runs the publications the coordinator hands it, one at a
        // time, and answers with an `Event::Published`.
        let (publications_tx, publications_rx) =
            crossbeam_channel::bounded::<finalizer::Publication>(PUBLISHERS);
        let mut publishers = Vec::with_capacity(PUBLISHERS);
        for i in 0..PUBLISHERS {
            let publications = publications_rx.clone();
            let events = events_tx.clone();
            let ctx = ctx.clone();
            let progress = progress.clone();
            let records = records.clone();
            publishers.push(
                std::thread::Builder::new()
                    .name(format!("occ-publish-{i}"))
                    .spawn(move || {
                        for publication in publications {
                            let reserved = publication.claim;
                            let published =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    publication.run(&ctx, &progress, &records.health)
                                }))
                                .unwrap_or_else(|_| {
                                    // The batch's passes were answered by their dropped
                                    // replies; the reserved slots are free again.
                                    ctx.events.emit(
                                        "worker.error",
                                        json!({"code": "WORKER_UNAVAILABLE", "cause": "PublicationPanicked"}),
                                    );
                                    finalizer::Published {
                                        reserved,
                                        recovery: None,
                                        claimed: Some(Err(PassError::Invariant(
                                            "a publication panicked".into(),
                                        ))),
                                        answers: Vec::new(),
                                    }
                                });
                            if events.send(Event::Published(Box::new(published))).is_err() {
                                break;
                            }
                        }
                    })?,
            );
        }
        drop(publications_rx);
        // The claim loop runs on its own named thread so thread tools show `occ-claim`.
        let claim_ctx = ctx.clone();
        let claim_thread =
            std::thread::Builder::new()
                .name("occ-claim".into())
                .spawn(move || {
                    coordinate(
                        &claim_ctx,
                        &options,
                        &jobs_tx,
                        &publications_tx,
                        &events_rx,
                        &progress,
                    );
                    // Closing the job channel stops the pool; every in-flight pass has reported.
                    // Closing the publication channel stops the publishers.
                    drop(jobs_tx);
                    drop(publications_tx);
                })?;
        // A panic on the claim thread is a broken invariant: the pool and the publishers drain
        // (their channels closed as the thread unwound), every thread is joined, and `run`
        // fails (W4).
        let claim_panicked = claim_thread.join().is_err();

        for w in workers {
            let _ = w.join();
        }
        for p in publishers {
            let _ = p.join();
        }
        listening.store(false, Ordering::SeqCst);
        if let Some(l) = listener {
            let _ = l.join();
        }
        if claim_panicked {
            ctx.events.emit(
                "worker.error",
                json!({"code": "WORKER_UNAVAILABLE", "cause": "ClaimThreadPanicked"}),
            );
            return Err(std::io::Error::other("the claim thread panicked"));
        }
        ctx.events.emit("worker.stopped", json!({}));
        Ok(())
    }
}

/// Reports a finished pass even when the pass panicked, unless its publication answered it
/// (`freed`: the coordinator freed its slot when it batched it).
struct DoneGuard<'a> {
    events: &'a Sender<Event>,
    token: String,
    freed: bool,
}

impl Drop for DoneGuard<'_> {
    fn drop(&mut self) {
        if !self.freed {
            let _ = self.events.send(Event::Done {
                token: std::mem::take(&mut self.token),
            });
        }
    }
}

/// The claim loop. Claims only for free slots; has finished passes published, claiming for
/// the slots they free in the same transaction; sleeps on the event channel. It never waits
/// for the database itself: its publications and claims run on the publisher threads
/// (`PUBLISHERS`), at most one each.
///
/// A finished pass hands over its report (`Event::Publish`) and waits. The coordinator hands a
/// batch to a free publisher once every dispatched pass has handed over, or a publisher's
/// share of the pool has (`batch_share`), or the first of them has waited `LINGER` (passes
/// still running): under load each transaction publishes part of what the pool finished and
/// claims as many works, so a statement's fixed cost is shared by many passes, one commit
/// serves both, and one publication's statements run while another commits. A lone pass
/// (nothing else running) is published at once.
///
/// W1 holds across publications under way: the slots a publication may claim for are
/// reserved when it is handed over and freed by its answer for what it did not claim, so the
/// live claims (dispatched, being published, being claimed) never outnumber the worker
/// threads.
fn coordinate(
    ctx: &Context,
    options: &RuntimeOptions,
    jobs: &crossbeam_channel::Sender<Job>,
    publications: &crossbeam_channel::Sender<finalizer::Publication>,
    events: &Receiver<Event>,
    progress: &Progress,
) {
    let mut free = options.concurrency;
    let publishers = publishers_in_use(options.concurrency);
    let share = batch_share(options.concurrency);
    // Dispatched passes not yet handed to a publisher or reported done, keyed by claim token,
    // never by work id (see `Event::Done`).
    let mut in_flight: HashMap<String, Arc<LeaseState>> = HashMap::new();
    // Finished passes waiting for their publication, and since when the first of them waits.
    let mut units: Vec<finalizer::Unit> = Vec::new();
    let mut gathering: Option<Instant> = None;
    // Publications handed to a publisher and not answered yet.
    let mut publishing = 0;
    // Whether a claim for free slots is due: after a slot freed otherwise than by a
    // publication (which claims for its own), a wake-up or a poll. A claim that came back
    // short found the queue empty; the next one waits for one of those.
    let mut claim_due = true;
    let mut stopping: Option<Instant> = None;
    let mut cancelled_all = false;
    let recovery_every = (ctx.queue.lease / 2).min(Duration::from_secs(1));
    let mut last_recovery: Option<Instant> = None;
    let mut failures = Failures::default();
    // After a notification, one more claim shortly after: a transaction that left the
    // wake-up to a concurrent one (V11) may commit just after the notifying one.
    let mut follow_up: Option<Instant> = None;
    'coordinator: loop {
        progress.tick();
        let publisher_free = publishing < publishers;
        let publish_due = publisher_free
            && !units.is_empty()
            && (units.len() >= in_flight.len()
                || units.len() >= share
                || gathering.is_some_and(|t| t.elapsed() >= LINGER));
        // A requested stop is seen before the next database wait, not after it.
        let claiming = stopping.is_none() && !progress.stopping();
        let claim_now = claiming && claim_due && free > 0 && units.is_empty() && publisher_free;
        if publish_due || claim_now {
            let batch: Vec<finalizer::Unit> = if publish_due {
                let batch = units.drain(..units.len().min(share)).collect();
                if units.is_empty() {
                    gathering = None;
                }
                batch
            } else {
                Vec::new()
            };
            // Every pass of the batch is answered by its publication, and its claim ends with
            // it (or is no longer ours): its slot is free for what that publication claims.
            for unit in &batch {
                if in_flight.remove(unit.token()).is_some() {
                    free += 1;
                }
            }
            let claim = if claiming { free } else { 0 };
            let recover = claim > 0 && last_recovery.is_none_or(|t| t.elapsed() >= recovery_every);
            if recover {
                last_recovery = Some(Instant::now());
            }
            if claim > 0 {
                claim_due = false;
            }
            free -= claim;
            publishing += 1;
            let publication = finalizer::Publication {
                batch,
                claim,
                recover,
            };
            if publications.send(publication).is_err() {
                // The publishers are gone; nothing will be published. Stop claiming.
                break;
            }
            progress.tick();
        }
        if stopping.is_some() && in_flight.is_empty() && publishing == 0 {
            break;
        }
        let now = Instant::now();
        let wait = match (gathering, stopping) {
            // Passes gather for publication: at most `LINGER`, shorter than any other wait. A
            // pending follow-up stays pending meanwhile. With every publisher busy, the next
            // answer wakes the loop.
            (Some(first), _) if publishing < publishers => {
                (first + LINGER).saturating_duration_since(now)
            }
            (_, Some(deadline)) if !cancelled_all => deadline.saturating_duration_since(now),
            (_, Some(_)) => Duration::from_millis(200),
            (_, None) => match follow_up.take() {
                Some(at) => at.saturating_duration_since(now),
                None => options.poll_interval,
            },
        };
        let first = match events.recv_timeout(wait) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => Event::Poll,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        // Handle everything already waiting, so a burst of notifications costs one claim.
        for event in std::iter::once(first).chain(events.try_iter()) {
            match event {
                Event::Poll => claim_due = true,
                Event::Wake => {
                    claim_due = true;
                    follow_up = Some(Instant::now() + FOLLOW_UP);
                }
                Event::Publish(unit) => {
                    if units.is_empty() {
                        gathering = Some(Instant::now());
                    }
                    units.push(*unit);
                }
                Event::Published(published) => {
                    publishing -= 1;
                    free += published.reserved;
                    if let Some(e) = &published.recovery {
                        failures.report(ctx, progress, e);
                    }
                    // Each answered pass's thread gets the next claim with its answer; the
                    // claims left over go to the job channel, the answers left over alone.
                    let mut answers = published.answers.into_iter();
                    let mut pool_gone = false;
                    match published.claimed {
                        Some(Ok((claims, sent))) => {
                            failures.clear(progress);
                            for claim in claims {
                                let lease =
                                    Arc::new(LeaseState::new(&claim, sent, ctx.queue.lease));
                                in_flight.insert(claim.token.clone(), lease.clone());
                                free -= 1;
                                let job = Job { claim, lease };
                                match answers.next() {
                                    Some(answer) => answer.send(Some(job)),
                                    None => pool_gone |= jobs.send(job).is_err(),
                                }
                            }
                        }
                        Some(Err(e)) => failures.report(ctx, progress, &e),
                        None => {}
                    }
                    for answer in answers {
                        answer.send(None);
                    }
                    if pool_gone {
                        // The pool is gone; nothing will report. Stop claiming.
                        break 'coordinator;
                    }
                }
                // A published pass's slot was freed with its publication.
                Event::Done { token } => {
                    if in_flight.remove(&token).is_some() {
                        free += 1;
                        claim_due = true;
                    }
                }
                Event::Stop => {
                    if stopping.is_none() {
                        stopping = Some(Instant::now() + options.shutdown_grace);
                        ctx.events.emit(
                            "worker.stopping",
                            json!({"inFlight": in_flight.len(), "graceMs": options.shutdown_grace.as_millis() as u64}),
                        );
                    }
                }
            }
        }
        if let Some(deadline) = stopping {
            if !cancelled_all && Instant::now() >= deadline {
                // Grace is over: the remaining passes stop at their next cancellation point and
                // release their claims, attempt refunded, so another worker resumes them (W4).
                // A pass waiting for its publication is refused by it (`WORKER_STOPPING`).
                for lease in in_flight.values() {
                    lease.cancel.cancel(LossCause::WorkerStopping);
                }
                cancelled_all = true;
            }
        }
    }
}

/// The coordinator's failing claim and recovery statements: every failure is counted and turns
/// `/readyz` 503 until a claim works again; each is said as `worker.error WORKER_UNAVAILABLE`,
/// at most once per `FAILURE_REPORT_EVERY` while they keep failing.
#[derive(Default)]
struct Failures {
    last_reported: Option<Instant>,
    suppressed: u64,
}

const FAILURE_REPORT_EVERY: Duration = Duration::from_secs(5);

impl Failures {
    fn report(&mut self, ctx: &Context, progress: &Progress, e: &PassError) {
        let cause = error_class(e);
        ctx.metrics
            .claim_failures
            .with_label_values(&[cause.as_str()])
            .inc();
        progress.set_claim_failure(Some(cause.clone()));
        if self
            .last_reported
            .is_some_and(|t| t.elapsed() < FAILURE_REPORT_EVERY)
        {
            self.suppressed += 1;
            return;
        }
        ctx.events.emit(
            "worker.error",
            json!({"code": "WORKER_UNAVAILABLE", "cause": cause, "suppressed": self.suppressed}),
        );
        self.last_reported = Some(Instant::now());
        self.suppressed = 0;
    }

    fn clear(&mut self, progress: &Progress) {
        if self.last_reported.take().is_some() {
            progress.set_claim_failure(None);
        }
        self.suppressed = 0;
    }
}

/// A short class for an error, safe to log.
fn error_class(e: &PassError) -> String {
    match e {
        PassError::Db(DbError::Unavailable(_)) => "DatabaseUnavailable".into(),
        PassError::Db(DbError::Corrupt(_)) => "CorruptData".into(),
        PassError::Db(e) => match e.sqlstate() {
            Some(state) => format!("DatabaseError:{state}"),
            None => "DatabaseConnection".into(),
        },
        PassError::Compute(e) => format!("ComputeError:{}", e.class()),
        PassError::Invariant(_) => "Invariant".into(),
        PassError::Lost(c) => c.code().into(),
        PassError::ClaimLost => "ClaimLost".into(),
    }
}

/// The `worker.pass-error` line of a pass that failed, retried or deferred: the step it stopped
/// at and, after a Compute error, its class, HTTP status and one-word provider reason (for an
/// API server that could not be reached: why, and its address); never provider text.
fn pass_error_fields(work: &serde_json::Value, report: &Report) -> serde_json::Value {
    let mut fields = work.clone();
    fields["outcome"] = json!(report.outcome.as_str());
    fields["code"] = json!(report.code);
    fields["step"] = json!(report.failure.step.unwrap_or("reconcile"));
    if let Some(class) = &report.failure.class {
        fields["class"] = json!(class);
    }
    if let Some(status) = report.failure.status {
        fields["status"] = json!(status);
    }
    if let Some(reason) = &report.failure.reason {
        fields["reason"] = json!(reason);
    }
    if let Some(endpoint) = &report.failure.endpoint {
        fields["endpoint"] = json!(endpoint);
    }
    fields
}

/// A class a log line may name: the part before any `:` of an
/// error class, when it is `^[A-Za-z][A-Za-z0-9_]{0,63}$`.
fn logged_class(class: &str) -> Option<&str> {
    let class = class.split(':').next().unwrap_or_default();
    let mut chars = class.chars();
    (class.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
    .then_some(class)
}

/// The failure fields of an ended pass's `worker.completed` (SPEC Z12): a
/// transient dependency names itself (`dependency`) and its `cause`; any failure gives its
/// class (`cause`), HTTP `status` (100-599) and one-word Status `reason`, the driver's request
/// diagnostic, the class of a failed cleanup (`cleanupCause`), the `refusal` whose candidate
/// stop is pending, and a yielded predecessor stop that could not be finished
/// (`predecessorStop`). A Namespace observation's failure adds the driver's bounded `reason`
/// instead (SPEC Z10). Never provider free text.
fn failure_fields(fields: &mut serde_json::Value, ctx: &Context, report: &Report) {
    let failure = &report.failure;
    let cause = failure.class.as_deref().and_then(logged_class);
    if failure.transient || failure.dependency.is_some() {
        let dependency = failure
            .dependency
            .unwrap_or_else(|| ctx.compute.implementation());
        fields["dependency"] = json!(dependency);
    }
    if let Some(cause) = cause {
        fields["cause"] = json!(cause);
    }
    if let Some(status) = failure.status.filter(|s| (100..=599).contains(s)) {
        fields["status"] = json!(status);
    }
    if let Some(reason) = &failure.reason {
        fields["reason"] = json!(reason);
    }
    if let Some(request) = &failure.request {
        let method = request.method.as_deref().filter(|m| {
            m.len() <= 64
                && m.starts_with(|c: char| c.is_ascii_alphabetic())
                && m.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        });
        if let Some(method) = method {
            fields["method"] = json!(method);
        }
        if let Some(status) = request.grpc_status.filter(|s| *s <= 16) {
            fields["grpcStatus"] = json!(status);
        }
        let category = request.validation_category.as_deref().filter(|v| {
            v.len() <= 64
                && v.starts_with(|c: char| c.is_ascii_lowercase())
                && v.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        });
        if let Some(category) = category {
            fields["validationCategory"] = json!(category);
        }
    }
    if let Some(cleanup) = failure.cleanup_class.and_then(logged_class) {
        fields["cleanupCause"] = json!(cleanup);
    }
    // The refusal whose candidate stop is still pending.
    if let (Some(refusal), Outcome::Pending { .. }) = (&report.refusal, report.outcome) {
        fields["refusal"] = json!(refusal);
    }
    if let Some(class) = failure.predecessor_stop.as_deref() {
        fields["predecessorStop"] = json!(logged_class(class).unwrap_or("Error"));
    }
    if let Some(reason) = &failure.namespace_reason {
        fields["reason"] = json!(reason);
    }
}

/// Whether a report is a draining stop's yield (SPEC Z5).
fn is_stop_yield(report: &Report) -> bool {
    matches!(report.outcome, Outcome::Pending { .. })
        && matches!(
            report.code.as_str(),
            "AGENT_STOP_YIELDED" | "PREDECESSOR_STOP_YIELDED"
        )
}

/// Runs one pass on a worker thread: lease thread, reconcile, finalize, events, metrics.
fn run_pass(
    ctx: &Arc<Context>,
    registry: &Registry,
    records: &Records,
    finalizer: &Finalizer,
    heartbeat: &mut Heartbeat,
    job: Job,
) {
    let Job { claim, lease } = job;
    let started = Instant::now();
    let operation = claim.operation.as_str();
    // Deploy timings follow a revision's own reconcile key only (SPEC Z9).
    let deployment = claim.operation == queue::Operation::RevisionReconcile
        && claim
            .revision_id
            .as_ref()
            .is_some_and(|r| claim.key == format!("agent_revision:{r}:reconcile"));
    if deployment {
        records.timings.lock().begin(&claim.key, started);
    }
    let heartbeat = match heartbeat.start(claim.clone(), lease.clone()) {
        Ok(h) => Some(h),
        Err(_) => {
            lease.cancel.cancel(LossCause::RenewalFailed);
            None
        }
    };
    let reconciler = registry.get(claim.operation);
    let pass = Pass {
        claim: &claim,
        ctx,
        lease: &lease,
    };
    // `classified` is what the reconciler said; the finalized report carries the queue's
    // decision (they differ at the attempt limit and the deadline).
    let result = reconciler
        .reconcile(&pass)
        .or_else(|e| {
            if e.is_claim_loss() {
                Err(e)
            } else {
                let mut report = Report::retry("DEPENDENCY_UNAVAILABLE").at("reconcile");
                report.failure.class = Some(error_class(&e));
                match &e {
                    PassError::Compute(e) => report = report.with_compute_error(e),
                    PassError::Db(_) => {
                        report.failure.transient = true;
                        report.failure.dependency = Some("database");
                    }
                    _ => {}
                }
                Ok(report)
            }
        })
        .and_then(|report| {
            let classified = report.outcome;
            finalizer
                .finalize(&pass, &lease, reconciler.clone(), report)
                .map(|r| (classified, r))
        });
    drop(heartbeat);
    let elapsed = started.elapsed();
    ctx.metrics
        .pass_duration
        .with_label_values(&[operation])
        .observe(elapsed.as_secs_f64());
    // Every pass event names its work by its key.
    let mut fields = json!({
        "workId": claim.key,
        "attempt": claim.attempt,
        "operation": operation,
        "namespaceId": claim.namespace_id,
        "agentId": claim.agent_id,
        "revisionId": claim.revision_id,
    });
    // A pass that did not yield ends the work's stop yields.
    let yielded = matches!(&result, Ok((_, report)) if is_stop_yield(report));
    let stop_yields = if yielded {
        None
    } else {
        records.stop_yields.lock().settled(&claim.key)
    };
    match result {
        Ok((classified, report)) => {
            let outcome = report.outcome.as_str();
            ctx.metrics
                .passes
                .with_label_values(&[operation, outcome])
                .inc();
            // A draining stop says so on its first yield, then at most once a minute (Z5).
            let (stop_yields, due) = if yielded {
                let (n, due) = records
                    .stop_yields
                    .lock()
                    .yielded(&claim.key, Instant::now());
                (Some(n), due)
            } else {
                (stop_yields, true)
            };
            if due {
                if report.outcome != Outcome::Success {
                    ctx.events
                        .emit("worker.pass-error", pass_error_fields(&fields, &report));
                }
                fields["result"] = json!(classified.as_str());
                fields["outcome"] = json!(outcome);
                fields["code"] = json!(report.code);
                fields["timings"] = json!({"passMs": elapsed.as_millis() as u64});
                failure_fields(&mut fields, ctx, &report);
                if let Some(n) = stop_yields {
                    fields["stopYields"] = json!(n);
                }
            }
            if deployment {
                let terminal = matches!(report.outcome, Outcome::Success | Outcome::Permanent);
                let timings = records.timings.lock().finish(
                    &claim.key,
                    report.deploy.as_ref(),
                    terminal,
                    lease.age(),
                    Instant::now(),
                );
                if let (true, Some(serde_json::Value::Object(timings))) = (due, timings) {
                    for (k, v) in timings {
                        fields[k] = v;
                    }
                }
            }
            if due {
                ctx.events.emit("worker.completed", fields);
            }
            // After every pass that published (SPEC Z7); a pass that lost its claim or its
            // database leaves the beat to the coordinator's idle cadence.
            records.health.beat(ctx, true);
        }
        Err(e) if e.is_stopping() => {
            ctx.metrics
                .passes
                .with_label_values(&[operation, "interrupted"])
                .inc();
            // W4: give the claim back at once instead of letting its lease run out; a lost or
            // expired claim (or an unreachable database) leaves recovery to do it.
            let released = ctx.pool.get().is_ok_and(|mut client| {
                queue::work_release(&mut *client, &claim, LossCause::WorkerStopping.code()).is_ok()
            });
            fields["released"] = json!(released);
            fields["cause"] = json!("WorkerStopping");
            ctx.events.emit("worker.pass-interrupted", fields);
        }
        Err(e) if e.is_claim_loss() => {
            ctx.metrics
                .passes
                .with_label_values(&[operation, "claim_lost"])
                .inc();
            ctx.metrics
                .claims_lost
                .with_label_values(&[e.loss_code()])
                .inc();
            fields["code"] = json!("CLAIM_LOST");
            fields["cause"] = json!(e.loss_code());
            ctx.events.emit("worker.error", fields);
        }
        Err(e) => {
            ctx.metrics
                .passes
                .with_label_values(&[operation, "error"])
                .inc();
            fields["code"] = json!("WORKER_UNAVAILABLE");
            fields["cause"] = json!(error_class(&e));
            ctx.events.emit("worker.error", fields);
        }
    }
}

/// The LISTEN thread: `occ-listen`. Reconnects with backoff; stops when `running` clears.
///
/// A connection that stops answering is noticed: between notifications the thread pings the
/// server every quarter of the database timeout with a no-op bounded by that timeout; a ping
/// that fails (a dead peer, a black hole that still acknowledges) drops the connection, says
/// `worker.error WORKER_UNAVAILABLE` (`NotificationsUnavailable`) and reconnects.
fn spawn_listener(
    url: String,
    timeout: Duration,
    wake: Sender<Event>,
    listening: Arc<AtomicBool>,
    progress: Arc<Progress>,
    events: crate::events::Events,
) -> std::io::Result<JoinHandle<()>> {
    let running = move || listening.load(Ordering::SeqCst) && !progress.stopping();
    let ping_every = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    std::thread::Builder::new()
        .name("occ-listen".into())
        .spawn(move || {
            let mut backoff = Duration::from_millis(100);
            while running() {
                let mut client = match crate::db::connect(&url, timeout) {
                    Ok(c) => c,
                    Err(_) => {
                        sleep_while(&running, backoff);
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                        continue;
                    }
                };
                if client.batch_execute("LISTEN occ_work").is_err() {
                    sleep_while(&running, backoff);
                    continue;
                }
                backoff = Duration::from_millis(100);
                // A wake right after (re)connecting covers notifications sent while away.
                let _ = wake.send(Event::Wake);
                let mut last_ping = Instant::now();
                'listen: while running() && !client.is_closed() {
                    if last_ping.elapsed() >= ping_every {
                        last_ping = Instant::now();
                        if client.is_valid(timeout).is_err() {
                            events.emit(
                                "worker.error",
                                json!({"code": "WORKER_UNAVAILABLE", "cause": "NotificationsUnavailable"}),
                            );
                            break 'listen;
                        }
                    }
                    let mut notifications = client.notifications();
                    let mut iter = notifications.timeout_iter(Duration::from_millis(250));
                    loop {
                        match iter.next() {
                            Ok(Some(_)) => {
                                if wake.send(Event::Wake).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => break,
                            Err(_) => break 'listen,
                        }
                    }
                }
            }
        })
}

fn sleep_while(running: &impl Fn() -> bool, total: Duration) {
    let end = Instant::now() + total;
    while running() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
}
