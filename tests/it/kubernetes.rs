//! The Kubernetes Compute Driver (SPEC C1, C3) against the TLS API server fake, built exactly
//! as production builds it (kubeconfig → `Connection` → `Client` → `KubernetesDriver` with
//! parsed settings). Namespace and Agent lifecycles run through a real worker and PostgreSQL
//! (N2-N5, A1, A2, R2-R10); connection, error-mapping and cancellation cases call the driver
//! directly. Every test asserts the outcome (work state and reason code, or the driver's
//! typed answer) and, where it matters, the exact requests the fake received; waits on the
//! fake's controllers poll with deadlines, never fixed sleeps.

use crate::agent::{active, audits, create_agent, evidence, work};
use crate::kube_fake::{
    Action, FakeOptions, Inject, KubeFake, KubeconfigAuth, PodBehaviour, Recorded,
};
use crate::scripted::{quiet, run_until, run_with, Opts};
use crate::support::{cancel_after, insert_namespace, wait_for, TestDb};
use occ_worker::cancel::{CancelToken, LossCause};
use occ_worker::compute::kubernetes::client::Client;
use occ_worker::compute::kubernetes::connection;
use occ_worker::compute::kubernetes::settings::Settings;
use occ_worker::compute::kubernetes::KubernetesDriver;
use occ_worker::compute::{
    AdmissionUse, AgentSpec, ComputeDriver, ComputeError, ComputeErrorKind, DriverPolicy,
    NamespaceSpec,
};
use postgres::Client as Sql;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The driver settings of these tests: a client-side rate limit far above the default 20/40
/// (`c3_the_client_side_rate_limit_spaces_requests` checks the limit itself).
pub(crate) const SETTINGS: &str = r#"{"tenantRoleBinding": "occ-tenant", "tokenAudience": "occ-agent",
  "qps": 1000, "burst": 1000,
  "harnesses": [
    {"id": "codex", "version": "1.0.0", "mode": "dedicated", "image": "registry.example/codex:1.0.0"},
    {"id": "openclaw", "version": "1.0.0", "mode": "embedded", "image": "registry.example/openclaw:1.0.0"}],
  "gatewayImage": "registry.example/gateway:1.0.0"}"#;
pub(crate) const CORE: &str = "/api/v1";
pub(crate) const APPS: &str = "/apis/apps/v1";
/// The Kubernetes namespace of the agent fixture's Namespace `ns1`.
pub(crate) const NS1: &str = "occ-ns1";
/// A Secret value that lives only in the fake cluster: no request may ever carry it.
/// The planted value: a canary (tests/canary.rs) the suite's log scan looks for.
fn secret_value() -> &'static str {
    static VALUE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VALUE.get_or_init(|| crate::support::canary("secret-data"))
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "occ-kube-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The fake cluster, a driver connected to it, and the kubeconfig's directory.
pub(crate) struct Kube {
    pub(crate) fake: KubeFake,
    pub(crate) driver: Arc<KubernetesDriver>,
    dir: TempDir,
}

/// The driver as production builds it, from a kubeconfig file.
fn driver_from(kubeconfig: &Path, settings: &str) -> KubernetesDriver {
    let conn = connection::from_kubeconfig(kubeconfig, None).expect("kubeconfig");
    let client = Client::new(conn).expect("client");
    KubernetesDriver::new(client, Settings::parse(settings).expect("settings"))
}

impl Kube {
    fn start() -> Kube {
        Kube::with(FakeOptions::default(), SETTINGS)
    }

    fn with(opts: FakeOptions, settings: &str) -> Kube {
        let fake = KubeFake::start(opts);
        let dir = TempDir::new();
        let kubeconfig = fake.write_kubeconfig(&dir.0, KubeconfigAuth::Token);
        let driver = Arc::new(driver_from(&kubeconfig, settings));
        Kube { fake, driver, dir }
    }

    /// The operator-provisioned tenant RoleBinding in `namespace`.
    fn seed_rolebinding(&self, namespace: &str) {
        self.fake.put_tenant_rolebinding(namespace);
    }

    /// Requests that change something.
    pub(crate) fn writes(&self) -> Vec<Recorded> {
        self.fake
            .requests()
            .into_iter()
            .filter(|r| matches!(r.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
            .collect()
    }
}

fn cancel() -> CancelToken {
    CancelToken::new(Instant::now() + Duration::from_secs(30))
}

fn ns_spec(id: &str, existing: Option<&str>) -> NamespaceSpec {
    NamespaceSpec {
        installation_id: "inst".into(),
        namespace_id: id.into(),
        name: id.into(),
        existing_namespace: existing.map(str::to_string),
    }
}

fn permanent(e: &ComputeError) -> &str {
    match e.kind() {
        ComputeErrorKind::Permanent(code) => code,
        other => panic!("not permanent: {other:?} ({e})"),
    }
}

pub(crate) fn methods(requests: &[Recorded]) -> Vec<String> {
    requests
        .iter()
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect()
}

fn labels(object: &Value) -> &Value {
    &object["metadata"]["labels"]
}

// ---------------------------------------------------------------------------------------------
// Namespaces (N3, N4, C3)
// ---------------------------------------------------------------------------------------------

/// Admits a Namespace as `actor`; returns its id.
fn admit_namespace(c: &mut Sql, actor: &str, name: &str, existing: Option<&str>) -> String {
    let v: Value = crate::support::one(
        c,
        "SELECT occ.namespace_create($1, $2, $3)",
        &[&actor, &name, &existing],
    );
    v["id"].as_str().unwrap().to_string()
}

fn namespace_status(c: &mut Sql, id: &str) -> String {
    c.query_one(
        "SELECT status FROM occ.namespaces_all WHERE id = $1",
        &[&id],
    )
    .unwrap()
    .get(0)
}

fn tombstoned(c: &mut Sql, id: &str) -> bool {
    c.query_one(
        "SELECT deleted_at IS NOT NULL FROM occ.namespaces_all WHERE id = $1",
        &[&id],
    )
    .unwrap()
    .get(0)
}

/// Whether the work's lifecycle audit trail names `pending_reason`.
fn audited_pending(c: &mut Sql, key: &str, pending_reason: &str) -> bool {
    c.query_one(
        "SELECT count(*) FROM occ.audit_events e JOIN occ.work w ON e.work_id = w.id
         WHERE w.idempotency_key = $1 AND e.details::text LIKE '%' || $2 || '%'",
        &[&key, &pending_reason],
    )
    .map(|r| r.get::<_, i64>(0) > 0)
    .unwrap_or(false)
}

#[test]
fn n3_ensure_creates_a_restricted_namespace_and_waits_for_the_tenant_rolebinding() {
    let kube = Kube::start();
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let id = admit_namespace(&mut c, "admin", "team", None);
    let key = format!("namespace:{id}:ensure");
    let name = format!("occ-{id}");

    run_until(&db, kube.driver.clone(), |c| {
        audited_pending(c, &key, "NAMESPACE_ROLEBINDING_PENDING")
    });
    let (state, code, _, _) = work(&mut c, &key);
    assert_ne!(state, "succeeded");
    assert_eq!(code, None);
    assert!(evidence(&mut c, &key).contains(&"deferred:NAMESPACE_INCOMPLETE".to_string()));
    assert_eq!(namespace_status(&mut c, &id), "provisioning");

    let namespace = kube.fake.get(&format!("{CORE}/namespaces/{name}")).unwrap();
    let l = labels(&namespace);
    assert_eq!(l["app.kubernetes.io/managed-by"], "occ-worker");
    assert_eq!(l["occ.installation"], "inst");
    assert_eq!(l["occ.namespace"], id.as_str());
    assert_eq!(l["pod-security.kubernetes.io/enforce"], "restricted");
    let policy = kube
        .fake
        .get(&format!(
            "/apis/networking.k8s.io/v1/namespaces/{name}/networkpolicies/occ-default-deny"
        ))
        .expect("default-deny NetworkPolicy");
    assert_eq!(policy["spec"]["podSelector"], json!({}));
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(policy["spec"]["ingress"], json!([]));

    kube.seed_rolebinding(&name);
    run_until(&db, kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &key).completed_with("NAMESPACE_RECONCILED");
    assert_eq!(namespace_status(&mut c, &id), "ready");
    // Exactly one namespace and one policy were ever created.
    let creates: Vec<String> = methods(&kube.writes());
    assert_eq!(
        creates,
        vec![
            format!("POST {CORE}/namespaces 201"),
            format!("POST /apis/networking.k8s.io/v1/namespaces/{name}/networkpolicies 201"),
        ],
        "{creates:?}"
    );

    // Idempotent: another ensure writes nothing.
    kube.fake.clear_requests();
    let o = kube
        .driver
        .ensure_namespace(&ns_spec(&id, None), &cancel())
        .unwrap();
    assert!(o.complete && o.pending_reason.is_none(), "{o:?}");
    assert!(kube.writes().is_empty(), "{:?}", methods(&kube.writes()));
    assert!(!kube.fake.requests().is_empty());
}

#[test]
fn c3_an_adopted_namespace_gets_labels_only_is_never_deleted_and_can_be_adopted_again() {
    let kube = Kube::start();
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    kube.fake.put_object(
        &format!("{CORE}/namespaces"),
        json!({"metadata": {"name": "legacy", "labels": {"team": "payments"}}}),
    );
    // Something of the tenant's own, which the driver must leave alone.
    kube.fake.put_object(
        &format!("{CORE}/namespaces/legacy/services"),
        json!({"metadata": {"name": "theirs"}, "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}}),
    );
    kube.seed_rolebinding("legacy");
    let id = admit_namespace(&mut c, "admin", "adopted", Some("legacy"));
    let key = format!("namespace:{id}:ensure");
    run_until(&db, kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &key).completed_with("NAMESPACE_RECONCILED");
    let writes = kube.writes();
    assert_eq!(writes[0].method, "PATCH");
    assert_eq!(writes[0].path, format!("{CORE}/namespaces/legacy"));
    // Labels only: no pod-security level, no other field.
    assert_eq!(
        writes[0].body,
        Some(json!({"metadata": {"labels": {
            "app.kubernetes.io/managed-by": "occ-worker",
            "occ.installation": "inst",
            "occ.namespace": id,
        }}}))
    );
    assert!(
        !writes
            .iter()
            .any(|w| w.method == "POST" && w.path == format!("{CORE}/namespaces")),
        "{:?}",
        methods(&writes)
    );
    let namespace = kube.fake.get(&format!("{CORE}/namespaces/legacy")).unwrap();
    assert_eq!(labels(&namespace)["team"], "payments");
    assert_eq!(labels(&namespace)["occ.namespace"], id.as_str());

    // Delete removes only what the driver created inside, never the namespace.
    c.query_one("SELECT occ.namespace_delete('admin', $1)", &[&id])
        .unwrap();
    kube.fake.clear_requests();
    run_until(&db, kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &format!("namespace:{id}:delete"))
        .completed_with("NAMESPACE_RECONCILED");
    assert!(tombstoned(&mut c, &id));
    let deletes: Vec<String> = kube
        .writes()
        .iter()
        .map(|w| format!("{} {}", w.method, w.path))
        .collect();
    assert_eq!(
        deletes,
        vec![
            "DELETE /apis/networking.k8s.io/v1/namespaces/legacy/networkpolicies/occ-default-deny?propagationPolicy=Background".to_string(),
            format!("PATCH {CORE}/namespaces/legacy"),
        ],
    );
    let namespace = kube
        .fake
        .get(&format!("{CORE}/namespaces/legacy"))
        .expect("never deleted");
    // The labels adoption added are gone again; the tenant's stay.
    assert_eq!(labels(&namespace), &json!({"team": "payments"}));
    assert!(kube
        .fake
        .get(&format!("{CORE}/namespaces/legacy/services/theirs"))
        .is_some());

    // Adopted again by a new Namespace, as the first time.
    let again = admit_namespace(&mut c, "admin", "adopted-again", Some("legacy"));
    run_until(&db, kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &format!("namespace:{again}:ensure"))
        .completed_with("NAMESPACE_RECONCILED");
    let namespace = kube.fake.get(&format!("{CORE}/namespaces/legacy")).unwrap();
    assert_eq!(labels(&namespace)["occ.namespace"], again.as_str());
}

#[test]
fn c3_a_namespace_owned_by_someone_else_is_a_name_conflict_and_untouched() {
    let kube = Kube::start();
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let id = admit_namespace(&mut c, "admin", "team", None);
    let name = format!("occ-{id}");
    kube.fake.put_object(
        &format!("{CORE}/namespaces"),
        json!({"metadata": {"name": name, "labels": {"owner": "someone-else"}}}),
    );
    let before = kube.fake.get(&format!("{CORE}/namespaces/{name}")).unwrap();
    run_until(&db, kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &format!("namespace:{id}:ensure"))
        .failed_with("NAMESPACE_NAME_CONFLICT");
    assert_eq!(namespace_status(&mut c, &id), "failed");
    let e = kube
        .driver
        .ensure_namespace(&ns_spec(&id, None), &cancel())
        .unwrap_err();
    assert_eq!(permanent(&e), "NAMESPACE_NAME_CONFLICT");
    assert!(kube.writes().is_empty(), "{:?}", methods(&kube.writes()));
    assert_eq!(
        kube.fake.get(&format!("{CORE}/namespaces/{name}")).unwrap(),
        before
    );
}

#[test]
fn n4_delete_is_pending_while_the_namespace_terminates_and_complete_at_404() {
    let kube = Kube::with(
        FakeOptions {
            terminating_for: Duration::from_millis(1500),
            ..FakeOptions::default()
        },
        SETTINGS,
    );
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let id = admit_namespace(&mut c, "admin", "team", None);
    let name = format!("occ-{id}");
    kube.seed_rolebinding(&name);
    run_until(&db, kube.driver.clone(), quiet);
    assert_eq!(namespace_status(&mut c, &id), "ready");

    c.query_one("SELECT occ.namespace_delete('admin', $1)", &[&id])
        .unwrap();
    let key = format!("namespace:{id}:delete");
    kube.fake.clear_requests();
    run_until(&db, kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &key).completed_with("NAMESPACE_RECONCILED");
    assert!(audited_pending(&mut c, &key, "NAMESPACE_TERMINATING"));
    assert!(evidence(&mut c, &key).contains(&"deferred:NAMESPACE_INCOMPLETE".to_string()));
    assert!(tombstoned(&mut c, &id));
    let path = format!("{CORE}/namespaces/{name}");
    let requests = kube.fake.requests();
    let on_namespace: Vec<String> = requests
        .iter()
        .filter(|r| r.path.split('?').next() == Some(path.as_str()))
        .map(|r| format!("{} {}", r.method, r.status))
        .collect();
    // One DELETE; GETs see it Terminating (200) until it is gone (404).
    assert_eq!(on_namespace.first().map(String::as_str), Some("GET 200"));
    assert_eq!(on_namespace[1], "DELETE 200");
    assert!(on_namespace[2..on_namespace.len() - 1]
        .iter()
        .all(|r| r == "GET 200"));
    assert!(on_namespace.len() > 3, "{on_namespace:?}");
    assert_eq!(on_namespace.last().map(String::as_str), Some("GET 404"));
}

#[test]
fn c3_a_create_inside_a_terminating_namespace_is_pending_not_failed() {
    let kube = Kube::with(
        FakeOptions {
            terminating_for: Duration::from_secs(60),
            ..FakeOptions::default()
        },
        SETTINGS,
    );
    let spec = ns_spec("ns1", None);
    kube.seed_rolebinding(NS1);
    assert!(
        kube.driver
            .ensure_namespace(&spec, &cancel())
            .unwrap()
            .complete
    );
    let o = kube.driver.delete_namespace(&spec, &cancel()).unwrap();
    assert_eq!(o.pending_reason.as_deref(), Some("NAMESPACE_TERMINATING"));
    let agent = AgentSpec {
        installation_id: "inst".into(),
        namespace_id: "ns1".into(),
        agent_id: "bot".into(),
        service_principal_id: "bot-sp".into(),
    };
    // The driver that knows the namespace: its create is refused as NamespaceTerminating.
    let e = kube.driver.bind_agent(&agent, &cancel()).unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(kube
        .fake
        .requests()
        .iter()
        .any(|r| r.method == "POST" && r.status == 403));
    // A freshly started driver finds the namespace terminating: pending as well.
    let kubeconfig = kube
        .fake
        .write_kubeconfig(&kube.dir.0, KubeconfigAuth::Token);
    let fresh = driver_from(&kubeconfig, SETTINGS);
    let e = fresh.bind_agent(&agent, &cancel()).unwrap_err();
    assert!(e.is_transient(), "{e}");
    // And ensure during termination waits too.
    let o = fresh.ensure_namespace(&spec, &cancel()).unwrap();
    assert_eq!(o.pending_reason.as_deref(), Some("NAMESPACE_TERMINATING"));
    assert!(!o.complete);
}

// ---------------------------------------------------------------------------------------------
// Agents end to end (R2-R10, A1, A2)
// ---------------------------------------------------------------------------------------------

/// A ready Namespace `ns1` (its Kubernetes namespace `occ-ns1` ensured by the driver, with
/// the tenant RoleBinding and the Secrets `keys` and `tokens`), a Configuration `cfg`, the
/// Secrets `key` (harness API key) and `tok` (a binding), and an Agent `bot`.
pub(crate) struct AgentWorld {
    pub(crate) kube: Kube,
    pub(crate) db: TestDb,
    pub(crate) agent: String,
}

fn agent_world() -> AgentWorld {
    agent_world_with(FakeOptions::default(), SETTINGS)
}

pub(crate) fn agent_world_with(opts: FakeOptions, settings: &str) -> AgentWorld {
    let kube = Kube::with(opts, settings);
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "ready");
    let (agent, principal) = create_agent(&mut c, "ns1", "bot");
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ($1, 'agent-operator', 'resource', 'ns1', 'secret', 'tok')",
        &[&principal],
    )
    .unwrap();
    c.batch_execute(&format!(
        "SELECT occ.configuration_put('ns1', 'cfg', '{{\"model\": \"m\"}}', 'admin');
         SELECT occ.secret_create('ns1', 'key', '{NS1}/keys/api', 'admin');
         SELECT occ.secret_create('ns1', 'tok', '{NS1}/tokens/value', 'admin');"
    ))
    .unwrap();
    kube.seed_rolebinding(NS1);
    let o = kube
        .driver
        .ensure_namespace(&ns_spec("ns1", None), &cancel())
        .unwrap();
    assert!(o.complete, "{o:?}");
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    for (name, key) in [("keys", "api"), ("tokens", "value")] {
        kube.fake.put_object(
            &format!("{CORE}/namespaces/{NS1}/secrets"),
            json!({"metadata": {"name": name}, "data": {key: b64(secret_value())}}),
        );
    }
    kube.fake.clear_requests();
    AgentWorld { kube, db, agent }
}

/// Admits a deployment on the Kubernetes Compute; returns the revision id.
pub(crate) fn deploy_kube(
    c: &mut Sql,
    agent: &str,
    harness: &str,
    mode: &str,
    actor: &str,
) -> String {
    let v: Value = crate::support::one(
        c,
        "SELECT occ.agent_deploy('ns1', $1, $2, 'cfg', $3, $4, 'key', 'kubernetes', 'kubernetes',
               '{\"TOKEN\": {\"namespaceId\": \"ns1\", \"id\": \"tok\"}}')",
        &[&agent, &actor, &harness, &mode],
    );
    v["revisionId"].as_str().unwrap().to_string()
}

pub(crate) fn rkey(rev: &str) -> String {
    format!("agent_revision:{rev}:reconcile")
}

pub(crate) fn deployment(w: &AgentWorld, name: &str) -> Option<Value> {
    w.kube
        .fake
        .get(&format!("{APPS}/namespaces/{NS1}/deployments/{name}"))
}

/// Objects of `kind` that carry the Agent's label.
pub(crate) fn agent_objects(w: &AgentWorld, kind: &'static str) -> Vec<Value> {
    w.kube
        .fake
        .objects(kind)
        .into_iter()
        .filter(|o| labels(o)["occ.agent"] == w.agent.as_str())
        .collect()
}

fn service_selector(w: &AgentWorld) -> Value {
    w.kube
        .fake
        .get(&format!(
            "{CORE}/namespaces/{NS1}/services/agent-{}",
            w.agent
        ))
        .expect("Agent Service")["spec"]["selector"]
        .clone()
}

/// Deploys a dedicated codex revision and runs it to activation.
fn deployed(w: &AgentWorld) -> String {
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).completed_with("REVISION_ACTIVATED");
    rev
}

pub(crate) fn env_var<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("env {name}"))
}

#[test]
fn r6_a_dedicated_revision_runs_hardened_with_secret_references_only_and_activates() {
    let w = agent_world();
    let mut c = w.db.client();
    let rev = deployed(&w);
    assert_eq!(active(&mut c, &w.agent), Some(rev.clone()));
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.activate").len(),
        1
    );

    let sa = w
        .kube
        .fake
        .get(&format!(
            "{CORE}/namespaces/{NS1}/serviceaccounts/agent-{}",
            w.agent
        ))
        .expect("ServiceAccount");
    assert_eq!(sa["automountServiceAccountToken"], false);
    assert_eq!(agent_objects(&w, "persistentvolumeclaims").len(), 1);
    // The Agent Service routes the Agent's gateway, which fronts the revision's Harness
    // through the revision's Harness Service (seed 000: dedicated Codex runs behind the
    // Agent's shared single-replica gateway).
    assert_eq!(
        service_selector(&w),
        json!({"occ.agent": w.agent, "occ.revision": rev, "occ.component": "gateway"})
    );
    let gateway = deployment(&w, &format!("agent-{}-gateway", w.agent)).expect("gateway");
    assert_eq!(gateway["spec"]["replicas"], 1);
    assert_eq!(gateway["spec"]["strategy"]["type"], "Recreate");
    let template = &gateway["spec"]["template"];
    assert_eq!(template["metadata"]["labels"]["occ.revision"], rev.as_str());
    assert_eq!(template["metadata"]["labels"]["occ.component"], "gateway");
    let proxy = &template["spec"]["containers"][0];
    assert_eq!(proxy["image"], "registry.example/gateway:1.0.0");
    assert_eq!(
        env_var(proxy, "OCC_UPSTREAM_URL")["value"],
        format!("http://agent-{}-r1:80", w.agent)
    );
    assert_eq!(proxy["securityContext"]["readOnlyRootFilesystem"], true);
    let proxied: Vec<&str> = proxy["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("valueFrom").is_some())
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        proxied.is_empty(),
        "the gateway holds no Secret: {proxied:?}"
    );
    let harness_service = w
        .kube
        .fake
        .get(&format!(
            "{CORE}/namespaces/{NS1}/services/agent-{}-r1",
            w.agent
        ))
        .expect("the revision's Harness Service");
    assert_eq!(
        harness_service["spec"]["selector"],
        json!({"occ.agent": w.agent, "occ.revision": rev, "occ.component": "harness"})
    );
    let policy = w
        .kube
        .fake
        .get(&format!(
            "/apis/networking.k8s.io/v1/namespaces/{NS1}/networkpolicies/agent-{}",
            w.agent
        ))
        .expect("the Agent's NetworkPolicy");
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"],
        json!({"occ.agent": w.agent, "occ.component": "gateway"})
    );
    assert_eq!(
        policy["spec"]["egress"][0]["to"][0]["podSelector"]["matchLabels"],
        json!({"occ.agent": w.agent, "occ.component": "harness"})
    );

    let d = deployment(&w, &format!("agent-{}-r1", w.agent)).expect("revision Deployment");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["serviceAccountName"], format!("agent-{}", w.agent));
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "registry.example/codex:1.0.0");
    let sc = &container["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert!(sc["runAsUser"].as_i64().unwrap() > 0);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(
        env_var(container, "TOKEN"),
        &json!({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "value"}}})
    );
    assert_eq!(
        env_var(container, "OCC_HARNESS_API_KEY"),
        &json!({"name": "OCC_HARNESS_API_KEY", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "api"}}})
    );
    let projected = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|v| v["projected"]["sources"][0]["serviceAccountToken"].as_object())
        .expect("projected token");
    assert_eq!(projected["audience"], "occ-agent");

    // No request reads a Secret or carries its value, in any encoding.
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(secret_value());
    for r in w.kube.fake.requests() {
        assert!(!r.path.contains("/secrets"), "{} {}", r.method, r.path);
        let body = r.body.map(|b| b.to_string()).unwrap_or_default();
        assert!(
            !body.contains(secret_value()) && !body.contains(&encoded),
            "{} {}",
            r.method,
            r.path
        );
    }
}

#[test]
fn m3_a_managed_account_reaches_the_workload_as_a_secret_key_ref_to_its_secret_ref() {
    // SPEC M3 (seed 004 5395-5396): the admitted harness auth goes to Compute unchanged, with
    // no Secret projection; the driver mounts the access token from `secretRef` in the Agent's
    // namespace, and neither the worker nor the driver reads it.
    let w = agent_world();
    let mut c = w.db.client();
    use base64::Engine;
    w.kube.fake.put_object(
        &format!("{CORE}/namespaces/{NS1}/secrets"),
        json!({"metadata": {"name": "chatgpt"},
               "data": {"token": base64::engine::general_purpose::STANDARD.encode(secret_value())}}),
    );
    w.kube.fake.clear_requests();
    c.batch_execute(
        "SELECT occ.backend_add('admin', 'b1', 'chatgpt');
         SELECT occ.service_account_create('ns1', 'acct', 'chatgpt/token', 'admin');
         SELECT occ.service_account_bind('ns1', 'acct', 'b1', 'chatgpt-driver', 'ws-1', 'admin');",
    )
    .unwrap();
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', NULL,
               'kubernetes', 'kubernetes', p_service_account => 'acct')",
        &[&w.agent],
    );
    let rev = v["revisionId"].as_str().unwrap().to_string();
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).completed_with("REVISION_ACTIVATED");
    let d = deployment(&w, &format!("agent-{}-r1", w.agent)).expect("revision Deployment");
    let container = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env_var(container, "OCC_HARNESS_ACCESS_TOKEN"),
        &json!({"name": "OCC_HARNESS_ACCESS_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "chatgpt", "key": "token"}}})
    );
    assert_eq!(env_var(container, "OCC_HARNESS_BACKEND_ID")["value"], "b1");
    assert_eq!(
        env_var(container, "OCC_HARNESS_WORKSPACE_ID")["value"],
        "ws-1"
    );
    let names: Vec<&str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(!names.contains(&"OCC_HARNESS_API_KEY"), "{names:?}");
    let encoded = base64::engine::general_purpose::STANDARD.encode(secret_value());
    for r in w.kube.fake.requests() {
        assert!(!r.path.contains("/secrets"), "{} {}", r.method, r.path);
        let body = r.body.map(|b| b.to_string()).unwrap_or_default();
        assert!(
            !body.contains(secret_value()) && !body.contains(&encoded),
            "{} {}",
            r.method,
            r.path
        );
    }
}

#[test]
fn r8_a_second_dedicated_revision_stops_the_first_activates_then_retires_it() {
    let w = agent_world();
    let mut c = w.db.client();
    let r1 = deployed(&w);
    w.kube.fake.clear_requests();
    let r2 = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&r2)).completed_with("REVISION_ACTIVATED");
    assert_eq!(active(&mut c, &w.agent), Some(r2.clone()));
    // The stop waited for the first revision's Pods: a draining stop yields without spending
    // an attempt and records no evidence (SPEC Z5); the Pods were listed again until gone.
    assert_eq!(work(&mut c, &rkey(&r2)).3, 1, "attempt refunded");
    assert!(
        pod_lists(&w) >= 2,
        "the stop looked again for terminating Pods"
    );
    let first = format!("{APPS}/namespaces/{NS1}/deployments/agent-{}-r1", w.agent);
    let writes = w.kube.writes();
    let at = |pred: &dyn Fn(&Recorded) -> bool| writes.iter().position(pred);
    let scaled = at(&|r| {
        r.method == "PATCH" && r.path == first && r.body == Some(json!({"spec": {"replicas": 0}}))
    })
    .expect("the first revision scaled to zero");
    let created = at(&|r| {
        r.method == "POST"
            && r.path.ends_with("/deployments")
            && r.body.as_ref().unwrap()["metadata"]["name"] == format!("agent-{}-r2", w.agent)
    })
    .expect("the second revision created");
    let retired = at(&|r| r.method == "DELETE" && r.path.starts_with(&first))
        .expect("the first revision retired");
    assert!(
        scaled < created && created < retired,
        "{:?}",
        methods(&writes)
    );
    assert!(deployment(&w, &format!("agent-{}-r1", w.agent)).is_none());
    assert!(w
        .kube
        .fake
        .get(&format!(
            "{CORE}/namespaces/{NS1}/services/agent-{}-r1",
            w.agent
        ))
        .is_none());
    assert_eq!(
        service_selector(&w),
        json!({"occ.agent": w.agent, "occ.revision": r2, "occ.component": "gateway"})
    );
    // The stop took the gateway down before the first Harness; the gateway, kept, now fronts
    // the second revision.
    let gateway_path = format!(
        "{APPS}/namespaces/{NS1}/deployments/agent-{}-gateway",
        w.agent
    );
    let gateway_down = at(&|r| {
        r.method == "PATCH"
            && r.path == gateway_path
            && r.body == Some(json!({"spec": {"replicas": 0}}))
    })
    .expect("the gateway scaled to zero");
    assert!(gateway_down < scaled, "{:?}", methods(&writes));
    let gateway = deployment(&w, &format!("agent-{}-gateway", w.agent)).expect("gateway kept");
    assert_eq!(
        gateway["spec"]["template"]["metadata"]["labels"]["occ.revision"],
        r2.as_str()
    );
    assert_eq!(gateway["spec"]["replicas"], 1);
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.activate").len(),
        2
    );
    assert_eq!(work(&mut c, &rkey(&r2)).3, 1, "deferrals refund attempts");
    let retired: bool = crate::support::one(
        &mut c,
        "SELECT retired_at IS NOT NULL FROM occ.agent_revisions WHERE id = $1",
        &[&r1],
    );
    assert!(retired);
}

#[test]
fn r6_embedded_revisions_share_the_agents_recreate_gateway() {
    let w = agent_world();
    let mut c = w.db.client();
    let r1 = deploy_kube(&mut c, &w.agent, "openclaw", "embedded", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    assert_eq!(
        work(&mut c, &rkey(&r1)).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
    let gateway = format!("agent-{}-gateway", w.agent);
    let d = deployment(&w, &gateway).expect("gateway");
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["occ.revision"],
        r1.as_str()
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/openclaw:1.0.0"
    );
    assert_eq!(agent_objects(&w, "deployments").len(), 1);
    assert!(agent_objects(&w, "persistentvolumeclaims").is_empty());

    let r2 = deploy_kube(&mut c, &w.agent, "openclaw", "embedded", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    // The gateway is replaced at activation, before the pointer commit (a before-commit
    // driver, SPEC R6), so the pass that finds it rolled out commits the pointer and completes
    // `REVISION_ACTIVATED`, with its one audit. The pass that found the rollout still running
    // waited with the activation's own code, not as a failing dependency.
    assert_eq!(
        work(&mut c, &rkey(&r2)).1.as_deref(),
        Some("REVISION_ACTIVATED"),
        "{:?}",
        evidence(&mut c, &rkey(&r2))
    );
    let evidence = evidence(&mut c, &rkey(&r2));
    assert!(
        evidence.contains(&"deferred:REVISION_ACTIVATION_PENDING".to_string()),
        "{evidence:?}"
    );
    let activations: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.audit_events WHERE action = 'openclaw.agents.lifecycle.activate' AND resource_id = $1",
        &[&r2],
    );
    assert_eq!(activations, 1);
    // The same gateway now runs the second revision; retiring the first kept it.
    let d = deployment(&w, &gateway).expect("gateway kept");
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["occ.revision"],
        r2.as_str()
    );
    assert_eq!(agent_objects(&w, "deployments").len(), 1);
    assert_eq!(
        service_selector(&w),
        json!({"occ.agent": w.agent, "occ.revision": r2, "occ.component": "gateway"})
    );
    assert_eq!(active(&mut c, &w.agent), Some(r2));
}

// SPEC R6, C3 (a before-commit driver): an embedded candidate beside the active revision is
// activated before its pointer commit: the shared gateway is replaced and checked first, so
// the pointer never names a candidate whose gateway was not seen serving. A candidate whose
// harness holds a failure fails with its code while the pointer still names the revision
// admitted before it, with no activation audit of its own.
#[test]
fn r6_an_embedded_candidate_commits_its_pointer_only_once_the_gateway_serves_it() {
    let w = agent_world();
    let mut c = w.db.client();
    let r1 = deploy_kube(&mut c, &w.agent, "openclaw", "embedded", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&r1)).completed_with("REVISION_ACTIVATED");
    let gateway = format!("agent-{}-gateway", w.agent);
    w.kube.fake.set_deployment_behaviour(
        NS1,
        &gateway,
        PodBehaviour::HeldUnready("AUTHENTICATION_FAILED".into()),
    );
    let r2 = deploy_kube(&mut c, &w.agent, "openclaw", "embedded", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&r2)).failed_with("RUNTIME_AUTHENTICATION_FAILED");
    // The candidate took the gateway (its runtime kept for diagnosis) but never the pointer.
    let d = deployment(&w, &gateway).expect("gateway");
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["occ.revision"],
        r2.as_str()
    );
    assert_eq!(active(&mut c, &w.agent), Some(r1.clone()));
    let activations: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.audit_events
         WHERE action = 'openclaw.agents.lifecycle.activate' AND resource_id = $1",
        &[&r2],
    );
    assert_eq!(activations, 0);

    // A serving candidate: the pass that commits the pointer is the one that activated it.
    w.kube
        .fake
        .set_deployment_behaviour(NS1, &gateway, PodBehaviour::Ready);
    let r3 = deploy_kube(&mut c, &w.agent, "openclaw", "embedded", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&r3)).completed_with("REVISION_ACTIVATED");
    assert_eq!(active(&mut c, &w.agent), Some(r3.clone()));
    assert_eq!(
        service_selector(&w),
        json!({"occ.agent": w.agent, "occ.revision": r3, "occ.component": "gateway"})
    );
}

#[test]
fn a1_stop_scales_to_zero_and_completes_once_the_pods_are_gone() {
    let w = agent_world_with(
        FakeOptions {
            pod_termination: Duration::from_millis(800),
            ..FakeOptions::default()
        },
        SETTINGS,
    );
    let mut c = w.db.client();
    deployed(&w);
    w.kube.fake.clear_requests();
    let key = crate::agent::stop(&mut c, &w.agent, "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &key).completed_with("AGENT_STOPPED");
    // Draining yields (SPEC Z5): no attempt spent, no evidence, the Pods listed until gone.
    assert_eq!(work(&mut c, &key).3, 1, "attempt refunded");
    assert_eq!(
        evidence(&mut c, &key),
        vec!["succeeded:AGENT_STOPPED".to_string()]
    );
    assert!(
        pod_lists(&w) >= 2,
        "the stop looked again for terminating Pods"
    );
    assert_eq!(active(&mut c, &w.agent), None);
    let d = deployment(&w, &format!("agent-{}-r1", w.agent)).expect("kept, scaled down");
    assert_eq!(d["spec"]["replicas"], 0);
    let g = deployment(&w, &format!("agent-{}-gateway", w.agent)).expect("kept, scaled down");
    assert_eq!(g["spec"]["replicas"], 0);
    assert!(agent_objects(&w, "pods").is_empty());
    // The gateway first, the Harness once the gateway's Pods were gone, each once.
    let scale_downs: Vec<String> = w
        .kube
        .writes()
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.path.rsplit('/').next().unwrap().to_string())
        .collect();
    assert_eq!(
        scale_downs,
        vec![
            format!("agent-{}-gateway", w.agent),
            format!("agent-{}-r1", w.agent)
        ],
        "{:?}",
        methods(&w.kube.writes())
    );
}

#[test]
fn c3_a_dedicated_stop_releases_the_harness_only_once_the_gateways_pods_are_gone() {
    // Seed 000 (dedicated Codex behind the Agent's shared single-replica gateway) and seed 004
    // 1932-1940: a stop waits for the gateway's and the Harness's Pods, and the Harness (the
    // holder of the ReadWriteOnce claim) is let go only after the gateway's Pods are gone.
    let w = agent_world_with(
        FakeOptions {
            pod_termination: Duration::from_millis(600),
            ..FakeOptions::default()
        },
        SETTINGS,
    );
    let rev = deployed(&w);
    let spec = crate::support::bare_revision("ns1", &w.agent, (&rev, 1), ("codex", "dedicated"));
    let component_pods = |component: &str| {
        agent_objects(&w, "pods")
            .into_iter()
            .filter(|p| labels(p)["occ.component"] == component)
            .count()
    };
    let harness_replicas = || {
        deployment(&w, &format!("agent-{}-r1", w.agent)).expect("Harness")["spec"]["replicas"]
            .clone()
    };
    assert_eq!(
        (component_pods("gateway"), component_pods("harness")),
        (1, 1)
    );
    let mut draining = 0;
    let mut harness_kept_while_gateway_drained = 0;
    wait_for("the stop to complete", Duration::from_secs(20), || match w
        .kube
        .driver
        .stop_revision(&spec, &cancel())
    {
        Ok(()) => true,
        Err(e) => {
            assert_eq!(e.class(), "kubernetes_pods_terminating", "{e:?}");
            draining += 1;
            if component_pods("gateway") > 0 {
                assert_eq!(
                    harness_replicas(),
                    1,
                    "Harness scaled with a gateway Pod left"
                );
                harness_kept_while_gateway_drained += 1;
            }
            false
        }
    });
    assert!(
        harness_kept_while_gateway_drained >= 1,
        "the gateway drained over {draining} passes"
    );
    assert_eq!(harness_replicas(), 0);
    assert!(agent_objects(&w, "pods").is_empty());
}

#[test]
fn a2_delete_removes_every_object_the_driver_created_for_the_agent() {
    let w = agent_world();
    let mut c = w.db.client();
    deployed(&w);
    // A later embedded revision: the Agent now has a revision Deployment, a claim and a gateway.
    let r2 = deploy_kube(&mut c, &w.agent, "openclaw", "embedded", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    // The gateway fronted the dedicated revision, so the embedded one takes it at activation,
    // before its pointer commit (SPEC R6), and completes once it serves.
    assert_eq!(
        work(&mut c, &rkey(&r2)).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
    let activations: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.audit_events WHERE action = 'openclaw.agents.lifecycle.activate' AND resource_id = $1",
        &[&r2],
    );
    assert_eq!(activations, 1);
    assert!(deployment(&w, &format!("agent-{}-gateway", w.agent)).is_some());
    c.query_one("SELECT occ.agent_delete('ns1', $1, 'admin')", &[&w.agent])
        .unwrap();
    run_until(&w.db, w.kube.driver.clone(), |c| {
        c.query_one("SELECT count(*) FROM occ.agents WHERE id = $1", &[&w.agent])
            .unwrap()
            .get::<_, i64>(0)
            == 0
    });
    let deleted = audits(&mut c, "openclaw.agents.lifecycle.delete");
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    for kind in [
        "deployments",
        "services",
        "serviceaccounts",
        "persistentvolumeclaims",
        "networkpolicies",
    ] {
        assert!(
            agent_objects(&w, kind).is_empty(),
            "{kind}: {:?}",
            agent_objects(&w, kind)
        );
    }
    wait_for("the Agent's pods to go", Duration::from_secs(10), || {
        agent_objects(&w, "pods").is_empty() && agent_objects(&w, "replicasets").is_empty()
    });
    // The Namespace's own objects stay.
    assert!(w
        .kube
        .fake
        .get(&format!("{CORE}/namespaces/{NS1}"))
        .is_some());
    assert!(w
        .kube
        .fake
        .get(&format!(
            "/apis/networking.k8s.io/v1/namespaces/{NS1}/networkpolicies/occ-default-deny"
        ))
        .is_some());
}

#[test]
fn r11_maintenance_reobserves_the_active_revision_without_writing() {
    let settings = SETTINGS.replacen('{', r#"{"maintenanceIntervalSeconds": 1, "#, 1);
    let w = agent_world_with(FakeOptions::default(), &settings);
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    let reconcile = rkey(&rev);
    run_until(&w.db, w.kube.driver.clone(), |c| {
        work(c, &reconcile).0 == "succeeded"
    });
    assert_eq!(
        work(&mut c, &reconcile).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
    let maintained = |c: &mut Sql| -> Vec<(String, Option<String>)> {
        c.query(
            "SELECT state, reason_code FROM occ.work_status WHERE idempotency_key LIKE $1 AND state = 'succeeded'",
            &[&format!("agent_revision:{rev}:maintenance:%")],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
    };
    // A maintenance pass may already have run with the deployment's own run: wait for one
    // that starts after the request log was cleared.
    let before = maintained(&mut c).len();
    w.kube.fake.clear_requests();
    run_until(&w.db, w.kube.driver.clone(), |c| {
        maintained(c).len() > before
    });
    assert_eq!(
        maintained(&mut c)[before],
        (
            "succeeded".to_string(),
            Some("REVISION_ALREADY_ACTIVE".to_string())
        )
    );
    // It read the workload and the Service's endpoints, and changed nothing.
    assert!(
        w.kube.writes().is_empty(),
        "{:?}",
        methods(&w.kube.writes())
    );
    assert!(w
        .kube
        .fake
        .requests()
        .iter()
        .any(|r| r.path.contains("/endpointslices")));
    assert_eq!(active(&mut c, &w.agent), Some(rev));
}

// ---------------------------------------------------------------------------------------------
// Pending and held codes (R5)
// ---------------------------------------------------------------------------------------------

/// Deploys a dedicated revision whose Pods behave as `behaviour`, runs until its evidence
/// holds `expected`, and checks it is still pending; returns the revision id.
fn pending_with(behaviour: PodBehaviour, expected: &str) -> (AgentWorld, String) {
    let w = agent_world();
    w.kube
        .fake
        .set_deployment_behaviour(NS1, &format!("agent-{}-r1", w.agent), behaviour.clone());
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    let wanted = format!("deferred:{expected}");
    run_until(&w.db, w.kube.driver.clone(), |c| {
        evidence(c, &rkey(&rev)).contains(&wanted)
    });
    let (state, code, _, attempts) = work(&mut c, &rkey(&rev));
    assert_eq!((state.as_str(), code), ("queued", None), "{behaviour:?}");
    assert_eq!(attempts, 0, "deferrals refund attempts");
    assert_eq!(active(&mut c, &w.agent), None);
    (w, rev)
}

#[test]
fn r5_unschedulable_pods_defer_as_revision_unschedulable() {
    pending_with(PodBehaviour::Unschedulable, "REVISION_UNSCHEDULABLE");
}

#[test]
fn r5_image_pull_failures_defer_as_revision_image_pull_failed() {
    pending_with(PodBehaviour::ImagePullBackOff, "REVISION_IMAGE_PULL_FAILED");
}

#[test]
fn r5_an_exhausted_pod_quota_defers_as_namespace_pod_quota_exceeded() {
    pending_with(PodBehaviour::QuotaExceeded, "NAMESPACE_POD_QUOTA_EXCEEDED");
}

#[test]
fn r5_an_unknown_termination_message_stays_pending() {
    let (w, rev) = pending_with(
        PodBehaviour::HeldFailure("MYSTERY_CODE".into()),
        "REVISION_INCOMPLETE",
    );
    let d = deployment(&w, &format!("agent-{}-r1", w.agent)).unwrap();
    assert_eq!(d["spec"]["replicas"], 1);
    assert!(!evidence(&mut w.db.client(), &rkey(&rev))
        .iter()
        .any(|e| e.starts_with("failed")));
}

#[test]
fn r5_an_unknown_runtime_failure_is_kept_as_evidence_for_the_deadline() {
    let w = agent_world();
    let name = format!("agent-{}-r1", w.agent);
    w.kube.fake.set_deployment_behaviour(
        NS1,
        &name,
        PodBehaviour::HeldFailure("MYSTERY_CODE".into()),
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    let opts = Opts {
        convergence: Duration::from_secs(3),
        ..Opts::default()
    };
    run_with(&w.db, w.kube.driver.clone(), opts, quiet);
    let (state, code, data, _) = work(&mut c, &rkey(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("CONVERGENCE_DEADLINE_EXCEEDED"))
    );
    let data = data.expect("result data");
    assert_eq!(data["timeoutMs"], 3000);
    assert_eq!(data["runtimeFailure"]["code"], "MYSTERY_CODE");
    assert_eq!(data["runtimeFailure"]["container"], "harness");
}

// R5 (seed 004 5756-5800, 5832-5846): a rollout the Deployment controller gave up on
// (ProgressDeadlineExceeded) is a pending observation until the worker's own deadline, which
// fails it with the evidence; the candidate is kept, not stopped as a refused one. The driver
// writes progressDeadlineSeconds a minute past the convergence deadline.
#[test]
fn r5_a_rollout_kubernetes_gave_up_on_waits_for_the_workers_deadline() {
    let w = agent_world();
    let name = format!("agent-{}-r1", w.agent);
    w.kube
        .fake
        .set_deployment_behaviour(NS1, &name, PodBehaviour::ProgressDeadlineExceeded);
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    let opts = Opts {
        convergence: Duration::from_secs(3),
        ..Opts::default()
    };
    run_with(&w.db, w.kube.driver.clone(), opts, quiet);
    let (state, code, data, _) = work(&mut c, &rkey(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("CONVERGENCE_DEADLINE_EXCEEDED"))
    );
    let data = data.expect("result data");
    assert_eq!(data["timeoutMs"], 3000);
    assert_eq!(data["runtimeFailure"]["code"], "PROGRESS_DEADLINE_EXCEEDED");
    assert!(
        evidence(&mut c, &rkey(&rev))
            .iter()
            .any(|e| e == "deferred:REVISION_INCOMPLETE"),
        "{:?}",
        evidence(&mut c, &rkey(&rev))
    );
    // Kept as it is: not scaled down as a refused candidate.
    let workload = deployment(&w, &name).expect("the Deployment is kept");
    assert_eq!(workload["spec"]["replicas"], 1);
    assert_eq!(
        workload["spec"]["progressDeadlineSeconds"],
        occ_worker::compute::kubernetes::manifests::DEFAULT_PROGRESS_DEADLINE_SECONDS
    );
}

// R5: the dedicated Harness claim's binding is part of readiness. A Pod whose claim does not
// bind (no provisioner answers its StorageClass) stays Unschedulable (`unbound immediate
// PersistentVolumeClaims`, as the real scheduler says): the revision waits
// REVISION_UNSCHEDULABLE until the deadline.
// Seed000:11, 25, 44: a production worker runs dedicated Codex and embedded OpenClaw only. A
// revision of another pair admitted earlier fails with HARNESS_DESCRIPTOR_MISMATCH before any
// Compute effect; the allowed pairs deploy as before.
#[test]
fn r2_production_runs_dedicated_codex_and_embedded_openclaw_only() {
    let w = agent_world();
    let kubeconfig = w
        .kube
        .fake
        .write_kubeconfig(&w.kube.dir.0, KubeconfigAuth::Token);
    let production = Arc::new(driver_from(&kubeconfig, SETTINGS).with_production(true));
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "embedded", "admin");
    w.kube.fake.clear_requests();
    run_until(&w.db, production.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("HARNESS_DESCRIPTOR_MISMATCH");
    assert!(
        w.kube.writes().is_empty(),
        "{:?}",
        methods(&w.kube.writes())
    );
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, production, quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).completed_with("REVISION_ACTIVATED");
}

#[test]
fn r5_a_held_authentication_failure_fails_at_once_and_keeps_the_runtime() {
    let w = agent_world();
    let name = format!("agent-{}-r1", w.agent);
    w.kube.fake.set_deployment_behaviour(
        NS1,
        &name,
        PodBehaviour::HeldFailure("AUTHENTICATION_FAILED".into()),
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("RUNTIME_AUTHENTICATION_FAILED");
    assert_eq!(active(&mut c, &w.agent), None);
    // Kept for diagnosis: never scaled down or deleted.
    assert_eq!(deployment(&w, &name).unwrap()["spec"]["replicas"], 1);
    let touched: Vec<String> = w
        .kube
        .writes()
        .iter()
        .filter(|r| r.path.contains(&name))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
}

/// Requests that read a harness's `/readyz` through the API server's Pod proxy.
fn readyz_reads(w: &AgentWorld) -> Vec<Recorded> {
    w.kube
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/proxy/readyz"))
        .collect()
}

// Seed 004 lines 1063-1070 and 5763-5770: runtime entrypoints hold the container unready
// until an explicit restart that nothing performs, and a held failure ends the deployment at
// once with the code naming its cause. The harness stays running and unready (no restart
// loop, restartCount 0) with the code as its `/readyz` body; the driver reads it through the
// API server's Pod proxy, so the work fails long before the 60 s convergence deadline (the
// run's 30 s limit would fail first), keeping the probe's evidence, and the runtime is kept.
#[test]
fn r5_a_harness_holding_unready_fails_at_once_with_its_code_and_no_restart_loop() {
    let w = agent_world();
    let name = format!("agent-{}-r1", w.agent);
    w.kube.fake.set_deployment_behaviour(
        NS1,
        &name,
        PodBehaviour::HeldUnready("MODEL_PROBE_FAILED".into()),
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    let (state, code, data, _) = work(&mut c, &rkey(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("RUNTIME_MODEL_PROBE_FAILED"))
    );
    assert_eq!(
        data.expect("result data")["runtimeFailure"],
        json!({"code": "MODEL_PROBE_FAILED", "container": "harness", "restartCount": 0})
    );
    assert_eq!(active(&mut c, &w.agent), None);
    // One Harness Pod, running unready and never restarted, kept for diagnosis (the gateway,
    // written in the same pass, fronts it unrouted).
    let pods: Vec<Value> = agent_objects(&w, "pods")
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["occ.component"] == "harness")
        .collect();
    assert_eq!(pods.len(), 1);
    let harness = &pods[0]["status"]["containerStatuses"][0];
    assert_eq!(
        (&harness["ready"], &harness["restartCount"]),
        (&json!(false), &json!(0))
    );
    assert!(harness["state"]["running"].is_object());
    assert_eq!(deployment(&w, &name).unwrap()["spec"]["replicas"], 1);
    // Read through the Pod proxy at the harness port, the held answer a 503.
    let pod = pods[0]["metadata"]["name"].as_str().unwrap();
    let reads = readyz_reads(&w);
    assert!(!reads.is_empty());
    for read in &reads {
        assert_eq!(
            read.path,
            format!("{CORE}/namespaces/{NS1}/pods/{pod}:8080/proxy/readyz")
        );
    }
    assert_eq!(reads.last().unwrap().status, 503);
}

// Seed 004 lines 1063-1070 and 5763-5770, without the permission to read the held code: a
// 403 on `pods/proxy` is no finding, never a failure. The observation stays pending
// (REVISION_INCOMPLETE, attempts refunded) as it would without the read, and the convergence
// deadline decides.
#[test]
fn r5_a_refused_pod_proxy_leaves_a_held_harness_pending() {
    let w = agent_world();
    w.kube.fake.inject(Inject {
        method: Some("GET"),
        path_prefix: format!("{CORE}/namespaces/{NS1}/pods/"),
        times: 10_000,
        action: Action::Status(403),
    });
    let name = format!("agent-{}-r1", w.agent);
    w.kube.fake.set_deployment_behaviour(
        NS1,
        &name,
        PodBehaviour::HeldUnready("AUTHENTICATION_FAILED".into()),
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    let refused = || readyz_reads(&w).iter().filter(|r| r.status == 403).count();
    run_until(&w.db, w.kube.driver.clone(), |c| {
        refused() >= 2
            && evidence(c, &rkey(&rev))
                .iter()
                .filter(|e| *e == "deferred:REVISION_INCOMPLETE")
                .count()
                >= 2
    });
    let (state, code, _, attempts) = work(&mut c, &rkey(&rev));
    assert_eq!((state.as_str(), code), ("queued", None));
    assert_eq!(attempts, 0, "deferrals refund attempts");
    let evidence = evidence(&mut c, &rkey(&rev));
    assert!(
        !evidence.iter().any(|e| e.starts_with("failed")),
        "{evidence:?}"
    );
    assert_eq!(active(&mut c, &w.agent), None);
    assert_eq!(deployment(&w, &name).unwrap()["spec"]["replicas"], 1);
}

// Seed 004 lines 1063-1070 and 5763-5770, with a Pod the API server cannot reach (a
// NetworkPolicy without the API server's networks drops the proxied read): the read has its
// own deadline of a few seconds, far under the 30 s request timeout, so the pass comes back
// pending instead of stalling; the next pass reads the held code and fails at once.
#[test]
fn r5_a_stalled_pod_proxy_read_ends_within_the_request_timeout_and_the_pass_stays_pending() {
    let w = agent_world();
    // The read has the budget of any other request (W2): a driver whose request timeout is
    // 3 s gives up on the stalled Pod after 3 s.
    let kubeconfig = w
        .kube
        .fake
        .write_kubeconfig(&w.kube.dir.0, KubeconfigAuth::Token);
    let conn = connection::from_kubeconfig(&kubeconfig, None).expect("kubeconfig");
    let client = Client::new(conn)
        .expect("client")
        .with_request_timeout(Duration::from_secs(3));
    let driver = Arc::new(KubernetesDriver::new(
        client,
        Settings::parse(SETTINGS).expect("settings"),
    ));
    w.kube.fake.inject(Inject {
        method: Some("GET"),
        path_prefix: format!("{CORE}/namespaces/{NS1}/pods/"),
        times: 1,
        action: Action::Stall,
    });
    let name = format!("agent-{}-r1", w.agent);
    w.kube.fake.set_deployment_behaviour(
        NS1,
        &name,
        PodBehaviour::HeldUnready("AUTHENTICATION_FAILED".into()),
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    let started = Instant::now();
    run_until(&w.db, driver, quiet);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("RUNTIME_AUTHENTICATION_FAILED");
    let statuses: Vec<u16> = readyz_reads(&w).iter().map(|r| r.status).collect();
    assert_eq!(
        statuses.first(),
        Some(&0),
        "the first read never got an answer"
    );
    assert_eq!(statuses.last(), Some(&503));
    assert!(evidence(&mut c, &rkey(&rev))
        .iter()
        .any(|e| e == "deferred:REVISION_INCOMPLETE"));
}

#[test]
fn r5_a_harness_without_an_image_is_harness_image_unavailable() {
    let settings = r#"{"tenantRoleBinding": "occ-tenant", "tokenAudience": "occ-agent",
      "harnesses": [{"id": "openclaw", "version": "1.0.0", "mode": "embedded", "image": "registry.example/openclaw:1.0.0"}]}"#;
    let w = agent_world_with(FakeOptions::default(), settings);
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("HARNESS_IMAGE_UNAVAILABLE");
    assert!(agent_objects(&w, "deployments").is_empty());
}

// ---------------------------------------------------------------------------------------------
// Error mappings (C3, R10)
// ---------------------------------------------------------------------------------------------

#[test]
fn c3_a_429_is_retried_within_the_call_after_retry_after() {
    let kube = Kube::start();
    kube.seed_rolebinding(NS1);
    let path = format!("{CORE}/namespaces/{NS1}");
    kube.fake.inject(Inject {
        method: Some("GET"),
        path_prefix: path.clone(),
        times: 1,
        action: Action::TooMany {
            retry_after_secs: 1,
        },
    });
    let started = Instant::now();
    let o = kube
        .driver
        .ensure_namespace(&ns_spec("ns1", None), &cancel())
        .unwrap();
    assert!(o.complete, "{o:?}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    let first: Vec<u16> = kube
        .fake
        .requests()
        .iter()
        .take(2)
        .map(|r| r.status)
        .collect();
    assert_eq!(first, vec![429, 404]);
}

// W2, C3: one driver request has one budget, the configured request timeout: the rate
// limiter's wait, the 429 retries and their `Retry-After` sleeps all spend it, and a retry that
// does not fit is not sent. With an empty token bucket (qps 2, burst 1, its one token taken) and
// an API server that keeps answering 429 with `Retry-After: 1`, a call under a 1 s timeout
// returns the 429 within the timeout after one request, where each sleep used to be capped only
// by a 30 s constant, three retries deep.
#[test]
fn c3_a_throttled_request_behind_an_empty_token_bucket_returns_within_the_request_timeout() {
    use occ_worker::compute::kubernetes::client::error::KubeErrorKind;
    let kube = Kube::start();
    let timeout = Duration::from_secs(1);
    let kubeconfig = kube
        .fake
        .write_kubeconfig(&kube.dir.0, KubeconfigAuth::Token);
    let conn = connection::from_kubeconfig(&kubeconfig, None).expect("kubeconfig");
    let client = Client::new(conn)
        .expect("client")
        .with_request_timeout(timeout)
        .with_rate_limit(2.0, 1);
    let path = format!("{CORE}/namespaces/{NS1}");
    // The bucket's one token goes to this read: the next request waits half a second for one.
    client.get(&path, &cancel()).expect("a read");
    kube.fake.clear_requests();
    kube.fake.inject(Inject {
        method: Some("GET"),
        path_prefix: path.clone(),
        times: 100,
        action: Action::TooMany {
            retry_after_secs: 1,
        },
    });
    let started = Instant::now();
    let e = client.get(&path, &cancel()).unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(e.kind(), &KubeErrorKind::TooManyRequests, "{e}");
    assert!(
        elapsed < timeout + Duration::from_secs(1),
        "returned after {elapsed:?}"
    );
    let statuses: Vec<u16> = kube.fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![429], "no retry past the budget");
}

// W2: a request is bounded by the driver's request timeout, not by the lease: a namespace
// create the API server answers after three leases succeeds while the heartbeat renews the
// claim.
#[test]
fn w2_a_create_slower_than_the_lease_succeeds_under_the_heartbeat() {
    let kube = Kube::start();
    kube.seed_rolebinding(NS1);
    let lease = Duration::from_millis(300);
    kube.fake.inject(Inject {
        method: Some("POST"),
        path_prefix: format!("{CORE}/namespaces"),
        times: 1,
        action: Action::Latency(lease * 3),
    });
    let token = CancelToken::new(Instant::now() + lease);
    let (stop, renewals) = crate::support::heartbeat(&token, lease / 3, lease);
    let o = kube.driver.ensure_namespace(&ns_spec("ns1", None), &token);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    renewals.join().unwrap();
    assert!(o.expect("ensure").complete);
    assert_eq!(token.cause(), None);
}

// W3, C3 (no object twice): a claim lost while a create's answer is on its way shuts the
// request's TLS socket down at once; the create had landed, so the next pass (another worker,
// which never saw it) meets 409 AlreadyExists, reads the object, finds it owned and adopts it.
#[test]
fn c3_a_create_whose_answer_was_lost_is_adopted_through_409() {
    let kube = Kube::start();
    kube.seed_rolebinding(NS1);
    let policies = format!("/apis/networking.k8s.io/v1/namespaces/{NS1}/networkpolicies");
    kube.fake.inject(Inject {
        method: Some("POST"),
        path_prefix: policies.clone(),
        times: 1,
        action: Action::ApplyThenStall,
    });
    let token = cancel();
    let refuser = cancel_after(
        &token,
        Duration::from_millis(500),
        LossCause::RenewalRefused,
    );
    let e = kube
        .driver
        .ensure_namespace(&ns_spec("ns1", None), &token)
        .unwrap_err();
    let returned = Instant::now();
    let refused = refuser.join().unwrap();
    crate::support::assert_aborted_on_refusal(&e, (refused, returned), Duration::from_secs(5));
    assert!(kube
        .fake
        .get(&format!("{policies}/occ-default-deny"))
        .is_some());
    // Another worker's driver: it never saw the create.
    let kubeconfig = kube
        .fake
        .write_kubeconfig(&kube.dir.0, KubeconfigAuth::Token);
    let other = driver_from(&kubeconfig, SETTINGS);
    let o = other
        .ensure_namespace(&ns_spec("ns1", None), &cancel())
        .expect("adopted");
    assert!(o.complete, "{o:?}");
    let creates: Vec<String> = methods(&kube.writes())
        .into_iter()
        .filter(|w| w.starts_with(&format!("POST {policies} ")))
        .collect();
    assert_eq!(
        creates,
        vec![
            format!("POST {policies} 201"),
            format!("POST {policies} 409")
        ]
    );
    assert_eq!(kube.fake.objects("networkpolicies").len(), 1);
}

// C3 (client-go's client-side rate limit): every request of the driver waits for a token of a
// bucket of `burst` refilled at `qps`; 429 handling stays underneath it. Preflight sends one
// request for the version and one review per verb: at 10 a second with a burst of 1 they take
// at least (n - 1) / 10 s, however fast the API server answers.
#[test]
fn c3_the_client_side_rate_limit_spaces_requests() {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = TempDir::new();
    let kubeconfig = fake.write_kubeconfig(&dir.0, KubeconfigAuth::Token);
    let settings = SETTINGS.replace(
        r#""qps": 1000, "burst": 1000,"#,
        r#""qps": 10, "burst": 1,"#,
    );
    let driver = driver_from(&kubeconfig, &settings);
    let started = Instant::now();
    driver.preflight(&cancel()).expect("preflight");
    let took = started.elapsed();
    let sent = fake.requests().len();
    assert_eq!(
        sent,
        1 + occ_worker::compute::kubernetes::driver::ACCESS.len()
    );
    let floor = Duration::from_secs_f64((sent - 1) as f64 / 10.0);
    assert!(
        took >= floor,
        "{sent} requests in {took:?}, under the limit's {floor:?}"
    );
    // The defaults, when the file says nothing.
    let defaults =
        Settings::parse(r#"{"tenantRoleBinding": "t", "tokenAudience": "a", "harnesses": []}"#)
            .expect("settings");
    assert_eq!((defaults.qps, defaults.burst), (20.0, 40));
    for bad in [r#""qps": 0"#, r#""qps": -1"#, r#""burst": 0"#] {
        let text = format!(
            r#"{{"tenantRoleBinding": "t", "tokenAudience": "a", "harnesses": [], {bad}}}"#
        );
        let e = Settings::parse(&text).unwrap_err();
        let key = if bad.contains("qps") { "qps" } else { "burst" };
        assert!(e.to_string().contains(key), "{bad}: {e}");
    }
}

/// The next `times` creates under `collection` are answered by `action`.
fn inject_posts(w: &AgentWorld, collection: String, times: usize, action: Action) {
    w.kube.fake.inject(Inject {
        method: Some("POST"),
        path_prefix: collection,
        times,
        action,
    });
}

#[test]
fn r10_a_503_defers_as_dependency_unavailable_and_refunds_the_attempt() {
    let w = agent_world();
    inject_posts(
        &w,
        format!("{APPS}/namespaces/{NS1}/deployments"),
        1,
        Action::Status(503),
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    let (state, code, _, attempts) = work(&mut c, &rkey(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("succeeded", Some("REVISION_ACTIVATED"))
    );
    assert_eq!(
        evidence(&mut c, &rkey(&rev)).first().map(String::as_str),
        Some("deferred:DEPENDENCY_UNAVAILABLE")
    );
    assert_eq!(attempts, 1, "the 503 pass spent no attempt");
    assert!(w.kube.fake.requests().iter().any(|r| r.status == 503));
}

// Only an authorization refusal is permanent (seed 004 200, 2488-2493): a 403 from a used-up
// ResourceQuota (here on the Harness claim) defers the deployment with
// NAMESPACE_QUOTA_EXCEEDED, refunding the attempt, and it activates once the quota allows.
#[test]
fn r10_a_quota_403_is_pending_not_a_permanent_refusal() {
    let w = agent_world();
    inject_posts(
        &w,
        format!("{CORE}/namespaces/{NS1}/persistentvolumeclaims"),
        2,
        Action::QuotaExceeded,
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    let (state, code, _, attempts) = work(&mut c, &rkey(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("succeeded", Some("REVISION_ACTIVATED"))
    );
    let evidence = evidence(&mut c, &rkey(&rev));
    assert_eq!(
        evidence[..2],
        [
            "deferred:NAMESPACE_QUOTA_EXCEEDED".to_string(),
            "deferred:NAMESPACE_QUOTA_EXCEEDED".to_string()
        ],
        "{evidence:?}"
    );
    assert_eq!(attempts, 1, "the quota passes spent no attempt");
    let refused = w
        .kube
        .fake
        .requests()
        .iter()
        .filter(|r| r.status == 403)
        .count();
    assert_eq!(refused, 2);
}

// Seed 004 2488-2493 (only an authorization refusal is permanent): a 401 that outlives the
// client's re-read of its token (a credential being rotated) retries within the attempt
// budget as DEPENDENCY_UNAVAILABLE, and the deployment then activates.
#[test]
fn r10_a_401_retries_within_the_budget() {
    let w = agent_world();
    inject_posts(
        &w,
        format!("{APPS}/namespaces/{NS1}/deployments"),
        1,
        Action::Status(401),
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    let (state, code, _, attempts) = work(&mut c, &rkey(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("succeeded", Some("REVISION_ACTIVATED"))
    );
    assert_eq!(
        evidence(&mut c, &rkey(&rev)).first().map(String::as_str),
        Some("retry:DEPENDENCY_UNAVAILABLE")
    );
    assert_eq!(attempts, 2, "the 401 spent one attempt");
}

#[test]
fn r10_a_403_that_stays_retries_within_the_budget_then_fails_naming_the_resource() {
    // Seed 004 4676-4686, 6058-6070: only a refusal no retry can fix is permanent at once; a
    // 403 may be a grant still propagating, so it retries (DEPENDENCY_UNAVAILABLE) within the
    // attempt budget (5 here) and then fails with the refusal's own code.
    let w = agent_world();
    inject_posts(
        &w,
        format!("{CORE}/namespaces/{NS1}/serviceaccounts"),
        10,
        Action::Status(403),
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    let events =
        crate::scripted::run_captured(&w.db, w.kube.driver.clone(), Opts::default(), quiet);
    let (state, code, _, _) = work(&mut c, &rkey(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        (
            "failed_permanent",
            Some("KUBERNETES_FORBIDDEN_SERVICEACCOUNTS")
        )
    );
    // SPEC Z12: the API's status and Status reason reach each pass's line, never its
    // message; the last pass fails with the refusal's code.
    let completed: Vec<Value> = events
        .named("worker.completed")
        .into_iter()
        .filter(|e| e["workId"] == rkey(&rev).as_str())
        .collect();
    let outcomes: Vec<(&str, &str)> = completed
        .iter()
        .map(|e| (e["outcome"].as_str().unwrap(), e["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            vec![("retry", "DEPENDENCY_UNAVAILABLE"); 4],
            vec![("permanent", "KUBERNETES_FORBIDDEN_SERVICEACCOUNTS")]
        ]
        .concat()
    );
    for line in &completed {
        assert_eq!(
            (
                &line["cause"],
                &line["status"],
                &line["reason"],
                &line["method"],
                line.get("dependency")
            ),
            (
                &json!("kubernetes"),
                &json!(403),
                &json!("Forbidden"),
                &json!("POST"),
                None
            ),
            "{line}"
        );
    }
    let forbidden = w
        .kube
        .fake
        .requests()
        .iter()
        .filter(|r| r.status == 403)
        .count();
    assert_eq!(forbidden, 5, "one refused create per attempt");
    let evidence = evidence(&mut c, &rkey(&rev));
    assert_eq!(
        evidence
            .iter()
            .filter(|e| *e == "retry:DEPENDENCY_UNAVAILABLE")
            .count(),
        4,
        "{evidence:?}"
    );
}

#[test]
fn r10_a_403_right_after_a_rolebinding_change_retries_and_the_deployment_goes_on() {
    // Seed 004 4676-4686: a grant that has not reached the API server yet refuses a few
    // requests; the deployment retries within its budget and activates once it has.
    let w = agent_world();
    inject_posts(
        &w,
        format!("{CORE}/namespaces/{NS1}/serviceaccounts"),
        2,
        Action::Status(403),
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    let (state, code, _, attempts) = work(&mut c, &rkey(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref(), attempts),
        ("succeeded", Some("REVISION_ACTIVATED"), 3)
    );
    assert_eq!(active(&mut c, &w.agent), Some(rev));
}

#[test]
fn r10_a_422_is_permanent() {
    let w = agent_world();
    inject_posts(
        &w,
        format!("{APPS}/namespaces/{NS1}/deployments"),
        10,
        Action::Status(422),
    );
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("KUBERNETES_INVALID_REQUEST");
    assert_eq!(
        w.kube
            .fake
            .requests()
            .iter()
            .filter(|r| r.status == 422)
            .count(),
        1
    );
    assert_eq!(active(&mut c, &w.agent), None);
}

#[test]
fn c3_a_409_conflict_on_replace_is_reread_and_retried() {
    let kube = Kube::start();
    kube.seed_rolebinding(NS1);
    let spec = ns_spec("ns1", None);
    assert!(
        kube.driver
            .ensure_namespace(&spec, &cancel())
            .unwrap()
            .complete
    );
    // Someone changed the policy: the driver converges it back with a replace.
    let collection = format!("/apis/networking.k8s.io/v1/namespaces/{NS1}/networkpolicies");
    let path = format!("{collection}/occ-default-deny");
    let mut policy = kube.fake.get(&path).unwrap();
    policy["metadata"]["annotations"]["occ.spec-hash"] = json!("edited");
    policy["spec"]["ingress"] = json!([{}]);
    kube.fake.put_object(&collection, policy);
    kube.fake.clear_requests();
    kube.fake.inject(Inject {
        method: Some("PUT"),
        path_prefix: path.clone(),
        times: 1,
        action: Action::Status(409),
    });
    assert!(
        kube.driver
            .ensure_namespace(&spec, &cancel())
            .unwrap()
            .complete
    );
    let on_policy: Vec<String> = kube
        .fake
        .requests()
        .iter()
        .filter(|r| r.path == path)
        .map(|r| format!("{} {}", r.method, r.status))
        .collect();
    assert_eq!(on_policy, vec!["GET 200", "PUT 409", "GET 200", "PUT 200"]);
    assert_eq!(kube.fake.get(&path).unwrap()["spec"]["ingress"], json!([]));
}

// ---------------------------------------------------------------------------------------------
// TLS and credentials (C3 connection)
// ---------------------------------------------------------------------------------------------

#[test]
fn c3_a_server_certificate_from_another_ca_is_refused_before_any_request() {
    use base64::Engine;
    let fake = KubeFake::start(FakeOptions::default());
    let dir = TempDir::new();
    let path = fake.write_kubeconfig(&dir.0, KubeconfigAuth::Token);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace(&b64(&fake.ca_pem()), &b64(&KubeFake::other_ca_pem()));
    std::fs::write(&path, text).unwrap();
    let driver = driver_from(&path, SETTINGS);
    let e = driver
        .ensure_namespace(&ns_spec("ns1", None), &cancel())
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    // Named as a TLS failure at the API server's address, for check and worker.pass-error.
    assert_eq!(e.reason(), Some("TLSFailed"), "{e}");
    assert_eq!(e.endpoint(), Some(fake.url().as_str()), "{e}");
    assert!(driver.preflight(&cancel()).unwrap_err().is_transient());
    assert!(
        fake.requests().is_empty(),
        "{:?}",
        methods(&fake.requests())
    );
}

#[test]
fn c3_client_certificate_kubeconfigs_authenticate() {
    for auth in [
        KubeconfigAuth::ClientCertData,
        KubeconfigAuth::ClientCertFiles,
    ] {
        let fake = KubeFake::start(FakeOptions::default());
        let dir = TempDir::new();
        let driver = driver_from(&fake.write_kubeconfig(&dir.0, auth.clone()), SETTINGS);
        assert_eq!(driver.preflight(&cancel()).unwrap(), vec![], "{auth:?}");
        let o = driver
            .ensure_namespace(&ns_spec("ns1", None), &cancel())
            .unwrap();
        assert_eq!(
            o.pending_reason.as_deref(),
            Some("NAMESPACE_ROLEBINDING_PENDING")
        );
        assert!(fake.requests().iter().all(|r| r.status != 401), "{auth:?}");
    }
}

// Cloud kubeconfigs authenticate through exec credential plugins (client.authentication.k8s.io
// v1 and v1beta1): the plugin's token is used until it expires, and after a 401 (the token was
// rotated) the plugin runs again and the call goes through.
#[test]
fn c3_an_exec_plugins_token_is_used_and_fetched_again_after_a_401() {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = TempDir::new();
    let kubeconfig = fake.write_kubeconfig(&dir.0, KubeconfigAuth::Token);
    let credential = dir.0.join("credential.json");
    let write_credential = |token: &str, api: &str| {
        std::fs::write(
            &credential,
            json!({"apiVersion": api, "kind": "ExecCredential",
                   "status": {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"}})
            .to_string(),
        )
        .unwrap();
    };
    write_credential(&fake.token(), "client.authentication.k8s.io/v1beta1");
    let text = std::fs::read_to_string(&kubeconfig).unwrap().replace(
        &format!("    token: {}", fake.token()),
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: cat\n      args: [\"{}\"]",
            credential.display()
        ),
    );
    assert!(text.contains("exec:"), "{text}");
    std::fs::write(&kubeconfig, text).unwrap();
    let driver = driver_from(&kubeconfig, SETTINGS);
    kube_seed_rolebinding(&fake, NS1);
    let o = driver
        .ensure_namespace(&ns_spec("ns1", None), &cancel())
        .expect("ensure with the plugin's token");
    assert!(o.complete, "{o:?}");
    // The API server's token is rotated, and the plugin now prints the new one.
    let rotated = fake.rotate_token();
    write_credential(&rotated, "client.authentication.k8s.io/v1beta1");
    fake.clear_requests();
    driver
        .ensure_namespace(&ns_spec("ns1", None), &cancel())
        .expect("ensure after the rotation");
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses.first(), Some(&401), "{statuses:?}");
    assert_eq!(
        statuses.iter().filter(|s| **s == 401).count(),
        1,
        "{statuses:?}"
    );
}

/// The operator-provisioned tenant RoleBinding in `namespace` of `fake`.
fn kube_seed_rolebinding(fake: &KubeFake, namespace: &str) {
    fake.put_tenant_rolebinding(namespace);
}

#[test]
fn c3_a_rotated_token_file_is_reread_after_a_401_within_the_same_call() {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = TempDir::new();
    let token = dir.0.join("token");
    let driver = driver_from(
        &fake.write_kubeconfig(&dir.0, KubeconfigAuth::TokenFile(token.clone())),
        SETTINGS,
    );
    let spec = ns_spec("ns1", None);
    driver.ensure_namespace(&spec, &cancel()).unwrap();
    let rotated = fake.rotate_token();
    assert_eq!(std::fs::read_to_string(&token).unwrap(), rotated);
    fake.clear_requests();
    let o = driver.ensure_namespace(&spec, &cancel()).unwrap();
    assert_eq!(
        o.pending_reason.as_deref(),
        Some("NAMESPACE_ROLEBINDING_PENDING")
    );
    let requests = fake.requests();
    assert_eq!(
        (requests[0].status, requests[1].status),
        (401, 200),
        "{:?}",
        methods(&requests)
    );
    assert_eq!(requests[0].path, requests[1].path);
    assert_eq!(requests.iter().filter(|r| r.status == 401).count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Cancellation (C1)
// ---------------------------------------------------------------------------------------------

#[test]
fn c1_a_cancelled_token_makes_no_request() {
    let kube = Kube::start();
    let token = cancel();
    token.cancel(LossCause::RenewalRefused);
    let e = kube
        .driver
        .ensure_namespace(&ns_spec("ns1", None), &token)
        .unwrap_err();
    assert_eq!(
        e.kind(),
        &ComputeErrorKind::Cancelled(occ_worker::cancel::Cancelled(LossCause::RenewalRefused))
    );
    assert!(kube.fake.requests().is_empty());
}

#[test]
fn c1_a_stalled_request_ends_within_the_lease_as_a_cancellation() {
    let kube = Kube::start();
    kube.fake.inject(Inject {
        method: Some("GET"),
        path_prefix: format!("{CORE}/namespaces/{NS1}"),
        times: 1,
        action: Action::Stall,
    });
    let started = Instant::now();
    let token = CancelToken::new(Instant::now() + Duration::from_secs(2));
    let e = kube
        .driver
        .ensure_namespace(&ns_spec("ns1", None), &token)
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1900) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    assert_eq!(
        e.kind(),
        &ComputeErrorKind::Cancelled(occ_worker::cancel::Cancelled(LossCause::LeaseLapsed))
    );
    assert_eq!(methods(&kube.fake.requests()).len(), 1);
    assert_eq!(kube.fake.requests()[0].status, 0);
}

// ---------------------------------------------------------------------------------------------
// Revoked actors (N5, R2) and preflight (W8)
// ---------------------------------------------------------------------------------------------

/// A user with `installation-admin`, revoked after it admitted `work`.
fn revoke_after(c: &mut Sql, admit: impl FnOnce(&mut Sql) -> Vec<String>) -> Vec<String> {
    c.batch_execute(
        "INSERT INTO occ.identities (id, kind) VALUES ('ops', 'user');
         INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind) VALUES ('ops', 'installation-admin', 'installation');",
    )
    .unwrap();
    let keys = admit(c);
    c.query_one("SELECT occ.identity_revoke('admin', 'ops')", &[])
        .unwrap();
    keys
}

#[test]
fn n5_r2_a_revoked_actor_reaches_no_api_server() {
    let w = agent_world();
    let mut c = w.db.client();
    let keys = revoke_after(&mut c, |c| {
        let rev = deploy_kube(c, &w.agent, "openclaw", "embedded", "ops");
        let ns = admit_namespace(c, "ops", "later", None);
        vec![rkey(&rev), format!("namespace:{ns}:ensure")]
    });
    run_until(&w.db, w.kube.driver.clone(), quiet);
    for key in keys {
        let (state, code, _, _) = work(&mut c, &key);
        assert_eq!(
            (state.as_str(), code.as_deref()),
            ("failed_permanent", Some("ACTOR_REVOKED")),
            "{key}"
        );
    }
    assert!(
        w.kube.fake.requests().is_empty(),
        "{:?}",
        methods(&w.kube.fake.requests())
    );
}

#[test]
fn r2_a_revoked_actors_dedicated_candidate_reaches_no_api_server() {
    // SPEC R2: a denial makes no Compute call. Seed 004 6206-6236 would stop an exclusive
    // candidate even on its first pass; a candidate no pass prepared has no runtime, and SPEC
    // is explicit, so nothing is sent (it was bind + stop before).
    let w = agent_world();
    let mut c = w.db.client();
    let keys = revoke_after(&mut c, |c| {
        vec![rkey(&deploy_kube(c, &w.agent, "codex", "dedicated", "ops"))]
    });
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &keys[0]).failed_with("ACTOR_REVOKED");
    assert!(
        w.kube.fake.requests().is_empty(),
        "{:?}",
        methods(&w.kube.fake.requests())
    );
}

/// How many Pod lists the driver sent (each stop pass lists the revision's Pods).
fn pod_lists(w: &AgentWorld) -> usize {
    w.kube
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("/pods?"))
        .count()
}

/// (verb, API group, resource) of a recorded request, as RBAC names it.
fn access_of(r: &Recorded) -> (String, String, String) {
    let path = r.path.split('?').next().unwrap();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segments[0] {
        "api" => ("", &segments[2..]),
        _ => (segments[1], &segments[3..]),
    };
    let (resource, tail) = match rest {
        ["namespaces", _, resource, tail @ ..] => (*resource, tail),
        [resource, tail @ ..] => (*resource, tail),
        [] => panic!("{path}"),
    };
    let named = !tail.is_empty();
    // A subresource (`pods/{name}/proxy/...`) is its own RBAC resource.
    let resource = match tail {
        [_, subresource, ..] => format!("{resource}/{subresource}"),
        _ => resource.to_string(),
    };
    let verb = match (r.method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", _) => "delete",
        (m, _) => panic!("{m} {path}"),
    };
    (verb.into(), group.into(), resource)
}

#[test]
fn w8_preflight_reviews_every_access_the_driver_uses() {
    let w = agent_world();
    let mut c = w.db.client();
    deployed(&w);
    deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    deploy_kube(&mut c, &w.agent, "openclaw", "embedded", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::agent::stop(&mut c, &w.agent, "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    c.query_one("SELECT occ.agent_delete('ns1', $1, 'admin')", &[&w.agent])
        .unwrap();
    run_until(&w.db, w.kube.driver.clone(), quiet);
    // Namespaces: adopt, converge a changed policy, empty and release; create and delete.
    let kube = &w.kube;
    kube.fake.put_object(
        &format!("{CORE}/namespaces"),
        json!({"metadata": {"name": "legacy"}}),
    );
    let adopted = ns_spec("ns2", Some("legacy"));
    kube.driver.ensure_namespace(&adopted, &cancel()).unwrap();
    let collection = "/apis/networking.k8s.io/v1/namespaces/legacy/networkpolicies";
    let mut policy = kube
        .fake
        .get(&format!("{collection}/occ-default-deny"))
        .unwrap();
    policy["metadata"]["annotations"]["occ.spec-hash"] = json!("edited");
    kube.fake.put_object(collection, policy);
    kube.driver.ensure_namespace(&adopted, &cancel()).unwrap();
    wait_for(
        "the adopted namespace emptied",
        Duration::from_secs(10),
        || {
            kube.driver
                .delete_namespace(&adopted, &cancel())
                .unwrap()
                .complete
        },
    );
    let own = ns_spec("ns3", None);
    kube.driver.ensure_namespace(&own, &cancel()).unwrap();
    wait_for("the namespace deleted", Duration::from_secs(10), || {
        kube.driver
            .delete_namespace(&own, &cancel())
            .unwrap()
            .complete
    });

    let reviewed: Vec<(String, String, String)> = occ_worker::compute::kubernetes::driver::ACCESS
        .iter()
        .map(|(v, g, r)| (v.to_string(), g.to_string(), r.to_string()))
        .collect();
    let mut used: Vec<(String, String, String)> =
        kube.fake.requests().iter().map(access_of).collect();
    used.sort();
    used.dedup();
    let unreviewed: Vec<_> = used.iter().filter(|a| !reviewed.contains(a)).collect();
    assert!(unreviewed.is_empty(), "{unreviewed:?}");
    assert!(used.len() >= 25, "{used:?}");
}

#[test]
fn w8_preflight_warns_about_each_denied_access() {
    let kube = Kube::start();
    assert_eq!(kube.driver.preflight(&cancel()).unwrap(), vec![]);
    kube.fake.deny_access("create", "deployments");
    // The held-code read's subresource is reviewed as RBAC names it.
    kube.fake.deny_access("get", "pods/proxy");
    let warnings = kube.driver.preflight(&cancel()).unwrap();
    let codes: Vec<&str> = warnings.iter().map(|w| w.code.as_str()).collect();
    assert_eq!(
        codes,
        vec![
            "KUBERNETES_ACCESS_DENIED_CREATE_DEPLOYMENTS",
            "KUBERNETES_ACCESS_DENIED_GET_PODS_PROXY"
        ]
    );
}

/// `SETTINGS` running only `{version: 6, mode: protected}`: every stored `{5, standard}`
/// revision is refused (SPEC Z1).
fn settings_without_the_standard_admission() -> String {
    format!(
        r#"{}, "executionAdmissions": [{{"version": 6, "mode": "protected"}}]}}"#,
        &SETTINGS[..SETTINGS.len() - 1]
    )
}

#[test]
fn z1_kubernetes_runs_the_execution_admissions_its_settings_list_and_withdraws_a_removed_one_by_its_stop(
) {
    let w = agent_world_with(
        FakeOptions {
            pod_termination: Duration::from_millis(800),
            ..FakeOptions::default()
        },
        SETTINGS,
    );
    let mut c = w.db.client();
    // The default list runs the stored {5, standard}.
    let rev = deployed(&w);
    let kubeconfig = w
        .kube
        .fake
        .write_kubeconfig(&w.kube.dir.0, KubeconfigAuth::Token);
    let refusing = Arc::new(driver_from(
        &kubeconfig,
        &settings_without_the_standard_admission(),
    ));
    let standard =
        crate::support::bare_revision("ns1", &w.agent, (&rev, 1), ("codex", "dedicated"));
    assert!(w
        .kube
        .driver
        .validate_execution_admission(&standard, AdmissionUse::Stored)
        .is_ok());
    let e = refusing
        .validate_execution_admission(&standard, AdmissionUse::Stored)
        .unwrap_err();
    assert_eq!(permanent(&e), "EXECUTION_ADMISSION_UNAVAILABLE");

    // The active revision's reconcile work runs again: the withdrawal is its stop, and a stop
    // still draining counts as failed, so the work waits until the Pods are gone.
    let k = rkey(&rev);
    crate::revision::requeue(&mut c, &k);
    w.kube.fake.clear_requests();
    run_until(&w.db, refusing.clone(), |c| crate::revision::ended(c, &k));
    crate::support::expect_work(&mut c, &k).failed_with("EXECUTION_ADMISSION_WITHDRAWN");
    let ev = evidence(&mut c, &k);
    assert!(
        ev.contains(&"deferred:EXECUTION_ADMISSION_WITHDRAWAL_PENDING".to_string()),
        "{ev:?}"
    );
    for name in [
        format!("agent-{}-gateway", w.agent),
        format!("agent-{}-r1", w.agent),
    ] {
        let d = deployment(&w, &name).expect("kept, scaled down");
        assert_eq!(d["spec"]["replicas"], 0, "{name}");
    }
    assert!(agent_objects(&w, "pods").is_empty());
    assert_eq!(active(&mut c, &w.agent), Some(rev));

    // A new candidate is refused before any write.
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    w.kube.fake.clear_requests();
    run_until(&w.db, refusing, quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("EXECUTION_ADMISSION_UNAVAILABLE");
    assert!(
        w.kube.writes().is_empty(),
        "{:?}",
        methods(&w.kube.writes())
    );
}

// SPEC Q10: a pass does not wait on infrastructure past its bound while it holds its claim. An
// API server that answers a revision's first write with 429 and `Retry-After: 2` (longer than
// the pass may still wait) ends the pass pending `KUBERNETES_CLIENT_THROTTLED`, the attempt
// refunded, instead of sleeping under the claim; the next pass writes and activates.
#[test]
fn q10_a_wait_past_the_pass_bound_defers_the_pass_with_its_attempt_refunded() {
    let w = agent_world();
    let mut c = w.db.client();
    w.kube.fake.inject(Inject {
        method: Some("POST"),
        path_prefix: format!("{CORE}/namespaces/{NS1}/persistentvolumeclaims"),
        times: 1,
        action: Action::TooMany {
            retry_after_secs: 2,
        },
    });
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    let (state, code, _, attempts) = work(&mut c, &rkey(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("succeeded", Some("REVISION_ACTIVATED"))
    );
    let evidence = evidence(&mut c, &rkey(&rev));
    assert_eq!(
        evidence.first().map(String::as_str),
        Some("deferred:KUBERNETES_CLIENT_THROTTLED"),
        "{evidence:?}"
    );
    // The deferred pass spent no attempt: only the pass that activated did.
    assert_eq!(attempts, 1, "{evidence:?}");
    // The 429 was answered once and not retried under the claim.
    let throttled = w
        .kube
        .fake
        .requests()
        .iter()
        .filter(|r| r.status == 429)
        .count();
    assert_eq!(throttled, 1);
}

// Seed 290-369 (F179): a retirement whose primary delete fails still tries the rest, and a
// failed cleanup beside the primary failure is reported as `cleanupCause` by the Kubernetes
// driver; the primary failure decides the outcome, and the next pass finishes the retirement.
#[test]
fn f179_a_retirement_whose_cleanup_also_fails_names_the_cleanup_cause() {
    let w = agent_world();
    let mut c = w.db.client();
    let _r1 = deployed(&w);
    for path in [
        format!("{APPS}/namespaces/{NS1}/deployments/agent-{}-r1", w.agent),
        format!("{CORE}/namespaces/{NS1}/services/agent-{}-r1", w.agent),
    ] {
        w.kube.fake.inject(Inject {
            method: Some("DELETE"),
            path_prefix: path,
            times: 1,
            action: Action::Status(500),
        });
    }
    let r2 = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    let events =
        crate::scripted::run_captured(&w.db, w.kube.driver.clone(), Opts::default(), |c| {
            work(c, &rkey(&r2)).0 == "succeeded"
        });
    let retries: Vec<Value> = events
        .named("worker.completed")
        .into_iter()
        .filter(|e| e["workId"] == rkey(&r2).as_str() && e["outcome"] != "success")
        .filter(|e| e.get("cleanupCause").is_some())
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(
        retries[0]["cleanupCause"]
            .as_str()
            .is_some_and(|c| c.starts_with("kubernetes")),
        "{retries:?}"
    );
    assert!(deployment(&w, &format!("agent-{}-r1", w.agent)).is_none());
    assert!(w
        .kube
        .fake
        .get(&format!(
            "{CORE}/namespaces/{NS1}/services/agent-{}-r1",
            w.agent
        ))
        .is_none());
}

#[test]
fn g3_a_kubernetes_cleanup_waits_for_a_draining_stop_then_scales_down_and_clears_the_pointer() {
    // SPEC G3 on Kubernetes: `bind_agent` and `stop_revision` as R9 uses them; a draining
    // stop waits (Z5) as a pending cleanup with its cause.
    use occ_worker::queue::{self, CleanupKind, NewWork};
    let w = agent_world();
    let mut c = w.db.client();
    let rev = deployed(&w);
    let cleanup = NewWork::repository_cleanup(
        "ns1",
        &w.agent,
        &rev,
        CleanupKind::FailedPreparation,
        "admin",
    );
    queue::work_enqueue(&mut c, &cleanup).unwrap();
    let k = cleanup.key().to_string();
    let first = k.clone();
    run_until(&w.db, w.kube.driver.clone(), move |c| {
        !evidence(c, &first).is_empty()
    });
    assert_eq!(
        evidence(&mut c, &k),
        ["deferred:REPOSITORY_CLEANUP_PENDING"]
    );
    let cause: Option<String> = crate::support::one(
        &mut c,
        "SELECT a.cause FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
         WHERE w.idempotency_key = $1",
        &[&k],
    );
    assert_eq!(cause.as_deref(), Some("AGENT_STOP_YIELDED"));
    // Each recheck made due at once (it is 30 s), until the Pods are gone.
    let done = k.clone();
    run_until(&w.db, w.kube.driver.clone(), move |c| {
        c.execute(
            "UPDATE occ.work SET available_at = clock_timestamp()
             WHERE idempotency_key = $1 AND state = 'queued'",
            &[&done],
        )
        .unwrap();
        crate::revision::ended(c, &done)
    });
    crate::support::expect_work(&mut c, &k).completed_with("REPOSITORY_CLEANUP_COMPLETE");
    assert_eq!(active(&mut c, &w.agent), None);
    let d = deployment(&w, &format!("agent-{}-r1", w.agent)).expect("kept, scaled down");
    assert_eq!(d["spec"]["replicas"], 0);
}
