//! Namespace subnets on the real Docker Engine (SPEC C2, N3, N4, Q4): reservations in
//! `occ.docker_subnets` keep concurrent creators in several worker processes off each other's
//! subnets, a reservation left by a dead pass is reused, a foreign network inside the pool is
//! skipped, and deletion frees every reservation and network.
//!
//! Each test uses its own pool range (10.215-10.217), which no other test on the Engine uses,
//! and its own Installation id or Namespace labels, so the networks it counts are its own.
//! Without an Engine the tests skip with a notice (`docker::docker_available`), and fail under
//! `OCC_REQUIRE_DOCKER=1`.

use crate::docker::docker_available;
use crate::support::{
    scalar, wait_for, worker_command, worker_env, NamespaceWorker, NamespaceWorkerOptions, TestDb,
    WorkerProcess,
};
use occ_worker::compute::docker::SubnetPool;
use postgres::Client;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

/// How many Namespaces the three-process test creates unless `OCC_TEST_SUBNET_NAMESPACES`
/// says otherwise: 64, on a pool of exactly 64 subnets, so the 24 passes of three processes at
/// concurrency 8 all aim at the same few lowest free subnets from the first claim on, and the
/// last Namespace gets the pool's last subnet: a subnet reserved twice, or a reservation moved
/// and not released, would leave a Namespace without one (`NAMESPACE_SUBNET_POOL_EXHAUSTED`).
/// Any count fits (`OCC_TEST_SUBNET_NAMESPACES=600 scripts/test c2_three`, the count this test
/// once ran with: about 100 s to create and 170 s to delete on a 2-core machine, bound by the
/// Docker Engine, which creates and removes one network at a time).
const DEFAULT_NAMESPACES: usize = 64;

/// The smallest pool of `/26` subnets in 10.215.0.0/16 that holds `total`.
fn pool_for(total: usize) -> SubnetPool {
    let bits = total.max(1).next_power_of_two().trailing_zeros();
    assert!(
        bits <= 10,
        "at most 1024 Namespaces fit in 10.215.0.0/16 as /26s"
    );
    format!("10.215.0.0/{}:26", 26 - bits).parse().unwrap()
}

/// Runs the `docker` CLI; panics with its stderr on failure.
fn docker(args: &[&str]) -> String {
    let out = crate::support::output_ok(
        Command::new("docker").args(args),
        &format!("docker {args:?}"),
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One network as the `docker` CLI sees it.
#[derive(Debug)]
struct Network {
    name: String,
    namespace: String,
    subnets: Vec<String>,
}

/// Every network carrying `label` (`key=value`), inspected in one call.
fn networks_labelled(label: &str) -> Vec<Network> {
    let ids = docker(&["network", "ls", "-q", "--filter", &format!("label={label}")]);
    let ids: Vec<&str> = ids.lines().filter(|l| !l.is_empty()).collect();
    if ids.is_empty() {
        return Vec::new();
    }
    let mut args = vec![
        "network",
        "inspect",
        "--format",
        r#"{{.Name}} {{index .Labels "occ.namespace"}}{{range .IPAM.Config}} {{.Subnet}}{{end}}"#,
    ];
    args.extend(ids);
    docker(&args)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut fields = line.split_whitespace().map(str::to_string);
            Network {
                name: fields.next().expect("name"),
                namespace: fields.next().expect("namespace label"),
                subnets: fields.collect(),
            }
        })
        .collect()
}

/// The subnets of one network by name, `None` when it does not exist.
fn network_subnets(name: &str) -> Option<Vec<String>> {
    let out = Command::new("docker")
        .args([
            "network",
            "inspect",
            "--format",
            "{{range .IPAM.Config}}{{.Subnet}} {{end}}",
            name,
        ])
        .output()
        .expect("docker CLI");
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    })
}

/// Every reservation, by Namespace id.
fn reservations(c: &mut Client) -> HashMap<String, String> {
    c.query(
        "SELECT namespace_id, subnet::text FROM occ.docker_subnets",
        &[],
    )
    .expect("reservations")
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

fn admit(c: &mut impl postgres::GenericClient, name: &str) -> String {
    let ns: Value = crate::support::one(c, "SELECT occ.namespace_create('admin', $1)", &[&name]);
    ns["id"].as_str().expect("namespace id").to_string()
}

fn count_where(c: &mut Client, sql: &str, ids: &[String]) -> i64 {
    c.query_one(sql, &[&ids]).expect(sql).get(0)
}

/// The attempt evidence of every work of `ids` that is not one successful first attempt.
fn attempts_beyond_one_success(c: &mut Client, ids: &[String], target: &str) -> Vec<String> {
    c.query(
        "SELECT w.idempotency_key || ' ' || w.state || ' ' || w.attempt_count || ' '
                || coalesce(string_agg(a.outcome || ':' || a.code, ',' ORDER BY a.id), '')
         FROM occ.work w LEFT JOIN occ.work_attempts a ON a.work_id = w.id
         WHERE w.namespace_id = ANY($1) AND w.namespace_target = $2
         GROUP BY w.id
         HAVING w.state <> 'succeeded' OR w.attempt_count <> 1 OR count(a.id) <> 1
             OR bool_or(a.outcome <> 'succeeded')",
        &[&ids, &target],
    )
    .expect("attempts")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// An in-process worker with the real Namespace reconciler and Docker driver on `pool`.
fn in_process(db: &TestDb, pool: &str) -> NamespaceWorker {
    NamespaceWorker::start(
        db,
        NamespaceWorkerOptions {
            installation: "inst",
            docker_host: "unix:///var/run/docker.sock",
            pool,
            lease: Duration::from_secs(10),
            events: crate::support::logged_events(),
        },
    )
}

fn status(c: &mut Client, id: &str) -> Option<String> {
    c.query_opt("SELECT status FROM occ.namespaces WHERE id = $1", &[&id])
        .expect("status")
        .map(|r| r.get(0))
}

// C2, N3, N4, Q4: three `occ-worker run` processes at concurrency 8, all started before the
// first Namespace is admitted, drain the creation of `OCC_TEST_SUBNET_NAMESPACES` (default 64,
// see `DEFAULT_NAMESPACES`) Namespaces on a pool that holds exactly that many subnets: every
// one ends `ready` on its first attempt with no deferral or retry, owns exactly one network
// whose subnet is its reservation, and no two share a subnet; deleting them releases every
// reservation and removes every network.
#[test]
fn c2_three_worker_processes_create_namespaces_on_distinct_subnets_first_time() {
    if !docker_available() {
        return;
    }
    let _heavy = crate::support::take_turn(crate::support::Turn::DockerHeavy);
    let total: usize = std::env::var("OCC_TEST_SUBNET_NAMESPACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_NAMESPACES);
    let pool = pool_for(total);
    assert!(total <= pool.capacity() as usize, "the pool holds them all");
    let installation = format!("sub{}", std::process::id());
    let db = TestDb::new();
    let mut c = db.client();
    c.execute("SELECT occ.bootstrap($1, 'admin')", &[&installation])
        .expect("bootstrap");
    let label = format!("occ.installation={installation}");
    let _leftovers = crate::support::DockerLeftovers(vec![label.clone()]);

    let mut env = worker_env(&db.url);
    env.push(("OCC_WORKER_CONCURRENCY", "8".into()));
    env.push(("OCC_DOCKER_SUBNET_POOL", pool.to_string()));
    // A generous lease: on a loaded 2-core machine a starved heartbeat must not show up as
    // LEASE_EXPIRED evidence, which this test counts.
    env.push(("OCC_WORKER_LEASE_MS", "20000".into()));
    let workers: Vec<WorkerProcess> = (0..3)
        .map(|_| WorkerProcess::capture(worker_command(&["run"], &env).spawn().expect("spawn")))
        .collect();
    // Every process is listening with its 8 threads before the Namespaces arrive, in one
    // transaction: the first claims of all three contend for the same subnets.
    wait_for("three started workers", Duration::from_secs(60), || {
        workers.iter().all(|w| w.has_event("worker.started"))
    });
    let started = Instant::now();
    let mut ids = Vec::with_capacity(total);
    {
        let mut tx = c.transaction().unwrap();
        for i in 0..total {
            ids.push(admit(&mut tx, &format!("sub-{i}")));
        }
        tx.commit().unwrap();
    }
    wait_for(
        &format!("{total} ready Namespaces"),
        Duration::from_secs(600),
        || {
            count_where(
                &mut c,
                "SELECT count(*) FROM occ.namespaces WHERE id = ANY($1) AND status <> 'provisioning'",
                &ids,
            ) == total as i64
        },
    );
    let created_in = started.elapsed();
    eprintln!("docker_subnets: {total} Namespaces ready in {created_in:?} (3 processes x 8)");

    let not_ready = count_where(
        &mut c,
        "SELECT count(*) FROM occ.namespaces WHERE id = ANY($1) AND status <> 'ready'",
        &ids,
    );
    assert_eq!(not_ready, 0, "every Namespace is ready");
    // No retry is caused by subnet contention. On a loaded 2-core machine the daemon itself
    // can take longer than a request may wait (it serializes network creation): such a pass
    // says `worker.pass-error` with class `docker_unavailable` and is retried within the
    // attempt budget (seed 004 403-411). Every pass error must be that, never a subnet class.
    let pass_errors: Vec<Value> = workers
        .iter()
        .flat_map(WorkerProcess::events)
        .filter(|e| e["event"] == "worker.pass-error")
        .collect();
    let other: Vec<&Value> = pass_errors
        .iter()
        .filter(|e| e["class"] != "docker_unavailable")
        .collect();
    assert!(
        other.is_empty(),
        "passes failed for another cause than a daemon that did not answer: {other:?}"
    );
    let extra = attempts_beyond_one_success(&mut c, &ids, "ready");
    assert!(
        extra.iter().all(|w| w.contains(" succeeded ")
            && w.split(' ').next_back().is_some_and(|evidence| evidence
                .split(',')
                .all(|e| e == "retry:DEPENDENCY_UNAVAILABLE"
                    || e == "succeeded:NAMESPACE_RECONCILED"))),
        "works beyond one first-attempt success that are not daemon time-outs: {extra:?}"
    );
    assert_eq!(
        !extra.is_empty(),
        !pass_errors.is_empty(),
        "every extra attempt has its pass error"
    );
    eprintln!(
        "docker_subnets: {} of {total} creations retried after the daemon did not answer in time",
        extra.len()
    );
    let contended: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.audit_events WHERE details->>'pendingReason' = 'NAMESPACE_SUBNET_CONTENDED'",
    );
    assert_eq!(contended, 0);
    let busy: HashSet<i32> = workers
        .iter()
        .filter(|w| w.events().iter().any(|e| e["event"] == "worker.completed"))
        .map(WorkerProcess::pid)
        .collect();
    assert_eq!(busy.len(), 3, "all three processes created Namespaces");

    let reserved = reservations(&mut c);
    assert_eq!(reserved.len(), total, "one reservation per Namespace");
    let networks = networks_labelled(&label);
    assert_eq!(networks.len(), total, "one network per Namespace");
    let mut seen = HashSet::new();
    for network in &networks {
        assert_eq!(
            network.name,
            format!("occ-{installation}-{}", network.namespace)
        );
        assert_eq!(network.subnets.len(), 1, "{network:?}");
        let subnet = &network.subnets[0];
        let cidr = occ_worker::compute::Ipv4Cidr::parse(subnet).expect("IPv4 subnet");
        assert!(pool.contains(cidr), "{subnet} is one of the pool's subnets");
        assert!(seen.insert(subnet.clone()), "{subnet} is used twice");
        assert_eq!(
            reserved.get(&network.namespace),
            Some(subnet),
            "the network sits on its reservation"
        );
    }

    let started = Instant::now();
    {
        let mut tx = c.transaction().unwrap();
        for id in &ids {
            tx.execute("SELECT occ.namespace_delete('admin', $1)", &[id])
                .expect("delete");
        }
        tx.commit().unwrap();
    }
    wait_for(
        &format!("{total} tombstones"),
        Duration::from_secs(600),
        || {
            count_where(
                &mut c,
                "SELECT count(*) FROM occ.namespaces_all WHERE id = ANY($1) AND deleted_at IS NOT NULL",
                &ids,
            ) == total as i64
        },
    );
    eprintln!(
        "docker_subnets: {total} Namespaces deleted in {:?}",
        started.elapsed()
    );
    let extra = attempts_beyond_one_success(&mut c, &ids, "deleted");
    assert!(
        extra.iter().all(|e| !e.contains("failed")
            && (!e.contains("retry")
                || !e
                    .replace("retry:DEPENDENCY_UNAVAILABLE", "")
                    .contains("retry"))),
        "{extra:?}"
    );
    let other: Vec<Value> = workers
        .iter()
        .flat_map(WorkerProcess::events)
        .filter(|e| e["event"] == "worker.pass-error" && e["class"] != "docker_unavailable")
        .filter(|e| e["outcome"] != "pending")
        .collect();
    assert!(other.is_empty(), "{other:?}");
    assert_eq!(reservations(&mut c).len(), 0, "every reservation released");
    assert!(
        networks_labelled(&label).is_empty(),
        "every network removed"
    );
    for w in &workers {
        w.signal("TERM");
    }
    for w in workers {
        let (status, stderr) = w.wait(Duration::from_secs(30));
        assert!(status.success(), "exit {status:?}: {stderr}");
    }
}

// C2, N3: a pass that died between reserving and creating (simulated: a reservation row, no
// network) leaves a reservation the next pass reuses, although it is not the pool's lowest
// free subnet; deletion removes the network and releases the reservation, leaking nothing.
#[test]
fn c2_a_reservation_left_by_a_dead_pass_is_reused_and_released() {
    if !docker_available() {
        return;
    }
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let id = admit(&mut c, &format!("dead-{}", std::process::id()));
    let network = format!("occ-inst-{id}");
    assert_eq!(network_subnets(&network), None);
    // What the killed pass committed before its POST.
    c.execute(
        "INSERT INTO occ.docker_subnets (namespace_id, pool, subnet)
         VALUES ($1, '10.216.0.0/24', '10.216.0.128/26')",
        &[&id],
    )
    .expect("reservation of the dead pass");

    let worker = in_process(&db, "10.216.0.0/24:26");
    wait_for("the Namespace to settle", Duration::from_secs(60), || {
        status(&mut c, &id).as_deref() != Some("provisioning")
    });
    assert_eq!(status(&mut c, &id).as_deref(), Some("ready"));
    assert_eq!(
        network_subnets(&network),
        Some(vec!["10.216.0.128/26".to_string()]),
        "the network sits on the reused reservation"
    );
    assert_eq!(
        reservations(&mut c),
        HashMap::from([(id.clone(), "10.216.0.128/26".to_string())]),
        "the reservation was reused, not moved or doubled"
    );
    let ids = vec![id.clone()];
    assert_eq!(
        attempts_beyond_one_success(&mut c, &ids, "ready"),
        Vec::<String>::new()
    );

    c.execute("SELECT occ.namespace_delete('admin', $1)", &[&id])
        .expect("delete");
    wait_for("the tombstone", Duration::from_secs(60), || {
        count_where(
            &mut c,
            "SELECT count(*) FROM occ.namespaces_all WHERE id = ANY($1) AND deleted_at IS NOT NULL",
            &ids,
        ) == 1
    });
    drop(worker);
    assert_eq!(network_subnets(&network), None, "the network is gone");
    assert!(
        reservations(&mut c).is_empty(),
        "the reservation is released"
    );
    let released: Value = crate::support::one(
        &mut c,
        "SELECT details->'releasedSubnets' FROM occ.audit_events
             WHERE namespace_id = $1 AND action = 'openclaw.namespaces.lifecycle.delete'
               AND reason_code = 'NAMESPACE_RECONCILED'",
        &[&id],
    );
    assert_eq!(released, serde_json::json!(["10.216.0.128/26"]));
}

/// Removes a network when dropped, whatever the test did.
struct ForeignNetwork(String);

impl Drop for ForeignNetwork {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["network", "rm", &self.0])
            .output();
    }
}

// C2: a network someone else created inside the pool (no labels, unknown to the ledger) holds
// the pool's lowest subnet: the driver's post is refused, it lists the daemon's subnets and
// places the Namespaces elsewhere in the same pass (first attempt, no deferral). The foreign
// network is never reused, relabelled or removed.
#[test]
fn c2_a_foreign_network_inside_the_pool_is_skipped_not_reused() {
    if !docker_available() {
        return;
    }
    let foreign = ForeignNetwork(format!("occ-it-foreign-{}", std::process::id()));
    docker(&["network", "create", "--subnet", "10.217.0.0/26", &foreign.0]);
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let ids: Vec<String> = (0..2)
        .map(|i| admit(&mut c, &format!("fg{i}-{}", std::process::id())))
        .collect();

    let worker = in_process(&db, "10.217.0.0/24:26");
    wait_for("both Namespaces to settle", Duration::from_secs(60), || {
        ids.iter()
            .all(|id| status(&mut c, id).as_deref() != Some("provisioning"))
    });
    let mut used = HashSet::new();
    for id in &ids {
        assert_eq!(status(&mut c, id).as_deref(), Some("ready"));
        let subnets = network_subnets(&format!("occ-inst-{id}")).expect("network");
        assert_eq!(subnets.len(), 1);
        assert_ne!(
            subnets[0], "10.217.0.0/26",
            "the foreign subnet is not reused"
        );
        assert!(subnets[0].starts_with("10.217.0."), "{subnets:?}");
        assert!(used.insert(subnets[0].clone()), "distinct subnets");
        assert_eq!(reservations(&mut c).get(id), Some(&subnets[0]));
    }
    assert_eq!(
        attempts_beyond_one_success(&mut c, &ids, "ready"),
        Vec::<String>::new()
    );
    assert_eq!(
        network_subnets(&foreign.0),
        Some(vec!["10.217.0.0/26".to_string()]),
        "the foreign network is untouched"
    );

    for id in &ids {
        c.execute("SELECT occ.namespace_delete('admin', $1)", &[id])
            .expect("delete");
    }
    wait_for("both tombstones", Duration::from_secs(60), || {
        count_where(
            &mut c,
            "SELECT count(*) FROM occ.namespaces_all WHERE id = ANY($1) AND deleted_at IS NOT NULL",
            &ids,
        ) == 2
    });
    drop(worker);
    assert!(reservations(&mut c).is_empty());
    assert!(
        network_subnets(&foreign.0).is_some(),
        "deletion goes by labels"
    );
}
