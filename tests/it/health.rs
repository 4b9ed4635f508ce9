//! W5a: the health server survives garbage. An in-process `HealthServer` gets huge
//! Content-Length values, a megabyte of headers, ten thousand headers, random bytes, half-open
//! connections and a flood; after each, `/livez` and `/readyz` still answer within a second.

use crate::support::{http_exchange as exchange, wait_for, TestDb};
use occ_worker::events::Events;
use occ_worker::health::{HealthOptions, HealthServer};
use occ_worker::metrics::Metrics;
use occ_worker::runtime::Progress;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `/livez` and `/readyz` answer 200 within a second each.
fn assert_healthy(addr: SocketAddr, after: &str) {
    for path in ["/livez", "/readyz"] {
        let started = Instant::now();
        let status = exchange(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        );
        let took = started.elapsed();
        assert_eq!(status, Some(200), "{path} after {after}");
        assert!(
            took < Duration::from_secs(1),
            "{path} took {took:?} after {after}"
        );
    }
}

/// A small deterministic generator for the random-bytes round.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

// W5a: bodies refused, heads bounded in size, header count and time, connections bounded,
// garbage answered or dropped, and the process (this test binary) never aborts.
#[test]
fn health_server_survives_hostile_requests_and_keeps_answering() {
    let db = TestDb::bootstrapped();
    let progress = Arc::new(Progress::default());
    progress.tick();
    let server = health_server(&db, 4, progress.clone());
    let addr = server.addr;
    wait_for("the first readiness probe", Duration::from_secs(10), || {
        exchange(addr, b"GET /readyz HTTP/1.1\r\n\r\n") == Some(200)
    });
    let names = thread_names();
    for name in ["occ-http", "occ-http-probe"] {
        assert!(
            names.iter().any(|n| n == name),
            "no {name} thread in {names:?}"
        );
    }

    routes_and_methods(addr);
    refuses_bodies(addr);
    refuses_oversized_heads(addr);
    answers_random_bytes_with_errors(addr);
    holds_half_open_connections_briefly(addr);
    survives_a_flood(addr);
    drop(server);
}

/// A health server on a free loopback port over `db` (a pool of `pool`), reporting `progress`,
/// stale after 600 s, its events discarded.
pub fn health_server(db: &TestDb, pool: u32, progress: Arc<Progress>) -> HealthServer {
    HealthServer::start(
        "127.0.0.1:0".parse().unwrap(),
        db.pool(pool),
        Metrics::new(),
        progress,
        HealthOptions {
            stale_after: Duration::from_secs(600),
            db_timeout: Duration::from_secs(5),
        },
        Events::to(Box::new(std::io::sink())),
    )
    .expect("health server")
}

/// Routing and methods: the known paths answer GET and HEAD; others 404, other methods 405.
fn routes_and_methods(addr: std::net::SocketAddr) {
    assert_eq!(exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n"), Some(200));
    assert_eq!(
        exchange(addr, b"GET /livez?x=1 HTTP/1.0\r\n\r\n"),
        Some(200)
    );
    assert_eq!(exchange(addr, b"HEAD /livez HTTP/1.1\r\n\r\n"), Some(200));
    assert_eq!(exchange(addr, b"GET /nope HTTP/1.1\r\n\r\n"), Some(404));
    assert_eq!(exchange(addr, b"DELETE /livez HTTP/1.1\r\n\r\n"), Some(405));
}

/// Bodies are refused, whatever length they claim.
fn refuses_bodies(addr: std::net::SocketAddr) {
    for length in ["99999999999", "18446744073709551616", "-1", "1", "abc"] {
        let request = format!("GET /metrics HTTP/1.1\r\nContent-Length: {length}\r\n\r\n");
        assert_eq!(exchange(addr, request.as_bytes()), Some(413), "{length}");
    }
    assert_eq!(
        exchange(
            addr,
            b"POST /livez HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        ),
        Some(405)
    );
    assert_eq!(
        exchange(
            addr,
            b"GET /livez HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        ),
        Some(413)
    );
    assert_healthy(addr, "bodies");
}

/// A megabyte of headers: refused after MAX_HEAD bytes (or the connection is reset while
/// the client is still writing).
fn refuses_oversized_heads(addr: std::net::SocketAddr) {
    let mut big = b"GET /livez HTTP/1.1\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 1 << 20));
    big.extend_from_slice(b"\r\n\r\n");
    assert!(matches!(exchange(addr, &big), Some(431) | None));
    // Ten thousand small headers.
    let mut many = b"GET /livez HTTP/1.1\r\n".to_vec();
    for i in 0..10_000 {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert!(matches!(exchange(addr, &many), Some(431) | None));
    assert_healthy(addr, "oversized heads");
}

/// Random bytes.
fn answers_random_bytes_with_errors(addr: std::net::SocketAddr) {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200 {
        let len = (xorshift(&mut seed) % 600) as usize + 1;
        let bytes: Vec<u8> = (0..len).map(|_| xorshift(&mut seed) as u8).collect();
        let status = exchange(addr, &bytes);
        assert!(
            matches!(status, None | Some(400) | Some(405) | Some(408) | Some(431)),
            "{status:?}"
        );
    }
    assert_healthy(addr, "random bytes");
}

/// Half-open connections: some silent, some with half a head. They hold connection slots
/// for at most HEAD_DEADLINE, and never the answer to anybody else.
fn holds_half_open_connections_briefly(addr: std::net::SocketAddr) {
    let mut idle = Vec::new();
    for i in 0..40 {
        let mut s = TcpStream::connect(addr).unwrap();
        if i % 2 == 0 {
            let _ = s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n");
        }
        idle.push(s);
    }
    assert_healthy(addr, "half-open connections");
    drop(idle);
}

/// A flood: many connections at once from several threads.
fn survives_a_flood(addr: std::net::SocketAddr) {
    let flood: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..100 {
                    let _ = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
                }
            })
        })
        .collect();
    for t in flood {
        t.join().unwrap();
    }
    // Connections refused for being over the limit get a 503; once the flood is over every
    // slot is free again.
    wait_for("slots free after the flood", Duration::from_secs(5), || {
        exchange(addr, b"GET /livez HTTP/1.1\r\n\r\n") == Some(200)
    });
    assert_healthy(addr, "a flood");
}
