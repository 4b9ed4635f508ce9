//! Lifecycle hooks (SPEC §14, H1-H5): the drivers call the Installation's webhooks at the four
//! phases, in H2 order, and every outcome becomes the code SPEC H4 gives it. Driver-level tests
//! run the Kubernetes driver against the API server fake and a test webhook (`hook_server`),
//! asserting the exact calls and what reached the fake; end-to-end tests run `occ-worker` with
//! `OCC_INSTALLATION_CONFIG` on the Docker Engine and on the fake.

use crate::hook_server::{Answer, HookServer};
use crate::kube_e2e::{deploy, driver_for, k8s_namespace, kube_env, ready_namespaces, scratch};
use crate::kube_fake::{FakeOptions, KubeFake};
use crate::support::{
    bare_revision, wait_for, worker_command, worker_env, InertCompute, TestDb, WorkerProcess,
};
use occ_worker::cancel::CancelToken;
use occ_worker::compute::hooks::{self, LAUNCH_VALUE_REFUSED};
use occ_worker::compute::kubernetes::KubernetesDriver;
use occ_worker::compute::{
    AgentSpec, ComputeDriver, ComputeErrorKind, NamespaceSpec, RevisionSpec,
};
use occ_worker::config::DriverKind;
use occ_worker::installation::Installation;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const ALL: [&str; 4] = [
    "afterNamespacePrepared",
    "beforeWorkloadStart",
    "beforeWorkloadStop",
    "beforeNamespaceDelete",
];

/// The Installation file selecting `hooks` (and a sandbox, which a `sandbox` hook needs).
fn installation_file(hooks: &[Value]) -> String {
    json!({
        "lifecycleHooks": hooks,
        "sandbox": {"id": "sandbox-1", "implementation": "kubernetes-sandbox", "facets": ["read-only-root"]},
    })
    .to_string()
}

struct Rig {
    fake: KubeFake,
    server: HookServer,
    driver: KubernetesDriver,
    cancel: CancelToken,
    dir: std::path::PathBuf,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Kubernetes driver on a fake, with the hooks of `drivers` (each subscribed to every
/// phase, timeout `timeout_seconds`) attached as start-up attaches them.
fn rig(name: &str, drivers: &[&str], timeout_seconds: u64) -> Rig {
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(20),
        ..FakeOptions::default()
    });
    let dir = scratch(name);
    let server = HookServer::start(&dir);
    let entries: Vec<Value> = drivers
        .iter()
        .map(|d| server.entry(d, &ALL, timeout_seconds))
        .collect();
    let installation =
        Installation::parse(&installation_file(&entries), DriverKind::Kubernetes).unwrap();
    let hooks = installation.lifecycle_hooks().expect("hook clients");
    let driver = driver_for(&fake, &dir).with_lifecycle_hooks(hooks);
    installation
        .check_compute(&driver)
        .expect("the Kubernetes driver runs hooks");
    Rig {
        fake,
        server,
        driver,
        cancel: CancelToken::unbounded(),
        dir,
    }
}

fn namespace() -> NamespaceSpec {
    NamespaceSpec {
        installation_id: "inst".into(),
        namespace_id: "ns-1".into(),
        name: "team".into(),
        existing_namespace: None,
    }
}

fn agent() -> AgentSpec {
    AgentSpec {
        installation_id: "inst".into(),
        namespace_id: "ns-1".into(),
        agent_id: "ag-1".into(),
        service_principal_id: "sp-1".into(),
    }
}

fn revision() -> RevisionSpec {
    bare_revision("ns-1", "ag-1", ("rev-1", 1), ("codex", "dedicated"))
}

impl Rig {
    /// A ready namespace (the tenant RoleBinding made as an operator would) and a bound Agent;
    /// the hook calls this made are forgotten.
    fn ready(&self) {
        let ns = namespace();
        let first = self.driver.ensure_namespace(&ns, &self.cancel).unwrap();
        assert_eq!(
            first.pending_reason.as_deref(),
            Some("NAMESPACE_ROLEBINDING_PENDING")
        );
        self.fake.put_tenant_rolebinding(&k8s_namespace("ns-1"));
        let ready = self.driver.ensure_namespace(&ns, &self.cancel).unwrap();
        assert!(ready.complete, "{ready:?}");
        self.driver.bind_agent(&agent(), &self.cancel).unwrap();
    }

    fn deployments(&self) -> Vec<Value> {
        self.fake.objects("deployments")
    }

    fn run_revision(&self) {
        wait_for("the revision ready", Duration::from_secs(20), || {
            self.driver
                .prepare_revision(&revision(), &self.cancel)
                .unwrap()
                .ready
        });
    }
}

fn kind_of(
    result: Result<impl std::fmt::Debug, occ_worker::compute::ComputeError>,
) -> (ComputeErrorKind, String) {
    let e = result.expect_err("the hook stops the step");
    (e.kind().clone(), e.retry_code().to_string())
}

#[test]
fn h3_calls_follow_h2_order_with_the_request_shape_and_stop_at_the_first_refusal() {
    let r = rig("hooks-order", &["iam", "sandbox", "configuration"], 5);
    r.ready();
    let ns_calls = r.server.sequence();
    assert_eq!(
        ns_calls,
        [
            ("configuration".into(), "afterNamespacePrepared".into()),
            ("sandbox".into(), "afterNamespacePrepared".into()),
            ("iam".into(), "afterNamespacePrepared".into()),
        ],
        "called once the namespace is otherwise ready, in H2 order"
    );
    assert_eq!(
        r.server.calls()[0].body,
        json!({"phase": "afterNamespacePrepared", "installationId": "inst", "namespaceId": "ns-1", "computeDriverId": "kubernetes"})
    );
    r.server.answer(
        "sandbox",
        "beforeWorkloadStart",
        Answer::Deny(Some(json!("SANDBOX_NOT_READY"))),
    );
    let (kind, _) = kind_of(r.driver.prepare_revision(&revision(), &r.cancel));
    assert_eq!(
        kind,
        ComputeErrorKind::Permanent("SANDBOX_NOT_READY".into())
    );
    assert_eq!(
        r.server.sequence()[3..],
        [
            ("configuration".into(), "beforeWorkloadStart".into()),
            ("sandbox".into(), "beforeWorkloadStart".into()),
        ],
        "the IAM hook is not asked once the Sandbox hook refused"
    );
    assert_eq!(
        r.server.calls()[4].body,
        json!({"phase": "beforeWorkloadStart", "installationId": "inst", "namespaceId": "ns-1",
               "agentId": "ag-1", "revisionId": "rev-1", "computeDriverId": "kubernetes"})
    );
    assert!(
        r.deployments().is_empty(),
        "nothing is written on a refusal"
    );
}

#[test]
fn h4_a_refusal_without_a_code_of_its_own_is_the_generic_code() {
    let r = rig("hooks-generic", &["iam"], 5);
    r.ready();
    for code in [
        None,
        Some(json!("lower_case")),
        Some(json!(42)),
        Some(json!("A".repeat(65))),
    ] {
        r.server
            .answer("iam", "beforeWorkloadStart", Answer::Deny(code.clone()));
        let (kind, _) = kind_of(r.driver.prepare_revision(&revision(), &r.cancel));
        assert_eq!(
            kind,
            ComputeErrorKind::Permanent("LIFECYCLE_HOOK_REFUSED".into()),
            "{code:?}"
        );
    }
}

#[test]
fn h4_no_valid_answer_is_unavailable_and_waits_before_a_start() {
    let r = rig("hooks-unavailable", &["configuration"], 1);
    r.ready();
    for answer in [
        Answer::Garbage,
        Answer::Status(500),
        Answer::Status(403),
        Answer::Slow(Duration::from_secs(3)),
    ] {
        r.server
            .answer("configuration", "beforeWorkloadStart", answer.clone());
        let started = Instant::now();
        let (kind, code) = kind_of(r.driver.prepare_revision(&revision(), &r.cancel));
        assert_eq!(kind, ComputeErrorKind::TransientDependency, "{answer:?}");
        assert_eq!(code, "LIFECYCLE_HOOK_UNAVAILABLE", "{answer:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "bounded by timeoutSeconds: {answer:?}"
        );
    }
    assert!(r.deployments().is_empty());
}

#[test]
fn h4_a_hook_signed_by_another_ca_is_unavailable() {
    let r = rig("hooks-tls", &["iam"], 5);
    r.ready();
    // The same URL, another server: its certificate is not the configured CA's.
    let other_dir = r.dir.join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let other = HookServer::start(&other_dir);
    let file = installation_file(&[json!({
        "driver": "iam", "url": other.url("iam"),
        "caFile": r.server.ca_file().display().to_string(), "phases": ["beforeWorkloadStart"],
    })]);
    let installation = Installation::parse(&file, DriverKind::Kubernetes).unwrap();
    let hooks = hooks::LifecycleHooks::new(&installation.lifecycle_hooks).unwrap();
    let subject = hooks::HookSubject {
        installation_id: "inst",
        namespace_id: "ns-1",
        agent_id: Some("ag-1"),
        revision_id: Some("rev-1"),
        compute_driver_id: "kubernetes",
    };
    let e = hooks
        .run(
            occ_worker::compute::hooks::Phase::BeforeWorkloadStart,
            &subject,
            &[],
            &r.cancel,
        )
        .unwrap_err();
    assert_eq!(e.retry_code(), "LIFECYCLE_HOOK_UNAVAILABLE");
    assert_eq!(e.class(), "lifecycle_hook_tls");
    assert!(
        other.calls().is_empty(),
        "no request crossed the failed handshake"
    );
}

#[test]
fn h4_a_cancelled_pass_ends_a_slow_hook_call() {
    let r = rig("hooks-cancel", &["iam"], 30);
    r.ready();
    r.server.answer(
        "iam",
        "beforeWorkloadStart",
        Answer::Slow(Duration::from_secs(20)),
    );
    let cancel = CancelToken::unbounded();
    let canceller = crate::support::cancel_after(
        &cancel,
        Duration::from_millis(300),
        occ_worker::cancel::LossCause::WorkerStopping,
    );
    let started = Instant::now();
    let (kind, _) = kind_of(r.driver.prepare_revision(&revision(), &cancel));
    canceller.join().unwrap();
    assert!(matches!(kind, ComputeErrorKind::Cancelled(_)), "{kind:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn h5_good_launch_values_reach_the_workload_as_plain_values() {
    let r = rig("hooks-launch", &["configuration", "iam"], 5);
    r.ready();
    r.server.answer(
        "configuration",
        "beforeWorkloadStart",
        Answer::AllowWith(json!({"MODEL_ENDPOINT": "opaque-endpoint-1"})),
    );
    r.server.answer(
        "iam",
        "beforeWorkloadStart",
        Answer::AllowWith(json!({"TENANT_TOKEN_REF": "opaque-ref-2"})),
    );
    r.run_revision();
    let deployment = r
        .fake
        .get("/apis/apps/v1/namespaces/occ-ns-1/deployments/agent-ag-1-r1")
        .expect("the Harness Deployment");
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    for (name, value) in [
        ("MODEL_ENDPOINT", "opaque-endpoint-1"),
        ("TENANT_TOKEN_REF", "opaque-ref-2"),
    ] {
        assert!(
            env.contains(&json!({"name": name, "value": value})),
            "{name} in {env:?}"
        );
    }
}

#[test]
fn h5_a_bad_launch_value_refuses_the_start_and_reaches_nothing() {
    let r = rig("hooks-launch-bad", &["configuration", "iam"], 5);
    r.ready();
    let leaked = &format!("sk-live-{}", crate::support::canary("api-key"));
    let bad: Vec<(Value, &str)> = vec![
        (json!({"API_KEY": leaked}), leaked),
        (json!({"OCC_AGENT_ID": "opaque-x"}), "opaque-x"),
        (json!({"lower": "opaque-lower"}), "opaque-lower"),
        (
            json!({"LONG": format!("opaque-{}", "y".repeat(250))}),
            "yyyyyyyyyy",
        ),
        (json!({"CTRL": "opaque-a\u{1}b"}), "opaque-a"),
        (json!({"NUMBER": 7}), "NUMBER"),
        // A name the first hook already gave.
        (json!({"SHARED": "opaque-second"}), "opaque-second"),
    ];
    r.server.answer(
        "configuration",
        "beforeWorkloadStart",
        Answer::AllowWith(json!({"SHARED": "opaque-first"})),
    );
    for (values, needle) in bad {
        r.server.answer(
            "iam",
            "beforeWorkloadStart",
            Answer::AllowWith(values.clone()),
        );
        let (kind, _) = kind_of(r.driver.prepare_revision(&revision(), &r.cancel));
        assert_eq!(
            kind,
            ComputeErrorKind::Permanent(LAUNCH_VALUE_REFUSED.into()),
            "{values}"
        );
        assert!(r.deployments().is_empty(), "nothing written for {values}");
        let everything = serde_json::to_string(&r.fake.objects("deployments")).unwrap();
        assert!(!everything.contains(needle));
    }
}

#[test]
fn h4_a_before_workload_stop_refusal_keeps_the_revisions_pods() {
    let r = rig("hooks-stop", &["iam"], 5);
    r.ready();
    r.run_revision();
    r.server.answer(
        "iam",
        "beforeWorkloadStop",
        Answer::Deny(Some(json!("REVOCATION_FAILED"))),
    );
    for attempt in 0..2 {
        let (kind, code) = kind_of(r.driver.stop_revision(&revision(), &r.cancel));
        assert_eq!(kind, ComputeErrorKind::Retryable, "attempt {attempt}");
        assert_eq!(code, "REVOCATION_FAILED");
        let (kind, code) = kind_of(r.driver.retire_revision(&revision(), &r.cancel));
        assert_eq!(
            (kind, code.as_str()),
            (ComputeErrorKind::Retryable, "REVOCATION_FAILED")
        );
    }
    for name in ["agent-ag-1-r1", "agent-ag-1-gateway"] {
        let d = r
            .fake
            .get(&format!(
                "/apis/apps/v1/namespaces/occ-ns-1/deployments/{name}"
            ))
            .unwrap_or_else(|| panic!("{name} kept"));
        assert_eq!(d["spec"]["replicas"], 1, "{name} still runs");
    }
    assert!(!r.fake.objects("pods").is_empty(), "the Pods keep running");
    // Allowed, the stop goes ahead; once nothing is left to stop, the hook is not asked.
    r.server.answer("iam", "beforeWorkloadStop", Answer::Allow);
    wait_for("stopped", Duration::from_secs(20), || {
        r.driver.stop_revision(&revision(), &r.cancel).is_ok()
    });
    let asked = r.server.calls().len();
    r.driver.stop_revision(&revision(), &r.cancel).unwrap();
    assert_eq!(
        r.server.calls().len(),
        asked,
        "nothing left to stop: no call"
    );
}

#[test]
fn h4_namespace_phases_retry_with_the_hooks_code_and_keep_the_namespace() {
    let r = rig("hooks-namespace", &["configuration"], 5);
    r.server.answer(
        "configuration",
        "afterNamespacePrepared",
        Answer::Deny(Some(json!("QUOTA_NOT_PROVISIONED"))),
    );
    let ns = namespace();
    r.driver.ensure_namespace(&ns, &r.cancel).unwrap();
    r.fake.put_tenant_rolebinding(&k8s_namespace("ns-1"));
    let (kind, code) = kind_of(r.driver.ensure_namespace(&ns, &r.cancel));
    assert_eq!(
        (kind, code.as_str()),
        (ComputeErrorKind::Retryable, "QUOTA_NOT_PROVISIONED")
    );
    r.server.answer(
        "configuration",
        "afterNamespacePrepared",
        Answer::Status(503),
    );
    let (kind, code) = kind_of(r.driver.ensure_namespace(&ns, &r.cancel));
    assert_eq!(
        (kind, code.as_str()),
        (ComputeErrorKind::Retryable, "LIFECYCLE_HOOK_UNAVAILABLE")
    );
    r.server
        .answer("configuration", "afterNamespacePrepared", Answer::Allow);
    assert!(r.driver.ensure_namespace(&ns, &r.cancel).unwrap().complete);

    r.server.answer(
        "configuration",
        "beforeNamespaceDelete",
        Answer::Deny(Some(json!("RETENTION_HOLD"))),
    );
    let (kind, code) = kind_of(r.driver.delete_namespace(&ns, &r.cancel));
    assert_eq!(
        (kind, code.as_str()),
        (ComputeErrorKind::Retryable, "RETENTION_HOLD")
    );
    let kept = r
        .fake
        .get(&format!("/api/v1/namespaces/{}", k8s_namespace("ns-1")))
        .expect("the namespace is kept");
    assert!(
        kept["metadata"]["deletionTimestamp"].is_null(),
        "not deleted"
    );
    r.server
        .answer("configuration", "beforeNamespaceDelete", Answer::Allow);
    wait_for("namespace gone", Duration::from_secs(20), || {
        r.driver.delete_namespace(&ns, &r.cancel).unwrap().complete
    });
}

#[test]
fn h2_hooks_under_a_compute_that_runs_none_stop_start_up() {
    let dir = scratch("hooks-inert");
    let server = HookServer::start(&dir);
    let file = installation_file(&[server.entry("iam", &["beforeWorkloadStart"], 5)]);
    let installation = Installation::parse(&file, DriverKind::Kubernetes).unwrap();
    assert_eq!(
        installation.check_compute(&InertCompute).unwrap_err(),
        "OCC_INSTALLATION_CONFIG: lifecycleHooks: the inert Compute Driver (inert) runs no lifecycle hooks"
    );
    // None configured: nothing to attach, whatever the driver.
    Installation::default()
        .check_compute(&InertCompute)
        .unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// `occ-worker check` with `OCC_INSTALLATION_CONFIG` naming `file`'s contents.
fn check_with(env: &[(&'static str, String)], dir: &Path, contents: &str) -> (Option<i32>, String) {
    let path = dir.join("installation.json");
    std::fs::write(&path, contents).unwrap();
    let mut env = env.to_vec();
    env.push(("OCC_INSTALLATION_CONFIG", path.display().to_string()));
    let out = crate::support::logged("worker", worker_command(&["check"], &env).output().unwrap());
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn h1_start_up_refuses_each_bad_configuration_with_one_line_each() {
    let db = TestDb::bootstrapped();
    let dir = scratch("hooks-startup");
    let server = HookServer::start(&dir);
    let env = worker_env(&db.url);
    let path = dir.join("installation.json").display().to_string();
    let mut bad_url = server.entry("iam", &["beforeWorkloadStart"], 5);
    bad_url["url"] = json!("http://127.0.0.1:1/iam");
    let cases = [
        (
            json!({"lifecycleHooks": [bad_url, server.entry("iam", &["beforeWorkloadStop"], 40)]}).to_string(),
            vec![
                format!(r#"invalid configuration: OCC_INSTALLATION_CONFIG {path}: lifecycleHooks[0].url must be an https:// URL with a host, got "http://127.0.0.1:1/iam""#),
                format!("invalid configuration: OCC_INSTALLATION_CONFIG {path}: lifecycleHooks[1]: a second entry for driver iam (a driver has one hook set)"),
            ],
        ),
        (
            json!({"lifecycleHooks": [server.entry("sandbox", &["beforeWorkloadStop"], 5)]}).to_string(),
            vec![format!("invalid configuration: OCC_INSTALLATION_CONFIG {path}: lifecycleHooks[0]: driver sandbox needs a sandbox selected (the `sandbox` key)")],
        ),
        (
            r#"{"hooks": []}"#.to_string(),
            vec![format!("invalid configuration: OCC_INSTALLATION_CONFIG {path}: hooks: unknown field `hooks`, expected one of `lifecycleHooks`, `sandbox`, `sandboxNetworkPolicyCeiling`, `credentialGateway`, `credentialProxy`, `repositoryPolicy`, `repositorySender` at line 1 column 8")],
        ),
    ];
    for (contents, expected) in cases {
        let (code, stderr) = check_with(&env, &dir, &contents);
        assert_eq!(code, Some(2), "{stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), expected.len(), "{stderr}");
        for (line, expected) in lines.iter().zip(&expected) {
            assert!(
                line.ends_with(expected.as_str()),
                "{line}\n  expected …{expected}"
            );
        }
    }
    // A valid file is reported by `check`.
    let good =
        json!({"lifecycleHooks": [server.entry("configuration", &["afterNamespacePrepared"], 5)]});
    let path = dir.join("good.json");
    std::fs::write(&path, good.to_string()).unwrap();
    let mut env = env.clone();
    env.push(("OCC_INSTALLATION_CONFIG", path.display().to_string()));
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
    assert_eq!(
        report["lifecycleHooks"],
        json!([{"driver": "configuration", "url": server.url("configuration"), "phases": ["afterNamespacePrepared"], "answered": true}])
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A Namespace's status, and the latest attempt of its latest work: (code, outcome).
fn namespace_work(c: &mut postgres::Client, ns: &str) -> (String, Option<String>, Option<String>) {
    let row = c
        .query_one(
            "SELECT CASE WHEN n.deleted_at IS NULL THEN n.status ELSE 'deleted' END, a.code, a.outcome FROM occ.namespaces_all n \
             LEFT JOIN LATERAL (SELECT id FROM occ.work WHERE namespace_id = n.id \
                                ORDER BY id DESC LIMIT 1) w ON true \
             LEFT JOIN LATERAL (SELECT code, outcome FROM occ.work_attempts \
                                WHERE work_id = w.id ORDER BY id DESC LIMIT 1) a ON true \
             WHERE n.id = $1",
            &[&ns],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[test]
fn h4_on_docker_a_namespace_stays_provisioning_then_deleting_while_its_hooks_refuse() {
    if !crate::docker::docker_available() {
        return;
    }
    let _heavy = crate::support::take_turn(crate::support::Turn::DockerHeavy);
    let db = TestDb::bootstrapped();
    let dir = scratch("hooks-docker");
    let server = HookServer::start(&dir);
    server.answer(
        "iam",
        "afterNamespacePrepared",
        Answer::Deny(Some(json!("TENANT_NOT_ONBOARDED"))),
    );
    server.answer(
        "iam",
        "beforeNamespaceDelete",
        Answer::Deny(Some(json!("RETENTION_HOLD"))),
    );
    let path = dir.join("installation.json");
    std::fs::write(
        &path,
        json!({"lifecycleHooks": [server.entry("iam", &["afterNamespacePrepared", "beforeNamespaceDelete"], 5)]}).to_string(),
    )
    .unwrap();
    let mut env = worker_env(&db.url);
    env.push(("OCC_INSTALLATION_CONFIG", path.display().to_string()));
    env.push(("OCC_WORKER_MAX_ATTEMPTS", "1000".into()));
    env.push(("OCC_WORKER_POLL_INTERVAL_MS", "100".into()));
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    let mut c = db.client();
    let created: Value = crate::support::one(
        &mut c,
        "SELECT occ.namespace_create('admin', 'hooked')",
        &[],
    );
    let ns = created["id"].as_str().unwrap().to_string();
    wait_for("the hook refused twice", Duration::from_secs(60), || {
        server.sequence().len() >= 2
    });
    wait_for("the refusal recorded", Duration::from_secs(30), || {
        namespace_work(&mut c, &ns).1.is_some()
    });
    let (status, code, outcome) = namespace_work(&mut c, &ns);
    assert_eq!(
        (status.as_str(), code.as_deref(), outcome.as_deref()),
        ("provisioning", Some("TENANT_NOT_ONBOARDED"), Some("retry"))
    );
    server.answer("iam", "afterNamespacePrepared", Answer::Allow);
    wait_for("ready", Duration::from_secs(60), || {
        namespace_work(&mut c, &ns).0 == "ready"
    });
    c.query_one("SELECT occ.namespace_delete('admin', $1)", &[&"hooked"])
        .unwrap();
    wait_for("the delete refused", Duration::from_secs(60), || {
        namespace_work(&mut c, &ns).1.as_deref() == Some("RETENTION_HOLD")
    });
    let (status, _, outcome) = namespace_work(&mut c, &ns);
    assert_eq!(
        (status.as_str(), outcome.as_deref()),
        ("deleting", Some("retry"))
    );
    let networks = std::process::Command::new("docker")
        .args([
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("label=occ.namespace={ns}"),
        ])
        .output()
        .unwrap();
    assert!(!networks.stdout.is_empty(), "the network is kept");
    server.answer("iam", "beforeNamespaceDelete", Answer::Allow);
    wait_for("deleted", Duration::from_secs(60), || {
        namespace_work(&mut c, &ns).0 == "deleted"
    });
    let calls = server.calls();
    assert!(calls
        .iter()
        .all(|c| c.body["namespaceId"] == ns.as_str() && c.body["computeDriverId"] == "docker"));
    drop(worker);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn h5_on_kubernetes_a_refused_start_fails_the_deployment_and_no_value_is_logged() {
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(20),
        ..FakeOptions::default()
    });
    let dir = scratch("hooks-kube-e2e");
    let server = HookServer::start(&dir);
    let db = TestDb::bootstrapped();
    let path = dir.join("installation.json");
    std::fs::write(
        &path,
        json!({"lifecycleHooks": [server.entry("configuration", &["beforeWorkloadStart"], 5)]})
            .to_string(),
    )
    .unwrap();
    let mut env = kube_env(&db, &fake, &dir, 2);
    env.push(("OCC_INSTALLATION_CONFIG", path.display().to_string()));
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    let mut c = db.client();
    let ns = ready_namespaces(&mut c, &fake, 1).remove(0);
    let state = |c: &mut postgres::Client, rev: &str| -> (String, Option<String>) {
        crate::support::row2(
            c,
            "SELECT state, reason_code FROM occ.revision_status WHERE revision_id = $1",
            &[&rev],
        )
    };
    // Planted values (canaries the suite's log scan looks for, tests/canary.rs).
    let (raw_key, route) = (
        format!("sk-live-{}", crate::support::canary("api-key")),
        format!("opaque-{}", crate::support::canary("launch-value")),
    );
    // A refusal with the hook's code: the deployment fails for good, nothing is written.
    server.answer(
        "configuration",
        "beforeWorkloadStart",
        Answer::Deny(Some(json!("MODEL_QUOTA_EXHAUSTED"))),
    );
    let (refused_agent, _) = crate::agent::create_agent(&mut c, &ns, "refused");
    let rev = deploy(&mut c, &ns, &refused_agent, "codex", "dedicated");
    wait_for("refused", Duration::from_secs(60), || {
        state(&mut c, &rev).0 == "failed"
    });
    assert_eq!(
        state(&mut c, &rev).1.as_deref(),
        Some("MODEL_QUOTA_EXHAUSTED")
    );
    // A bad launch value: refused, and the value reaches neither the fake nor a log line.
    server.answer(
        "configuration",
        "beforeWorkloadStart",
        Answer::AllowWith(json!({"API_KEY": raw_key})),
    );
    let (leaky, _) = crate::agent::create_agent(&mut c, &ns, "leaky");
    let rev = deploy(&mut c, &ns, &leaky, "codex", "dedicated");
    wait_for("refused", Duration::from_secs(60), || {
        state(&mut c, &rev).0 == "failed"
    });
    assert_eq!(state(&mut c, &rev).1.as_deref(), Some(LAUNCH_VALUE_REFUSED));
    // A good one: the revision runs with it.
    server.answer(
        "configuration",
        "beforeWorkloadStart",
        Answer::AllowWith(json!({"MODEL_ROUTE": route})),
    );
    let (good, _) = crate::agent::create_agent(&mut c, &ns, "good");
    let rev = deploy(&mut c, &ns, &good, "codex", "dedicated");
    wait_for("active", Duration::from_secs(60), || {
        state(&mut c, &rev).0 == "active"
    });
    let deployments = serde_json::to_string(&fake.objects("deployments")).unwrap();
    assert!(deployments.contains(&route));
    assert!(!deployments.contains(&raw_key));
    assert!(
        fake.objects("deployments")
            .iter()
            .all(|d| !d["metadata"]["name"]
                .as_str()
                .unwrap()
                .contains(&refused_agent)),
        "the refused revision wrote nothing"
    );
    let events = serde_json::to_string(&worker.events()).unwrap();
    worker.signal("TERM");
    let (_, stderr) = worker.wait(Duration::from_secs(30));
    let logs = format!("{events}{stderr}");
    assert!(!logs.contains(&raw_key), "the refused value was logged");
    assert!(!logs.contains(&route), "a launch value was logged");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_reference_hook_answers_from_its_policy_file() {
    use crate::kube_fake::tls::{leaf, new_ca};
    let dir = scratch("occ-hook");
    let ca = new_ca("occ-hook-test-ca");
    let (cert, key) = leaf(
        &ca,
        "occ-hook",
        vec![rcgen::SanType::IpAddress(std::net::IpAddr::V4(
            std::net::Ipv4Addr::LOCALHOST,
        ))],
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    );
    std::fs::write(dir.join("ca.pem"), ca.0.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    let policy = dir.join("policy.json");
    std::fs::write(
        &policy,
        r#"{"beforeNamespaceDelete": {"allowed": false, "code": "RETENTION_HOLD"}}"#,
    )
    .unwrap();
    let mut child = Reaped(
        std::process::Command::new(env!("CARGO_BIN_EXE_occ-hook"))
            .args(["--listen", "127.0.0.1:0", "--policy"])
            .arg(&policy)
            .arg("--cert")
            .arg(dir.join("cert.pem"))
            .arg("--key")
            .arg(dir.join("key.pem"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = crate::support::logged_lines(child.0.stdout.take().unwrap(), "occ-hook.stdout");
    let listening: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(listening["event"], "hook.listening");
    let file = json!({"lifecycleHooks": [{
        "driver": "iam", "url": format!("https://{}/", listening["addr"].as_str().unwrap()),
        "caFile": dir.join("ca.pem").display().to_string(),
        "phases": ["afterNamespacePrepared", "beforeNamespaceDelete"],
    }]});
    let installation = Installation::parse(&file.to_string(), DriverKind::Docker).unwrap();
    let hooks = hooks::LifecycleHooks::new(&installation.lifecycle_hooks).unwrap();
    let subject = hooks::HookSubject {
        installation_id: "inst",
        namespace_id: "ns-1",
        agent_id: None,
        revision_id: None,
        compute_driver_id: "docker",
    };
    let cancel = CancelToken::unbounded();
    use occ_worker::compute::hooks::Phase;
    assert!(hooks
        .run(Phase::AfterNamespacePrepared, &subject, &[], &cancel)
        .is_ok());
    let held = hooks
        .run(Phase::BeforeNamespaceDelete, &subject, &[], &cancel)
        .unwrap_err();
    assert_eq!(held.retry_code(), "RETENTION_HOLD");
    // The policy is read again on every call.
    std::fs::write(&policy, "{}").unwrap();
    assert!(hooks
        .run(Phase::BeforeNamespaceDelete, &subject, &[], &cancel)
        .is_ok());
    let calls: Vec<Value> = (0..3)
        .map(|_| serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap())
        .collect();
    assert_eq!(
        calls
            .iter()
            .map(|c| (c["phase"].as_str().unwrap(), c["allowed"].clone()))
            .collect::<Vec<_>>(),
        [
            ("afterNamespacePrepared", json!(true)),
            ("beforeNamespaceDelete", json!(false)),
            ("beforeNamespaceDelete", json!(true)),
        ]
    );
    drop(child);
    let _ = std::fs::remove_dir_all(dir);
}

/// A child process killed and reaped when dropped, a failing assertion included.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// H1, issue 43: `check` calls each configured hook once (phase `check`, no Namespace) and names
// each that gives no valid answer on a line of its own: a warning in development (exit 0,
// status `warnings`), a failure in production (exit 1). It used to answer `status: ok` for a
// hook nobody answers.
#[test]
fn h1_check_calls_each_hook_once_and_names_each_that_does_not_answer() {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = scratch("hooks-check");
    let db = TestDb::bootstrapped();
    let server = HookServer::start(&dir);
    server.answer("iam", "check", Answer::Status(503));
    // A port nothing listens on any more.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("https://{}/sandbox", closed.local_addr().unwrap());
    drop(closed);
    let mut gone = server.entry("configuration", &["afterNamespacePrepared"], 5);
    gone["url"] = json!(dead);
    let file = dir.join("installation.json");
    std::fs::write(
        &file,
        json!({"lifecycleHooks": [gone, server.entry("iam", &["beforeNamespaceDelete"], 5)]})
            .to_string(),
    )
    .unwrap();
    let mut env = kube_env(&db, &fake, &dir, 1);
    env.push(("OCC_INSTALLATION_CONFIG", file.display().to_string()));
    let lines = [
        format!("lifecycle hook configuration at {dead} could not be reached (the connection failed) (LIFECYCLE_HOOK_UNAVAILABLE)"),
        format!("lifecycle hook iam at {} answered HTTP 503, not 200 (LIFECYCLE_HOOK_UNAVAILABLE)", server.url("iam")),
    ];

    let out = crate::support::logged(
        "worker",
        worker_command(&["check", "--json"], &env).output().unwrap(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        lines
            .iter()
            .map(|l| format!("occ-worker: warning: {l}"))
            .collect::<Vec<_>>()
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["status"], "warnings");
    assert_eq!(
        report["lifecycleHooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["answered"].clone())
            .collect::<Vec<_>>(),
        [json!(false), json!(false)]
    );
    let calls = server.calls();
    assert_eq!(calls.len(), 1, "one call per reachable hook: {calls:?}");
    assert_eq!(calls[0].body["phase"], "check");
    assert!(calls[0].body.get("namespaceId").is_none(), "{:?}", calls[0]);

    let out = worker_command(&["check"], &crate::kube_e2e::production(env.clone()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        lines
            .iter()
            .map(|l| format!("occ-worker: {l}"))
            .collect::<Vec<_>>()
    );

    // Once it answers, `check` is ok.
    server.answer("iam", "check", Answer::Allow);
    std::fs::write(
        &file,
        json!({"lifecycleHooks": [server.entry("iam", &["beforeNamespaceDelete"], 5)]}).to_string(),
    )
    .unwrap();
    let out = crate::support::logged(
        "worker",
        worker_command(&["check", "--json"], &env).output().unwrap(),
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["status"], "ok");
    let _ = std::fs::remove_dir_all(dir);
}

// SPEC H3, H4 (seed000:11): an embedded revision taking the Agent's shared gateway from the
// revision it runs stops that revision's workload, so `beforeWorkloadStop` is asked for the
// revision being replaced first; a refusal leaves the gateway running it, and the activation
// fails with the hook's code as a retry (the reconciler waits with it).
#[test]
fn h4_an_embedded_takeover_of_the_gateway_asks_before_workload_stop_for_the_replaced_revision() {
    let r = rig("hooks-takeover", &["iam"], 5);
    r.ready();
    let first = bare_revision("ns-1", "ag-1", ("rev-1", 1), ("openclaw", "embedded"));
    let second = bare_revision("ns-1", "ag-1", ("rev-2", 2), ("openclaw", "embedded"));
    wait_for("revision 1 serves", Duration::from_secs(20), || {
        r.driver.prepare_revision(&first, &r.cancel).is_ok()
            && r.driver.activate_revision(&first, &r.cancel).is_ok()
    });
    let gateway = || {
        r.fake
            .get("/apis/apps/v1/namespaces/occ-ns-1/deployments/agent-ag-1-gateway")
            .expect("the gateway")["spec"]["template"]["metadata"]["labels"]["occ.revision"]
            .clone()
    };
    assert_eq!(gateway(), "rev-1");
    r.server.answer(
        "iam",
        "beforeWorkloadStop",
        Answer::Deny(Some(json!("REVOCATION_FAILED"))),
    );
    let asked = r.server.calls().len();
    let (kind, code) = kind_of(r.driver.activate_revision(&second, &r.cancel));
    assert_eq!(
        (kind, code.as_str()),
        (ComputeErrorKind::Retryable, "REVOCATION_FAILED")
    );
    let calls = r.server.calls();
    let stop: Vec<&Value> = calls[asked..]
        .iter()
        .map(|c| &c.body)
        .filter(|b| b["phase"] == "beforeWorkloadStop")
        .collect();
    assert_eq!(stop.len(), 1, "{stop:?}");
    assert_eq!(
        stop[0]["revisionId"], "rev-1",
        "asked for the revision replaced"
    );
    assert_eq!(gateway(), "rev-1", "the gateway still runs revision 1");
    // Allowed, the takeover goes ahead.
    r.server.answer("iam", "beforeWorkloadStop", Answer::Allow);
    wait_for("revision 2 serves", Duration::from_secs(20), || {
        r.driver.activate_revision(&second, &r.cancel).is_ok()
    });
    assert_eq!(gateway(), "rev-2");
}
