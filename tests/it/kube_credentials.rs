//! Credential sources on the Kubernetes Compute Driver (SPEC §13: Kubernetes attachment, E6's
//! Kubernetes detach, E17's re-detach), through the real `KubernetesDriver` built from a
//! kubeconfig and talking TLS to the API server fake, whose controllers roll a Deployment out
//! per template change (a new ReplicaSet whose Pods carry the new template, the old Pods
//! terminated). Each test asserts the driver's typed answer, the objects the fake holds and the
//! requests it received; waits poll the fake with deadlines, never fixed sleeps. The worker's
//! side (which sources reach the spec, when a detach is asked) is tested with the scripted
//! driver elsewhere.

use crate::kube_e2e::{k8s_namespace, scratch};
use crate::kube_fake::{Action, FakeOptions, Inject, KubeFake};
use crate::support::{bare_revision, wait_for};
use occ_worker::cancel::CancelToken;
use occ_worker::compute::kubernetes::{manifests, names, KubernetesDriver};
use occ_worker::compute::{
    AgentSpec, ComputeDriver, ComputeError, ComputeErrorKind, CredentialAttachment,
    CredentialDetach, CredentialGateway, NamespaceSpec, RevisionSpec,
};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const APPS: &str = "/apis/apps/v1";
const HARNESS_ENV: &str = "OCC_HARNESS_API_KEY";
const TOOL_ENV: &str = "OCC_CREDENTIAL_GH_TOOL";
/// How long a rollout or a drain on the fake may take before a test fails.
const LIMIT: Duration = Duration::from_secs(20);

/// The fake cluster, a driver on it with a ready Namespace `ns-1` and a bound Agent `ag-1`.
struct World {
    fake: KubeFake,
    driver: KubernetesDriver,
    namespace: String,
    dir: PathBuf,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn cancel() -> CancelToken {
    CancelToken::unbounded()
}

fn world(name: &str) -> World {
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(20),
        ..FakeOptions::default()
    });
    let dir = scratch(name);
    let driver = crate::kube_e2e::driver_for(&fake, &dir);
    let spec = NamespaceSpec {
        installation_id: "inst".into(),
        namespace_id: "ns-1".into(),
        name: "team".into(),
        existing_namespace: None,
    };
    let namespace = k8s_namespace("ns-1");
    driver.ensure_namespace(&spec, &cancel()).unwrap();
    fake.put_tenant_rolebinding(&namespace);
    assert!(driver.ensure_namespace(&spec, &cancel()).unwrap().complete);
    let agent = AgentSpec {
        installation_id: "inst".into(),
        namespace_id: "ns-1".into(),
        agent_id: "ag-1".into(),
        service_principal_id: "sp-1".into(),
    };
    driver.bind_agent(&agent, &cancel()).unwrap();
    World {
        fake,
        driver,
        namespace,
        dir,
    }
}

fn harness_source(namespace: &str) -> CredentialAttachment {
    CredentialAttachment {
        source_id: "openai".into(),
        kind: "model_key".into(),
        harness: true,
        backend_ref: format!("{namespace}/openai/api-key"),
    }
}

fn tool_source(namespace: &str) -> CredentialAttachment {
    CredentialAttachment {
        source_id: "gh-tool".into(),
        kind: "tool".into(),
        harness: false,
        backend_ref: format!("{namespace}/github/token"),
    }
}

/// Revision `n` of `ag-1` in `mode`, with the harness source and the tool source.
fn revision(w: &World, n: i32, mode: &str) -> RevisionSpec {
    let harness = if mode == "dedicated" {
        "codex"
    } else {
        "openclaw"
    };
    let mut r = bare_revision("ns-1", "ag-1", (&format!("rev-{n}"), n), (harness, mode));
    r.credential_sources = vec![harness_source(&w.namespace), tool_source(&w.namespace)];
    r
}

/// `r` as E19 resolves it once its tool source is withdrawn: without it.
fn after_tool_withdrawal(r: &RevisionSpec) -> RevisionSpec {
    let mut r = r.clone();
    r.credential_sources.retain(|s| s.harness);
    r
}

/// The revision's workload as the fake holds it.
fn workload(w: &World, r: &RevisionSpec) -> Option<Value> {
    let name = if r.harness_mode == occ_worker::compute::HarnessMode::Dedicated {
        names::revision_object_name(&r.agent_id, r.revision)
    } else {
        manifests::gateway_name(&r.agent_id)
    };
    w.fake.get(&format!(
        "{APPS}/namespaces/{}/deployments/{name}",
        w.namespace
    ))
}

/// The Pods of revision `r` that run its harness container.
fn harness_pods(w: &World, r: &RevisionSpec) -> Vec<Value> {
    w.fake
        .objects("pods")
        .into_iter()
        .filter(|p| {
            p["metadata"]["labels"][names::LABEL_REVISION]
                == names::label_value(&r.revision_id).as_str()
        })
        .filter(|p| {
            p["spec"]["containers"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["name"] == "harness"))
        })
        .collect()
}

/// The `env` entry `name` of the harness container of a pod spec.
fn env_entry(pod_spec: &Value, name: &str) -> Option<Value> {
    pod_spec["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "harness")?["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .cloned()
}

fn secret_ref(name: &str, secret: &str, key: &str) -> Value {
    json!({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
}

fn prepared(w: &World, r: &RevisionSpec) {
    wait_for("the revision ready", LIMIT, || {
        w.driver.prepare_revision(r, &cancel()).unwrap().ready
    });
}

fn refusal(result: Result<CredentialDetach, ComputeError>) -> String {
    match result.expect_err("refused").kind() {
        ComputeErrorKind::Permanent(code) => code.clone(),
        other => panic!("not permanent: {other:?}"),
    }
}

fn withdraw(
    w: &World,
    r: &RevisionSpec,
    source: &CredentialAttachment,
    recheck: bool,
) -> CredentialDetach {
    w.driver
        .withdraw_credential_source(r, source, recheck, &cancel())
        .unwrap()
}

/// No request ever named a Secret: the worker never reads, writes or deletes one.
fn no_secret_requested(w: &World) {
    let secrets: Vec<String> = w
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.contains("/secrets"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(secrets, Vec::<String>::new());
}

/// Requests that change something.
fn writes(w: &World) -> Vec<String> {
    w.fake
        .requests()
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

#[test]
fn e19_prepare_attaches_the_harness_and_tool_sources_as_secret_key_refs_in_the_deployment_and_its_pods(
) {
    let w = world("cred-attach");
    let r = revision(&w, 1, "dedicated");
    prepared(&w, &r);
    let deployment = workload(&w, &r).unwrap();
    let template = &deployment["spec"]["template"]["spec"];
    let harness = secret_ref(HARNESS_ENV, "openai", "api-key");
    let tool = secret_ref(TOOL_ENV, "github", "token");
    assert_eq!(env_entry(template, HARNESS_ENV), Some(harness.clone()));
    assert_eq!(env_entry(template, TOOL_ENV), Some(tool.clone()));
    let pods = harness_pods(&w, &r);
    assert!(!pods.is_empty());
    for pod in &pods {
        assert_eq!(env_entry(&pod["spec"], HARNESS_ENV), Some(harness.clone()));
        assert_eq!(env_entry(&pod["spec"], TOOL_ENV), Some(tool.clone()));
    }
    // The dedicated gateway in front of the Harness carries no source.
    let gateway = w
        .fake
        .get(&format!(
            "{APPS}/namespaces/{}/deployments/{}",
            w.namespace,
            manifests::gateway_name("ag-1")
        ))
        .unwrap();
    assert!(!manifests::carries_env(
        &gateway["spec"]["template"]["spec"],
        TOOL_ENV
    ));
    // A preparation with a changed source list rolls the Deployment out without it.
    prepared(&w, &after_tool_withdrawal(&r));
    let deployment = workload(&w, &r).unwrap();
    assert!(env_entry(&deployment["spec"]["template"]["spec"], TOOL_ENV).is_none());
    wait_for("the Pods of the new template", LIMIT, || {
        let pods = harness_pods(&w, &r);
        !pods.is_empty()
            && pods
                .iter()
                .all(|p| env_entry(&p["spec"], TOOL_ENV).is_none())
    });
    no_secret_requested(&w);
}

#[test]
fn e19_an_embedded_revision_carries_its_sources_in_the_agents_gateway_and_detaches_there() {
    let w = world("cred-embedded");
    let r = revision(&w, 1, "embedded");
    prepared(&w, &r);
    let gateway = workload(&w, &r).unwrap();
    assert_eq!(
        env_entry(&gateway["spec"]["template"]["spec"], TOOL_ENV),
        Some(secret_ref(TOOL_ENV, "github", "token"))
    );
    // Another revision of the Agent the gateway does not run has no workload.
    let other = revision(&w, 2, "embedded");
    assert_eq!(
        withdraw(&w, &other, &tool_source(&w.namespace), false),
        CredentialDetach::Absent
    );
    // The gateway running this revision is rolled out without the tool source.
    let mut answers = vec![withdraw(&w, &r, &tool_source(&w.namespace), false)];
    wait_for("the tool source revoked", LIMIT, || {
        answers.push(withdraw(&w, &r, &tool_source(&w.namespace), false));
        answers.last() == Some(&CredentialDetach::Revoked)
    });
    assert_eq!(answers[0], CredentialDetach::Pending);
    let gateway = workload(&w, &r).unwrap();
    assert!(env_entry(&gateway["spec"]["template"]["spec"], TOOL_ENV).is_none());
    assert!(env_entry(&gateway["spec"]["template"]["spec"], HARNESS_ENV).is_some());
    assert!(harness_pods(&w, &r)
        .iter()
        .all(|p| env_entry(&p["spec"], TOOL_ENV).is_none()));
    // Its harness source is refused while the gateway runs it.
    assert_eq!(
        refusal(w.driver.withdraw_credential_source(
            &r,
            &harness_source(&w.namespace),
            false,
            &cancel()
        )),
        "CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT"
    );
    no_secret_requested(&w);
}

#[test]
fn e19_a_backend_ref_outside_the_agents_namespace_is_refused_before_any_write() {
    let w = world("cred-outside");
    let mut r = revision(&w, 1, "dedicated");
    r.credential_sources[1].backend_ref = "kube-system/github/token".into();
    w.fake.clear_requests();
    let e = w.driver.prepare_revision(&r, &cancel()).unwrap_err();
    assert_eq!(
        e.kind(),
        &ComputeErrorKind::Permanent("SECRET_REFERENCE_OUTSIDE_NAMESPACE".into())
    );
    assert_eq!(writes(&w), Vec::<String>::new());
    assert!(workload(&w, &r).is_none());
    no_secret_requested(&w);
}

#[test]
fn e6_a_tool_source_stays_pending_while_an_old_pod_carries_it_then_is_revoked() {
    let w = world("cred-tool");
    let r = revision(&w, 1, "dedicated");
    let tool = tool_source(&w.namespace);
    prepared(&w, &r);
    let old: Vec<String> = harness_pods(&w, &r)
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(old.len(), 1);
    // The old Pod is held while it terminates; a concurrent change makes the first write 409.
    w.fake.hold_terminating_pods();
    w.fake.inject(Inject {
        method: Some("PUT"),
        path_prefix: format!("{APPS}/namespaces/{}/deployments/", w.namespace),
        times: 1,
        action: Action::Status(409),
    });
    w.fake.clear_requests();
    assert_eq!(
        withdraw(&w, &after_tool_withdrawal(&r), &tool, false),
        CredentialDetach::Pending
    );
    let puts: Vec<u16> = w
        .fake
        .requests()
        .iter()
        .filter(|q| q.method == "PUT")
        .map(|q| q.status)
        .collect();
    assert_eq!(puts, vec![409, 200], "re-read and written again");
    let deployment = workload(&w, &r).unwrap();
    assert!(env_entry(&deployment["spec"]["template"]["spec"], TOOL_ENV).is_none());
    assert!(env_entry(&deployment["spec"]["template"]["spec"], HARNESS_ENV).is_some());
    // The rollout terminates the old Pod, held with the old template's environment.
    wait_for("the old Pod terminating", LIMIT, || {
        w.fake.objects("pods").iter().any(|p| {
            old.contains(&p["metadata"]["name"].as_str().unwrap().to_string())
                && p["metadata"].get("deletionTimestamp").is_some()
        })
    });
    assert!(harness_pods(&w, &r)
        .iter()
        .any(|p| env_entry(&p["spec"], TOOL_ENV).is_some()));
    assert_eq!(withdraw(&w, &r, &tool, false), CredentialDetach::Pending);
    assert_eq!(withdraw(&w, &r, &tool, true), CredentialDetach::Pending);
    // Released, the old Pod goes and the new template's Pod runs without the source.
    w.fake.release_terminating_pods();
    wait_for("the tool source revoked", LIMIT, || {
        withdraw(&w, &r, &tool, false) == CredentialDetach::Revoked
    });
    prepared(&w, &after_tool_withdrawal(&r));
    let pods = harness_pods(&w, &r);
    assert!(!pods.is_empty());
    assert!(pods.iter().all(|p| !old
        .contains(&p["metadata"]["name"].as_str().unwrap().to_string())
        && env_entry(&p["spec"], TOOL_ENV).is_none()
        && env_entry(&p["spec"], HARNESS_ENV).is_some()));
    let deployment = workload(&w, &r).unwrap();
    assert!(env_entry(&deployment["spec"]["template"]["spec"], TOOL_ENV).is_none());
    // E17: detaching a revoked source again is idempotent and writes nothing.
    w.fake.clear_requests();
    assert_eq!(withdraw(&w, &r, &tool, true), CredentialDetach::Revoked);
    assert_eq!(withdraw(&w, &r, &tool, false), CredentialDetach::Revoked);
    assert_eq!(writes(&w), Vec::<String>::new());
    no_secret_requested(&w);
}

#[test]
fn e6_the_harness_source_is_refused_while_its_workload_runs_and_absent_after_retirement() {
    let w = world("cred-harness");
    let r = revision(&w, 1, "dedicated");
    let harness = harness_source(&w.namespace);
    prepared(&w, &r);
    w.fake.clear_requests();
    for recheck in [false, true] {
        assert_eq!(
            refusal(
                w.driver
                    .withdraw_credential_source(&r, &harness, recheck, &cancel())
            ),
            "CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT"
        );
    }
    assert_eq!(writes(&w), Vec::<String>::new());
    let deployment = workload(&w, &r).unwrap();
    assert!(env_entry(&deployment["spec"]["template"]["spec"], HARNESS_ENV).is_some());
    // Stopped (no replica, no Pod), the workload is written without it.
    wait_for("the revision stopped", LIMIT, || {
        w.driver.stop_revision(&r, &cancel()).is_ok()
    });
    assert_eq!(withdraw(&w, &r, &harness, false), CredentialDetach::Revoked);
    let deployment = workload(&w, &r).unwrap();
    assert!(env_entry(&deployment["spec"]["template"]["spec"], HARNESS_ENV).is_none());
    // Retired: no workload, nothing to detach.
    w.driver.retire_revision(&r, &cancel()).unwrap();
    assert!(workload(&w, &r).is_none());
    for source in [&harness, &tool_source(&w.namespace)] {
        wait_for("the source absent", LIMIT, || {
            withdraw(&w, &r, source, false) == CredentialDetach::Absent
        });
        assert_eq!(withdraw(&w, &r, source, true), CredentialDetach::Absent);
    }
    no_secret_requested(&w);
}

#[test]
fn e6_a_workload_without_the_installation_label_is_misconfigured_and_untouched() {
    let w = world("cred-label");
    let r = revision(&w, 1, "dedicated");
    prepared(&w, &r);
    let mut deployment = workload(&w, &r).unwrap();
    deployment["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove(names::LABEL_INSTALLATION);
    w.fake.put_object(
        &format!("{APPS}/namespaces/{}/deployments", w.namespace),
        deployment,
    );
    w.fake.clear_requests();
    for source in [tool_source(&w.namespace), harness_source(&w.namespace)] {
        assert_eq!(
            refusal(
                w.driver
                    .withdraw_credential_source(&r, &source, false, &cancel())
            ),
            "CREDENTIAL_WITHDRAWAL_MISCONFIGURED"
        );
    }
    assert_eq!(writes(&w), Vec::<String>::new());
    let deployment = workload(&w, &r).unwrap();
    assert!(env_entry(&deployment["spec"]["template"]["spec"], TOOL_ENV).is_some());
    no_secret_requested(&w);
}

#[test]
fn e16_an_embedded_harness_source_is_refused_until_a_new_revision_takes_the_gateway_then_absent() {
    let w = world("cred-successor");
    let first = revision(&w, 1, "embedded");
    let harness = harness_source(&w.namespace);
    prepared(&w, &first);
    assert_eq!(
        refusal(
            w.driver
                .withdraw_credential_source(&first, &harness, false, &cancel())
        ),
        "CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT"
    );
    // A new revision takes the Agent's gateway at its activation.
    let second = revision(&w, 2, "embedded");
    prepared(&w, &second);
    wait_for("the second revision activated", LIMIT, || {
        w.driver.activate_revision(&second, &cancel()).is_ok()
    });
    // The first revision has no workload any more: its harness source is absent once its last
    // Pod is gone, and the second revision's own attachment is untouched.
    let mut answers = Vec::new();
    wait_for("the first revision's harness source absent", LIMIT, || {
        answers.push(withdraw(&w, &first, &harness, false));
        answers.last() == Some(&CredentialDetach::Absent)
    });
    assert!(answers[..answers.len() - 1]
        .iter()
        .all(|a| *a == CredentialDetach::Pending));
    assert!(harness_pods(&w, &first).is_empty());
    let gateway = workload(&w, &second).unwrap();
    assert_eq!(
        env_entry(&gateway["spec"]["template"]["spec"], HARNESS_ENV),
        Some(secret_ref(HARNESS_ENV, "openai", "api-key"))
    );
    no_secret_requested(&w);
}
