//! The native repository sender (SPEC G6, G7, G20–G22): the worker's HTTPS client against a
//! scripted test sender, the reference sender `occ-git-sender`, the health beat's readiness
//! question and start-up's refusals.

use crate::kube_e2e::{kube_env, scratch};
use crate::kube_fake::tls::{leaf, new_ca};
use crate::kube_fake::{FakeOptions, KubeFake};
use crate::support::{
    cancel_after, context, wait_for, worker_command, Captured, ContextBuilder, TestDb,
    WorkerProcess,
};
use occ_worker::cancel::{CancelToken, Cancelled, LossCause};
use occ_worker::compute::{ComputeError, ComputeErrorKind};
use occ_worker::events::Events;
use occ_worker::installation::RepositorySenderEntry;
use occ_worker::repository::{
    Material, OpenAnswer, OpenRequest, RepositorySender, SenderError, SessionRequest, SessionState,
    REPOSITORY_SENDER_UNAVAILABLE, REPOSITORY_SESSION_REFUSED,
};
use occ_worker::runtime::records::HealthBeat;
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
use std::time::{Duration, Instant};

/// How the test sender answers one call.
#[derive(Clone, Debug)]
pub enum Answer {
    /// `200` with this JSON.
    Json(Value),
    /// `200` with this text.
    Raw(String),
    /// This status with this text, whatever it is.
    RawStatus(u16, String),
    /// This status with a well-formed body.
    Status(u16, Value),
    /// This JSON after this long.
    Slow(Duration, Value),
    /// After this long, `open`'s answer for the request's admission, as a sender keeping one
    /// session per admission does: `s-<admissionId>`, material `git-<the REF's last segment>`
    /// key `token`.
    Session(Duration),
}

/// One recorded call.
#[derive(Clone, Debug)]
pub struct Call {
    pub path: String,
    pub body: Value,
}

/// What the test does when the sender receives a call, before it answers.
type Hook = Arc<dyn Fn() + Send + Sync>;

struct Shared {
    answers: Mutex<HashMap<String, Answer>>,
    hooks: Mutex<HashMap<String, Hook>>,
    calls: Mutex<Vec<Call>>,
    stop: AtomicBool,
}

/// A sender over HTTPS with a CA made per run, each call recorded and answered as scripted.
pub struct SenderServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    pub ca_pem: Vec<u8>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

fn server_tls(ca_name: &str) -> (Arc<ServerConfig>, Vec<u8>) {
    let ca = new_ca(ca_name);
    let (cert, key) = leaf(
        &ca,
        "git-sender",
        vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let tls =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server certificate");
    (Arc::new(tls), ca.0.pem().into_bytes())
}

impl SenderServer {
    pub fn start() -> SenderServer {
        let (tls, ca_pem) = server_tls("sender-test-ca");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind sender");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            answers: Mutex::new(HashMap::new()),
            hooks: Mutex::new(HashMap::new()),
            calls: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if shared.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let (shared, tls) = (shared.clone(), tls.clone());
                    std::thread::spawn(move || serve(&shared, tls, stream));
                }
            })
        };
        SenderServer {
            shared,
            addr,
            ca_pem,
            acceptor: Some(acceptor),
        }
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}/sender/", self.addr.port())
    }

    /// How `call` is answered from now on.
    pub fn answer(&self, call: &str, answer: Answer) {
        self.shared
            .answers
            .lock()
            .insert(format!("/sender/{call}"), answer);
    }

    /// A setter of answers a hook can hold: `set(Answer)` answers its call from now on,
    /// including the call whose hook sets it.
    pub fn answers_handle(&self, call: &str) -> impl Fn(Answer) + Send + Sync + 'static {
        let shared = self.shared.clone();
        let path = format!("/sender/{call}");
        move |answer| {
            shared.answers.lock().insert(path.clone(), answer);
        }
    }

    /// Runs `hook` on every `call` received from now on, before answering it.
    pub fn on_call(&self, call: &str, hook: impl Fn() + Send + Sync + 'static) {
        self.shared
            .hooks
            .lock()
            .insert(format!("/sender/{call}"), Arc::new(hook));
    }

    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.lock().clone()
    }

    fn last(&self) -> Call {
        self.calls().pop().expect("a call was made")
    }

    pub fn entry(&self, timeout: Duration, durable: bool) -> RepositorySenderEntry {
        RepositorySenderEntry {
            id: "git".into(),
            url: self.url(),
            ca_file: PathBuf::from("/unused/ca.pem"),
            ca_pem: self.ca_pem.clone(),
            timeout,
            cleanup_interval: Duration::from_secs(30),
            durable_broker_receipts: durable,
        }
    }

    pub fn client(&self, timeout: Duration) -> RepositorySender {
        RepositorySender::new(&self.entry(timeout, false), "inst").unwrap()
    }
}

impl Drop for SenderServer {
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
    shared.calls.lock().push(Call {
        path: path.clone(),
        body: body.clone(),
    });
    let hook = shared.hooks.lock().get(&path).cloned();
    if let Some(hook) = hook {
        hook();
    }
    let answer = shared.answers.lock().get(&path).cloned();
    let (status, text) = match answer {
        None => (404, "{}".to_string()),
        Some(Answer::Json(v)) => (200, v.to_string()),
        Some(Answer::Raw(text)) => (200, text),
        Some(Answer::RawStatus(status, text)) => (status, text),
        Some(Answer::Status(status, v)) => (status, v.to_string()),
        Some(Answer::Slow(delay, v)) => {
            std::thread::sleep(delay);
            (200, v.to_string())
        }
        Some(Answer::Session(delay)) => {
            std::thread::sleep(delay);
            let admission = body["admissionId"].as_str().unwrap_or_default();
            let reference = body["repositoryRef"].as_str().unwrap_or_default();
            let name = reference.rsplit('/').next().unwrap_or_default();
            let answer = opened(&format!("s-{admission}"), &format!("git-{name}"), "token");
            (200, answer.to_string())
        }
    };
    let response = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nX-Answer-Note: {}\r\nConnection: close\r\n\r\n{text}",
        text.len(),
        // A header the worker must never echo: a canary (tests/canary.rs).
        crate::support::canary("sender-header")
    );
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
    stream.conn.send_close_notify();
    let _ = stream.flush();
}

pub const OPEN: OpenRequest<'static> = OpenRequest {
    namespace_id: "ns-1",
    agent_id: "agent-1",
    revision_id: "rev-1",
    admission_id: "4f7d6c1e-9d4b-4d6e-8c0a-2b1f5e3a9c77",
    repository_ref: "github.com/acme/app",
    scope: "write",
    kubernetes_namespace: "occ-ns-1",
    deadline_at: Some("2026-12-06T08:00:00Z"),
    standing: false,
};

pub const SESSION: SessionRequest<'static> = SessionRequest {
    namespace_id: "ns-1",
    admission_id: "4f7d6c1e-9d4b-4d6e-8c0a-2b1f5e3a9c77",
    session_id: Some("s-1"),
};

pub fn opened(session: &str, name: &str, key: &str) -> Value {
    json!({"opened": true, "sessionId": session, "material": {"name": name, "key": key}})
}

/// Whether `result` is no answer of `call` with `class` and `status`.
fn unavailable<T: std::fmt::Debug>(
    result: Result<T, SenderError>,
    call: &str,
    class: &str,
    status: Option<u16>,
) {
    let error = result.expect_err("no valid answer");
    assert_eq!(error.code(), REPOSITORY_SENDER_UNAVAILABLE, "{error:?}");
    match error {
        SenderError::Unavailable {
            call: c,
            class: k,
            status: s,
        } => assert_eq!((c, k, s), (call, class, status)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn g20_each_call_sends_its_request_and_accepts_only_its_answer() {
    let server = SenderServer::start();
    let sender = server.client(Duration::from_secs(5));
    let cancel = CancelToken::unbounded();
    assert_eq!(sender.id(), "git");

    // open: the exact body, and an answer whose added keys are ignored.
    let mut answer = opened("s-1", "git-acme-app", "token");
    answer["expiresAt"] = json!("later");
    answer["material"]["value"] = json!("ghs_never_read");
    server.answer("open", Answer::Json(answer));
    assert_eq!(
        sender.open(&OPEN, &cancel).unwrap(),
        OpenAnswer::Opened {
            session_id: "s-1".into(),
            material: Material {
                name: "git-acme-app".into(),
                key: "token".into()
            }
        }
    );
    let call = server.last();
    assert_eq!(call.path, "/sender/open");
    assert_eq!(
        call.body,
        json!({
            "installationId": "inst", "senderId": "git", "namespaceId": "ns-1",
            "agentId": "agent-1", "revisionId": "rev-1",
            "admissionId": OPEN.admission_id, "repositoryRef": "github.com/acme/app",
            "scope": "write", "kubernetesNamespace": "occ-ns-1",
            "deadlineAt": "2026-12-06T08:00:00Z", "standing": false,
        })
    );
    // A standing revision has no deadline: the key is absent.
    let standing = OpenRequest {
        deadline_at: None,
        standing: true,
        ..OPEN
    };
    sender.open(&standing, &cancel).unwrap();
    let body = server.last().body;
    assert!(body.get("deadlineAt").is_none(), "{body}");
    assert_eq!(body["standing"], true);

    // close, status, ready: each its body and its answer.
    server.answer("close", Answer::Json(json!({"closed": true, "note": 1})));
    assert!(sender.close(&SESSION, &cancel).unwrap());
    assert_eq!(
        server.last().body,
        json!({"installationId": "inst", "senderId": "git", "namespaceId": "ns-1",
               "admissionId": OPEN.admission_id, "sessionId": "s-1"})
    );
    server.answer("close", Answer::Json(json!({"closed": false})));
    let opening = SessionRequest {
        session_id: None,
        ..SESSION
    };
    assert!(!sender.close(&opening, &cancel).unwrap());
    assert_eq!(
        server.last().body,
        json!({"installationId": "inst", "senderId": "git", "namespaceId": "ns-1",
               "admissionId": OPEN.admission_id})
    );
    for (state, expected) in [
        ("open", SessionState::Open),
        ("closed", SessionState::Closed),
        ("unknown", SessionState::Unknown),
    ] {
        server.answer("status", Answer::Json(json!({"state": state})));
        assert_eq!(sender.status(&SESSION, &cancel).unwrap(), expected);
        let call = server.last();
        assert_eq!(call.path, "/sender/status");
        assert_eq!(call.body["sessionId"], "s-1");
        assert_eq!(call.body["senderId"], "git");
    }
    server.answer("ready", Answer::Json(json!({"ready": true})));
    assert!(sender.ready().unwrap());
    server.answer("ready", Answer::Json(json!({"ready": false})));
    assert!(!sender.ready().unwrap());
    let call = server.last();
    assert_eq!(call.path, "/sender/ready");
    assert_eq!(
        call.body,
        json!({"installationId": "inst", "senderId": "git"})
    );

    // Anything but the call's answer is no answer.
    let answer_class = "repository_sender_answer";
    for bad in [
        json!({"opened": "true", "sessionId": "s-1"}),
        json!({"opened": true, "material": {"name": "git", "key": "token"}}),
        opened("-s", "git", "token"),
        opened(&format!("s{}", "x".repeat(128)), "git", "token"),
        opened("s/1", "git", "token"),
        json!({"opened": true, "sessionId": 7, "material": {"name": "git", "key": "token"}}),
        opened("s-1", "Git_Token", "token"),
        opened("s-1", "git..token", "token"),
        opened("s-1", "git", "a/b"),
        opened("s-1", "git", ""),
        json!({"opened": true, "sessionId": "s-1", "material": "git/token"}),
        json!({"opened": true, "sessionId": "s-1", "material": {"name": "git"}}),
        json!([true]),
        json!("opened"),
    ] {
        server.answer("open", Answer::Json(bad.clone()));
        let got = sender.open(&OPEN, &cancel);
        assert!(
            matches!(got, Err(SenderError::Unavailable { .. })),
            "{bad}: {got:?}"
        );
        unavailable(got, "open", answer_class, Some(200));
    }
    server.answer(
        "open",
        Answer::Raw(format!(
            "<html>{}</html>",
            crate::support::canary("sender-answer")
        )),
    );
    unavailable(sender.open(&OPEN, &cancel), "open", answer_class, Some(200));
    // Over 64 KiB: not read whole, no answer.
    let huge = json!({"opened": false, "pad": "x".repeat(70 * 1024)});
    server.answer("open", Answer::Json(huge));
    unavailable(sender.open(&OPEN, &cancel), "open", answer_class, None);
    server.answer(
        "open",
        Answer::Status(503, opened("s-1", "git-acme-app", "token")),
    );
    unavailable(
        sender.open(&OPEN, &cancel),
        "open",
        "repository_sender_status",
        Some(503),
    );
    server.answer("close", Answer::Json(json!({"closed": "true"})));
    unavailable(
        sender.close(&SESSION, &cancel),
        "close",
        answer_class,
        Some(200),
    );
    server.answer("close", Answer::Status(201, json!({"closed": true})));
    unavailable(
        sender.close(&SESSION, &cancel),
        "close",
        "repository_sender_status",
        Some(201),
    );
    for bad in [json!({"state": "gone"}), json!({"state": 1}), json!({})] {
        server.answer("status", Answer::Json(bad));
        unavailable(
            sender.status(&SESSION, &cancel),
            "status",
            answer_class,
            Some(200),
        );
    }
    for bad in [json!({"ready": 1}), json!({"ready": "true"}), json!(null)] {
        server.answer("ready", Answer::Json(bad));
        unavailable(sender.ready(), "ready", answer_class, Some(200));
    }
    // A request over 64 KiB is not sent.
    let long_ref = "x".repeat(65 * 1024);
    let before = server.calls().len();
    unavailable(
        sender.open(
            &OpenRequest {
                repository_ref: &long_ref,
                ..OPEN
            },
            &cancel,
        ),
        "open",
        "repository_sender_request",
        None,
    );
    assert_eq!(server.calls().len(), before, "nothing was sent");
    // A path the sender does not serve is a status too.
    let other = RepositorySender::new(
        &RepositorySenderEntry {
            url: format!("https://127.0.0.1:{}/elsewhere", server.addr.port()),
            ..server.entry(Duration::from_secs(5), false)
        },
        "inst",
    )
    .unwrap();
    unavailable(
        other.ready(),
        "ready",
        "repository_sender_status",
        Some(404),
    );
    // What an error says is the call, class and status, never the answer's text.
    server.answer("open", Answer::Json(opened("s-1", "ghs_SECRET_TEXT", "x")));
    let error = sender.open(&OPEN, &cancel).unwrap_err();
    assert!(!format!("{error} {error:?}").contains("ghs_SECRET"));
    assert_eq!(
        error.to_string(),
        "REPOSITORY_SENDER_UNAVAILABLE (open: repository_sender_answer, HTTP 200)"
    );
}

#[test]
fn g21_no_answer_retries_with_its_code_and_a_refusal_is_permanent() {
    let server = SenderServer::start();
    let cancel = CancelToken::unbounded();
    let sender = server.client(Duration::from_secs(1));

    // A refusal: the sender's code when it is one, else REPOSITORY_SESSION_REFUSED.
    for (answer, code) in [
        (
            json!({"opened": false, "code": "REPOSITORY_FROZEN"}),
            "REPOSITORY_FROZEN",
        ),
        (
            json!({"opened": false, "code": "frozen"}),
            REPOSITORY_SESSION_REFUSED,
        ),
        (
            json!({"opened": false, "code": "A".repeat(65)}),
            REPOSITORY_SESSION_REFUSED,
        ),
        (
            json!({"opened": false, "code": 7}),
            REPOSITORY_SESSION_REFUSED,
        ),
        (json!({"opened": false}), REPOSITORY_SESSION_REFUSED),
    ] {
        server.answer("open", Answer::Json(answer.clone()));
        assert_eq!(
            sender.open(&OPEN, &cancel).unwrap(),
            OpenAnswer::Refused { code: code.into() },
            "{answer}"
        );
    }

    // No connection.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("https://{}/", closed.local_addr().unwrap());
    drop(closed);
    let nobody = RepositorySender::new(
        &RepositorySenderEntry {
            url: dead,
            ..server.entry(Duration::from_secs(1), false)
        },
        "inst",
    )
    .unwrap();
    unavailable(
        nobody.open(&OPEN, &cancel),
        "open",
        "repository_sender_transport",
        None,
    );
    // TLS verified against another CA.
    let (_, other_ca) = server_tls("another-ca");
    let stranger = RepositorySender::new(
        &RepositorySenderEntry {
            ca_pem: other_ca,
            ..server.entry(Duration::from_secs(1), false)
        },
        "inst",
    )
    .unwrap();
    server.answer("close", Answer::Json(json!({"closed": true})));
    let before = server.calls().len();
    unavailable(
        stranger.close(&SESSION, &cancel),
        "close",
        "repository_sender_tls",
        None,
    );
    assert_eq!(server.calls().len(), before, "nothing reached the sender");
    // A CA bundle without a certificate builds no client.
    let empty = RepositorySender::new(
        &RepositorySenderEntry {
            ca_pem: b"not a bundle".to_vec(),
            ..server.entry(Duration::from_secs(1), false)
        },
        "inst",
    )
    .unwrap_err();
    assert!(empty.starts_with("repositorySender.caFile"), "{empty}");

    // The call's timeout, and `ready`'s own 2 000 ms whatever the timeout.
    server.answer(
        "status",
        Answer::Slow(Duration::from_secs(4), json!({"state": "closed"})),
    );
    let started = Instant::now();
    unavailable(
        sender.status(&SESSION, &cancel),
        "status",
        "repository_sender_timeout",
        None,
    );
    assert!(
        started.elapsed() < Duration::from_millis(2_500),
        "{:?}",
        started.elapsed()
    );
    let patient = server.client(Duration::from_secs(30));
    server.answer(
        "ready",
        Answer::Slow(Duration::from_secs(5), json!({"ready": true})),
    );
    let started = Instant::now();
    unavailable(patient.ready(), "ready", "repository_sender_timeout", None);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1_900) && took < Duration::from_millis(3_500),
        "{took:?}"
    );

    // The pass's cancellation: before the call nothing is sent; during it the call ends.
    let stopped = CancelToken::new(Instant::now() + Duration::from_secs(60));
    stopped.cancel(LossCause::WorkerStopping);
    let before = server.calls().len();
    assert_eq!(
        patient.close(&SESSION, &stopped).unwrap_err(),
        SenderError::Cancelled(Cancelled(LossCause::WorkerStopping))
    );
    assert_eq!(server.calls().len(), before);
    server.answer(
        "open",
        Answer::Slow(Duration::from_secs(5), opened("s-1", "git", "token")),
    );
    let token = CancelToken::new(Instant::now() + Duration::from_secs(60));
    let canceller = cancel_after(
        &token,
        Duration::from_millis(300),
        LossCause::RenewalRefused,
    );
    let started = Instant::now();
    let error = patient.open(&OPEN, &token).unwrap_err();
    assert_eq!(
        error,
        SenderError::Cancelled(Cancelled(LossCause::RenewalRefused))
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    canceller.join().unwrap();

    // As a Compute error: no answer is a retry keeping its code; cancellation stays one.
    let retry: ComputeError = SenderError::Unavailable {
        call: "open",
        class: "repository_sender_timeout",
        status: None,
    }
    .into();
    assert_eq!(retry.kind(), &ComputeErrorKind::Retryable);
    assert_eq!(retry.retry_code(), REPOSITORY_SENDER_UNAVAILABLE);
    assert_eq!(retry.class(), "repository_sender_timeout");
    assert_eq!(retry.reason(), Some("open"));
    let lost: ComputeError = error.into();
    assert_eq!(
        lost.kind(),
        &ComputeErrorKind::Cancelled(Cancelled(LossCause::RenewalRefused))
    );
}

/// A child process killed and reaped when dropped, a failing assertion included.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `occ-git-sender` with `args`: (exit code, stderr) once it exits.
fn git_sender_exit(args: &[&str]) -> (Option<i32>, String) {
    let out = crate::support::logged(
        "occ-git-sender",
        std::process::Command::new(env!("CARGO_BIN_EXE_occ-git-sender"))
            .args(args)
            .output()
            .unwrap(),
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A raw HTTPS request to `addr` trusting `ca`: the answer's status, or `None` when the
/// connection was closed unanswered.
fn raw_post(addr: &str, ca: &Path, path: &str, body: &[u8]) -> Option<u16> {
    let certs: Vec<_> = ureq::tls::parse_pem(&std::fs::read(ca).unwrap())
        .filter_map(|i| match i {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .provider(ureq::tls::TlsProvider::Rustls)
                .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
                .build(),
        )
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    agent
        .post(format!("https://{addr}{path}"))
        .header("content-type", "application/json")
        .send(body)
        .ok()
        .map(|r| r.status().as_u16())
}

#[test]
fn g22_occ_git_sender_answers_from_its_policy_file() {
    let dir = scratch("occ-git-sender");
    let ca = new_ca("occ-git-sender-test-ca");
    let (cert, key) = leaf(
        &ca,
        "occ-git-sender",
        vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    std::fs::write(dir.join("ca.pem"), ca.0.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    let policy = dir.join("policy.json");
    std::fs::write(
        &policy,
        json!({"repositories": {"github.com/acme/app": {"secret": "git-acme-app", "key": "token"}}})
            .to_string(),
    )
    .unwrap();

    // Bad arguments, an unreadable certificate or key: exit 2, one line.
    let (cert_arg, key_arg, policy_arg) = (
        dir.join("cert.pem").display().to_string(),
        dir.join("key.pem").display().to_string(),
        policy.display().to_string(),
    );
    let missing = dir.join("missing.pem").display().to_string();
    for args in [
        vec![],
        vec!["--cert", &cert_arg, "--key", &key_arg],
        vec![
            "--cert",
            &cert_arg,
            "--key",
            &key_arg,
            "--policy",
            &policy_arg,
            "--bogus",
        ],
        vec![
            "--cert",
            &missing,
            "--key",
            &key_arg,
            "--policy",
            &policy_arg,
        ],
        vec![
            "--cert",
            &cert_arg,
            "--key",
            &missing,
            "--policy",
            &policy_arg,
        ],
        vec![
            "--cert",
            &cert_arg,
            "--key",
            &cert_arg,
            "--policy",
            &policy_arg,
        ],
    ] {
        let (code, stderr) = git_sender_exit(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("occ-git-sender: "), "{stderr}");
    }

    let mut child = Reaped(
        std::process::Command::new(env!("CARGO_BIN_EXE_occ-git-sender"))
            .args(["--listen", "127.0.0.1:0", "--policy", &policy_arg])
            .args(["--cert", &cert_arg, "--key", &key_arg])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines =
        crate::support::logged_lines(child.0.stdout.take().unwrap(), "occ-git-sender.stdout");
    let mut next_line =
        || -> Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };
    let listening = next_line();
    assert_eq!(listening["event"], "sender.listening");
    let addr = listening["addr"].as_str().unwrap().to_string();
    let sender = RepositorySender::new(
        &RepositorySenderEntry {
            id: "git".into(),
            url: format!("https://{addr}"),
            ca_file: dir.join("ca.pem"),
            ca_pem: std::fs::read(dir.join("ca.pem")).unwrap(),
            timeout: Duration::from_secs(5),
            cleanup_interval: Duration::from_secs(30),
            durable_broker_receipts: true,
        },
        "inst",
    )
    .unwrap();
    let cancel = CancelToken::unbounded();

    assert!(sender.ready().unwrap());
    assert_eq!(
        sender.open(&OPEN, &cancel).unwrap(),
        OpenAnswer::Opened {
            session_id: format!("s-{}", OPEN.admission_id),
            material: Material {
                name: "git-acme-app".into(),
                key: "token".into()
            }
        }
    );
    // The same admission is the same session.
    assert_eq!(
        sender.open(&OPEN, &cancel).unwrap(),
        sender.open(&OPEN, &cancel).unwrap()
    );
    let other = OpenRequest {
        repository_ref: "github.com/acme/lib",
        ..OPEN
    };
    let not_configured = OpenAnswer::Refused {
        code: "REPOSITORY_NOT_CONFIGURED".into(),
    };
    assert_eq!(sender.open(&other, &cancel).unwrap(), not_configured);
    // The file is read again on every call.
    std::fs::write(
        &policy,
        json!({"repositories": {
            "github.com/acme/app": {"secret": "git-acme-app", "key": "token"},
            "github.com/acme/lib": {"secret": "git-acme-lib", "key": "pat"},
        }})
        .to_string(),
    )
    .unwrap();
    assert!(matches!(
        sender.open(&other, &cancel).unwrap(),
        OpenAnswer::Opened { material, .. } if material == Material { name: "git-acme-lib".into(), key: "pat".into() }
    ));
    assert!(sender.close(&SESSION, &cancel).unwrap());
    assert_eq!(
        sender.status(&SESSION, &cancel).unwrap(),
        SessionState::Closed
    );
    // A file that cannot be read: not ready, and every open refused.
    std::fs::write(&policy, "{not json").unwrap();
    assert!(!sender.ready().unwrap());
    assert_eq!(sender.open(&OPEN, &cancel).unwrap(), not_configured);
    std::fs::remove_file(&policy).unwrap();
    assert!(!sender.ready().unwrap());

    let calls: Vec<Value> = (0..11)
        .map(|_| next_line())
        .enumerate()
        .filter(|(i, _)| !matches!(i, 2 | 3))
        .map(|(_, line)| line)
        .collect();
    assert_eq!(
        calls
            .iter()
            .map(|c| (
                c["event"].as_str().unwrap(),
                c["call"].as_str().unwrap(),
                c["outcome"].clone()
            ))
            .collect::<Vec<_>>(),
        [
            ("sender.call", "ready", json!(true)),
            ("sender.call", "open", json!("opened")),
            ("sender.call", "open", json!("REPOSITORY_NOT_CONFIGURED")),
            ("sender.call", "open", json!("opened")),
            ("sender.call", "close", json!("closed")),
            ("sender.call", "status", json!("closed")),
            ("sender.call", "ready", json!(false)),
            ("sender.call", "open", json!("REPOSITORY_NOT_CONFIGURED")),
            ("sender.call", "ready", json!(false)),
        ]
    );
    // One line per call: the call, the ids and the outcome, never the material.
    assert_eq!(
        calls[1],
        json!({"event": "sender.call", "call": "open", "namespaceId": "ns-1",
               "admissionId": OPEN.admission_id, "repositoryRef": "github.com/acme/app",
               "outcome": "opened"})
    );
    assert!(calls.iter().all(|c| !c.to_string().contains("git-acme")));

    // Another path is 404; a request it cannot read is closed unanswered.
    let ca_path = dir.join("ca.pem");
    assert_eq!(raw_post(&addr, &ca_path, "/nothing", b"{}"), Some(404));
    assert_eq!(raw_post(&addr, &ca_path, "/open", b"not json"), None);
    let oversized = format!("{{\"pad\": \"{}\"}}", "x".repeat(70 * 1024));
    assert_eq!(
        raw_post(&addr, &ca_path, "/ready", oversized.as_bytes()),
        None
    );
    drop(child);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn g7_a_sender_that_is_not_ready_is_said_as_health_unavailable() {
    let db = TestDb::new();
    let (base, _) = context(&db, Duration::from_secs(30), 3);
    let server = SenderServer::start();
    // Each beat with a fresh HealthBeat, so none is skipped as not yet due.
    let beat = |durable: bool| -> Vec<Value> {
        let captured = Captured::default();
        let sender =
            RepositorySender::new(&server.entry(Duration::from_secs(5), durable), "inst").unwrap();
        let ctx = ContextBuilder::like(&base)
            .events(Events::to(Box::new(captured.clone())))
            .repository_sender(Some(Arc::new(sender)))
            .build();
        HealthBeat::new(Duration::from_millis(250)).beat(&ctx, true);
        captured
            .events()
            .into_iter()
            .map(|e| json!({"event": e["event"], "code": e["code"]}))
            .collect()
    };
    let unavailable = vec![json!({"event": "worker.error", "code": "HEALTH_UNAVAILABLE"})];
    let health = vec![json!({"event": "worker.health", "code": null})];

    server.answer("ready", Answer::Json(json!({"ready": false})));
    assert_eq!(beat(true), unavailable);
    assert_eq!(server.calls().len(), 1, "the beat asked ready first");
    for no_answer in [
        Answer::Status(503, json!({"ready": true})),
        Answer::Json(json!({"ready": "yes"})),
        Answer::Slow(Duration::from_secs(3), json!({"ready": true})),
    ] {
        server.answer("ready", no_answer);
        assert_eq!(beat(true), unavailable);
    }
    server.answer("ready", Answer::Json(json!({"ready": true})));
    assert_eq!(beat(true), health);
    let asked = server.calls().len();
    assert_eq!(asked, 5);
    // Without durable broker receipts the beat does not ask.
    server.answer("ready", Answer::Json(json!({"ready": false})));
    assert_eq!(beat(false), health);
    assert_eq!(server.calls().len(), asked);

    // A worker process: `worker.started` names the sender, and its idle beats follow `ready`.
    let fake = KubeFake::start(FakeOptions::default());
    let db = TestDb::bootstrapped();
    let dir = scratch("repository-sender-health");
    let ca = dir.join("sender-ca.pem");
    std::fs::write(&ca, &server.ca_pem).unwrap();
    let file = dir.join("installation.json");
    std::fs::write(
        &file,
        json!({
            "sandbox": {"id": "sb", "implementation": "kubernetes-sandbox", "facets": ["read-only-root"]},
            "repositoryPolicy": {"id": "repos", "implementation": "occ-repository-policy"},
            "repositorySender": {"id": "git", "url": server.url(), "caFile": ca.display().to_string(),
                                 "durableBrokerReceipts": true},
        })
        .to_string(),
    )
    .unwrap();
    let mut env = kube_env(&db, &fake, &dir, 1);
    env.push(("OCC_INSTALLATION_CONFIG", file.display().to_string()));
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    wait_for(
        "a beat said as HEALTH_UNAVAILABLE",
        Duration::from_secs(30),
        || {
            worker
                .events()
                .iter()
                .any(|e| e["event"] == "worker.error" && e["code"] == "HEALTH_UNAVAILABLE")
        },
    );
    let events = worker.events();
    let started = events
        .iter()
        .find(|e| e["event"] == "worker.started")
        .expect("worker.started");
    assert_eq!(started["repositorySenderId"], "git");
    assert!(
        !events.iter().any(|e| e["event"] == "worker.health"),
        "{events:?}"
    );
    let ready = server
        .calls()
        .into_iter()
        .rfind(|c| c.path == "/sender/ready")
        .expect("the worker asked ready");
    assert_eq!(
        ready.body,
        json!({"installationId": "inst", "senderId": "git"})
    );
    server.answer("ready", Answer::Json(json!({"ready": true})));
    wait_for("a worker.health beat", Duration::from_secs(30), || {
        worker.has_event("worker.health")
    });
    drop(worker);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn g6_start_up_refuses_a_sender_without_a_policy_or_a_sandbox_in_one_line() {
    let fake = KubeFake::start(FakeOptions::default());
    let db = TestDb::bootstrapped();
    let dir = scratch("repository-sender-startup");
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, new_ca("startup-ca").0.pem()).unwrap();
    let sender =
        json!({"id": "git", "url": "https://127.0.0.1:9444", "caFile": ca.display().to_string()});
    let policy = json!({"id": "repos", "implementation": "occ-repository-policy"});
    let sandbox =
        json!({"id": "sb", "implementation": "kubernetes-sandbox", "facets": ["read-only-root"]});
    let path = dir.join("installation.json");
    let prefix = format!(
        "occ-worker: invalid configuration: OCC_INSTALLATION_CONFIG {}: ",
        path.display()
    );
    let cases = [
        (
            json!({"repositorySender": sender, "sandbox": sandbox}),
            vec!["repositorySender needs a repositoryPolicy selected"],
        ),
        (
            json!({"repositorySender": sender, "repositoryPolicy": policy}),
            vec!["repositorySender needs a sandbox selected"],
        ),
        (
            json!({"repositorySender": sender}),
            vec![
                "repositorySender needs a sandbox selected",
                "repositorySender needs a repositoryPolicy selected",
            ],
        ),
        (
            json!({"repositoryPolicy": policy, "sandbox": sandbox}),
            vec!["repositoryPolicy needs a repositorySender selected"],
        ),
    ];
    for (file, expected) in cases {
        std::fs::write(&path, file.to_string()).unwrap();
        let mut env = kube_env(&db, &fake, &dir, 1);
        env.push(("OCC_INSTALLATION_CONFIG", path.display().to_string()));
        let out =
            crate::support::logged("worker", worker_command(&["run"], &env).output().unwrap());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert_eq!(
            stderr.lines().collect::<Vec<_>>(),
            expected
                .iter()
                .map(|line| format!("{prefix}{line}"))
                .collect::<Vec<_>>(),
            "{file}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
