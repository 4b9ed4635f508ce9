//! Scale-out: one queue drained by several worker processes against one PostgreSQL, the way
//! operators scale the worker (replicas of the Deployment), next to one process with as many
//! threads in all. Each process is this binary run with `--worker-child` (`child`): a real
//! `runtime::Worker` of its own, its own pool and listener. Two loads: `noop` (Namespace
//! deletions over 1,000 lanes, the `Noop` reconciler, as the `drain` measurement) and
//! `namespaces` (Namespace creations admitted by `occ.namespace_create`, the production
//! Namespace reconciler on `Scripted`, a driver whose every Namespace is ready at once).
//! Every child reports what it ran; a drain counts only when every work ran exactly once
//! (SPEC Q4, Q6). It never touches infrastructure.

use crate::fixture::{self, count, deletions, namespaces, step, BenchDb, NOW};
use crate::{median, round, worker, BenchError};
use occ_worker::cancel::CancelToken;
use occ_worker::compute::{
    AgentSpec, ComputeDriver, ComputeError, DriverPolicy, NamespaceObservation, NamespaceSpec,
    PreflightWarning, RevisionObservation, RevisionSpec,
};
use occ_worker::reconcile::{probe, registry as registries, Pass, PassError, Reconciler, Report};
use occ_worker::runtime::Worker;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The two loads.
pub const LOADS: [&str; 2] = ["noop", "namespaces"];

/// `P` processes of `T` threads each (`PxT` on the command line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub processes: usize,
    pub threads: usize,
}

impl std::str::FromStr for Layout {
    type Err = String;

    fn from_str(s: &str) -> Result<Layout, String> {
        let (p, t) = s
            .split_once('x')
            .ok_or_else(|| format!("{s}: expected PROCESSESxTHREADS, e.g. 3x8"))?;
        let parse = |v: &str| v.parse::<usize>().ok().filter(|n| *n > 0);
        match (parse(p), parse(t)) {
            (Some(processes), Some(threads)) => Ok(Layout { processes, threads }),
            _ => Err(format!("{s}: expected PROCESSESxTHREADS, e.g. 3x8")),
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.processes, self.threads)
    }
}

/// For each of `loads` (`LOADS`), `rounds` times, each layout in turn on `works` works; each round's ratio of
/// every layout to the first, and the median of those ratios over the rounds. The first
/// layout is the yardstick (one process with every thread).
pub fn scale_out(
    admin: &str,
    loads: &[String],
    works: i64,
    layouts: &[Layout],
    rounds: usize,
) -> Result<Value, BenchError> {
    let mut out = Vec::new();
    for load in loads.iter().map(String::as_str) {
        let mut runs: Vec<Vec<Value>> = Vec::new();
        for _ in 0..rounds {
            let mut round_runs = Vec::new();
            for layout in layouts {
                round_runs.push(drain(admin, load, works, *layout)?);
            }
            runs.push(round_runs);
        }
        let mut by_layout = Vec::new();
        for (i, layout) in layouts.iter().enumerate() {
            let figures: Vec<f64> = runs
                .iter()
                .filter_map(|r| r[i]["worksPerSecond"].as_f64())
                .collect();
            let ratios: Vec<f64> = runs
                .iter()
                .filter_map(|r| {
                    let base = r[0]["worksPerSecond"].as_f64()?;
                    Some(round(r[i]["worksPerSecond"].as_f64()? / base.max(1.0), 2))
                })
                .collect();
            by_layout.push(json!({
                "layout": layout.to_string(),
                "processes": layout.processes,
                "threads": layout.threads,
                "worksPerSecond": figures,
                "ratios": ratios,
                "medianRatio": median(ratios.clone()),
                "runs": runs.iter().map(|r| r[i].clone()).collect::<Vec<_>>(),
            }));
        }
        out.push(json!({"load": load, "works": works, "layouts": by_layout}));
    }
    Ok(Value::Array(out))
}

/// One drain of `works` works of `load` by `layout`'s processes, all queued before any
/// starts; timed from the moment every process is ready and told to go until no lane holds
/// work. Fails unless every work succeeded and ran exactly once.
fn drain(admin: &str, load: &str, works: i64, layout: Layout) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, &format!("scale_{load}_{layout}"))?;
    let mut c = db.client()?;
    let expected = fill(&mut c, load, works)?;
    c.batch_execute("VACUUM ANALYZE occ.work")
        .map_err(step("vacuum"))?;
    let mut children = Vec::new();
    for _ in 0..layout.processes {
        children.push(Spawned::start(&db.url, load, layout.threads)?);
    }
    for child in &mut children {
        child.wait_for("ready")?;
    }
    // The processes that do the queue's work: the children and their database sessions (a
    // session opened during the drain counts from its start).
    let children_pids: Vec<String> = children.iter().map(|c| c.child.id().to_string()).collect();
    let queue_before = queue_ticks(&mut c, &children_pids)?;
    let load_before = load_average();
    let busy_before = worker::machine_busy_ticks();
    let started = Instant::now();
    for child in &mut children {
        child.send("go")?;
    }
    let pending = "SELECT count(*) FROM occ.work_lanes WHERE head_id IS NOT NULL";
    while count(&mut c, pending)? > 0 {
        std::thread::sleep(Duration::from_millis(20));
        if started.elapsed() > Duration::from_secs(600) {
            return Err(BenchError::new(format!(
                "scale-out {load} {layout}: not drained within 600 s"
            )));
        }
    }
    let elapsed = started.elapsed();
    let busy_after = worker::machine_busy_ticks();
    let queue_after = queue_ticks(&mut c, &children_pids)?;
    // The worker processes' own CPU and their database sessions', apart: on a cluster each
    // replica runs on a node of its own, and the sessions are what they share, PostgreSQL.
    let (mut processes_cpu, mut sessions_cpu) = (0u64, 0u64);
    for (pid, t) in &queue_after {
        let spent = t.saturating_sub(queue_before.get(pid).copied().unwrap_or(0));
        if children_pids.contains(pid) {
            processes_cpu += spent;
        } else {
            sessions_cpu += spent;
        }
    }

    let mut ran: HashMap<String, u32> = HashMap::new();
    for child in children {
        for id in child.finish()? {
            *ran.entry(id).or_default() += 1;
        }
    }
    let succeeded = count(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE state = 'succeeded'",
    )?;
    exactly_once(load, layout, &ran, &expected, succeeded)?;
    let per_work = |ticks: u64| worker::cpu_ms_per_work(ticks, succeeded);
    if load == "namespaces" {
        let ready = count(
            &mut c,
            "SELECT count(*) FROM occ.namespaces_all WHERE status = 'ready'",
        )?;
        if ready != works {
            return Err(BenchError::new(format!(
                "scale-out {load} {layout}: {ready} of {works} Namespaces ready"
            )));
        }
    }
    Ok(json!({
        "layout": layout.to_string(),
        "works": succeeded,
        "seconds": round(elapsed.as_secs_f64(), 2),
        "worksPerSecond": round(succeeded as f64 / elapsed.as_secs_f64(), 0),
        "loadAverageBefore": load_before,
        // The worker processes' and their sessions' CPU per work, in ms: what the layout
        // itself costs, whatever else the machine runs; then each part of it.
        "queueCpuMsPerWork": per_work(processes_cpu + sessions_cpu),
        "processesCpuMsPerWork": per_work(processes_cpu),
        "sessionsCpuMsPerWork": per_work(sessions_cpu),
        // The whole machine's busy CPU per work while it drained, in ms (PostgreSQL, the
        // worker processes and anything else running).
        "machineCpuMsPerWork": busy_before
            .zip(busy_after)
            .map(|(a, b)| per_work(b.saturating_sub(a))),
    }))
}

/// The CPU time so far, in clock ticks, of each of `children` and of every other session of
/// `c`'s database.
fn queue_ticks(
    c: &mut postgres::Client,
    children: &[String],
) -> Result<HashMap<String, u64>, BenchError> {
    let sessions = c
        .query(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .map_err(step("scale-out sessions"))?;
    let pids = sessions
        .iter()
        .map(|r| r.get::<_, i32>(0).to_string())
        .chain(children.iter().cloned());
    Ok(pids
        .filter_map(|p| Some((p.clone(), worker::process_ticks(&p)?)))
        .collect())
}

/// Queues `works` works of `load`; what the children must report having run, once each
/// (work ids for `noop`, Namespace ids for `namespaces`).
fn fill(c: &mut postgres::Client, load: &str, works: i64) -> Result<Vec<String>, BenchError> {
    if load == "noop" {
        let lanes = works.clamp(1, 1000);
        namespaces(c, "n", lanes)?;
        c.batch_execute(&deletions("n", lanes, 1, 0, works - 1, NOW))
            .map_err(step("scale-out fill"))?;
        let ids = c
            .query("SELECT id FROM occ.work ORDER BY id", &[])
            .map_err(step("scale-out ids"))?;
        Ok(ids.iter().map(|r| r.get::<_, i64>(0).to_string()).collect())
    } else {
        c.batch_execute(&format!(
            "SELECT occ.namespace_create('admin', 'c' || i) FROM generate_series(1, {works}) i"
        ))
        .map_err(step("scale-out namespace_create"))?;
        let ids = c
            .query("SELECT id FROM occ.namespaces_all ORDER BY id", &[])
            .map_err(step("scale-out ids"))?;
        Ok(ids.iter().map(|r| r.get::<_, String>(0)).collect())
    }
}

/// Every expected id ran exactly once, nothing else ran, and every work succeeded.
fn exactly_once(
    load: &str,
    layout: Layout,
    ran: &HashMap<String, u32>,
    expected: &[String],
    succeeded: i64,
) -> Result<(), BenchError> {
    let twice = ran.values().filter(|n| **n > 1).count();
    let missing = expected.iter().filter(|id| !ran.contains_key(*id)).count();
    let unexpected = ran.len() + missing - expected.len();
    if twice + missing + unexpected > 0 || succeeded != expected.len() as i64 {
        return Err(BenchError::new(format!(
            "scale-out {load} {layout}: not exactly once: {twice} ran more than once, \
             {missing} never ran, {unexpected} unexpected, {succeeded} of {} works succeeded",
            expected.len()
        )));
    }
    Ok(())
}

/// The 1-minute load average, from `/proc/loadavg`.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A worker child process and its pipes.
struct Spawned {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Spawned {
    fn start(url: &str, load: &str, threads: usize) -> Result<Spawned, BenchError> {
        let exe = std::env::current_exe().map_err(|e| BenchError::new(format!("child: {e}")))?;
        let mut child = Command::new(exe)
            .args([
                "--worker-child",
                url,
                "--child-load",
                load,
                "--child-threads",
            ])
            .arg(threads.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| BenchError::new(format!("cannot start a worker child: {e}")))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(Spawned {
            child,
            stdin,
            stdout,
        })
    }

    fn wait_for(&mut self, line: &str) -> Result<(), BenchError> {
        let mut got = String::new();
        self.stdout
            .read_line(&mut got)
            .map_err(|e| BenchError::new(format!("worker child: {e}")))?;
        if got.trim_end() != line {
            return Err(BenchError::new(format!(
                "worker child said {got:?}, not {line:?}"
            )));
        }
        Ok(())
    }

    fn send(&mut self, line: &str) -> Result<(), BenchError> {
        let stdin = self.stdin.as_mut().expect("stdin until finish");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| BenchError::new(format!("worker child: {e}")))
    }

    /// Closes the child's stdin (it stops its worker), then reads what it ran until it exits.
    fn finish(mut self) -> Result<Vec<String>, BenchError> {
        drop(self.stdin.take());
        let mut ids = Vec::new();
        let mut done = false;
        for line in (&mut self.stdout).lines() {
            let line = line.map_err(|e| BenchError::new(format!("worker child: {e}")))?;
            if line == "done" {
                done = true;
            } else {
                ids.push(line);
            }
        }
        let status = self
            .child
            .wait()
            .map_err(|e| BenchError::new(format!("worker child: {e}")))?;
        if !status.success() || !done {
            return Err(BenchError::new(format!(
                "a worker child ended with {status}"
            )));
        }
        Ok(ids)
    }
}

/// The child: a worker of `threads` threads on `url` running `load`. It says `ready` once
/// built, starts on the parent's `go`, stops when its stdin closes, then prints what it ran,
/// one id a line, and `done`.
pub fn child(url: &str, load: &str, threads: usize) -> Result<(), BenchError> {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (compute, registry): (Arc<dyn ComputeDriver>, _) = match load {
        "noop" => (
            Arc::new(fixture::Unused),
            fixture::registry(Arc::new(Recorded { ran: ran.clone() })),
        ),
        "namespaces" => (
            Arc::new(Scripted { ran: ran.clone() }),
            registries::namespaces(occ_worker::reconcile::Registry::new()),
        ),
        other => return Err(BenchError::new(format!("unknown load {other}"))),
    };
    let worker = Worker::new(
        fixture::context_with(url, threads, compute)?,
        registry,
        fixture::options(url, threads),
    );
    let stop = worker.stop_handle();
    let mut out = std::io::stdout().lock();
    let mut stdin = std::io::stdin().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, line: &str| {
        writeln!(out, "{line}").and_then(|()| out.flush())
    };
    let io = |e: std::io::Error| BenchError::new(format!("worker child: {e}"));
    say(&mut out, "ready").map_err(io)?;
    let mut go = String::new();
    stdin.read_line(&mut go).map_err(io)?;
    let running = std::thread::spawn(move || worker.run());
    // Until the parent closes stdin.
    let mut rest = String::new();
    while stdin.read_line(&mut rest).map_err(io)? > 0 {
        rest.clear();
    }
    stop.stop();
    running
        .join()
        .map_err(|_| BenchError::new("worker child panicked"))?
        .map_err(io)?;
    for id in ran.lock().iter() {
        writeln!(out, "{id}").map_err(io)?;
    }
    say(&mut out, "done").map_err(io)
}

/// `Noop`, recording the id of every work it publishes.
struct Recorded {
    ran: Arc<Mutex<Vec<String>>>,
}

impl Reconciler for Recorded {
    type Facts = ();

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        probe::Noop.reconcile(pass)
    }

    fn publish(
        &self,
        tx: &mut occ_worker::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError> {
        self.ran.lock().push(pass.claim.id.to_string());
        probe::Noop.publish(tx, pass, report)
    }
}

/// The scripted driver of the `namespaces` load: every Namespace it is asked to ensure or
/// delete is there (or gone) at once, and each call is recorded by Namespace id; the
/// revision and Agent methods are refused (this load has none).
struct Scripted {
    ran: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    fn answer(&self, n: &NamespaceSpec) -> Result<NamespaceObservation, ComputeError> {
        self.ran.lock().push(n.namespace_id.clone());
        Ok(NamespaceObservation {
            namespace_id: n.namespace_id.clone(),
            complete: true,
            failure: None,
            pending_reason: None,
            reason: None,
        })
    }
}

impl ComputeDriver for Scripted {
    fn id(&self) -> &str {
        "scripted"
    }
    fn implementation(&self) -> &str {
        "scripted"
    }
    fn preflight(&self, _c: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError> {
        Ok(Vec::new())
    }
    fn ensure_namespace(
        &self,
        n: &NamespaceSpec,
        _c: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        self.answer(n)
    }
    fn delete_namespace(
        &self,
        n: &NamespaceSpec,
        _c: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        self.answer(n)
    }
    fn prepare_revision(
        &self,
        _r: &RevisionSpec,
        _c: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        fixture::unused()
    }
    fn deactivate_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        fixture::unused()
    }
    fn bind_agent(&self, _a: &AgentSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        fixture::unused()
    }
    fn activate_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        fixture::unused()
    }
    fn stop_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        fixture::unused()
    }
    fn retire_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        fixture::unused()
    }
    fn delete_agent_runtime_credentials(
        &self,
        _a: &AgentSpec,
        _c: &CancelToken,
    ) -> Result<(), ComputeError> {
        fixture::unused()
    }
    fn policy(&self) -> &dyn DriverPolicy {
        self
    }
}

impl DriverPolicy for Scripted {
    fn requires_stopped_predecessors(&self, _r: &RevisionSpec) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_is_processes_by_threads() {
        assert_eq!(
            "3x8".parse::<Layout>(),
            Ok(Layout {
                processes: 3,
                threads: 8
            })
        );
        assert!("3".parse::<Layout>().is_err());
        assert!("0x8".parse::<Layout>().is_err());
        assert_eq!(
            Layout {
                processes: 6,
                threads: 4
            }
            .to_string(),
            "6x4"
        );
    }

    #[test]
    fn exactly_once_counts_twice_missing_and_unexpected() {
        let layout = Layout {
            processes: 1,
            threads: 1,
        };
        let expected = vec!["1".to_string(), "2".to_string()];
        let ran = |ids: &[&str]| {
            let mut m = HashMap::new();
            for id in ids {
                *m.entry(id.to_string()).or_default() += 1;
            }
            m
        };
        assert!(exactly_once("noop", layout, &ran(&["1", "2"]), &expected, 2).is_ok());
        assert!(exactly_once("noop", layout, &ran(&["1", "2", "2"]), &expected, 2).is_err());
        assert!(exactly_once("noop", layout, &ran(&["1"]), &expected, 2).is_err());
        assert!(exactly_once("noop", layout, &ran(&["1", "2", "3"]), &expected, 2).is_err());
        assert!(exactly_once("noop", layout, &ran(&["1", "2"]), &expected, 1).is_err());
    }
}
