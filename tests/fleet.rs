//! A fleet of Agents on the Kubernetes API server fake, driven through the `occ-worker`
//! binary: what the rollout benchmark (`tests/bench_rollout.rs`) and the Kubernetes crash
//! drill (`tests/chaos_kube.rs`) share. A fresh migrated database, worker processes with the
//! Kubernetes Compute Driver, Namespaces made ready (the fake has no cluster administrator, so
//! the tenant RoleBinding each needs is placed here once its Kubernetes namespace exists),
//! Agents with a configuration, a secret and the grant to read it, and one transaction that
//! admits every deployment (half dedicated, half embedded).

#![allow(dead_code)] // Each bench uses a subset.

use crate::kube_fake::{KubeFake, KubeconfigAuth};
use occ_worker::compute::kubernetes::names;
use postgres::{Client, NoTls};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Everything an Agent may own in the fake: none may be left once it is deleted.
pub const AGENT_OBJECT_KINDS: [&str; 10] = [
    "deployments",
    "services",
    "networkpolicies",
    "persistentvolumeclaims",
    "serviceaccounts",
    "secrets",
    "configmaps",
    "pods",
    "replicasets",
    "endpointslices",
];

/// Under `cargo test` (no `--bench`), whether this harness-less target's smoke run named
/// `name` is selected by the arguments `cargo test` passes on, as libtest selects a test: a
/// filter (an argument that is not a flag) must be contained in `name` (equal with `--exact`),
/// `--skip S` skips a name containing S, and other flags (`--nocapture`, `--test-threads N`)
/// change nothing. So `scripts/test cli_` runs no smoke run and `scripts/test chaos` this one.
pub fn smoke_selected(name: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut filters, mut skips, mut exact) = (Vec::new(), Vec::new(), false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--exact" => exact = true,
            "--skip" => skips.extend(it.next().cloned()),
            "--test-threads" | "--color" | "--format" | "--logfile" | "-Z" | "--shuffle-seed" => {
                it.next();
            }
            flag if flag.starts_with('-') => {}
            filter => filters.push(filter.to_string()),
        }
    }
    let matches = |f: &String| {
        if exact {
            name == f
        } else {
            name.contains(f.as_str())
        }
    };
    (filters.is_empty() || filters.iter().any(matches))
        && !skips.iter().any(|s| name.contains(s.as_str()))
}

/// Whether this is a test runner asking for the target's tests (`--list`, as libtest answers
/// it: nextest lists with `--list --format terse`, and again with `--ignored`), answered here:
/// the one smoke run `name` as `NAME: test`, none of them ignored. The runner then runs it with
/// `--exact NAME`, which `smoke_selected` selects.
pub fn answered_list(name: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--list") {
        return false;
    }
    if !args.iter().any(|a| a == "--ignored") && smoke_selected(name) {
        println!("{name}: test");
    }
    true
}

pub fn with_db(url: &str, db: &str) -> String {
    let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(url);
    format!("{base}/{db}")
}

/// Polls `done` every 50 ms; panics naming `what` when `limit` passes first.
pub fn wait(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

/// A fresh migrated and bootstrapped database `name` on the server at `admin`.
pub fn database(admin: &str, name: &str) -> String {
    let mut a = Client::connect(admin, NoTls).expect("connect to the PostgreSQL server");
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

pub fn drop_database(admin: &str, name: &str) {
    if let Ok(mut a) = Client::connect(admin, NoTls) {
        let _ = a.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    }
}

/// How a worker process of the fleet runs.
pub struct WorkerRun<'a> {
    pub binary: &'a Path,
    pub url: &'a str,
    /// Where its kubeconfig and driver file are written.
    pub dir: &'a Path,
    pub driver_file: &'a str,
    pub concurrency: usize,
    pub lease_ms: u64,
    /// Its event lines, appended (a restarted process adds to them); none when `None`.
    pub events: Option<PathBuf>,
    /// Its log (RUST_LOG is passed on), appended.
    pub log: Option<PathBuf>,
}

/// The suite's capture directory (`OCC_TEST_LOG_DIR`, set by `scripts/test`), where a smoke
/// run's worker logs go for `scripts/canary-scan`.
pub fn log_dir(run: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("OCC_TEST_LOG_DIR")?).join(run);
    std::fs::create_dir_all(&dir).expect("create the test log directory");
    Some(dir)
}

/// The workers' log filter without `RUST_LOG`: under `scripts/test` every record of the worker
/// itself and of ureq-proto's wire dump (which the worker must drop, events::NEVER_LOGGED), so
/// the canary scan reads what an operator's most verbose setting would write.
fn log_filter() -> &'static str {
    if std::env::var_os("OCC_TEST_LOG_DIR").is_some() {
        "warn,occ_worker=trace,ureq_proto=trace"
    } else {
        "warn"
    }
}

fn append(path: &Option<PathBuf>) -> Stdio {
    match path {
        Some(p) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .expect("worker output file"),
        ),
        None => Stdio::null(),
    }
}

pub fn worker(fake: &KubeFake, run: &WorkerRun<'_>) -> Child {
    let kubeconfig = fake.write_kubeconfig(run.dir, KubeconfigAuth::Token);
    let driver = run.dir.join("driver.json");
    std::fs::write(&driver, run.driver_file).unwrap();
    Command::new(run.binary)
        .arg("run")
        .env_clear()
        .env("OCC_DATABASE_URL", run.url)
        .env("OCC_COMPUTE_DRIVER", "kubernetes")
        .env("OCC_KUBERNETES_CONFIG", &driver)
        .env("KUBECONFIG", &kubeconfig)
        .env("OCC_WORKER_HTTP_ADDR", "127.0.0.1:0")
        .env("OCC_WORKER_CONCURRENCY", run.concurrency.to_string())
        .env("OCC_WORKER_LEASE_MS", run.lease_ms.to_string())
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| log_filter().into()),
        )
        .stdin(Stdio::null())
        .stdout(append(&run.events))
        .stderr(append(&run.log))
        .spawn()
        .expect("spawn occ-worker")
}

/// `n` Namespaces `<prefix>-<i>`, admitted and made ready (their tenant RoleBinding placed as
/// their Kubernetes namespaces appear); their ids.
pub fn namespaces(c: &mut Client, fake: &KubeFake, n: usize, prefix: &str) -> Vec<String> {
    let ids: Vec<String> = (0..n)
        .map(|i| {
            let v: Value = c
                .query_one(
                    "SELECT occ.namespace_create('admin', $1)",
                    &[&format!("{prefix}-{i}")],
                )
                .unwrap()
                .get(0);
            v["id"].as_str().unwrap().to_string()
        })
        .collect();
    let mut bound = vec![false; ids.len()];
    wait("namespaces created", Duration::from_secs(600), || {
        for (i, id) in ids.iter().enumerate() {
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
        let ready = count(
            c,
            "SELECT count(*) FROM occ.namespaces WHERE status = 'ready'",
        );
        ready >= ids.len() as i64
    });
    ids
}

/// An Agent of the fleet: its Namespace, id, and index (even: dedicated, odd: embedded).
#[derive(Clone, Debug)]
pub struct FleetAgent {
    pub namespace: String,
    pub id: String,
    pub index: usize,
}

impl FleetAgent {
    pub fn dedicated(&self) -> bool {
        self.index.is_multiple_of(2)
    }
}

/// `agents` Agents spread over `namespaces`, each with the configuration `cfg` and the secret
/// `key` of its Namespace and its service principal's grant to read it.
pub fn agents(c: &mut Client, namespaces: &[String], agents: usize) -> Vec<FleetAgent> {
    let mut out = Vec::new();
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
        for j in (i..agents).step_by(namespaces.len()) {
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
            out.push(FleetAgent {
                namespace: ns.clone(),
                id: v["id"].as_str().unwrap().to_string(),
                index: j,
            });
        }
    }
    out
}

/// Every deployment admitted in one transaction (a fleet rollout: the works become claimable
/// together, so the wall time is the workers', not the admitting client's).
pub fn admit_deployments(c: &mut Client, agents: &[FleetAgent]) {
    let mut tx = c.transaction().unwrap();
    for a in agents {
        let (harness, mode) = if a.dedicated() {
            ("codex", "dedicated")
        } else {
            ("openclaw", "embedded")
        };
        tx.execute(
            "SELECT occ.agent_deploy($1, $2, 'admin', 'cfg', $3, $4, 'key', 'kubernetes', 'kubernetes')",
            &[&a.namespace, &a.id, &harness, &mode],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

/// Every deletion admitted in one transaction.
pub fn admit_deletions(c: &mut Client, agents: &[FleetAgent]) {
    let mut tx = c.transaction().unwrap();
    for a in agents {
        tx.execute(
            "SELECT occ.agent_delete($1, $2, 'admin')",
            &[&a.namespace, &a.id],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}
