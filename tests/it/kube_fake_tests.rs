//! Self-tests of the Kubernetes API server fake (`kube_fake`), with ureq over TLS as the
//! client: they prove the fake keeps the API-server semantics the Kubernetes Compute Driver
//! relies on (Status errors, concurrency, authentication, namespace termination, the
//! deployment and EndpointSlice controllers, held terminating pods, pod behaviours, failure
//! injection). They need no database and never reach a real cluster.

use crate::kube_fake::{
    Action, FakeOptions, Inject, KubeFake, KubeconfigAuth, PodBehaviour, Recorded,
};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

/// A client of the fake: trusted roots, optional bearer token, optional client certificate.
struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

fn agent(ca_pem: &str, client_cert: Option<(String, String)>, timeout: Duration) -> ureq::Agent {
    let ca = Certificate::from_pem(ca_pem.as_bytes()).expect("CA PEM");
    let mut tls = TlsConfig::builder().root_certs(RootCerts::Specific(Arc::new(vec![ca])));
    if let Some((cert, key)) = client_cert {
        let cert = Certificate::from_pem(cert.as_bytes()).expect("client cert PEM");
        let key = PrivateKey::from_pem(key.as_bytes()).expect("client key PEM");
        tls = tls.client_cert(Some(ClientCert::new_with_certs(&[cert], key)));
    }
    ureq::Agent::config_builder()
        .tls_config(tls.build())
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

impl Client {
    fn new(fake: &KubeFake) -> Client {
        Client {
            agent: agent(&fake.ca_pem(), None, Duration::from_secs(10)),
            base: fake.url(),
            token: Some(fake.token()),
        }
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), ureq::Error> {
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let mut response = match body {
            Some(body) => {
                let content_type = if method == "PATCH" {
                    "application/merge-patch+json"
                } else {
                    "application/json"
                };
                let request = request
                    .header("Content-Type", content_type)
                    .body(body.to_string())
                    .expect("request");
                self.agent.run(request)?
            }
            None => self.agent.run(request.body(()).expect("request"))?,
        };
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string()?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// A GET answered as it was sent: (status, content type, body text).
    fn raw(&self, path: &str) -> (u16, String, String) {
        let mut request = ureq::http::Request::builder().uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let mut response = self
            .agent
            .run(request.body(()).expect("request"))
            .expect("request reaches the fake");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = response.body_mut().read_to_string().expect("body");
        (response.status().as_u16(), content_type, text)
    }

    fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.call(method, path, body)
            .expect("request reaches the fake")
    }
}

/// Polls `probe` until it returns Some or `within` passes.
fn wait_for<T>(within: Duration, what: &str, probe: impl FnMut() -> Option<T>) -> T {
    crate::support::wait_value(what, within, probe)
}

fn namespace(client: &Client, name: &str) {
    let (status, _) = client.ok(
        "POST",
        "/api/v1/namespaces",
        Some(&json!({"metadata": {"name": name}})),
    );
    assert_eq!(status, 201);
}

fn deployment(name: &str, replicas: i64, strategy: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": strategy},
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]},
            },
        },
    })
}

fn assert_status(body: &Value, code: u16, reason: &str) {
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["apiVersion"], "v1", "{body}");
    assert_eq!(body["status"], "Failure", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["reason"], reason, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/ns1/deployments";

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Waits for the deployment's Available=True with Progressing reason NewReplicaSetAvailable.
fn wait_available(fake: &KubeFake, name: &str) -> Value {
    wait_for(Duration::from_secs(5), "deployment available", || {
        let d = fake.get(&format!("{DEPLOYMENTS}/{name}"))?;
        let available = condition(&d, "Available")?["status"] == "True";
        let done = condition(&d, "Progressing")?["reason"] == "NewReplicaSetAvailable";
        let observed = d["status"]["observedGeneration"] == d["metadata"]["generation"];
        (available && done && observed).then_some(d)
    })
}

fn pods_of(fake: &KubeFake, name: &str) -> Vec<Value> {
    fake.objects("pods")
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == name)
        .collect()
}

#[test]
fn crud_bumps_resource_versions_and_stale_puts_conflict() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    let path = "/api/v1/namespaces/ns1/secrets";
    let (status, created) = client.ok(
        "POST",
        path,
        Some(&json!({"metadata": {"name": "s"}, "data": {"k": "dg=="}})),
    );
    assert_eq!(status, 201);
    assert_eq!(created["kind"], "Secret");
    assert!(created["metadata"]["uid"].is_string());
    assert!(created["metadata"]["creationTimestamp"].is_string());
    let rv1 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let mut update = created.clone();
    update["data"]["k"] = json!("dzI=");
    let (status, replaced) = client.ok("PUT", &format!("{path}/s"), Some(&update));
    assert_eq!(status, 200);
    let rv2 = replaced["metadata"]["resourceVersion"].as_str().unwrap();
    assert!(rv2.parse::<u64>().unwrap() > rv1.parse::<u64>().unwrap());

    // The first version is stale now.
    let (status, body) = client.ok("PUT", &format!("{path}/s"), Some(&update));
    assert_eq!(status, 409);
    assert_status(&body, 409, "Conflict");

    // Without a resourceVersion the last write wins.
    let mut blind = update.clone();
    blind["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    assert_eq!(client.ok("PUT", &format!("{path}/s"), Some(&blind)).0, 200);

    let (status, patched) = client.ok(
        "PATCH",
        &format!("{path}/s"),
        Some(&json!({"metadata": {"labels": {"a": "b"}}, "data": {"k": null}})),
    );
    assert_eq!(status, 200);
    assert_eq!(patched["metadata"]["labels"]["a"], "b");
    assert!(patched["data"].get("k").is_none());

    let (status, list) = client.ok("GET", &format!("{path}?labelSelector=a%3Db"), None);
    assert_eq!(status, 200);
    assert_eq!(list["kind"], "SecretList");
    assert!(list["metadata"]["resourceVersion"].is_string());
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (_, none) = client.ok("GET", &format!("{path}?labelSelector=a!%3Db,a"), None);
    assert_eq!(none["items"].as_array().unwrap().len(), 0);
    let (_, by_name) = client.ok(
        "GET",
        &format!("{path}?fieldSelector=metadata.name%3Ds"),
        None,
    );
    assert_eq!(by_name["items"].as_array().unwrap().len(), 1);

    let (status, _) = client.ok("DELETE", &format!("{path}/s"), None);
    assert_eq!(status, 200);
    assert_eq!(client.ok("GET", &format!("{path}/s"), None).0, 404);

    let log = fake.requests();
    assert!(log.contains(&Recorded {
        method: "DELETE".into(),
        path: format!("{path}/s"),
        body: None,
        status: 200,
    }));
}

#[test]
fn errors_are_status_objects() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    let sa = "/api/v1/namespaces/ns1/serviceaccounts";
    assert_eq!(
        client
            .ok("POST", sa, Some(&json!({"metadata": {"name": "a"}})))
            .0,
        201
    );

    let (status, body) = client.ok("POST", sa, Some(&json!({"metadata": {"name": "a"}})));
    assert_eq!(status, 409);
    assert_status(&body, 409, "AlreadyExists");
    assert_eq!(body["details"]["name"], "a");
    assert_eq!(body["details"]["kind"], "serviceaccounts");

    let (status, body) = client.ok("GET", &format!("{DEPLOYMENTS}/missing"), None);
    assert_eq!(status, 404);
    assert_status(&body, 404, "NotFound");
    assert_eq!(body["details"]["group"], "apps");
    assert_eq!(body["message"], "deployments.apps \"missing\" not found");

    let long = "x".repeat(64);
    let (status, body) = client.ok(
        "POST",
        "/api/v1/namespaces",
        Some(&json!({"metadata": {"name": long}})),
    );
    assert_eq!(status, 422);
    assert_status(&body, 422, "Invalid");
    assert_eq!(body["details"]["causes"][0]["reason"], "FieldValueInvalid");
    assert_eq!(body["details"]["causes"][0]["field"], "metadata.name");
    let (status, body) = client.ok("POST", sa, Some(&json!({"metadata": {"name": "Bad_Name"}})));
    assert_eq!(status, 422);
    assert_eq!(body["details"]["causes"][0]["field"], "metadata.name");

    let (status, body) = client.ok(
        "PUT",
        &format!("{sa}/a"),
        Some(&json!({"metadata": {"name": "b"}})),
    );
    assert_eq!(status, 400);
    assert_status(&body, 400, "BadRequest");

    // A namespace that does not exist is itself NotFound.
    let (status, body) = client.ok(
        "POST",
        "/api/v1/namespaces/nope/services",
        Some(&json!({"metadata": {"name": "s"}, "spec": {}})),
    );
    assert_eq!(status, 404);
    assert_eq!(body["details"]["kind"], "namespaces");
    assert_eq!(body["details"]["name"], "nope");
}

#[test]
fn wrong_and_rotated_tokens_are_unauthorized() {
    let fake = KubeFake::start(FakeOptions::default());
    let mut client = Client::new(&fake);
    assert_eq!(client.ok("GET", "/version", None).0, 200);
    client.token = Some("wrong".into());
    let (status, body) = client.ok("GET", "/api/v1/namespaces", None);
    assert_eq!(status, 401);
    assert_status(&body, 401, "Unauthorized");
    client.token = None;
    assert_eq!(client.ok("GET", "/api/v1/namespaces", None).0, 401);

    let old = fake.token();
    let new = fake.rotate_token();
    assert_ne!(old, new);
    client.token = Some(old);
    assert_eq!(client.ok("GET", "/api/v1/namespaces", None).0, 401);
    client.token = Some(new);
    assert_eq!(client.ok("GET", "/api/v1/namespaces", None).0, 200);
}

#[test]
fn a_client_certificate_of_the_client_ca_authenticates() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client {
        agent: agent(
            &fake.ca_pem(),
            Some(fake.client_cert_pem()),
            Duration::from_secs(10),
        ),
        base: fake.url(),
        token: None,
    };
    assert_eq!(client.ok("GET", "/api/v1/namespaces", None).0, 200);
}

#[test]
fn a_client_trusting_another_ca_is_refused_at_tls() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client {
        agent: agent(&KubeFake::other_ca_pem(), None, Duration::from_secs(10)),
        base: fake.url(),
        token: Some(fake.token()),
    };
    let e = client.call("GET", "/version", None).unwrap_err();
    // rustls reports the untrusted server certificate through ureq's I/O error.
    let ureq::Error::Io(io) = &e else {
        panic!("expected a TLS failure, got {e:?}")
    };
    let tls = io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
    assert!(
        matches!(
            tls,
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        ),
        "{e:?}"
    );
    assert!(fake.requests().is_empty());
}

#[test]
fn kubeconfigs_carry_the_ca_context_and_credentials() {
    let fake = KubeFake::start(FakeOptions::default());
    let dir = std::env::temp_dir().join(format!("kube-fake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    let path = fake.write_kubeconfig(&dir, KubeconfigAuth::TokenFile(token_file.clone()));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("current-context: fake"), "{text}");
    assert!(text.contains("certificate-authority-data: "), "{text}");
    assert!(text.contains(&format!("server: {}", fake.url())), "{text}");
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), fake.token());
    let rotated = fake.rotate_token();
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), rotated);
    let text =
        std::fs::read_to_string(fake.write_kubeconfig(&dir, KubeconfigAuth::ClientCertFiles))
            .unwrap();
    assert!(text.contains("client-key: "), "{text}");
    let text = std::fs::read_to_string(fake.write_kubeconfig(&dir, KubeconfigAuth::Token)).unwrap();
    assert!(text.contains(&format!("token: {rotated}")), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_deleted_namespace_is_terminating_then_gone_with_its_content() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    let (_, ns) = client.ok("GET", "/api/v1/namespaces/ns1", None);
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(
        client
            .ok(
                "POST",
                "/api/v1/namespaces/ns1/secrets",
                Some(&json!({"metadata": {"name": "s"}}))
            )
            .0,
        201
    );

    let (status, ns) = client.ok("DELETE", "/api/v1/namespaces/ns1", None);
    assert_eq!(status, 200);
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert!(ns["metadata"]["deletionTimestamp"].is_string());

    let (status, body) = client.ok(
        "POST",
        "/api/v1/namespaces/ns1/secrets",
        Some(&json!({"metadata": {"name": "t"}})),
    );
    assert_eq!(status, 403);
    assert_status(&body, 403, "Forbidden");
    assert_eq!(
        body["details"]["causes"][0]["reason"],
        "NamespaceTerminating"
    );

    wait_for(Duration::from_secs(5), "namespace gone", || {
        (client.ok("GET", "/api/v1/namespaces/ns1", None).0 == 404).then_some(())
    });
    assert!(fake.get("/api/v1/namespaces/ns1/secrets/s").is_none());
}

#[test]
fn a_deployment_becomes_available_with_a_ready_endpoint() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    let (status, created) = client.ok(
        "POST",
        DEPLOYMENTS,
        Some(&deployment("web", 1, "RollingUpdate", "img:1")),
    );
    assert_eq!(status, 201);
    assert_eq!(created["metadata"]["generation"], 1);
    let service = json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    });
    assert_eq!(
        client
            .ok("POST", "/api/v1/namespaces/ns1/services", Some(&service))
            .0,
        201
    );

    let d = wait_available(&fake, "web");
    assert_eq!(d["status"]["readyReplicas"], 1);
    assert_eq!(d["status"]["availableReplicas"], 1);
    assert_eq!(d["status"]["updatedReplicas"], 1);
    assert!(d["status"].get("unavailableReplicas").is_none());

    let pods = pods_of(&fake, "web");
    assert_eq!(pods.len(), 1);
    assert!(pods[0]["metadata"]["labels"]["pod-template-hash"].is_string());
    assert_eq!(
        pods[0]["metadata"]["ownerReferences"][0]["kind"],
        "ReplicaSet"
    );

    let slice = wait_for(Duration::from_secs(5), "ready endpoint", || {
        let (_, list) = client.ok(
            "GET",
            "/apis/discovery.k8s.io/v1/namespaces/ns1/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dweb",
            None,
        );
        let slice = list["items"].get(0)?.clone();
        (slice["endpoints"][0]["conditions"]["ready"] == true).then_some(slice)
    });
    assert_eq!(slice["ports"][0]["port"], 8080);

    // A spec change is a new generation and a new ReplicaSet.
    let (status, patched) = client.ok(
        "PATCH",
        &format!("{DEPLOYMENTS}/web"),
        Some(&json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "img:2"}]}}}})),
    );
    assert_eq!(status, 200);
    assert_eq!(patched["metadata"]["generation"], 2);
    wait_available(&fake, "web");
    wait_for(Duration::from_secs(5), "old pods gone", || {
        let pods = pods_of(&fake, "web");
        (pods.len() == 1 && pods[0]["spec"]["containers"][0]["image"] == "img:2").then_some(())
    });
    assert_eq!(fake.objects("replicasets").len(), 2);

    // Deleting the deployment collects its ReplicaSets and pods.
    assert_eq!(
        client.ok("DELETE", &format!("{DEPLOYMENTS}/web"), None).0,
        200
    );
    wait_for(Duration::from_secs(5), "pods collected", || {
        (fake.objects("pods").is_empty() && fake.objects("replicasets").is_empty()).then_some(())
    });
}

/// Starts one deployment under `behaviour` and returns its first pod once `done` says so.
fn pod_under(behaviour: PodBehaviour, done: impl Fn(&Value) -> bool) -> (KubeFake, Value) {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    fake.set_deployment_behaviour("ns1", "app", behaviour);
    assert_eq!(
        client
            .ok(
                "POST",
                DEPLOYMENTS,
                Some(&deployment("app-1", 1, "Recreate", "img:1"))
            )
            .0,
        201
    );
    let pod = wait_for(Duration::from_secs(5), "pod state", || {
        pods_of(&fake, "app-1").into_iter().find(|p| done(p))
    });
    (fake, pod)
}

#[test]
fn unschedulable_pods_say_so() {
    let (fake, pod) = pod_under(PodBehaviour::Unschedulable, |p| {
        p["status"]["conditions"][0]["reason"] == "Unschedulable"
    });
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(pod["status"]["conditions"][0]["type"], "PodScheduled");
    assert_eq!(pod["status"]["conditions"][0]["status"], "False");
    let d = fake.get(&format!("{DEPLOYMENTS}/app-1")).unwrap();
    assert!(d["status"].get("readyReplicas").is_none());
}

#[test]
fn image_pull_failures_back_off() {
    let waiting = |p: &Value, reason: &str| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == reason
    };
    let (fake, _) = pod_under(PodBehaviour::ImagePullBackOff, |p| {
        waiting(p, "ErrImagePull")
    });
    wait_for(Duration::from_secs(5), "back-off", || {
        pods_of(&fake, "app-1")
            .iter()
            .any(|p| waiting(p, "ImagePullBackOff"))
            .then_some(())
    });
}

#[test]
fn quota_refusals_show_on_the_replica_set() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    fake.set_deployment_behaviour("ns1", "app", PodBehaviour::QuotaExceeded);
    assert_eq!(
        client
            .ok(
                "POST",
                DEPLOYMENTS,
                Some(&deployment("app-1", 1, "Recreate", "img:1"))
            )
            .0,
        201
    );
    let rs = wait_for(Duration::from_secs(5), "ReplicaFailure", || {
        fake.objects("replicasets")
            .into_iter()
            .find(|rs| condition(rs, "ReplicaFailure").is_some())
    });
    let failure = condition(&rs, "ReplicaFailure").unwrap();
    assert_eq!(failure["reason"], "FailedCreate");
    assert!(failure["message"]
        .as_str()
        .unwrap()
        .contains("exceeded quota"));
    assert!(pods_of(&fake, "app-1").is_empty());
}

// Pod Security admission, as a real API server with `restricted` enforced: a template that
// breaks the profile gets no Pod, and its ReplicaSet reports FailedCreate naming the checks;
// a compliant one runs. Namespaces without the label admit anything.
#[test]
fn pod_security_restricted_refuses_a_non_compliant_template_on_its_replica_set() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    let (status, _) = client.ok(
        "POST",
        "/api/v1/namespaces",
        Some(&json!({"metadata": {"name": "ns1",
            "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})),
    );
    assert_eq!(status, 201);
    let plain = deployment("plain", 1, "Recreate", "img:1");
    assert_eq!(client.ok("POST", DEPLOYMENTS, Some(&plain)).0, 201);
    let rs = wait_for(Duration::from_secs(5), "FailedCreate", || {
        fake.objects("replicasets")
            .into_iter()
            .find(|rs| condition(rs, "ReplicaFailure").is_some())
    });
    let failure = condition(&rs, "ReplicaFailure").unwrap();
    assert_eq!(failure["reason"], "FailedCreate");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.contains("violates PodSecurity \"restricted:latest\""),
        "{message}"
    );
    for check in [
        "allowPrivilegeEscalation",
        "runAsNonRoot",
        "seccompProfile",
        "capabilities",
    ] {
        assert!(message.contains(check), "{check}: {message}");
    }
    assert!(pods_of(&fake, "plain").is_empty());

    let mut hardened = deployment("hardened", 1, "Recreate", "img:1");
    hardened["spec"]["template"]["spec"]["securityContext"] =
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
    hardened["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    assert_eq!(client.ok("POST", DEPLOYMENTS, Some(&hardened)).0, 201);
    wait_available(&fake, "hardened");
}

#[test]
fn held_failures_carry_the_termination_message() {
    let (_fake, pod) = pod_under(PodBehaviour::HeldFailure("CONFIG_INVALID".into()), |p| {
        p["status"]["containerStatuses"][0]["lastState"]["terminated"].is_object()
    });
    let status = &pod["status"]["containerStatuses"][0];
    assert_eq!(
        status["lastState"]["terminated"]["message"],
        "CONFIG_INVALID"
    );
    assert_eq!(status["lastState"]["terminated"]["reason"], "Error");
    assert!(status["restartCount"].as_i64().unwrap() > 0);
    assert_eq!(status["ready"], false);
}

#[test]
fn never_ready_pods_run_unready() {
    let (fake, pod) = pod_under(PodBehaviour::NeverReady, |p| {
        p["status"]["phase"] == "Running"
    });
    assert_eq!(pod["status"]["containerStatuses"][0]["ready"], false);
    let d = fake.get(&format!("{DEPLOYMENTS}/app-1")).unwrap();
    assert_eq!(condition(&d, "Available").unwrap()["status"], "False");
}

/// Pods of deployment `app-1` under `behaviour` whose container declares port 8080, once one
/// is Running.
fn serving_pod(fake: &KubeFake, client: &Client, behaviour: PodBehaviour) -> Value {
    fake.set_deployment_behaviour("ns1", "app", behaviour);
    let mut d = deployment("app-1", 1, "Recreate", "img:1");
    d["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"name": "http", "containerPort": 8080, "protocol": "TCP"}]);
    assert_eq!(client.ok("POST", DEPLOYMENTS, Some(&d)).0, 201);
    wait_for(Duration::from_secs(5), "a running pod", || {
        pods_of(fake, "app-1")
            .into_iter()
            .find(|p| p["status"]["phase"] == "Running")
    })
}

// The held harness of the seed's entrypoints (seed 004 lines 1063-1070, 5763-5770) runs
// unready and is never restarted; its `/readyz`, read through the API server's Pod proxy, is
// the container's plain 503 with the code alone. The API server's own answers stay Status
// objects: 404 for a missing Pod, 503 when nothing listens on the port.
#[test]
fn the_pod_proxy_reaches_a_held_harness_readyz_with_real_semantics() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    let pod = serving_pod(
        &fake,
        &client,
        PodBehaviour::HeldUnready("AUTHENTICATION_FAILED".into()),
    );
    let status = &pod["status"]["containerStatuses"][0];
    assert_eq!(status["ready"], false);
    assert_eq!(status["restartCount"], 0);
    assert!(status["state"]["running"].is_object());
    let name = pod["metadata"]["name"].as_str().unwrap();
    let base = format!("/api/v1/namespaces/ns1/pods/{name}");

    let (code, content_type, body) = client.raw(&format!("{base}:8080/proxy/readyz"));
    assert_eq!((code, body.as_str()), (503, "AUTHENTICATION_FAILED"));
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    // No port: the first one the Pod declares.
    assert_eq!(client.raw(&format!("{base}/proxy/readyz")).0, 503);
    assert_eq!(
        client.raw(&format!("{base}:8080/proxy/livez")),
        (200, "text/plain; charset=utf-8".into(), "ok".into())
    );

    let (code, body) = client.ok("GET", &format!("{base}:9090/proxy/readyz"), None);
    assert_eq!(code, 503);
    assert_status(&body, 503, "ServiceUnavailable");
    let (code, body) = client.ok(
        "GET",
        "/api/v1/namespaces/ns1/pods/missing:8080/proxy/readyz",
        None,
    );
    assert_eq!(code, 404);
    assert_status(&body, 404, "NotFound");
    assert_eq!(body["details"]["name"], "missing");
    let (code, body) = client.ok("GET", &format!("{base}:x:y:z/proxy/readyz"), None);
    assert_eq!(code, 400);
    assert_status(&body, 400, "BadRequest");
    // The proxy is authenticated like every path.
    let anonymous = Client {
        token: None,
        ..Client::new(&fake)
    };
    assert_eq!(anonymous.raw(&format!("{base}:8080/proxy/readyz")).0, 401);
}

// A ready harness answers 200; a terminated one (a termination-log held failure) listens on
// nothing, so the API server answers its own 503 Status, never a code.
#[test]
fn the_pod_proxy_answers_ready_and_terminated_containers_as_a_cluster_does() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    let pod = serving_pod(&fake, &client, PodBehaviour::Ready);
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let readyz = format!("/api/v1/namespaces/ns1/pods/{name}:8080/proxy/readyz");
    wait_for(Duration::from_secs(5), "ready", || {
        (client.raw(&readyz).0 == 200).then_some(())
    });
    fake.set_deployment_behaviour(
        "ns1",
        "app",
        PodBehaviour::HeldFailure("LOGIN_FAILED".into()),
    );
    let (code, body) = wait_for(Duration::from_secs(5), "terminated", || {
        let (code, body) = client.ok("GET", &readyz, None);
        (code == 503).then_some((code, body))
    });
    assert_eq!(code, 503);
    assert_status(&body, 503, "ServiceUnavailable");
}

#[test]
fn recreate_removes_old_pods_before_new_ones_and_scale_to_zero_waits_for_termination() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    assert_eq!(
        client
            .ok(
                "POST",
                DEPLOYMENTS,
                Some(&deployment("gw", 1, "Recreate", "img:1"))
            )
            .0,
        201
    );
    wait_available(&fake, "gw");

    client.ok(
        "PATCH",
        &format!("{DEPLOYMENTS}/gw"),
        Some(&json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "img:2"}]}}}})),
    );
    // Until the new pod is ready, never an old and a new pod at once.
    wait_for(Duration::from_secs(5), "rolled", || {
        let pods = pods_of(&fake, "gw");
        let images: Vec<&str> = pods
            .iter()
            .map(|p| p["spec"]["containers"][0]["image"].as_str().unwrap())
            .collect();
        assert!(
            !(images.contains(&"img:1") && images.contains(&"img:2")),
            "{images:?}"
        );
        (images == ["img:2"] && pods[0]["status"]["phase"] == "Running").then_some(())
    });

    client.ok(
        "PATCH",
        &format!("{DEPLOYMENTS}/gw"),
        Some(&json!({"spec": {"replicas": 0}})),
    );
    let terminating = wait_for(Duration::from_secs(5), "pod terminating", || {
        pods_of(&fake, "gw")
            .into_iter()
            .find(|p| p["metadata"]["deletionTimestamp"].is_string())
    });
    assert!(terminating["metadata"]["deletionTimestamp"].is_string());
    wait_for(Duration::from_secs(5), "pods gone", || {
        pods_of(&fake, "gw").is_empty().then_some(())
    });
    let d = fake.get(&format!("{DEPLOYMENTS}/gw")).unwrap();
    assert!(d["status"].get("replicas").is_none(), "{d}");
}

#[test]
fn a_template_change_rolls_pods_carrying_the_new_env_and_held_old_pods_stay_until_released() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    let mut d = deployment("app", 1, "Recreate", "img:1");
    d["spec"]["template"]["spec"]["containers"][0]["env"] = json!([
        {"name": "KEEP", "value": "1"},
        {"name": "DROP", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]);
    assert_eq!(client.ok("POST", DEPLOYMENTS, Some(&d)).0, 201);
    wait_available(&fake, "app");
    let envs = |p: &Value| -> Vec<String> {
        p["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    let old = pods_of(&fake, "app");
    assert_eq!(old.len(), 1);
    assert_eq!(envs(&old[0]), ["KEEP", "DROP"]);

    fake.hold_terminating_pods();
    let (_, mut current) = client.ok("GET", &format!("{DEPLOYMENTS}/app"), None);
    current["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "KEEP", "value": "1"}]);
    assert_eq!(
        client
            .ok("PUT", &format!("{DEPLOYMENTS}/app"), Some(&current))
            .0,
        200
    );
    // The old Pod terminates with the old template's env and is held; Recreate starts no new
    // Pod meanwhile, and the Deployment is not complete.
    wait_for(Duration::from_secs(5), "the old pod terminating", || {
        pods_of(&fake, "app")
            .into_iter()
            .find(|p| p["metadata"]["deletionTimestamp"].is_string())
    });
    let held = wait_for(Duration::from_secs(5), "the rollout held", || {
        let d = fake.get(&format!("{DEPLOYMENTS}/app"))?;
        (d["status"]["observedGeneration"] == d["metadata"]["generation"]).then_some(d)
    });
    assert_ne!(
        condition(&held, "Progressing").unwrap()["reason"],
        "NewReplicaSetAvailable"
    );
    let pods = pods_of(&fake, "app");
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(pods[0]["metadata"]["name"], old[0]["metadata"]["name"]);
    assert_eq!(envs(&pods[0]), ["KEEP", "DROP"]);

    fake.release_terminating_pods();
    wait_available(&fake, "app");
    let pods = pods_of(&fake, "app");
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_ne!(pods[0]["metadata"]["name"], old[0]["metadata"]["name"]);
    assert_eq!(envs(&pods[0]), ["KEEP"]);
}

#[test]
fn a_deleted_deployments_replica_sets_and_pods_go_later_by_garbage_collection() {
    // As on a real cluster: deleting a Deployment (Background propagation) removes only the
    // Deployment in that request; its ReplicaSet and Pods, owned through ownerReferences, are
    // collected a moment later, the Pods gracefully.
    let fake = KubeFake::start(FakeOptions {
        gc_delay: Duration::from_millis(400),
        pod_termination: Duration::from_millis(300),
        ..FakeOptions::default()
    });
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    client.ok(
        "POST",
        DEPLOYMENTS,
        Some(&deployment("web", 2, "RollingUpdate", "img:1")),
    );
    wait_available(&fake, "web");
    let (status, _) = client.ok(
        "DELETE",
        &format!("{DEPLOYMENTS}/web?propagationPolicy=Background"),
        None,
    );
    assert_eq!(status, 200);
    assert!(fake.get(&format!("{DEPLOYMENTS}/web")).is_none());
    let (_, sets) = client.ok("GET", "/apis/apps/v1/namespaces/ns1/replicasets", None);
    assert_eq!(sets["items"].as_array().unwrap().len(), 1, "{sets}");
    let (_, pods) = client.ok("GET", "/api/v1/namespaces/ns1/pods", None);
    let pods = pods["items"].as_array().unwrap().clone();
    assert_eq!(pods.len(), 2);
    assert!(pods
        .iter()
        .all(|p| p["metadata"].get("deletionTimestamp").is_none()));
    // Then the collector: the ReplicaSet goes, its Pods terminate and go.
    wait_for(Duration::from_secs(5), "replica set collected", || {
        fake.objects("replicasets").is_empty().then_some(())
    });
    wait_for(Duration::from_secs(5), "pods collected", || {
        pods_of(&fake, "web").is_empty().then_some(())
    });
}

#[test]
fn injected_throttling_and_unavailability_are_answered_then_consumed() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    fake.inject(Inject {
        method: Some("GET"),
        path_prefix: "/version".into(),
        times: 1,
        action: Action::TooMany {
            retry_after_secs: 2,
        },
    });
    fake.inject(Inject {
        method: None,
        path_prefix: "/api/v1/namespaces".into(),
        times: 2,
        action: Action::Status(503),
    });
    let mut request = ureq::http::Request::builder()
        .uri(format!("{}/version", fake.url()))
        .header("Authorization", format!("Bearer {}", fake.token()))
        .body(())
        .unwrap();
    *request.method_mut() = ureq::http::Method::GET;
    let response = client.agent.run(request).unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers().get("Retry-After").unwrap(), "2");
    assert_eq!(client.ok("GET", "/version", None).0, 200);

    for _ in 0..2 {
        let (status, body) = client.ok("GET", "/api/v1/namespaces", None);
        assert_eq!(status, 503);
        assert_status(&body, 503, "ServiceUnavailable");
    }
    assert_eq!(client.ok("GET", "/api/v1/namespaces", None).0, 200);
}

#[test]
fn a_stalled_request_is_cut_off_by_the_client_timeout() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client {
        agent: agent(&fake.ca_pem(), None, Duration::from_millis(300)),
        base: fake.url(),
        token: Some(fake.token()),
    };
    fake.inject(Inject {
        method: None,
        path_prefix: "/api".into(),
        times: 1,
        action: Action::Stall,
    });
    let started = Instant::now();
    let e = client.call("GET", "/api/v1/namespaces", None).unwrap_err();
    assert!(matches!(e, ureq::Error::Timeout(_)), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(fake.requests()[0].status, 0);
    // The fake still answers others, and drops without waiting for the stalled one.
    assert_eq!(client.ok("GET", "/version", None).0, 200);
}

#[test]
fn access_reviews_answer_what_was_denied() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    fake.deny_access("create", "deployments");
    let review = |verb: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"verb": verb, "resource": "deployments", "group": "apps", "namespace": "ns1"}}})
    };
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let (status, body) = client.ok("POST", path, Some(&review("create")));
    assert_eq!(status, 201);
    assert_eq!(body["status"]["allowed"], false);
    assert_eq!(
        client.ok("POST", path, Some(&review("get"))).1["status"]["allowed"],
        true
    );
}

#[test]
fn seeded_objects_are_served() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    fake.put_object(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "foreign"}}),
    );
    fake.put_object(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/foreign/rolebindings",
        json!({"metadata": {"name": "tenant"}, "roleRef": {"kind": "ClusterRole", "name": "edit"}, "subjects": []}),
    );
    let (status, rb) = client.ok(
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/foreign/rolebindings/tenant",
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(rb["kind"], "RoleBinding");
    assert_eq!(
        fake.get("/api/v1/namespaces/foreign").unwrap()["status"]["phase"],
        "Active"
    );
}

#[test]
fn latency_applies_to_every_request_and_injected_latency_adds_to_it() {
    let fake = KubeFake::start(FakeOptions {
        latency: Duration::from_millis(50),
        ..FakeOptions::default()
    });
    let client = Client::new(&fake);
    let started = Instant::now();
    assert_eq!(client.ok("GET", "/version", None).0, 200);
    assert!(started.elapsed() >= Duration::from_millis(50));
    fake.inject(Inject {
        method: Some("GET"),
        path_prefix: "/version".into(),
        times: 1,
        action: Action::Latency(Duration::from_millis(200)),
    });
    let started = Instant::now();
    assert_eq!(client.ok("GET", "/version", None).0, 200);
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[test]
fn strategic_merge_patches_merge_and_replace_keeps_the_servers_status() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    assert_eq!(
        client
            .ok(
                "POST",
                DEPLOYMENTS,
                Some(&deployment("web", 1, "RollingUpdate", "img:1"))
            )
            .0,
        201
    );
    let available = wait_available(&fake, "web");
    let request = ureq::http::Request::builder()
        .method("PATCH")
        .uri(format!("{}{DEPLOYMENTS}/web", fake.url()))
        .header("Authorization", format!("Bearer {}", fake.token()))
        .header("Content-Type", "application/strategic-merge-patch+json")
        .body(json!({"metadata": {"annotations": {"a": "1"}}}).to_string())
        .unwrap();
    let mut response = client.agent.run(request).unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let patched: Value = response.body_mut().read_json().unwrap();
    assert_eq!(patched["metadata"]["annotations"]["a"], "1");
    // Metadata alone is no new generation.
    assert_eq!(patched["metadata"]["generation"], 1);

    // A replace cannot write status: it belongs to the controller.
    let mut replace = patched.clone();
    replace["status"] = json!({"readyReplicas": 7});
    let (status, replaced) = client.ok("PUT", &format!("{DEPLOYMENTS}/web"), Some(&replace));
    assert_eq!(status, 200);
    assert_eq!(
        replaced["status"]["readyReplicas"],
        available["status"]["readyReplicas"]
    );
}

#[test]
fn chunked_request_bodies_are_read() {
    let fake = KubeFake::start(FakeOptions::default());
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    let body = json!({"metadata": {"name": "cm"}, "data": {"k": "v".repeat(40_000)}}).to_string();
    let mut reader = body.as_bytes();
    let request = ureq::http::Request::builder()
        .method("POST")
        .uri(format!("{}/api/v1/namespaces/ns1/configmaps", fake.url()))
        .header("Authorization", format!("Bearer {}", fake.token()))
        .header("Content-Type", "application/json")
        .body(ureq::SendBody::from_reader(&mut reader))
        .unwrap();
    let response = client.agent.run(request).unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let stored = fake.get("/api/v1/namespaces/ns1/configmaps/cm").unwrap();
    assert_eq!(stored["data"]["k"].as_str().unwrap().len(), 40_000);
}

#[test]
fn rolling_updates_start_new_pods_before_removing_old_ones() {
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(300),
        ..FakeOptions::default()
    });
    let client = Client::new(&fake);
    namespace(&client, "ns1");
    let created = client.ok(
        "POST",
        DEPLOYMENTS,
        Some(&deployment("web", 1, "RollingUpdate", "img:1")),
    );
    assert_eq!(created.0, 201);
    wait_available(&fake, "web");
    client.ok(
        "PATCH",
        &format!("{DEPLOYMENTS}/web"),
        Some(&json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "img:2"}]}}}})),
    );
    let image = |p: &Value| {
        p["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // While the new pod starts, the old one still serves.
    wait_for(Duration::from_secs(5), "old and new side by side", || {
        let pods = pods_of(&fake, "web");
        let old_live = pods
            .iter()
            .any(|p| image(p) == "img:1" && p["metadata"]["deletionTimestamp"].is_null());
        (old_live && pods.iter().any(|p| image(p) == "img:2")).then_some(())
    });
    wait_for(Duration::from_secs(5), "old pod gone", || {
        let pods = pods_of(&fake, "web");
        (pods.len() == 1 && image(&pods[0]) == "img:2").then_some(())
    });
}

// The rollout benchmark's accounting (`kube_fake::phases`): each request the Kubernetes driver
// makes in a rollout lands in the phase it serves, a scale to zero is a stop, not a workload
// write, and every phase is reported even when empty.
#[test]
fn every_rollout_request_is_counted_in_its_phase() {
    let request = |method: &str, path: &str, body: Option<Value>| Recorded {
        method: method.into(),
        path: path.into(),
        body,
        status: 200,
    };
    let ns = "/api/v1/namespaces/occ-ns-1";
    let apps = "/apis/apps/v1/namespaces/occ-ns-1";
    let cases = [
        (
            request("POST", &format!("{ns}/serviceaccounts"), None),
            "agent_objects",
        ),
        (
            request("POST", &format!("{ns}/services"), None),
            "agent_objects",
        ),
        (
            request("POST", &format!("{ns}/persistentvolumeclaims"), None),
            "agent_objects",
        ),
        (
            request(
                "POST",
                "/apis/networking.k8s.io/v1/namespaces/occ-ns-1/networkpolicies",
                None,
            ),
            "agent_objects",
        ),
        (
            request("POST", &format!("{apps}/deployments"), None),
            "workload_writes",
        ),
        (
            request("PUT", &format!("{apps}/deployments/agent-a-gateway"), None),
            "workload_writes",
        ),
        (
            request(
                "PATCH",
                &format!("{apps}/deployments/agent-a-r1"),
                Some(json!({"spec": {"replicas": 1}})),
            ),
            "workload_writes",
        ),
        (
            request(
                "PATCH",
                &format!("{apps}/deployments/agent-a-r1"),
                Some(json!({"spec": {"replicas": 0}})),
            ),
            "stops_and_deletes",
        ),
        (
            request(
                "GET",
                &format!("{apps}/deployments?limit=500&labelSelector=occ.agent%3Da"),
                None,
            ),
            "rollout_reads",
        ),
        (
            request("GET", &format!("{apps}/deployments/agent-a-gateway"), None),
            "rollout_reads",
        ),
        (
            request("GET", &format!("{ns}/pods?labelSelector=x"), None),
            "pod_reads",
        ),
        (
            request("GET", &format!("{ns}/pods/p-1:8080/proxy/readyz"), None),
            "pod_reads",
        ),
        (
            request("GET", &format!("{apps}/replicasets?labelSelector=x"), None),
            "pod_reads",
        ),
        (
            request(
                "GET",
                "/apis/discovery.k8s.io/v1/namespaces/occ-ns-1/endpointslices",
                None,
            ),
            "pod_reads",
        ),
        (
            request("GET", &format!("{ns}/services/agent-a"), None),
            "route",
        ),
        (
            request("PATCH", &format!("{ns}/services/agent-a"), None),
            "route",
        ),
        (
            request(
                "GET",
                &format!("{ns}/serviceaccounts?limit=500&labelSelector=occ.installation%3Di"),
                None,
            ),
            "known_for_recheck",
        ),
        (
            request("GET", &format!("{ns}/services?labelSelector=x"), None),
            "known_for_recheck",
        ),
        (
            request("DELETE", &format!("{apps}/deployments/agent-a-r1"), None),
            "stops_and_deletes",
        ),
        (
            request("GET", "/api/v1/namespaces?labelSelector=x", None),
            "namespace",
        ),
        (request("GET", ns, None), "namespace"),
        (
            request(
                "GET",
                "/apis/rbac.authorization.k8s.io/v1/namespaces/occ-ns-1/rolebindings/occ-tenant",
                None,
            ),
            "namespace",
        ),
        (request("GET", "/version", None), "other"),
    ];
    for (r, expected) in &cases {
        assert_eq!(
            crate::kube_fake::phase(r),
            *expected,
            "{} {}",
            r.method,
            r.path
        );
    }
    let all: Vec<Recorded> = cases.iter().map(|(r, _)| r.clone()).collect();
    let counts = crate::kube_fake::phases(&all);
    assert_eq!(counts.len(), crate::kube_fake::PHASES.len());
    assert_eq!(counts.values().sum::<usize>(), cases.len());
    assert_eq!(counts["agent_objects"], 4);
    assert_eq!(counts["stops_and_deletes"], 2);
    assert_eq!(
        crate::kube_fake::phases(&[])["route"],
        0,
        "an empty phase is reported"
    );
}
