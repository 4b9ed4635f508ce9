//! `occ-worker admin secret create|list`: Namespace-owned Secret metadata (backend
//! references, never values), registered through `occ.secret_create`, which authorizes
//! `--actor`, refuses with a one-line error and audits. It decides nothing itself.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::{call, in_namespace};
use clap::Subcommand;
use occ_worker::operator;

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

pub fn run(globals: &Globals, command: SecretCommand) -> Result<(), CliError> {
    match command {
        SecretCommand::Create {
            namespace,
            id,
            backend_ref,
            driver,
            backend_uid,
            actor,
        } => {
            refuse_outside_namespace(globals, &namespace, &backend_ref)?;
            call(
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
            )
        }
        SecretCommand::List { namespace, page } => list(globals, &namespace, page),
    }
}

/// With the Kubernetes driver (`OCC_KUBERNETES_CONFIG`), a backend reference outside the
/// Namespace's Kubernetes namespace is refused at once, naming the prefix `namespace show`
/// prints, instead of failing its deployment later with `SECRET_REFERENCE_OUTSIDE_NAMESPACE`.
/// A Namespace that cannot be read is left to the admission, which says why.
fn refuse_outside_namespace(
    globals: &Globals,
    namespace: &str,
    backend_ref: &str,
) -> Result<(), CliError> {
    if std::env::var_os("OCC_KUBERNETES_CONFIG").is_none() {
        return Ok(());
    }
    let mut client = globals.connect()?;
    let Ok(row) = client.query_one("SELECT occ.namespace_show($1)", &[&namespace]) else {
        return Ok(());
    };
    let value: serde_json::Value = row.get(0);
    let Some((k8s, _)) = super::namespace::kubernetes_namespace(&value)? else {
        return Ok(());
    };
    let prefix = format!("{k8s}/");
    if backend_ref.starts_with(&prefix) {
        return Ok(());
    }
    Err(CliError::config(format!(
        "secret create refused: --backend-ref {} is outside the Namespace's Kubernetes \
         namespace: it must start with {prefix} (secretBackendRefPrefix in admin namespace show; \
         SECRET_REFERENCE_OUTSIDE_NAMESPACE)",
        super::super::refusal::cut(backend_ref)
    )))
}

/// `secret list`: the Namespace's Secrets.
fn list(globals: &Globals, ns: &str, page: Page) -> Result<(), CliError> {
    let mut c = globals.connect()?;
    let v = in_namespace(&mut c, "secret list", ns, operator::secret_list)?;
    globals.print_table(
        &page.first(v),
        &[
            ("ID", "id"),
            ("BACKEND REF", "backendRef"),
            ("CREATED BY", "createdBy"),
            ("CREATED", "createdAt"),
        ],
    );
    Ok(())
}
