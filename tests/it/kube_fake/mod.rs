//! A Kubernetes API server fake for the integration tests (test-only; never reaches a real
//! cluster). It owns a TLS listener on 127.0.0.1 with a per-run CA, HTTP/1.1 keep-alive
//! connections (one named thread each), bearer-token and client-certificate authentication,
//! failure injection, a request log, and a controller thread that plays the deployment,
//! ReplicaSet, EndpointSlice and garbage collectors, namespace termination and a kubelet.
//! GETs through the Pod proxy subresource reach the Pods' "containers" (`proxy`).
//!
//! It keeps the semantics the Kubernetes Compute Driver depends on: global resourceVersions,
//! 409 Conflict/AlreadyExists, 404 NotFound, 422 Invalid names, 403 NamespaceTerminating,
//! 401 Unauthorized, every error a `Status` object; merge patches; graceful deletion of pods and
//! namespaces; Deployment status as the real controller writes it (zero counts omitted); a
//! rollout per template change (a new ReplicaSet whose Pods carry the new template, the old
//! Pods terminated), whose terminating Pods a test can hold (`hold_terminating_pods`).
//! A second DELETE of a terminating namespace answers 409 Conflict, as a real server does; every
//! path, `/version` included, needs authentication.
//! Deliberate simplifications: Foreground deletion is treated as Background (the owner goes at
//! once, dependents follow); no watch, no `limit`/`continue` paging (lists are whole), no JSON
//! patch, no set-based label selectors (`in`, `notin`); Secret and ConfigMap references are not
//! validated.
//!
//! Threads: the acceptor, one per connection and the controller, all joined on drop, stopped by
//! the `stop` flag (connections also by shutting their sockets).

#![allow(dead_code)] // The public API is shared by test modules that each use a subset.

mod controller;
/// The driver file the Kubernetes tests and the rollout benchmark use: docs/kubernetes.md's
/// example with test images, its client-side rate limit far above the default 20/40.
pub const DRIVER_FILE: &str = r#"{
  "tenantRoleBinding": "occ-tenant",
  "tokenAudience": "occ-agent",
  "qps": 1000,
  "burst": 1000,
  "harnesses": [
    {"id": "codex", "version": "1.0.0", "mode": "dedicated", "image": "registry.test/codex:1.0.0"},
    {"id": "openclaw", "version": "1.0.0", "mode": "embedded", "image": "registry.test/openclaw:1.0.0"}
  ],
  "gatewayImage": "registry.test/gateway:1.0.0",
  "workspaceSetupImage": "registry.test/setup:1.0.0"
}"#;

#[allow(unused_imports)] // The rollout bench shares this module and binds every claim.
pub use controller::UNBOUND_STORAGE_CLASS;
mod proxy;
mod psa;
mod store;
pub mod tls;

use parking_lot::{Condvar, Mutex};
use rustls::{ServerConnection, StreamOwned};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use store::{parse_path, ApiError, Store};

/// Timings of the fake cluster.
#[derive(Clone, Debug)]
pub struct FakeOptions {
    /// Added to every request before it is answered.
    pub latency: Duration,
    /// How long a deleted namespace stays Terminating before it and its content vanish.
    pub terminating_for: Duration,
    /// How long a deleted pod keeps its deletionTimestamp before it vanishes.
    pub pod_termination: Duration,
    /// How long a created pod takes to reach its behaviour's state (Ready by default).
    pub pod_start: Duration,
    /// How long the garbage collector takes to delete an object whose owners are gone: a
    /// deleted Deployment's ReplicaSets and Pods outlive the request that deleted it.
    pub gc_delay: Duration,
    /// Whether the kubelet resolves a container's `secretKeyRef` values against the stored
    /// Secrets, a missing Secret or key leaving it waiting `CreateContainerConfigError` as a
    /// kubelet does. Off by default: most tests never create the Secrets their workloads name.
    pub resolve_secret_refs: bool,
}

impl Default for FakeOptions {
    fn default() -> Self {
        FakeOptions {
            latency: Duration::ZERO,
            terminating_for: Duration::from_millis(300),
            pod_termination: Duration::from_millis(200),
            pod_start: Duration::from_millis(100),
            gc_delay: Duration::from_millis(100),
            resolve_secret_refs: false,
        }
    }
}

/// How the pods of matching deployments behave once started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodBehaviour {
    Ready,
    /// Pending, PodScheduled=False reason Unschedulable.
    Unschedulable,
    /// Waiting with ErrImagePull, then ImagePullBackOff.
    ImagePullBackOff,
    /// No pods: the ReplicaSet reports ReplicaFailure/FailedCreate "exceeded quota".
    QuotaExceeded,
    /// The container terminated with reason Error and this termination message; never ready.
    HeldFailure(String),
    /// Running, never ready, never restarted (restartCount 0): the harness holds a failure
    /// and its `/readyz` answers 503 with this code alone as a plain-text body.
    HeldUnready(String),
    /// Running, never ready.
    NeverReady,
    /// Running, never ready, and the Deployment controller has given up on the rollout: its
    /// `Progressing` condition is False with reason `ProgressDeadlineExceeded`, as once
    /// `progressDeadlineSeconds` passed without progress.
    ProgressDeadlineExceeded,
    /// The pod's `workspace-setup` init container writes `WORKSPACE_SETUP_REFUSED` to its
    /// termination log and exits 1, every time the kubelet restarts it (SPEC WS5).
    SetupRefused,
    /// The pod's init container exits 1 with no termination message, again on every restart.
    SetupFailing,
}

/// The phases of a rollout's API requests, in pass order, as the rollout benchmark reports
/// them (`phases`).
pub const PHASES: &[&str] = &[
    "agent_objects",
    "workload_writes",
    "rollout_reads",
    "pod_reads",
    "route",
    "known_for_recheck",
    "stops_and_deletes",
    "namespace",
    "other",
];

/// The phase of one request: the Agent's own objects (ServiceAccount, Service create, Harness
/// claim, NetworkPolicy, the Harness Service), workload writes (a Deployment created, replaced
/// or scaled up), rollout reads (a Deployment read or listed), Pod reads (Pods, ReplicaSets,
/// the held code, EndpointSlices), the route (the Agent Service read or patched), the 60 s
/// re-check of the Agents' own objects (a list of ServiceAccounts, Services, claims or
/// NetworkPolicies), stops and deletes (a scale to zero, a delete), namespace lookups
/// (namespaces, RoleBindings).
pub fn phase(request: &Recorded) -> &'static str {
    let path = request.path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    // `…/namespaces/<ns>/<resource>[/<name>[/<subresource>…]]`, or a cluster-scoped path.
    let (resource, named) = match segments.iter().rposition(|s| *s == "namespaces") {
        Some(i) if segments.len() > i + 2 => (segments[i + 2], segments.len() > i + 3),
        Some(_) => ("namespaces", segments.len() > 1),
        None => (segments.last().copied().unwrap_or_default(), false),
    };
    let method = request.method.as_str();
    match (resource, method) {
        (_, "DELETE") => "stops_and_deletes",
        ("deployments", "PATCH")
            if request
                .body
                .as_ref()
                .is_some_and(|b| b["spec"]["replicas"] == 0) =>
        {
            "stops_and_deletes"
        }
        ("deployments", "GET") => "rollout_reads",
        ("deployments", _) => "workload_writes",
        ("pods" | "replicasets" | "endpointslices", _) => "pod_reads",
        ("services", "POST") => "agent_objects",
        ("services", _) if named => "route",
        // A list of the Agents' own objects is the driver's 60 s re-check (`KNOWN_FOR`).
        ("services" | "serviceaccounts" | "persistentvolumeclaims" | "networkpolicies", "GET")
            if !named =>
        {
            "known_for_recheck"
        }
        ("serviceaccounts" | "persistentvolumeclaims" | "networkpolicies", _) => "agent_objects",
        ("namespaces" | "rolebindings", _) => "namespace",
        _ => "other",
    }
}

/// Requests per phase (`phase`), every phase of `PHASES` present.
pub fn phases(requests: &[Recorded]) -> std::collections::BTreeMap<&'static str, usize> {
    let mut counts: std::collections::BTreeMap<&'static str, usize> =
        PHASES.iter().map(|p| (*p, 0)).collect();
    for request in requests {
        *counts.entry(phase(request)).or_default() += 1;
    }
    counts
}

/// How a kubeconfig written by the fake authenticates.
#[derive(Clone, Debug)]
pub enum KubeconfigAuth {
    Token,
    /// The token in this file (written now, rewritten by `rotate_token`).
    TokenFile(PathBuf),
    ClientCertData,
    /// `client.crt`/`client.key` written next to the kubeconfig.
    ClientCertFiles,
}

/// One request as received, with the status answered (0: never answered, a stall).
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub method: String,
    /// The path with its query.
    pub path: String,
    pub body: Option<Value>,
    pub status: u16,
}

/// What an injection rule does to a matching request.
#[derive(Clone, Debug)]
pub enum Action {
    /// Answer this status with a `Status` body.
    Status(u16),
    /// Answer 429 with `Retry-After: N`.
    TooMany { retry_after_secs: u64 },
    /// Never answer; the connection is held until the fake drops.
    Stall,
    /// Delay, then answer normally.
    Latency(Duration),
    /// Carry the request out, then never answer: an answer lost on the way back.
    ApplyThenStall,
    /// Answer 403 as the ResourceQuota admission plugin does (`exceeded quota` in a Forbidden
    /// Status).
    QuotaExceeded,
    /// Answer this status with these bytes as an `application/json` body (the property tests'
    /// generated answers).
    Raw { status: u16, body: Vec<u8> },
}

/// A failure-injection rule, consumed after `times` matching requests.
#[derive(Clone, Debug)]
pub struct Inject {
    pub method: Option<&'static str>,
    pub path_prefix: String,
    pub times: usize,
    pub action: Action,
}

/// Everything the request handlers and the controller share, under one lock.
struct State {
    store: Store,
    token: String,
    token_files: Vec<PathBuf>,
    injections: Vec<Inject>,
    log: Vec<Recorded>,
    behaviours: Vec<(String, String, PodBehaviour)>,
    denied: Vec<(String, String)>,
}

/// A stop flag threads can sleep on.
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    fn set(&self) {
        *self.stopped.lock() = true;
        self.wake.notify_all();
    }

    fn is_set(&self) -> bool {
        *self.stopped.lock()
    }

    /// Sleeps `d` or until stopped; true when stopped.
    fn wait(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut stopped = self.stopped.lock();
        while !*stopped {
            if self.wake.wait_until(&mut stopped, deadline).timed_out() {
                break;
            }
        }
        *stopped
    }

    fn wait_forever(&self) {
        let mut stopped = self.stopped.lock();
        while !*stopped {
            self.wake.wait(&mut stopped);
        }
    }
}

struct Shared {
    state: Mutex<State>,
    opts: FakeOptions,
    stop: Stop,
    tls: Arc<rustls::ServerConfig>,
    /// Open connections: a socket handle to shut on drop, and the thread serving it.
    connections: Mutex<Vec<(TcpStream, JoinHandle<()>)>>,
}

pub struct KubeFake {
    shared: Arc<Shared>,
    addr: SocketAddr,
    ca_pem: String,
    client_cert: (String, String),
    acceptor: Option<JoinHandle<()>>,
    controller: Option<JoinHandle<()>>,
}

fn new_token(store: &mut Store) -> String {
    // A planted credential: the canary scan proves no log line carries it.
    format!(
        "{}-{:016x}",
        crate::canary::canary("kube-token"),
        store.next_random()
    )
}

impl KubeFake {
    pub fn start(opts: FakeOptions) -> KubeFake {
        let pki = tls::Pki::generate();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind kube fake");
        let addr = listener.local_addr().expect("kube fake address");
        let mut store = Store::new();
        let token = new_token(&mut store);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                store,
                token,
                token_files: vec![],
                injections: vec![],
                log: vec![],
                behaviours: vec![],
                denied: vec![],
            }),
            opts,
            stop: Stop::default(),
            tls: pki.server_config.clone(),
            connections: Mutex::new(vec![]),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("kube-fake-accept".into())
                .spawn(move || accept(listener, &shared))
                .expect("spawn kube fake acceptor")
        };
        let controller = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("kube-fake-controller".into())
                .spawn(move || {
                    // Every 50th tick (about a second) reads everything, as a resync does.
                    let mut ticks: u64 = 0;
                    while !shared.stop.wait(Duration::from_millis(20)) {
                        ticks += 1;
                        let full = ticks.is_multiple_of(50);
                        let now = Instant::now();
                        let scope = {
                            let mut state = shared.state.lock();
                            controller::scope(&mut state.store, &shared.opts, now, full)
                        };
                        for ns in scope {
                            let mut state = shared.state.lock();
                            let State {
                                store, behaviours, ..
                            } = &mut *state;
                            controller::tick_namespace(store, &ns, &shared.opts, behaviours, now);
                        }
                    }
                })
                .expect("spawn kube fake controller")
        };
        KubeFake {
            shared,
            addr,
            ca_pem: pki.ca_pem,
            client_cert: (pki.client_cert_pem, pki.client_key_pem),
            acceptor: Some(acceptor),
            controller: Some(controller),
        }
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    pub fn token(&self) -> String {
        self.shared.state.lock().token.clone()
    }

    /// A new token, the only one accepted from now on; token files written by
    /// `write_kubeconfig` are rewritten with it.
    pub fn rotate_token(&self) -> String {
        let mut state = self.shared.state.lock();
        state.token = new_token(&mut state.store);
        for file in &state.token_files {
            std::fs::write(file, &state.token).expect("rewrite token file");
        }
        state.token.clone()
    }

    /// (certificate PEM, private key PEM) signed by the fake's client CA.
    pub fn client_cert_pem(&self) -> (String, String) {
        self.client_cert.clone()
    }

    /// A certificate authority that signed nothing the fake presents.
    pub fn other_ca_pem() -> String {
        tls::new_ca("unrelated-ca").0.pem()
    }

    /// Writes `dir/kubeconfig` (context and cluster `fake`, current) and returns its path.
    pub fn write_kubeconfig(&self, dir: &Path, auth: KubeconfigAuth) -> PathBuf {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let (cert, key) = self.client_cert_pem();
        let user = match auth {
            KubeconfigAuth::Token => format!("    token: {}", self.token()),
            KubeconfigAuth::TokenFile(path) => {
                let mut state = self.shared.state.lock();
                std::fs::write(&path, &state.token).expect("write token file");
                state.token_files.push(path.clone());
                format!("    tokenFile: {}", path.display())
            }
            KubeconfigAuth::ClientCertData => format!(
                "    client-certificate-data: {}\n    client-key-data: {}",
                b64(&cert),
                b64(&key)
            ),
            KubeconfigAuth::ClientCertFiles => {
                let (cert_path, key_path) = (dir.join("client.crt"), dir.join("client.key"));
                std::fs::write(&cert_path, cert).expect("write client certificate");
                std::fs::write(&key_path, key).expect("write client key");
                format!(
                    "    client-certificate: {}\n    client-key: {}",
                    cert_path.display(),
                    key_path.display()
                )
            }
        };
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: fake\n  user:\n{user}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n",
            self.url(),
            b64(&self.ca_pem),
        );
        let path = dir.join("kubeconfig");
        std::fs::write(&path, config).expect("write kubeconfig");
        path
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.state.lock().log.clone()
    }

    /// Every request but the GETs, as `METHOD path`.
    pub fn writes(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|r| r.method != "GET")
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    pub fn clear_requests(&self) {
        self.shared.state.lock().log.clear();
    }

    /// Forgets every injection rule not yet consumed.
    pub fn clear_injections(&self) {
        self.shared.state.lock().injections.clear();
    }

    pub fn inject(&self, rule: Inject) {
        self.shared.state.lock().injections.push(rule);
    }

    /// The stored object at an item path, if any.
    pub fn get(&self, api_path: &str) -> Option<Value> {
        let target = parse_path(api_path)?;
        let state = self.shared.state.lock();
        state
            .store
            .lookup(
                target.res,
                target.namespace.as_deref().unwrap_or(""),
                target.name.as_deref()?,
            )
            .cloned()
    }

    /// The operator-provisioned tenant RoleBinding `occ-tenant` in `namespace`, which the
    /// driver waits for before a Namespace is ready (SPEC C3).
    pub fn put_tenant_rolebinding(&self, namespace: &str) {
        self.put_object(
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings"),
            serde_json::json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "occ-tenant", "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"kind": "Group", "name": "tenant", "apiGroup": "rbac.authorization.k8s.io"}],
            }),
        );
    }

    /// Stores an object directly in a collection (created, or replaced when it exists),
    /// bypassing authentication and namespace checks.
    pub fn put_object(&self, api_path_of_collection: &str, object: Value) {
        let target = parse_path(api_path_of_collection)
            .unwrap_or_else(|| panic!("not a collection path: {api_path_of_collection}"));
        let mut state = self.shared.state.lock();
        let ns = target.namespace.as_deref();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let exists = state
            .store
            .lookup(target.res, ns.unwrap_or(""), &name)
            .is_some();
        let result = if exists {
            let mut object = object;
            if let Some(m) = object["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
            state
                .store
                .replace(target.res, ns.unwrap_or(""), &name, object)
        } else {
            state.store.create(target.res, ns, object, true)
        };
        if let Err(e) = result {
            panic!("put_object {api_path_of_collection}: {}", e.body);
        }
    }

    /// Deletes an object as a DELETE request would (a Pod gracefully: terminating, then gone,
    /// its ReplicaSet making another), bypassing authentication.
    pub fn delete_object(&self, api_path: &str) {
        let target = parse_path(api_path).unwrap_or_else(|| panic!("not a path: {api_path}"));
        let name = target
            .name
            .clone()
            .unwrap_or_else(|| panic!("not an object path: {api_path}"));
        let mut state = self.shared.state.lock();
        let ns = target.namespace.clone().unwrap_or_default();
        if let Err(e) = state.store.delete(target.res, &ns, &name) {
            panic!("delete_object {api_path}: {}", e.body);
        }
    }

    pub fn set_deployment_behaviour(&self, namespace: &str, name_prefix: &str, b: PodBehaviour) {
        let mut state = self.shared.state.lock();
        state
            .behaviours
            .retain(|(ns, p, _)| !(ns == namespace && p == name_prefix));
        state
            .behaviours
            .push((namespace.to_string(), name_prefix.to_string(), b));
        state.store.all_dirty = true;
    }

    /// Holds every terminating pod (deleted, scaled down or replaced by a rollout) until
    /// `release_terminating_pods`: it keeps its deletionTimestamp and its spec, so a test sees
    /// the intermediate state of a rollout, old Pods still present with the old template's
    /// environment while the Recreate strategy keeps the new ReplicaSet at zero.
    pub fn hold_terminating_pods(&self) {
        self.shared.state.lock().store.hold_terminating_pods = true;
    }

    /// Lets held terminating pods go: each vanishes once its `pod_termination` has passed.
    pub fn release_terminating_pods(&self) {
        let mut state = self.shared.state.lock();
        state.store.hold_terminating_pods = false;
        state.store.all_dirty = true;
    }

    /// SelfSubjectAccessReviews for this verb and resource (`pods/proxy` for a subresource)
    /// answer allowed=false.
    pub fn deny_access(&self, verb: &str, resource: &str) {
        self.shared
            .state
            .lock()
            .denied
            .push((verb.to_string(), resource.to_string()));
    }

    pub fn objects(&self, kind_plural: &'static str) -> Vec<Value> {
        let state = self.shared.state.lock();
        let all = state.store.all(kind_plural, None);
        all.iter().map(|o| Value::clone(o)).collect()
    }
}

impl Drop for KubeFake {
    fn drop(&mut self) {
        self.shared.stop.set();
        // Wake the acceptor from accept().
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let connections = std::mem::take(&mut *self.shared.connections.lock());
        for (socket, _) in &connections {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
        for (_, thread) in connections {
            let _ = thread.join();
        }
        if let Some(controller) = self.controller.take() {
            let _ = controller.join();
        }
    }
}

fn accept(listener: TcpListener, shared: &Arc<Shared>) {
    for (n, stream) in listener.incoming().enumerate() {
        if shared.stop.is_set() {
            return;
        }
        let Ok(stream) = stream else { continue };
        let Ok(handle) = stream.try_clone() else {
            continue;
        };
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("kube-fake-conn-{n}"))
                .spawn(move || serve_connection(&shared, stream))
                .expect("spawn kube fake connection")
        };
        let mut connections = shared.connections.lock();
        // Finished connections are joined here so the list stays short.
        let (done, open): (Vec<_>, Vec<_>) = std::mem::take(&mut *connections)
            .into_iter()
            .partition(|(_, t)| t.is_finished());
        *connections = open;
        connections.push((handle, thread));
        drop(connections);
        for (_, t) in done {
            let _ = t.join();
        }
    }
}

/// One parsed HTTP request.
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

type Tls = StreamOwned<ServerConnection, TcpStream>;

fn serve_connection(shared: &Shared, socket: TcpStream) {
    let Ok(conn) = ServerConnection::new(shared.tls.clone()) else {
        return;
    };
    // As a real API server (Go's net/http) does: no Nagle delay on small answers.
    let _ = socket.set_nodelay(true);
    let mut tls: Tls = StreamOwned::new(conn, socket);
    let mut buf = Vec::new();
    while !shared.stop.is_set() {
        let Some(request) = read_request(&mut tls, &mut buf) else {
            return;
        };
        let client_cert = tls.conn.peer_certificates().is_some_and(|c| !c.is_empty());
        let Some((status, headers, body)) = handle(shared, &request, client_cert) else {
            shared.stop.wait_forever();
            return;
        };
        let (content_type, body) = match body {
            Body::Json(value) => ("application/json", value.to_string().into_bytes()),
            Body::Text(text) => ("text/plain; charset=utf-8", text.into_bytes()),
            Body::Raw(bytes) => ("application/json", bytes),
        };
        let mut head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
            store::reason_for(status),
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        // One write, so head and body leave in one TLS record.
        let mut head = head.into_bytes();
        head.extend_from_slice(&body);
        let close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        if tls.write_all(&head).is_err() || tls.flush().is_err() || close {
            return;
        }
    }
}

/// Appends what the connection has to `buf`; None at EOF or error.
fn read_more(tls: &mut Tls, buf: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 16 * 1024];
    let n = tls.read(&mut chunk).ok()?;
    if n == 0 {
        return None;
    }
    buf.extend_from_slice(&chunk[..n]);
    Some(())
}

/// A chunked body: size line, data, CRLF; a zero size ends it (trailers are not expected).
fn read_chunked(tls: &mut Tls, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            read_more(tls, buf)?;
        };
        let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        while buf.len() < line_end + 2 + size + 2 {
            read_more(tls, buf)?;
        }
        body.extend_from_slice(&buf[line_end + 2..line_end + 2 + size]);
        buf.drain(..line_end + 2 + size + 2);
        if size == 0 {
            return Some(body);
        }
    }
}

/// Reads one request (head by httparse, body by Content-Length or chunked); None at EOF or error.
fn read_request(tls: &mut Tls, buf: &mut Vec<u8>) -> Option<Request> {
    let (head_len, mut request) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Request::new(&mut headers);
        if let httparse::Status::Complete(n) = parsed.parse(buf).ok()? {
            let request = Request {
                method: parsed.method?.to_string(),
                target: parsed.path?.to_string(),
                headers: parsed
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect(),
                body: vec![],
            };
            break (n, request);
        }
        read_more(tls, buf)?;
    };
    buf.drain(..head_len);
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    if chunked {
        request.body = read_chunked(tls, buf)?;
        return Some(request);
    }
    let length: usize = request
        .header("content-length")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < length {
        read_more(tls, buf)?;
    }
    request.body = buf.drain(..length).collect();
    Some(request)
}

/// An answer's body: the API server's own JSON, or a Pod's plain text through the proxy.
enum Body {
    Json(Value),
    Text(String),
    Raw(Vec<u8>),
}

type Answer = (u16, Vec<(&'static str, String)>, Body);

/// Latency, authentication, injection, then the API; records the outcome. None: stall.
fn handle(shared: &Shared, request: &Request, client_cert: bool) -> Option<Answer> {
    let recorded_body = serde_json::from_slice::<Value>(&request.body).ok();
    let record = |status: u16| {
        shared.state.lock().log.push(Recorded {
            method: request.method.clone(),
            path: request.target.clone(),
            body: recorded_body.clone(),
            status,
        })
    };
    if !shared.opts.latency.is_zero() && shared.stop.wait(shared.opts.latency) {
        return None;
    }
    let authorized = {
        let state = shared.state.lock();
        client_cert
            || request
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .is_some_and(|t| t.trim() == state.token)
    };
    if !authorized {
        record(401);
        let e = ApiError::plain(401, "Unauthorized");
        return Some((401, vec![], Body::Json(e.body)));
    }
    let action = take_injection(&mut shared.state.lock(), request);
    match action {
        Some(Action::Stall) => {
            record(0);
            return None;
        }
        Some(Action::Latency(d)) if shared.stop.wait(d) => return None,
        Some(Action::QuotaExceeded) => {
            record(403);
            let e = ApiError::plain(
                403,
                "persistentvolumeclaims \"x\" is forbidden: exceeded quota: storage, requested: requests.storage=1Gi, used: requests.storage=10Gi, limited: requests.storage=10Gi",
            );
            return Some((403, vec![], Body::Json(e.body)));
        }
        Some(Action::Raw { status, body }) => {
            record(status);
            return Some((status, vec![], Body::Raw(body)));
        }
        Some(Action::Status(code)) => {
            record(code);
            let e = ApiError::plain(code, &format!("injected failure {code}"));
            return Some((code, vec![], Body::Json(e.body)));
        }
        Some(Action::TooMany { retry_after_secs }) => {
            record(429);
            let mut e = ApiError::plain(429, "Too many requests, please try again later.");
            e.body["details"] = json!({"retryAfterSeconds": retry_after_secs});
            return Some((
                429,
                vec![("Retry-After", retry_after_secs.to_string())],
                Body::Json(e.body),
            ));
        }
        Some(Action::Latency(_)) | Some(Action::ApplyThenStall) | None => {}
    }
    let mut state = shared.state.lock();
    let (status, body) = match proxy::pod_proxy(&state.store, &state.behaviours, request) {
        Some(Ok((status, text))) => (status, Body::Text(text)),
        Some(Err(e)) => (e.code, Body::Json(e.body)),
        None => match api(&mut state, request) {
            Ok((status, value)) => (status, Body::Json(value)),
            Err(e) => (e.code, Body::Json(e.body)),
        },
    };
    state.log.push(Recorded {
        method: request.method.clone(),
        path: request.target.clone(),
        body: recorded_body,
        status,
    });
    if matches!(action, Some(Action::ApplyThenStall)) {
        return None;
    }
    Some((status, vec![], body))
}

fn take_injection(state: &mut State, request: &Request) -> Option<Action> {
    let i = state.injections.iter().position(|r| {
        r.times > 0
            && r.method
                .is_none_or(|m| m.eq_ignore_ascii_case(&request.method))
            && request.target.starts_with(&r.path_prefix)
    })?;
    let rule = &mut state.injections[i];
    rule.times -= 1;
    let action = rule.action.clone();
    if rule.times == 0 {
        state.injections.remove(i);
    }
    Some(action)
}

/// Decodes `%XX` and `+` in a query component.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Dispatches a request to the store; Ok is (status, body).
fn api(state: &mut State, request: &Request) -> Result<(u16, Value), ApiError> {
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((request.target.as_str(), ""));
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| percent_decode(v))
    };
    let method = request.method.as_str();
    let body = || -> Result<Value, ApiError> {
        serde_json::from_slice(&request.body)
            .map_err(|e| ApiError::bad_request(&format!("the body is not valid JSON: {e}")))
    };
    if path == "/version" && method == "GET" {
        return Ok((
            200,
            json!({"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake", "platform": "linux/amd64"}),
        ));
    }
    if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" && method == "POST" {
        let mut review = body()?;
        let attrs = &review["spec"]["resourceAttributes"];
        let verb = attrs["verb"].as_str().unwrap_or("");
        // A subresource is denied as RBAC names it: `pods/proxy`.
        let res = match attrs["subresource"].as_str().filter(|s| !s.is_empty()) {
            Some(sub) => format!("{}/{sub}", attrs["resource"].as_str().unwrap_or("")),
            None => attrs["resource"].as_str().unwrap_or("").to_string(),
        };
        let allowed = !state.denied.iter().any(|(v, r)| v == verb && *r == res);
        review["kind"] = json!("SelfSubjectAccessReview");
        review["apiVersion"] = json!("authorization.k8s.io/v1");
        review["status"] = if allowed {
            json!({"allowed": true})
        } else {
            json!({"allowed": false, "reason": "denied by the fake"})
        };
        return Ok((201, review));
    }
    let Some(target) = parse_path(path) else {
        return Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
            json!({}),
        ));
    };
    let store = &mut state.store;
    let ns = target.namespace.as_deref();
    let res = target.res;
    match (method, target.name.as_deref()) {
        ("GET", Some(name)) => Ok((200, store.get(res, ns.unwrap_or(""), name)?)),
        ("GET", None) => Ok((
            200,
            store.list(
                res,
                ns,
                param("labelSelector").as_deref(),
                param("fieldSelector").as_deref(),
            ),
        )),
        ("POST", None) => Ok((201, store.create(res, ns, body()?, false)?)),
        ("PUT", Some(name)) => Ok((200, store.replace(res, ns.unwrap_or(""), name, body()?)?)),
        ("PATCH", Some(name)) => {
            let content_type = request.header("content-type").unwrap_or("");
            if !content_type.starts_with("application/merge-patch+json")
                && !content_type.starts_with("application/strategic-merge-patch+json")
            {
                return Err(ApiError::plain(
                    415,
                    &format!("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (got {content_type})"),
                ));
            }
            Ok((200, store.patch(res, ns.unwrap_or(""), name, &body()?)?))
        }
        ("DELETE", Some(name)) => Ok((200, store.delete(res, ns.unwrap_or(""), name)?)),
        _ => Err(ApiError::plain(
            405,
            &format!(
                "the server does not allow this method on the requested resource ({method} {path})"
            ),
        )),
    }
}
