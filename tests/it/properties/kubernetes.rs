//! What the Kubernetes API server answers, as the driver decodes it: Deployments, Pods,
//! ReplicaSets, EndpointSlices, Status objects and the harness's `/readyz` through the Pod
//! proxy (the pure observers, in thousands of cases), then list pages, single objects and
//! SelfSubjectAccessReviews over the wire from the API server fake. Each is decoded or is an
//! error that never repeats the server's free text.

use super::{holds, json, near, near_bytes, run};
use crate::kube_fake::{Action, FakeOptions, Inject, KubeFake, KubeconfigAuth};
use occ_worker::cancel::CancelToken;
use occ_worker::compute::kubernetes::client::{error::classify, Client};
use occ_worker::compute::kubernetes::settings::Settings;
use occ_worker::compute::kubernetes::{connection, observe, KubernetesDriver};
use occ_worker::compute::ComputeDriver;
use proptest::prelude::*;
use serde_json::{json, Value};

/// The server's free text (a Status message), which no error may repeat.
/// The planted value: a canary (tests/canary.rs) the suite's log scan looks for.
fn server_text() -> &'static str {
    static VALUE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VALUE.get_or_init(|| crate::support::canary("server-text"))
}

fn deployment() -> Value {
    json!({"kind": "Deployment", "metadata": {"name": "rev-1", "generation": 2,
             "deletionTimestamp": null, "labels": {"occ.revision": "rev-1"}},
           "spec": {"replicas": 1},
           "status": {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
                      "readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": 0,
                      "conditions": [{"type": "Progressing", "status": "True",
                                      "reason": "NewReplicaSetAvailable"},
                                     {"type": "Available", "status": "True"}]}})
}

fn pod() -> Value {
    json!({"kind": "Pod", "metadata": {"name": "rev-1-abc", "labels": {"occ.revision": "rev-1"}},
           "spec": {"containers": [{"name": "harness"}]},
           "status": {"phase": "Running",
                      "conditions": [{"type": "Ready", "status": "False"},
                                     {"type": "PodScheduled", "status": "False",
                                      "reason": "Unschedulable", "message": server_text()}],
                      "initContainerStatuses": [{"name": "workspace-setup", "ready": false,
                           "restartCount": 1,
                           "state": {"terminated": {"exitCode": 3, "reason": "Error",
                                                    "message": "WORKSPACE_SETUP_REFUSED"}}}],
                      "containerStatuses": [{"name": "harness", "ready": false,
                           "restartCount": 6,
                           "state": {"waiting": {"reason": "CrashLoopBackOff", "message": server_text()}},
                           "lastState": {"terminated": {"exitCode": 1,
                                                        "message": "AUTHENTICATION_FAILED"}}}]}})
}

fn replica_set() -> Value {
    json!({"kind": "ReplicaSet", "status": {"conditions": [{"type": "ReplicaFailure",
           "status": "True", "reason": "FailedCreate",
           "message": "pods \"x\" is forbidden: exceeded quota: q"}]}})
}

fn endpoint_slice() -> Value {
    json!({"kind": "EndpointSlice", "endpoints": [{"addresses": ["10.0.0.1"],
           "conditions": {"ready": true, "serving": true, "terminating": false}}]})
}

fn status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": server_text(),
           "reason": "Invalid", "code": 422,
           "details": {"name": "x", "causes": [{"reason": "FieldValueInvalid",
                                                "message": server_text(), "field": "spec.template"}]}})
}

fn status_code() -> impl Strategy<Value = u16> {
    prop_oneof![
        3 => Just(200u16),
        2 => prop::sample::select(vec![201u16, 400, 401, 403, 404, 409, 410, 422, 429, 500, 503]),
        1 => 100u16..600,
    ]
}

fn body_near(valid: Value) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => near(valid.clone()).prop_map(|v| v.to_string().into_bytes()),
        1 => json().prop_map(|v| v.to_string().into_bytes()),
        1 => near_bytes(valid.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..96),
    ]
}

#[test]
fn the_driver_decodes_any_deployment_pod_replica_set_endpoint_slice_or_status_without_panicking() {
    let objects = (
        near(deployment()),
        prop::collection::vec(near(pod()), 0..3),
        prop::collection::vec(near(replica_set()), 0..3),
        prop::collection::vec(near(endpoint_slice()), 0..3),
        (status_code(), body_near(status())),
        (
            status_code(),
            body_near(json!({"status": "unready", "code": "LOGIN_FAILED"})),
        ),
    );
    holds(run(
        file!(),
        super::cases(1500),
        objects,
        |(deployment, pods, replica_sets, slices, (status, body), (proxied, readyz))| {
            let _ = observe::rollout(&deployment);
            let _ = observe::terminating(&deployment);
            let findings = observe::pods(&pods);
            let shown = format!("{findings:?}");
            prop_assert!(!shown.contains(server_text()), "server text in {shown}");
            let _ = observe::held_candidate(&pods);
            let _ = observe::quota_exceeded(&replica_sets);
            let _ = observe::has_ready_endpoint(&slices);
            let kind = format!("{:?}", classify(status, &body));
            prop_assert!(!kind.contains(server_text()), "server text in {}", kind);
            if let Some(code) = observe::held_code(proxied, &readyz) {
                prop_assert!(
                    code.len() <= 64 && !code.contains(server_text()),
                    "an unbounded held code: {code:?}"
                );
            }
            Ok(())
        },
    ));
}

/// The API server fake, a client and a driver on it, and the directory of their kubeconfig.
fn wire(name: &str) -> (KubeFake, Client, KubernetesDriver, std::path::PathBuf) {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = crate::kube_e2e::scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = fake.write_kubeconfig(&dir, KubeconfigAuth::Token);
    let client = Client::new(connection::from_kubeconfig(&kubeconfig, None).unwrap())
        .unwrap()
        .with_rate_limit(100_000.0, 100_000);
    let mut settings = Settings::parse(crate::kube_e2e::DRIVER_FILE).unwrap();
    settings.qps = 100_000.0;
    settings.burst = 100_000;
    let driver = KubernetesDriver::new(
        Client::new(connection::from_kubeconfig(&kubeconfig, None).unwrap()).unwrap(),
        settings,
    );
    (fake, client, driver, dir)
}

fn without_text(e: &dyn std::fmt::Display) -> Result<(), TestCaseError> {
    let shown = e.to_string();
    prop_assert!(!shown.contains(server_text()), "server text in: {}", shown);
    prop_assert!(
        !shown.trim().is_empty() && shown.lines().count() <= 1,
        "{}",
        shown
    );
    Ok(())
}

fn statuses() -> impl Strategy<Value = u16> {
    prop::sample::select(vec![200u16, 200, 200, 201, 400, 403, 404, 409, 410, 422])
}

#[test]
fn list_pages_and_objects_from_the_api_server_decode_or_fail_without_its_text() {
    let (fake, client, _driver, dir) = wire("prop-kube-list");
    let cancel = CancelToken::unbounded();
    let list = json!({"kind": "PodList", "apiVersion": "v1",
                      "metadata": {"resourceVersion": "7", "continue": ""},
                      "items": [pod(), pod()]});
    let inject = |path: &str, status: u16, body: Vec<u8>| {
        fake.inject(Inject {
            method: Some("GET"),
            path_prefix: path.to_string(),
            times: 1,
            action: Action::Raw { status, body },
        })
    };
    holds(run(
        file!(),
        super::cases(1500),
        (
            (statuses(), body_near(list)),
            (statuses(), body_near(pod())),
        ),
        |((list_status, page), (get_status, object))| {
            fake.clear_injections();
            inject("/api/v1/namespaces/prop/pods?", list_status, page);
            if let Err(e) = client.list("/api/v1/namespaces/prop/pods", None, &cancel) {
                without_text(&e)?;
            }
            inject("/api/v1/namespaces/prop/pods/rev-1-abc", get_status, object);
            if let Err(e) = client.get("/api/v1/namespaces/prop/pods/rev-1-abc", &cancel) {
                without_text(&e)?;
            }
            Ok(())
        },
    ));
    fake.clear_injections();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn self_subject_access_reviews_decode_or_fail_preflight_without_the_servers_text() {
    let (fake, _client, driver, dir) = wire("prop-kube-ssar");
    let cancel = CancelToken::unbounded();
    let review = json!({"kind": "SelfSubjectAccessReview",
                        "apiVersion": "authorization.k8s.io/v1",
                        "status": {"allowed": true, "reason": server_text()}});
    holds(run(
        file!(),
        super::cases(600),
        (statuses(), body_near(review)),
        |(status, body)| {
            fake.clear_injections();
            fake.inject(Inject {
                method: Some("POST"),
                path_prefix: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews".into(),
                times: usize::MAX,
                action: Action::Raw { status, body },
            });
            match driver.preflight(&cancel) {
                Ok(warnings) => {
                    for w in warnings {
                        prop_assert!(!w.code.contains(server_text()));
                    }
                }
                Err(e) => without_text(&e)?,
            }
            Ok(())
        },
    ));
    fake.clear_injections();
    let _ = std::fs::remove_dir_all(&dir);
}
