//! End to end: the operator's CLI, the worker binary and the real Docker Engine (SPEC N1-N5,
//! C2, O), plus the proof that a denied pass sends the daemon nothing (N5).

use crate::docker::{docker_available, run_container};
use crate::docker_proxy::DockerProxy;
use crate::support::{context_with, TestDb};
use occ_worker::compute::docker::DockerDriver;
use occ_worker::queue::QueueOptions;
use postgres::Client;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_occ-worker");

fn cli(db: &TestDb, args: &[&str]) -> Value {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .arg("--json")
        .env("OCC_DATABASE_URL", &db.url);
    crate::support::json_ok(&mut cmd, &format!("occ-worker {args:?}"))
}

/// The labels `occ.namespace` and `occ.managed-by` of each of the networks `names` that
/// exists, by name, in one `docker network inspect` (which names the missing ones on stderr).
fn network_labels(names: &[String]) -> std::collections::HashMap<String, (String, String)> {
    let out = Command::new("docker")
        .args([
            "network",
            "inspect",
            "--format",
            r#"{{.Name}} {{index .Labels "occ.namespace"}} {{index .Labels "occ.managed-by"}}"#,
        ])
        .args(names)
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(str::to_string);
            let name = fields.next()?;
            let namespace = fields.next().unwrap_or_default();
            let managed_by = fields.next().unwrap_or_default();
            Some((name, (namespace, managed_by)))
        })
        .collect()
}

/// Polls `done` until it holds, failing after `limit`.
fn wait_until(limit: Duration, what: &str, done: impl FnMut() -> bool) {
    crate::support::wait_for(what, limit, done)
}

fn count(c: &mut Client, sql: &str, ids: &[String]) -> i64 {
    c.query_one(sql, &[&ids]).expect(sql).get(0)
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// O, N1-N4, C2: 50 Namespaces admitted through the CLI become ready with their labelled
/// networks; deleted through the CLI they are tombstoned, their networks (and a labelled
/// container) are gone, and no binding scoped to them survives.
#[test]
fn o_cli_creates_fifty_namespaces_with_networks_and_tears_them_down() {
    if !docker_available() {
        return;
    }
    let _heavy = crate::support::take_turn(crate::support::Turn::DockerHeavy);
    let db = TestDb::bootstrapped();
    cli(
        &db,
        &[
            "admin",
            "identity",
            "create",
            "e2e-viewer",
            "--actor",
            "admin",
        ],
    );
    let mut ids = Vec::new();
    for i in 0..50 {
        let name = format!("e2e-{}-{i}", std::process::id());
        let ns = cli(
            &db,
            &["admin", "namespace", "create", &name, "--actor", "admin"],
        );
        let id = ns["id"].as_str().expect("namespace id").to_string();
        cli(
            &db,
            &[
                "admin",
                "grant",
                "e2e-viewer",
                "viewer",
                "--scope",
                &format!("namespace:{id}"),
                "--actor",
                "admin",
            ],
        );
        ids.push(id);
    }
    let _leftovers = crate::support::DockerLeftovers(
        ids.iter().map(|id| format!("occ.namespace={id}")).collect(),
    );
    let worker = Running(
        Command::new(BIN)
            .arg("run")
            .env("OCC_DATABASE_URL", &db.url)
            .env("OCC_COMPUTE_DRIVER", "docker")
            .env("OCC_WORKER_HTTP_ADDR", "127.0.0.1:0")
            .env("OCC_WORKER_CONCURRENCY", "8")
            .stdout(crate::support::log_stdio("worker.stdout"))
            .stderr(
                crate::support::log_file("worker.stderr").map_or_else(Stdio::inherit, Stdio::from),
            )
            .spawn()
            .expect("start worker"),
    );
    let mut c = db.client();
    wait_until(Duration::from_secs(90), "50 ready Namespaces", || {
        count(
            &mut c,
            "SELECT count(*) FROM occ.namespaces WHERE id = ANY($1) AND status = 'ready'",
            &ids,
        ) == 50
    });
    let networks: Vec<String> = ids.iter().map(|id| format!("occ-inst-{id}")).collect();
    let labels = network_labels(&networks);
    for (id, network) in ids.iter().zip(&networks) {
        assert_eq!(
            labels.get(network),
            Some(&(id.clone(), "occ-worker".to_string())),
            "{network} exists with its labels"
        );
    }
    let listed = cli(&db, &["admin", "namespace", "list"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(50));

    // A container labelled with this installation and one Namespace, attached to its
    // network, must go with it (C2: ownership is both labels).
    let container = run_container(
        &[
            ("occ.installation", "inst"),
            ("occ.namespace", &ids[0]),
            ("occ.managed-by", "occ-worker"),
        ],
        Some(&format!("occ-inst-{}", ids[0])),
    );
    for id in &ids {
        cli(
            &db,
            &["admin", "namespace", "delete", id, "--actor", "admin"],
        );
    }
    wait_until(Duration::from_secs(120), "50 tombstones", || {
        count(
            &mut c,
            "SELECT count(*) FROM occ.namespaces_all WHERE id = ANY($1) AND deleted_at IS NOT NULL",
            &ids,
        ) == 50
    });
    let listed = crate::support::output_ok(
        Command::new("docker").args(["network", "ls", "--format", "{{.Name}}"]),
        "docker network ls",
    );
    let listed = String::from_utf8_lossy(&listed.stdout);
    let left: Vec<&str> = listed
        .lines()
        .filter(|name| networks.iter().any(|n| n == name))
        .collect();
    assert!(left.is_empty(), "every network removed: {left:?} are left");
    let gone = Command::new("docker")
        .args(["container", "inspect", &container])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("docker CLI");
    assert!(!gone.success(), "the labelled container was removed");
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM occ.namespaces WHERE id = ANY($1)",
            &ids
        ),
        0,
        "tombstones are invisible to public reads"
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM occ.iam_bindings WHERE namespace_id = ANY($1)",
            &ids
        ),
        0,
        "no grant outlives its Namespace"
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM occ.audit_events WHERE namespace_id = ANY($1)
             AND action = 'openclaw.namespaces.lifecycle.delete' AND outcome = 'success'
             AND (details->>'convergencePending') IS DISTINCT FROM 'true'",
            &ids
        ),
        50
    );
    let mut worker = worker;
    let pid = worker.0.id().to_string();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    let status = worker.0.wait().expect("worker exit");
    assert!(status.success(), "SIGTERM exits 0, got {status:?}");
}

/// N5: an actor revoked between admission and the pass fails the work with `ACTOR_REVOKED`
/// and the Docker daemon receives no request at all, observed through a recording proxy;
/// a permitted Namespace in the same run does reach the daemon (the proxy sees traffic).
#[test]
fn n5_revoked_actor_sends_the_docker_daemon_no_request() {
    if !docker_available() {
        return;
    }
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    c.execute("SELECT occ.identity_create('admin', 'bob')", &[])
        .expect("create bob");
    c.execute(
        "SELECT occ.binding_grant('admin', 'bob', 'namespace-admin', 'installation')",
        &[],
    )
    .expect("grant bob");
    let ns: Value = crate::support::one(
        &mut c,
        "SELECT occ.namespace_create('bob', $1)",
        &[&format!("rv-{}", std::process::id())],
    );
    let revoked_ns = ns["id"].as_str().unwrap().to_string();
    c.execute("SELECT occ.identity_revoke('admin', 'bob')", &[])
        .expect("revoke bob");

    let proxy = DockerProxy::start();
    let run_worker = |proxy: &DockerProxy, key: &str| {
        let driver = DockerDriver::new(&proxy.docker_host()).expect("driver");
        let ctx = context_with(db.pool(6), Arc::new(driver))
            .queue(QueueOptions::new(Duration::from_secs(10), 3))
            .convergence(Duration::from_secs(60))
            .build();
        let worker = crate::support::namespace_worker(ctx, None);
        let stop = worker.stop_handle();
        let handle = std::thread::spawn(move || worker.run());
        let mut c = db.client();
        wait_until(Duration::from_secs(30), key, || {
            let state = crate::support::work_state(&mut c, key).0;
            state == "succeeded" || state == "failed_permanent"
        });
        stop.stop();
        handle.join().expect("worker thread").expect("worker run");
    };

    run_worker(&proxy, &format!("namespace:{revoked_ns}:ensure"));
    let row = c
        .query_one(
            "SELECT state, reason_code FROM occ.work_status WHERE idempotency_key = $1",
            &[&format!("namespace:{revoked_ns}:ensure")],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "failed_permanent");
    assert_eq!(row.get::<_, String>(1), "ACTOR_REVOKED");
    let denials: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.audit_events WHERE namespace_id = $1
             AND kind = 'authorization_denial' AND reason_code = 'ACTOR_REVOKED'",
        &[&revoked_ns],
    );
    assert_eq!(denials, 1);
    assert_eq!(
        proxy.requests(),
        Vec::<String>::new(),
        "no Docker request at all"
    );

    // Control: the same proxy does see a permitted Namespace's requests.
    let ok: Value = crate::support::one(
        &mut c,
        "SELECT occ.namespace_create('admin', $1)",
        &[&format!("ok-{}", std::process::id())],
    );
    let ok_ns = ok["id"].as_str().unwrap().to_string();
    run_worker(&proxy, &format!("namespace:{ok_ns}:ensure"));
    assert!(
        proxy.requests().iter().any(|r| r.contains("/networks")),
        "the proxy observes Docker traffic: {:?}",
        proxy.requests()
    );
    // Clean up the network the control created.
    let _ = Command::new("docker")
        .args(["network", "rm", &format!("occ-inst-{ok_ns}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
