//! `occ-worker admin …`: operator commands over the admission functions in `sql/` (SPEC §9),
//! one file per noun of the command tree (`identity`, `group`, `grant` (and `revoke`),
//! `role`, `namespace`, `work`, `audit`, `harness`, `backend`, `agent`, `configuration`,
//! `secret`, `service_account`, `credential_source`, `withdrawal`), each with its commands and
//! its reads. The steps they share live in `common`, below every noun; no noun names another.
//! This file holds only the command tree's root and the dispatch.
//!
//! Every command that changes something calls one PostgreSQL admission function (the IAM,
//! `occ.namespace_*`, `occ.agent_*` and other functions in `sql/schema.sql`), which authorizes
//! `--actor`, refuses with a one-line error, and audits. The CLI only parses, calls and
//! prints: it decides nothing itself.

mod agent;
mod audit;
mod backend;
mod common;
mod configuration;
mod credential_source;
mod grant;
mod group;
mod harness;
mod identity;
mod namespace;
mod repository;
mod role;
mod secret;
mod service_account;
mod withdrawal;
mod work;

use super::error::CliError;
use super::globals::Globals;
use clap::Subcommand;

pub use common::db_message;

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Identities: users and Agent service principals.
    #[command(subcommand)]
    Identity(identity::IdentityCommand),
    /// IAM groups: bindings and restrictions naming a group apply to its members.
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// Grant a role to a principal (an identity, or `group:ID`) on a scope; `grant list` lists
    /// bindings.
    Grant(grant::GrantArgs),
    /// Revoke a role binding.
    Revoke(grant::BindingArgs),
    /// The built-in IAM roles: what each grants.
    #[command(subcommand)]
    Role(role::RoleCommand),
    /// Namespace admission and reads (N1, N4).
    #[command(subcommand)]
    Namespace(namespace::NamespaceCommand),
    /// The work queue.
    #[command(subcommand)]
    Work(work::WorkCommand),
    /// The audit trail, newest first.
    Audit {
        /// A Namespace id or name (tombstoned Namespaces included).
        #[arg(long)]
        namespace: Option<String>,
        /// Only events at or after an RFC 3339 time, or within an age of now (`90s`, `15m`,
        /// `2h`, `7d`).
        #[arg(long, value_name = "TIME|AGE")]
        since: Option<String>,
        /// Only events older than the event with this id (the next page of a full one).
        #[arg(long, value_name = "ID")]
        before: Option<i64>,
        /// At most this many events (the newest).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..))]
        limit: i64,
    },
    /// The approved-Harness catalog: one exact version per Harness and mode (R2).
    #[command(subcommand)]
    Harness(harness::HarnessCommand),
    /// The Installation's backends a managed account binds to (SPEC M4).
    #[command(subcommand)]
    Backend(backend::BackendCommand),
    /// Agents and their revisions.
    #[command(subcommand)]
    Agent(agent::AgentCommand),
    /// Namespace-owned Configurations.
    #[command(subcommand)]
    Configuration(configuration::ConfigurationCommand),
    /// Namespace-owned Secret metadata (backend references, never values).
    #[command(subcommand)]
    Secret(secret::SecretCommand),
    /// Namespace-owned managed ChatGPT accounts: an access-token reference and a backend
    /// binding (SPEC M1, M4).
    #[command(subcommand)]
    ServiceAccount(service_account::ServiceAccountCommand),
    /// Namespace-owned credential sources: model keys and tool credentials a Credential
    /// Gateway attaches (SPEC §13).
    #[command(subcommand)]
    CredentialSource(credential_source::CredentialSourceCommand),
    /// Credential withdrawals: one row per revision and source an operator asked to withdraw
    /// (SPEC E15).
    #[command(subcommand)]
    Withdrawal(withdrawal::WithdrawalCommand),
    /// Repository credentials (SPEC G8): a Namespace's repository grants, its Agents' standing
    /// approvals, and the sessions opened for their revisions.
    #[command(subcommand)]
    Repository(repository::RepositoryCommand),
}

pub fn run(globals: &Globals, command: AdminCommand) -> Result<(), CliError> {
    match command {
        AdminCommand::Identity(command) => identity::run(globals, command),
        AdminCommand::Group(command) => group::run(globals, command),
        AdminCommand::Grant(grant) => grant::run(globals, grant),
        AdminCommand::Revoke(binding) => grant::revoke(globals, binding),
        AdminCommand::Role(command) => role::run(globals, command),
        AdminCommand::Namespace(command) => namespace::run(globals, command),
        AdminCommand::Work(command) => work::run(globals, command),
        AdminCommand::Audit {
            namespace,
            since,
            before,
            limit,
        } => audit::run(globals, namespace, since, before, limit),
        AdminCommand::Harness(command) => harness::run(globals, command),
        AdminCommand::Backend(command) => backend::run(globals, command),
        AdminCommand::Agent(command) => agent::run(globals, command),
        AdminCommand::Configuration(command) => configuration::run(globals, command),
        AdminCommand::Secret(command) => secret::run(globals, command),
        AdminCommand::ServiceAccount(command) => service_account::run(globals, command),
        AdminCommand::CredentialSource(command) => credential_source::run(globals, command),
        AdminCommand::Withdrawal(command) => withdrawal::run(globals, command),
        AdminCommand::Repository(command) => repository::run(globals, command),
    }
}
