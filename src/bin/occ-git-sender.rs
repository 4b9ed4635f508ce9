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

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const USAGE: &str =
    "usage: occ-git-sender --cert CERT.pem --key KEY.pem --policy POLICY.json [--listen ADDR]
  Answers repository sender calls (open, close, status, ready) over HTTPS from the policy
  file, read again on every call: {\"repositories\": {\"REF\": {\"secret\": NAME, \"key\": KEY}}};
  open of a REF it does not name is refused REPOSITORY_NOT_CONFIGURED.
  --listen defaults to 127.0.0.1:9444; port 0 takes a free port (printed first).";

/// The largest request read.
const REQUEST_LIMIT: usize = 64 * 1024;
/// `open`'s refusal of a REF the policy file does not name (or of any, when it cannot be read).
const NOT_CONFIGURED: &str = "REPOSITORY_NOT_CONFIGURED";

struct Options {
    listen: String,
    cert: PathBuf,
    key: PathBuf,
    policy: PathBuf,
}

fn options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let (mut listen, mut cert, mut key, mut policy) =
        ("127.0.0.1:9444".to_string(), None, None, None);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => listen = value()?,
            "--cert" => cert = Some(PathBuf::from(value()?)),
            "--key" => key = Some(PathBuf::from(value()?)),
            "--policy" => policy = Some(PathBuf::from(value()?)),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    let required =
        |v: Option<PathBuf>, name: &str| v.ok_or(format!("{name} is required (see --help)"));
    Ok(Options {
        listen,
        cert: required(cert, "--cert")?,
        key: required(key, "--key")?,
        policy: required(policy, "--policy")?,
    })
}

fn tls(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("--cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("--cert {}: no PEM certificate", cert.display()));
    }
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--key {}: {e}", key.display()))?;
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("--cert/--key: {e}"))?;
    Ok(Arc::new(config))
}

fn main() {
    let fail = |e: String| -> ! {
        eprintln!("occ-git-sender: {}", e.replace('\n', " "));
        std::process::exit(2);
    };
    let options = options().unwrap_or_else(|e| fail(e));
    let (tls, listener) = tls(&options.cert, &options.key)
        .and_then(|tls| {
            TcpListener::bind(&options.listen)
                .map(|l| (tls, l))
                .map_err(|e| format!("--listen {}: {e}", options.listen))
        })
        .unwrap_or_else(|e| fail(e));
    if let Ok(addr) = listener.local_addr() {
        println!(
            "{}",
            json!({"event": "sender.listening", "addr": addr.to_string()})
        );
    }
    let policy = Arc::new(options.policy);
    for stream in listener.incoming().flatten() {
        let (tls, policy) = (tls.clone(), policy.clone());
        std::thread::spawn(move || serve(tls, stream, &policy));
    }
}

/// One connection, one request, one answer.
fn serve(tls: Arc<ServerConfig>, socket: TcpStream, policy: &Path) {
    let Ok(conn) = ServerConnection::new(tls) else {
        return;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(10)));
    let mut stream = StreamOwned::new(conn, socket);
    let Some((path, request)) = read_request(&mut stream) else {
        return;
    };
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
    let body = answer.to_string();
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(format!("{head}{body}").as_bytes());
    stream.conn.send_close_notify();
    let _ = stream.flush();
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

/// The path and JSON body of one request, or `None` when it is not one.
fn read_request(stream: &mut impl Read) -> Option<(String, Value)> {
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > REQUEST_LIMIT {
            return None;
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        let httparse::Status::Complete(head) = request.parse(&buf).ok()? else {
            continue;
        };
        let length: usize = request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
            .unwrap_or(0);
        if length > REQUEST_LIMIT {
            return None;
        }
        if buf.len() >= head + length {
            let path = request.path.unwrap_or_default().to_string();
            let body = serde_json::from_slice(&buf[head..head + length]).ok()?;
            return Some((path, body));
        }
    }
}
