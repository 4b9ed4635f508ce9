//! The sandbox-policy reconciler (SPEC S3): applies an Agent's egress allowlist through the
//! Sandbox Driver's seam (`apply_egress_policy`) and publishes the policy's state.
//!
//! It never writes the policy row outside the claim-fenced finalizing transaction, and never
//! calls the driver for a superseded generation, a deleting Agent or a refused actor.

use super::dispatch::Reconciler;
use super::pass::{Pass, PassError};
use super::report::{Facts, Outcome};
use super::rows::load_agent;
use super::steps::{audit, compute_report, denial_audit, deny, effect, Audit};
use crate::compute::sandbox::EgressRule;
use crate::iam::{self, Action, Request, Resource, ResourceKind};
use crate::installation;
use serde_json::{json, Value};

/// This reconciler's reports carry its own facts.
type Report = super::report::Report<PolicyFacts>;

const LOAD: &str = include_str!("../../sql/queries/sandbox_policy_load.sql");
const SETTLE: &str = include_str!("../../sql/queries/sandbox_policy_settle.sql");
const NAMESPACE_LOCK: &str = include_str!("../../sql/queries/namespace_lock.sql");
const AGENT_LOCK: &str = include_str!("../../sql/queries/agent_lock.sql");

/// The audit action of a pass's outcome (SPEC S3).
const ACTION: &str = "openclaw.agents.lifecycle.sandbox_policy";

/// What a sandbox-policy pass decided about its generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyFacts {
    pub generation: i32,
    /// The egress the driver was asked to apply, for the audit.
    pub egress: Vec<EgressRule>,
}

/// The generation a key `agent:<id>:sandbox_policy:<n>` names.
fn key_generation(key: &str) -> Option<i32> {
    key.rsplit_once(":sandbox_policy:")?.1.parse().ok()
}

/// The stored egress (PostgreSQL holds its shape: `occ.is_egress`).
fn egress_of(stored: &Value) -> Result<Vec<EgressRule>, PassError> {
    let text = stored.to_string();
    installation::parse_egress(&text)
        .map_err(|e| PassError::Invariant(format!("stored sandbox policy egress: {e}")))
}

/// An Agent's sandbox policy (SPEC S3).
///
/// Expected flow, in SPEC order: a key older than the stored generation, or a deleting Agent,
/// is `SANDBOX_POLICY_SUPERSEDED` with no driver call; reauthorize `operate` on the Agent; a
/// policy outside the worker's current ceiling (`sandboxNetworkPolicyCeiling`) is permanent
/// `SANDBOX_POLICY_EXCEEDS_CEILING`; no Sandbox Driver selected is permanent
/// `SANDBOX_DRIVER_UNAVAILABLE`; then `apply_egress_policy(agent, generation, egress)`. The
/// fenced publish locks the Namespace, then the Agent, sets the policy `applied` (success) or
/// `failed` (terminal) only while its generation is still the stored one, and audits
/// `openclaw.agents.lifecycle.sandbox_policy` (mutation, or `authorization_denial`).
///
/// Guarantees: no driver call before the actor is reauthorized, nor for a superseded
/// generation; an older generation never overwrites a newer one's state.
///
/// Assumptions: idempotent — it may run again after a lost lease, and applying the same
/// egress twice converges to the same NetworkPolicy; the Agent's lane serializes it with the
/// Agent's other work.
///
/// Errors: `ACTOR_REVOKED`, `AUTHORIZATION_DENIED`, `SANDBOX_POLICY_EXCEEDS_CEILING`,
/// `SANDBOX_DRIVER_UNAVAILABLE` and a driver's refusal fail for good; any other driver error
/// retries `DEPENDENCY_UNAVAILABLE` within the attempt budget.
pub struct SandboxPolicyReconciler;

impl Reconciler for SandboxPolicyReconciler {
    type Facts = PolicyFacts;

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let agent_id =
            pass.claim.agent_id.clone().ok_or_else(|| {
                PassError::Invariant("sandbox policy work without an agent".into())
            })?;
        let ns = pass.claim.namespace_id.clone();
        let generation = key_generation(&pass.claim.key).ok_or_else(|| {
            PassError::Invariant("sandbox policy key without a generation".into())
        })?;
        let request = Request::new(
            &pass.claim.actor_id,
            Action::Operate,
            Resource::owned(ResourceKind::Agent, &ns, &agent_id),
        );
        let (agent, stored, policy) = {
            let mut db = pass.db()?;
            let stored = db.query_opt(LOAD, &[&ns, &agent_id])?;
            let Some(agent) = load_agent(&mut *db, &ns, &agent_id)? else {
                return Ok(Report::success("SANDBOX_POLICY_SUPERSEDED"));
            };
            let Some(stored) = stored else {
                return Ok(Report::success("SANDBOX_POLICY_SUPERSEDED"));
            };
            let stored_generation: i32 = stored.get(0);
            let deleting: bool = stored.get(2);
            if generation < stored_generation || deleting {
                return Ok(Report::success("SANDBOX_POLICY_SUPERSEDED"));
            }
            let policy = iam::decide(&mut *db, std::slice::from_ref(&request), &[])?;
            (agent, egress_of(&stored.get(1))?, policy)
        };
        let facts = PolicyFacts {
            generation,
            egress: stored,
        };
        if let Some(denied) = deny(&policy, request, &pass.claim.actor_id) {
            return Ok(denied);
        }
        let with = |report: Report| report.with_facts(Facts::Own(facts.clone()));
        if !installation::within(&facts.egress, &pass.ctx.sandbox.ceiling) {
            return Ok(with(Report::permanent("SANDBOX_POLICY_EXCEEDS_CEILING")));
        }
        if pass.ctx.sandbox.driver.is_none() {
            return Ok(with(Report::permanent("SANDBOX_DRIVER_UNAVAILABLE")));
        }
        let driver = pass.ctx.compute.clone();
        let spec = agent.spec(&pass.ctx.installation_id);
        let applied = match effect(pass, "sandbox_policy", |c| {
            driver.sandbox().map_or_else(
                || Err(crate::compute::sandbox::sandbox_driver_unavailable()),
                |s| s.apply_egress_policy(&spec, generation, &facts.egress, c),
            )
        })? {
            Ok(()) => Report::success("SANDBOX_POLICY_APPLIED"),
            Err(e) => compute_report(&e, pass).at("sandbox_policy"),
        };
        Ok(with(applied))
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
        let agent_id =
            pass.claim.agent_id.clone().ok_or_else(|| {
                PassError::Invariant("sandbox policy work without an agent".into())
            })?;
        let generation = key_generation(&pass.claim.key).ok_or_else(|| {
            PassError::Invariant("sandbox policy key without a generation".into())
        })?;
        // Namespace, then Agent (SPEC S3).
        tx.query_opt(NAMESPACE_LOCK, &[&pass.claim.namespace_id])?;
        tx.query_opt(AGENT_LOCK, &[&pass.claim.namespace_id, &agent_id])?;
        let state = if report.outcome == Outcome::Success {
            "applied"
        } else {
            "failed"
        };
        match &report.facts {
            Facts::Denied(denial) => {
                tx.execute(SETTLE, &[&agent_id, &generation, &state, &report.code])?;
                denial_audit(tx, pass, ACTION, &agent_id, report, denial)
            }
            Facts::Own(facts) => {
                tx.execute(SETTLE, &[&agent_id, &generation, &state, &report.code])?;
                let egress = installation::egress_json(&facts.egress);
                audit(
                    tx,
                    pass,
                    Audit {
                        denial: false,
                        action: ACTION,
                        resource_kind: "agent",
                        resource_id: &agent_id,
                        outcome: if report.outcome == Outcome::Success {
                            "success"
                        } else {
                            "failure"
                        },
                        reason_code: Some(&report.code),
                        details: json!({"generation": generation, "egress": egress,
                                        "computeDriverId": pass.ctx.compute.id()}),
                    },
                )
            }
            // Superseded: the stored generation is another pass's to settle. A failure before
            // anything was decided (a database error at the attempt budget's end) fails the
            // policy and is audited like any other failure (SPEC S3).
            Facts::Plain => {
                if report.outcome == Outcome::Success {
                    return Ok(());
                }
                tx.execute(SETTLE, &[&agent_id, &generation, &state, &report.code])?;
                audit(
                    tx,
                    pass,
                    Audit {
                        denial: false,
                        action: ACTION,
                        resource_kind: "agent",
                        resource_id: &agent_id,
                        outcome: "failure",
                        reason_code: Some(&report.code),
                        details: json!({"generation": generation,
                                        "computeDriverId": pass.ctx.compute.id()}),
                    },
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_names_its_generation() {
        assert_eq!(key_generation("agent:ag-1:sandbox_policy:12"), Some(12));
        assert_eq!(key_generation("agent:ag-1:stop:1"), None);
    }
}
