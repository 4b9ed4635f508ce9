//! The rollout benchmark (`scripts/bench-rollout`): Agents deployed through the `occ-worker`
//! binary with the Kubernetes Compute Driver against the API server fake of `tests/it`, with
//! a fixed latency added to every API request, at several worker concurrencies.
//!
//! For each concurrency it reports the wall time of the rollout next to its bound, the API
//! requests the rollout made × the latency ÷ the concurrency (what a worker that only waited
//! on the API would take), and the API requests per deployment. Under `cargo bench` it runs
//! the full sizes; under `cargo test` (no `--bench` argument) a small smoke run that fails if
//! any deployment does not activate. It never asserts a timing.

#[path = "it/kube_fake/mod.rs"]
mod kube_fake;
#[path = "it/support.rs"]
mod support;

use kube_fake::{FakeOptions, KubeFake, KubeconfigAuth};
use occ_worker::compute::kubernetes::names;
use postgres::{Client, NoTls};
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The client-side rate limit the benchmark runs with (the driver file's `qps` and `burst`),
/// far above the default 20/40 so that it measures the worker, not the limit; every row says it.
const QPS: u32 = 1000;
const BURST: u32 = 1000;

use kube_fake::DRIVER_FILE;

struct Run {
    agents: usize,
    namespaces: usize,
    concurrency: usize,
    latency: Duration,
}

struct Measured {
    wall: Duration,
    admission: Duration,
    requests: usize,
}

fn with_db(url: &str, db: &str) -> String {
    let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(url);
    format!("{base}/{db}")
}

fn wait(what: &str, limit: Duration, done: impl FnMut() -> bool) {
    support::wait_for(what, limit, done)
}

fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

/// A fresh migrated and bootstrapped database on the server at `admin`.
fn database(admin: &str, name: &str) -> String {
    let mut a = Client::connect(admin, NoTls).expect("connect to the benchmark server");
    a.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .unwrap();
    a.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    let url = with_db(admin, name);
    let mut c = Client::connect(&url, NoTls).unwrap();
    occ_worker::migrate::run(&mut c).expect("migrate");
    c.execute("SELECT occ.bootstrap('inst', 'admin')", &[])
        .unwrap();
    url
}

fn worker(url: &str, fake: &KubeFake, dir: &std::path::Path, concurrency: usize) -> Child {
    let kubeconfig = fake.write_kubeconfig(dir, KubeconfigAuth::Token);
    let driver = dir.join("driver.json");
    std::fs::write(&driver, DRIVER_FILE).unwrap();
    Command::new(env!("CARGO_BIN_EXE_occ-worker"))
        .arg("run")
        .env_clear()
        .env("OCC_DATABASE_URL", url)
        .env("OCC_COMPUTE_DRIVER", "kubernetes")
        .env("OCC_KUBERNETES_CONFIG", &driver)
        .env("KUBECONFIG", &kubeconfig)
        .env("OCC_WORKER_HTTP_ADDR", "127.0.0.1:0")
        .env("OCC_WORKER_CONCURRENCY", concurrency.to_string())
        .env("OCC_WORKER_LEASE_MS", "10000")
        .stdin(Stdio::null())
        .stdout(match std::env::var_os("OCC_BENCH_WORKER_EVENTS") {
            // The worker's event lines, to see where a run spends its time.
            Some(path) => Stdio::from(std::fs::File::create(path).expect("worker events file")),
            None => Stdio::null(),
        })
        .stderr(match std::env::var_os("OCC_BENCH_WORKER_LOG") {
            // The worker's log (RUST_LOG is passed on), e.g. trace for request timings.
            Some(path) => Stdio::from(std::fs::File::create(path).expect("worker log file")),
            None => Stdio::null(),
        })
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .spawn()
        .expect("spawn occ-worker")
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
        spec.concurrency
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let url = database(admin, &format!("occ_bench_rollout_{}", spec.concurrency));
    let mut child = worker(&url, &fake, &dir, spec.concurrency);
    let mut c = Client::connect(&url, NoTls).unwrap();

    // Namespaces and Agents first; only the deployments are measured.
    let namespaces: Vec<String> = (0..spec.namespaces)
        .map(|i| {
            let v: Value = c
                .query_one(
                    "SELECT occ.namespace_create('admin', $1)",
                    &[&format!("team-{i}")],
                )
                .unwrap()
                .get(0);
            v["id"].as_str().unwrap().to_string()
        })
        .collect();
    let mut bound = vec![false; namespaces.len()];
    wait("namespaces created", Duration::from_secs(600), || {
        for (i, id) in namespaces.iter().enumerate() {
            let name = names::namespace_name("occ-", id);
            if !bound[i] && fake.get(&format!("/api/v1/namespaces/{name}")).is_some() {
                fake.put_object(
                    &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{name}/rolebindings"),
                    json!({"metadata": {"name": "occ-tenant", "namespace": name},
                           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                           "subjects": []}),
                );
                bound[i] = true;
            }
        }
        bound.iter().all(|b| *b)
    });
    wait("namespaces ready", Duration::from_secs(600), || {
        count(
            &mut c,
            "SELECT count(*) FROM occ.namespaces WHERE status = 'ready'",
        ) == namespaces.len() as i64
    });
    let mut agents = Vec::new();
    for (i, ns) in namespaces.iter().enumerate() {
        let k8s = names::namespace_name("occ-", ns);
        c.execute(
            "SELECT occ.configuration_put($1, 'cfg', '{\"model\": \"m\"}', 'admin')",
            &[ns],
        )
        .unwrap();
        c.execute(
            "SELECT occ.secret_create($1, 'key', $2, 'admin')",
            &[ns, &format!("{k8s}/keys/api")],
        )
        .unwrap();
        for j in (i..spec.agents).step_by(spec.namespaces) {
            let v: Value = c
                .query_one(
                    "SELECT occ.agent_create($1, $2, 'admin')",
                    &[ns, &format!("a{j}")],
                )
                .unwrap()
                .get(0);
            let principal = v["servicePrincipalId"].as_str().unwrap().to_string();
            c.execute(
                "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
                 VALUES ($1, 'agent-operator', 'resource', $2, 'secret', 'key')",
                &[&principal, ns],
            )
            .unwrap();
            agents.push((ns.clone(), v["id"].as_str().unwrap().to_string(), j));
        }
    }

    fake.clear_requests();
    // A fleet rollout: every deployment admitted in one transaction, so the works become
    // claimable together and the wall time is the worker's, not the admitting client's.
    let admitting = Instant::now();
    let mut tx = c.transaction().unwrap();
    for (ns, agent, j) in &agents {
        let (harness, mode) = if j % 2 == 0 {
            ("codex", "dedicated")
        } else {
            ("openclaw", "embedded")
        };
        tx.execute(
            "SELECT occ.agent_deploy($1, $2, 'admin', 'cfg', $3, $4, 'key', 'kubernetes', 'kubernetes')",
            &[ns, agent, &harness, &mode],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    let admission = admitting.elapsed();
    let started = Instant::now();
    wait("rollout", Duration::from_secs(3600), || {
        count(
            &mut c,
            "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE 'agent_revision:%' AND state IN ('queued', 'claimed')",
        ) == 0
    });
    let wall = started.elapsed();
    let requests = fake.requests().len();
    let activated = count(
        &mut c,
        "SELECT count(*) FROM occ.agents WHERE active_revision_id IS NOT NULL",
    );
    assert_eq!(activated, agents.len() as i64, "every deployment activated");
    let _ = child.kill();
    let _ = child.wait();
    drop(c);
    let mut a = Client::connect(admin, NoTls).unwrap();
    let _ = a.batch_execute(&format!(
        "DROP DATABASE IF EXISTS occ_bench_rollout_{} WITH (FORCE)",
        spec.concurrency
    ));
    let _ = std::fs::remove_dir_all(&dir);
    Measured {
        wall,
        admission,
        requests,
    }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
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
    let mut rows = Vec::new();
    for &concurrency in &concurrencies {
        let spec = Run {
            agents,
            namespaces: agents.clamp(1, 20),
            concurrency,
            latency,
        };
        let m = run(&admin, &spec);
        let bound = latency.as_secs_f64() * m.requests as f64 / concurrency as f64;
        let row = json!({
            "agents": agents,
            "concurrency": concurrency,
            "latencyMs": latency.as_millis() as u64,
            "wallSeconds": m.wall.as_secs_f64(),
            "admissionSeconds": m.admission.as_secs_f64(),
            "apiRequests": m.requests,
            "requestsPerDeployment": m.requests as f64 / agents as f64,
            "boundSeconds": bound,
            "ratioToBound": if bound > 0.0 { m.wall.as_secs_f64() / bound } else { 0.0 },
            "clientQps": QPS,
            "clientBurst": BURST,
        });
        println!("{row}");
        rows.push(row);
    }
    println!("{}", json!({"rollout": rows}));
}
