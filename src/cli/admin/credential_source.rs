//! `occ-worker admin credential-source create|disable|list|show`: credential source admission
//! and reads (SPEC §13, Admission and CLI).
//!
//! `create` and `disable` each call one PostgreSQL admission function
//! (`occ.credential_source_create`, `occ.credential_source_disable`), which authorizes `--actor`,
//! refuses with a one-line error and audits. The only thing this module decides is the source's
//! `driver_id`: the id of the selected owner, read from the Installation configuration file.
//! It never reads or holds a credential value.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::{call, in_namespace, installation_config, refused_read};
use clap::{Subcommand, ValueEnum};
use occ_worker::operator;
use serde_json::{json, Value};

#[derive(Subcommand)]
pub enum CredentialSourceCommand {
    /// Register a credential source by its backend reference NAMESPACE/NAME/KEY.
    Create {
        /// The Namespace id or name.
        namespace: String,
        /// The new source's id.
        id: String,
        /// What the source holds.
        #[arg(long, value_enum)]
        kind: Kind,
        /// NAMESPACE/NAME/KEY of the Kubernetes Secret (never read by the worker).
        #[arg(long)]
        backend_ref: String,
        /// Which driver attaches it; its id is the selected one's in OCC_INSTALLATION_CONFIG.
        #[arg(long, value_enum, default_value = "credential_gateway")]
        owner: Owner,
        /// PROVIDER/BACKEND the source's egress goes to.
        #[arg(long)]
        egress: Option<String>,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// Disable a credential source: no new attachments; it is never deleted.
    Disable {
        /// The Namespace id or name.
        namespace: String,
        /// The source's id.
        id: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// List the Namespace's credential sources, disabled ones included.
    List {
        /// The Namespace id or name.
        namespace: String,
        #[command(flatten)]
        page: Page,
    },
    /// Show one credential source.
    Show {
        /// The Namespace id or name.
        namespace: String,
        /// The source's id.
        id: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Kind {
    #[value(name = "model_key")]
    ModelKey,
    #[value(name = "tool")]
    Tool,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::ModelKey => "model_key",
            Kind::Tool => "tool",
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Owner {
    #[value(name = "credential_gateway")]
    CredentialGateway,
    #[value(name = "credential_proxy")]
    CredentialProxy,
}

impl Owner {
    fn as_str(self) -> &'static str {
        match self {
            Owner::CredentialGateway => "credential_gateway",
            Owner::CredentialProxy => "credential_proxy",
        }
    }
}

pub fn run(globals: &Globals, command: CredentialSourceCommand) -> Result<(), CliError> {
    match command {
        CredentialSourceCommand::Create {
            namespace,
            id,
            kind,
            backend_ref,
            owner,
            egress,
            actor,
        } => {
            let driver = driver_id(owner)?;
            let egress_json = egress.as_deref().map(parse_egress).transpose()?;
            call(
                globals,
                "credential-source create",
                &[
                    ("NAMESPACE", &namespace),
                    ("ID", &id),
                    ("--kind", kind.as_str()),
                    ("--backend-ref", &backend_ref),
                    ("--owner", owner.as_str()),
                    ("--egress", egress.as_deref().unwrap_or_default()),
                    ("--actor", &actor),
                ],
                "SELECT occ.credential_source_create($1, $2, $3, $4, $5, $6, $7, $8)",
                &[
                    &namespace,
                    &id,
                    &kind.as_str(),
                    &backend_ref,
                    &owner.as_str(),
                    &driver,
                    &egress_json,
                    &actor,
                ],
            )
        }
        CredentialSourceCommand::Disable {
            namespace,
            id,
            actor,
        } => call(
            globals,
            "credential-source disable",
            &[("NAMESPACE", &namespace), ("ID", &id), ("--actor", &actor)],
            "SELECT occ.credential_source_disable($1, $2, $3)",
            &[&namespace, &id, &actor],
        ),
        CredentialSourceCommand::List { namespace, page } => list(globals, &namespace, page),
        CredentialSourceCommand::Show { namespace, id } => show(globals, &namespace, &id),
    }
}

/// `credential-source list`: the Namespace's credential sources, disabled ones included.
fn list(globals: &Globals, ns: &str, page: Page) -> Result<(), CliError> {
    let mut c = globals.connect()?;
    let v = in_namespace(
        &mut c,
        "credential-source list",
        ns,
        operator::credential_source_list,
    )?;
    globals.print_table(
        &page.first(v),
        &[
            ("ID", "id"),
            ("KIND", "kind"),
            ("OWNER", "owner"),
            ("DRIVER", "driverId"),
            ("STATE", "state"),
            ("BACKEND REF", "backendRef"),
            ("CREATED BY", "createdBy"),
        ],
    );
    Ok(())
}

/// `credential-source show`: one source; one that does not exist is an error.
fn show(globals: &Globals, ns: &str, id: &str) -> Result<(), CliError> {
    let what = "credential-source show";
    let mut c = globals.connect()?;
    let ns_id = operator::namespace_resolve(&mut c, ns)
        .map_err(|e| refused_read(what, &[("NAMESPACE", ns)], &e))?;
    let v = operator::credential_source_show(&mut c, &ns_id, id)
        .map_err(|e| refused_read(what, &[("NAMESPACE", ns), ("ID", id)], &e))?
        .ok_or_else(|| {
            CliError::new(format!(
                "{what} refused: no credential source {id} in Namespace {ns}"
            ))
        })?;
    globals.print(&v);
    Ok(())
}

/// The selected owner's id (SPEC §13): the Credential Gateway's from the Installation
/// configuration file; no Credential Proxy is built in.
fn driver_id(owner: Owner) -> Result<String, CliError> {
    match owner {
        Owner::CredentialGateway => {
            let compute = std::env::var("OCC_COMPUTE_DRIVER").ok();
            installation_config(compute.as_deref())?
                .credential_gateway
                .map(|g| g.id)
                .ok_or_else(|| {
                    CliError::new(
                        "credential-source create refused: no Credential Gateway is selected \
                         (credentialGateway in the OCC_INSTALLATION_CONFIG file)",
                    )
                })
        }
        Owner::CredentialProxy => Err(CliError::new(
            "credential-source create refused: no Credential Proxy is built in \
             (--owner credential_proxy)",
        )),
    }
}

/// `--egress PROVIDER/BACKEND` as `{provider, backend}`.
fn parse_egress(text: &str) -> Result<Value, CliError> {
    match text.split_once('/') {
        Some((provider, backend)) if !provider.trim().is_empty() && !backend.trim().is_empty() => {
            Ok(json!({"provider": provider, "backend": backend}))
        }
        _ => Err(CliError::new(format!(
            "credential-source create refused: --egress {text} is not PROVIDER/BACKEND"
        ))),
    }
}
