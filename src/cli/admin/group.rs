//! `occ-worker admin group create|add-member|remove-member|list|show`: IAM groups, through
//! `occ.group_*`, which authorize `--actor`, refuse with a one-line error and audit, and the
//! operator reads of groups. It decides nothing itself.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::{call, refused_read};
use clap::Subcommand;
use occ_worker::operator;

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

pub fn run(globals: &Globals, command: GroupCommand) -> Result<(), CliError> {
    match command {
        GroupCommand::Create { id, actor } => call(
            globals,
            "group create",
            &[("ID", &id), ("--actor", &actor)],
            "SELECT occ.group_create($1, $2)",
            &[&actor, &id],
        ),
        GroupCommand::AddMember {
            group,
            identity,
            actor,
        } => call(
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
        GroupCommand::RemoveMember {
            group,
            identity,
            actor,
        } => call(
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
        GroupCommand::List(page) => list(globals, page),
        GroupCommand::Show { id } => show(globals, &id),
    }
}

/// `group list`: every group with its members.
fn list(globals: &Globals, page: Page) -> Result<(), CliError> {
    let v = operator::group_list(&mut globals.connect()?)
        .map_err(|e| refused_read("group list", &[], &e))?;
    globals.print_table(
        &page.first(v),
        &[
            ("ID", "id"),
            ("MEMBERS", "members"),
            ("CREATED", "createdAt"),
        ],
    );
    Ok(())
}

/// `group show`: one group; one that does not exist is an error.
fn show(globals: &Globals, id: &str) -> Result<(), CliError> {
    let v = operator::group_show(&mut globals.connect()?, id)
        .map_err(|e| refused_read("group show", &[("ID", id)], &e))?
        .ok_or_else(|| CliError::new(format!("group show refused: no group {id}")))?;
    globals.print(&v);
    Ok(())
}
