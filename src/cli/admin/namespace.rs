//! `occ-worker admin namespace create|delete|list|show` (SPEC N1, N4): Namespace admission
//! through `occ.namespace_create` and `occ.namespace_delete`, which authorize `--actor`,
//! refuse with a one-line error and audit, and the reads an operator follows a Namespace by.
//! It decides nothing itself.

use super::super::error::CliError;
use super::super::globals::Globals;
use super::super::refusal::{refused, Inputs};
use super::super::wait::WaitArg;
use super::common::enqueue;
use clap::Subcommand;
use serde_json::{json, Value};

#[derive(Subcommand)]
pub enum NamespaceCommand {
    /// Admit a Namespace: stores it provisioning and enqueues its ensure work.
    Create {
        /// The new Namespace's name.
        name: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
        /// The exact existing Kubernetes namespace to adopt (needs Installation administer).
        #[arg(long)]
        existing_namespace: Option<String>,
        #[command(flatten)]
        wait: WaitArg,
    },
    /// Delete an empty Namespace: stores it deleting and enqueues its teardown.
    Delete {
        /// The Namespace id or name.
        namespace: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
        #[command(flatten)]
        wait: WaitArg,
    },
    /// List live Namespaces by name.
    List {
        /// At most this many Namespaces.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i64).range(1..))]
        limit: i64,
    },
    /// Show one live Namespace with its lifecycle work.
    Show {
        /// The Namespace id or name.
        namespace: String,
    },
}

pub fn run(globals: &Globals, command: NamespaceCommand) -> Result<(), CliError> {
    match command {
        NamespaceCommand::Create {
            name,
            actor,
            existing_namespace,
            wait,
        } => {
            refuse_adoption_on_docker(existing_namespace.as_deref())?;
            enqueue(
                globals,
                "namespace create",
                &[("NAME", &name), ("--actor", &actor)],
                "SELECT occ.namespace_create($1, $2, $3)",
                &[&actor, &name, &existing_namespace],
                (wait, "ensure"),
            )
        }
        NamespaceCommand::Delete {
            namespace,
            actor,
            wait,
        } => enqueue(
            globals,
            "namespace delete",
            &[("NAMESPACE", &namespace), ("--actor", &actor)],
            "SELECT occ.namespace_delete($1, $2)",
            &[&actor, &namespace],
            (wait, "delete"),
        ),
        NamespaceCommand::List { limit } => namespace_list(globals, limit),
        NamespaceCommand::Show { namespace } => namespace_show(globals, &namespace),
    }
}

/// SPEC C2: the Docker driver adopts no namespace (`EXISTING_NAMESPACE_UNSUPPORTED`). Refused
/// at admission when `OCC_COMPUTE_DRIVER` says Docker, instead of a Namespace that fails in
/// the background and must then be deleted.
fn refuse_adoption_on_docker(existing: Option<&str>) -> Result<(), CliError> {
    match (existing, super::common::compute_default().as_deref()) {
        (Some(existing), Some("docker")) => Err(CliError::config(format!(
            "namespace create refused: --existing-namespace {existing} adopts a Kubernetes \
             namespace, which the Docker Compute Driver (OCC_COMPUTE_DRIVER=docker) cannot \
             (EXISTING_NAMESPACE_UNSUPPORTED): leave it out"
        ))),
        _ => Ok(()),
    }
}

/// With the Kubernetes driver's settings (`OCC_KUBERNETES_CONFIG`): the Kubernetes namespace of
/// the Namespace `value` (`occ.namespace_show`'s answer), the adopted one or the driver's
/// prefix and its id, and the settings.
pub fn kubernetes_namespace(
    value: &Value,
) -> Result<Option<(String, occ_worker::compute::kubernetes::settings::Settings)>, CliError> {
    let Some(path) = std::env::var_os("OCC_KUBERNETES_CONFIG") else {
        return Ok(None);
    };
    let settings =
        occ_worker::compute::kubernetes::settings::Settings::load(std::path::Path::new(&path))
            .map_err(|e| CliError::config(format!("invalid configuration: {e}")))?;
    let k8s = match value["existingNamespace"].as_str() {
        Some(adopted) => adopted.to_string(),
        None => occ_worker::compute::kubernetes::names::namespace_name(
            &settings.namespace_prefix,
            value["id"].as_str().unwrap_or_default(),
        ),
    };
    Ok(Some((k8s, settings)))
}

/// `namespace list`: one line per live Namespace, by name, with what its work waits for.
fn namespace_list(globals: &Globals, limit: i64) -> Result<(), CliError> {
    let mut client = globals.connect()?;
    let inputs = Inputs {
        what: "namespace list",
        args: &[],
    };
    let row = client
        .query_one("SELECT occ.namespace_list()", &[])
        .map_err(|e| refused(&inputs, &e))?;
    let mut value: Value = row.get(0);
    if let Some(items) = value.as_array_mut() {
        items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        for ns in items.iter_mut() {
            let waiting = ns["work"]
                .as_array()
                .and_then(|w| {
                    w.iter()
                        .find(|w| matches!(w["state"].as_str(), Some("queued" | "claimed")))
                })
                .map(|w| match w["reasonCode"].as_str() {
                    Some(code) => format!("{} {code}", w["state"].as_str().unwrap_or_default()),
                    None => w["state"].as_str().unwrap_or_default().to_string(),
                });
            if !globals.json {
                ns["waiting"] = json!(waiting);
            }
        }
    }
    globals.print_table(
        &value,
        &[
            ("NAME", "name"),
            ("ID", "id"),
            ("STATUS", "status"),
            ("AGENTS", "agents"),
            ("WORK", "waiting"),
            ("CREATED", "createdAt"),
        ],
    );
    Ok(())
}

const NAMESPACE_PENDING: &str = include_str!("../../../sql/queries/operator_namespace_pending.sql");

/// `namespace show`: the Namespace, why it still waits (the last pending reason its ensure
/// reported) and, with the Kubernetes driver (`OCC_KUBERNETES_CONFIG`), its Kubernetes
/// namespace, the prefix every Secret backend reference in it must start with, and while the
/// tenant RoleBinding is missing, the command that creates it.
fn namespace_show(globals: &Globals, namespace: &str) -> Result<(), CliError> {
    let mut client = globals.connect()?;
    let inputs = Inputs {
        what: "namespace show",
        args: &[("NAMESPACE", namespace)],
    };
    let row = client
        .query_one("SELECT occ.namespace_show($1)", &[&namespace])
        .map_err(|e| refused(&inputs, &e))?;
    let mut value: Value = row.get(0);
    let id = value["id"].as_str().unwrap_or_default().to_string();
    let pending = client
        .query_opt(NAMESPACE_PENDING, &[&id])
        .map_err(|e| refused(&inputs, &e))?;
    let rolebinding_missing = pending
        .as_ref()
        .and_then(|r| r.get::<_, Option<bool>>(1))
        .unwrap_or(false);
    if let Some(row) = &pending {
        value["pendingReason"] = json!(row.get::<_, Option<String>>(0));
    }
    value["waitingFor"] = json!(occ_worker::operator::work_waiting(&mut client, &id, None)
        .map_err(|e| refused(&inputs, &e))?);
    if let Some((k8s, settings)) = kubernetes_namespace(&value)? {
        value["kubernetesNamespace"] = json!(k8s);
        value["secretBackendRefPrefix"] = json!(format!("{k8s}/"));
        if rolebinding_missing {
            value["missing"] = json!(format!(
                "kubectl -n {k8s} create rolebinding {} --clusterrole=edit --group=TENANT_GROUP \
                 (or deploy/kubernetes/tenant-rolebinding.yaml, edited)",
                settings.tenant_role_binding
            ));
        }
    }
    globals.print(&value);
    Ok(())
}
