//! The reference repository sender (SPEC G22): the smallest native repository sender that
//! keeps the sender contract (SPEC G20; docs/operating.md, "Repository credentials"),
//! answering from a policy file, so an operator can hand Git access to Agents before any real
//! broker exists.
//!
//! Usage: `occ-git-sender --cert CERT.pem --key KEY.pem --policy POLICY.json [--listen ADDR]`
//! (default `127.0.0.1:9444`; port 0 takes a free port). It serves HTTPS with the given
//! certificate and answers the four calls, reading the policy file again on every call:
//! `{"repositories": {"REF": {"secret": NAME, "key": KEY}}}`.
//! - `POST /open` of a REF the file names → `{opened: true, sessionId: "s-<admissionId>",
//!   material: {name: NAME, key: KEY}}`; of another, or when the file cannot be read →
//!   `{opened: false, code: "REPOSITORY_NOT_CONFIGURED"}`;
//! - `POST /close` → `{closed: true}`; `POST /status` → `{state: "closed"}` (it holds nothing);
//! - `POST /ready` → `{ready: B}`, whether the file reads.
//!
//! It writes, mints and revokes nothing: the operator creates and rotates each Secret in the
//! Agent's Kubernetes namespace; a real broker mints short-lived tokens behind the same calls.
//! A request it cannot read (not JSON, over 64 KiB) is closed unanswered; another path is
//! `404`. It prints `{"event": "sender.listening", "addr": …}` once listening, then one JSON
//! line per call: the call, the ids asked about and the outcome, never more of the answer.

#[path = "reference/server.rs"]
mod server;

use serde_json::{json, Value};
use server::Stream;
use std::path::Path;

const USAGE: &str =
    "usage: occ-git-sender --cert CERT.pem --key KEY.pem --policy POLICY.json [--listen ADDR]
  Answers repository sender calls (open, close, status, ready) over HTTPS from the policy
  file, read again on every call: {\"repositories\": {\"REF\": {\"secret\": NAME, \"key\": KEY}}};
  open of a REF it does not name is refused REPOSITORY_NOT_CONFIGURED.
  --listen defaults to 127.0.0.1:9444; port 0 takes a free port (printed first).";

/// `open`'s refusal of a REF the policy file does not name (or of any, when it cannot be read).
const NOT_CONFIGURED: &str = "REPOSITORY_NOT_CONFIGURED";

fn main() {
    server::run(
        "occ-git-sender",
        USAGE,
        "127.0.0.1:9444",
        "sender.listening",
        serve,
    );
}

/// One request, one answer, and its line.
fn serve(stream: &mut Stream, path: String, request: Value, policy: &Path) {
    let (status, answer) = match answer(&path, &request, policy) {
        Some((call, answer, outcome)) => {
            println!(
                "{}",
                json!({
                    "event": "sender.call", "call": call,
                    "namespaceId": request["namespaceId"],
                    "admissionId": request["admissionId"],
                    "repositoryRef": request["repositoryRef"],
                    "outcome": outcome,
                })
            );
            ("200 OK", answer)
        }
        None => ("404 Not Found", json!({"error": "not found"})),
    };
    server::respond(stream, status, &answer);
}

/// The answer to a call at `path` (its name, the answer, the outcome said on its line), or
/// `None` for another path.
fn answer(path: &str, request: &Value, policy: &Path) -> Option<(&'static str, Value, Value)> {
    let repositories = || {
        std::fs::read(policy)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .and_then(|p| p.get("repositories")?.as_object().cloned())
    };
    let path = path.split('?').next().unwrap_or_default();
    Some(match path.trim_end_matches('/').rsplit('/').next()? {
        "open" => {
            let entry = request["repositoryRef"]
                .as_str()
                .and_then(|r| repositories()?.get(r).cloned());
            let material = entry.as_ref().and_then(|e| {
                Some(json!({"name": e.get("secret")?.as_str()?, "key": e.get("key")?.as_str()?}))
            });
            match (material, request["admissionId"].as_str()) {
                (Some(material), Some(admission)) => (
                    "open",
                    json!({"opened": true, "sessionId": format!("s-{admission}"), "material": material}),
                    json!("opened"),
                ),
                _ => (
                    "open",
                    json!({"opened": false, "code": NOT_CONFIGURED}),
                    json!(NOT_CONFIGURED),
                ),
            }
        }
        "close" => ("close", json!({"closed": true}), json!("closed")),
        "status" => ("status", json!({"state": "closed"}), json!("closed")),
        "ready" => {
            let ready = repositories().is_some();
            ("ready", json!({"ready": ready}), json!(ready))
        }
        _ => return None,
    })
}
