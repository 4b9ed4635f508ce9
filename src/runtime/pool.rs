//! The pool (SPEC W1): the worker threads (`occ-work-N`, `OCC_WORKER_CONCURRENCY` of them),
//! each running one pass at a time (`run_pass`) with its own heartbeat thread, handing its
//! report over for publication and saying how the pass ended (`conclude`). A pool thread only
//! sends the scheduler's `Event`s (`PassEnded`, and `Handover` through the `Finalizer`); it
//! never claims, and it decides nothing about scheduling. The `Pool` owns its threads: closing
//! its job channel stops them, and dropping it joins them.

use super::finalizer::Event;
use super::finalizer::{Finalizer, Slot};
use super::lease::Heartbeat;
use super::records::Records;
use super::thread::{error_class, Job, Joined};
use crate::cancel::LossCause;
use crate::queue::{self, Claim, Operation};
use crate::reconcile::{AnyReport, Context, LeaseState, Outcome, Pass, PassError, Registry};
use crossbeam_channel::{Receiver, Sender};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The worker threads and their job channel; dropped, it closes the channel and joins them.
pub struct Pool {
    /// Above `threads` on purpose: fields drop in order, so the channel is closed (and every
    /// thread leaves its loop) before `threads` joins them; the other way round would wait for
    /// ever.
    jobs: Sender<Job>,
    threads: Vec<Joined>,
}

/// What every pool thread shares.
#[derive(Clone)]
struct Shared {
    ctx: Arc<Context>,
    registry: Arc<Registry>,
    records: Arc<Records>,
    finalizer: Finalizer,
    events: Sender<Event>,
}

impl Pool {
    /// Starts `concurrency` named pool threads. A thread that cannot be spawned is the error;
    /// those already started are stopped and joined as the half-built pool drops.
    pub fn spawn(
        concurrency: usize,
        ctx: &Arc<Context>,
        registry: &Arc<Registry>,
        records: &Arc<Records>,
        events: &Sender<Event>,
    ) -> std::io::Result<Pool> {
        let (jobs, jobs_rx) = crossbeam_channel::bounded::<Job>(concurrency);
        let mut pool = Pool {
            jobs,
            threads: Vec::with_capacity(concurrency),
        };
        let shared = Shared {
            ctx: ctx.clone(),
            registry: registry.clone(),
            records: records.clone(),
            finalizer: Finalizer::new(events.clone()),
            events: events.clone(),
        };
        for i in 0..concurrency {
            let (shared, jobs) = (shared.clone(), jobs_rx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("occ-work-{i}"))
                .spawn(move || serve(&shared, &jobs))?;
            pool.threads.push(Joined::new(thread));
        }
        Ok(pool)
    }

    /// Puts a claimed work on the job channel, for the first idle pool thread; false when
    /// every pool thread is gone.
    pub fn send(&self, job: Job) -> bool {
        self.jobs.send(job).is_ok()
    }
}

/// A pool thread's loop: runs the works the job channel and its publications' answers bring,
/// one at a time, until the job channel closes. Every pass reports its end, even one that
/// panicked (`DoneGuard`), unless its publication answered it.
fn serve(shared: &Shared, jobs: &Receiver<Job>) {
    let Shared {
        ctx,
        registry,
        records,
        finalizer,
        events,
    } = shared;
    // This worker's heartbeat thread, kept from one pass to the next.
    let mut heartbeat = Heartbeat::new(ctx.clone());
    // The next pass: the one the last answer brought, else the channel's.
    let mut next = None;
    while let Some(job) = next.take().or_else(|| jobs.recv().ok()) {
        let mut guard = DoneGuard {
            events,
            token: job.claim.token.clone(),
            freed: false,
        };
        // Taken from the pass before it is concluded, so that a panic while it is said loses
        // neither the freed slot nor the next pass.
        let mut slot = Slot::Held;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let ran = run_pass(ctx, registry, records, finalizer, &mut heartbeat, job);
            slot = ran.slot;
            conclude(ctx, records, &ran.pass, ran.result);
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
            let _ = self.events.send(Event::PassEnded {
                token: std::mem::take(&mut self.token),
            });
        }
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

/// The transient dependency a pass ended on, if any: the one it names, or the Compute
/// implementation.
fn failed_dependency<'a>(ctx: &'a Context, report: &AnyReport) -> Option<&'a str> {
    let failure = &report.failure;
    (failure.transient || failure.dependency.is_some()).then(|| {
        failure
            .dependency
            .unwrap_or_else(|| ctx.compute.implementation())
    })
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
    if let Some(dependency) = failed_dependency(ctx, report) {
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

/// Whether a report is a draining stop's yield (SPEC Z5): pending on `Wait::StopYield`; the
/// policy turns it into a retry when the yield ends.
fn is_stop_yield(report: &AnyReport) -> bool {
    report.outcome.is_stop_yield()
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
    // Every pass event names its work by its key, and its operation by the one name
    // `worker.completed` gives it (SPEC W7x), so adjacent lines agree.
    let mut fields = json!({
        "workId": claim.key,
        "attempt": claim.attempt,
        "operation": claim.operation.event_name(),
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
    ctx.metrics
        .pass_codes
        .with_label_values(&[claim.operation.as_str(), &report.code])
        .inc();
    if let Some(dependency) = failed_dependency(ctx, &report) {
        ctx.metrics
            .dependency_failures
            .with_label_values(&[dependency])
            .inc();
    }
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
        // SPEC G15: a deferral whose execution is unverified says the Harness state it
        // observed (a deferral stores no result data, so the event is where it is said).
        if let (Outcome::Pending { .. }, Some(state)) = (
            report.outcome,
            report
                .result_data
                .as_ref()
                .and_then(|d| d.get("harnessState")),
        ) {
            fields["harnessState"] = state.clone();
        }
    }
    // F32: deploy and stop durations from admission (the work's age by the database clock).
    let measured = match (claim.operation, report.outcome, report.code.as_str()) {
        (Operation::RevisionReconcile, Outcome::Success, "REVISION_ACTIVATED") => Some("deploy"),
        (Operation::AgentStop, Outcome::Success, code) if code != "STOP_SUPERSEDED" => Some("stop"),
        _ => None,
    };
    if let Some(operation) = measured {
        ctx.metrics
            .agent_operation_duration
            .with_label_values(&[operation])
            .observe(pass.lease.age().as_secs_f64());
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
