//! Operator reads (SPEC section 9): identities, groups, grants, roles, Agents, Secrets and
//! Configurations as the operator's tool shows them, so nothing needs psql.
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
const CONFIGURATION_LIST: &str = include_str!("../sql/queries/operator_configuration_list.sql");
const CONFIGURATION_SHOW: &str = include_str!("../sql/queries/operator_configuration_show.sql");

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
