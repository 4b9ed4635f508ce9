//! W5: a silent database stall. A TCP proxy in front of the shared test cluster forwards the
//! worker's connections and, on request, stops forwarding while keeping every socket open (its
//! kernel keeps acknowledging, so keepalive and `tcp_user_timeout` never fire): all
//! connections, or only the one that sent `LISTEN occ_work`. Timings are generous upper bounds
//! on failure detection, never performance claims.

use crate::support::{free_port, wait_for, worker_env, TestDb, WorkerProcess};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const FORWARD: u8 = 0;
const HOLE_ALL: u8 = 1;
const HOLE_LISTEN: u8 = 2;

/// A forwarding proxy that can black-hole connections without closing them.
struct StallProxy {
    port: u16,
    mode: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl StallProxy {
    fn start(upstream: u16) -> StallProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(AtomicU8::new(FORWARD));
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let acceptor = {
            let (mode, stop, threads) = (mode.clone(), stop.clone(), threads.clone());
            std::thread::spawn(move || {
                while let Some(client) = crate::support::accept_until(&listener, &stop) {
                    let _ = client.set_nonblocking(false);
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                        continue;
                    };
                    let listen = Arc::new(AtomicBool::new(false));
                    for (from, to, upward) in [
                        (
                            client.try_clone().unwrap(),
                            server.try_clone().unwrap(),
                            true,
                        ),
                        (server, client, false),
                    ] {
                        let (mode, stop, listen) = (mode.clone(), stop.clone(), listen.clone());
                        threads.lock().unwrap().push(std::thread::spawn(move || {
                            pump(from, to, upward, &listen, &mode, &stop)
                        }));
                    }
                }
            })
        };
        StallProxy {
            port,
            mode,
            stop,
            threads,
            acceptor: Some(acceptor),
        }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for t in std::mem::take(&mut *self.threads.lock().unwrap()) {
            let _ = t.join();
        }
    }
}

/// Copies `from` to `to` until either end closes; while black-holed it neither reads nor
/// writes, so bytes wait in kernel buffers and nothing is ever answered or closed.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    upward: bool,
    listen: &AtomicBool,
    mode: &AtomicU8,
    stop: &AtomicBool,
) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = [0u8; 16 * 1024];
    while !stop.load(Ordering::SeqCst) {
        let holed = || match mode.load(Ordering::SeqCst) {
            HOLE_ALL => true,
            HOLE_LISTEN => listen.load(Ordering::SeqCst),
            _ => false,
        };
        if holed() {
            let every = Duration::from_millis(10);
            let _ = crate::support::poll(Duration::MAX, every, || {
                (stop.load(Ordering::SeqCst) || !holed()).then_some(())
            });
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if upward && buf[..n].windows(15).any(|w| w == b"LISTEN occ_work") {
                    listen.store(true, Ordering::SeqCst);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// `(status, how long the answer took)`; `None` when nothing answered within 5 s.
fn http(port: u16, path: &str) -> Option<(u16, Duration)> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, started.elapsed()))
}

use crate::support::{enqueue_ensure as enqueue, ensure_state as state};

/// The test database behind a proxy, and a probe worker on the proxy's URL.
fn worker_behind(
    db: &TestDb,
    proxy: &StallProxy,
    http_port: u16,
    db_timeout_ms: u64,
    poll_ms: u64,
) -> WorkerProcess {
    let upstream = url::port(&db.url);
    let proxied = db
        .url
        .replace(&format!(":{upstream}/"), &format!(":{}/", proxy.port));
    let mut env = worker_env(&proxied);
    env.retain(|(k, _)| *k != "OCC_WORKER_HTTP_ADDR" && *k != "OCC_WORKER_DB_TIMEOUT_MS");
    env.push(("OCC_WORKER_HTTP_ADDR", format!("127.0.0.1:{http_port}")));
    env.push(("OCC_WORKER_DB_TIMEOUT_MS", db_timeout_ms.to_string()));
    env.push(("OCC_WORKER_POLL_INTERVAL_MS", poll_ms.to_string()));
    env.push(("OCC_WORKER_LEASE_MS", "3000".into()));
    env.push(("OCC_WORKER_SHUTDOWN_GRACE_MS", "1000".into()));
    WorkerProcess::start("probe", &env)
}

mod url {
    pub fn port(url: &str) -> u16 {
        let after_at = url.rsplit_once('@').map_or(url, |(_, r)| r);
        let host_port = after_at.split('/').next().unwrap();
        host_port.rsplit_once(':').unwrap().1.parse().unwrap()
    }
}

fn unavailable_events(worker: &WorkerProcess, cause: Option<&str>) -> usize {
    worker
        .events()
        .iter()
        .filter(|e| e["event"] == "worker.error" && e["code"] == "WORKER_UNAVAILABLE")
        .filter(|e| cause.is_none_or(|c| e["cause"] == c))
        .count()
}

// W5, W5a: every connection of the worker black-holed (sockets open, nothing answered). Within
// the database timeout (plus generous margins) the worker says WORKER_UNAVAILABLE and /readyz
// turns 503; /livez and /readyz keep answering within a second throughout; when the path heals
// the work enqueued during the stall completes exactly once; SIGTERM during a second stall
// exits 0 within grace + database timeout.
#[test]
fn w5_a_silent_database_stall_is_detected_and_bounded_and_work_completes_once_after_it() {
    let db = TestDb::bootstrapped();
    let proxy = StallProxy::start(url::port(&db.url));
    let port = free_port();
    let timeout = Duration::from_millis(2000);
    let mut worker = worker_behind(&db, &proxy, port, 2000, 100);
    let mut c = db.client();
    enqueue(&mut c, "ns0");
    wait_for("the first work", Duration::from_secs(20), || {
        state(&mut c, "ns0") == "succeeded"
    });
    wait_for("/readyz 200", Duration::from_secs(10), || {
        http(port, "/readyz").is_some_and(|(s, _)| s == 200)
    });
    let before = unavailable_events(&worker, None);

    proxy.set(HOLE_ALL);
    let stalled = Instant::now();
    enqueue(&mut c, "ns1");
    let mut saw_503 = None;
    let mut saw_event = None;
    while stalled.elapsed() < timeout * 4 {
        let (live, live_took) = http(port, "/livez").expect("/livez answers during the stall");
        assert_eq!(
            live,
            200,
            "/livez during the stall, {:?} in",
            stalled.elapsed()
        );
        assert!(
            live_took < Duration::from_secs(1),
            "/livez took {live_took:?}"
        );
        let (ready, ready_took) = http(port, "/readyz").expect("/readyz answers during the stall");
        assert!(
            ready_took < Duration::from_secs(1),
            "/readyz took {ready_took:?}"
        );
        if ready == 503 && saw_503.is_none() {
            saw_503 = Some(stalled.elapsed());
        }
        if saw_event.is_none() && unavailable_events(&worker, None) > before {
            saw_event = Some(stalled.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let saw_503 = saw_503.expect("/readyz never turned 503 during the stall");
    let saw_event = saw_event.expect("no worker.error WORKER_UNAVAILABLE during the stall");
    eprintln!("stall: /readyz 503 after {saw_503:?}, WORKER_UNAVAILABLE after {saw_event:?}");
    assert!(saw_503 <= timeout + Duration::from_secs(1), "{saw_503:?}");
    assert!(
        saw_event <= timeout + Duration::from_secs(2),
        "{saw_event:?}"
    );
    assert!(
        worker.child.try_wait().unwrap().is_none(),
        "the worker exited"
    );

    proxy.set(FORWARD);
    wait_for(
        "the work enqueued during the stall",
        Duration::from_secs(30),
        || state(&mut c, "ns1") == "succeeded",
    );
    wait_for("/readyz 200 again", Duration::from_secs(10), || {
        http(port, "/readyz").is_some_and(|(s, _)| s == 200)
    });
    let done: Vec<(i64, i64)> = c
        .query(
            "SELECT work_id, count(*) FROM public.occ_probe_done GROUP BY work_id ORDER BY work_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(done.len(), 2, "{done:?}");
    assert!(
        done.iter().all(|(_, n)| *n == 1),
        "completed more than once: {done:?}"
    );

    proxy.set(HOLE_ALL);
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    worker.signal("TERM");
    let (status, stderr) = worker.wait(Duration::from_secs(20));
    let took = signalled.elapsed();
    eprintln!("stall: SIGTERM to exit {took:?}");
    assert!(status.success(), "exit status {status:?}: {stderr}");
    // W4, W5: grace 1 s + one database timeout 2 s, plus a generous margin.
    assert!(
        took <= Duration::from_secs(1) + timeout + Duration::from_secs(2),
        "{took:?}"
    );
}

// W5, Q13: only the LISTEN connection black-holed. The worker notices within the database
// timeout (plus its ping interval and a margin), says so, reconnects, and a notification wakes
// it again (the poll fallback is a minute, so only LISTEN can explain the completion).
#[test]
fn w5_a_black_holed_listen_connection_is_noticed_and_replaced() {
    let db = TestDb::bootstrapped();
    let proxy = StallProxy::start(url::port(&db.url));
    let port = free_port();
    let worker = worker_behind(&db, &proxy, port, 2000, 60_000);
    let mut c = db.client();
    wait_for("/readyz 200", Duration::from_secs(20), || {
        http(port, "/readyz").is_some_and(|(s, _)| s == 200)
    });
    // Let the first wake-up's claim attempt pass before the first work, so NOTIFY wakes it.
    std::thread::sleep(Duration::from_millis(500));
    enqueue(&mut c, "ns0");
    wait_for(
        "the first work, woken by NOTIFY",
        Duration::from_secs(10),
        || state(&mut c, "ns0") == "succeeded",
    );

    proxy.set(HOLE_LISTEN);
    let stalled = Instant::now();
    wait_for(
        "worker.error NotificationsUnavailable",
        Duration::from_secs(10),
        || unavailable_events(&worker, Some("NotificationsUnavailable")) > 0,
    );
    let noticed = stalled.elapsed();
    eprintln!("listen stall: noticed after {noticed:?}");
    // Ping every timeout/4, each bounded by the timeout: 2.5 s, plus a margin.
    assert!(noticed <= Duration::from_millis(2500 + 2000), "{noticed:?}");
    assert_eq!(
        http(port, "/readyz").map(|(s, _)| s),
        Some(200),
        "claims still work"
    );

    proxy.set(FORWARD);
    std::thread::sleep(Duration::from_millis(1000));
    let enqueued = Instant::now();
    enqueue(&mut c, "ns1");
    wait_for(
        "a work woken by the new LISTEN connection",
        Duration::from_secs(10),
        || state(&mut c, "ns1") == "succeeded",
    );
    eprintln!("listen stall: woken {:?} after enqueue", enqueued.elapsed());
}

/// The value of one sample line of `/metrics`, or 0 when absent.
fn metric(port: u16, line_prefix: &str) -> f64 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text.lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

// W5: a claim statement that keeps failing (here a trigger refuses every
// claim) is counted on every try, said as worker.error WORKER_UNAVAILABLE at most every 5 s,
// and turns /readyz 503 while the database itself answers; once claims work again the queue
// drains and /readyz is 200.
#[test]
fn repeated_claim_failures_are_counted_said_rate_limited_and_turn_readiness_off() {
    let db = TestDb::bootstrapped();
    let port = free_port();
    let mut env = worker_env(&db.url);
    env.retain(|(k, _)| *k != "OCC_WORKER_HTTP_ADDR");
    env.push(("OCC_WORKER_HTTP_ADDR", format!("127.0.0.1:{port}")));
    env.push(("OCC_WORKER_POLL_INTERVAL_MS", "50".into()));
    let mut c = db.client();
    c.batch_execute(
        "CREATE FUNCTION public.refuse_claims() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.claim_id IS NOT NULL THEN RAISE EXCEPTION 'claims refused'; END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_claims BEFORE UPDATE ON occ.work_lanes
             FOR EACH ROW EXECUTE FUNCTION public.refuse_claims();",
    )
    .unwrap();
    enqueue(&mut c, "ns0");
    let worker = WorkerProcess::start("probe", &env);
    wait_for(
        "/readyz 503 while claims fail",
        Duration::from_secs(20),
        || http(port, "/readyz").is_some_and(|(s, _)| s == 503),
    );
    crate::support::holds_for(
        "the work queued while claims fail",
        Duration::from_secs(6),
        || state(&mut c, "ns0") == "queued",
    );
    let failures = metric(
        port,
        "occ_worker_claim_failures_total{cause=\"DatabaseError:P0001\"}",
    );
    let said = unavailable_events(&worker, Some("DatabaseError:P0001"));
    eprintln!("claim failures: {failures} counted, {said} said");
    assert!(
        failures >= 20.0,
        "every failed claim is counted: {failures}"
    );
    assert!((1..=3).contains(&said), "said at most every 5 s: {said}");
    assert_eq!(state(&mut c, "ns0"), "queued");

    c.batch_execute("DROP TRIGGER refuse_claims ON occ.work_lanes")
        .unwrap();
    wait_for("the work once claims work", Duration::from_secs(20), || {
        state(&mut c, "ns0") == "succeeded"
    });
    wait_for("/readyz 200 again", Duration::from_secs(10), || {
        http(port, "/readyz").is_some_and(|(s, _)| s == 200)
    });
}

/// The voluntary and involuntary context switches of the thread of `pid` named `name`.
fn thread_switches(pid: i32, name: &str) -> Option<u64> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
        if comm.trim() != name {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).ok()?;
        return Some(
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
                .sum(),
        );
    }
    None
}

// W5: the watchdog looks only while a request may wait. An idle worker (its claims and
// probes a few milliseconds each) wakes it about once per database timeout, where it used to
// look five times a second (`docs/benchmarks.md` has the idle worker's CPU).
#[test]
fn an_idle_worker_s_database_watchdog_sleeps() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let db = TestDb::bootstrapped();
    let env = worker_env(&db.url);
    let worker = WorkerProcess::start("noop", &env);
    wait_for("worker.started", Duration::from_secs(20), || {
        worker.has_event("worker.started")
    });
    std::thread::sleep(Duration::from_secs(1));
    let before = thread_switches(worker.pid(), "occ-db-watchdog").expect("the watchdog thread");
    std::thread::sleep(Duration::from_secs(5));
    let after = thread_switches(worker.pid(), "occ-db-watchdog").expect("the watchdog thread");
    // The database timeout is 5 s (worker_env): a wake-up or two per timeout, plus slack.
    assert!(
        after - before <= 6,
        "the watchdog woke {} times in 5 s of idling",
        after - before
    );
}
