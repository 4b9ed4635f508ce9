//! Schema migrations: the versioned, checksummed files in `sql/` embedded in the binary.
//!
//! refinery applies them, one transaction each; a session advisory lock makes two processes
//! running `migrate` at once take turns instead of racing. This module never edits a landed
//! migration and never writes schema outside `sql/V*__*.sql`.

use crate::db::DbError;
use postgres::Client;

mod embedded {
    refinery::embed_migrations!("sql");
}

/// The lock key shared by every `migrate` (an arbitrary constant: "occmigr").
const MIGRATION_LOCK: i64 = 0x006f_6363_6d69_6772;

/// What `migrate` did.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub applied: Vec<String>,
    pub current: Option<i32>,
}

#[derive(Debug)]
pub enum MigrateError {
    Db(DbError),
    Refinery(String),
}

impl std::fmt::Display for MigrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MigrateError::Db(e) => write!(f, "{e}"),
            MigrateError::Refinery(m) => write!(f, "migration failed: {m}"),
        }
    }
}

impl std::error::Error for MigrateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent: its `Display` is the database error's own.
            MigrateError::Db(e) => e.source(),
            MigrateError::Refinery(_) => None,
        }
    }
}

/// Applies every pending migration, holding the migration lock while it does.
pub fn run(client: &mut Client) -> Result<Report, MigrateError> {
    run_target(client, refinery::Target::Latest)
}

/// Applies the pending migrations up to `version` only: how an upgrade test builds the
/// schema (and rows) an older release left behind before `run` applies the rest.
pub fn run_to(client: &mut Client, version: i32) -> Result<Report, MigrateError> {
    run_target(client, refinery::Target::Version(version))
}

fn run_target(client: &mut Client, target: refinery::Target) -> Result<Report, MigrateError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .map_err(|e| MigrateError::Db(e.into()))?;
    let result = embedded::migrations::runner()
        .set_abort_divergent(true)
        .set_abort_missing(true)
        .set_grouped(false)
        .set_target(target)
        .run(client);
    // The lock is released even when a migration failed; the session ends soon anyway.
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
    let report = result.map_err(|e| MigrateError::Refinery(e.to_string()))?;
    Ok(Report {
        applied: report
            .applied_migrations()
            .iter()
            .map(|m| format!("V{}__{}", m.version(), m.name()))
            .collect(),
        current: embedded::migrations::runner()
            .get_migrations()
            .iter()
            .map(|m| m.version())
            .max(),
    })
}

/// The names of every embedded migration, in version order (used by the sequence test; the
/// embedded list is in file-name order, where `V12__` comes before `V1__`).
pub fn embedded_names() -> Vec<(i32, String)> {
    let mut names: Vec<(i32, String)> = embedded::migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| (m.version(), m.name().to_string()))
        .collect();
    names.sort();
    names
}
