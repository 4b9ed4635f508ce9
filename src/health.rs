//! The health server (SPEC W6): `/livez`, `/readyz` and `/metrics` on `OCC_WORKER_HTTP_ADDR`,
//! served by one named thread, `occ-http`, on a plain `std` listener (no server library, so no
//! unnamed helper threads).
//!
//! Liveness means the coordinator loop goes round; readiness means the database answers (with
//! the pending count); metrics are the Prometheus text format. It reads the queue depth and
//! never writes anything.

use crate::db::Pool;
use crate::events::Events;
use crate::metrics::Metrics;
use crate::queue;
use crate::runtime::Progress;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub struct HealthServer {
    running: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    pub addr: SocketAddr,
}

/// How long one client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest request head read; health checks and scrapers send far less.
const MAX_REQUEST: usize = 8 * 1024;

impl HealthServer {
    /// Binds `addr` and serves until dropped. One thread, `occ-http`, accepts and answers each
    /// connection in turn (a slow client holds it at most `CLIENT_TIMEOUT`); there is no
    /// other thread, and no polling: dropping wakes the blocked `accept` with a connection of
    /// its own.
    pub fn start(
        addr: SocketAddr,
        pool: Pool,
        metrics: Metrics,
        progress: Arc<Progress>,
        stale_after: Duration,
        events: Events,
    ) -> Result<HealthServer, String> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| format!("cannot bind health address {addr}: {e}"))?;
        let bound = listener
            .local_addr()
            .map_err(|e| format!("health server has no address: {e}"))?;
        let running = Arc::new(AtomicBool::new(true));
        let flag = running.clone();
        let handle = std::thread::Builder::new()
            .name("occ-http".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if !flag.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    serve(stream, |path| {
                        answer(path, &pool, &metrics, &progress, stale_after, &events)
                    });
                }
            })
            .map_err(|e| format!("cannot start health thread: {e}"))?;
        Ok(HealthServer {
            running,
            handle: Some(handle),
            addr: bound,
        })
    }
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        self.running.store(false, Ordering::SeqCst);
        // Wake the blocked accept; a wildcard bind is reached over loopback.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, CLIENT_TIMEOUT);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Reads one HTTP/1.x request head, answers `GET PATH` with `answer(PATH)` and closes.
fn serve(mut stream: TcpStream, answer: impl FnOnce(&str) -> (u16, String, &'static str)) {
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = stream.set_write_timeout(Some(CLIENT_TIMEOUT));
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (status, body, content_type) = match (words.next(), words.next()) {
        (Some("GET"), Some(target)) => answer(target.split('?').next().unwrap_or(target)),
        (Some(_), Some(_)) => (
            405,
            json!({"status": "method_not_allowed"}).to_string(),
            "application/json",
        ),
        _ => return,
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
}

fn answer(
    url: &str,
    pool: &Pool,
    metrics: &Metrics,
    progress: &Progress,
    stale_after: Duration,
    events: &Events,
) -> (u16, String, &'static str) {
    const JSON: &str = "application/json";
    match url {
        "/livez" => match progress.since() {
            Some(age) if age <= stale_after => (200, json!({"status": "live"}).to_string(), JSON),
            Some(age) => (
                503,
                json!({"status": "stalled", "sinceMs": age.as_millis() as u64}).to_string(),
                JSON,
            ),
            None => (503, json!({"status": "starting"}).to_string(), JSON),
        },
        "/readyz" => match pending(pool, metrics) {
            Some(p) => (
                200,
                json!({"status": "ready", "pending": p.queued + p.claimed, "queued": p.queued, "claimed": p.claimed}).to_string(),
                JSON,
            ),
            None => {
                // W7: readiness that cannot reach the database is reported, not only answered.
                events.emit("worker.error", json!({"code": "HEALTH_UNAVAILABLE"}));
                (503, json!({"status": "unavailable", "code": "HEALTH_UNAVAILABLE"}).to_string(), JSON)
            }
        },
        "/metrics" => {
            let _ = pending(pool, metrics);
            (200, metrics.render(), "text/plain; version=0.0.4")
        }
        _ => (404, json!({"status": "not_found"}).to_string(), JSON),
    }
}

fn pending(pool: &Pool, metrics: &Metrics) -> Option<queue::Pending> {
    let mut client = pool.get().ok()?;
    let p = queue::work_pending_count(&mut *client).ok()?;
    metrics
        .queue_depth
        .with_label_values(&["queued"])
        .set(p.queued);
    metrics
        .queue_depth
        .with_label_values(&["claimed"])
        .set(p.claimed);
    Some(p)
}
