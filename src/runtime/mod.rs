//! The worker runtime (SPEC W1-W4, Q13): the threads, and the channels between them. The
//! scheduling thread (`occ-claim`, SPEC's claim thread) owns every scheduling decision
//! through a `Scheduler`, a state machine with no effects of its own: it feeds it each `Event`
//! that arrives on its one channel and executes the commands it returns (`coordinate`). It
//! never waits for the database: the publisher threads (`occ-publish-N`) run every
//! transaction, each publishing a batch of finished passes and claiming works for the free
//! slots in one commit, the idle claims and lease recovery included (`finalizer`). The pool
//! (`occ-work-N`) runs one pass at a time per thread (`run_pass`), each with its heartbeat
//! thread (`occ-lease-<work id>`, `lease`), and hands its report over for publication; its
//! answer comes back as a value, with the thread's next work when the publication claimed one.
//! The listener (`occ-listen`) turns notifications into wake-ups.
//!
//! Pool threads, publishers and the listener only send `Event`s, so every cause of activity
//! is in one `match`. The scheduling thread never leaves its loop early: it drains until every
//! in-flight pass has reported. Threads are named, stopped by closing channels, and joined.

pub mod budget;
mod finalizer;
mod lease;
pub mod records;
mod scheduler;

use crate::cancel::LossCause;
use crate::db::DbError;
use crate::queue::{self, Claim};
use crate::reconcile::{AnyReport, Context, LeaseState, Outcome, Pass, PassError, Registry};
use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use postgres::fallible_iterator::FallibleIterator;
use records::Records;
use scheduler::{Command, Scheduler, Settings};
use serde_json::json;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use finalizer::Finalizer;
use finalizer::{Slot, PUBLISHERS};
pub use lease::{Heartbeat, Lease};
pub use scheduler::{LINGER, MAX_BATCH};

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

/// What the other threads send the scheduling thread: every cause of its activity but the end
/// of a wait (`scheduler::Event::Tick`).
pub enum Event {
    /// A notification: new or released work may be claimable.
    Wake,
    /// A worker finished a pass its publication did not answer (or panicked) and its slot is
    /// free; a published pass's slot was freed when it was batched. Keyed by claim token: the
    /// same work may be claimed again (after its lease ran out) while an old pass still runs.
    Done { token: String },
    /// SIGTERM/SIGINT or an in-process stop request.
    Stop,
    /// A worker's finished pass, to publish (its thread waits for the answer).
    Publish(Box<finalizer::Unit>),
    /// A publisher thread finished a publication: its claims, and the slots it reserved.
    Published(Box<finalizer::Published>),
}

/// A handle that asks a running worker to stop gracefully.
#[derive(Clone)]
pub struct StopHandle(Sender<Event>, Arc<Progress>);

impl StopHandle {
    /// Marks the worker stopping at once (nothing more is claimed, the listener and the
    /// readiness probe end after their current bounded wait), then wakes the scheduling thread.
    pub fn stop(&self) {
        self.1.stopping.store(true, Ordering::SeqCst);
        let _ = self.0.send(Event::Stop);
    }
}

/// Liveness and claim bookkeeping read by the health server.
#[derive(Default)]
pub struct Progress {
    last: Mutex<Option<Instant>>,
    /// The class of the last claim or recovery failure, until a claim succeeds.
    claim_failure: Mutex<Option<String>>,
    /// Set by `StopHandle::stop`: nothing new starts.
    stopping: AtomicBool,
}

impl Progress {
    /// Whether a stop was requested (`/readyz` answers 503, nothing new is claimed).
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Records the outcome of the last claim or recovery statement.
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

    /// Time since the scheduling loop last went round (or a publisher finished a database
    /// wait); `None` before it started.
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

impl Job {
    /// A work its claim statement (sent at `sent`) returned, trusted for one `lease` from then.
    fn new(claim: Claim, sent: Instant, lease: Duration) -> Job {
        let lease = Arc::new(LeaseState::new(&claim, sent, lease));
        Job { claim, lease }
    }
}

/// The runtime's payloads, as the scheduler moves them between threads.
struct Threads;

impl scheduler::Payload for Threads {
    type Unit = finalizer::Unit;
    type Job = Job;
    type Answer = finalizer::PassAnswer;
    type Lease = Arc<LeaseState>;
    fn unit_token(unit: &finalizer::Unit) -> &str {
        unit.token()
    }
    fn job_token(job: &Job) -> &str {
        &job.claim.token
    }
    fn job_lease(job: &Job) -> Arc<LeaseState> {
        job.lease.clone()
    }
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
                            // Taken from the pass before it is concluded, so that a panic while
                            // it is said loses neither the freed slot nor the next pass.
                            let mut slot = Slot::Held;
                            let outcome =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    let ran = run_pass(
                                        &ctx,
                                        &registry,
                                        &records,
                                        &finalizer,
                                        &mut heartbeat,
                                        job,
                                    );
                                    slot = ran.slot;
                                    conclude(&ctx, &records, &ran.pass, ran.result);
                                }));
                            if outcome.is_err() {
                                ctx.events.emit(
                                    "worker.error",
                                    json!({"code": "WORKER_UNAVAILABLE", "cause": "PassPanicked"}),
                                );
                            }
                            // A pass its publication answered has its slot back already.
                            if let Slot::Freed { next: answered } = slot {
                                guard.freed = true;
                                next = answered;
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
                "sandboxDriverId": ctx.sandbox.driver.as_ref().map(|s| &s.id),
                "concurrency": options.concurrency,
            }),
        );
        // The publisher threads: each runs the publications the scheduler hands it, one at a
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
        // The scheduling loop runs on its own named thread so thread tools show it; SPEC W1
        // names it `occ-claim`, since it decides every claim the publishers make.
        let schedule_ctx = ctx.clone();
        let schedule_thread =
            std::thread::Builder::new()
                .name("occ-claim".into())
                .spawn(move || {
                    coordinate(
                        &schedule_ctx,
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
        // A panic on the scheduling thread (SPEC W4's claim thread) is a broken invariant: the
        // pool and the publishers drain (their channels closed as the thread unwound), every
        // thread is joined, and `run` fails (W4).
        let schedule_panicked = schedule_thread.join().is_err();

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
        if schedule_panicked {
            // The cause keeps its name: operators' alerts match it.
            ctx.events.emit(
                "worker.error",
                json!({"code": "WORKER_UNAVAILABLE", "cause": "ClaimThreadPanicked"}),
            );
            return Err(std::io::Error::other(
                "the scheduling thread (occ-claim) panicked",
            ));
        }
        ctx.events.emit("worker.stopped", json!({}));
        Ok(())
    }
}

/// Reports a finished pass even when the pass panicked, unless its publication answered it
/// (`freed`: the scheduler freed its slot when it batched it).
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

/// The scheduling loop, on `occ-claim`: it asks the `Scheduler` what to do, executes it,
/// waits for the next event as long as the scheduler says (a wait that runs out is a poll),
/// and hands it every event that arrived, each burst as a whole, so that a burst of
/// notifications costs one claim. It decides nothing itself and never waits for the database;
/// it returns when the scheduler says `Exit`, or when the pool or the publishers are gone.
fn coordinate(
    ctx: &Context,
    options: &RuntimeOptions,
    jobs: &crossbeam_channel::Sender<Job>,
    publications: &crossbeam_channel::Sender<finalizer::Publication>,
    events: &Receiver<Event>,
    progress: &Progress,
) {
    let settings = Settings::new(
        options.concurrency,
        options.poll_interval,
        options.shutdown_grace,
        ctx.queue.lease,
    );
    let mut scheduler = Scheduler::<Threads>::new(settings);
    let mut effects = Effects {
        ctx,
        options,
        jobs,
        publications,
        progress,
        failures: Failures::default(),
    };
    loop {
        progress.tick();
        // A requested stop is seen before the next database wait, not after it.
        if progress.stopping() {
            let commands = scheduler.handle(scheduler::Event::Stop, Instant::now());
            if effects.execute(commands).is_break() {
                return;
            }
        }
        let wait = match effects.execute(scheduler.decide(Instant::now())) {
            ControlFlow::Continue(wait) => wait.unwrap_or(options.poll_interval),
            ControlFlow::Break(()) => return,
        };
        let first = match events.recv_timeout(wait) {
            Ok(event) => Some(event),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        for event in std::iter::once(first).chain(events.try_iter().map(Some)) {
            let event = effects.received(event);
            if effects
                .execute(scheduler.handle(event, Instant::now()))
                .is_break()
            {
                return;
            }
        }
    }
}

/// The scheduling thread's hands: it turns what arrives into the scheduler's events and
/// carries out the scheduler's commands on the channels, the leases and the event log.
struct Effects<'a> {
    ctx: &'a Context,
    options: &'a RuntimeOptions,
    jobs: &'a crossbeam_channel::Sender<Job>,
    publications: &'a crossbeam_channel::Sender<finalizer::Publication>,
    progress: &'a Progress,
    failures: Failures,
}

impl Effects<'_> {
    /// The scheduler's event for what arrived (`None`: the wait ran out). A publication's
    /// answer also reports its failures, or clears them when its claim worked, and registers
    /// the works it claimed, each trusted for one lease from when the claim was sent.
    fn received(&mut self, event: Option<Event>) -> scheduler::Event<Threads> {
        let published = match event {
            None => return scheduler::Event::Tick,
            Some(Event::Wake) => return scheduler::Event::Wake,
            Some(Event::Stop) => return scheduler::Event::Stop,
            Some(Event::Done { token }) => return scheduler::Event::PassEnded { token },
            Some(Event::Publish(unit)) => return scheduler::Event::Handover(*unit),
            Some(Event::Published(published)) => *published,
        };
        let (ctx, progress) = (self.ctx, self.progress);
        if let Some(e) = &published.recovery {
            self.failures.report(ctx, progress, e);
        }
        let claims = match published.claimed {
            Some(Ok((claims, sent))) => {
                self.failures.clear(progress);
                let lease = ctx.queue.lease;
                claims
                    .into_iter()
                    .map(|c| Job::new(c, sent, lease))
                    .collect()
            }
            Some(Err(e)) => {
                self.failures.report(ctx, progress, &e);
                Vec::new()
            }
            None => Vec::new(),
        };
        scheduler::Event::Published {
            reserved: published.reserved,
            claims,
            answers: published.answers,
        }
    }

    /// Carries out `commands` in order; returns the wait they asked for, or `Break` when the
    /// loop must end: the scheduler said `Exit`, or the pool or the publishers are gone (then
    /// nothing will report). The commands after one that failed are still carried out, so
    /// every answer is sent.
    fn execute(&self, commands: Vec<Command<Threads>>) -> ControlFlow<(), Option<Duration>> {
        let (mut wait, mut exit) = (None, false);
        for command in commands {
            match command {
                Command::Publish {
                    batch,
                    claim,
                    recover,
                } => {
                    let publication = finalizer::Publication {
                        batch,
                        claim,
                        recover,
                    };
                    exit |= self.publications.send(publication).is_err();
                    self.progress.tick();
                }
                Command::Answer { answer, next } => answer.send(next),
                Command::Run(job) => exit |= self.jobs.send(job).is_err(),
                Command::Stopping { in_flight } => self.ctx.events.emit(
                    "worker.stopping",
                    json!({"inFlight": in_flight, "graceMs": self.options.shutdown_grace.as_millis() as u64}),
                ),
                Command::Cancel(leases) => {
                    for lease in leases {
                        lease.cancel.cancel(LossCause::WorkerStopping);
                    }
                }
                Command::Wait(duration) => wait = Some(duration),
                Command::Exit => exit = true,
            }
        }
        if exit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(wait)
        }
    }
}

/// The failing claim and recovery statements: every failure is counted and turns
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
fn pass_error_fields(work: &serde_json::Value, report: &AnyReport) -> serde_json::Value {
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
fn failure_fields(fields: &mut serde_json::Value, ctx: &Context, report: &AnyReport) {
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
fn is_stop_yield(report: &AnyReport) -> bool {
    matches!(report.outcome, Outcome::Pending { .. })
        && matches!(
            report.code.as_str(),
            "AGENT_STOP_YIELDED" | "PREDECESSOR_STOP_YIELDED"
        )
}

/// A pass that ran on a worker thread: what it was (`pass`) and came to (`result`), for
/// `conclude`, and what became of its slot.
struct Ran {
    pass: RanPass,
    result: PassResult,
    /// Freed when its publication took the pass, with the next work for this thread.
    slot: Slot,
}

/// The claim a pass ran for and when it started.
struct RanPass {
    claim: Claim,
    lease: Arc<LeaseState>,
    started: Instant,
    /// Whether the pass is a revision's own reconcile, whose deploy timings are kept (Z9).
    deployment: bool,
}

/// What the reconciler said (`classified`) and the finalized report, which carries the
/// queue's decision (they differ at the attempt limit and the deadline); or why there is none.
type PassResult = Result<(Outcome, AnyReport), PassError>;

/// Runs one pass on a worker thread: its heartbeat, the reconcile and the finalization, which
/// waits for the publication. Returns the pass's answer and what became of its slot (with the
/// thread's next work when its publication claimed one); `conclude` says what happened.
fn run_pass(
    ctx: &Arc<Context>,
    registry: &Registry,
    records: &Records,
    finalizer: &Finalizer,
    heartbeat: &mut Heartbeat,
    job: Job,
) -> Ran {
    let Job { claim, lease } = job;
    let started = Instant::now();
    // Deploy timings follow a revision's own reconcile key only (SPEC Z9).
    let deployment = claim.operation == queue::Operation::RevisionReconcile
        && claim
            .revision_id
            .as_ref()
            .is_some_and(|r| claim.key == format!("agent_revision:{r}:reconcile"));
    if deployment {
        records.timings.lock().begin(&claim.key, started);
    }
    let service = match heartbeat.start(claim.clone(), lease.clone()) {
        Ok(service) => Some(service),
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
    let (result, slot) = match reconciler.reconcile(&pass).or_else(retry_report) {
        Ok(report) => {
            let classified = report.outcome;
            let finalized = finalizer.finalize(&pass, &lease, reconciler.clone(), report);
            (finalized.outcome.map(|r| (classified, r)), finalized.slot)
        }
        Err(e) => (Err(e), Slot::Held),
    };
    drop(service);
    let pass = RanPass {
        claim,
        lease,
        started,
        deployment,
    };
    Ran { pass, result, slot }
}

/// A reconcile that failed is retried (`DEPENDENCY_UNAVAILABLE`, with the error's class),
/// unless it lost its claim: then nothing may be published.
fn retry_report(e: PassError) -> Result<AnyReport, PassError> {
    if e.is_claim_loss() {
        return Err(e);
    }
    let mut report = AnyReport::retry("DEPENDENCY_UNAVAILABLE").at("reconcile");
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

/// Says how a pass ended: its metrics and its event (`worker.completed`, or
/// `worker.pass-interrupted` after giving the claim back at a stop, W4, or `worker.error`).
fn conclude(ctx: &Context, records: &Records, pass: &RanPass, result: PassResult) {
    let claim = &pass.claim;
    let operation = claim.operation.as_str();
    let elapsed = pass.started.elapsed();
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
    let (label, name) = match result {
        Ok(result) => return completed(ctx, records, pass, elapsed, fields, stop_yields, result),
        Err(e) if e.is_stopping() => {
            // W4: give the claim back at once instead of letting its lease run out; a lost or
            // expired claim (or an unreachable database) leaves recovery to do it.
            let released = ctx.pool.get().is_ok_and(|mut client| {
                queue::work_release(&mut *client, claim, LossCause::WorkerStopping.code()).is_ok()
            });
            fields["released"] = json!(released);
            fields["cause"] = json!("WorkerStopping");
            ("interrupted", "worker.pass-interrupted")
        }
        Err(e) if e.is_claim_loss() => {
            ctx.metrics
                .claims_lost
                .with_label_values(&[e.loss_code()])
                .inc();
            fields["code"] = json!("CLAIM_LOST");
            fields["cause"] = json!(e.loss_code());
            ("claim_lost", "worker.error")
        }
        Err(e) => {
            fields["code"] = json!("WORKER_UNAVAILABLE");
            fields["cause"] = json!(error_class(&e));
            ("error", "worker.error")
        }
    };
    ctx.metrics
        .passes
        .with_label_values(&[operation, label])
        .inc();
    ctx.events.emit(name, fields);
}

/// Says how a pass that published (or was refused by its publication) ended: `worker.completed`
/// (a draining stop's yield at most once a minute, Z5), `worker.pass-error` when it did not
/// succeed, its deploy timings (Z9), and the health beat (Z7).
fn completed(
    ctx: &Context,
    records: &Records,
    pass: &RanPass,
    elapsed: Duration,
    mut fields: serde_json::Value,
    settled_yields: Option<u64>,
    (classified, report): (Outcome, AnyReport),
) {
    let claim = &pass.claim;
    let outcome = report.outcome.as_str();
    ctx.metrics
        .passes
        .with_label_values(&[claim.operation.as_str(), outcome])
        .inc();
    // A draining stop says so on its first yield, then at most once a minute (Z5).
    let (stop_yields, due) = if is_stop_yield(&report) {
        let (n, due) = records
            .stop_yields
            .lock()
            .yielded(&claim.key, Instant::now());
        (Some(n), due)
    } else {
        (settled_yields, true)
    };
    if due {
        if report.outcome != Outcome::Success {
            ctx.events
                .emit("worker.pass-error", pass_error_fields(&fields, &report));
        }
        fields["operation"] = json!(claim.operation.event_name());
        fields["result"] = json!(classified.as_str());
        fields["outcome"] = json!(outcome);
        fields["code"] = json!(report.code);
        // SPEC Z8: what an operator does next about a permanent outcome.
        let hint = queue::hint_code(claim.operation, &report.code);
        if let (Outcome::Permanent, Some(hint)) = (report.outcome, hint) {
            fields["hintCode"] = json!(hint);
        }
        fields["timings"] = json!({"passMs": elapsed.as_millis() as u64});
        failure_fields(&mut fields, ctx, &report);
        if let Some(n) = stop_yields {
            fields["stopYields"] = json!(n);
        }
    }
    if pass.deployment {
        if let (true, Some(serde_json::Value::Object(timings))) =
            (due, finish_timings(records, pass, &report))
        {
            for (k, v) in timings {
                fields[k] = v;
            }
        }
    }
    if due {
        ctx.events.emit("worker.completed", fields);
    }
    // After every pass that published (SPEC Z7); a pass that lost its claim or its database
    // leaves the beat to the idle claims' cadence.
    records.health.beat(ctx, true);
}

/// Adds a revision's own reconcile to its deploy timings (Z9), which a terminal outcome ends;
/// returns the timing fields of its `worker.completed`.
fn finish_timings(
    records: &Records,
    pass: &RanPass,
    report: &AnyReport,
) -> Option<serde_json::Value> {
    let terminal = matches!(report.outcome, Outcome::Success | Outcome::Permanent);
    records.timings.lock().finish(
        &pass.claim.key,
        report.deploy.as_ref(),
        terminal,
        pass.lease.age(),
        Instant::now(),
    )
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
