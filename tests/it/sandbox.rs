//! The Sandbox Driver (SPEC §15, S1-S4): start-up, facets pinned at admission and enforced by
//! the Kubernetes driver, and an Agent's sandbox policy. End-to-end tests run `occ-worker` with
//! `OCC_INSTALLATION_CONFIG` against the API server fake and assert the exact objects it holds.

use crate::kube_e2e::{k8s_namespace, kube_env, scratch};
use crate::kube_fake::{FakeOptions, KubeFake};
use crate::support::{bare_revision, wait_for, worker_command, TestDb, WorkerProcess};
use occ_worker::cancel::CancelToken;
use occ_worker::compute::kubernetes::KubernetesDriver;
use occ_worker::compute::sandbox::Sandbox;
use occ_worker::compute::Facet;
use occ_worker::compute::{
    AgentSpec, ComputeDriver, ComputeErrorKind, NamespaceSpec, RevisionSpec,
};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const ALL_FACETS: [&str; 5] = [
    "pod-security-restricted",
    "default-deny-egress",
    "no-service-account-token",
    "read-only-root",
    "runtime-class",
];

/// The Installation file selecting a sandbox with `facets` (and the RuntimeClass `gvisor` when
/// `runtime-class` is one), and `ceiling`.
fn installation_file(dir: &Path, facets: &[&str], ceiling: Value) -> String {
    let mut sandbox =
        json!({"id": "sandbox-1", "implementation": "kubernetes-sandbox", "facets": facets});
    if facets.contains(&"runtime-class") {
        sandbox["runtimeClassName"] = json!("gvisor");
    }
    let path = dir.join("installation.json");
    std::fs::write(
        &path,
        json!({"sandbox": sandbox, "sandboxNetworkPolicyCeiling": ceiling}).to_string(),
    )
    .unwrap();
    path.display().to_string()
}

fn fake() -> KubeFake {
    KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(20),
        ..FakeOptions::default()
    })
}

fn runtime_class(fake: &KubeFake, name: &str) {
    fake.put_object(
        "/apis/node.k8s.io/v1/runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": name}, "handler": "runsc"}),
    );
}

#[test]
fn s1_preflight_refuses_a_missing_runtime_class_in_one_line_and_check_names_the_driver() {
    let fake = fake();
    let db = TestDb::bootstrapped();
    let dir = scratch("sandbox-s1-preflight");
    let mut env = kube_env(&db, &fake, &dir, 1);
    let file = installation_file(&dir, &["runtime-class", "read-only-root"], json!([]));
    env.push(("OCC_INSTALLATION_CONFIG", file));
    let out = crate::support::logged(
        "worker",
        worker_command(&["check", "--json"], &env).output().unwrap(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // The RuntimeClass the file asked for is named (it used to be the code and a 404 only).
    assert_eq!(
        stderr,
        "occ-worker: compute preflight failed: compute refused: SANDBOX_RUNTIME_CLASS_NOT_FOUND (class kubernetes, status 404): the RuntimeClass gvisor (sandbox.runtimeClassName in OCC_INSTALLATION_CONFIG) does not exist in the cluster (kubectl get runtimeclass)\n"
    );
    assert!(fake
        .requests()
        .iter()
        .any(|r| r.method == "GET" && r.path == "/apis/node.k8s.io/v1/runtimeclasses/gvisor"));
    // With the RuntimeClass, `check` passes and names the Sandbox Driver.
    runtime_class(&fake, "gvisor");
    let out = crate::support::logged(
        "worker",
        worker_command(&["check", "--json"], &env).output().unwrap(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["sandboxDriverId"], "sandbox-1");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn s1_worker_started_carries_the_sandbox_driver_id() {
    let fake = fake();
    let db = TestDb::bootstrapped();
    let dir = scratch("sandbox-s1-started");
    let mut env = kube_env(&db, &fake, &dir, 1);
    env.push((
        "OCC_INSTALLATION_CONFIG",
        installation_file(&dir, &["read-only-root"], json!([])),
    ));
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    wait_for("started", Duration::from_secs(30), || {
        worker.has_event("worker.started")
    });
    let started = worker
        .events()
        .into_iter()
        .find(|e| e["event"] == "worker.started")
        .unwrap();
    assert_eq!(started["sandboxDriverId"], "sandbox-1");
    assert_eq!(started["computeDriverId"], "kubernetes");
    // No RuntimeClass is read without the facet.
    assert!(!fake
        .requests()
        .iter()
        .any(|r| r.path.contains("runtimeclasses")));
    drop(worker);
    let _ = std::fs::remove_dir_all(dir);
}

/// The Kubernetes driver on `fake` with a Sandbox Driver offering `facets` (RuntimeClass
/// `gvisor` with `runtime-class`), as start-up builds it.
fn sandboxed_driver(fake: &KubeFake, dir: &Path, facets: &[&str]) -> KubernetesDriver {
    let driver = crate::kube_e2e::driver_for(fake, dir);
    let sandbox = Sandbox {
        id: "sandbox-1".into(),
        facets: facets
            .iter()
            .map(|f| Facet::parse(f).expect("a facet"))
            .collect(),
        runtime_class_name: facets.contains(&"runtime-class").then(|| "gvisor".into()),
    };
    driver.with_sandbox(Some(sandbox))
}

fn namespace_spec(existing: Option<&str>) -> NamespaceSpec {
    NamespaceSpec {
        installation_id: "inst".into(),
        namespace_id: "ns-1".into(),
        name: "team".into(),
        existing_namespace: existing.map(str::to_string),
    }
}

fn agent_spec() -> AgentSpec {
    AgentSpec {
        installation_id: "inst".into(),
        namespace_id: "ns-1".into(),
        agent_id: "ag-1".into(),
        service_principal_id: "sp-1".into(),
    }
}

fn pinned(facets: &[&str]) -> RevisionSpec {
    let mut revision = bare_revision("ns-1", "ag-1", ("rev-1", 1), ("codex", "dedicated"));
    revision.sandbox_facets = facets
        .iter()
        .map(|f| Facet::parse(f).expect("a facet"))
        .collect();
    revision
}

/// A ready namespace (named `name`), its tenant RoleBinding made as an operator would, and a
/// bound Agent.
fn ready(driver: &KubernetesDriver, fake: &KubeFake, spec: &NamespaceSpec, name: &str) {
    let cancel = CancelToken::unbounded();
    driver.ensure_namespace(spec, &cancel).unwrap();
    fake.put_tenant_rolebinding(name);
    assert!(driver.ensure_namespace(spec, &cancel).unwrap().complete);
    driver.bind_agent(&agent_spec(), &cancel).unwrap();
}

/// The permanent code of a refused call.
fn refusal<T: std::fmt::Debug>(result: Result<T, occ_worker::compute::ComputeError>) -> String {
    let e = result.expect_err("refused");
    match e.kind() {
        ComputeErrorKind::Permanent(code) => code.to_string(),
        other => panic!("not permanent: {other:?}"),
    }
}

#[test]
fn s2_the_fake_sees_each_pinned_facet_in_the_namespace_and_the_deployments() {
    let fake = fake();
    let dir = scratch("sandbox-s2-facets");
    let driver = sandboxed_driver(&fake, &dir, &ALL_FACETS);
    let name = k8s_namespace("ns-1");
    ready(&driver, &fake, &namespace_spec(None), &name);
    let cancel = CancelToken::unbounded();
    let revision = pinned(&ALL_FACETS);
    wait_for("the revision ready", Duration::from_secs(20), || {
        driver.prepare_revision(&revision, &cancel).unwrap().ready
    });
    let namespace = fake.get(&format!("/api/v1/namespaces/{name}")).unwrap();
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    assert!(fake
        .get(&format!(
            "/apis/networking.k8s.io/v1/namespaces/{name}/networkpolicies/occ-default-deny"
        ))
        .is_some());
    let account = fake
        .get(&format!(
            "/api/v1/namespaces/{name}/serviceaccounts/agent-ag-1"
        ))
        .unwrap();
    assert_eq!(account["automountServiceAccountToken"], false);
    let deployments = fake.objects("deployments");
    assert_eq!(deployments.len(), 2, "the Harness and its gateway");
    for d in &deployments {
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(
            pod["runtimeClassName"], "gvisor",
            "{}",
            d["metadata"]["name"]
        );
        assert_eq!(pod["automountServiceAccountToken"], false);
        for c in pod["containers"].as_array().unwrap() {
            assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        }
        // Only the audience-scoped projected token is mounted.
        let tokens: Vec<&Value> = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["projected"]["sources"].as_array())
            .flatten()
            .filter_map(|s| s.get("serviceAccountToken"))
            .collect();
        assert!(
            tokens.iter().all(|t| t["audience"].is_string()),
            "{tokens:?}"
        );
    }
    // Without `runtime-class` pinned, no Pod names a RuntimeClass.
    let plain = {
        let mut r = pinned(&["read-only-root"]);
        r.revision_id = "rev-2".into();
        r.revision = 2;
        r
    };
    driver.stop_revision(&revision, &cancel).ok();
    wait_for(
        "the first revision stopped",
        Duration::from_secs(20),
        || driver.stop_revision(&revision, &cancel).is_ok(),
    );
    wait_for("the second revision ready", Duration::from_secs(20), || {
        driver.prepare_revision(&plain, &cancel).unwrap().ready
    });
    let harness = fake
        .get(&format!(
            "/apis/apps/v1/namespaces/{name}/deployments/agent-ag-1-r2"
        ))
        .unwrap();
    assert!(harness["spec"]["template"]["spec"]
        .get("runtimeClassName")
        .is_none());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn s2_an_adopted_namespace_without_the_restricted_label_refuses_a_pinned_revision_before_any_write()
{
    let fake = fake();
    let dir = scratch("sandbox-s2-adopted");
    let driver = sandboxed_driver(&fake, &dir, &ALL_FACETS);
    fake.put_object(
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "legacy"}}),
    );
    ready(&driver, &fake, &namespace_spec(Some("legacy")), "legacy");
    let cancel = CancelToken::unbounded();
    fake.clear_requests();
    let code = refusal(driver.prepare_revision(&pinned(&["pod-security-restricted"]), &cancel));
    assert_eq!(code, "SANDBOX_FACET_UNAVAILABLE");
    let writes = fake.writes();
    assert_eq!(writes, Vec::<String>::new());
    assert!(fake.objects("deployments").is_empty());
    // A revision pinned to nothing the namespace lacks runs there.
    wait_for(
        "an unpinned revision ready",
        Duration::from_secs(20),
        || {
            driver
                .prepare_revision(&pinned(&["read-only-root"]), &cancel)
                .unwrap()
                .ready
        },
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn s2_a_pinned_facet_the_driver_no_longer_offers_refuses_with_no_request() {
    let fake = fake();
    let dir = scratch("sandbox-s2-withdrawn");
    let driver = sandboxed_driver(&fake, &dir, &["read-only-root"]);
    ready(
        &driver,
        &fake,
        &namespace_spec(None),
        &k8s_namespace("ns-1"),
    );
    let cancel = CancelToken::unbounded();
    fake.clear_requests();
    let code = refusal(driver.prepare_revision(&pinned(&["runtime-class"]), &cancel));
    assert_eq!(code, "SANDBOX_FACET_UNAVAILABLE");
    assert_eq!(
        fake.requests().iter().filter(|r| r.method != "GET").count(),
        0
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `admin agent deploy` as the CLI runs it, with `OCC_INSTALLATION_CONFIG` at `file`.
fn cli_deploy(db: &TestDb, file: &str, configuration: &str) -> (Option<i32>, String, String) {
    let out = worker_command(
        &crate::support::deploy_args(
            "ns1",
            "bot",
            configuration,
            &[
                "--actor",
                "admin",
                "--harness-secret",
                "key",
                "--compute-id",
                "kubernetes",
                "--json",
            ],
        ),
        &[
            ("OCC_DATABASE_URL", db.url.clone()),
            ("OCC_INSTALLATION_CONFIG", file.to_string()),
        ],
    )
    .output()
    .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn s2_admission_pins_the_drivers_facets_and_refuses_a_required_facet_it_lacks() {
    let f = crate::agent::fixture();
    let dir = scratch("sandbox-s2-admission");
    let file = installation_file(&dir, &["read-only-root", "default-deny-egress"], json!([]));
    let mut c = f.db.client();
    c.execute(
        "SELECT occ.configuration_put('ns1', 'strict', $1, 'admin')",
        &[&json!({"model": "m", "sandbox": {"requiredFacets": ["read-only-root", "runtime-class"]}})],
    )
    .unwrap();
    c.execute(
        "SELECT occ.configuration_put('ns1', 'modest', $1, 'admin')",
        &[&json!({"model": "m", "sandbox": {"requiredFacets": ["read-only-root"]}})],
    )
    .unwrap();
    let (code, _, stderr) = cli_deploy(&f.db, &file, "strict");
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr,
        "occ-worker: agent deploy refused: SANDBOX_FACET_UNAVAILABLE: configuration strict requires sandbox facets runtime-class that Sandbox Driver sandbox-1 does not offer\n"
    );
    let revisions: i64 =
        crate::support::one(&mut c, "SELECT count(*) FROM occ.agent_revisions", &[]);
    assert_eq!(revisions, 0);
    let (code, stdout, stderr) = cli_deploy(&f.db, &file, "modest");
    assert_eq!(code, Some(0), "{stderr}");
    let admitted: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(admitted["sandboxDriverId"], "sandbox-1");
    let row = c
        .query_one(
            "SELECT sandbox_driver_id, sandbox_facets FROM occ.agent_revisions WHERE id = $1",
            &[&admitted["revisionId"].as_str().unwrap()],
        )
        .unwrap();
    assert_eq!(
        row.get::<_, Option<String>>(0).as_deref(),
        Some("sandbox-1")
    );
    assert_eq!(
        row.get::<_, Value>(1),
        json!(["read-only-root", "default-deny-egress"])
    );
    let audit = crate::support::audit_details(&mut c, "openclaw.agents.deploy.admit");
    assert_eq!(
        audit["sandboxFacets"],
        json!(["read-only-root", "default-deny-egress"])
    );
    // Without a Sandbox Driver, a required facet is refused and none is pinned otherwise.
    let none = dir.join("none.json");
    std::fs::write(&none, "{}").unwrap();
    let (code, _, stderr) = cli_deploy(&f.db, &none.display().to_string(), "modest");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("no Sandbox Driver is selected to offer"),
        "{stderr}"
    );
    let (code, stdout, stderr) = cli_deploy(&f.db, &none.display().to_string(), "cfg");
    assert_eq!(code, Some(0), "{stderr}");
    let admitted: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(admitted["sandboxFacets"], json!([]));
    let _ = std::fs::remove_dir_all(dir);
}

/// Admits a sandbox policy as `admin` with `ceiling`; the database's answer or its message.
fn put_policy(
    c: &mut postgres::Client,
    ns: &str,
    agent: &str,
    egress: Value,
    ceiling: Value,
) -> Result<Value, String> {
    c.query_one(
        "SELECT occ.agent_sandbox_policy_put('admin', $1, $2, $3, $4)",
        &[&ns, &agent, &json!({"egress": egress}), &ceiling],
    )
    .map(|r| r.get(0))
    .map_err(|e| {
        e.as_db_error()
            .map(|d| d.message().to_string())
            .unwrap_or_default()
    })
}

/// (state, reason code, generation) of an Agent's policy.
fn policy_state(c: &mut postgres::Client, agent: &str) -> (String, Option<String>, i32) {
    crate::support::row3(
        c,
        "SELECT state, reason_code, generation FROM occ.agent_sandbox_policies WHERE agent_id = $1",
        &[&agent],
    )
}

#[test]
fn s3_admission_stores_the_next_generation_pending_within_the_ceiling_and_refuses_beyond_it() {
    let f = crate::agent::fixture();
    let mut c = f.db.client();
    let ceiling = json!([{"cidr": "10.0.0.0/8", "ports": [443, 5432]}]);
    let first = put_policy(
        &mut c,
        "ns1",
        "bot",
        json!([{"cidr": "10.1.0.0/16", "ports": [443]}]),
        ceiling.clone(),
    )
    .unwrap();
    assert_eq!(first["generation"], 1);
    assert_eq!(
        first["work"],
        format!("agent:{}:sandbox_policy:1", f.agent).as_str()
    );
    let second = put_policy(&mut c, "ns1", "bot", json!([]), ceiling.clone()).unwrap();
    assert_eq!(second["generation"], 2);
    assert_eq!(policy_state(&mut c, &f.agent), ("pending".into(), None, 2));
    let operations: Vec<String> = c
        .query(
            "SELECT operation FROM occ.work WHERE agent_id = $1 ORDER BY id",
            &[&f.agent],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(operations, ["agent_sandbox_policy", "agent_sandbox_policy"]);
    let admits: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.audit_events WHERE action = 'openclaw.agents.sandbox_policy.admit' AND resource_id = $1",
        &[&f.agent],
    );
    assert_eq!(admits, 2);
    // Beyond the ceiling: a wider network, a port it does not list, no ceiling at all.
    for (egress, ceiling) in [
        (
            json!([{"cidr": "10.0.0.0/7", "ports": [443]}]),
            ceiling.clone(),
        ),
        (
            json!([{"cidr": "10.0.0.0/8", "ports": [22]}]),
            ceiling.clone(),
        ),
        (json!([{"cidr": "10.0.0.0/8", "ports": [443]}]), json!([])),
    ] {
        let refused = put_policy(&mut c, "ns1", "bot", egress, ceiling).unwrap_err();
        assert!(
            refused.starts_with("SANDBOX_POLICY_EXCEEDS_CEILING"),
            "{refused}"
        );
    }
    // Malformed, each refused in the admission's own words: host bits set, port 0, an unknown
    // key, ports not a list, an entry not an object, not a list.
    for egress in [
        json!([{"cidr": "10.0.0.1/8", "ports": [443]}]),
        json!([{"cidr": "10.0.0.0/8", "ports": [0]}]),
        json!([{"cidr": "10.0.0.0/8", "ports": [443], "udp": true}]),
        json!([{"cidr": "10.0.0.0/8", "ports": {"443": true}}]),
        json!([[]]),
        json!({"cidr": "10.0.0.0/8"}),
    ] {
        let refused =
            put_policy(&mut c, "ns1", "bot", egress.clone(), ceiling.clone()).unwrap_err();
        assert!(
            refused.starts_with("a sandbox policy"),
            "{egress}: {refused}"
        );
    }
    assert_eq!(
        policy_state(&mut c, &f.agent).2,
        2,
        "nothing refused was stored"
    );
    // PostgreSQL refuses any other key of the kind.
    for key in [
        format!("agent:{}:sandbox_policy:0", f.agent),
        format!("agent:{}:sandbox_policy:x", f.agent),
        "agent:other:sandbox_policy:1".to_string(),
    ] {
        let e = c
            .execute(
                "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, agent_target, actor_id)
                 VALUES ($1, 'ns1', $2, 'sandbox_policy', 'admin')",
                &[&key, &f.agent],
            )
            .unwrap_err();
        assert_eq!(
            e.as_db_error().unwrap().constraint(),
            Some("work_key"),
            "{key}"
        );
    }
    // Nor any other shape: a sandbox-policy work names no revision.
    let rev = crate::agent::deploy(&mut c, &f.agent);
    let e = c
        .execute(
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, agent_target, actor_id)
             VALUES ($1, 'ns1', $2, $3, 'sandbox_policy', 'admin')",
            &[&format!("agent:{}:sandbox_policy:9", f.agent), &f.agent, &rev],
        )
        .unwrap_err();
    assert_eq!(e.as_db_error().unwrap().constraint(), Some("work_shape"));
    // A deleting Agent takes no policy.
    c.execute("SELECT occ.agent_delete('ns1', 'bot', 'admin')", &[])
        .unwrap();
    let refused = put_policy(&mut c, "ns1", "bot", json!([]), ceiling).unwrap_err();
    assert!(refused.contains("is being deleted"), "{refused}");
}

#[test]
fn s4_stale_recovery_fails_the_work_and_its_policy_in_one_statement() {
    use occ_worker::queue::{work_recover_stale, QueueOptions};
    let f = crate::agent::fixture();
    let mut c = f.db.client();
    let ceiling = json!([{"cidr": "10.0.0.0/8", "ports": [443]}]);
    let egress = json!([{"cidr": "10.0.0.0/8", "ports": [443]}]);
    put_policy(&mut c, "ns1", "bot", egress.clone(), ceiling.clone()).unwrap();
    put_policy(&mut c, "ns1", "bot", egress, ceiling).unwrap();
    // Both works used up their attempts; only the stored generation's policy fails.
    c.execute(
        "UPDATE occ.work SET attempt_count = 5 WHERE agent_id = $1",
        &[&f.agent],
    )
    .unwrap();
    let recovered =
        work_recover_stale(&mut c, &QueueOptions::new(Duration::from_secs(30), 5)).unwrap();
    assert_eq!((recovered.failed, recovered.failed_policies), (2, 1));
    assert_eq!(
        policy_state(&mut c, &f.agent),
        ("failed".into(), Some("ATTEMPTS_EXHAUSTED".into()), 2)
    );
    let audit: Value = crate::support::one(
        &mut c,
        "SELECT details FROM occ.audit_events WHERE action = 'openclaw.agents.lifecycle.sandbox_policy'",
        &[],
    );
    assert_eq!(
        audit,
        json!({"generation": 2, "policyState": "failed", "recovery": true})
    );
}

/// A Kubernetes worker on `fake` with a Sandbox Driver and `ceiling`; a ready Namespace and an
/// Agent in it: (worker, Namespace id, Agent id, Kubernetes namespace).
fn policy_rig(
    db: &TestDb,
    fake: &KubeFake,
    dir: &Path,
    ceiling: Value,
) -> (WorkerProcess, String, String, String) {
    let mut env = kube_env(db, fake, dir, 2);
    env.push((
        "OCC_INSTALLATION_CONFIG",
        installation_file(dir, &["default-deny-egress"], ceiling),
    ));
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    let mut c = db.client();
    let ns = crate::kube_e2e::ready_namespaces(&mut c, fake, 1).remove(0);
    let (agent, _) = crate::agent::create_agent(&mut c, &ns, "bot");
    let name = k8s_namespace(&ns);
    (worker, ns, agent, name)
}

fn work_of(c: &mut postgres::Client, key: &str) -> (String, Option<String>) {
    crate::support::work_state(c, key)
}

#[test]
fn s3_the_networkpolicy_matches_the_allowlist_an_older_generation_makes_no_call_and_deletion_removes_it(
) {
    let fake = fake();
    let db = TestDb::bootstrapped();
    let dir = scratch("sandbox-s3-apply");
    let ceiling = json!([{"cidr": "10.0.0.0/8", "ports": [443, 5432]}, {"cidr": "2001:db8::/32", "ports": [443]}]);
    let (worker, ns, agent, name) = policy_rig(&db, &fake, &dir, ceiling.clone());
    let mut c = db.client();
    let path =
        format!("/apis/networking.k8s.io/v1/namespaces/{name}/networkpolicies/occ-egress-{agent}");
    // Two generations admitted in one transaction: the first is superseded with no call.
    fake.clear_requests();
    let mut tx = c.transaction().unwrap();
    for egress in [
        json!([{"cidr": "10.1.0.0/16", "ports": [443]}]),
        json!([{"cidr": "10.2.0.0/16", "ports": [443, 5432]}, {"cidr": "2001:db8:1::/48", "ports": [443]}]),
    ] {
        tx.query_one(
            "SELECT occ.agent_sandbox_policy_put('admin', $1, $2, $3, $4)",
            &[&ns, &agent, &json!({"egress": egress}), &ceiling],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    let second = format!("agent:{agent}:sandbox_policy:2");
    wait_for("applied", Duration::from_secs(60), || {
        work_of(&mut c, &second).0 == "succeeded"
    });
    assert_eq!(
        work_of(&mut c, &format!("agent:{agent}:sandbox_policy:1")),
        ("succeeded".into(), Some("SANDBOX_POLICY_SUPERSEDED".into()))
    );
    assert_eq!(
        work_of(&mut c, &second),
        ("succeeded".into(), Some("SANDBOX_POLICY_APPLIED".into()))
    );
    assert_eq!(
        policy_state(&mut c, &agent),
        ("applied".into(), Some("SANDBOX_POLICY_APPLIED".into()), 2)
    );
    let writes: Vec<(String, Value)> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET" && r.path.contains("networkpolicies"))
        .map(|r| (r.method, r.body.unwrap_or_default()))
        .collect();
    assert_eq!(writes.len(), 1, "one write, of generation 2: {writes:?}");
    let policy = fake.get(&path).expect("the egress NetworkPolicy");
    assert_eq!(
        policy["metadata"]["annotations"]["occ.sandbox-policy-generation"],
        "2"
    );
    assert_eq!(policy["metadata"]["labels"]["occ.agent"], agent.as_str());
    assert_eq!(
        policy["spec"],
        json!({
            "podSelector": {"matchLabels": {"occ.agent": agent}},
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [{"ipBlock": {"cidr": "10.2.0.0/16"}}],
                 "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 5432}]},
                {"to": [{"ipBlock": {"cidr": "2001:db8:1::/48"}}],
                 "ports": [{"protocol": "TCP", "port": 443}]},
            ],
        })
    );
    let audits: Vec<(String, String, Option<String>)> = c
        .query(
            "SELECT kind, outcome, reason_code FROM occ.audit_events WHERE action = 'openclaw.agents.lifecycle.sandbox_policy' ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        audits,
        [(
            "mutation".into(),
            "success".into(),
            Some("SANDBOX_POLICY_APPLIED".into())
        )]
    );
    // The worker names the operation as SPEC §12 does.
    wait_for("worker.completed", Duration::from_secs(10), || {
        worker.events().iter().any(|e| {
            e["event"] == "worker.completed"
                && e["operation"] == "agent.sandbox_policy"
                && e["workId"] == second.as_str()
        })
    });
    // An empty allowlist deletes the NetworkPolicy.
    put_policy(&mut c, &ns, &agent, json!([]), ceiling.clone()).unwrap();
    let third = format!("agent:{agent}:sandbox_policy:3");
    wait_for("removed", Duration::from_secs(60), || {
        work_of(&mut c, &third).0 == "succeeded"
    });
    assert!(fake.get(&path).is_none());
    // Agent deletion removes the policy before its finalizer.
    put_policy(
        &mut c,
        &ns,
        &agent,
        json!([{"cidr": "10.3.0.0/16", "ports": [443]}]),
        ceiling,
    )
    .unwrap();
    let fourth = format!("agent:{agent}:sandbox_policy:4");
    wait_for("applied again", Duration::from_secs(60), || {
        work_of(&mut c, &fourth).0 == "succeeded"
    });
    assert!(fake.get(&path).is_some());
    c.execute("SELECT occ.agent_delete($1, 'bot', 'admin')", &[&ns])
        .unwrap();
    wait_for("the Agent deleted", Duration::from_secs(60), || {
        c.query_opt("SELECT 1 FROM occ.agents WHERE id = $1", &[&agent])
            .unwrap()
            .is_none()
    });
    assert!(
        fake.get(&path).is_none(),
        "the egress policy is gone with its Agent"
    );
    let left: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.agent_sandbox_policies",
        &[],
    );
    assert_eq!(left, 0);
    drop(worker);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn s3_a_policy_outside_a_lowered_ceiling_fails_at_its_pass_and_writes_nothing() {
    let fake = fake();
    let db = TestDb::bootstrapped();
    let dir = scratch("sandbox-s3-lowered");
    // The worker's ceiling is narrower than the one the policy was admitted under.
    let (worker, ns, agent, name) = policy_rig(
        &db,
        &fake,
        &dir,
        json!([{"cidr": "10.0.0.0/16", "ports": [443]}]),
    );
    let mut c = db.client();
    put_policy(
        &mut c,
        &ns,
        &agent,
        json!([{"cidr": "10.1.0.0/16", "ports": [443]}]),
        json!([{"cidr": "10.0.0.0/8", "ports": [443]}]),
    )
    .unwrap();
    let key = format!("agent:{agent}:sandbox_policy:1");
    wait_for("failed", Duration::from_secs(60), || {
        work_of(&mut c, &key).0 == "failed_permanent"
    });
    assert_eq!(
        work_of(&mut c, &key).1.as_deref(),
        Some("SANDBOX_POLICY_EXCEEDS_CEILING")
    );
    assert_eq!(
        policy_state(&mut c, &agent),
        (
            "failed".into(),
            Some("SANDBOX_POLICY_EXCEEDS_CEILING".into()),
            1
        )
    );
    assert!(fake
        .get(&format!(
            "/apis/networking.k8s.io/v1/namespaces/{name}/networkpolicies/occ-egress-{agent}"
        ))
        .is_none());
    let audit: (String, Option<String>) = c
        .query_one(
            "SELECT outcome, reason_code FROM occ.audit_events WHERE action = 'openclaw.agents.lifecycle.sandbox_policy'",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(
        audit,
        (
            "failure".into(),
            Some("SANDBOX_POLICY_EXCEEDS_CEILING".into())
        )
    );
    drop(worker);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn s3_a_revoked_grant_is_denied_at_the_pass_and_no_sandbox_driver_fails_it() {
    let fake = fake();
    let db = TestDb::bootstrapped();
    let dir = scratch("sandbox-s3-denied");
    // A worker without OCC_INSTALLATION_CONFIG: no Sandbox Driver selected.
    let env = kube_env(&db, &fake, &dir, 1);
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    let mut c = db.client();
    let ns = crate::kube_e2e::ready_namespaces(&mut c, &fake, 1).remove(0);
    let (agent, _) = crate::agent::create_agent(&mut c, &ns, "bot");
    let ceiling = json!([{"cidr": "10.0.0.0/8", "ports": [443]}]);
    let egress = json!({"egress": [{"cidr": "10.0.0.0/8", "ports": [443]}]});
    c.execute("SELECT occ.identity_create('admin', 'bob')", &[])
        .unwrap();
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id)
         VALUES ('bob', 'agent-operator', 'namespace', $1)",
        &[&ns],
    )
    .unwrap();
    // Bob's grant is withdrawn between admission and the pass (one transaction, so the worker
    // cannot run in between).
    let mut tx = c.transaction().unwrap();
    tx.query_one(
        "SELECT occ.agent_sandbox_policy_put('bob', $1, $2, $3, $4)",
        &[&ns, &agent, &egress, &ceiling],
    )
    .unwrap();
    tx.execute(
        "DELETE FROM occ.iam_bindings WHERE principal_id = 'bob'",
        &[],
    )
    .unwrap();
    tx.commit().unwrap();
    let key = format!("agent:{agent}:sandbox_policy:1");
    wait_for("denied", Duration::from_secs(60), || {
        work_of(&mut c, &key).0 == "failed_permanent"
    });
    assert_eq!(
        work_of(&mut c, &key).1.as_deref(),
        Some("AUTHORIZATION_DENIED")
    );
    assert_eq!(
        policy_state(&mut c, &agent),
        ("failed".into(), Some("AUTHORIZATION_DENIED".into()), 1)
    );
    let denial: (String, String) = c
        .query_one(
            "SELECT kind, actor_id FROM occ.audit_events WHERE action = 'openclaw.agents.lifecycle.sandbox_policy'",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(denial, ("authorization_denial".into(), "bob".into()));
    // Without an Installation file the worker's ceiling is empty: an empty allowlist is within
    // it, and reaches the check for a Sandbox Driver, which fails it.
    put_policy(&mut c, &ns, &agent, json!([]), ceiling).unwrap();
    let key = format!("agent:{agent}:sandbox_policy:2");
    wait_for("no driver", Duration::from_secs(60), || {
        work_of(&mut c, &key).0 == "failed_permanent"
    });
    assert_eq!(
        work_of(&mut c, &key).1.as_deref(),
        Some("SANDBOX_DRIVER_UNAVAILABLE")
    );
    assert!(fake
        .objects("networkpolicies")
        .iter()
        .all(|p| !p["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("occ-egress-")));
    drop(worker);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn s3_the_cli_puts_a_policy_within_the_installation_ceiling_and_shows_it() {
    let f = crate::agent::fixture();
    let dir = scratch("sandbox-s3-cli");
    let installation = installation_file(
        &dir,
        &["default-deny-egress"],
        json!([{"cidr": "10.0.0.0/8", "ports": [443]}]),
    );
    let env = [
        ("OCC_DATABASE_URL", f.db.url.clone()),
        ("OCC_INSTALLATION_CONFIG", installation),
    ];
    let run = |args: &[&str]| {
        let out = crate::support::logged("worker", worker_command(args, &env).output().unwrap());
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let file = |name: &str, body: Value| {
        let path = dir.join(name);
        std::fs::write(&path, body.to_string()).unwrap();
        path.display().to_string()
    };
    let inside = file(
        "inside.json",
        json!({"egress": [{"cidr": "10.4.0.0/16", "ports": [443]}]}),
    );
    let (code, stdout, stderr) = run(&[
        "admin",
        "agent",
        "sandbox-policy",
        "put",
        "ns1",
        "bot",
        "--file",
        &inside,
        "--actor",
        "admin",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let admitted: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(admitted["generation"], 1);
    let outside = file(
        "outside.json",
        json!({"egress": [{"cidr": "10.4.0.0/16", "ports": [22]}]}),
    );
    let (code, _, stderr) = run(&[
        "admin",
        "agent",
        "sandbox-policy",
        "put",
        "ns1",
        "bot",
        "--file",
        &outside,
        "--actor",
        "admin",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "occ-worker: agent sandbox-policy put refused: SANDBOX_POLICY_EXCEEDS_CEILING: the policy allows egress outside the sandbox network policy ceiling\n"
    );
    let bad = file(
        "bad.json",
        json!({"egress": [{"cidr": "10.4.0.1/16", "ports": [443]}]}),
    );
    let (code, _, stderr) = run(&[
        "admin",
        "agent",
        "sandbox-policy",
        "put",
        "ns1",
        "bot",
        "--file",
        &bad,
        "--actor",
        "admin",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("egress[0].cidr must be an IPv4 or IPv6 network"),
        "{stderr}"
    );
    let (code, stdout, stderr) = run(&[
        "admin",
        "agent",
        "sandbox-policy",
        "show",
        "ns1",
        "bot",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (
            shown["generation"].clone(),
            shown["state"].clone(),
            shown["egress"].clone()
        ),
        (
            json!(1),
            json!("pending"),
            json!([{"cidr": "10.4.0.0/16", "ports": [443]}])
        )
    );
    assert_eq!(
        shown["work"],
        format!("agent:{}:sandbox_policy:1", f.agent).as_str()
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn s2_the_worker_fails_a_deployment_pinned_to_a_facet_it_cannot_enforce_before_any_workload_write()
{
    let fake = fake();
    let db = TestDb::bootstrapped();
    let dir = scratch("sandbox-s2-worker");
    let mut env = kube_env(&db, &fake, &dir, 1);
    env.push((
        "OCC_INSTALLATION_CONFIG",
        installation_file(&dir, &["read-only-root"], json!([])),
    ));
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    let mut c = db.client();
    let ns = crate::kube_e2e::ready_namespaces(&mut c, &fake, 1).remove(0);
    let (agent, _) = crate::agent::create_agent(&mut c, &ns, "bot");
    // Admitted while the Installation's driver still offered `runtime-class`.
    let admitted: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_deploy($1, $2, 'admin', 'cfg', 'codex', 'dedicated', 'key', 'kubernetes', 'kubernetes',
                 p_sandbox_driver_id => 'sandbox-1', p_sandbox_facets => '[\"runtime-class\"]')",
        &[&ns, &agent],
    );
    let key = admitted["work"].as_str().unwrap().to_string();
    wait_for("failed", Duration::from_secs(60), || {
        work_of(&mut c, &key).0 == "failed_permanent"
    });
    assert_eq!(
        work_of(&mut c, &key).1.as_deref(),
        Some("SANDBOX_FACET_UNAVAILABLE")
    );
    assert!(
        fake.objects("deployments").is_empty(),
        "no workload written"
    );
    drop(worker);
    let _ = std::fs::remove_dir_all(dir);
}

// SPEC S3: a sandbox-policy work that fails for good on a database error (its pass never
// decided anything) marks the policy `failed` and writes the lifecycle audit, as every other
// terminal outcome of the pass does.
#[test]
fn s3_a_database_failure_at_the_budget_fails_the_policy_and_is_audited() {
    use crate::scripted::{quiet, run_until, ScriptedDriver};
    let f = crate::agent::fixture();
    let mut c = f.db.client();
    put_policy(
        &mut c,
        "ns1",
        &f.agent,
        json!([]),
        json!([{"cidr": "10.0.0.0/8", "ports": [443]}]),
    )
    .unwrap();
    // Every authorization of the pass fails in the database.
    c.batch_execute(
        "ALTER FUNCTION occ.authorize(text, text, text, text, text) RENAME TO authorize_real;
         CREATE FUNCTION occ.authorize(p text, a text, k text, i text, n text) RETURNS jsonb
             LANGUAGE plpgsql STABLE AS $$ BEGIN RAISE EXCEPTION 'authorization unavailable'; END $$;",
    )
    .unwrap();
    let key = format!("agent:{}:sandbox_policy:1", f.agent);
    run_until(&f.db, std::sync::Arc::new(ScriptedDriver::new()), |c| {
        quiet(c) && work_of(c, &key).0 == "failed_permanent"
    });
    let (_, code) = work_of(&mut c, &key);
    let code = code.expect("a code");
    assert_eq!(
        policy_state(&mut c, &f.agent),
        ("failed".into(), Some(code.clone()), 1)
    );
    let audited: Vec<(String, String, Option<String>)> = c
        .query(
            "SELECT kind, outcome, reason_code FROM occ.audit_events
             WHERE action = 'openclaw.agents.lifecycle.sandbox_policy'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        audited,
        vec![("mutation".to_string(), "failure".to_string(), Some(code))]
    );
}
