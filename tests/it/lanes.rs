//! Lane exclusion under load (Q4): 2,000 works over 100 lanes (50 Namespace lanes, 50 Agent
//! lanes) never run twice at once in one lane, whether one process runs 16 passes at a time
//! or two processes compete, and every work succeeds exactly once.

use crate::support::{
    context, insert_agent, insert_namespace, runtime_options, scalar, wait_for, worker_env, TestDb,
    WorkerProcess,
};
use occ_worker::queue::Operation;
use occ_worker::reconcile::{
    probe::Probe, DynReconciler, Pass, PassError, Reconciler, Registry, Report,
};
use occ_worker::runtime::Worker;
use postgres::Client;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LANES: usize = 100;
const PER_LANE: usize = 20;
const WORKS: i64 = (LANES * PER_LANE) as i64;

/// 50 Namespaces with one Agent each; 20 Namespace deletions per Namespace and 20 Agent stops
/// per Agent, enqueued lane by lane so the head of the queue is always one busy lane.
fn fill(c: &mut Client) {
    for i in 0..LANES / 2 {
        let ns = format!("n{i:02}");
        insert_namespace(c, &ns, "ready");
        insert_agent(c, &ns, &format!("a{i:02}"), 0);
    }
    c.batch_execute(&format!(
        "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, namespace_target, agent_target, actor_id)
         SELECT CASE WHEN l % 2 = 0 THEN format('namespace:n%s:delete:%s', lpad((l / 2)::text, 2, '0'), n)
                     ELSE format('agent:a%s:stop:%s', lpad((l / 2)::text, 2, '0'), n) END,
                format('n%s', lpad((l / 2)::text, 2, '0')),
                CASE WHEN l % 2 = 1 THEN format('a%s', lpad((l / 2)::text, 2, '0')) END,
                CASE WHEN l % 2 = 0 THEN 'deleted' END,
                CASE WHEN l % 2 = 1 THEN 'stopped' END,
                'admin'
         FROM generate_series(0, {}) l, generate_series(1, {PER_LANE}) n
         ORDER BY l, n",
        LANES - 1
    ))
    .unwrap();
    let lanes: i64 = scalar(c, "SELECT count(DISTINCT lane) FROM occ.work");
    assert_eq!(lanes, LANES as i64);
}

fn succeeded(c: &mut Client) -> i64 {
    scalar(
        c,
        "SELECT count(*) FROM occ.work_status WHERE state = 'succeeded'",
    )
}

/// Records every lane it is in; entering a lane already held is a violation.
#[derive(Default)]
struct LaneRecorder {
    active: Mutex<HashSet<String>>,
    violations: AtomicUsize,
    passes: AtomicUsize,
    max_parallel: AtomicUsize,
}

impl Reconciler for LaneRecorder {
    type Facts = ();

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let lane = match &pass.claim.agent_id {
            Some(agent) => format!("agent:{agent}"),
            None => format!("namespace:{}", pass.claim.namespace_id),
        };
        {
            let mut active = self.active.lock().unwrap();
            if !active.insert(lane.clone()) {
                self.violations.fetch_add(1, Ordering::SeqCst);
            }
            self.max_parallel.fetch_max(active.len(), Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(1));
        self.active.lock().unwrap().remove(&lane);
        self.passes.fetch_add(1, Ordering::SeqCst);
        Ok(Report::success("LANE_RECORDED"))
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

// Q4: one process, 16 worker threads, 100 lanes: never two passes in one lane.
#[test]
fn one_worker_with_sixteen_threads_never_runs_a_lane_twice_at_once() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    fill(&mut c);
    let recorder = Arc::new(LaneRecorder::default());
    let registry = Operation::ALL.into_iter().fold(Registry::new(), |r, op| {
        r.with(op, recorder.clone() as Arc<dyn DynReconciler>)
    });
    let (ctx, _events) = context(&db, Duration::from_secs(5), 5);
    let worker = Worker::new(ctx, registry, runtime_options(&db, 16));
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run().unwrap());
    wait_for("every work to succeed", Duration::from_secs(60), || {
        succeeded(&mut c) == WORKS
    });
    stop.stop();
    running.join().unwrap();
    assert_eq!(recorder.violations.load(Ordering::SeqCst), 0);
    assert_eq!(
        recorder.passes.load(Ordering::SeqCst),
        WORKS as usize,
        "one pass per work"
    );
    assert!(
        recorder.max_parallel.load(Ordering::SeqCst) > 1,
        "different lanes ran in parallel"
    );
    let retried: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work_status WHERE attempt_count <> 1",
    );
    assert_eq!(retried, 0);
}

// Q4: two worker processes at once, 8 threads each: lane exclusion holds across processes,
// every work is published exactly once, and both processes share the work.
#[test]
fn two_worker_processes_never_run_a_lane_twice_at_once() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    Probe::setup(&mut c).unwrap();
    fill(&mut c);
    let mut env = worker_env(&db.url);
    env.push(("OCC_WORKER_CONCURRENCY", "8".into()));
    env.push(("OCC_TEST_PROBE_HOLD_MS", "1".into()));
    let workers = [
        WorkerProcess::start("probe", &env),
        WorkerProcess::start("probe", &env),
    ];
    wait_for("every work to succeed", Duration::from_secs(80), || {
        succeeded(&mut c) == WORKS
    });
    for w in &workers {
        w.signal("TERM");
    }
    let pids: Vec<i32> = workers.iter().map(|w| w.pid()).collect();
    for w in workers {
        let (status, stderr) = w.wait(Duration::from_secs(15));
        assert!(status.success(), "exit {status:?}: {stderr}");
    }
    let violations: i64 = scalar(&mut c, "SELECT count(*) FROM public.occ_lane_violations");
    assert_eq!(violations, 0, "two live claims met in one lane");
    let done: i64 = scalar(&mut c, "SELECT count(*) FROM public.occ_probe_done");
    let distinct: i64 = scalar(
        &mut c,
        "SELECT count(DISTINCT work_id) FROM public.occ_probe_done",
    );
    assert_eq!(
        (done, distinct),
        (WORKS, WORKS),
        "every work published exactly once"
    );
    for pid in pids {
        let mine: i64 = crate::support::one(
            &mut c,
            "SELECT count(*) FROM public.occ_probe_done WHERE pid = $1",
            &[&pid],
        );
        assert!(mine > 0, "process {pid} did no work");
    }
}
