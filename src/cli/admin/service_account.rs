//! `occ-worker admin service-account create|bind|list|show`: Namespace-owned managed ChatGPT
//! accounts, an access-token reference and a backend binding (SPEC M1, M4); each command calls
//! one `occ.service_account_*` function (`sql/schema.sql`), which authorizes `--actor`, refuses
//! with a one-line error and audits. It never holds a token value and decides nothing itself.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::{call, list};
use clap::Subcommand;

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

pub fn run(globals: &Globals, command: ServiceAccountCommand) -> Result<(), CliError> {
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
