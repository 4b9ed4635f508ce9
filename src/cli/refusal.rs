//! Turns database failures into the one line an operator can act on (SPEC section 9).
//!
//! Owns the mapping from what PostgreSQL reports (SQLSTATE, constraint name, connection cause)
//! to a message naming the command's argument and its rule, the database address (never the
//! password) and the variable it came from, and the exit code: 2 when the input or the
//! configuration can never work as given, 1 when the current state refused it. It matches on
//! structured fields (SQLSTATE, constraint name), never on message text, and it must never
//! print a constraint name or a server message where a rule can be named instead.

use super::error::CliError;
use postgres::error::SqlState;

/// The identifier rule of `occ.is_ident` (`sql/schema.sql`).
pub const IDENT_RULE: &str =
    "must be 1 to 63 lowercase letters, digits, - and _, starting with a letter or digit";

/// What the refused command was given: its name and each argument as the user typed it.
pub struct Inputs<'a> {
    pub what: &'a str,
    pub args: &'a [(&'a str, &'a str)],
}

impl Inputs<'_> {
    fn arg(&self, name: &str) -> &str {
        self.get(name).unwrap_or("?")
    }

    /// The argument `name` as typed, if the command was given one.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(n, v)| *n == name && !v.is_empty())
            .map(|(_, v)| *v)
    }
}

/// Inputs longer than this are cut when a message repeats them.
const SHOWN_BYTES: usize = 64;

/// `value`, or when longer than `SHOWN_BYTES` its first 32 characters and its length:
/// `aaaa… (100000 bytes)`.
pub fn cut(value: &str) -> String {
    if value.len() <= SHOWN_BYTES {
        return value.to_string();
    }
    let head: String = value.chars().take(32).collect();
    format!("{head}… ({} bytes)", value.len())
}

/// `value` quoted, cut like `cut`: `"team-b"`, `"aaaa…" (100000 bytes)`.
fn quoted(value: &str) -> String {
    if value.len() <= SHOWN_BYTES {
        return format!("{value:?}");
    }
    let head: String = value.chars().take(32).collect();
    format!("{:?} ({} bytes)", format!("{head}…"), value.len())
}

/// An id the database put in a message, with the name the user typed for it when they typed
/// another: `team-b (ns-17aebd40)`.
fn named(id: &str, typed: Option<&str>) -> String {
    match typed {
        Some(t) if t != id => format!("{t} ({id})"),
        _ => id.to_string(),
    }
}

/// A database message in the user's words: the Namespace and Agent ids the admission resolved
/// carry the names the user typed (`agent ns-1/helper` becomes `agent helper in Namespace
/// team-b (ns-1)`), and an input too long to repeat is cut (`cut`).
fn in_users_words(message: &str, inputs: &Inputs) -> String {
    let mut message = message.to_string();
    for (_, value) in inputs.args {
        if value.len() > SHOWN_BYTES && message.contains(*value) {
            message = message.replace(*value, &cut(value));
        }
    }
    let Some(namespace) = inputs.get("NAMESPACE") else {
        return message;
    };
    let agent = inputs.get("AGENT").or(inputs.get("NAME"));
    message
        .split(' ')
        .map(|word| {
            let core = word.trim_end_matches([',', ':', ';', ')', '.']);
            let tail = &word[core.len()..];
            let said = match core.split_once('/') {
                // Only an Agent's id carries the Agent's typed name: a Configuration or
                // Secret named here is the one the user typed already.
                Some((ns, rest)) if ns.starts_with("ns-") => format!(
                    "{} in Namespace {}",
                    if rest.starts_with("ag-") {
                        named(rest, agent)
                    } else {
                        rest.to_string()
                    },
                    named(ns, Some(namespace))
                ),
                _ if core.starts_with("ns-") => named(core, Some(namespace)),
                _ if core.starts_with("ag-") => named(core, agent),
                _ => return word.to_string(),
            };
            format!("{said}{tail}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The argument a CHECK constraint guards and the rule it enforces.
fn checked_argument(constraint: &str) -> Option<(&'static str, &'static str)> {
    Some(match constraint {
        "secrets_backend_ref_check" | "credential_sources_backend_ref_check" => (
            "--backend-ref",
            "must look like NAMESPACE/NAME/KEY (a Kubernetes namespace and Secret name, then the key)",
        ),
        "secrets_driver_id_check" => ("--driver", IDENT_RULE),
        "secrets_uid_check" => (
            "--backend-uid",
            "must be 1 to 128 letters, digits, -, ., _ and :, starting with a letter or digit",
        ),
        "secrets_id_check" | "configurations_id_check" | "identities_id_check" | "iam_groups_id_check"
        | "service_accounts_id_check" | "backends_id_check" | "credential_sources_id_check" => {
            ("ID", IDENT_RULE)
        }
        "service_account_bindings_backend_id_check" => ("--backend", IDENT_RULE),
        "service_account_bindings_driver_id_check" => ("--driver", IDENT_RULE),
        "service_account_bindings_workspace_id_check" => (
            "--workspace",
            "must be 1 to 128 letters, digits, ., _, : and -, starting with a letter or digit",
        ),
        "agents_name_check" | "namespaces_all_name_check" => ("NAME", IDENT_RULE),
        "configurations_document_check" => ("--file", "must hold a JSON object"),
        _ => return None,
    })
}

/// The sentence for a unique constraint a concurrent or repeated admission ran into.
fn duplicate(constraint: &str, inputs: &Inputs) -> Option<String> {
    Some(match constraint {
        "secrets_pkey" => format!(
            "Secret {} already exists in {}",
            inputs.arg("ID"),
            inputs.arg("NAMESPACE")
        ),
        "credential_sources_pkey" => format!(
            "credential source {} already exists in {}",
            inputs.arg("ID"),
            inputs.arg("NAMESPACE")
        ),
        "agents_namespace_id_name_key" => format!(
            "Agent {} already exists in {}",
            inputs.arg("NAME"),
            inputs.arg("NAMESPACE")
        ),
        "identities_pkey" => format!("identity {} already exists", inputs.arg("ID")),
        "backends_pkey" => format!("backend {} already exists", inputs.arg("ID")),
        "iam_groups_pkey" => format!("group {} already exists", inputs.arg("ID")),
        _ => return None,
    })
}

/// A refused admission or read, as one line with the right exit code.
pub fn refused(inputs: &Inputs, e: &postgres::Error) -> CliError {
    let Some(db) = e.as_db_error() else {
        return CliError::new(format!("{} failed: {}", inputs.what, with_cause(e)));
    };
    let code = db.code();
    if let Some(constraint) = db.constraint() {
        if *code == SqlState::CHECK_VIOLATION || *code == SqlState::NOT_NULL_VIOLATION {
            if let Some((arg, rule)) = checked_argument(constraint) {
                return CliError::config(format!(
                    "{} refused: {arg} {rule}, got {}",
                    inputs.what,
                    quoted(inputs.arg(arg))
                ));
            }
        }
        if *code == SqlState::UNIQUE_VIOLATION {
            if let Some(sentence) = duplicate(constraint, inputs) {
                return CliError::new(format!("{} refused: {sentence}", inputs.what));
            }
        }
    }
    // The admission functions' own RAISE messages are written for operators.
    let message = format!(
        "{} refused: {}",
        inputs.what,
        in_users_words(db.message(), inputs)
    );
    if is_bad_input(code) {
        CliError::config(message)
    } else {
        CliError::new(message)
    }
}

/// `refused`, said more exactly where a read can tell why: an `--actor` that is no identity,
/// a role that does not exist (with the roles that do). Only consulted after a refusal.
pub fn explained(client: &mut postgres::Client, inputs: &Inputs, e: &postgres::Error) -> CliError {
    let plain = refused(inputs, e);
    if e.as_db_error().is_none() || plain.exit_code() != 1 {
        return plain;
    }
    if let Some(actor) = inputs.get("--actor") {
        if let Ok(None) = occ_worker::operator::identity_show(client, actor) {
            return CliError::new(format!(
                "{} refused: --actor {} is not an identity (admin identity list)",
                inputs.what,
                cut(actor)
            ));
        }
    }
    if let Some(role) = inputs.get("ROLE") {
        if let Ok(roles) = occ_worker::operator::role_list(client) {
            let ids: Vec<&str> = roles
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["id"].as_str())
                .collect();
            if !ids.is_empty() && !ids.contains(&role) {
                return CliError::config(format!(
                    "{} refused: no role {}; the roles are {} (admin role list)",
                    inputs.what,
                    cut(role),
                    ids.join(", ")
                ));
            }
        }
    }
    plain
}

/// Input that can never be admitted as given: data exceptions (class 22) and CHECK violations.
fn is_bad_input(code: &SqlState) -> bool {
    code.code().starts_with("22") || *code == SqlState::CHECK_VIOLATION
}

/// `error connecting to server: Connection refused (os error 111)`: the error and its causes.
pub fn with_cause(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// A failed connection, naming the address (never the password) and where the URL came from.
pub fn connect_failed(config: &postgres::Config, source: &str, e: &postgres::Error) -> CliError {
    let target = occ_worker::db::describe(config);
    match e.as_db_error() {
        Some(db) if *db.code() == SqlState::INVALID_CATALOG_NAME => CliError::config(format!(
            "database {} does not exist on {} ({source}): create it or correct the URL",
            config.get_dbname().unwrap_or("?"),
            occ_worker::db::server(config)
        )),
        Some(db)
            if *db.code() == SqlState::INVALID_PASSWORD
                || *db.code() == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            CliError::config(format!(
                "PostgreSQL at {target} refused the login of user {} ({source}): check the user and password",
                config.get_user().unwrap_or("?")
            ))
        }
        Some(db) => CliError::new(format!(
            "database unreachable at {target} ({source}): SQLSTATE {}",
            db.code().code()
        )),
        None => CliError::new(format!(
            "database unreachable at {target} ({source}): {}",
            with_cause(e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_inputs_are_cut_to_their_head_and_length() {
        assert_eq!(cut("team-b"), "team-b");
        assert_eq!(cut(&"a".repeat(64)), "a".repeat(64));
        assert_eq!(
            cut(&"é".repeat(50)),
            format!("{}… (100 bytes)", "é".repeat(32))
        );
        assert_eq!(quoted("x"), "\"x\"");
        assert_eq!(
            quoted(&"a".repeat(65)),
            format!("\"{}…\" (65 bytes)", "a".repeat(32))
        );
    }

    #[test]
    fn ids_in_a_message_carry_the_names_typed() {
        let inputs = Inputs {
            what: "agent delete",
            args: &[("NAMESPACE", "team-b"), ("AGENT", "helper")],
        };
        assert_eq!(
            in_users_words("agent ns-1a2b3c4d/ag-9f is being deleted", &inputs),
            "agent helper (ag-9f) in Namespace team-b (ns-1a2b3c4d) is being deleted"
        );
        assert_eq!(
            in_users_words("Namespace ns-1a2b3c4d is deleting (must be ready)", &inputs),
            "Namespace team-b (ns-1a2b3c4d) is deleting (must be ready)"
        );
        // Typed as the id: nothing to add.
        let by_id = Inputs {
            what: "agent show",
            args: &[("NAMESPACE", "ns-1a2b3c4d"), ("AGENT", "nope")],
        };
        assert_eq!(
            in_users_words("agent ns-1a2b3c4d/nope does not exist", &by_id),
            "agent nope in Namespace ns-1a2b3c4d does not exist"
        );
        // Another kind's name is left as typed, never given the Agent's.
        assert_eq!(
            in_users_words("configuration ns-1a2b3c4d/nope does not exist", &inputs),
            "configuration nope in Namespace team-b (ns-1a2b3c4d) does not exist"
        );
        // Without a Namespace argument a message is left as it is.
        let plain = Inputs {
            what: "grant",
            args: &[("ROLE", "viewer")],
        };
        assert_eq!(in_users_words("no role ns-x", &plain), "no role ns-x");
    }
}
