//! The schema window (expand/contract): which database schemas this binary runs on, read
//! before the first claim (`run`, `check`) and by the health probe (`/readyz`).
//!
//! A binary runs on a schema that has every migration it embeds (`migrate::newest_known`);
//! a schema behind that is refused with "run `occ-worker migrate`". A schema ahead of it was
//! migrated by a newer release, whose migrations expand the schema and keep older releases
//! working down to the one it declares (`occ.schema_compatible_since()`, the newer release's
//! `migrate::OLDEST_SUPPORTED`); a schema that no longer keeps this binary working is refused
//! with "upgrade the binary". This module reads two values and decides; it never writes.

use crate::db::DbError;
use postgres::Client;

const SCHEMA_VERSION: &str = include_str!("../../sql/queries/schema_version.sql");
const SCHEMA_COMPATIBLE_SINCE: &str = include_str!("../../sql/queries/schema_compatible_since.sql");

/// What the database's schema says of itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemaVersion {
    /// The newest migration applied.
    pub version: i32,
    /// The oldest release (by the newest migration it knows) the schema keeps working; the
    /// schema's own version when it declares none (migrated before the window existed).
    pub compatible_since: i32,
}

/// A schema this binary does not run on: the start-up refusal's one line and `/readyz`'s
/// `SCHEMA_OUTSIDE_WINDOW`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutsideWindow {
    /// The schema lacks migrations this binary embeds: run `occ-worker migrate`.
    Behind { schema: i32, knows: i32 },
    /// A newer release migrated the schema past what it keeps this binary working on.
    Ahead {
        schema: i32,
        compatible_since: i32,
        knows: i32,
    },
}

impl OutsideWindow {
    /// The reason code `/readyz` answers with.
    pub const CODE: &'static str = "SCHEMA_OUTSIDE_WINDOW";

    /// The database's schema version.
    pub fn schema(&self) -> i32 {
        match *self {
            OutsideWindow::Behind { schema, .. } | OutsideWindow::Ahead { schema, .. } => schema,
        }
    }

    /// The newest migration this binary embeds.
    pub fn knows(&self) -> i32 {
        match *self {
            OutsideWindow::Behind { knows, .. } | OutsideWindow::Ahead { knows, .. } => knows,
        }
    }

    /// What the operator runs: `migrate` or upgrade the binary.
    pub fn remedy(&self) -> &'static str {
        match self {
            OutsideWindow::Behind { .. } => "migrate",
            OutsideWindow::Ahead { .. } => "upgrade",
        }
    }
}

impl std::fmt::Display for OutsideWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let release = env!("CARGO_PKG_VERSION");
        match *self {
            OutsideWindow::Behind { schema, knows } => write!(
                f,
                "the database schema is V{schema}, older than occ-worker {release} runs on \
                 (V{knows}): run `occ-worker migrate`"
            ),
            OutsideWindow::Ahead {
                schema,
                compatible_since,
                knows,
            } => write!(
                f,
                "the database schema is V{schema}, newer than occ-worker {release} (V{knows}) \
                 tolerates (it keeps releases from V{compatible_since} working): upgrade the \
                 binary to the release that migrated it"
            ),
        }
    }
}

/// Where `schema` stands against a binary that embeds migrations up to `knows`.
pub fn check(schema: SchemaVersion, knows: i32) -> Result<(), OutsideWindow> {
    if schema.version < knows {
        return Err(OutsideWindow::Behind {
            schema: schema.version,
            knows,
        });
    }
    if schema.compatible_since > knows {
        return Err(OutsideWindow::Ahead {
            schema: schema.version,
            compatible_since: schema.compatible_since,
            knows,
        });
    }
    Ok(())
}

/// The schema's version and window, or `None` when no migration has been applied (no
/// migration history: the database has no occ schema).
pub fn read(client: &mut Client) -> Result<Option<SchemaVersion>, DbError> {
    let row = match client.query_one(SCHEMA_VERSION, &[]) {
        Ok(row) => row,
        Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(version) = row.get::<_, Option<i32>>(0) else {
        return Ok(None);
    };
    let compatible_since = if row.get::<_, bool>(1) {
        client
            .query_one(SCHEMA_COMPATIBLE_SINCE, &[])?
            .get::<_, i32>(0)
    } else {
        version
    };
    Ok(Some(SchemaVersion {
        version,
        compatible_since,
    }))
}

#[cfg(test)]
mod tests {
    use super::{check, OutsideWindow, SchemaVersion};

    fn schema(version: i32, compatible_since: i32) -> SchemaVersion {
        SchemaVersion {
            version,
            compatible_since,
        }
    }

    #[test]
    fn the_window_is_every_migration_known_up_to_what_a_newer_schema_keeps_working() {
        assert_eq!(check(schema(30, 30), 30), Ok(()));
        // Expanded by a newer release that keeps V30 binaries working.
        assert_eq!(check(schema(33, 30), 30), Ok(()));
        assert_eq!(check(schema(33, 29), 30), Ok(()));
        assert_eq!(
            check(schema(29, 29), 30),
            Err(OutsideWindow::Behind {
                schema: 29,
                knows: 30
            })
        );
        // Contracted past V30, or migrated before the window existed (no declaration: the
        // schema keeps only binaries that know all of it).
        assert_eq!(
            check(schema(33, 31), 30),
            Err(OutsideWindow::Ahead {
                schema: 33,
                compatible_since: 31,
                knows: 30
            })
        );
        assert!(check(schema(31, 31), 30).is_err());
    }

    #[test]
    fn the_refusal_is_one_line_naming_both_versions_and_the_remedy() {
        let behind = OutsideWindow::Behind {
            schema: 28,
            knows: 29,
        }
        .to_string();
        assert!(!behind.contains('\n'), "{behind}");
        assert!(
            behind.contains("V28")
                && behind.contains("V29")
                && behind.contains("occ-worker migrate"),
            "{behind}"
        );
        let ahead = OutsideWindow::Ahead {
            schema: 31,
            compatible_since: 30,
            knows: 29,
        }
        .to_string();
        assert!(!ahead.contains('\n'), "{ahead}");
        assert!(
            ahead.contains("V31") && ahead.contains("V29") && ahead.contains("upgrade the binary"),
            "{ahead}"
        );
    }
}
