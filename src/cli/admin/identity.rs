//! `occ-worker admin identity create|revoke|list|show`: users and Agent service principals,
//! through `occ.identity_create` and `occ.identity_revoke`, which authorize `--actor`, refuse
//! with a one-line error and audit, and the operator reads of identities. It decides nothing
//! itself.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::{call, refused_read};
use clap::Subcommand;
use occ_worker::operator;

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

pub fn run(globals: &Globals, command: IdentityCommand) -> Result<(), CliError> {
    match command {
        IdentityCommand::Create {
            id,
            actor,
            service_principal,
            namespace,
            agent,
        } => call(
            globals,
            "identity create",
            &[("ID", &id), ("--actor", &actor)],
            "SELECT occ.identity_create($1, $2, $3, $4, $5)",
            &[&actor, &id, &service_principal, &namespace, &agent],
        ),
        IdentityCommand::Revoke { id, actor } => call(
            globals,
            "identity revoke",
            &[("ID", &id), ("--actor", &actor)],
            "SELECT occ.identity_revoke($1, $2)",
            &[&actor, &id],
        ),
        IdentityCommand::List(page) => list(globals, page),
        IdentityCommand::Show { id } => show(globals, &id),
    }
}

/// `identity list`: every identity with its groups.
fn list(globals: &Globals, page: Page) -> Result<(), CliError> {
    let v = operator::identity_list(&mut globals.connect()?)
        .map_err(|e| refused_read("identity list", &[], &e))?;
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
    Ok(())
}

/// `identity show`: one identity; one that does not exist is an error.
fn show(globals: &Globals, id: &str) -> Result<(), CliError> {
    let v = operator::identity_show(&mut globals.connect()?, id)
        .map_err(|e| refused_read("identity show", &[("ID", id)], &e))?
        .ok_or_else(|| CliError::new(format!("identity show refused: no identity {id}")))?;
    globals.print(&v);
    Ok(())
}
