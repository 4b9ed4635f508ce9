//! The health server (SPEC W6): `/livez`, `/readyz` and `/metrics` on `OCC_WORKER_HTTP_ADDR`,
//! served by one named thread, `occ-http`.
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
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub struct HealthServer {
    running: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    pub addr: SocketAddr,
}

impl HealthServer {
    /// Binds `addr` and serves until dropped.
    pub fn start(
        addr: SocketAddr,
        pool: Pool,
        metrics: Metrics,
        progress: Arc<Progress>,
        stale_after: Duration,
        events: Events,
    ) -> Result<HealthServer, String> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| format!("cannot bind health address {addr}: {e}"))?;
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| "health server has no IP address".to_string())?;
        let running = Arc::new(AtomicBool::new(true));
        let flag = running.clone();
        let handle = std::thread::Builder::new()
            .name("occ-http".into())
            .spawn(move || {
                while flag.load(Ordering::SeqCst) {
                    let request = match server.recv_timeout(Duration::from_millis(200)) {
                        Ok(Some(r)) => r,
                        Ok(None) => continue,
                        Err(_) => break,
                    };
                    let (status, body, content_type) = answer(
                        request.url(),
                        &pool,
                        &metrics,
                        &progress,
                        stale_after,
                        &events,
                    );
                    let header = tiny_http::Header::from_bytes("Content-Type", content_type)
                        .expect("static header");
                    let _ = request.respond(
                        tiny_http::Response::from_string(body)
                            .with_status_code(status)
                            .with_header(header),
                    );
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
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
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
