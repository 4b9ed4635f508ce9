//! Repository cleanup (SPEC §19, G1-G5) with a real worker and the scripted driver: the work
//! kind's shapes and keys, its registration by Z3's failed preparations in the transaction
//! that fails the deployment (a crash right after included), the cleanup pass that binds,
//! stops, compare-and-clears the pointer and settles, its cadence, stale-claim recovery that
//! never ends it, and its stalled warning.

use crate::agent::{active, cli, create_agent, deploy, evidence, fixture, work, Fixture};
use crate::revision::{key, run};
use crate::scripted::{quiet, run_captured, run_with, Opts, Prepare, ScriptedDriver};
use crate::support::{context_with, poll, scalar, wait_for, Captured, WorkerProcess};
use occ_worker::compute::{ComputeDriver, ComputeError};
use occ_worker::events::Events;
use occ_worker::queue::{self, CleanupKind, NewWork, QueueOptions};
use occ_worker::reconcile::registry;
use occ_worker::reconcile::repository_cleanup::{cleanup_recheck, CLEANUP_INTERVAL};
use occ_worker::runtime::{RuntimeOptions, Worker};
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const FAILED_PREPARATION: &str = "failed-preparation";

/// The cleanup key of `rev`'s `kind`.
fn cleanup_key(rev: &str, kind: &str) -> String {
    format!("agent_revision:{rev}:repository_cleanup:{kind}")
}

/// Registers `rev`'s `failed-preparation` cleanup as its failing deployment would.
fn register(c: &mut Client, f: &Fixture, rev: &str) -> String {
    let work = NewWork::repository_cleanup(
        "ns1",
        &f.agent,
        rev,
        CleanupKind::FailedPreparation,
        "admin",
    );
    assert!(queue::work_enqueue(c, &work).unwrap().inserted);
    work.key().to_string()
}

/// A revision of `f`'s Agent, deployed and active.
fn active_revision(f: &Fixture) -> String {
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    run(f, &Arc::new(ScriptedDriver::new()));
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    rev
}

fn preparation_failed() -> ComputeError {
    ComputeError::preparation_failed(
        "HARNESS_PREPARATION_FAILED",
        "scripted",
        Some(json!({"stage": "seed", "status": 409})),
    )
}

fn forbidden() -> ComputeError {
    ComputeError::permanent("KUBERNETES_FORBIDDEN", "KubernetesForbidden", Some(403))
}

/// Whether the work `key` has at least `n` attempts of evidence.
fn attempted(c: &mut Client, key: &str, n: usize) -> bool {
    evidence(c, key).len() >= n
}

/// Makes a deferred work due now (its recheck is 30 s or more).
fn due_now(c: &mut Client, key: &str) {
    c.execute(
        "UPDATE occ.work SET available_at = clock_timestamp() WHERE idempotency_key = $1
           AND state = 'queued'",
        &[&key],
    )
    .unwrap();
}

/// The `worker.repository-cleanup-warning` causes said about `key`, in order.
fn warnings(events: &Captured, key: &str) -> Vec<String> {
    events
        .named("worker.repository-cleanup-warning")
        .into_iter()
        .filter(|e| e["workId"] == key)
        .map(|e| {
            assert_eq!(e["code"], "REPOSITORY_CLEANUP_STALLED");
            e["cause"].as_str().unwrap().to_string()
        })
        .collect()
}

/// Seconds from now until `key` may run again, by the database clock.
fn due_in(c: &mut Client, key: &str) -> f64 {
    crate::support::one(
        c,
        "SELECT extract(epoch FROM available_at - clock_timestamp())::float8
         FROM occ.work WHERE idempotency_key = $1",
        &[&key],
    )
}

#[test]
fn g1_postgresql_refuses_other_cleanup_shapes_and_keys() {
    let f = fixture();
    let mut c = f.db.client();
    let r1 = deploy(&mut c, &f.agent);
    let r2 = deploy(&mut c, &f.agent);
    let (other, _) = create_agent(&mut c, "ns1", "other");
    let r3 = deploy(&mut c, &other);
    let insert = |c: &mut Client,
                  key: &str,
                  agent: Option<&str>,
                  revision: Option<&str>,
                  target: Option<&str>,
                  ns_target: Option<&str>| {
        c.execute(
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id,
                                   agent_target, namespace_target, actor_id)
             VALUES ($1, 'ns1', $2, $3, $4, $5, 'admin')",
            &[&key, &agent, &revision, &target, &ns_target],
        )
    };
    let violated = |result: Result<u64, postgres::Error>| -> String {
        let e = result.expect_err("the row must be refused");
        e.as_db_error()
            .and_then(|d| d.constraint())
            .unwrap_or_default()
            .to_string()
    };
    let rc = Some("repository_cleanup");
    let agent = Some(f.agent.as_str());
    let k1 = cleanup_key(&r1, FAILED_PREPARATION);
    let shapes = [
        insert(&mut c, &k1, agent, Some(&r1), rc, Some("ready")),
        insert(&mut c, &k1, None, Some(&r1), rc, None),
    ];
    for (i, result) in shapes.into_iter().enumerate() {
        assert_eq!(violated(result), "work_shape", "shape {i}");
    }
    // Without a revision no cleanup key can be right (the key rule is checked first).
    assert_eq!(
        violated(insert(&mut c, &k1, agent, None, rc, None)),
        "work_key"
    );
    let keys = [
        cleanup_key(&r1, "other"),
        cleanup_key(&r1, "Failed-Preparation"),
        cleanup_key(&r1, ""),
        cleanup_key(&r1, "failed-preparation:1"),
        cleanup_key(&r2, FAILED_PREPARATION),
        format!("agent:{}:repository_cleanup:failed-preparation", f.agent),
        format!("agent_revision:{r1}:reconcile"),
        format!("agent_revision:{r1}:credential_withdrawal:activation"),
    ];
    for k in &keys {
        assert_eq!(
            violated(insert(&mut c, k, agent, Some(&r1), rc, None)),
            "work_key",
            "{k}"
        );
    }
    // A revision work may not take a cleanup key, nor a withdrawal target one.
    assert_eq!(
        violated(insert(&mut c, &k1, agent, Some(&r1), None, None)),
        "work_key"
    );
    assert_eq!(
        violated(insert(
            &mut c,
            &k1,
            agent,
            Some(&r1),
            Some("credential_withdrawal"),
            None
        )),
        "work_key"
    );
    // The revision must be the named Agent's.
    let foreign = insert(
        &mut c,
        &cleanup_key(&r3, FAILED_PREPARATION),
        agent,
        Some(&r3),
        rc,
        None,
    );
    assert_eq!(
        violated(foreign),
        "work_revision_id_agent_id_namespace_id_fkey"
    );
    for kind in CleanupKind::ALL {
        let work = NewWork::repository_cleanup("ns1", &f.agent, &r1, kind, "admin");
        assert_eq!(work.key(), cleanup_key(&r1, kind.as_str()));
        assert!(queue::work_enqueue(&mut c, &work).unwrap().inserted);
        // One row per (revision, kind): enqueueing it again changes nothing.
        assert!(!queue::work_enqueue(&mut c, &work).unwrap().inserted);
    }
    let operations: Vec<String> = c
        .query(
            "SELECT DISTINCT operation FROM occ.work WHERE agent_target = 'repository_cleanup'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(operations, ["agent_repository_cleanup"]);
    let listed = cli(
        &f.db,
        &[
            "admin",
            "work",
            "list",
            "--operation",
            "agent_repository_cleanup",
        ],
    );
    let listed = listed.to_string();
    for kind in CleanupKind::ALL {
        assert!(
            listed.contains(&cleanup_key(&r1, kind.as_str())),
            "{listed}"
        );
    }
    assert!(!listed.contains(&key(&r1)), "{listed}");
}

/// Runs a worker with `driver` until `done`, capturing its events; returns them and its
/// metrics page.
fn run_metered(
    f: &Fixture,
    driver: Arc<dyn ComputeDriver>,
    done: impl Fn(&mut Client) -> bool,
) -> (Captured, String) {
    let captured = Captured::default();
    let pool = occ_worker::db::pool(&f.db.url, Duration::from_secs(10), 8).expect("pool");
    let ctx = context_with(pool, driver)
        .queue(QueueOptions::new(Duration::from_secs(5), 5))
        .events(Events::to(Box::new(captured.clone())))
        .build();
    let metrics = ctx.metrics.clone();
    let worker = Worker::new(
        ctx,
        registry::production(),
        RuntimeOptions {
            concurrency: 2,
            poll_interval: Duration::from_millis(25),
            shutdown_grace: Duration::from_secs(5),
            listen_url: Some(f.db.url.clone()),
            db_timeout: Duration::from_secs(10),
        },
    );
    let stop = worker.stop_handle();
    let handle = std::thread::spawn(move || worker.run());
    let mut client = f.db.client();
    let ok = poll(Duration::from_secs(30), Duration::from_millis(20), || {
        done(&mut client).then_some(())
    })
    .is_some();
    stop.stop();
    handle.join().expect("worker thread").expect("worker run");
    assert!(ok, "the queue did not reach the expected state");
    (captured, metrics.render())
}

#[test]
fn g1_worker_completed_and_the_metric_name_the_cleanup_operation() {
    let f = fixture();
    let rev = active_revision(&f);
    let k = register(&mut f.db.client(), &f, &rev);
    let (events, metrics) = run_metered(&f, Arc::new(ScriptedDriver::new()), quiet);
    let completed: Vec<Value> = events
        .named("worker.completed")
        .into_iter()
        .filter(|e| e["workId"] == k.as_str())
        .collect();
    assert_eq!(completed.len(), 1, "{completed:?}");
    let e = &completed[0];
    assert_eq!(e["operation"], "agent_revision.repository_cleanup");
    assert_eq!(e["outcome"], "success");
    assert_eq!(e["code"], "REPOSITORY_CLEANUP_COMPLETE");
    assert_eq!(e["namespaceId"], "ns1");
    assert_eq!(e["agentId"], f.agent.as_str());
    assert_eq!(e["revisionId"], rev.as_str());
    assert_eq!(e["attempt"], 1);
    assert!(
        metrics.contains(
            "occ_worker_passes_total{operation=\"agent_repository_cleanup\",outcome=\"success\"} 1"
        ),
        "{metrics}"
    );
}

#[test]
fn g2_a_failed_preparation_registers_cleanup_in_the_failing_tx() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    // Every write of a work row, with its transaction.
    c.batch_execute(
        "CREATE TABLE public.work_writes (key text, state text, txid bigint);
         CREATE FUNCTION public.work_write() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO public.work_writes VALUES (NEW.idempotency_key, NEW.state, txid_current());
             RETURN NEW;
         END $$;
         CREATE TRIGGER work_write AFTER INSERT OR UPDATE ON occ.work
             FOR EACH ROW EXECUTE FUNCTION public.work_write();",
    )
    .unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Fail(preparation_failed())]);
    // When the stop runs, the deployment has already failed and its cleanup is queued.
    let url = f.db.url.clone();
    let (k, ck) = (key(&rev), cleanup_key(&rev, FAILED_PREPARATION));
    let seen = Arc::new(parking_lot::Mutex::new(Vec::<(String, String)>::new()));
    let at_stop = seen.clone();
    driver.on_call(move |method, _| {
        if method == "stop_revision" {
            let mut c = Client::connect(&url, postgres::NoTls).unwrap();
            at_stop
                .lock()
                .push((work(&mut c, &k).0, work(&mut c, &ck).0));
        }
    });
    run(&f, &driver);
    let (state, code, data, attempts) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("HARNESS_PREPARATION_FAILED"))
    );
    assert_eq!(
        data,
        Some(json!({"preparation": {"stage": "seed", "status": 409}}))
    );
    assert_eq!(attempts, 1, "permanent at once");
    assert_eq!(
        evidence(&mut c, &key(&rev)),
        ["failed:HARNESS_PREPARATION_FAILED"],
        "never a refused candidate's stop wait"
    );
    assert_eq!(
        *seen.lock(),
        vec![("failed_permanent".to_string(), "claimed".to_string())]
    );
    // The cleanup was inserted in the transaction that failed the deployment.
    let failing: i64 = crate::support::one(
        &mut c,
        "SELECT txid FROM public.work_writes WHERE key = $1 AND state = 'failed_permanent'",
        &[&key(&rev)],
    );
    let registering: i64 = crate::support::one(
        &mut c,
        "SELECT min(txid) FROM public.work_writes WHERE key = $1",
        &[&cleanup_key(&rev, FAILED_PREPARATION)],
    );
    assert_eq!(failing, registering);
    // The deployment's pass prepares; the cleanup's binds and stops.
    assert_eq!(
        driver.log(),
        vec![
            format!("bind_agent:{}", f.agent),
            format!("prepare_revision:{rev}"),
            format!("bind_agent:{}", f.agent),
            format!("stop_revision:{rev}"),
        ]
    );
    let (state, code, _, _) = work(&mut c, &cleanup_key(&rev, FAILED_PREPARATION));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("succeeded", Some("REPOSITORY_CLEANUP_COMPLETE"))
    );
    let actor: String = crate::support::one(
        &mut c,
        "SELECT actor_id FROM occ.work WHERE idempotency_key = $1",
        &[&cleanup_key(&rev, FAILED_PREPARATION)],
    );
    assert_eq!(actor, "admin");
    assert_eq!(active(&mut c, &f.agent), None);
}

const CHILD_DB: &str = "OCC_CLEANUP_CHILD_DB";
const CHILD_REV: &str = "OCC_CLEANUP_CHILD_REV";

/// Not a test of its own: returns at once unless started as a child worker process by
/// `g2_a_crash_after_the_failure_leaves_the_cleanup_queued`. The child's driver fails the
/// revision's preparation for good, then records a row in `public.crash_marks` when a stop is
/// called and blocks far longer than the lease, until the parent kills the process.
#[test]
fn cleanup_child_worker() {
    let (Ok(url), Ok(rev)) = (std::env::var(CHILD_DB), std::env::var(CHILD_REV)) else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Fail(preparation_failed())]);
    let hook_url = url.clone();
    driver.on_call(move |method, target| {
        if method == "stop_revision" {
            let mut c = Client::connect(&hook_url, postgres::NoTls).unwrap();
            c.execute(
                "INSERT INTO public.crash_marks (pid, target) VALUES ($1, $2)",
                &[&(std::process::id() as i32), &target],
            )
            .unwrap();
            std::thread::sleep(Duration::from_secs(120));
        }
    });
    let opts = Opts {
        lease: Duration::from_millis(1500),
        timeout: Duration::from_secs(120),
        ..Opts::default()
    };
    crate::scripted::run_on(&url, driver, opts, |_| false);
}

#[test]
fn g2_a_crash_after_the_failure_leaves_the_cleanup_queued() {
    let f = fixture();
    let mut c = f.db.client();
    c.batch_execute("CREATE TABLE public.crash_marks (pid integer NOT NULL, target text NOT NULL)")
        .unwrap();
    let rev = deploy(&mut c, &f.agent);
    let exe = std::env::current_exe().expect("test binary");
    let child = std::process::Command::new(exe)
        .args([
            "--exact",
            "repository_cleanup::cleanup_child_worker",
            "--nocapture",
        ])
        .env(CHILD_DB, &f.db.url)
        .env(CHILD_REV, &rev)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child worker");
    let child = WorkerProcess::capture(child);
    wait_for(
        "the child worker to enter the cleanup's stop",
        Duration::from_secs(30),
        || scalar::<i64>(&mut c, "SELECT count(*) FROM public.crash_marks") > 0,
    );
    let pid: i32 = scalar(&mut c, "SELECT pid FROM public.crash_marks");
    assert_eq!(pid, child.pid(), "the child process ran the cleanup");
    child.signal("KILL");
    let (status, _) = child.wait(Duration::from_secs(10));
    assert!(!status.success(), "killed, not exited: {status:?}");
    // The failure and its cleanup committed together before the kill.
    let ck = cleanup_key(&rev, FAILED_PREPARATION);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("HARNESS_PREPARATION_FAILED")
    );
    assert_eq!(work(&mut c, &ck).0, "claimed", "the dead process's claim");
    // This process's worker recovers the expired claim and finishes the cleanup.
    let driver = Arc::new(ScriptedDriver::new());
    let done = ck.clone();
    run_with(&f.db, driver.clone(), Opts::default(), move |c| {
        work(c, &done).0 == "succeeded"
    });
    assert_eq!(
        evidence(&mut c, &ck),
        [
            "lease_expired:LEASE_EXPIRED",
            "succeeded:REPOSITORY_CLEANUP_COMPLETE"
        ]
    );
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone()]);
    assert!(driver.calls_of("prepare_revision").is_empty());
    assert_eq!(work(&mut c, &key(&rev)).0, "failed_permanent");
}

const BOOTSTRAP: &str = "HARNESS_CREDENTIAL_BOOTSTRAP_PENDING";

fn deadline(ms: u64) -> Opts {
    Opts {
        convergence: Duration::from_millis(ms),
        ..Opts::default()
    }
}

/// How many cleanup works `rev` has.
fn cleanups(c: &mut Client, rev: &str) -> i64 {
    crate::support::one(
        c,
        "SELECT count(*) FROM occ.work WHERE revision_id = $1 AND agent_target = 'repository_cleanup'",
        &[&rev],
    )
}

#[test]
fn g2_only_a_bootstrap_pending_deadline_registers_it() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, (0..20).map(|_| Prepare::Pending(BOOTSTRAP)).collect());
    run_with(&f.db, driver.clone(), deadline(300), quiet);
    let (state, code, data, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("CONVERGENCE_DEADLINE_EXCEEDED"))
    );
    assert_eq!(data, Some(json!({"timeoutMs": 300})));
    assert!(
        !evidence(&mut c, &key(&rev))
            .iter()
            .any(|e| e.contains("REFUSED_CANDIDATE_STOP_PENDING")),
        "the failure is published at once"
    );
    assert_eq!(cleanups(&mut c, &rev), 1);
    assert_eq!(
        work(&mut c, &cleanup_key(&rev, FAILED_PREPARATION))
            .1
            .as_deref(),
        Some("REPOSITORY_CLEANUP_COMPLETE")
    );
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone()]);

    // Another pending reason's deadline keeps its runtime for diagnosis: no cleanup.
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(
        &rev,
        (0..20)
            .map(|_| Prepare::Pending("WORKLOAD_UNSCHEDULABLE"))
            .collect(),
    );
    run_with(&f.db, driver.clone(), deadline(300), quiet);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("CONVERGENCE_DEADLINE_EXCEEDED")
    );
    assert_eq!(cleanups(&mut c, &rev), 0);
    assert!(driver.calls_of("stop_revision").is_empty());

    // Nor does a bootstrap the active revision's reconcile work sees at the deadline.
    let f = fixture();
    let mut c = f.db.client();
    let rev = active_revision(&f);
    crate::revision::requeue(&mut c, &key(&rev));
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Pending(BOOTSTRAP)]);
    let k = key(&rev);
    run_with(&f.db, driver.clone(), deadline(1), |c| {
        crate::revision::ended(c, &k)
    });
    assert_eq!(
        work(&mut c, &k).1.as_deref(),
        Some("CONVERGENCE_DEADLINE_EXCEEDED")
    );
    assert_eq!(cleanups(&mut c, &rev), 0);
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn g3_cleanup_stops_clears_the_pointer_and_completes() {
    let f = fixture();
    let rev = active_revision(&f);
    let mut c = f.db.client();
    let k = register(&mut c, &f, &rev);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    assert_eq!(
        driver.log(),
        vec![
            format!("bind_agent:{}", f.agent),
            format!("stop_revision:{rev}")
        ]
    );
    let (state, code, data, _) = work(&mut c, &k);
    assert_eq!(
        (state.as_str(), code.as_deref(), data),
        ("succeeded", Some("REPOSITORY_CLEANUP_COMPLETE"), None)
    );
    assert_eq!(active(&mut c, &f.agent), None, "the pointer is cleared");
    let desired: String = crate::support::one(
        &mut c,
        "SELECT desired_runtime_state FROM occ.agents WHERE id = $1",
        &[&f.agent],
    );
    assert_eq!(desired, "running", "the desired run state is left intact");
    let audits: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.audit_events a JOIN occ.work w ON w.id = a.work_id
         WHERE w.idempotency_key = $1",
        &[&k],
    );
    assert_eq!(audits, 0, "no audit of its own");
}

#[test]
fn g3_a_newer_active_is_left_alone() {
    let f = fixture();
    let r1 = active_revision(&f);
    let r2 = active_revision(&f);
    let mut c = f.db.client();
    let k = register(&mut c, &f, &r1);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    assert_eq!(driver.calls_of("stop_revision"), vec![r1.clone()]);
    assert_eq!(
        work(&mut c, &k).1.as_deref(),
        Some("REPOSITORY_CLEANUP_COMPLETE")
    );
    assert_eq!(active(&mut c, &f.agent), Some(r2));
}

#[test]
fn g3_a_failing_stop_waits_with_its_cause() {
    let f = fixture();
    let rev = active_revision(&f);
    let mut c = f.db.client();
    let k = register(&mut c, &f, &rev);
    let driver = Arc::new(ScriptedDriver::new());
    driver.fail("stop_revision", &rev, forbidden());
    let done = k.clone();
    let events = run_captured(&f.db, driver.clone(), Opts::default(), move |c| {
        attempted(c, &done, 1)
    });
    let (state, code, _, attempts) = work(&mut c, &k);
    assert_eq!((state.as_str(), code, attempts), ("queued", None, 0));
    assert_eq!(
        evidence(&mut c, &k),
        ["deferred:REPOSITORY_CLEANUP_PENDING"]
    );
    let wait = due_in(&mut c, &k);
    assert!(
        (25.0..=31.0).contains(&wait),
        "the cleanup interval: {wait}"
    );
    assert_eq!(warnings(&events, &k), ["KUBERNETES_FORBIDDEN"]);
    let completed = events
        .named("worker.completed")
        .into_iter()
        .find(|e| e["workId"] == k.as_str())
        .expect("worker.completed");
    assert_eq!(
        (&completed["outcome"], &completed["code"]),
        (&json!("pending"), &json!("REPOSITORY_CLEANUP_PENDING"))
    );
    // The stop did not happen: the pointer stays.
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    // `admin agent show` lists the outstanding cleanup under `waitingFor`.
    let shown = cli(&f.db, &["admin", "agent", "show", "ns1", &f.agent]);
    let listed = &shown["waitingFor"]["repositoryCleanup"];
    assert_eq!(listed[0]["work"], k.as_str(), "{shown}");
    assert_eq!(listed[0]["revisionId"], rev.as_str());
    assert_eq!(listed[0]["kind"], FAILED_PREPARATION);
    assert_eq!(listed[0]["code"], "REPOSITORY_CLEANUP_PENDING");
    // `admin work show` gives its code, next run and last cause.
    let shown = cli(&f.db, &["admin", "work", "show", &k]);
    assert_eq!(shown["operation"], "agent_repository_cleanup", "{shown}");
    assert_eq!(shown["state"], "queued");
    assert!(shown["availableAt"].is_string(), "{shown}");
    let attempts = shown["evidence"].as_array().expect("evidence");
    assert_eq!(attempts.len(), 1, "{shown}");
    assert_eq!(attempts[0]["code"], "REPOSITORY_CLEANUP_PENDING");
    assert_eq!(attempts[0]["cause"], "KUBERNETES_FORBIDDEN");
    // Once the stop works, the next pass settles.
    due_now(&mut c, &k);
    run(&f, &driver);
    assert_eq!(
        evidence(&mut c, &k),
        [
            "deferred:REPOSITORY_CLEANUP_PENDING",
            "succeeded:REPOSITORY_CLEANUP_COMPLETE"
        ]
    );
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn g3_another_compute_waits_as_compute_driver_mismatch() {
    let f = fixture();
    let rev = active_revision(&f);
    let mut c = f.db.client();
    let k = register(&mut c, &f, &rev);
    let driver = Arc::new(ScriptedDriver::named("other"));
    let done = k.clone();
    let events = run_captured(&f.db, driver.clone(), Opts::default(), move |c| {
        attempted(c, &done, 1)
    });
    assert!(driver.log().is_empty(), "{:?}", driver.log());
    assert_eq!(work(&mut c, &k).0, "queued");
    assert_eq!(
        evidence(&mut c, &k),
        ["deferred:REPOSITORY_CLEANUP_PENDING"]
    );
    assert_eq!(warnings(&events, &k), ["COMPUTE_DRIVER_MISMATCH"]);
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn g4_the_recheck_grows_with_age_and_a_closing_session_keeps_the_interval() {
    // Without sessions: the age growth and the interval floor (a closing session and an
    // unknown cause keep the interval).
    let s = Duration::from_secs;
    assert_eq!(CLEANUP_INTERVAL, s(30));
    for (age, cause, closing, expected) in [
        (s(0), true, false, s(30)),
        (s(1_200), true, false, s(30)),
        (s(2_400), true, false, s(60)),
        (s(12_000), true, false, s(300)),
        (s(24_000), true, false, s(600)),
        (s(240_000), true, false, s(600)),
        (s(24_000), false, false, s(30)),
        (s(24_000), true, true, s(30)),
    ] {
        assert_eq!(
            cleanup_recheck(CLEANUP_INTERVAL, age, cause, closing),
            expected,
            "{age:?}"
        );
    }
    // A cleanup created 100 minutes ago by the database clock waits 150 s after a failure.
    let f = fixture();
    let rev = active_revision(&f);
    let mut c = f.db.client();
    let k = register(&mut c, &f, &rev);
    c.execute(
        "UPDATE occ.work SET created_at = clock_timestamp() - interval '100 minutes'
         WHERE idempotency_key = $1",
        &[&k],
    )
    .unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    driver.fail("stop_revision", &rev, forbidden());
    let done = k.clone();
    run_with(&f.db, driver, Opts::default(), move |c| {
        attempted(c, &done, 1)
    });
    let wait = due_in(&mut c, &k);
    assert!((145.0..=151.0).contains(&wait), "age / 40: {wait}");
}

#[test]
fn g4_stale_recovery_never_ends_a_cleanup() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let k = register(&mut c, &f, &rev);
    // A revision's reconcile work in another lane at the same attempt, for contrast.
    let (other, _) = create_agent(&mut c, "ns1", "other");
    let theirs = deploy(&mut c, &other);
    c.execute(
        "DELETE FROM occ.work WHERE idempotency_key = $1",
        &[&key(&rev)],
    )
    .unwrap();
    let options = QueueOptions::new(Duration::from_millis(200), 1);
    let claimed = queue::work_claim_batch(&mut c, &options, 2).unwrap();
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    std::thread::sleep(Duration::from_millis(400));
    queue::work_recover_stale(&mut c, &options).unwrap();
    let (state, code, _, attempts) = work(&mut c, &k);
    assert_eq!((state.as_str(), code, attempts), ("queued", None, 0));
    assert_eq!(evidence(&mut c, &k), ["lease_expired:LEASE_EXPIRED"]);
    assert_eq!(
        work(&mut c, &key(&theirs)).1.as_deref(),
        Some("LEASE_EXPIRED"),
        "other work fails at its final attempt"
    );
    // A queued cleanup past the attempt budget is not exhausted either.
    c.execute(
        "UPDATE occ.work SET attempt_count = 7 WHERE idempotency_key = $1",
        &[&k],
    )
    .unwrap();
    queue::work_recover_stale(&mut c, &options).unwrap();
    assert_eq!(work(&mut c, &k).0, "queued");
}

#[test]
fn g5_the_warning_is_said_once_per_cause_and_again_for_a_new_cause() {
    let f = fixture();
    let rev = active_revision(&f);
    let mut c = f.db.client();
    let k = register(&mut c, &f, &rev);
    let driver = Arc::new(ScriptedDriver::new());
    driver.fail("stop_revision", &rev, forbidden());
    driver.fail("stop_revision", &rev, forbidden());
    driver.fail("stop_revision", &rev, ComputeError::draining("scripted"));
    driver.fail("stop_revision", &rev, forbidden());
    let done = k.clone();
    let events = run_captured(&f.db, driver.clone(), Opts::default(), move |c| {
        due_now(c, &done);
        work(c, &done).0 == "succeeded"
    });
    assert_eq!(driver.calls_of("stop_revision").len(), 5);
    assert_eq!(
        warnings(&events, &k),
        [
            "KUBERNETES_FORBIDDEN",
            "AGENT_STOP_YIELDED",
            "KUBERNETES_FORBIDDEN"
        ]
    );
    let e = &events.named("worker.repository-cleanup-warning")[0];
    assert_eq!(e["operation"], "agent_revision.repository_cleanup");
    assert_eq!(e["revisionId"], rev.as_str());
    assert_eq!(e["agentId"], f.agent.as_str());
    assert_eq!(e["namespaceId"], "ns1");
    assert_eq!(e["attempt"], 1);
}
