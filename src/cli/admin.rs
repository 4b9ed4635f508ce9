//! `occ-worker admin …`: operator commands over the admission functions in `sql/` (SPEC §9).
//!
//! Every command that changes something calls one PostgreSQL admission function
//! (`occ.namespace_*` and the IAM functions, in `sql/schema.sql`), which authorizes `--actor`,
//! refuses with a one-line error, and audits. This module only parses, calls and prints: it
//! decides nothing itself.

use super::admin_read::{self, Read};
use super::refusal::{explained, refused, Inputs};
use super::wait::WaitArg;
use super::{CliError, Globals, Page};
use clap::{Args, Subcommand};
use occ_worker::queue;
use postgres::types::ToSql;
use serde_json::{json, Value};

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Identities: users and Agent service principals.
    #[command(subcommand)]
    Identity(IdentityCommand),
    /// IAM groups: bindings and restrictions naming a group apply to its members.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Grant a role to a principal (an identity, or `group:ID`) on a scope; `grant list` lists
    /// bindings.
    Grant(GrantArgs),
    /// Revoke a role binding.
    Revoke(BindingArgs),
    /// The built-in IAM roles: what each grants.
    #[command(subcommand)]
    Role(RoleCommand),
    /// Namespace admission and reads (N1, N4).
    #[command(subcommand)]
    Namespace(NamespaceCommand),
    /// The work queue.
    #[command(subcommand)]
    Work(WorkCommand),
    /// The audit trail, newest first.
    Audit {
        /// A Namespace id or name (tombstoned Namespaces included).
        #[arg(long)]
        namespace: Option<String>,
        /// Only events at or after this RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// Only events older than the event with this id (the next page of a full one).
        #[arg(long, value_name = "ID")]
        before: Option<i64>,
        /// At most this many events (the newest).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..))]
        limit: i64,
    },
    /// The approved-Harness catalog: one exact version per Harness and mode (R2).
    #[command(subcommand)]
    Harness(HarnessCommand),
    /// The Installation's backends a managed account binds to (SPEC M4).
    #[command(subcommand)]
    Backend(BackendCommand),
    /// Agents, Configurations, Secrets and service accounts (`admin_agent.rs`).
    #[command(flatten)]
    AgentAdmin(super::admin_agent::AgentAdmin),
}

#[derive(Subcommand)]
pub enum RoleCommand {
    /// List the roles with the actions each grants and the resource kinds they apply to (a
    /// binding grants every listed action on every listed kind within its scope).
    List(Page),
}

#[derive(Subcommand)]
pub enum HarnessCommand {
    /// List the approved Harness versions.
    List(Page),
    /// Approve the one version of a Harness in a mode (installation administrators; audited).
    /// Revisions admitted under another version are refused from their next pass on.
    Approve {
        /// The Harness id (`codex`, `openclaw`).
        id: String,
        /// The mode the version is approved for.
        #[arg(long, value_enum)]
        mode: super::admin_agent::Mode,
        /// The exact version, e.g. `1.2.0`.
        #[arg(long)]
        version: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
}

#[derive(Subcommand)]
pub enum BackendCommand {
    /// List the configured backends.
    List(Page),
    /// Configure a backend (installation administrators; audited).
    Add {
        /// The new backend's id.
        id: String,
        /// What kind of backend it is.
        #[arg(long, value_enum)]
        r#type: BackendType,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// Remove a backend: revisions admitted on it fail BACKEND_UNAVAILABLE from their next pass.
    Remove {
        /// The backend id.
        id: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
}

/// The backend types a managed account binds to.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum BackendType {
    Chatgpt,
}

#[derive(Subcommand)]
pub enum IdentityCommand {
    /// Create a user, or the service principal of an existing Agent.
    Create {
        /// The new identity's id.
        id: String,
        /// The installation administrator performing the change.
        #[arg(long)]
        actor: String,
        /// Create the service principal of the Agent --agent in --namespace instead of a user.
        #[arg(long, requires_all = ["namespace", "agent"])]
        service_principal: bool,
        /// The Namespace of the Agent (with --service-principal).
        #[arg(long, requires = "service_principal")]
        namespace: Option<String>,
        /// The Agent whose service principal this is (with --service-principal).
        #[arg(long, requires = "service_principal")]
        agent: Option<String>,
    },
    /// Revoke an identity (removes it; its bindings and restrictions go with it).
    Revoke {
        /// The identity to revoke.
        id: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// List every identity with its groups.
    List(Page),
    /// Show one identity: groups, the bindings that apply to it, restrictions.
    Show {
        /// The identity id.
        id: String,
    },
}

#[derive(Subcommand)]
pub enum GroupCommand {
    /// Create an empty group.
    Create {
        /// The new group's id.
        id: String,
        /// The installation administrator performing the change.
        #[arg(long)]
        actor: String,
    },
    /// Add an identity to a group.
    AddMember {
        /// The group id.
        group: String,
        /// The identity to add.
        identity: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// Remove an identity from a group (the group's bindings stop applying to it).
    RemoveMember {
        /// The group id.
        group: String,
        /// The identity to remove.
        identity: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// List every group with its members.
    List(Page),
    /// Show one group: members and bindings.
    Show {
        /// The group id.
        id: String,
    },
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct GrantArgs {
    #[command(subcommand)]
    list: Option<GrantCommand>,
    /// An identity id, or `group:ID` for a group.
    #[arg(required = true)]
    principal: Option<String>,
    /// The role to grant (`admin role list`).
    #[arg(required = true)]
    role: Option<String>,
    /// installation | namespace:NS | agent:NS/AGENT | secret:NS/ID | credential_source:NS/ID
    #[arg(long, required = true)]
    scope: Option<String>,
    /// The installation administrator performing the change.
    #[arg(long, required = true)]
    actor: Option<String>,
}

#[derive(Subcommand)]
pub enum GrantCommand {
    /// List role bindings, optionally only a principal's or only on a scope.
    List {
        /// An identity id, or `group:ID`.
        #[arg(long)]
        principal: Option<String>,
        /// installation | namespace:NS | agent:NS/AGENT | secret:NS/ID | credential_source:NS/ID
        #[arg(long)]
        scope: Option<String>,
        #[command(flatten)]
        page: Page,
    },
}

#[derive(Args)]
pub struct BindingArgs {
    /// An identity id, or `group:ID` for a group.
    principal: String,
    /// The role of the binding (`admin role list`).
    role: String,
    /// installation | namespace:NS | agent:NS/AGENT | secret:NS/ID | credential_source:NS/ID
    #[arg(long)]
    scope: String,
    /// The installation administrator performing the change.
    #[arg(long)]
    actor: String,
}

#[derive(Subcommand)]
pub enum NamespaceCommand {
    /// Admit a Namespace: stores it provisioning and enqueues its ensure work.
    Create {
        /// The new Namespace's name.
        name: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
        /// The exact existing Kubernetes namespace to adopt (needs Installation administer).
        #[arg(long)]
        existing_namespace: Option<String>,
        #[command(flatten)]
        wait: WaitArg,
    },
    /// Delete an empty Namespace: stores it deleting and enqueues its teardown.
    Delete {
        /// The Namespace id or name.
        namespace: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
        #[command(flatten)]
        wait: WaitArg,
    },
    /// List live Namespaces by name.
    List {
        /// At most this many Namespaces.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i64).range(1..))]
        limit: i64,
    },
    /// Show one live Namespace with its lifecycle work.
    Show {
        /// The Namespace id or name.
        namespace: String,
    },
}

#[derive(Subcommand)]
pub enum WorkCommand {
    /// List work rows, newest first.
    List(WorkListArgs),
    /// Follow one work row until it ends, showing its state and latest code (exit 0
    /// succeeded, 3 failed for good, 4 timed out).
    Watch {
        /// The work key, e.g. `namespace:ID:ensure`.
        key: String,
        /// Give up after this long (90s, 15m, 1h; default: never).
        #[arg(long, value_parser = super::wait::parse_timeout)]
        timeout: Option<std::time::Duration>,
    },
    /// Show one work row with its attempt evidence.
    Show {
        /// The work key, e.g. `namespace:ID:ensure`.
        key: String,
    },
    /// Explicitly retry a failed deletion (Q9): enqueues `…:delete:<n>`.
    Retry {
        /// The failed deletion's work key, `namespace:ID:delete[:N]`.
        key: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
        #[command(flatten)]
        wait: WaitArg,
    },
}

/// `admin work list`: its filters and page.
#[derive(Args)]
pub struct WorkListArgs {
    /// Only works in this state.
    #[arg(long, value_enum)]
    state: Option<WorkState>,
    /// Only works of this operation.
    #[arg(long, value_enum)]
    operation: Option<WorkOperation>,
    /// Only this Namespace's works (id or name; deleted Namespaces included).
    #[arg(long)]
    namespace: Option<String>,
    /// Only this Agent's works (id or name; a deleted Agent's works went with it).
    #[arg(long)]
    agent: Option<String>,
    /// Only works created at or after an RFC 3339 time, or within an age of now (`90s`,
    /// `15m`, `2h`, `7d`).
    #[arg(long, value_name = "TIME|AGE")]
    since: Option<String>,
    /// Only works older than the work with this id (the next page of a full one).
    #[arg(long, value_name = "ID")]
    before: Option<i64>,
    /// At most this many rows (the newest).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..))]
    limit: i64,
}

/// A work row's state (`admin work list --state`).
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum WorkState {
    Queued,
    Claimed,
    Succeeded,
    #[value(name = "failed_permanent")]
    FailedPermanent,
}

impl WorkState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkState::Queued => "queued",
            WorkState::Claimed => "claimed",
            WorkState::Succeeded => "succeeded",
            WorkState::FailedPermanent => "failed_permanent",
        }
    }
}

/// A work row's operation (`admin work list --operation`), as `queue::Operation` names it.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum WorkOperation {
    #[value(name = "namespace_ensure")]
    NamespaceEnsure,
    #[value(name = "namespace_delete")]
    NamespaceDelete,
    #[value(name = "agent_stop")]
    AgentStop,
    #[value(name = "agent_delete")]
    AgentDelete,
    #[value(name = "revision_reconcile")]
    RevisionReconcile,
    #[value(name = "revision_maintenance")]
    RevisionMaintenance,
    #[value(name = "agent_sandbox_policy")]
    AgentSandboxPolicy,
    #[value(name = "agent_credential_withdrawal")]
    AgentCredentialWithdrawal,
}

impl WorkOperation {
    fn operation(self) -> queue::Operation {
        match self {
            WorkOperation::NamespaceEnsure => queue::Operation::NamespaceEnsure,
            WorkOperation::NamespaceDelete => queue::Operation::NamespaceDelete,
            WorkOperation::AgentStop => queue::Operation::AgentStop,
            WorkOperation::AgentDelete => queue::Operation::AgentDelete,
            WorkOperation::RevisionReconcile => queue::Operation::RevisionReconcile,
            WorkOperation::RevisionMaintenance => queue::Operation::RevisionMaintenance,
            WorkOperation::AgentSandboxPolicy => queue::Operation::SandboxPolicy,
            WorkOperation::AgentCredentialWithdrawal => queue::Operation::CredentialWithdrawal,
        }
    }
}

/// The database's own message for a failed statement, one line (start-up reads only; admin
/// commands go through `refusal::refused`).
pub fn db_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

/// Calls one admission (or read) function returning jsonb and prints its answer; a refusal
/// becomes a one-line error naming the argument at fault (`refusal::refused`).
pub fn call(
    globals: &Globals,
    what: &str,
    args: &[(&str, &str)],
    query: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<(), CliError> {
    call_value(globals, what, args, query, params).map(drop)
}

/// `call`, returning the answer it printed.
pub fn call_value(
    globals: &Globals,
    what: &str,
    args: &[(&str, &str)],
    query: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Value, CliError> {
    let mut client = globals.connect()?;
    let row = match client.query_one(query, params) {
        Ok(row) => row,
        Err(e) => return Err(explained(&mut client, &Inputs { what, args }, &e)),
    };
    let value: Value = row.get(0);
    globals.print(&value);
    Ok(value)
}

/// Calls an admission that enqueues work (`call`), then with `--wait` follows that work until
/// it ends (`wait::follow`). The work's key is the answer's `work` (or `key`), or for a
/// Namespace the key of its listed work containing `:{step}` (`ensure`, `delete`), the newest
/// such.
pub fn enqueue(
    globals: &Globals,
    what: &str,
    args: &[(&str, &str)],
    query: &str,
    params: &[&(dyn ToSql + Sync)],
    (wait, step): (WaitArg, &str),
) -> Result<(), CliError> {
    let value = call_value(globals, what, args, query, params)?;
    let Some(timeout) = wait.wait else {
        return Ok(());
    };
    let key = match (&value["work"], &value["key"]) {
        (Value::String(key), _) | (Value::Null, Value::String(key)) => Some(key.clone()),
        (Value::Array(works), _) => works
            .iter()
            .filter_map(|w| w["key"].as_str())
            .rfind(|k| k.contains(&format!(":{step}")))
            .map(str::to_string),
        _ => None,
    };
    let key =
        key.ok_or_else(|| CliError::new(format!("{what}: the answer names no work to wait for")))?;
    super::wait::follow(globals, what, &key, Some(timeout))
}

/// Calls one read function returning a jsonb list and prints its first `page.limit` items as
/// a table of `columns` (`Globals::print_table`).
pub fn list(
    globals: &Globals,
    what: &str,
    query: &str,
    params: &[&(dyn ToSql + Sync)],
    page: Page,
    columns: &[(&str, &str)],
) -> Result<(), CliError> {
    let mut client = globals.connect()?;
    let row = client
        .query_one(query, params)
        .map_err(|e| refused(&Inputs { what, args: &[] }, &e))?;
    globals.print_table(&page.first(row.get(0)), columns);
    Ok(())
}

pub fn run(globals: &Globals, command: AdminCommand) -> Result<(), CliError> {
    match command {
        AdminCommand::Identity(IdentityCommand::Create {
            id,
            actor,
            service_principal,
            namespace,
            agent,
        }) => call(
            globals,
            "identity create",
            &[("ID", &id), ("--actor", &actor)],
            "SELECT occ.identity_create($1, $2, $3, $4, $5)",
            &[&actor, &id, &service_principal, &namespace, &agent],
        ),
        AdminCommand::Identity(IdentityCommand::Revoke { id, actor }) => call(
            globals,
            "identity revoke",
            &[("ID", &id), ("--actor", &actor)],
            "SELECT occ.identity_revoke($1, $2)",
            &[&actor, &id],
        ),
        AdminCommand::Group(GroupCommand::Create { id, actor }) => call(
            globals,
            "group create",
            &[("ID", &id), ("--actor", &actor)],
            "SELECT occ.group_create($1, $2)",
            &[&actor, &id],
        ),
        AdminCommand::Group(GroupCommand::AddMember {
            group,
            identity,
            actor,
        }) => call(
            globals,
            "group add-member",
            &[
                ("GROUP", &group),
                ("IDENTITY", &identity),
                ("--actor", &actor),
            ],
            "SELECT occ.group_add_member($1, $2, $3)",
            &[&actor, &group, &identity],
        ),
        AdminCommand::Group(GroupCommand::RemoveMember {
            group,
            identity,
            actor,
        }) => call(
            globals,
            "group remove-member",
            &[
                ("GROUP", &group),
                ("IDENTITY", &identity),
                ("--actor", &actor),
            ],
            "SELECT occ.group_remove_member($1, $2, $3)",
            &[&actor, &group, &identity],
        ),
        AdminCommand::Identity(IdentityCommand::List(page)) => {
            admin_read::run(globals, Read::Identities, page)
        }
        AdminCommand::Identity(IdentityCommand::Show { id }) => {
            admin_read::run(globals, Read::Identity(&id), Page::default())
        }
        AdminCommand::Group(GroupCommand::List(page)) => {
            admin_read::run(globals, Read::Groups, page)
        }
        AdminCommand::Group(GroupCommand::Show { id }) => {
            admin_read::run(globals, Read::Group(&id), Page::default())
        }
        AdminCommand::Grant(GrantArgs {
            list:
                Some(GrantCommand::List {
                    principal,
                    scope,
                    page,
                }),
            ..
        }) => admin_read::run(
            globals,
            Read::Grants {
                principal: principal.as_deref(),
                scope: scope.as_deref(),
            },
            page,
        ),
        AdminCommand::Grant(g) => {
            let b = BindingArgs {
                principal: g.principal.unwrap_or_default(),
                role: g.role.unwrap_or_default(),
                scope: g.scope.unwrap_or_default(),
                actor: g.actor.unwrap_or_default(),
            };
            call(
                globals,
                "grant",
                &[
                    ("PRINCIPAL", &b.principal),
                    ("ROLE", &b.role),
                    ("--scope", &b.scope),
                    ("--actor", &b.actor),
                ],
                "SELECT occ.binding_grant($1, $2, $3, $4)",
                &[&b.actor, &b.principal, &b.role, &b.scope],
            )
        }
        AdminCommand::Role(RoleCommand::List(page)) => admin_read::run(globals, Read::Roles, page),
        AdminCommand::Revoke(b) => call(
            globals,
            "revoke",
            &[
                ("PRINCIPAL", &b.principal),
                ("ROLE", &b.role),
                ("--scope", &b.scope),
                ("--actor", &b.actor),
            ],
            "SELECT occ.binding_revoke($1, $2, $3, $4)",
            &[&b.actor, &b.principal, &b.role, &b.scope],
        ),
        AdminCommand::Harness(HarnessCommand::List(page)) => list(
            globals,
            "harness list",
            "SELECT occ.harness_list()",
            &[],
            page,
            &[
                ("ID", "id"),
                ("MODE", "mode"),
                ("VERSION", "version"),
                ("APPROVED BY", "approvedBy"),
                ("APPROVED", "approvedAt"),
            ],
        ),
        AdminCommand::Harness(HarnessCommand::Approve {
            id,
            mode,
            version,
            actor,
        }) => call(
            globals,
            "harness approve",
            &[("ID", &id), ("--version", &version), ("--actor", &actor)],
            "SELECT occ.harness_approve($1, $2, $3, $4)",
            &[&actor, &id, &mode.as_str().to_string(), &version],
        ),
        AdminCommand::Backend(BackendCommand::List(page)) => list(
            globals,
            "backend list",
            "SELECT occ.backend_list()",
            &[],
            page,
            &[
                ("ID", "id"),
                ("TYPE", "type"),
                ("CREATED BY", "createdBy"),
                ("CREATED", "createdAt"),
            ],
        ),
        AdminCommand::Backend(BackendCommand::Add { id, r#type, actor }) => {
            let kind = match r#type {
                BackendType::Chatgpt => "chatgpt",
            };
            call(
                globals,
                "backend add",
                &[("ID", &id), ("--actor", &actor)],
                "SELECT occ.backend_add($1, $2, $3)",
                &[&actor, &id, &kind],
            )
        }
        AdminCommand::Backend(BackendCommand::Remove { id, actor }) => call(
            globals,
            "backend remove",
            &[("ID", &id), ("--actor", &actor)],
            "SELECT occ.backend_remove($1, $2)",
            &[&actor, &id],
        ),
        AdminCommand::Namespace(cmd) => namespace(globals, cmd),
        AdminCommand::Work(cmd) => work(globals, cmd),
        AdminCommand::AgentAdmin(cmd) => super::admin_agent::run(globals, cmd),
        AdminCommand::Audit {
            namespace,
            since,
            before,
            limit,
        } => audit(globals, namespace, since, before, limit),
    }
}

/// `admin audit`: the trail newest first, a table of one line per event (`--json`: each
/// event whole, details included).
fn audit(
    globals: &Globals,
    namespace: Option<String>,
    since: Option<String>,
    before: Option<i64>,
    limit: i64,
) -> Result<(), CliError> {
    if let Some(t) = &since {
        if !is_rfc3339(t) {
            return Err(CliError::config(format!(
                "--since must be an RFC 3339 time such as 2026-01-31T12:00:00Z, got {t:?}"
            )));
        }
    }
    let namespace = match namespace {
        Some(ns) => Some(admin_read::known_namespace(globals, "audit", &ns)?),
        None => None,
    };
    let mut client = globals.connect()?;
    let filter = occ_worker::operator::AuditFilter {
        namespace_id: namespace.as_deref(),
        since: since.as_deref(),
        before,
        limit,
    };
    let events = occ_worker::operator::audit_list(&mut client, &filter).map_err(|e| {
        refused(
            &Inputs {
                what: "audit",
                args: &[],
            },
            &e,
        )
    })?;
    let mut rows = events.clone();
    for e in rows.as_array_mut().into_iter().flatten() {
        e["resource"] = json!(format!(
            "{} {}",
            e["resourceKind"].as_str().unwrap_or("-"),
            e["resourceId"].as_str().unwrap_or("-")
        ));
    }
    globals.print_table(
        if globals.json { &events } else { &rows },
        &[
            ("ID", "id"),
            ("TIME", "occurredAt"),
            ("ACTOR", "actorId"),
            ("ACTION", "action"),
            ("RESOURCE", "resource"),
            ("OUTCOME", "outcome"),
            ("REASON", "reasonCode"),
        ],
    );
    let items = events.as_array().map(Vec::as_slice).unwrap_or_default();
    globals.more(
        items.len(),
        limit,
        items.last().and_then(|e| e["id"].as_i64()),
    );
    Ok(())
}

/// `--since` of `work list`: an RFC 3339 time, or an age (`90s`, `15m`, `2h`, `7d`) as the
/// PostgreSQL interval it means. `(time, interval)`, one of them set.
fn since_filter(value: &str) -> Result<(Option<String>, Option<String>), CliError> {
    if is_rfc3339(value) {
        return Ok((Some(value.to_string()), None));
    }
    let unit = match value.chars().last() {
        Some('s') => "seconds",
        Some('m') => "minutes",
        Some('h') => "hours",
        Some('d') => "days",
        _ => "",
    };
    let count = &value[..value.len().saturating_sub(1)];
    if unit.is_empty()
        || count.is_empty()
        || !count.bytes().all(|b| b.is_ascii_digit())
        || count.len() > 9
    {
        return Err(CliError::config(format!(
            "--since must be an RFC 3339 time such as 2026-01-31T12:00:00Z or an age such as 90s, 15m, 2h or 7d, got {value:?}"
        )));
    }
    Ok((None, Some(format!("{count} {unit}"))))
}

/// A full RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
fn is_rfc3339(value: &str) -> bool {
    let b = value.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    if b.len() < 20
        || !digits(0..4)
        || b[4] != b'-'
        || !digits(5..7)
        || b[7] != b'-'
        || !digits(8..10)
        || !matches!(b[10], b'T' | b't')
        || !digits(11..13)
        || b[13] != b':'
        || !digits(14..16)
        || b[16] != b':'
        || !digits(17..19)
    {
        return false;
    }
    let mut i = 19;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match &b[i..] {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}

fn namespace(globals: &Globals, command: NamespaceCommand) -> Result<(), CliError> {
    match command {
        NamespaceCommand::Create {
            name,
            actor,
            existing_namespace,
            wait,
        } => enqueue(
            globals,
            "namespace create",
            &[("NAME", &name), ("--actor", &actor)],
            "SELECT occ.namespace_create($1, $2, $3)",
            &[&actor, &name, &existing_namespace],
            (wait, "ensure"),
        ),
        NamespaceCommand::Delete {
            namespace,
            actor,
            wait,
        } => enqueue(
            globals,
            "namespace delete",
            &[("NAMESPACE", &namespace), ("--actor", &actor)],
            "SELECT occ.namespace_delete($1, $2)",
            &[&actor, &namespace],
            (wait, "delete"),
        ),
        NamespaceCommand::List { limit } => namespace_list(globals, limit),
        NamespaceCommand::Show { namespace } => namespace_show(globals, &namespace),
    }
}

/// `namespace list`: one line per live Namespace, by name, with what its work waits for.
fn namespace_list(globals: &Globals, limit: i64) -> Result<(), CliError> {
    let mut client = globals.connect()?;
    let inputs = Inputs {
        what: "namespace list",
        args: &[],
    };
    let row = client
        .query_one("SELECT occ.namespace_list()", &[])
        .map_err(|e| refused(&inputs, &e))?;
    let mut value: Value = row.get(0);
    if let Some(items) = value.as_array_mut() {
        items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        for ns in items.iter_mut() {
            let waiting = ns["work"]
                .as_array()
                .and_then(|w| {
                    w.iter()
                        .find(|w| matches!(w["state"].as_str(), Some("queued" | "claimed")))
                })
                .map(|w| match w["reasonCode"].as_str() {
                    Some(code) => format!("{} {code}", w["state"].as_str().unwrap_or_default()),
                    None => w["state"].as_str().unwrap_or_default().to_string(),
                });
            if !globals.json {
                ns["waiting"] = json!(waiting);
            }
        }
    }
    globals.print_table(
        &value,
        &[
            ("NAME", "name"),
            ("ID", "id"),
            ("STATUS", "status"),
            ("AGENTS", "agents"),
            ("WORK", "waiting"),
            ("CREATED", "createdAt"),
        ],
    );
    Ok(())
}

const NAMESPACE_PENDING: &str = include_str!("../../sql/queries/operator_namespace_pending.sql");

/// `namespace show`: the Namespace, why it still waits (the last pending reason its ensure
/// reported) and, with the Kubernetes driver (`OCC_KUBERNETES_CONFIG`), its Kubernetes
/// namespace, the prefix every Secret backend reference in it must start with, and while the
/// tenant RoleBinding is missing, the command that creates it.
fn namespace_show(globals: &Globals, namespace: &str) -> Result<(), CliError> {
    let mut client = globals.connect()?;
    let inputs = Inputs {
        what: "namespace show",
        args: &[("NAMESPACE", namespace)],
    };
    let row = client
        .query_one("SELECT occ.namespace_show($1)", &[&namespace])
        .map_err(|e| refused(&inputs, &e))?;
    let mut value: Value = row.get(0);
    let id = value["id"].as_str().unwrap_or_default().to_string();
    if value["status"] == "provisioning" {
        let pending: Option<String> = client
            .query_opt(NAMESPACE_PENDING, &[&id])
            .map_err(|e| refused(&inputs, &e))?
            .and_then(|r| r.get(0));
        value["pendingReason"] = json!(pending);
    }
    value["waitingFor"] = json!(occ_worker::operator::work_waiting(&mut client, &id, None)
        .map_err(|e| refused(&inputs, &e))?);
    if let Some(path) = std::env::var_os("OCC_KUBERNETES_CONFIG") {
        let settings =
            occ_worker::compute::kubernetes::settings::Settings::load(std::path::Path::new(&path))
                .map_err(|e| CliError::config(format!("invalid configuration: {e}")))?;
        let k8s = match value["existingNamespace"].as_str() {
            Some(adopted) => adopted.to_string(),
            None => occ_worker::compute::kubernetes::names::namespace_name(
                &settings.namespace_prefix,
                &id,
            ),
        };
        value["kubernetesNamespace"] = json!(k8s);
        value["secretBackendRefPrefix"] = json!(format!("{k8s}/"));
        if value["pendingReason"] == "NAMESPACE_ROLEBINDING_PENDING" {
            value["missing"] = json!(format!(
                "kubectl -n {k8s} create rolebinding {} --clusterrole=edit --group=TENANT_GROUP \
                 (or deploy/kubernetes/tenant-rolebinding.yaml, edited)",
                settings.tenant_role_binding
            ));
        }
    }
    globals.print(&value);
    Ok(())
}

fn work(globals: &Globals, command: WorkCommand) -> Result<(), CliError> {
    match command {
        WorkCommand::List(args) => work_list(globals, &mut globals.connect()?, args),
        WorkCommand::Watch { key, timeout } => {
            super::wait::follow(globals, "work watch", &key, timeout)
        }
        WorkCommand::Show { key } => work_show(globals, &mut globals.connect()?, &key),
        WorkCommand::Retry { key, actor, wait } if key.starts_with("namespace:") => enqueue(
            globals,
            "work retry",
            &[("KEY", &key), ("--actor", &actor)],
            "SELECT occ.namespace_delete_retry($1, $2)",
            &[&actor, &key],
            (wait, "delete"),
        ),
        WorkCommand::Retry { key, .. } => Err(CliError::new(format!(
            "work retry refused: explicit retry is available for failed Namespace deletions (namespace:<id>:delete[:<n>]) only, not {key:?}"
        ))),
    }
}

/// `work list`: the rows newest first, as a table, then the cursor of the next page.
fn work_list(
    globals: &Globals,
    client: &mut postgres::Client,
    args: WorkListArgs,
) -> Result<(), CliError> {
    let WorkListArgs {
        state,
        operation,
        namespace,
        agent,
        since,
        before,
        limit,
    } = args;
    let namespace = match namespace {
        Some(ns) => Some(admin_read::known_namespace(globals, "work list", &ns)?),
        None => None,
    };
    let (since, age) = since
        .as_deref()
        .map(since_filter)
        .transpose()?
        .unwrap_or_default();
    let filter = queue::WorkFilter {
        state: state.map(WorkState::as_str),
        namespace_id: namespace.as_deref(),
        operation: operation.map(|o| o.operation().as_str()),
        agent: agent.as_deref(),
        since: since.as_deref(),
        age: age.as_deref(),
        before,
        limit,
    };
    let rows = queue::work_list(client, &filter)?;
    globals.print_table(
        &json!(rows),
        &[
            ("ID", "id"),
            ("KEY", "key"),
            ("OPERATION", "operation"),
            ("STATE", "state"),
            ("ATTEMPTS", "attempts"),
            ("REASON", "reasonCode"),
            ("CREATED", "createdAt"),
        ],
    );
    globals.more(rows.len(), limit, rows.last().map(|r| r.id));
    Ok(())
}

/// `work show`: the row with its evidence; a key whose rows went with their Agent says so.
fn work_show(globals: &Globals, client: &mut postgres::Client, key: &str) -> Result<(), CliError> {
    match queue::work_show(client, key)? {
        Some(row) => globals.print(&json!(row)),
        None => {
            let inputs = Inputs {
                what: "work show",
                args: &[("KEY", key)],
            };
            let gone =
                occ_worker::operator::work_gone(client, key).map_err(|e| refused(&inputs, &e))?;
            return Err(CliError::new(match gone {
                    Some(d) => format!(
                        "work show refused: no work with key {key:?}: Agent {} was deleted at {} and its work went with it (admin audit --namespace {})",
                        d.agent_id, d.deleted_at, d.namespace
                    ),
                    None => format!("work show refused: no work with key {key:?}"),
                }));
        }
    }
    Ok(())
}
