//! The rollout benchmark (`scripts/bench-rollout`): Agents deployed through the `occ-worker`
//! binary with the Kubernetes Compute Driver against the API server fake of `tests/it`, with
//! a fixed latency added to every API request, at several worker concurrencies.
//!
//! For each concurrency it reports the wall time of the rollout next to its bound, the API
//! requests the rollout made × the latency ÷ the concurrency (what a worker that only waited
//! on the API would take), and the API requests per deployment, per phase
//! (`kube_fake::phases`). These runs lift the client-side rate limit to 1,000 requests/s so
//! that it is not what they measure; one more run (`OCC_BENCH_SHIPPED_CONCURRENCY`, default
//! 16) keeps the driver file's defaults (`qps` 20, `burst` 40, `settings.rs`) and reports its
//! wall time next to the limit's bound, requests ÷ qps. Under `cargo bench` it runs
//! the full sizes; under `cargo test` (no `--bench` argument) a small smoke run that fails if
//! any deployment does not activate or a deployment costs more than `MAX_REQUESTS_PER_DEPLOYMENT`
//! API requests on average. It never asserts a timing.

#[path = "canary.rs"]
mod canary;
#[path = "fleet.rs"]
mod fleet;
#[path = "it/kube_fake/mod.rs"]
mod kube_fake;

use fleet::{count, WorkerRun};
use kube_fake::{FakeOptions, KubeFake};
use postgres::{Client, NoTls};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The client-side rate limit the benchmark runs with (the driver file's `qps` and `burst`),
/// far above the default 20/40 so that it measures the worker, not the limit; every row says it.
const QPS: u32 = 1000;
const BURST: u32 = 1000;

/// The driver file's defaults (`settings.rs`), which the shipped run keeps.
const SHIPPED_QPS: u32 = 20;
const SHIPPED_BURST: u32 = 40;

/// The most API requests a deployment may cost on average in the smoke run.
const MAX_REQUESTS_PER_DEPLOYMENT: f64 = 7.0;

use kube_fake::DRIVER_FILE;

/// The fake's driver file without its `qps` and `burst`: the shipped defaults apply.
fn shipped_driver_file() -> String {
    let file: String = DRIVER_FILE
        .lines()
        .filter(|l| !l.contains("\"qps\"") && !l.contains("\"burst\""))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !file.contains("qps") && !file.contains("burst"),
        "the shipped run keeps the defaults"
    );
    file
}

struct Run<'a> {
    agents: usize,
    namespaces: usize,
    concurrency: usize,
    latency: Duration,
    driver_file: &'a str,
    /// Names the run's database, scratch directory and captures.
    label: String,
}

struct Measured {
    wall: Duration,
    admission: Duration,
    requests: usize,
    phases: std::collections::BTreeMap<&'static str, usize>,
}

fn run(admin: &str, spec: &Run) -> Measured {
    let fake = KubeFake::start(FakeOptions {
        latency: spec.latency,
        pod_start: Duration::from_millis(50),
        pod_termination: Duration::from_millis(50),
        ..FakeOptions::default()
    });
    let dir = std::env::temp_dir().join(format!(
        "occ-bench-rollout-{}-{}",
        std::process::id(),
        spec.label
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("occ_bench_rollout_{}", spec.label);
    let url = fleet::database(admin, &db);
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_occ-worker"));
    let captured =
        |what: &str| fleet::log_dir("rollout").map(|d| d.join(format!("{}.{what}", spec.label)));
    let mut child = fleet::worker(
        &fake,
        &WorkerRun {
            binary: &binary,
            url: &url,
            dir: &dir,
            driver_file: spec.driver_file,
            concurrency: spec.concurrency,
            lease_ms: 10_000,
            // The worker's event lines, to see where a run spends its time.
            // Under scripts/test, both go to its capture directory for the canary scan.
            events: std::env::var_os("OCC_BENCH_WORKER_EVENTS")
                .map(PathBuf::from)
                .or_else(|| captured("events.jsonl")),
            // The worker's log (RUST_LOG is passed on), e.g. trace for request timings.
            log: std::env::var_os("OCC_BENCH_WORKER_LOG")
                .map(PathBuf::from)
                .or_else(|| captured("stderr")),
        },
    );
    let mut c = Client::connect(&url, NoTls).unwrap();

    // Namespaces and Agents first; only the deployments are measured.
    let namespaces = fleet::namespaces(&mut c, &fake, spec.namespaces, "team");
    let agents = fleet::agents(&mut c, &namespaces, spec.agents);

    fake.clear_requests();
    let admitting = Instant::now();
    fleet::admit_deployments(&mut c, &agents);
    let admission = admitting.elapsed();
    let started = Instant::now();
    fleet::wait("rollout", Duration::from_secs(3600), || {
        count(
            &mut c,
            "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE 'agent_revision:%' AND state IN ('queued', 'claimed')",
        ) == 0
    });
    let wall = started.elapsed();
    let recorded = fake.requests();
    if std::env::var_os("OCC_BENCH_DUMP").is_some() {
        for r in &recorded {
            eprintln!("REQ {} {} {}", r.method, r.status, r.path);
        }
    }
    let requests = recorded.len();
    let phases = kube_fake::phases(&recorded);
    let activated = count(
        &mut c,
        "SELECT count(*) FROM occ.agents WHERE active_revision_id IS NOT NULL",
    );
    assert_eq!(activated, agents.len() as i64, "every deployment activated");
    let _ = child.kill();
    let _ = child.wait();
    drop(c);
    fleet::drop_database(admin, &db);
    let _ = std::fs::remove_dir_all(&dir);
    Measured {
        wall,
        admission,
        requests,
        phases,
    }
}

fn main() {
    if fleet::answered_list("rollout") {
        return;
    }
    let bench = std::env::args().any(|a| a == "--bench");
    if !bench && !fleet::smoke_selected("rollout") {
        println!("rollout: the smoke run is not selected by the filter");
        return;
    }
    let admin = std::env::var("OCC_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("OCC_TEST_DATABASE_URL"))
        .expect("OCC_BENCH_DATABASE_URL (scripts/bench-rollout) or OCC_TEST_DATABASE_URL (scripts/test)");
    let agents: usize = std::env::var("OCC_BENCH_AGENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench { 500 } else { 4 });
    let latency = Duration::from_millis(match std::env::var("OCC_BENCH_LATENCY_MS") {
        Ok(ms) => ms.parse().expect("OCC_BENCH_LATENCY_MS: milliseconds"),
        Err(_) if bench => 20,
        Err(_) => 0,
    });
    let concurrencies: Vec<usize> = match std::env::var("OCC_BENCH_CONCURRENCY") {
        Ok(list) => list
            .split(',')
            .map(|c| {
                c.trim()
                    .parse()
                    .expect("OCC_BENCH_CONCURRENCY: comma-separated numbers")
            })
            .collect(),
        Err(_) if bench => vec![1, 4, 16],
        Err(_) => vec![2],
    };
    let shipped: Option<usize> = match std::env::var("OCC_BENCH_SHIPPED_CONCURRENCY") {
        Ok(c) => Some(c.parse().expect("OCC_BENCH_SHIPPED_CONCURRENCY: a number")),
        Err(_) if bench => Some(16),
        Err(_) => None,
    };
    let shipped_file = shipped_driver_file();
    let mut rows = Vec::new();
    let mut runs: Vec<(usize, &str, u32, u32, String)> = concurrencies
        .iter()
        .map(|&c| (c, DRIVER_FILE, QPS, BURST, format!("c{c}")))
        .collect();
    if let Some(c) = shipped {
        runs.push((
            c,
            &shipped_file,
            SHIPPED_QPS,
            SHIPPED_BURST,
            format!("shipped_c{c}"),
        ));
    }
    for (concurrency, driver_file, qps, burst, label) in runs {
        let spec = Run {
            agents,
            namespaces: agents.clamp(1, 20),
            concurrency,
            latency,
            driver_file,
            label,
        };
        let m = run(&admin, &spec);
        let bound = latency.as_secs_f64() * m.requests as f64 / concurrency as f64;
        // The rate limit's own bound, requests ÷ qps (the burst, spent at once, takes
        // burst ÷ qps off it at most).
        let rate_bound = m.requests as f64 / f64::from(qps);
        let per_deployment = m.requests as f64 / agents as f64;
        let phases: serde_json::Map<String, serde_json::Value> = m
            .phases
            .iter()
            .map(|(p, n)| (p.to_string(), json!(*n as f64 / agents as f64)))
            .collect();
        let row = json!({
            "agents": agents,
            "concurrency": concurrency,
            "latencyMs": latency.as_millis() as u64,
            "wallSeconds": m.wall.as_secs_f64(),
            "admissionSeconds": m.admission.as_secs_f64(),
            "apiRequests": m.requests,
            "requestsPerDeployment": per_deployment,
            "requestsPerDeploymentByPhase": phases,
            // Without the driver's 60 s re-checks of objects it knew (`KNOWN_FOR`): upkeep
            // that comes with time, not with the deployment.
            "requestsPerDeploymentBeyondRecheck":
                (m.requests - m.phases["known_for_recheck"]) as f64 / agents as f64,
            "boundSeconds": bound,
            "ratioToBound": if bound > 0.0 { m.wall.as_secs_f64() / bound } else { 0.0 },
            "rateLimitBoundSeconds": rate_bound,
            "clientQps": qps,
            "clientBurst": burst,
        });
        println!("{row}");
        rows.push(row);
        if !bench {
            assert!(
                per_deployment <= MAX_REQUESTS_PER_DEPLOYMENT,
                "{per_deployment} API requests per deployment, more than {MAX_REQUESTS_PER_DEPLOYMENT}: {:?}",
                m.phases
            );
        }
    }
    println!("{}", json!({"rollout": rows}));
}
