//! Effects that outlive the lease and workers that die mid-effect, on the real Docker Engine
//! behind the recording proxy (SPEC W2, W3, C2, N3): a request slower than the lease runs
//! under the heartbeat and succeeds on its first attempt; a claim lost while a request is
//! under way interrupts it at once and publishes nothing; a worker killed right after its
//! network create reached the daemon leaves one network, adopted by the next pass.
//!
//! Each test uses its own Installation id (its Docker objects carry it) and its own subnet
//! pool (10.219-10.221), which no other test uses. Without an Engine the tests skip with a
//! notice (`docker::docker_available`), and fail under `OCC_REQUIRE_DOCKER=1`.

use crate::docker::docker_available;
use crate::docker_proxy::DockerProxy;
use crate::support::{
    scalar, wait_for, worker_command, worker_env, Captured, DockerLeftovers, NamespaceWorker,
    NamespaceWorkerOptions, TestDb, WorkerProcess,
};
use occ_worker::events::Events;
use postgres::Client;
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const CREATE: &str = "POST /v1.41/networks/create";

/// A database with an Installation of its own, and the label its Docker objects carry.
fn installation(db: &TestDb, prefix: &str) -> (Client, String) {
    let installation = format!("{prefix}{}", std::process::id());
    let mut c = db.client();
    c.execute("SELECT occ.bootstrap($1, 'admin')", &[&installation])
        .expect("bootstrap");
    (c, installation)
}

fn admit(c: &mut Client, name: &str) -> String {
    let ns: Value = crate::support::one(c, "SELECT occ.namespace_create('admin', $1)", &[&name]);
    ns["id"].as_str().expect("namespace id").to_string()
}

fn status(c: &mut Client, id: &str) -> String {
    c.query_one("SELECT status FROM occ.namespaces WHERE id = $1", &[&id])
        .expect("status")
        .get(0)
}

/// The ensure work's state, attempt count and attempt evidence (`outcome:code`, in order).
fn ensure_work(c: &mut Client, id: &str) -> (String, i32, Vec<String>) {
    let row = c
        .query_one(
            "SELECT w.state::text, w.attempt_count,
                    coalesce(array_agg(a.outcome || ':' || a.code ORDER BY a.id)
                             FILTER (WHERE a.id IS NOT NULL), '{}')
             FROM occ.work w LEFT JOIN occ.work_attempts a ON a.work_id = w.id
             WHERE w.namespace_id = $1 AND w.namespace_target = 'ready'
             GROUP BY w.id",
            &[&id],
        )
        .expect("ensure work");
    (row.get(0), row.get(1), row.get(2))
}

/// The ids of the Docker networks carrying `label` (`KEY=VALUE`).
fn networks(label: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["network", "ls", "-q", "--filter", &format!("label={label}")])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// An in-process Namespace worker on the Docker driver behind `proxy`, its events to `events`.
fn in_process(
    db: &TestDb,
    installation: &str,
    proxy: &DockerProxy,
    pool: &str,
    lease: Duration,
    events: &Captured,
) -> NamespaceWorker {
    NamespaceWorker::start(
        db,
        NamespaceWorkerOptions {
            installation,
            docker_host: &proxy.docker_host(),
            pool,
            lease,
            events: Events::to(Box::new(events.clone())),
        },
    )
}

// W2: a network create the daemon answers after three leases runs under the heartbeat: the
// Namespace becomes ready on its first attempt, with one network, and no attempt is spent on a
// request cut at the lease.
#[test]
fn w2_a_create_slower_than_the_lease_succeeds_on_its_first_attempt() {
    if !docker_available() {
        return;
    }
    let db = TestDb::new();
    let (mut c, installation) = installation(&db, "slow");
    let label = format!("occ.installation={installation}");
    let _leftovers = DockerLeftovers(vec![label.clone()]);
    let proxy = DockerProxy::start();
    let lease = Duration::from_millis(900);
    proxy.delay(CREATE, 1, lease * 3);
    let events = Captured::default();
    let _worker = in_process(
        &db,
        &installation,
        &proxy,
        "10.219.0.0/16:24",
        lease,
        &events,
    );
    let id = admit(&mut c, "slow");
    wait_for(
        "the Namespace to leave provisioning",
        Duration::from_secs(60),
        || status(&mut c, &id) != "provisioning",
    );
    assert_eq!(status(&mut c, &id), "ready");
    let (state, attempts, evidence) = ensure_work(&mut c, &id);
    assert_eq!(
        (state.as_str(), attempts, evidence),
        (
            "succeeded",
            1,
            vec!["succeeded:NAMESPACE_RECONCILED".to_string()]
        )
    );
    let creates = proxy
        .requests()
        .iter()
        .filter(|r| r.starts_with(CREATE))
        .count();
    assert_eq!(
        creates,
        1,
        "one create, held {:?} by the proxy: {:?} {:?}",
        lease * 3,
        proxy.requests(),
        events.events()
    );
    assert_eq!(networks(&label).len(), 1);
    assert!(
        events.named("worker.error").is_empty(),
        "{:?}",
        events.named("worker.error")
    );
}

// W3: a claim stolen while its network create is held (by the proxy, as by a slow daemon)
// interrupts the request as soon as the heartbeat's renewal is refused, long before the
// request's own timeout or the proxy's release; the stale pass publishes nothing.
#[test]
fn w3_a_claim_lost_mid_request_aborts_it_and_publishes_nothing() {
    if !docker_available() {
        return;
    }
    let db = TestDb::new();
    let (mut c, installation) = installation(&db, "stolen");
    let label = format!("occ.installation={installation}");
    let _leftovers = DockerLeftovers(vec![label.clone()]);
    let proxy = DockerProxy::start();
    proxy.delay(CREATE, 1, Duration::from_secs(60));
    let events = Captured::default();
    let lease = Duration::from_millis(900);
    let worker = in_process(
        &db,
        &installation,
        &proxy,
        "10.220.0.0/16:24",
        lease,
        &events,
    );
    let id = admit(&mut c, "stolen");
    wait_for(
        "the create to reach the proxy",
        Duration::from_secs(30),
        || proxy.requests().iter().any(|r| r.starts_with(CREATE)),
    );
    // Another worker's claim, as recovery and a new claim would leave it.
    let stolen = c
        .execute(
            "UPDATE occ.work_lanes SET claim_token = gen_random_uuid()
             WHERE claim_id = (SELECT id FROM occ.work WHERE namespace_id = $1)",
            &[&id],
        )
        .expect("steal the claim");
    assert_eq!(stolen, 1);
    let stolen_at = Instant::now();
    wait_for(
        "the pass to end as a lost claim",
        Duration::from_secs(20),
        || {
            events
                .named("worker.error")
                .iter()
                .any(|e| e["code"] == "CLAIM_LOST")
        },
    );
    let aborted_after = stolen_at.elapsed();
    eprintln!("effects: the held request ended {aborted_after:?} after its claim was taken (lease {lease:?})");
    // The next renewal (every lease/3) is refused and shuts the socket down at once; the
    // request's own timeout is 30 s and the proxy holds it for 60 s.
    assert!(aborted_after < Duration::from_secs(5), "{aborted_after:?}");
    drop(worker);
    let (state, attempts, evidence) = ensure_work(&mut c, &id);
    // Still the thief's claim: no attempt counted, no evidence, nothing published.
    assert_eq!((state.as_str(), attempts, evidence), ("queued", 0, vec![]));
    assert_eq!(status(&mut c, &id), "provisioning");
    let audits: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.audit_events
         WHERE action = 'openclaw.namespaces.lifecycle.ensure'",
    );
    assert_eq!(audits, 0);
}

// C2, N3 (no infrastructure twice): a worker process SIGKILLed right after its network create
// reached the daemon leaves a network it never recorded; the next worker's pass (after the
// lease ran out and recovery spent an attempt) adopts it instead of creating a second one,
// and the Namespace has exactly one network from then on.
#[test]
fn c2_a_worker_killed_after_its_create_leaves_one_network() {
    if !docker_available() {
        return;
    }
    let db = TestDb::new();
    let (mut c, installation) = installation(&db, "killed");
    let label = format!("occ.installation={installation}");
    let _leftovers = DockerLeftovers(vec![label.clone()]);
    let proxy = DockerProxy::start();
    let reached = proxy.notify(CREATE, 1);
    let mut env = worker_env(&db.url);
    env.push(("DOCKER_HOST", proxy.docker_host()));
    env.push(("OCC_WORKER_LEASE_MS", "1000".into()));
    env.push(("OCC_DOCKER_SUBNET_POOL", "10.221.0.0/16:24".into()));
    let first = WorkerProcess::capture(worker_command(&["run"], &env).spawn().expect("spawn"));
    let id = admit(&mut c, "killed");
    reached
        .recv_timeout(Duration::from_secs(30))
        .expect("the first worker's create reached the daemon");
    first.signal("KILL");
    let _ = first.wait(Duration::from_secs(10));
    let second = WorkerProcess::capture(worker_command(&["run"], &env).spawn().expect("spawn"));
    wait_for(
        "the Namespace to leave provisioning",
        Duration::from_secs(60),
        || status(&mut c, &id) != "provisioning",
    );
    assert_eq!(status(&mut c, &id), "ready");
    // Whatever was still on its way to the daemon has landed by now.
    crate::support::holds_for("at most one network", Duration::from_secs(2), || {
        networks(&label).len() <= 1
    });
    assert_eq!(networks(&label).len(), 1, "one network for the Namespace");
    let (state, attempts, _) = ensure_work(&mut c, &id);
    assert_eq!(state, "succeeded");
    assert!(
        attempts <= 2,
        "the kill spent at most one attempt: {attempts}"
    );
    drop(second);
}
