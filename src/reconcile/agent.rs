//! Agent lifecycle reconcilers: stop (SPEC A1) and delete (SPEC A2).
//!
//! These reconcilers never write lifecycle state outside a claim-fenced transaction and never
//! call Compute before the actor has been reauthorized against the current IAM policy.

use super::dispatch::Reconciler;
use super::pass::{Pass, PassError};
use super::report::{Facts, Outcome, Report};
use super::rows::{load_agent, load_revisions, AgentStatus, RevisionRow, RuntimeState};
use super::steps::{audit, denial_audit, deny, try_effect, Audit};
use crate::compute::RuntimeCredentials;
use crate::iam::{self, Action, Request, Resource, ResourceKind};
use serde_json::json;

const AGENT_LOCK: &str = include_str!("../../sql/queries/agent_lock.sql");
const CLEAR_ACTIVE: &str = include_str!("../../sql/queries/agent_clear_active.sql");
const DELETE_FINALIZE: &str = include_str!("../../sql/queries/agent_delete_finalize.sql");
const SANDBOX_POLICY_LOAD: &str = include_str!("../../sql/queries/sandbox_policy_load.sql");

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
    type Facts = StopFacts;

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report<StopFacts>, PassError> {
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
        if agent.desired_runtime_state != RuntimeState::Stopped {
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
                    Some(a) if a.desired_runtime_state != RuntimeState::Stopped => {
                        return Ok(Report::success("STOP_SUPERSEDED"))
                    }
                    Some(_) => {}
                }
            }
            // SPEC G12: its sessions are closed before each Agent stop.
            super::repository::close_before_stop(pass, revision)?;
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
        Ok(Report::success(code).with_facts(Facts::Own(facts)))
    }

    /// A later deployment may have asked for `running` again while the last stop ran: the
    /// stop is then `STOP_SUPERSEDED` and the active pointer it would have cleared stays.
    fn settle(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        mut report: Report<StopFacts>,
    ) -> Result<Report<StopFacts>, PassError> {
        let Facts::Own(facts) = &mut report.facts else {
            return Ok(report);
        };
        let agent_id = claim_agent(pass)?;
        let row = tx.query_opt(AGENT_LOCK, &[&pass.claim.namespace_id, &agent_id])?;
        let principal = facts.service_principal_id.as_str();
        let Some(row) = row.filter(|r| r.get::<_, &str>(1) == principal) else {
            return Ok(Report::permanent("INVALID_AGENT_OWNER"));
        };
        if RuntimeState::parse(row.get(0))? != RuntimeState::Stopped {
            report.code = "STOP_SUPERSEDED".into();
            facts.stopped = None;
        }
        Ok(report)
    }

    fn publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report<StopFacts>,
    ) -> Result<(), PassError> {
        let agent_id = claim_agent(pass)?;
        let stopped = match &report.facts {
            Facts::Denied(denial) => {
                return denial_audit(tx, pass, "openclaw.agents.stop", &agent_id, report, denial)
            }
            Facts::Own(facts) => facts.stopped.as_deref(),
            Facts::Plain => None,
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
    type Facts = ();

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
        if agent.status != AgentStatus::Deleting
            || agent.desired_runtime_state != RuntimeState::Stopped
        {
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
            // SPEC G13: each revision's sessions closed, without awaiting their cleanup.
            super::repository::close_before_stop(pass, revision)?;
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
        // SPEC G13: the finalizer waits, every row intact, until every session of the Agent
        // is disposed (its cleanup work settles them).
        let outstanding = {
            let mut db = pass.db()?;
            super::repository::agent_sessions_outstanding(&mut *db, &ns, &agent_id)?
        };
        if outstanding {
            return Ok(Report::waiting(
                super::repository_cleanup::PENDING,
                super::repository_cleanup::cleanup_interval(pass),
                super::report::Wait::Unbounded,
            ));
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
            other => return Err(PassError::unexpected(other, "Agent delete")),
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
