//! The reference harness (`occ-harness`) keeps the harness image contract of docs/kubernetes.md: `/readyz`
//! answers 503 until `OCC_AGENT_DOCUMENT` is a JSON object and `OCC_TOKEN_FILE` holds a token,
//! then 200; a held failure on demand keeps it running and unready, `/readyz` 503 with the code
//! alone, and the code alone in the termination log as the fallback.

use crate::support::{free_port, http_get, http_get_text, wait_for};
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_occ-harness");

fn get(port: u16, path: &str) -> Option<u16> {
    http_get(("127.0.0.1", port), path)
}

/// Kills the harness on drop.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(port: u16, document: Option<&str>, token_file: &Path) -> Running {
    let mut env = vec![("OCC_TOKEN_FILE", token_file.as_os_str())];
    if let Some(document) = document {
        env.push(("OCC_AGENT_DOCUMENT", OsStr::new(document)));
    }
    start_with(port, &env)
}

/// Runs the harness on `port` with `env` and nothing inherited.
fn start_with(port: u16, env: &[(&str, &OsStr)]) -> Running {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("OCC_HARNESS_ADDR", format!("127.0.0.1:{port}"))
        .envs(env.iter().copied())
        .stdout(crate::support::log_stdio("occ-harness.stdout"))
        .stderr(crate::support::log_stdio("occ-harness.stderr"));
    let running = Running(cmd.spawn().expect("spawn occ-harness"));
    wait_for("the harness to listen", Duration::from_secs(10), || {
        get(port, "/livez") == Some(200)
    });
    running
}

#[test]
fn the_reference_harness_is_ready_once_it_has_its_document_and_token() {
    let dir = std::env::temp_dir().join(format!("occ-harness-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");

    // No document, no token: not ready.
    let port = free_port();
    let harness = start(port, None, &token);
    assert_eq!(get(port, "/readyz"), Some(503));
    drop(harness);

    // A document but an empty token file: still not ready; the token arrives: ready.
    std::fs::write(&token, "").unwrap();
    let port = free_port();
    let _harness = start(port, Some(r#"{"model":"m"}"#), &token);
    assert_eq!(get(port, "/readyz"), Some(503));
    std::fs::write(&token, crate::support::canary("harness-token")).unwrap();
    assert_eq!(get(port, "/readyz"), Some(200));
    assert_eq!(get(port, "/other"), Some(404));
    let _ = std::fs::remove_dir_all(&dir);
}

// Seed 004 lines 1063-1070, 5763-5770: a runtime entrypoint holds its failure unready until
// a restart nothing performs. The reference harness does the same: it keeps running, its
// `/readyz` answers 503 with the code alone (what the driver reads through the Pod proxy),
// ready inputs or not, and the termination log holds the code for the fallback.
#[test]
fn the_reference_harness_holds_a_failure_on_demand_the_contracts_way() {
    let dir = std::env::temp_dir().join(format!("occ-harness-held-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("termination-log");
    let token = dir.join("token");
    std::fs::write(&token, crate::support::canary("harness-token")).unwrap();
    let port = free_port();
    let mut harness = start_with(
        port,
        &[
            ("OCC_HARNESS_HOLD_CODE", OsStr::new("AUTHENTICATION_FAILED")),
            ("OCC_TERMINATION_LOG", log.as_os_str()),
            ("OCC_AGENT_DOCUMENT", OsStr::new(r#"{"model":"m"}"#)),
            ("OCC_TOKEN_FILE", token.as_os_str()),
        ],
    );
    assert_eq!(
        http_get_text(("127.0.0.1", port), "/readyz"),
        Some((503, "AUTHENTICATION_FAILED".to_string()))
    );
    assert_eq!(get(port, "/livez"), Some(200));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "AUTHENTICATION_FAILED"
    );
    // Still holding: never exited, still unready.
    assert!(
        harness.0.try_wait().unwrap().is_none(),
        "the harness exited"
    );
    assert_eq!(get(port, "/readyz"), Some(503));
    drop(harness);

    // An unwritable termination log does not stop the hold: `/readyz` reports it.
    let port = free_port();
    let unwritable = dir.join("absent").join("log");
    let _harness = start_with(
        port,
        &[
            ("OCC_HARNESS_HOLD_CODE", OsStr::new("LOGIN_FAILED")),
            ("OCC_TERMINATION_LOG", unwritable.as_os_str()),
        ],
    );
    assert_eq!(
        http_get_text(("127.0.0.1", port), "/readyz"),
        Some((503, "LOGIN_FAILED".to_string()))
    );
    // A code outside the contract is refused, not written.
    let out = Command::new(BIN)
        .env_clear()
        .env("OCC_HARNESS_HOLD_CODE", "SOMETHING_ELSE")
        .env("OCC_TERMINATION_LOG", dir.join("other"))
        .output()
        .expect("run occ-harness");
    assert_eq!(out.status.code(), Some(2));
    assert!(!dir.join("other").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn as_the_gateway_the_reference_harness_is_ready_while_its_upstream_is() {
    // SPEC C3: the dedicated topology's gateway (`OCC_UPSTREAM_URL`, set by the driver to the
    // revision's Harness Service) is ready only while the Harness behind it is.
    let dir = std::env::temp_dir().join(format!("occ-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, crate::support::canary("harness-token")).unwrap();
    let upstream_port = free_port();
    let upstream = format!("http://127.0.0.1:{upstream_port}");
    let gateway_port = free_port();
    let gateway = start_with(gateway_port, &[("OCC_UPSTREAM_URL", OsStr::new(&upstream))]);
    // Nothing listens upstream yet.
    assert_eq!(get(gateway_port, "/readyz"), Some(503));
    assert_eq!(
        http_get_text(("127.0.0.1", gateway_port), "/readyz").map(|(_, body)| body),
        Some("waiting for OCC_UPSTREAM_URL".to_string())
    );
    let harness = start(upstream_port, Some("{}"), &token);
    assert_eq!(get(gateway_port, "/readyz"), Some(200));
    drop(harness);
    assert_eq!(get(gateway_port, "/readyz"), Some(503));
    drop(gateway);
    let _ = std::fs::remove_dir_all(dir);
}

/// `occ-harness workspace-setup` with `env` and nothing inherited: (exit, stderr).
fn setup(env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("workspace-setup")
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("occ-harness");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// SPEC WS3: the reference workspace setup records the setup once per id and exits 0; asked to
// refuse, it writes the code alone to its termination log and exits 1; bad input exits 2.
#[test]
fn ws3_the_reference_setup_is_idempotent_per_id_and_refuses_on_demand() {
    let dir = std::env::temp_dir().join(format!("occ-harness-ws-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = dir.to_str().unwrap();
    let log = dir.join("termination-log");
    let log = log.to_str().unwrap();
    let base = [
        ("OCC_WORKSPACE_DIR", root),
        ("OCC_WORKSPACE_SETUP_ID", "ws-0a1b2c3d"),
        (
            "OCC_WORKSPACE_SETUP",
            r#"{"repositories": ["github.com/acme/app"]}"#,
        ),
        ("OCC_TERMINATION_LOG", log),
    ];
    let (code, stderr) = setup(&base);
    assert_eq!(code, 0, "{stderr}");
    let recorded = dir.join(".occ-workspace-setup/ws-0a1b2c3d");
    assert_eq!(
        std::fs::read_to_string(&recorded).unwrap(),
        r#"{"repositories": ["github.com/acme/app"]}"#
    );
    // Again: already done, nothing rewritten.
    std::fs::write(&recorded, "kept").unwrap();
    let (code, stderr) = setup(&base);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read_to_string(&recorded).unwrap(), "kept");
    // Refusing: the code alone in the termination log, exit 1.
    let mut refusing = base.to_vec();
    refusing.push(("OCC_HARNESS_HOLD_CODE", "WORKSPACE_SETUP_REFUSED"));
    refusing[1] = ("OCC_WORKSPACE_SETUP_ID", "ws-ffffffff");
    let (code, _) = setup(&refusing);
    assert_eq!(code, 1);
    assert_eq!(
        std::fs::read_to_string(log).unwrap(),
        "WORKSPACE_SETUP_REFUSED"
    );
    assert!(!dir.join(".occ-workspace-setup/ws-ffffffff").exists());
    // Bad input names the variable.
    for (bad, variable) in [
        (
            ("OCC_WORKSPACE_SETUP_ID", "../escape"),
            "OCC_WORKSPACE_SETUP_ID",
        ),
        (("OCC_WORKSPACE_SETUP", "[1]"), "OCC_WORKSPACE_SETUP"),
    ] {
        let mut env = base.to_vec();
        env.retain(|(k, _)| *k != bad.0);
        env.push(bad);
        let (code, stderr) = setup(&env);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(variable), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
