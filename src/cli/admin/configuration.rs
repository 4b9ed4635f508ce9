//! `occ-worker admin configuration put|list|show`: Namespace-owned Configurations, stored
//! through `occ.configuration_put`, which authorizes `--actor`, refuses with a one-line error
//! and audits, and read back. Only the file is checked here (`read_configuration`).

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::common::{call, in_namespace, read_configuration, refused_read};
use clap::Subcommand;
use occ_worker::operator;

#[derive(Subcommand)]
pub enum ConfigurationCommand {
    /// Store a new generation of a Configuration from a JSON file.
    Put {
        /// The Namespace id or name.
        namespace: String,
        /// The Configuration id.
        id: String,
        /// A JSON object, at most 1 MiB; `-` reads standard input.
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

pub fn run(globals: &Globals, command: ConfigurationCommand) -> Result<(), CliError> {
    match command {
        ConfigurationCommand::Put {
            namespace,
            id,
            file,
            actor,
        } => {
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
        ConfigurationCommand::List { namespace, page } => list(globals, &namespace, page),
        ConfigurationCommand::Show { namespace, id } => show(globals, &namespace, &id),
    }
}

/// `configuration list`: the Namespace's Configurations.
fn list(globals: &Globals, ns: &str, page: Page) -> Result<(), CliError> {
    let mut c = globals.connect()?;
    let v = in_namespace(
        &mut c,
        "configuration list",
        ns,
        operator::configuration_list,
    )?;
    globals.print_table(
        &page.first(v),
        &[
            ("ID", "id"),
            ("GENERATION", "generation"),
            ("UPDATED BY", "updatedBy"),
            ("UPDATED", "updatedAt"),
        ],
    );
    Ok(())
}

/// `configuration show`: one Configuration with its document; one that does not exist is an
/// error.
fn show(globals: &Globals, ns: &str, id: &str) -> Result<(), CliError> {
    let mut c = globals.connect()?;
    let ns_id = operator::namespace_resolve(&mut c, ns)
        .map_err(|e| refused_read("configuration show", &[("NAMESPACE", ns)], &e))?;
    let v = operator::configuration_show(&mut c, &ns_id, id)
        .map_err(|e| refused_read("configuration show", &[("NAMESPACE", ns), ("ID", id)], &e))?
        .ok_or_else(|| {
            CliError::new(format!(
                "configuration show refused: no Configuration {id} in Namespace {ns}"
            ))
        })?;
    globals.print(&v);
    Ok(())
}
