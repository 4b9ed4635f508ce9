//! `occ-worker admin audit`: the audit trail, newest first, filtered by Namespace and time
//! and paged by event id. It reads only.

use super::super::error::CliError;
use super::super::globals::Globals;
use super::super::refusal::{refused, Inputs};
use super::common::{known_namespace, since_filter};
use serde_json::json;

/// `admin audit`: the trail newest first, a table of one line per event (`--json`: each
/// event whole, details included).
pub fn run(
    globals: &Globals,
    namespace: Option<String>,
    since: Option<String>,
    before: Option<i64>,
    limit: i64,
) -> Result<(), CliError> {
    let (since, age) = since
        .as_deref()
        .map(since_filter)
        .transpose()?
        .unwrap_or_default();
    let namespace = match namespace {
        Some(ns) => Some(known_namespace(globals, "audit", &ns)?),
        None => None,
    };
    let mut client = globals.connect()?;
    let filter = occ_worker::operator::AuditFilter {
        namespace_id: namespace.as_deref(),
        since: since.as_deref(),
        age: age.as_deref(),
        before,
        limit,
    };
    let events = occ_worker::operator::audit_list(&mut client, &filter).map_err(|e| {
        refused(
            &Inputs {
                what: "audit",
                args: &[],
            },
            &e,
        )
    })?;
    let mut rows = events.clone();
    for e in rows.as_array_mut().into_iter().flatten() {
        e["resource"] = json!(format!(
            "{} {}",
            e["resourceKind"].as_str().unwrap_or("-"),
            e["resourceId"].as_str().unwrap_or("-")
        ));
    }
    globals.print_table(
        if globals.json { &events } else { &rows },
        &[
            ("ID", "id"),
            ("TIME", "occurredAt"),
            ("ACTOR", "actorId"),
            ("ACTION", "action"),
            ("RESOURCE", "resource"),
            ("OUTCOME", "outcome"),
            ("REASON", "reasonCode"),
        ],
    );
    let items = events.as_array().map(Vec::as_slice).unwrap_or_default();
    globals.more(
        items.len(),
        limit,
        items.last().and_then(|e| e["id"].as_i64()),
    );
    Ok(())
}
