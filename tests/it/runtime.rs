//! The worker runtime, in-process and as a real process: lease loss cancels the pass (W3),
//! a killed worker's claim is resumed (W3), graceful and interrupted shutdown (W4), health
//! (W6), start-up refusals (W8) and the LISTEN/NOTIFY wake-up (Q13).

use crate::support::{
    context, free_port, insert_namespace, runtime_options, scalar, wait_for, worker_command,
    worker_env, ContextBuilder, Env, TestDb, WorkerProcess,
};
use crossbeam_channel::{bounded, Receiver, Sender};
use occ_worker::queue::{work_enqueue, NewWork, Operation};
use occ_worker::reconcile::{DynReconciler, Pass, PassError, Reconciler, Registry, Report};
use occ_worker::runtime::Worker;
use postgres::Client;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn all_operations(reconciler: Arc<dyn DynReconciler>) -> Registry {
    Operation::ALL
        .into_iter()
        .fold(Registry::new(), |r, op| r.with(op, reconciler.clone()))
}

fn state_of(c: &mut Client, key: &str) -> (String, i32) {
    crate::support::row2(
        c,
        "SELECT state, attempt_count FROM occ.work_status WHERE idempotency_key = $1",
        &[&key],
    )
}

fn evidence(c: &mut Client, key: &str) -> Vec<(i32, String, String)> {
    c.query(
        "SELECT a.attempt, a.code, a.outcome FROM occ.work_attempts a
         JOIN occ.work w ON w.id = a.work_id WHERE w.idempotency_key = $1 ORDER BY a.id",
        &[&key],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// A reconciler whose first pass announces itself, waits for the test's go-ahead, then tries
/// one effect (`before_effect`) and records what happened; later passes succeed at once.
struct Gate {
    entered: Sender<i64>,
    go: Mutex<Receiver<()>>,
    loss: Mutex<Option<&'static str>>,
    effects: AtomicUsize,
    published: Mutex<Vec<i32>>,
}

impl Gate {
    fn new() -> (Arc<Gate>, Receiver<i64>, Sender<()>) {
        let (entered, entered_rx) = bounded(4);
        let (go_tx, go) = bounded(4);
        let gate = Arc::new(Gate {
            entered,
            go: Mutex::new(go),
            loss: Mutex::new(None),
            effects: AtomicUsize::new(0),
            published: Mutex::new(Vec::new()),
        });
        (gate, entered_rx, go_tx)
    }
}

impl Reconciler for Gate {
    type Facts = ();

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        if pass.claim.attempt > 1 {
            return Ok(Report::success("GATE_DONE"));
        }
        self.entered.send(pass.claim.id).unwrap();
        self.go
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(20))
            .expect("go-ahead");
        match pass.before_effect() {
            Ok(()) => {
                self.effects.fetch_add(1, Ordering::SeqCst);
                Ok(Report::success("GATE_DONE"))
            }
            Err(e) => {
                *self.loss.lock().unwrap() = Some(e.loss_code());
                Err(e)
            }
        }
    }

    fn publish(
        &self,
        tx: &mut occ_worker::db::Tx<'_>,
        pass: &Pass<'_>,
        _report: &Report,
    ) -> Result<(), PassError> {
        self.published.lock().unwrap().push(pass.claim.attempt);
        tx.execute(
            "INSERT INTO occ.audit_events (installation_id, namespace_id, kind, actor_id, action,
                 resource_kind, resource_id, outcome, work_id)
             VALUES ('inst', $1, 'mutation', 'admin', 'test.gate', 'namespace', $1, 'success', $2)",
            &[&pass.claim.namespace_id, &pass.claim.id],
        )?;
        Ok(())
    }
}

// W3: the database refuses the renewal because another claim owns the row; the pass stops at
// its next `before_effect`, and neither its effect nor its publication happens.
#[test]
fn refused_renewal_cancels_the_pass_and_publishes_nothing() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    let (ctx, events) = context(&db, Duration::from_secs(3), 5);
    let (gate, entered, go) = Gate::new();
    let worker = Worker::new(ctx, all_operations(gate.clone()), runtime_options(&db, 2));
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run().unwrap());

    let id = entered
        .recv_timeout(Duration::from_secs(10))
        .expect("claimed");
    let thief: String = crate::support::one(
        &mut c,
        "UPDATE occ.work_lanes SET claim_token = gen_random_uuid() WHERE claim_id = $1 RETURNING claim_token::text",
        &[&id],
    );
    go.send(()).unwrap();
    wait_for("the pass to end", Duration::from_secs(10), || {
        !events.named("worker.error").is_empty()
    });
    stop.stop();
    running.join().unwrap();

    assert_eq!(*gate.loss.lock().unwrap(), Some("CLAIM_RENEWAL_REFUSED"));
    assert_eq!(
        gate.effects.load(Ordering::SeqCst),
        0,
        "no effect after the loss"
    );
    assert!(
        gate.published.lock().unwrap().is_empty(),
        "nothing published"
    );
    let audits: i64 = scalar(&mut c, "SELECT count(*) FROM occ.audit_events");
    assert_eq!(audits, 0);
    let attempts: i64 = scalar(&mut c, "SELECT count(*) FROM occ.work_attempts");
    assert_eq!(attempts, 0);
    let row = c
        .query_one(
            "SELECT state, claim_token::text FROM occ.work_status WHERE id = $1",
            &[&id],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "claimed");
    assert_eq!(
        row.get::<_, String>(1),
        thief,
        "the new owner's claim is untouched"
    );
    let error = &events.named("worker.error")[0];
    assert_eq!(error["code"], "CLAIM_LOST");
    assert_eq!(error["cause"], "CLAIM_RENEWAL_REFUSED");
    assert!(events.named("worker.completed").is_empty());
}

// W3: while the database stalls (the row is locked, renewals wait), the lease runs out; the
// pass learns it lost the claim by lapse, not by refusal, and publishes nothing. Afterwards
// recovery gives the work to the next claim, which completes it.
#[test]
fn lease_lapsing_during_a_database_stall_cancels_the_pass() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    let lease = Duration::from_millis(600);
    let (ctx, events) = context(&db, lease, 5);
    let (gate, entered, go) = Gate::new();
    let worker = Worker::new(ctx, all_operations(gate.clone()), runtime_options(&db, 2));
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run().unwrap());

    let id = entered
        .recv_timeout(Duration::from_secs(10))
        .expect("claimed");
    let mut staller = db.client();
    let mut stall = staller.transaction().unwrap();
    stall
        .execute(
            "SELECT 1 FROM occ.work_lanes WHERE claim_id = $1 FOR UPDATE",
            &[&id],
        )
        .unwrap();
    go.send(()).unwrap();
    // The pass's renewal now waits on the row lock; keep the database stalled past the lease.
    wait_for(
        "a renewal waiting on the lock",
        Duration::from_secs(5),
        || {
            scalar::<i64>(
            &mut c,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        ) > 0
        },
    );
    std::thread::sleep(lease + Duration::from_millis(400));
    stall.commit().unwrap();

    wait_for(
        "the work to be resumed and done",
        Duration::from_secs(15),
        || state_of(&mut c, "namespace:ns1:ensure").0 == "succeeded",
    );
    stop.stop();
    running.join().unwrap();

    let loss = gate
        .loss
        .lock()
        .unwrap()
        .expect("the first pass lost its claim");
    assert!(
        loss == "CLAIM_LEASE_LAPSED" || loss == "CLAIM_RENEWAL_LATE",
        "a lease that ran out during a stall is a lapse, got {loss}"
    );
    assert_eq!(gate.effects.load(Ordering::SeqCst), 0);
    assert_eq!(
        *gate.published.lock().unwrap(),
        [2],
        "only the second claim publishes"
    );
    assert_eq!(
        evidence(&mut c, "namespace:ns1:ensure"),
        [
            (1, "LEASE_EXPIRED".into(), "lease_expired".into()),
            (2, "GATE_DONE".into(), "succeeded".into())
        ]
    );
    let audits: i64 = scalar(&mut c, "SELECT count(*) FROM occ.audit_events");
    assert_eq!(audits, 1);
    assert!(events
        .named("worker.error")
        .iter()
        .any(|e| e["cause"] == loss));
}

fn probe_env(db: &TestDb, extra: &[(&'static str, &str)]) -> Env {
    let mut env = worker_env(&db.url);
    for (k, v) in extra {
        env.push((k, v.to_string()));
    }
    env
}

fn probe_done(c: &mut Client) -> Vec<(i64, i32)> {
    c.query(
        "SELECT work_id, pid FROM public.occ_probe_done ORDER BY work_id",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

fn prepare_probe(db: &TestDb) -> Client {
    let mut c = db.client();
    occ_worker::reconcile::probe::Probe::setup(&mut c).unwrap();
    c
}

// W3: a worker killed with SIGKILL mid-pass leaves its claim to expire; another process
// recovers it after the lease and finishes it, exactly once.
#[test]
fn sigkilled_workers_claim_is_finished_by_another_process() {
    let db = TestDb::bootstrapped();
    let mut c = prepare_probe(&db);
    insert_namespace(&mut c, "ns1", "provisioning");
    let id = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin"))
        .unwrap()
        .id;
    let lease = [("OCC_WORKER_LEASE_MS", "1000")];
    let mut first = WorkerProcess::start(
        "probe",
        &probe_env(&db, &[lease[0], ("OCC_TEST_PROBE_HOLD_MS", "60000")]),
    );
    wait_for("the first claim", Duration::from_secs(15), || {
        state_of(&mut c, "namespace:ns1:ensure") == ("claimed".into(), 1)
    });
    first.child.kill().unwrap();
    let (status, _) = first.wait(Duration::from_secs(5));
    assert!(!status.success());

    let second = WorkerProcess::start(
        "probe",
        &probe_env(&db, &[lease[0], ("OCC_TEST_PROBE_HOLD_MS", "10")]),
    );
    wait_for("the resumed work", Duration::from_secs(15), || {
        state_of(&mut c, "namespace:ns1:ensure").0 == "succeeded"
    });
    assert_eq!(probe_done(&mut c), [(id, second.pid())]);
    assert_eq!(
        evidence(&mut c, "namespace:ns1:ensure"),
        [
            (1, "LEASE_EXPIRED".into(), "lease_expired".into()),
            (2, "PROBE_COMPLETED".into(), "succeeded".into())
        ]
    );
    let violations: i64 = scalar(&mut c, "SELECT count(*) FROM public.occ_lane_violations");
    assert_eq!(violations, 0);
    second.signal("TERM");
    let (status, stderr) = second.wait(Duration::from_secs(10));
    assert!(status.success(), "{stderr}");
}

// W4: SIGTERM stops claiming at once, lets in-flight passes finish within the grace, and
// exits 0.
#[test]
fn sigterm_finishes_in_flight_passes_and_stops_claiming() {
    let db = TestDb::bootstrapped();
    let mut c = prepare_probe(&db);
    for ns in ["ns1", "ns2", "ns3"] {
        insert_namespace(&mut c, ns, "provisioning");
    }
    for ns in ["ns1", "ns2"] {
        work_enqueue(&mut c, &NewWork::namespace_ensure(ns, "admin")).unwrap();
    }
    let worker = WorkerProcess::start(
        "probe",
        &probe_env(
            &db,
            &[
                ("OCC_TEST_PROBE_HOLD_MS", "1500"),
                ("OCC_WORKER_CONCURRENCY", "2"),
                ("OCC_WORKER_SHUTDOWN_GRACE_MS", "10000"),
            ],
        ),
    );
    wait_for("both claims", Duration::from_secs(15), || {
        scalar::<i64>(
            &mut c,
            "SELECT count(*) FROM occ.work_status WHERE state = 'claimed'",
        ) == 2
    });
    worker.signal("TERM");
    wait_for("worker.stopping", Duration::from_secs(5), || {
        worker.has_event("worker.stopping")
    });
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns3", "admin")).unwrap();
    let started = Instant::now();
    let events_before_exit = {
        let w = &worker;
        wait_for("exit", Duration::from_secs(10), || {
            w.has_event("worker.stopped")
        });
        w.events()
    };
    let (status, stderr) = worker.wait(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}: {stderr}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(state_of(&mut c, "namespace:ns1:ensure").0, "succeeded");
    assert_eq!(state_of(&mut c, "namespace:ns2:ensure").0, "succeeded");
    assert_eq!(
        state_of(&mut c, "namespace:ns3:ensure"),
        ("queued".into(), 0),
        "nothing is claimed after SIGTERM"
    );
    assert!(!events_before_exit
        .iter()
        .any(|e| e["event"] == "worker.pass-interrupted"));
    assert_eq!(
        events_before_exit
            .iter()
            .filter(|e| e["event"] == "worker.completed")
            .count(),
        2
    );
}

// W4: a pass longer than the shutdown grace is interrupted (WORKER_STOPPING), releases its
// claim with the attempt refunded (not waiting for the lease), the process still exits 0, and
// another process resumes the work.
#[test]
fn sigterm_interrupts_a_pass_longer_than_the_grace_and_another_process_resumes_it() {
    let db = TestDb::bootstrapped();
    let mut c = prepare_probe(&db);
    insert_namespace(&mut c, "ns1", "provisioning");
    let id = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin"))
        .unwrap()
        .id;
    let env = |hold: &'static str| {
        probe_env(
            &db,
            &[
                ("OCC_TEST_PROBE_HOLD_MS", hold),
                ("OCC_WORKER_LEASE_MS", "1000"),
                ("OCC_WORKER_SHUTDOWN_GRACE_MS", "300"),
            ],
        )
    };
    let first = WorkerProcess::start("probe", &env("30000"));
    wait_for("the claim", Duration::from_secs(15), || {
        state_of(&mut c, "namespace:ns1:ensure").0 == "claimed"
    });
    first.signal("TERM");
    wait_for("worker.stopped", Duration::from_secs(10), || {
        first.has_event("worker.stopped")
    });
    let events = first.events();
    let (status, stderr) = first.wait(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}: {stderr}");
    let interrupted: Vec<_> = events
        .iter()
        .filter(|e| e["event"] == "worker.pass-interrupted")
        .collect();
    assert_eq!(interrupted.len(), 1, "{events:?}");
    // Changed: pass events name the work by its key (seed 004 869-879).
    assert_eq!(interrupted[0]["workId"], "namespace:ns1:ensure");
    assert_eq!(interrupted[0]["released"], true, "{events:?}");
    // Released, not left to expire: queued at once with the attempt refunded.
    let row = c
        .query_one(
            "SELECT state, attempt_count, claim_token IS NULL, available_at <= clock_timestamp()
             FROM occ.work_status WHERE id = $1",
            &[&id],
        )
        .unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, i32>(1),
            row.get::<_, bool>(2),
            row.get::<_, bool>(3)
        ),
        ("queued".to_string(), 0, true, true)
    );
    assert_eq!(
        evidence(&mut c, "namespace:ns1:ensure"),
        [(1, "WORKER_STOPPING".into(), "deferred".into())]
    );

    let second = WorkerProcess::start("probe", &env("10"));
    wait_for("the resumed work", Duration::from_secs(15), || {
        state_of(&mut c, "namespace:ns1:ensure").0 == "succeeded"
    });
    assert_eq!(probe_done(&mut c), [(id, second.pid())]);
    let violations: i64 = scalar(&mut c, "SELECT count(*) FROM public.occ_lane_violations");
    assert_eq!(violations, 0);
}

/// Runs `occ-worker run` with exactly `env`; returns (exit code, stderr, elapsed).
fn refused_start(env: &[(&str, String)]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let child = worker_command(&["run"], env).spawn().unwrap();
    let (status, stderr) = WorkerProcess::capture(child).wait(Duration::from_secs(30));
    (status.code(), stderr, started.elapsed())
}

fn without(env: Env, name: &str) -> Env {
    env.into_iter().filter(|(k, _)| *k != name).collect()
}

fn with(mut env: Env, name: &'static str, value: &str) -> Env {
    env.retain(|(k, _)| *k != name);
    env.push((name, value.into()));
    env
}

// W8: every start-up refusal is one clear line naming the problem, with a non-zero exit.
#[test]
fn start_up_refuses_with_one_line_naming_the_problem() {
    let bare = TestDb::new();
    let db = TestDb::bootstrapped();
    let closed = format!("postgres://postgres@127.0.0.1:{}/postgres", free_port());
    let cases: Vec<(&str, Env, &str)> = vec![
        ("no Installation", worker_env(&bare.url), "no Installation"),
        (
            "no Compute Driver",
            without(worker_env(&db.url), "OCC_COMPUTE_DRIVER"),
            "OCC_COMPUTE_DRIVER",
        ),
        (
            "invalid number",
            with(worker_env(&db.url), "OCC_WORKER_CONCURRENCY", "eight"),
            "OCC_WORKER_CONCURRENCY",
        ),
        (
            "zero lease",
            with(worker_env(&db.url), "OCC_WORKER_LEASE_MS", "0"),
            "OCC_WORKER_LEASE_MS",
        ),
        (
            "unknown mode",
            with(worker_env(&db.url), "OCC_WORKER_MODE", "staging"),
            "OCC_WORKER_MODE",
        ),
        (
            "unreachable database",
            with(
                with(worker_env(&closed), "OCC_WORKER_DB_TIMEOUT_MS", "1000"),
                "OCC_DATABASE_URL",
                &closed,
            ),
            "database unreachable",
        ),
    ];
    for (what, env, needle) in cases {
        let (code, stderr, elapsed) = refused_start(&env);
        assert!(matches!(code, Some(c) if c != 0), "{what}: exit {code:?}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{what}: one line: {stderr:?}"
        );
        assert!(stderr.starts_with("occ-worker: "), "{what}: {stderr:?}");
        assert!(stderr.contains(needle), "{what}: {stderr:?} names {needle}");
        assert!(
            !stderr.trim_end().ends_with('.'),
            "{what}: no trailing period"
        );
        assert!(
            elapsed < Duration::from_secs(15),
            "{what}: took {elapsed:?}"
        );
    }
}

// Q13: an idle worker with a one-minute poll claims new work at once: the NOTIFY wakes it.
#[test]
fn new_work_wakes_an_idle_worker_without_polling() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for ns in ["ns0", "ns1", "ns2"] {
        insert_namespace(&mut c, ns, "provisioning");
    }
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns0", "admin")).unwrap();
    let mut env = worker_env(&db.url);
    env.push(("OCC_WORKER_POLL_INTERVAL_MS", "60000".into()));
    let worker = WorkerProcess::start("noop", &env);
    // The first work proves the worker runs; it is idle afterwards.
    wait_for("the first work", Duration::from_secs(15), || {
        state_of(&mut c, "namespace:ns0:ensure").0 == "succeeded"
    });
    for ns in ["ns1", "ns2"] {
        let key = format!("namespace:{ns}:ensure");
        let enqueued = Instant::now();
        work_enqueue(&mut c, &NewWork::namespace_ensure(ns, "admin")).unwrap();
        // A poll could not answer before 60 s; 10 s is generous for the notification.
        wait_for("the notified work", Duration::from_secs(10), || {
            state_of(&mut c, &key).0 == "succeeded"
        });
        assert!(enqueued.elapsed() < Duration::from_secs(10));
    }
    worker.signal("TERM");
    let (status, stderr) = worker.wait(Duration::from_secs(10));
    assert!(status.success(), "{stderr}");
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

// W6: liveness, readiness with the pending count, and Prometheus metrics answer over HTTP.
#[test]
fn health_endpoints_answer() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    let port = free_port();
    let mut env = worker_env(&db.url);
    env.retain(|(k, _)| *k != "OCC_WORKER_HTTP_ADDR");
    env.push(("OCC_WORKER_HTTP_ADDR", format!("127.0.0.1:{port}")));
    let worker = WorkerProcess::start("noop", &env);
    wait_for("the work", Duration::from_secs(15), || {
        state_of(&mut c, "namespace:ns1:ensure").0 == "succeeded"
    });
    wait_for("/livez", Duration::from_secs(10), || {
        http_get(port, "/livez").is_some_and(|(status, _)| status == 200)
    });
    // Enqueued not yet available, so the worker cannot take it before /readyz counts it.
    occ_worker::queue::work_enqueue_at(
        &mut c,
        &NewWork::namespace_delete("ns1", Some(1), "admin"),
        Duration::from_secs(3600),
    )
    .unwrap();
    let (status, body) = http_get(port, "/readyz").expect("/readyz answers");
    assert_eq!(status, 200, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["pending"], 1, "{body}");
    let (status, metrics) = http_get(port, "/metrics").expect("/metrics answers");
    assert_eq!(status, 200);
    assert!(metrics.contains("occ_worker_passes_total"), "{metrics}");
    assert!(metrics.contains("occ_worker_queue_depth"), "{metrics}");
    assert!(
        metrics.contains("# HELP occ_worker_passes_total Finished passes by operation and outcome: success, pending, retry, permanent (the reconciler's report), interrupted (stopped by shutdown), claim_lost, error\n"),
        "{metrics}"
    );
    assert_eq!(http_get(port, "/nope").map(|r| r.0), Some(404));
    // W6, STYLE 5: every thread is named: ours `occ-*`, the pool's `r2d2-worker-N`; only the
    // main thread carries the process name.
    let pid = worker.pid();
    let mut names = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap();
        let tid: i32 = task.file_name().to_string_lossy().parse().unwrap();
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let comm = comm.trim().to_string();
        let named = if tid == pid {
            comm == "occ-worker"
        } else {
            comm.starts_with("occ-") || comm.starts_with("r2d2-worker-")
        };
        assert!(named, "thread {tid} is unnamed ({comm:?})");
        names.push(comm);
    }
    for expected in [
        "occ-http",
        "occ-listen",
        "occ-publish-0",
        "occ-claim",
        "occ-signal",
        "occ-work-0",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    worker.signal("TERM");
    let (status, stderr) = worker.wait(Duration::from_secs(10));
    assert!(status.success(), "{stderr}");
}

// W3: a renewal the database confirms only after the last confirmed lease ran out (here the
// row lock made it wait) proves nothing: the pass is cancelled with CLAIM_RENEWAL_LATE and a
// warning event, even though the answer came within one lease of being sent.
#[test]
fn a_renewal_answered_after_the_trusted_lease_ran_out_is_late() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    let lease = Duration::from_secs(2);
    let opts = occ_worker::queue::QueueOptions::new(lease, 5);
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    let claim = occ_worker::queue::work_claim(&mut c, &opts)
        .unwrap()
        .unwrap();
    // The last confirmed lease was sent 1.7 s ago: it is trusted for 300 ms more.
    let state = occ_worker::reconcile::LeaseState::new(
        &claim,
        Instant::now() - Duration::from_millis(1700),
        lease,
    );
    let (ctx, events) = context(&db, lease, 5);
    let mut staller = db.client();
    let id = claim.id;
    let (locked_tx, locked) = bounded(1);
    let stall = std::thread::spawn(move || {
        let mut tx = staller.transaction().unwrap();
        tx.execute(
            "SELECT 1 FROM occ.work_lanes WHERE claim_id = $1 FOR UPDATE",
            &[&id],
        )
        .unwrap();
        locked_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(700));
        tx.commit().unwrap();
    });
    locked.recv().unwrap();
    let sent = Instant::now();
    let renewed = state.renew(&mut c, &claim, &opts, &ctx.events);
    assert!(
        sent.elapsed() < lease,
        "answered within one lease of sending"
    );
    stall.join().unwrap();
    assert!(
        matches!(
            renewed,
            Err(PassError::Lost(occ_worker::cancel::LossCause::RenewalLate))
        ),
        "{renewed:?}"
    );
    assert_eq!(
        state.cancel.check().unwrap_err().0.code(),
        "CLAIM_RENEWAL_LATE"
    );
    let warnings = events.named("worker.claim-renewal-warning");
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0]["code"], "CLAIM_RENEWAL_LATE");
}

// W8, O: `check --json` reports the Installation and the Compute Driver and exits 0 on a
// bootstrapped database; a DOCKER_HOST naming a missing socket fails with one line naming it.
#[test]
fn check_reports_installation_and_driver_and_names_a_missing_docker_socket() {
    let db = TestDb::bootstrapped();
    let missing = "unix:///nonexistent/occ-check/docker.sock";
    let out = worker_command(
        &["check", "--json"],
        &with(worker_env(&db.url), "DOCKER_HOST", missing),
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.starts_with("occ-worker: "), "{stderr:?}");
    assert!(
        stderr.contains("DOCKER_HOST") && stderr.contains(missing),
        "names the socket: {stderr:?}"
    );
    assert!(out.stdout.is_empty(), "nothing on stdout");

    if !crate::docker::docker_available() {
        return;
    }
    let out = worker_command(&["check", "--json"], &worker_env(&db.url))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON value");
    assert_eq!(report["status"], "ok");
    assert_eq!(report["installation"], "inst");
    assert_eq!(report["computeDriver"], "docker");
}

// Dispatch seam: an operation with no reconciler fails its work permanently with
// RECONCILER_UNAVAILABLE, once, and never succeeds.
#[test]
fn an_operation_without_a_reconciler_fails_permanently_and_never_succeeds() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    let (ctx, events) = context(&db, Duration::from_secs(5), 5);
    let worker = Worker::new(ctx, Registry::new(), runtime_options(&db, 2));
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run().unwrap());
    wait_for("the work to end", Duration::from_secs(15), || {
        state_of(&mut c, "namespace:ns1:ensure").0 != "queued"
            && state_of(&mut c, "namespace:ns1:ensure").0 != "claimed"
    });
    // Give a wrong retry the chance to show up before stopping.
    crate::support::holds_for("the work ended", Duration::from_millis(500), || {
        let state = state_of(&mut c, "namespace:ns1:ensure").0;
        state != "queued" && state != "claimed"
    });
    stop.stop();
    running.join().unwrap();

    let row = c
        .query_one(
            "SELECT state, attempt_count, reason_code FROM occ.work_status WHERE idempotency_key = 'namespace:ns1:ensure'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, i32>(1),
            row.get::<_, Option<String>>(2)
        ),
        (
            "failed_permanent".into(),
            1,
            Some("RECONCILER_UNAVAILABLE".into())
        )
    );
    assert_eq!(
        evidence(&mut c, "namespace:ns1:ensure"),
        [(1, "RECONCILER_UNAVAILABLE".into(), "failed".into())]
    );
    let status: String = scalar(&mut c, "SELECT status FROM occ.namespaces WHERE id = 'ns1'");
    assert_eq!(
        status, "provisioning",
        "nothing was published for the Namespace"
    );
    let completed = events.named("worker.completed");
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0]["code"], "RECONCILER_UNAVAILABLE");
    // Outcomes are success | pending | retry | permanent: this one is permanent.
    assert_eq!(completed[0]["outcome"], "permanent");
    assert_eq!(completed[0]["result"], "permanent");
}

/// Attempt 1 blocks past its lease ignoring cancellation (a stuck effect), so the work is
/// recovered and claimed again while it still runs; later attempts wait on their token.
struct Stubborn {
    lease: Duration,
    first_ended: Arc<std::sync::atomic::AtomicBool>,
}

impl Reconciler for Stubborn {
    type Facts = ();

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        if pass.claim.attempt == 1 {
            std::thread::sleep(self.lease * 4);
            self.first_ended.store(true, Ordering::SeqCst);
            return Ok(Report::success("STUBBORN_DONE"));
        }
        pass.cancel().sleep(Duration::from_secs(60))?;
        Ok(Report::success("STUBBORN_DONE"))
    }

    fn publish(
        &self,
        _tx: &mut occ_worker::db::Tx<'_>,
        _pass: &Pass<'_>,
        _report: &Report,
    ) -> Result<(), PassError> {
        Ok(())
    }
}

// W4: in-flight bookkeeping is keyed by claim, not by work id. The same work
// is claimed a second time while its first, stuck pass still runs; when the first ends, the
// second is still known, so a stop cancels it after the grace (instead of waiting for it) and
// its claim is released.
#[test]
fn a_stop_cancels_a_second_claim_of_the_same_work_after_the_first_pass_ended() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    let lease = Duration::from_millis(1000);
    let (ctx, events) = context(&db, lease, 5);
    let first_ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut options = runtime_options(&db, 2);
    options.shutdown_grace = Duration::from_millis(300);
    options.poll_interval = Duration::from_millis(50);
    let worker = Worker::new(
        ctx,
        all_operations(Arc::new(Stubborn {
            lease,
            first_ended: first_ended.clone(),
        })),
        options,
    );
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run().unwrap());
    wait_for("the first claim", Duration::from_secs(15), || {
        state_of(&mut c, "namespace:ns1:ensure") == ("claimed".into(), 1)
    });
    // The first claim is lost (its heartbeat is refused from now on) while its pass is stuck.
    c.batch_execute(
        "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp() - interval '1 s'
         WHERE claim_id IS NOT NULL",
    )
    .unwrap();
    wait_for("the second claim", Duration::from_secs(15), || {
        state_of(&mut c, "namespace:ns1:ensure") == ("claimed".into(), 2)
    });
    wait_for("the first pass to end", Duration::from_secs(15), || {
        first_ended.load(Ordering::SeqCst)
    });
    crate::support::holds_for("the second claim", Duration::from_millis(200), || {
        state_of(&mut c, "namespace:ns1:ensure") == ("claimed".into(), 2)
    });
    let stopped = Instant::now();
    stop.stop();
    running.join().unwrap();
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the second pass was not cancelled: {took:?}"
    );
    let interrupted = events.named("worker.pass-interrupted");
    assert_eq!(interrupted.len(), 1, "{interrupted:?}");
    assert_eq!(interrupted[0]["attempt"], 2);
    assert_eq!(interrupted[0]["released"], true);
    assert_eq!(
        state_of(&mut c, "namespace:ns1:ensure"),
        ("queued".into(), 1),
        "released with the second attempt refunded"
    );
}

/// An event sink that panics on the scheduling thread's `worker.stopping` line.
struct PanicOnStopping;

impl Write for PanicOnStopping {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if String::from_utf8_lossy(buf).contains("\"worker.stopping\"") {
            panic!("test: the scheduling thread panics");
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// W4: a panic on the claim thread (`occ-claim`, the scheduling thread) is not a clean stop:
// every thread is joined and `Worker::run` fails, so the process exits non-zero.
#[test]
fn a_panic_on_the_scheduling_thread_makes_the_worker_fail() {
    let db = TestDb::bootstrapped();
    let (ctx, _) = context(&db, Duration::from_secs(5), 5);
    let ctx = ContextBuilder::like(&ctx)
        .events(occ_worker::events::Events::to(Box::new(PanicOnStopping)))
        .build();
    let worker = Worker::new(ctx, Registry::new(), runtime_options(&db, 2));
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run());
    std::thread::sleep(Duration::from_millis(300));
    stop.stop();
    let result = running.join().expect("run itself returns");
    let e = result.expect_err("a panicked scheduling thread fails the run");
    assert!(
        e.to_string()
            .contains("scheduling thread (occ-claim) panicked"),
        "{e}"
    );
}

/// Sleeps through its pass without renewing the claim itself, and notes which threads of this
/// process are named after the work while it runs (`occ-lease-<id>`).
struct Sleeper {
    hold: Duration,
    seen: Mutex<Vec<(i64, Vec<String>)>>,
}

impl Reconciler for Sleeper {
    type Facts = ();

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        pass.cancel().sleep(self.hold)?;
        let name = format!("occ-lease-{}", pass.claim.id);
        let mut tids = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let task = task.unwrap();
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim() == name {
                tids.push(task.file_name().to_string_lossy().into_owned());
            }
        }
        self.seen.lock().unwrap().push((pass.claim.id, tids));
        Ok(Report::success("SLEPT"))
    }

    fn publish(
        &self,
        _tx: &mut occ_worker::db::Tx<'_>,
        _pass: &Pass<'_>,
        _report: &Report,
    ) -> Result<(), PassError> {
        Ok(())
    }
}

// W1, W2: a live claim has one heartbeat thread, named after its work, which keeps the claim
// while the pass renews nothing itself (a pass of more than twice the lease succeeds on its
// first attempt); a worker thread's heartbeat thread serves that worker's next claims, so the
// process never holds more heartbeat threads than worker threads.
#[test]
fn each_live_claim_has_one_heartbeat_thread_that_renews_it_and_serves_the_next_claim() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    // Work ids no other test's database reaches, so the thread names are this test's own
    // (Linux keeps 15 bytes of a thread name: `occ-lease-` and five digits).
    c.batch_execute("SELECT setval('occ.work_id_seq', 73000)")
        .unwrap();
    let keys = ["ns1", "ns2", "ns3"].map(|ns| {
        insert_namespace(&mut c, ns, "provisioning");
        work_enqueue(&mut c, &NewWork::namespace_ensure(ns, "admin")).unwrap();
        format!("namespace:{ns}:ensure")
    });
    let (ctx, events) = context(&db, Duration::from_millis(1500), 5);
    let sleeper = Arc::new(Sleeper {
        hold: Duration::from_millis(3200),
        seen: Mutex::new(Vec::new()),
    });
    let worker = Worker::new(
        ctx,
        all_operations(sleeper.clone()),
        runtime_options(&db, 1),
    );
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run().unwrap());
    wait_for("three finished passes", Duration::from_secs(40), || {
        keys.iter()
            .all(|k| !["queued", "claimed"].contains(&state_of(&mut c, k).0.as_str()))
    });
    stop.stop();
    running.join().unwrap();

    for key in &keys {
        assert_eq!(state_of(&mut c, key), ("succeeded".into(), 1), "{key}");
    }
    assert!(events.named("worker.error").is_empty());
    let seen = sleeper.seen.lock().unwrap();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (id, tids) in seen.iter() {
        assert_eq!(
            tids.len(),
            1,
            "one heartbeat thread named after work {id}: {seen:?}"
        );
    }
    assert!(
        seen.iter().all(|(_, tids)| tids == &seen[0].1),
        "one worker thread, one heartbeat thread serving each claim in turn: {seen:?}"
    );
}

/// Records, as each pass starts, the transaction that wrote its claim (its lane row's `xmin`).
struct ClaimTransactions {
    client: Mutex<Client>,
    seen: Mutex<Vec<(i64, String)>>,
}

impl Reconciler for ClaimTransactions {
    type Facts = ();

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let xmin: String = self
            .client
            .lock()
            .unwrap()
            .query_one(
                "SELECT xmin::text FROM occ.work_lanes WHERE claim_id = $1",
                &[&pass.claim.id],
            )
            .unwrap()
            .get(0);
        self.seen.lock().unwrap().push((pass.claim.id, xmin));
        Ok(Report::success("RECORDED"))
    }

    fn publish(
        &self,
        _tx: &mut occ_worker::db::Tx<'_>,
        _pass: &Pass<'_>,
        _report: &Report,
    ) -> Result<(), PassError> {
        Ok(())
    }
}

// W1: the transaction that publishes a pass claims the works for the slot it
// frees, so a claim never outlives its slot and one commit serves both. Three works in one
// lane at concurrency 1: the first is claimed alone; each later one is claimed by the very
// transaction that completed its predecessor (the lane moved on inside it), and every work
// succeeds on its first attempt.
#[test]
fn the_transaction_that_publishes_a_pass_claims_the_next_work_for_its_slot() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "lane", "ready");
    let keys: Vec<String> = (1..=3)
        .map(|n| {
            work_enqueue(&mut c, &NewWork::namespace_delete("lane", Some(n), "admin")).unwrap();
            format!("namespace:lane:delete:{n}")
        })
        .collect();
    let (ctx, events) = context(&db, Duration::from_secs(30), 5);
    let recorder = Arc::new(ClaimTransactions {
        client: Mutex::new(db.client()),
        seen: Mutex::new(Vec::new()),
    });
    let worker = Worker::new(
        ctx,
        all_operations(recorder.clone()),
        runtime_options(&db, 1),
    );
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run().unwrap());
    wait_for("three finished passes", Duration::from_secs(30), || {
        keys.iter().all(|k| state_of(&mut c, k).0 == "succeeded")
    });
    stop.stop();
    running.join().unwrap();

    for key in &keys {
        assert_eq!(state_of(&mut c, key), ("succeeded".into(), 1), "{key}");
    }
    assert!(events.named("worker.error").is_empty());
    let seen = recorder.seen.lock().unwrap().clone();
    let ids: Vec<i64> = keys
        .iter()
        .map(|k| {
            c.query_one("SELECT id FROM occ.work WHERE idempotency_key = $1", &[k])
                .unwrap()
                .get(0)
        })
        .collect();
    assert_eq!(
        seen.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        ids,
        "the lane's works in order"
    );
    for pair in seen.windows(2) {
        // The completion of the predecessor: its row's last writer (a terminal row is not
        // written again).
        let completed_by: String = c
            .query_one(
                "SELECT xmin::text FROM occ.work WHERE id = $1",
                &[&pair[0].0],
            )
            .unwrap()
            .get(0);
        assert_eq!(
            pair[1].1, completed_by,
            "work {} was claimed by the transaction that completed work {}: {seen:?}",
            pair[1].0, pair[0].0
        );
    }
    assert_ne!(
        seen[0].1, seen[1].1,
        "the first claim had nothing to publish with it: {seen:?}"
    );
}

/// Holds the first publication inside its transaction until `hold_for` other passes have been
/// published meanwhile (by the other publisher), and has every pass note how many live claims
/// the database holds.
struct HeldPublication {
    client: Mutex<Client>,
    hold_for: usize,
    first: std::sync::atomic::AtomicBool,
    others: AtomicUsize,
    held_through: AtomicUsize,
    most_live: AtomicUsize,
}

impl Reconciler for HeldPublication {
    type Facts = ();

    fn reconcile(&self, _pass: &Pass<'_>) -> Result<Report, PassError> {
        let live: i64 = scalar(
            &mut self.client.lock().unwrap(),
            "SELECT count(*) FROM occ.work_lanes WHERE claim_id IS NOT NULL",
        );
        self.most_live
            .fetch_max(usize::try_from(live).unwrap(), Ordering::SeqCst);
        Ok(Report::success("COUNTED"))
    }

    fn publish(
        &self,
        _tx: &mut occ_worker::db::Tx<'_>,
        _pass: &Pass<'_>,
        _report: &Report,
    ) -> Result<(), PassError> {
        if self.first.swap(false, Ordering::SeqCst) {
            let _ = crate::support::poll(Duration::from_secs(30), Duration::from_millis(2), || {
                (self.others.load(Ordering::SeqCst) >= self.hold_for).then_some(())
            });
            self.held_through
                .store(self.others.load(Ordering::SeqCst), Ordering::SeqCst);
        } else {
            self.others.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

// W1: from concurrency 16 publications run on two publisher threads at once,
// and the slots a publication may claim for are reserved when it is handed over, so the live
// claims never outnumber the worker threads. 160 works in 160 lanes at concurrency 16: the
// first publication stays inside its transaction (its passes' claims live) until 40 other
// passes have been published by the other publisher meanwhile; every pass counts the live
// claims in the database, and every work succeeds on its first attempt.
#[test]
fn two_publications_run_at_once_and_live_claims_never_outnumber_the_worker_threads() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let keys: Vec<String> = (0..160)
        .map(|n| {
            let ns = format!("l{n}");
            insert_namespace(&mut c, &ns, "ready");
            work_enqueue(&mut c, &NewWork::namespace_delete(&ns, None, "admin")).unwrap();
            format!("namespace:{ns}:delete")
        })
        .collect();
    let (ctx, events) = context(&db, Duration::from_secs(30), 5);
    let held = Arc::new(HeldPublication {
        client: Mutex::new(db.client()),
        hold_for: 40,
        first: std::sync::atomic::AtomicBool::new(true),
        others: AtomicUsize::new(0),
        held_through: AtomicUsize::new(0),
        most_live: AtomicUsize::new(0),
    });
    let worker = Worker::new(ctx, all_operations(held.clone()), runtime_options(&db, 16));
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run().unwrap());
    wait_for("every work succeeded", Duration::from_secs(60), || {
        scalar::<i64>(
            &mut c,
            "SELECT count(*) FROM occ.work_status WHERE state = 'succeeded'",
        ) == 160
    });
    stop.stop();
    running.join().unwrap();

    assert!(
        held.held_through.load(Ordering::SeqCst) >= 40,
        "other passes were published while the first publication was under way: {}",
        held.held_through.load(Ordering::SeqCst)
    );
    let most = held.most_live.load(Ordering::SeqCst);
    assert!(
        (1..=16).contains(&most),
        "live claims seen by the passes: at most {most}, never more than the 16 worker threads"
    );
    for key in &keys {
        assert_eq!(state_of(&mut c, key), ("succeeded".into(), 1), "{key}");
    }
    assert!(events.named("worker.error").is_empty());
}
