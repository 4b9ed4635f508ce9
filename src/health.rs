//! The health server (SPEC W5a, W6): `/livez`, `/readyz` and `/metrics` on
//! `OCC_WORKER_HTTP_ADDR`, a small HTTP/1.1 server on `std::net` that never waits on the
//! database.
//!
//! Threads: the acceptor `occ-http`, at most `MAX_CONNECTIONS` connection threads
//! `occ-http-conn` (beyond that a connection gets a canned 503 and is closed), and the probe
//! `occ-http-probe`, which asks the database for the queue depth every second and keeps the
//! answer. Liveness comes from the runtime's `Progress` (the scheduling loop going round);
//! readiness from the probe's last answer and the last claim's outcome; metrics from the
//! registry. A request head is read within `HEAD_DEADLINE` and `MAX_HEAD` bytes with at most
//! `MAX_HEADERS` headers; request bodies are refused (413). Every response closes its
//! connection. Nothing here writes to the database.

use crate::db::Pool;
use crate::events::Events;
use crate::metrics::Metrics;
use crate::migrate::OutsideWindow;
use crate::queue::{self, Pending};
use crate::runtime::Progress;
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use serde_json::json;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connections served at once; more are answered 503 and closed at once.
pub const MAX_CONNECTIONS: usize = 64;
/// A request head larger than this is refused (431).
pub const MAX_HEAD: usize = 8 * 1024;
/// A request head with more headers than this is refused (431).
pub const MAX_HEADERS: usize = 32;
/// The whole request head must arrive within this (408 otherwise).
pub const HEAD_DEADLINE: Duration = Duration::from_secs(1);

/// What the health server needs to know besides its address.
pub struct HealthOptions {
    /// `/livez` fails once the scheduling loop has not gone round for this long.
    pub stale_after: Duration,
    /// The database timeout: bounds how stale a readiness answer may be.
    pub db_timeout: Duration,
}

/// How often the probe reads the schema version again (docs/operating.md, "Upgrading"): a
/// newer release's `migrate` that contracts the schema past this binary turns `/readyz` to
/// `SCHEMA_OUTSIDE_WINDOW` within this.
pub const SCHEMA_RECHECK: Duration = Duration::from_secs(10);

/// The probe's last view of the database.
#[derive(Default)]
struct Readiness {
    last_ok: Option<Instant>,
    pending: Pending,
    failing_since: Option<Instant>,
    last_reported: Option<Instant>,
    /// When the schema window was last read, and what it said.
    schema_checked: Option<Instant>,
    schema_outside: Option<OutsideWindow>,
}

struct Shared {
    metrics: Metrics,
    progress: Arc<Progress>,
    readiness: Mutex<Readiness>,
    stale_after: Duration,
    /// A probe answer older than this no longer proves readiness.
    ready_window: Duration,
}

pub struct HealthServer {
    running: Arc<AtomicBool>,
    // Declared before the handles: dropping the sender stops the probe before its join.
    probe_stop: Option<Sender<()>>,
    acceptor: Option<JoinHandle<()>>,
    probe: Option<JoinHandle<()>>,
    pub addr: SocketAddr,
}

impl HealthServer {
    /// Binds `addr` and serves until dropped.
    pub fn start(
        addr: SocketAddr,
        pool: Pool,
        metrics: Metrics,
        progress: Arc<Progress>,
        options: HealthOptions,
        events: Events,
    ) -> Result<HealthServer, String> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| format!("cannot bind health address {addr}: {e}"))?;
        let bound = listener
            .local_addr()
            .map_err(|e| format!("health server has no address: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("cannot configure health listener: {e}"))?;
        let interval =
            (options.db_timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(1));
        let shared = Arc::new(Shared {
            metrics,
            progress,
            readiness: Mutex::new(Readiness::default()),
            stale_after: options.stale_after,
            ready_window: interval
                + (options.db_timeout / 2)
                    .clamp(Duration::from_millis(500), Duration::from_secs(2)),
        });
        let running = Arc::new(AtomicBool::new(true));
        let (probe_stop, stopped) = bounded::<()>(0);
        let probe = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("occ-http-probe".into())
                .spawn(move || loop {
                    // A stopping worker is not ready anyway; the probe ends so shutdown never
                    // waits for one more database timeout.
                    if shared.progress.stopping() {
                        return;
                    }
                    probe_once(&pool, &shared, &events);
                    match stopped.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                })
                .map_err(|e| format!("cannot start health probe thread: {e}"))?
        };
        let acceptor = {
            let running = running.clone();
            std::thread::Builder::new()
                .name("occ-http".into())
                .spawn(move || accept_loop(listener, shared, running))
                .map_err(|e| format!("cannot start health thread: {e}"))?
        };
        Ok(HealthServer {
            running,
            probe_stop: Some(probe_stop),
            acceptor: Some(acceptor),
            probe: Some(probe),
            addr: bound,
        })
    }
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        self.running.store(false, Ordering::SeqCst);
        self.probe_stop.take();
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        if let Some(h) = self.probe.take() {
            let _ = h.join();
        }
    }
}

/// Reads the queue depth once, and the schema window every `SCHEMA_RECHECK`; keeps the answers
/// for `/readyz` and the gauges. A failure is reported as `worker.error HEALTH_UNAVAILABLE`
/// when it starts and at most every 10 s after; a schema that leaves the window as
/// `worker.error SCHEMA_OUTSIDE_WINDOW` once.
fn probe_once(pool: &Pool, shared: &Shared, events: &Events) {
    let recheck = shared
        .readiness
        .lock()
        .schema_checked
        .is_none_or(|t| t.elapsed() >= SCHEMA_RECHECK);
    let answer = pool.get().ok().and_then(|mut client| {
        let pending = queue::work_pending_count(&mut *client).ok()?;
        let window = recheck.then(|| schema_window(&mut client)).flatten();
        Some((pending, window))
    });
    let mut readiness = shared.readiness.lock();
    match answer {
        Some((p, window)) => {
            if let Some(outside) = window {
                let changed = outside != readiness.schema_outside;
                if let Some(o) = outside.filter(|_| changed) {
                    events.emit(
                        "worker.error",
                        json!({"code": OutsideWindow::CODE, "schema": o.schema(),
                               "knows": o.knows(), "remedy": o.remedy()}),
                    );
                }
                readiness.schema_checked = Some(Instant::now());
                readiness.schema_outside = outside;
            }
            shared
                .metrics
                .queue_depth
                .with_label_values(&["queued"])
                .set(p.queued);
            shared
                .metrics
                .queue_depth
                .with_label_values(&["claimed"])
                .set(p.claimed);
            shared.metrics.queue_oldest_due.set(p.oldest_due_seconds);
            shared.metrics.database_up.set(1);
            readiness.last_ok = Some(Instant::now());
            readiness.pending = p;
            readiness.failing_since = None;
        }
        None => {
            shared.metrics.database_up.set(0);
            readiness.failing_since.get_or_insert_with(Instant::now);
            if readiness
                .last_reported
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
            {
                readiness.last_reported = Some(Instant::now());
                events.emit("worker.error", json!({"code": "HEALTH_UNAVAILABLE"}));
            }
        }
    }
}

/// The schema window as the database says it now: `Some(None)` inside, `Some(Some(_))`
/// outside, `None` when it could not be read (the last answer stands).
fn schema_window(client: &mut postgres::Client) -> Option<Option<OutsideWindow>> {
    let knows = crate::migrate::newest_known();
    match crate::migrate::read_schema(client) {
        Ok(Some(schema)) => Some(crate::migrate::check_window(schema, knows).err()),
        Ok(None) => Some(Some(OutsideWindow::Behind { schema: 0, knows })),
        Err(_) => None,
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, running: Arc<AtomicBool>) {
    let mut connections: Vec<JoinHandle<()>> = Vec::new();
    while running.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                connections.retain(|h| !h.is_finished());
                if connections.len() >= MAX_CONNECTIONS {
                    refuse_busy(stream);
                    continue;
                }
                let shared = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("occ-http-conn".into())
                    .spawn(move || serve(stream, &shared));
                if let Ok(h) = spawned {
                    connections.push(h);
                }
            }
            // Nothing to accept, or a transient failure (out of descriptors): look again soon.
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    // Each connection thread ends within HEAD_DEADLINE plus one bounded write.
    for h in connections {
        let _ = h.join();
    }
}

/// Over the connection limit: a best-effort 503 without waiting, then close.
fn refuse_busy(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&response(
        503,
        "application/json",
        br#"{"status":"busy"}"#,
        false,
    ));
}

/// What a well-formed request asks for.
#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    pub head_only: bool,
    pub path: String,
}

/// Why a request is refused before it is routed.
enum Refusal {
    /// The peer went away or sent nothing in time: nothing worth answering.
    Gone,
    Status(u16),
}

fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let (status, content_type, body, head_only) = match read_head(&mut stream) {
        Ok(head) => {
            let (status, content_type, body) = answer(&head.path, shared);
            (status, content_type, body, head.head_only)
        }
        Err(Refusal::Gone) => return,
        Err(Refusal::Status(status)) => (
            status,
            "application/json",
            json!({"status": reason(status)}).to_string().into_bytes(),
            false,
        ),
    };
    let _ = stream.write_all(&response(status, content_type, &body, head_only));
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Reads and checks one request head within `HEAD_DEADLINE` and `MAX_HEAD` bytes.
fn read_head(stream: &mut TcpStream) -> Result<Head, Refusal> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(if buf.is_empty() {
                Refusal::Gone
            } else {
                Refusal::Status(408)
            });
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut chunk) {
            Ok(0) => return Err(Refusal::Gone),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(Refusal::Gone),
        }
        match parse_head(&buf) {
            HeadParse::Complete(head) => return Ok(head),
            HeadParse::Refused(status) => return Err(Refusal::Status(status)),
            HeadParse::Partial => {}
        }
    }
}

/// What the bytes of a request received so far say (`parse_head`).
#[derive(Debug, PartialEq, Eq)]
pub enum HeadParse {
    /// A complete head the server routes: its path, and whether it is a `HEAD` request.
    Complete(Head),
    /// Refused with this status before routing.
    Refused(u16),
    /// Not yet a whole head, and still within `MAX_HEAD`.
    Partial,
}

/// Parses the bytes of a request received so far: complete, refused (400, 405, 413, 431) or
/// not yet whole. Pure: `read_head` feeds it what the socket gave.
pub fn parse_head(buf: &[u8]) -> HeadParse {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(_)) => match check(&request) {
            Ok(head) => HeadParse::Complete(head),
            Err(Refusal::Status(status)) => HeadParse::Refused(status),
            Err(Refusal::Gone) => HeadParse::Refused(400),
        },
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => HeadParse::Refused(431),
        Ok(httparse::Status::Partial) => HeadParse::Partial,
        Err(httparse::Error::TooManyHeaders) => HeadParse::Refused(431),
        Err(_) => HeadParse::Refused(400),
    }
}

/// Only bodiless GET and HEAD requests are served.
fn check(request: &httparse::Request<'_, '_>) -> Result<Head, Refusal> {
    let head_only = match request.method {
        Some("GET") => false,
        Some("HEAD") => true,
        _ => return Err(Refusal::Status(405)),
    };
    for header in request.headers.iter() {
        let refused = if header.name.eq_ignore_ascii_case("content-length") {
            std::str::from_utf8(header.value).map(str::trim) != Ok("0")
        } else {
            header.name.eq_ignore_ascii_case("transfer-encoding")
        };
        if refused {
            return Err(Refusal::Status(413));
        }
    }
    let path = request.path.unwrap_or("/");
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    Ok(Head {
        head_only,
        path: path.to_string(),
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn response(status: u16, content_type: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// Routes a request; every answer comes from in-process state.
fn answer(path: &str, shared: &Shared) -> (u16, &'static str, Vec<u8>) {
    const JSON: &str = "application/json";
    let body = |v: serde_json::Value| v.to_string().into_bytes();
    match path {
        "/livez" => match shared.progress.since() {
            Some(age) if age <= shared.stale_after => (200, JSON, body(json!({"status": "live"}))),
            Some(age) => (
                503,
                JSON,
                body(json!({"status": "stalled", "sinceMs": age.as_millis() as u64})),
            ),
            None => (503, JSON, body(json!({"status": "starting"}))),
        },
        "/readyz" => readyz(shared),
        "/metrics" => (
            200,
            "text/plain; version=0.0.4",
            shared.metrics.render().into_bytes(),
        ),
        _ => (404, JSON, body(json!({"status": "not_found"}))),
    }
}

/// Ready: the probe reached the database recently and the worker's last claim worked.
fn readyz(shared: &Shared) -> (u16, &'static str, Vec<u8>) {
    const JSON: &str = "application/json";
    if shared.progress.stopping() {
        return (
            503,
            JSON,
            json!({"status": "stopping"}).to_string().into_bytes(),
        );
    }
    let readiness = shared.readiness.lock();
    let fresh = readiness
        .last_ok
        .is_some_and(|t| t.elapsed() <= shared.ready_window);
    let p = readiness.pending;
    if !fresh {
        return (
            503,
            JSON,
            json!({"status": "unavailable", "code": "HEALTH_UNAVAILABLE"})
                .to_string()
                .into_bytes(),
        );
    }
    if let Some(outside) = readiness.schema_outside {
        return (
            503,
            JSON,
            json!({"status": "unavailable", "code": OutsideWindow::CODE,
                   "schema": outside.schema(), "knows": outside.knows(),
                   "remedy": outside.remedy()})
            .to_string()
            .into_bytes(),
        );
    }
    if let Some(cause) = shared.progress.claim_failure() {
        return (
            503,
            JSON,
            json!({"status": "unavailable", "code": "WORKER_UNAVAILABLE", "cause": cause})
                .to_string()
                .into_bytes(),
        );
    }
    (
        200,
        JSON,
        json!({"status": "ready", "pending": p.queued + p.claimed, "queued": p.queued, "claimed": p.claimed})
            .to_string()
            .into_bytes(),
    )
}
