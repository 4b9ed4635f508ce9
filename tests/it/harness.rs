//! The reference harness (`occ-harness`) keeps the harness image contract of docs/kubernetes.md: `/readyz`
//! answers 503 until `OCC_AGENT_DOCUMENT` is a JSON object and `OCC_TOKEN_FILE` holds a token,
//! then 200; a held failure on demand is the code alone in the termination log and exit 1.

use crate::support::{free_port, http_get, wait_for};
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

fn start(port: u16, document: Option<&str>, token_file: &std::path::Path) -> Running {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("OCC_HARNESS_ADDR", format!("127.0.0.1:{port}"))
        .env("OCC_TOKEN_FILE", token_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(document) = document {
        cmd.env("OCC_AGENT_DOCUMENT", document);
    }
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
    std::fs::write(&token, "eyJ-token").unwrap();
    assert_eq!(get(port, "/readyz"), Some(200));
    assert_eq!(get(port, "/other"), Some(404));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_reference_harness_holds_a_failure_on_demand_the_contracts_way() {
    let dir = std::env::temp_dir().join(format!("occ-harness-held-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("termination-log");
    let out = Command::new(BIN)
        .env_clear()
        .env("OCC_HARNESS_HOLD_CODE", "AUTHENTICATION_FAILED")
        .env("OCC_TERMINATION_LOG", &log)
        .output()
        .expect("run occ-harness");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "AUTHENTICATION_FAILED"
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
