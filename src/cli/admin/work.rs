//! `occ-worker admin work list|watch|show|retry`: the work queue as operators read it, and
//! the explicit retry of a failed Namespace deletion (SPEC Q9, through
//! `occ.namespace_delete_retry`). It decides nothing itself.

use super::super::error::CliError;
use super::super::globals::Globals;
use super::super::refusal::{refused, Inputs};
use super::super::wait::WaitArg;
use super::common::{enqueue, known_agent, known_namespace, since_filter};
use clap::{Args, Subcommand};
use occ_worker::queue;
use serde_json::json;

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
        #[arg(long, value_parser = super::super::wait::parse_timeout)]
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

/// A work row's state (`admin work list --state`), as the flag spells it.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum WorkState {
    Queued,
    Claimed,
    Succeeded,
    #[value(name = "failed_permanent")]
    FailedPermanent,
}

impl WorkState {
    /// The queue's own state, whose text the listing filters on.
    fn state(self) -> queue::WorkState {
        match self {
            WorkState::Queued => queue::WorkState::Queued,
            WorkState::Claimed => queue::WorkState::Claimed,
            WorkState::Succeeded => queue::WorkState::Succeeded,
            WorkState::FailedPermanent => queue::WorkState::FailedPermanent,
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
    #[value(name = "agent_repository_cleanup")]
    AgentRepositoryCleanup,
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
            WorkOperation::AgentRepositoryCleanup => queue::Operation::RepositoryCleanup,
        }
    }
}

pub fn run(globals: &Globals, command: WorkCommand) -> Result<(), CliError> {
    match command {
        WorkCommand::List(args) => work_list(globals, &mut globals.connect()?, args),
        WorkCommand::Watch { key, timeout } => {
            super::super::wait::follow(globals, "work watch", &key, timeout)
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
        Some(ns) => Some(known_namespace(globals, "work list", &ns)?),
        None => None,
    };
    if let Some(agent) = &agent {
        known_agent(globals, "work list", agent, namespace.as_deref())?;
    }
    let (since, age) = since
        .as_deref()
        .map(since_filter)
        .transpose()?
        .unwrap_or_default();
    let filter = queue::WorkFilter {
        state: state.map(|s| s.state().as_str()),
        namespace_id: namespace.as_deref(),
        operation: operation.map(|o| o.operation().as_str()),
        agent: agent.as_deref(),
        since: since.as_deref(),
        age: age.as_deref(),
        before,
        limit,
    };
    let rows = queue::work_list(client, &filter)?;
    let columns: &[(&str, &str)] = if filter.state == Some(queue::WorkState::Claimed.as_str()) {
        // Claimed works name the process holding each claim and since when (V29).
        &[
            ("ID", "id"),
            ("KEY", "key"),
            ("OPERATION", "operation"),
            ("ATTEMPTS", "attempts"),
            ("WORKER", "/holder/workerId"),
            ("HOST", "/holder/host"),
            ("PID", "/holder/pid"),
            ("SINCE", "/holder/since"),
        ]
    } else {
        &[
            ("ID", "id"),
            ("KEY", "key"),
            ("OPERATION", "operation"),
            ("STATE", "state"),
            ("ATTEMPTS", "attempts"),
            ("REASON", "reasonCode"),
            ("CREATED", "createdAt"),
        ]
    };
    globals.print_table(&json!(rows), columns);
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
