//! `occ-worker admin harness list|approve`: the approved-Harness catalog, one exact version
//! per Harness and mode (SPEC R2), through `occ.harness_approve`, which authorizes `--actor`,
//! refuses with a one-line error and audits. It decides nothing itself.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::{call, list, Mode};
use clap::Subcommand;

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
        mode: Mode,
        /// The exact version, e.g. `1.2.0`.
        #[arg(long)]
        version: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
}

pub fn run(globals: &Globals, command: HarnessCommand) -> Result<(), CliError> {
    match command {
        HarnessCommand::List(page) => list(
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
        HarnessCommand::Approve {
            id,
            mode,
            version,
            actor,
        } => call(
            globals,
            "harness approve",
            &[("ID", &id), ("--version", &version), ("--actor", &actor)],
            "SELECT occ.harness_approve($1, $2, $3, $4)",
            &[&actor, &id, &mode.as_str().to_string(), &version],
        ),
    }
}
