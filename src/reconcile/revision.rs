//! AgentRevision deployment (SPEC R2-R11): the reconcile work of an admitted revision and its
//! periodic maintenance.
//!
//! Expected flow, in the seed's order: R2's checks of the admitted revision (Namespace,
//! ownership, Harness, Compute Driver); a maintenance pass of a failed deployment ends its
//! chain (R11); R2's authorization and backend checks on every pass before any effect (a
//! managed account's M2 checks among them: its `read` grant after the Secret checks, then the
//! backend, the access-token source and the binding, each against the admitted snapshot); a
//! stored refusal decided again (R9); R3 a stopped Agent stops the revision; R4 a newer
//! revision supersedes it; a stored refusal is published (R9); the stored execution admission
//! is decided (SPEC Z1: a refused active revision is withdrawn where the driver can) and the
//! Secret context resolves (SPEC Z4), or refuses a candidate while the active revision takes
//! SPEC Z2's active path;
//! R8 earlier runtimes are stopped first when the driver requires it; R5 prepare and observe
//! readiness; R6 reload the Agent, compare-and-set the active pointer in a fenced transaction,
//! activate the route (a before-commit driver activates first, before the compare-and-set),
//! retire earlier revisions, then publish exactly one activation audit with the completion; R7
//! an already-active revision repeats route activation and retirement; R11 maintenance
//! re-observes an active revision.
//!
//! Guarantees: a denial makes no Compute call and is audited as `openclaw.agents.deploy` /
//! `authorization_denial`; an older revision never replaces a newer active one; a candidate
//! refused after it may have been prepared is stopped under the live claim before the failure
//! is published (R9); one whose preparation failed for good or whose credential bootstrap was
//! still pending at the deadline fails at once and registers `failed-preparation` repository
//! cleanup in the transaction that fails it, which stops it durably (SPEC Z3, G2); a failed
//! maintenance observation never retires the running revision.
//!
//! Assumptions: idempotent — a pass may run again after a lost lease at any point, including
//! between the pointer compare-and-set and the completion; every Compute call tolerates having
//! happened already. The Agent's lane serializes this work with its stop and delete.
//!
//! Errors: every R2 code is permanent, but an unresolved Secret context of the active revision
//! waits on its reconcile key (SPEC Z2); Compute failures follow R10 (transient: pending
//! `DEPENDENCY_UNAVAILABLE` without spending attempts; otherwise retry `DEPENDENCY_UNAVAILABLE`
//! or the driver's permanent code); a lost compare-and-set retries `ACTIVE_REVISION_CHANGED`.

use super::dispatch::Reconciler;
use super::pass::{Pass, PassError};
use super::policy::StoredRefusal;
use super::report::{DeployPhases, Facts, Outcome, Wait};
use super::revision_sources::{self, SourceState};
use super::rows::{
    load_agent, load_revisions, AgentRow, NamespaceStatus, RevisionRow, RuntimeState,
};
use super::steps::{
    audit, compute_report, denial_audit, deny, effect, readiness_recheck, stop_yield_recheck,
    try_effect, Audit,
};
use crate::compute::{
    held_runtime_failure, revision_pending, valid_revision_observation, AdmissionUse,
    BackendBinding, ComputeError, ComputeErrorKind, Credential, CredentialAttachment,
    ManagedAccountAuth, RevisionSpec, SecretProjection, WorkspaceSetup, BOOTSTRAP_PENDING,
    REVISION_PENDING_CODES,
};
use crate::compute::{HarnessAuthMethod, HarnessMode};
use crate::config::Mode;
use crate::iam::{self, Action, Policy, Request, Resource, ResourceKind};
use crate::queue::{self, CleanupKind, NewWork, Operation};
use serde_json::{json, Value};
use std::cell::Cell;
use std::time::Duration;
use std::time::Instant;

/// This reconciler's reports carry its own facts.
type Report = super::report::Report<RevisionFacts>;

const LOOKUP: &str = include_str!("../../sql/queries/revision_lookup.sql");
const SERVICE_ACCOUNT: &str = include_str!("../../sql/queries/revision_service_account.sql");
const BACKEND: &str = include_str!("../../sql/queries/revision_backend.sql");
const ACTIVATE: &str = include_str!("../../sql/queries/revision_activate.sql");
const RETIRE_EARLIER: &str = include_str!("../../sql/queries/revision_retire_earlier.sql");
const HARNESS_APPROVED: &str = include_str!("../../sql/queries/harness_approved_version.sql");
const ACTIVATION_AUDITED: &str = include_str!("../../sql/queries/revision_activation_audited.sql");
const NAMESPACE_LOCK: &str = include_str!("../../sql/queries/namespace_lock.sql");
const STILL_ACTIVE: &str = include_str!("../../sql/queries/revision_still_active.sql");
const REPOSITORY_KIND: &str = include_str!("../../sql/queries/revision_repository_kind.sql");

/// SPEC G9: a standing revision's maintenance interval, max(100, min(10 000, v × 100)) ms for
/// the built-in policy's `validate` answer v = 100.
const STANDING_MAINTENANCE: Duration = Duration::from_secs(10);
const WORKSPACE_SETUP_COMPLETE: &str =
    include_str!("../../sql/queries/workspace_setup_complete.sql");

/// The backend type a managed ChatGPT account binds to.
const CHATGPT_BACKEND: &str = "chatgpt";

mod git;

/// Refusals every pass decides again from current state (R2): once they no longer stand, a
/// candidate whose stop was pending may continue. Any other stored refusal stands.
const REDECIDED_REFUSALS: &[&str] = &[
    "NAMESPACE_NOT_READY",
    "ACTOR_REVOKED",
    "INVALID_AGENT_PRINCIPAL",
    "AUTHORIZATION_DENIED",
    "HARNESS_AUTH_REQUIRED",
    "INVALID_HARNESS_AUTH",
    "INVALID_SECRET_BINDINGS",
    "HARNESS_AUTH_SOURCE_CHANGED",
    "SERVICE_ACCOUNT_BACKEND_MISMATCH",
    "BACKEND_UNAVAILABLE",
];

/// How long a deployment that ends failed waits for a yielded predecessor stop's drain before
/// it names the stop `predecessorStop` and publishes the failure anyway (SPEC Z5).
pub const PREDECESSOR_DRAIN_WAIT: Duration = Duration::from_secs(60);

/// The longest recheck of a refused candidate whose stop keeps failing.
pub const REFUSED_STOP_RECHECK_MAX: Duration = Duration::from_secs(300);

/// The recheck after a refused candidate's failed stop: the
/// readiness cadence doubled for each earlier failed stop of this work (counted from its
/// evidence, so a restart keeps the backoff) up to 5 minutes, and at least four times as long
/// as the stop took, so a blocked stop holds at most a fifth of a worker thread.
pub fn refused_stop_recheck(age: Duration, earlier: i64, stop_took: Duration) -> Duration {
    let doublings = earlier.clamp(0, 20) as u32;
    let backoff = readiness_recheck(age)
        .saturating_mul(1 << doublings)
        .min(REFUSED_STOP_RECHECK_MAX);
    backoff.max(stop_took.saturating_mul(4))
}

/// The reconcile and maintenance work of an AgentRevision.
pub struct RevisionReconciler;

/// What a pass loaded about its revision.
struct Loaded {
    agent: AgentRow,
    revision: RevisionRow,
    previous: Option<RevisionRow>,
    all: Vec<RevisionRow>,
    attempts: i64,
    refused_stop_attempts: i64,
    /// The deployment failed for good or was superseded (R11).
    deployment_ended: bool,
    /// The refusal of the latest attempt when its candidate's stop was still pending (R9).
    stored_refusal: Option<String>,
    /// The refusal of the latest attempt that waited on its candidate's stop, whatever
    /// followed it (R9).
    waited_refusal: Option<String>,
    /// This work yielded an exclusive predecessor's stop at least once (SPEC Z5).
    predecessor_stop_yielded: bool,
    /// The Installation's selected Secret Driver (SPEC Z4).
    secret_driver: Option<String>,
    /// The newest readiness code among this work's attempts (SPEC Z3).
    /// SPEC Z3: this work's newest readiness evidence is the harness's credential bootstrap.
    bootstrap_last: bool,
    /// The revision's snapshot credential sources with their rows and withdrawals (SPEC §13).
    sources: Vec<SourceState>,
    /// R9: the latest attempt waited on a refused candidate's stop without naming its refusal.
    unnamed_wait: bool,
    /// The Agent's workspace setup, completed or not (SPEC WS2, WS3).
    workspace_setup: Option<WorkspaceSetup>,
}

impl Loaded {
    /// The Agent's active pointer names this revision.
    fn is_active(&self) -> bool {
        self.agent.active_revision_id.as_deref() == Some(self.revision.id.as_str())
    }

    /// Not the Agent's active revision: a candidate (or an earlier one).
    fn is_candidate(&self) -> bool {
        !self.is_active()
    }
}

/// What R9's stop of a refused candidate came to.
enum CandidateStop {
    /// Nothing to stop here: not this work's candidate, or never prepared, or left alone
    /// beside an active revision.
    Untouched,
    /// Stopped under the live claim.
    Stopped,
    /// The stop failed: the pass waits with this report.
    Pending(Box<Report>),
}

fn secret_refs(revision: &RevisionRow) -> Result<Vec<(String, String)>, &'static str> {
    let mut refs = Vec::new();
    let Some(bindings) = revision.secret_bindings.as_object() else {
        return Err("INVALID_SECRET_BINDINGS");
    };
    for value in bindings.values() {
        let ns = value.get("namespaceId").and_then(Value::as_str);
        let id = value.get("id").and_then(Value::as_str);
        match (ns, id) {
            (Some(ns), Some(id)) if ns == revision.namespace_id => {
                refs.push((ns.to_string(), id.to_string()))
            }
            _ => return Err("INVALID_SECRET_BINDINGS"),
        }
    }
    Ok(refs)
}

/// The actor's `deploy` on the Agent and `read` on the revision's Configuration: the first
/// authorization of every pass (R2), asked up front and checked in this order.
fn deploy_requests(actor: &str, l: &Loaded) -> [Request; 2] {
    let ns = &l.revision.namespace_id;
    [
        Request::new(
            actor,
            Action::Deploy,
            Resource::owned(ResourceKind::Agent, ns, &l.agent.id),
        ),
        Request::new(
            actor,
            Action::Read,
            Resource::owned(
                ResourceKind::Configuration,
                ns,
                &l.revision.configuration_id,
            ),
        ),
    ]
}

/// Every question `check` may ask about `l`'s revision, decided together in one statement:
/// `deploy` on the Agent and `read` on the Configuration by the actor; `operate` on each bound
/// Secret and on the harness auth source as a Secret, by the actor and by the service
/// principal; `read` on the source as a managed account by the actor. Asking one that a pass
/// ends up not needing costs a row, nothing more.
fn asked(actor: &str, l: &Loaded) -> Vec<Request> {
    let revision = &l.revision;
    let ns = &revision.namespace_id;
    let mut asked = deploy_requests(actor, l).to_vec();
    asked.extend(revision_sources::requests(
        actor,
        &revision.service_principal_id,
        ns,
        &l.sources,
    ));
    let mut secrets: Vec<String> = secret_refs(revision)
        .unwrap_or_default()
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    let source = revision
        .harness_auth
        .as_ref()
        .and_then(|auth| auth["source"]["id"].as_str());
    if let Some(source) = source {
        asked.push(Request::new(
            actor,
            Action::Read,
            Resource::owned(ResourceKind::ServiceAccount, ns, source),
        ));
        if !secrets.iter().any(|s| s == source) {
            secrets.push(source.to_string());
        }
    }
    for secret in &secrets {
        let resource = Resource::owned(ResourceKind::Secret, ns, secret);
        asked.push(Request::new(actor, Action::Operate, resource.clone()));
        asked.push(Request::new(
            &revision.service_principal_id,
            Action::Operate,
            resource,
        ));
    }
    asked
}

impl RevisionReconciler {
    fn load(&self, pass: &Pass<'_>) -> Result<Option<Loaded>, PassError> {
        let claim = pass.claim;
        let (Some(agent_id), Some(revision_id)) = (&claim.agent_id, &claim.revision_id) else {
            return Err(PassError::Invariant(
                "revision work without a revision".into(),
            ));
        };
        let mut db = pass.db()?;
        let Some(agent) = load_agent(&mut *db, &claim.namespace_id, agent_id)? else {
            return Ok(None);
        };
        let all = load_revisions(&mut *db, &claim.namespace_id, agent_id, None, claim.id)?;
        let Some(revision) = all.iter().find(|r| &r.id == revision_id).cloned() else {
            return Ok(None);
        };
        let previous = agent
            .active_revision_id
            .as_ref()
            .and_then(|id| all.iter().find(|r| &r.id == id).cloned());
        let key = format!("agent_revision:{revision_id}:reconcile");
        let row = db.query_one(
            LOOKUP,
            &[
                &claim.id,
                &key,
                &readiness_codes(),
                &BOOTSTRAP_PENDING,
                &claim.namespace_id,
                agent_id,
            ],
        )?;
        let sources = revision_sources::load(&mut *db, &revision)?;
        // SPEC WS3: read with the other facts, in the same statement.
        let workspace_setup = row.get::<_, Option<String>>(9).map(|id| WorkspaceSetup {
            id,
            document: row.get(10),
        });
        Ok(Some(Loaded {
            agent,
            revision,
            previous,
            all,
            attempts: row.get(0),
            refused_stop_attempts: row.get(1),
            deployment_ended: row.get(2),
            stored_refusal: row.get(3),
            predecessor_stop_yielded: row.get(4),
            secret_driver: row.get(5),
            waited_refusal: row.get(6),
            bootstrap_last: row.get(7),
            unnamed_wait: row.get(8),
            sources,
            workspace_setup,
        }))
    }

    /// R2's checks of the admitted revision itself, the first decisions of every pass: the
    /// Namespace is ready, the revision is the Agent's, its Harness is approved and its Compute
    /// Driver is this worker's. `Some(report)` refuses the pass.
    fn check_admitted(&self, pass: &Pass<'_>, l: &Loaded) -> Result<Option<Report>, PassError> {
        let (agent, revision) = (&l.agent, &l.revision);
        if agent.namespace_status != NamespaceStatus::Ready {
            return Ok(Some(Report::permanent("NAMESPACE_NOT_READY")));
        }
        if revision.namespace_id != agent.namespace_id
            || revision.agent_id != agent.id
            || revision.service_principal_id != agent.service_principal_id
        {
            return Ok(Some(Report::permanent("INVALID_ADMITTED_REVISION")));
        }
        // The catalog's exact version for this Harness and mode, decided again every pass: a
        // version approved after admission refuses this revision.
        let approved: Option<String> = {
            let mut db = pass.db()?;
            db.query_opt(
                HARNESS_APPROVED,
                &[&revision.harness_id, &revision.harness_mode.as_str()],
            )?
            .map(|r| r.get(0))
        };
        if approved.as_deref() != Some(revision.harness_version.as_str()) {
            return Ok(Some(Report::permanent("HARNESS_DESCRIPTOR_MISMATCH")));
        }
        // A production worker runs dedicated Codex and embedded OpenClaw only (SPEC C3): any
        // other pair admitted earlier fails here, before any Compute effect.
        if !pass
            .ctx
            .compute
            .policy()
            .accepts_harness(&revision.harness_id, revision.harness_mode)
        {
            return Ok(Some(Report::permanent("HARNESS_DESCRIPTOR_MISMATCH")));
        }
        if !revision.owned_by(pass) {
            return Ok(Some(Report::permanent("COMPUTE_DRIVER_MISMATCH")));
        }
        Ok(None)
    }

    /// R2's authorization, harness auth and Secret-binding checks, then M2's backend checks, in
    /// order; `Some(report)` refuses the pass. Whether each Secret resolves is decided later
    /// (`check_secret_resolution`), after R3 and R4.
    fn authorize(&self, pass: &Pass<'_>, l: &Loaded) -> Result<Option<Report>, PassError> {
        match self.authorize_r2(pass, l)? {
            Err(refusal) => Ok(Some(refusal)),
            Ok(account) => self.check_backend(pass, &l.revision, account.as_ref()),
        }
    }

    /// R2's authorization, harness auth and Secret-binding checks, without M2's backend step:
    /// the refusal, or the managed account the backend step checks (SPEC G14 decides the two
    /// apart).
    fn authorize_r2(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
    ) -> Result<Result<Option<ManagedAccountAuth>, Report>, PassError> {
        let (agent, revision) = (&l.agent, &l.revision);
        let policy = {
            let mut db = pass.db()?;
            let principal = revision.service_principal_id.as_str();
            iam::decide(&mut *db, &asked(&pass.claim.actor_id, l), &[principal])?
        };
        let actor = &pass.claim.actor_id;
        let ns = &revision.namespace_id;
        if !policy.identity_exists(actor) {
            let request = Request::new(
                actor,
                Action::Deploy,
                Resource::owned(ResourceKind::Agent, ns, &agent.id),
            );
            // An actor that no longer exists is refused (`ACTOR_REVOKED`).
            return Ok(deny(&policy, request, actor).map_or(Ok(None), Err));
        }
        let principal_ok = policy
            .identity(&revision.service_principal_id)
            .is_some_and(|i| {
                i.kind == iam::IdentityKind::ServicePrincipal
                    && i.namespace_id.as_deref() == Some(ns.as_str())
                    && i.agent_id.as_deref() == Some(agent.id.as_str())
            });
        if !principal_ok {
            return Ok(Err(Report::permanent("INVALID_AGENT_PRINCIPAL")));
        }
        if let Some(denied) = first_denial(&policy, deploy_requests(actor, l), actor) {
            return Ok(Err(denied));
        }
        // SPEC E19: `operate` on every source without a withdrawal row, by both principals,
        // after the Configuration `read` and before the Secret checks.
        let sources =
            revision_sources::requests(actor, &revision.service_principal_id, ns, &l.sources);
        if let Some(denied) = sources.into_iter().find_map(|r| deny(&policy, r, actor)) {
            return Ok(Err(denied));
        }
        let Some(auth) = &revision.harness_auth else {
            return Ok(Err(Report::permanent("HARNESS_AUTH_REQUIRED")));
        };
        let mut refs = match secret_refs(revision) {
            Ok(refs) => refs,
            Err(code) => return Ok(Err(Report::permanent(code))),
        };
        let source_ns = auth["source"]["namespaceId"].as_str().unwrap_or_default();
        let source_id = auth["source"]["id"].as_str().unwrap_or_default();
        let account = match auth["method"].as_str() {
            Some("secret") => {
                if source_ns != ns.as_str() {
                    return Ok(Err(Report::permanent("INVALID_HARNESS_AUTH")));
                }
                if !refs.iter().any(|(_, id)| id == source_id) {
                    refs.push((ns.clone(), source_id.to_string()));
                }
                None
            }
            Some("service_account") => ManagedAccountAuth::from_harness_auth(auth),
            // Resolved after the Secrets (SPEC E19).
            Some("credential_source") => None,
            // SPEC M5: no Secret, account or source to check; it reaches Compute unchanged.
            Some("runtime") => None,
            _ => return Ok(Err(Report::permanent("INVALID_HARNESS_AUTH"))),
        };
        for (_, secret) in &refs {
            let resource = Resource::owned(ResourceKind::Secret, ns, secret);
            let requests = [
                Request::new(actor, Action::Operate, resource.clone()),
                Request::new(&revision.service_principal_id, Action::Operate, resource),
            ];
            if let Some(denied) = first_denial(&policy, requests, actor) {
                return Ok(Err(denied));
            }
        }
        if let Some(refused) = account
            .as_ref()
            .and_then(|a| check_account_access(&policy, actor, ns, a))
        {
            return Ok(Err(refused));
        }
        Ok(Ok(account))
    }

    /// M2 steps 2-4, decided again on every
    /// pass: the revision's backend is a configured `chatgpt` backend (any auth method); a
    /// managed account still holds the admitted access-token reference
    /// (`HARNESS_AUTH_SOURCE_CHANGED`) and a binding valid for that backend, equal to the
    /// admitted one in all four fields (`SERVICE_ACCOUNT_BACKEND_MISMATCH`).
    fn check_backend(
        &self,
        pass: &Pass<'_>,
        revision: &RevisionRow,
        admitted: Option<&ManagedAccountAuth>,
    ) -> Result<Option<Report>, PassError> {
        let mut db = pass.db()?;
        let backend_type: Option<String> = match &revision.backend_id {
            Some(id) => db.query_opt(BACKEND, &[id])?.map(|r| r.get(0)),
            None => None,
        };
        if revision.backend_id.is_some() && backend_type.as_deref() != Some(CHATGPT_BACKEND) {
            return Ok(Some(Report::permanent("BACKEND_UNAVAILABLE")));
        }
        let Some(admitted) = admitted else {
            return Ok(None);
        };
        let Some(row) = db.query_opt(SERVICE_ACCOUNT, &[&revision.namespace_id, &admitted.id])?
        else {
            return Ok(Some(Report::permanent("HARNESS_AUTH_SOURCE_CHANGED")));
        };
        let credential: Option<Credential> = row
            .get::<_, Option<Value>>(0)
            .and_then(|c| serde_json::from_value(c).ok());
        let current_token = credential.as_ref().map(Credential::secret_ref);
        match (current_token, admitted.access_token()) {
            (Some(current), Some(frozen)) if current == frozen => {}
            _ => return Ok(Some(Report::permanent("HARNESS_AUTH_SOURCE_CHANGED"))),
        }
        let binding: Option<BackendBinding> = row
            .get::<_, Option<Value>>(1)
            .and_then(|b| serde_json::from_value(b).ok());
        let valid = binding.as_ref().is_some_and(|b| {
            Some(&b.backend_id) == revision.backend_id.as_ref()
                && backend_type.as_deref() == Some(CHATGPT_BACKEND)
                && b.credential_issued
                && !b.driver_id.is_empty()
                && !b.workspace_id.is_empty()
        });
        if !valid || binding != admitted.backend_binding {
            return Ok(Some(Report::permanent("SERVICE_ACCOUNT_BACKEND_MISMATCH")));
        }
        Ok(None)
    }

    /// Every Secret binding, and a `secret` harness auth, resolves to an existing Secret of
    /// the Namespace: a driver references the Secret's metadata, never a
    /// value. Bindings need a selected Secret Driver, and the one the revision froze at
    /// admission; so does a `secret` harness auth (`SECRET_DRIVER_MISMATCH`, SPEC Z4). A Secret
    /// counts only when the selected driver owns it and its backend reference and uid are not
    /// blank; else `SECRET_BINDING_UNAVAILABLE` / `HARNESS_AUTH_SOURCE_UNAVAILABLE`.
    fn check_secret_resolution(
        &self,
        revision: &RevisionRow,
        selected: Option<&str>,
    ) -> Option<Report> {
        let bindings = revision.secret_bindings.as_object().map_or(0, |b| b.len());
        if bindings > 0 && (selected.is_none() || revision.secret_driver_id.as_deref() != selected)
        {
            return Some(Report::permanent("SECRET_DRIVER_MISMATCH"));
        }
        let counts = |s: &SecretProjection| selected.is_some_and(|d| s.resolvable_by(d));
        if revision.secrets.len() != bindings || !revision.secrets.iter().all(counts) {
            return Some(Report::permanent("SECRET_BINDING_UNAVAILABLE"));
        }
        let secret_auth = revision
            .harness_auth
            .as_ref()
            .filter(|a| HarnessAuthMethod::of(a) == Some(HarnessAuthMethod::Secret));
        if let Some(auth) = secret_auth {
            if selected.is_none() || auth["secretDriverId"].as_str() != selected {
                return Some(Report::permanent("SECRET_DRIVER_MISMATCH"));
            }
            if !revision.harness_secret.as_ref().is_some_and(counts) {
                return Some(Report::permanent("HARNESS_AUTH_SOURCE_UNAVAILABLE"));
            }
        }
        None
    }

    /// R9: a candidate refused after it may have been prepared is stopped under the live claim
    /// before the refusal is published; a failed stop waits with growing backoff.
    fn refuse(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        mut refusal: Report,
        prepared: bool,
    ) -> Result<Report, PassError> {
        let code = refusal.code.clone();
        Ok(
            match self.stop_refused_candidate(pass, l, &code, prepared)? {
                CandidateStop::Untouched => refusal,
                CandidateStop::Stopped => {
                    // The stored refusal marks the candidate stopped (`agent::denial_audit`).
                    refusal.refusal = Some(code);
                    refusal
                }
                CandidateStop::Pending(pending) => *pending,
            },
        )
    }

    /// R9's stop of a candidate refused with `refusal`.
    ///
    /// Only the candidate's own reconcile work stops it, and only while its Namespace is ready.
    /// Beside an active revision a non-exclusive (embedded) candidate is
    /// left alone, since it may own the Agent's shared Gateway route; one that Compute never
    /// prepared has nothing to stop. A failed stop becomes a `REFUSED_CANDIDATE_STOP_PENDING`
    /// wait that keeps the refusal for the next pass.
    fn stop_refused_candidate(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        refusal: &str,
        prepared: bool,
    ) -> Result<CandidateStop, PassError> {
        if pass.claim.operation != Operation::RevisionReconcile
            || !l.is_candidate()
            || l.agent.namespace_status != NamespaceStatus::Ready
            || !l.revision.owned_by(pass)
        {
            return Ok(CandidateStop::Untouched);
        }
        let spec = l.revision.spec(&pass.ctx.installation_id);
        let driver = pass.ctx.compute.clone();
        // A candidate no pass of this work reached Compute for has no runtime: a refusal
        // decided before its first preparation makes no Compute call (SPEC R2), exclusive or
        // not. The seed stops an exclusive candidate even then; SPEC R2 is explicit
        // and wins, and a pass that died mid-preparation leaves LEASE_EXPIRED evidence, so such
        // a candidate still counts as prepared.
        if !(prepared || l.attempts > 0)
            || (!driver.policy().requires_stopped_predecessors(&spec)
                && l.agent.active_revision_id.is_some())
        {
            return Ok(CandidateStop::Untouched);
        }
        let agent = l.agent.spec(&pass.ctx.installation_id);
        // SPEC G12: a refused candidate's sessions are closed before its stop.
        super::repository::close_before_stop(pass, &l.revision)?;
        let started = std::time::Instant::now();
        let stopped = match effect(pass, "bind", |c| driver.bind_agent(&agent, c))? {
            Ok(()) => effect(pass, "stop", |c| driver.stop_revision(&spec, c))?,
            Err(e) => Err(e),
        };
        let stop_took = started.elapsed();
        Ok(match stopped {
            Ok(()) => CandidateStop::Stopped,
            Err(e) => {
                let recheck = refused_stop_recheck(pass.age(), l.refused_stop_attempts, stop_took);
                let mut pending = Report::pending("REFUSED_CANDIDATE_STOP_PENDING", recheck)
                    .at("stop")
                    .with_compute_error(&e);
                // The deferral records its evidence with the refusal (`queue::work_defer`).
                pending.refusal = Some(refusal.to_string());
                // A stop that yielded to other work (still draining) is no failure: once the
                // refusal is stored, repeated yields record no evidence, so they never double
                // the backoff (SPEC R9); only refused or failed stops do.
                // The refusal stays stored in the earlier attempt's evidence.
                if matches!(e.kind(), ComputeErrorKind::Draining) && l.waited_refusal.is_some() {
                    pending.record_evidence = false;
                    pending.refusal = None;
                }
                CandidateStop::Pending(Box::new(pending))
            }
        })
    }

    /// The permanent report that publishes a stored refusal once its candidate is stopped.
    fn stored_refusal(&self, pass: &Pass<'_>, refusal: &str) -> Report {
        let report = Report::permanent(refusal);
        match StoredRefusal::parse(refusal) {
            StoredRefusal::Deadline => {
                let timeout = pass.ctx.convergence_timeout.as_millis() as u64;
                report.with_result(json!({ "timeoutMs": timeout }))
            }
            StoredRefusal::Code(_) => report,
        }
    }

    /// A pass's decisions in the seed's order: R2's checks of the admitted revision; a
    /// maintenance pass of a failed deployment ends (R11); a dangling active pointer; R2's
    /// authorization and backend; the stored refusal decided again; R3 a stopped Agent; R4
    /// supersession; the stored refusal published; the Secret context (SPEC Z4); then R8,
    /// R5-R7.
    fn run(&self, pass: &Pass<'_>, scratch: &Scratch) -> Result<Report, PassError> {
        let Some(l) = self.load(pass)? else {
            return Ok(refused("INVALID_REVISION_OWNER"));
        };
        scratch
            .predecessor_stop_yielded
            .set(l.predecessor_stop_yielded);
        let maintenance = pass.claim.operation == Operation::RevisionMaintenance;
        if let Some(refusal) = self.check_admitted(pass, &l)? {
            return self.refuse_checked(pass, &l, refusal);
        }
        // R11: maintenance never prepares or reactivates a terminally failed deployment, and
        // ends its chain before any authorization of its own.
        if maintenance && l.deployment_ended {
            return Ok(Report::permanent("REVISION_SUPERSEDED")
                .with_facts(Facts::Own(RevisionFacts::ChainEnded)));
        }
        if l.agent.active_revision_id.is_some() && l.previous.is_none() {
            return Ok(refused("INVALID_ACTIVE_REVISION"));
        }
        // SPEC G14: a maintenance pass of the running active revision whose Git access expired
        // skips R2 and the backend step, still decides supersession, then withdraws.
        if maintenance
            && l.is_active()
            && l.agent.desired_runtime_state == RuntimeState::Running
            && l.revision.repository_credentials.is_some()
            && self.expiry(pass, &l.revision.id)? != git::Expiry::None
        {
            if let Some(superseded) = self.supersede(pass, &l)? {
                return Ok(superseded);
            }
            return self.expire(pass, &l);
        }
        if let Some(refusal) = self.authorize(pass, &l)? {
            return self.refuse_checked(pass, &l, refusal);
        }
        let wait = self.refusal_wait(pass, &l);
        if maintenance && (!l.is_active() || l.agent.desired_runtime_state != RuntimeState::Running)
        {
            // SPEC G12: a stopped Agent's revision with repository credentials has its
            // sessions closed, then is bound and stopped, before its chain ends.
            if l.is_active() && l.revision.repository_credentials.is_some() {
                let driver = pass.ctx.compute.clone();
                let agent = l.agent.spec(&pass.ctx.installation_id);
                let spec = l.revision.spec(&pass.ctx.installation_id);
                super::repository::close_before_stop(pass, &l.revision)?;
                try_effect!(pass, "bind", |c| driver.bind_agent(&agent, c));
                try_effect!(pass, "stop", |c| driver.stop_revision(&spec, c));
            }
            // R11: maintenance is for the running active revision only.
            return Ok(Report::success("REVISION_MAINTENANCE_SUPERSEDED")
                .with_facts(Facts::Own(RevisionFacts::ChainEnded)));
        }
        // R3 and R4 win over a stored refusal and over the Secret context: the revision stops
        // or hands off either way.
        if l.agent.desired_runtime_state == RuntimeState::Stopped {
            return self.stop_for_stopped_agent(pass, &l);
        }
        if let Some(superseded) = self.supersede(pass, &l)? {
            return Ok(superseded);
        }
        // A newer active revision superseded this one above (R4); the stored refusal stands
        // and is published once its candidate is stopped (R9).
        if let Some(refusal) = wait {
            let stored = self.stored_refusal(pass, &refusal);
            return self.refuse(pass, &l, stored, true);
        }
        // SPEC E14 and E18 come first in a maintenance pass, before Z1's decision: pending
        // withdrawals are re-queued whatever the execution admission comes to.
        if maintenance {
            if let Some(report) = self.maintain_withdrawals(pass, &l)? {
                return Ok(report);
            }
        }
        if let Some(refused) = self.check_execution_admission(pass, &l)? {
            return Ok(refused);
        }
        let attach = match self.secret_context(pass, &l, &l.sources) {
            Ok(attach) => attach,
            Err(code) => {
                return self.refuse_secret_context(pass, &l, Report::permanent(&code));
            }
        };
        // SPEC G10 before preparing: R2 and the backend step were decided above.
        if let Some(credentials) = Self::git(&l)? {
            if let Some(refusal) = self.repository_authority(pass, &l, &credentials, false)? {
                return self.refuse_repository(pass, &l, refusal, false);
            }
        }
        self.deploy(pass, &l, attach, &scratch.phases)
    }

    /// The Secret step after Z1 (SPEC Z4, E19, WS2), decided on `sources`: each Secret
    /// resolves, the credential sources resolve (the ones to attach), and an Agent with a
    /// workspace setup, completed or not, has a driver that runs one for this revision. The
    /// first refusal's code (permanent).
    fn secret_context(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        sources: &[revision_sources::SourceState],
    ) -> Result<Vec<CredentialAttachment>, String> {
        if let Some(refusal) = self.check_secret_resolution(&l.revision, l.secret_driver.as_deref())
        {
            return Err(refusal.code);
        }
        let gateway = pass.ctx.credential_gateway.as_deref();
        let attach = revision_sources::resolve(sources, l.revision.harness_auth.as_ref(), gateway)
            .map_err(String::from)?;
        // SPEC WS2, last in the Secret step.
        if l.workspace_setup.is_some()
            && !pass
                .ctx
                .compute
                .policy()
                .supports_workspace_setup(&l.revision.spec(&pass.ctx.installation_id))
        {
            return Err("WORKSPACE_SETUP_UNSUPPORTED".into());
        }
        Ok(attach)
    }

    /// A maintenance pass of the running active revision, before the Secret context: SPEC
    /// E18 when its harness source has a withdrawal row (it never prepares: revoked sources
    /// are detached again, then `publish` re-queues as E14 and completes
    /// `CREDENTIAL_WITHDRAWN`), else E14's re-queue of pending withdrawals in a fenced
    /// transaction, after which maintenance goes on (`None`).
    fn maintain_withdrawals(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
    ) -> Result<Option<Report>, PassError> {
        if revision_sources::harness_withdrawn(&l.sources) {
            let spec = l.revision.spec(&pass.ctx.installation_id);
            if let Err(e) = revision_sources::redetach(pass, &spec, &l.sources)? {
                let code = revision_sources::redetach_wait_code(&e);
                return Ok(Some(
                    active_path(pass, code)
                        .at("withdraw_credential")
                        .with_compute_error(&e),
                ));
            }
            return Ok(Some(
                Report::success("CREDENTIAL_WITHDRAWN")
                    .with_facts(Facts::Own(RevisionFacts::CredentialWithdrawn)),
            ));
        }
        self.requeue_withdrawals(pass, l, &l.sources)?;
        Ok(None)
    }

    /// SPEC E14's re-queue of the revision's pending withdrawals, when `sources` has any
    /// withdrawal row, in a fenced transaction (Namespace first).
    fn requeue_withdrawals(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        sources: &[revision_sources::SourceState],
    ) -> Result<(), PassError> {
        if sources.iter().any(|s| s.withdrawal.is_some()) {
            let (ns, agent, revision) = (&l.revision.namespace_id, &l.agent.id, &l.revision.id);
            pass.fenced(|tx| {
                tx.query_opt(NAMESPACE_LOCK, &[ns])?;
                queue::work_enqueue_withdrawal_requeue(tx, ns, agent, revision)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// SPEC Z1, first in the Secret step: a stored execution admission the driver does not
    /// run refuses a candidate for good (`EXECUTION_ADMISSION_UNAVAILABLE`, R9 before any
    /// Compute call of a fresh one). The active revision is withdrawn when the driver offers a
    /// withdrawal, else it takes SPEC Z2's active path with the code.
    fn check_execution_admission(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
    ) -> Result<Option<Report>, PassError> {
        let spec = l.revision.spec(&pass.ctx.installation_id);
        let driver = pass.ctx.compute.clone();
        if driver
            .policy()
            .validate_execution_admission(&spec, AdmissionUse::Stored)
            .is_ok()
        {
            return Ok(None);
        }
        let refusal = Report::permanent("EXECUTION_ADMISSION_UNAVAILABLE");
        if l.is_active() {
            if let Some(withdrawn) = self.withdraw_rejected_execution(pass, &spec)? {
                return Ok(Some(withdrawn));
            }
        }
        self.refuse_secret_context(pass, l, refusal).map(Some)
    }

    /// SPEC Z1's withdrawal of the running active revision whose execution admission is
    /// refused, on its own reconcile or maintenance work (the only work this reconciler runs):
    /// `None` when the driver offers none, or when the Agent, read again under the heartbeat,
    /// no longer points at the revision with its principal or no longer runs. Done: permanent
    /// `EXECUTION_ADMISSION_WITHDRAWN`, not stopped as a refused candidate, ending a
    /// maintenance chain. Failed (a lost claim ends the pass instead): pending
    /// `EXECUTION_ADMISSION_WITHDRAWAL_PENDING` on the readiness cadence, exempt from the
    /// deadline, since a refused active release ends only once its grant is withdrawn.
    fn withdraw_rejected_execution(
        &self,
        pass: &Pass<'_>,
        spec: &RevisionSpec,
    ) -> Result<Option<Report>, PassError> {
        let driver = pass.ctx.compute.clone();
        let Some(withdraw) = driver.policy().rejected_execution_withdrawal(spec) else {
            return Ok(None);
        };
        let current = {
            let mut db = pass.db()?;
            load_agent(&mut *db, &spec.namespace_id, &spec.agent_id)?
        };
        let runs = current.is_some_and(|a| {
            a.active_revision_id.as_deref() == Some(spec.revision_id.as_str())
                && a.service_principal_id == spec.service_principal_id
                && a.desired_runtime_state == RuntimeState::Running
        });
        if !runs {
            return Ok(None);
        }
        Ok(Some(match effect(pass, "withdraw", withdraw)? {
            Ok(()) => refused("EXECUTION_ADMISSION_WITHDRAWN").at("withdraw"),
            Err(e) => Report::waiting(
                "EXECUTION_ADMISSION_WITHDRAWAL_PENDING",
                readiness_recheck(pass.age()),
                Wait::Unbounded,
            )
            .at("withdraw")
            .with_compute_error(&e),
        }))
    }

    /// An R2 refusal before any effect: it ends a maintenance chain, and a candidate an
    /// earlier pass prepared is stopped first (R9).
    fn refuse_checked(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        mut refusal: Report,
    ) -> Result<Report, PassError> {
        if refusal.facts == Facts::Plain {
            refusal.facts = Facts::Own(RevisionFacts::Refused);
        }
        self.refuse(pass, l, refusal.at("check"), false)
    }

    /// The stored refusal this pass waits to publish (R9), decided again: a re-decided refusal
    /// that no longer stands lifts the wait, but past the deadline the candidate cannot
    /// converge any more: preparing it again would only restart it. The wait then stops it and
    /// publishes the deadline instead. An active revision has no wait: its refused stop never
    /// runs.
    fn refusal_wait(&self, pass: &Pass<'_>, l: &Loaded) -> Option<String> {
        // SPEC R9: a stored wait whose evidence names no refusal publishes
        // UNKNOWN_FAILURE once its candidate is stopped.
        if l.stored_refusal.is_none() && l.unnamed_wait && l.is_candidate() {
            return Some("UNKNOWN_FAILURE".to_string());
        }
        let stored = l.stored_refusal.as_deref().filter(|_| l.is_candidate())?;
        if !REDECIDED_REFUSALS.contains(&stored) {
            return Some(stored.to_string());
        }
        (pass.age() >= pass.ctx.convergence_timeout)
            .then(|| "CONVERGENCE_DEADLINE_EXCEEDED".to_string())
    }

    /// R3: the stopped Agent's revision is stopped; once this work published its candidate it
    /// retires every earlier revision too.
    fn stop_for_stopped_agent(&self, pass: &Pass<'_>, l: &Loaded) -> Result<Report, PassError> {
        let (agent, revision) = (&l.agent, &l.revision);
        let driver = pass.ctx.compute.clone();
        let spec = revision.spec(&pass.ctx.installation_id);
        let agent_spec = agent.spec(&pass.ctx.installation_id);
        try_effect!(pass, "bind", |c| driver.bind_agent(&agent_spec, c));
        // SPEC G12: sessions closed before every stop and retirement.
        super::repository::close_before_stop(pass, revision)?;
        try_effect!(pass, "stop", |c| driver.stop_revision(&spec, c));
        // Once this work published its candidate it owns retiring every predecessor, even
        // after a stop cleared the pointer; a different active revision means it never
        // published, and that revision's stop work stays responsible.
        let published = agent.active_revision_id.is_none() || l.is_active();
        if !published {
            return Ok(Report::success("REVISION_STOPPED").with_facts(Facts::Own(
                RevisionFacts::Stopped {
                    retired_before: None,
                },
            )));
        }
        for earlier in l
            .all
            .iter()
            .filter(|r| r.revision < revision.revision && !r.retired && r.owned_by(pass))
        {
            super::repository::close_before_stop(pass, earlier)?;
            let earlier = earlier.spec(&pass.ctx.installation_id);
            try_effect!(pass, "retire", |c| driver.retire_revision(&earlier, c));
        }
        Ok(
            Report::success("REVISION_STOPPED").with_facts(Facts::Own(RevisionFacts::Stopped {
                retired_before: Some(revision.revision),
            })),
        )
    }

    /// R4 (and R8's successor): a newer admitted revision that needs its predecessors stopped,
    /// or a newer active one, supersedes this one without a Compute call of its own. Handing
    /// off to such a successor first finishes a refused candidate's stop this work waited on
    /// (R9): the successor's own sweep may never get that far. A failed stop keeps waiting.
    fn supersede(&self, pass: &Pass<'_>, l: &Loaded) -> Result<Option<Report>, PassError> {
        let revision = &l.revision;
        let driver = pass.ctx.compute.clone();
        let successor = l.all.iter().find(|r| {
            r.revision > revision.revision
                && r.owned_by(pass)
                && driver
                    .policy()
                    .requires_stopped_predecessors(&r.spec(&pass.ctx.installation_id))
        });
        let newer_active = l
            .previous
            .as_ref()
            .filter(|p| p.revision > revision.revision);
        let Some(by) = newer_active.or(successor) else {
            return Ok(None);
        };
        if let (Some(_), Some(waited)) = (successor, l.waited_refusal.as_deref()) {
            if let CandidateStop::Pending(pending) =
                self.stop_refused_candidate(pass, l, waited, true)?
            {
                return Ok(Some(*pending));
            }
        }
        let facts = RevisionFacts::Superseded {
            by: by.id.clone(),
            by_revision: by.revision,
        };
        Ok(Some(
            Report::success("REVISION_SUPERSEDED").with_facts(Facts::Own(facts)),
        ))
    }

    /// A Secret context that does not resolve (SPEC Z4): a candidate is refused (R9). The
    /// active revision takes SPEC Z2's active path instead: its reconcile work waits with the
    /// code under the convergence deadline, a maintenance claim fails with it and keeps the
    /// chain, and nothing is stopped.
    fn refuse_secret_context(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        refusal: Report,
    ) -> Result<Report, PassError> {
        if l.is_candidate() {
            return self.refuse_checked(pass, l, refusal);
        }
        Ok(active_path(pass, &refusal.code).at("check"))
    }

    /// R8, R5-R7: the Agent's own objects, then preparation and activation.
    fn deploy(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        attach: Vec<CredentialAttachment>,
        phases: &Phases,
    ) -> Result<Report, PassError> {
        let driver = pass.ctx.compute.clone();
        let mut spec = l.revision.spec(&pass.ctx.installation_id);
        spec.credential_sources = attach;
        spec.workspace_setup = l.workspace_setup.clone();
        let agent_spec = l.agent.spec(&pass.ctx.installation_id);
        let already_active = l.is_active();
        let git = Self::git(l)?;
        // SPEC G15: a standing revision's maintenance is authorized before binding.
        if let (Some(credentials), true) = (
            &git,
            pass.claim.operation == Operation::RevisionMaintenance && already_active,
        ) {
            if let Some(ended) = self.authorize_standing(pass, l, credentials)? {
                return Ok(ended);
            }
        }
        // The Agent's own objects before any preparation: for the active
        // revision a failure is `COMPUTE_BINDING_INCOMPLETE` (SPEC Z2), for a candidate R10.
        if let Err(e) = effect(pass, "bind", |c| driver.bind_agent(&agent_spec, c))? {
            return Ok(if already_active {
                active_path(pass, "COMPUTE_BINDING_INCOMPLETE")
            } else {
                compute_report(&e, pass).at("bind")
            });
        }
        // SPEC G11: the sessions are prepared and handed to Compute with the revision.
        if let Some(credentials) = &git {
            if let Some(ended) = self.prepare_sessions(pass, l, &mut spec, credentials)? {
                return Ok(ended);
            }
        }
        let started = Instant::now();
        let observed = self.prepare(pass, l, &mut spec, already_active, phases);
        let mut spent = phases.get().unwrap_or_default();
        spent.prepare = started.elapsed();
        phases.set(Some(spent));
        let result = match observed? {
            Observed::Ready(result) => result,
            Observed::Ended(report) => return Ok(*report),
        };
        // SPEC G10 after a ready observation, before activation; the execution that got the
        // material is captured (SPEC G19).
        if let Some(credentials) = &git {
            if let Some(refusal) = self.repository_authority(pass, l, credentials, true)? {
                return self.refuse_repository(pass, l, refusal, true);
            }
            if let Some(ended) = self.capture_execution(pass, &spec)? {
                return Ok(ended);
            }
        }
        let report = self.activate(pass, l, &spec, already_active, result)?;
        // SPEC G10 once more before a success is published: a refusal is permanent; any other
        // failure of the checks retries as a dependency.
        match (&git, report.outcome) {
            (Some(credentials), Outcome::Success) => {
                match self.repository_authority(pass, l, credentials, true) {
                    Ok(None) => Ok(report),
                    Ok(Some(refusal)) => self.refuse_repository(pass, l, refusal, true),
                    Err(e) if e.is_claim_loss() => Err(e),
                    Err(_) => Ok(Report::retry("DEPENDENCY_UNAVAILABLE").at("repository")),
                }
            }
            _ => Ok(report),
        }
    }

    /// R8 then R5: exclusive replacement stops every earlier runtime before the candidate
    /// starts, then the candidate is prepared and observed. A predecessor still draining yields
    /// (`PREDECESSOR_STOP_YIELDED`, SPEC Z5): the first yield is recorded as evidence, so a
    /// deployment that ends before the stop finished can finish it (see
    /// `finish_yielded_predecessor_stops`); later ones are not.
    fn prepare(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        spec: &mut RevisionSpec,
        already_active: bool,
        phases: &Phases,
    ) -> Result<Observed, PassError> {
        let driver = pass.ctx.compute.clone();
        let revision = &l.revision;
        if !already_active && driver.policy().requires_stopped_predecessors(spec) {
            for earlier in l
                .all
                .iter()
                .filter(|r| r.revision < revision.revision && !r.retired && r.owned_by(pass))
            {
                // SPEC G12: its sessions closed before it stops.
                super::repository::close_before_stop(pass, earlier)?;
                let earlier = earlier.spec(&pass.ctx.installation_id);
                if let Err(e) = effect(pass, "stop", |c| driver.stop_revision(&earlier, c))? {
                    let mut report = compute_report(&e, pass).at("stop");
                    if matches!(e.kind(), ComputeErrorKind::Draining) {
                        report.code = "PREDECESSOR_STOP_YIELDED".into();
                        report.record_evidence = !l.predecessor_stop_yielded;
                    } else {
                        describe_prepare_failure(pass, spec, &e, false);
                    }
                    return Ok(Observed::Ended(Box::new(report)));
                }
            }
        }
        self.observe(pass, l, spec, phases)
    }

    /// Before a deployment ends failed, superseded or stopped, it finishes the exclusive
    /// predecessor stop it yielded earlier, so the predecessor does not keep its runtime with
    /// nothing left to stop it (SPEC Z5). A failure waits for the drain up
    /// to `PREDECESSOR_DRAIN_WAIT`, then still ends failed and names a stop that did not finish
    /// (`predecessorStop`, its class); a superseded pass whose stop drains yields again, and a
    /// stopped one yields or retries like its own stop.
    fn finish_yielded_predecessor_stops(
        &self,
        pass: &Pass<'_>,
        report: Report,
    ) -> Result<Report, PassError> {
        if pass.claim.operation != Operation::RevisionReconcile {
            return Ok(report);
        }
        let ctx = pass.ctx;
        let resolved = pass.resolve(report.clone());
        let stopped = matches!(
            report.facts,
            Facts::Own(RevisionFacts::Stopped {
                retired_before: None
            })
        );
        let superseded = matches!(report.facts, Facts::Own(RevisionFacts::Superseded { .. }));
        let ends = match resolved.outcome {
            Outcome::Permanent => true,
            Outcome::Success => stopped || superseded,
            _ => false,
        };
        if !ends {
            return Ok(report);
        }
        let Some(l) = self.load(pass)? else {
            return Ok(report);
        };
        let driver = ctx.compute.clone();
        let spec = l.revision.spec(&ctx.installation_id);
        if !l.predecessor_stop_yielded || !driver.policy().requires_stopped_predecessors(&spec) {
            return Ok(report);
        }
        for earlier in l
            .all
            .iter()
            .filter(|r| r.revision < l.revision.revision && !r.retired && r.owned_by(pass))
        {
            let earlier = earlier.spec(&ctx.installation_id);
            let mut stopped_at = effect(pass, "stop", |c| driver.stop_revision(&earlier, c))?;
            // A failure waits for the drain, bounded: the deployment
            // ends for good, and nothing else would finish this stop.
            let waited = std::time::Instant::now();
            while resolved.outcome == Outcome::Permanent
                && waited.elapsed() < PREDECESSOR_DRAIN_WAIT
                && matches!(&stopped_at, Err(e) if matches!(e.kind(), ComputeErrorKind::Draining))
            {
                pass.cancel().sleep(stop_yield_recheck(pass.age()))?;
                stopped_at = effect(pass, "stop", |c| driver.stop_revision(&earlier, c))?;
            }
            let Err(e) = stopped_at else {
                continue;
            };
            let draining = matches!(e.kind(), ComputeErrorKind::Draining);
            if resolved.outcome == Outcome::Success && (draining || stopped) {
                let mut again = compute_report(&e, pass).at("stop");
                if draining && !stopped {
                    again.code = "PREDECESSOR_STOP_YIELDED".into();
                }
                return Ok(again);
            }
            let mut report = report;
            report.failure.predecessor_stop = Some(e.class().to_string());
            return Ok(report);
        }
        Ok(report)
    }

    /// SPEC Z3's deadline retirement: a candidate whose credential bootstrap is still pending
    /// when its own reconcile work reaches the deadline, or whose dependency still fails then
    /// while the work's newest readiness code is that bootstrap's and the Agent does not point
    /// at it, has no runtime to keep for diagnosis: the failure is published at once and
    /// registers `failed-preparation` repository cleanup in the same transaction (SPEC G2),
    /// whose pass stops it. It never waits as `REFUSED_CANDIDATE_STOP_PENDING`.
    fn retire_bootstrap_at_deadline(
        &self,
        pass: &Pass<'_>,
        report: Report,
    ) -> Result<Report, PassError> {
        if pass.claim.operation != Operation::RevisionReconcile
            || !matches!(report.outcome, Outcome::Pending { .. })
        {
            return Ok(report);
        }
        let resolved = pass.resolve(report.clone());
        let expired = |waited: Wait| {
            matches!(report.outcome, Outcome::Pending { wait, .. } if wait == waited)
                && resolved.outcome == Outcome::Permanent
                && resolved.refusal.is_none()
        };
        let bootstrap_expired = expired(Wait::Bootstrap);
        let dependency_expired = expired(Wait::Dependency);
        if resolved.outcome != Outcome::Permanent || !(bootstrap_expired || dependency_expired) {
            return Ok(report);
        }
        let Some(l) = self.load(pass)? else {
            return Ok(report);
        };
        if (dependency_expired && !l.bootstrap_last) || !l.is_candidate() {
            return Ok(report);
        }
        Ok(resolved.with_facts(Facts::Own(RevisionFacts::FailedPreparation)))
    }

    /// R5: prepare and observe the revision. A driver refusal after the candidate may have
    /// been partly prepared is a refused candidate (R9). A held runtime failure ends the
    /// deployment at once and keeps the runtime for diagnosis; any other
    /// unready observation is pending with the seed's code.
    fn observe(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        spec: &mut RevisionSpec,
        phases: &Phases,
    ) -> Result<Observed, PassError> {
        let maintenance = pass.claim.operation == Operation::RevisionMaintenance;
        let driver = pass.ctx.compute.clone();
        let refused = |report: Report| -> Result<Observed, PassError> {
            Ok(Observed::Ended(Box::new(if maintenance {
                report
            } else {
                self.refuse(pass, l, report, true)?
            })))
        };
        // SPEC Z1: decided again before every preparation; a refusal is the call's error. SPEC
        // E17: revoked sources are detached again first; an error fails the pass as a
        // preparation error does.
        let mut prepared = match driver
            .policy()
            .validate_execution_admission(spec, AdmissionUse::Stored)
        {
            Ok(()) => match revision_sources::redetach(pass, spec, &l.sources)? {
                Ok(()) => effect(pass, "prepare", |c| driver.prepare_revision(spec, c))?,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        // SPEC G11: material the runtime could not read is repaired once: its sessions closed
        // and opened again, G10, and one more preparation, whose observation must be valid
        // and list nothing missing.
        let missing = match &prepared {
            Ok(o) if valid_revision_observation(o, spec) => {
                o.repository_credential_material_missing.clone()
            }
            _ => Vec::new(),
        };
        if let (false, Some(credentials)) = (missing.is_empty(), Self::git(l)?) {
            if let Some(ended) = self.repair_sessions(pass, l, spec, &credentials, &missing)? {
                return Ok(Observed::Ended(Box::new(ended)));
            }
            prepared = effect(pass, "prepare", |c| driver.prepare_revision(spec, c))?;
            if prepared.as_ref().is_ok_and(|o| {
                !valid_revision_observation(o, spec)
                    || !o.repository_credential_material_missing.is_empty()
            }) {
                return refused(Report::permanent("INVALID_DRIVER_OBSERVATION"));
            }
        }
        let observation = match prepared {
            Ok(o) => o,
            Err(e) => {
                describe_prepare_failure(pass, spec, &e, true);
                let mut report = compute_report(&e, pass).at("prepare");
                // SPEC Z3: a failed preparation keeps its evidence.
                if let Some(evidence) = e.preparation_evidence() {
                    report.result_data = Some(json!({ "preparation": evidence }));
                }
                // SPEC Z2: a retryable failure of the active revision's preparation takes the
                // active path (a maintenance claim fails and keeps its chain); it is never a
                // candidate's retry.
                let transient = matches!(
                    e.kind(),
                    ComputeErrorKind::TransientDependency | ComputeErrorKind::Retryable
                );
                if l.is_active() && transient {
                    let code = report.code.clone();
                    return Ok(Observed::Ended(Box::new(
                        active_path(pass, &code)
                            .at("prepare")
                            .with_compute_error(&e),
                    )));
                }
                // SPEC Z3, G2: it ends the deployment at once, not stopped as a refused
                // candidate: `publish` registers its durable retirement instead.
                if e.is_preparation_failure()
                    && report.outcome == Outcome::Permanent
                    && !maintenance
                {
                    let failed = report.with_facts(Facts::Own(RevisionFacts::FailedPreparation));
                    return Ok(Observed::Ended(Box::new(failed)));
                }
                return if report.outcome == Outcome::Permanent {
                    refused(report)
                } else {
                    Ok(Observed::Ended(Box::new(report)))
                };
            }
        };
        if !valid_revision_observation(&observation, spec) {
            return refused(Report::permanent("INVALID_DRIVER_OBSERVATION"));
        }
        let mut seen = phases.get().unwrap_or_default();
        if observation.ready {
            seen.ready_at = Some(Instant::now());
        } else {
            seen.unready_at = Some(Instant::now());
        }
        phases.set(Some(seen));
        if observation.ready {
            let warnings: Vec<Value> = observation
                .warnings
                .iter()
                .map(|w| json!({"code": w.code, "pluginId": w.plugin_id}))
                .collect();
            return Ok(Observed::Ready(
                (!warnings.is_empty()).then(|| json!({"warnings": warnings})),
            ));
        }
        let failure = observation.runtime_failure;
        if let Some(held) = failure.as_ref().and_then(held_runtime_failure) {
            let mut report = Report::permanent(held.code).at("prepare");
            if held.keeps_evidence {
                // A failed model probe keeps its evidence.
                report.result_data = Some(json!({"runtimeFailure": failure}));
            }
            return Ok(Observed::Ended(Box::new(report)));
        }
        let waiting = revision_pending(observation.pending_reason.as_deref());
        if maintenance {
            // A failed observation fails this claim; it never retires the running revision,
            // and the next bucket is enqueued on publish.
            return Ok(Observed::Ended(Box::new(active_path(pass, waiting.code))));
        }
        let wait = if waiting.bootstrap {
            Wait::Bootstrap
        } else {
            Wait::Convergence
        };
        let mut pending =
            Report::waiting(waiting.code, readiness_recheck(pass.age()), wait).at("prepare");
        pending.runtime_failure = failure;
        Ok(Observed::Ended(Box::new(pending)))
    }

    /// R6/R7: publish the active pointer (compare-and-set, fenced), then switch the route and
    /// retire earlier revisions.
    fn activate(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        spec: &RevisionSpec,
        already_active: bool,
        result: Option<Value>,
    ) -> Result<Report, PassError> {
        let (agent, revision) = (&l.agent, &l.revision);
        let driver = pass.ctx.compute.clone();
        // SPEC Z1: decided again before activation; a refusal is the activation's error, and
        // a refused candidate is stopped before it is published (R9).
        if let Err(e) = driver
            .policy()
            .validate_execution_admission(spec, AdmissionUse::Stored)
        {
            let report = activation_report(&e, pass).at("activate");
            return if !already_active && report.outcome == Outcome::Permanent {
                self.refuse(pass, l, report, true)
            } else {
                Ok(report)
            };
        }
        let earlier: Vec<&RevisionRow> = l
            .all
            .iter()
            .filter(|r| r.revision < revision.revision && r.owned_by(pass))
            .collect();
        let mut activated = false;
        let code = if already_active {
            "REVISION_ALREADY_ACTIVE"
        } else {
            // R6: the Agent may have stopped while the candidate prepared.
            let current = {
                let mut db = pass.db()?;
                load_agent(&mut *db, &agent.namespace_id, &agent.id)?
            };
            let Some(current) = current else {
                return Ok(Report::permanent("INVALID_REVISION_OWNER"));
            };
            if current.desired_runtime_state != RuntimeState::Running {
                try_effect!(pass, "stop", |c| driver.stop_revision(spec, c));
                return Ok(Report::success("REVISION_STOPPED"));
            }
            // A before-commit driver activates the candidate first (SPEC R6): the pointer is
            // committed only once its runtime was replaced and seen serving.
            if driver.policy().activates_before_commit(spec) {
                if let Err(e) = effect(pass, "activate", |c| driver.activate_revision(spec, c))? {
                    return Ok(activation_report(&e, pass).at("activate"));
                }
                activated = true;
            }
            // Before the first pointer commit of a dedicated Agent its route serves nothing, in
            // production (SPEC N14; W8 makes the method required there).
            if pass.ctx.mode == Mode::Production
                && agent.active_revision_id.is_none()
                && revision.harness_mode == HarnessMode::Dedicated
            {
                try_effect!(pass, "deactivate", |c| driver.deactivate_revision(spec, c));
            }
            let expected = agent.active_revision_id.clone();
            let won = pass.fenced(|tx| {
                Ok(tx
                    .query_opt(
                        ACTIVATE,
                        &[&agent.namespace_id, &agent.id, &revision.id, &expected],
                    )?
                    .is_some())
            })?;
            if !won {
                return Ok(Report::retry("ACTIVE_REVISION_CHANGED"));
            }
            // A stop admitted right after the pointer commit: the revision stops instead of
            // activating, and, published, retires its predecessors (SPEC R6).
            let current = {
                let mut db = pass.db()?;
                load_agent(&mut *db, &agent.namespace_id, &agent.id)?
            };
            if current.is_none_or(|a| a.desired_runtime_state != RuntimeState::Running) {
                super::repository::close_before_stop(pass, revision)?;
                try_effect!(pass, "stop", |c| driver.stop_revision(spec, c));
                for earlier in earlier.iter().filter(|r| !r.retired) {
                    super::repository::close_before_stop(pass, earlier)?;
                    let earlier = earlier.spec(&pass.ctx.installation_id);
                    try_effect!(pass, "retire", |c| driver.retire_revision(&earlier, c));
                }
                return Ok(Report::success("REVISION_STOPPED").with_facts(Facts::Own(
                    RevisionFacts::Stopped {
                        retired_before: Some(revision.revision),
                    },
                )));
            }
            "REVISION_ACTIVATED"
        };
        let after = if activated {
            Ok(())
        } else {
            effect(pass, "activate", |c| driver.activate_revision(spec, c))?
        };
        if let Err(e) = after {
            let report = activation_report(&e, pass).at("activate");
            // R11: an activation of the running active revision that did not finish takes the
            // active path: a maintenance claim fails with its code and keeps the chain.
            if already_active && report.outcome != Outcome::Permanent {
                let code = report.code.clone();
                return Ok(active_path(pass, &code)
                    .at("activate")
                    .with_compute_error(&e));
            }
            return Ok(report);
        }
        for earlier in earlier.iter().filter(|r| !r.retired) {
            // SPEC G12: an earlier revision's sessions are closed before its retirement.
            super::repository::close_before_stop(pass, earlier)?;
            let earlier = earlier.spec(&pass.ctx.installation_id);
            try_effect!(pass, "retire", |c| driver.retire_revision(&earlier, c));
        }
        let mut report = Report::success(code).with_facts(Facts::Own(RevisionFacts::Activated {
            revision: revision.revision,
            previous: agent.active_revision_id.clone(),
        }));
        report.result_data = result;
        Ok(report)
    }
}

/// The readiness codes of SPEC Z3's newest readiness evidence: every code an unready
/// observation waits with (R5).
fn readiness_codes() -> Vec<&'static str> {
    let mut codes = vec![revision_pending(None).code];
    codes.extend(REVISION_PENDING_CODES.iter().map(|(_, code)| *code));
    codes
}

/// What an activation that did not finish becomes: an
/// activation wait the driver names (a gateway rollout still running) keeps its code, a
/// converging dependency keeps `DEPENDENCY_UNAVAILABLE`, a refusal is permanent, and anything
/// else waits as `REVISION_FINALIZATION_INCOMPLETE`; the next pass, the revision now active,
/// repeats the activation (R7).
fn activation_report(e: &ComputeError, pass: &Pass<'_>) -> Report {
    // SPEC H4: a refused `beforeWorkloadStop` (an embedded revision taking the gateway from
    // the revision it runs) waits with the hook's code, as a refused stop does.
    if matches!(e.kind(), ComputeErrorKind::Retryable) && e.class() == "lifecycle_hook" {
        return Report::pending(e.retry_code(), readiness_recheck(pass.age()))
            .with_compute_error(e);
    }
    match e.kind() {
        ComputeErrorKind::Retryable | ComputeErrorKind::Draining => Report::pending(
            "REVISION_FINALIZATION_INCOMPLETE",
            readiness_recheck(pass.age()),
        )
        .with_compute_error(e),
        _ => compute_report(e, pass),
    }
}

/// SPEC Z2's active path of the running active revision that cannot converge now: a
/// maintenance claim of a driver with a maintenance interval fails with `code` and keeps its
/// chain (`publish` enqueues the next bucket while the revision is still active and running);
/// any other work waits with `code`, under the convergence deadline. Nothing is stopped.
fn active_path(pass: &Pass<'_>, code: &str) -> Report {
    let maintenance = pass.claim.operation == Operation::RevisionMaintenance;
    if maintenance && pass.ctx.compute.policy().maintenance_interval().is_some() {
        Report::permanent(code).with_facts(Facts::Own(RevisionFacts::ActiveMaintenanceFailed))
    } else {
        Report::pending(code, readiness_recheck(pass.age()))
    }
}

/// What a revision pass did, for its `publish` (R3-R7, R11).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevisionFacts {
    /// R6/R7: the pointer names this revision; earlier revisions are retired and the activation
    /// audited once; a maintenance chain starts or continues.
    Activated {
        revision: i32,
        previous: Option<String>,
    },
    /// R4: a newer revision supersedes this one (audited).
    Superseded { by: String, by_revision: i32 },
    /// R3: stopped; revisions numbered below `retired_before` were retired, when this work had
    /// published its candidate.
    Stopped { retired_before: Option<i32> },
    /// Maintenance of a revision that no longer runs, or of a failed deployment.
    ChainEnded,
    /// Refused before any effect (R2, ownership): the revision cannot run again without a new
    /// deployment, so a maintenance chain ends.
    Refused,
    /// SPEC Z3, G2: the deployment failed in a way that needs durable retirement; a permanent
    /// outcome registers `failed-preparation` repository cleanup as it is published.
    FailedPreparation,
    /// SPEC E18: a maintenance pass of an active revision whose harness source has a
    /// withdrawal row; `publish` re-queues as E14 and keeps the chain only while something
    /// is pending.
    CredentialWithdrawn,
    /// SPEC Z2: a maintenance claim of the active revision fails with its code and keeps the
    /// chain, unless `settle` finds the Agent moved on (then it completes superseded).
    ActiveMaintenanceFailed,
    /// SPEC G14: an expired revision whose runtime must go: `publish` registers its
    /// `terminal-runtime` cleanup, and the chain ends; an authorization denial that decided
    /// it is audited as a deploy denial.
    ExpiryRetiresRuntime {
        denial: Option<Box<super::report::Denial>>,
    },
}

/// A refusal before any effect that ends a maintenance chain.
fn refused(code: &str) -> Report {
    Report::permanent(code).with_facts(Facts::Own(RevisionFacts::Refused))
}

/// Where a deployment pass spent its time, filled in as it goes (SPEC Z9).
type Phases = Cell<Option<DeployPhases>>;

/// What one pass notes for after its report: its phases, and whether the work yielded an
/// exclusive predecessor's stop before (SPEC Z5).
#[derive(Default)]
struct Scratch {
    phases: Phases,
    predecessor_stop_yielded: Cell<bool>,
}

/// `worker.compute-prepare-failed` (SPEC Z6): the driver's description of
/// a failed preparation (or of an exclusive predecessor's stop before it), only when every
/// field is within its bounds. A drain or a cancelled call is no preparation failure. It never
/// changes the outcome.
fn describe_prepare_failure(pass: &Pass<'_>, spec: &RevisionSpec, e: &ComputeError, reached: bool) {
    if matches!(
        e.kind(),
        ComputeErrorKind::Draining | ComputeErrorKind::Cancelled(_)
    ) {
        return;
    }
    let Some(d) = e.diagnostic().filter(|d| d.valid()) else {
        return;
    };
    let claim = pass.claim;
    let mut fields = json!({
        "workId": claim.key,
        "attempt": claim.attempt,
        "operation": claim.operation.event_name(),
        "namespaceId": spec.namespace_id,
        "agentId": spec.agent_id,
        "revisionId": spec.revision_id,
        "computeDriverId": pass.ctx.compute.id(),
        "code": d.code,
        "step": d.stage,
        "candidatePreparationReached": reached,
    });
    if let Some(class) = &d.error_class {
        fields["errorClass"] = json!(class);
    }
    if let Some(message) = &d.message {
        fields["message"] = json!(message);
    }
    if let Some(status) = d.status {
        fields["status"] = json!(status);
    }
    pass.ctx
        .events
        .emit("worker.compute-prepare-failed", fields);
}

/// What preparing a revision came to.
enum Observed {
    /// Ready, with the plugin-warning result data.
    Ready(Option<Value>),
    /// The pass ends with this report.
    Ended(Box<Report>),
}

/// M2 step 1, after the Secret checks: the account must be the revision's
/// Namespace's (`INVALID_HARNESS_AUTH`) and the actor may still `read` it (a denial).
fn check_account_access(
    policy: &Policy,
    actor: &str,
    ns: &str,
    account: &ManagedAccountAuth,
) -> Option<Report> {
    if account.namespace_id != ns {
        return Some(Report::permanent("INVALID_HARNESS_AUTH"));
    }
    let resource = Resource::owned(ResourceKind::ServiceAccount, ns, &account.id);
    deny(policy, Request::new(actor, Action::Read, resource), actor)
}

fn first_denial<const N: usize>(
    policy: &Policy,
    requests: [Request; N],
    actor: &str,
) -> Option<Report> {
    requests.into_iter().find_map(|r| deny(policy, r, actor))
}

impl Reconciler for RevisionReconciler {
    type Facts = RevisionFacts;

    /// SPEC Z2: a maintenance claim failing on the active path, with the
    /// Agent locked, completes `REVISION_MAINTENANCE_SUPERSEDED` and ends its chain when the
    /// Agent no longer points at the revision with its principal or no longer runs.
    fn settle(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: Report,
    ) -> Result<Report, PassError> {
        if report.facts != Facts::Own(RevisionFacts::ActiveMaintenanceFailed) {
            return Ok(report);
        }
        let Some(revision_id) = &pass.claim.revision_id else {
            return Ok(report);
        };
        let runs: bool = tx
            .query_opt(STILL_ACTIVE, &[&pass.claim.namespace_id, revision_id])?
            .is_some_and(|row| row.get(0));
        Ok(if runs {
            report
        } else {
            Report::success("REVISION_MAINTENANCE_SUPERSEDED")
                .with_facts(Facts::Own(RevisionFacts::ChainEnded))
        })
    }

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let scratch = Scratch::default();
        let report = self.run(pass, &scratch)?;
        let report = self.retire_bootstrap_at_deadline(pass, report)?;
        let mut report = if scratch.predecessor_stop_yielded.get() {
            self.finish_yielded_predecessor_stops(pass, report)?
        } else {
            report
        };
        report.deploy = scratch.phases.get();
        Ok(report)
    }

    fn publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError> {
        let claim = pass.claim;
        let (Some(agent_id), Some(revision_id)) = (&claim.agent_id, &claim.revision_id) else {
            return Ok(());
        };
        let maintenance = claim.operation == Operation::RevisionMaintenance;
        // Whether this outcome ends the revision's maintenance chain, and whether it starts
        // one whatever the work (an activation).
        let (ends_chain, activated) = match &report.facts {
            Facts::Own(RevisionFacts::Activated { revision, previous }) => {
                publish_activation(tx, pass, report, *revision, previous.as_deref())?;
                (false, true)
            }
            Facts::Own(RevisionFacts::Superseded { by, by_revision }) => {
                audit(
                    tx,
                    pass,
                    Audit {
                        denial: false,
                        action: "openclaw.agents.lifecycle.supersede",
                        resource_kind: "agent_revision",
                        resource_id: revision_id,
                        outcome: "success",
                        reason_code: Some("REVISION_SUPERSEDED"),
                        details: json!({"supersededBy": by, "supersededByRevision": by_revision}),
                    },
                )?;
                // SPEC G2: a superseded revision with repository credentials has its runtime
                // retired durably.
                if repository_kind(tx, revision_id)?.0 {
                    let cleanup = NewWork::repository_cleanup(
                        &claim.namespace_id,
                        agent_id,
                        revision_id,
                        CleanupKind::TerminalRuntime,
                        &claim.actor_id,
                    );
                    queue::work_enqueue(tx, &cleanup)?;
                }
                (true, false)
            }
            Facts::Own(RevisionFacts::Stopped { retired_before }) => {
                if let Some(number) = retired_before {
                    tx.execute(RETIRE_EARLIER, &[agent_id, number])?;
                }
                (true, false)
            }
            Facts::Own(RevisionFacts::ChainEnded | RevisionFacts::Refused) => (true, false),
            Facts::Own(RevisionFacts::ActiveMaintenanceFailed) => (false, false),
            Facts::Own(RevisionFacts::ExpiryRetiresRuntime { denial }) => {
                if let Some(denial) = denial {
                    denial_audit(tx, pass, "openclaw.agents.deploy", agent_id, report, denial)?;
                }
                let cleanup = NewWork::repository_cleanup(
                    &claim.namespace_id,
                    agent_id,
                    revision_id,
                    CleanupKind::TerminalRuntime,
                    &claim.actor_id,
                );
                queue::work_enqueue(tx, &cleanup)?;
                (true, false)
            }
            Facts::Own(RevisionFacts::FailedPreparation) => {
                // SPEC G2: in the transaction that fails the work, so the cleanup survives a
                // crash right after the failure.
                if report.outcome == Outcome::Permanent {
                    let cleanup = NewWork::repository_cleanup(
                        &claim.namespace_id,
                        agent_id,
                        revision_id,
                        CleanupKind::FailedPreparation,
                        &claim.actor_id,
                    );
                    queue::work_enqueue(tx, &cleanup)?;
                }
                (true, false)
            }
            Facts::Own(RevisionFacts::CredentialWithdrawn) => {
                tx.query_opt(NAMESPACE_LOCK, &[&claim.namespace_id])?;
                let collected = queue::work_enqueue_withdrawal_requeue(
                    tx,
                    &claim.namespace_id,
                    agent_id,
                    revision_id,
                )?;
                (collected.is_empty(), false)
            }
            // Only a denial is audited on failure; the work row's code and the status view say
            // the rest. A refusal ends a maintenance chain.
            Facts::Denied(denial) => {
                if report.outcome == Outcome::Permanent {
                    denial_audit(tx, pass, "openclaw.agents.deploy", agent_id, report, denial)?;
                }
                (true, false)
            }
            Facts::Plain => (false, false),
        };
        // SPEC G14: a published revision whose non-standing repository credentials are past
        // their deadline is not continued after exhausted retries (its expiry withdraws them).
        let ends_chain = ends_chain
            || (maintenance && report.exhausted && repository_deadline_passed(tx, revision_id)?);
        // R11: an active revision of a driver with a maintenance interval gets its next bucket.
        let terminal = matches!(report.outcome, Outcome::Success | Outcome::Permanent);
        let keeps_running = activated || (maintenance && !ends_chain);
        if terminal && keeps_running {
            if let Some(interval) = maintenance_interval(tx, pass, revision_id)? {
                queue_next_maintenance(tx, pass, interval)?;
            }
        }
        Ok(())
    }
}

/// The publication of an activation (R6, R7, E16): earlier revisions retired, the withdrawals
/// that waited for it queued, and exactly one activation audit per revision, even when the
/// claim was lost between the pointer compare-and-set and the completion.
fn publish_activation(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    report: &Report,
    revision: i32,
    previous: Option<&str>,
) -> Result<(), PassError> {
    let claim = pass.claim;
    let (Some(agent_id), Some(revision_id)) = (&claim.agent_id, &claim.revision_id) else {
        return Ok(());
    };
    tx.execute(RETIRE_EARLIER, &[agent_id, &revision])?;
    // SPEC WS4: the setup current at this commit completes with the activation, whether or
    // not this pass handed its id to Compute; no audit of its own.
    tx.query_opt(
        WORKSPACE_SETUP_COMPLETE,
        &[&claim.namespace_id, agent_id, revision_id],
    )?;
    // SPEC E16: the withdrawals that waited for this activation or for the retirements it
    // made.
    if claim.operation == Operation::RevisionReconcile && report.outcome == Outcome::Success {
        queue::work_enqueue_withdrawal_activation(
            tx,
            &claim.namespace_id,
            agent_id,
            revision_id,
            revision,
        )?;
    }
    let audited: bool = tx.query_one(ACTIVATION_AUDITED, &[revision_id])?.get(0);
    if audited {
        return Ok(());
    }
    let warnings = report.result_data.as_ref().map(|d| d["warnings"].clone());
    audit(
        tx,
        pass,
        Audit {
            denial: false,
            action: "openclaw.agents.lifecycle.activate",
            resource_kind: "agent_revision",
            resource_id: revision_id,
            outcome: "success",
            reason_code: Some("REVISION_ACTIVATED"),
            details: json!({
                "agentId": agent_id,
                "revision": revision,
                "previous": previous,
                "warnings": warnings,
            }),
        },
    )?;
    Ok(())
}

/// R11: the next maintenance bucket of a revision still active and running, on a multiple of
/// the driver's interval by the database clock.
/// Whether a revision has repository credentials, and whether under a standing approval.
fn repository_kind(
    tx: &mut crate::db::Tx<'_>,
    revision_id: &str,
) -> Result<(bool, bool), PassError> {
    Ok(tx
        .query_opt(REPOSITORY_KIND, &[&revision_id])?
        .map_or((false, false), |r| (r.get(0), r.get(1))))
}

/// SPEC G14: whether a revision's non-standing repository credentials are past their
/// deadline, by the database clock.
fn repository_deadline_passed(
    tx: &mut crate::db::Tx<'_>,
    revision_id: &str,
) -> Result<bool, PassError> {
    Ok(tx
        .query_opt(REPOSITORY_KIND, &[&revision_id])?
        .is_some_and(|r| r.get(2)))
}

/// SPEC R11, G9: the revision's maintenance interval: the Compute's; a revision with
/// repository credentials has one whatever its Compute, the smallest of the Compute's, the
/// cleanup interval (G6) and, under a standing approval, 10 s.
fn maintenance_interval(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    revision_id: &str,
) -> Result<Option<Duration>, PassError> {
    let compute = pass.ctx.compute.policy().maintenance_interval();
    let (repository, standing) = repository_kind(tx, revision_id)?;
    if !repository {
        return Ok(compute);
    }
    let cleanup = super::repository_cleanup::cleanup_interval(pass);
    let mut interval = compute.map_or(cleanup, |c| c.min(cleanup));
    if standing {
        interval = interval.min(STANDING_MAINTENANCE);
    }
    Ok(Some(interval))
}

fn queue_next_maintenance(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    interval: Duration,
) -> Result<(), PassError> {
    let claim = pass.claim;
    let (Some(agent_id), Some(revision_id)) = (&claim.agent_id, &claim.revision_id) else {
        return Ok(());
    };
    let still_active = load_agent(tx, &claim.namespace_id, agent_id)?.is_some_and(|a| {
        a.active_revision_id.as_deref() == Some(revision_id.as_str())
            && a.desired_runtime_state == RuntimeState::Running
    });
    if !still_active {
        return Ok(());
    }
    let ms = interval.as_millis().max(1) as i64;
    let now = queue::work_clock(tx)?;
    let bucket = now / ms + 1;
    let next = NewWork::revision_maintenance(
        &claim.namespace_id,
        agent_id,
        revision_id,
        bucket,
        &claim.actor_id,
    );
    let due = Duration::from_millis((bucket * ms - now).max(0) as u64);
    queue::work_enqueue_at(tx, &next, due)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // SPEC WS5: every workspace wait a driver may name is a readiness code, so it defers on
    // the readiness cadence and is readiness evidence for Z3.
    #[test]
    fn readiness_codes_name_every_workspace_wait() {
        for code in [
            "WORKSPACE_NODE_PENDING",
            "WORKSPACE_SETUP_RETRYING",
            "WORKSPACE_NODE_BINDING_PENDING",
            "WORKSPACE_NODE_RECONNECT_PENDING",
        ] {
            assert!(readiness_codes().contains(&code), "{code}");
            assert_eq!(revision_pending(Some(code)).code, code);
        }
    }

    #[test]
    fn a_refused_stop_recheck_doubles_from_the_readiness_cadence_up_to_five_minutes() {
        // SPEC R9.
        let age = Duration::ZERO;
        let none = Duration::ZERO;
        assert_eq!(
            refused_stop_recheck(age, 0, none),
            Duration::from_millis(500)
        );
        assert_eq!(refused_stop_recheck(age, 1, none), Duration::from_secs(1));
        assert_eq!(refused_stop_recheck(age, 3, none), Duration::from_secs(4));
        assert_eq!(
            refused_stop_recheck(age, 12, none),
            Duration::from_secs(300)
        );
        assert_eq!(
            refused_stop_recheck(age, 1_000, none),
            Duration::from_secs(300)
        );
        // The readiness cadence grows with the work's age.
        assert_eq!(
            refused_stop_recheck(Duration::from_secs(200), 1, none),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn a_refused_stop_waits_four_times_as_long_as_the_stop_took() {
        assert_eq!(
            refused_stop_recheck(Duration::ZERO, 0, Duration::from_secs(90)),
            Duration::from_secs(360)
        );
    }
}
