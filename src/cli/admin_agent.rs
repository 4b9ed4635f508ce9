//! `occ-worker admin agent|configuration|secret|service-account …`: Agent, revision,
//! Configuration, Secret and managed-account admission (SPEC A1, A2, R1, R12, M1, M4, section 9),
//! deployment with credential sources (SPEC §13) and their withdrawal (`admin_withdrawal`).
//!
//! Every command calls one PostgreSQL admission function (`occ.agent_*`, `occ.configuration_*`,
//! `occ.secret_*`; their current bodies are in `sql/schema.sql`), which authorizes `--actor`,
//! refuses with a one-line error and audits. This module only parses, calls and prints; it
//! decides nothing itself.

use super::admin::{call, enqueue, list};
use super::admin_read::{self, Read};
use super::refusal::{refused, Inputs};
use super::wait::WaitArg;
use super::{CliError, Globals, Page};
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
    /// Namespace-owned managed ChatGPT accounts: an access-token reference and a backend
    /// binding (SPEC M1, M4).
    #[command(subcommand)]
    ServiceAccount(ServiceAccountCommand),
    /// Namespace-owned credential sources: model keys and tool credentials a Credential
    /// Gateway attaches (SPEC §13).
    #[command(subcommand)]
    CredentialSource(super::admin_credential::CredentialSourceCommand),
    /// Credential withdrawals: one row per revision and source an operator asked to withdraw
    /// (SPEC E15).
    #[command(subcommand)]
    Withdrawal(super::admin_withdrawal::WithdrawalCommand),
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
#[group(id = "harness_auth", required = true, multiple = false)]
pub struct DeployArgs {
    /// The Namespace id or name.
    namespace: String,
    /// The Agent id or name.
    agent: String,
    /// The identity making the change (authorized, and named in the audit trail).
    #[arg(long)]
    actor: String,
    /// The Configuration the revision runs with (its id in the Namespace).
    #[arg(long)]
    configuration: String,
    /// The Harness to run.
    #[arg(long, value_enum)]
    harness: Harness,
    /// How the Harness runs: dedicated or embedded.
    #[arg(long, value_enum)]
    mode: Mode,
    /// The Secret holding the harness API key (the `secret` harness auth; or
    /// --service-account or --credential-source, only one).
    #[arg(long, value_name = "SECRET", group = "harness_auth")]
    harness_secret: Option<String>,
    /// A managed ChatGPT account instead: issued, bound to a configured backend, and readable
    /// by `--actor` (SPEC M1; or --harness-secret or --credential-source, only one).
    #[arg(long, value_name = "ACCOUNT", group = "harness_auth")]
    service_account: Option<String>,
    /// A `model_key` credential source instead, attached by the selected Credential Gateway
    /// (credentialGateway in OCC_INSTALLATION_CONFIG): ready, owned by that gateway, and
    /// operated by `--actor` (SPEC §13; or --harness-secret or --service-account, only one).
    #[arg(long, value_name = "ID", group = "harness_auth")]
    credential_source: Option<String>,
    /// A `tool` credential source the runtime gets as OCC_CREDENTIAL_<ID> (ID upper-cased,
    /// - as _), with the same checks; repeatable.
    #[arg(long = "tool-source", value_name = "ID")]
    tool_sources: Vec<String>,
    /// The Compute id the installation runs (defaults to OCC_COMPUTE_DRIVER).
    #[arg(long)]
    compute_id: Option<String>,
    /// The Compute implementation (defaults to OCC_COMPUTE_DRIVER).
    #[arg(long)]
    compute_implementation: Option<String>,
    #[command(flatten)]
    wait: WaitArg,
}

#[derive(Subcommand)]
pub enum SandboxPolicyCommand {
    /// Admit a new generation of the Agent's egress allowlist, within the Installation's
    /// `sandboxNetworkPolicyCeiling` (OCC_INSTALLATION_CONFIG), and its work.
    Put {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
        /// The policy: {"egress": [{"cidr": "10.0.0.0/8", "ports": [443]}, ...]}; an empty
        /// list removes the Agent's egress policy.
        #[arg(long)]
        file: std::path::PathBuf,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
        #[command(flatten)]
        wait: WaitArg,
    },
    /// Show the Agent's sandbox policy: generation, egress, state and code.
    Show {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
    },
}

#[derive(Subcommand)]
pub enum AgentCommand {
    /// Create an Agent and its service principal.
    Create {
        /// The Namespace id or name.
        namespace: String,
        /// The new Agent's name.
        name: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// Admit a deployment: a new revision and its reconcile work.
    Deploy(Box<DeployArgs>),
    /// Stop the Agent's runtime.
    Stop {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
        #[command(flatten)]
        wait: WaitArg,
    },
    /// Delete the Agent (again: retry a failed deletion).
    Delete {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
        #[command(flatten)]
        wait: WaitArg,
    },
    /// An Agent's sandbox policy: its egress allowlist (SPEC S3).
    #[command(subcommand)]
    SandboxPolicy(SandboxPolicyCommand),
    /// Withdraw a credential source from every revision of the Agent that may still hold a
    /// runtime and was admitted with it, and queue the work that detaches it (SPEC E15).
    WithdrawCredential {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
        /// The credential source's id.
        source: String,
        /// The identity making the request (authorized for `operate` on the Agent, named in
        /// the audit trail, and re-authorized by every attempt of the work).
        #[arg(long)]
        actor: String,
        #[command(flatten)]
        wait: WaitArg,
    },
    /// Show the Agent and each revision's deployment status.
    Show {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
    },
    /// List the Namespace's Agents with their latest revision's status.
    List {
        /// The Namespace id or name.
        namespace: String,
        #[command(flatten)]
        page: Page,
    },
}

#[derive(Subcommand)]
pub enum ConfigurationCommand {
    /// Store a new generation of a Configuration from a JSON file.
    Put {
        /// The Namespace id or name.
        namespace: String,
        /// The Configuration id.
        id: String,
        /// A JSON object, at most 1 MiB.
        #[arg(long)]
        file: std::path::PathBuf,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// List the Namespace's Configurations (id, generation, last change).
    List {
        /// The Namespace id or name.
        namespace: String,
        #[command(flatten)]
        page: Page,
    },
    /// Show one Configuration with its document.
    Show {
        /// The Namespace id or name.
        namespace: String,
        /// The Configuration id.
        id: String,
    },
}

#[derive(Subcommand)]
pub enum ServiceAccountCommand {
    /// Create a service account, or issue it again, with its access token's Secret reference
    /// SECRET_NAME/KEY (a Kubernetes Secret in the Agent's namespace; never a value).
    Create {
        /// The Namespace id or name.
        namespace: String,
        /// The service account id.
        id: String,
        /// SECRET_NAME/KEY: the Kubernetes Secret and key holding the access token, in the
        /// Agent's namespace (a reference, never the token).
        #[arg(long)]
        access_token: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// Bind an issued account to a configured chatgpt backend, its driver and workspace.
    Bind {
        /// The Namespace id or name.
        namespace: String,
        /// The service account id.
        id: String,
        /// A configured chatgpt backend (`admin backend list`).
        #[arg(long)]
        backend: String,
        /// The driver id of the binding; each revision freezes it at admission.
        #[arg(long)]
        driver: String,
        /// The workspace id the account works in (OCC_HARNESS_WORKSPACE_ID in the harness).
        #[arg(long)]
        workspace: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// List the Namespace's service accounts with their credential and binding.
    List {
        /// The Namespace id or name.
        namespace: String,
        #[command(flatten)]
        page: Page,
    },
    /// Show one service account.
    Show {
        /// The Namespace id or name.
        namespace: String,
        /// The service account id.
        id: String,
    },
}

#[derive(Subcommand)]
pub enum SecretCommand {
    /// Register a Secret by its backend reference NAMESPACE/NAME/KEY.
    Create {
        /// The Namespace id or name.
        namespace: String,
        /// The new Secret's id.
        id: String,
        /// NAMESPACE/NAME/KEY of the Kubernetes Secret. NAMESPACE must be the Namespace's own
        /// Kubernetes namespace, which `admin namespace show` prints as kubernetesNamespace
        /// (the driver's namespacePrefix and the Namespace id, `occ-ns-…` by default, or the
        /// adopted one).
        #[arg(long)]
        backend_ref: String,
        /// The Secret Driver that owns the Secret (default: the Installation's selection).
        #[arg(long)]
        driver: Option<String>,
        /// The backend object's uid (default: a generated one).
        #[arg(long)]
        backend_uid: Option<String>,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// List the Namespace's Secrets (backend references, never values).
    List {
        /// The Namespace id or name.
        namespace: String,
        #[command(flatten)]
        page: Page,
    },
}

/// The Installation configuration file the worker reads (`OCC_INSTALLATION_CONFIG`), for the
/// selections admission pins (SPEC S2, S3); nothing selected when the variable is unset. The
/// file is validated for the Compute Driver `implementation` names.
pub fn installation_config(
    implementation: Option<&str>,
) -> Result<occ_worker::installation::Installation, CliError> {
    use occ_worker::config::DriverKind;
    use occ_worker::installation::{Installation, VARIABLE};
    let Some(path) = std::env::var_os(VARIABLE).filter(|p| !p.is_empty()) else {
        return Ok(Installation::default());
    };
    let compute = match implementation.map(str::trim) {
        Some("docker") => DriverKind::Docker,
        _ => DriverKind::Kubernetes,
    };
    Installation::load(std::path::Path::new(&path), compute).map_err(|e| {
        CliError::config_lines(
            e.to_string()
                .lines()
                .map(|line| format!("invalid configuration: {line}")),
        )
    })
}

fn compute_default() -> Option<String> {
    std::env::var("OCC_COMPUTE_DRIVER")
        .ok()
        .map(|v| v.trim().to_string())
}

pub fn run(globals: &Globals, command: AgentAdmin) -> Result<(), CliError> {
    match command {
        AgentAdmin::Agent(AgentCommand::List { namespace, page }) => {
            admin_read::run(globals, Read::Agents(&namespace), page)
        }
        AgentAdmin::Secret(SecretCommand::List { namespace, page }) => {
            admin_read::run(globals, Read::Secrets(&namespace), page)
        }
        AgentAdmin::Configuration(ConfigurationCommand::List { namespace, page }) => {
            admin_read::run(globals, Read::Configurations(&namespace), page)
        }
        AgentAdmin::Configuration(ConfigurationCommand::Show { namespace, id }) => admin_read::run(
            globals,
            Read::Configuration(&namespace, &id),
            Page::default(),
        ),
        AgentAdmin::Agent(AgentCommand::Create {
            namespace,
            name,
            actor,
        }) => call(
            globals,
            "agent create",
            &[
                ("NAMESPACE", &namespace),
                ("NAME", &name),
                ("--actor", &actor),
            ],
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
            // SPEC S2: the selected Sandbox Driver's id and facets are pinned at admission;
            // SPEC §13: the selected Credential Gateway's id is the sources' owner.
            let installation = installation_config(Some(&implementation))?;
            let gateway = installation.credential_gateway.map(|g| g.id);
            let sandbox = installation.sandbox;
            let sandbox_id = sandbox.as_ref().map(|s| s.id.clone());
            let sandbox_facets = sandbox.map(|s| serde_json::json!(s.facets));
            let harness = match a.harness {
                Harness::Codex => "codex",
                Harness::Openclaw => "openclaw",
            };
            let mode = a.mode.as_str();
            // A production installation runs dedicated Codex and embedded OpenClaw only
            //; its workers would fail any other pair.
            let production =
                std::env::var("OCC_WORKER_MODE").is_ok_and(|m| m.trim() == "production");
            if production && !occ_worker::compute::PRODUCTION_HARNESSES.contains(&(harness, mode)) {
                return Err(CliError::config(format!(
                    "--harness {harness} --mode {mode} is refused in production \
                     (OCC_WORKER_MODE=production): production runs --harness codex --mode dedicated \
                     and --harness openclaw --mode embedded only"
                )));
            }
            enqueue(
                globals,
                "agent deploy",
                &[
                    ("NAMESPACE", &a.namespace),
                    ("AGENT", &a.agent),
                    ("--configuration", &a.configuration),
                    (
                        "--harness-secret",
                        a.harness_secret.as_deref().unwrap_or_default(),
                    ),
                    (
                        "--service-account",
                        a.service_account.as_deref().unwrap_or_default(),
                    ),
                    (
                        "--credential-source",
                        a.credential_source.as_deref().unwrap_or_default(),
                    ),
                    ("--compute-id", &compute_id),
                    ("--actor", &a.actor),
                ],
                "SELECT occ.agent_deploy($1, $2, $3, $4, $5, $6, $7, $8, $9,
                    p_service_account => $10, p_sandbox_driver_id => $11,
                    p_sandbox_facets => $12, p_credential_source => $13,
                    p_tool_sources => $14, p_credential_gateway_id => $15)",
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
                    &a.service_account,
                    &sandbox_id,
                    &sandbox_facets,
                    &a.credential_source,
                    &a.tool_sources,
                    &gateway,
                ],
                (a.wait, "reconcile"),
            )
        }
        AgentAdmin::Agent(AgentCommand::Stop {
            namespace,
            agent,
            actor,
            wait,
        }) => enqueue(
            globals,
            "agent stop",
            &[
                ("NAMESPACE", &namespace),
                ("AGENT", &agent),
                ("--actor", &actor),
            ],
            "SELECT occ.agent_stop($1, $2, $3)",
            &[&namespace, &agent, &actor],
            (wait, "stop"),
        ),
        AgentAdmin::Agent(AgentCommand::Delete {
            namespace,
            agent,
            actor,
            wait,
        }) => enqueue(
            globals,
            "agent delete",
            &[
                ("NAMESPACE", &namespace),
                ("AGENT", &agent),
                ("--actor", &actor),
            ],
            "SELECT occ.agent_delete($1, $2, $3)",
            &[&namespace, &agent, &actor],
            (wait, "delete"),
        ),
        AgentAdmin::Agent(AgentCommand::Show { namespace, agent }) => {
            agent_show(globals, &namespace, &agent)
        }
        AgentAdmin::Agent(AgentCommand::SandboxPolicy(command)) => sandbox_policy(globals, command),
        AgentAdmin::Agent(AgentCommand::WithdrawCredential {
            namespace,
            agent,
            source,
            actor,
            wait,
        }) => super::admin_withdrawal::withdraw(
            globals,
            super::admin_withdrawal::Request {
                namespace: &namespace,
                agent: &agent,
                source: &source,
                actor: &actor,
                wait,
            },
        ),
        AgentAdmin::Withdrawal(command) => super::admin_withdrawal::run(globals, command),
        AgentAdmin::Configuration(ConfigurationCommand::Put {
            namespace,
            id,
            file,
            actor,
        }) => {
            let document = read_configuration(&file)?;
            call(
                globals,
                "configuration put",
                &[
                    ("NAMESPACE", &namespace),
                    ("ID", &id),
                    ("--file", &file.display().to_string()),
                    ("--actor", &actor),
                ],
                "SELECT occ.configuration_put($1, $2, $3, $4)",
                &[&namespace, &id, &document, &actor],
            )
        }
        AgentAdmin::ServiceAccount(cmd) => service_account(globals, cmd),
        AgentAdmin::CredentialSource(cmd) => super::admin_credential::run(globals, cmd),
        AgentAdmin::Secret(SecretCommand::Create {
            namespace,
            id,
            backend_ref,
            driver,
            backend_uid,
            actor,
        }) => call(
            globals,
            "secret create",
            &[
                ("NAMESPACE", &namespace),
                ("ID", &id),
                ("--backend-ref", &backend_ref),
                ("--driver", driver.as_deref().unwrap_or_default()),
                ("--backend-uid", backend_uid.as_deref().unwrap_or_default()),
                ("--actor", &actor),
            ],
            "SELECT occ.secret_create($1, $2, $3, $4, $5, $6)",
            &[&namespace, &id, &backend_ref, &actor, &driver, &backend_uid],
        ),
    }
}

/// `agent show`: the Agent, each revision's deployment status, and what its work waits for
/// right now (`waitingFor`: the work, the code its latest attempt reported, since when and
/// the attempt; none when nothing is unfinished).
fn agent_show(globals: &Globals, namespace: &str, agent: &str) -> Result<(), CliError> {
    let mut client = globals.connect()?;
    let inputs = Inputs {
        what: "agent show",
        args: &[("NAMESPACE", namespace), ("AGENT", agent)],
    };
    let row = client
        .query_one("SELECT occ.agent_show($1, $2)", &[&namespace, &agent])
        .map_err(|e| refused(&inputs, &e))?;
    let mut value: Value = row.get(0);
    let (ns_id, id) = (
        value["namespaceId"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        value["id"].as_str().unwrap_or_default().to_string(),
    );
    value["waitingFor"] =
        serde_json::json!(
            occ_worker::operator::work_waiting(&mut client, &ns_id, Some(&id))
                .map_err(|e| refused(&inputs, &e))?
        );
    globals.print(&value);
    Ok(())
}

/// `admin service-account …`: each calls one `occ.service_account_*` function (`sql/schema.sql`).
fn service_account(globals: &Globals, command: ServiceAccountCommand) -> Result<(), CliError> {
    match command {
        ServiceAccountCommand::Create {
            namespace,
            id,
            access_token,
            actor,
        } => call(
            globals,
            "service-account create",
            &[
                ("NAMESPACE", &namespace),
                ("ID", &id),
                ("--access-token", &access_token),
                ("--actor", &actor),
            ],
            "SELECT occ.service_account_create($1, $2, $3, $4)",
            &[&namespace, &id, &access_token, &actor],
        ),
        ServiceAccountCommand::Bind {
            namespace,
            id,
            backend,
            driver,
            workspace,
            actor,
        } => call(
            globals,
            "service-account bind",
            &[
                ("NAMESPACE", &namespace),
                ("ID", &id),
                ("--backend", &backend),
                ("--driver", &driver),
                ("--workspace", &workspace),
                ("--actor", &actor),
            ],
            "SELECT occ.service_account_bind($1, $2, $3, $4, $5, $6)",
            &[&namespace, &id, &backend, &driver, &workspace, &actor],
        ),
        ServiceAccountCommand::List { namespace, page } => list(
            globals,
            "service-account list",
            "SELECT occ.service_account_list($1)",
            &[&namespace],
            page,
            &[
                ("ID", "id"),
                ("ISSUED", "issued"),
                ("ACCESS TOKEN", "/credential/secretRef/name"),
                ("KEY", "/credential/secretRef/key"),
                ("BACKEND", "/backendBinding/backendId"),
                ("DRIVER", "/backendBinding/driverId"),
                ("WORKSPACE", "/backendBinding/workspaceId"),
                ("UPDATED", "updatedAt"),
            ],
        ),
        ServiceAccountCommand::Show { namespace, id } => call(
            globals,
            "service-account show",
            &[("NAMESPACE", &namespace), ("ID", &id)],
            "SELECT occ.service_account_show($1, $2)",
            &[&namespace, &id],
        ),
    }
}

/// The largest Configuration file `configuration put` reads (docs/operating.md).
pub const CONFIGURATION_FILE_LIMIT: u64 = 1024 * 1024;

/// Reads a Configuration document: at most `CONFIGURATION_FILE_LIMIT` bytes of JSON. Every
/// refusal is bad input (exit 2) naming the file.
/// `agent sandbox-policy put|show` (SPEC S3): the file is validated here, then admitted with
/// the Installation's ceiling, which admission holds it to.
fn sandbox_policy(globals: &Globals, command: SandboxPolicyCommand) -> Result<(), CliError> {
    match command {
        SandboxPolicyCommand::Put {
            namespace,
            agent,
            file,
            actor,
            wait,
        } => {
            let document = read_configuration(&file)?;
            let shown = file.display().to_string();
            let egress = document
                .get("egress")
                .filter(|_| document.as_object().is_some_and(|o| o.len() == 1))
                .ok_or_else(|| {
                    CliError::config(format!(
                        "--file {shown}: a sandbox policy is {{\"egress\": [{{\"cidr\": NETWORK, \"ports\": [PORT, ...]}}, ...]}}"
                    ))
                })?;
            let egress =
                occ_worker::installation::parse_egress(&egress.to_string()).map_err(|e| {
                    CliError::config_lines(
                        e.problems().iter().map(|p| format!("--file {shown}: {p}")),
                    )
                })?;
            let ceiling =
                installation_config(compute_default().as_deref())?.sandbox_network_policy_ceiling;
            let policy = serde_json::json!({
                "egress": occ_worker::installation::egress_json(&egress)
            });
            let ceiling = occ_worker::installation::egress_json(&ceiling);
            enqueue(
                globals,
                "agent sandbox-policy put",
                &[
                    ("NAMESPACE", &namespace),
                    ("AGENT", &agent),
                    ("--file", &shown),
                    ("--actor", &actor),
                ],
                "SELECT occ.agent_sandbox_policy_put($1, $2, $3, $4, $5)",
                &[&actor, &namespace, &agent, &policy, &ceiling],
                (wait, "sandbox_policy"),
            )
        }
        SandboxPolicyCommand::Show { namespace, agent } => call(
            globals,
            "agent sandbox-policy show",
            &[("NAMESPACE", &namespace), ("AGENT", &agent)],
            "SELECT occ.agent_sandbox_policy_show($1, $2)",
            &[&namespace, &agent],
        ),
    }
}

fn read_configuration(file: &std::path::Path) -> Result<Value, CliError> {
    use std::io::Read;
    let shown = file.display();
    let opened = std::fs::File::open(file)
        .map_err(|e| CliError::config(format!("--file {shown}: cannot read it: {e}")))?;
    // Read one byte past the limit rather than trusting the size a special file reports.
    let mut text = Vec::new();
    opened
        .take(CONFIGURATION_FILE_LIMIT + 1)
        .read_to_end(&mut text)
        .map_err(|e| CliError::config(format!("--file {shown}: cannot read it: {e}")))?;
    if text.len() as u64 > CONFIGURATION_FILE_LIMIT {
        return Err(CliError::config(format!(
            "--file {shown} is larger than 1 MiB (1048576 bytes), the limit for a Configuration"
        )));
    }
    let document: Value = serde_json::from_slice(&text).map_err(|e| {
        CliError::config(format!(
            "--file {shown} is not JSON: {e} (a Configuration is one JSON object)"
        ))
    })?;
    if !document.is_object() {
        return Err(CliError::config(format!(
            "--file {shown} holds JSON but not an object: a Configuration is one JSON object"
        )));
    }
    Ok(document)
}
