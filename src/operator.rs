//! Operator reads (SPEC section 9): identities, groups, grants, roles, Agents, Secrets,
//! Configurations, credential sources and withdrawals as the operator's tool shows them, so
//! nothing needs psql.
//!
//! One function per `sql/queries/operator_*.sql` statement, each returning the JSON the
//! statement builds. It only reads: no admission, no queue state, no decision; a name that
//! does not resolve is the statement's own error (`no Namespace X`), passed up unchanged.

use postgres::types::ToSql;
use postgres::{Client, Error};
use serde_json::Value;

const NAMESPACE_RESOLVE: &str = include_str!("../sql/queries/operator_namespace_resolve.sql");
const NAMESPACE_KNOWN: &str = include_str!("../sql/queries/operator_namespace_known.sql");
const IDENTITY_LIST: &str = include_str!("../sql/queries/operator_identity_list.sql");
const IDENTITY_SHOW: &str = include_str!("../sql/queries/operator_identity_show.sql");
const GROUP_LIST: &str = include_str!("../sql/queries/operator_group_list.sql");
const GROUP_SHOW: &str = include_str!("../sql/queries/operator_group_show.sql");
const GRANT_LIST: &str = include_str!("../sql/queries/operator_grant_list.sql");
const ROLE_LIST: &str = include_str!("../sql/queries/operator_role_list.sql");
const AGENT_LIST: &str = include_str!("../sql/queries/operator_agent_list.sql");
const SECRET_LIST: &str = include_str!("../sql/queries/operator_secret_list.sql");
const CREDENTIAL_SOURCE_LIST: &str =
    include_str!("../sql/queries/operator_credential_source_list.sql");
const CREDENTIAL_SOURCE_SHOW: &str =
    include_str!("../sql/queries/operator_credential_source_show.sql");
const WITHDRAWAL_LIST: &str = include_str!("../sql/queries/operator_withdrawal_list.sql");
const CONFIGURATION_LIST: &str = include_str!("../sql/queries/operator_configuration_list.sql");
const CONFIGURATION_SHOW: &str = include_str!("../sql/queries/operator_configuration_show.sql");
const AUDIT_LIST: &str = include_str!("../sql/queries/operator_audit_list.sql");
const WORK_WAITING: &str = include_str!("../sql/queries/operator_work_waiting.sql");
const REPOSITORY_CLEANUP: &str = include_str!("../sql/queries/operator_repository_cleanup.sql");
const WORKER_SEEN: &str = include_str!("../sql/queries/operator_worker_seen.sql");
const WORK_SUBJECT: &str = include_str!("../sql/queries/operator_work_subject.sql");
const WORK_GONE: &str = include_str!("../sql/queries/operator_work_gone.sql");

fn one(c: &mut Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Value, Error> {
    Ok(c.query_one(sql, params)?.get(0))
}

fn maybe(
    c: &mut Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Value>, Error> {
    Ok(c.query_opt(sql, params)?.map(|row| row.get(0)))
}

/// The id of the live Namespace named `namespace` (id or name); an error when there is none.
pub fn namespace_resolve(c: &mut Client, namespace: &str) -> Result<String, Error> {
    Ok(c.query_one(NAMESPACE_RESOLVE, &[&namespace])?.get(0))
}

/// The id of any Namespace, live or deleted, named `namespace`; `None` if none ever existed.
pub fn namespace_known(c: &mut Client, namespace: &str) -> Result<Option<String>, Error> {
    Ok(c.query_opt(NAMESPACE_KNOWN, &[&namespace])?
        .map(|row| row.get(0)))
}

pub fn identity_list(c: &mut Client) -> Result<Value, Error> {
    one(c, IDENTITY_LIST, &[])
}

pub fn identity_show(c: &mut Client, id: &str) -> Result<Option<Value>, Error> {
    maybe(c, IDENTITY_SHOW, &[&id])
}

pub fn group_list(c: &mut Client) -> Result<Value, Error> {
    one(c, GROUP_LIST, &[])
}

pub fn group_show(c: &mut Client, id: &str) -> Result<Option<Value>, Error> {
    maybe(c, GROUP_SHOW, &[&id])
}

/// Bindings, filtered by principal (`ID` or `group:ID`) and scope when given.
pub fn grant_list(
    c: &mut Client,
    principal: Option<&str>,
    scope: Option<&str>,
) -> Result<Value, Error> {
    one(c, GRANT_LIST, &[&principal, &scope])
}

/// Every IAM role with the actions it grants and the resource kinds they apply to.
pub fn role_list(c: &mut Client) -> Result<Value, Error> {
    one(c, ROLE_LIST, &[])
}

/// The Agents of a live Namespace (`namespace_id` from `namespace_resolve`).
pub fn agent_list(c: &mut Client, namespace_id: &str) -> Result<Value, Error> {
    one(c, AGENT_LIST, &[&namespace_id])
}

pub fn secret_list(c: &mut Client, namespace_id: &str) -> Result<Value, Error> {
    one(c, SECRET_LIST, &[&namespace_id])
}

/// The credential sources of a Namespace, disabled ones included (SPEC §13).
pub fn credential_source_list(c: &mut Client, namespace_id: &str) -> Result<Value, Error> {
    one(c, CREDENTIAL_SOURCE_LIST, &[&namespace_id])
}

/// One credential source, or `None` (SPEC §13).
pub fn credential_source_show(
    c: &mut Client,
    namespace_id: &str,
    id: &str,
) -> Result<Option<Value>, Error> {
    maybe(c, CREDENTIAL_SOURCE_SHOW, &[&namespace_id, &id])
}

/// The credential withdrawal rows of a Namespace, or of its Agent `agent` (id or name) when
/// given; `None` when `agent` names no Agent of the Namespace (SPEC §13).
pub fn withdrawal_list(
    c: &mut Client,
    namespace_id: &str,
    agent: Option<&str>,
) -> Result<Option<Value>, Error> {
    maybe(c, WITHDRAWAL_LIST, &[&namespace_id, &agent])
}

pub fn configuration_list(c: &mut Client, namespace_id: &str) -> Result<Value, Error> {
    one(c, CONFIGURATION_LIST, &[&namespace_id])
}

pub fn configuration_show(
    c: &mut Client,
    namespace_id: &str,
    id: &str,
) -> Result<Option<Value>, Error> {
    maybe(c, CONFIGURATION_SHOW, &[&namespace_id, &id])
}

/// Which audit events `audit_list` returns, newest first.
#[derive(Clone, Debug, Default)]
pub struct AuditFilter<'a> {
    /// A Namespace id, live or deleted (`namespace_known`).
    pub namespace_id: Option<&'a str>,
    /// At or after this RFC 3339 time.
    pub since: Option<&'a str>,
    /// Within this PostgreSQL interval of the database clock (`15 minutes`).
    pub age: Option<&'a str>,
    /// Only events with a smaller id: the cursor of the page before.
    pub before: Option<i64>,
    pub limit: i64,
}

/// The audit trail, newest first.
pub fn audit_list(c: &mut Client, f: &AuditFilter) -> Result<Value, Error> {
    one(
        c,
        AUDIT_LIST,
        &[&f.namespace_id, &f.since, &f.before, &f.limit, &f.age],
    )
}

/// What the unfinished work of a Namespace (`agent_id` none) or of an Agent waits for: its
/// key, state, latest attempt code, since when, attempt count and next run; none when nothing
/// is unfinished.
pub fn work_waiting(
    c: &mut Client,
    namespace_id: &str,
    agent_id: Option<&str>,
) -> Result<Option<Value>, Error> {
    maybe(c, WORK_WAITING, &[&namespace_id, &agent_id])
}

/// An Agent's outstanding repository cleanup (SPEC G1), oldest first: each work's key,
/// revision, kind, state, latest attempt code, attempt count and next run.
pub fn repository_cleanup_outstanding(
    c: &mut Client,
    namespace_id: &str,
    agent_id: &str,
) -> Result<Value, Error> {
    one(c, REPOSITORY_CLEANUP, &[&namespace_id, &agent_id])
}

/// A completed deletion of the Agent a work key named, when its rows went with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletedAgent {
    pub agent_id: String,
    /// The Namespace's name (its id when it is gone too).
    pub namespace: String,
    pub namespace_id: String,
    pub deleted_at: String,
}

/// The deletion that removed the work under `key` (`agent:ID:…` or `agent_revision:ID:…`), if
/// that is why no row has the key.
pub fn work_gone(c: &mut Client, key: &str) -> Result<Option<DeletedAgent>, Error> {
    let mut parts = key.split(':');
    let (agent, revision) = match (parts.next(), parts.next()) {
        (Some("agent"), Some(id)) => (Some(id), None),
        (Some("agent_revision"), Some(id)) => (None, Some(id)),
        _ => return Ok(None),
    };
    Ok(c.query_opt(WORK_GONE, &[&agent, &revision])?
        .map(|row| DeletedAgent {
            agent_id: row.get(0),
            namespace: row.get(1),
            namespace_id: row.get(2),
            deleted_at: row.get(3),
        }))
}

/// Seconds since a worker last renewed a claim or recorded an attempt (database clock); none
/// when no worker ever did.
pub fn worker_seen(c: &mut Client) -> Result<Option<f64>, Error> {
    Ok(c.query_one(WORKER_SEEN, &[])?.get(0))
}

/// The state of what the work `key` changes, in its kind's words (`provisioning`, `deploying`,
/// `stopping`, `deleting`, …); none when no work has the key.
pub fn work_subject(c: &mut Client, key: &str) -> Result<Option<String>, Error> {
    Ok(c.query_opt(WORK_SUBJECT, &[&key])?
        .and_then(|row| row.get(0)))
}
