//! The measurements that run a real worker (`runtime::Worker` with the `Noop` reconciler, or
//! `Stamped` around it): the drain's throughput and CPU per work (`drain`), the drain paired
//! with the bare ceiling measured right before it (`paired`), enqueue-to-claim latency on an
//! idle worker (`latency`), and an idle worker process's CPU and RSS (`idle`, whose child is
//! this binary run with `--idle-child`). Its reconcilers never call the Compute Driver, and a
//! drain's works are all queued before its worker starts.

use crate::fixture::{
    self, count, deletions, namespaces, step, wal_per_work, wal_position, BenchDb, NOW,
};
use crate::{ceiling, median, percentile, round, BenchError};
use occ_worker::queue::{self, NewWork};
use occ_worker::reconcile::{probe, Pass, PassError, Reconciler, Report};
use occ_worker::runtime::Worker;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Drains `works` Namespace deletions over 1,000 lanes, interleaved so the queue's head holds
/// distinct lanes, with a worker of `concurrency` threads; works per second and CPU per work.
pub fn drain(admin: &str, works: i64, concurrency: usize) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, &format!("drain{concurrency}"))?;
    let mut c = db.client()?;
    let lanes = works.clamp(1, 1000);
    namespaces(&mut c, "n", lanes)?;
    c.batch_execute(&deletions("n", lanes, 1, 0, works - 1, NOW))
        .map_err(step("drain fill"))?;
    c.batch_execute("VACUUM ANALYZE occ.work")
        .map_err(step("vacuum"))?;
    let worker = Worker::new(
        fixture::context(&db.url, concurrency)?,
        fixture::registry(Arc::new(probe::Noop)),
        fixture::options(&db.url, concurrency),
    );
    let stop = worker.stop_handle();
    let wal_before = wal_position(&mut c)?;
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
    let wal_after = wal_position(&mut c)?;
    stop.stop();
    running
        .join()
        .map_err(|_| BenchError::new("bench worker panicked"))??;
    let done = count(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE state = 'succeeded'",
    )?;
    // CPU per work while the queue drained, in ms: the whole machine's (PostgreSQL, this
    // process and anything else running) and this process's (the worker; the bench's own
    // 20 ms count is a small share of it).
    let per_work =
        |a: Option<u64>, b: Option<u64>| Some(cpu_ms_per_work(b?.checked_sub(a?)?, done));
    Ok(json!({
        "concurrency": concurrency,
        "works": done,
        "seconds": round(elapsed.as_secs_f64(), 2),
        "worksPerSecond": round(done as f64 / elapsed.as_secs_f64(), 0),
        "machineCpuMsPerWork": per_work(cpu_before.0, cpu_after.0),
        "workerCpuMsPerWork": per_work(cpu_before.1, cpu_after.1),
        // What the drain cost in WAL: unlike its speed, the same on any machine.
        "walBytesPerWork": wal_per_work(wal_before, wal_after, done),
    }))
}

/// The drain paired with its ceiling: `pairs` times at each concurrency, the bare single-row
/// ceiling (`ceiling::bare`, that many clients) and right after it the drain, a `CHECKPOINT`
/// before each. On a machine whose speed moves by a third between runs, a ratio of two
/// figures measured minutes apart (the ceilings all come first) says little; the median of
/// ratios measured side by side says what the engine does against the database.
pub fn paired(
    admin: &str,
    pgbench: &Path,
    levels: &[usize],
    seconds: u64,
    works: i64,
    pairs: usize,
) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, "paired")?;
    let scripts = ceiling::Scripts::write("paired")?;
    let mut c = db.client()?;
    let mut admin_client = occ_worker::db::connect(admin, fixture::TIMEOUT)?;
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
            let bare = ceiling::bare(&mut c, &db.url, pgbench, &scripts.single, clients, seconds)?;
            checkpoint()?;
            let drained = drain(admin, works, clients)?;
            let wps = drained["worksPerSecond"].as_f64().unwrap_or(0.0);
            runs.push(json!({
                "ceilingSingleRow": round(bare.tps, 0),
                "worksPerSecond": wps,
                "ratio": round(wps / bare.tps.max(1.0), 2),
                "ceilingWalBytesPerWork": bare.wal_bytes_per_work,
                "walBytesPerWork": drained["walBytesPerWork"],
            }));
        }
        let ratios: Vec<f64> = runs.iter().filter_map(|r| r["ratio"].as_f64()).collect();
        let median = median(ratios);
        out.push(json!({"concurrency": clients, "pairs": runs, "medianRatio": median}));
    }
    Ok(Value::Array(out))
}

/// CPU time of `ticks` clock ticks per work of `works`, in ms to three places.
pub fn cpu_ms_per_work(ticks: u64, works: i64) -> f64 {
    round(
        ticks as f64 * 1000.0 / clock_ticks() / works.max(1) as f64,
        3,
    )
}

/// Clock ticks per second (`/proc`'s CPU time unit).
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// The machine's busy CPU time so far, in clock ticks, all cores (`/proc/stat`: every state
/// but idle and iowait).
pub fn machine_busy_ticks() -> Option<u64> {
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
pub fn process_ticks(pid: &str) -> Option<u64> {
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
    type Facts = ();

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

/// Enqueue-to-claim latency of single works arriving one at a time at an idle worker of 4
/// threads (the poll at 250 ms, so the LISTEN/NOTIFY path is what is measured).
pub fn latency(admin: &str, samples: usize) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, "latency")?;
    let mut c = db.client()?;
    namespaces(&mut c, "n", 1)?;
    let (tx, rx) = crossbeam_channel::unbounded();
    let (published_tx, published) = crossbeam_channel::unbounded();
    let worker = Worker::new(
        fixture::context(&db.url, 4)?,
        fixture::registry(Arc::new(Stamped {
            inner: probe::Noop,
            started: tx,
            handed_over: Default::default(),
            published: published_tx,
        })),
        fixture::options(&db.url, 4),
    );
    let stop = worker.stop_handle();
    let running = std::thread::spawn(move || worker.run());
    std::thread::sleep(Duration::from_millis(500));
    let sampled = enqueue_one_at_a_time(&mut c, &rx, samples);
    stop.stop();
    running
        .join()
        .map_err(|_| BenchError::new("bench worker panicked"))??;
    let (mut micros, mut from_commit) = sampled?;
    micros.sort_unstable();
    from_commit.sort_unstable();
    let mut to_publish: Vec<u64> = published.try_iter().map(|d| d.as_micros() as u64).collect();
    to_publish.sort_unstable();
    let ms = |sorted: &[u64], p: f64| round(percentile(sorted, p) as f64 / 1000.0, 2);
    Ok(json!({
        "handOverSamples": to_publish.len(),
        "p50HandOverToPublishMs": ms(&to_publish, 50.0),
        "p99HandOverToPublishMs": ms(&to_publish, 99.0),
        "p50FromCommitMs": ms(&from_commit, 50.0),
        "p99FromCommitMs": ms(&from_commit, 99.0),
        "samples": micros.len(),
        "pollIntervalMs": 250,
        "p50Ms": ms(&micros, 50.0),
        "p99Ms": ms(&micros, 99.0),
        "maxMs": round(*micros.last().unwrap_or(&0) as f64 / 1000.0, 2),
    }))
}

/// Enqueues `samples` single works one at a time, each once the previous one is done: for
/// each, the time from before its enqueue and from its commit (its fsync excluded) to its pass
/// starting, in microseconds.
fn enqueue_one_at_a_time(
    c: &mut postgres::Client,
    started: &crossbeam_channel::Receiver<(i64, Instant)>,
    samples: usize,
) -> Result<(Vec<u64>, Vec<u64>), BenchError> {
    let mut micros = Vec::with_capacity(samples);
    let mut from_commit = Vec::with_capacity(samples);
    for n in 1..=samples {
        // Idle first: the previous pass is done and its wake-ups are spent.
        std::thread::sleep(Duration::from_millis(20));
        let work = NewWork::namespace_delete("n1", Some(n as u32), "admin");
        let sent = Instant::now();
        let id = queue::work_enqueue(c, &work)?.id;
        let committed = Instant::now();
        let (claimed_id, at) = started
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| BenchError::new("a single work was not claimed within 10 s"))?;
        if claimed_id != id {
            return Err(BenchError::new(
                "the latency worker claimed an unexpected work",
            ));
        }
        micros.push(at.duration_since(sent).as_micros() as u64);
        from_commit.push(at.saturating_duration_since(committed).as_micros() as u64);
        let done = "SELECT count(*) FROM occ.work WHERE state = 'queued'";
        while count(c, done)? > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok((micros, from_commit))
}

/// An idle worker process (this binary with `--idle-child`, concurrency 16, poll 250 ms,
/// LISTEN connected): its CPU time and RSS over `seconds`, from `/proc`.
pub fn idle(admin: &str, seconds: u64) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, "idle")?;
    let exe = std::env::current_exe().map_err(|e| BenchError::new(format!("idle: {e}")))?;
    let mut child = std::process::Command::new(exe)
        .args(["--idle-child", &db.url])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| BenchError::new(format!("idle: cannot start the worker: {e}")))?;
    let pid = child.id().to_string();
    // Past start-up: migrations are done, the pool and the listener are connected.
    std::thread::sleep(Duration::from_secs(3));
    let rss_kib = |pid: &str| -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let start = process_ticks(&pid);
    let t0 = Instant::now();
    let mut max_rss = 0;
    while t0.elapsed() < Duration::from_secs(seconds) {
        max_rss = max_rss.max(rss_kib(&pid).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(500));
    }
    let end = process_ticks(&pid);
    let elapsed = t0.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    let cpu = match (start, end) {
        (Some(a), Some(b)) => (b.saturating_sub(a)) as f64 / clock_ticks(),
        _ => return Err(BenchError::new("idle: the worker process ended early")),
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
pub fn idle_child(url: &str) -> Result<(), BenchError> {
    let worker = Worker::new(
        fixture::context(url, 16)?,
        fixture::registry(Arc::new(probe::Noop)),
        fixture::options(url, 16),
    );
    worker
        .run()
        .map_err(|e| BenchError::new(format!("idle worker: {e}")))
}
