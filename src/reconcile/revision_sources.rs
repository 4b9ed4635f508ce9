//! The credential side of a revision pass (SPEC §13): E19's authorization and resolution of
//! the snapshot sources, E17's re-detach before every preparation and E18's model-credential
//! check. The re-queues of E14 and E16 run in the revision's fenced transactions
//! (`RevisionReconciler::publish`, `queue::work_enqueue_withdrawal_*`).
//!
//! The worker never reads a credential: a resolved source reaches Compute as a reference to
//! its Secret (`CredentialAttachment`).

use super::pass::{Pass, PassError};
use super::rows::{RevisionRow, WithdrawalState};
use super::steps::effect;
use crate::compute::{ComputeError, ComputeErrorKind, CredentialAttachment, RevisionSpec};
use crate::credentials::{self, SnapshotSource, SourceRow};
use crate::db::GenericClient;
use crate::iam::{Action, Request, Resource, ResourceKind};
use serde_json::Value;

/// The revision's snapshot sources with their rows and withdrawal rows; the withdrawal
/// reconciler reads its rows through it too.
pub const SOURCES: &str = include_str!("../../sql/queries/revision_credential_sources.sql");

/// One snapshot source as a pass sees it.
#[derive(Clone, Debug)]
pub struct SourceState {
    pub snapshot: SnapshotSource,
    /// Whether it is the revision's harness source.
    pub harness: bool,
    /// The source row as it is now; `None` when it is gone.
    pub row: Option<SourceRow>,
    /// The withdrawal row's state, `None` without one.
    pub withdrawal: Option<WithdrawalState>,
}

/// The revision's snapshot sources in SPEC E3's order, with their rows and withdrawals.
pub fn load(
    client: &mut impl GenericClient,
    revision: &RevisionRow,
) -> Result<Vec<SourceState>, PassError> {
    if revision.credential_sources.is_empty() {
        return Ok(Vec::new());
    }
    let rows = client.query(SOURCES, &[&revision.namespace_id, &revision.id])?;
    let mut found: Vec<(String, Option<SourceRow>, Option<WithdrawalState>)> = Vec::new();
    for r in &rows {
        let source: Option<Value> = r.get(1);
        let row = source
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| PassError::Invariant(format!("credential source row: {e}")))?;
        let withdrawal: Option<&str> = r.get(2);
        found.push((
            r.get(0),
            row,
            withdrawal.map(WithdrawalState::parse).transpose()?,
        ));
    }
    Ok(
        credentials::in_order(&revision.credential_sources, revision.harness_auth.as_ref())
            .into_iter()
            .map(|(snapshot, harness)| {
                let (row, withdrawal) = found
                    .iter()
                    .find(|(id, _, _)| *id == snapshot.source_id)
                    .map(|(_, row, w)| (row.clone(), *w))
                    .unwrap_or_default();
                SourceState {
                    snapshot: snapshot.clone(),
                    harness,
                    row,
                    withdrawal,
                }
            })
            .collect(),
    )
}

/// SPEC E19's authorization: `operate` on every snapshot source without a withdrawal row, by
/// the actor and by the service principal, in E3 order (actor first).
pub fn requests(actor: &str, principal: &str, ns: &str, sources: &[SourceState]) -> Vec<Request> {
    let mut out = Vec::new();
    for s in sources.iter().filter(|s| s.withdrawal.is_none()) {
        let resource = Resource::owned(ResourceKind::CredentialSource, ns, &s.snapshot.source_id);
        out.push(Request::new(actor, Action::Operate, resource.clone()));
        out.push(Request::new(principal, Action::Operate, resource));
    }
    out
}

/// SPEC E19's resolution, all refusals permanent: the harness source first (gateway, then
/// withdrawal, then availability, then egress), then each other source (owner, withdrawn —
/// left out —, availability). The sources to attach, in E3 order, or the refusal's code.
pub fn resolve(
    sources: &[SourceState],
    harness_auth: Option<&Value>,
    gateway: Option<&str>,
) -> Result<Vec<CredentialAttachment>, &'static str> {
    let mut attach = Vec::new();
    if let Some(harness_id) = credentials::harness_source_id(harness_auth) {
        let frozen_gateway = credentials::harness_gateway_id(harness_auth);
        if gateway.is_none() || gateway != frozen_gateway {
            return Err("CREDENTIAL_GATEWAY_MISMATCH");
        }
        let Some(s) = sources.iter().find(|s| s.harness) else {
            return Err("HARNESS_AUTH_SOURCE_UNAVAILABLE");
        };
        debug_assert_eq!(s.snapshot.source_id, harness_id);
        if s.withdrawal.is_some() {
            return Err("CREDENTIAL_WITHDRAWN");
        }
        if !available(s) {
            return Err("HARNESS_AUTH_SOURCE_UNAVAILABLE");
        }
        if s.snapshot.egress.as_ref().is_some_and(|e| !e.is_null()) {
            // No Credential Proxy is built in, so no egress provider is offered.
            return Err("EGRESS_PROVIDER_UNAVAILABLE");
        }
        attach.push(s.snapshot.attachment(true));
    }
    for s in sources.iter().filter(|s| !s.harness) {
        let owner_selected = s.snapshot.credential_proxy_id.is_none()
            && gateway.is_some()
            && s.snapshot.credential_gateway_id.as_deref() == gateway;
        if !owner_selected {
            return Err("CREDENTIAL_GATEWAY_MISMATCH");
        }
        if s.withdrawal.is_some() {
            continue;
        }
        if !available(s) {
            return Err("CREDENTIAL_SOURCE_UNAVAILABLE");
        }
        attach.push(s.snapshot.attachment(false));
    }
    Ok(attach)
}

/// The source exists, is `ready` and matches its snapshot.
fn available(s: &SourceState) -> bool {
    s.row
        .as_ref()
        .is_some_and(|row| row.state == credentials::SourceState::Ready && row.matches(&s.snapshot))
}

/// SPEC E6(a) of a snapshot source: its row exists and is owned (`SourceRow::owned`).
pub fn owned(s: &SourceState, gateway: Option<&str>) -> bool {
    s.row
        .as_ref()
        .is_some_and(|row| row.owned(&s.snapshot, gateway))
}

/// SPEC E18: the revision's harness source has a withdrawal row.
pub fn harness_withdrawn(sources: &[SourceState]) -> bool {
    sources.iter().any(|s| s.harness && s.withdrawal.is_some())
}

/// SPEC E17, before every preparation and on each E18 pass, when the driver has the call:
/// each revoked source that still exists, in E3 order, checked as E6(a) and detached again
/// (`recheck`). No requester check, no row change, no audit. The first error.
pub fn redetach(
    pass: &Pass<'_>,
    spec: &RevisionSpec,
    sources: &[SourceState],
) -> Result<Result<(), ComputeError>, PassError> {
    let driver = pass.ctx.compute.clone();
    if driver.credential_gateway().is_none() {
        return Ok(Ok(()));
    }
    let gateway = pass.ctx.credential_gateway.as_deref();
    for s in sources
        .iter()
        .filter(|s| s.withdrawal == Some(WithdrawalState::Revoked) && s.row.is_some())
    {
        if !owned(s, gateway) {
            return Ok(Err(ComputeError::permanent(
                "CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT",
                "compute",
                None,
            )));
        }
        let attachment = s.snapshot.attachment(s.harness);
        if let Err(e) = effect(pass, "withdraw_credential", |c| {
            driver.credential_gateway().map_or_else(
                || Err(crate::compute::credential_withdrawal_unsupported()),
                |g| g.withdraw_credential_source(spec, &attachment, true, c),
            )
        })? {
            return Ok(Err(e));
        }
    }
    Ok(Ok(()))
}

/// SPEC E18: the code an E17 error waits with on the active path: the driver's pending code,
/// `DEPENDENCY_UNAVAILABLE` for a dependency that is converging, else (a retryable 409 or 401
/// included) `REVISION_FINALIZATION_INCOMPLETE`, as an activation that did not finish.
pub fn redetach_wait_code(e: &ComputeError) -> &'static str {
    match e.kind() {
        ComputeErrorKind::Pending(code) | ComputeErrorKind::Deferred { code, .. } => code,
        ComputeErrorKind::TransientDependency => "DEPENDENCY_UNAVAILABLE",
        _ => "REVISION_FINALIZATION_INCOMPLETE",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // SPEC E18: only a converging dependency keeps `DEPENDENCY_UNAVAILABLE`;
    // a retryable conflict or authentication failure waits as an unfinished activation.
    #[test]
    fn e18_a_retryable_redetach_failure_waits_as_revision_finalization_incomplete() {
        for status in [409, 401] {
            assert_eq!(
                redetach_wait_code(&ComputeError::retryable("kubernetes", Some(status))),
                "REVISION_FINALIZATION_INCOMPLETE"
            );
        }
        assert_eq!(
            redetach_wait_code(&ComputeError::transient("kubernetes", Some(503))),
            "DEPENDENCY_UNAVAILABLE"
        );
        assert_eq!(
            redetach_wait_code(&ComputeError::pending(
                "REVISION_ACTIVATION_PENDING",
                "kubernetes",
                None
            )),
            "REVISION_ACTIVATION_PENDING"
        );
    }

    fn state(id: &str, kind: &str, harness: bool, withdrawal: Option<&str>) -> SourceState {
        let snapshot = SnapshotSource {
            source_id: id.into(),
            credential_gateway_id: Some("gw".into()),
            credential_proxy_id: None,
            kind: kind.into(),
            driver_id: "gw".into(),
            backend_ref: format!("ns-1/{id}/key"),
            egress: None,
        };
        SourceState {
            row: Some(SourceRow {
                id: id.into(),
                kind: kind.into(),
                owner: "credential_gateway".into(),
                driver_id: "gw".into(),
                state: credentials::SourceState::Ready,
                backend_ref: snapshot.backend_ref.clone(),
                egress: None,
            }),
            snapshot,
            harness,
            withdrawal: withdrawal.map(|w| WithdrawalState::parse(w).unwrap()),
        }
    }

    fn auth() -> Value {
        json!({"method": "credential_source", "sourceId": "model", "credentialGatewayId": "gw"})
    }

    #[test]
    fn e19_resolution_attaches_every_source_and_leaves_a_withdrawn_tool_source_out() {
        let sources = [
            state("model", "model_key", true, None),
            state("search", "tool", false, Some("revoked")),
            state("mail", "tool", false, None),
        ];
        let attached = resolve(&sources, Some(&auth()), Some("gw")).unwrap();
        let names: Vec<String> = attached.iter().map(|a| a.env_name()).collect();
        assert_eq!(names, ["OCC_HARNESS_API_KEY", "OCC_CREDENTIAL_MAIL"]);
    }

    #[test]
    fn e19_each_refusal_in_the_seeds_order() {
        let ok = || {
            vec![
                state("model", "model_key", true, None),
                state("mail", "tool", false, None),
            ]
        };
        assert_eq!(
            resolve(&ok(), Some(&auth()), None),
            Err("CREDENTIAL_GATEWAY_MISMATCH")
        );
        assert_eq!(
            resolve(&ok(), Some(&auth()), Some("other")),
            Err("CREDENTIAL_GATEWAY_MISMATCH")
        );
        let mut withdrawn = ok();
        withdrawn[0].withdrawal = Some(WithdrawalState::Pending);
        withdrawn[0].row = None;
        assert_eq!(
            resolve(&withdrawn, Some(&auth()), Some("gw")),
            Err("CREDENTIAL_WITHDRAWN")
        );
        let mut disabled = ok();
        disabled[0].row.as_mut().unwrap().state = credentials::SourceState::Disabled;
        assert_eq!(
            resolve(&disabled, Some(&auth()), Some("gw")),
            Err("HARNESS_AUTH_SOURCE_UNAVAILABLE")
        );
        let mut moved = ok();
        moved[0].row.as_mut().unwrap().backend_ref = "ns-1/other/key".into();
        assert_eq!(
            resolve(&moved, Some(&auth()), Some("gw")),
            Err("HARNESS_AUTH_SOURCE_UNAVAILABLE")
        );
        let mut egress = ok();
        egress[0].snapshot.egress = Some(json!({"provider": "p", "backend": "b"}));
        egress[0].row.as_mut().unwrap().egress = egress[0].snapshot.egress.clone();
        assert_eq!(
            resolve(&egress, Some(&auth()), Some("gw")),
            Err("EGRESS_PROVIDER_UNAVAILABLE")
        );
        let mut proxied = ok();
        proxied[1].snapshot.credential_gateway_id = None;
        proxied[1].snapshot.credential_proxy_id = Some("proxy".into());
        assert_eq!(
            resolve(&proxied, Some(&auth()), Some("gw")),
            Err("CREDENTIAL_GATEWAY_MISMATCH")
        );
        let mut gone = ok();
        gone[1].row = None;
        assert_eq!(
            resolve(&gone, Some(&auth()), Some("gw")),
            Err("CREDENTIAL_SOURCE_UNAVAILABLE")
        );
    }

    #[test]
    fn e6a_ownership_needs_the_selected_gateway_and_the_snapshot() {
        let s = state("mail", "tool", false, Some("revoked"));
        assert!(owned(&s, Some("gw")));
        assert!(!owned(&s, Some("other")));
        assert!(!owned(&s, None));
        let mut proxied = s.clone();
        proxied.row.as_mut().unwrap().owner = "credential_proxy".into();
        assert!(!owned(&proxied, Some("gw")));
    }

    #[test]
    fn e19_only_sources_without_a_withdrawal_are_asked_for_both_principals() {
        let sources = [
            state("model", "model_key", true, None),
            state("mail", "tool", false, Some("pending")),
        ];
        let asked = requests("alice", "sp-1", "ns-1", &sources);
        assert_eq!(asked.len(), 2);
        assert!(asked.iter().all(|r| r.resource.id == "model"));
    }
}
