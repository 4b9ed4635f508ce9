//! `occ-worker admin agent|configuration|secret …`: Agent, revision, Configuration and Secret
//! admission (SPEC A1, A2, R1, R12, section 9).
//!
//! Every command calls one PostgreSQL function of `sql/V4__agent_admission.sql`, which
//! authorizes `--actor`, refuses with a one-line error and audits. This module only parses,
//! calls and prints; it decides nothing itself.

use super::{CliError, Globals};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;

#[derive(Subcommand)]
pub enum AgentAdmin {
    /// Agents and their revisions.
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Namespace-owned Configurations.
    #[command(subcommand)]
    Configuration(ConfigurationCommand),
    /// Namespace-owned Secret metadata (backend references, never values).
    #[command(subcommand)]
    Secret(SecretCommand),
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Harness {
    Codex,
    Openclaw,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Mode {
    Dedicated,
    Embedded,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Dedicated => "dedicated",
            Mode::Embedded => "embedded",
        }
    }
}

#[derive(Args)]
pub struct DeployArgs {
    namespace: String,
    agent: String,
    #[arg(long)]
    actor: String,
    #[arg(long)]
    configuration: String,
    #[arg(long, value_enum)]
    harness: Harness,
    #[arg(long, value_enum)]
    mode: Mode,
    #[arg(long)]
    harness_secret: String,
    /// The Compute id the installation runs (defaults to OCC_COMPUTE_DRIVER).
    #[arg(long)]
    compute_id: Option<String>,
    /// The Compute implementation (defaults to OCC_COMPUTE_DRIVER).
    #[arg(long)]
    compute_implementation: Option<String>,
}

#[derive(Subcommand)]
pub enum AgentCommand {
    /// Create an Agent and its service principal.
    Create {
        namespace: String,
        name: String,
        #[arg(long)]
        actor: String,
    },
    /// Admit a deployment: a new revision and its reconcile work.
    Deploy(DeployArgs),
    /// Stop the Agent's runtime.
    Stop {
        namespace: String,
        agent: String,
        #[arg(long)]
        actor: String,
    },
    /// Delete the Agent (again: retry a failed deletion).
    Delete {
        namespace: String,
        agent: String,
        #[arg(long)]
        actor: String,
    },
    /// Show the Agent and each revision's deployment status.
    Show { namespace: String, agent: String },
}

#[derive(Subcommand)]
pub enum ConfigurationCommand {
    /// Store a new generation of a Configuration from a JSON file.
    Put {
        namespace: String,
        id: String,
        #[arg(long)]
        file: std::path::PathBuf,
        #[arg(long)]
        actor: String,
    },
}

#[derive(Subcommand)]
pub enum SecretCommand {
    /// Register a Secret by its backend reference NAMESPACE/NAME/KEY.
    Create {
        namespace: String,
        id: String,
        #[arg(long)]
        backend_ref: String,
        #[arg(long)]
        actor: String,
    },
}

fn call(
    globals: &Globals,
    what: &str,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> Result<(), CliError> {
    let mut client = globals.connect()?;
    let row = client
        .query_one(sql, params)
        .map_err(|e| CliError::new(format!("{what} refused: {}", super::admin::db_message(&e))))?;
    let value: Value = row.get(0);
    globals.print(&value);
    Ok(())
}

fn compute_default() -> Option<String> {
    std::env::var("OCC_COMPUTE_DRIVER")
        .ok()
        .map(|v| v.trim().to_string())
}

pub fn run(globals: &Globals, command: AgentAdmin) -> Result<(), CliError> {
    match command {
        AgentAdmin::Agent(AgentCommand::Create {
            namespace,
            name,
            actor,
        }) => call(
            globals,
            "agent create",
            "SELECT occ.agent_create($1, $2, $3)",
            &[&namespace, &name, &actor],
        ),
        AgentAdmin::Agent(AgentCommand::Deploy(a)) => {
            let compute_id = a.compute_id.or_else(compute_default).ok_or_else(|| {
                CliError::config("--compute-id or OCC_COMPUTE_DRIVER is required for deploy")
            })?;
            let implementation = a
                .compute_implementation
                .or_else(compute_default)
                .unwrap_or_else(|| compute_id.clone());
            let harness = match a.harness {
                Harness::Codex => "codex",
                Harness::Openclaw => "openclaw",
            };
            let mode = a.mode.as_str();
            call(
                globals,
                "agent deploy",
                "SELECT occ.agent_deploy($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &a.namespace,
                    &a.agent,
                    &a.actor,
                    &a.configuration,
                    &harness,
                    &mode,
                    &a.harness_secret,
                    &compute_id,
                    &implementation,
                ],
            )
        }
        AgentAdmin::Agent(AgentCommand::Stop {
            namespace,
            agent,
            actor,
        }) => call(
            globals,
            "agent stop",
            "SELECT occ.agent_stop($1, $2, $3)",
            &[&namespace, &agent, &actor],
        ),
        AgentAdmin::Agent(AgentCommand::Delete {
            namespace,
            agent,
            actor,
        }) => call(
            globals,
            "agent delete",
            "SELECT occ.agent_delete($1, $2, $3)",
            &[&namespace, &agent, &actor],
        ),
        AgentAdmin::Agent(AgentCommand::Show { namespace, agent }) => call(
            globals,
            "agent show",
            "SELECT occ.agent_show($1, $2)",
            &[&namespace, &agent],
        ),
        AgentAdmin::Configuration(ConfigurationCommand::Put {
            namespace,
            id,
            file,
            actor,
        }) => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| CliError::new(format!("cannot read {}: {e}", file.display())))?;
            let document: Value = serde_json::from_str(&text)
                .map_err(|e| CliError::new(format!("{} is not JSON: {e}", file.display())))?;
            call(
                globals,
                "configuration put",
                "SELECT occ.configuration_put($1, $2, $3, $4)",
                &[&namespace, &id, &document, &actor],
            )
        }
        AgentAdmin::Secret(SecretCommand::Create {
            namespace,
            id,
            backend_ref,
            actor,
        }) => call(
            globals,
            "secret create",
            "SELECT occ.secret_create($1, $2, $3, $4)",
            &[&namespace, &id, &backend_ref, &actor],
        ),
    }
}
