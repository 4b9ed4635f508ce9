//! The repository-cleanup reconciler (SPEC G1, G3-G5): the durable retirement of one
//! revision's runtime that a failed deployment registered (SPEC Z3, G2). It binds the Agent's
//! objects, stops the revision, compare-and-clears an active pointer that still names it, and
//! settles; a cleanup it cannot settle waits with its cause, on a cadence that grows with age,
//! and says `worker.repository-cleanup-warning` once per cause.
//!
//! It never fails by itself and never retries: every outcome but a malformed target is success
//! or a deferral that refunds the attempt (SPEC G4). It never touches a newer active revision,
//! the Agent's desired run state, or any revision other than its own.

use super::dispatch::Reconciler;
use super::pass::{Pass, PassError};
use super::report::{Facts, Outcome, Wait};
use super::rows::{load_agent, load_revisions};
use super::steps::effect;
use crate::compute::{ComputeError, ComputeErrorKind, RepositoryWithdrawal};
use crate::queue::CleanupKind;
use parking_lot::Mutex;
use serde_json::json;
use std::collections::VecDeque;
use std::time::Duration;

/// This reconciler's reports carry its own facts.
type Report = super::report::Report<CleanupFacts>;

const NAMESPACE_LOCK: &str = include_str!("../../sql/queries/namespace_lock.sql");
const AGENT_LOCK: &str = include_str!("../../sql/queries/agent_lock.sql");
const CLEAR_ACTIVE: &str = include_str!("../../sql/queries/agent_clear_active.sql");
const DELETION_WAKE: &str = include_str!("../../sql/queries/agent_deletion_wake.sql");

/// A settled cleanup's code (SPEC G3).
pub const COMPLETE: &str = "REPOSITORY_CLEANUP_COMPLETE";
/// An unsettled cleanup's code (SPEC G3, G4).
pub const PENDING: &str = "REPOSITORY_CLEANUP_PENDING";
/// The code of the stalled-cleanup warning (SPEC G5).
pub const STALLED: &str = "REPOSITORY_CLEANUP_STALLED";

/// The cleanup interval without a sender (SPEC G6): 30 s.
pub const CLEANUP_INTERVAL: Duration = crate::installation::DEFAULT_CLEANUP_INTERVAL;

/// The cleanup interval (SPEC G6): the selected sender's maintenance interval, else 30 s.
pub fn cleanup_interval(pass: &Pass<'_>) -> Duration {
    pass.ctx
        .repository_sender
        .as_ref()
        .map_or(CLEANUP_INTERVAL, |s| s.cleanup_interval())
}

/// SPEC G3: an expiry cleanup whose withdrawal from the runtime is still pending.
pub const WITHDRAWAL_UNCONFIRMED: &str = "REPOSITORY_WITHDRAWAL_UNCONFIRMED";

/// SPEC G3: an unsettled cleanup without another cause whose sender could not confirm a
/// session's disposal.
pub const ATTEMPT_INVALIDATED: &str = "REPOSITORY_ATTEMPT_INVALIDATED";

/// The longest recheck of a cleanup that waits with a cause (SPEC G4).
pub const CLEANUP_RECHECK_MAX: Duration = Duration::from_secs(600);

/// How many works' last causes a process remembers (SPEC G5).
pub const REMEMBERED_CAUSES: usize = 4096;

/// SPEC G4: a pending cleanup comes back after the cleanup `interval` while a session is
/// `closing` or no cause is known, else after max(interval, min(600 s, round(age / 40))), the
/// work's age by the database clock.
pub fn cleanup_recheck(
    interval: Duration,
    age: Duration,
    cause_known: bool,
    closing: bool,
) -> Duration {
    if closing || !cause_known {
        return interval;
    }
    let grown = Duration::from_millis(((age.as_millis() as f64) / 40.0).round() as u64);
    interval.max(grown.min(CLEANUP_RECHECK_MAX))
}

/// The revision a pass stopped, for the compare-and-clear of its active pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stopped {
    pub revision_id: String,
    pub service_principal_id: String,
}

/// What a cleanup pass did (SPEC G3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupFacts {
    /// The revision whose runtime this pass stopped.
    pub stopped: Option<Stopped>,
    /// Why the cleanup is not settled (SPEC G3 step 4).
    pub cause: Option<String>,
    /// A session is still `closing` or `invalidated` (SPEC G3 step 5): not settled.
    pub sessions_pending: bool,
    /// A session is still `closing` (SPEC G4 keeps the interval).
    pub closing: bool,
    /// SPEC G14's hand-off: the expired revision's runtime must go; `publish` registers its
    /// `terminal-runtime` cleanup.
    pub retire_runtime: bool,
}

/// The causes a process last warned of, per cleanup work (SPEC G5): at most
/// `REMEMBERED_CAUSES`, the oldest forgotten first (forgetting costs one repeated warning).
#[derive(Debug, Default)]
pub struct CauseMemory {
    order: VecDeque<(String, String)>,
    capacity: usize,
}

impl CauseMemory {
    pub fn new(capacity: usize) -> CauseMemory {
        CauseMemory {
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Records `cause` for the work `key` (`None`: settled, forgotten); whether it is new, so
    /// that it is said.
    pub fn note(&mut self, key: &str, cause: Option<&str>) -> bool {
        let known = self.order.iter().position(|(k, _)| k == key);
        let Some(cause) = cause else {
            if let Some(i) = known {
                self.order.remove(i);
            }
            return false;
        };
        if let Some(i) = known {
            if self.order[i].1 == cause {
                return false;
            }
            self.order.remove(i);
        }
        self.order.push_back((key.to_string(), cause.to_string()));
        if self.order.len() > self.capacity {
            self.order.pop_front();
        }
        true
    }
}

/// SPEC G3 step 4: the cause of a failed step. A Compute error's code, else its class; a
/// draining stop yields (`AGENT_STOP_YIELDED`); a lifecycle hook's refusal is its code.
pub fn compute_cause(e: &ComputeError) -> String {
    match e.kind() {
        ComputeErrorKind::Draining => "AGENT_STOP_YIELDED".into(),
        ComputeErrorKind::Permanent(code) => code.clone(),
        ComputeErrorKind::Denied(code) => code.to_string(),
        ComputeErrorKind::Pending(code) => code.to_string(),
        ComputeErrorKind::Deferred { code, .. } => code.to_string(),
        _ if e.retry_code() != "DEPENDENCY_UNAVAILABLE" => e.retry_code().to_string(),
        _ => e.class().to_string(),
    }
}

/// A Compute step of the cleanup (`bind`, `stop`) that failed.
struct StepFailure(&'static str, ComputeError);

/// The cause of a pass error that is not a claim loss: a Compute error's (`compute_cause`),
/// else the error's class.
fn failure_cause(e: &PassError) -> String {
    match e {
        PassError::Compute(e) => compute_cause(e),
        PassError::Db(crate::db::DbError::Corrupt(_)) => "CorruptData".into(),
        PassError::Db(_) => "DatabaseUnavailable".into(),
        PassError::Invariant(_) => "Invariant".into(),
        PassError::Lost(_) | PassError::ClaimLost => "ClaimLost".into(),
    }
}

/// A revision's repository cleanup (SPEC G3).
///
/// Expected flow, in SPEC order: a row without a revision (or of an unknown kind) is permanent
/// `INVALID_TARGET`, unreachable under G1's shape; the revision gone leaves nothing to retire;
/// G19's session cleanup settles at once, since no sessions exist yet; every kind closes live:
/// a revision of another Compute Driver waits with cause `COMPUTE_DRIVER_MISMATCH`, else the
/// Agent's objects are bound (`bind_agent`) while the Agent exists, and a runtime-retirement
/// kind stops the revision (`stop_revision`); an expiry kind has no access to withdraw until
/// repository credentials exist (G14). The fenced publish locks the Namespace, then the Agent,
/// and clears its active pointer only while it still names the stopped revision and the
/// Agent's principal is the revision's; settled is success `REPOSITORY_CLEANUP_COMPLETE`, else
/// pending `REPOSITORY_CLEANUP_PENDING` on G4's cadence.
///
/// Guarantees: a newer active revision and the desired run state are left intact; no audit of
/// its own; the work never fails or retries, and its stale claims return queued (SPEC G4).
///
/// Assumptions: idempotent — a pass may run again after a lost lease, and binding and stopping
/// twice converge; the Agent's lane serializes it with the Agent's other work.
///
/// Errors: any failure but claim loss leaves the cleanup unsettled with the failure's cause
/// (`compute_cause`), said once per cause (SPEC G5).
pub struct RepositoryCleanupReconciler {
    causes: Mutex<CauseMemory>,
}

impl Default for RepositoryCleanupReconciler {
    fn default() -> Self {
        RepositoryCleanupReconciler {
            causes: Mutex::new(CauseMemory::new(REMEMBERED_CAUSES)),
        }
    }
}

impl RepositoryCleanupReconciler {
    /// SPEC G3 steps 2-3: what closing the revision's runtime came to, or the Compute step
    /// that failed with its error.
    fn close(
        &self,
        pass: &Pass<'_>,
        revision_id: &str,
        kind: CleanupKind,
    ) -> Result<Result<CleanupFacts, StepFailure>, PassError> {
        let claim = pass.claim;
        let agent_id = claim.agent_id.as_deref().unwrap_or_default();
        let (agent, revision) = {
            let mut db = pass.db()?;
            let agent = load_agent(&mut *db, &claim.namespace_id, agent_id)?;
            let revision = load_revisions(
                &mut *db,
                &claim.namespace_id,
                agent_id,
                Some(revision_id),
                claim.id,
            )?
            .into_iter()
            .next();
            (agent, revision)
        };
        // Revisions go only with their Agent (A2): nothing is left to retire.
        let Some(revision) = revision else {
            return Ok(Ok(CleanupFacts::default()));
        };
        // SPEC G19 *cleanup*, closing live sessions (every kind does): settled when no
        // session is `closing` or `invalidated`; the first failed call is the cause.
        let cleaned = super::repository::cleanup(
            pass,
            pass.ctx.repository_sender.as_deref(),
            &claim.namespace_id,
            revision_id,
            true,
        )?;
        let sessions = CleanupFacts {
            stopped: None,
            cause: match &cleaned.failure {
                Some(e) => Some(compute_cause(e)),
                None if cleaned.invalidated => Some(ATTEMPT_INVALIDATED.into()),
                None => None,
            },
            sessions_pending: !cleaned.settled(),
            closing: cleaned.closing,
            retire_runtime: false,
        };
        if !revision.owned_by(pass) {
            return Ok(Ok(CleanupFacts {
                cause: Some("COMPUTE_DRIVER_MISMATCH".into()),
                ..sessions
            }));
        }
        let driver = pass.ctx.compute.clone();
        if let Some(agent) = &agent {
            let agent = agent.spec(&pass.ctx.installation_id);
            if let Err(e) = effect(pass, "bind", |c| driver.bind_agent(&agent, c))? {
                return Ok(Err(StepFailure("bind", e)));
            }
        }
        if !kind.retires_runtime() {
            return self.withdraw(pass, agent.as_ref(), &revision, sessions);
        }
        let spec = revision.spec(&pass.ctx.installation_id);
        if let Err(e) = effect(pass, "stop", |c| driver.stop_revision(&spec, c))? {
            return Ok(Err(StepFailure("stop", e)));
        }
        Ok(Ok(CleanupFacts {
            stopped: Some(Stopped {
                revision_id: revision.id.clone(),
                service_principal_id: revision.service_principal_id.clone(),
            }),
            ..sessions
        }))
    }

    /// SPEC G3 step 3, G14: an expiry cleanup withdraws Git from the revision's runtime. While
    /// the Agent still runs the revision the driver withdraws it: pending leaves the cleanup
    /// unsettled (`REPOSITORY_WITHDRAWAL_UNCONFIRMED`), a runtime that cannot drop it, or an
    /// Agent that moved on, hands the runtime to `terminal-runtime` cleanup. Every session
    /// must be `disposed` for it to settle.
    fn withdraw(
        &self,
        pass: &Pass<'_>,
        agent: Option<&super::rows::AgentRow>,
        revision: &super::rows::RevisionRow,
        mut facts: CleanupFacts,
    ) -> Result<Result<CleanupFacts, StepFailure>, PassError> {
        let sessions = {
            let mut db = pass.db()?;
            super::repository::sessions(&mut *db, &revision.id)?
        };
        if sessions
            .iter()
            .any(|s| s.phase != super::repository::Phase::Disposed)
        {
            facts.sessions_pending = true;
        }
        let runs = agent.is_some_and(|a| a.runs_revision(revision));
        let driver = pass.ctx.compute.clone();
        let answer = match driver.repository() {
            Some(runtime) if runs => {
                let spec = revision.spec(&pass.ctx.installation_id);
                match effect(pass, "withdraw", |c| {
                    runtime.retire_expired_repository_access(&spec, c)
                })? {
                    Ok(answer) => answer,
                    Err(e) => return Ok(Err(StepFailure("withdraw", e))),
                }
            }
            _ => RepositoryWithdrawal::RetireRuntime,
        };
        match answer {
            RepositoryWithdrawal::Withdrawn => {}
            RepositoryWithdrawal::Pending => {
                facts.cause.get_or_insert(WITHDRAWAL_UNCONFIRMED.into());
            }
            RepositoryWithdrawal::RetireRuntime => facts.retire_runtime = true,
        }
        Ok(Ok(facts))
    }

    /// SPEC G5: `worker.repository-cleanup-warning` when the cause is new for this work.
    fn warn(&self, pass: &Pass<'_>, cause: Option<&str>) {
        let claim = pass.claim;
        if !self.causes.lock().note(&claim.key, cause) {
            return;
        }
        pass.ctx.events.emit(
            "worker.repository-cleanup-warning",
            json!({
                "workId": claim.key,
                "attempt": claim.attempt,
                "operation": claim.operation.event_name(),
                "namespaceId": claim.namespace_id,
                "agentId": claim.agent_id,
                "revisionId": claim.revision_id,
                "code": STALLED,
                "cause": cause,
            }),
        );
    }
}

impl Reconciler for RepositoryCleanupReconciler {
    type Facts = CleanupFacts;

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let claim = pass.claim;
        let kind = CleanupKind::of_key(&claim.key);
        let (Some(revision_id), Some(kind), Some(_)) = (&claim.revision_id, kind, &claim.agent_id)
        else {
            return Ok(Report::permanent("INVALID_TARGET"));
        };
        // SPEC G3 step 4: any failure but claim loss leaves the cleanup unsettled with its
        // cause.
        let unsettled = |cause: String| CleanupFacts {
            cause: Some(cause),
            ..CleanupFacts::default()
        };
        let (facts, failed_step, database) = match self.close(pass, revision_id, kind) {
            Ok(Ok(facts)) => (facts, None, false),
            Ok(Err(StepFailure(step, e))) => (unsettled(compute_cause(&e)), Some((step, e)), false),
            Err(e) if e.is_claim_loss() => return Err(e),
            Err(e) => {
                let database = matches!(e, PassError::Db(_));
                (unsettled(failure_cause(&e)), None, database)
            }
        };
        let mut report = if facts.cause.is_none() && !facts.sessions_pending {
            Report::success(COMPLETE)
        } else {
            let recheck = cleanup_recheck(
                cleanup_interval(pass),
                pass.age(),
                facts.cause.is_some(),
                facts.closing,
            );
            let mut pending = Report::waiting(PENDING, recheck, Wait::Unbounded);
            pending.cause = facts.cause.clone();
            pending
        };
        if let Some((step, e)) = failed_step {
            report = report.at(step).with_compute_error(&e);
        }
        if database {
            report.failure.transient = true;
            report.failure.dependency = Some("database");
        }
        Ok(report.with_facts(Facts::Own(facts)))
    }

    fn publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError> {
        let claim = pass.claim;
        let Facts::Own(facts) = &report.facts else {
            return Ok(());
        };
        if let (Some(stopped), Some(agent_id)) = (&facts.stopped, &claim.agent_id) {
            // Namespace, then Agent (SPEC G3 step 5): a newer active revision and the desired
            // run state are left intact.
            tx.query_opt(NAMESPACE_LOCK, &[&claim.namespace_id])?;
            let agent = tx.query_opt(AGENT_LOCK, &[&claim.namespace_id, agent_id])?;
            let principal: Option<String> = agent.map(|row| row.get(1));
            if principal.as_deref() == Some(stopped.service_principal_id.as_str()) {
                tx.execute(
                    CLEAR_ACTIVE,
                    &[&claim.namespace_id, agent_id, &stopped.revision_id],
                )?;
            }
        }
        if let (true, Some(agent_id), Some(revision_id)) =
            (facts.retire_runtime, &claim.agent_id, &claim.revision_id)
        {
            // SPEC G14's hand-off: the runtime goes with its own cleanup.
            let cleanup = crate::queue::NewWork::repository_cleanup(
                &claim.namespace_id,
                agent_id,
                revision_id,
                CleanupKind::TerminalRuntime,
                &claim.actor_id,
            );
            crate::queue::work_enqueue(tx, &cleanup)?;
        }
        let settled = report.outcome == Outcome::Success;
        if let (true, Some(agent_id)) = (settled, &claim.agent_id) {
            // SPEC G13: an Agent deletion waiting on this cleanup goes on now.
            tx.execute(DELETION_WAKE, &[&claim.namespace_id, agent_id])?;
        }
        self.warn(
            pass,
            if settled {
                None
            } else {
                facts.cause.as_deref()
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g4_the_recheck_grows_with_age_from_the_interval_to_ten_minutes() {
        let i = CLEANUP_INTERVAL;
        let s = Duration::from_secs;
        assert_eq!(cleanup_recheck(i, s(0), true, false), i);
        assert_eq!(cleanup_recheck(i, s(2_400), true, false), s(60));
        assert_eq!(cleanup_recheck(i, s(1_000_000), true, false), s(600));
        // No cause, or a session closing, keeps the interval.
        assert_eq!(cleanup_recheck(i, s(2_400), false, false), i);
        assert_eq!(cleanup_recheck(i, s(2_400), true, true), i);
        // Rounded to the millisecond.
        assert_eq!(
            cleanup_recheck(Duration::ZERO, Duration::from_millis(60), true, false),
            Duration::from_millis(2)
        );
    }

    #[test]
    fn g5_a_cause_is_new_once_per_work_until_it_settles_and_the_oldest_is_forgotten() {
        let mut m = CauseMemory::new(2);
        assert!(m.note("a", Some("X")));
        assert!(!m.note("a", Some("X")));
        assert!(m.note("a", Some("Y")));
        assert!(!m.note("a", None));
        assert!(m.note("a", Some("Y")));
        assert!(m.note("b", Some("X")));
        assert!(m.note("c", Some("X")));
        // `a` was the oldest: forgotten, so said again.
        assert!(m.note("a", Some("Y")));
        assert!(!m.note("c", Some("X")));
    }

    #[test]
    fn g3_a_compute_failure_is_its_code_else_its_class() {
        assert_eq!(
            compute_cause(&ComputeError::draining("scripted")),
            "AGENT_STOP_YIELDED"
        );
        assert_eq!(
            compute_cause(&ComputeError::permanent(
                "KUBERNETES_FORBIDDEN",
                "k",
                Some(403)
            )),
            "KUBERNETES_FORBIDDEN"
        );
        assert_eq!(
            compute_cause(&ComputeError::retryable("ApiError", Some(500))),
            "ApiError"
        );
        assert_eq!(
            compute_cause(
                &ComputeError::retryable("HookError", None).with_retry_code("RETENTION_HOLD")
            ),
            "RETENTION_HOLD"
        );
    }
}
