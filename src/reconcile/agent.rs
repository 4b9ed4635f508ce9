//! Agent lifecycle reconcilers: stop (SPEC A1) and delete (SPEC A2), plus the row loading,
//! authorization, audit and Compute-error helpers the revision reconciler shares.
//!
//! These reconcilers never write lifecycle state outside a claim-fenced transaction and never
//! call Compute before the actor has been reauthorized against the current IAM policy.

use super::{Denial, Facts, Outcome, Pass, PassError, Reconciler, Report};
use crate::cancel::CancelToken;
use crate::compute::{
    AgentSpec, ComputeError, ComputeErrorKind, ExecutionAdmission, ManagedAccountAuth,
    RevisionSpec, RuntimeCredentials, SecretProjection,
};
use crate::db::GenericClient;
use crate::iam::{self, Action, Policy, Request, Resource, ResourceKind};
use crate::queue::Operation;
use serde_json::{json, Value};
use std::time::Duration;

const AGENT_LOAD: &str = include_str!("../../sql/queries/agent_load.sql");
const REVISIONS_LOAD: &str = include_str!("../../sql/queries/agent_revisions_load.sql");
const AGENT_LOCK: &str = include_str!("../../sql/queries/agent_lock.sql");
const CLEAR_ACTIVE: &str = include_str!("../../sql/queries/agent_clear_active.sql");
const DELETE_FINALIZE: &str = include_str!("../../sql/queries/agent_delete_finalize.sql");
const SANDBOX_POLICY_LOAD: &str = include_str!("../../sql/queries/sandbox_policy_load.sql");

/// An Agent as a pass sees it.
#[derive(Clone, Debug)]
pub struct AgentRow {
    pub id: String,
    pub namespace_id: String,
    pub status: String,
    pub desired_runtime_state: String,
    pub active_revision_id: Option<String>,
    pub service_principal_id: String,
    pub namespace_status: String,
}

impl AgentRow {
    /// What a driver needs to know about this Agent.
    pub fn spec(&self, installation_id: &str) -> AgentSpec {
        AgentSpec {
            installation_id: installation_id.into(),
            namespace_id: self.namespace_id.clone(),
            agent_id: self.id.clone(),
            service_principal_id: self.service_principal_id.clone(),
        }
    }
}

/// An admitted revision as a pass sees it.
#[derive(Clone, Debug)]
pub struct RevisionRow {
    pub id: String,
    pub namespace_id: String,
    pub agent_id: String,
    pub revision: i32,
    pub actor_id: String,
    pub service_principal_id: String,
    pub configuration_id: String,
    pub configuration_generation: i32,
    pub document: Value,
    pub harness_id: String,
    pub harness_version: String,
    pub harness_mode: String,
    pub execution_mode: String,
    pub compute_id: String,
    pub compute_implementation: String,
    pub harness_auth: Option<Value>,
    pub secret_bindings: Value,
    pub plugins: Value,
    /// The Secret bindings that resolve to an existing Secret of the Namespace.
    pub secrets: Vec<SecretProjection>,
    /// The Secret of a `secret` harness auth, when it exists.
    pub harness_secret: Option<SecretProjection>,
    /// The revision's backend (SPEC M1), when it has one.
    pub backend_id: Option<String>,
    pub retired: bool,
    pub admitted_before_work: bool,
    /// The Secret Driver the Installation selected when the revision was admitted (SPEC Z4).
    pub secret_driver_id: Option<String>,
    /// The stored execution admission (SPEC Z1).
    pub execution_admission: ExecutionAdmission,
    /// The Sandbox Driver and its facets pinned at admission (SPEC S2).
    pub sandbox_driver_id: Option<String>,
    pub sandbox_facets: Vec<String>,
    /// The credential sources frozen at admission (SPEC §13), the harness source included.
    pub credential_sources: Vec<crate::credentials::SnapshotSource>,
}

impl RevisionRow {
    /// The plugin ids the snapshot admitted (PostgreSQL guarantees the shape).
    pub fn plugin_ids(&self) -> Vec<String> {
        self.plugins
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.get("id").and_then(Value::as_str).map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether this revision names `agent` as its owner: same Namespace, Agent and service
    /// principal.
    pub fn owned_by_agent(&self, agent: &AgentRow) -> bool {
        self.namespace_id == agent.namespace_id
            && self.agent_id == agent.id
            && self.service_principal_id == agent.service_principal_id
    }

    /// Whether this revision belongs to the Compute Driver the worker runs.
    pub fn owned_by(&self, pass: &Pass<'_>) -> bool {
        self.compute_id == pass.ctx.compute.id()
            && self.compute_implementation == pass.ctx.compute.implementation()
    }

    pub fn spec(&self, installation_id: &str) -> RevisionSpec {
        RevisionSpec {
            installation_id: installation_id.into(),
            namespace_id: self.namespace_id.clone(),
            agent_id: self.agent_id.clone(),
            revision_id: self.id.clone(),
            revision: self.revision,
            service_principal_id: self.service_principal_id.clone(),
            harness_id: self.harness_id.clone(),
            harness_version: self.harness_version.clone(),
            harness_mode: self.harness_mode.clone(),
            execution_mode: self.execution_mode.clone(),
            document: self.document.clone(),
            harness_auth: self.harness_auth.clone(),
            secret_bindings: self.secret_bindings.clone(),
            secrets: self.secrets.clone(),
            harness_secret: self.harness_secret.clone(),
            managed_account: self
                .harness_auth
                .as_ref()
                .and_then(ManagedAccountAuth::from_harness_auth),
            backend_id: self.backend_id.clone(),
            plugin_ids: self.plugin_ids(),
            execution_admission: self.execution_admission.clone(),
            sandbox_facets: self.sandbox_facets.clone(),
            // Filled by SPEC E19's resolution before a preparation; no other call attaches.
            credential_sources: Vec::new(),
        }
    }
}

/// Loads the Agent of a work, or `None` when it is gone.
pub fn load_agent(
    client: &mut impl GenericClient,
    namespace_id: &str,
    agent_id: &str,
) -> Result<Option<AgentRow>, PassError> {
    Ok(client
        .query_opt(AGENT_LOAD, &[&namespace_id, &agent_id])?
        .map(|r| AgentRow {
            id: r.get(0),
            namespace_id: r.get(1),
            status: r.get(2),
            desired_runtime_state: r.get(3),
            active_revision_id: r.get(4),
            service_principal_id: r.get(5),
            namespace_status: r.get(6),
        }))
}

/// Loads an Agent's revisions (all, or the one named), oldest first.
pub fn load_revisions(
    client: &mut impl GenericClient,
    namespace_id: &str,
    agent_id: &str,
    only: Option<&str>,
    work_id: i64,
) -> Result<Vec<RevisionRow>, PassError> {
    let rows = client.query(REVISIONS_LOAD, &[&namespace_id, &agent_id, &only, &work_id])?;
    rows.iter()
        .map(|r| {
            let secrets: Value = r.get(19);
            let harness_secret: Option<Value> = r.get(20);
            let broken = |e: serde_json::Error| {
                PassError::Invariant(format!("resolved Secret metadata: {e}"))
            };
            Ok(RevisionRow {
                id: r.get(0),
                namespace_id: r.get(1),
                agent_id: r.get(2),
                revision: r.get(3),
                actor_id: r.get(4),
                service_principal_id: r.get(5),
                configuration_id: r.get(6),
                configuration_generation: r.get(7),
                document: r.get(8),
                harness_id: r.get(9),
                harness_version: r.get(10),
                harness_mode: r.get(11),
                execution_mode: r.get(12),
                compute_id: r.get(13),
                compute_implementation: r.get(14),
                harness_auth: r.get(15),
                secret_bindings: r.get(16),
                plugins: r.get(17),
                retired: r.get(18),
                secrets: serde_json::from_value(secrets).map_err(broken)?,
                harness_secret: harness_secret
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(broken)?,
                admitted_before_work: r.get(21),
                backend_id: r.get(22),
                secret_driver_id: r.get(23),
                execution_admission: serde_json::from_value(r.get(24)).map_err(|e| {
                    PassError::Invariant(format!("stored execution admission: {e}"))
                })?,
                sandbox_driver_id: r.get(25),
                sandbox_facets: serde_json::from_value(r.get(26))
                    .map_err(|e| PassError::Invariant(format!("pinned sandbox facets: {e}")))?,
                credential_sources: serde_json::from_value(r.get(27)).map_err(|e| {
                    PassError::Invariant(format!("credential source snapshot: {e}"))
                })?,
            })
        })
        .collect()
}

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
        },
    )?;
    Ok(())
}

/// Decides `request` against `policy`; `Some(report)` when it is refused: `ACTOR_REVOKED`
/// when the principal is the actor and no longer exists, else `AUTHORIZATION_DENIED`. The
/// report's facts carry the request and decision for the denial audit.
pub fn deny(policy: &Policy, request: Request, actor: &str) -> Option<Report> {
    let decision = policy.authorize(&request);
    if decision.allowed {
        return None;
    }
    let code = if request.principal_id == actor && !policy.identity_exists(actor) {
        "ACTOR_REVOKED"
    } else {
        "AUTHORIZATION_DENIED"
    };
    Some(Report::permanent(code).with_facts(Facts::Denied(Denial { request, decision })))
}

/// The `authorization_denial` audit of a refused Agent action (`openclaw.agents.stop`,
/// `.delete`, `.deploy`): the resource is the Agent, the details the request and decision
///, and whether a refused candidate was stopped first.
pub fn denial_audit(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    action: &str,
    agent_id: &str,
    report: &Report,
    denial: &Denial,
) -> Result<(), PassError> {
    let mut details = denial.details();
    if report.refusal.is_some() {
        details["refusedCandidateStopped"] = json!(true);
    }
    audit(
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
pub fn compute_report(e: &ComputeError, pass: &Pass<'_>) -> Report {
    let revision_work = matches!(
        pass.claim.operation,
        Operation::RevisionReconcile | Operation::RevisionMaintenance
    );
    let report = match e.kind() {
        ComputeErrorKind::Draining => {
            let mut report = Report::pending("AGENT_STOP_YIELDED", stop_yield_recheck(pass.age()));
            report.deadline_exempt = true;
            report.stop_yield = true;
            report.record_evidence = false;
            report
        }
        ComputeErrorKind::TransientDependency if revision_work => {
            let mut report = Report::pending(e.retry_code(), readiness_recheck(pass.age()));
            report.dependency_failure = true;
            report
        }
        // A used-up quota: revision work waits with the driver's pending code (R5), within the
        // deadline and refunding the attempt; other work retries within its budget.
        ComputeErrorKind::Pending(code) if revision_work => {
            Report::pending(code, readiness_recheck(pass.age()))
        }
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
        match $crate::reconcile::agent::effect($pass, $step, $call)? {
            Ok(v) => v,
            Err(e) => return Ok($crate::reconcile::agent::compute_report(&e, $pass).at($step)),
        }
    };
}
pub(crate) use try_effect;

fn agent_resource(pass: &Pass<'_>, agent_id: &str) -> Resource {
    Resource::owned(ResourceKind::Agent, &pass.claim.namespace_id, agent_id)
}

fn claim_agent(pass: &Pass<'_>) -> Result<String, PassError> {
    pass.claim
        .agent_id
        .clone()
        .ok_or_else(|| PassError::Invariant("agent work without an agent".into()))
}

/// Agent stop (SPEC A1).
///
/// Expected flow: reauthorize `operate` on the Agent; reload the Agent just before any
/// effect; stop its active revision, then every other unretired revision of this Compute
/// admitted before the work; in the fenced publish, clear the active pointer only if it still
/// names the stopped revision, audit `openclaw.agents.lifecycle.stop`, complete.
///
/// Guarantees: no Compute call after a denial; a deployment admitted after the stop
/// (desired `running` again) wins (`STOP_SUPERSEDED`); revision history, credentials and
/// persistent state remain.
///
/// Assumptions: idempotent — it may run again after a lost lease, and `stop_revision` of a
/// stopped revision is a no-op; the work lane serializes it with the Agent's revisions.
///
/// Errors: `INVALID_AGENT_OWNER`, `ACTOR_REVOKED`, `AUTHORIZATION_DENIED`,
/// `INVALID_ACTIVE_REVISION`, `INVALID_REVISION_OWNER`, `COMPUTE_DRIVER_MISMATCH` fail for good;
/// a transient or retryable Compute failure retries `DEPENDENCY_UNAVAILABLE` within the attempt
/// budget; a draining stop yields (`AGENT_STOP_YIELDED`).
pub struct AgentStop;

impl Reconciler for AgentStop {
    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let agent_id = claim_agent(pass)?;
        let ns = pass.claim.namespace_id.clone();
        let request = Request::new(
            &pass.claim.actor_id,
            Action::Operate,
            agent_resource(pass, &agent_id),
        );
        let policy = {
            let mut db = pass.db()?;
            if load_agent(&mut *db, &ns, &agent_id)?.is_none() {
                return Ok(Report::permanent("INVALID_AGENT_OWNER"));
            }
            iam::decide(&mut *db, std::slice::from_ref(&request), &[])?
        };
        if let Some(denied) = deny(&policy, request, &pass.claim.actor_id) {
            return Ok(denied);
        }
        // Admission may change desired state while IAM is consulted: reload just before any
        // effect so a later deployment wins.
        let (agent, revisions) = {
            let mut db = pass.db()?;
            let Some(agent) = load_agent(&mut *db, &ns, &agent_id)? else {
                return Ok(Report::permanent("INVALID_AGENT_OWNER"));
            };
            let revisions = load_revisions(&mut *db, &ns, &agent_id, None, pass.claim.id)?;
            (agent, revisions)
        };
        if agent.desired_runtime_state != "stopped" {
            return Ok(Report::success("STOP_SUPERSEDED"));
        }
        let active = match &agent.active_revision_id {
            None => None,
            Some(id) => match revisions.iter().find(|r| &r.id == id) {
                Some(r) => Some(r),
                None => return Ok(Report::permanent("INVALID_ACTIVE_REVISION")),
            },
        };
        if active.is_some_and(|a| !a.admitted_before_work) {
            return Ok(Report::success("STOP_SUPERSEDED"));
        }
        if active.is_some_and(|a| !a.owned_by(pass)) {
            return Ok(Report::permanent("COMPUTE_DRIVER_MISMATCH"));
        }
        let mut cleanup: Vec<&RevisionRow> = active.into_iter().collect();
        // A retired revision's runtime is already gone (its retirement was confirmed before
        // `retired_at` was set), so only unretired ones can still own resources.
        cleanup.extend(revisions.iter().filter(|r| {
            Some(r.id.as_str()) != agent.active_revision_id.as_deref()
                && r.owned_by(pass)
                && r.admitted_before_work
                && !r.retired
        }));
        // A revision naming another owner is a broken row, not a missing Agent (SPEC A2).
        if cleanup.iter().any(|r| !r.owned_by_agent(&agent)) {
            return Ok(Report::permanent("INVALID_REVISION_OWNER"));
        }
        let driver = pass.ctx.compute.clone();
        // The Agent's own objects come back before its runtimes are stopped.
        if !cleanup.is_empty() {
            let spec = agent.spec(&pass.ctx.installation_id);
            try_effect!(pass, "bind", |c| driver.bind_agent(&spec, c));
        }
        for revision in cleanup {
            {
                let mut db = pass.db()?;
                match load_agent(&mut *db, &ns, &agent_id)? {
                    None => return Ok(Report::permanent("INVALID_AGENT_OWNER")),
                    Some(a) if a.desired_runtime_state != "stopped" => {
                        return Ok(Report::success("STOP_SUPERSEDED"))
                    }
                    Some(_) => {}
                }
            }
            let spec = revision.spec(&pass.ctx.installation_id);
            try_effect!(pass, "stop", |c| driver.stop_revision(&spec, c));
        }
        let facts = StopFacts {
            stopped: active.map(|a| a.id.clone()),
            service_principal_id: agent.service_principal_id.clone(),
        };
        let code = if active.is_some() {
            "AGENT_STOPPED"
        } else {
            "AGENT_ALREADY_STOPPED"
        };
        Ok(Report::success(code).with_facts(Facts::Stop(facts)))
    }

    /// A later deployment may have asked for `running` again while the last stop ran: the
    /// stop is then `STOP_SUPERSEDED` and the active pointer it would have cleared stays.
    fn settle(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        mut report: Report,
    ) -> Result<Report, PassError> {
        let Facts::Stop(facts) = &mut report.facts else {
            return Ok(report);
        };
        let agent_id = claim_agent(pass)?;
        let row = tx.query_opt(AGENT_LOCK, &[&pass.claim.namespace_id, &agent_id])?;
        let principal = facts.service_principal_id.as_str();
        let Some(row) = row.filter(|r| r.get::<_, &str>(1) == principal) else {
            return Ok(Report::permanent("INVALID_AGENT_OWNER"));
        };
        if row.get::<_, &str>(0) != "stopped" {
            report.code = "STOP_SUPERSEDED".into();
            facts.stopped = None;
        }
        Ok(report)
    }

    fn publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError> {
        let agent_id = claim_agent(pass)?;
        let stopped = match &report.facts {
            Facts::Denied(denial) => {
                return denial_audit(tx, pass, "openclaw.agents.stop", &agent_id, report, denial)
            }
            Facts::Stop(facts) => facts.stopped.as_deref(),
            Facts::Plain => None,
            other => return Err(other.foreign("Agent stop")),
        };
        if let Some(stopped) = stopped {
            tx.execute(
                CLEAR_ACTIVE,
                &[&pass.claim.namespace_id, &agent_id, &stopped],
            )?;
        }
        if matches!(report.outcome, Outcome::Pending { .. } | Outcome::Retry) {
            return Ok(());
        }
        // SPEC A1: the outcome and its code, naming the stopped revision.
        let mut details = json!({
            "computeDriverId": pass.ctx.compute.id(),
            "reasonCode": report.code,
        });
        if let Some(stopped) = stopped {
            details["revisionId"] = json!(stopped);
        }
        audit(
            tx,
            pass,
            Audit {
                denial: false,
                action: "openclaw.agents.lifecycle.stop",
                resource_kind: "agent",
                resource_id: &agent_id,
                outcome: if report.outcome == Outcome::Success {
                    "success"
                } else {
                    "failure"
                },
                reason_code: Some(&report.code),
                details,
            },
        )
    }
}

/// What an Agent stop did: the active revision it stopped (whose pointer the finalizer
/// compare-and-clears) and the service principal the Agent had (A1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopFacts {
    pub stopped: Option<String>,
    pub service_principal_id: String,
}

/// Agent delete (SPEC A2).
///
/// Expected flow: reauthorize `delete`; retire every revision through Compute; delete the
/// Agent's runtime credentials and, when it has a sandbox policy, its egress policy (S3); then, in one claim-fenced transaction, remove API keys, IAM
/// bindings and restrictions naming the Agent or its service principal, append the
/// `openclaw.agents.lifecycle.delete` audit (`AGENT_DELETED`), and delete the Agent, whose
/// deletion cascades to its revisions, service principal and work rows — the current one
/// included. That transaction is the queue transition, so the report is `already_published`.
///
/// Guarantees: an expired claim or a failed external cleanup leaves every row intact for a
/// safe retry; no Compute call after a denial.
///
/// Assumptions: idempotent — `retire_revision` and `delete_agent_runtime_credentials` tolerate
/// having run already.
///
/// Errors: `INVALID_AGENT_OWNER` (the Agent is gone), `INVALID_AGENT_STATE` (not `deleting` and
/// `stopped`), `ACTOR_REVOKED`, `AUTHORIZATION_DENIED`, `INVALID_REVISION_OWNER`,
/// `COMPUTE_DRIVER_MISMATCH`, `CREDENTIAL_DELETION_UNSUPPORTED` fail for good; Compute failures retry within the attempt budget.
pub struct AgentDelete;

impl Reconciler for AgentDelete {
    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let agent_id = claim_agent(pass)?;
        let ns = pass.claim.namespace_id.clone();
        let request = Request::new(
            &pass.claim.actor_id,
            Action::Delete,
            agent_resource(pass, &agent_id),
        );
        let (agent, policy) = {
            let mut db = pass.db()?;
            let Some(agent) = load_agent(&mut *db, &ns, &agent_id)? else {
                return Ok(Report::permanent("INVALID_AGENT_OWNER"));
            };
            let policy = iam::decide(&mut *db, std::slice::from_ref(&request), &[])?;
            (agent, policy)
        };
        // Admission marks a deleted Agent `deleting` and `stopped`; anything else is a state
        // this work cannot act on.
        if agent.status != "deleting" || agent.desired_runtime_state != "stopped" {
            return Ok(Report::permanent("INVALID_AGENT_STATE"));
        }
        if let Some(denied) = deny(&policy, request, &pass.claim.actor_id) {
            return Ok(denied);
        }
        let revisions = {
            let mut db = pass.db()?;
            load_revisions(&mut *db, &ns, &agent_id, None, pass.claim.id)?
        };
        if revisions.iter().any(|r| !r.owned_by_agent(&agent)) {
            return Ok(Report::permanent("INVALID_REVISION_OWNER"));
        }
        if revisions.iter().any(|r| !r.owned_by(pass)) {
            return Ok(Report::permanent("COMPUTE_DRIVER_MISMATCH"));
        }
        let driver = pass.ctx.compute.clone();
        // A Compute that provisions runtime credentials it cannot delete would leave them
        // behind: refused before any effect (SPEC Z11).
        if driver.policy().runtime_credentials() == RuntimeCredentials::ProvisionedOnly {
            return Ok(Report::permanent("CREDENTIAL_DELETION_UNSUPPORTED"));
        }
        let spec = agent.spec(&pass.ctx.installation_id);
        // The Agent's own objects come back before its revisions retire.
        if !revisions.is_empty() {
            try_effect!(pass, "bind", |c| driver.bind_agent(&spec, c));
        }
        for revision in &revisions {
            let spec = revision.spec(&pass.ctx.installation_id);
            try_effect!(pass, "retire", |c| driver.retire_revision(&spec, c));
        }
        try_effect!(pass, "credentials", |c| driver
            .delete_agent_runtime_credentials(&spec, c));
        // The Agent's egress policy goes before its finalizer (SPEC S3).
        let has_policy = {
            let mut db = pass.db()?;
            db.query_opt(SANDBOX_POLICY_LOAD, &[&ns, &agent_id])?
                .is_some()
        };
        if has_policy {
            try_effect!(pass, "sandbox_policy", |c| driver
                .sandbox()
                .map_or(Ok(()), |s| s.remove_egress_policy(&spec, c)));
        }
        let retired: Vec<&str> = revisions.iter().map(|r| r.id.as_str()).collect();
        let details =
            json!({"retiredRevisions": retired, "servicePrincipalId": agent.service_principal_id});
        pass.fenced(|tx| {
            audit(
                tx,
                pass,
                Audit {
                    denial: false,
                    action: "openclaw.agents.lifecycle.delete",
                    resource_kind: "agent",
                    resource_id: &agent_id,
                    outcome: "success",
                    reason_code: Some("AGENT_DELETED"),
                    details: details.clone(),
                },
            )?;
            let removed: i64 = tx
                .query_one(
                    DELETE_FINALIZE,
                    &[&ns, &agent_id, &agent.service_principal_id],
                )?
                .get(0);
            if removed != 1 {
                return Err(PassError::Invariant(format!(
                    "agent {agent_id} was not removed by its deletion"
                )));
            }
            Ok(())
        })?;
        let mut report = Report::success("AGENT_DELETED");
        report.already_published = true;
        Ok(report)
    }

    fn publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError> {
        if matches!(report.outcome, Outcome::Pending { .. } | Outcome::Retry) {
            return Ok(());
        }
        let agent_id = claim_agent(pass)?;
        match &report.facts {
            Facts::Denied(denial) => {
                return denial_audit(
                    tx,
                    pass,
                    "openclaw.agents.delete",
                    &agent_id,
                    report,
                    denial,
                )
            }
            Facts::Plain => {}
            other => return Err(other.foreign("Agent delete")),
        }
        // SPEC A2: a failed deletion records its code only.
        audit(
            tx,
            pass,
            Audit {
                denial: false,
                action: "openclaw.agents.lifecycle.delete",
                resource_kind: "agent",
                resource_id: &agent_id,
                outcome: "failure",
                reason_code: Some(&report.code),
                details: json!({
                    "computeDriverId": pass.ctx.compute.id(),
                    "reasonCode": report.code,
                }),
            },
        )
    }
}
