//! `occ-worker admin agent create|deploy|stop|delete|show|list|sandbox-policy|workspace-setup|withdraw-credential`:
//! Agent and revision admission (SPEC A1, A2, R1, R12, section 9), deployment with a managed
//! account (M1, M4), credential sources (§13) or repository credentials (G8), an Agent's sandbox
//! policy (S3), its workspace setup (WS1) and the request to withdraw a credential source from
//! its runtimes (E15).
//!
//! Every command calls one PostgreSQL admission function (`occ.agent_*`,
//! `occ.credential_withdrawal_request`; their current bodies are in `sql/schema.sql`), which
//! authorizes `--actor`, refuses with a one-line error and audits. This module only parses,
//! calls and prints; it decides nothing itself and never touches a credential value.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::super::refusal::{refused, Inputs};
use super::super::wait::WaitArg;
use super::common::{
    call, call_value, compute_default, enqueue, in_namespace, installation_config,
    read_configuration, read_json_object, JsonFile, Mode,
};
use super::repository;
use clap::{Args, Subcommand, ValueEnum};
use occ_worker::compute::HarnessMode;
use occ_worker::operator;
use serde_json::Value;
use std::time::Instant;

#[derive(Clone, Copy, ValueEnum)]
pub enum Harness {
    Codex,
    Openclaw,
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
    /// How the Harness runs: dedicated or embedded. Optional for an Agent created with an
    /// --execution-mode (which it must match); required for one without (SPEC R1).
    #[arg(long, value_enum)]
    mode: Option<Mode>,
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
    /// No harness credential from OCC at all: the harness authenticates with what its runtime
    /// provides (SPEC M5; or one of the three above, only one).
    #[arg(long, group = "harness_auth")]
    runtime_auth: bool,
    /// A `tool` credential source the runtime gets as OCC_CREDENTIAL_<ID> (ID upper-cased,
    /// - as _), with the same checks; repeatable.
    #[arg(long = "tool-source", value_name = "ID")]
    tool_sources: Vec<String>,
    /// A repository the revision gets Git access to, through sessions the selected repository
    /// sender (repositorySender in OCC_INSTALLATION_CONFIG) opens: granted to the Namespace at
    /// the scope (read unless given; admin repository grant); repeatable (SPEC G8).
    #[arg(long = "repository", value_name = "REF[=read|write]")]
    repositories: Vec<String>,
    /// How long the revision keeps Git access: <n>m, <n>h or <n>d, 1m to 7d (default 8h).
    #[arg(long, value_name = "DURATION", conflicts_with = "standing")]
    repository_deadline: Option<String>,
    /// Keep Git access under the Agent's standing approval of the first --repository (admin
    /// repository approve) instead of a deadline.
    #[arg(long)]
    standing: bool,
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
        /// list removes the Agent's egress policy; `-` reads standard input.
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
pub enum WorkspaceSetupCommand {
    /// Set the Agent's workspace setup: a new id, not completed, carried by the next
    /// deployment or maintenance pass (nothing is queued).
    Put {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
        /// The setup document: one JSON object of at most 64 KiB, read by the setup
        /// container, so no secret value; `-` reads standard input.
        #[arg(long)]
        file: std::path::PathBuf,
        /// The identity making the change (authorized for `operate` on the Agent, and named
        /// in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// Show the Agent's workspace setup: its id, document and whether, when and by which
    /// revision it completed.
    Show {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
    },
    /// Remove the Agent's workspace setup.
    Clear {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
        /// The identity making the change (authorized for `operate` on the Agent, and named
        /// in the audit trail).
        #[arg(long)]
        actor: String,
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
        /// How every deployment of the Agent runs, fixed for the Agent's life: dedicated or
        /// embedded (SPEC R1). Without it, each deployment's --mode decides.
        #[arg(long, value_enum)]
        execution_mode: Option<Mode>,
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
    /// An Agent's workspace setup: the preparation of its persistent workspace that Compute
    /// runs before the runtime serves (SPEC §18).
    #[command(subcommand)]
    WorkspaceSetup(WorkspaceSetupCommand),
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

pub fn run(globals: &Globals, command: AgentCommand) -> Result<(), CliError> {
    match command {
        AgentCommand::Create {
            namespace,
            name,
            actor,
            execution_mode,
        } => {
            let mode = execution_mode.map(Mode::as_str);
            call(
                globals,
                "agent create",
                &[
                    ("NAMESPACE", &namespace),
                    ("NAME", &name),
                    ("--actor", &actor),
                    ("--execution-mode", mode.unwrap_or_default()),
                ],
                "SELECT occ.agent_create($1, $2, $3, $4)",
                &[&namespace, &name, &actor, &mode],
            )
        }
        AgentCommand::Deploy(a) => deploy(globals, *a),
        AgentCommand::Stop {
            namespace,
            agent,
            actor,
            wait,
        } => enqueue(
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
        AgentCommand::Delete {
            namespace,
            agent,
            actor,
            wait,
        } => enqueue(
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
        AgentCommand::Show { namespace, agent } => show(globals, &namespace, &agent),
        AgentCommand::List { namespace, page } => list(globals, &namespace, page),
        AgentCommand::SandboxPolicy(command) => sandbox_policy(globals, command),
        AgentCommand::WorkspaceSetup(command) => workspace_setup(globals, command),
        AgentCommand::WithdrawCredential {
            namespace,
            agent,
            source,
            actor,
            wait,
        } => withdraw(
            globals,
            Request {
                namespace: &namespace,
                agent: &agent,
                source: &source,
                actor: &actor,
                wait,
            },
        ),
    }
}

/// `agent deploy`: pins the selections admission freezes into the revision (the Sandbox
/// Driver, S2; the Credential Gateway, §13), refuses a Harness and mode production does not
/// run, then admits the revision and its reconcile work.
fn deploy(globals: &Globals, a: DeployArgs) -> Result<(), CliError> {
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
    // SPEC G8: the repositories, checked here so bad input is said in one line, and the
    // selected repository sender's id; admission decides the rest.
    let repositories =
        repository_bindings(&a.repositories, a.standing, a.repository_deadline.is_some())?;
    let deadline = a
        .repository_deadline
        .as_deref()
        .map(repository::parse_deadline)
        .transpose()?
        .map(|minutes| format!("{minutes} minutes"));
    let sender = installation.repository_sender.map(|s| s.id);
    // A production installation runs dedicated Codex and embedded OpenClaw only
    //; its workers would fail any other pair.
    let production = std::env::var("OCC_WORKER_MODE").is_ok_and(|m| m.trim() == "production");
    // SPEC R1: without --mode, admission takes the Agent's own execution mode (and refuses an
    // Agent without one); production's check reads it first.
    let mode = match a.mode {
        Some(mode) => Some(mode.harness_mode()),
        None if production => agent_execution_mode(globals, &a.namespace, &a.agent)?,
        None => None,
    };
    let refused_in_production = mode.filter(|&mode| {
        production && !occ_worker::compute::PRODUCTION_HARNESSES.contains(&(harness, mode))
    });
    if let Some(mode) = refused_in_production {
        let mode = mode.as_str();
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
                p_tool_sources => $14, p_credential_gateway_id => $15,
                p_runtime_auth => $16, p_repositories => $17,
                p_repository_deadline => $18::text::interval, p_standing => $19,
                p_repository_sender_id => $20)",
        &[
            &a.namespace,
            &a.agent,
            &a.actor,
            &a.configuration,
            &harness,
            &mode.map(HarnessMode::as_str),
            &a.harness_secret,
            &compute_id,
            &implementation,
            &a.service_account,
            &sandbox_id,
            &sandbox_facets,
            &a.credential_source,
            &a.tool_sources,
            &gateway,
            &a.runtime_auth,
            &repositories,
            &deadline,
            &a.standing,
            &sender,
        ],
        (a.wait, "reconcile"),
    )
}

/// The Agent's explicit execution mode (SPEC R1), none when it has none; an Agent that does
/// not exist is refused as `agent deploy` would refuse it.
fn agent_execution_mode(
    globals: &Globals,
    namespace: &str,
    agent: &str,
) -> Result<Option<HarnessMode>, CliError> {
    let mut client = globals.connect()?;
    let inputs = Inputs {
        what: "agent deploy",
        args: &[("NAMESPACE", namespace), ("AGENT", agent)],
    };
    let shown: Value = client
        .query_one("SELECT occ.agent_show($1, $2)", &[&namespace, &agent])
        .map_err(|e| refused(&inputs, &e))?
        .get(0);
    Ok(match shown["executionMode"].as_str() {
        Some("dedicated") => Some(HarnessMode::Dedicated),
        Some("embedded") => Some(HarnessMode::Embedded),
        _ => None,
    })
}

/// The deployment's `--repository REF[=read|write]` list as admission takes it
/// (`[{repositoryRef, scope}]`), or none; a malformed one, a REF named twice, or
/// `--standing`/`--repository-deadline` without a repository is refused in one line (exit 2).
fn repository_bindings(
    repositories: &[String],
    standing: bool,
    deadline: bool,
) -> Result<Option<Value>, CliError> {
    if repositories.is_empty() {
        if standing || deadline {
            let flag = if standing {
                "--standing"
            } else {
                "--repository-deadline"
            };
            return Err(CliError::config(format!(
                "agent deploy refused: {flag} needs a --repository"
            )));
        }
        return Ok(None);
    }
    let mut bindings = Vec::with_capacity(repositories.len());
    for typed in repositories {
        let (repository, scope) = repository::parse_binding(typed)?;
        if bindings
            .iter()
            .any(|b: &Value| b["repositoryRef"] == repository.as_str())
        {
            return Err(CliError::config(format!(
                "agent deploy refused: --repository {repository} is given twice"
            )));
        }
        bindings.push(serde_json::json!({"repositoryRef": repository, "scope": scope.as_str()}));
    }
    Ok(Some(Value::Array(bindings)))
}

/// `agent list`: the Namespace's Agents with their latest revision's status.
fn list(globals: &Globals, ns: &str, page: Page) -> Result<(), CliError> {
    let mut c = globals.connect()?;
    let v = in_namespace(&mut c, "agent list", ns, operator::agent_list)?;
    globals.print_table(
        &page.first(v),
        &[
            ("NAME", "name"),
            ("ID", "id"),
            ("STATUS", "status"),
            ("DESIRED", "desiredRuntimeState"),
            ("REVISION", "latestRevision"),
            ("STATE", "latestState"),
            ("REASON", "latestReasonCode"),
        ],
    );
    Ok(())
}

/// `agent show`: the Agent, each revision's deployment status, and what its work waits for
/// right now (`waitingFor`: the work, the code its latest attempt reported, since when and
/// the attempt, and the revisions' outstanding repository cleanup, SPEC G1; none when nothing
/// is unfinished).
fn show(globals: &Globals, namespace: &str, agent: &str) -> Result<(), CliError> {
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
    let cleanup = occ_worker::operator::repository_cleanup_outstanding(&mut client, &ns_id, &id)
        .map_err(|e| refused(&inputs, &e))?;
    if cleanup.as_array().is_some_and(|c| !c.is_empty()) && value["waitingFor"].is_object() {
        value["waitingFor"]["repositoryCleanup"] = cleanup;
    }
    globals.print(&value);
    Ok(())
}

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

/// The largest workspace setup document (SPEC WS1).
pub const WORKSPACE_SETUP_LIMIT: u64 = 64 * 1024;

/// `agent workspace-setup put|show|clear` (SPEC WS1): the file is checked here, then
/// admitted; nothing is queued.
fn workspace_setup(globals: &Globals, command: WorkspaceSetupCommand) -> Result<(), CliError> {
    match command {
        WorkspaceSetupCommand::Put {
            namespace,
            agent,
            file,
            actor,
        } => {
            let document = read_json_object(
                &file,
                JsonFile {
                    what: "a workspace setup",
                    limit: WORKSPACE_SETUP_LIMIT,
                    shown_limit: "64 KiB (65536 bytes)",
                },
            )?;
            let shown = file.display().to_string();
            call(
                globals,
                "agent workspace-setup put",
                &[
                    ("NAMESPACE", &namespace),
                    ("AGENT", &agent),
                    ("--file", &shown),
                    ("--actor", &actor),
                ],
                "SELECT occ.workspace_setup_put($1, $2, $3, $4)",
                &[&actor, &namespace, &agent, &document],
            )
        }
        WorkspaceSetupCommand::Show { namespace, agent } => call(
            globals,
            "agent workspace-setup show",
            &[("NAMESPACE", &namespace), ("AGENT", &agent)],
            "SELECT occ.workspace_setup_show($1, $2)",
            &[&namespace, &agent],
        ),
        WorkspaceSetupCommand::Clear {
            namespace,
            agent,
            actor,
        } => call(
            globals,
            "agent workspace-setup clear",
            &[
                ("NAMESPACE", &namespace),
                ("AGENT", &agent),
                ("--actor", &actor),
            ],
            "SELECT occ.workspace_setup_clear($1, $2, $3)",
            &[&actor, &namespace, &agent],
        ),
    }
}

/// What `admin agent withdraw-credential` was given.
struct Request<'a> {
    namespace: &'a str,
    agent: &'a str,
    source: &'a str,
    actor: &'a str,
    wait: WaitArg,
}

/// Requests the withdrawal (SPEC E15) and prints what it admitted; with `--wait`, follows each
/// enqueued work until it ends, the first that does not succeed ending the wait, all within
/// one timeout.
fn withdraw(globals: &Globals, r: Request) -> Result<(), CliError> {
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
        super::super::wait::follow(globals, what, key, Some(left))?;
    }
    Ok(())
}
