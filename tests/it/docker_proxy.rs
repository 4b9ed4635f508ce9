//! A recording proxy in front of the Docker Engine socket, for tests that must prove what the
//! daemon received (or that it received nothing).
//!
//! `DockerProxy::start()` listens on a fresh Unix socket, forwards every connection
//! byte-for-byte to `/var/run/docker.sock` and records each HTTP request line it sees
//! (`"GET /v1.41/_ping"`). It never alters or answers a request itself; a test may have it
//! hold a request before forwarding it (`delay`, the slow daemon of a chaos drill) and tell
//! when a request reached the daemon (`notify`). It owns its threads and joins them on drop.

#![allow(dead_code)] // Shared by modules that each use a subset.

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The daemon socket the proxy forwards to.
pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";

const METHODS: [&[u8]; 7] = [
    b"GET ",
    b"POST ",
    b"PUT ",
    b"DELETE ",
    b"HEAD ",
    b"PATCH ",
    b"OPTIONS ",
];
const VERSION_MARK: &[u8] = b" HTTP/1.";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// What the proxy does with requests whose line contains `fragment`.
struct Rule {
    fragment: String,
    /// How many more matching requests the rule applies to.
    remaining: usize,
    /// Hold the request this long before forwarding it.
    delay: Duration,
    /// Told (with the request line) once the request was forwarded to the daemon.
    notify: Option<Sender<String>>,
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<String>>,
    rules: Mutex<Vec<Rule>>,
    /// Clones of every open socket, shut down on drop so the forwarding threads end.
    sockets: Mutex<Vec<UnixStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stopping: AtomicBool,
}

/// A recording proxy in front of the Docker socket.
pub struct DockerProxy {
    path: PathBuf,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl DockerProxy {
    /// Starts a proxy forwarding to `/var/run/docker.sock`.
    pub fn start() -> DockerProxy {
        DockerProxy::start_to(Path::new(DOCKER_SOCKET))
    }

    /// Starts a proxy forwarding to `upstream`.
    pub fn start_to(upstream: &Path) -> DockerProxy {
        let path = crate::support::socket_path("docker-proxy");
        let listener = UnixListener::bind(&path).expect("bind proxy socket");
        let shared = Arc::new(Shared::default());
        let upstream = upstream.to_path_buf();
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("docker-proxy-accept".into())
                .spawn(move || accept_loop(listener, upstream, shared))
                .expect("spawn proxy acceptor")
        };
        DockerProxy {
            path,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The `DOCKER_HOST` value that reaches the daemon through this proxy.
    pub fn docker_host(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// Holds the next `count` requests whose line contains `fragment` (`"POST "` and a path
    /// part) for `delay` before forwarding them; the client meanwhile waits for its answer.
    pub fn delay(&self, fragment: &str, count: usize, delay: Duration) {
        self.shared.rules.lock().push(Rule {
            fragment: fragment.to_string(),
            remaining: count,
            delay,
            notify: None,
        });
    }

    /// Tells, through the returned channel, each time one of the next `count` requests whose
    /// line contains `fragment` has been forwarded to the daemon (after any `delay`).
    pub fn notify(&self, fragment: &str, count: usize) -> Receiver<String> {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.shared.rules.lock().push(Rule {
            fragment: fragment.to_string(),
            remaining: count,
            delay: Duration::ZERO,
            notify: Some(tx),
        });
        rx
    }

    /// Every request line seen so far, in order, as `"METHOD /path"`.
    pub fn requests(&self) -> Vec<String> {
        self.shared.requests.lock().clone()
    }
}

impl Drop for DockerProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the acceptor; it sees `stopping` and returns.
        let _ = UnixStream::connect(&self.path);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for socket in self.shared.sockets.lock().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
        let threads: Vec<_> = self.shared.threads.lock().drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(listener: UnixListener, upstream: PathBuf, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(daemon) = UnixStream::connect(&upstream) else {
            // No daemon: the client sees the connection close, as with a dead daemon.
            continue;
        };
        let (Ok(client_read), Ok(client_write), Ok(daemon_read), Ok(daemon_write)) = (
            client.try_clone(),
            client.try_clone(),
            daemon.try_clone(),
            daemon.try_clone(),
        ) else {
            continue;
        };
        shared.sockets.lock().extend([client, daemon]);
        let upward = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("docker-proxy-up".into())
                .spawn(move || forward(client_read, daemon_write, Some(&shared)))
        };
        let downward = std::thread::Builder::new()
            .name("docker-proxy-down".into())
            .spawn(move || forward(daemon_read, client_write, None));
        let mut threads = shared.threads.lock();
        threads.extend(upward.ok());
        threads.extend(downward.ok());
    }
}

/// Copies `from` to `to` until either side closes, recording request lines and applying the
/// rules when `recorder` is given, then half-closes `to`.
fn forward(mut from: UnixStream, mut to: UnixStream, recorder: Option<&Shared>) {
    let mut buf = [0u8; 16 * 1024];
    let mut pending = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut told = Vec::new();
        if let Some(shared) = recorder {
            pending.extend_from_slice(&buf[..n]);
            for line in record_request_lines(&mut pending, shared) {
                let (delay, notify) = shared.apply_rules(&line);
                hold(shared, delay);
                told.extend(notify.map(|tx| (tx, line.clone())));
            }
            // A request held until the proxy stopped never reaches the daemon.
            if shared.stopping.load(Ordering::SeqCst) {
                break;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        for (tx, line) in told {
            let _ = tx.send(line);
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Shared {
    /// The delay and the notification the rules give a request line, counting it against each
    /// rule that matches.
    fn apply_rules(&self, line: &str) -> (Duration, Option<Sender<String>>) {
        let mut delay = Duration::ZERO;
        let mut notify = None;
        for rule in self.rules.lock().iter_mut() {
            if rule.remaining > 0 && line.contains(&rule.fragment) {
                rule.remaining -= 1;
                delay = delay.max(rule.delay);
                if rule.notify.is_some() {
                    notify = rule.notify.clone();
                }
            }
        }
        (delay, notify)
    }
}

/// Sleeps `delay`, waking early when the proxy stops.
fn hold(shared: &Shared, delay: Duration) {
    let end = Instant::now() + delay;
    while Instant::now() < end && !shared.stopping.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(10).min(end - Instant::now()));
    }
}

/// Extracts complete request lines from the client's byte stream and returns the new ones. A
/// request line is the last `METHOD ` before ` HTTP/1.` with no space in between (paths hold
/// no spaces), which stays right when bodies precede the next request on a kept-alive
/// connection.
fn record_request_lines(pending: &mut Vec<u8>, shared: &Shared) -> Vec<String> {
    let mut new = Vec::new();
    while let Some(mark) = find(pending, VERSION_MARK) {
        let head = &pending[..mark];
        let start = (0..head.len()).rev().find(|&i| {
            METHODS.iter().any(|m| head[i..].starts_with(m)) && !head[i..].contains(&b'\n')
        });
        if let Some(start) = start {
            let line = String::from_utf8_lossy(&head[start..]).into_owned();
            shared.requests.lock().push(line.clone());
            new.push(line);
        }
        pending.drain(..mark + VERSION_MARK.len());
    }
    // Without a version mark in sight only the tail can still start a request line.
    if pending.len() > 64 * 1024 {
        let cut = pending.len() - 16 * 1024;
        pending.drain(..cut);
    }
    new
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
