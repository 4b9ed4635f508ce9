//! A revision's repository credentials in the worker's passes (SPEC §19): the snapshot
//! admission stored (G8), the built-in policy's `validate` (G19), and the sessions the
//! repository sender opens and closes for the revision (G19, G21), each phase change a
//! claim-fenced write committed before the call it announces.
//!
//! Nothing here decides a pass's outcome: it answers what happened (materials, a refusal's
//! code, no answer), and the revision and cleanup reconcilers report it.

use super::pass::{Pass, PassError};
use super::rows::RevisionRow;
use super::steps::effect;
use crate::compute::{ComputeError, RepositoryBinding, RepositoryMaterial, RevisionSpec};
use crate::db::GenericClient;
use crate::queue::{self, CleanupKind, NewWork};
use crate::repository::{
    OpenAnswer, OpenRequest, RepositorySender, SenderError, SessionRequest, SessionState,
};
use serde::Deserialize;
use serde_json::Value;

const SESSIONS_LOAD: &str = include_str!("../../sql/queries/repository_sessions_load.sql");
const SESSION_OPENING: &str = include_str!("../../sql/queries/repository_session_opening.sql");
const SESSION_OPENED: &str = include_str!("../../sql/queries/repository_session_opened.sql");
const SESSION_PHASE: &str = include_str!("../../sql/queries/repository_session_phase.sql");
const GRANTS_UNCOVERED: &str = include_str!("../../sql/queries/repository_grants_uncovered.sql");
const AGENT_OUTSTANDING: &str = include_str!("../../sql/queries/repository_agent_outstanding.sql");
const SUCCESSION_PENDING: &str =
    include_str!("../../sql/queries/repository_succession_pending.sql");

/// SPEC G16: the revision's snapshot names another sender than the selected one.
pub const SENDER_UNQUALIFIED: &str = "REPOSITORY_GIT_SENDER_UNQUALIFIED";
/// SPEC G19: a binding's REF is no longer granted to the Namespace at its scope.
pub const GRANT_REVOKED: &str = "REPOSITORY_GRANT_REVOKED";
/// SPEC G10: the driver delivers no repository credentials.
pub const RUNTIME_UNSUPPORTED: &str = "REPOSITORY_RUNTIME_UNSUPPORTED";
/// SPEC G15, G19: a standing revision waits for its predecessor's session to dispose.
pub const SUCCESSION: &str = "REPOSITORY_SESSION_SUCCESSION_PENDING";

/// A revision's repository credentials as admission stored them (SPEC §19 Data, G8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub sender_id: String,
    pub bindings: Vec<RepositoryBinding>,
    /// The standing approval snapshotted at admission, when the revision runs under one.
    pub standing: Option<StandingSnapshot>,
    /// When the access ends, on the database clock (RFC 3339), for a non-standing revision.
    pub deadline_at: Option<String>,
}

/// The standing approval a revision was admitted under (SPEC G8, G15).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandingSnapshot {
    pub id: String,
    pub generation: i64,
    pub scope_fingerprint: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCredentials {
    sender_id: String,
    bindings: Vec<RepositoryBinding>,
    standing_approval_id: Option<String>,
    standing_approval_generation: Option<i64>,
    standing_approval_scope_fingerprint: Option<String>,
    deadline_at: Option<String>,
}

impl Credentials {
    /// The stored snapshot (PostgreSQL holds its shape, SPEC §19 Data); a value outside it is
    /// corrupt data.
    pub fn parse(value: &Value) -> Result<Credentials, PassError> {
        let raw: RawCredentials = serde_json::from_value(value.clone())
            .map_err(|e| PassError::Invariant(format!("repository credentials: {e}")))?;
        let standing = match (
            raw.standing_approval_id,
            raw.standing_approval_generation,
            raw.standing_approval_scope_fingerprint,
        ) {
            (Some(id), Some(generation), Some(scope_fingerprint)) => Some(StandingSnapshot {
                id,
                generation,
                scope_fingerprint,
            }),
            _ => None,
        };
        Ok(Credentials {
            sender_id: raw.sender_id,
            bindings: raw.bindings,
            standing,
            deadline_at: raw.deadline_at,
        })
    }

    /// The access Compute receives, before any session is prepared.
    pub fn access(&self) -> crate::compute::RepositoryAccess {
        crate::compute::RepositoryAccess {
            sender_id: self.sender_id.clone(),
            bindings: self.bindings.clone(),
            standing: self.standing.is_some(),
            materials: Vec::new(),
        }
    }
}

/// A session row's phase (SPEC G19).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Opening,
    Open,
    Closing,
    Invalidated,
    Disposed,
}

impl Phase {
    pub fn parse(text: &str) -> Result<Phase, PassError> {
        Ok(match text {
            "opening" => Phase::Opening,
            "open" => Phase::Open,
            "closing" => Phase::Closing,
            "invalidated" => Phase::Invalidated,
            "disposed" => Phase::Disposed,
            other => {
                return Err(PassError::Db(crate::db::DbError::Corrupt(format!(
                    "repository session phase {other:?}"
                ))))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Opening => "opening",
            Phase::Open => "open",
            Phase::Closing => "closing",
            Phase::Invalidated => "invalidated",
            Phase::Disposed => "disposed",
        }
    }

    /// Opening or open: a session the revision may still hold.
    pub fn live(self) -> bool {
        matches!(self, Phase::Opening | Phase::Open)
    }
}

/// One session row of a revision (SPEC G19).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub admission_id: String,
    pub repository_ref: String,
    pub session_id: Option<String>,
    pub phase: Phase,
    /// `NAMESPACE/NAME/KEY`, for an open session.
    pub material_ref: Option<String>,
}

impl Session {
    /// The material of an open session, as Compute receives it.
    fn material(&self) -> Option<RepositoryMaterial> {
        let material = self.material_ref.as_deref()?;
        let mut parts = material.splitn(3, '/');
        let (_, name, key) = (parts.next()?, parts.next()?, parts.next()?);
        Some(RepositoryMaterial {
            repository_ref: self.repository_ref.clone(),
            session_id: self.session_id.clone()?,
            secret_name: name.to_string(),
            key: key.to_string(),
        })
    }

    fn request(&self, namespace_id: &str) -> (String, String, Option<String>) {
        (
            namespace_id.to_string(),
            self.admission_id.clone(),
            self.session_id.clone(),
        )
    }
}

/// The session rows of a revision, oldest first.
pub fn sessions(
    client: &mut impl GenericClient,
    revision_id: &str,
) -> Result<Vec<Session>, PassError> {
    client
        .query(SESSIONS_LOAD, &[&revision_id])?
        .iter()
        .map(|r| {
            Ok(Session {
                admission_id: r.get(0),
                repository_ref: r.get(1),
                session_id: r.get(2),
                phase: Phase::parse(r.get(3))?,
                material_ref: r.get(4),
            })
        })
        .collect()
}

/// SPEC G19's `validate`: the selected sender is the snapshot's (else G16's
/// `REPOSITORY_GIT_SENDER_UNQUALIFIED`), and each binding's REF is still granted to the
/// Namespace at its scope (else `REPOSITORY_GRANT_REVOKED`); both permanent.
pub fn validate(
    client: &mut impl GenericClient,
    revision: &RevisionRow,
    credentials: &Credentials,
    selected: Option<&RepositorySender>,
) -> Result<Option<&'static str>, PassError> {
    if selected.map(RepositorySender::id) != Some(credentials.sender_id.as_str()) {
        return Ok(Some(SENDER_UNQUALIFIED));
    }
    let uncovered: i64 = client
        .query_one(GRANTS_UNCOVERED, &[&revision.namespace_id, &revision.id])?
        .get(0);
    Ok((uncovered > 0).then_some(GRANT_REVOKED))
}

/// What preparing a revision's sessions came to (SPEC G19 *prepare*).
#[derive(Debug)]
pub enum Prepared {
    /// Every binding has an open session: their material, in binding order.
    Materials(Vec<RepositoryMaterial>),
    /// The sender refused a session (`opened: false`): permanent, with its code (SPEC G21).
    Refused(String),
    /// No valid answer (SPEC G21): the pass retries with `REPOSITORY_SENDER_UNAVAILABLE`.
    Unavailable(ComputeError),
    /// A standing revision whose Agent still has a predecessor's session `closing` for a REF
    /// (SPEC G15, G19).
    SuccessionPending,
}

/// SPEC G19 *prepare*: per binding, in order, an `open` row is reused, an `opening` row is
/// opened again with its `admission_id`, else a new `opening` row is written (a fenced write,
/// committed before the call) and `open` is called; a valid answer makes the row `open` with
/// its session and material. A refusal disposes of the row.
pub fn prepare(
    pass: &Pass<'_>,
    sender: &RepositorySender,
    spec: &RevisionSpec,
    credentials: &Credentials,
    kubernetes_namespace: &str,
) -> Result<Prepared, PassError> {
    let revision_id = spec.revision_id.as_str();
    let mut materials = Vec::new();
    for binding in &credentials.bindings {
        let reference = binding.repository_ref.as_str();
        let existing = {
            let mut db = pass.db()?;
            if credentials.standing.is_some() {
                let pending: bool = db
                    .query_one(
                        SUCCESSION_PENDING,
                        &[&spec.namespace_id, &spec.agent_id, &revision_id, &reference],
                    )?
                    .get(0);
                if pending {
                    return Ok(Prepared::SuccessionPending);
                }
            }
            sessions(&mut *db, revision_id)?
                .into_iter()
                .find(|s| s.repository_ref == reference && s.phase.live())
        };
        if let Some(material) = existing
            .as_ref()
            .filter(|s| s.phase == Phase::Open)
            .and_then(Session::material)
        {
            materials.push(material);
            continue;
        }
        let admission_id = match existing {
            Some(opening) => opening.admission_id,
            None => pass.fenced(|tx| {
                Ok(tx
                    .query_one(
                        SESSION_OPENING,
                        &[&spec.namespace_id, &spec.agent_id, &revision_id, &reference],
                    )?
                    .get(0))
            })?,
        };
        let request = OpenRequest {
            namespace_id: &spec.namespace_id,
            agent_id: &spec.agent_id,
            revision_id,
            admission_id: &admission_id,
            repository_ref: reference,
            scope: &binding.scope,
            kubernetes_namespace,
            deadline_at: credentials.deadline_at.as_deref(),
            standing: credentials.standing.is_some(),
        };
        let answer = effect(pass, "repository_open", |c| {
            sender.open(&request, c).map_err(ComputeError::from)
        })?;
        match answer {
            Ok(OpenAnswer::Opened {
                session_id,
                material,
            }) => {
                let material_ref =
                    format!("{kubernetes_namespace}/{}/{}", material.name, material.key);
                pass.fenced(|tx| {
                    tx.execute(SESSION_OPENED, &[&admission_id, &session_id, &material_ref])?;
                    Ok(())
                })?;
                materials.push(RepositoryMaterial {
                    repository_ref: reference.to_string(),
                    session_id,
                    secret_name: material.name,
                    key: material.key,
                });
            }
            Ok(OpenAnswer::Refused { code }) => {
                set_phase(pass, &admission_id, Phase::Disposed)?;
                return Ok(Prepared::Refused(code));
            }
            Err(e) => return Ok(Prepared::Unavailable(e)),
        }
    }
    Ok(Prepared::Materials(materials))
}

/// One fenced phase change of a session row (SPEC G19).
fn set_phase(pass: &Pass<'_>, admission_id: &str, phase: Phase) -> Result<(), PassError> {
    pass.fenced(|tx| {
        tx.execute(SESSION_PHASE, &[&admission_id, &phase.as_str()])?;
        Ok(())
    })
}

/// SPEC G19 *closeRevision*: each `opening` or `open` row of the revision becomes `closing`
/// (a fenced write), then `close` is called: `closed: true` disposes of it; otherwise it stays
/// `closing`. Whether every live session was closed, and the first failed call's error.
pub fn close_revision(
    pass: &Pass<'_>,
    sender: Option<&RepositorySender>,
    namespace_id: &str,
    revision_id: &str,
) -> Result<Closed, PassError> {
    let live: Vec<Session> = {
        let mut db = pass.db()?;
        sessions(&mut *db, revision_id)?
            .into_iter()
            .filter(|s| s.phase.live())
            .collect()
    };
    let mut closed = Closed::default();
    for session in live {
        match close_session(pass, sender, namespace_id, &session)? {
            Ok(true) => {}
            Ok(false) => closed.unconfirmed = true,
            Err(e) => {
                closed.unconfirmed = true;
                closed.failure.get_or_insert(e);
            }
        }
    }
    Ok(closed)
}

/// One session closed (SPEC G19): `closing` (a fenced write), then `close`; `closed: true`
/// disposes of it. Whether it is disposed, or the call's error.
pub fn close_session(
    pass: &Pass<'_>,
    sender: Option<&RepositorySender>,
    namespace_id: &str,
    session: &Session,
) -> Result<Result<bool, ComputeError>, PassError> {
    set_phase(pass, &session.admission_id, Phase::Closing)?;
    let answer = call_close(pass, sender, namespace_id, session)?;
    if answer == Ok(true) {
        set_phase(pass, &session.admission_id, Phase::Disposed)?;
    }
    Ok(answer)
}

/// SPEC G12: a revision's sessions are closed before its runtime stops or retires (and G13
/// before the Agent's deletion retires it). A close the sender does not confirm leaves them
/// `closing` and registers `terminal-runtime` cleanup (fenced, so it outlives a crash); the
/// stop goes on either way.
pub fn close_before_stop(pass: &Pass<'_>, revision: &RevisionRow) -> Result<(), PassError> {
    if revision.repository_credentials.is_none() {
        return Ok(());
    }
    let closed = close_revision(
        pass,
        pass.ctx.repository_sender.as_deref(),
        &revision.namespace_id,
        &revision.id,
    )?;
    if closed.unconfirmed {
        let cleanup = NewWork::repository_cleanup(
            &revision.namespace_id,
            &revision.agent_id,
            &revision.id,
            CleanupKind::TerminalRuntime,
            &pass.claim.actor_id,
        );
        pass.fenced(|tx| {
            queue::work_enqueue(tx, &cleanup)?;
            Ok(())
        })?;
    }
    Ok(())
}

/// SPEC G13: whether any session of the Agent is not yet `disposed`.
pub fn agent_sessions_outstanding(
    client: &mut impl GenericClient,
    namespace_id: &str,
    agent_id: &str,
) -> Result<bool, PassError> {
    Ok(client
        .query_one(AGENT_OUTSTANDING, &[&namespace_id, &agent_id])?
        .get(0))
}

/// What *closeRevision* or *cleanup* came to.
#[derive(Debug, Default)]
pub struct Closed {
    /// A session is still `closing` (or `invalidated`): not settled.
    pub unconfirmed: bool,
    /// The first call that got no valid answer (its code is the cause, SPEC G3, G21).
    pub failure: Option<ComputeError>,
}

fn call_close(
    pass: &Pass<'_>,
    sender: Option<&RepositorySender>,
    namespace_id: &str,
    session: &Session,
) -> Result<Result<bool, ComputeError>, PassError> {
    let Some(sender) = sender else {
        return Ok(Err(no_sender()));
    };
    let (ns, admission, session_id) = session.request(namespace_id);
    let request = SessionRequest {
        namespace_id: &ns,
        admission_id: &admission,
        session_id: session_id.as_deref(),
    };
    effect(pass, "repository_close", |c| {
        sender.close(&request, c).map_err(ComputeError::from)
    })
}

/// No sender is selected (the Installation dropped it): nothing can be closed or asked.
fn no_sender() -> ComputeError {
    ComputeError::from(SenderError::Unavailable {
        call: "close",
        class: "repository_sender_unselected",
        status: None,
    })
}

/// SPEC G19 *cleanup*: with `close_live`, *closeRevision* first; then each `closing` or
/// `invalidated` row is asked `status`: `closed` disposes of it, `open` is closed again,
/// `unknown` invalidates it (the sender cannot confirm disposal). Settled when no row is
/// `closing` or `invalidated`.
pub fn cleanup(
    pass: &Pass<'_>,
    sender: Option<&RepositorySender>,
    namespace_id: &str,
    revision_id: &str,
    close_live: bool,
) -> Result<Cleaned, PassError> {
    let mut failure = None;
    if close_live {
        failure = close_revision(pass, sender, namespace_id, revision_id)?.failure;
    }
    let pending: Vec<Session> = {
        let mut db = pass.db()?;
        sessions(&mut *db, revision_id)?
            .into_iter()
            .filter(|s| matches!(s.phase, Phase::Closing | Phase::Invalidated))
            .collect()
    };
    for session in &pending {
        let Some(sender) = sender else {
            failure.get_or_insert_with(no_sender);
            continue;
        };
        let (ns, admission, session_id) = session.request(namespace_id);
        let request = SessionRequest {
            namespace_id: &ns,
            admission_id: &admission,
            session_id: session_id.as_deref(),
        };
        let state = effect(pass, "repository_status", |c| {
            sender.status(&request, c).map_err(ComputeError::from)
        })?;
        match state {
            Ok(SessionState::Closed) => set_phase(pass, &session.admission_id, Phase::Disposed)?,
            Ok(SessionState::Unknown) => {
                if session.phase != Phase::Invalidated {
                    set_phase(pass, &session.admission_id, Phase::Invalidated)?
                }
            }
            Ok(SessionState::Open) => {
                if session.phase != Phase::Closing {
                    set_phase(pass, &session.admission_id, Phase::Closing)?;
                }
                match call_close(pass, Some(sender), namespace_id, session)? {
                    Ok(true) => set_phase(pass, &session.admission_id, Phase::Disposed)?,
                    Ok(false) => {}
                    Err(e) => {
                        failure.get_or_insert(e);
                    }
                }
            }
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    let after = {
        let mut db = pass.db()?;
        sessions(&mut *db, revision_id)?
    };
    Ok(Cleaned {
        closing: after.iter().any(|s| s.phase == Phase::Closing),
        invalidated: after.iter().any(|s| s.phase == Phase::Invalidated),
        failure,
    })
}

/// What a session cleanup came to (SPEC G3, G4, G19).
#[derive(Debug)]
pub struct Cleaned {
    pub closing: bool,
    pub invalidated: bool,
    pub failure: Option<ComputeError>,
}

impl Cleaned {
    /// No row `closing` or `invalidated`.
    pub fn settled(&self) -> bool {
        !self.closing && !self.invalidated
    }
}
