//! What every command shares: the global flags (`Globals`, which connects and prints), `--limit`
//! (`Page`), and the printed forms: JSON with `--json` (every time RFC 3339 in UTC with
//! milliseconds), otherwise a list as an aligned table and one object as `key: value` lines.

use super::error::CliError;
use super::refusal;
use serde_json::Value;

/// `--limit` of the lists ordered by name (those ordered by time take `--before` too).
#[derive(clap::Args, Clone, Copy, Default)]
pub struct Page {
    /// At most this many rows.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
}

impl Page {
    /// The first `--limit` items of a list (all without one).
    pub fn first(self, mut value: Value) -> Value {
        if let (Some(limit), Some(items)) = (self.limit, value.as_array_mut()) {
            items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        }
        value
    }
}

pub struct Globals {
    pub json: bool,
    pub database_url: Option<String>,
}

impl Globals {
    pub fn database_url(&self) -> Result<String, CliError> {
        self.database_url.clone().ok_or_else(|| {
            CliError::config(
                "invalid configuration: OCC_DATABASE_URL is required (or --database-url)",
            )
        })
    }

    /// Where the database URL came from, for messages: the flag or the variable.
    pub fn database_url_source(&self) -> &'static str {
        let from_env = std::env::var("OCC_DATABASE_URL").ok();
        if from_env.is_some() && from_env == self.database_url {
            "OCC_DATABASE_URL"
        } else {
            "--database-url"
        }
    }

    /// A dedicated connection for operator commands.
    pub fn connect(&self) -> Result<postgres::Client, CliError> {
        let timeout = std::time::Duration::from_millis(
            std::env::var("OCC_WORKER_DB_TIMEOUT_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|v| *v > 0)
                .unwrap_or(10_000),
        );
        self.connect_to(&self.database_url()?, timeout)
    }

    /// One connection to `url`; every failure names the address and the variable.
    pub fn connect_to(
        &self,
        url: &str,
        timeout: std::time::Duration,
    ) -> Result<postgres::Client, CliError> {
        let source = self.database_url_source();
        let (mut config, tls) = occ_worker::db::config(url, timeout).map_err(|_| {
            CliError::config(format!(
                "invalid configuration: {source} is not a PostgreSQL connection string (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)"
            ))
        })?;
        // Times in answers built from timestamptz (`to_jsonb`) are rendered in UTC, so
        // `rfc3339` can give every time one form.
        let options = format!(
            "{} -c TimeZone=UTC",
            config.get_options().unwrap_or_default()
        );
        config.options(options.trim_start());
        config
            .connect(tls)
            .map_err(|e| refusal::connect_failed(&config, source, &e))
    }

    /// Prints `value` as JSON or in the human form. A closed stdout (`| head`) is not an
    /// error worth a panic: the rest of the output is simply dropped.
    pub fn print(&self, value: &Value) {
        let value = &rfc3339(value.clone());
        let mut out = String::new();
        if self.json {
            out.push_str(&value.to_string());
            out.push('\n');
        } else {
            human(value, 0, &mut out);
        }
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes());
    }
}

impl Globals {
    /// Prints a list as JSON, or as a table of `columns` (header, key; a key starting with `/`
    /// is a JSON pointer into the item): one row per item, lists joined by commas, absent
    /// values as `-`.
    pub fn print_table(&self, value: &Value, columns: &[(&str, &str)]) {
        if self.json {
            return self.print(value);
        }
        let value = rfc3339(value.clone());
        let rows: Vec<Vec<String>> = value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|item| {
                        columns
                            .iter()
                            .map(|(_, key)| {
                                let found = if key.starts_with('/') {
                                    item.pointer(key)
                                } else {
                                    item.get(*key)
                                };
                                cell(found.unwrap_or(&Value::Null))
                            })
                            .collect()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let out = table(columns, &rows);
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes());
    }
}

impl Globals {
    /// After a full page of a list newest first, says on stderr how to read the next one (a
    /// table only: `--json` output stays one document).
    pub fn more(&self, shown: usize, limit: i64, oldest_id: Option<i64>) {
        if self.json || shown == 0 || (shown as i64) < limit {
            return;
        }
        if let Some(id) = oldest_id {
            eprintln!("(the newest {shown}; older ones: --before {id})");
        }
    }
}

/// Every time in an answer in one RFC 3339 form, UTC with milliseconds
/// (`2026-01-31T12:00:00.123Z`): PostgreSQL's own rendering of a timestamptz in UTC
/// (`2026-01-31 12:00:00.123456+00` in text, `2026-01-31T12:00:00.123456+00:00` in JSON) is
/// rewritten; a Configuration's `document` is the user's and left as it is.
pub fn rfc3339(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(utc_millis(&s).unwrap_or(s)),
        Value::Array(items) => Value::Array(items.into_iter().map(rfc3339).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = if k == "document" { v } else { rfc3339(v) };
                    (k, v)
                })
                .collect(),
        ),
        other => other,
    }
}

/// `YYYY-MM-DD[T ]HH:MM:SS[.f…](+00|+00:00|Z)` as `YYYY-MM-DDTHH:MM:SS.mmmZ`; `None` for
/// anything else.
fn utc_millis(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    let shape = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shape {
        return None;
    }
    let mut i = 19;
    let mut fraction = String::new();
    if b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            fraction.push(b[i] as char);
            i += 1;
        }
    }
    if !matches!(&s[i..], "Z" | "+00" | "+00:00") {
        return None;
    }
    let millis: String = fraction.chars().chain("000".chars()).take(3).collect();
    Some(format!("{}T{}.{millis}Z", &s[..10], &s[11..19]))
}

fn cell(v: &Value) -> String {
    match v {
        Value::Array(items) if items.is_empty() => "-".into(),
        Value::Array(items) => items.iter().map(scalar).collect::<Vec<_>>().join(","),
        other => scalar(other),
    }
}

/// Left-aligned columns two spaces apart; `(none)` under the header when there are no rows.
fn table(columns: &[(&str, &str)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = columns.iter().map(|(h, _)| h.len()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  "));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(columns.iter().map(|(h, _)| *h).collect());
    if rows.is_empty() {
        out.push_str("(none)\n");
    }
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn human(value: &Value, indent: usize, out: &mut String) {
    use std::fmt::Write;
    let pad = " ".repeat(indent);
    match value {
        Value::Array(items) => {
            if items.is_empty() {
                let _ = writeln!(out, "{pad}(none)");
            }
            for item in items {
                match item {
                    Value::Object(_) => {
                        let _ = writeln!(out, "{pad}-");
                        human(item, indent + 2, out);
                    }
                    other => {
                        let _ = writeln!(out, "{pad}- {}", scalar(other));
                    }
                }
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::Object(m) if !m.is_empty() => {
                        let _ = writeln!(out, "{pad}{k}:");
                        human(v, indent + 2, out);
                    }
                    Value::Array(a) if a.iter().any(|x| x.is_object()) => {
                        let _ = writeln!(out, "{pad}{k}:");
                        human(v, indent + 2, out);
                    }
                    other => {
                        let _ = writeln!(out, "{pad}{k}: {}", scalar(other));
                    }
                }
            }
        }
        other => {
            let _ = writeln!(out, "{pad}{}", scalar(other));
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_time_takes_one_form_and_a_document_is_left_alone() {
        assert_eq!(
            utc_millis("2026-01-31T12:00:00.123456+00:00").as_deref(),
            Some("2026-01-31T12:00:00.123Z")
        );
        assert_eq!(
            utc_millis("2026-01-31 12:00:00+00").as_deref(),
            Some("2026-01-31T12:00:00.000Z")
        );
        assert_eq!(
            utc_millis("2026-01-31T12:00:00.5Z").as_deref(),
            Some("2026-01-31T12:00:00.500Z")
        );
        for not_utc in [
            "2026-01-31T12:00:00-05:00",
            "2026-01-31",
            "team-b",
            "2026-01-31T12:00:00",
        ] {
            assert_eq!(utc_millis(not_utc), None, "{not_utc}");
        }
        assert_eq!(
            rfc3339(json!({
                "createdAt": "2026-01-31T12:00:00.1+00:00",
                "revisions": [{"at": "2026-01-31 12:00:00+00"}],
                "document": {"at": "2026-01-31T12:00:00+00:00"},
            })),
            json!({
                "createdAt": "2026-01-31T12:00:00.100Z",
                "revisions": [{"at": "2026-01-31T12:00:00.000Z"}],
                "document": {"at": "2026-01-31T12:00:00+00:00"},
            })
        );
    }

    #[test]
    fn a_table_is_aligned_two_spaces_apart_and_says_none_when_empty() {
        let rows: Vec<Vec<String>> = vec![vec!["acct".into(), "seat".into()]];
        assert_eq!(
            table(
                &[("ID", "id"), ("SECRET", "/credential/secretRef/name")],
                &rows
            ),
            "ID    SECRET\nacct  seat\n"
        );
        assert_eq!(table(&[("ID", "id")], &[]), "ID\n(none)\n");
    }
}
