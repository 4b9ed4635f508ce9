//! `occ-worker admin grant|grant list|revoke`: role bindings, through `occ.binding_grant` and
//! `occ.binding_revoke`, which authorize `--actor`, refuse with a one-line error and audit,
//! and the operator read of bindings. It decides nothing itself.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::{call, refused_read};
use clap::{Args, Subcommand};
use occ_worker::operator;

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

/// `admin grant`: a new binding, or with `list` the bindings.
pub fn run(globals: &Globals, grant: GrantArgs) -> Result<(), CliError> {
    if let Some(GrantCommand::List {
        principal,
        scope,
        page,
    }) = grant.list
    {
        let (principal, scope) = (principal.as_deref(), scope.as_deref());
        let v = operator::grant_list(&mut globals.connect()?, principal, scope).map_err(|e| {
            refused_read(
                "grant list",
                &[
                    ("--principal", principal.unwrap_or("")),
                    ("--scope", scope.unwrap_or("")),
                ],
                &e,
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
        return Ok(());
    }
    let b = BindingArgs {
        principal: grant.principal.unwrap_or_default(),
        role: grant.role.unwrap_or_default(),
        scope: grant.scope.unwrap_or_default(),
        actor: grant.actor.unwrap_or_default(),
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

/// `admin revoke`: removes a binding.
pub fn revoke(globals: &Globals, b: BindingArgs) -> Result<(), CliError> {
    call(
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
    )
}
