//! The Kubernetes Compute Driver (SPEC C3): Namespaces as labelled Kubernetes namespaces,
//! each Agent as a ServiceAccount, a Service, a NetworkPolicy and a shared single-replica
//! gateway, each dedicated revision as a hardened Harness Deployment behind that gateway.
//!
//! Expected flow: `ensure_namespace` creates (or adopts) the namespace, writes the
//! default-deny NetworkPolicy and waits, pending, for the operator's tenant RoleBinding;
//! `bind_agent` makes the Agent's ServiceAccount and Service exist;
//! `prepare_revision` writes a dedicated revision's Harness Deployment and Service (with the
//! Agent's NetworkPolicy and Harness claim) and points the gateway at it in one pass, then
//! observes both rollouts (an embedded revision runs inside the gateway, which it takes only
//! at activation); `activate_revision` points the Service at the
//! revision's gateway Pods; `stop_revision` scales the gateway, then the Harness, to zero and
//! stays pending until their Pods are gone; `retire_revision` deletes them;
//! `delete_namespace` deletes what the driver created; `withdraw_credential_source` writes a
//! revision's workload without one credential source's `secretKeyRef` and observes its Pods
//! until none carries it (SPEC E6). A revision's stored execution admission
//! is run only when `executionAdmissions` lists it, and a rejected active one is withdrawn by
//! its stop (SPEC Z1).
//!
//! Requests: a write's answer is the observation (a workload just written is pending without
//! a read); a pass reads the Agent's Deployments once (one list, or the embedded gateway once)
//! and its later steps use that read (`seen`, trusted by that pass only); the Agent Service's
//! route is remembered from the driver's own writes and reads (`routes`, `KNOWN_FOR`).
//!
//! Guarantees: every request checks the pass's cancel token first, is bounded by
//! `OCC_COMPUTE_REQUEST_TIMEOUT_MS` and is aborted when the claim is lost (`client`,
//! `compute::abortable`); waits are observations that come back pending, never loops
//! inside a pass; the driver never modifies or deletes an object without its installation's
//! labels, and never deletes an adopted namespace. Secret values are never read: workloads
//! reference Secrets by `secretKeyRef`.
//!
//! The contract lives in `contract`, the workloads in `workload`, the Agent's route in
//! `gateway`, namespace housekeeping in `namespace`, the Credential Gateway in `credentials` and
//! the egress policies in `egress`; this file holds the driver, its construction and the
//! request helpers they share.
//!
//! Errors: 404 on read and delete is absence; 409 `AlreadyExists` on create re-reads and
//! converges; 409 `Conflict` re-reads and retries once within the pass; a terminating
//! namespace is pending; a quota 403 waits; other 403s retry within the attempt budget (a
//! grant may still be propagating) and then fail `KUBERNETES_FORBIDDEN_<RESOURCE>`; 422 is
//! permanent; 429 and 5xx are transient (`client`).

mod contract;
mod credentials;
mod egress;
mod gateway;
mod namespace;
mod workload;

use super::client::error::{KubeError, KubeErrorKind};
use super::client::Client;
use super::manifests::{self, owned, stamped};
use super::names::{
    self, LABEL_AGENT, LABEL_COMPONENT, LABEL_INSTALLATION, LABEL_NAMESPACE, LABEL_REVISION,
};
use super::observe::{self, Rollout};
use super::sandbox;
use super::settings::Settings;
use crate::cancel::{CancelToken, PassMark};
use crate::compute::hooks::{HookSubject, LifecycleHooks, Phase};
use crate::compute::sandbox::{EgressRule, Sandbox, SandboxDriver};
use crate::compute::{
    execution_admission_unavailable, AdmissionUse, AgentSpec, ComputeDriver, ComputeError,
    CredentialAttachment, CredentialDetach, CredentialGateway, DriverPolicy, NamespaceObservation,
    NamespaceSpec, PreflightWarning, RevisionObservation, RevisionSpec, RuntimeCredentials,
    Withdrawal,
};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CORE: &str = "/api/v1";
const APPS: &str = "/apis/apps/v1";
const NETWORKING: &str = "/apis/networking.k8s.io/v1";
const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";
const DISCOVERY: &str = "/apis/discovery.k8s.io/v1";
const AUTHORIZATION: &str = "/apis/authorization.k8s.io/v1";
const NODE: &str = "/apis/node.k8s.io/v1";

/// Every (verb, group, resource) the driver uses; preflight asks a SelfSubjectAccessReview
/// for each (`pods/proxy` is the resource `pods`, subresource `proxy`).
pub const ACCESS: &[(&str, &str, &str)] = &[
    ("get", "", "namespaces"),
    ("list", "", "namespaces"),
    ("create", "", "namespaces"),
    ("patch", "", "namespaces"),
    ("delete", "", "namespaces"),
    ("get", "networking.k8s.io", "networkpolicies"),
    ("create", "networking.k8s.io", "networkpolicies"),
    ("update", "networking.k8s.io", "networkpolicies"),
    ("delete", "networking.k8s.io", "networkpolicies"),
    ("list", "networking.k8s.io", "networkpolicies"),
    ("get", "rbac.authorization.k8s.io", "rolebindings"),
    ("get", "", "serviceaccounts"),
    ("create", "", "serviceaccounts"),
    ("delete", "", "serviceaccounts"),
    ("list", "", "serviceaccounts"),
    ("get", "", "services"),
    ("create", "", "services"),
    ("patch", "", "services"),
    ("delete", "", "services"),
    ("list", "", "services"),
    ("get", "", "persistentvolumeclaims"),
    ("create", "", "persistentvolumeclaims"),
    ("delete", "", "persistentvolumeclaims"),
    ("list", "", "persistentvolumeclaims"),
    ("get", "apps", "deployments"),
    ("create", "apps", "deployments"),
    ("update", "apps", "deployments"),
    ("patch", "apps", "deployments"),
    ("delete", "apps", "deployments"),
    ("list", "apps", "deployments"),
    ("list", "apps", "replicasets"),
    ("list", "", "pods"),
    ("get", "", "pods/proxy"),
    ("list", "discovery.k8s.io", "endpointslices"),
    ("get", "node.k8s.io", "runtimeclasses"),
];

/// The Kubernetes Compute Driver.
pub struct KubernetesDriver {
    client: Client,
    settings: Settings,
    /// Kubernetes namespace names by Namespace id: a Namespace's name never changes, so one
    /// lookup per process is enough.
    namespaces: Mutex<HashMap<String, String>>,
    /// Paths of objects this driver created or found owned, and when: for `KNOWN_FOR` the
    /// Agent's ServiceAccount, Service and Harness claim are not read again on every pass,
    /// and an unknown object is created first (read only when it already exists).
    known: Mutex<HashMap<String, Instant>>,
    /// The Agent Services' selectors as this process last wrote or read them, and when: for
    /// `KNOWN_FOR` whether a Service routes a revision is answered from here, not read again
    /// on every pass (a route is only ever changed by a write whose answer lands here).
    routes: Mutex<HashMap<String, (Value, Instant)>>,
    /// Deployments by path as a pass last read or wrote them (`None`: a list showed none),
    /// trusted by that pass only: a later step of the pass does not read again what an earlier
    /// step just read or wrote, and the next pass reads afresh.
    seen: Mutex<HashMap<String, (PassMark, Option<Value>)>>,
    /// The workloads' `progressDeadlineSeconds`: past the worker's convergence deadline.
    progress_deadline_seconds: u64,
    /// A production worker's driver runs `PRODUCTION_HARNESSES` only.
    production: bool,
    /// The Installation's lifecycle hooks (SPEC H2, H3), given at construction.
    hooks: Arc<LifecycleHooks>,
    /// The Installation's Sandbox Driver, enforced through this driver (SPEC S1, S2), given at
    /// construction; `None` when the Installation selects none.
    sandbox: Option<Sandbox>,
}

/// How long an object the driver created or read is trusted to exist without a read: one
/// deleted behind the driver's back is created again within this time.
const KNOWN_FOR: Duration = Duration::from_secs(60);

/// Above this many remembered paths, stale ones are dropped.
const KNOWN_LIMIT: usize = 50_000;

/// A request failure as a Compute error: an RBAC 403 is a refusal on permissions naming the
/// resource (retried within the budget: a grant may still be propagating), everything else
/// follows `KubeError::into_compute`.
fn fail(e: KubeError, resource: &str) -> ComputeError {
    fail_within_quota(e, resource, "NAMESPACE_QUOTA_EXCEEDED")
}

/// `fail`, where a used-up quota waits with `quota_code` (the Pods' own code when Pods are
/// refused).
fn fail_within_quota(e: KubeError, resource: &str, quota_code: &'static str) -> ComputeError {
    if *e.kind() == KubeErrorKind::QuotaExceeded {
        // Only an authorization refusal is the operator's to fix for good: a used-up quota
        // waits.
        return ComputeError::pending(quota_code, "kubernetes", e.status())
            .with_reason("Forbidden")
            .with_request(e.diagnostic());
    }
    if *e.kind() == KubeErrorKind::Forbidden {
        let code = format!(
            "KUBERNETES_FORBIDDEN_{}",
            resource.to_ascii_uppercase().replace('.', "_")
        );
        return ComputeError::denied(&code, "kubernetes", e.status())
            .with_reason("Forbidden")
            .with_request(e.diagnostic());
    }
    e.into_compute("KUBERNETES_BAD_REQUEST")
}

fn not_owned() -> ComputeError {
    ComputeError::permanent("KUBERNETES_OBJECT_NOT_OWNED", "kubernetes", None)
}

/// A credential withdrawal the driver refuses for good (SPEC E6), awaiting the operator's
/// replay.
fn withdrawal_refused(code: &str) -> ComputeError {
    ComputeError::permanent(code, "kubernetes", None)
}

/// Pods still terminating after a stop: the stop yields (SPEC Z5), pending without spending
/// attempts and exempt from the convergence deadline.
fn draining() -> ComputeError {
    ComputeError::draining("kubernetes_pods_terminating").with_reason("PodsTerminating")
}

/// The runtime-failure evidence of a rollout the Deployment controller gave up on.
const PROGRESS_DEADLINE_EXCEEDED: &str = "PROGRESS_DEADLINE_EXCEEDED";

/// An observation of `revision` with nothing to report but readiness.
fn observation(revision: &RevisionSpec, ready: bool) -> RevisionObservation {
    RevisionObservation {
        namespace_id: revision.namespace_id.clone(),
        agent_id: revision.agent_id.clone(),
        revision_id: revision.revision_id.clone(),
        ready,
        pending_reason: None,
        runtime_failure: None,
        warnings: Vec::new(),
        repository_credential_material_missing: Vec::new(),
    }
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn selector(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The `beforeWorkloadStop` hooks of one stop or retirement (SPEC H3): asked once, just
/// before the first write that takes the revision's workload down, and not at all when there is
/// nothing left to take down. A refusal leaves every Pod running.
struct BeforeStop<'a> {
    driver: &'a KubernetesDriver,
    revision: &'a RevisionSpec,
    asked: std::cell::Cell<bool>,
}

impl<'a> BeforeStop<'a> {
    fn new(driver: &'a KubernetesDriver, revision: &'a RevisionSpec) -> BeforeStop<'a> {
        BeforeStop {
            driver,
            revision,
            asked: std::cell::Cell::new(false),
        }
    }

    fn ask(&self, cancel: &CancelToken) -> Result<(), ComputeError> {
        if !self.asked.get() {
            self.driver.hooks.run(
                Phase::BeforeWorkloadStop,
                &self.driver.workload_subject(self.revision),
                &[],
                cancel,
            )?;
            self.asked.set(true);
        }
        Ok(())
    }
}

impl KubernetesDriver {
    pub fn new(client: Client, settings: Settings) -> KubernetesDriver {
        KubernetesDriver {
            client: client.with_rate_limit(settings.qps, settings.burst),
            settings,
            namespaces: Mutex::new(HashMap::new()),
            known: Mutex::new(HashMap::new()),
            routes: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
            progress_deadline_seconds: manifests::DEFAULT_PROGRESS_DEADLINE_SECONDS,
            production: false,
            hooks: Arc::default(),
            sandbox: None,
        }
    }

    /// The same driver for a production worker: it runs dedicated `codex` and embedded
    /// `openclaw` only (`accepts_harness`).
    pub fn with_production(self, production: bool) -> KubernetesDriver {
        KubernetesDriver { production, ..self }
    }

    /// The same driver for a worker whose convergence deadline is `timeout`: Kubernetes is told
    /// to give up on a rollout a minute after the worker would, so a slow pull or a pending
    /// Pod stays a pending observation until the worker's own deadline decides (SPEC R5).
    /// Bounded by the field's int32 range.
    pub fn with_convergence_timeout(self, timeout: Duration) -> KubernetesDriver {
        KubernetesDriver {
            progress_deadline_seconds: (timeout.as_secs() + 60).min(i32::MAX as u64),
            ..self
        }
    }

    /// The same driver, running the Installation's lifecycle hooks (SPEC H2, H3): a driver is
    /// built with its hooks, before anything can call it.
    pub fn with_lifecycle_hooks(self, hooks: Arc<LifecycleHooks>) -> KubernetesDriver {
        KubernetesDriver { hooks, ..self }
    }

    /// The same driver, enforcing the Installation's Sandbox Driver, the built-in
    /// `kubernetes-sandbox` (SPEC S1, S2), when it selects one.
    pub fn with_sandbox(self, sandbox: Option<Sandbox>) -> KubernetesDriver {
        KubernetesDriver { sandbox, ..self }
    }

    /// What the hooks are asked about a revision's workload.
    fn workload_subject<'a>(&'a self, revision: &'a RevisionSpec) -> HookSubject<'a> {
        HookSubject {
            installation_id: &revision.installation_id,
            namespace_id: &revision.namespace_id,
            agent_id: Some(&revision.agent_id),
            revision_id: Some(&revision.revision_id),
            compute_driver_id: self.id(),
        }
    }

    /// The `beforeNamespaceDelete` hooks, before anything of the Namespace is deleted (SPEC
    /// H3); a refusal keeps the Namespace as it is.
    fn before_namespace_delete(
        &self,
        spec: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.hooks
            .run(
                Phase::BeforeNamespaceDelete,
                &self.namespace_subject(spec),
                &[],
                cancel,
            )
            .map(drop)
    }

    /// What the hooks are asked about a Namespace.
    fn namespace_subject<'a>(&'a self, spec: &'a NamespaceSpec) -> HookSubject<'a> {
        HookSubject {
            installation_id: &spec.installation_id,
            namespace_id: &spec.namespace_id,
            agent_id: None,
            revision_id: None,
            compute_driver_id: self.id(),
        }
    }

    fn is_known(&self, path: &str) -> bool {
        self.known
            .lock()
            .get(path)
            .is_some_and(|at| at.elapsed() < KNOWN_FOR)
    }

    /// Whether this process ever saw the object at `path` exist (however long ago): such an
    /// object is read first, not created first, when it is no longer known.
    fn was_known(&self, path: &str) -> bool {
        self.known.lock().contains_key(path)
    }

    /// The selector of the Agent Service at `path` as last written or read, within `KNOWN_FOR`.
    fn remembered_route(&self, path: &str) -> Option<Value> {
        self.routes
            .lock()
            .get(path)
            .filter(|(_, at)| at.elapsed() < KNOWN_FOR)
            .map(|(selector, _)| selector.clone())
    }

    /// Remembers the selector of the Agent Service `service` (a write's answer or a read).
    fn remember_route(&self, path: &str, service: &Value) {
        let mut routes = self.routes.lock();
        if routes.len() >= KNOWN_LIMIT {
            routes.retain(|_, (_, at)| at.elapsed() < KNOWN_FOR);
        }
        routes.insert(
            path.to_string(),
            (service["spec"]["selector"].clone(), Instant::now()),
        );
    }

    /// The Deployment at `path` as this pass last saw it: `Some(None)` when a list of this pass
    /// showed none, `None` when this pass has not seen it.
    fn seen_in_pass(&self, path: &str, cancel: &CancelToken) -> Option<Option<Value>> {
        self.seen
            .lock()
            .get(path)
            .filter(|(mark, _)| mark.is(cancel))
            .map(|(_, object)| object.clone())
    }

    /// Records what this pass saw at `path` (an answer to a read or a write).
    fn saw(&self, path: &str, object: Option<&Value>, cancel: &CancelToken) {
        let mut seen = self.seen.lock();
        if seen.len() >= KNOWN_LIMIT {
            seen.retain(|_, (mark, _)| !mark.ended());
        }
        seen.insert(path.to_string(), (cancel.mark(), object.cloned()));
    }

    /// Forgets what the pass of `cancel` saw: a preparation starts from fresh reads, and an
    /// activation leaves nothing behind for a later call under the same token (a caller that
    /// keeps one token over several passes, as tests and tools do, sees no stale object).
    fn forget_seen(&self, cancel: &CancelToken) {
        self.seen
            .lock()
            .retain(|_, (mark, _)| !mark.ended() && !mark.is(cancel));
    }

    fn remember(&self, path: &str) {
        let mut known = self.known.lock();
        if known.len() >= KNOWN_LIMIT {
            known.retain(|_, at| at.elapsed() < KNOWN_FOR);
        }
        known.insert(path.to_string(), Instant::now());
    }

    fn forget(&self, path: &str) {
        self.known.lock().remove(path);
        self.routes.lock().remove(path);
        self.seen.lock().remove(path);
    }

    /// Forgets every object inside Kubernetes namespace `name`, whatever its API group.
    fn forget_namespace(&self, name: &str) {
        let inside = format!("/namespaces/{name}/");
        self.known.lock().retain(|p, _| !p.contains(&inside));
        self.routes.lock().retain(|p, _| !p.contains(&inside));
        self.seen.lock().retain(|p, _| !p.contains(&inside));
    }

    /// API requests sent so far (benchmarks).
    pub fn request_count(&self) -> u64 {
        self.client.request_count()
    }

    /// The Kubernetes namespace a Namespace spec names.
    fn namespace_name(&self, spec: &NamespaceSpec) -> String {
        spec.existing_namespace.clone().unwrap_or_else(|| {
            names::namespace_name(&self.settings.namespace_prefix, &spec.namespace_id)
        })
    }

    /// The Kubernetes namespace of a Namespace id, found by its ownership labels (adopted
    /// namespaces keep their own names). A terminating namespace is a transient error (the
    /// caller waits, pending), a missing one retryable (`kubernetes_namespace_missing`).
    fn namespace_of(
        &self,
        installation_id: &str,
        namespace_id: &str,
        cancel: &CancelToken,
    ) -> Result<String, ComputeError> {
        self.runtime_namespace(installation_id, namespace_id, cancel)?
            .ok_or_else(|| ComputeError::retryable("kubernetes_namespace_missing", None))
    }

    /// `namespace_of`, with a missing namespace as `None`: nothing can run there.
    fn runtime_namespace(
        &self,
        installation_id: &str,
        namespace_id: &str,
        cancel: &CancelToken,
    ) -> Result<Option<String>, ComputeError> {
        if let Some(name) = self.namespaces.lock().get(namespace_id) {
            return Ok(Some(name.clone()));
        }
        let labels = selector(&[
            (LABEL_INSTALLATION, names::label_value(installation_id)),
            (LABEL_NAMESPACE, names::label_value(namespace_id)),
        ]);
        let found = self
            .client
            .list(&format!("{CORE}/namespaces"), Some(&labels), cancel)
            .map_err(|e| fail(e, "namespaces"))?;
        match found.as_slice() {
            [one] if !observe::terminating(one) => {
                let name = name_of(one).to_string();
                self.namespaces
                    .lock()
                    .insert(namespace_id.to_string(), name.clone());
                Ok(Some(name))
            }
            // Being deleted: pending, as a create inside it would be (SPEC C3).
            [_] => Err(
                ComputeError::transient("kubernetes_namespace_terminating", None)
                    .with_reason("NamespaceTerminating"),
            ),
            _ => Ok(None),
        }
    }

    /// Creates `desired` in `collection` unless an object of that name exists; an existing
    /// object must be owned. Returns the object as stored. An object the driver does not know
    /// is created first and read only on 409 `AlreadyExists`; a known one is read first.
    fn create_absent(
        &self,
        collection: &str,
        desired: &Value,
        installation_id: &str,
        resource: &str,
        cancel: &CancelToken,
    ) -> Result<Value, ComputeError> {
        self.create_or_read(collection, desired, installation_id, resource, cancel)
            .map(|(object, _)| object)
    }

    /// `create_absent`, answering also whether this call created the object.
    fn create_or_read(
        &self,
        collection: &str,
        desired: &Value,
        installation_id: &str,
        resource: &str,
        cancel: &CancelToken,
    ) -> Result<(Value, bool), ComputeError> {
        let path = format!("{collection}/{}", name_of(desired));
        let create = || match self.client.create(collection, desired, cancel) {
            Ok(created) => Ok(Some(created)),
            Err(e) if *e.kind() == KubeErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(self.terminating_or(e, resource)),
        };
        let mut created_first = false;
        // An object this process saw before is read first (one request while it still
        // exists); one it never saw is created first (one request while it does not).
        if !self.is_known(&path) && !self.was_known(&path) {
            if let Some(created) = create()? {
                self.remember(&path);
                return Ok((created, true));
            }
            created_first = true;
        }
        let current = match self
            .client
            .get(&path, cancel)
            .map_err(|e| fail(e, resource))?
        {
            Some(current) => current,
            // Known but gone (deleted behind the driver's back): create it again.
            None if !created_first => {
                self.forget(&path);
                let created = create()?
                    .ok_or_else(|| ComputeError::retryable("kubernetes_conflict", Some(409)))?;
                self.remember(&path);
                return Ok((created, true));
            }
            None => return Err(ComputeError::retryable("kubernetes_conflict", Some(409))),
        };
        if !owned(&current, installation_id) {
            self.forget(&path);
            return Err(not_owned());
        }
        self.remember(&path);
        Ok((current, false))
    }

    /// `create_absent` for an object only its existence matters of (the Agent's
    /// ServiceAccount and Service, the Harness claim): nothing is sent while it is known.
    /// Answers the object when a request was sent (the answer of its create, or its read).
    fn ensure_exists(
        &self,
        collection: &str,
        desired: &Value,
        installation_id: &str,
        resource: &str,
        cancel: &CancelToken,
    ) -> Result<Option<Value>, ComputeError> {
        let path = format!("{collection}/{}", name_of(desired));
        if self.is_known(&path) {
            return Ok(None);
        }
        if self.was_known(&path) {
            // Known before, no longer trusted (`KNOWN_FOR`): one list of this installation's
            // objects in the collection checks it and every other Agent's of the namespace at
            // once, instead of one read per object (for Services, their routes too).
            let labels = selector(&[(LABEL_INSTALLATION, names::label_value(installation_id))]);
            let listed = self
                .client
                .list(collection, Some(&labels), cancel)
                .map_err(|e| fail(e, resource))?;
            let mut found = None;
            for object in listed {
                let at = format!("{collection}/{}", name_of(&object));
                if !owned(&object, installation_id) {
                    continue;
                }
                self.remember(&at);
                if collection.ends_with("/services") {
                    // The same list re-reads the Agent Services' routes (`routes`).
                    self.remember_route(&at, &object);
                }
                if at == path {
                    found = Some(object);
                }
            }
            if found.is_some() {
                return Ok(found);
            }
            // Gone (deleted behind the driver's back): created again.
            self.forget(&path);
        }
        self.create_absent(collection, desired, installation_id, resource, cancel)
            .map(Some)
    }

    /// Like `create_absent`, then replaces an owned object whose stamp differs from
    /// `desired`'s; a concurrent change (409 `Conflict`) is re-read and retried once.
    fn converge(
        &self,
        collection: &str,
        desired: &Value,
        installation_id: &str,
        resource: &str,
        cancel: &CancelToken,
    ) -> Result<Value, ComputeError> {
        let current = self.create_absent(collection, desired, installation_id, resource, cancel)?;
        self.converge_from(
            collection,
            desired,
            current,
            installation_id,
            resource,
            cancel,
        )
    }

    /// `converge` from `current`, the object as the pass last saw it (owned): replaced when its
    /// stamp differs from `desired`'s, a concurrent change (409 `Conflict`) re-read and retried
    /// once. Answers the object as stored.
    fn converge_from(
        &self,
        collection: &str,
        desired: &Value,
        mut current: Value,
        installation_id: &str,
        resource: &str,
        cancel: &CancelToken,
    ) -> Result<Value, ComputeError> {
        let path = format!("{collection}/{}", name_of(desired));
        for _ in 0..2 {
            if stamped(&current) == stamped(desired) {
                return Ok(current);
            }
            let mut replacement = desired.clone();
            replacement["metadata"]["resourceVersion"] =
                current["metadata"]["resourceVersion"].clone();
            match self.client.replace(&path, &replacement, cancel) {
                Ok(replaced) => return Ok(replaced),
                Err(e) if *e.kind() == KubeErrorKind::Conflict => {
                    current = self
                        .client
                        .get(&path, cancel)
                        .map_err(|e| fail(e, resource))?
                        .ok_or_else(|| ComputeError::retryable("kubernetes_conflict", Some(409)))?;
                    if !owned(&current, installation_id) {
                        return Err(not_owned());
                    }
                }
                Err(e) => return Err(fail(e, resource)),
            }
        }
        Err(ComputeError::retryable("kubernetes_conflict", Some(409)).with_reason("Conflict"))
    }

    /// A terminating namespace refuses creates: pending, not failing.
    fn terminating_or(&self, e: KubeError, resource: &str) -> ComputeError {
        if *e.kind() == KubeErrorKind::NamespaceTerminating {
            return ComputeError::transient("kubernetes_namespace_terminating", e.status())
                .with_reason("NamespaceTerminating");
        }
        fail(e, resource)
    }

    /// Deletes an owned object; absent is done. Answers whether it existed.
    fn delete_owned(
        &self,
        path: &str,
        installation_id: &str,
        resource: &str,
        cancel: &CancelToken,
    ) -> Result<bool, ComputeError> {
        self.delete_owned_if(path, installation_id, resource, |_| true, None, cancel)
    }

    /// `delete_owned` of an object that also passes `wanted`; an owned object that does not
    /// is kept. `before` is asked just before the delete. Answers whether it was deleted.
    fn delete_owned_if(
        &self,
        path: &str,
        installation_id: &str,
        resource: &str,
        wanted: impl FnOnce(&Value) -> bool,
        before: Option<&BeforeStop<'_>>,
        cancel: &CancelToken,
    ) -> Result<bool, ComputeError> {
        let current = self.get_owned(path, installation_id, resource, cancel)?;
        if !current.is_some_and(|c| wanted(&c)) {
            return Ok(false);
        }
        if let Some(before) = before {
            before.ask(cancel)?;
        }
        self.forget(path);
        self.client
            .delete(path, Some("Background"), cancel)
            .map_err(|e| fail(e, resource))?;
        Ok(true)
    }

    /// An owned object at `path`, or `None`; one without this installation's labels is
    /// refused.
    fn get_owned(
        &self,
        path: &str,
        installation_id: &str,
        resource: &str,
        cancel: &CancelToken,
    ) -> Result<Option<Value>, ComputeError> {
        let object = self
            .client
            .get(path, cancel)
            .map_err(|e| fail(e, resource))?;
        if object.as_ref().is_some_and(|o| !owned(o, installation_id)) {
            return Err(not_owned());
        }
        Ok(object)
    }
}
