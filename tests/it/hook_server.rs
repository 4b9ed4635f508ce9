//! A lifecycle hook webhook for the tests (SPEC §14): HTTPS with a CA made per run, every call
//! recorded, each phase answered as the test scripts it (allow, allow with launch values, deny,
//! garbage, a status, slow).
//!
//! It writes its CA bundle to a file, as an operator would hand the worker one (`caFile`).

use crate::kube_fake::tls::{leaf, new_ca};
use parking_lot::Mutex;
use rcgen::{ExtendedKeyUsagePurpose, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How the server answers one phase.
#[derive(Clone, Debug)]
pub enum Answer {
    Allow,
    /// `allowed: true` with these launch values.
    AllowWith(Value),
    /// `allowed: false` with this code (any JSON, or none).
    Deny(Option<Value>),
    /// `200` with a body that is not an answer.
    Garbage,
    Status(u16),
    /// Answers `Allow` after this long.
    Slow(Duration),
    /// This status and these bytes as the body (the property tests' generated answers).
    Raw(u16, Vec<u8>),
}

/// One recorded call: the hook's path (its driver) and the request body.
#[derive(Clone, Debug)]
pub struct Call {
    pub path: String,
    pub body: Value,
}

struct Shared {
    answers: Mutex<HashMap<(String, String), Answer>>,
    calls: Mutex<Vec<Call>>,
    stop: AtomicBool,
}

pub struct HookServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    ca_file: PathBuf,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

impl HookServer {
    /// Starts a server on 127.0.0.1 and writes its CA to `dir/hook-ca.pem`.
    pub fn start(dir: &Path) -> HookServer {
        let ca = new_ca("hook-test-ca");
        let (cert, key) = leaf(
            &ca,
            "hooks",
            vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let tls = Arc::new(
            ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .expect("server certificate"),
        );
        let ca_file = dir.join("hook-ca.pem");
        std::fs::write(&ca_file, ca.0.pem()).expect("write the hook CA");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind hook server");
        let addr = listener.local_addr().expect("hook server address");
        let shared = Arc::new(Shared {
            answers: Mutex::new(HashMap::new()),
            calls: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("hook-server-accept".into())
                .spawn(move || {
                    for stream in listener.incoming() {
                        if shared.stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(stream) = stream else { continue };
                        let (shared, tls) = (shared.clone(), tls.clone());
                        std::thread::spawn(move || serve(&shared, tls, stream));
                    }
                })
                .expect("spawn hook server")
        };
        HookServer {
            shared,
            addr,
            ca_file,
            acceptor: Some(acceptor),
        }
    }

    /// The URL of the hook of `driver` (its path names it in the recorded calls).
    pub fn url(&self, driver: &str) -> String {
        format!("https://127.0.0.1:{}/{driver}", self.addr.port())
    }

    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// How `driver`'s hook answers `phase` from now on (default: allow).
    pub fn answer(&self, driver: &str, phase: &str, answer: Answer) {
        self.shared
            .answers
            .lock()
            .insert((format!("/{driver}"), phase.to_string()), answer);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.lock().clone()
    }

    /// `(driver, phase)` of every call so far, in order.
    pub fn sequence(&self) -> Vec<(String, String)> {
        self.calls()
            .iter()
            .map(|c| {
                (
                    c.path.trim_start_matches('/').to_string(),
                    c.body["phase"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// One `lifecycleHooks` entry for `driver` subscribed to `phases`.
    pub fn entry(&self, driver: &str, phases: &[&str], timeout_seconds: u64) -> Value {
        json!({
            "driver": driver,
            "url": self.url(driver),
            "caFile": self.ca_file.display().to_string(),
            "phases": phases,
            "timeoutSeconds": timeout_seconds,
        })
    }
}

impl Drop for HookServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn serve(shared: &Shared, tls: Arc<ServerConfig>, socket: TcpStream) {
    let Ok(conn) = ServerConnection::new(tls) else {
        return;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(10)));
    let mut stream = StreamOwned::new(conn, socket);
    let mut buf = Vec::new();
    let (path, body) = loop {
        let mut chunk = [0u8; 8192];
        let n = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(head)) = request.parse(&buf) else {
            continue;
        };
        let length: usize = request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
            .unwrap_or(0);
        if buf.len() >= head + length {
            let path = request.path.unwrap_or_default().to_string();
            let body: Value = serde_json::from_slice(&buf[head..head + length]).unwrap_or_default();
            break (path, body);
        }
    };
    let phase = body["phase"].as_str().unwrap_or_default().to_string();
    shared.calls.lock().push(Call {
        path: path.clone(),
        body,
    });
    let answer = shared
        .answers
        .lock()
        .get(&(path, phase))
        .cloned()
        .unwrap_or(Answer::Allow);
    let (status, text) = match answer {
        Answer::Raw(status, bytes) => {
            let head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                bytes.len()
            );
            let mut response = head.into_bytes();
            response.extend_from_slice(&bytes);
            let _ = stream.write_all(&response);
            let _ = stream.flush();
            stream.conn.send_close_notify();
            let _ = stream.flush();
            return;
        }
        Answer::Allow => (200, json!({"allowed": true}).to_string()),
        Answer::AllowWith(values) => (
            200,
            json!({"allowed": true, "launchValues": values}).to_string(),
        ),
        Answer::Deny(None) => (200, json!({"allowed": false}).to_string()),
        Answer::Deny(Some(code)) => (200, json!({"allowed": false, "code": code}).to_string()),
        // An answer's text, which the worker must never echo: a canary (tests/canary.rs).
        Answer::Garbage => (
            200,
            format!("<html>{}</html>", crate::support::canary("hook-answer")),
        ),
        Answer::Status(status) => (
            status,
            json!({"allowed": true, "message": crate::support::canary("hook-answer")}).to_string(),
        ),
        Answer::Slow(delay) => {
            std::thread::sleep(delay);
            (200, json!({"allowed": true}).to_string())
        }
    };
    // A header the worker must never echo either.
    let response = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nX-Answer-Note: {}\r\nConnection: close\r\n\r\n{text}",
        text.len(),
        crate::support::canary("hook-header")
    );
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
    stream.conn.send_close_notify();
    let _ = stream.flush();
}
