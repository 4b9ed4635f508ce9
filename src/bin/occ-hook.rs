//! The reference lifecycle hook: the smallest webhook that keeps the lifecycle hook contract
//! (SPEC §14; docs/operating.md, "Lifecycle hooks"), answering from a policy file, so an
//! operator can try hooks (a retention hold on Namespace deletion, a start freeze) before any
//! real Configuration, Sandbox or IAM driver exists.
//!
//! Usage: `occ-hook --cert CERT.pem --key KEY.pem --policy POLICY.json [--listen ADDR]`
//! (default `127.0.0.1:9443`). It serves HTTPS with the given certificate and answers each
//! `POST` with the policy file's entry for the request's phase, read again on every call so it
//! can be edited while it runs: `{"beforeNamespaceDelete": {"allowed": false, "code":
//! "RETENTION_HOLD"}, "beforeWorkloadStart": {"allowed": true, "launchValues": {"NAME":
//! "opaque-…"}}}`; a phase the file does not name (or a file that cannot be read) is allowed.
//! It prints `{"event": "hook.listening", "addr": …}` once listening (`--listen
//! 127.0.0.1:0` takes a free port), then one JSON line per call: the phase, the ids asked about and the answer's `allowed`
//! and `code`, never a launch value.

#[path = "reference/server.rs"]
mod server;

use serde_json::{json, Value};
use server::Stream;
use std::path::Path;

const USAGE: &str =
    "usage: occ-hook --cert CERT.pem --key KEY.pem --policy POLICY.json [--listen ADDR]
  Answers lifecycle hook calls over HTTPS from the policy file, read again on every call:
  {\"PHASE\": {\"allowed\": false, \"code\": \"CODE\"}, …}; a phase it does not name is allowed.
  --listen defaults to 127.0.0.1:9443; port 0 takes a free port (printed first).";

fn main() {
    server::run("occ-hook", USAGE, "127.0.0.1:9443", "hook.listening", serve);
}

/// One request, one answer: the policy file's answer for the request's phase, else allowed.
fn serve(stream: &mut Stream, _path: String, request: Value, policy: &Path) {
    let phase = request["phase"].as_str().unwrap_or_default();
    let answer = std::fs::read(policy)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .and_then(|p| p.get(phase).cloned())
        .unwrap_or_else(|| json!({"allowed": true}));
    println!(
        "{}",
        json!({
            "event": "hook.call", "phase": phase,
            "namespaceId": request["namespaceId"], "agentId": request["agentId"],
            "revisionId": request["revisionId"],
            "allowed": answer["allowed"], "code": answer["code"],
        })
    );
    server::respond(stream, "200 OK", &answer);
}
