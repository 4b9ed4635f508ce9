//! The Namespace lifecycle reconciler (SPEC N2-N5): one type for `namespace:<id>:ensure` and
//! `namespace:<id>:delete[:<n>]`, and the audit statements it writes.
//!
//! It owns the Namespace's lifecycle status after admission (`provisioning` → `ready` |
//! `failed`; `deleting` → tombstone) and the audit evidence of every pass. It never admits
//! anything (that is `occ.namespace_create` and the other admission functions in
//! `sql/schema.sql`), never writes queue rows (that is `queue`), and reaches infrastructure
//! only through `Context::compute`.
//!
//! # Expected flow
//!
//! 1. Load the Namespace, tombstones included. Not in the expected status (`provisioning` for
//!    ensure, `deleting` for delete): success `SUPERSEDED_TARGET`, no Compute call.
//! 2. Reauthorize (`iam::decide`, one statement). The actor is gone: permanent `ACTOR_REVOKED`. Ensure needs
//!    `create` on Namespaces in the installation, `administer` on the installation when it
//!    adopts an `existing_namespace`, and no restriction on the exact-Namespace `create`
//!    decision; delete needs `delete` on the Namespace. Otherwise permanent
//!    `AUTHORIZATION_DENIED`. A denial is audited (`authorization_denial`) and makes no
//!    Compute call.
//! 3. Renew the claim, then `ensure_namespace_reserving` / `delete_namespace` under the pass's
//!    cancellation token. Ensure hands the driver a `subnets::FencedSubnetLedger`: a driver
//!    that picks a shared subnet (Docker) reserves it in `occ.docker_subnets`, claim-fenced,
//!    before creating anything on it. A mismatched observation is permanent
//!    `INVALID_DRIVER_OBSERVATION`.
//! 4. Complete without failure: success `NAMESPACE_RECONCILED`. Retryable failure: retry.
//!    Permanent failure: permanent. Otherwise pending `NAMESPACE_INCOMPLETE`, rechecked after
//!    `min(5 s, max(500 ms, age/40))`.
//! 5. `publish`, inside the claim-fenced finalizing transaction, locks the Namespace and, only
//!    if it is still in the expected status: ensure success → `ready`; ensure permanent
//!    (including exhausted attempts and `CONVERGENCE_DEADLINE_EXCEEDED`) → `failed`; delete
//!    success → tombstone, remove every IAM binding and restriction scoped to it and release
//!    its subnet reservation. It writes
//!    the lifecycle audit (`openclaw.namespaces.lifecycle.ensure` / `.delete`) or the denial.
//!
//! # Guarantees
//!
//! - No Compute call happens for a superseded, revoked or denied pass.
//! - Lifecycle status, tombstone, IAM cleanup, audit and the queue transition commit together
//!   or not at all: a stale claim changes nothing (Q6).
//! - Two passes, in any processes, never reserve overlapping subnets; a pass that died
//!   between reserving and creating leaves a reservation the next pass reuses; a subnet
//!   contended by foreign networks is pending (`pendingReason` `NAMESPACE_SUBNET_CONTENDED`,
//!   no attempt spent), never a failure.
//! - A pending observation is audited once per distinct observation: a pass whose
//!   observation equals the work's latest audit row writes neither an audit row nor attempt
//!   evidence. The comparison reads the database, so it survives restarts.
//! - Every audit row carries the work id.
//!
//! # Assumptions
//!
//! - Reconciling is idempotent: a pass may run again after a lost lease, and the drivers'
//!   `ensure_namespace` / `delete_namespace` tolerate having run already.
//! - Namespace lifecycle work of one Namespace never runs concurrently (lanes, Q4).
//! - Admission rejected a Namespace deletion while Agents existed.
//!
//! # Errors
//!
//! - A transient or retryable Compute failure is retry `DEPENDENCY_UNAVAILABLE`, spending the
//!   attempt (Namespace work keeps its attempt budget); a permanent refusal is permanent with the driver's code (`COMPUTE_REFUSED` when the code
//!   is not a bounded token).
//! - A cancelled Compute call, a lost renewal or a subnet reservation that found its claim
//!   gone returns the error: the claim is gone and nothing is published. A reservation's
//!   database error is returned in place of the driver's answer.
//! - Database errors return the error; the runtime turns them into a retry.

use super::dispatch::Reconciler;
use super::pass::{Pass, PassError};
use super::report::{Denial, Facts, Outcome};
use super::rows::NamespaceStatus;
use super::subnets::FencedSubnetLedger;
use crate::audit::{audit_append, audit_latest_for_work, AuditEvent};
use crate::compute::{self, ComputeErrorKind, FailureClass, NamespaceObservation, NamespaceSpec};
use crate::db::GenericClient;
use crate::iam::{self, Action, Request, Resource};
use crate::queue::Operation;
use serde_json::{json, Value};
use std::time::Duration;

/// This reconciler's reports carry its own facts.
type Report = super::report::Report<NamespaceFacts>;

const LOAD: &str = include_str!("../../sql/queries/namespace_load.sql");
const LOCK: &str = include_str!("../../sql/queries/namespace_lock.sql");
const TRANSITION: &str = include_str!("../../sql/queries/namespace_transition.sql");
const TOMBSTONE: &str = include_str!("../../sql/queries/namespace_tombstone.sql");

/// What a lifecycle work asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Ready,
    Deleted,
}

impl Target {
    fn of(operation: Operation) -> Result<Target, PassError> {
        match operation {
            Operation::NamespaceEnsure => Ok(Target::Ready),
            Operation::NamespaceDelete => Ok(Target::Deleted),
            other => Err(PassError::Invariant(format!(
                "the Namespace reconciler was given {} work",
                other.as_str()
            ))),
        }
    }

    /// The status a Namespace must still have for this work to act.
    fn expected(self) -> NamespaceStatus {
        match self {
            Target::Ready => NamespaceStatus::Provisioning,
            Target::Deleted => NamespaceStatus::Deleting,
        }
    }

    fn lifecycle_action(self) -> &'static str {
        match self {
            Target::Ready => "openclaw.namespaces.lifecycle.ensure",
            Target::Deleted => "openclaw.namespaces.lifecycle.delete",
        }
    }

    fn denial_action(self) -> &'static str {
        match self {
            Target::Ready => "openclaw.namespaces.create",
            Target::Deleted => "openclaw.namespaces.delete",
        }
    }
}

/// The Namespace row a pass acts on.
#[derive(Clone, Debug)]
struct Namespace {
    id: String,
    name: String,
    status: NamespaceStatus,
    existing_namespace: Option<String>,
    tombstoned: bool,
}

fn load(client: &mut impl GenericClient, id: &str) -> Result<Option<Namespace>, PassError> {
    client
        .query_opt(LOAD, &[&id])?
        .map(|row| {
            Ok(Namespace {
                id: row.get(0),
                name: row.get(1),
                status: NamespaceStatus::parse(row.get(2))?,
                existing_namespace: row.get(3),
                tombstoned: row.get(4),
            })
        })
        .transpose()
}

/// The recheck delay of pending convergence: `min(5 s, max(500 ms, age/40))`.
pub fn recheck_delay(age: Duration) -> Duration {
    (age / 40).clamp(Duration::from_millis(500), Duration::from_secs(5))
}

/// The reconciler of `Operation::NamespaceEnsure` and `Operation::NamespaceDelete`.
pub struct NamespaceReconciler;

/// What a Namespace pass did, for its `publish` (N2-N4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceFacts {
    /// The Namespace no longer has the status this work acts on: nothing to publish.
    Superseded,
    /// The driver's observation, as its lifecycle audit details.
    Observed(Value),
}

impl NamespaceReconciler {
    /// Every question `authorize` may ask, decided together in one statement.
    fn asked(
        actor: &str,
        installation_id: &str,
        namespace: &Namespace,
        target: Target,
    ) -> Vec<Request> {
        let exact = |action| Request::new(actor, action, Resource::namespace(&namespace.id));
        match target {
            Target::Ready => vec![
                Request::new(
                    actor,
                    Action::Create,
                    Resource::namespaces_in(installation_id),
                ),
                Request::new(
                    actor,
                    Action::Administer,
                    Resource::installation(installation_id),
                ),
                exact(Action::Create),
            ],
            Target::Deleted => vec![exact(Action::Delete)],
        }
    }

    /// N2 / N4 reauthorization. `Some(report)` is a denial.
    fn authorize(
        &self,
        policy: &iam::Policy,
        actor: &str,
        installation_id: &str,
        namespace: &Namespace,
        target: Target,
    ) -> Option<Report> {
        let exact = |action| Request::new(actor, action, Resource::namespace(&namespace.id));
        let primary = match target {
            Target::Ready => Request::new(
                actor,
                Action::Create,
                Resource::namespaces_in(installation_id),
            ),
            Target::Deleted => exact(Action::Delete),
        };
        let deny = |code: &str, request: &Request, decision: &iam::Decision| {
            let denial = Denial {
                request: request.clone(),
                decision: decision.clone(),
            };
            Some(Report::permanent(code).with_facts(Facts::Denied(Box::new(denial))))
        };
        let decision = policy.authorize(&primary);
        if !policy.identity_exists(actor) {
            return deny("ACTOR_REVOKED", &primary, &decision);
        }
        if !decision.allowed {
            return deny("AUTHORIZATION_DENIED", &primary, &decision);
        }
        if target == Target::Ready {
            if namespace.existing_namespace.is_some() {
                let admin = Request::new(
                    actor,
                    Action::Administer,
                    Resource::installation(installation_id),
                );
                let decision = policy.authorize(&admin);
                if !decision.allowed {
                    return deny("AUTHORIZATION_DENIED", &admin, &decision);
                }
            }
            let exact = exact(Action::Create);
            let decision = policy.authorize(&exact);
            if !decision.evidence.restriction_ids.is_empty() {
                return deny("AUTHORIZATION_DENIED", &exact, &decision);
            }
        }
        None
    }

    /// The Namespace this work acts on, reauthorized (N2, N5); `Err` with the report when it
    /// moved on (`SUPERSEDED_TARGET`) or the actor is refused.
    fn load_authorized(
        &self,
        pass: &Pass<'_>,
        target: Target,
    ) -> Result<Result<Namespace, Report>, PassError> {
        let claim = pass.claim;
        let installation_id = &pass.ctx.installation_id;
        let mut client = pass.db()?;
        let namespace = match load(&mut *client, &claim.namespace_id)? {
            Some(ns) if !ns.tombstoned && ns.status == target.expected() => ns,
            _ => {
                return Ok(Err(Report::success("SUPERSEDED_TARGET")
                    .with_facts(Facts::Own(NamespaceFacts::Superseded))))
            }
        };
        let asked = Self::asked(&claim.actor_id, installation_id, &namespace, target);
        let policy = iam::decide(&mut *client, &asked, &[])?;
        match self.authorize(
            &policy,
            &claim.actor_id,
            installation_id,
            &namespace,
            target,
        ) {
            Some(denial) => Ok(Err(denial)),
            None => Ok(Ok(namespace)),
        }
    }

    /// The one Compute call of the pass (N3, N4): ensure, reserving subnets through the
    /// claim-fenced ledger, or delete. `Err` with the report of a failed call; a wait on
    /// something outside the worker (a used-up quota) is an incomplete observation with that
    /// pending reason, deferred and audited like any other.
    fn ask_compute(
        pass: &Pass<'_>,
        target: Target,
        namespace: &Namespace,
    ) -> Result<Result<compute::NamespaceObservation, Report>, PassError> {
        let spec = NamespaceSpec {
            installation_id: pass.ctx.installation_id.clone(),
            namespace_id: namespace.id.clone(),
            name: namespace.name.clone(),
            existing_namespace: namespace.existing_namespace.clone(),
        };
        let compute = &pass.ctx.compute;
        let (step, answer) = match target {
            Target::Ready => {
                let ledger = FencedSubnetLedger::new(pass, &namespace.id);
                let answer = compute.ensure_namespace_reserving(&spec, &ledger, pass.cancel());
                if let Some(failure) = ledger.take_failure() {
                    return Err(failure);
                }
                ("ensure", answer)
            }
            Target::Deleted => ("delete", compute.delete_namespace(&spec, pass.cancel())),
        };
        let e = match answer {
            Ok(observation) => return Ok(Ok(observation)),
            Err(e) => e,
        };
        // Namespace work has no convergence deadline to bound a wait on a failing dependency:
        // it keeps its attempt budget.
        let report = match e.kind() {
            // A wait left to a later pass (SPEC Q10) is pending like any other.
            ComputeErrorKind::Pending(code) | ComputeErrorKind::Deferred { code, .. } => {
                return Ok(Ok(compute::NamespaceObservation {
                    namespace_id: namespace.id.clone(),
                    complete: false,
                    failure: None,
                    pending_reason: Some(code.to_string()),
                    reason: None,
                }))
            }
            ComputeErrorKind::Cancelled(_) => return Err(e.into()),
            ComputeErrorKind::Permanent(code) => {
                let code = if compute::is_code(code) {
                    code
                } else {
                    "COMPUTE_REFUSED"
                };
                Report::permanent(code)
            }
            ComputeErrorKind::TransientDependency
            | ComputeErrorKind::Retryable
            | ComputeErrorKind::Draining => Report::retry(e.retry_code()),
            // A grant still propagating: retried within the budget, then failed with the
            // refusal's code.
            ComputeErrorKind::Denied(code) => {
                let mut report = Report::retry("DEPENDENCY_UNAVAILABLE");
                report.exhausted_code = Some(code.to_string());
                report
            }
        };
        Ok(Err(report.at(step).with_compute_error(&e)))
    }

    /// What the driver's observation means (N3, N4): reconciled, incomplete (pending, audited
    /// once per distinct observation), retryable or failed.
    fn observed(
        pass: &Pass<'_>,
        target: Target,
        namespace: &Namespace,
        observation: compute::NamespaceObservation,
    ) -> Result<Report, PassError> {
        if !compute::valid_namespace_observation(&observation, &namespace.id) {
            return Ok(Report::permanent("INVALID_DRIVER_OBSERVATION"));
        }
        let code = if observation.complete {
            "NAMESPACE_RECONCILED"
        } else {
            "NAMESPACE_INCOMPLETE"
        };
        let mut report = match observation.failure {
            Some(FailureClass::Permanent) => Report::permanent(code),
            None if observation.complete => Report::success(code),
            Some(FailureClass::Retryable) => Report::retry(code),
            None => Report::pending(code, recheck_delay(pass.age())),
        };
        // The driver's own words on a failed ensure go to `worker.completed` only, when
        // non-empty, bounded and printable; audit and status keep the class (SPEC Z10).
        if target == Target::Ready && observation.failure.is_some() {
            report.failure.namespace_reason = observation
                .reason
                .clone()
                .filter(|r| !r.is_empty() && compute::printable(r));
        }
        let pending = matches!(report.outcome, Outcome::Pending { .. });
        let details = observation_details(pass.ctx.compute.id(), &observation, pending);
        if pending {
            let mut client = pass.db()?;
            let action = target.lifecycle_action();
            if already_audited(&mut *client, pass.claim.id, action, code, &details)? {
                report.record_evidence = false;
            }
        }
        Ok(report.with_facts(Facts::Own(NamespaceFacts::Observed(details))))
    }
}

/// The lifecycle audit details of an observation.
fn observation_details(
    compute_driver_id: &str,
    observation: &NamespaceObservation,
    pending: bool,
) -> Value {
    let mut details = json!({
        "computeDriverId": compute_driver_id,
        "complete": observation.complete,
        "failure": observation.failure,
        "convergencePending": pending,
    });
    if let Some(reason) = &observation.pending_reason {
        details["pendingReason"] = json!(reason);
    }
    details
}

/// Whether the work's latest audit row is this exact lifecycle observation.
fn already_audited(
    client: &mut impl GenericClient,
    work_id: i64,
    action: &str,
    code: &str,
    details: &Value,
) -> Result<bool, PassError> {
    Ok(matches!(
        audit_latest_for_work(client, work_id)?,
        Some(latest) if latest.action == action
            && latest.reason_code.as_deref() == Some(code)
            && &latest.details == details
    ))
}

impl Reconciler for NamespaceReconciler {
    type Facts = NamespaceFacts;

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let target = Target::of(pass.claim.operation)?;
        let namespace = match self.load_authorized(pass, target)? {
            Ok(namespace) => namespace,
            Err(report) => return Ok(report),
        };
        pass.before_effect()?;
        let observation = match Self::ask_compute(pass, target, &namespace)? {
            Ok(observation) => observation,
            Err(report) => return Ok(report),
        };
        Self::observed(pass, target, &namespace, observation)
    }

    /// The seed's finalize steps: only while the Namespace still has the
    /// status this work acts on, the lifecycle transition, then one audit: the denial, or the
    /// observation (a pending one once per distinct observation).
    fn publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError> {
        let target = Target::of(pass.claim.operation)?;
        let observation = match &report.facts {
            Facts::Own(NamespaceFacts::Superseded) => return Ok(()),
            Facts::Own(NamespaceFacts::Observed(details)) => Some(details),
            Facts::Denied(_) | Facts::Plain => None,
        };
        if !still_expected(tx, &pass.claim.namespace_id, target)? {
            return Ok(());
        }
        let removed = transition(tx, &pass.claim.namespace_id, target, report)?;
        match &report.facts {
            Facts::Denied(denial) => audit_denial(tx, pass, target, report, denial),
            _ => audit_observation(tx, pass, target, report, observation, removed),
        }
    }
}

/// What a tombstoned Namespace gave up.
struct Released {
    policy: Value,
    subnets: Vec<String>,
}

/// Whether the Namespace, locked, still has the status this work acts on.
fn still_expected(tx: &mut crate::db::Tx<'_>, ns: &str, target: Target) -> Result<bool, PassError> {
    let Some(row) = tx.query_opt(LOCK, &[&ns])? else {
        return Ok(false);
    };
    let tombstoned: bool = row.get(1);
    Ok(!tombstoned && NamespaceStatus::parse(row.get(0))? == target.expected())
}

/// The lifecycle transition of a terminal outcome: ready or failed for an ensure, tombstone
/// and policy removal for a delete. Returns what a tombstoned Namespace gave up: its removed
/// policy and its released subnet reservations.
fn transition(
    tx: &mut crate::db::Tx<'_>,
    ns: &str,
    target: Target,
    report: &Report,
) -> Result<Option<Released>, PassError> {
    match (target, report.outcome) {
        (Target::Ready, Outcome::Success) => {
            tx.execute(TRANSITION, &[&ns, &"provisioning", &"ready"])?;
        }
        (Target::Ready, Outcome::Permanent) => {
            tx.execute(TRANSITION, &[&ns, &"provisioning", &"failed"])?;
        }
        (Target::Deleted, Outcome::Success) => {
            let row = tx.query_one(TOMBSTONE, &[&ns])?;
            let tombstoned: bool = row.get(0);
            if !tombstoned {
                return Err(PassError::Invariant(format!(
                    "Namespace {ns} was locked as deleting but not tombstoned"
                )));
            }
            return Ok(Some(Released {
                policy: row.get(1),
                subnets: row.get(2),
            }));
        }
        _ => {}
    }
    Ok(None)
}

/// The `authorization_denial` audit of a refused ensure or delete (N5).
fn audit_denial(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    target: Target,
    report: &Report,
    denial: &Denial,
) -> Result<(), PassError> {
    let claim = pass.claim;
    let mut details = denial.evidence();
    details["workKey"] = json!(claim.key);
    audit_append(
        tx,
        &AuditEvent {
            installation_id: &pass.ctx.installation_id,
            namespace_id: Some(&claim.namespace_id),
            kind: "authorization_denial",
            actor_id: &claim.actor_id,
            action: target.denial_action(),
            resource_kind: "namespace",
            resource_id: &claim.namespace_id,
            outcome: "denied",
            reason_code: Some(&report.code),
            work_id: claim.id,
            details: &details,
            authorization: Some(&json!(denial.request)),
            decision_reason: Some(denial.decision.reason),
        },
    )?;
    Ok(())
}

/// The lifecycle audit of an observation (N3, N4): every terminal outcome, and a pending one
/// once per distinct observation. A dependency failure without an observation says enough in
/// its attempt evidence.
fn audit_observation(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    target: Target,
    report: &Report,
    observation: Option<&Value>,
    removed: Option<Released>,
) -> Result<(), PassError> {
    let claim = pass.claim;
    let terminal = matches!(report.outcome, Outcome::Success | Outcome::Permanent);
    if observation.is_none() && !terminal {
        return Ok(());
    }
    let mut details = match observation {
        Some(o) => o.clone(),
        None => json!({
            "computeDriverId": pass.ctx.compute.id(),
            "complete": false,
            "failure": null,
            "convergencePending": false,
        }),
    };
    let pending = matches!(report.outcome, Outcome::Pending { .. });
    details["convergencePending"] = json!(pending);
    if pending
        && already_audited(
            tx,
            claim.id,
            target.lifecycle_action(),
            &report.code,
            &details,
        )?
    {
        return Ok(());
    }
    if let Some(removed) = removed {
        details["removedPolicy"] = removed.policy;
        details["releasedSubnets"] = json!(removed.subnets);
    }
    if let Some(data) = &report.result_data {
        details["result"] = data.clone();
    }
    audit_append(
        tx,
        &AuditEvent {
            installation_id: &pass.ctx.installation_id,
            namespace_id: Some(&claim.namespace_id),
            kind: "mutation",
            actor_id: &claim.actor_id,
            action: target.lifecycle_action(),
            resource_kind: "namespace",
            resource_id: &claim.namespace_id,
            outcome: match report.outcome {
                Outcome::Success | Outcome::Pending { .. } => "success",
                Outcome::Retry | Outcome::Permanent => "failure",
            },
            reason_code: Some(&report.code),
            work_id: claim.id,
            details: &details,
            authorization: None,
            decision_reason: None,
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recheck_grows_with_age_within_bounds() {
        assert_eq!(recheck_delay(Duration::ZERO), Duration::from_millis(500));
        assert_eq!(
            recheck_delay(Duration::from_secs(80)),
            Duration::from_secs(2)
        );
        assert_eq!(
            recheck_delay(Duration::from_secs(3600)),
            Duration::from_secs(5)
        );
    }
}
