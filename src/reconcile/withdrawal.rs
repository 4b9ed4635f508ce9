//! The credential-withdrawal reconciler (SPEC §13, E1-E13, E20): detaches one revision's
//! pending credential sources from its runtime through the Compute Driver's
//! `withdraw_credential_source`, each re-authorized for its own requester, then stamps, audits
//! and settles the withdrawal rows in the claim-fenced finalizing transaction, queueing the next
//! recovery series of a work whose retries ran out (E12), also after stale-claim recovery (E13).
//!
//! It never deploys the revision it names (E1), never writes a withdrawal row outside a
//! claim-fenced transaction, and never asks the driver to detach a source whose requester was
//! refused, whose owner is not the selected one, or that no longer matches its snapshot.

use super::dispatch::Reconciler;
use super::pass::{Context, Pass, PassError};
use super::report::{Denial, Facts, Outcome};
use super::revision_sources::SOURCES;
use super::rows::{load_agent, load_revisions, RevisionRow, WithdrawalState};
use super::steps::{deny, effect};
use crate::compute::{ComputeError, ComputeErrorKind, CredentialDetach, RevisionSpec};
use crate::credentials::{self, SnapshotSource, SourceRow};
use crate::db::GenericClient;
use crate::iam::{self, Action, Request, Resource, ResourceKind};
use crate::queue::{self, FailedWork, Operation, WithdrawalRecovery};
use serde_json::{json, Value};

/// This reconciler's reports carry its own facts.
type Report = super::report::Report<WithdrawalFacts>;

const STAMP: &str = include_str!("../../sql/queries/credential_withdrawal_stamp.sql");
const NAMESPACE_LOCK: &str = include_str!("../../sql/queries/namespace_lock.sql");
const AGENT_LOCK: &str = include_str!("../../sql/queries/agent_lock.sql");

/// The audit action of every withdrawal event (SPEC E11).
pub const ACTION: &str = "openclaw.agents.lifecycle.credentials_withdraw";

const WITHDRAWN: &str = "CREDENTIALS_WITHDRAWN";
const RETIRED: &str = "WITHDRAWAL_REVISION_RETIRED";
const PENDING: &str = "CREDENTIAL_WITHDRAWAL_PENDING";
const REASSIGNED: &str = "CREDENTIAL_WITHDRAWAL_REASSIGNED";
const RETIREMENT: &str = "CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT";
const OWNERSHIP: &str = "CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT";
const UNSUPPORTED: &str = "CREDENTIAL_WITHDRAWAL_UNSUPPORTED";
const MISMATCH: &str = "COMPUTE_DRIVER_MISMATCH";
const UNAVAILABLE: &str = "DEPENDENCY_UNAVAILABLE";

/// One pending row's attempt in a pass (SPEC E4-E8).
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    pub source_id: String,
    /// The row's own requester, whose `operate` on the Agent authorized or refused it.
    pub requested_by: String,
    pub code: String,
    /// Detached: the driver answered `Revoked` or `Absent`.
    pub revoked: bool,
    /// The requester's refusal (E4): nothing was detached.
    pub denial: Option<Denial>,
}

impl Attempt {
    fn unrevoked(row: &Row, code: &str) -> Attempt {
        Attempt {
            source_id: row.source_id.clone(),
            requested_by: row.requested_by.clone(),
            code: code.into(),
            revoked: false,
            denial: None,
        }
    }

    /// What E7 settles on: revoked, denied, or waiting for its runtime's retirement.
    fn settled(&self) -> bool {
        self.revoked || self.denial.is_some() || self.code == RETIREMENT
    }
}

/// What a withdrawal pass did, for its `settle` and `publish`.
#[derive(Clone, Debug, PartialEq)]
pub struct WithdrawalFacts {
    /// The outcome the pass decided, before policy: a retry that the attempt budget made
    /// terminal queues the next recovery series (E12).
    pub decided: Outcome,
    /// The detach attempts in E3 order, then the denials (E7, E8).
    pub attempts: Vec<Attempt>,
    /// Set by `settle`: this terminal retry queues its next recovery series (E9, E12).
    pub series: bool,
}

/// A withdrawal row as a pass reads it, with its source (`None` when the source is gone).
#[derive(Clone, Debug)]
struct Row {
    source_id: String,
    state: WithdrawalState,
    requested_by: String,
    source: Option<SourceRow>,
}

/// The revision's withdrawal rows: its snapshot sources that have one (a request only
/// withdraws a source the revision admitted, SPEC E15).
fn load_rows(
    client: &mut impl GenericClient,
    namespace_id: &str,
    revision_id: &str,
) -> Result<Vec<Row>, PassError> {
    let mut rows = Vec::new();
    for r in client.query(SOURCES, &[&namespace_id, &revision_id])? {
        let (Some(state), Some(requested_by)) = (r.get(2), r.get(3)) else {
            continue;
        };
        let source: Option<Value> = r.get(1);
        rows.push(Row {
            source_id: r.get(0),
            state: WithdrawalState::parse(state)?,
            requested_by,
            source: source
                .map(serde_json::from_value)
                .transpose()
                .map_err(|e| PassError::Invariant(format!("credential source row: {e}")))?,
        });
    }
    Ok(rows)
}

/// One source of the pending set (E3): its snapshot entry, whether it is the harness source,
/// and its row (whose source exists).
#[derive(Clone, Debug)]
struct PendingSource {
    snapshot: SnapshotSource,
    harness: bool,
    row: Row,
}

/// SPEC E3: the revision's sources in admission order, the harness source first, each whose
/// row is `pending` and whose source exists.
fn pending_set(revision: &RevisionRow, rows: &[Row]) -> Vec<PendingSource> {
    credentials::in_order(&revision.credential_sources, revision.harness_auth.as_ref())
        .into_iter()
        .filter_map(|(snapshot, harness)| {
            let row = rows.iter().find(|r| {
                r.source_id == snapshot.source_id
                    && r.state == WithdrawalState::Pending
                    && r.source.is_some()
            })?;
            Some(PendingSource {
                snapshot: snapshot.clone(),
                harness,
                row: row.clone(),
            })
        })
        .collect()
}

/// SPEC E7: any attempt neither revoked, nor denied, nor waiting for runtime retirement
/// retries `CREDENTIAL_WITHDRAWAL_PENDING`; else the first denied or retirement-bound attempt
/// fails with its code; else the withdrawal succeeded.
pub fn settle_attempts(attempts: &[Attempt]) -> (Outcome, String) {
    if attempts.iter().any(|a| !a.settled()) {
        return (Outcome::Retry, PENDING.into());
    }
    match attempts
        .iter()
        .find(|a| a.denial.is_some() || a.code == RETIREMENT)
    {
        Some(failed) => (Outcome::Permanent, failed.code.clone()),
        None => (Outcome::Success, WITHDRAWN.into()),
    }
}

/// SPEC E10, under the Namespace and Agent locks: a denied attempt whose row is still pending
/// but names another requester (a replay took it over) becomes an unrevoked
/// `CREDENTIAL_WITHDRAWAL_REASSIGNED` attempt of the new requester, without denial. `None` when
/// no denial was reassigned.
fn reassign(
    attempts: &[Attempt],
    rows: &[(String, WithdrawalState, String)],
) -> Option<Vec<Attempt>> {
    let mut reassigned = false;
    let settled = attempts
        .iter()
        .map(|a| {
            let taken_over = rows
                .iter()
                .find(|(source, _, _)| *source == a.source_id)
                .filter(|(_, state, by)| {
                    *state == WithdrawalState::Pending && *by != a.requested_by
                });
            match (&a.denial, taken_over) {
                (Some(_), Some((_, _, by))) => {
                    reassigned = true;
                    Attempt {
                        source_id: a.source_id.clone(),
                        requested_by: by.clone(),
                        code: REASSIGNED.into(),
                        revoked: false,
                        denial: None,
                    }
                }
                _ => a.clone(),
            }
        })
        .collect();
    reassigned.then_some(settled)
}

/// The next recovery series is due (E12): the pass decided to retry, the policy made it
/// terminal, and the Compute declares no maintenance interval (which would re-queue it, E14).
fn series_due(decided: Outcome, resolved: Outcome, ctx: &Context) -> bool {
    decided == Outcome::Retry
        && resolved == Outcome::Permanent
        && ctx.compute.policy().maintenance_interval().is_none()
}

/// A report of this reconciler: withdrawal work has no convergence deadline (E8), and never
/// waits pending.
fn report(outcome: Outcome, code: &str, attempts: Vec<Attempt>) -> Report {
    Report::new(outcome, code).with_facts(Facts::Own(WithdrawalFacts {
        decided: outcome,
        attempts,
        series: false,
    }))
}

/// What a pass reached before it ended (E8).
#[derive(Default)]
struct Progress {
    /// The pending set, in E3 order.
    requested: Vec<Row>,
    /// Detach attempts made.
    attempts: Vec<Attempt>,
    denied: Vec<Attempt>,
}

impl Progress {
    /// SPEC E8's attempts: those made, an unrevoked attempt with `code` for each requested
    /// row not yet settled, and the denials.
    fn ended(self, code: &str) -> Vec<Attempt> {
        let reached = |row: &Row| {
            self.attempts
                .iter()
                .chain(&self.denied)
                .any(|a| a.source_id == row.source_id)
        };
        let unsettled: Vec<Attempt> = self
            .requested
            .iter()
            .filter(|row| !reached(row))
            .map(|row| Attempt::unrevoked(row, code))
            .collect();
        let mut attempts = self.attempts;
        attempts.extend(unsettled);
        attempts.extend(self.denied);
        attempts
    }
}

/// SPEC E8: a pass that ended on an error. A driver refusal (the ownership conflict
/// included) fails with its code; any other error retries `DEPENDENCY_UNAVAILABLE`.
fn ended(e: PassError, progress: Progress) -> Report {
    let refusal = match &e {
        PassError::Compute(c) => match c.kind() {
            ComputeErrorKind::Permanent(code) => Some(code.clone()),
            _ => None,
        },
        _ => None,
    };
    let (outcome, code) = match refusal {
        Some(code) => (Outcome::Permanent, code),
        None => (Outcome::Retry, UNAVAILABLE.to_string()),
    };
    let mut ended = report(outcome, &code, progress.ended(&code)).at("withdraw");
    match &e {
        PassError::Compute(c) => ended = ended.with_compute_error(c),
        PassError::Db(_) => {
            ended.failure.transient = true;
            ended.failure.dependency = Some("database");
        }
        _ => {}
    }
    ended
}

/// Detaches one source (E6): the ownership and snapshot check, then the driver's call.
fn detach(
    pass: &Pass<'_>,
    spec: &RevisionSpec,
    pending: &PendingSource,
) -> Result<Attempt, PassError> {
    let Some(source) = &pending.row.source else {
        return Err(PassError::Invariant(
            "a pending source without its row".into(),
        ));
    };
    if !source.owned(&pending.snapshot, pass.ctx.credential_gateway.as_deref()) {
        return Err(PassError::Compute(ComputeError::permanent(
            OWNERSHIP, "compute", None,
        )));
    }
    let attachment = pending.snapshot.attachment(pending.harness);
    let driver = pass.ctx.compute.clone();
    let (code, revoked) = match effect(pass, "withdraw", |c| {
        driver.credential_gateway().map_or_else(
            || Err(crate::compute::credential_withdrawal_unsupported()),
            |g| g.withdraw_credential_source(spec, &attachment, false, c),
        )
    })? {
        Ok(CredentialDetach::Revoked | CredentialDetach::Absent) => (WITHDRAWN, true),
        Ok(CredentialDetach::Pending) => (PENDING, false),
        Err(e) if matches!(e.kind(), ComputeErrorKind::Permanent(c) if c == RETIREMENT) => {
            (RETIREMENT, false)
        }
        Err(e) => return Err(e.into()),
    };
    let mut attempt = Attempt::unrevoked(&pending.row, code);
    attempt.revoked = revoked;
    Ok(attempt)
}

/// A revision's pending credential withdrawals (SPEC E1-E13).
///
/// Expected flow, in SPEC order: no Agent or revision id is `INVALID_TARGET`; the Agent or
/// revision gone is `WITHDRAWAL_REVISION_RETIRED`; no pending source (E3) is
/// `CREDENTIALS_WITHDRAWN`; each pending row is re-authorized for its own requester (`operate`
/// on the Agent, all in one IAM statement, E4); when any was allowed, the revision's Compute
/// must be the worker's (`COMPUTE_DRIVER_MISMATCH`) and have the call
/// (`CREDENTIAL_WITHDRAWAL_UNSUPPORTED`, E5); then each allowed source, in E3 order, is checked
/// against its owner and snapshot and detached (E6), and the attempts are settled (E7). The
/// fenced publish locks the Namespace, then the Agent, for a terminal outcome and settles
/// reassigned denials (E10), stamps each attempt's row, writes E11's audits per requester, and
/// queues the next recovery series of a terminal retry (E12).
///
/// Guarantees: no driver call for a refused requester, a foreign owner or a changed source; a
/// confirmed revocation is stamped and audited in the pass that confirmed it, even when the
/// pass retries; a revision has at most one chain of withdrawal work.
///
/// Assumptions: idempotent — a pass may run again after a lost lease, and detaching a source
/// twice answers `Revoked` or `Absent`; the Agent's lane serializes it with the Agent's other
/// work.
///
/// Errors: a driver refusal (`CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT`,
/// `…_MISCONFIGURED`, …) fails for good with its code; any other error retries
/// `DEPENDENCY_UNAVAILABLE` within the attempt budget (no convergence deadline), and a
/// terminal retry queues the recovery series; claim loss publishes nothing (E8).
pub struct CredentialWithdrawalReconciler;

impl CredentialWithdrawalReconciler {
    /// E2 to E7; `progress` keeps what the pass reached for E8.
    fn withdraw(
        &self,
        pass: &Pass<'_>,
        agent_id: &str,
        revision_id: &str,
        progress: &mut Progress,
    ) -> Result<Report, PassError> {
        let ns = pass.claim.namespace_id.as_str();
        let (revision, rows) = {
            let mut db = pass.db()?;
            if load_agent(&mut *db, ns, agent_id)?.is_none() {
                return Ok(Report::success(RETIRED));
            }
            let revision =
                load_revisions(&mut *db, ns, agent_id, Some(revision_id), pass.claim.id)?.pop();
            let Some(revision) = revision else {
                return Ok(Report::success(RETIRED));
            };
            let rows = load_rows(&mut *db, ns, revision_id)?;
            (revision, rows)
        };
        let pending = pending_set(&revision, &rows);
        if pending.is_empty() {
            return Ok(report(Outcome::Success, WITHDRAWN, Vec::new()));
        }
        progress.requested = pending.iter().map(|p| p.row.clone()).collect();
        let allowed = self.authorize(pass, agent_id, pending, progress)?;
        if !allowed.is_empty() {
            let refused = if !revision.owned_by(pass) {
                Some(MISMATCH)
            } else if pass.ctx.compute.credential_gateway().is_none() {
                Some(UNSUPPORTED)
            } else {
                None
            };
            if let Some(code) = refused {
                let mut attempts: Vec<Attempt> = allowed
                    .iter()
                    .map(|p| Attempt::unrevoked(&p.row, code))
                    .collect();
                attempts.append(&mut progress.denied);
                return Ok(report(Outcome::Permanent, code, attempts));
            }
            let spec = revision.spec(&pass.ctx.installation_id);
            for pending in &allowed {
                let attempt = detach(pass, &spec, pending)?;
                progress.attempts.push(attempt);
            }
        }
        let mut attempts = std::mem::take(&mut progress.attempts);
        attempts.append(&mut progress.denied);
        let (outcome, code) = settle_attempts(&attempts);
        Ok(report(outcome, &code, attempts))
    }

    /// E4: every pending row's requester asked about in one IAM statement; the refused rows
    /// become denials in `progress`, the allowed ones are returned in E3 order.
    fn authorize(
        &self,
        pass: &Pass<'_>,
        agent_id: &str,
        pending: Vec<PendingSource>,
        progress: &mut Progress,
    ) -> Result<Vec<PendingSource>, PassError> {
        let agent = Resource::owned(ResourceKind::Agent, &pass.claim.namespace_id, agent_id);
        let requests: Vec<Request> = pending
            .iter()
            .map(|p| Request::new(&p.row.requested_by, Action::Operate, agent.clone()))
            .collect();
        let policy = {
            let mut db = pass.db()?;
            iam::decide(&mut *db, &requests, &[])?
        };
        let mut allowed = Vec::new();
        for (p, request) in pending.into_iter().zip(requests) {
            let Some(refused) = deny::<WithdrawalFacts>(&policy, request, &p.row.requested_by)
            else {
                allowed.push(p);
                continue;
            };
            let Facts::Denied(denial) = refused.facts else {
                return Err(PassError::unexpected(
                    &refused.facts,
                    "credential withdrawal",
                ));
            };
            progress.denied.push(Attempt {
                denial: Some(*denial),
                ..Attempt::unrevoked(&p.row, &refused.code)
            });
        }
        Ok(allowed)
    }
}

fn claim_target(pass: &Pass<'_>) -> Result<(String, String), PassError> {
    match (&pass.claim.agent_id, &pass.claim.revision_id) {
        (Some(agent), Some(revision)) => Ok((agent.clone(), revision.clone())),
        _ => Err(PassError::Invariant(
            "credential withdrawal work without an agent or revision".into(),
        )),
    }
}

impl Reconciler for CredentialWithdrawalReconciler {
    type Facts = WithdrawalFacts;

    /// The next recovery series of each withdrawal work stale-claim recovery failed (SPEC
    /// E13).
    fn after_stale_recovery(&self, ctx: &Context, failed: &[FailedWork]) {
        recover_series(ctx, failed);
    }

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let Ok((agent_id, revision_id)) = claim_target(pass) else {
            return Ok(Report::permanent("INVALID_TARGET"));
        };
        let mut progress = Progress::default();
        match self.withdraw(pass, &agent_id, &revision_id, &mut progress) {
            Err(e) if !e.is_claim_loss() => Ok(ended(e, progress)),
            other => other,
        }
    }

    /// E9, E10: a terminal outcome locks the Namespace, then the Agent, settles denials a
    /// replay took over, and is decided again; a terminal retry is marked for its recovery
    /// series (E12).
    fn settle(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        mut report: Report,
    ) -> Result<Report, PassError> {
        let Facts::Own(facts) = &report.facts else {
            return Ok(report);
        };
        let mut facts = facts.clone();
        if report.outcome != Outcome::Permanent {
            return Ok(report);
        }
        let (agent_id, revision_id) = claim_target(pass)?;
        let ns = pass.claim.namespace_id.as_str();
        tx.query_opt(NAMESPACE_LOCK, &[&ns])?;
        tx.query_opt(AGENT_LOCK, &[&ns, &agent_id])?;
        if facts.attempts.iter().any(|a| a.denial.is_some()) {
            let rows: Vec<(String, WithdrawalState, String)> = load_rows(tx, ns, &revision_id)?
                .into_iter()
                .map(|r| (r.source_id, r.state, r.requested_by))
                .collect();
            if let Some(settled) = reassign(&facts.attempts, &rows) {
                // A permanent pass that only denials and retirement-bound sources failed
                // retries, so its next attempt authorizes the new requester.
                let only_denials = facts.attempts.iter().all(Attempt::settled);
                facts.attempts = settled;
                if facts.decided == Outcome::Permanent && only_denials {
                    facts.decided = Outcome::Retry;
                    let retry = Report {
                        outcome: Outcome::Retry,
                        code: REASSIGNED.into(),
                        ..report
                    };
                    report = pass.resolve(retry);
                }
            }
        }
        facts.series = series_due(facts.decided, report.outcome, pass.ctx);
        Ok(report.with_facts(Facts::Own(facts)))
    }

    /// E9, E11, E12: each attempt's row stamped, the audits per requester, and the next
    /// recovery series of a terminal retry.
    fn publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError> {
        let facts = match &report.facts {
            Facts::Own(facts) => facts,
            // Invalid target, or the revision is gone: no row to stamp, nothing to audit.
            Facts::Plain => return Ok(()),
            other => return Err(PassError::unexpected(other, "credential withdrawal")),
        };
        let (agent_id, revision_id) = claim_target(pass)?;
        if !facts.attempts.is_empty() {
            let column = |f: &dyn Fn(&Attempt) -> String| -> Vec<String> {
                facts.attempts.iter().map(f).collect()
            };
            let revoked: Vec<bool> = facts.attempts.iter().map(|a| a.revoked).collect();
            tx.execute(
                STAMP,
                &[
                    &pass.claim.namespace_id,
                    &revision_id,
                    &column(&|a| a.source_id.clone()),
                    &column(&|a| a.code.clone()),
                    &revoked,
                ],
            )?;
        }
        audits(tx, pass, &agent_id, report, facts)?;
        if facts.series {
            if let Some(next) = WithdrawalRecovery::after(&pass.claim.key) {
                queue::work_enqueue_withdrawal_recovery(tx, pass.claim.id, &next)?;
            }
        }
        // A row requested while this pass ran is never left without a work (SPEC E15: its
        // request found this one outstanding). A retry sees it on its next pass.
        if report.outcome != Outcome::Retry {
            let attempted: Vec<String> =
                facts.attempts.iter().map(|a| a.source_id.clone()).collect();
            queue::work_enqueue_withdrawal_followup(tx, pass.claim.id, &attempted)?;
        }
        Ok(())
    }
}

/// Each requester's source ids, in attempt order.
fn by_requester<'a>(attempts: impl Iterator<Item = &'a Attempt>) -> Vec<(String, Vec<String>)> {
    let mut grouped: Vec<(String, Vec<String>)> = Vec::new();
    for a in attempts {
        match grouped.iter_mut().find(|(by, _)| *by == a.requested_by) {
            Some((_, ids)) => ids.push(a.source_id.clone()),
            None => grouped.push((a.requested_by.clone(), vec![a.source_id.clone()])),
        }
    }
    grouped
}

/// SPEC E11: the revocations of this pass, one event per requester; when the outcome is not a
/// retry (or is terminal), each denial; when terminal, the unsettled rows, one event per
/// requester (the claim's actor, without a list, when the pass reached no row).
fn audits(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    agent_id: &str,
    report: &Report,
    facts: &WithdrawalFacts,
) -> Result<(), PassError> {
    let event = Event { pass, agent_id };
    for (requester, ids) in by_requester(facts.attempts.iter().filter(|a| a.revoked)) {
        event.append(tx, &requester, "success", WITHDRAWN, &ids, None)?;
    }
    if report.outcome == Outcome::Retry {
        return Ok(());
    }
    for a in &facts.attempts {
        if let Some(denial) = &a.denial {
            let ids = [a.source_id.clone()];
            event.append(tx, &a.requested_by, "denied", &a.code, &ids, Some(denial))?;
        }
    }
    if report.outcome == Outcome::Permanent {
        let unsettled = facts
            .attempts
            .iter()
            .filter(|a| !a.revoked && a.denial.is_none());
        let mut failed = by_requester(unsettled);
        if facts.attempts.is_empty() {
            failed.push((pass.claim.actor_id.clone(), Vec::new()));
        }
        for (requester, ids) in failed {
            event.append(tx, &requester, "failure", &report.code, &ids, None)?;
        }
    }
    Ok(())
}

/// The audit events of one pass (E11): resource the Agent, actor the requester.
struct Event<'a> {
    pass: &'a Pass<'a>,
    agent_id: &'a str,
}

impl Event<'_> {
    fn append(
        &self,
        tx: &mut crate::db::Tx<'_>,
        actor: &str,
        outcome: &str,
        code: &str,
        source_ids: &[String],
        denial: Option<&Denial>,
    ) -> Result<(), PassError> {
        let pass = self.pass;
        let mut details = json!({
            "computeDriverId": pass.ctx.compute.id(),
            "reasonCode": code,
            "revisionId": pass.claim.revision_id,
        });
        if !source_ids.is_empty() {
            details["credentialSourceIds"] = json!(source_ids);
        }
        if let Some(denial) = denial {
            details["authorization"] = json!(denial.request);
            details["decisionReason"] = json!(denial.decision.reason);
        }
        let authorization = denial.map(|d| json!(d.request));
        crate::audit::audit_append(
            tx,
            &crate::audit::AuditEvent {
                installation_id: &pass.ctx.installation_id,
                namespace_id: Some(&pass.claim.namespace_id),
                kind: if denial.is_some() {
                    "authorization_denial"
                } else {
                    "mutation"
                },
                actor_id: actor,
                action: ACTION,
                resource_kind: "agent",
                resource_id: self.agent_id,
                outcome,
                reason_code: Some(code),
                work_id: pass.claim.id,
                details: &details,
                authorization: authorization.as_ref(),
                decision_reason: denial.map(|d| d.decision.reason),
            },
        )?;
        Ok(())
    }
}

/// SPEC E13: each withdrawal work that stale-claim recovery failed gets its next recovery
/// series (E12) in its own transaction, the Namespace and then the Agent locked first. One that
/// cannot be queued is said as `worker.error WORKER_UNAVAILABLE` and the others still are. None
/// under a Compute with a maintenance interval.
pub fn recover_series(ctx: &Context, failed: &[FailedWork]) {
    if ctx.compute.policy().maintenance_interval().is_some() {
        return;
    }
    for work in failed {
        let Some(next) = WithdrawalRecovery::after(&work.key) else {
            continue;
        };
        let queued = (|| -> Result<(), PassError> {
            let mut client = ctx.pool.get()?;
            let mut tx = client.transaction()?;
            tx.query_opt(NAMESPACE_LOCK, &[&work.namespace_id])?;
            tx.query_opt(AGENT_LOCK, &[&work.namespace_id, &work.agent_id])?;
            queue::work_enqueue_withdrawal_recovery(&mut tx, work.id, &next)?;
            tx.commit()?;
            Ok(())
        })();
        if queued.is_err() {
            ctx.events.emit(
                "worker.error",
                json!({
                    "code": "WORKER_UNAVAILABLE",
                    "workId": work.key,
                    "operation": Operation::CredentialWithdrawal.event_name(),
                }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(source: &str, by: &str, code: &str, revoked: bool) -> Attempt {
        Attempt {
            source_id: source.into(),
            requested_by: by.into(),
            code: code.into(),
            revoked,
            denial: None,
        }
    }

    fn denied(source: &str, by: &str) -> Attempt {
        let request = Request::new(
            by,
            Action::Operate,
            Resource::owned(ResourceKind::Agent, "ns1", "a"),
        );
        Attempt {
            denial: Some(Denial {
                request,
                decision: crate::iam::Decision {
                    allowed: false,
                    reason: "NO_MATCHING_BINDING",
                    evidence: Default::default(),
                },
            }),
            ..attempt(source, by, "AUTHORIZATION_DENIED", false)
        }
    }

    #[test]
    fn e12_the_series_doubles_from_30_s_to_5_min_and_ends_at_15() {
        let key = "agent_revision:r1:credential_withdrawal:activation";
        let first = WithdrawalRecovery::after(key).unwrap();
        assert_eq!(
            (first.n, first.suffix.as_str(), first.delay.as_millis()),
            (1, "activation:recovery:1", 30_000)
        );
        let delays: Vec<u128> = (1..=15)
            .map(|m| {
                let key = format!("{key}:recovery:{m}");
                WithdrawalRecovery::after(&key).map_or(0, |n| n.delay.as_millis())
            })
            .collect();
        assert_eq!(&delays[..5], [60_000, 120_000, 240_000, 300_000, 300_000]);
        assert_eq!(delays[13], 300_000);
        assert_eq!(delays[14], 0, "no series after the 15th");
        assert_eq!(
            WithdrawalRecovery::after(&format!("{key}:recovery:3"))
                .unwrap()
                .suffix,
            "activation:recovery:4"
        );
        assert_eq!(WithdrawalRecovery::after("agent:a:stop:1"), None);
    }

    #[test]
    fn e7_pending_retries_then_the_first_refusal_fails_else_success() {
        let revoked = attempt("a", "u", WITHDRAWN, true);
        let pending = attempt("b", "u", PENDING, false);
        let retirement = attempt("c", "u", RETIREMENT, false);
        assert_eq!(
            settle_attempts(&[revoked.clone(), pending, denied("d", "v")]),
            (Outcome::Retry, PENDING.into())
        );
        assert_eq!(
            settle_attempts(&[revoked.clone(), retirement, denied("d", "v")]),
            (Outcome::Permanent, RETIREMENT.into())
        );
        assert_eq!(
            settle_attempts(&[revoked.clone(), denied("d", "v")]),
            (Outcome::Permanent, "AUTHORIZATION_DENIED".into())
        );
        assert_eq!(
            settle_attempts(&[revoked]),
            (Outcome::Success, WITHDRAWN.into())
        );
    }

    #[test]
    fn e10_only_a_pending_row_taken_over_by_another_requester_is_reassigned() {
        let attempts = [attempt("a", "u", WITHDRAWN, true), denied("b", "v")];
        let same = [("b".to_string(), WithdrawalState::Pending, "v".to_string())];
        assert_eq!(reassign(&attempts, &same), None);
        let revoked = [("b".to_string(), WithdrawalState::Revoked, "w".to_string())];
        assert_eq!(reassign(&attempts, &revoked), None);
        let taken = [("b".to_string(), WithdrawalState::Pending, "w".to_string())];
        let settled = reassign(&attempts, &taken).unwrap();
        assert_eq!(settled[0], attempts[0]);
        assert_eq!(settled[1], attempt("b", "w", REASSIGNED, false));
    }

    #[test]
    fn e8_unsettled_rows_get_the_code_after_those_made_and_before_the_denials() {
        let row = |id: &str| Row {
            source_id: id.into(),
            state: WithdrawalState::Pending,
            requested_by: "u".into(),
            source: None,
        };
        let progress = Progress {
            requested: vec![row("a"), row("b"), row("c")],
            attempts: vec![attempt("a", "u", WITHDRAWN, true)],
            denied: vec![denied("c", "v")],
        };
        let codes: Vec<(String, String)> = progress
            .ended(UNAVAILABLE)
            .into_iter()
            .map(|a| (a.source_id, a.code))
            .collect();
        assert_eq!(
            codes,
            [
                ("a".into(), WITHDRAWN.into()),
                ("b".into(), UNAVAILABLE.into()),
                ("c".into(), "AUTHORIZATION_DENIED".into())
            ]
        );
    }
}
