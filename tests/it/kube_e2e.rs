//! End to end on Kubernetes: two `occ-worker run` processes with the Kubernetes Compute
//! Driver against the API server fake over TLS (SPEC C3, N1-N5, A1, A2, R1-R9).
//!
//! Namespaces are created and become ready once the operator's tenant RoleBinding exists;
//! Agents get two revisions each (dedicated and embedded), the second replacing the first;
//! then every Agent is stopped and deleted and every Namespace deleted. At the end nothing the
//! driver created is left in the fake, and every activated revision has exactly one
//! activation audit.

use crate::agent::create_agent;
use crate::kube_fake::{FakeOptions, KubeFake, KubeconfigAuth};
use crate::support::{scalar, wait_for, worker_command, Env, TestDb, WorkerProcess};
use occ_worker::compute::kubernetes::names;
use postgres::Client;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The driver file every test here uses (docs/kubernetes.md's example, with test images).
/// The client-side rate limit is far above the default 20/40 here, so the tests wait on the
/// worker and the fake, not on the limit (`kubernetes::c3_the_client_side_rate_limit_spaces_requests`
/// checks the limit itself).
pub use crate::kube_fake::DRIVER_FILE;

/// A fresh directory for one test's kubeconfig and driver file.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "occ-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The environment of a Kubernetes worker process on `db` against `fake`.
pub fn kube_env(db: &TestDb, fake: &KubeFake, dir: &Path, concurrency: usize) -> Env {
    let kubeconfig = fake.write_kubeconfig(dir, KubeconfigAuth::Token);
    let driver = dir.join("driver.json");
    std::fs::write(&driver, DRIVER_FILE).unwrap();
    vec![
        ("OCC_DATABASE_URL", db.url.clone()),
        ("OCC_COMPUTE_DRIVER", "kubernetes".into()),
        ("OCC_KUBERNETES_CONFIG", driver.display().to_string()),
        ("KUBECONFIG", kubeconfig.display().to_string()),
        ("OCC_WORKER_HTTP_ADDR", "127.0.0.1:0".into()),
        ("OCC_WORKER_DB_TIMEOUT_MS", "5000".into()),
        ("OCC_WORKER_CONCURRENCY", concurrency.to_string()),
        ("OCC_WORKER_POLL_INTERVAL_MS", "100".into()),
    ]
}

/// The Kubernetes namespace name of a Namespace id (the default prefix).
pub fn k8s_namespace(id: &str) -> String {
    names::namespace_name("occ-", id)
}

/// Creates `count` Namespaces and, once the worker has created each Kubernetes namespace,
/// the operator's tenant RoleBinding in it; returns the Namespace ids once all are ready.
pub fn ready_namespaces(c: &mut Client, fake: &KubeFake, count: usize) -> Vec<String> {
    let ids: Vec<String> = (0..count)
        .map(|i| {
            let v: Value = crate::support::one(
                c,
                "SELECT occ.namespace_create('admin', $1)",
                &[&format!("team-{i}")],
            );
            v["id"].as_str().unwrap().to_string()
        })
        .collect();
    let mut bound = vec![false; count];
    wait_for(
        "tenant namespaces created",
        Duration::from_secs(120),
        || {
            for (i, id) in ids.iter().enumerate() {
                let name = k8s_namespace(id);
                if !bound[i] && fake.get(&format!("/api/v1/namespaces/{name}")).is_some() {
                    fake.put_tenant_rolebinding(&name);
                    bound[i] = true;
                }
            }
            bound.iter().all(|b| *b)
        },
    );
    wait_for("namespaces ready", Duration::from_secs(120), || {
        let ready: i64 = scalar(
            c,
            "SELECT count(*) FROM occ.namespaces WHERE status = 'ready'",
        );
        ready == count as i64
    });
    for id in &ids {
        c.execute(
            "SELECT occ.configuration_put($1, 'cfg', '{\"model\": \"m\"}', 'admin')",
            &[id],
        )
        .unwrap();
        c.execute(
            "SELECT occ.secret_create($1, 'key', $2, 'admin')",
            &[id, &format!("{}/keys/api", k8s_namespace(id))],
        )
        .unwrap();
    }
    ids
}

/// Admits a deployment on the Kubernetes Compute; returns the revision id.
pub fn deploy(c: &mut Client, ns: &str, agent: &str, harness: &str, mode: &str) -> String {
    let v: Value = crate::support::one(
        c,
        "SELECT occ.agent_deploy($1, $2, 'admin', 'cfg', $3, $4, 'key', 'kubernetes', 'kubernetes')",
        &[&ns, &agent, &harness, &mode],
    );
    v["revisionId"].as_str().unwrap().to_string()
}

/// Objects the driver created that the fake still holds, by resource.
pub fn leftovers(fake: &KubeFake) -> Vec<String> {
    let mut left = Vec::new();
    for kind in [
        "namespaces",
        "networkpolicies",
        "serviceaccounts",
        "services",
        "persistentvolumeclaims",
        "deployments",
        "replicasets",
        "pods",
    ] {
        for o in fake.objects(kind) {
            let labels = &o["metadata"]["labels"];
            if labels["app.kubernetes.io/managed-by"] == "occ-worker"
                || labels.get("occ.agent").is_some()
            {
                left.push(format!("{kind}/{}", o["metadata"]["name"]));
            }
        }
    }
    left
}

fn all_done(c: &mut Client, prefix: &str) -> bool {
    let open: i64 = crate::support::one(
        c,
        "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE $1 AND state IN ('queued', 'claimed')",
        &[&format!("{prefix}%")],
    );
    open == 0
}

#[test]
fn c3_twenty_namespaces_fifty_agents_two_revisions_on_two_worker_processes() {
    const NAMESPACES: usize = 20;
    const AGENTS: usize = 50;
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(50),
        terminating_for: Duration::from_millis(200),
        ..FakeOptions::default()
    });
    let dir = scratch("kube-e2e");
    let db = TestDb::bootstrapped();
    let env = kube_env(&db, &fake, &dir, 4);
    let workers: Vec<WorkerProcess> = (0..2)
        .map(|_| WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap()))
        .collect();
    let mut c = db.client();
    let namespaces = ready_namespaces(&mut c, &fake, NAMESPACES);

    // Two revisions each, the second admitted once the first is active.
    let agents: Vec<(String, String, &str, &str)> = (0..AGENTS)
        .map(|i| {
            let ns = namespaces[i % NAMESPACES].clone();
            let (agent, _) = create_agent(&mut c, &ns, &format!("a{i}"));
            let (harness, mode) = if i % 2 == 0 {
                ("codex", "dedicated")
            } else {
                ("openclaw", "embedded")
            };
            (ns, agent, harness, mode)
        })
        .collect();
    let first: Vec<String> = agents
        .iter()
        .map(|(ns, agent, h, m)| deploy(&mut c, ns, agent, h, m))
        .collect();
    wait_for("first revisions active", Duration::from_secs(240), || {
        all_done(&mut c, "agent_revision:")
    });
    let active_first: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.agents a JOIN occ.agent_revisions r ON r.id = a.active_revision_id WHERE r.revision = 1",
    );
    assert_eq!(active_first, AGENTS as i64, "every first revision active");
    let second: Vec<String> = agents
        .iter()
        .map(|(ns, agent, h, m)| deploy(&mut c, ns, agent, h, m))
        .collect();
    wait_for("second revisions active", Duration::from_secs(240), || {
        all_done(&mut c, "agent_revision:")
    });
    for rev in &second {
        let active: i64 = crate::support::one(
            &mut c,
            "SELECT count(*) FROM occ.agents WHERE active_revision_id = $1",
            &[rev],
        );
        assert_eq!(active, 1, "revision {rev} replaced its predecessor");
    }
    // Exactly one activation audit per activated revision.
    let audits: Vec<(String, i64)> = c
        .query(
            "SELECT resource_id, count(*) FROM occ.audit_events
             WHERE action = 'openclaw.agents.lifecycle.activate' GROUP BY resource_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(audits.iter().all(|(_, n)| *n == 1), "{audits:?}");
    assert_eq!(audits.len(), first.len() + second.len());
    // Every Agent has its one gateway (SPEC C3); a dedicated one also a Harness Deployment per
    // live revision (the first is retired).
    let dedicated = agents.iter().filter(|a| a.3 == "dedicated").count();
    let deployments = fake.objects("deployments").len();
    assert_eq!(
        deployments,
        AGENTS + dedicated,
        "one gateway per Agent and one Harness per dedicated Agent after replacement"
    );

    for (ns, agent, _, _) in &agents {
        c.execute("SELECT occ.agent_stop($1, $2, 'admin')", &[ns, agent])
            .unwrap();
    }
    wait_for("agents stopped", Duration::from_secs(240), || {
        all_done(&mut c, "agent:")
    });
    let stopped: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key LIKE 'agent:%:stop:%' AND reason_code = 'AGENT_STOPPED'",
    );
    assert_eq!(stopped, AGENTS as i64);
    let pods = fake
        .objects("pods")
        .iter()
        .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
        .count();
    assert_eq!(pods, 0, "a stopped Agent runs no Pod");

    for (ns, agent, _, _) in &agents {
        c.execute("SELECT occ.agent_delete($1, $2, 'admin')", &[ns, agent])
            .unwrap();
    }
    wait_for("agents deleted", Duration::from_secs(240), || {
        scalar::<i64>(&mut c, "SELECT count(*) FROM occ.agents") == 0
    });
    for ns in &namespaces {
        c.execute("SELECT occ.namespace_delete('admin', $1)", &[ns])
            .unwrap();
    }
    wait_for("namespaces deleted", Duration::from_secs(240), || {
        scalar::<i64>(&mut c, "SELECT count(*) FROM occ.namespaces") == 0
    });
    let failed: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work_status WHERE state = 'failed_permanent'",
    );
    assert_eq!(failed, 0);
    wait_for(
        "nothing left in the cluster",
        Duration::from_secs(30),
        || leftovers(&fake).is_empty(),
    );
    for w in workers {
        w.signal("TERM");
        let (status, stderr) = w.wait(Duration::from_secs(30));
        assert!(status.success(), "worker exit {status:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs `occ-worker check --json` with `env`; (exit code, stdout, stderr).
fn check(env: &Env) -> (Option<i32>, String, String) {
    let out = crate::support::logged(
        "worker.check",
        worker_command(&["check", "--json"], env)
            .output()
            .expect("run occ-worker check"),
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn production(mut env: Env) -> Env {
    env.push(("OCC_WORKER_MODE", "production".into()));
    env.push(("OCC_WORKER_LEASE_MS", "5000".into()));
    env.push(("OCC_WORKER_MAX_ATTEMPTS", "5".into()));
    env
}

// C3 preflight, W8: `check` asks the API server verb by verb and fails on any denial (an
// operator's gate stops a bad install); `run` logs each denial as a warning and starts, in
// production too.
#[test]
fn c3_check_fails_on_a_denied_verb_and_run_logs_it_and_starts() {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = scratch("kube-check");
    let db = TestDb::bootstrapped();
    let env = kube_env(&db, &fake, &dir, 2);

    let (code, stdout, stderr) = check(&production(env.clone()));
    assert_eq!(code, Some(0), "{stderr}");
    let out: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(out["computeDriver"], "kubernetes");
    assert_eq!(out["status"], "ok");
    let reviews = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/selfsubjectaccessreviews"))
        .count();
    assert_eq!(
        reviews,
        occ_worker::compute::kubernetes::driver::ACCESS.len(),
        "one review per verb the driver uses"
    );

    fake.deny_access("create", "deployments");
    for env in [production(env.clone()), env.clone()] {
        let (code, stdout, stderr) = check(&env);
        assert_eq!(code, Some(1), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("KUBERNETES_ACCESS_DENIED_CREATE_DEPLOYMENTS"),
            "{stderr}"
        );
        let out: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert_eq!(out["status"], "warnings");
        assert_eq!(
            out["preflightWarnings"],
            json!(["KUBERNETES_ACCESS_DENIED_CREATE_DEPLOYMENTS"])
        );
    }
    let worker = WorkerProcess::capture(
        worker_command(&["run"], &production(env.clone()))
            .spawn()
            .expect("spawn"),
    );
    wait_for(
        "the production worker to start",
        Duration::from_secs(30),
        || worker.has_event("worker.started"),
    );
    let warned: Vec<Value> = worker
        .events()
        .into_iter()
        .filter(|e| e["event"] == "compute.preflight-warning")
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(
        warned[0]["code"],
        "KUBERNETES_ACCESS_DENIED_CREATE_DEPLOYMENTS"
    );
    worker.signal("TERM");
    let (status, stderr) = worker.wait(Duration::from_secs(30));
    assert!(status.success(), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

// An operator's first cluster: a Namespace waiting for its tenant RoleBinding says so in
// `admin namespace show`, with its Kubernetes namespace, the prefix its Secret backend
// references must have and the command that creates the missing RoleBinding.
#[test]
fn n3_namespace_show_names_the_kubernetes_namespace_and_the_missing_rolebinding() {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = scratch("kube-show");
    let db = TestDb::bootstrapped();
    let env = kube_env(&db, &fake, &dir, 2);
    let mut c = db.client();
    let id: String = crate::support::one(
        &mut c,
        "SELECT occ.namespace_create('admin', 'team-x') ->> 'id'",
        &[],
    );
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().expect("spawn"));
    wait_for("the RoleBinding wait", Duration::from_secs(60), || {
        scalar::<i64>(
            &mut c,
            &format!(
                "SELECT count(*) FROM occ.audit_events WHERE namespace_id = '{id}'
                 AND details ->> 'pendingReason' = 'NAMESPACE_ROLEBINDING_PENDING'"
            ),
        ) > 0
    });
    let shown = crate::support::json_ok(
        &mut worker_command(&["admin", "namespace", "show", "team-x", "--json"], &env),
        "namespace show",
    );
    let k8s = k8s_namespace(&id);
    assert_eq!(shown["status"], "provisioning");
    assert_eq!(shown["pendingReason"], "NAMESPACE_ROLEBINDING_PENDING");
    assert_eq!(shown["kubernetesNamespace"], k8s.as_str());
    assert_eq!(shown["secretBackendRefPrefix"], format!("{k8s}/"));
    assert!(
        shown["missing"].as_str().is_some_and(
            |m| m.starts_with(&format!("kubectl -n {k8s} create rolebinding occ-tenant "))
        ),
        "{shown}"
    );
    worker.signal("TERM");
    let _ = worker.wait(Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(dir);
}

// An API server that cannot be reached is named by address and cause, in one line.
#[test]
fn c3_check_names_an_unreachable_api_server_and_why() {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = scratch("kube-unreachable");
    let db = TestDb::bootstrapped();
    let env = kube_env(&db, &fake, &dir, 2);
    let kubeconfig = dir.join("kubeconfig");
    let port = crate::support::free_port();
    let text = std::fs::read_to_string(&kubeconfig)
        .expect("kubeconfig")
        .replace(&fake.url(), &format!("https://127.0.0.1:{port}"));
    std::fs::write(&kubeconfig, text).unwrap();
    let (code, _, stderr) = check(&env);
    assert_ne!(code, Some(0));
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("ConnectionRefused, at https://127.0.0.1:{port}")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn c3_bad_driver_configuration_stops_start_up_naming_it() {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = scratch("kube-config");
    let db = TestDb::bootstrapped();
    let env = kube_env(&db, &fake, &dir, 2);
    let set = |name: &'static str, value: String| -> Env {
        let mut e: Env = env.iter().filter(|(k, _)| *k != name).cloned().collect();
        e.push((name, value));
        e
    };
    let bad_settings = dir.join("bad.json");
    std::fs::write(
        &bad_settings,
        r#"{"tenantRoleBinding":"t","tokenAudience":"a","tokenExpirationSeconds":60,"harnesses":[]}"#,
    )
    .unwrap();
    let exec = dir.join("exec-kubeconfig");
    std::fs::write(
        &exec,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: {}\n    certificate-authority-data: eA==\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n",
            fake.url()
        ),
    )
    .unwrap();
    let without_file: Env = env
        .iter()
        .filter(|(k, _)| *k != "OCC_KUBERNETES_CONFIG")
        .cloned()
        .collect();
    let cases: Vec<(&str, Env, &str)> = vec![
        ("no driver file", without_file, "OCC_KUBERNETES_CONFIG"),
        (
            "token lifetime too short",
            set("OCC_KUBERNETES_CONFIG", bad_settings.display().to_string()),
            "tokenExpirationSeconds",
        ),
        (
            "exec plugin",
            set("KUBECONFIG", exec.display().to_string()),
            "exec",
        ),
    ];
    for (what, env, needle) in cases {
        let (code, _, stderr) = check(&env);
        assert_eq!(code, Some(2), "{what}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{what}: {stderr}");
        assert!(stderr.contains(needle), "{what}: {stderr}");
    }
    assert!(
        fake.requests().is_empty(),
        "a refused start-up sends the API server nothing"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The driver as `run` builds it, against `fake`.
/// The Kubernetes driver on `fake` with `DRIVER_FILE`'s settings, its kubeconfig under `dir`.
pub fn driver_for(
    fake: &KubeFake,
    dir: &Path,
) -> occ_worker::compute::kubernetes::KubernetesDriver {
    use occ_worker::compute::kubernetes::{client::Client, connection, settings::Settings};
    let kubeconfig = fake.write_kubeconfig(dir, KubeconfigAuth::Token);
    let conn = connection::from_kubeconfig(&kubeconfig, None).expect("kubeconfig");
    occ_worker::compute::kubernetes::KubernetesDriver::new(
        Client::new(conn).expect("client"),
        Settings::parse(DRIVER_FILE).expect("settings"),
    )
}

#[test]
fn c3_a_stopped_workload_prepared_again_runs_again() {
    // A refused candidate's stop scales its Deployment to zero without changing what the
    // driver stamped; when the refusal is lifted (R9) the next preparation must scale it back
    // up, and a workload with no replica is never ready.
    use occ_worker::cancel::CancelToken;
    use occ_worker::compute::{AgentSpec, ComputeDriver, NamespaceSpec};
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(20),
        ..FakeOptions::default()
    });
    let dir = scratch("kube-rescale");
    let driver = driver_for(&fake, &dir);
    let cancel = CancelToken::unbounded();
    let ns = NamespaceSpec {
        installation_id: "inst".into(),
        namespace_id: "ns-1".into(),
        name: "team".into(),
        existing_namespace: None,
    };
    driver.ensure_namespace(&ns, &cancel).unwrap();
    let agent = AgentSpec {
        installation_id: "inst".into(),
        namespace_id: "ns-1".into(),
        agent_id: "ag-1".into(),
        service_principal_id: "sp-1".into(),
    };
    driver.bind_agent(&agent, &cancel).unwrap();
    let revision =
        crate::support::bare_revision("ns-1", "ag-1", ("rev-1", 1), ("codex", "dedicated"));
    let ready = |what: &str| {
        wait_for(what, Duration::from_secs(20), || {
            driver.prepare_revision(&revision, &cancel).unwrap().ready
        })
    };
    ready("first rollout");
    wait_for("stopped", Duration::from_secs(20), || {
        driver.stop_revision(&revision, &cancel).is_ok()
    });
    let first = driver.prepare_revision(&revision, &cancel).unwrap();
    assert!(!first.ready, "a workload scaled to zero is not ready");
    let path = "/apis/apps/v1/namespaces/occ-ns-1/deployments";
    let replicas = |name: &str| {
        fake.get(&format!("{path}/{name}"))
            .unwrap_or_else(|| panic!("no deployment {name} under {path}"))["spec"]["replicas"]
            .clone()
    };
    assert_eq!(replicas("agent-ag-1-r1"), 1);
    ready("rollout after the stop");
    // The gateway the stop scaled down fronts the Harness again.
    assert_eq!(replicas("agent-ag-1-gateway"), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn c3_an_embedded_candidate_takes_the_shared_gateway_only_at_activation() {
    // Seed 000: the Agent's one Recreate gateway is replaced and checked during activation.
    // Preparing a candidate beside the active revision writes nothing (before, preparation
    // replaced the gateway, taking the active revision down for a candidate that might never
    // activate); activation replaces it, is pending while it rolls out, then routes it.
    use occ_worker::cancel::CancelToken;
    use occ_worker::compute::{AgentSpec, ComputeDriver, ComputeErrorKind, NamespaceSpec};
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(20),
        ..FakeOptions::default()
    });
    let dir = scratch("kube-gateway");
    let driver = driver_for(&fake, &dir);
    let cancel = CancelToken::unbounded();
    let ns = NamespaceSpec {
        installation_id: "inst".into(),
        namespace_id: "ns-1".into(),
        name: "team".into(),
        existing_namespace: None,
    };
    driver.ensure_namespace(&ns, &cancel).unwrap();
    driver
        .bind_agent(
            &AgentSpec {
                installation_id: "inst".into(),
                namespace_id: "ns-1".into(),
                agent_id: "ag-1".into(),
                service_principal_id: "sp-1".into(),
            },
            &cancel,
        )
        .unwrap();
    let revision = |id: &str, n: i32| {
        crate::support::bare_revision("ns-1", "ag-1", (id, n), ("openclaw", "embedded"))
    };
    let (r1, r2) = (revision("rev-1", 1), revision("rev-2", 2));
    wait_for("the first gateway", Duration::from_secs(20), || {
        driver.prepare_revision(&r1, &cancel).unwrap().ready
    });
    driver.activate_revision(&r1, &cancel).unwrap();
    let gateway = "/apis/apps/v1/namespaces/occ-ns-1/deployments/agent-ag-1-gateway";
    let runs = |fake: &KubeFake| {
        fake.get(gateway).unwrap()["spec"]["template"]["metadata"]["labels"]["occ.revision"]
            .as_str()
            .unwrap()
            .to_string()
    };

    fake.clear_requests();
    assert!(driver.prepare_revision(&r2, &cancel).unwrap().ready);
    let writes = fake.writes();
    assert!(writes.is_empty(), "{writes:?}");
    assert_eq!(
        runs(&fake),
        "rev-1",
        "the active revision keeps its gateway"
    );

    // Activation takes the gateway: pending with the activation's own code until the rollout
    // completes (seed 004 486-502).
    let first = driver.activate_revision(&r2, &cancel).unwrap_err();
    assert_eq!(
        first.kind(),
        &ComputeErrorKind::Pending("REVISION_ACTIVATION_PENDING")
    );
    assert_eq!(runs(&fake), "rev-2");
    wait_for("the second gateway", Duration::from_secs(20), || {
        driver.activate_revision(&r2, &cancel).is_ok()
    });
    let service = fake
        .get("/api/v1/namespaces/occ-ns-1/services/agent-ag-1")
        .unwrap();
    assert_eq!(service["spec"]["selector"]["occ.revision"], "rev-2");
    let _ = std::fs::remove_dir_all(dir);
}

// C3: an exec plugin that fails is named with the hint it wrote on stderr, as kubectl shows it
// (it used to drop it), and one that is not installed is "not found on PATH" (it used to read
// "cannot be started (entity not found)"); its stdout, where a token would be, never shows.
#[test]
fn c3_a_failing_exec_plugin_is_named_with_its_own_hint() {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = scratch("kube-exec-hint");
    let db = TestDb::bootstrapped();
    let env = kube_env(&db, &fake, &dir, 1);
    let kubeconfig =
        std::path::PathBuf::from(&env.iter().find(|(k, _)| *k == "KUBECONFIG").unwrap().1);
    let token_config = std::fs::read_to_string(&kubeconfig).unwrap();
    let with_exec = |command: &str, args: &str| {
        let text = token_config.replace(
            &format!("    token: {}", fake.token()),
            &format!(
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {command}\n      args: {args}"
            ),
        );
        assert!(text.contains("exec:"), "{text}");
        std::fs::write(&kubeconfig, text).unwrap();
    };
    with_exec(
        "sh",
        r#"["-c", "echo token-on-stdout; echo 'ERROR: your credentials expired' >&2; echo 'run: gcloud auth login' >&2; exit 1"]"#,
    );
    let (code, _, stderr) = check(&env);
    assert_eq!(
        (code, stderr.as_str()),
        (
            Some(2),
            "occ-worker: invalid configuration: exec plugin \"sh\" failed (exit status: 1): it said \"run: gcloud auth login\"\n"
        )
    );
    with_exec("occ-no-such-plugin", "[]");
    let (code, _, stderr) = check(&env);
    assert_eq!(
        (code, stderr.as_str()),
        (
            Some(2),
            "occ-worker: invalid configuration: exec plugin \"occ-no-such-plugin\" is not found on PATH: install it, or give its full path as the kubeconfig's users[].user.exec.command\n"
        )
    );
    let _ = std::fs::remove_dir_all(dir);
}

// Seed 3102, 6493 (F32): a deployment's activation and an Agent's stop are measured from
// their admission, as the histogram `occ_worker_agent_operation_duration_seconds`.
#[test]
fn f32_deploy_and_stop_durations_from_admission_are_histograms() {
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(20),
        ..FakeOptions::default()
    });
    let dir = scratch("kube-f32");
    let db = TestDb::bootstrapped();
    let port = crate::support::free_port();
    let mut env = kube_env(&db, &fake, &dir, 2);
    env.retain(|(k, _)| *k != "OCC_WORKER_HTTP_ADDR");
    env.push(("OCC_WORKER_HTTP_ADDR", format!("127.0.0.1:{port}")));
    let _worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    let mut c = db.client();
    let ns = ready_namespaces(&mut c, &fake, 1).remove(0);
    let (agent, _) = create_agent(&mut c, &ns, "bot");
    let rev = deploy(&mut c, &ns, &agent, "codex", "dedicated");
    let done = |c: &mut Client, key: &str| -> bool {
        let n: i64 = crate::support::one(
            c,
            "SELECT count(*) FROM occ.work_status WHERE idempotency_key = $1 AND state = 'succeeded'",
            &[&key],
        );
        n == 1
    };
    let reconcile = format!("agent_revision:{rev}:reconcile");
    wait_for("activated", Duration::from_secs(60), || {
        done(&mut c, &reconcile)
    });
    let stop: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_stop($1, $2, 'admin')",
        &[&ns, &agent],
    );
    let stop = stop["work"].as_str().expect("the stop's work").to_string();
    wait_for("stopped", Duration::from_secs(60), || done(&mut c, &stop));
    let metrics = || {
        crate::support::http_get_text(("127.0.0.1", port), "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    for operation in ["deploy", "stop"] {
        let line = format!(
            "occ_worker_agent_operation_duration_seconds_count{{operation=\"{operation}\"}} 1"
        );
        wait_for(&line, Duration::from_secs(10), || {
            metrics().lines().any(|l| l == line)
        });
    }
    assert!(metrics()
        .contains("# HELP occ_worker_agent_operation_duration_seconds Seconds from admission"));
}
