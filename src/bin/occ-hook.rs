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
    "usage: occ-hook --cert CERT.pem --key KEY.pem --policy POLICY.json [--listen ADDR]
  Answers lifecycle hook calls over HTTPS from the policy file, read again on every call:
  {\"PHASE\": {\"allowed\": false, \"code\": \"CODE\"}, …}; a phase it does not name is allowed.
  --listen defaults to 127.0.0.1:9443; port 0 takes a free port (printed first).";

/// The largest request read.
const REQUEST_LIMIT: usize = 64 * 1024;

struct Options {
    listen: String,
    cert: PathBuf,
    key: PathBuf,
    policy: PathBuf,
}

fn options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let (mut listen, mut cert, mut key, mut policy) =
        ("127.0.0.1:9443".to_string(), None, None, None);
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
    let options = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("occ-hook: {e}");
            std::process::exit(2);
        }
    };
    let (tls, listener) = match tls(&options.cert, &options.key).and_then(|tls| {
        TcpListener::bind(&options.listen)
            .map(|l| (tls, l))
            .map_err(|e| format!("--listen {}: {e}", options.listen))
    }) {
        Ok(pair) => pair,
        Err(e) => {
            eprintln!("occ-hook: {e}");
            std::process::exit(2);
        }
    };
    if let Ok(addr) = listener.local_addr() {
        println!(
            "{}",
            json!({"event": "hook.listening", "addr": addr.to_string()})
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
    let Some(request) = read_request(&mut stream) else {
        return;
    };
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
    let body = answer.to_string();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(format!("{head}{body}").as_bytes());
    stream.conn.send_close_notify();
    let _ = stream.flush();
}

/// The JSON body of one request, or `None` when it is not one.
fn read_request(stream: &mut impl Read) -> Option<Value> {
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
        if buf.len() >= head + length {
            return serde_json::from_slice(&buf[head..head + length]).ok();
        }
    }
}
