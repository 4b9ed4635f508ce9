//! Schema migrations: the versioned, checksummed files in `sql/` embedded in the binary, then
//! the schema's functions and views (`sql/functions/`, `sql/views/`), also embedded.
//!
//! refinery applies the versioned migrations (`sql/V{n}__name.sql`: tables, columns,
//! constraints, triggers and data), one transaction each. Then every function and view file,
//! one object each as it is now, is applied with `CREATE OR REPLACE` in one transaction on
//! every `migrate`, the way Flyway's repeatable migrations work: applying them again changes
//! nothing, and a changed file changes its object. A session advisory lock makes two processes
//! running `migrate` at once take turns instead of racing, for both steps. This module never
//! edits a landed migration and never writes schema outside those files.

use crate::db::DbError;
use postgres::Client;

mod window;
pub use window::{check as check_window, read as read_schema, OutsideWindow, SchemaVersion};

/// The far end of this release's expand/contract window: the oldest release its schema keeps
/// working, named by the newest migration that release embeds. `migrate` declares it in the
/// schema (`occ.schema_compatible_since()`, whose file says the same number), and a release
/// that knows an older schema refuses to start on it (`OutsideWindow::Ahead`).
///
/// A release whose migrations only expand (add tables, columns, functions, values the older
/// release ignores) leaves it, so the previous release keeps running while this one rolls
/// out. A migration that contracts (drops, renames or narrows what an older release reads or
/// writes) raises it to the newest migration of the oldest release that still works on it:
/// contract one release after the expansion that made it safe. It never exceeds
/// `newest_known()` (a unit test holds it to that).
pub const OLDEST_SUPPORTED: i32 = 29;

/// The newest migration this binary embeds: the schema version it runs on, and the near end of
/// its window (a schema behind it is refused with "run `occ-worker migrate`").
pub fn newest_known() -> i32 {
    embedded::migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| m.version())
        .max()
        .unwrap_or(0)
}

mod embedded {
    refinery::embed_migrations!("sql");
}

/// Every file of `sql/functions/` and then of `sql/views/`, in name order: its path under
/// `sql/` and its text (the list is written by build.rs).
const REPEATABLE: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/repeatable.rs"));

/// The lock key shared by every `migrate` (an arbitrary constant: "occmigr").
const MIGRATION_LOCK: i64 = 0x006f_6363_6d69_6772;

/// What `migrate` did.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub applied: Vec<String>,
    pub current: Option<i32>,
    /// A newer release migrated the schema past every migration this binary embeds: nothing
    /// was applied, and the newer release's functions and views were left as they are (a
    /// rolled-back or restarting older Pod's `migrate` never downgrades them). Whether this
    /// binary runs on it is the window's question (`run`, `check`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub newer_schema: bool,
}

#[derive(Debug)]
pub enum MigrateError {
    Db(DbError),
    Refinery(refinery::Error),
    /// A function or view file failed (its path under `sql/`); none of them was applied.
    Repeatable(&'static str, DbError),
    /// The function and view files name each other in a cycle (a build that cannot apply).
    Order(String),
}

impl std::fmt::Display for MigrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MigrateError::Db(e) => write!(f, "{e}"),
            MigrateError::Refinery(_) => write!(f, "migration failed"),
            MigrateError::Repeatable(path, e) => write!(f, "migration failed: sql/{path}: {e}"),
            MigrateError::Order(m) => write!(f, "migration failed: {m}"),
        }
    }
}

impl std::error::Error for MigrateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent: its `Display` is the database error's own.
            MigrateError::Db(e) | MigrateError::Repeatable(_, e) => e.source(),
            MigrateError::Refinery(e) => Some(e),
            MigrateError::Order(_) => None,
        }
    }
}

/// Applies every pending migration and then every function and view file, holding the
/// migration lock while it does.
pub fn run(client: &mut Client) -> Result<Report, MigrateError> {
    run_target(client, refinery::Target::Latest)
}

/// Applies the pending migrations up to `version` only, and no function or view file (they
/// hold the latest definitions, which an older schema need not take): how an upgrade test
/// builds the schema (and rows) an older release left behind before `run` applies the rest.
pub fn run_to(client: &mut Client, version: i32) -> Result<Report, MigrateError> {
    run_target(client, refinery::Target::Version(version))
}

fn run_target(client: &mut Client, target: refinery::Target) -> Result<Report, MigrateError> {
    let latest = matches!(target, refinery::Target::Latest);
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .map_err(|e| MigrateError::Db(e.into()))?;
    if latest {
        match window::read(client) {
            Ok(Some(schema)) if schema.version > newest_known() => {
                let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
                return Ok(Report {
                    applied: Vec::new(),
                    current: Some(schema.version),
                    newer_schema: true,
                });
            }
            Ok(_) => {}
            Err(e) => {
                let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
                return Err(MigrateError::Db(e));
            }
        }
    }
    let result = embedded::migrations::runner()
        .set_abort_divergent(true)
        .set_abort_missing(true)
        .set_grouped(false)
        .set_target(target)
        .run(client)
        .map_err(MigrateError::Refinery)
        .and_then(|report| {
            if latest {
                apply_repeatable(client)?;
            }
            Ok(report)
        });
    // The lock is released even when a migration failed; the session ends soon anyway.
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
    let report = result?;
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
        newer_schema: false,
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

/// The paths (under `sql/`) of every embedded function and view file, in the order `migrate`
/// applies them (used by the conventions tests).
pub fn repeatable_names() -> Result<Vec<&'static str>, MigrateError> {
    let order = apply_order(REPEATABLE).map_err(MigrateError::Order)?;
    Ok(order.into_iter().map(|i| REPEATABLE[i].0).collect())
}

/// Applies every function and view file in one transaction, in `apply_order`. Each holds
/// `CREATE OR REPLACE` of an object as it is now, so applying them again changes nothing.
/// `check_function_bodies` is off for the transaction, so a string body (`AS $$ … $$`) is
/// not resolved when it is created, only when it is called, and the order of those files
/// does not matter.
fn apply_repeatable(client: &mut Client) -> Result<(), MigrateError> {
    let order = apply_order(REPEATABLE).map_err(MigrateError::Order)?;
    let db = |e: postgres::Error| MigrateError::Db(e.into());
    let mut tx = client.transaction().map_err(db)?;
    tx.batch_execute("SET LOCAL check_function_bodies = off")
        .map_err(db)?;
    for i in order {
        let (path, text) = REPEATABLE[i];
        tx.batch_execute(text)
            .map_err(|e| MigrateError::Repeatable(path, e.into()))?;
    }
    tx.commit().map_err(db)
}

/// The order the function and view files are applied in (indexes into `files`): the
/// functions (`functions/…`) before the views, each in name order, except that a file comes
/// after the files of its own kind it names (`occ.NAME`) when PostgreSQL resolves those names
/// as it creates the object: a view's always, a function's only when one of its definitions
/// has an SQL-standard body (`RETURN …`, `BEGIN ATOMIC`), not a string one (`AS $$ … $$`).
/// A view may use any function, a function's signature any table type. Names that form a
/// cycle are an error.
fn apply_order(files: &[(&str, &str)]) -> Result<Vec<usize>, String> {
    let object = |path: &str| -> String {
        let name = path.rsplit('/').next().unwrap_or(path);
        name.strip_suffix(".sql").unwrap_or(name).to_string()
    };
    let is_view = |path: &str| !path.starts_with("functions/");
    let resolved = |path: &str, text: &str| {
        is_view(path)
            || text
                .split("OR REPLACE FUNCTION")
                .skip(1)
                .any(|definition| !definition.contains("AS $"))
    };
    let names = |text: &str, name: &str| {
        text.match_indices(name).any(|(at, _)| {
            let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
            let before = text[..at].chars().next_back();
            let after = text[at + name.len()..].chars().next();
            !before.is_some_and(|c| ident(c) || c == '.') && !after.is_some_and(ident)
        })
    };
    // after[b] holds the files b must come after.
    let after: Vec<Vec<usize>> = files
        .iter()
        .enumerate()
        .map(|(b, (path, text))| {
            if !resolved(path, text) {
                return Vec::new();
            }
            files
                .iter()
                .enumerate()
                .filter(|(a, (other, _))| {
                    *a != b && is_view(other) == is_view(path) && names(text, &object(other))
                })
                .map(|(a, _)| a)
                .collect()
        })
        .collect();
    let key = |i: usize| (is_view(files[i].0), files[i].0);
    let mut order = Vec::with_capacity(files.len());
    let mut done = vec![false; files.len()];
    while order.len() < files.len() {
        let next = (0..files.len())
            .filter(|&i| !done[i] && after[i].iter().all(|&a| done[a]))
            .min_by_key(|&i| key(i));
        let Some(next) = next else {
            let mut cycle: Vec<&str> = (0..files.len())
                .filter(|&i| !done[i])
                .map(|i| files[i].0)
                .collect();
            cycle.sort();
            return Err(format!(
                "the function and view files name each other in a cycle: {}",
                cycle.join(", ")
            ));
        };
        done[next] = true;
        order.push(next);
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::apply_order;

    #[test]
    fn the_declared_window_is_within_the_migrations_this_release_embeds() {
        assert!(
            (1..=super::newest_known()).contains(&super::OLDEST_SUPPORTED),
            "OLDEST_SUPPORTED {} outside V1..V{}",
            super::OLDEST_SUPPORTED,
            super::newest_known()
        );
        let declared = super::REPEATABLE
            .iter()
            .find(|(path, _)| *path == "functions/occ.schema_compatible_since.sql")
            .map(|(_, text)| *text)
            .expect("the schema's window declaration is embedded");
        assert!(
            declared.contains(&format!("$$ SELECT {} $$", super::OLDEST_SUPPORTED)),
            "sql/functions/occ.schema_compatible_since.sql must return OLDEST_SUPPORTED ({})",
            super::OLDEST_SUPPORTED
        );
    }

    fn paths<'a>(files: &[(&'a str, &str)]) -> Vec<&'a str> {
        apply_order(files)
            .unwrap()
            .into_iter()
            .map(|i| files[i].0)
            .collect()
    }

    #[test]
    fn functions_come_before_views_each_in_name_order() {
        let files = [
            (
                "views/occ.a.sql",
                "CREATE OR REPLACE VIEW occ.a AS SELECT 1;",
            ),
            (
                "functions/occ.z.sql",
                "CREATE OR REPLACE FUNCTION occ.z() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;",
            ),
            (
                "functions/occ.b.sql",
                "CREATE OR REPLACE FUNCTION occ.b() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;",
            ),
        ];
        assert_eq!(
            paths(&files),
            [
                "functions/occ.b.sql",
                "functions/occ.z.sql",
                "views/occ.a.sql"
            ]
        );
    }

    // A string body is not resolved with check_function_bodies off; an SQL-standard body and
    // a view are, so they come after what they name (and a longer name is not a shorter one).
    #[test]
    fn a_resolved_body_comes_after_what_it_names() {
        let files = [
            (
                "functions/occ.a.sql",
                "CREATE OR REPLACE FUNCTION occ.a() RETURNS int LANGUAGE sql RETURN occ.b() + occ.c_d();",
            ),
            (
                "functions/occ.b.sql",
                "CREATE OR REPLACE FUNCTION occ.b() RETURNS int LANGUAGE sql AS $$ SELECT occ.c() $$;",
            ),
            (
                "functions/occ.c.sql",
                "CREATE OR REPLACE FUNCTION occ.c() RETURNS int LANGUAGE sql RETURN 1;",
            ),
            (
                "functions/occ.c_d.sql",
                "CREATE OR REPLACE FUNCTION occ.c_d() RETURNS int LANGUAGE sql RETURN 1;",
            ),
            (
                "views/occ.x.sql",
                "CREATE OR REPLACE VIEW occ.x AS SELECT * FROM occ.y, occ.a();",
            ),
            ("views/occ.y.sql", "CREATE OR REPLACE VIEW occ.y AS SELECT 1 AS one;"),
        ];
        assert_eq!(
            paths(&files),
            [
                "functions/occ.b.sql",
                "functions/occ.c.sql",
                "functions/occ.c_d.sql",
                "functions/occ.a.sql",
                "views/occ.y.sql",
                "views/occ.x.sql"
            ]
        );
    }

    #[test]
    fn a_cycle_is_an_error() {
        let files = [
            (
                "views/occ.x.sql",
                "CREATE OR REPLACE VIEW occ.x AS SELECT * FROM occ.y;",
            ),
            (
                "views/occ.y.sql",
                "CREATE OR REPLACE VIEW occ.y AS SELECT * FROM occ.x;",
            ),
        ];
        let error = apply_order(&files).unwrap_err();
        assert!(
            error.contains("views/occ.x.sql, views/occ.y.sql"),
            "{error}"
        );
    }
}
