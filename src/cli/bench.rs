//! `occ-worker bench` (hidden; run it through `scripts/bench-queue`): the queue benchmark.
//!
//! Three measurements, each in a fresh database created from the admin URL, migrated and
//! bootstrapped here and dropped afterwards: drain throughput with the `Noop` reconciler at
//! several concurrencies; enqueue-to-claim latency of single works arriving at an idle worker
//! (the LISTEN/NOTIFY path, the poll left at 250 ms); and the claim's cost as terminal rows
//! pile up. It never touches infrastructure: its Compute Driver refuses every call.

use super::{CliError, Globals};
use clap::Args;
use occ_worker::cancel::CancelToken;
use occ_worker::compute::{
    AgentSpec, ComputeDriver, ComputeError, NamespaceObservation, NamespaceSpec, PreflightWarning,
    RevisionObservation, RevisionSpec,
};
use occ_worker::events::Events;
use occ_worker::metrics::Metrics;
use occ_worker::queue::{self, NewWork, QueueOptions};
use occ_worker::reconcile::{probe, Context, Pass, PassError, Reconciler, Registry, Report};
use occ_worker::runtime::{RuntimeOptions, Worker};
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLAIM: &str = include_str!("../../sql/queries/work_claim.sql");

#[derive(Args)]
pub struct BenchArgs {
    /// Works drained per concurrency level.
    #[arg(long, default_value_t = 20_000)]
    works: i64,
    /// Concurrency levels of the drain measurement.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    concurrency: Vec<usize>,
    /// Single works of the latency measurement.
    #[arg(long, default_value_t = 200)]
    latency_samples: usize,
    /// Terminal rows of the large table in the claim-cost measurement.
    #[arg(long, default_value_t = 1_000_000)]
    terminal_rows: i64,
    /// Claim+complete cycles per table size in the claim-cost measurement.
    #[arg(long, default_value_t = 500)]
    cycles: usize,
}

/// A database failure with the step it happened in.
fn step(what: &'static str) -> impl Fn(postgres::Error) -> CliError {
    move |e| CliError::new(format!("bench {what}: {}", super::admin::db_message(&e)))
}

const TIMEOUT: Duration = Duration::from_secs(60);
const LEASE: Duration = Duration::from_secs(30);

/// A fresh, migrated, bootstrapped database; dropped with this value.
struct BenchDb {
    admin: String,
    name: String,
    url: String,
}

impl BenchDb {
    fn create(admin: &str, tag: &str) -> Result<BenchDb, CliError> {
        let name = format!("occ_bench_{}_{tag}", std::process::id());
        let mut client = occ_worker::db::connect(admin, TIMEOUT)?;
        client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .map_err(step("create database"))?;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(step("create database"))?;
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(admin);
        let db = BenchDb {
            admin: admin.to_string(),
            url: format!("{base}/{name}"),
            name,
        };
        let mut c = db.client()?;
        occ_worker::migrate::run(&mut c)?;
        c.execute("SELECT occ.bootstrap('bench', 'admin')", &[])
            .map_err(step("bootstrap"))?;
        Ok(db)
    }

    fn client(&self) -> Result<Client, CliError> {
        Ok(occ_worker::db::connect(&self.url, TIMEOUT)?)
    }
}

impl Drop for BenchDb {
    fn drop(&mut self) {
        if let Ok(mut c) = occ_worker::db::connect(&self.admin, TIMEOUT) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

fn context(db: &BenchDb, concurrency: usize) -> Result<Arc<Context>, CliError> {
    Ok(Arc::new(Context {
        pool: occ_worker::db::pool(&db.url, TIMEOUT, concurrency as u32 * 2 + 4)?,
        compute: Arc::new(Unused),
        installation_id: "bench".into(),
        queue: QueueOptions::new(LEASE, 5),
        convergence_timeout: Duration::from_secs(900),
        events: Events::discard(),
        metrics: Metrics::new(),
    }))
}

fn options(db: &BenchDb, concurrency: usize) -> RuntimeOptions {
    RuntimeOptions {
        concurrency,
        poll_interval: Duration::from_millis(250),
        shutdown_grace: Duration::from_secs(10),
        listen_url: Some(db.url.clone()),
        db_timeout: TIMEOUT,
    }
}

fn noop_registry(reconciler: Arc<dyn Reconciler>) -> Registry {
    queue::Operation::ALL
        .into_iter()
        .fold(Registry::new(), |r, op| r.with(op, reconciler.clone()))
}

fn count(c: &mut Client, sql: &str) -> Result<i64, CliError> {
    Ok(c.query_one(sql, &[])?.get(0))
}

/// (1) Drains `works` Namespace deletions over 1,000 lanes, interleaved so the queue's head
/// holds distinct lanes; returns works per second.
fn drain(admin: &str, works: i64, concurrency: usize) -> Result<Value, CliError> {
    let db = BenchDb::create(admin, &format!("drain{concurrency}"))?;
    let mut c = db.client()?;
    let lanes = works.clamp(1, 1000);
    c.batch_execute(&format!(
        "INSERT INTO occ.namespaces_all (id, name, status, created_by)
         SELECT 'n' || l, 'n' || l, 'ready', 'admin' FROM generate_series(1, {lanes}) l;
         INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
         SELECT format('namespace:n%s:delete:%s', i % {lanes} + 1, i / {lanes} + 1),
                'n' || (i % {lanes} + 1), 'deleted', 'admin'
         FROM generate_series(0, {works} - 1) i ORDER BY i"
    ))
    .map_err(step("drain fill"))?;
    c.batch_execute("VACUUM ANALYZE occ.work")
        .map_err(step("vacuum"))?;
    let worker = Worker::new(
        context(&db, concurrency)?,
        noop_registry(Arc::new(probe::Noop)),
        options(&db, concurrency),
    );
    let stop = worker.stop_handle();
    let started = Instant::now();
    let running = std::thread::spawn(move || worker.run());
    let pending = "SELECT count(*) FROM occ.work WHERE state IN ('queued', 'claimed')";
    while count(&mut c, pending)? > 0 {
        std::thread::sleep(Duration::from_millis(20));
        if started.elapsed() > Duration::from_secs(600) {
            break;
        }
    }
    let elapsed = started.elapsed();
    stop.stop();
    running
        .join()
        .map_err(|_| CliError::new("bench worker panicked"))??;
    let done = count(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE state = 'succeeded'",
    )?;
    Ok(json!({
        "concurrency": concurrency,
        "works": done,
        "seconds": round(elapsed.as_secs_f64(), 2),
        "worksPerSecond": round(done as f64 / elapsed.as_secs_f64(), 0),
    }))
}

/// Wraps `Noop`, reporting when each pass started.
struct Stamped {
    inner: probe::Noop,
    started: crossbeam_channel::Sender<(i64, Instant)>,
}

impl Reconciler for Stamped {
    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let _ = self.started.send((pass.claim.id, Instant::now()));
        self.inner.reconcile(pass)
    }

    fn publish(
        &self,
        tx: &mut occ_worker::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError> {
        self.inner.publish(tx, pass, report)
    }
}

/// (2) Enqueue-to-claim latency of single works arriving one at a time at an idle worker.
fn latency(admin: &str, samples: usize) -> Result<Value, CliError> {
    let db = BenchDb::create(admin, "latency")?;
    let mut c = db.client()?;
    c.batch_execute(
        "INSERT INTO occ.namespaces_all (id, name, status, created_by) VALUES ('n1', 'n1', 'ready', 'admin')",
    ).map_err(step("latency setup"))?;
    let (tx, rx) = crossbeam_channel::unbounded();
    let worker = Worker::new(
        context(&db, 4)?,
        noop_registry(Arc::new(Stamped {
            inner: probe::Noop,
            started: tx,
        })),
        options(&db, 4),
    );
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run());
    std::thread::sleep(Duration::from_millis(500));
    let mut micros = Vec::with_capacity(samples);
    for n in 1..=samples {
        // Idle first: the previous pass is done and its wake-ups are spent.
        std::thread::sleep(Duration::from_millis(20));
        let work = NewWork::namespace_delete("n1", Some(n as u32), "admin");
        let sent = Instant::now();
        let id = queue::work_enqueue(&mut c, &work)?.id;
        let (claimed_id, at) = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| CliError::new("a single work was not claimed within 10 s"))?;
        if claimed_id != id {
            return Err(CliError::new(
                "the latency worker claimed an unexpected work",
            ));
        }
        micros.push(at.duration_since(sent).as_micros() as u64);
        let done = "SELECT count(*) FROM occ.work WHERE state IN ('queued', 'claimed')";
        while count(&mut c, done)? > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    stop.stop();
    running
        .join()
        .map_err(|_| CliError::new("bench worker panicked"))??;
    micros.sort_unstable();
    Ok(json!({
        "samples": micros.len(),
        "pollIntervalMs": 250,
        "p50Ms": round(percentile(&micros, 50.0) as f64 / 1000.0, 2),
        "p99Ms": round(percentile(&micros, 99.0) as f64 / 1000.0, 2),
        "maxMs": round(*micros.last().unwrap_or(&0) as f64 / 1000.0, 2),
    }))
}

/// (3) The claim's cost with `small` and then `large` terminal rows in the table: timed
/// claim+complete cycles and the claim's plan with buffers.
fn claim_cost(admin: &str, small: i64, large: i64, cycles: usize) -> Result<Value, CliError> {
    let db = BenchDb::create(admin, "claimcost")?;
    let mut c = db.client()?;
    c.batch_execute(
        "INSERT INTO occ.namespaces_all (id, name, status, created_by)
         SELECT 'n' || l, 'n' || l, 'ready', 'admin' FROM generate_series(1, 1000) l",
    )
    .map_err(step("claim-cost setup"))?;
    let mut results = Vec::new();
    let mut have = 0;
    let mut next_key = 0i64;
    for target in [small, large] {
        let fill = Instant::now();
        c.batch_execute(&format!(
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id,
                 state, attempt_count, reason_code, completed_at)
             SELECT format('namespace:n%s:delete:%s', i % 1000 + 1, i / 1000 + 1),
                    'n' || (i % 1000 + 1), 'deleted', 'admin', 'succeeded', 1, 'DONE', now()
             FROM generate_series({have}, {target} - 1) i"
        ))
        .map_err(step("claim-cost fill"))?;
        c.batch_execute("VACUUM ANALYZE occ.work")
            .map_err(step("vacuum"))?;
        let fill_seconds = fill.elapsed().as_secs_f64();
        have = target;
        let opts = QueueOptions::new(LEASE, 5);
        let mut claim_us = Vec::with_capacity(cycles);
        let started = Instant::now();
        for _ in 0..cycles {
            next_key += 1;
            let work = NewWork::namespace_delete("n1", Some(10_000_000 + next_key as u32), "admin");
            queue::work_enqueue(&mut c, &work)?;
            let t = Instant::now();
            let claim = queue::work_claim(&mut c, &opts)?
                .ok_or_else(|| CliError::new("claim-cost: nothing to claim"))?;
            claim_us.push(t.elapsed().as_micros() as u64);
            queue::work_complete(&mut c, &claim, "DONE", None)?;
        }
        let cycle_ms = started.elapsed().as_secs_f64() * 1000.0 / cycles as f64;
        claim_us.sort_unstable();
        queue::work_enqueue(
            &mut c,
            &NewWork::namespace_delete("n2", Some(20_000_000), "admin"),
        )?;
        let plan = explain_claim(&mut c)?;
        let rows = count(&mut c, "SELECT count(*) FROM occ.work")?;
        results.push(json!({
            "rows": rows,
            "fillSeconds": round(fill_seconds, 1),
            "cycles": cycles,
            "cycleMs": round(cycle_ms, 3),
            "claimP50Ms": round(percentile(&claim_us, 50.0) as f64 / 1000.0, 3),
            "claimP99Ms": round(percentile(&claim_us, 99.0) as f64 / 1000.0, 3),
            "explain": plan,
        }));
    }
    Ok(Value::Array(results))
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of the claim, rolled back: execution time and buffers.
fn explain_claim(c: &mut Client) -> Result<Value, CliError> {
    let mut tx = c.transaction()?;
    let sql = format!(
        "EXPLAIN (ANALYZE, BUFFERS) {}",
        CLAIM.replace("$1::bigint", "30000::bigint")
    );
    let lines: Vec<String> = tx
        .simple_query(&sql)?
        .into_iter()
        .filter_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .collect();
    tx.rollback()?;
    let buffers = lines
        .iter()
        .find(|l| l.trim_start().starts_with("Buffers:"))
        .map(|l| l.trim().to_string());
    let execution = lines
        .iter()
        .find(|l| l.starts_with("Execution Time"))
        .map(|l| l.trim().to_string());
    Ok(json!({"buffers": buffers, "execution": execution}))
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn round(v: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (v * f).round() / f
}

pub fn run(globals: &Globals, args: BenchArgs) -> Result<(), CliError> {
    let admin = globals.database_url()?;
    let mut drains = Vec::new();
    for &c in &args.concurrency {
        let r = drain(&admin, args.works, c)?;
        if !globals.json {
            println!(
                "drain   concurrency={:<3} works={} seconds={} works/s={}",
                c, r["works"], r["seconds"], r["worksPerSecond"]
            );
        }
        drains.push(r);
    }
    let lat = latency(&admin, args.latency_samples)?;
    if !globals.json {
        println!(
            "latency enqueue->claim, idle worker, poll 250 ms: samples={} p50={} ms p99={} ms max={} ms",
            lat["samples"], lat["p50Ms"], lat["p99Ms"], lat["maxMs"]
        );
    }
    let cost = claim_cost(&admin, 1_000, args.terminal_rows, args.cycles)?;
    if !globals.json {
        for r in cost.as_array().into_iter().flatten() {
            println!(
                "claim   rows={:<8} claim+complete cycle={} ms claim p50={} ms p99={} ms | EXPLAIN: {} ; {}",
                r["rows"],
                r["cycleMs"],
                r["claimP50Ms"],
                r["claimP99Ms"],
                r["explain"]["execution"].as_str().unwrap_or("-"),
                r["explain"]["buffers"].as_str().unwrap_or("-"),
            );
        }
    }
    if globals.json {
        globals.print(&json!({"drain": drains, "latency": lat, "claimCost": cost}));
    }
    Ok(())
}

/// The benchmark's Compute Driver: `Noop` never calls it, and every call is refused.
struct Unused;

fn unused<T>() -> Result<T, ComputeError> {
    Err(ComputeError::permanent(
        "BENCH_DRIVER_UNUSED",
        "bench",
        None,
    ))
}

impl ComputeDriver for Unused {
    fn id(&self) -> &str {
        "bench"
    }
    fn implementation(&self) -> &str {
        "bench"
    }
    fn preflight(&self, _c: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError> {
        Ok(Vec::new())
    }
    fn ensure_namespace(
        &self,
        _n: &NamespaceSpec,
        _c: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        unused()
    }
    fn delete_namespace(
        &self,
        _n: &NamespaceSpec,
        _c: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        unused()
    }
    fn prepare_revision(
        &self,
        _r: &RevisionSpec,
        _c: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        unused()
    }
    fn deactivate_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        unused()
    }
    fn bind_agent(&self, _a: &AgentSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        unused()
    }
    fn activate_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        unused()
    }
    fn stop_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        unused()
    }
    fn retire_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        unused()
    }
    fn delete_agent_runtime_credentials(
        &self,
        _a: &AgentSpec,
        _c: &CancelToken,
    ) -> Result<(), ComputeError> {
        unused()
    }
    fn requires_stopped_predecessors(&self, _r: &RevisionSpec) -> bool {
        false
    }
}
