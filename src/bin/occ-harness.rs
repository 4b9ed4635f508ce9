//! The reference harness: the smallest program that keeps the harness image contract (docs/kubernetes.md),
//! so an operator can watch an Agent go ready on their own cluster before any real harness
//! exists (`scripts/build-image` builds it as the image `occ-harness:latest`).
//!
//! It listens on `OCC_HARNESS_ADDR` (default `0.0.0.0:8080`) and answers `GET /livez` with 200
//! and `GET /readyz` with 200 once `OCC_AGENT_DOCUMENT` is a JSON object and the file named by
//! `OCC_TOKEN_FILE` is readable and not empty (503 before, with the missing input's name). With
//! `OCC_UPSTREAM_URL` set it plays the Agent's gateway in front of a dedicated Harness instead:
//! ready while the upstream's `/readyz` answers 200. With
//! `OCC_HARNESS_HOLD_CODE` set to one of the contract's codes it holds that failure the
//! contract's way instead: it stays running and unready, `/readyz` answering 503 with the code
//! alone as its body, and writes the code to `/dev/termination-log` too (`OCC_TERMINATION_LOG`
//! overrides the path), the fallback read once the container ends. It never exits on its own
//! then, and never prints the document or the token.
//!
//! `occ-harness workspace-setup` is the reference workspace setup (SPEC WS3), the program the
//! Kubernetes driver's `workspace-setup` init container runs: it records the setup named by
//! `OCC_WORKSPACE_SETUP_ID` (its document, a JSON object, in `OCC_WORKSPACE_SETUP`) as the
//! file `/var/lib/harness/.occ-workspace-setup/<id>` (`OCC_WORKSPACE_DIR` overrides
//! `/var/lib/harness`) and exits 0; a setup already recorded is done (idempotent per id). With
//! `OCC_HARNESS_HOLD_CODE=WORKSPACE_SETUP_REFUSED` it refuses instead: the code alone to the
//! termination log, exit 1. Bad input exits 2 naming the variable.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// The held-failure codes of the harness contract (docs/kubernetes.md, "The harness image contract").
const HELD_CODES: [&str; 9] = [
    "AUTHENTICATION_FAILED",
    "MODEL_PROBE_TIMEOUT",
    "MODEL_PROBE_FAILED",
    "MODEL_PROBE_CPU_STARVED",
    "LOGIN_FAILED",
    "UNAVAILABLE",
    "INCOMPATIBLE_RESPONSE",
    "WORKSPACE_SETUP_REFUSED",
    "REPOSITORY_ROUTE_BLOCKED",
];

/// What `/readyz` waits for, if anything: the name of the first missing input. As the gateway
/// in front of a dedicated Harness (`OCC_UPSTREAM_URL` set), that is a ready upstream.
fn missing_input() -> Option<&'static str> {
    if let Ok(upstream) = std::env::var("OCC_UPSTREAM_URL") {
        return (!upstream_ready(&upstream)).then_some("OCC_UPSTREAM_URL");
    }
    let document = std::env::var("OCC_AGENT_DOCUMENT").ok();
    let is_object = document
        .as_deref()
        .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .is_some_and(|v| v.is_object());
    if !is_object {
        return Some("OCC_AGENT_DOCUMENT");
    }
    let token = std::env::var_os("OCC_TOKEN_FILE")
        .and_then(|path| std::fs::read(path).ok())
        .is_some_and(|t| !t.trim_ascii().is_empty());
    if !token {
        return Some("OCC_TOKEN_FILE");
    }
    None
}

/// Whether the upstream's `/readyz` answers 200 within two seconds.
fn upstream_ready(upstream: &str) -> bool {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(2)))
        .build()
        .into();
    let url = format!("{}/readyz", upstream.trim_end_matches('/'));
    agent.get(&url).call().is_ok()
}

fn answer(stream: TcpStream, held: Option<&str>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    let mut reader = BufReader::new(&stream);
    if reader.read_line(&mut line).is_err() {
        return;
    }
    // The rest of the head; the contract's requests carry no body.
    let mut header = String::new();
    while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
        header.clear();
    }
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (status, body) = match path {
        "/livez" => (200, "ok".to_string()),
        "/readyz" => match (held, missing_input()) {
            (Some(code), _) => (503, code.to_string()),
            (None, None) => (200, "ready".to_string()),
            (None, Some(input)) => (503, format!("waiting for {input}")),
        },
        _ => (404, "not found".to_string()),
    };
    let reason = match status {
        200 => "OK",
        503 => "Service Unavailable",
        _ => "Not Found",
    };
    let mut out = &stream;
    let _ = write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// The held code asked for, if any, written to the termination log as the fallback; exits 2
/// on a code outside the contract.
fn held_code() -> Option<String> {
    let code = std::env::var("OCC_HARNESS_HOLD_CODE").ok()?;
    let code = code.trim();
    if !HELD_CODES.contains(&code) {
        eprintln!(
            "occ-harness: OCC_HARNESS_HOLD_CODE must be one of {}",
            HELD_CODES.join(", ")
        );
        std::process::exit(2);
    }
    let log =
        std::env::var("OCC_TERMINATION_LOG").unwrap_or_else(|_| "/dev/termination-log".to_string());
    // The fallback only: `/readyz` reports the hold whether or not this file can be written.
    if let Err(e) = std::fs::write(&log, code) {
        eprintln!("occ-harness: cannot write {log}: {e}");
    }
    eprintln!("occ-harness: holding failure {code}, unready until restarted");
    Some(code.to_string())
}

/// The reference workspace setup (SPEC WS3): the exit code.
fn workspace_setup() -> i32 {
    let id = std::env::var("OCC_WORKSPACE_SETUP_ID").unwrap_or_default();
    let safe = id.len() <= 64
        && !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !safe {
        eprintln!("occ-harness workspace-setup: OCC_WORKSPACE_SETUP_ID must be a setup id such as ws-0a1b2c3d");
        return 2;
    }
    let document = std::env::var("OCC_WORKSPACE_SETUP").ok();
    let object = document
        .as_deref()
        .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .is_some_and(|v| v.is_object());
    if !object {
        eprintln!("occ-harness workspace-setup: OCC_WORKSPACE_SETUP must be one JSON object");
        return 2;
    }
    if std::env::var("OCC_HARNESS_HOLD_CODE").is_ok_and(|c| c.trim() == "WORKSPACE_SETUP_REFUSED") {
        let log = std::env::var("OCC_TERMINATION_LOG")
            .unwrap_or_else(|_| "/dev/termination-log".to_string());
        if let Err(e) = std::fs::write(&log, "WORKSPACE_SETUP_REFUSED") {
            eprintln!("occ-harness workspace-setup: cannot write {log}: {e}");
        }
        eprintln!("occ-harness workspace-setup: refusing setup {id} (WORKSPACE_SETUP_REFUSED)");
        return 1;
    }
    let root =
        std::env::var("OCC_WORKSPACE_DIR").unwrap_or_else(|_| "/var/lib/harness".to_string());
    let dir = std::path::Path::new(&root).join(".occ-workspace-setup");
    let done = dir.join(&id);
    if done.exists() {
        eprintln!("occ-harness workspace-setup: setup {id} already done");
        return 0;
    }
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&done, document.unwrap_or_default()));
    match written {
        Ok(()) => {
            eprintln!("occ-harness workspace-setup: setup {id} done");
            0
        }
        Err(e) => {
            // A non-zero exit: the kubelet restarts the init container (WORKSPACE_SETUP_RETRYING).
            eprintln!(
                "occ-harness workspace-setup: cannot write {}: {e}",
                done.display()
            );
            1
        }
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("workspace-setup") {
        std::process::exit(workspace_setup());
    }
    let held = held_code();
    let addr = std::env::var("OCC_HARNESS_ADDR").unwrap_or_else(|_| "0.0.0.0:8080".to_string());
    let listener = match TcpListener::bind(&addr) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("occ-harness: cannot listen on {addr} (OCC_HARNESS_ADDR): {e}");
            std::process::exit(2);
        }
    };
    eprintln!("occ-harness: listening on {addr}");
    for stream in listener.incoming().flatten() {
        // One request at a time: probes only.
        answer(stream, held.as_deref());
    }
}
