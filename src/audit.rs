//! Audit evidence written by reconcilers (SPEC section 1, "Audit event"): one append
//! statement and one read of a work's latest event.
//!
//! Callers append inside their claim-fenced transaction, so evidence commits with the state it
//! describes or not at all. Audit rows are append-only (a trigger refuses updates and deletes);
//! details carry codes and ids, never secret values or provider text.

use crate::db::DbError;
use crate::db::GenericClient;
use serde_json::Value;

const AUDIT_APPEND: &str = include_str!("../sql/queries/audit_append.sql");
const AUDIT_LATEST: &str = include_str!("../sql/queries/audit_latest_for_work.sql");

/// One audit event as a reconciler writes it.
/// Where every event the worker and its admission functions write comes from (the seed's
/// `source`).
pub const SOURCE: &str = "occ";

/// The IAM driver that decided every authorization behind an event: the built-in one
/// (`occ.authorize`), the seed's default id.
pub const IAM_DRIVER_ID: &str = "native-iam";

pub struct AuditEvent<'a> {
    pub installation_id: &'a str,
    pub namespace_id: Option<&'a str>,
    pub kind: &'a str,
    pub actor_id: &'a str,
    pub action: &'a str,
    pub resource_kind: &'a str,
    pub resource_id: &'a str,
    pub outcome: &'a str,
    pub reason_code: Option<&'a str>,
    pub work_id: i64,
    pub details: &'a Value,
    /// An authorization denial's request and its decision's reason, top level in the event
    /// (the seed's `authorization` and `decisionReason`).
    pub authorization: Option<&'a Value>,
    pub decision_reason: Option<&'a str>,
}

/// Appends an audit event (inside the caller's fenced transaction).
pub fn audit_append(client: &mut impl GenericClient, e: &AuditEvent<'_>) -> Result<i64, DbError> {
    let row = client.query_one(
        AUDIT_APPEND,
        &[
            &e.installation_id,
            &e.namespace_id,
            &e.kind,
            &e.actor_id,
            &e.action,
            &e.resource_kind,
            &e.resource_id,
            &e.outcome,
            &e.reason_code,
            &e.work_id,
            e.details,
            &SOURCE,
            &IAM_DRIVER_ID,
            &e.authorization,
            &e.decision_reason,
        ],
    )?;
    Ok(row.get(0))
}

/// The latest audit event of a work, as far as comparisons need it.
#[derive(Clone, Debug, PartialEq)]
pub struct LatestAudit {
    pub action: String,
    pub outcome: String,
    pub reason_code: Option<String>,
    pub details: Value,
}

/// The latest audit event of a work.
pub fn audit_latest_for_work(
    client: &mut impl GenericClient,
    work_id: i64,
) -> Result<Option<LatestAudit>, DbError> {
    Ok(client
        .query_opt(AUDIT_LATEST, &[&work_id])?
        .map(|row| LatestAudit {
            action: row.get(0),
            outcome: row.get(1),
            reason_code: row.get(2),
            details: row.get(3),
        }))
}
