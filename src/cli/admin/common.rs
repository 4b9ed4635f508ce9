//! The steps every noun of `occ-worker admin …` shares: calling one admission or read
//! function and printing its answer (`call`, `call_value`, `list`), following the work it
//! enqueued (`enqueue`), resolving a Namespace for a read (`in_namespace`,
//! `known_namespace`), the Installation configuration file admission pins selections from
//! (`installation_config`), and reading a JSON document file (`read_configuration`). It sits
//! below every noun and names none of them.

use super::super::error::CliError;
use super::super::globals::{Globals, Page};
use super::super::refusal::{explained, refused, Inputs};
use super::super::wait::WaitArg;
use clap::ValueEnum;
use occ_worker::compute::HarnessMode;
use occ_worker::operator;
use postgres::types::ToSql;
use serde_json::Value;

/// A Harness's mode (`admin harness approve --mode`, `admin agent deploy --mode`).
#[derive(Clone, Copy, ValueEnum)]
pub enum Mode {
    Dedicated,
    Embedded,
}

impl Mode {
    /// The harness mode the flag names.
    pub fn harness_mode(self) -> HarnessMode {
        match self {
            Mode::Dedicated => HarnessMode::Dedicated,
            Mode::Embedded => HarnessMode::Embedded,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.harness_mode().as_str()
    }
}

/// The database's own message for a failed statement, one line (start-up reads only; admin
/// commands go through `refusal::refused`).
pub fn db_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

/// Calls one admission (or read) function returning jsonb and prints its answer; a refusal
/// becomes a one-line error naming the argument at fault (`refusal::refused`).
pub fn call(
    globals: &Globals,
    what: &str,
    args: &[(&str, &str)],
    query: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<(), CliError> {
    call_value(globals, what, args, query, params).map(drop)
}

/// `call`, returning the answer it printed.
pub fn call_value(
    globals: &Globals,
    what: &str,
    args: &[(&str, &str)],
    query: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Value, CliError> {
    let mut client = globals.connect()?;
    let row = match client.query_one(query, params) {
        Ok(row) => row,
        Err(e) => return Err(explained(&mut client, &Inputs { what, args }, &e)),
    };
    // A show of something absent answers SQL NULL: printed as JSON null, never a panic.
    let value: Option<Value> = row.get(0);
    let value = value.unwrap_or(Value::Null);
    globals.print(&value);
    Ok(value)
}

/// Calls an admission that enqueues work (`call`), then with `--wait` follows that work until
/// it ends (`wait::follow`). The work's key is the answer's `work` (or `key`), or for a
/// Namespace the key of its listed work containing `:{step}` (`ensure`, `delete`), the newest
/// such.
pub fn enqueue(
    globals: &Globals,
    what: &str,
    args: &[(&str, &str)],
    query: &str,
    params: &[&(dyn ToSql + Sync)],
    (wait, step): (WaitArg, &str),
) -> Result<(), CliError> {
    let value = call_value(globals, what, args, query, params)?;
    let Some(timeout) = wait.wait else {
        return Ok(());
    };
    let key = match (&value["work"], &value["key"]) {
        (Value::String(key), _) | (Value::Null, Value::String(key)) => Some(key.clone()),
        (Value::Array(works), _) => works
            .iter()
            .filter_map(|w| w["key"].as_str())
            .rfind(|k| k.contains(&format!(":{step}")))
            .map(str::to_string),
        _ => None,
    };
    let key =
        key.ok_or_else(|| CliError::new(format!("{what}: the answer names no work to wait for")))?;
    super::super::wait::follow(globals, what, &key, Some(timeout))
}

/// Calls one read function returning a jsonb list and prints its first `page.limit` items as
/// a table of `columns` (`Globals::print_table`).
pub fn list(
    globals: &Globals,
    what: &str,
    query: &str,
    params: &[&(dyn ToSql + Sync)],
    page: Page,
    columns: &[(&str, &str)],
) -> Result<(), CliError> {
    let mut client = globals.connect()?;
    let row = client
        .query_one(query, params)
        .map_err(|e| refused(&Inputs { what, args: &[] }, &e))?;
    globals.print_table(&page.first(row.get(0)), columns);
    Ok(())
}

/// A read's refusal, one line naming the argument at fault (`refusal::refused`).
pub fn refused_read(what: &str, args: &[(&str, &str)], e: &postgres::Error) -> CliError {
    refused(&Inputs { what, args }, e)
}

/// Resolves the live Namespace `ns`, then reads from it.
pub fn in_namespace(
    c: &mut postgres::Client,
    what: &'static str,
    ns: &str,
    read: fn(&mut postgres::Client, &str) -> Result<Value, postgres::Error>,
) -> Result<Value, CliError> {
    let args = [("NAMESPACE", ns)];
    let ns_id = operator::namespace_resolve(c, ns)
        .map_err(|e| refused(&Inputs { what, args: &args }, &e))?;
    read(c, &ns_id).map_err(|e| refused(&Inputs { what, args: &args }, &e))
}

/// The id of a Namespace that exists or existed (`admin audit`, `admin work list`).
pub fn known_namespace(
    globals: &Globals,
    what: &'static str,
    ns: &str,
) -> Result<String, CliError> {
    let mut c = globals.connect()?;
    operator::namespace_known(&mut c, ns)
        .map_err(|e| refused(&Inputs { what, args: &[] }, &e))?
        .ok_or_else(|| {
            CliError::new(format!(
                "{what} refused: no Namespace {ns} (no live or deleted Namespace has that id or name)"
            ))
        })
}

/// `--since` of `work list` and `audit`: an RFC 3339 time, or an age (`90s`, `15m`, `2h`, `7d`) as the
/// PostgreSQL interval it means. `(time, interval)`, one of them set.
pub fn since_filter(value: &str) -> Result<(Option<String>, Option<String>), CliError> {
    if is_rfc3339(value) {
        return Ok((Some(value.to_string()), None));
    }
    let unit = match value.chars().last() {
        Some('s') => "seconds",
        Some('m') => "minutes",
        Some('h') => "hours",
        Some('d') => "days",
        _ => "",
    };
    let count = &value[..value.len().saturating_sub(1)];
    if unit.is_empty()
        || count.is_empty()
        || !count.bytes().all(|b| b.is_ascii_digit())
        || count.len() > 9
    {
        return Err(CliError::config(format!(
            "--since must be an RFC 3339 time such as 2026-01-31T12:00:00Z or an age such as 90s, 15m, 2h or 7d, got {value:?}"
        )));
    }
    Ok((None, Some(format!("{count} {unit}"))))
}

const AGENT_KNOWN: &str = include_str!("../../../sql/queries/operator_agent_known.sql");

/// That an Agent with this id or name exists (in the Namespace `namespace_id` when given), as
/// an unknown Namespace is an error everywhere (`admin work list --agent`).
pub fn known_agent(
    globals: &Globals,
    what: &'static str,
    agent: &str,
    namespace_id: Option<&str>,
) -> Result<(), CliError> {
    let mut c = globals.connect()?;
    let known: bool = c
        .query_one(AGENT_KNOWN, &[&agent, &namespace_id])
        .map_err(|e| refused(&Inputs { what, args: &[] }, &e))?
        .get(0);
    if known {
        return Ok(());
    }
    Err(CliError::new(format!(
        "{what} refused: no Agent {} {} (a deleted Agent's work went with it; admin agent list NAMESPACE)",
        super::super::refusal::cut(agent),
        if namespace_id.is_some() {
            "in that Namespace has that id or name"
        } else {
            "in any Namespace has that id or name"
        }
    )))
}

/// A full RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
pub fn is_rfc3339(value: &str) -> bool {
    let b = value.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    if b.len() < 20
        || !digits(0..4)
        || b[4] != b'-'
        || !digits(5..7)
        || b[7] != b'-'
        || !digits(8..10)
        || !matches!(b[10], b'T' | b't')
        || !digits(11..13)
        || b[13] != b':'
        || !digits(14..16)
        || b[16] != b':'
        || !digits(17..19)
    {
        return false;
    }
    let mut i = 19;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match &b[i..] {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}

/// The Installation configuration file the worker reads (`OCC_INSTALLATION_CONFIG`), for the
/// selections admission pins (SPEC S2, S3); nothing selected when the variable is unset. The
/// file is validated for the Compute Driver `implementation` names.
pub fn installation_config(
    implementation: Option<&str>,
) -> Result<occ_worker::installation::Installation, CliError> {
    use occ_worker::config::DriverKind;
    use occ_worker::installation::{Installation, VARIABLE};
    let Some(path) = std::env::var_os(VARIABLE).filter(|p| !p.is_empty()) else {
        return Ok(Installation::default());
    };
    let compute = match implementation.map(str::trim) {
        Some("docker") => DriverKind::Docker,
        _ => DriverKind::Kubernetes,
    };
    Installation::load(std::path::Path::new(&path), compute).map_err(|e| {
        CliError::config_lines(
            e.to_string()
                .lines()
                .map(|line| format!("invalid configuration: {line}")),
        )
    })
}

/// The Compute Driver `OCC_COMPUTE_DRIVER` names, if set.
pub fn compute_default() -> Option<String> {
    std::env::var("OCC_COMPUTE_DRIVER")
        .ok()
        .map(|v| v.trim().to_string())
}

/// The largest Configuration file `configuration put` reads (docs/operating.md).
pub const CONFIGURATION_FILE_LIMIT: u64 = 1024 * 1024;

/// Reads a Configuration document: at most `CONFIGURATION_FILE_LIMIT` bytes of JSON, from
/// the file or, for `-`, standard input; a UTF-8 byte order mark (which editors on Windows
/// write) is skipped. Every refusal is bad input (exit 2) naming the file.
pub fn read_configuration(file: &std::path::Path) -> Result<Value, CliError> {
    read_json_object(
        file,
        JsonFile {
            what: "a Configuration",
            limit: CONFIGURATION_FILE_LIMIT,
            shown_limit: "1 MiB (1048576 bytes)",
        },
    )
}

/// What a JSON document file holds: its name in messages and its largest size.
pub struct JsonFile {
    pub what: &'static str,
    pub limit: u64,
    pub shown_limit: &'static str,
}

/// Reads one JSON object of at most `kind.limit` bytes from the file or, for `-`, standard
/// input; a UTF-8 byte order mark is skipped. Every refusal is bad input (exit 2) naming the
/// file and the rule.
pub fn read_json_object(file: &std::path::Path, kind: JsonFile) -> Result<Value, CliError> {
    use std::io::Read;
    let JsonFile {
        what,
        limit,
        shown_limit,
    } = kind;
    let stdin = file == std::path::Path::new("-");
    let shown = if stdin {
        "- (standard input)".to_string()
    } else {
        file.display().to_string()
    };
    let opened: Box<dyn Read> = if stdin {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(
            std::fs::File::open(file)
                .map_err(|e| CliError::config(format!("--file {shown}: cannot read it: {e}")))?,
        )
    };
    // Read one byte past the limit rather than trusting the size a special file reports.
    let mut text = Vec::new();
    opened
        .take(limit + 1)
        .read_to_end(&mut text)
        .map_err(|e| CliError::config(format!("--file {shown}: cannot read it: {e}")))?;
    if text.len() as u64 > limit {
        return Err(CliError::config(format!(
            "--file {shown} is larger than {shown_limit}, the limit for {what}"
        )));
    }
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&text);
    let document: Value = serde_json::from_slice(text).map_err(|e| {
        CliError::config(format!(
            "--file {shown} is not JSON: {e} ({what} is one JSON object)"
        ))
    })?;
    if !document.is_object() {
        return Err(CliError::config(format!(
            "--file {shown} holds JSON but not an object: {what} is one JSON object"
        )));
    }
    Ok(document)
}
