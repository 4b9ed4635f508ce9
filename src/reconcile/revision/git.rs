//! A revision's repository credentials in its own passes (SPEC G10-G12): the ordered
//! authority checks, the sessions prepared and handed to Compute with the revision, their one
//! repair after missing material, and their close before any stop of the revision.

use super::*;
use crate::compute::{
    HarnessState, MissingMaterial, RepositoryAccess, RepositoryWithdrawal,
    REPOSITORY_RECIPIENT_UNVERIFIED,
};
use crate::reconcile::repository::{self, Credentials, Prepared};

const EXPIRY: &str = include_str!("../../../sql/queries/repository_expiry.sql");
const APPROVAL_LOAD: &str = include_str!("../../../sql/queries/repository_approval_load.sql");
const EXECUTION_LOAD: &str = include_str!("../../../sql/queries/repository_execution_load.sql");
const EXECUTION_STORE: &str = include_str!("../../../sql/queries/repository_execution_store.sql");
const SESSIONS_HANDOFF: &str = include_str!("../../../sql/queries/repository_sessions_handoff.sql");
const AGENT_LOCK: &str = include_str!("../../../sql/queries/agent_lock.sql");

/// SPEC G15: the standing approval the revision was admitted under is gone.
const APPROVAL_REMOVED: &str = "REPOSITORY_STANDING_APPROVAL_REMOVED";
/// SPEC G15: it was replaced (another id, generation or scope fingerprint).
const POLICY_CHANGED: &str = "REPOSITORY_STANDING_POLICY_CHANGED";
/// SPEC G15: the running execution is not the one that received the material.
const EXECUTION_UNVERIFIED: &str = "REPOSITORY_EXECUTION_UNVERIFIED";
/// SPEC G15: how long `observe_revision` may take.
const OBSERVE_BOUND: Duration = Duration::from_millis(5_000);
/// SPEC G15: how long a standing revision's maintenance waits, on an unverified execution
/// or a predecessor's session still disposing: min(5 000 ms, the Compute interval).
fn standing_recheck(pass: &Pass<'_>) -> Duration {
    const MOST: Duration = Duration::from_secs(5);
    pass.ctx
        .compute
        .policy()
        .maintenance_interval()
        .map_or(MOST, |i| i.min(MOST))
}

/// A revision's expiry state (SPEC G14), derived from its cleanup works and its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expiry {
    None,
    /// Past its deadline, or its standing approval handed off.
    Expired,
    /// Its runtime's retirement is registered.
    Retiring,
}

/// What the expiry withdrawal decided (SPEC G14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Withdrawal {
    Withdrawn,
    RetireRuntime,
    Pending,
}

impl RevisionReconciler {
    /// The revision's repository credentials, when it has them (SPEC §19).
    pub(super) fn git(l: &Loaded) -> Result<Option<Credentials>, PassError> {
        l.revision
            .repository_credentials
            .as_ref()
            .map(Credentials::parse)
            .transpose()
    }

    /// SPEC G10, in order: a stopping worker loses the claim; the Namespace not `ready`, the
    /// Agent not `running` or its principal changed (`REPOSITORY_REVISION_STOPPED`); another
    /// active revision numbered at least this one (`REPOSITORY_REVISION_SUPERSEDED`); with
    /// `full`, R2's refusal and the backend step again (a pass that just decided them skips
    /// them); a driver that delivers no repository credentials
    /// (`REPOSITORY_RUNTIME_UNSUPPORTED`) or refuses the recipient; then G19's `validate`.
    /// `Some` refuses, permanently.
    pub(super) fn repository_authority(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        credentials: &Credentials,
        full: bool,
    ) -> Result<Option<Report>, PassError> {
        pass.cancel().check()?;
        let revision = &l.revision;
        let (current, active_number) = {
            let mut db = pass.db()?;
            let current = load_agent(&mut *db, &revision.namespace_id, &revision.agent_id)?;
            let active = current.as_ref().and_then(|a| a.active_revision_id.clone());
            let number = match active.filter(|id| *id != revision.id) {
                Some(id) => load_revisions(
                    &mut *db,
                    &revision.namespace_id,
                    &revision.agent_id,
                    Some(&id),
                    pass.claim.id,
                )?
                .first()
                .map(|r| r.revision),
                None => None,
            };
            (current, number)
        };
        let stopped = !current
            .as_ref()
            .is_some_and(|a| a.runs_as(&revision.service_principal_id));
        if stopped {
            return Ok(Some(Report::permanent("REPOSITORY_REVISION_STOPPED")));
        }
        if active_number.is_some_and(|n| n >= revision.revision) {
            return Ok(Some(Report::permanent("REPOSITORY_REVISION_SUPERSEDED")));
        }
        if full {
            if let Some(refusal) = self.authorize(pass, l)? {
                return Ok(Some(refusal));
            }
        }
        let spec = revision.spec(&pass.ctx.installation_id);
        let selected = pass.ctx.sandbox.driver.as_ref().map(|s| s.id.as_str());
        match pass
            .ctx
            .compute
            .policy()
            .validate_repository_credentials(&spec, selected)
        {
            None => return Ok(Some(Report::permanent(repository::RUNTIME_UNSUPPORTED))),
            Some(Err(e)) => {
                let code = match e.kind() {
                    ComputeErrorKind::Permanent(code)
                        if code == REPOSITORY_RECIPIENT_UNVERIFIED =>
                    {
                        REPOSITORY_RECIPIENT_UNVERIFIED
                    }
                    _ => repository::RUNTIME_UNSUPPORTED,
                };
                return Ok(Some(Report::permanent(code)));
            }
            Some(Ok(())) => {}
        }
        let refused = {
            let mut db = pass.db()?;
            repository::validate(
                &mut *db,
                revision,
                credentials,
                pass.ctx.repository_sender.as_deref(),
            )?
        };
        Ok(refused.map(Report::permanent))
    }

    /// A G10 refusal (or a sender's, SPEC G21): permanent; a candidate is stopped first
    /// (R9, its sessions closed before, G12), and an active revision's maintenance chain ends.
    pub(super) fn refuse_repository(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        mut refusal: Report,
        prepared: bool,
    ) -> Result<Report, PassError> {
        if refusal.facts == Facts::Plain {
            refusal.facts = Facts::Own(RevisionFacts::Refused);
        }
        self.refuse(pass, l, refusal.at("repository"), prepared)
    }

    /// SPEC G19 *captureExecution*: on a ready observation, what `verify_repository_execution`
    /// answers is stored for the revision, replacing any. `Some` ends the pass (the call
    /// failed).
    pub(super) fn capture_execution(
        &self,
        pass: &Pass<'_>,
        spec: &RevisionSpec,
    ) -> Result<Option<Report>, PassError> {
        let driver = pass.ctx.compute.clone();
        let Some(runtime) = driver.repository() else {
            return Ok(None);
        };
        match effect(pass, "repository", |c| {
            runtime.verify_repository_execution(spec, c)
        })? {
            Ok(execution) => {
                pass.fenced(|tx| {
                    tx.execute(
                        EXECUTION_STORE,
                        &[&spec.namespace_id, &spec.revision_id, &execution],
                    )?;
                    Ok(())
                })?;
                Ok(None)
            }
            Err(e) => Ok(Some(compute_report(&e, pass).at("repository"))),
        }
    }

    /// SPEC G15, G19 *authorize*: a standing revision's maintenance, before binding or
    /// preparing. The first binding's approval gone or replaced hands the revision off to
    /// `standing-withdrawal` cleanup (success with the code) while it is the current,
    /// running, standing one with no expiry state, else refuses it as G10 does; an execution
    /// that is not the captured one is observed and waits `REPOSITORY_EXECUTION_UNVERIFIED`
    /// (exempt from the deadline), or completes `REVISION_MAINTENANCE_SUPERSEDED` when the
    /// Agent moved on. `None` goes on.
    pub(super) fn authorize_standing(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        credentials: &Credentials,
    ) -> Result<Option<Report>, PassError> {
        let (Some(snapshot), Some(first)) = (&credentials.standing, credentials.bindings.first())
        else {
            return Ok(None);
        };
        let revision = &l.revision;
        let (approval, captured) = {
            let mut db = pass.db()?;
            let approval = db
                .query_opt(
                    APPROVAL_LOAD,
                    &[
                        &revision.namespace_id,
                        &revision.agent_id,
                        &first.repository_ref,
                    ],
                )?
                .map(|r| {
                    (
                        r.get::<_, String>(0),
                        r.get::<_, i64>(1),
                        r.get::<_, String>(2),
                    )
                });
            let captured: Option<Value> = db
                .query_opt(EXECUTION_LOAD, &[&revision.id])?
                .map(|r| r.get(0));
            (approval, captured)
        };
        let changed = match &approval {
            None => Some(APPROVAL_REMOVED),
            Some((id, generation, fingerprint))
                if *id != snapshot.id
                    || *generation != snapshot.generation
                    || *fingerprint != snapshot.scope_fingerprint =>
            {
                Some(POLICY_CHANGED)
            }
            Some(_) => None,
        };
        if let Some(code) = changed {
            return self.hand_off(pass, l, code).map(Some);
        }
        let driver = pass.ctx.compute.clone();
        let Some(runtime) = driver.repository() else {
            return Ok(None);
        };
        let spec = revision.spec(&pass.ctx.installation_id);
        let verified = match &captured {
            Some(captured) => effect(pass, "repository", |c| {
                runtime.verify_repository_execution(&spec, c)
            })?
            .is_ok_and(|now| now == *captured),
            None => false,
        };
        if verified {
            return Ok(None);
        }
        // Observed only while the Agent is current, for at most `OBSERVE_BOUND`: a bound
        // that ran out, or any error, is `unknown`.
        let state = if self.is_current(pass, revision)? {
            effect(pass, "repository", |c| {
                let (bounded, _link) = c.bounded(OBSERVE_BOUND)?;
                runtime
                    .observe_revision(&spec, &bounded)
                    .or_else(|e| match (e.kind(), c.check()) {
                        (ComputeErrorKind::Cancelled(_), Ok(())) => Ok(HarnessState::Unknown),
                        _ => Err(e),
                    })
            })?
            .unwrap_or(HarnessState::Unknown)
        } else {
            HarnessState::Unknown
        };
        if !self.is_current(pass, revision)? {
            return Ok(Some(
                Report::success("REVISION_MAINTENANCE_SUPERSEDED")
                    .with_facts(Facts::Own(RevisionFacts::ChainEnded)),
            ));
        }
        let mut wait = Report::waiting(
            EXECUTION_UNVERIFIED,
            standing_recheck(pass),
            Wait::Unbounded,
        );
        wait.result_data = Some(json!({ "harnessState": state.as_str() }));
        Ok(Some(wait.at("repository")))
    }

    /// Whether the Agent still runs the revision: its Namespace ready, the Agent active,
    /// running, with the revision's principal and pointing at it.
    fn is_current(&self, pass: &Pass<'_>, revision: &RevisionRow) -> Result<bool, PassError> {
        let current = {
            let mut db = pass.db()?;
            load_agent(&mut *db, &revision.namespace_id, &revision.agent_id)?
        };
        Ok(current.is_some_and(|a| a.runs_revision(revision)))
    }

    /// SPEC G15's hand-off: in one fenced transaction (Namespace, then Agent locked) the live
    /// sessions become `closing` and `standing-withdrawal` cleanup is registered; success with
    /// `code`, the chain going on (the next bucket finds the revision expired, G14). A revision
    /// that is no longer the current, running, unexpired one is refused with `code` instead.
    fn hand_off(&self, pass: &Pass<'_>, l: &Loaded, code: &str) -> Result<Report, PassError> {
        let revision = &l.revision;
        if !self.is_current(pass, revision)? || self.expiry(pass, &revision.id)? != Expiry::None {
            return self.refuse_repository(pass, l, Report::permanent(code), true);
        }
        let cleanup = NewWork::repository_cleanup(
            &revision.namespace_id,
            &revision.agent_id,
            &revision.id,
            CleanupKind::StandingWithdrawal,
            &pass.claim.actor_id,
        );
        pass.fenced(|tx| {
            tx.query_opt(NAMESPACE_LOCK, &[&revision.namespace_id])?;
            tx.query_opt(AGENT_LOCK, &[&revision.namespace_id, &revision.agent_id])?;
            tx.execute(SESSIONS_HANDOFF, &[&revision.id])?;
            queue::work_enqueue(tx, &cleanup)?;
            Ok(())
        })?;
        Ok(Report::success(code).at("repository"))
    }

    /// The revision's expiry state (SPEC G14).
    pub(super) fn expiry(&self, pass: &Pass<'_>, revision_id: &str) -> Result<Expiry, PassError> {
        let state: Option<String> = {
            let mut db = pass.db()?;
            db.query_opt(EXPIRY, &[&revision_id])?.map(|r| r.get(0))
        };
        Ok(match state.as_deref() {
            Some("retiring") => Expiry::Retiring,
            Some("expired") => Expiry::Expired,
            _ => Expiry::None,
        })
    }

    /// SPEC G14: the expired revision's Git is withdrawn on its maintenance claim. Its
    /// sessions are settled first (G3 in expiry mode: live ones closed, every session
    /// `disposed`); then the withdrawal: the Agent moved on (not active, running, pointing at
    /// the revision with its principal, or its Namespace not ready) or the state `retiring`
    /// retires the runtime; an R2 denial (`AUTHORIZATION_DENIED`, `ACTOR_REVOKED`,
    /// `INVALID_AGENT_PRINCIPAL`), a withdrawn model key, or a driver without the call retires
    /// it too, and so does the Secret step's `CREDENTIAL_WITHDRAWN` (`withdraw`); any other
    /// refusal of R2, the Secret step or the backend step waits; else the driver withdraws
    /// (`withdrawn`,
    /// `retire-runtime` or pending). Retiring completes `REPOSITORY_RUNTIME_RETIREMENT_QUEUED`
    /// and `publish` registers `terminal-runtime` cleanup (the chain ends); settled and
    /// withdrawn completes `REPOSITORY_ACCESS_WITHDRAWN` and keeps the chain; else the pass
    /// waits `REPOSITORY_CLEANUP_PENDING` on G4's cadence. It never prepares or activates.
    pub(super) fn expire(&self, pass: &Pass<'_>, l: &Loaded) -> Result<Report, PassError> {
        let revision = &l.revision;
        let cleaned = repository::cleanup(
            pass,
            pass.ctx.repository_sender.as_deref(),
            &revision.namespace_id,
            &revision.id,
            true,
        )?;
        let settled = cleaned.settled() && !self.sessions_outstanding(pass, &revision.id)?;
        let mut denial = None;
        let withdrawal = self.withdraw(pass, l, &mut denial)?;
        let recheck = |cause: bool| {
            super::super::repository_cleanup::cleanup_recheck(
                super::super::repository_cleanup::cleanup_interval(pass),
                pass.age(),
                cause,
                cleaned.closing,
            )
        };
        Ok(match withdrawal {
            Withdrawal::RetireRuntime => Report::success("REPOSITORY_RUNTIME_RETIREMENT_QUEUED")
                .with_facts(Facts::Own(RevisionFacts::ExpiryRetiresRuntime { denial })),
            Withdrawal::Withdrawn if settled => Report::success("REPOSITORY_ACCESS_WITHDRAWN"),
            _ => {
                let mut pending = Report::waiting(
                    super::super::repository_cleanup::PENDING,
                    recheck(cleaned.failure.is_some()),
                    Wait::Unbounded,
                );
                pending.cause = cleaned
                    .failure
                    .as_ref()
                    .map(super::super::repository_cleanup::compute_cause);
                pending.at("repository")
            }
        })
    }

    /// Whether a session of the revision is not yet `disposed` (expiry settles on all).
    fn sessions_outstanding(&self, pass: &Pass<'_>, revision_id: &str) -> Result<bool, PassError> {
        let mut db = pass.db()?;
        Ok(repository::sessions(&mut *db, revision_id)?
            .iter()
            .any(|s| s.phase != repository::Phase::Disposed))
    }

    /// SPEC G14's withdrawal decision, read under the heartbeat, in order: the Agent moved on
    /// or the runtime's retirement registered retires it; no expiry state waits; R2's decision
    /// and E18's model-key test, read independently (a failed read of one hides nothing the
    /// other established), or a driver without `retire_expired_repository_access`, may retire
    /// it (`decide_authority`); E14's re-queue; any other R2 refusal or a failed read waits;
    /// the Secret step (Z4, E19, WS2) on the sources read again (`decide_secret_step`); a
    /// backend refusal waits; then the driver withdraws. It never prepares or activates.
    fn withdraw(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        denied: &mut Option<Box<super::super::report::Denial>>,
    ) -> Result<Withdrawal, PassError> {
        let revision = &l.revision;
        let current_ok = self.is_current(pass, revision)?;
        match self.expiry(pass, &revision.id)? {
            _ if !current_ok => return Ok(Withdrawal::RetireRuntime),
            Expiry::Retiring => return Ok(Withdrawal::RetireRuntime),
            Expiry::None => return Ok(Withdrawal::Pending),
            Expiry::Expired => {}
        }
        // R2 without the backend step, which comes after the Secret step; `None`: the read
        // failed.
        let authorization = match self.authorize_r2(pass, l) {
            Ok(decided) => Some(decided),
            Err(e) if e.is_claim_loss() => return Err(e),
            Err(_) => None,
        };
        let refused = authorization.as_ref().map(|a| match a {
            Err(refusal) => Some(refusal.code.as_str()),
            Ok(_) => None,
        });
        let driver = pass.ctx.compute.clone();
        let runtime = driver.repository();
        let model_withdrawn = revision_sources::harness_withdrawn(&l.sources);
        if let Some(decided) = decide_authority(refused, model_withdrawn, runtime.is_some()) {
            if let Some(Err(Report {
                facts: Facts::Denied(denial),
                ..
            })) = authorization
            {
                *denied = Some(denial);
            }
            return Ok(decided);
        }
        let sources = {
            let mut db = pass.db()?;
            revision_sources::load(&mut *db, revision)?
        };
        self.requeue_withdrawals(pass, l, &sources)?;
        let Some(Ok(account)) = authorization else {
            return Ok(Withdrawal::Pending);
        };
        let secret_step = self.secret_context(pass, l, &sources).err();
        if let Some(decided) = decide_secret_step(secret_step.as_deref()) {
            return Ok(decided);
        }
        match self.check_backend(pass, revision, account.as_ref()) {
            Ok(None) => {}
            Err(e) if e.is_claim_loss() => return Err(e),
            Ok(Some(_)) | Err(_) => return Ok(Withdrawal::Pending),
        }
        let Some(runtime) = runtime else {
            return Ok(Withdrawal::RetireRuntime);
        };
        let spec = revision.spec(&pass.ctx.installation_id);
        Ok(
            match effect(pass, "repository", |c| {
                runtime.retire_expired_repository_access(&spec, c)
            })? {
                Ok(RepositoryWithdrawal::Withdrawn) => Withdrawal::Withdrawn,
                Ok(RepositoryWithdrawal::RetireRuntime) => Withdrawal::RetireRuntime,
                Ok(RepositoryWithdrawal::Pending) | Err(_) => Withdrawal::Pending,
            },
        )
    }

    /// SPEC G11, G19 *prepare*: the revision's sessions opened (or reused) and handed to
    /// Compute in `spec`, then G10 again. `Some` ends the pass: a refusal, a sender without an
    /// answer (a retry keeping `REPOSITORY_SENDER_UNAVAILABLE`), or a standing revision
    /// waiting on its predecessor's session.
    pub(super) fn prepare_sessions(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        spec: &mut RevisionSpec,
        credentials: &Credentials,
    ) -> Result<Option<Report>, PassError> {
        // SPEC G14: an expired revision gets no session: its runtime is prepared without Git.
        if self.expiry(pass, &l.revision.id)? != Expiry::None {
            spec.repository = Some(credentials.access());
            return Ok(None);
        }
        let driver = pass.ctx.compute.clone();
        let (Some(runtime), Some(sender)) =
            (driver.repository(), pass.ctx.repository_sender.clone())
        else {
            // G10 decided both before preparing; the Installation changed under the pass.
            let refusal = Report::permanent(repository::RUNTIME_UNSUPPORTED);
            return self.refuse_repository(pass, l, refusal, true).map(Some);
        };
        let namespace = match effect(pass, "repository", |c| runtime.runtime_namespace(spec, c))? {
            Ok(namespace) => namespace,
            Err(e) => return Ok(Some(compute_report(&e, pass).at("repository"))),
        };
        match repository::prepare(pass, &sender, spec, credentials, &namespace)? {
            Prepared::Materials(materials) => {
                spec.repository = Some(RepositoryAccess {
                    materials,
                    ..credentials.access()
                });
            }
            Prepared::Refused(code) => {
                let refusal = Report::permanent(&code);
                return self.refuse_repository(pass, l, refusal, true).map(Some);
            }
            Prepared::Unavailable(e) => {
                return Ok(Some(compute_report(&e, pass).at("repository")));
            }
            Prepared::SuccessionPending => {
                let wait = Report::waiting(
                    repository::SUCCESSION,
                    standing_recheck(pass),
                    Wait::Unbounded,
                );
                return Ok(Some(wait.at("repository")));
            }
        }
        match self.repository_authority(pass, l, credentials, true)? {
            Some(refusal) => self.refuse_repository(pass, l, refusal, true).map(Some),
            None => Ok(None),
        }
    }

    /// SPEC G11 *repair*: each missing entry's session closed, a new one opened for its REF,
    /// and G10 again; `spec` then carries the new material. `Some` ends the pass.
    pub(super) fn repair_sessions(
        &self,
        pass: &Pass<'_>,
        l: &Loaded,
        spec: &mut RevisionSpec,
        credentials: &Credentials,
        missing: &[MissingMaterial],
    ) -> Result<Option<Report>, PassError> {
        let sender = pass.ctx.repository_sender.clone();
        let sessions = {
            let mut db = pass.db()?;
            repository::sessions(&mut *db, &spec.revision_id)?
        };
        for session in sessions.iter().filter(|s| {
            s.phase.live()
                && missing.iter().any(|m| {
                    m.repository_ref == s.repository_ref
                        && Some(m.session_id.as_str()) == s.session_id.as_deref()
                })
        }) {
            let _closed =
                repository::close_session(pass, sender.as_deref(), &spec.namespace_id, session)?;
        }
        self.prepare_sessions(pass, l, spec, credentials)
    }
}

/// SPEC G14: what R2's decision (`refused`: its refusal's code, `Some(None)` authorized,
/// `None` a failed read) and E18's model-key test decide before anything else is read: an
/// authorization denial (`AUTHORIZATION_DENIED`, `ACTOR_REVOKED`, `INVALID_AGENT_PRINCIPAL`),
/// a withdrawn model key or a driver without `retire_expired_repository_access` retires the
/// runtime; `None` reads on.
fn decide_authority(
    refused: Option<Option<&str>>,
    model_withdrawn: bool,
    withdraws_in_place: bool,
) -> Option<Withdrawal> {
    let denied = matches!(
        refused.flatten(),
        Some("AUTHORIZATION_DENIED" | "ACTOR_REVOKED" | "INVALID_AGENT_PRINCIPAL")
    );
    (denied || model_withdrawn || !withdraws_in_place).then_some(Withdrawal::RetireRuntime)
}

/// SPEC G14: the Secret step's refusal (Z4, E19, WS2) inside the expiry: only the harness
/// source's `CREDENTIAL_WITHDRAWN` retires the runtime (a withdrawn model key never comes
/// back), any other refusal leaves the withdrawal pending; `None` reads on.
fn decide_secret_step(refusal: Option<&str>) -> Option<Withdrawal> {
    match refusal? {
        "CREDENTIAL_WITHDRAWN" => Some(Withdrawal::RetireRuntime),
        _ => Some(Withdrawal::Pending),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g14_an_authorization_denial_a_withdrawn_model_key_or_no_call_retires_the_runtime() {
        for code in [
            "AUTHORIZATION_DENIED",
            "ACTOR_REVOKED",
            "INVALID_AGENT_PRINCIPAL",
        ] {
            assert_eq!(
                decide_authority(Some(Some(code)), false, true),
                Some(Withdrawal::RetireRuntime)
            );
        }
        // The two reads are independent: a failed R2 read hides no withdrawn model key.
        assert_eq!(
            decide_authority(None, true, true),
            Some(Withdrawal::RetireRuntime)
        );
        assert_eq!(
            decide_authority(Some(None), false, false),
            Some(Withdrawal::RetireRuntime)
        );
        // Any other refusal, a failed read or an authorized revision reads on.
        assert_eq!(
            decide_authority(Some(Some("HARNESS_AUTH_REQUIRED")), false, true),
            None
        );
        assert_eq!(decide_authority(None, false, true), None);
        assert_eq!(decide_authority(Some(None), false, true), None);
    }

    #[test]
    fn g14_the_secret_step_retires_only_on_a_withdrawn_credential() {
        assert_eq!(
            decide_secret_step(Some("CREDENTIAL_WITHDRAWN")),
            Some(Withdrawal::RetireRuntime)
        );
        for code in [
            "WORKSPACE_SETUP_UNSUPPORTED",
            "SECRET_BINDING_UNAVAILABLE",
            "SECRET_DRIVER_MISMATCH",
            "CREDENTIAL_GATEWAY_MISMATCH",
            "HARNESS_AUTH_SOURCE_UNAVAILABLE",
        ] {
            assert_eq!(decide_secret_step(Some(code)), Some(Withdrawal::Pending));
        }
        assert_eq!(decide_secret_step(None), None);
    }
}
