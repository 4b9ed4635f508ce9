//! `occ-worker admin …`: operator commands over the admission functions in `sql/`.

use super::{CliError, Globals};
use clap::Subcommand;
use occ_worker::queue;
use serde_json::json;

#[derive(Subcommand)]
pub enum AdminCommand {
    /// The work queue.
    #[command(subcommand)]
    Work(WorkCommand),
    #[command(flatten)]
    AgentAdmin(super::admin_agent::AgentAdmin),
}

#[derive(Subcommand)]
pub enum WorkCommand {
    /// List work rows.
    List {
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        namespace: Option<String>,
        #[arg(long, default_value_t = 1000)]
        limit: i64,
    },
    /// Show one work row with its attempt evidence.
    Show { key: String },
}

/// The database's own message for a refused admission (constraint or RAISE), one line.
pub fn db_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

pub fn run(globals: &Globals, command: AdminCommand) -> Result<(), CliError> {
    match command {
        AdminCommand::Work(cmd) => work(globals, cmd),
        AdminCommand::AgentAdmin(cmd) => super::admin_agent::run(globals, cmd),
    }
}

fn work(globals: &Globals, command: WorkCommand) -> Result<(), CliError> {
    let mut client = globals.connect()?;
    match command {
        WorkCommand::List {
            state,
            namespace,
            limit,
        } => {
            if let Some(s) = &state {
                if !["queued", "claimed", "succeeded", "failed_permanent"].contains(&s.as_str()) {
                    return Err(CliError::config(format!(
                        "--state must be queued, claimed, succeeded or failed_permanent, got {s:?}"
                    )));
                }
            }
            let rows =
                queue::work_list(&mut client, state.as_deref(), namespace.as_deref(), limit)?;
            globals.print(&json!(rows));
        }
        WorkCommand::Show { key } => match queue::work_show(&mut client, &key)? {
            Some(row) => globals.print(&json!(row)),
            None => return Err(CliError::new(format!("no work with key {key:?}"))),
        },
    }
    Ok(())
}
