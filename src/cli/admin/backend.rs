//! `occ-worker admin backend list|add|remove`: the Installation's backends a managed account
//! binds to (SPEC M4), through `occ.backend_add` and `occ.backend_remove`, which authorize
//! `--actor`, refuse with a one-line error and audit. It decides nothing itself.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::{call, list};
use clap::Subcommand;

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

pub fn run(globals: &Globals, command: BackendCommand) -> Result<(), CliError> {
    match command {
        BackendCommand::List(page) => list(
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
        BackendCommand::Add { id, r#type, actor } => {
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
        BackendCommand::Remove { id, actor } => call(
            globals,
            "backend remove",
            &[("ID", &id), ("--actor", &actor)],
            "SELECT occ.backend_remove($1, $2)",
            &[&actor, &id],
        ),
    }
}
