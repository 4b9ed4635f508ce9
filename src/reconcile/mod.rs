//! The dispatch seam: one `Reconciler` per work operation, the `Pass` it runs in, and the
//! policy that turns what happened into a queue transition.
//!
//! A reconciler says *what happened* (`Report`); `resolve` decides retry, defer or fail from
//! the outcome, the attempt count and the work's database age; `finalize` publishes the
//! resolved report, the reconciler's lifecycle writes and the queue transition in one
//! claim-fenced transaction. Nothing here opens a socket; reconcilers reach infrastructure
//! only through `Context::compute`.

use crate::cancel::{CancelToken, Cancelled, LossCause};
use crate::compute::{
    ComputeDriver, ComputeError, ComputeErrorKind, RequestDiagnostic, RuntimeFailure,
};
use crate::db::{DbError, Pool, PooledClient};
use crate::events::Events;
use crate::iam::{Decision, Request};
use crate::metrics::Metrics;
use crate::queue::{self, Claim, Operation, QueueError, QueueOptions};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod agent;
pub mod namespace;
pub mod probe;
pub mod publish;
pub mod revision;
pub mod revision_sources;
pub mod sandbox_policy;
pub mod subnets;
pub mod withdrawal;

/// Everything a pass may use, shared by every worker thread.
pub struct Context {
    pub pool: Pool,
    pub compute: Arc<dyn ComputeDriver>,
    pub installation_id: String,
    pub queue: QueueOptions,
    pub convergence_timeout: Duration,
    pub events: Events,
    pub metrics: Metrics,
    /// The Installation's Sandbox Driver and egress ceiling (SPEC S1, S3).
    pub sandbox: crate::installation::SandboxSelection,
    /// The Installation's Credential Gateway id, when one is selected (SPEC §13): the owner
    /// id a gateway-owned source must name.
    pub credential_gateway: Option<String>,
}

/// What a reconciler observed, before policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Convergence is pending: defer, refunding the attempt (Q8).
    Pending {
        recheck: Duration,
    },
    /// A dependency failed: retry with backoff, spending the attempt (Q7).
    Retry,
    /// Never retried automatically (Q9).
    Permanent,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Pending { .. } => "pending",
            Outcome::Retry => "retry",
            Outcome::Permanent => "permanent",
        }
    }
}

/// An IAM refusal (N5, R2, A1, A2): the request and its decision, audited as an
/// `authorization_denial`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub request: Request,
    pub decision: Decision,
}

impl Denial {
    /// The request and the decision.
    pub fn evidence(&self) -> Value {
        json!({"request": self.request, "decision": self.decision})
    }

    /// The refusal's audit details, as an Agent denial records them.
    pub fn details(&self) -> Value {
        json!({ "denial": self.evidence() })
    }
}

/// What a pass did, typed per reconciler (STYLE 10): its `publish` matches on it, so a new
/// fact that is not published does not compile. Every report built outside a reconciler (a
/// Compute failure, a retried database error) is `Plain`.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Facts {
    /// Nothing beyond the outcome and its code.
    #[default]
    Plain,
    /// Refused by IAM before any effect.
    Denied(Denial),
    Namespace(namespace::NamespaceFacts),
    Stop(agent::StopFacts),
    Revision(revision::RevisionFacts),
    SandboxPolicy(sandbox_policy::PolicyFacts),
    /// A credential withdrawal's attempts (SPEC E4-E12).
    Withdrawal(withdrawal::WithdrawalFacts),
}

impl Facts {
    /// The broken invariant of a report carrying another reconciler's facts.
    pub fn foreign(&self, reconciler: &str) -> PassError {
        PassError::Invariant(format!("the {reconciler} reconciler was handed {self:?}"))
    }
}

/// Where a pass failed, retried or deferred, for its `worker.pass-error` line: the step
/// (`prepare`, `activate`, `stop`, …) and, after a Compute error, its class, HTTP status and
/// provider reason. Never provider free text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    pub step: Option<&'static str>,
    pub class: Option<String>,
    pub status: Option<u16>,
    pub reason: Option<String>,
    /// The failure was a transient dependency's (SPEC Z12: `dependency` and `cause`).
    pub transient: bool,
    /// The dependency that failed, when it is not the Compute Driver (`database`).
    pub dependency: Option<&'static str>,
    /// The driver's request diagnostic (SPEC Z12).
    pub request: Option<RequestDiagnostic>,
    /// The class of the first cleanup that failed beside the failure (SPEC Z12).
    pub cleanup_class: Option<&'static str>,
    /// The class of a yielded predecessor stop that could not be finished before the
    /// deployment ended (SPEC Z5).
    pub predecessor_stop: Option<String>,
    /// The driver's bounded description of a failed Namespace observation (SPEC Z10).
    pub namespace_reason: Option<String>,
    /// The address the driver could not reach (`scheme://host:port`), for a transport failure.
    pub endpoint: Option<String>,
}

/// What a deployment pass spent where, for the deploy timings of `worker.completed` (SPEC Z9): the runtime adds passes of one reconcile key up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeployPhases {
    /// Predecessor stops and preparation in this pass.
    pub prepare: Duration,
    /// When this pass observed the revision unready.
    pub unready_at: Option<Instant>,
    /// When this pass observed it ready.
    pub ready_at: Option<Instant>,
}

/// What happened in a pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub outcome: Outcome,
    pub code: String,
    pub result_data: Option<Value>,
    /// The refusal that made a candidate stop before a failure was published (R9).
    pub refusal: Option<String>,
    /// A runtime failure seen while pending, kept for the convergence-deadline result (R5).
    pub runtime_failure: Option<RuntimeFailure>,
    /// The pass is pending on a failing dependency: past the deadline the work fails naming
    /// it, not the deadline.
    pub dependency_failure: bool,
    /// The pending outcome is a wait the convergence deadline does not bound: a draining stop
    /// (SPEC Z5) and any deferral of Agent stop or delete work.
    pub deadline_exempt: bool,
    /// The pending outcome is a draining stop's yield (SPEC Z5): exempt from the deadline
    /// while the work is younger than it; past it, a dependency retry within the attempt
    /// budget, so a drain that never ends cannot hold the lane forever.
    pub stop_yield: bool,
    /// Whether a deferral records attempt evidence (a repeated identical observation need not).
    pub record_evidence: bool,
    /// Where the pass stopped short of success (diagnostics only; never decides an outcome).
    pub failure: Failure,
    /// What the pass did, typed per reconciler, for its own `settle` and `publish`; policy
    /// never reads it.
    pub facts: Facts,
    /// Where a deployment pass spent its time (SPEC Z9); diagnostics only.
    pub deploy: Option<DeployPhases>,
    /// The reconciler already published this outcome in its own claim-fenced transaction and
    /// the work row no longer exists (an Agent deletion removes its own work, A2): `finalize`
    /// resolves the report but writes nothing and makes no queue transition. Only a successful
    /// outcome may set it.
    pub already_published: bool,
    /// The code a retry fails with once the attempt budget is spent, when it is not the
    /// retry's own (a permissions refusal retries as `DEPENDENCY_UNAVAILABLE` and fails as
    /// the refusal it kept meeting).
    pub exhausted_code: Option<String>,
}

impl Report {
    pub fn new(outcome: Outcome, code: &str) -> Report {
        Report {
            outcome,
            code: code.to_string(),
            result_data: None,
            refusal: None,
            runtime_failure: None,
            dependency_failure: false,
            deadline_exempt: false,
            stop_yield: false,
            record_evidence: true,
            failure: Failure::default(),
            facts: Facts::Plain,
            deploy: None,
            already_published: false,
            exhausted_code: None,
        }
    }

    pub fn success(code: &str) -> Report {
        Report::new(Outcome::Success, code)
    }

    pub fn pending(code: &str, recheck: Duration) -> Report {
        Report::new(Outcome::Pending { recheck }, code)
    }

    pub fn retry(code: &str) -> Report {
        Report::new(Outcome::Retry, code)
    }

    pub fn permanent(code: &str) -> Report {
        Report::new(Outcome::Permanent, code)
    }

    pub fn with_facts(mut self, facts: Facts) -> Report {
        self.facts = facts;
        self
    }

    /// Names the step the pass stopped at (keeps an earlier one).
    pub fn at(mut self, step: &'static str) -> Report {
        self.failure.step.get_or_insert(step);
        self
    }

    /// Records the Compute error behind this report: class, status and one-word reason.
    pub fn with_compute_error(mut self, e: &ComputeError) -> Report {
        self.failure.class = Some(e.class().to_string());
        self.failure.status = e.status();
        self.failure.reason = e
            .reason()
            .filter(|r| r.len() <= 64 && r.chars().all(|c| c.is_ascii_alphabetic()))
            .map(String::from);
        self.failure.transient = e.is_transient();
        self.failure.request = e.request().cloned();
        self.failure.cleanup_class = e.cleanup_class();
        self.failure.endpoint = e.endpoint().map(String::from);
        self
    }

    pub fn with_result(mut self, data: Value) -> Report {
        self.result_data = Some(data);
        self
    }
}

/// Why a pass ended without a report of its own.
#[derive(Debug)]
pub enum PassError {
    /// The claim is gone or the pass was cancelled: publish nothing (W3).
    Lost(LossCause),
    /// A finalizing statement found no live claim (Q6).
    ClaimLost,
    Db(DbError),
    Compute(ComputeError),
    /// A broken invariant in persisted state.
    Invariant(String),
}

impl PassError {
    /// Whether the claim is gone (no publication is possible or allowed).
    pub fn is_claim_loss(&self) -> bool {
        matches!(self, PassError::Lost(_) | PassError::ClaimLost)
            || matches!(self, PassError::Compute(e) if matches!(e.kind(), ComputeErrorKind::Cancelled(_)))
    }

    /// The loss cause's code, for events and metrics.
    pub fn loss_code(&self) -> &'static str {
        match self {
            PassError::Lost(cause) => cause.code(),
            PassError::Compute(e) => match e.kind() {
                ComputeErrorKind::Cancelled(Cancelled(cause)) => cause.code(),
                _ => "CLAIM_LOST",
            },
            _ => "CLAIM_LOST",
        }
    }

    /// Whether the pass was interrupted by a stopping worker.
    pub fn is_stopping(&self) -> bool {
        self.loss_code() == LossCause::WorkerStopping.code()
    }
}

impl fmt::Display for PassError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PassError::Lost(cause) => write!(f, "claim lost: {cause}"),
            PassError::ClaimLost => write!(f, "claim lost"),
            PassError::Db(e) => write!(f, "{e}"),
            PassError::Compute(e) => write!(f, "{e}"),
            PassError::Invariant(m) => write!(f, "invariant broken: {m}"),
        }
    }
}

impl std::error::Error for PassError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent: their `Display` is the wrapped error's own.
            PassError::Db(e) => e.source(),
            PassError::Compute(e) => e.source(),
            PassError::Lost(_) | PassError::ClaimLost | PassError::Invariant(_) => None,
        }
    }
}

impl From<Cancelled> for PassError {
    fn from(c: Cancelled) -> PassError {
        PassError::Lost(c.0)
    }
}

impl From<QueueError> for PassError {
    fn from(e: QueueError) -> PassError {
        match e {
            QueueError::ClaimLost => PassError::ClaimLost,
            QueueError::Db(e) => PassError::Db(e),
        }
    }
}

impl From<DbError> for PassError {
    fn from(e: DbError) -> PassError {
        PassError::Db(e)
    }
}

impl From<postgres::Error> for PassError {
    fn from(e: postgres::Error) -> PassError {
        PassError::Db(DbError::Query(e))
    }
}

impl From<r2d2::Error> for PassError {
    fn from(e: r2d2::Error) -> PassError {
        PassError::Db(DbError::from(e))
    }
}

impl From<ComputeError> for PassError {
    fn from(e: ComputeError) -> PassError {
        match e.kind() {
            ComputeErrorKind::Cancelled(Cancelled(cause)) => PassError::Lost(*cause),
            _ => PassError::Compute(e),
        }
    }
}

/// The lease bookkeeping shared by a pass and its heartbeat thread.
pub struct LeaseState {
    pub cancel: CancelToken,
    /// (when the last confirming answer arrived, the database age it reported in ms).
    age_anchor: Mutex<(Instant, i64)>,
    /// Until when the last confirmed lease is trusted (anchored at when its renewal was sent).
    trusted_until: Mutex<Instant>,
    /// Renewals that failed (database error) since the last confirmed one.
    failed_renewals: std::sync::atomic::AtomicU32,
}

impl LeaseState {
    pub fn new(claim: &Claim, claimed_sent_at: Instant, lease: Duration) -> LeaseState {
        LeaseState {
            cancel: CancelToken::new(claimed_sent_at + lease),
            age_anchor: Mutex::new((Instant::now(), claim.age_ms)),
            trusted_until: Mutex::new(claimed_sent_at + lease),
            failed_renewals: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Renews the lease once (W2, W3). The lease is trusted from when the renewal was *sent*;
    /// an answer that arrives after the last confirmed lease ran out proves nothing and loses
    /// the claim (`CLAIM_RENEWAL_LATE`), and a refusal or failure that arrives after it is a
    /// lapse (`CLAIM_LEASE_LAPSED`): the database refused because the lease ran out while the
    /// renewal waited, not because another worker took the claim.
    pub fn renew(
        &self,
        client: &mut impl crate::db::GenericClient,
        claim: &Claim,
        options: &QueueOptions,
        events: &Events,
    ) -> Result<(), PassError> {
        self.cancel.check()?;
        let sent = Instant::now();
        let answer = queue::work_heartbeat(client, claim, options);
        let now = Instant::now();
        let lapsed = now >= *self.trusted_until.lock();
        let cause = match answer {
            Ok(_) if lapsed || now >= sent + options.lease => {
                events.emit(
                    "worker.claim-renewal-warning",
                    json!({
                        "workId": claim.id, "key": claim.key, "code": "CLAIM_RENEWAL_LATE",
                        "durationMs": (now - sent).as_millis() as u64,
                    }),
                );
                LossCause::RenewalLate
            }
            Ok(age_ms) => {
                {
                    let mut trusted = self.trusted_until.lock();
                    if sent + options.lease > *trusted {
                        *trusted = sent + options.lease;
                    }
                }
                self.cancel.confirm_lease(sent + options.lease);
                *self.age_anchor.lock() = (now, age_ms);
                self.failed_renewals
                    .store(0, std::sync::atomic::Ordering::SeqCst);
                return Ok(());
            }
            Err(_) if lapsed => LossCause::LeaseLapsed,
            Err(QueueError::ClaimLost) => LossCause::RenewalRefused,
            Err(QueueError::Db(_)) => return self.renewal_failed(claim, events),
        };
        self.cancel.cancel(cause);
        // The first cause wins: a lapse the pass already saw stays the reported cause.
        Err(PassError::Lost(self.cancel.cause().unwrap_or(cause)))
    }

    /// A renewal that could not be made (database error, no connection). The first one since
    /// the last confirmation is only a warning: the lease is still trusted until it runs out
    /// (the token lapses by itself), and the next renewal, a third of a lease later, retries it
    /// within the lease. A second one in a row cancels the pass (`CLAIM_RENEWAL_FAILED`, W3).
    pub fn renewal_failed(&self, claim: &Claim, events: &Events) -> Result<(), PassError> {
        self.cancel.check()?;
        let failures = self
            .failed_renewals
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        if failures == 1 {
            events.emit(
                "worker.claim-renewal-warning",
                json!({
                    "workId": claim.id, "key": claim.key, "code": "CLAIM_RENEWAL_FAILED",
                    "retrying": true,
                }),
            );
            return Ok(());
        }
        self.cancel.cancel(LossCause::RenewalFailed);
        Err(PassError::Lost(
            self.cancel.cause().unwrap_or(LossCause::RenewalFailed),
        ))
    }

    /// The work's age by the database clock, advanced by this process's monotonic clock since
    /// the last answer. It trails the database's age, so it never ends work early.
    pub fn age(&self) -> Duration {
        let (at, age_ms) = *self.age_anchor.lock();
        Duration::from_millis(age_ms.max(0) as u64) + at.elapsed()
    }
}

/// One pass over one claimed work.
pub struct Pass<'a> {
    pub claim: &'a Claim,
    pub ctx: &'a Context,
    pub lease: &'a LeaseState,
}

impl<'a> Pass<'a> {
    pub fn cancel(&self) -> &CancelToken {
        &self.lease.cancel
    }

    /// A pooled connection.
    pub fn db(&self) -> Result<PooledClient, PassError> {
        self.cancel().check()?;
        Ok(self.ctx.pool.get()?)
    }

    /// Renews the claim before an external effect (W2): consecutive short effects never
    /// starve renewal. `Err` once the claim is lost.
    pub fn before_effect(&self) -> Result<(), PassError> {
        let mut client = self.db()?;
        self.lease
            .renew(&mut *client, self.claim, &self.ctx.queue, &self.ctx.events)
    }

    /// The work's age by the database clock (Q12).
    pub fn age(&self) -> Duration {
        self.lease.age()
    }

    /// `report` as the policy (`resolve`) decides it for this pass: its attempt, the attempt
    /// budget, its age and the convergence deadline.
    pub fn resolve(&self, report: Report) -> Report {
        resolve(
            report,
            self.claim.attempt,
            self.ctx.queue.max_attempts,
            self.age(),
            self.ctx.convergence_timeout,
        )
    }

    /// Runs `f` in a transaction that first locks the live claim; commits only if the claim is
    /// still ours and the pass was not cancelled (Q6). Zero rows: `ClaimLost`.
    pub fn fenced<T>(
        &self,
        f: impl FnOnce(&mut crate::db::Tx<'_>) -> Result<T, PassError>,
    ) -> Result<T, PassError> {
        let mut client = self.db()?;
        let mut tx = client.transaction()?;
        queue::work_lock_claim(&mut tx, self.claim)?;
        let out = f(&mut tx)?;
        self.cancel().check()?;
        tx.commit()?;
        Ok(out)
    }
}

/// One reconciler per operation. Reconcilers are idempotent: a pass may run again after a lost
/// lease, and every effect must tolerate having happened already.
pub trait Reconciler: Send + Sync {
    /// Observes, reauthorizes and acts; says what happened.
    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError>;

    /// Inside the fenced finalizing transaction, before `publish`: a last look at the rows the
    /// outcome depends on, under lock, which may rewrite the resolved report (an Agent stop a
    /// later deployment superseded while it ran). By default the report stands.
    fn settle(
        &self,
        _tx: &mut crate::db::Tx<'_>,
        _pass: &Pass<'_>,
        report: Report,
    ) -> Result<Report, PassError> {
        Ok(report)
    }

    /// Inside the fenced finalizing transaction: writes the lifecycle state and audit evidence
    /// that go with the resolved `report`. The queue transition follows in the same
    /// transaction.
    fn publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError>;
}

/// The reconcilers by operation. An operation without one fails its work permanently with
/// `RECONCILER_UNAVAILABLE`; it never silently succeeds.
#[derive(Clone, Default)]
pub struct Registry {
    by_operation: HashMap<Operation, Arc<dyn Reconciler>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn with(mut self, operation: Operation, reconciler: Arc<dyn Reconciler>) -> Registry {
        self.by_operation.insert(operation, reconciler);
        self
    }

    pub fn get(&self, operation: Operation) -> Arc<dyn Reconciler> {
        self.by_operation
            .get(&operation)
            .cloned()
            .unwrap_or_else(|| Arc::new(Unsupported))
    }
}

/// The reconciler of an operation this build does not handle.
pub struct Unsupported;

impl Reconciler for Unsupported {
    fn reconcile(&self, _pass: &Pass<'_>) -> Result<Report, PassError> {
        Ok(Report::permanent("RECONCILER_UNAVAILABLE"))
    }

    fn publish(
        &self,
        _tx: &mut crate::db::Tx<'_>,
        _pass: &Pass<'_>,
        _report: &Report,
    ) -> Result<(), PassError> {
        Ok(())
    }
}

/// The policy: what a report becomes given the attempt budget and the convergence deadline.
pub fn resolve(
    report: Report,
    attempt: i32,
    max_attempts: i32,
    age: Duration,
    convergence_timeout: Duration,
) -> Report {
    let deadline_applies = report.refusal.is_none() && !report.deadline_exempt;
    match report.outcome {
        // A stop still draining when the work reaches the deadline stops yielding: it retries
        // as a failing dependency, spending the attempt, and fails at the budget's end.
        Outcome::Pending { .. } if report.stop_yield && age >= convergence_timeout => {
            let outcome = if attempt >= max_attempts {
                Outcome::Permanent
            } else {
                Outcome::Retry
            };
            Report {
                outcome,
                code: "DEPENDENCY_UNAVAILABLE".into(),
                record_evidence: true,
                stop_yield: false,
                deadline_exempt: false,
                ..report
            }
        }
        // A refused candidate whose stop is still pending keeps waiting past the deadline:
        // the work never ends with the refused candidate running (R9). Its failure is
        // published once the stop succeeds.
        Outcome::Pending { .. }
            if age >= convergence_timeout && deadline_applies && report.dependency_failure =>
        {
            Report {
                outcome: Outcome::Permanent,
                ..report
            }
        }
        Outcome::Pending { .. } if age >= convergence_timeout && deadline_applies => {
            let mut data = json!({ "timeoutMs": convergence_timeout.as_millis() as u64 });
            if let Some(failure) = &report.runtime_failure {
                data["runtimeFailure"] = json!(failure);
            }
            Report {
                outcome: Outcome::Permanent,
                code: "CONVERGENCE_DEADLINE_EXCEEDED".into(),
                result_data: Some(data),
                ..report
            }
        }
        Outcome::Retry if attempt >= max_attempts => Report {
            outcome: Outcome::Permanent,
            code: report.exhausted_code.clone().unwrap_or(report.code),
            ..report
        },
        _ => report,
    }
}

/// The resolved report published with its queue transition, fenced by the claim: a batch of
/// one through the worker's own publication (`publish::finalize_batch`).
pub fn finalize(
    pass: &Pass<'_>,
    reconciler: &dyn Reconciler,
    report: Report,
) -> Result<Report, PassError> {
    match finalize_resolved(pass, report) {
        Resolved::Published(published) => Ok(published),
        Resolved::Publish(resolved) => {
            let item = publish::BatchItem {
                pass: Pass {
                    claim: pass.claim,
                    ctx: pass.ctx,
                    lease: pass.lease,
                },
                reconciler,
                resolved,
            };
            publish::finalize_batch(pass.ctx, vec![item])
                .pop()
                .unwrap_or_else(|| Err(PassError::Invariant("a batch of one answered none".into())))
        }
    }
}

/// A pass's report after the policy.
pub enum Resolved {
    /// To publish with its queue transition (`finalize_in`).
    Publish(Report),
    /// The reconciler already published it (an Agent deletion): no queue transition follows.
    Published(Report),
}

/// The policy applied to a pass's report.
pub fn finalize_resolved(pass: &Pass<'_>, report: Report) -> Resolved {
    let resolved = pass.resolve(report);
    if resolved.already_published && resolved.outcome == Outcome::Success {
        return Resolved::Published(resolved);
    }
    Resolved::Publish(resolved)
}

/// Inside `tx`: locks the live claim (Q6), settles and publishes the resolved report and makes
/// its queue transition; `ClaimLost` when the claim is no longer ours, and the pass's
/// cancellation is checked last. The caller commits.
pub fn finalize_in(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    reconciler: &dyn Reconciler,
    resolved: Report,
) -> Result<Report, PassError> {
    pass.cancel().check()?;
    queue::work_lock_claim(tx, pass.claim)?;
    let resolved = settle_and_publish(tx, pass, reconciler, resolved)?;
    transition(tx, pass, &resolved)?;
    pass.cancel().check()?;
    Ok(resolved)
}

/// Under the locked live claim: the reconciler's last look (`settle`) and its publication.
pub fn settle_and_publish(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    reconciler: &dyn Reconciler,
    resolved: Report,
) -> Result<Report, PassError> {
    let resolved = reconciler.settle(tx, pass, resolved)?;
    reconciler.publish(tx, pass, &resolved)?;
    Ok(resolved)
}

/// Under the locked live claim: the queue transition of a settled report.
pub fn transition(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    resolved: &Report,
) -> Result<(), PassError> {
    let claim = pass.claim;
    match resolved.outcome {
        Outcome::Success => {
            queue::work_complete(tx, claim, &resolved.code, resolved.result_data.as_ref())?
        }
        Outcome::Pending { recheck } => queue::work_defer(
            tx,
            claim,
            &resolved.code,
            recheck,
            resolved.record_evidence,
            resolved.refusal.as_deref(),
        )?,
        Outcome::Retry => {
            queue::work_retry(tx, claim, &resolved.code, &pass.ctx.queue)?;
        }
        Outcome::Permanent => queue::work_fail(
            tx,
            claim,
            &resolved.code,
            resolved.result_data.as_ref(),
            resolved.refusal.as_deref(),
        )?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_past_the_deadline_fails_with_its_timeout() {
        let mut report = Report::pending("REVISION_INCOMPLETE", Duration::from_secs(1));
        report.runtime_failure = Some(RuntimeFailure::new("CRASH_LOOP"));
        let r = resolve(
            report,
            1,
            5,
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(r.outcome, Outcome::Permanent);
        assert_eq!(r.code, "CONVERGENCE_DEADLINE_EXCEEDED");
        assert_eq!(
            r.result_data,
            Some(json!({"timeoutMs": 5000, "runtimeFailure": {"code": "CRASH_LOOP"}}))
        );
    }

    #[test]
    fn a_retry_out_of_attempts_fails_with_its_exhausted_code() {
        // A refusal on permissions retries as DEPENDENCY_UNAVAILABLE and fails as itself.
        let mut report = Report::retry("DEPENDENCY_UNAVAILABLE");
        report.exhausted_code = Some("KUBERNETES_FORBIDDEN".into());
        let early = resolve(report.clone(), 4, 5, Duration::ZERO, Duration::from_secs(5));
        assert_eq!(
            (early.outcome, early.code.as_str()),
            (Outcome::Retry, "DEPENDENCY_UNAVAILABLE")
        );
        let last = resolve(report, 5, 5, Duration::ZERO, Duration::from_secs(5));
        assert_eq!(
            (last.outcome, last.code.as_str()),
            (Outcome::Permanent, "KUBERNETES_FORBIDDEN")
        );
    }

    #[test]
    fn a_dependency_still_failing_at_the_deadline_is_named() {
        // SPEC R10: the deadline names the failing dependency.
        let mut report = Report::pending("DEPENDENCY_UNAVAILABLE", Duration::from_secs(1));
        report.dependency_failure = true;
        let r = resolve(
            report,
            1,
            5,
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(r.outcome, Outcome::Permanent);
        assert_eq!(r.code, "DEPENDENCY_UNAVAILABLE");
        assert_eq!(r.result_data, None);
    }

    #[test]
    fn a_pending_refused_candidate_stop_outlives_the_deadline() {
        let mut report = Report::pending("REFUSED_CANDIDATE_STOP_PENDING", Duration::from_secs(1));
        report.refusal = Some("AUTHORIZATION_DENIED".into());
        let r = resolve(
            report.clone(),
            1,
            5,
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(r, report);
    }

    #[test]
    fn a_draining_stop_yields_before_the_deadline_and_retries_within_the_budget_after() {
        // SPEC Z5: a stop yield is pending while the work is younger than
        // the deadline; past it, a dependency retry that spends the attempt, and a failure at
        // the budget's end, so the lane moves on.
        let mut report = Report::pending("AGENT_STOP_YIELDED", Duration::from_secs(1));
        report.deadline_exempt = true;
        report.stop_yield = true;
        report.record_evidence = false;
        let young = resolve(
            report.clone(),
            1,
            5,
            Duration::from_secs(4),
            Duration::from_secs(5),
        );
        assert_eq!(young, report);
        let old = resolve(
            report.clone(),
            2,
            5,
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(
            (old.outcome, old.code.as_str(), old.record_evidence),
            (Outcome::Retry, "DEPENDENCY_UNAVAILABLE", true)
        );
        let last = resolve(
            report,
            5,
            5,
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(
            (last.outcome, last.code.as_str()),
            (Outcome::Permanent, "DEPENDENCY_UNAVAILABLE")
        );
    }

    #[test]
    fn retry_at_the_attempt_limit_is_permanent() {
        let r = resolve(
            Report::retry("X"),
            5,
            5,
            Duration::ZERO,
            Duration::from_secs(5),
        );
        assert_eq!(r.outcome, Outcome::Permanent);
        let r = resolve(
            Report::retry("X"),
            4,
            5,
            Duration::ZERO,
            Duration::from_secs(5),
        );
        assert_eq!(r.outcome, Outcome::Retry);
    }
}
