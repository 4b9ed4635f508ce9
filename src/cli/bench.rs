//! `occ-worker bench` (hidden; run it through `scripts/bench-queue`): the queue benchmark.
//!
//! Each measurement runs in a fresh database created from the admin URL, migrated and
//! bootstrapped here and dropped afterwards: drain throughput with the `Noop` reconciler at
//! several concurrencies, next to PostgreSQL's own ceiling for the same work measured with
//! pgbench on the same server (single-row and batched claim+complete scripts), and paired with
//! the single-row ceiling measured right before each drain (`paired`); enqueue-to-claim
//! latency of single works arriving at an idle worker (the LISTEN/NOTIFY path, the poll left at
//! 250 ms); the claim's cost as terminal rows pile up, with a backlog behind busy lanes, right
//! after a burst of completions and with future-dated works; admission throughput
//! with wake-ups on and off; and an idle worker process's CPU and RSS. It never touches
//! infrastructure: its Compute Driver refuses every call.

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
use occ_worker::runtime::{RuntimeOptions, Worker, MAX_BATCH};
use postgres::Client;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLAIM: &str = include_str!("../../sql/queries/work_claim.sql");
const COMPLETE_BATCH: &str = include_str!("../../sql/queries/work_complete_batch.sql");
const LOCK_CLAIMS: &str = include_str!("../../sql/queries/work_lock_claims.sql");

#[derive(Args)]
pub struct BenchArgs {
    /// Works drained per concurrency level.
    #[arg(long, default_value_t = 20_000)]
    works: i64,
    /// Concurrency levels of the drain measurement.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
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
    /// Queued works behind the heads of 100 busy lanes.
    #[arg(long, default_value_t = 100_000)]
    backlog: i64,
    /// Works completed before the claim is measured again, without a manual vacuum.
    #[arg(long, default_value_t = 200_000)]
    completed: i64,
    /// Future-dated works in the table while the claim is measured.
    #[arg(long, default_value_t = 100_000)]
    future: i64,
    /// Seconds of each admission run (16 sessions calling `occ.namespace_create`).
    #[arg(long, default_value_t = 10)]
    admission_seconds: u64,
    /// Seconds the idle worker process is watched.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Seconds of each pgbench ceiling run.
    #[arg(long, default_value_t = 5)]
    pgbench_seconds: u64,
    /// Drains at each of these concurrencies paired with the bare single-row ceiling measured
    /// right before each (the `paired` measurement).
    #[arg(long, value_delimiter = ',', default_value = "16")]
    paired_concurrency: Vec<usize>,
    /// Pairs per concurrency of the `paired` measurement.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// The pgbench binary (found on PATH when absent); no ceilings without one.
    #[arg(long)]
    pgbench: Option<PathBuf>,
    /// Which measurements to run (all by default).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ceilings,drain,paired,latency,claim,admission,idle"
    )]
    only: Vec<String>,
    /// Internal: run an idle worker against this database for the idle measurement's child.
    #[arg(long, hide = true)]
    idle_child: Option<String>,
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
        // Sized as `occ-worker run` sizes it (docs/operating.md, "Connection budget").
        pool: occ_worker::db::pool(
            &db.url,
            TIMEOUT,
            occ_worker::runtime::budget::ConnectionBudget::new(concurrency).pool_size(),
        )?,
        compute: Arc::new(Unused),
        installation_id: "bench".into(),
        queue: QueueOptions::new(LEASE, 5),
        convergence_timeout: Duration::from_secs(900),
        events: Events::discard(),
        metrics: Metrics::new(),
    }))
}

fn options(db: &BenchDb, concurrency: usize) -> RuntimeOptions {
    options_for(&db.url, concurrency)
}

fn options_for(url: &str, concurrency: usize) -> RuntimeOptions {
    RuntimeOptions {
        concurrency,
        poll_interval: Duration::from_millis(250),
        shutdown_grace: Duration::from_secs(10),
        listen_url: Some(url.to_string()),
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
    namespaces(&mut c, "n", lanes)?;
    c.batch_execute(&deletions("n", lanes, 1, 0, works - 1, NOW))
        .map_err(step("drain fill"))?;
    c.batch_execute("VACUUM ANALYZE occ.work")
        .map_err(step("vacuum"))?;
    let worker = Worker::new(
        context(&db, concurrency)?,
        noop_registry(Arc::new(probe::Noop)),
        options(&db, concurrency),
    );
    let stop = worker.stop_handle();
    let cpu_before = (machine_busy_ticks(), process_ticks("self"));
    let started = Instant::now();
    let running = std::thread::spawn(move || worker.run());
    // Lanes with queued work, claimed or not (a claimed work stays queued, the head of its
    // lane; V11/V14's lane rows, a thousand of them): a count over `occ.work` would itself
    // take a share of this two-core machine while it is measured.
    let pending = "SELECT count(*) FROM occ.work_lanes WHERE head_id IS NOT NULL";
    while count(&mut c, pending)? > 0 {
        std::thread::sleep(Duration::from_millis(20));
        if started.elapsed() > Duration::from_secs(600) {
            break;
        }
    }
    let elapsed = started.elapsed();
    let cpu_after = (machine_busy_ticks(), process_ticks("self"));
    stop.stop();
    running
        .join()
        .map_err(|_| CliError::new("bench worker panicked"))??;
    let done = count(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE state = 'succeeded'",
    )?;
    // CPU per work while the queue drained, in ms: the whole machine's (PostgreSQL, this
    // process and anything else running) and this process's (the worker; the bench's own
    // 20 ms count is a small share of it).
    let per_work = |a: Option<u64>, b: Option<u64>| {
        let ticks = b?.checked_sub(a?)?;
        Some(round(
            ticks as f64 * 1000.0 / clock_ticks() / done.max(1) as f64,
            3,
        ))
    };
    Ok(json!({
        "concurrency": concurrency,
        "works": done,
        "seconds": round(elapsed.as_secs_f64(), 2),
        "worksPerSecond": round(done as f64 / elapsed.as_secs_f64(), 0),
        "machineCpuMsPerWork": per_work(cpu_before.0, cpu_after.0),
        "workerCpuMsPerWork": per_work(cpu_before.1, cpu_after.1),
    }))
}

/// Clock ticks per second (`/proc`'s CPU time unit).
fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// The machine's busy CPU time so far, in clock ticks, all cores (`/proc/stat`: every state
/// but idle and iowait).
fn machine_busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal ...
    Some(cpu.iter().take(8).sum::<u64>() - cpu.get(3)? - cpu.get(4)?)
}

/// A process's CPU time so far (user and system), in clock ticks; `pid` as `/proc` names it
/// (`self` for this one).
fn process_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Wraps `Noop`, reporting when each pass started, and how long after its report was handed
/// over its publication ran (inside the publishing transaction, its claim locked: the
/// batching delay, the transaction's BEGIN and the lock included).
struct Stamped {
    inner: probe::Noop,
    started: crossbeam_channel::Sender<(i64, Instant)>,
    handed_over: parking_lot::Mutex<std::collections::HashMap<i64, Instant>>,
    published: crossbeam_channel::Sender<Duration>,
}

impl Reconciler for Stamped {
    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let _ = self.started.send((pass.claim.id, Instant::now()));
        let report = self.inner.reconcile(pass);
        self.handed_over
            .lock()
            .insert(pass.claim.id, Instant::now());
        report
    }

    fn publish(
        &self,
        tx: &mut occ_worker::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError> {
        if let Some(at) = self.handed_over.lock().remove(&pass.claim.id) {
            let _ = self.published.send(at.elapsed());
        }
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
    let (published_tx, published) = crossbeam_channel::unbounded();
    let worker = Worker::new(
        context(&db, 4)?,
        noop_registry(Arc::new(Stamped {
            inner: probe::Noop,
            started: tx,
            handed_over: Default::default(),
            published: published_tx,
        })),
        options(&db, 4),
    );
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run());
    std::thread::sleep(Duration::from_millis(500));
    let mut micros = Vec::with_capacity(samples);
    // From the enqueue's commit (its fsync excluded) to the pass starting.
    let mut from_commit = Vec::with_capacity(samples);
    for n in 1..=samples {
        // Idle first: the previous pass is done and its wake-ups are spent.
        std::thread::sleep(Duration::from_millis(20));
        let work = NewWork::namespace_delete("n1", Some(n as u32), "admin");
        let sent = Instant::now();
        let id = queue::work_enqueue(&mut c, &work)?.id;
        let committed = Instant::now();
        let (claimed_id, at) = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| CliError::new("a single work was not claimed within 10 s"))?;
        if claimed_id != id {
            return Err(CliError::new(
                "the latency worker claimed an unexpected work",
            ));
        }
        micros.push(at.duration_since(sent).as_micros() as u64);
        from_commit.push(at.saturating_duration_since(committed).as_micros() as u64);
        let done = "SELECT count(*) FROM occ.work WHERE state = 'queued'";
        while count(&mut c, done)? > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    stop.stop();
    running
        .join()
        .map_err(|_| CliError::new("bench worker panicked"))??;
    micros.sort_unstable();
    from_commit.sort_unstable();
    let mut to_publish: Vec<u64> = published.try_iter().map(|d| d.as_micros() as u64).collect();
    to_publish.sort_unstable();
    Ok(json!({
        "handOverSamples": to_publish.len(),
        "p50HandOverToPublishMs": round(percentile(&to_publish, 50.0) as f64 / 1000.0, 2),
        "p99HandOverToPublishMs": round(percentile(&to_publish, 99.0) as f64 / 1000.0, 2),
        "p50FromCommitMs": round(percentile(&from_commit, 50.0) as f64 / 1000.0, 2),
        "p99FromCommitMs": round(percentile(&from_commit, 99.0) as f64 / 1000.0, 2),
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
        let mut r = claim_probe(&mut c, cycles)?;
        r["rows"] = json!(count(&mut c, "SELECT count(*) FROM occ.work")?);
        r["fillSeconds"] = json!(round(fill_seconds, 1));
        results.push(r);
    }
    Ok(Value::Array(results))
}

/// Timed claim+complete cycles of single works in a free lane (`probe`, a Namespace of its
/// own), the claim asking for up to 16 works as a worker with 16 free slots does; then the
/// claim's plan with buffers while one work is claimable.
fn claim_probe(c: &mut Client, cycles: usize) -> Result<Value, CliError> {
    c.batch_execute(
        "INSERT INTO occ.namespaces_all (id, name, status, created_by)
         VALUES ('probe', 'probe', 'ready', 'admin') ON CONFLICT DO NOTHING",
    )
    .map_err(step("claim probe setup"))?;
    let base: i64 = count(
        c,
        "SELECT count(*) FROM occ.work WHERE namespace_id = 'probe'",
    )?;
    let opts = QueueOptions::new(LEASE, 5);
    let mut claim_us = Vec::with_capacity(cycles);
    let started = Instant::now();
    for n in 0..cycles as i64 {
        let work = NewWork::namespace_delete("probe", Some((base + n + 1) as u32), "admin");
        queue::work_enqueue(c, &work)?;
        let t = Instant::now();
        let claims = queue::work_claim_batch(c, &opts, 16)?;
        claim_us.push(t.elapsed().as_micros() as u64);
        let [claim] = claims.as_slice() else {
            return Err(CliError::new(format!(
                "claim probe: expected the probe's one work, claimed {}",
                claims.len()
            )));
        };
        queue::work_complete(c, claim, "DONE", None)?;
    }
    let cycle_ms = started.elapsed().as_secs_f64() * 1000.0 / cycles.max(1) as f64;
    claim_us.sort_unstable();
    queue::work_enqueue(
        c,
        &NewWork::namespace_delete("probe", Some((base + cycles as i64 + 1) as u32), "admin"),
    )?;
    let plan = explain_claim(c)?;
    Ok(json!({
        "cycles": cycles,
        "cycleMs": round(cycle_ms, 3),
        "claimP50Ms": round(percentile(&claim_us, 50.0) as f64 / 1000.0, 3),
        "claimP99Ms": round(percentile(&claim_us, 99.0) as f64 / 1000.0, 3),
        "explain": plan,
    }))
}

/// `p50 after / p50 before`, the ratio the claim measurements report.
fn ratio(after: &Value, before: &Value) -> f64 {
    let a = after["claimP50Ms"].as_f64().unwrap_or(0.0);
    let b = before["claimP50Ms"].as_f64().unwrap_or(0.0);
    if b > 0.0 {
        round(a / b, 2)
    } else {
        0.0
    }
}

/// Runs `sql(lo, hi)` for `i` in `0..total`, 10,000 at a time, each chunk its own
/// transaction (a statement stays well within the statement timeout).
fn fill_chunks(
    c: &mut Client,
    total: i64,
    what: &'static str,
    sql: impl Fn(i64, i64) -> String,
) -> Result<(), CliError> {
    let mut lo = 0;
    while lo < total {
        let hi = (lo + 10_000).min(total) - 1;
        c.batch_execute(&sql(lo, hi)).map_err(step(what))?;
        lo = hi + 1;
    }
    Ok(())
}

/// Due now: the works' own default.
const NOW: &str = "clock_timestamp()";

/// The statement inserting Namespace deletions number `lo..=hi`, spread over the Namespaces
/// `{prefix}1` to `{prefix}{lanes}` (one lane each) in turn: work `i` deletes Namespace
/// `i % lanes + 1` for the `(first + i / lanes)`th time and is due at `due` (SQL of `i`).
fn deletions(prefix: &str, lanes: i64, first: i64, lo: i64, hi: i64, due: &str) -> String {
    format!(
        "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, available_at)
         SELECT format('namespace:{prefix}%s:delete:%s', i % {lanes} + 1, {first} + i / {lanes}),
                '{prefix}' || (i % {lanes} + 1), 'deleted', 'admin', {due}
         FROM generate_series({lo}, {hi}) i ORDER BY i"
    )
}

/// Namespaces `<prefix>1..=<n>`, ready.
fn namespaces(c: &mut Client, prefix: &str, n: i64) -> Result<(), CliError> {
    c.batch_execute(&format!(
        "INSERT INTO occ.namespaces_all (id, name, status, created_by)
         SELECT '{prefix}' || l, '{prefix}' || l, 'ready', 'admin' FROM generate_series(1, {n}) l"
    ))
    .map_err(step("namespaces"))
}

/// (4) Claim cost with no queued work, then with `backlog` works queued behind the claimed
/// heads of 100 busy lanes (Q4).
fn claim_busy_lanes(admin: &str, backlog: i64, cycles: usize) -> Result<Value, CliError> {
    let db = BenchDb::create(admin, "busylanes")?;
    let mut c = db.client()?;
    namespaces(&mut c, "b", 100)?;
    c.batch_execute(
        "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
         SELECT format('namespace:b%s:delete', l), 'b' || l, 'deleted', 'admin'
         FROM generate_series(1, 100) l",
    )
    .map_err(step("busy lanes"))?;
    let heads = queue::work_claim_batch(&mut c, &QueueOptions::new(LEASE * 100, 5), 100)?;
    if heads.len() != 100 {
        return Err(CliError::new(
            "busy lanes: the 100 heads were not all claimed",
        ));
    }
    c.batch_execute("ANALYZE occ.work; ANALYZE occ.work_lanes")
        .map_err(step("analyze"))?;
    let before = claim_probe(&mut c, cycles)?;
    let per_lane = (backlog / 100).max(1);
    let fill = Instant::now();
    fill_chunks(&mut c, per_lane * 100, "busy-lane backlog", |lo, hi| {
        deletions("b", 100, 1, lo, hi, NOW)
    })?;
    c.batch_execute("ANALYZE occ.work; ANALYZE occ.work_lanes")
        .map_err(step("analyze"))?;
    let fill_seconds = fill.elapsed().as_secs_f64();
    let after = claim_probe(&mut c, cycles)?;
    Ok(json!({
        "busyLanes": 100,
        "queued0": before,
        "queuedBacklog": {"queued": per_lane * 100, "fillSeconds": round(fill_seconds, 1), "probe": after},
        "ratio": ratio(&after, &before),
    }))
}

/// (5) Claim cost in a fresh table, then right after `completed` works were claimed and
/// completed (in batches of 1,000, through the worker's own statements), before any manual
/// vacuum.
fn claim_after_completions(admin: &str, completed: i64, cycles: usize) -> Result<Value, CliError> {
    let db = BenchDb::create(admin, "completed")?;
    let mut c = db.client()?;
    namespaces(&mut c, "n", 1000)?;
    let before = claim_probe(&mut c, cycles)?;
    let fill = Instant::now();
    fill_chunks(&mut c, completed, "completions fill", |lo, hi| {
        deletions("n", 1000, 1, lo, hi, NOW)
    })?;
    let opts = QueueOptions::new(LEASE, 5);
    let mut done = 0i64;
    loop {
        let claims = queue::work_claim_batch(&mut c, &opts, 1000)?;
        if claims.is_empty() {
            break;
        }
        let mut tx = c.transaction()?;
        for claim in &claims {
            queue::work_complete(&mut tx, claim, "DONE", None)?;
        }
        tx.commit()?;
        done += claims.len() as i64;
    }
    let drain_seconds = fill.elapsed().as_secs_f64();
    let after = claim_probe(&mut c, cycles)?;
    Ok(json!({
        "fresh": before,
        "afterCompleted": {"completed": done, "seconds": round(drain_seconds, 1), "probe": after},
        "ratio": ratio(&after, &before),
    }))
}

/// (6) Claim cost in a fresh table, then with `future` works due in an hour or more, spread
/// over 10,000 lanes (Q4).
fn claim_with_future(admin: &str, future: i64, cycles: usize) -> Result<Value, CliError> {
    let db = BenchDb::create(admin, "future")?;
    let mut c = db.client()?;
    namespaces(&mut c, "f", 10_000)?;
    let before = claim_probe(&mut c, cycles)?;
    let fill = Instant::now();
    fill_chunks(&mut c, future, "future fill", |lo, hi| {
        deletions(
            "f",
            10_000,
            1,
            lo,
            hi,
            "clock_timestamp() + interval '1 hour' + i * interval '1 ms'",
        )
    })?;
    c.batch_execute("ANALYZE occ.work; ANALYZE occ.work_lanes")
        .map_err(step("analyze"))?;
    let fill_seconds = fill.elapsed().as_secs_f64();
    let after = claim_probe(&mut c, cycles)?;
    Ok(json!({
        "fresh": before,
        "futureDated": {"works": future, "fillSeconds": round(fill_seconds, 1), "probe": after},
        "ratio": ratio(&after, &before),
    }))
}

/// (7) `occ.namespace_create` from 16 sessions for `seconds`, with the wake-up trigger on,
/// then off (disabled); a LISTEN session is connected throughout (Q13).
fn admission(admin: &str, seconds: u64) -> Result<Value, CliError> {
    let db = BenchDb::create(admin, "admission")?;
    let mut listener = db.client()?;
    listener
        .batch_execute("LISTEN occ_work")
        .map_err(step("listen"))?;
    // Works per second with wake-ups on and off, each the mean of two runs in the order
    // off, on, on, off, so a drift over the measurement (a table and its indexes growing, the
    // first run's cold start) weighs on both alike.
    let (mut on, mut off) = (0.0, 0.0);
    for (round, wakeups) in [(0, false), (1, true), (2, true), (3, false)] {
        db.client()?
            .batch_execute(if wakeups {
                "ALTER TABLE occ.work ENABLE TRIGGER work_notify"
            } else {
                "ALTER TABLE occ.work DISABLE TRIGGER work_notify"
            })
            .map_err(step("wake-up trigger"))?;
        let until = Instant::now() + Duration::from_secs(seconds);
        let started = Instant::now();
        let sessions: Vec<_> = (0..16)
            .map(|s| {
                let url = db.url.clone();
                std::thread::spawn(move || -> Result<u64, CliError> {
                    let mut c = occ_worker::db::connect(&url, TIMEOUT)?;
                    let mut n = 0u64;
                    while Instant::now() < until {
                        c.execute(
                            "SELECT occ.namespace_create('admin', $1)",
                            &[&format!("r{round}s{s}n{n}")],
                        )
                        .map_err(step("namespace_create"))?;
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .collect();
        let mut total = 0;
        for s in sessions {
            total += s
                .join()
                .map_err(|_| CliError::new("an admission session panicked"))??;
        }
        let elapsed = started.elapsed().as_secs_f64();
        // Keep the listener's socket drained.
        let _ = postgres::fallible_iterator::FallibleIterator::count(
            listener
                .notifications()
                .timeout_iter(Duration::from_millis(10)),
        );
        let rate = total as f64 / elapsed / 2.0;
        if wakeups {
            on += rate;
        } else {
            off += rate;
        }
    }
    Ok(json!({
        "sessions": 16,
        "seconds": seconds,
        "wakeupsOnPerSecond": round_to(on, 0),
        "wakeupsOffPerSecond": round_to(off, 0),
        "ratio": if off > 0.0 { round(on / off, 2) } else { 0.0 },
    }))
}

fn round_to(v: f64, places: i32) -> f64 {
    round(v, places)
}

/// (8) An idle worker process (this binary, `bench --idle-child`, concurrency 16, poll
/// 250 ms, LISTEN connected): its CPU time and RSS over `seconds`, from `/proc`.
fn idle(admin: &str, seconds: u64) -> Result<Value, CliError> {
    let db = BenchDb::create(admin, "idle")?;
    let exe = std::env::current_exe().map_err(|e| CliError::new(format!("idle: {e}")))?;
    let mut child = std::process::Command::new(exe)
        .args(["bench", "--database-url", &db.url, "--idle-child", &db.url])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| CliError::new(format!("idle: cannot start the worker: {e}")))?;
    let pid = child.id();
    // Past start-up: migrations are done, the pool and the listener are connected.
    std::thread::sleep(Duration::from_secs(3));
    let rss_kib = |pid: u32| -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let start = process_ticks(&pid.to_string());
    let t0 = Instant::now();
    let mut max_rss = 0;
    while t0.elapsed() < Duration::from_secs(seconds) {
        max_rss = max_rss.max(rss_kib(pid).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(500));
    }
    let end = process_ticks(&pid.to_string());
    let elapsed = t0.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    let hz = clock_ticks();
    let cpu = match (start, end) {
        (Some(a), Some(b)) => (b.saturating_sub(a)) as f64 / hz,
        _ => return Err(CliError::new("idle: the worker process ended early")),
    };
    Ok(json!({
        "seconds": round(elapsed, 1),
        "concurrency": 16,
        "cpuSeconds": round(cpu, 3),
        "cpuPercent": round(cpu * 100.0 / elapsed, 2),
        "maxRssMiB": round(max_rss as f64 / 1024.0, 1),
    }))
}

/// The idle child: a worker with 16 slots on an empty queue, until killed.
fn idle_child(url: &str) -> Result<(), CliError> {
    let ctx = Arc::new(Context {
        pool: occ_worker::db::pool(url, TIMEOUT, 16 * 2 + 4)?,
        compute: Arc::new(Unused),
        installation_id: "bench".into(),
        queue: QueueOptions::new(LEASE, 5),
        convergence_timeout: Duration::from_secs(900),
        events: Events::discard(),
        metrics: Metrics::new(),
    });
    let worker = Worker::new(
        ctx,
        noop_registry(Arc::new(probe::Noop)),
        options_for(url, 16),
    );
    worker
        .run()
        .map_err(|e| CliError::new(format!("idle worker: {e}")))
}

/// The pgbench scripts of PostgreSQL's ceiling: a bare queue table with the same claim shape
/// (oldest queued row, `FOR UPDATE SKIP LOCKED`, a token) and completion (by token), one work
/// per statement or ten.
const PGBENCH_SETUP: &str = "
    DROP TABLE IF EXISTS bench_q;
    CREATE TABLE bench_q (id bigserial PRIMARY KEY, state text NOT NULL DEFAULT 'queued',
                          token bigint NULL, attempts int NOT NULL DEFAULT 0,
                          lease_expires_at timestamptz NULL);
    CREATE INDEX bench_q_queued ON bench_q (id) WHERE state = 'queued';
    CREATE INDEX bench_q_claimed ON bench_q (token) WHERE state = 'claimed';";
const PGBENCH_SINGLE: &str = "\\set tok random(1, 9000000000000)
WITH c AS (SELECT id FROM bench_q WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
UPDATE bench_q q SET state = 'claimed', token = :tok, attempts = q.attempts + 1, lease_expires_at = clock_timestamp() + interval '30 s' FROM c WHERE q.id = c.id;
UPDATE bench_q SET state = 'done', token = NULL, lease_expires_at = NULL WHERE token = :tok AND state = 'claimed' AND lease_expires_at > clock_timestamp();
";
const PGBENCH_BATCHED: &str = "\\set tok random(1, 9000000000000)
WITH c AS (SELECT id FROM bench_q WHERE state = 'queued' ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED)
UPDATE bench_q q SET state = 'claimed', token = :tok, attempts = q.attempts + 1, lease_expires_at = clock_timestamp() + interval '30 s' FROM c WHERE q.id = c.id;
UPDATE bench_q SET state = 'done', token = NULL, lease_expires_at = NULL WHERE token = :tok AND state = 'claimed' AND lease_expires_at > clock_timestamp();
";

/// (0) pgbench ceilings at each concurrency: works per second of the single-row and the
/// batched (10 per statement) claim+complete scripts, each run on a refilled table.
fn ceilings(
    admin: &str,
    pgbench: &std::path::Path,
    levels: &[usize],
    seconds: u64,
) -> Result<Value, CliError> {
    let db = BenchDb::create(admin, "pgbench")?;
    let (dir, scripts) = pgbench_scripts(
        "ceilings",
        &[
            ("single.sql", PGBENCH_SINGLE),
            ("batched.sql", PGBENCH_BATCHED),
        ],
    )?;
    let (single, batched) = (&scripts[0], &scripts[1]);
    let mut c = db.client()?;
    let mut out = Vec::new();
    for &clients in levels {
        let mut row = json!({"clients": clients});
        for (name, script, per) in [("singleRow", single, 1.0), ("batched10", batched, 10.0)] {
            let tps = bare_ceiling(&mut c, &db.url, pgbench, script, clients, seconds)?;
            row[name] = json!(round(tps * per, 0));
        }
        out.push(row);
    }
    let _ = std::fs::remove_dir_all(&dir);
    for (clients, [single, batched, cycle, cycle2]) in
        occ_work_ceilings(admin, pgbench, levels, seconds)?
    {
        if let Some(row) = out
            .iter_mut()
            .find(|r| r["clients"].as_u64() == Some(clients as u64))
        {
            row["occWorkSingleRow"] = json!(single);
            row["occWorkBatched10"] = json!(batched);
            row["occWorkCycle"] = json!(cycle);
            row["occWorkCycleTwoSessions"] = json!(cycle2);
        }
    }
    Ok(Value::Array(out))
}

/// A fresh directory `occ-bench-<tag>-<pid>` under the temporary directory holding the pgbench
/// `scripts` (file name, text), and their paths in order; the caller removes it.
fn pgbench_scripts(
    tag: &str,
    scripts: &[(&str, &str)],
) -> Result<(PathBuf, Vec<PathBuf>), CliError> {
    let dir = std::env::temp_dir().join(format!("occ-bench-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| CliError::new(format!("pgbench dir: {e}")))?;
    let paths = scripts
        .iter()
        .map(|(name, text)| pgbench_script(&dir, name, text))
        .collect::<Result<_, _>>()?;
    Ok((dir, paths))
}

/// Writes one pgbench script `name` into `dir`; its path.
fn pgbench_script(dir: &std::path::Path, name: &str, text: &str) -> Result<PathBuf, CliError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| CliError::new(format!("pgbench scripts: {e}")))?;
    Ok(path)
}

/// Transactions per second of `script` on the bare queue table, refilled and vacuumed first.
fn bare_ceiling(
    c: &mut Client,
    url: &str,
    pgbench: &std::path::Path,
    script: &std::path::Path,
    clients: usize,
    seconds: u64,
) -> Result<f64, CliError> {
    c.batch_execute(PGBENCH_SETUP)
        .map_err(step("pgbench setup"))?;
    c.batch_execute("INSERT INTO bench_q (state) SELECT 'queued' FROM generate_series(1, 600000)")
        .map_err(step("pgbench fill"))?;
    c.batch_execute("VACUUM ANALYZE bench_q")
        .map_err(step("pgbench fill"))?;
    let tps = pgbench_tps(pgbench, script, clients, seconds, url, None)?;
    let done = count(c, "SELECT count(*) FROM bench_q WHERE state = 'done'")?;
    if done as f64 >= 590_000.0 {
        return Err(CliError::new(
            "pgbench drained its whole table: raise the fill",
        ));
    }
    Ok(tps)
}

/// (1b) The drain paired with its ceiling: `pairs` times at each concurrency, the bare
/// single-row ceiling (`bare_ceiling`, that many clients) and right after it the drain, a
/// `CHECKPOINT` before each. On a machine whose speed moves by a third between runs, a ratio
/// of two figures measured minutes apart (the ceilings all come first) says little; the median
/// of ratios measured side by side says what the engine does against the database.
fn paired(
    admin: &str,
    pgbench: &std::path::Path,
    levels: &[usize],
    seconds: u64,
    works: i64,
    pairs: usize,
) -> Result<Value, CliError> {
    let db = BenchDb::create(admin, "paired")?;
    let (dir, scripts) = pgbench_scripts("paired", &[("single.sql", PGBENCH_SINGLE)])?;
    let single = &scripts[0];
    let mut c = db.client()?;
    let mut admin_client = occ_worker::db::connect(admin, TIMEOUT)?;
    let mut checkpoint = || {
        admin_client
            .batch_execute("CHECKPOINT")
            .map_err(step("checkpoint"))
    };
    let mut out = Vec::new();
    for &clients in levels {
        let mut runs = Vec::new();
        for _ in 0..pairs {
            checkpoint()?;
            let ceiling = bare_ceiling(&mut c, &db.url, pgbench, single, clients, seconds)?;
            checkpoint()?;
            let wps = drain(admin, works, clients)?["worksPerSecond"]
                .as_f64()
                .unwrap_or(0.0);
            runs.push(json!({
                "ceilingSingleRow": round(ceiling, 0),
                "worksPerSecond": wps,
                "ratio": round(wps / ceiling.max(1.0), 2),
            }));
        }
        let ratios: Vec<f64> = runs.iter().filter_map(|r| r["ratio"].as_f64()).collect();
        let median = median(ratios);
        out.push(json!({"concurrency": clients, "pairs": runs, "medianRatio": median}));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Value::Array(out))
}

/// The median of `values` (the mean of the middle two for an even count, to two places).
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => None,
        n if n % 2 == 1 => Some(values[n / 2]),
        n => Some(round((values[n / 2 - 1] + values[n / 2]) / 2.0, 2)),
    }
}

/// A statement file without its comment lines.
fn strip_comments(sql: &str) -> String {
    sql.lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The worker's own claim statement for up to `limit` works, as pgbench runs it.
fn own_claim(limit: usize) -> String {
    strip_comments(CLAIM)
        .replace("$1::bigint", "30000::bigint")
        .replace("$2", &limit.to_string())
}

/// The worker's own claim and completion statements as a pgbench script, one work per
/// claim: what PostgreSQL can do for this schema (its checks, indexes and lane trigger)
/// without the worker in between.
fn occ_work_script() -> String {
    format!(
        "{} \\gset\n{};\n",
        claim_into_arrays(1),
        bind_arrays(COMPLETE_BATCH)
    )
}

/// The same, batched as the worker batches: the worker's own claim of up to ten works in one
/// statement, then its batched completion of the works claimed (`work_complete_batch.sql`)
/// in one statement. PostgreSQL's ceiling for this schema's work when batching, with neither
/// the worker's lock statement nor its transactions around them.
fn occ_work_batched_script() -> String {
    format!(
        "{} \\gset\n{};\n",
        claim_into_arrays(10),
        bind_arrays(COMPLETE_BATCH)
    )
}

/// The worker's claim of up to `limit` works, answering the claimed ids and tokens as two
/// arrays for `\gset` (`ids`, `tokens`).
fn claim_into_arrays(limit: usize) -> String {
    let claim = own_claim(limit);
    let last = claim
        .rfind("SELECT id, token")
        .expect("the claim statement ends with its SELECT");
    format!(
        "{}SELECT coalesce(array_agg(id)::text, '{{}}') AS ids, \
         coalesce(array_agg(token)::text, '{{}}') AS tokens FROM claimed",
        &claim[..last]
    )
}

/// A batched statement of the worker (`$1` ids, `$2` tokens, `$3` codes, `$4` result data)
/// bound to the `ids` and `tokens` a claim set: every code `DONE`, no result data.
fn bind_arrays(sql: &str) -> String {
    strip_comments(sql)
        .replace(
            "$3::text[]",
            "array_fill('DONE'::text, ARRAY[cardinality(:ids::bigint[])])",
        )
        .replace(
            "$4::jsonb[]",
            "array_fill(NULL::jsonb, ARRAY[cardinality(:ids::bigint[])])",
        )
        .replace("$1::bigint[]", ":ids::bigint[]")
        .replace("$2::text[]", ":tokens::text[]")
}

/// The worker's publication cycle at concurrency `batch`, as one session runs it: in one
/// transaction, the lock of the works the previous transaction claimed
/// (`work_lock_claims.sql`), their batched completion, and the claim of up to `batch` works
/// (carried to the next transaction). PostgreSQL's ceiling for the coordinator's own serial
/// work at that concurrency, without the pool's threads in between.
fn occ_work_cycle_script(batch: usize) -> String {
    format!(
        "BEGIN;\n{};\n{};\n{} \\gset\nCOMMIT;\n",
        bind_arrays(LOCK_CLAIMS).replace('\n', " "),
        bind_arrays(COMPLETE_BATCH).replace('\n', " "),
        claim_into_arrays(batch)
    )
}

/// pgbench's works per second of the worker's own claim+complete statements on `occ.work`
/// at each concurrency, single-row (`occ_work_script`) and ten per statement
/// (`occ_work_batched_script`), each run on fresh works in 1,000 lanes (20,000 and 60,000),
/// and the publication cycle of that concurrency run by one session
/// (`occ_work_cycle_script`, on 100,000) and by two sessions of half as many works each (as
/// the worker's two publishers share the pool from concurrency 16); every session plans as
/// the worker's do (`db::PLANNER_OPTIONS`).
fn occ_work_ceilings(
    admin: &str,
    pgbench: &std::path::Path,
    levels: &[usize],
    seconds: u64,
) -> Result<Vec<(usize, [f64; 4])>, CliError> {
    let db = BenchDb::create(admin, "pgbenchwork")?;
    let (dir, scripts) = pgbench_scripts(
        "work",
        &[
            ("occ_work.sql", &occ_work_script()),
            ("occ_work_batched.sql", &occ_work_batched_script()),
        ],
    )?;
    let (single, batched) = (&scripts[0], &scripts[1]);
    let mut c = db.client()?;
    namespaces(&mut c, "n", 1000)?;
    let mut out = Vec::new();
    let mut run = 0;
    for &clients in levels {
        let cycle = pgbench_script(
            &dir,
            &format!("occ_work_cycle{clients}.sql"),
            &occ_work_cycle_script(clients.min(MAX_BATCH)),
        )?;
        let half = clients.div_ceil(2).min(MAX_BATCH);
        let cycle2 = pgbench_script(
            &dir,
            &format!("occ_work_cycle{clients}x2.sql"),
            &occ_work_cycle_script(half),
        )?;
        let mut tps = [0.0; 4];
        for (i, (script, sessions, per, fill)) in [
            (single, clients, 1.0, 20_000),
            (batched, clients, 10.0, 60_000),
            (&cycle, 1, clients.min(MAX_BATCH) as f64, 100_000),
            (&cycle2, 2, half as f64, 100_000),
        ]
        .into_iter()
        .enumerate()
        {
            fill_chunks(&mut c, fill, "pgbench occ.work fill", |lo, hi| {
                deletions("n", 1000, run * 100 + 1, lo, hi, NOW)
            })?;
            run += 1;
            c.batch_execute("ANALYZE occ.work; ANALYZE occ.work_lanes")
                .map_err(step("analyze"))?;
            tps[i] = pgbench_tps(
                pgbench,
                script,
                sessions,
                seconds,
                &db.url,
                Some(occ_worker::db::PLANNER_OPTIONS),
            )? * per;
            let left = count(
                &mut c,
                "SELECT count(*) FROM occ.work WHERE state = 'queued'",
            )?;
            if left == 0 {
                return Err(CliError::new(
                    "pgbench drained all of occ.work: raise the fill",
                ));
            }
            c.batch_execute(
                "UPDATE occ.work SET state = 'succeeded', reason_code = 'DONE',
                     completed_at = clock_timestamp()
                 WHERE state = 'queued'",
            )
            .map_err(step("pgbench occ.work reset"))?;
        }
        out.push((clients, tps.map(|t| round(t, 0))));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}

/// Transactions per second of one pgbench run; `options` are its sessions' settings
/// (`PGOPTIONS`).
fn pgbench_tps(
    pgbench: &std::path::Path,
    script: &std::path::Path,
    clients: usize,
    seconds: u64,
    url: &str,
    options: Option<&str>,
) -> Result<f64, CliError> {
    let mut command = std::process::Command::new(pgbench);
    if let Some(options) = options {
        command.env("PGOPTIONS", options);
    }
    let output = command
        .args(["-n", "-M", "prepared", "-T", &seconds.to_string()])
        // The cycle script's claimed works before its first claim: none.
        .args(["-D", "ids={}", "-D", "tokens={}"])
        .args([
            "-c",
            &clients.to_string(),
            "-j",
            &clients.min(4).to_string(),
        ])
        .arg("-f")
        .arg(script)
        .arg(url)
        .output()
        .map_err(|e| CliError::new(format!("pgbench: {e}")))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("aborted") || !output.status.success() {
        return Err(CliError::new(format!(
            "pgbench failed: {}",
            stderr.lines().next().unwrap_or("")
        )));
    }
    text.lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l["tps = ".len()..].split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| CliError::new("pgbench gave no tps"))
}

/// `SHOW fsync` and `SHOW synchronous_commit` of the server measured.
fn durability(admin: &str) -> Result<Value, CliError> {
    let mut c = occ_worker::db::connect(admin, TIMEOUT)?;
    let show = |c: &mut Client, what: &str| -> Result<String, CliError> {
        Ok(c.query_one(&format!("SHOW {what}"), &[])?.get(0))
    };
    Ok(json!({
        "fsync": show(&mut c, "fsync")?,
        "synchronousCommit": show(&mut c, "synchronous_commit")?,
        "fullPageWrites": show(&mut c, "full_page_writes")?,
        "serverVersion": show(&mut c, "server_version")?,
    }))
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of the claim (up to 16 works), rolled back: execution time and
/// buffers.
fn explain_claim(c: &mut Client) -> Result<Value, CliError> {
    let mut tx = c.transaction()?;
    let sql = format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}",
        CLAIM
            .replace("$1::bigint", "30000::bigint")
            .replace("$2", "16")
    );
    let plan: Value = tx.query_one(&sql, &[])?.get(0);
    tx.rollback()?;
    let top = &plan[0];
    let node = &top["Plan"];
    Ok(json!({
        "executionMs": top["Execution Time"],
        "sharedHit": node["Shared Hit Blocks"],
        "sharedRead": node["Shared Read Blocks"],
    }))
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

/// The pgbench binary: `--pgbench`, else `pgbench` on PATH, else the newest server's.
fn find_pgbench(given: Option<PathBuf>) -> Option<PathBuf> {
    if given.is_some() {
        return given;
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("pgbench"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin/pgbench")))
            .filter(|p| p.is_file())
            .collect();
        dirs.sort();
        dirs.pop()
    })
}

pub fn run(globals: &Globals, args: BenchArgs) -> Result<(), CliError> {
    if let Some(url) = &args.idle_child {
        return idle_child(url);
    }
    let admin = globals.database_url()?;
    let wants = |what: &str| args.only.iter().any(|o| o == what);
    let text = !globals.json;
    let mut report = serde_json::Map::new();
    report.insert("durability".into(), durability(&admin)?);
    if text {
        println!("server: {}", report["durability"]);
    }
    let mut ceiling = Value::Null;
    if wants("ceilings") {
        if let Some(pgbench) = find_pgbench(args.pgbench.clone()) {
            ceiling = ceilings(&admin, &pgbench, &args.concurrency, args.pgbench_seconds)?;
            if text {
                for r in ceiling.as_array().into_iter().flatten() {
                    println!(
                        "pgbench clients={:<3} single-row claim+complete works/s={} batched (10/statement) works/s={} worker's own statements on occ.work works/s={} batched (10/statement) works/s={} the coordinator's cycle of that many works, one session, works/s={}, two sessions of half as many each, works/s={}",
                        r["clients"], r["singleRow"], r["batched10"], r["occWorkSingleRow"], r["occWorkBatched10"], r["occWorkCycle"], r["occWorkCycleTwoSessions"]
                    );
                }
            }
            report.insert("ceilings".into(), ceiling.clone());
        } else if text {
            println!("pgbench: not found, no ceilings");
        }
    }
    let ceiling_at = |clients: usize, which: &str| -> Option<f64> {
        ceiling
            .as_array()?
            .iter()
            .find(|r| r["clients"].as_u64() == Some(clients as u64))?[which]
            .as_f64()
    };
    if wants("drain") {
        let mut drains = Vec::new();
        for &c in &args.concurrency {
            let mut r = drain(&admin, args.works, c)?;
            let wps = r["worksPerSecond"].as_f64().unwrap_or(0.0);
            for (which, key) in [
                ("singleRow", "ceilingSingleRow"),
                ("batched10", "ceilingBatched"),
                ("occWorkSingleRow", "ceilingOccWork"),
                ("occWorkBatched10", "ceilingOccWorkBatched"),
                ("occWorkCycle", "ceilingOccWorkCycle"),
                ("occWorkCycleTwoSessions", "ceilingOccWorkCycleTwoSessions"),
            ] {
                if let Some(ceil) = ceiling_at(c, which).filter(|v| *v > 0.0) {
                    r[key] = json!(ceil);
                    r[format!("{key}Ratio")] = json!(round(wps / ceil, 2));
                }
            }
            if text {
                println!(
                    "drain   concurrency={:<3} works={} seconds={} works/s={} CPU ms/work: machine {} worker {} (single-row ceiling {} ratio {}; batched ceiling {} ratio {}; occ.work statements {} ratio {}; batched {} ratio {}; the coordinator's cycle {} ratio {}; in two sessions {} ratio {})",
                    c, r["works"], r["seconds"], r["worksPerSecond"],
                    r["machineCpuMsPerWork"], r["workerCpuMsPerWork"],
                    r["ceilingSingleRow"], r["ceilingSingleRowRatio"],
                    r["ceilingBatched"], r["ceilingBatchedRatio"],
                    r["ceilingOccWork"], r["ceilingOccWorkRatio"],
                    r["ceilingOccWorkBatched"], r["ceilingOccWorkBatchedRatio"],
                    r["ceilingOccWorkCycle"], r["ceilingOccWorkCycleRatio"],
                    r["ceilingOccWorkCycleTwoSessions"], r["ceilingOccWorkCycleTwoSessionsRatio"]
                );
            }
            drains.push(r);
        }
        report.insert("drain".into(), Value::Array(drains));
    }
    if wants("paired") && args.pairs > 0 {
        if let Some(pgbench) = find_pgbench(args.pgbench.clone()) {
            let pairs = paired(
                &admin,
                &pgbench,
                &args.paired_concurrency,
                args.pgbench_seconds,
                args.works,
                args.pairs,
            )?;
            if text {
                for p in pairs.as_array().into_iter().flatten() {
                    let runs: Vec<String> = p["pairs"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| {
                            format!(
                                "{} -> {} ({})",
                                r["ceilingSingleRow"], r["worksPerSecond"], r["ratio"]
                            )
                        })
                        .collect();
                    println!(
                        "paired  concurrency={:<3} single-row ceiling -> drain works/s (ratio), each pair side by side: {}; median ratio {}",
                        p["concurrency"],
                        runs.join(", "),
                        p["medianRatio"]
                    );
                }
            }
            report.insert("paired".into(), pairs);
        } else if text {
            println!("pgbench: not found, no paired drains");
        }
    }
    if wants("latency") {
        let lat = latency(&admin, args.latency_samples)?;
        if text {
            println!(
                "latency enqueue->claim, idle worker, poll 250 ms: samples={} p50={} ms p99={} ms max={} ms (from the enqueue's commit: p50={} ms p99={} ms); a lone pass's report handed over -> its publication under way: p50={} ms p99={} ms",
                lat["samples"], lat["p50Ms"], lat["p99Ms"], lat["maxMs"], lat["p50FromCommitMs"], lat["p99FromCommitMs"], lat["p50HandOverToPublishMs"], lat["p99HandOverToPublishMs"]
            );
        }
        report.insert("latency".into(), lat);
    }
    if wants("claim") {
        let cost = claim_cost(&admin, 1_000, args.terminal_rows, args.cycles)?;
        let probe_line = |p: &Value| {
            format!(
                "claim p50={} ms p99={} ms, cycle {} ms, EXPLAIN {} ms, {} buffers hit",
                p["claimP50Ms"],
                p["claimP99Ms"],
                p["cycleMs"],
                p["explain"]["executionMs"],
                p["explain"]["sharedHit"]
            )
        };
        if text {
            for r in cost.as_array().into_iter().flatten() {
                println!("claim   rows={:<8} {}", r["rows"], probe_line(r));
            }
        }
        report.insert("claimCost".into(), cost);
        let busy = claim_busy_lanes(&admin, args.backlog, args.cycles)?;
        let after = claim_after_completions(&admin, args.completed, args.cycles)?;
        let future = claim_with_future(&admin, args.future, args.cycles)?;
        if text {
            println!(
                "claim   100 busy lanes, 0 queued: {}",
                probe_line(&busy["queued0"])
            );
            println!(
                "claim   100 busy lanes, {} queued behind them: {} (ratio {})",
                busy["queuedBacklog"]["queued"],
                probe_line(&busy["queuedBacklog"]["probe"]),
                busy["ratio"]
            );
            println!("claim   fresh table: {}", probe_line(&after["fresh"]));
            println!(
                "claim   right after {} completions, no manual vacuum: {} (ratio {})",
                after["afterCompleted"]["completed"],
                probe_line(&after["afterCompleted"]["probe"]),
                after["ratio"]
            );
            println!("claim   fresh table: {}", probe_line(&future["fresh"]));
            println!(
                "claim   with {} future-dated works: {} (ratio {})",
                future["futureDated"]["works"],
                probe_line(&future["futureDated"]["probe"]),
                future["ratio"]
            );
        }
        report.insert("claimBusyLanes".into(), busy);
        report.insert("claimAfterCompletions".into(), after);
        report.insert("claimFutureDated".into(), future);
    }
    if wants("admission") {
        let adm = admission(&admin, args.admission_seconds)?;
        if text {
            println!(
                "admission occ.namespace_create, 16 sessions: wake-ups on {}/s, off {}/s (ratio {})",
                adm["wakeupsOnPerSecond"], adm["wakeupsOffPerSecond"], adm["ratio"]
            );
        }
        report.insert("admission".into(), adm);
    }
    if wants("idle") {
        let idle = idle(&admin, args.idle_seconds)?;
        if text {
            println!(
                "idle    worker process, concurrency 16, {} s: CPU {} % ({} s), max RSS {} MiB",
                idle["seconds"], idle["cpuPercent"], idle["cpuSeconds"], idle["maxRssMiB"]
            );
        }
        report.insert("idle".into(), idle);
    }
    if globals.json {
        globals.print(&Value::Object(report));
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

#[cfg(test)]
mod tests {
    use super::*;

    // The pgbench scripts are built from the worker's own statement files: a statement that
    // gains a parameter must not leave it unbound in the ceiling (pgbench would fail, or
    // measure something else).
    #[test]
    fn the_paired_ratio_is_the_median_of_the_pairs() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![0.89, 0.83, 0.88, 0.85, 0.89]), Some(0.88));
        assert_eq!(median(vec![0.9, 0.7, 0.8, 1.0]), Some(0.85));
    }

    #[test]
    fn the_own_statement_scripts_bind_every_parameter() {
        for script in [
            occ_work_script(),
            occ_work_batched_script(),
            occ_work_cycle_script(16),
        ] {
            assert!(!script.contains('$'), "an unbound parameter in {script}");
            assert_eq!(script.matches("\\gset").count(), 1, "{script}");
            assert!(script.contains("INSERT INTO occ.work_attempts"), "{script}");
        }
        let batched = occ_work_batched_script();
        assert!(batched.contains("LIMIT 10::bigint + 8"), "{batched}");
        assert!(batched.contains(":ids::bigint[]") && batched.contains(":tokens::text[]"));
        // One transaction: the previous claims locked and completed, then the next claimed.
        let cycle = occ_work_cycle_script(16);
        let at = |what: &str| {
            cycle
                .find(what)
                .unwrap_or_else(|| panic!("{what} in {cycle}"))
        };
        assert!(
            cycle.starts_with("BEGIN;\n") && cycle.ends_with("COMMIT;\n"),
            "{cycle}"
        );
        assert!(at("FOR UPDATE OF w FOR KEY SHARE OF l;") < at("UPDATE occ.work w"));
        assert!(at("UPDATE occ.work w") < at("LIMIT 16::bigint + 8"));
    }
}
