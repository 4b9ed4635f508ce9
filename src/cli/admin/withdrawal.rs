//! `occ-worker admin withdrawal list`: the credential withdrawal rows, one per revision and
//! source an operator asked to withdraw (SPEC §13, E15); the request itself is
//! `admin agent withdraw-credential`. It reads only.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::refused_read;
use clap::Subcommand;
use occ_worker::operator;

#[derive(Subcommand)]
pub enum WithdrawalCommand {
    /// List the Namespace's credential withdrawals, or one Agent's: state, requester, last
    /// reason and time, revoked at.
    List {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name (default: every Agent of the Namespace).
        agent: Option<String>,
        #[command(flatten)]
        page: Page,
    },
}

pub fn run(globals: &Globals, command: WithdrawalCommand) -> Result<(), CliError> {
    let WithdrawalCommand::List {
        namespace: ns,
        agent,
        page,
    } = command;
    let what = "withdrawal list";
    let mut c = globals.connect()?;
    let args = [
        ("NAMESPACE", ns.as_str()),
        ("AGENT", agent.as_deref().unwrap_or("")),
    ];
    let ns_id =
        operator::namespace_resolve(&mut c, &ns).map_err(|e| refused_read(what, &args, &e))?;
    let v = operator::withdrawal_list(&mut c, &ns_id, agent.as_deref())
        .map_err(|e| refused_read(what, &args, &e))?
        .ok_or_else(|| {
            CliError::new(format!(
                "{what} refused: no Agent {} in Namespace {ns}",
                agent.as_deref().unwrap_or_default()
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
    Ok(())
}
