//! `occ-worker admin repository grant|revoke|list|approve|unapprove|sessions`: the built-in
//! repository policy (SPEC G8, G19): a Namespace's repository grants, its Agents' standing
//! approvals, and the sessions a repository sender opened for their revisions. Also the input
//! rules `admin agent deploy --repository … [--repository-deadline DURATION | --standing]`
//! shares: a REF, a scope and a DURATION, each refused here in one line naming what was typed
//! (exit 2) before anything is sent.
//!
//! Every change calls one PostgreSQL admission function (`occ.repository_*`), which checks
//! `administer` on the Namespace for `--actor`, refuses with one line and audits
//! `openclaw.repositories.<verb>`. This module only parses, calls and prints; it decides
//! nothing itself and never sees a session's material.

use super::super::error::CliError;
use super::super::globals::Globals;
use super::super::refusal::{cut, refused, Inputs};
use super::common::call;
use clap::Subcommand;

/// What a grant or an approval allows: `write` covers `read`.
#[derive(Clone, Copy, Debug)]
pub enum Scope {
    Read,
    Write,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
        }
    }

    /// `--scope` as typed: `read` or `write`, else one line naming it (exit 2).
    fn parse(what: &str, typed: &str) -> Result<Scope, CliError> {
        match typed {
            "read" => Ok(Scope::Read),
            "write" => Ok(Scope::Write),
            _ => Err(CliError::config(format!(
                "{what} refused: --scope must be read or write, got {:?}",
                cut(typed)
            ))),
        }
    }
}

#[derive(Subcommand)]
pub enum RepositoryCommand {
    /// Grant a repository to the Namespace's Agents at a scope, or set the scope of a granted
    /// one (needs `administer` on the Namespace).
    Grant {
        /// The Namespace id or name.
        namespace: String,
        /// The repository: HOST/PATH, e.g. github.com/acme/app.
        #[arg(value_name = "REF")]
        repository: String,
        /// What the grant allows: read or write (write covers read).
        #[arg(long, value_name = "read|write", default_value = "read")]
        scope: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// Revoke the Namespace's grant of a repository (needs `administer` on the Namespace).
    Revoke {
        /// The Namespace id or name.
        namespace: String,
        /// The repository: HOST/PATH.
        #[arg(value_name = "REF")]
        repository: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// List the Namespace's grants and its Agents' standing approvals.
    List {
        /// The Namespace id or name.
        namespace: String,
        /// Only this Agent's approvals (its id or name).
        agent: Option<String>,
    },
    /// Give an Agent a standing approval of a granted repository: its revisions deployed with
    /// `--standing` keep Git access until the approval is removed or changed (SPEC G15).
    Approve {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
        /// The repository: HOST/PATH, granted to the Namespace at the scope.
        #[arg(value_name = "REF")]
        repository: String,
        /// What the approval allows: read or write (write covers read).
        #[arg(long, value_name = "read|write", default_value = "read")]
        scope: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// Remove an Agent's standing approval of a repository.
    Unapprove {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name.
        agent: String,
        /// The repository: HOST/PATH.
        #[arg(value_name = "REF")]
        repository: String,
        /// The identity making the change (authorized, and named in the audit trail).
        #[arg(long)]
        actor: String,
    },
    /// List the repository sessions of the Namespace's revisions, or of one Agent's: revision,
    /// REF, phase, session id and update time.
    Sessions {
        /// The Namespace id or name.
        namespace: String,
        /// The Agent id or name (default: every Agent of the Namespace).
        agent: Option<String>,
    },
}

pub fn run(globals: &Globals, command: RepositoryCommand) -> Result<(), CliError> {
    match command {
        RepositoryCommand::Grant {
            namespace,
            repository,
            scope,
            actor,
        } => {
            check_ref("repository grant", &repository)?;
            let scope = Scope::parse("repository grant", &scope)?;
            call(
                globals,
                "repository grant",
                &[
                    ("NAMESPACE", &namespace),
                    ("REF", &repository),
                    ("--actor", &actor),
                ],
                "SELECT occ.repository_grant($1, $2, $3, $4)",
                &[&actor, &namespace, &repository, &scope.as_str()],
            )
        }
        RepositoryCommand::Revoke {
            namespace,
            repository,
            actor,
        } => {
            check_ref("repository revoke", &repository)?;
            call(
                globals,
                "repository revoke",
                &[
                    ("NAMESPACE", &namespace),
                    ("REF", &repository),
                    ("--actor", &actor),
                ],
                "SELECT occ.repository_revoke($1, $2, $3)",
                &[&actor, &namespace, &repository],
            )
        }
        RepositoryCommand::List { namespace, agent } => call(
            globals,
            "repository list",
            &[
                ("NAMESPACE", &namespace),
                ("AGENT", agent.as_deref().unwrap_or_default()),
            ],
            "SELECT occ.repository_list($1, $2)",
            &[&namespace, &agent],
        ),
        RepositoryCommand::Approve {
            namespace,
            agent,
            repository,
            scope,
            actor,
        } => {
            check_ref("repository approve", &repository)?;
            let scope = Scope::parse("repository approve", &scope)?;
            call(
                globals,
                "repository approve",
                &[
                    ("NAMESPACE", &namespace),
                    ("AGENT", &agent),
                    ("REF", &repository),
                    ("--actor", &actor),
                ],
                "SELECT occ.repository_approve($1, $2, $3, $4, $5)",
                &[&actor, &namespace, &agent, &repository, &scope.as_str()],
            )
        }
        RepositoryCommand::Unapprove {
            namespace,
            agent,
            repository,
            actor,
        } => {
            check_ref("repository unapprove", &repository)?;
            call(
                globals,
                "repository unapprove",
                &[
                    ("NAMESPACE", &namespace),
                    ("AGENT", &agent),
                    ("REF", &repository),
                    ("--actor", &actor),
                ],
                "SELECT occ.repository_unapprove($1, $2, $3, $4)",
                &[&actor, &namespace, &agent, &repository],
            )
        }
        RepositoryCommand::Sessions { namespace, agent } => {
            sessions(globals, &namespace, agent.as_deref())
        }
    }
}

/// `repository sessions`: a table, newest first (`--json` prints every field).
fn sessions(globals: &Globals, namespace: &str, agent: Option<&str>) -> Result<(), CliError> {
    let mut client = globals.connect()?;
    let inputs = Inputs {
        what: "repository sessions",
        args: &[
            ("NAMESPACE", namespace),
            ("AGENT", agent.unwrap_or_default()),
        ],
    };
    let row = client
        .query_one(
            "SELECT occ.repository_sessions($1, $2)",
            &[&namespace, &agent],
        )
        .map_err(|e| refused(&inputs, &e))?;
    globals.print_table(
        &row.get(0),
        &[
            ("AGENT", "agent"),
            ("REVISION", "revision"),
            ("REF", "repositoryRef"),
            ("PHASE", "phase"),
            ("SESSION", "sessionId"),
            ("UPDATED AT", "updatedAt"),
        ],
    );
    Ok(())
}

/// The rule of a REF (SPEC §19 Data; `occ.is_repository_ref`), said when one is refused.
pub const REF_RULE: &str = "must be HOST/PATH: a lower-case host with an optional :PORT, then \
     /-separated segments of A-Za-z0-9._- (not . or ..), at most 256 characters";

/// Whether `value` is a REF: `HOST/PATH`, a lower-case host (DNS labels of `a-z0-9-`, neither
/// starting nor ending with `-`) with an optional `:PORT` of 1 to 5 digits, then one or more
/// `/`-separated segments of `A-Za-z0-9._-` other than `.` and `..`, at most 256 characters.
pub fn is_repository_ref(value: &str) -> bool {
    if value.len() > 256 {
        return false;
    }
    let Some((authority, path)) = value.split_once('/') else {
        return false;
    };
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let label = |l: &str| {
        !l.is_empty()
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let segment = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    host.split('.').all(label)
        && port.is_none_or(|p| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
        && path.split('/').all(segment)
}

fn check_ref(what: &str, value: &str) -> Result<(), CliError> {
    if is_repository_ref(value) {
        Ok(())
    } else {
        Err(CliError::config(format!(
            "{what} refused: REF {REF_RULE}, got {:?}",
            cut(value)
        )))
    }
}

/// One `--repository REF[=read|write]` of a deployment: the REF and its scope (`read` unless
/// given), or the one line that refuses it.
pub fn parse_binding(value: &str) -> Result<(String, Scope), CliError> {
    let (repository, scope) = match value.rsplit_once('=') {
        Some((repository, "read")) => (repository, Scope::Read),
        Some((repository, "write")) => (repository, Scope::Write),
        Some((_, other)) => {
            return Err(CliError::config(format!(
                "agent deploy refused: --repository {:?} has scope {:?}; the scope is read or write (REF[=read|write])",
                cut(value),
                cut(other)
            )))
        }
        None => (value, Scope::Read),
    };
    if !is_repository_ref(repository) {
        return Err(CliError::config(format!(
            "agent deploy refused: --repository {REF_RULE}, got {:?}",
            cut(value)
        )));
    }
    Ok((repository.to_string(), scope))
}

/// A `--repository-deadline DURATION`: `<n>m`, `<n>h` or `<n>d`, from 1 minute to 7 days, as
/// minutes; anything else is refused in one line naming what was typed.
pub fn parse_deadline(value: &str) -> Result<u32, CliError> {
    let refuse = || {
        CliError::config(format!(
            "agent deploy refused: --repository-deadline must be <n>m, <n>h or <n>d from 1m to 7d, got {:?}",
            cut(value)
        ))
    };
    let unit = value.chars().last().ok_or_else(refuse)?;
    let digits = &value[..value.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse());
    }
    let n: u32 = digits.parse().map_err(|_| refuse())?;
    let minutes = match unit {
        'm' => n,
        'h' => n * 60,
        'd' => n * 24 * 60,
        _ => return Err(refuse()),
    };
    if (1..=7 * 24 * 60).contains(&minutes) {
        Ok(minutes)
    } else {
        Err(refuse())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g8_a_ref_is_a_lower_case_host_and_a_path_of_plain_segments() {
        for good in [
            "github.com/acme/app",
            "gitlab.example:8443/group/sub/app.git",
            "a/b",
            "git-1.internal/x_y/.hidden",
        ] {
            assert!(is_repository_ref(good), "{good}");
        }
        let long = format!("h.io/{}", "a".repeat(252));
        assert!(is_repository_ref(&long[..256]));
        assert!(!is_repository_ref(&long));
        for bad in [
            "",
            "github.com",
            "github.com/",
            "GitHub.com/acme",
            "github.com//a",
            "github.com/a/",
            "github.com/a/..",
            "github.com/./a",
            "-x.com/a",
            "x-.com/a",
            "x..com/a",
            "x.com:/a",
            "x.com:123456/a",
            "x.com:80a/a",
            "https://github.com/a",
            "git.x/a b",
            "git.x/ä",
        ] {
            assert!(!is_repository_ref(bad), "{bad}");
        }
    }

    #[test]
    fn g8_a_binding_and_a_deadline_parse_or_refuse_in_one_line() {
        assert!(matches!(
            parse_binding("github.com/a/b"),
            Ok((ref r, Scope::Read)) if r == "github.com/a/b"
        ));
        assert!(matches!(
            parse_binding("github.com/a/b=write"),
            Ok((ref r, Scope::Write)) if r == "github.com/a/b"
        ));
        for bad in ["github.com/a/b=admin", "github.com=read", "x", "a/b="] {
            let e = parse_binding(bad).expect_err(bad);
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(e.to_string().contains(bad), "{e}");
            assert_eq!(e.to_string().lines().count(), 1);
        }
        assert_eq!(parse_deadline("1m").ok(), Some(1));
        assert_eq!(parse_deadline("8h").ok(), Some(480));
        assert_eq!(parse_deadline("7d").ok(), Some(10080));
        assert_eq!(parse_deadline("10080m").ok(), Some(10080));
        for bad in [
            "0m", "8d", "10081m", "h", "1.5h", "-1h", "1w", "", "1 h", "9999999m",
        ] {
            let e = parse_deadline(bad).expect_err(bad);
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }
}
