//! The Docker driver against a scripted fake Engine on a Unix socket: each expected request
//! (method, path and optionally a fragment of the body) and the answer to give, so statuses and malformed bodies the real daemon
//! will not produce on demand can be checked end to end.
//!
//! The fake answers one request per connection (`Connection: close`) on one thread, which it
//! joins on drop; it never reaches a real daemon.

use crate::support::{cancel_after, heartbeat};
use occ_worker::cancel::{CancelToken, Cancelled, LossCause};
use occ_worker::compute::docker::{DockerDriver, SubnetPool};
use occ_worker::compute::{ComputeDriver, ComputeError, ComputeErrorKind, NamespaceSpec};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// How long the fake waits before it answers.
    delay: Duration,
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
        delay: Duration::ZERO,
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
        let path = crate::support::socket_path("fake-docker");
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
        Some(s) if s.method == method && s.path == path => {
            std::thread::sleep(s.delay);
            (s.status, s.headers, s.body)
        }
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

/// The Namespace's networks by its labels: just ours.
const OURS_LISTED: &str = r#"[{"Id":"n1","Name":"occ-inst-ns1","Labels":{"occ.managed-by":"occ-worker","occ.installation":"inst","occ.namespace":"ns1"}}]"#;

/// `GET /networks` filtered by the Namespace's labels, answered with `body`.
fn listed(body: &'static str) -> Step {
    step(
        "GET",
        &format!("/v1.41/networks?filters={NS1_FILTER}"),
        200,
        body,
    )
}

/// A `GET /networks` answer: the default bridge and one of our `/24`s.
const LISTING: &str = r#"[{"Id":"b","Name":"bridge","IPAM":{"Config":[{"Subnet":"172.17.0.0/16"}]}},{"Id":"x","Name":"occ-inst-ns0","IPAM":{"Config":[{"Subnet":"172.16.0.0/24"}]}}]"#;

/// `LISTING` and a foreign network on 172.16.1.0/24.
const LISTING_TWO: &str = r#"[{"Id":"b","Name":"bridge","IPAM":{"Config":[{"Subnet":"172.17.0.0/16"}]}},{"Id":"x","Name":"occ-inst-ns0","IPAM":{"Config":[{"Subnet":"172.16.0.0/24"}]}},{"Id":"y","Name":"other","IPAM":{"Config":[{"Subnet":"172.16.1.0/24"}]}}]"#;

/// Two networks of the Namespace: n1 on 172.16.5.0/24, n2 on 172.16.0.0/24.
const TWO_OF_OURS: &str = r#"[{"Id":"n1","Name":"occ-inst-ns1","Labels":{"occ.managed-by":"occ-worker","occ.installation":"inst","occ.namespace":"ns1"},"IPAM":{"Config":[{"Subnet":"172.16.5.0/24"}]}},{"Id":"n2","Name":"occ-inst-ns1","Labels":{"occ.managed-by":"occ-worker","occ.installation":"inst","occ.namespace":"ns1"},"IPAM":{"Config":[{"Subnet":"172.16.0.0/24"}]}}]"#;

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
        listed("[]"),
        create("\"172.16.0.0/24\"", 201, r#"{"Id":"n1"}"#),
        listed(OURS_LISTED),
        listed(OURS_LISTED),
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
            ..listed("[]")
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

/// W2: a request is bounded by the driver's request timeout, not by the lease. A create the
/// daemon answers after three leases succeeds while the heartbeat renews the claim.
#[test]
fn a_request_longer_than_the_lease_succeeds_under_the_heartbeat() {
    let lease = Duration::from_millis(300);
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        listed("[]"),
        Step {
            delay: lease * 3,
            ..create("172.16.0.0/24", 201, r#"{"Id":"n1"}"#)
        },
        listed(OURS_LISTED),
    ]);
    let cancel = CancelToken::new(Instant::now() + lease);
    let (stop, renewals) = heartbeat(&cancel, lease / 3, lease);
    let observed = fake.driver().ensure_namespace(&namespace(), &cancel);
    stop.store(true, Ordering::SeqCst);
    renewals.join().unwrap();
    assert!(observed.expect("ensure").complete);
    assert_eq!(cancel.cause(), None);
    fake.finish();
}

/// W3: a claim lost while a request is under way (a renewal refused) interrupts the request
/// at once: the cancelling thread shuts its socket down, nobody waits for the timeout.
#[test]
fn a_claim_lost_mid_request_aborts_it_at_once() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        Step {
            hang: true,
            ..listed("[]")
        },
    ]);
    let driver = fake.driver().with_request_timeout(Duration::from_secs(60));
    driver
        .preflight(&CancelToken::unbounded())
        .expect("preflight");
    let lease = Duration::from_secs(3);
    let cancel = CancelToken::new(Instant::now() + lease);
    let (stop, renewals) = heartbeat(&cancel, lease / 3, lease);
    let refuser = cancel_after(
        &cancel,
        Duration::from_millis(200),
        LossCause::RenewalRefused,
    );
    let e = driver.ensure_namespace(&namespace(), &cancel).unwrap_err();
    let returned = Instant::now();
    let refused = refuser.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    renewals.join().unwrap();
    crate::support::assert_aborted_on_refusal(&e, (refused, returned), Duration::from_secs(1));
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
            Step {
                status,
                body: r#"{"message":"busy"}"#,
                ..listed("")
            },
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
        listed("[]"),
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
    let fake = FakeDocker::start(vec![ping("1.41"), listed("{not json")]);
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

/// C2: the driver posts the subnet its ledger reserved without listing the daemon first; a
/// refusal means something the ledger does not know holds it, so the driver lists the daemon's
/// networks and reserves past every subnet they hold.
#[test]
fn a_subnet_taken_by_a_foreign_network_is_skipped_for_the_next_free_one() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        listed("[]"),
        // Engine 20.10 refuses an overlapping subnet with 403 ...
        create("{\"Subnet\":\"172.16.0.0/24\"}", 403, OVERLAP),
        step("GET", "/v1.41/networks", 200, LISTING),
        // ... other daemons answer 400 with the same phrase.
        create("{\"Subnet\":\"172.16.1.0/24\"}", 400, OVERLAP),
        step("GET", "/v1.41/networks", 200, LISTING_TWO),
        create("{\"Subnet\":\"172.16.2.0/24\"}", 201, r#"{"Id":"n1"}"#),
        listed(OURS_LISTED),
    ]);
    let observed = fake
        .driver()
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .expect("ensure");
    assert!(observed.complete);
    fake.finish();
}

/// C2 (no infrastructure twice): a refused subnet that no listed network holds is held by a
/// create still under way in the daemon, most likely an earlier pass of this Namespace that
/// died after posting. The reservation stays where it is and the pass ends pending, so the
/// next pass adopts that network instead of creating a second one on another subnet.
#[test]
fn a_refusal_whose_holder_is_not_listed_yet_waits_instead_of_moving() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        listed("[]"),
        create("{\"Subnet\":\"172.16.0.0/24\"}", 403, OVERLAP),
        step(
            "GET",
            "/v1.41/networks",
            200,
            r#"[{"Id":"b","Name":"bridge","IPAM":{"Config":[{"Subnet":"172.17.0.0/16"}]}}]"#,
        ),
        // The next pass: the earlier create has landed and is adopted, nothing is posted.
        listed(OURS_LISTED),
    ]);
    let driver = fake.driver();
    let observed = driver
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .expect("pending, not an error");
    assert!(!observed.complete);
    assert_eq!(
        observed.pending_reason.as_deref(),
        Some("NAMESPACE_SUBNET_CONTENDED")
    );
    let next = driver
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .expect("adopted");
    assert!(next.complete);
    fake.finish();
}

/// C2 (no infrastructure twice): two networks of one Namespace (creates that landed on two
/// subnets) are one again before the ensure reports ready: the one on the reserved subnet is
/// kept, the other removed, and the Namespace's networks listed once more.
#[test]
fn a_duplicate_network_is_removed_before_ready() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        listed(TWO_OF_OURS),
        // The ledger reserved 172.16.0.0/24 (the first free one): n2 holds it and is kept.
        step("DELETE", "/v1.41/networks/n1", 204, ""),
        listed(
            r#"[{"Id":"n2","Name":"occ-inst-ns1","Labels":{"occ.managed-by":"occ-worker","occ.installation":"inst","occ.namespace":"ns1"},"IPAM":{"Config":[{"Subnet":"172.16.0.0/24"}]}}]"#,
        ),
    ]);
    let observed = fake
        .driver()
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .expect("ensure");
    assert!(observed.complete);
    fake.finish();
}

/// A duplicate the daemon will not remove yet keeps the ensure pending, never ready.
#[test]
fn a_duplicate_that_stays_keeps_the_ensure_pending() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        listed(TWO_OF_OURS),
        step(
            "DELETE",
            "/v1.41/networks/n1",
            409,
            r#"{"message":"in use"}"#,
        ),
        listed(TWO_OF_OURS),
    ]);
    let observed = fake
        .driver()
        .ensure_namespace(&namespace(), &CancelToken::unbounded())
        .expect("pending, not an error");
    assert!(!observed.complete);
    assert_eq!(
        observed.pending_reason.as_deref(),
        Some("NETWORK_REMOVAL_PENDING")
    );
    fake.finish();
}

#[test]
fn subnets_come_from_the_configured_pool() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        listed("[]"),
        create("{\"Subnet\":\"10.9.0.0/28\"}", 403, OVERLAP),
        step(
            "GET",
            "/v1.41/networks",
            200,
            r#"[{"Id":"y","Name":"other","IPAM":{"Config":[{"Subnet":"10.9.0.0/28"},{"Subnet":"fd00::/64"}]}}]"#,
        ),
        create("{\"Subnet\":\"10.9.0.16/28\"}", 201, "{}"),
        listed(OURS_LISTED),
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
        listed("[]"),
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
fn a_pool_used_up_by_foreign_creators_meanwhile_is_exhausted_too() {
    let fake = FakeDocker::start(vec![
        ping("1.41"),
        listed("[]"),
        create("10.9.0.0/24", 403, OVERLAP),
        step(
            "GET",
            "/v1.41/networks",
            200,
            r#"[{"Id":"a","Name":"a","IPAM":{"Config":[{"Subnet":"10.9.0.0/24"}]}}]"#,
        ),
        create("10.9.1.0/24", 403, OVERLAP),
        step(
            "GET",
            "/v1.41/networks",
            200,
            r#"[{"Id":"a","Name":"a","IPAM":{"Config":[{"Subnet":"10.9.0.0/24"}]}},{"Id":"b","Name":"b","IPAM":{"Config":[{"Subnet":"10.9.1.0/24"}]}}]"#,
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

/// C2, N3: contention is never a failure. Eight refused subnets in one pass end it pending
/// `NAMESPACE_SUBNET_CONTENDED` (the reconciler defers, refunding the attempt).
#[test]
fn endless_subnet_refusals_end_pending_as_contended_not_failed() {
    let mut steps = vec![ping("1.41"), listed("[]")];
    // Foreign creators take each subnet just before the driver posts on it.
    let mut held = String::from(
        r#"{"Id":"b","Name":"bridge","IPAM":{"Config":[{"Subnet":"172.17.0.0/16"}]}}"#,
    );
    for i in 0..8 {
        let subnet: &'static str = Box::leak(format!("\"172.16.{i}.0/24\"").into_boxed_str());
        held.push_str(&format!(
            r#",{{"Id":"f{i}","Name":"f{i}","IPAM":{{"Config":[{{"Subnet":{subnet}}}]}}}}"#
        ));
        steps.push(create(subnet, 403, OVERLAP));
        let listing: &'static str = Box::leak(format!("[{held}]").into_boxed_str());
        steps.push(step("GET", "/v1.41/networks", 200, listing));
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
