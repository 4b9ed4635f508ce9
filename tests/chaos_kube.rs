//! The crash drill on Kubernetes (`scripts/chaos --driver kubernetes`): Agents deployed and
//! then deleted through `occ-worker run` processes with the Kubernetes Compute Driver against
//! the API server fake of `tests/it` (a fixed latency added to every request, Pods ready after
//! a delay), while a random worker is SIGKILLed every few seconds and started again shortly
//! after — the Docker drill of `scripts/chaos` for Agents (SPEC Q2, Q3, Q10, A2).
//!
//! Verdicts, each a count that must be 0: exactly-once violations (attempt evidence, success
//! events, activation and deletion audits), works that did not succeed (SPEC Q10: a crash is an
//! attempt, so a pass that holds its claim for long turns restarts into failures), Agents
//! holding more objects of a kind than the others of their mode (a duplicate), objects of a
//! deleted Agent left, a claim held past its lease by more than one lease, a lane with two
//! claims. It reports `passMs` p50/p99/max per operation from `worker.completed`.
//!
//! Under `cargo bench --bench chaos_kube -- [options]` it runs the drill as asked (defaults: 3
//! workers × 8 threads, lease 3 s, 40 Agents, a kill every 2 s, restart 0.5 s later, 20 ms
//! per request, Pods ready after 1 s, the driver file's default client limit of 20 requests a
//! second with a burst of 40); under `cargo test` a small run that fails on any
//! violation. The database server comes from `OCC_BENCH_DATABASE_URL` (scripts/chaos) or
//! `OCC_TEST_DATABASE_URL` (scripts/test). It never asserts a timing.

#[path = "canary.rs"]
mod canary;
#[path = "fleet.rs"]
mod fleet;
#[path = "it/kube_fake/mod.rs"]
mod kube_fake;

use fleet::{count, FleetAgent, WorkerRun};
use kube_fake::{FakeOptions, KubeFake, DRIVER_FILE};
use occ_worker::compute::kubernetes::names::{self, LABEL_AGENT};
use postgres::{Client, NoTls};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// The kinds the driver writes for an Agent: a duplicate is one more of these than its peers.
const WRITTEN: [&str; 7] = [
    "deployments",
    "services",
    "networkpolicies",
    "persistentvolumeclaims",
    "serviceaccounts",
    "secrets",
    "configmaps",
];
use fleet::AGENT_OBJECT_KINDS as ALL;

#[derive(Clone, Debug)]
struct Options {
    workers: usize,
    threads: usize,
    lease_ms: u64,
    agents: usize,
    namespaces: usize,
    kill_every: Duration,
    restart_after: Duration,
    kill: bool,
    latency: Duration,
    pod_start: Duration,
    qps: u32,
    burst: u32,
    timeout: Duration,
    out: PathBuf,
}

fn usage() -> &'static str {
    "cargo bench --bench chaos_kube -- [--workers N] [--threads T] [--lease-ms L] [--agents A] \
     [--namespaces K] [--kill-every S] [--restart-after S] [--no-kill] [--latency-ms MS] \
     [--pod-start-ms MS] [--qps Q] [--burst B] [--timeout S] [--out DIR]"
}

fn parse(bench: bool) -> Result<Options, String> {
    let mut o = if bench {
        Options {
            workers: 3,
            threads: 8,
            lease_ms: 3000,
            agents: 40,
            namespaces: 0,
            kill_every: Duration::from_secs(2),
            restart_after: Duration::from_millis(500),
            kill: true,
            latency: Duration::from_millis(20),
            pod_start: Duration::from_secs(1),
            qps: 20,
            burst: 40,
            timeout: Duration::from_secs(900),
            out: PathBuf::from("target/chaos-kube"),
        }
    } else {
        // The smoke run under `cargo test`: every path of the drill, a few kills.
        Options {
            workers: 2,
            threads: 4,
            lease_ms: 3000,
            agents: 6,
            namespaces: 3,
            kill_every: Duration::from_secs(2),
            restart_after: Duration::from_millis(500),
            kill: true,
            latency: Duration::from_millis(5),
            pod_start: Duration::from_millis(300),
            qps: 20,
            burst: 40,
            timeout: Duration::from_secs(300),
            out: std::env::temp_dir().join(format!("occ-chaos-kube-{}", std::process::id())),
        }
    };
    // Options are the drill's (`cargo bench`); under `cargo test` the arguments are libtest's.
    let args: Vec<String> = if bench {
        std::env::args().skip(1).collect()
    } else {
        Vec::new()
    };
    let mut it = args.iter().filter(|a| *a != "--bench");
    let secs = |v: &str, flag: &str| -> Result<Duration, String> {
        v.parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("{flag} must be a number of seconds, got {v}"))
    };
    fn int<T: std::str::FromStr>(v: &str, flag: &str) -> Result<T, String> {
        v.parse()
            .map_err(|_| format!("{flag} must be a positive integer, got {v}"))
    }
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--workers" => o.workers = int(&value()?, flag)?,
            "--threads" => o.threads = int(&value()?, flag)?,
            "--lease-ms" => o.lease_ms = int(&value()?, flag)?,
            "--agents" => o.agents = int(&value()?, flag)?,
            "--namespaces" => o.namespaces = int(&value()?, flag)?,
            "--kill-every" => o.kill_every = secs(&value()?, flag)?,
            "--restart-after" => o.restart_after = secs(&value()?, flag)?,
            "--no-kill" => o.kill = false,
            "--latency-ms" => o.latency = Duration::from_millis(int(&value()?, flag)?),
            "--pod-start-ms" => o.pod_start = Duration::from_millis(int(&value()?, flag)?),
            "--qps" => o.qps = int(&value()?, flag)?,
            "--burst" => o.burst = int(&value()?, flag)?,
            "--timeout" => o.timeout = secs(&value()?, flag)?,
            "--out" => o.out = PathBuf::from(value()?),
            "-h" | "--help" => return Err(usage().to_string()),
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    if o.workers == 0 || o.threads == 0 || o.agents == 0 || o.lease_ms == 0 {
        return Err("--workers, --threads, --agents and --lease-ms must be positive".into());
    }
    if o.namespaces == 0 {
        o.namespaces = o.agents.clamp(1, 20);
    }
    Ok(o)
}

/// One worker process slot: its process while it lives, when to start it again after a kill.
struct Slot {
    child: Option<Child>,
    restart_at: Option<Instant>,
    kills: usize,
    exits: usize,
}

/// Claims sampled while the drill runs.
#[derive(Default)]
struct Samples {
    taken: usize,
    /// The longest a claim was seen held past its lease, in seconds.
    most_past_lease: f64,
    /// Samples in which some lane had two claimed works.
    two_claims: usize,
}

struct Drill<'a> {
    o: &'a Options,
    fake: &'a KubeFake,
    url: &'a str,
    binary: &'a Path,
    driver_file: String,
    slots: Vec<Slot>,
    chaos: bool,
    next_kill: Instant,
    next_sample: Instant,
    seed: u64,
    kills_log: String,
    started: Instant,
    samples: Samples,
    c: Client,
}

impl Drill<'_> {
    fn run_dir(&self, i: usize) -> PathBuf {
        let dir = self.o.out.join("workers").join(format!("w{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn start(&mut self, i: usize) {
        let dir = self.run_dir(i);
        let child = fleet::worker(
            self.fake,
            &WorkerRun {
                binary: self.binary,
                url: self.url,
                dir: &dir,
                driver_file: &self.driver_file,
                concurrency: self.o.threads,
                lease_ms: self.o.lease_ms,
                events: Some(self.o.out.join(format!("workers/w{i}.events.jsonl"))),
                log: Some(self.o.out.join(format!("workers/w{i}.stderr"))),
            },
        );
        self.slots[i].child = Some(child);
        self.slots[i].restart_at = None;
    }

    fn random(&mut self) -> u64 {
        // xorshift: the drill's choices, reproducible from the seed it prints.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed
    }

    fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn kill_one(&mut self, phase: &str) {
        let alive: Vec<usize> = (0..self.slots.len())
            .filter(|i| self.slots[*i].child.is_some())
            .collect();
        if alive.is_empty() {
            return;
        }
        let i = alive[(self.random() % alive.len() as u64) as usize];
        let mut child = self.slots[i].child.take().unwrap();
        let pid = child.id();
        let _ = child.kill();
        let _ = child.wait();
        self.slots[i].kills += 1;
        self.slots[i].restart_at = Some(Instant::now() + self.o.restart_after);
        let _ = writeln!(
            self.kills_log,
            "{:.1}\tkill\tworker {i}\tpid {pid}\tphase {phase}",
            self.elapsed()
        );
    }

    fn sample(&mut self) {
        let Ok(row) = self.c.query_one(
            "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - lease_expires_at)), 0)::float8
               FROM occ.work_lanes WHERE claim_id IS NOT NULL",
            &[],
        ) else {
            return;
        };
        let past: f64 = row.get(0);
        let two = count(
            &mut self.c,
            "SELECT count(*) FROM (SELECT lane FROM occ.work_status WHERE state = 'claimed'
                GROUP BY lane HAVING count(*) > 1) l",
        );
        self.samples.taken += 1;
        self.samples.most_past_lease = self.samples.most_past_lease.max(past);
        if two > 0 {
            self.samples.two_claims += 1;
        }
    }

    /// Restarts, exits, kills and samples, then a tenth of a second.
    fn tick(&mut self, phase: &str) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            if self.slots[i].child.is_none() {
                if self.slots[i].restart_at.is_some_and(|at| now >= at) {
                    self.start(i);
                    let _ = writeln!(self.kills_log, "{:.1}\trestart\tworker {i}", self.elapsed());
                }
            } else if let Ok(Some(status)) = self.slots[i].child.as_mut().unwrap().try_wait() {
                self.slots[i].exits += 1;
                self.slots[i].child = None;
                self.slots[i].restart_at = Some(now + Duration::from_secs(1));
                let _ = writeln!(
                    self.kills_log,
                    "{:.1}\texited\tworker {i}\t{status}",
                    self.elapsed()
                );
            }
        }
        if self.chaos && self.o.kill && now >= self.next_kill {
            self.kill_one(phase);
            self.next_kill = now + self.o.kill_every;
        }
        if now >= self.next_sample {
            self.sample();
            self.next_sample = now + Duration::from_secs(1);
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    /// Ticks until `sql` answers 0 (checked every half second); false when `deadline` passes.
    fn until_zero(&mut self, phase: &str, sql: &str, deadline: Instant) -> bool {
        let mut next_check = Instant::now();
        loop {
            if Instant::now() >= next_check {
                if count(&mut self.c, sql) == 0 {
                    return true;
                }
                next_check = Instant::now() + Duration::from_millis(500);
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.tick(phase);
        }
    }

    fn stop_all(&mut self) {
        for slot in &mut self.slots {
            if let Some(child) = &slot.child {
                // SIGTERM: the worker drains its passes and releases its claims.
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for slot in &mut self.slots {
            if let Some(mut child) = slot.child.take() {
                while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The objects of kind `plural` per fleet Agent (label `occ.agent`), for the Agents in `ids`.
fn per_agent(
    fake: &KubeFake,
    plural: &'static str,
    ids: &BTreeMap<String, bool>,
) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for o in fake.objects(plural) {
        if let Some(agent) = o["metadata"]["labels"][LABEL_AGENT].as_str() {
            if ids.contains_key(agent) {
                *n.entry(agent.to_string()).or_insert(0) += 1;
            }
        }
    }
    n
}

/// The deployments' exactly-once and outcome checks, each a count that must be 0.
fn deploy_checks(c: &mut Client) -> Vec<(&'static str, i64)> {
    [
        (
            "works with more than one 'succeeded' evidence row",
            "SELECT count(*) FROM (SELECT work_id FROM occ.work_attempts WHERE outcome = 'succeeded' GROUP BY 1 HAVING count(*) > 1) s",
        ),
        (
            "succeeded works without exactly one 'succeeded' evidence",
            "SELECT count(*) FROM occ.work w WHERE w.state = 'succeeded' AND (SELECT count(*) FROM occ.work_attempts a WHERE a.work_id = w.id AND a.outcome = 'succeeded') <> 1",
        ),
        (
            "other works with 'succeeded' evidence",
            "SELECT count(*) FROM occ.work w WHERE w.state <> 'succeeded' AND EXISTS (SELECT 1 FROM occ.work_attempts a WHERE a.work_id = w.id AND a.outcome = 'succeeded')",
        ),
        (
            "revisions activated other than once (lifecycle.activate audits)",
            "SELECT count(*) FROM occ.agent_revisions r WHERE (SELECT count(*) FROM occ.audit_events a WHERE a.action = 'openclaw.agents.lifecycle.activate' AND a.outcome = 'success' AND a.resource_id = r.id) <> 1",
        ),
        (
            "deployment works that did not succeed",
            "SELECT count(*) FROM occ.work_status WHERE operation = 'revision_reconcile' AND state <> 'succeeded'",
        ),
    ]
    .into_iter()
    .map(|(what, sql)| (what, count(c, sql)))
    .collect()
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn events(out: &Path) -> Vec<Value> {
    let mut all = Vec::new();
    let Ok(dir) = std::fs::read_dir(out.join("workers")) else {
        return all;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            all.extend(
                text.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .filter(Value::is_object),
            );
        }
    }
    all
}

fn table(c: &mut Client, sql: &str) -> String {
    let mut out = String::new();
    for row in c.query(sql, &[]).unwrap() {
        let cells: Vec<String> = (0..row.len())
            .map(|i| {
                row.try_get::<_, String>(i)
                    .or_else(|_| row.try_get::<_, i64>(i).map(|v| v.to_string()))
                    .or_else(|_| row.try_get::<_, i32>(i).map(|v| v.to_string()))
                    .unwrap_or_else(|_| "-".into())
            })
            .collect();
        let _ = writeln!(out, "  {}", cells.join("  "));
    }
    out
}

/// Runs the drill; the report, and the number of violations.
fn drill(admin: &str, o: &Options) -> (String, i64) {
    let _ = std::fs::remove_dir_all(&o.out);
    std::fs::create_dir_all(o.out.join("workers")).unwrap();
    let fake = KubeFake::start(FakeOptions {
        latency: o.latency,
        pod_start: o.pod_start,
        ..FakeOptions::default()
    });
    let db = format!("occ_chaos_kube_{}", std::process::id());
    let url = fleet::database(admin, &db);
    let mut driver: Value = serde_json::from_str(DRIVER_FILE).unwrap();
    driver["qps"] = o.qps.into();
    driver["burst"] = o.burst.into();
    let binary = PathBuf::from(
        std::env::var_os("OCC_CHAOS_BINARY")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_occ-worker").into()),
    );
    let started = Instant::now();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |t| t.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let mut d = Drill {
        o,
        fake: &fake,
        url: &url,
        binary: &binary,
        driver_file: driver.to_string(),
        slots: (0..o.workers)
            .map(|_| Slot {
                child: None,
                restart_at: None,
                kills: 0,
                exits: 0,
            })
            .collect(),
        chaos: false,
        next_kill: Instant::now(),
        next_sample: Instant::now(),
        seed: seed.max(1),
        kills_log: String::new(),
        started,
        samples: Samples::default(),
        c: Client::connect(&url, NoTls).unwrap(),
    };
    for i in 0..o.workers {
        d.start(i);
    }
    // Namespaces and Agents are made before the chaos starts: the drill is about Agents.
    let mut setup = Client::connect(&url, NoTls).unwrap();
    let namespaces = fleet::namespaces(&mut setup, &fake, o.namespaces, "chaos");
    let agents: Vec<FleetAgent> = fleet::agents(&mut setup, &namespaces, o.agents);
    let labels: BTreeMap<String, bool> = agents
        .iter()
        .map(|a| (names::label_value(&a.id), a.dedicated()))
        .collect();
    let deadline = Instant::now() + o.timeout;
    let mut timed_out = None;

    // Phase 1: every deployment admitted at once, then the kills.
    d.chaos = true;
    d.next_kill = Instant::now() + o.kill_every;
    let t_deploy = Instant::now();
    fleet::admit_deployments(&mut setup, &agents);
    if !d.until_zero(
        "deploy",
        "SELECT count(*) FROM occ.work_status WHERE operation = 'revision_reconcile' AND state IN ('queued', 'claimed')",
        deadline,
    ) {
        timed_out = Some("deploy");
    }
    let deploy_s = t_deploy.elapsed().as_secs_f64();
    let mut report = String::new();
    let mut violations = 0i64;
    let mut check = |report: &mut String, what: &str, n: i64| {
        let _ = writeln!(report, "{what:<66} {n}");
        violations += n;
    };

    // Objects after the deployments: per kind and mode, how many each Agent holds.
    let mut objects = String::new();
    let mut duplicates = 0i64;
    for plural in WRITTEN {
        let n = per_agent(&fake, plural, &labels);
        for dedicated in [true, false] {
            let counts: Vec<usize> = labels
                .iter()
                .filter(|(_, d)| **d == dedicated)
                .map(|(id, _)| n.get(id).copied().unwrap_or(0))
                .collect();
            let (min, max) = (
                counts.iter().min().copied().unwrap_or(0),
                counts.iter().max().copied().unwrap_or(0),
            );
            let total: usize = counts.iter().sum();
            if total > 0 {
                let _ = writeln!(
                    objects,
                    "  {plural:<24} {:<9} total {total:>4}, per Agent {min}..{max}",
                    if dedicated { "dedicated" } else { "embedded" }
                );
            }
            // A duplicate is one more than most Agents of the mode hold (an Agent whose
            // deployment failed may hold fewer).
            let mut by_count = BTreeMap::new();
            for c in &counts {
                *by_count.entry(*c).or_insert(0usize) += 1;
            }
            let usual = by_count
                .iter()
                .max_by_key(|(c, n)| (**n, **c))
                .map_or(0, |(c, _)| *c);
            duplicates += counts.iter().filter(|c| **c > usual).count() as i64;
        }
    }
    let activated = count(
        &mut d.c,
        "SELECT count(*) FROM occ.agents WHERE active_revision_id IS NOT NULL",
    );
    // An Agent's deletion takes its revisions and works with it: the deployments are
    // judged, and their works reported, before the deletions are admitted.
    let deployed = deploy_checks(&mut d.c);
    let mut deploy_tables = String::new();
    let _ = writeln!(
        deploy_tables,
        "\n-- deployments: works by final state (occ.work_status) --"
    );
    deploy_tables += &table(
        &mut d.c,
        "SELECT operation, state, coalesce(reason_code, '-'), count(*) FROM occ.work_status
          WHERE agent_id IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 4 DESC",
    );
    let _ = writeln!(
        deploy_tables,
        "\n-- deployments: attempt evidence (occ.work_attempts) by outcome and code --"
    );
    deploy_tables += &table(
        &mut d.c,
        "SELECT w.operation, a.outcome, a.code, count(*) FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
          WHERE w.agent_id IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 4 DESC",
    );
    let _ = writeln!(
        deploy_tables,
        "\n-- deployments: attempts spent per work --"
    );
    deploy_tables += &table(
        &mut d.c,
        "SELECT operation, 'attempts ' || attempt_count, count(*) FROM occ.work_status
          WHERE agent_id IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2",
    );

    // Phase 2: every deletion admitted at once.
    let t_delete = Instant::now();
    let mut delete_s = 0.0;
    if timed_out.is_none() {
        fleet::admit_deletions(&mut setup, &agents);
        if !d.until_zero(
            "delete",
            "SELECT count(*) FROM occ.work_status WHERE operation = 'agent_delete' AND state IN ('queued', 'claimed')",
            deadline,
        ) {
            timed_out = Some("delete");
        }
        delete_s = t_delete.elapsed().as_secs_f64();
    }
    d.chaos = false;
    d.stop_all();
    // The fake's garbage collector and Pod terminations finish what a deletion started.
    let gc_deadline = Instant::now() + Duration::from_secs(30);
    let left = |fake: &KubeFake| -> BTreeMap<&'static str, usize> {
        ALL.iter()
            .map(|p| (*p, per_agent(fake, p, &labels).values().sum::<usize>()))
            .filter(|(_, n)| *n > 0)
            .collect()
    };
    while !left(&fake).is_empty() && Instant::now() < gc_deadline && timed_out.is_none() {
        std::thread::sleep(Duration::from_millis(200));
    }
    let leftovers = left(&fake);

    // The report.
    let c = &mut d.c;
    let _ = writeln!(
        report,
        "== occ-worker crash drill (Kubernetes driver, API server fake) =="
    );
    let _ = writeln!(
        report,
        "command:  cargo bench --bench chaos_kube -- --workers {} --threads {} --lease-ms {} --agents {} --namespaces {} --kill-every {} --restart-after {}{} --latency-ms {} --pod-start-ms {} --qps {} --burst {}",
        o.workers,
        o.threads,
        o.lease_ms,
        o.agents,
        o.namespaces,
        o.kill_every.as_secs_f64(),
        o.restart_after.as_secs_f64(),
        if o.kill { "" } else { " --no-kill" },
        o.latency.as_millis(),
        o.pod_start.as_millis(),
        o.qps,
        o.burst
    );
    let _ = writeln!(
        report,
        "machine:  nproc={}, load {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let _ = writeln!(report, "binary:   {}", binary.display());
    let _ = writeln!(report, "run dir:  {} (seed {seed})", o.out.display());
    if let Some(phase) = timed_out {
        let _ = writeln!(
            report,
            "!! TIMED OUT in phase {phase} after {:?}",
            o.timeout
        );
    }
    let kills: usize = d.slots.iter().map(|s| s.kills).sum();
    let exits: usize = d.slots.iter().map(|s| s.exits).sum();
    let _ = writeln!(
        report,
        "\n-- phases --\ndeploy: {} Agents ({} dedicated) admitted at once, {activated} activated, {deploy_s:.1} s\ndelete: {delete_s:.1} s\nSIGKILLs {kills}, workers that exited on their own {exits}",
        agents.len(),
        labels.values().filter(|d| **d).count(),
    );
    report += &deploy_tables;
    let _ = writeln!(
        report,
        "\n-- deletions: what is left of the fleet's works (a deleted Agent takes its own) --"
    );
    report += &table(
        c,
        "SELECT operation, state, coalesce(reason_code, '-'), 'attempts ' || attempt_count, count(*) FROM occ.work_status
          WHERE agent_id IS NOT NULL GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 5 DESC",
    );
    let _ = writeln!(
        report,
        "\n-- objects per Agent after the deployments --\n{objects}"
    );
    let all_events = events(&o.out);
    let mut pass_ms: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut successes: BTreeMap<String, usize> = BTreeMap::new();
    for e in &all_events {
        if e["event"] == "worker.completed" {
            if let (Some(op), Some(ms)) = (e["operation"].as_str(), e["timings"]["passMs"].as_u64())
            {
                pass_ms.entry(op.to_string()).or_default().push(ms);
            }
            if e["outcome"] == "success" {
                *successes.entry(e["workId"].to_string()).or_insert(0) += 1;
            }
        }
    }
    let _ = writeln!(
        report,
        "-- passMs per operation (worker.completed, every pass) --"
    );
    for (op, ms) in &mut pass_ms {
        ms.sort_unstable();
        let _ = writeln!(
            report,
            "  {op:<28} passes {:>4}  p50 {:>6}  p99 {:>6}  max {:>6}",
            ms.len(),
            percentile(ms, 0.5),
            percentile(ms, 0.99),
            ms.last().copied().unwrap_or(0)
        );
    }
    // A deleted Agent takes its works and their evidence: the events say how its passes ended.
    let mut ended: BTreeMap<String, usize> = BTreeMap::new();
    for e in &all_events {
        if e["event"] == "worker.completed" {
            let key = format!(
                "{} {} {}",
                e["operation"].as_str().unwrap_or("-"),
                e["outcome"].as_str().unwrap_or("-"),
                e["code"].as_str().unwrap_or("-")
            );
            *ended.entry(key).or_insert(0) += 1;
        }
    }
    let _ = writeln!(
        report,
        "\n-- passes by operation, outcome and code (worker.completed) --"
    );
    for (key, n) in &ended {
        let _ = writeln!(report, "  {key:<70} {n:>5}");
    }
    let _ = writeln!(
        report,
        "\n-- claims sampled every second ({} samples) --\nlongest a claim was held past its lease: {:.1} s (lease {} ms)",
        d.samples.taken, d.samples.most_past_lease, o.lease_ms
    );

    let _ = writeln!(report, "\n-- verdict (each must be 0) --");
    let q = count;
    for (what, n) in deployed {
        check(&mut report, what, n);
    }
    check(
        &mut report,
        "works with a success event from more than one pass (logs)",
        successes.values().filter(|n| **n > 1).count() as i64,
    );
    check(
        &mut report,
        "Agents deleted other than once (lifecycle.delete success audits)",
        agents
            .iter()
            .map(|a| {
                let n: i64 = c
                    .query_one(
                        "SELECT count(*) FROM occ.audit_events WHERE action = 'openclaw.agents.lifecycle.delete'
                           AND outcome = 'success' AND resource_id = $1",
                        &[&a.id],
                    )
                    .unwrap()
                    .get(0);
                i64::from(n != 1)
            })
            .sum(),
    );
    check(
        &mut report,
        "Agent works left after the deletions (failed_permanent or unfinished)",
        q(
            c,
            "SELECT count(*) FROM occ.work_status WHERE agent_id IS NOT NULL",
        ),
    );
    check(
        &mut report,
        "Agents not activated by their deployment",
        agents.len() as i64 - activated,
    );
    check(
        &mut report,
        "Agents with more objects of a kind than their peers (duplicates)",
        duplicates,
    );
    check(
        &mut report,
        "objects of deleted Agents left (30 s after the last deletion)",
        leftovers.values().sum::<usize>() as i64,
    );
    if !leftovers.is_empty() {
        let _ = writeln!(report, "  left: {leftovers:?}");
    }
    check(
        &mut report,
        "samples with a claim held past its lease by more than one lease",
        i64::from(d.samples.most_past_lease * 1000.0 > o.lease_ms as f64),
    );
    check(
        &mut report,
        "samples with a lane holding two claims",
        d.samples.two_claims as i64,
    );
    check(&mut report, "timed out", i64::from(timed_out.is_some()));
    let _ = std::fs::write(o.out.join("kills.log"), &d.kills_log);
    let _ = std::fs::write(o.out.join("report.txt"), &report);
    drop(d);
    drop(setup);
    fleet::drop_database(admin, &db);
    (report, violations)
}

fn main() {
    if fleet::answered_list("chaos_kube") {
        return;
    }
    let bench = std::env::args().any(|a| a == "--bench");
    if !bench && !fleet::smoke_selected("chaos_kube") {
        println!("chaos_kube: the smoke run is not selected by the filter");
        return;
    }
    let o = match parse(bench) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("chaos_kube: {e}");
            std::process::exit(2);
        }
    };
    let admin = std::env::var("OCC_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("OCC_TEST_DATABASE_URL"))
        .expect("OCC_BENCH_DATABASE_URL (scripts/chaos) or OCC_TEST_DATABASE_URL (scripts/test)");
    let (report, violations) = drill(&admin, &o);
    print!("{report}");
    // The workers' logs and events go to scripts/test's capture directory for its canary
    // scan (their kubeconfigs, which hold the fake's token, stay behind).
    if let Some(dir) = fleet::log_dir("chaos-kube") {
        for entry in std::fs::read_dir(o.out.join("workers"))
            .into_iter()
            .flatten()
        {
            let path = entry.expect("a worker log").path();
            if path.is_file() {
                std::fs::copy(&path, dir.join(path.file_name().unwrap()))
                    .expect("copy a worker log");
            }
        }
    }
    if !bench {
        let _ = std::fs::remove_dir_all(&o.out);
    }
    if violations > 0 {
        eprintln!("chaos_kube: {violations} violations (see the verdict above)");
        std::process::exit(3);
    }
}
