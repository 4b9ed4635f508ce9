//! The Kubernetes Compute Driver (SPEC C3): Namespaces as labelled Kubernetes namespaces,
//! each Agent as a ServiceAccount, a Service, a NetworkPolicy and a shared single-replica
//! gateway, each dedicated revision as a hardened Harness Deployment behind that gateway.
//!
//! Expected flow: `ensure_namespace` creates (or adopts) the namespace, writes the
//! default-deny NetworkPolicy and waits, pending, for the operator's tenant RoleBinding;
//! `bind_agent` makes the Agent's ServiceAccount, Service and NetworkPolicy exist;
//! `prepare_revision` writes a dedicated revision's Harness Deployment and Service, then points
//! the gateway at it, observing each rollout (an embedded revision runs inside the gateway,
//! which it takes only at activation); `activate_revision` points the Service at the
//! revision's gateway Pods; `stop_revision` scales the gateway, then the Harness, to zero and
//! stays pending until their Pods are gone; `retire_revision` deletes them;
//! `delete_namespace` deletes what the driver created; `withdraw_credential_source` writes a
//! revision's workload without one credential source's `secretKeyRef` and observes its Pods
//! until none carries it (SPEC E6). A revision's stored execution admission
//! is run only when `executionAdmissions` lists it, and a rejected active one is withdrawn by
//! its stop (SPEC Z1).
//!
//! Guarantees: every request checks the pass's cancel token first, is bounded by
//! `OCC_COMPUTE_REQUEST_TIMEOUT_MS` and is aborted when the claim is lost (`client`,
//! `compute::abortable`); waits are observations that come back pending, never loops
//! inside a pass; the driver never modifies or deletes an object without its installation's
//! labels, and never deletes an adopted namespace. Secret values are never read: workloads
//! reference Secrets by `secretKeyRef`.
//!
//! Errors: 404 on read and delete is absence; 409 `AlreadyExists` on create re-reads and
//! converges; 409 `Conflict` re-reads and retries once within the pass; a terminating
//! namespace is pending; a quota 403 waits; other 403s retry within the attempt budget (a
//! grant may still be propagating) and then fail `KUBERNETES_FORBIDDEN_<RESOURCE>`; 422 is
//! permanent; 429 and 5xx are transient (`client`).

use super::client::{Client, KubeError, KubeErrorKind};
use super::manifests::{self, owned, stamped};
use super::names::{
    self, LABEL_AGENT, LABEL_COMPONENT, LABEL_INSTALLATION, LABEL_NAMESPACE, LABEL_REVISION,
};
use super::observe::{self, Rollout};
use super::sandbox;
use super::settings::Settings;
use crate::cancel::CancelToken;
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
    if *e.kind() == KubeErrorKind::QuotaExceeded {
        // Only an authorization refusal is the operator's to fix for good: a used-up quota
        // waits, with the Pods' own code when Pods are refused.
        let code = if resource == "pods" {
            "NAMESPACE_POD_QUOTA_EXCEEDED"
        } else {
            "NAMESPACE_QUOTA_EXCEEDED"
        };
        return ComputeError::pending(code, "kubernetes", e.status())
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

/// How long a harness's `/readyz` is waited for through the API server's proxy: a Pod the API
/// server cannot reach costs a pass this much at most, not the whole request timeout.
const HELD_READ_TIMEOUT: Duration = Duration::from_secs(3);

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

    fn remember(&self, path: &str) {
        let mut known = self.known.lock();
        if known.len() >= KNOWN_LIMIT {
            known.retain(|_, at| at.elapsed() < KNOWN_FOR);
        }
        known.insert(path.to_string(), Instant::now());
    }

    fn forget(&self, path: &str) {
        self.known.lock().remove(path);
    }

    /// Forgets every object inside Kubernetes namespace `name`, whatever its API group.
    fn forget_namespace(&self, name: &str) {
        let inside = format!("/namespaces/{name}/");
        self.known.lock().retain(|p, _| !p.contains(&inside));
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
        if let Some(name) = self.namespaces.lock().get(namespace_id) {
            return Ok(name.clone());
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
                Ok(name)
            }
            // Being deleted: pending, as a create inside it would be (SPEC C3).
            [_] => Err(
                ComputeError::transient("kubernetes_namespace_terminating", None)
                    .with_reason("NamespaceTerminating"),
            ),
            _ => Err(ComputeError::retryable(
                "kubernetes_namespace_missing",
                None,
            )),
        }
    }

    /// `namespace_of`, with a missing namespace as `None`: nothing can run there.
    fn runtime_namespace(
        &self,
        installation_id: &str,
        namespace_id: &str,
        cancel: &CancelToken,
    ) -> Result<Option<String>, ComputeError> {
        match self.namespace_of(installation_id, namespace_id, cancel) {
            Ok(namespace) => Ok(Some(namespace)),
            Err(e) if e.class() == "kubernetes_namespace_missing" => Ok(None),
            Err(e) => Err(e),
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
        let path = format!("{collection}/{}", name_of(desired));
        let create = || match self.client.create(collection, desired, cancel) {
            Ok(created) => Ok(Some(created)),
            Err(e) if *e.kind() == KubeErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(self.terminating_or(e, resource)),
        };
        let mut created_first = false;
        if !self.is_known(&path) {
            if let Some(created) = create()? {
                self.remember(&path);
                return Ok(created);
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
                create()?
                    .ok_or_else(|| ComputeError::retryable("kubernetes_conflict", Some(409)))?
            }
            None => return Err(ComputeError::retryable("kubernetes_conflict", Some(409))),
        };
        if !owned(&current, installation_id) {
            self.forget(&path);
            return Err(not_owned());
        }
        self.remember(&path);
        Ok(current)
    }

    /// `create_absent` for an object only its existence matters of (the Agent's
    /// ServiceAccount and Service, the Harness claim): nothing is sent while it is known.
    fn ensure_exists(
        &self,
        collection: &str,
        desired: &Value,
        installation_id: &str,
        resource: &str,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        if self.is_known(&format!("{collection}/{}", name_of(desired))) {
            return Ok(());
        }
        self.create_absent(collection, desired, installation_id, resource, cancel)
            .map(drop)
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
        let path = format!("{collection}/{}", name_of(desired));
        let mut current =
            self.create_absent(collection, desired, installation_id, resource, cancel)?;
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

    fn pods(
        &self,
        namespace: &str,
        labels: &str,
        cancel: &CancelToken,
    ) -> Result<Vec<Value>, ComputeError> {
        self.client
            .list(
                &format!("{CORE}/namespaces/{namespace}/pods"),
                Some(labels),
                cancel,
            )
            .map_err(|e| fail(e, "pods"))
    }

    /// The revision's namespace and the workload it should run (its image must be configured),
    /// with the launch values the `beforeWorkloadStart` hooks answered: they are asked here,
    /// before the workload is written, and a refusal writes nothing (SPEC H3-H5).
    fn desired_workload(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(String, Value), ComputeError> {
        let image = self
            .settings
            .image_for(
                &revision.harness_id,
                &revision.harness_version,
                &revision.harness_mode,
            )
            .ok_or_else(|| {
                ComputeError::permanent("HARNESS_IMAGE_UNAVAILABLE", "kubernetes", None)
            })?
            .to_string();
        let namespace =
            self.namespace_of(&revision.installation_id, &revision.namespace_id, cancel)?;
        // A credential source outside the Agent's namespace refuses the revision before the
        // hooks are asked or anything is written (SPEC §13).
        manifests::credential_sources_hold(revision, &namespace)?;
        self.facets_hold(revision, &namespace, cancel)?;
        let taken: Vec<&str> = revision
            .secrets
            .iter()
            .map(|s| s.binding.as_str())
            .collect();
        let launch = self.hooks.run(
            Phase::BeforeWorkloadStart,
            &self.workload_subject(revision),
            &taken,
            cancel,
        )?;
        let desired = manifests::workload(
            revision,
            &namespace,
            &image,
            &launch,
            &self.settings,
            self.progress_deadline_seconds,
        )?;
        let desired = self.enforce(revision, desired)?;
        Ok((namespace, desired))
    }

    /// The revision's pinned facets hold in its namespace (SPEC S2): each is one the Sandbox
    /// Driver offers, the namespace enforces the restricted Pod Security level, and its
    /// default-deny NetworkPolicy exists. Read before anything of the revision is written; one
    /// that does not hold refuses the revision, permanent `SANDBOX_FACET_UNAVAILABLE`.
    fn facets_hold(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let pinned = &revision.sandbox_facets;
        sandbox::offered(pinned, self.sandbox.as_ref())?;
        if pinned.iter().any(|f| f == "pod-security-restricted") {
            let current = self
                .client
                .get(&format!("{CORE}/namespaces/{namespace}"), cancel)
                .map_err(|e| fail(e, "namespaces"))?;
            if !current.is_some_and(|n| sandbox::namespace_restricted(&n)) {
                return Err(sandbox::facet_unavailable());
            }
        }
        if pinned.iter().any(|f| f == "default-deny-egress") {
            let path = format!(
                "{NETWORKING}/namespaces/{namespace}/networkpolicies/{}",
                manifests::DEFAULT_DENY
            );
            if self
                .get_owned(&path, &revision.installation_id, "networkpolicies", cancel)?
                .is_none()
            {
                return Err(sandbox::facet_unavailable());
            }
        }
        Ok(())
    }

    /// `desired` with the revision's pinned facets applied, refused with
    /// `SANDBOX_FACET_UNAVAILABLE` when the workload would not enforce one (SPEC S2).
    fn enforce(&self, revision: &RevisionSpec, desired: Value) -> Result<Value, ComputeError> {
        let pinned = &revision.sandbox_facets;
        let desired = sandbox::apply(desired, pinned, self.sandbox.as_ref());
        if sandbox::workload_enforces(&desired, pinned, self.sandbox.as_ref()) {
            Ok(desired)
        } else {
            Err(sandbox::facet_unavailable())
        }
    }

    /// Converges a Deployment to `desired` and makes sure it runs one replica: a stop scaled
    /// it to zero without changing its stamp (a refused candidate whose refusal was lifted, a
    /// gateway stopped with its Agent).
    fn run_workload(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        desired: &Value,
        cancel: &CancelToken,
    ) -> Result<Value, ComputeError> {
        let collection = format!("{APPS}/namespaces/{namespace}/deployments");
        let workload = self.converge(
            &collection,
            desired,
            &revision.installation_id,
            "deployments",
            cancel,
        )?;
        if workload["spec"]["replicas"].as_i64() == Some(1) {
            return Ok(workload);
        }
        self.client
            .merge_patch(
                &format!("{collection}/{}", name_of(desired)),
                &json!({"spec": {"replicas": 1}}),
                cancel,
            )
            .map_err(|e| fail(e, "deployments"))
    }

    /// `None` once `workload` rolled out; else why the revision is not ready. A rollout
    /// Kubernetes gave up on (`ProgressDeadlineExceeded`, a Deployment written with a shorter
    /// deadline) is kept and observed like any unready one: the worker's convergence deadline
    /// decides, with the evidence.
    fn rolled_out(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        workload: &Value,
        cancel: &CancelToken,
    ) -> Result<Option<RevisionObservation>, ComputeError> {
        match observe::rollout(workload) {
            Rollout::Failed => {
                let mut unready = self.unready(revision, namespace, cancel)?;
                if unready.runtime_failure.is_none() {
                    unready.runtime_failure = Some(crate::compute::RuntimeFailure::new(
                        PROGRESS_DEADLINE_EXCEEDED,
                    ));
                }
                Ok(Some(unready))
            }
            Rollout::Progressing => self.unready(revision, namespace, cancel).map(Some),
            Rollout::Complete => Ok(None),
        }
    }

    /// The dedicated gateway in front of `revision`'s Harness (SPEC C3).
    fn desired_gateway(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
    ) -> Result<Value, ComputeError> {
        let image = self.settings.gateway_image.as_deref().ok_or_else(|| {
            ComputeError::permanent("HARNESS_IMAGE_UNAVAILABLE", "kubernetes", None)
        })?;
        self.enforce(
            revision,
            manifests::dedicated_gateway(
                revision,
                namespace,
                image,
                &self.settings,
                self.progress_deadline_seconds,
            ),
        )
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

    /// Scales the Deployment at `path` to zero when it runs `revision` (any Deployment of a
    /// dedicated Harness does; the Agent's gateway only while it serves the revision).
    fn scale_down(
        &self,
        revision: &RevisionSpec,
        path: &str,
        before: &BeforeStop<'_>,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let workload = self.get_owned(path, &revision.installation_id, "deployments", cancel)?;
        if workload
            .is_some_and(|w| Self::runs(&w, revision) && w["spec"]["replicas"].as_i64() != Some(0))
        {
            before.ask(cancel)?;
            self.client
                .merge_patch(path, &json!({"spec": {"replicas": 0}}), cancel)
                .map_err(|e| fail(e, "deployments"))?;
        }
        Ok(())
    }

    /// The Agent's gateway Deployment.
    fn gateway_path(revision: &RevisionSpec, namespace: &str) -> String {
        format!(
            "{APPS}/namespaces/{namespace}/deployments/{}",
            manifests::gateway_name(&revision.agent_id)
        )
    }

    /// The workload path of a revision and whether it is this revision's own.
    fn workload_path(&self, revision: &RevisionSpec, namespace: &str) -> String {
        let name = if revision.harness_mode == "dedicated" {
            names::revision_object_name(&revision.agent_id, revision.revision)
        } else {
            manifests::gateway_name(&revision.agent_id)
        };
        format!("{APPS}/namespaces/{namespace}/deployments/{name}")
    }

    /// The label selector of a revision's Pods.
    fn revision_pods(revision: &RevisionSpec) -> String {
        selector(&[
            (LABEL_AGENT, names::label_value(&revision.agent_id)),
            (LABEL_REVISION, names::label_value(&revision.revision_id)),
        ])
    }

    /// Whether the workload currently runs `revision` (an embedded gateway runs one revision
    /// at a time).
    fn runs(workload: &Value, revision: &RevisionSpec) -> bool {
        workload["spec"]["template"]["metadata"]["labels"][LABEL_REVISION].as_str()
            == Some(names::label_value(&revision.revision_id).as_str())
    }

    /// The revision's workload for a credential withdrawal (SPEC E6): a dedicated revision's
    /// Harness Deployment, or the Agent's gateway while it runs this (embedded) revision;
    /// `None` when it has none.
    fn revision_workload(
        &self,
        revision: &RevisionSpec,
        path: &str,
        cancel: &CancelToken,
    ) -> Result<Option<Value>, ComputeError> {
        let workload = self
            .client
            .get(path, cancel)
            .map_err(|e| fail(e, "deployments"))?;
        Ok(workload.filter(|w| revision.harness_mode == "dedicated" || Self::runs(w, revision)))
    }

    /// Whether any runtime of the revision still carries the environment variable `env`: a
    /// Pod (terminating ones included), or a ReplicaSet that may still make Pods (replicas
    /// above zero, wanted or left) from a template carrying it.
    fn runtime_carries(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        env: &str,
        cancel: &CancelToken,
    ) -> Result<bool, ComputeError> {
        let labels = Self::revision_pods(revision);
        let pods = self.pods(namespace, &labels, cancel)?;
        if pods.iter().any(|p| manifests::carries_env(&p["spec"], env)) {
            return Ok(true);
        }
        let sets = self
            .client
            .list(
                &format!("{APPS}/namespaces/{namespace}/replicasets"),
                Some(&labels),
                cancel,
            )
            .map_err(|e| fail(e, "replicasets"))?;
        Ok(sets.iter().any(|rs| {
            let live = rs["spec"]["replicas"].as_i64().unwrap_or(1) > 0
                || rs["status"]["replicas"].as_i64().unwrap_or(0) > 0;
            live && manifests::carries_env(&rs["spec"]["template"]["spec"], env)
        }))
    }

    /// One read, decision and write of `withdraw_credential_source` (SPEC E6); `None` when
    /// the write met a concurrent change (409) or a delete (404), so the caller reads again.
    fn detach_round(
        &self,
        revision: &RevisionSpec,
        source: &CredentialAttachment,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<Option<CredentialDetach>, ComputeError> {
        let env = source.env_name();
        let path = self.workload_path(revision, namespace);
        let Some(workload) = self.revision_workload(revision, &path, cancel)? else {
            return self
                .detach_answer(revision, namespace, &env, CredentialDetach::Absent, cancel)
                .map(Some);
        };
        if !owned(&workload, &revision.installation_id) {
            return Err(withdrawal_refused("CREDENTIAL_WITHDRAWAL_MISCONFIGURED"));
        }
        if !manifests::carries_env(&workload["spec"]["template"]["spec"], &env) {
            return self
                .detach_answer(revision, namespace, &env, CredentialDetach::Revoked, cancel)
                .map(Some);
        }
        // A running harness cannot drop its model key: it goes with its runtime.
        if source.harness
            && (workload["spec"]["replicas"].as_i64().unwrap_or(1) > 0
                || self.runtime_carries(revision, namespace, &env, cancel)?)
        {
            return Err(withdrawal_refused(
                "CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT",
            ));
        }
        let replacement = manifests::without_env(workload, &env);
        match self.client.replace(&path, &replacement, cancel) {
            Ok(_) => self
                .detach_answer(revision, namespace, &env, CredentialDetach::Revoked, cancel)
                .map(Some),
            Err(e) if matches!(e.kind(), KubeErrorKind::Conflict | KubeErrorKind::NotFound) => {
                Ok(None)
            }
            Err(e) => Err(fail(e, "deployments")),
        }
    }

    /// `Pending` while a runtime of the revision still carries `env`, else `revoked`.
    fn detach_answer(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        env: &str,
        revoked: CredentialDetach,
        cancel: &CancelToken,
    ) -> Result<CredentialDetach, ComputeError> {
        if self.runtime_carries(revision, namespace, env, cancel)? {
            Ok(CredentialDetach::Pending)
        } else {
            Ok(revoked)
        }
    }

    /// Why an unready workload waits: Pods first, then its ReplicaSets' quota failures.
    fn unready(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        let pods = self.pods(namespace, &Self::revision_pods(revision), cancel)?;
        let mut findings = observe::pods(&pods);
        if findings.runtime_failure.is_none() {
            findings.runtime_failure = self.held_failure(namespace, &pods, cancel)?;
        }
        let mut reason = findings.pending_reason;
        if reason.is_none() && pods.is_empty() {
            let sets = self
                .client
                .list(
                    &format!("{APPS}/namespaces/{namespace}/replicasets"),
                    Some(&Self::revision_pods(revision)),
                    cancel,
                )
                .map_err(|e| fail(e, "replicasets"))?;
            if observe::quota_exceeded(&sets) {
                reason = Some("NAMESPACE_POD_QUOTA_EXCEEDED");
            }
        }
        Ok(RevisionObservation {
            pending_reason: reason.map(str::to_string),
            runtime_failure: findings.runtime_failure,
            ..observation(revision, false)
        })
    }

    /// The failure a harness holds behind its `/readyz` (SPEC R5): one running, unready Pod is
    /// asked through the API server's proxy. Anything but a 503 with a bounded code (a refusal
    /// without `pods/proxy`, a Pod the API server cannot reach, a timeout) is no finding and the
    /// observation stays pending as without the read; only a cancelled pass ends here.
    fn held_failure(
        &self,
        namespace: &str,
        pods: &[Value],
        cancel: &CancelToken,
    ) -> Result<Option<crate::compute::RuntimeFailure>, ComputeError> {
        let Some(candidate) = observe::held_candidate(pods) else {
            return Ok(None);
        };
        let path = format!(
            "{CORE}/namespaces/{namespace}/pods/{}:{}/proxy/readyz",
            candidate.pod,
            manifests::HARNESS_PORT
        );
        let limit = observe::HELD_BODY_LIMIT;
        match self.client.get_raw(&path, HELD_READ_TIMEOUT, limit, cancel) {
            Ok(reply) => {
                let code = observe::held_code(reply.status, &reply.body);
                if code.is_none() {
                    log::debug!(
                        "kubernetes harness readyz: status {}, no held code",
                        reply.status
                    );
                }
                Ok(code.map(|code| candidate.failure(code)))
            }
            Err(e) if e.is_cancelled() => Err(e.into_compute("KUBERNETES_BAD_REQUEST")),
            Err(e) => {
                log::debug!("{e}: no held code");
                Ok(None)
            }
        }
    }

    /// The Agent Service, which `bind_agent` created.
    fn service_path(agent: &AgentSpec, namespace: &str) -> String {
        format!(
            "{CORE}/namespaces/{namespace}/services/{}",
            names::agent_object_name(&agent.agent_id)
        )
    }

    /// Points the Agent Service at `revision` (or at nothing).
    fn route(
        &self,
        revision: &RevisionSpec,
        to: Option<&str>,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let agent = manifests::agent_of(revision);
        let namespace = self.namespace_of(&agent.installation_id, &agent.namespace_id, cancel)?;
        let service = self.create_absent(
            &format!("{CORE}/namespaces/{namespace}/services"),
            &manifests::service(&agent, &namespace),
            &agent.installation_id,
            "services",
            cancel,
        )?;
        let wanted = manifests::route_selector(&agent, to);
        if service["spec"]["selector"] == wanted {
            return Ok(());
        }
        let patch = json!({"spec": {"selector": wanted}});
        self.client
            .merge_patch(&Self::service_path(&agent, &namespace), &patch, cancel)
            .map_err(|e| fail(e, "services"))?;
        Ok(())
    }

    /// Whether the Agent Service routes `revision` and has a ready endpoint.
    fn routed_and_ready(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<Option<bool>, ComputeError> {
        let agent = manifests::agent_of(revision);
        let service = self
            .client
            .get(&Self::service_path(&agent, namespace), cancel)
            .map_err(|e| fail(e, "services"))?;
        let routed = service.is_some_and(|s| {
            s["spec"]["selector"] == manifests::route_selector(&agent, Some(&revision.revision_id))
        });
        if !routed {
            return Ok(None);
        }
        let slices = self
            .client
            .list(
                &format!("{DISCOVERY}/namespaces/{namespace}/endpointslices"),
                Some(&format!(
                    "kubernetes.io/service-name={}",
                    names::agent_object_name(&agent.agent_id)
                )),
                cancel,
            )
            .map_err(|e| fail(e, "endpointslices"))?;
        Ok(Some(observe::has_ready_endpoint(&slices)))
    }

    /// Deletes everything the driver created inside an adopted namespace; complete once no
    /// owned object or Pod is left.
    fn empty_adopted(
        &self,
        spec: &NamespaceSpec,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<bool, ComputeError> {
        let labels = selector(&[
            (
                LABEL_INSTALLATION,
                names::label_value(&spec.installation_id),
            ),
            (LABEL_NAMESPACE, names::label_value(&spec.namespace_id)),
        ]);
        let mut left = false;
        for (group, resource) in [
            (APPS, "deployments"),
            (CORE, "services"),
            (CORE, "serviceaccounts"),
            (CORE, "persistentvolumeclaims"),
            (NETWORKING, "networkpolicies"),
        ] {
            let collection = format!("{group}/namespaces/{namespace}/{resource}");
            let found = self
                .client
                .list(&collection, Some(&labels), cancel)
                .map_err(|e| fail(e, resource))?;
            for object in found.iter().filter(|o| owned(o, &spec.installation_id)) {
                left = true;
                self.client
                    .delete(
                        &format!("{collection}/{}", name_of(object)),
                        Some("Background"),
                        cancel,
                    )
                    .map_err(|e| fail(e, resource))?;
            }
        }
        Ok(!left && self.pods(namespace, &labels, cancel)?.is_empty())
    }

    /// Removes the labels adoption added (`manifests::adoption_labels`) from an adopted
    /// namespace that still carries them for this Namespace; the namespace's other labels and
    /// fields are left as they are. Nothing when they are gone or name another Namespace.
    fn release_adopted(
        &self,
        spec: &NamespaceSpec,
        path: &str,
        current: &Value,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let ours = current["metadata"]["labels"][LABEL_NAMESPACE].as_str()
            == Some(names::label_value(&spec.namespace_id).as_str());
        if !ours || !owned(current, &spec.installation_id) || observe::terminating(current) {
            return Ok(());
        }
        let Value::Object(added) = manifests::adoption_labels(spec) else {
            return Ok(());
        };
        let removed: serde_json::Map<String, Value> =
            added.into_iter().map(|(k, _)| (k, Value::Null)).collect();
        let patch = json!({"metadata": {"labels": removed}});
        self.client
            .merge_patch(path, &patch, cancel)
            .map(drop)
            .map_err(|e| fail(e, "namespaces"))
    }

    /// The Sandbox Driver's RuntimeClass exists when `runtime-class` is one of its facets
    /// (SPEC S1): a missing one stops start-up (`SANDBOX_RUNTIME_CLASS_NOT_FOUND`).
    fn check_runtime_class(&self, cancel: &CancelToken) -> Result<(), ComputeError> {
        let Some(name) = self
            .sandbox
            .as_ref()
            .and_then(|s| s.runtime_class_name.as_deref())
        else {
            return Ok(());
        };
        let found = self
            .client
            .get(&format!("{NODE}/runtimeclasses/{name}"), cancel)
            .map_err(|e| fail(e, "runtimeclasses"))?;
        match found {
            Some(_) => Ok(()),
            None => Err(ComputeError::permanent(
                "SANDBOX_RUNTIME_CLASS_NOT_FOUND",
                "kubernetes",
                Some(404),
            )),
        }
    }

    fn namespace_observation(spec: &NamespaceSpec, pending: Option<&str>) -> NamespaceObservation {
        NamespaceObservation {
            namespace_id: spec.namespace_id.clone(),
            complete: pending.is_none(),
            failure: None,
            pending_reason: pending.map(str::to_string),
            reason: None,
        }
    }
}

impl ComputeDriver for KubernetesDriver {
    fn id(&self) -> &str {
        "kubernetes"
    }

    fn implementation(&self) -> &str {
        "kubernetes"
    }

    /// The API server answers `/version`, and a SelfSubjectAccessReview allows every verb
    /// the driver uses; each denial is a warning `KUBERNETES_ACCESS_DENIED` naming it in the
    /// code (`…_CREATE_DEPLOYMENTS`). Production refuses to start on any warning.
    fn preflight(&self, cancel: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError> {
        let version = self
            .client
            .get("/version", cancel)
            .map_err(|e| fail(e, "version"))?;
        if version
            .as_ref()
            .and_then(|v| v["gitVersion"].as_str())
            .is_none()
        {
            return Err(ComputeError::permanent(
                "KUBERNETES_VERSION_UNKNOWN",
                "kubernetes",
                None,
            ));
        }
        let mut warnings = Vec::new();
        for (verb, group, resource) in ACCESS {
            let mut attributes = json!({"verb": verb, "group": group, "resource": resource});
            if let Some((resource, subresource)) = resource.split_once('/') {
                attributes["resource"] = json!(resource);
                attributes["subresource"] = json!(subresource);
            }
            let review = json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes},
            });
            let answer = self
                .client
                .post(
                    &format!("{AUTHORIZATION}/selfsubjectaccessreviews"),
                    &review,
                    cancel,
                )
                .map_err(|e| fail(e, "selfsubjectaccessreviews"))?;
            if answer["status"]["allowed"].as_bool() != Some(true) {
                warnings.push(PreflightWarning {
                    code: format!(
                        "KUBERNETES_ACCESS_DENIED_{}_{}",
                        verb.to_ascii_uppercase(),
                        resource.to_ascii_uppercase().replace('/', "_")
                    ),
                });
            }
        }
        self.check_runtime_class(cancel)?;
        Ok(warnings)
    }

    fn ensure_namespace(
        &self,
        spec: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        let name = self.namespace_name(spec);
        let path = format!("{CORE}/namespaces/{name}");
        let adopted = spec.existing_namespace.is_some();
        let current = match self
            .client
            .get(&path, cancel)
            .map_err(|e| fail(e, "namespaces"))?
        {
            Some(current) => current,
            None if adopted => {
                return Err(ComputeError::permanent(
                    "EXISTING_NAMESPACE_NOT_FOUND",
                    "kubernetes",
                    Some(404),
                ))
            }
            None => self.create_absent(
                &format!("{CORE}/namespaces"),
                &manifests::namespace(spec, &name),
                &spec.installation_id,
                "namespaces",
                cancel,
            )?,
        };
        if observe::terminating(&current) {
            return Ok(Self::namespace_observation(
                spec,
                Some("NAMESPACE_TERMINATING"),
            ));
        }
        let labels = &current["metadata"]["labels"];
        let ours = labels[LABEL_NAMESPACE].as_str()
            == Some(names::label_value(&spec.namespace_id).as_str());
        if owned(&current, &spec.installation_id) && !ours {
            // Another Namespace of this installation holds the name.
            return Err(ComputeError::permanent(
                "NAMESPACE_NAME_CONFLICT",
                "kubernetes",
                None,
            ));
        }
        if !owned(&current, &spec.installation_id) {
            if !adopted || labels.get(LABEL_INSTALLATION).is_some() {
                return Err(ComputeError::permanent(
                    "NAMESPACE_NAME_CONFLICT",
                    "kubernetes",
                    None,
                ));
            }
            // Adoption adds the ownership labels, nothing else.
            let patch = json!({"metadata": {"labels": manifests::adoption_labels(spec)}});
            self.client
                .merge_patch(&path, &patch, cancel)
                .map_err(|e| fail(e, "namespaces"))?;
        }
        self.namespaces
            .lock()
            .insert(spec.namespace_id.clone(), name.clone());
        self.converge(
            &format!("{NETWORKING}/namespaces/{name}/networkpolicies"),
            &manifests::default_deny(spec, &name, &self.settings.api_server_cidrs),
            &spec.installation_id,
            "networkpolicies",
            cancel,
        )?;
        let binding = format!(
            "{RBAC}/namespaces/{name}/rolebindings/{}",
            self.settings.tenant_role_binding
        );
        if self
            .client
            .get(&binding, cancel)
            .map_err(|e| fail(e, "rolebindings"))?
            .is_none()
        {
            return Ok(Self::namespace_observation(
                spec,
                Some("NAMESPACE_ROLEBINDING_PENDING"),
            ));
        }
        // Otherwise ready: the hooks are the last word before it is reported so (SPEC H3).
        self.hooks.run(
            Phase::AfterNamespacePrepared,
            &self.namespace_subject(spec),
            &[],
            cancel,
        )?;
        Ok(Self::namespace_observation(spec, None))
    }

    fn delete_namespace(
        &self,
        spec: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        let name = self.namespace_name(spec);
        let path = format!("{CORE}/namespaces/{name}");
        // Nothing inside a namespace being emptied is known to exist any more.
        self.forget_namespace(&name);
        let Some(current) = self
            .client
            .get(&path, cancel)
            .map_err(|e| fail(e, "namespaces"))?
        else {
            self.namespaces.lock().remove(&spec.namespace_id);
            return Ok(Self::namespace_observation(spec, None));
        };
        if spec.existing_namespace.is_some() {
            // An adopted namespace is never deleted: only what the driver made inside it, and
            // then the ownership labels adoption added, so another Namespace (or a new one of
            // the same name) can adopt it again.
            let terminating = observe::terminating(&current);
            if !terminating {
                self.before_namespace_delete(spec, cancel)?;
            }
            if terminating || self.empty_adopted(spec, &name, cancel)? {
                self.release_adopted(spec, &path, &current, cancel)?;
                self.namespaces.lock().remove(&spec.namespace_id);
                return Ok(Self::namespace_observation(spec, None));
            }
            return Ok(Self::namespace_observation(
                spec,
                Some("NAMESPACE_OBJECTS_REMOVAL_PENDING"),
            ));
        }
        let ours = current["metadata"]["labels"][LABEL_NAMESPACE].as_str()
            == Some(names::label_value(&spec.namespace_id).as_str());
        if !owned(&current, &spec.installation_id) || !ours {
            // Not ours: nothing of this Namespace is left to delete.
            return Ok(Self::namespace_observation(spec, None));
        }
        if !observe::terminating(&current) {
            self.before_namespace_delete(spec, cancel)?;
            match self.client.delete(&path, Some("Background"), cancel) {
                Ok(None) => return Ok(Self::namespace_observation(spec, None)),
                Ok(Some(_)) => {}
                // A second delete of a terminating namespace answers 409.
                Err(e) if *e.kind() == KubeErrorKind::Conflict => {}
                Err(e) => return Err(fail(e, "namespaces")),
            }
        }
        Ok(Self::namespace_observation(
            spec,
            Some("NAMESPACE_TERMINATING"),
        ))
    }

    /// The Agent's ServiceAccount (no automounted token), its Service (routing nothing until a
    /// revision activates) and its NetworkPolicy (gateway to Harness) exist.
    fn bind_agent(&self, agent: &AgentSpec, cancel: &CancelToken) -> Result<(), ComputeError> {
        let namespace = self.namespace_of(&agent.installation_id, &agent.namespace_id, cancel)?;
        self.ensure_exists(
            &format!("{CORE}/namespaces/{namespace}/serviceaccounts"),
            &manifests::service_account(agent, &namespace),
            &agent.installation_id,
            "serviceaccounts",
            cancel,
        )?;
        self.ensure_exists(
            &format!("{CORE}/namespaces/{namespace}/services"),
            &manifests::service(agent, &namespace),
            &agent.installation_id,
            "services",
            cancel,
        )?;
        self.ensure_exists(
            &format!("{NETWORKING}/namespaces/{namespace}/networkpolicies"),
            &manifests::agent_network_policy(agent, &namespace),
            &agent.installation_id,
            "networkpolicies",
            cancel,
        )
    }

    /// Dedicated: writes the revision's Harness Deployment and Service (and the Agent's Harness
    /// claim), observes the Harness rollout, then points the Agent's gateway at it and observes
    /// that rollout too; the Agent Service routes the gateway at activation (SPEC C3). Every
    /// predecessor was stopped first (exclusive replacement), so the gateway served nothing.
    /// Embedded: while the Agent's shared gateway runs another revision
    /// the candidate is only validated (image, Secret references) and reported ready; the
    /// gateway is replaced at activation, after the pointer commit, so a candidate that never
    /// becomes ready cannot take the active revision's gateway down (SPEC C3: the Recreate
    /// gateway is replaced and checked during activation).
    fn prepare_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        let (namespace, desired) = self.desired_workload(revision, cancel)?;
        if revision.harness_mode != "dedicated" {
            let path = self.workload_path(revision, &namespace);
            let gateway = self
                .client
                .get(&path, cancel)
                .map_err(|e| fail(e, "deployments"))?;
            if gateway.is_some_and(|g| !Self::runs(&g, revision)) {
                return Ok(observation(revision, true));
            }
        } else {
            let agent = manifests::agent_of(revision);
            self.ensure_exists(
                &format!("{CORE}/namespaces/{namespace}/persistentvolumeclaims"),
                &manifests::harness_claim(&agent, &namespace, &self.settings),
                &revision.installation_id,
                "persistentvolumeclaims",
                cancel,
            )?;
        }
        let workload = self.run_workload(revision, &namespace, &desired, cancel)?;
        if let Some(unready) = self.rolled_out(revision, &namespace, &workload, cancel)? {
            return Ok(unready);
        }
        if revision.harness_mode == "dedicated" {
            self.ensure_exists(
                &format!("{CORE}/namespaces/{namespace}/services"),
                &manifests::harness_service(revision, &namespace),
                &revision.installation_id,
                "services",
                cancel,
            )?;
            let gateway = self.desired_gateway(revision, &namespace)?;
            let gateway = self.run_workload(revision, &namespace, &gateway, cancel)?;
            if let Some(unready) = self.rolled_out(revision, &namespace, &gateway, cancel)? {
                return Ok(unready);
            }
        }
        // A routed revision is ready only with a ready endpoint behind the Agent Service.
        let endpoint = self.routed_and_ready(revision, &namespace, cancel)?;
        Ok(observation(revision, endpoint != Some(false)))
    }

    fn deactivate_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.route(revision, None, cancel)
    }

    /// Points the Agent Service at the revision. An embedded revision first takes the shared
    /// gateway (Recreate) and is routed once that rollout completes; until then activation is
    /// pending (`REVISION_ACTIVATION_PENDING`) and the next pass, the revision now
    /// active, observes the gateway and activates again (R7).
    fn activate_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        if revision.harness_mode != "dedicated" {
            let (namespace, desired) = self.desired_workload(revision, cancel)?;
            let gateway = self.run_workload(revision, &namespace, &desired, cancel)?;
            match observe::rollout(&gateway) {
                Rollout::Failed | Rollout::Progressing => {
                    return Err(ComputeError::pending(
                        "REVISION_ACTIVATION_PENDING",
                        "kubernetes_gateway_rollout",
                        None,
                    )
                    .with_reason("RolloutPending"))
                }
                Rollout::Complete => {}
            }
        }
        self.route(revision, Some(&revision.revision_id), cancel)
    }

    /// Scales the Agent's gateway to zero while it serves the revision, then, for a dedicated
    /// revision and only once the gateway's Pods are gone, the Harness Deployment: the Harness
    /// (and its ReadWriteOnce claim) is released after nothing fronts it any more. Pending
    /// (draining) until every Pod of the revision is gone.
    fn stop_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        // No namespace, no runtime.
        let Some(namespace) =
            self.runtime_namespace(&revision.installation_id, &revision.namespace_id, cancel)?
        else {
            return Ok(());
        };
        let before = BeforeStop::new(self, revision);
        self.scale_down(
            revision,
            &Self::gateway_path(revision, &namespace),
            &before,
            cancel,
        )?;
        let pods = self.pods(&namespace, &Self::revision_pods(revision), cancel)?;
        if revision.harness_mode == "dedicated" {
            let gateway_left = pods
                .iter()
                .any(|p| p["metadata"]["labels"][LABEL_COMPONENT] == manifests::COMPONENT_GATEWAY);
            if gateway_left {
                return Err(draining());
            }
            self.scale_down(
                revision,
                &self.workload_path(revision, &namespace),
                &before,
                cancel,
            )?;
        }
        if pods.is_empty() {
            Ok(())
        } else {
            Err(draining())
        }
    }

    /// Deletes the revision's runtime: the Agent's gateway while it serves the revision, and a
    /// dedicated revision's Harness Deployment and Service.
    fn retire_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        // No namespace, no runtime.
        let Some(namespace) =
            self.runtime_namespace(&revision.installation_id, &revision.namespace_id, cancel)?
        else {
            return Ok(());
        };
        let installation = &revision.installation_id;
        let before = BeforeStop::new(self, revision);
        self.delete_owned_if(
            &Self::gateway_path(revision, &namespace),
            installation,
            "deployments",
            |gateway| Self::runs(gateway, revision),
            Some(&before),
            cancel,
        )?;
        if revision.harness_mode == "dedicated" {
            let name = names::revision_object_name(&revision.agent_id, revision.revision);
            for (path, resource) in [
                (self.workload_path(revision, &namespace), "deployments"),
                (
                    format!("{CORE}/namespaces/{namespace}/services/{name}"),
                    "services",
                ),
            ] {
                self.delete_owned_if(
                    &path,
                    installation,
                    resource,
                    |_| true,
                    Some(&before),
                    cancel,
                )?;
            }
        }
        Ok(())
    }

    /// Removes the Agent's own objects: its ServiceAccount (its runtime identity), Service,
    /// gateway, NetworkPolicy and Harness claim.
    fn delete_agent_runtime_credentials(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        // No namespace, nothing of the Agent's left.
        let Some(namespace) =
            self.runtime_namespace(&agent.installation_id, &agent.namespace_id, cancel)?
        else {
            return Ok(());
        };
        let object = names::agent_object_name(&agent.agent_id);
        for (path, resource) in [
            (
                format!(
                    "{APPS}/namespaces/{namespace}/deployments/{}",
                    manifests::gateway_name(&agent.agent_id)
                ),
                "deployments",
            ),
            (
                format!("{CORE}/namespaces/{namespace}/services/{object}"),
                "services",
            ),
            (
                format!(
                    "{CORE}/namespaces/{namespace}/persistentvolumeclaims/{}",
                    manifests::harness_claim_name(&agent.agent_id)
                ),
                "persistentvolumeclaims",
            ),
            (
                format!("{NETWORKING}/namespaces/{namespace}/networkpolicies/{object}"),
                "networkpolicies",
            ),
            (
                format!("{CORE}/namespaces/{namespace}/serviceaccounts/{object}"),
                "serviceaccounts",
            ),
        ] {
            self.delete_owned(&path, &agent.installation_id, resource, cancel)?;
        }
        Ok(())
    }

    fn policy(&self) -> &dyn DriverPolicy {
        self
    }

    /// The egress NetworkPolicies of the built-in `kubernetes-sandbox` (SPEC S3): offered
    /// whether or not the Installation selects it, since an Agent's policy is removed either
    /// way; without a selection `apply_egress_policy` refuses `SANDBOX_DRIVER_UNAVAILABLE`.
    fn sandbox(&self) -> Option<&dyn SandboxDriver> {
        Some(self)
    }

    /// The built-in `kubernetes-secret-gateway` (SPEC §13, E6).
    fn credential_gateway(&self) -> Option<&dyn CredentialGateway> {
        Some(self)
    }
}

impl DriverPolicy for KubernetesDriver {
    /// A production worker runs dedicated Codex and embedded OpenClaw only.
    fn accepts_harness(&self, harness_id: &str, mode: &str) -> bool {
        !self.production || crate::compute::PRODUCTION_HARNESSES.contains(&(harness_id, mode))
    }

    /// Dedicated harnesses share the Agent's ReadWriteOnce claim: every earlier runtime stops
    /// first (exclusive replacement).
    fn requires_stopped_predecessors(&self, revision: &RevisionSpec) -> bool {
        revision.harness_mode == "dedicated"
    }

    fn maintenance_interval(&self) -> Option<Duration> {
        self.settings.maintenance_interval
    }

    /// The settings' `executionAdmissions` list the pairs this driver runs (SPEC Z1).
    fn validate_execution_admission(
        &self,
        revision: &RevisionSpec,
        _purpose: AdmissionUse,
    ) -> Result<(), ComputeError> {
        if self
            .settings
            .execution_admissions
            .contains(&revision.execution_admission)
        {
            Ok(())
        } else {
            Err(execution_admission_unavailable())
        }
    }

    /// A rejected active execution is withdrawn by stopping the revision: a stop still draining
    /// is not withdrawn yet, so it counts as failed and the worker waits (SPEC Z1).
    fn rejected_execution_withdrawal<'a>(
        &'a self,
        revision: &'a RevisionSpec,
    ) -> Option<Withdrawal<'a>> {
        Some(Box::new(move |cancel| self.stop_revision(revision, cancel)))
    }

    /// The Agent's ServiceAccount is its runtime credential; `delete_agent_runtime_credentials`
    /// removes it (SPEC Z11).
    fn runtime_credentials(&self) -> RuntimeCredentials {
        RuntimeCredentials::ProvisionedAndDeleted
    }

    /// All four phases (SPEC H2, H3).
    fn lifecycle_hooks(&self) -> Option<&LifecycleHooks> {
        Some(&self.hooks)
    }
}

impl SandboxDriver for KubernetesDriver {
    /// NetworkPolicy `occ-egress-<agent>` selecting the Agent's Pods, egress to each entry's
    /// network on its TCP ports; deleted when `egress` is empty (SPEC S3). Owned like the
    /// Agent's other objects: one without this installation's labels is never touched.
    fn apply_egress_policy(
        &self,
        agent: &AgentSpec,
        generation: i32,
        egress: &[EgressRule],
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        // Without a selected Sandbox Driver there is nothing to enforce the policy with.
        if self.sandbox.is_none() {
            return Err(ComputeError::permanent(
                "SANDBOX_DRIVER_UNAVAILABLE",
                "kubernetes_sandbox",
                None,
            ));
        }
        if egress.is_empty() {
            return self.remove_egress_policy(agent, cancel);
        }
        let namespace = self.namespace_of(&agent.installation_id, &agent.namespace_id, cancel)?;
        self.converge(
            &format!("{NETWORKING}/namespaces/{namespace}/networkpolicies"),
            &sandbox::egress_policy(agent, &namespace, generation, egress),
            &agent.installation_id,
            "networkpolicies",
            cancel,
        )
        .map(drop)
    }

    fn remove_egress_policy(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let Some(namespace) =
            self.runtime_namespace(&agent.installation_id, &agent.namespace_id, cancel)?
        else {
            return Ok(());
        };
        self.delete_owned(
            &format!(
                "{NETWORKING}/namespaces/{namespace}/networkpolicies/{}",
                sandbox::egress_policy_name(&agent.agent_id)
            ),
            &agent.installation_id,
            "networkpolicies",
            cancel,
        )
        .map(drop)
    }
}

impl CredentialGateway for KubernetesDriver {
    /// Detaches one credential source from the revision's workload (SPEC E6, Kubernetes): no
    /// workload (a dedicated revision's Deployment; the gateway while it runs this revision)
    /// → `Absent`, or `Pending` while a Pod or live ReplicaSet of the revision still carries
    /// the source; a workload without this installation's labels → permanent
    /// `CREDENTIAL_WITHDRAWAL_MISCONFIGURED`; a workload that no longer carries it → the answer
    /// of its Pods (idempotent, so an E17 `recheck` never fails on an entry already gone); the
    /// harness source while its workload runs (replicas above zero, or a Pod still carrying
    /// it) → permanent `CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT`; otherwise the
    /// workload is written without the source's environment variable (a rollout when it runs)
    /// and the answer is `Pending` until no Pod or live ReplicaSet of the revision carries it,
    /// then `Revoked`. A 409 on the write is re-read and retried once, then retryable. The
    /// Secret is never read, written or deleted.
    fn withdraw_credential_source(
        &self,
        revision: &RevisionSpec,
        source: &CredentialAttachment,
        recheck: bool,
        cancel: &CancelToken,
    ) -> Result<CredentialDetach, ComputeError> {
        // E17's recheck is the same detach: a source already gone is answered, never refused.
        let _ = recheck;
        let Some(namespace) =
            self.runtime_namespace(&revision.installation_id, &revision.namespace_id, cancel)?
        else {
            return Ok(CredentialDetach::Absent);
        };
        for _ in 0..2 {
            if let Some(answer) = self.detach_round(revision, source, &namespace, cancel)? {
                return Ok(answer);
            }
        }
        Err(ComputeError::retryable("kubernetes_conflict", Some(409)).with_reason("Conflict"))
    }
}
