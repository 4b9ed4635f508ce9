//! Exec credential plugins (`client.authentication.k8s.io/v1` and `v1beta1`), as kubectl runs
//! them for cloud clusters (EKS, GKE, AKS, OIDC helpers): the kubeconfig's `users[].user.exec`
//! names a command that prints an `ExecCredential` whose `status.token` is the bearer token.
//!
//! This module owns running that command (its `args` and `env`, `KUBERNETES_EXEC_INFO` saying
//! it is not interactive, no standard input, bounded by `EXEC_TIMEOUT` and killed past it),
//! reading its answer (a token and when it expires) and refusing what occ-worker does not
//! support (another API version, a client certificate instead of a token). The client caches
//! the token until shortly before it expires and runs the command again after a 401. It never
//! logs, stores or returns the command's output: errors name the command and what was wrong
//! with its answer. When the command fails, the error carries the last line it wrote to its
//! standard error (cut to `HINT_CHARS` printable characters), as kubectl shows it: that is
//! where a plugin says what to do (`run: gcloud auth login`).

use super::connection_error::{ConnectionError, ConnectionErrorKind};
use serde::Deserialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// How long the command may run.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read.
const MAX_OUTPUT: u64 = 1024 * 1024;
/// The most of a failed command's standard error read, and of its last line shown.
const MAX_STDERR: u64 = 64 * 1024;
const HINT_CHARS: usize = 200;
/// The API versions of `ExecCredential` understood.
const API_VERSIONS: [&str; 2] = [
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
];

/// The kubeconfig's `exec` block.
#[derive(Clone, Debug, Deserialize)]
pub struct ExecConfig {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Option<Vec<EnvVar>>,
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// A token from the plugin and when it stops being valid (none: until a 401).
#[derive(Clone)]
pub struct ExecToken {
    pub token: String,
    pub expires: Option<SystemTime>,
}

impl std::fmt::Debug for ExecToken {
    /// Never the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecToken")
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Answer {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    status: Option<Status>,
}

#[derive(Deserialize)]
struct Status {
    token: Option<String>,
    #[serde(rename = "expirationTimestamp")]
    expiration_timestamp: Option<String>,
    #[serde(rename = "clientCertificateData")]
    client_certificate_data: Option<String>,
}

fn error(kind: ConnectionErrorKind, config: &ExecConfig, what: &str) -> ConnectionError {
    ConnectionError::new(kind, format!("exec plugin {:?} {what}", config.command))
}

/// Checks what can be checked without running the plugin: a command and a known API version.
pub fn validate(config: &ExecConfig) -> Result<(), ConnectionError> {
    if config.command.trim().is_empty() {
        return Err(error(
            ConnectionErrorKind::Credential,
            config,
            "has no command",
        ));
    }
    if !API_VERSIONS.contains(&config.api_version.as_str()) {
        return Err(error(
            ConnectionErrorKind::Unsupported,
            config,
            &format!(
                "asks for apiVersion {:?}; occ-worker supports {}",
                config.api_version,
                API_VERSIONS.join(" and ")
            ),
        ));
    }
    Ok(())
}

/// The command to run: a relative path with a separator is the kubeconfig directory's, as
/// kubectl resolves it; a bare name is looked up on PATH.
fn program(config: &ExecConfig, base: &Path) -> PathBuf {
    let command = Path::new(&config.command);
    if command.is_relative() && config.command.contains('/') {
        base.join(command)
    } else {
        command.to_path_buf()
    }
}

/// Runs the plugin once and reads its token.
pub fn run(
    config: &ExecConfig,
    base: &Path,
    timeout: Duration,
) -> Result<ExecToken, ConnectionError> {
    validate(config)?;
    let info = serde_json::json!({
        "apiVersion": config.api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": false},
    });
    let mut command = Command::new(program(config, base));
    // Its own process group, so a timeout kills whatever the plugin started too.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command
        .args(&config.args)
        .env("KUBERNETES_EXEC_INFO", info.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in config.env.iter().flatten() {
        command.env(&var.name, &var.value);
    }
    let mut child = command
        .spawn()
        .map_err(|e| error(ConnectionErrorKind::Io, config, &not_started(config, &e)))?;
    // Read the answer and the complaints beside the wait, so a full pipe never blocks the
    // plugin.
    let read = |pipe: Box<dyn Read + Send>, limit: u64| {
        std::thread::Builder::new()
            .name("occ-kube-exec".into())
            .spawn(move || {
                let mut out = Vec::new();
                let _ = pipe.take(limit).read_to_end(&mut out);
                out
            })
            .map_err(|_| error(ConnectionErrorKind::Io, config, "cannot be read"))
    };
    let reader = read(
        Box::new(child.stdout.take().expect("piped stdout")),
        MAX_OUTPUT,
    )?;
    let complaints = read(
        Box::new(child.stderr.take().expect("piped stderr")),
        MAX_STDERR,
    )?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                // SAFETY: kill(2) on the plugin's own process group (its id, set above).
                unsafe {
                    libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                // The readers end when the group's last copy of the pipes closes.
                drop(reader);
                drop(complaints);
                return Err(error(
                    ConnectionErrorKind::Io,
                    config,
                    &format!("did not answer within {} s", timeout.as_secs()),
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => {
                return Err(error(
                    ConnectionErrorKind::Io,
                    config,
                    &format!("cannot be waited for ({})", e.kind()),
                ))
            }
        }
    };
    let out = reader.join().unwrap_or_default();
    let complaints = complaints.join().unwrap_or_default();
    if !status.success() {
        return Err(error(
            ConnectionErrorKind::Io,
            config,
            &format!("failed ({status})"),
        )
        .with_hint(hint(&complaints)));
    }
    parse(config, &out)
}

/// Why the command could not be started, in kubectl's words: a bare name not on PATH, a path
/// that does not exist or cannot be run.
fn not_started(config: &ExecConfig, e: &std::io::Error) -> String {
    let bare = !config.command.contains('/');
    match e.kind() {
        std::io::ErrorKind::NotFound if bare => {
            "is not found on PATH: install it, or give its full path as the kubeconfig's users[].user.exec.command".into()
        }
        std::io::ErrorKind::NotFound => "does not exist".into(),
        std::io::ErrorKind::PermissionDenied => "cannot be run (permission denied: is it executable?)".into(),
        kind => format!("cannot be started ({kind})"),
    }
}

/// The last non-empty line of a failed command's standard error, printable characters only,
/// cut to `HINT_CHARS`.
fn hint(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    let shown: String = line
        .chars()
        .filter(|c| !c.is_control())
        .take(HINT_CHARS)
        .collect();
    (!shown.is_empty()).then_some(shown)
}

/// Reads an `ExecCredential` answer.
fn parse(config: &ExecConfig, out: &[u8]) -> Result<ExecToken, ConnectionError> {
    let malformed = |what: &str| error(ConnectionErrorKind::Credential, config, what);
    let answer: Answer =
        serde_json::from_slice(out).map_err(|_| malformed("printed no ExecCredential JSON"))?;
    if answer.kind.as_deref() != Some("ExecCredential")
        || answer.api_version.as_deref() != Some(config.api_version.as_str())
    {
        return Err(malformed(&format!(
            "answered something else than an ExecCredential of {}",
            config.api_version
        )));
    }
    let status = answer
        .status
        .ok_or_else(|| malformed("answered without a status"))?;
    let Some(token) = status.token.filter(|t| !t.trim().is_empty()) else {
        return Err(if status.client_certificate_data.is_some() {
            error(
                ConnectionErrorKind::Unsupported,
                config,
                "answered a client certificate; occ-worker supports token plugins only",
            )
        } else {
            malformed("answered no token")
        });
    };
    let expires = match status.expiration_timestamp {
        None => None,
        Some(stamp) => {
            let at =
                time::OffsetDateTime::parse(&stamp, &time::format_description::well_known::Rfc3339)
                    .map_err(|_| {
                        malformed("answered an expirationTimestamp that is not RFC 3339")
                    })?;
            Some(SystemTime::from(at))
        }
    };
    Ok(ExecToken {
        token: token.trim().to_string(),
        expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(script: &str) -> (ExecConfig, PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("occ-exec-{}-{}", std::process::id(), script.len()));
        std::fs::create_dir_all(&dir).unwrap();
        (
            ExecConfig {
                command: "sh".into(),
                args: vec!["-c".into(), script.into()],
                env: Some(vec![EnvVar {
                    name: "OCC_TEST_TOKEN".into(),
                    value: "tok-from-env".into(),
                }]),
                api_version: "client.authentication.k8s.io/v1".into(),
            },
            dir,
        )
    }

    #[test]
    fn a_token_and_its_expiry_are_read_with_the_configured_env() {
        let (c, dir) = config(
            r#"[ -n "$KUBERNETES_EXEC_INFO" ] || exit 3; printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"2030-01-02T03:04:05Z"}}' "$OCC_TEST_TOKEN""#,
        );
        let t = run(&c, &dir, EXEC_TIMEOUT).expect("token");
        assert_eq!(t.token, "tok-from-env");
        assert_eq!(
            t.expires,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_553_445))
        );
    }

    #[test]
    fn failures_name_the_command_never_its_output() {
        for (script, what) in [
            ("echo secret-output; exit 1", "failed"),
            ("echo secret-output", "printed no ExecCredential JSON"),
            (
                r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"x"}}'"#,
                "client certificate",
            ),
        ] {
            let (c, dir) = config(script);
            let e = run(&c, &dir, EXEC_TIMEOUT).unwrap_err().to_string();
            assert!(e.contains("exec plugin \"sh\""), "{e}");
            assert!(e.contains(what), "{e}");
            assert!(!e.contains("secret-output"), "{e}");
        }
        // A failing plugin's own last line on stderr is its hint, as kubectl shows it; its
        // stdout still never is.
        let (c, dir) = config("echo secret-output; echo 'ERROR: expired' >&2; echo 'run: gcloud auth login' >&2; exit 1");
        assert_eq!(
            run(&c, &dir, EXEC_TIMEOUT).unwrap_err().to_string(),
            "exec plugin \"sh\" failed (exit status: 1): it said \"run: gcloud auth login\""
        );
        let mut missing = config("true").0;
        missing.command = "occ-no-such-plugin".into();
        assert_eq!(
            run(&missing, &dir, EXEC_TIMEOUT).unwrap_err().to_string(),
            "exec plugin \"occ-no-such-plugin\" is not found on PATH: install it, or give its full path as the kubeconfig's users[].user.exec.command"
        );
        let (c, dir) = config("sleep 5");
        let started = Instant::now();
        let e = run(&c, &dir, Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().contains("did not answer"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(4));
        let mut old = config("true").0;
        old.api_version = "client.authentication.k8s.io/v1alpha1".into();
        assert_eq!(
            validate(&old).unwrap_err().kind(),
            ConnectionErrorKind::Unsupported
        );
    }
}
