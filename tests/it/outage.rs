//! W5: a database outage. The test runs its own throwaway PostgreSQL cluster
//! (`scripts/pg-start target/pg-outage`), never the shared test cluster, so it can stop and
//! restart the server under a running worker process.

use crate::support::{free_port, wait_for, worker_env, WorkerProcess};
use postgres::{Client, NoTls};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const DIR: &str = "target/pg-outage";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A private cluster; stopped (immediately) on drop, even when the test fails. The TLS test
/// (`tls.rs`) runs one too, in its own directory.
pub struct Cluster {
    pub url: String,
    pub dir: PathBuf,
    data: PathBuf,
    log: PathBuf,
}

impl Cluster {
    fn start() -> Cluster {
        Cluster::start_in(DIR)
    }

    /// Starts (or reuses) the cluster under `dir`, relative to the worktree.
    pub fn start_in(dir: &str) -> Cluster {
        let out = crate::support::output_ok(
            Command::new(root().join("scripts/pg-start")).arg(dir),
            "scripts/pg-start",
        );
        // Where pg-start put it (as root, under the system temp directory).
        let dir = Command::new(root().join("scripts/pg-dir"))
            .arg(dir)
            .output()
            .expect("run scripts/pg-dir");
        let dir = PathBuf::from(String::from_utf8(dir.stdout).unwrap().trim());
        Cluster {
            url: String::from_utf8(out.stdout).unwrap().trim().to_string(),
            data: dir.join("data"),
            log: dir.join("server.log"),
            dir,
        }
    }

    /// `pg_ctl ARGS -D data`, as the postgres user when running as root (like pg-start).
    fn pg_ctl(&self, args: &[&str]) -> bool {
        let bin = Command::new("bash")
            .args([
                "-c",
                "ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1",
            ])
            .output()
            .expect("find PostgreSQL");
        let pg_ctl = format!("{}/pg_ctl", String::from_utf8_lossy(&bin.stdout).trim());
        let root_user = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
        let mut cmd = if root_user {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", &pg_ctl]);
            c
        } else {
            Command::new(&pg_ctl)
        };
        cmd.args(args)
            .arg("-D")
            .arg(&self.data)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn stop(&self) {
        assert!(
            self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "30"]),
            "pg_ctl stop"
        );
    }

    /// Starts the stopped cluster again, on the same port (its postgresql.conf names it).
    fn restart(&self) {
        let log = self.log.to_string_lossy().to_string();
        assert!(
            self.pg_ctl(&["start", "-w", "-t", "60", "-l", &log]),
            "pg_ctl start"
        );
    }

    pub fn url_of(&self, db: &str) -> String {
        let base = self.url.rsplit_once('/').map(|(b, _)| b).unwrap();
        format!("{base}/{db}")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "30"]);
    }
}

fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// Connects, retrying for up to `limit` (the server may still be starting).
fn connect(url: &str, limit: Duration) -> Client {
    let mut last = None;
    let every = Duration::from_millis(100);
    crate::support::poll(limit, every, || match Client::connect(url, NoTls) {
        Ok(c) => Some(c),
        Err(e) => {
            last = Some(e);
            None
        }
    })
    .unwrap_or_else(|| panic!("connect {url}: {}", last.expect("a connect error")))
}

use crate::support::{enqueue_ensure as enqueue_namespace, ensure_state as state};

// W5: while PostgreSQL is down the worker stays alive, reports WORKER_UNAVAILABLE and
// answers /readyz with 503; when the server comes back on the same port it completes new
// work by itself; SIGTERM still exits 0.
#[test]
fn w5_worker_survives_a_database_outage_and_resumes_by_itself() {
    let cluster = Cluster::start();
    assert_ne!(
        cluster.url,
        crate::support::admin_url(),
        "never the shared test cluster"
    );
    let url = cluster.url_of("occ_outage");
    {
        let mut admin = connect(&cluster.url, Duration::from_secs(30));
        // scripts/pg-start trades durability for speed (synchronous_commit=off); an immediate
        // stop would then lose the last commits and the test would see a database from the
        // past. A real outage keeps what was committed, so this cluster commits durably.
        admin
            .batch_execute("ALTER SYSTEM SET synchronous_commit = 'on'")
            .unwrap();
        admin.batch_execute("SELECT pg_reload_conf()").unwrap();
        admin
            .batch_execute("DROP DATABASE IF EXISTS occ_outage WITH (FORCE)")
            .unwrap();
        admin.batch_execute("CREATE DATABASE occ_outage").unwrap();
        let mut c = connect(&url, Duration::from_secs(10));
        occ_worker::migrate::run(&mut c).unwrap();
        c.execute("SELECT occ.bootstrap('inst', 'admin')", &[])
            .unwrap();
        enqueue_namespace(&mut c, "ns0");
    }
    let port = free_port();
    let mut env = worker_env(&url);
    env.retain(|(k, _)| *k != "OCC_WORKER_HTTP_ADDR" && *k != "OCC_WORKER_DB_TIMEOUT_MS");
    env.push(("OCC_WORKER_HTTP_ADDR", format!("127.0.0.1:{port}")));
    env.push(("OCC_WORKER_DB_TIMEOUT_MS", "1000".into()));
    env.push(("OCC_WORKER_POLL_INTERVAL_MS", "100".into()));
    let mut worker = WorkerProcess::start("probe", &env);

    let mut c = connect(&url, Duration::from_secs(10));
    wait_for("the first work", Duration::from_secs(20), || {
        state(&mut c, "ns0") == "succeeded"
    });
    wait_for("/readyz 200", Duration::from_secs(10), || {
        http_status(port, "/readyz") == Some(200)
    });
    drop(c);

    cluster.stop();
    wait_for(
        "worker.error WORKER_UNAVAILABLE",
        Duration::from_secs(20),
        || {
            worker
                .events()
                .iter()
                .any(|e| e["event"] == "worker.error" && e["code"] == "WORKER_UNAVAILABLE")
        },
    );
    wait_for("/readyz 503", Duration::from_secs(20), || {
        http_status(port, "/readyz") == Some(503)
    });
    wait_for(
        "worker.error HEALTH_UNAVAILABLE",
        Duration::from_secs(10),
        || {
            worker
                .events()
                .iter()
                .any(|e| e["event"] == "worker.error" && e["code"] == "HEALTH_UNAVAILABLE")
        },
    );
    // W5a: health answers from in-process state, within a second, while the database is down.
    for path in ["/readyz", "/metrics", "/livez"] {
        let started = Instant::now();
        let status = http_status(port, path);
        let took = started.elapsed();
        assert!(status.is_some(), "{path} answers during the outage");
        assert!(
            took < Duration::from_secs(1),
            "{path} took {took:?} during the outage"
        );
    }
    // Several database timeouts later the process is still running.
    crate::support::holds_for(
        "the worker running during the outage",
        Duration::from_secs(3),
        || worker.child.try_wait().unwrap().is_none(),
    );
    assert!(!worker.has_event("worker.stopped"));

    cluster.restart();
    let mut c = connect(&url, Duration::from_secs(30));
    enqueue_namespace(&mut c, "ns1");
    wait_for(
        "the work enqueued after the outage",
        Duration::from_secs(30),
        || state(&mut c, "ns1") == "succeeded",
    );
    wait_for("/readyz 200 again", Duration::from_secs(20), || {
        http_status(port, "/readyz") == Some(200)
    });
    let done: i64 = crate::support::one(&mut c, "SELECT count(*) FROM public.occ_probe_done", &[]);
    assert_eq!(done, 2);

    worker.signal("TERM");
    let (status, stderr) = worker.wait(Duration::from_secs(15));
    assert!(status.success(), "exit status {status:?}: {stderr}");
}
