//! `occ-worker admin agent withdraw-credential` and `admin withdrawal list`: an operator's
//! request to withdraw a credential source from an Agent's runtimes, and the withdrawal rows
//! (SPEC §13, Admission and CLI; E15).
//!
//! The request is one call of `occ.credential_withdrawal_request`, which locks, authorizes
//! `--actor`, writes the rows, enqueues the works and audits; with `--wait` this module then
//! follows each work it enqueued, in turn. It decides nothing itself and never touches a
//! credential value.

use super::admin::call_value;
use super::admin_read::{self, Read};
use super::wait::WaitArg;
use super::{CliError, Globals, Page};
use clap::Subcommand;
use std::time::Instant;

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

/// What `admin agent withdraw-credential` was given.
pub struct Request<'a> {
    pub namespace: &'a str,
    pub agent: &'a str,
    pub source: &'a str,
    pub actor: &'a str,
    pub wait: WaitArg,
}

pub fn run(globals: &Globals, command: WithdrawalCommand) -> Result<(), CliError> {
    match command {
        WithdrawalCommand::List {
            namespace,
            agent,
            page,
        } => admin_read::run(
            globals,
            Read::Withdrawals(&namespace, agent.as_deref()),
            page,
        ),
    }
}

/// Requests the withdrawal (SPEC E15) and prints what it admitted; with `--wait`, follows each
/// enqueued work until it ends, the first that does not succeed ending the wait, all within
/// one timeout.
pub fn withdraw(globals: &Globals, r: Request) -> Result<(), CliError> {
    let what = "agent withdraw-credential";
    let started = Instant::now();
    let value = call_value(
        globals,
        what,
        &[
            ("NAMESPACE", r.namespace),
            ("AGENT", r.agent),
            ("SOURCE", r.source),
            ("--actor", r.actor),
        ],
        "SELECT occ.credential_withdrawal_request($1, $2, $3, $4)",
        &[&r.actor, &r.namespace, &r.agent, &r.source],
    )?;
    let Some(timeout) = r.wait.wait else {
        return Ok(());
    };
    let keys = value["works"].as_array().cloned().unwrap_or_default();
    if keys.is_empty() {
        // Each revision's one chain is already queued (SPEC E15) or every row is revoked.
        eprintln!(
            "{what}: queued no work to wait for: each revision's withdrawal work was already \
             queued (the row gets its own work when that one ends), or its row is revoked \
             (admin withdrawal list, admin work list --agent {})",
            r.agent
        );
    }
    for key in keys.iter().filter_map(|k| k.as_str()) {
        let left = timeout.saturating_sub(started.elapsed());
        super::wait::follow(globals, what, key, Some(left))?;
    }
    Ok(())
}
