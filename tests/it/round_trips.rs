//! Round trips per reconcile pass: a counting proxy in front of the shared
//! test cluster reads the worker's frontend messages (Parse, Bind, Sync, simple Query) and
//! counts, per connection, what a batch of passes sent. The worker runs the real reconcilers
//! on the scripted driver, one work at a time. The figures are printed (`--nocapture`); the
//! assertions are on behaviour: no connection parses the same statement text twice (statements
//! are prepared once per connection) and no check-out pings the server.

use crate::agent::{create_agent, deploy, fixture};
use crate::scripted::{quiet, run_on, Opts, ScriptedDriver};
use crate::support::TestDb;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What one client connection sent.
#[derive(Debug, Default)]
struct Sent {
    application: String,
    /// The connection that sent `LISTEN occ_work` (the listener, not the pool).
    listener: bool,
    /// Statement texts parsed (extended protocol), in order.
    parsed: Vec<String>,
    binds: u64,
    /// Syncs and simple queries, each of which waits for the server's ReadyForQuery; a Sync
    /// that only follows Close messages (a dropped statement) is not waited for and not counted.
    round_trips: u64,
    /// Simple-protocol queries (BEGIN, COMMIT, a check-out ping is the empty query).
    simple: Vec<String>,
}

/// A forwarding proxy that parses what clients send.
struct CountingProxy {
    port: u16,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<Arc<Mutex<Sent>>>>>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl CountingProxy {
    fn start(upstream: u16) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<Arc<Mutex<Sent>>>>> = Arc::default();
        let threads: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let acceptor = {
            let (stop, conns, threads) = (stop.clone(), conns.clone(), threads.clone());
            std::thread::spawn(move || {
                while let Some(client) = crate::support::accept_until(&listener, &stop) {
                    let _ = client.set_nonblocking(false);
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                        continue;
                    };
                    let sent = Arc::new(Mutex::new(Sent::default()));
                    conns.lock().unwrap().push(sent.clone());
                    let up = (client.try_clone().unwrap(), server.try_clone().unwrap());
                    let stop_up = stop.clone();
                    let stop_down = stop.clone();
                    let mut t = threads.lock().unwrap();
                    t.push(std::thread::spawn(move || {
                        pump(up.0, up.1, Some(&sent), &stop_up)
                    }));
                    t.push(std::thread::spawn(move || {
                        pump(server, client, None, &stop_down)
                    }));
                }
            })
        };
        CountingProxy {
            port,
            stop,
            conns,
            threads,
            acceptor: Some(acceptor),
        }
    }

    /// `url` with this proxy's port.
    fn url(&self, url: &str) -> String {
        let (head, tail) = url.rsplit_once('@').expect("URL with user@host");
        let db = tail.split_once('/').map(|(_, d)| d).unwrap_or("");
        format!("{head}@127.0.0.1:{}/{db}", self.port)
    }

    /// What the worker's pooled connections sent (not its listener, not the test's client).
    fn pooled(&self) -> Vec<Arc<Mutex<Sent>>> {
        self.conns
            .lock()
            .unwrap()
            .iter()
            .filter(|c| {
                let c = c.lock().unwrap();
                c.application == "occ-worker" && !c.listener
            })
            .cloned()
            .collect()
    }
}

impl Drop for CountingProxy {
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

fn pump(mut from: TcpStream, mut to: TcpStream, count: Option<&Mutex<Sent>>, stop: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = [0u8; 16 * 1024];
    let mut parser = Parser::default();
    while !stop.load(Ordering::SeqCst) {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if let Some(sent) = count {
                    parser.feed(&buf[..n], &mut sent.lock().unwrap());
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

/// The frontend side of the PostgreSQL protocol, enough to count messages.
#[derive(Default)]
struct Parser {
    buf: Vec<u8>,
    started: bool,
    /// Message types since the last Sync.
    pending: Vec<u8>,
}

fn int32(b: &[u8]) -> usize {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
}

fn cstr(b: &[u8]) -> (&[u8], &[u8]) {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    (&b[..end], b.get(end + 1..).unwrap_or(&[]))
}

impl Parser {
    fn feed(&mut self, bytes: &[u8], sent: &mut Sent) {
        self.buf.extend_from_slice(bytes);
        loop {
            if !self.started {
                if self.buf.len() < 8 || self.buf.len() < int32(&self.buf) {
                    return;
                }
                let len = int32(&self.buf);
                let msg: Vec<u8> = self.buf.drain(..len).collect();
                // SSLRequest / GSSENCRequest come before the startup message.
                if int32(&msg[4..]) == 196608 {
                    self.started = true;
                    let mut rest = &msg[8..];
                    while !rest.is_empty() && rest[0] != 0 {
                        let (key, r) = cstr(rest);
                        let (value, r) = cstr(r);
                        if key == b"application_name" {
                            sent.application = String::from_utf8_lossy(value).into();
                        }
                        rest = r;
                    }
                }
                continue;
            }
            if self.buf.len() < 5 || self.buf.len() < 1 + int32(&self.buf[1..]) {
                return;
            }
            let len = 1 + int32(&self.buf[1..]);
            let msg: Vec<u8> = self.buf.drain(..len).collect();
            let body = &msg[5..];
            match msg[0] {
                b'P' => {
                    let (_, rest) = cstr(body);
                    let (sql, _) = cstr(rest);
                    sent.parsed.push(String::from_utf8_lossy(sql).into());
                }
                b'B' => sent.binds += 1,
                b'S' => {
                    if self.pending.iter().any(|&t| t != b'C') {
                        sent.round_trips += 1;
                    }
                    self.pending.clear();
                    continue;
                }
                b'Q' => {
                    let (sql, _) = cstr(body);
                    let sql = String::from_utf8_lossy(sql).to_string();
                    if sql.contains("LISTEN occ_work") {
                        sent.listener = true;
                    }
                    sent.simple.push(sql);
                    sent.round_trips += 1;
                }
                _ => {}
            }
            self.pending.push(msg[0]);
        }
    }
}

/// Totals over the worker's pooled connections, and each text parsed twice on one connection.
#[derive(Debug, Default)]
struct Figures {
    connections: usize,
    round_trips: u64,
    parses: u64,
    binds: u64,
    simple: u64,
    pings: u64,
    reparsed: Vec<String>,
    /// Publications that began with their claims' lock in one message, and that completed,
    /// claimed and committed in one message.
    begun_locking: u64,
    committed_completing: u64,
}

fn figures(proxy: &CountingProxy) -> Figures {
    let mut f = Figures::default();
    for conn in proxy.pooled() {
        let c = conn.lock().unwrap();
        f.connections += 1;
        f.round_trips += c.round_trips;
        f.parses += c.parsed.len() as u64;
        f.binds += c.binds;
        f.simple += c.simple.len() as u64;
        f.pings += c.simple.iter().filter(|q| q.is_empty()).count() as u64;
        let mut seen: HashMap<&str, u32> = HashMap::new();
        for sql in &c.parsed {
            *seen.entry(sql).or_default() += 1;
        }
        // A statement prepared by name (`PREPARE occ_… AS`) counts as parsed, once.
        for sql in &c.simple {
            if let Some(name) = sql.strip_prefix("PREPARE ") {
                let name = name.split_whitespace().next().unwrap_or_default();
                *seen.entry(name).or_default() += 1;
            }
        }
        for (sql, n) in seen {
            if n > 1 {
                let first = sql.lines().find(|l| !l.starts_with("--")).unwrap_or(sql);
                f.reparsed.push(format!("{n}x {}", first.trim()));
            }
        }
        f.begun_locking += c
            .simple
            .iter()
            .filter(|q| q.starts_with("BEGIN;\nEXECUTE occ_work_lock_claims("))
            .count() as u64;
        f.committed_completing += c
            .simple
            .iter()
            .filter(|q| {
                q.starts_with("EXECUTE occ_work_complete_batch(") && q.ends_with("\nCOMMIT")
            })
            .count() as u64;
    }
    f
}

fn report(what: &str, passes: u64, f: &Figures) {
    eprintln!(
        "round trips, {what}: {passes} passes on {} connections: {} round trips ({:.1}/pass), \
         {} Parse ({:.1}/pass), {} Bind ({:.1}/pass), {} simple queries of which {} pings",
        f.connections,
        f.round_trips,
        f.round_trips as f64 / passes as f64,
        f.parses,
        f.parses as f64 / passes as f64,
        f.binds,
        f.binds as f64 / passes as f64,
        f.simple,
        f.pings,
    );
}

fn assert_lean(f: &Figures) {
    assert_eq!(f.pings, 0, "a check-out pinged the server: {f:?}");
    assert!(
        f.reparsed.is_empty(),
        "statements parsed more than once on one connection: {:#?}",
        f.reparsed
    );
}

fn upstream_port(url: &str) -> u16 {
    let (_, tail) = url.rsplit_once('@').unwrap();
    let hostport = tail.split('/').next().unwrap();
    hostport.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// One worker thread, so passes run one after another on the same few connections.
fn one_at_a_time() -> Opts {
    Opts {
        concurrency: 1,
        timeout: Duration::from_secs(120),
        lease: Duration::from_secs(60),
        ..Opts::default()
    }
}

const PASSES: u64 = 20;

#[test]
fn namespace_ensure_passes_prepare_each_statement_once_per_connection() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for i in 0..PASSES {
        c.query_one(
            "SELECT occ.namespace_create('admin', $1)",
            &[&format!("team-{i}")],
        )
        .unwrap();
    }
    let proxy = CountingProxy::start(upstream_port(&db.url));
    let driver = Arc::new(ScriptedDriver::new());
    run_on(&proxy.url(&db.url), driver.clone(), one_at_a_time(), quiet);
    assert_eq!(driver.calls_of("ensure_namespace").len(), PASSES as usize);
    let ready: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.namespaces WHERE status = 'ready'",
        &[],
    );
    assert_eq!(ready, PASSES as i64);
    let f = figures(&proxy);
    report("Namespace ensure", PASSES, &f);
    assert_lean(&f);
    // Each pass's publication: BEGIN with the claim's lock, then its completion, the claim
    // and COMMIT, two messages.
    assert_eq!(
        (f.begun_locking, f.committed_completing),
        (PASSES, PASSES),
        "{f:?}"
    );
}

#[test]
fn revision_deploy_passes_prepare_each_statement_once_per_connection() {
    let fx = fixture();
    let mut c = fx.db.client();
    let mut agents = vec![fx.agent.clone()];
    for i in 1..PASSES {
        agents.push(create_agent(&mut c, "ns1", &format!("bot-{i}")).0);
    }
    for agent in &agents {
        deploy(&mut c, agent);
    }
    let proxy = CountingProxy::start(upstream_port(&fx.db.url));
    let driver = Arc::new(ScriptedDriver::new());
    run_on(
        &proxy.url(&fx.db.url),
        driver.clone(),
        one_at_a_time(),
        quiet,
    );
    assert_eq!(driver.calls_of("activate_revision").len(), PASSES as usize);
    let f = figures(&proxy);
    report("revision deploy", PASSES, &f);
    assert_lean(&f);
}
