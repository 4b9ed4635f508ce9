//! The operator reads of `admin identity|group|grant|role|agent|secret|configuration|credential-source|withdrawal list|show`
//! (SPEC section 9): each calls one `occ_worker::operator` function and prints JSON with
//! `--json`, a table (lists) or the indented form (one object) otherwise.
//!
//! It reads only. A Namespace, identity, group or Configuration that does not exist is an
//! error (exit 1), never an empty answer.

use super::refusal::{refused, Inputs};
use super::{CliError, Globals, Page};
use occ_worker::operator;
use serde_json::Value;

/// What to read.
pub enum Read<'a> {
    Identities,
    Identity(&'a str),
    Groups,
    Group(&'a str),
    Grants {
        principal: Option<&'a str>,
        scope: Option<&'a str>,
    },
    Roles,
    Agents(&'a str),
    Secrets(&'a str),
    Configurations(&'a str),
    Configuration(&'a str, &'a str),
    CredentialSources(&'a str),
    CredentialSource(&'a str, &'a str),
    Withdrawals(&'a str, Option<&'a str>),
}

/// Reads `read`; a list prints its first `page.limit` rows.
pub fn run(globals: &Globals, read: Read, page: Page) -> Result<(), CliError> {
    let mut c = globals.connect()?;
    let fail = |what: &'static str, args: &[(&str, &str)], e: postgres::Error| {
        refused(&Inputs { what, args }, &e)
    };
    match read {
        Read::Identities => {
            let v = operator::identity_list(&mut c).map_err(|e| fail("identity list", &[], e))?;
            globals.print_table(
                &page.first(v),
                &[
                    ("ID", "id"),
                    ("KIND", "kind"),
                    ("NAMESPACE", "namespaceId"),
                    ("AGENT", "agentId"),
                    ("GROUPS", "groups"),
                    ("CREATED", "createdAt"),
                ],
            );
        }
        Read::Identity(id) => {
            let v = operator::identity_show(&mut c, id)
                .map_err(|e| fail("identity show", &[("ID", id)], e))?
                .ok_or_else(|| CliError::new(format!("identity show refused: no identity {id}")))?;
            globals.print(&v);
        }
        Read::Groups => {
            let v = operator::group_list(&mut c).map_err(|e| fail("group list", &[], e))?;
            globals.print_table(
                &page.first(v),
                &[
                    ("ID", "id"),
                    ("MEMBERS", "members"),
                    ("CREATED", "createdAt"),
                ],
            );
        }
        Read::Group(id) => {
            let v = operator::group_show(&mut c, id)
                .map_err(|e| fail("group show", &[("ID", id)], e))?
                .ok_or_else(|| CliError::new(format!("group show refused: no group {id}")))?;
            globals.print(&v);
        }
        Read::Grants { principal, scope } => {
            let v = operator::grant_list(&mut c, principal, scope).map_err(|e| {
                fail(
                    "grant list",
                    &[
                        ("--principal", principal.unwrap_or("")),
                        ("--scope", scope.unwrap_or("")),
                    ],
                    e,
                )
            })?;
            globals.print_table(
                &page.first(v),
                &[
                    ("ID", "id"),
                    ("PRINCIPAL", "principal"),
                    ("ROLE", "role"),
                    ("SCOPE", "scope"),
                    ("CREATED", "createdAt"),
                ],
            );
        }
        Read::Roles => {
            let v = operator::role_list(&mut c).map_err(|e| fail("role list", &[], e))?;
            globals.print_table(
                &page.first(v),
                &[
                    ("ROLE", "id"),
                    ("ACTIONS", "actions"),
                    ("ON RESOURCE KINDS", "resourceKinds"),
                ],
            );
        }
        Read::Agents(ns) => {
            let v = in_namespace(&mut c, "agent list", ns, operator::agent_list)?;
            globals.print_table(
                &page.first(v),
                &[
                    ("NAME", "name"),
                    ("ID", "id"),
                    ("STATUS", "status"),
                    ("DESIRED", "desiredRuntimeState"),
                    ("REVISION", "latestRevision"),
                    ("STATE", "latestState"),
                    ("REASON", "latestReasonCode"),
                ],
            );
        }
        Read::Secrets(ns) => {
            let v = in_namespace(&mut c, "secret list", ns, operator::secret_list)?;
            globals.print_table(
                &page.first(v),
                &[
                    ("ID", "id"),
                    ("BACKEND REF", "backendRef"),
                    ("CREATED BY", "createdBy"),
                    ("CREATED", "createdAt"),
                ],
            );
        }
        Read::CredentialSources(ns) => {
            let v = in_namespace(
                &mut c,
                "credential-source list",
                ns,
                operator::credential_source_list,
            )?;
            globals.print_table(
                &page.first(v),
                &[
                    ("ID", "id"),
                    ("KIND", "kind"),
                    ("OWNER", "owner"),
                    ("DRIVER", "driverId"),
                    ("STATE", "state"),
                    ("BACKEND REF", "backendRef"),
                    ("CREATED BY", "createdBy"),
                ],
            );
        }
        Read::CredentialSource(ns, id) => {
            let what = "credential-source show";
            let ns_id = operator::namespace_resolve(&mut c, ns)
                .map_err(|e| fail(what, &[("NAMESPACE", ns)], e))?;
            let v = operator::credential_source_show(&mut c, &ns_id, id)
                .map_err(|e| fail(what, &[("NAMESPACE", ns), ("ID", id)], e))?
                .ok_or_else(|| {
                    CliError::new(format!(
                        "{what} refused: no credential source {id} in Namespace {ns}"
                    ))
                })?;
            globals.print(&v);
        }
        Read::Withdrawals(ns, agent) => {
            let what = "withdrawal list";
            let args = [("NAMESPACE", ns), ("AGENT", agent.unwrap_or(""))];
            let ns_id =
                operator::namespace_resolve(&mut c, ns).map_err(|e| fail(what, &args, e))?;
            let v = operator::withdrawal_list(&mut c, &ns_id, agent)
                .map_err(|e| fail(what, &args, e))?
                .ok_or_else(|| {
                    CliError::new(format!(
                        "{what} refused: no Agent {} in Namespace {ns}",
                        agent.unwrap_or_default()
                    ))
                })?;
            globals.print_table(
                &page.first(v),
                &[
                    ("AGENT", "agent"),
                    ("REVISION", "revision"),
                    ("SOURCE", "sourceId"),
                    ("STATE", "state"),
                    ("REQUESTED BY", "requestedBy"),
                    ("LAST REASON", "lastReason"),
                    ("LAST AT", "lastAt"),
                    ("REVOKED AT", "revokedAt"),
                ],
            );
        }
        Read::Configurations(ns) => {
            let v = in_namespace(
                &mut c,
                "configuration list",
                ns,
                operator::configuration_list,
            )?;
            globals.print_table(
                &page.first(v),
                &[
                    ("ID", "id"),
                    ("GENERATION", "generation"),
                    ("UPDATED BY", "updatedBy"),
                    ("UPDATED", "updatedAt"),
                ],
            );
        }
        Read::Configuration(ns, id) => {
            let ns_id = operator::namespace_resolve(&mut c, ns)
                .map_err(|e| fail("configuration show", &[("NAMESPACE", ns)], e))?;
            let v = operator::configuration_show(&mut c, &ns_id, id)
                .map_err(|e| fail("configuration show", &[("NAMESPACE", ns), ("ID", id)], e))?
                .ok_or_else(|| {
                    CliError::new(format!(
                        "configuration show refused: no Configuration {id} in Namespace {ns}"
                    ))
                })?;
            globals.print(&v);
        }
    }
    Ok(())
}

/// Resolves the live Namespace `ns`, then reads from it.
fn in_namespace(
    c: &mut postgres::Client,
    what: &'static str,
    ns: &str,
    read: fn(&mut postgres::Client, &str) -> Result<Value, postgres::Error>,
) -> Result<Value, CliError> {
    let args = [("NAMESPACE", ns)];
    let ns_id = operator::namespace_resolve(c, ns)
        .map_err(|e| refused(&Inputs { what, args: &args }, &e))?;
    read(c, &ns_id).map_err(|e| refused(&Inputs { what, args: &args }, &e))
}

/// The id of a Namespace that exists or existed (`admin audit`, `admin work list`).
pub fn known_namespace(
    globals: &Globals,
    what: &'static str,
    ns: &str,
) -> Result<String, CliError> {
    let mut c = globals.connect()?;
    operator::namespace_known(&mut c, ns)
        .map_err(|e| refused(&Inputs { what, args: &[] }, &e))?
        .ok_or_else(|| {
            CliError::new(format!(
                "{what} refused: no Namespace {ns} (no live or deleted Namespace has that id or name)"
            ))
        })
}
