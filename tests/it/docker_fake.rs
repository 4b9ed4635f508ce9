//! The Docker driver against a scripted fake Engine on a Unix socket: each expected request
//! (method, path and optionally a fragment of the body) and the answer to give, so statuses and malformed bodies the real daemon
//! will not produce on demand can be checked end to end.
//!
//! The fake answers one request per connection (`Connection: close`) on one thread, which it
//! joins on drop; it never reaches a real daemon.

use occ_worker::cancel::{CancelToken, Cancelled, LossCause};
use occ_worker::compute::docker::{DockerDriver, SubnetPool};
use occ_worker::compute::{ComputeDriver, ComputeError, ComputeErrorKind, NamespaceSpec};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// One expected request and its scripted answer.
struct Step {
    method: &'static str,
    /// The expected path, query included.
    path: String,
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
    body: &'static str,
    /// Answer nothing and wait until the client gives up.
    hang: bool,
    /// A fragment the request body must contain.
    body_contains: Option<&'static str>,
}

fn step(method: &'static str, path: &str, status: u16, body: &'static str) -> Step {
    Step {
        method,
        path: path.to_string(),
        status,
        headers: vec![],
        body,
        hang: false,
        body_contains: None,
    }
}

/// A `POST /v1.41/networks/create` that must ask for `subnet`.
fn create(subnet: &'static str, status: u16, body: &'static str) -> Step {
    Step {
        body_contains: Some(subnet),
        ..step("POST", "/v1.41/networks/create", status, body)
    }
}

fn ping(version: &'static str) -> Step {
    Step {
        headers: vec![("API-Version", version)],
        ..step("GET", "/_ping", 200, "OK")
    }
}

#[derive(Default)]
struct Script {
    steps: Mutex<VecDeque<Step>>,
    mismatches: Mutex<Vec<String>>,
    stopping: AtomicBool,
}

struct FakeDocker {
    path: PathBuf,
    script: Arc<Script>,
    server: Option<JoinHandle<()>>,
}

impl FakeDocker {
    fn start(steps: Vec<Step>) -> FakeDocker {
        let path = std::env::temp_dir().join(format!(
            "occ-fake-docker-{}-{}.sock",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).expect("bind fake docker socket");
        let script = Arc::new(Script {
            steps: Mutex::new(steps.into()),
            ..Script::default()
        });
        let server = {
            let script = script.clone();
            std::thread::Builder::new()
                .name("fake-docker".into())
                .spawn(move || serve(listener, &script))
                .expect("spawn fake docker")
        };
        FakeDocker {
            path,
            script,
            server: Some(server),
        }
    }

    fn driver(&self) -> DockerDriver {
        DockerDriver::new(&format!("unix://{}", self.path.display())).expect("driver")
    }

    /// Asserts every request matched and every expected request happened.
    fn finish(self) {
        let mismatches = self.script.mismatches.lock().clone();
        assert!(mismatches.is_empty(), "unexpected requests: {mismatches:?}");
        let left: Vec<String> = self
            .script
            .steps
            .lock()
            .iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect();
        assert!(left.is_empty(), "expected requests not made: {left:?}");
    }
}

impl Drop for FakeDocker {
    fn drop(&mut self) {
        self.script.stopping.store(true, Ordering::SeqCst);
        let _ = UnixStream::connect(&self.path);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(listener: UnixListener, script: &Script) {
    for stream in listener.incoming() {
        if script.stopping.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(stream) = stream {
            answer_one(stream, script);
        }
    }
}

/// Reads one request head (and body, by Content-Length) and writes the scripted answer.
fn answer_one(stream: UnixStream, script: &Script) {
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut content_length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                content_length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; content_length];
    let _ = reader.read_exact(&mut body);

    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    // Compact JSON (the client pretty-prints), so fragments need not follow its layout.
    let body = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(json) => json.to_string(),
        Err(_) => String::from_utf8_lossy(&body).into_owned(),
    };
    let expected = script.steps.lock().pop_front();
    let (status, headers, reply) = match expected {
        Some(s)
            if s.method == method
                && s.path == path
                && s.body_contains.is_some_and(|f| !body.contains(f)) =>
        {
            script.mismatches.lock().push(format!(
                "{method} {path} with body {body} (expected it to contain {:?})",
                s.body_contains
            ));
            (599, vec![], "")
        }
        Some(s) if s.method == method && s.path == path && s.hang => {
            // Silent until the client closes the connection.
            let mut rest = Vec::new();
            let _ = reader.read_to_end(&mut rest);
            return;
        }
        Some(s) if s.method == method && s.path == path => (s.status, s.headers, s.body),
        Some(s) => {
            script.mismatches.lock().push(format!(
                "{method} {path} (expected {} {})",
                s.method, s.path
            ));
            (599, vec![], "")
        }
        None => {
            script
                .mismatches
                .lock()
                .push(format!("{method} {path} (after the script ended)"));
            (599, vec![], "")
        }
    };
    let mut head = format!(
        "HTTP/1.1 {status} Scripted\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = write_half;
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(reply.as_bytes());
}

fn namespace() -> NamespaceSpec {
    NamespaceSpec {
        installation_id: "inst".into(),
        namespace_id: "ns1".into(),
        name: "test".into(),
        existing_namespace: None,
    }
}

/// The inspect answer for the Namespace's network, with our labels.
const OURS: &str = r#"{"Id":"n1","Name":"occ-inst-ns1","Labels":{"occ.managed-by":"occ-worker","occ.installation":"inst","occ.namespace":"ns1"}}"#;

/// A `GET /networks` answer: the default bridge and one of our `/24`s.
const LISTING: &str = r#"[{"Id":"b","Name":"bridge","IPAM":{"Config":[{"Subnet":"172.17.0.0/16"}]}},{"Id":"x","Name":"occ-inst-ns0","IPAM":{"Config":[{"Subnet":"172.16.0.0/24"}]}}]"#;

/// The refusal of a subnet that overlaps one in use.
const OVERLAP: &str = r#"{"message":"Pool overlaps with other one on this address space"}"#;

/// The `filters` query `{"label":["occ.installation=inst","occ.namespace=ns1"]}`, as the driver
/// encodes it: deletion selects only objects carrying both labels.
const NS1_FILTER: &str =
    "%7B%22label%22%3A%5B%22occ.installation%3Dinst%22%2C%22occ.namespace%3Dns1%22%5D%7D";

fn permanent_code(e: &ComputeError) -> &str {
    match e.kind() {
        ComputeErrorKind::Permanent(code) => code,
        other => panic!("expected a permanent error, got {other:?}"),
    }
}

#[test]
fn api_version_is_capped_at_1_41_and_cached() {
    let fake = FakeDocker::start(vec![
        ping("1.45"),
        step("GET", "/v1.41/networks/occ-inst-ns1", 404, "{}"),
        create("\"172.16.0.0/24\"", 201, r#"{"Id":"n1"}"#),
        step("GET", "/v1.41/networks/occ-inst-ns1", 200, OURS),
        step("GET", "/v1.41/networks/occ-inst-ns1", 200, OURS),
    ]);
    let driver = fake.driver();
    let observed = driver
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .expect("ensure");
    assert!(observed.complete);
    // The second pass does not ping again.
    let again = driver
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .expect("ensure again");
    assert_eq!(again, observed);
    fake.finish();
}

#[test]
fn a_silent_daemon_is_cut_off_when_the_lease_runs_out() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        Step {
            hang: true,
            ..step("GET", "/v1.41/networks/occ-inst-ns1", 200, "{}")
        },
    ]);
    let driver = fake.driver();
    driver
        .preflight(&CancelToken::unbounded())
        .expect("preflight");
    let started = Instant::now();
    let cancel = CancelToken::new(started + Duration::from_millis(300));
    let e = driver.ensure_namespace(&namespace(), &cancel).unwrap_err();
    assert_eq!(
        e.kind(),
        &ComputeErrorKind::Cancelled(Cancelled(LossCause::LeaseLapsed))
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the lease"
    );
    fake.finish();
}

#[test]
fn older_daemons_are_spoken_to_in_their_version() {
    let fake = FakeDocker::start(vec![
        ping("1.40"),
        step(
            "GET",
            &format!("/v1.40/containers/json?all=true&filters={NS1_FILTER}"),
            200,
            "[]",
        ),
        step(
            "GET",
            &format!("/v1.40/networks?filters={NS1_FILTER}"),
            200,
            "[]",
        ),
        step(
            "GET",
            &format!("/v1.40/containers/json?all=true&filters={NS1_FILTER}"),
            200,
            "[]",
        ),
        step(
            "GET",
            &format!("/v1.40/networks?filters={NS1_FILTER}"),
            200,
            "[]",
        ),
    ]);
    let observed = fake
        .driver()
        .delete_namespace(&namespace(), &CancelToken::unbounded())
        .expect("delete");
    assert!(observed.complete);
    fake.finish();
}

#[test]
fn network_with_endpoints_left_is_pending_not_failed() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        step(
            "GET",
            &format!("/v1.41/containers/json?all=true&filters={NS1_FILTER}"),
            200,
            r#"[{"Id":"c1"}]"#,
        ),
        step(
            "DELETE",
            "/v1.41/containers/c1?force=true&v=true",
            404,
            r#"{"message":"gone"}"#,
        ),
        step(
            "GET",
            &format!("/v1.41/networks?filters={NS1_FILTER}"),
            200,
            r#"[{"Id":"n1","Name":"occ-inst-ns1"}]"#,
        ),
        step(
            "DELETE",
            "/v1.41/networks/n1",
            409,
            r#"{"message":"has active endpoints"}"#,
        ),
        step(
            "GET",
            &format!("/v1.41/containers/json?all=true&filters={NS1_FILTER}"),
            200,
            "[]",
        ),
        step(
            "GET",
            &format!("/v1.41/networks?filters={NS1_FILTER}"),
            200,
            r#"[{"Id":"n1","Name":"occ-inst-ns1"}]"#,
        ),
    ]);
    let observed = fake
        .driver()
        .delete_namespace(&namespace(), &CancelToken::unbounded())
        .expect("delete");
    assert!(!observed.complete);
    assert_eq!(
        observed.pending_reason.as_deref(),
        Some("NETWORK_REMOVAL_PENDING")
    );
    fake.finish();
}

#[test]
fn server_errors_and_throttling_are_transient_with_their_status() {
    for status in [429, 500, 503] {
        let fake = FakeDocker::start(vec![
            ping("1.41"),
            step(
                "GET",
                "/v1.41/networks/occ-inst-ns1",
                status,
                r#"{"message":"busy"}"#,
            ),
        ]);
        let e = fake
            .driver()
            .ensure_namespace(&namespace(), &CancelToken::unbounded())
            .unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert_eq!(e.status(), Some(status));
        fake.finish();
    }
}

#[test]
fn other_client_errors_are_rejected_requests() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        step("GET", "/v1.41/networks/occ-inst-ns1", 404, "{}"),
        create("172.16.0.0/24", 400, r#"{"message":"invalid name"}"#),
    ]);
    let e = fake
        .driver()
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .unwrap_err();
    assert_eq!(permanent_code(&e), "DOCKER_REQUEST_REJECTED");
    assert_eq!(e.status(), Some(400));
    // Errors carry codes and statuses, never the daemon's words.
    assert!(!e.to_string().contains("invalid name"), "{e}");
    fake.finish();
}

#[test]
fn malformed_answers_are_invalid_driver_observations() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        step("GET", "/v1.41/networks/occ-inst-ns1", 200, "{not json"),
    ]);
    let e = fake
        .driver()
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .unwrap_err();
    assert_eq!(permanent_code(&e), "INVALID_DRIVER_OBSERVATION");
    assert_eq!(e.class(), "decode");
    fake.finish();
}

#[test]
fn failing_ping_fails_preflight_as_unavailable() {
    let fake = FakeDocker::start(vec![step("GET", "/_ping", 500, "")]);
    let e = fake
        .driver()
        .preflight(&CancelToken::unbounded())
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(e.class(), "docker_unavailable");
    assert_eq!(e.status(), Some(500));
    fake.finish();
}

/// C2: the driver posts the subnet its ledger reserved without listing first; a refusal means
/// a network the ledger does not know holds it, so the driver lists the daemon's subnets and
/// reserves past them and past every refused one.
#[test]
fn a_subnet_taken_by_a_foreign_network_is_skipped_for_the_next_free_one() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        step("GET", "/v1.41/networks/occ-inst-ns1", 404, "{}"),
        // Engine 20.10 refuses an overlapping subnet with 403 ...
        create("{\"Subnet\":\"172.16.0.0/24\"}", 403, OVERLAP),
        step("GET", "/v1.41/networks", 200, LISTING),
        // ... other daemons answer 400 with the same phrase; the listing may not show the
        // network yet: the refused subnet is not asked for again.
        create("{\"Subnet\":\"172.16.1.0/24\"}", 400, OVERLAP),
        step("GET", "/v1.41/networks", 200, LISTING),
        create("{\"Subnet\":\"172.16.2.0/24\"}", 201, r#"{"Id":"n1"}"#),
        step("GET", "/v1.41/networks/occ-inst-ns1", 200, OURS),
    ]);
    let observed = fake
        .driver()
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .expect("ensure");
    assert!(observed.complete);
    fake.finish();
}

#[test]
fn subnets_come_from_the_configured_pool() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        step("GET", "/v1.41/networks/occ-inst-ns1", 404, "{}"),
        create("{\"Subnet\":\"10.9.0.0/28\"}", 403, OVERLAP),
        step(
            "GET",
            "/v1.41/networks",
            200,
            r#"[{"Id":"y","Name":"other","IPAM":{"Config":[{"Subnet":"10.9.0.0/28"},{"Subnet":"fd00::/64"}]}}]"#,
        ),
        create("{\"Subnet\":\"10.9.0.16/28\"}", 201, "{}"),
        step("GET", "/v1.41/networks/occ-inst-ns1", 200, OURS),
    ]);
    let pool: SubnetPool = "10.9.0.0/24:28".parse().expect("pool");
    let observed = fake
        .driver()
        .with_subnet_pool(pool)
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .expect("ensure");
    assert!(observed.complete);
    fake.finish();
}

#[test]
fn a_pool_covered_by_foreign_networks_is_exhausted_for_good() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        step("GET", "/v1.41/networks/occ-inst-ns1", 404, "{}"),
        create("10.9.0.0/24", 403, OVERLAP),
        step(
            "GET",
            "/v1.41/networks",
            200,
            r#"[{"Id":"a","Name":"a","IPAM":{"Config":[{"Subnet":"10.9.0.0/24"}]}},{"Id":"b","Name":"b","IPAM":{"Config":[{"Subnet":"10.9.1.128/25"}]}}]"#,
        ),
    ]);
    let pool: SubnetPool = "10.9.0.0/23:24".parse().expect("pool");
    let e = fake
        .driver()
        .with_subnet_pool(pool)
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .unwrap_err();
    assert_eq!(permanent_code(&e), "NAMESPACE_SUBNET_POOL_EXHAUSTED");
    fake.finish();
}

#[test]
fn a_pool_used_up_by_refusals_is_exhausted_too() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        step("GET", "/v1.41/networks/occ-inst-ns1", 404, "{}"),
        create("10.9.0.0/24", 403, OVERLAP),
        step("GET", "/v1.41/networks", 200, "[]"),
        create("10.9.1.0/24", 403, OVERLAP),
        step("GET", "/v1.41/networks", 200, "[]"),
    ]);
    let pool: SubnetPool = "10.9.0.0/23:24".parse().expect("pool");
    let e = fake
        .driver()
        .with_subnet_pool(pool)
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .unwrap_err();
    assert_eq!(permanent_code(&e), "NAMESPACE_SUBNET_POOL_EXHAUSTED");
    fake.finish();
}

/// C2, N3: contention is never a failure. Eight refused subnets in one pass end it pending
/// `NAMESPACE_SUBNET_CONTENDED` (the reconciler defers, refunding the attempt).
#[test]
fn endless_subnet_refusals_end_pending_as_contended_not_failed() {
    let mut steps = vec![
        ping("1.41"),
        step("GET", "/v1.41/networks/occ-inst-ns1", 404, "{}"),
    ];
    for subnet in [
        "172.16.0.0/24",
        "172.16.1.0/24",
        "172.16.2.0/24",
        "172.16.3.0/24",
        "172.16.4.0/24",
        "172.16.5.0/24",
        "172.16.6.0/24",
        "172.16.7.0/24",
    ] {
        steps.push(create(subnet, 403, OVERLAP));
        steps.push(step("GET", "/v1.41/networks", 200, LISTING));
    }
    let fake = FakeDocker::start(steps);
    let observed = fake
        .driver()
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .expect("contention is an observation, not an error");
    assert!(!observed.complete);
    assert_eq!(observed.failure, None);
    assert_eq!(
        observed.pending_reason.as_deref(),
        Some("NAMESPACE_SUBNET_CONTENDED")
    );
    fake.finish();
}
