//! The steps every reconciler shares: an effect under a renewed claim (`effect`,
//! `try_effect!`), what a Compute failure becomes (`compute_report`), an IAM refusal (`deny`)
//! and the audit evidence of a fenced publication (`audit`, `denial_audit`). Below every
//! reconciler; names none.

use super::pass::{Pass, PassError};
use super::report::{Denial, Facts, Report, Wait};
use crate::cancel::CancelToken;
use crate::compute::{ComputeError, ComputeErrorKind};
use crate::iam::{Policy, Request};
use crate::queue::Operation;
use serde_json::{json, Value};
use std::time::Duration;

/// One audit event.
pub struct Audit<'a> {
    pub denial: bool,
    pub action: &'a str,
    pub resource_kind: &'a str,
    pub resource_id: &'a str,
    pub outcome: &'a str,
    pub reason_code: Option<&'a str>,
    pub details: Value,
}

/// Appends an audit event in the fenced transaction, attributed to the work's actor.
pub fn audit(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    event: Audit<'_>,
) -> Result<(), PassError> {
    append(tx, pass, event, None)
}

/// `audit` with a denial's request and decision reason at the top of the event (F168).
fn append(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    event: Audit<'_>,
    denial: Option<&Denial>,
) -> Result<(), PassError> {
    let authorization = denial.map(|d| json!(d.request));
    let kind = if event.denial {
        "authorization_denial"
    } else {
        "mutation"
    };
    let details = if event.details.is_object() {
        event.details.clone()
    } else {
        json!({})
    };
    let outcome = if event.denial {
        "denied"
    } else {
        event.outcome
    };
    crate::audit::audit_append(
        tx,
        &crate::audit::AuditEvent {
            installation_id: &pass.ctx.installation_id,
            namespace_id: Some(&pass.claim.namespace_id),
            kind,
            actor_id: &pass.claim.actor_id,
            action: event.action,
            resource_kind: event.resource_kind,
            resource_id: event.resource_id,
            outcome,
            reason_code: event.reason_code,
            work_id: pass.claim.id,
            details: &details,
            authorization: authorization.as_ref(),
            decision_reason: denial.map(|d| d.decision.reason),
        },
    )?;
    Ok(())
}

/// Decides `request` against `policy`; `Some(report)` when it is refused: `ACTOR_REVOKED`
/// when the principal is the actor and no longer exists, else `AUTHORIZATION_DENIED`. The
/// report's facts carry the request and decision for the denial audit.
pub fn deny<F>(policy: &Policy, request: Request, actor: &str) -> Option<Report<F>> {
    let decision = policy.authorize(&request);
    if decision.allowed {
        return None;
    }
    let code = if request.principal_id == actor && !policy.identity_exists(actor) {
        "ACTOR_REVOKED"
    } else {
        "AUTHORIZATION_DENIED"
    };
    Some(Report::permanent(code).with_facts(Facts::Denied(Box::new(Denial { request, decision }))))
}

/// The `authorization_denial` audit of a refused Agent action (`openclaw.agents.stop`,
/// `.delete`, `.deploy`): the resource is the Agent, the details the request and decision
///, and whether a refused candidate was stopped first.
pub fn denial_audit<F>(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    action: &str,
    agent_id: &str,
    report: &Report<F>,
    denial: &Denial,
) -> Result<(), PassError> {
    let mut details = denial.details();
    if report.refusal.is_some() {
        details["refusedCandidateStopped"] = json!(true);
    }
    append(
        tx,
        pass,
        Audit {
            denial: true,
            action,
            resource_kind: "agent",
            resource_id: agent_id,
            outcome: "denied",
            reason_code: Some(&report.code),
            details,
        },
        Some(denial),
    )
}

/// The pending recheck of a convergence observation: `min(5 s, max(500 ms, age/40))` (R5).
pub fn readiness_recheck(age: Duration) -> Duration {
    (age / 40).clamp(Duration::from_millis(500), Duration::from_secs(5))
}

/// Renews the claim, then runs one Compute call (W2) at `step` (`bind`, `prepare`,
/// `deactivate`, `activate`, `stop`, `retire`, `credentials`), timed as its effect (`deploy`
/// for the three deployment steps; W6). A cancelled call loses the pass; every other error is
/// returned for the reconciler to classify.
pub fn effect<T>(
    pass: &Pass<'_>,
    step: &'static str,
    call: impl FnOnce(&CancelToken) -> Result<T, ComputeError>,
) -> Result<Result<T, ComputeError>, PassError> {
    pass.before_effect()?;
    let started = std::time::Instant::now();
    let out = call(pass.cancel());
    pass.ctx
        .metrics
        .effect_duration
        .with_label_values(&[match step {
            "prepare" | "deactivate" | "activate" => "deploy",
            other => other,
        }])
        .observe(started.elapsed().as_secs_f64());
    match out {
        Err(e) if matches!(e.kind(), ComputeErrorKind::Cancelled(_)) => Err(e.into()),
        other => Ok(other),
    }
}

/// The recheck of a draining stop: 1 s, growing with the work's age to 5 s (SPEC Z5).
pub fn stop_yield_recheck(age: Duration) -> Duration {
    (age / 40).clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// What a Compute failure becomes. A draining stop yields: pending `AGENT_STOP_YIELDED`
/// without spending the attempt, exempt from the deadline until the work reaches it, then a
/// dependency retry within the budget (SPEC Z5). A transient dependency
/// failure of revision work waits within the convergence deadline without spending attempts
/// (R10); Namespace, Agent stop and delete work have no deadline to bound such a wait, so they
/// keep their attempt budget and retry `DEPENDENCY_UNAVAILABLE` (SPEC R10, A1, A2). A refusal is permanent with the driver's code.
pub fn compute_report<F>(e: &ComputeError, pass: &Pass<'_>) -> Report<F> {
    let revision_work = matches!(
        pass.claim.operation,
        Operation::RevisionReconcile | Operation::RevisionMaintenance
    );
    let report = match e.kind() {
        ComputeErrorKind::Draining => {
            let mut report = Report::waiting(
                "AGENT_STOP_YIELDED",
                stop_yield_recheck(pass.age()),
                Wait::StopYield,
            );
            report.record_evidence = false;
            report
        }
        ComputeErrorKind::TransientDependency if revision_work => Report::waiting(
            e.retry_code(),
            readiness_recheck(pass.age()),
            Wait::Dependency,
        ),
        // A used-up quota: revision work waits with the driver's pending code (R5), within the
        // deadline and refunding the attempt; other work retries within its budget.
        ComputeErrorKind::Pending(code) if revision_work => {
            Report::pending(code, readiness_recheck(pass.age()))
        }
        // A wait the pass may not take under its claim (SPEC Q10): pending with the driver's
        // code, refunding the attempt; revision work within the convergence deadline as a
        // failing dependency (R10), other work unbounded, since the wait always ends.
        ComputeErrorKind::Deferred { code, after } => Report::waiting(
            code,
            (*after).max(readiness_recheck(pass.age())),
            if revision_work {
                Wait::Dependency
            } else {
                Wait::Unbounded
            },
        ),
        ComputeErrorKind::Permanent(code) => Report::permanent(code),
        // A refusal on permissions may be a grant still propagating (SPEC R10): retried within
        // the budget, then failed with the refusal's own code.
        ComputeErrorKind::Denied(code) => {
            let mut report = Report::retry("DEPENDENCY_UNAVAILABLE");
            report.exhausted_code = Some(code.to_string());
            report
        }
        // A lifecycle hook's retry keeps the hook's code (SPEC H4).
        _ => Report::retry(e.retry_code()),
    };
    report.with_compute_error(e)
}

/// Runs an effect and returns its report, naming the step, from the enclosing function when
/// it fails.
macro_rules! try_effect {
    ($pass:expr, $step:expr, $call:expr) => {
        match $crate::reconcile::steps::effect($pass, $step, $call)? {
            Ok(v) => v,
            Err(e) => return Ok($crate::reconcile::steps::compute_report(&e, $pass).at($step)),
        }
    };
}
pub(crate) use try_effect;
