//! `occ-worker admin role list`: the built-in IAM roles and what each grants. It reads only.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::refused_read;
use clap::Subcommand;
use occ_worker::operator;

#[derive(Subcommand)]
pub enum RoleCommand {
    /// List the roles with the actions each grants and the resource kinds they apply to (a
    /// binding grants every listed action on every listed kind within its scope).
    List(Page),
}

pub fn run(globals: &Globals, command: RoleCommand) -> Result<(), CliError> {
    let RoleCommand::List(page) = command;
    let v = operator::role_list(&mut globals.connect()?)
        .map_err(|e| refused_read("role list", &[], &e))?;
    globals.print_table(
        &page.first(v),
        &[
            ("ROLE", "id"),
            ("ACTIONS", "actions"),
            ("ON RESOURCE KINDS", "resourceKinds"),
        ],
    );
    Ok(())
}
