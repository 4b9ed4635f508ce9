//! The Compute Driver contract (SPEC C1): what a reconciler may ask of the infrastructure.
//!
//! This module owns the trait, the specs passed to drivers, the observations they return and
//! the typed errors they raise. It never talks to the database: a driver that must reserve
//! addresses before it creates a Namespace (Docker subnets) does so through the
//! `subnet::SubnetLedger` the reconciler hands it. Drivers live in submodules; nothing outside
//! `compute/` opens a socket to infrastructure.

pub mod abortable;
pub mod docker;
pub mod hooks;
pub mod kubernetes;
pub mod subnet;

pub use subnet::{Ipv4Cidr, LedgerUnavailable, SubnetLedger, SubnetPool};

use crate::cancel::{CancelToken, Cancelled};
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// What a driver needs to know about a Namespace.
#[derive(Clone, Debug, Serialize)]
pub struct NamespaceSpec {
    pub installation_id: String,
    pub namespace_id: String,
    pub name: String,
    /// The exact existing infrastructure namespace to adopt, if any.
    pub existing_namespace: Option<String>,
}

/// What a driver needs to know about an admitted revision.
#[derive(Clone, Debug, Serialize)]
pub struct RevisionSpec {
    pub installation_id: String,
    pub namespace_id: String,
    pub agent_id: String,
    pub revision_id: String,
    pub revision: i32,
    pub service_principal_id: String,
    pub harness_id: String,
    pub harness_version: String,
    pub harness_mode: String,
    pub execution_mode: String,
    pub document: serde_json::Value,
    pub harness_auth: Option<serde_json::Value>,
    pub secret_bindings: serde_json::Value,
    /// Each Secret binding resolved to its Secret's metadata, by binding name; never a value.
    /// A binding whose Secret no longer exists is absent (the worker refuses such a revision
    /// with `SECRET_BINDING_UNAVAILABLE` before any Compute call that would use it).
    pub secrets: Vec<SecretProjection>,
    /// The Secret behind a `secret` harness auth, resolved the same way.
    pub harness_secret: Option<SecretProjection>,
    /// A `service_account` harness auth exactly as admitted (SPEC M3): no Secret projection;
    /// the driver mounts the access token from its `secretRef` and the worker never reads it.
    pub managed_account: Option<ManagedAccountAuth>,
    /// The revision's backend (SPEC M1), when it has one.
    pub backend_id: Option<String>,
    pub plugin_ids: Vec<String>,
    /// The execution admission stored with the revision (SPEC Z1), decided again every pass.
    pub execution_admission: ExecutionAdmission,
    /// The Sandbox facets pinned at admission (SPEC S2): the driver enforces each, or refuses
    /// the revision with `SANDBOX_FACET_UNAVAILABLE`.
    pub sandbox_facets: Vec<String>,
    /// The credential sources resolved for this pass (SPEC E19), in admission order, the
    /// harness source first: each attached by reference to its Secret, never read. A withdrawn
    /// tool source is left out; a revision whose harness source is withdrawn never gets here.
    pub credential_sources: Vec<CredentialAttachment>,
}

/// One credential source of a revision's snapshot (SPEC §13): a Kubernetes Secret reference
/// `NAMESPACE/NAME/KEY` the Credential Gateway attaches to the runtime, never a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CredentialAttachment {
    pub source_id: String,
    /// `model_key` or `tool`.
    pub kind: String,
    /// Whether this is the revision's harness source (auth method `credential_source`).
    pub harness: bool,
    pub backend_ref: String,
}

impl CredentialAttachment {
    /// The environment variable the runtime reads it from (SPEC §13): `OCC_HARNESS_API_KEY`
    /// for the harness source, else `OCC_CREDENTIAL_<ID>` (upper-cased, `-` → `_`).
    pub fn env_name(&self) -> String {
        if self.harness {
            "OCC_HARNESS_API_KEY".into()
        } else {
            credential_env_name(&self.source_id)
        }
    }
}

/// `OCC_CREDENTIAL_<ID>` of a tool source id (SPEC §13).
pub fn credential_env_name(source_id: &str) -> String {
    format!(
        "OCC_CREDENTIAL_{}",
        source_id.to_ascii_uppercase().replace(['-', '.'], "_")
    )
}

/// A driver without `withdraw_credential_source` (SPEC E5): a permanent
/// `CREDENTIAL_WITHDRAWAL_UNSUPPORTED`.
pub fn credential_withdrawal_unsupported() -> ComputeError {
    ComputeError::permanent("CREDENTIAL_WITHDRAWAL_UNSUPPORTED", "compute", None)
}

/// What `withdraw_credential_source` found (SPEC E6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialDetach {
    /// No runtime of the revision carries the source any more.
    Revoked,
    /// Detached from the workload, but a runtime still carries it (a rollout under way).
    Pending,
    /// The revision has no runtime: nothing to detach (counts as revoked).
    Absent,
}

/// A revision's execution admission `{version, mode}` (SPEC Z1): PostgreSQL holds the shape
/// (a positive version, a mode `^[a-z][a-z_]{0,31}$`); whether a worker runs it is its
/// Compute Driver's decision (`ComputeDriver::validate_execution_admission`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutionAdmission {
    pub version: u32,
    pub mode: String,
}

impl ExecutionAdmission {
    /// `{version: 5, mode: standard}`: what every revision is admitted with (Rust admits no
    /// egress plan or Git, SPEC §17), and the one pair the worker's own check allows.
    pub fn standard() -> ExecutionAdmission {
        ExecutionAdmission {
            version: 5,
            mode: "standard".into(),
        }
    }

    /// Whether a mode is within the stored shape, `^[a-z][a-z_]{0,31}$`.
    pub fn valid_mode(mode: &str) -> bool {
        mode.len() <= 32
            && mode.starts_with(|c: char| c.is_ascii_lowercase())
            && mode.chars().all(|c| c.is_ascii_lowercase() || c == '_')
    }
}

/// What an execution admission is decided for: only the stored one is (SPEC Z1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionUse {
    /// The admission stored with a revision, decided again before its effects.
    Stored,
}

/// The refusal of an execution admission this worker does not run (SPEC Z1).
pub fn execution_admission_unavailable() -> ComputeError {
    ComputeError::permanent(
        "EXECUTION_ADMISSION_UNAVAILABLE",
        "execution_admission",
        None,
    )
}

/// The worker's own execution-admission check, for a driver without one (SPEC Z1): exactly
/// `{version: 5, mode: standard}`.
pub fn check_execution_admission(revision: &RevisionSpec) -> Result<(), ComputeError> {
    if revision.execution_admission == ExecutionAdmission::standard() {
        Ok(())
    } else {
        Err(execution_admission_unavailable())
    }
}

/// A driver's withdrawal of a rejected active execution (SPEC Z1): run once, under the pass's
/// cancellation token.
pub type Withdrawal<'a> = Box<dyn FnOnce(&CancelToken) -> Result<(), ComputeError> + 'a>;

/// Where a managed account's access token is: a Kubernetes Secret's name and data key in the
/// Agent's namespace. Never a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SecretRef {
    pub name: String,
    pub key: String,
}

/// A managed account's credential; `access_token` is the one kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Credential {
    AccessToken {
        #[serde(rename = "secretRef")]
        secret_ref: SecretRef,
    },
}

impl Credential {
    /// Where the credential's value is.
    pub fn secret_ref(&self) -> &SecretRef {
        match self {
            Credential::AccessToken { secret_ref } => secret_ref,
        }
    }
}

/// A managed account's backend binding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendBinding {
    pub backend_id: String,
    pub driver_id: String,
    pub workspace_id: String,
    pub credential_issued: bool,
}

/// The admitted `service_account` harness auth `{method, source: {namespaceId, id},
/// credential, backendBinding}` (SPEC §10). PostgreSQL enforces the shape; a legacy snapshot
/// may lack the credential or the binding (`None`), which the worker refuses before Compute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ManagedAccountAuth {
    #[serde(rename = "namespaceId")]
    pub namespace_id: String,
    /// The service account's id in its Namespace.
    pub id: String,
    pub credential: Option<Credential>,
    #[serde(rename = "backendBinding")]
    pub backend_binding: Option<BackendBinding>,
}

impl ManagedAccountAuth {
    /// The managed account an admitted harness auth names, `None` for any other method.
    pub fn from_harness_auth(auth: &serde_json::Value) -> Option<ManagedAccountAuth> {
        if auth["method"].as_str() != Some("service_account") {
            return None;
        }
        let field = |name: &str| auth.get(name).cloned().unwrap_or_default();
        Some(ManagedAccountAuth {
            namespace_id: auth["source"]["namespaceId"]
                .as_str()
                .unwrap_or_default()
                .into(),
            id: auth["source"]["id"].as_str().unwrap_or_default().into(),
            credential: serde_json::from_value(field("credential")).ok(),
            backend_binding: serde_json::from_value(field("backendBinding")).ok(),
        })
    }

    /// The access token's Secret reference, when the snapshot holds an access-token credential.
    pub fn access_token(&self) -> Option<&SecretRef> {
        self.credential.as_ref().map(Credential::secret_ref)
    }
}

/// A Secret binding resolved to the Secret's metadata: what a driver needs to reference the
/// value (Kubernetes `secretKeyRef`) without the worker ever reading it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SecretProjection {
    /// The binding name (an environment variable name for the runtime), or `harnessAuth`.
    pub binding: String,
    /// The Secret's id in its Namespace.
    pub id: String,
    /// The Secret's backend reference, `NAMESPACE/NAME/KEY`.
    #[serde(rename = "backendRef")]
    pub backend_ref: String,
    /// The Secret Driver that owns the Secret (SPEC Z4).
    #[serde(rename = "driverId", default, skip_serializing_if = "Option::is_none")]
    pub driver_id: Option<String>,
    /// The backend object's uid (SPEC Z4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl SecretProjection {
    /// Whether the Secret counts for a pass whose Installation selects `driver` (SPEC Z4):
    /// owned by that Secret Driver, with a backend reference naming a non-blank namespace,
    /// name and key, and a non-blank uid.
    pub fn resolvable_by(&self, driver: &str) -> bool {
        let blank = |s: &str| s.trim().is_empty();
        let parts: Vec<&str> = self.backend_ref.splitn(3, '/').collect();
        self.driver_id.as_deref() == Some(driver)
            && parts.len() == 3
            && parts.iter().all(|p| !blank(p))
            && self.uid.as_deref().is_some_and(|u| !blank(u))
    }
}

/// What a driver needs to know about an Agent: its per-Agent objects (`bind_agent`) and its
/// runtime credentials.
#[derive(Clone, Debug, Serialize)]
pub struct AgentSpec {
    pub installation_id: String,
    pub namespace_id: String,
    pub agent_id: String,
    pub service_principal_id: String,
}

/// The class of a failure a driver observed in infrastructure it answered about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    Retryable,
    Permanent,
}

/// A driver's answer to `ensure_namespace` (complete = ready) or `delete_namespace`
/// (complete = gone).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NamespaceObservation {
    pub namespace_id: String,
    pub complete: bool,
    pub failure: Option<FailureClass>,
    /// A bounded code naming what is still pending, e.g. `NETWORK_REMOVAL_PENDING`.
    pub pending_reason: Option<String>,
    /// The driver's description of a failure (`failure` set), for `worker.completed` only
    /// (SPEC Z10): kept when non-empty, at most 256 characters and printable, else dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A plugin warning: an allowed code and an admitted plugin id, nothing else.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PluginWarning {
    pub code: String,
    #[serde(rename = "pluginId")]
    pub plugin_id: String,
}

/// Evidence of a runtime failure a driver observed: the
/// runtime's own bounded code (`AUTHENTICATION_FAILED`, `MODEL_PROBE_TIMEOUT`, …) and where
/// it was seen. The worker maps held codes to deployment failures (`held_runtime_failure`);
/// any other code stays pending and is kept as evidence for the convergence deadline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RuntimeFailure {
    /// The runtime's code, upper-case letters, digits and underscores.
    pub code: String,
    /// The container that reported it, when the driver knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// How many times the runtime restarted, when the driver knows.
    #[serde(rename = "restartCount", skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<u32>,
}

impl RuntimeFailure {
    pub fn new(code: &str) -> RuntimeFailure {
        RuntimeFailure {
            code: code.to_string(),
            container: None,
            restart_count: None,
        }
    }
}

/// A driver's answer to `prepare_revision` (SPEC R5).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RevisionObservation {
    pub namespace_id: String,
    pub agent_id: String,
    pub revision_id: String,
    pub ready: bool,
    /// The driver's pending reason (`WORKLOAD_UNSCHEDULABLE`, …), mapped by
    /// `revision_pending_code`; anything else is `REVISION_INCOMPLETE`.
    pub pending_reason: Option<String>,
    /// A runtime failure the driver observed; held ones end the deployment at once.
    pub runtime_failure: Option<RuntimeFailure>,
    pub warnings: Vec<PluginWarning>,
}

/// Driver pending reasons and the deployment codes they become (SPEC R5).
pub const REVISION_PENDING_CODES: &[(&str, &str)] = &[
    ("WORKLOAD_UNSCHEDULABLE", "REVISION_UNSCHEDULABLE"),
    ("WORKLOAD_IMAGE_PULL_FAILED", "REVISION_IMAGE_PULL_FAILED"),
    (
        "NAMESPACE_POD_QUOTA_EXCEEDED",
        "NAMESPACE_POD_QUOTA_EXCEEDED",
    ),
    ("WORKSPACE_NODE_PENDING", "WORKSPACE_NODE_PENDING"),
    ("WORKSPACE_SETUP_RETRYING", "WORKSPACE_SETUP_RETRYING"),
    (
        "HARNESS_CREDENTIAL_BOOTSTRAP_PENDING",
        "HARNESS_CREDENTIAL_BOOTSTRAP_PENDING",
    ),
    (
        "REPOSITORY_GIT_ROUTE_PENDING",
        "REPOSITORY_GIT_ROUTE_PENDING",
    ),
];

/// Runtime failure codes that runtimes hold until an explicit restart, and the deployment
/// failures they become. Unknown
/// codes stay pending until the deadline.
pub const HELD_RUNTIME_FAILURE_CODES: &[(&str, &str)] = &[
    ("AUTHENTICATION_FAILED", "RUNTIME_AUTHENTICATION_FAILED"),
    ("MODEL_PROBE_CPU_STARVED", "RUNTIME_CPU_STARVED"),
    ("MODEL_PROBE_TIMEOUT", "RUNTIME_MODEL_PROBE_TIMEOUT"),
    ("MODEL_PROBE_FAILED", "RUNTIME_MODEL_PROBE_FAILED"),
    ("LOGIN_FAILED", "RUNTIME_LOGIN_FAILED"),
    ("UNAVAILABLE", "RUNTIME_STARTUP_FAILED"),
    ("INCOMPATIBLE_RESPONSE", "RUNTIME_STARTUP_FAILED"),
    ("WORKSPACE_SETUP_REFUSED", "WORKSPACE_SETUP_REFUSED"),
    ("REPOSITORY_ROUTE_BLOCKED", "REPOSITORY_GIT_ROUTE_BLOCKED"),
];

/// The only plugin warning codes a driver may report.
pub const PLUGIN_WARNING_CODES: &[&str] = &["PLUGIN_INSTALL_FAILED", "PLUGIN_AUTH_REQUIRED"];

/// The deployment code of an unready observation's pending reason.
pub fn revision_pending_code(reason: Option<&str>) -> &'static str {
    reason
        .and_then(|r| REVISION_PENDING_CODES.iter().find(|(k, _)| *k == r))
        .map_or("REVISION_INCOMPLETE", |(_, code)| code)
}

/// The deployment failure of a held runtime failure, `None` for any other code.
pub fn held_runtime_failure(failure: &RuntimeFailure) -> Option<&'static str> {
    HELD_RUNTIME_FAILURE_CODES
        .iter()
        .find(|(k, _)| *k == failure.code)
        .map(|(_, code)| *code)
}

/// How a driver handles an Agent's runtime credentials (SPEC Z11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeCredentials {
    /// The driver provisions none.
    None,
    /// Provisioned, and deleted by `delete_agent_runtime_credentials`.
    ProvisionedAndDeleted,
    /// Provisioned, but the driver cannot delete them.
    ProvisionedOnly,
}

/// A warning from preflight, logged at start-up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PreflightWarning {
    pub code: String,
}

/// The documented kinds of driver errors; reconcilers map them to queue outcomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComputeErrorKind {
    /// The infrastructure API or gateway is unavailable (connection refused, 429, 5xx):
    /// convergence may defer without spending attempts (SPEC R10).
    TransientDependency,
    /// An error that may succeed on retry within the attempt budget.
    Retryable,
    /// A stop whose runtime is still draining (Pods terminating, SPEC Z5): the worker ends the
    /// pass pending with a stop-yield code, refunds the attempt and is exempt from the
    /// convergence deadline. Never a failure.
    Draining,
    /// The driver refuses the request for good, with a stable code.
    Permanent(String),
    /// The infrastructure refused the request on its permissions (an RBAC 403): retried as
    /// `DEPENDENCY_UNAVAILABLE` within the attempt budget, since a grant just made takes a
    /// moment to reach every API server; the work fails with this code once the budget is
    /// spent. (Boxed: `ComputeError` stays within clippy's size for an error.)
    Denied(Box<str>),
    /// The request cannot succeed until something outside the worker changes (a ResourceQuota
    /// used up): the work waits with this pending code, refunding the attempt, within the
    /// convergence deadline (revision work), or retries within its budget (other work).
    Pending(&'static str),
    /// The pass was cancelled at an HTTP boundary.
    Cancelled(Cancelled),
}

/// A driver's description of a failed preparation (SPEC Z6): the
/// worker emits `worker.compute-prepare-failed` only when every field is within its bounds
/// (`valid`), and never lets it change the outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareDiagnostic {
    /// `^[A-Z][A-Z0-9_]{0,63}$`.
    pub code: String,
    /// Where preparation failed, `^[a-z][a-z0-9_]{0,63}$`.
    pub stage: String,
    /// `^[A-Za-z][A-Za-z0-9]{0,63}$`.
    pub error_class: Option<String>,
    /// At most 256 printable characters.
    pub message: Option<String>,
    /// 0-999.
    pub status: Option<u32>,
}

impl PrepareDiagnostic {
    pub fn new(code: &str, stage: &str) -> PrepareDiagnostic {
        PrepareDiagnostic {
            code: code.into(),
            stage: stage.into(),
            error_class: None,
            message: None,
            status: None,
        }
    }

    /// Whether every field is within the seed's bounds.
    pub fn valid(&self) -> bool {
        let token = |v: &str, first: fn(char) -> bool, rest: fn(char) -> bool| {
            let mut chars = v.chars();
            v.len() <= 64 && chars.next().is_some_and(first) && chars.all(rest)
        };
        token(
            &self.code,
            |c| c.is_ascii_uppercase(),
            |c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_',
        ) && token(
            &self.stage,
            |c| c.is_ascii_lowercase(),
            |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_',
        ) && self.error_class.as_deref().is_none_or(|v| {
            token(
                v,
                |c| c.is_ascii_alphabetic(),
                |c| c.is_ascii_alphanumeric(),
            )
        }) && self.message.as_deref().is_none_or(printable)
            && self.status.is_none_or(|s| s <= 999)
    }
}

/// A driver's fixed request diagnostic: the method it called,
/// a gRPC status and a validation category, each when the driver knows it. Never free text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestDiagnostic {
    /// `^[A-Za-z][A-Za-z0-9_.]{0,63}$` (an HTTP verb or RPC name).
    pub method: Option<String>,
    /// 0-16.
    pub grpc_status: Option<u8>,
    /// `^[a-z][a-z0-9_]{0,63}$`.
    pub validation_category: Option<String>,
}

/// At most 256 characters, none of them a control character (SPEC Z10).
pub fn printable(value: &str) -> bool {
    value.chars().count() <= 256 && value.chars().all(|c| c >= ' ' && c != '\u{7f}')
}

/// A driver error. It carries codes, classes and HTTP statuses only, never provider free
/// text, so it is always safe to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeError {
    kind: ComputeErrorKind,
    /// A short stable class, e.g. `docker_api`, `io`, `decode`.
    class: &'static str,
    status: Option<u16>,
    /// A provider reason code when the API gives one (Kubernetes Status reason).
    reason: Option<String>,
    /// What else the driver said, when it said anything (boxed: the error stays small).
    details: Option<Box<Details>>,
}

/// A failed preparation (SPEC Z3): the driver's bounded evidence, when it has some.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Preparation {
    evidence: Option<serde_json::Value>,
}

/// A `ComputeError`'s optional evidence; every field is bounded and safe to log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Details {
    /// The driver's description of a failed preparation (SPEC Z6).
    diagnostic: Option<PrepareDiagnostic>,
    /// The driver's request diagnostic (SPEC Z12).
    request: Option<RequestDiagnostic>,
    /// The class of the first cleanup that failed after this failure (SPEC Z12): this error
    /// still decides the outcome.
    cleanup_class: Option<&'static str>,
    /// Where the driver could not connect: `scheme://host:port` of the API it talks to, never
    /// a path, query or credential.
    endpoint: Option<String>,
    /// The code a retry or wait keeps instead of `DEPENDENCY_UNAVAILABLE` (a lifecycle
    /// hook's, SPEC H4).
    retry_code: Option<String>,
    /// A failed preparation (SPEC Z3), with the driver's evidence when it has some.
    preparation: Option<Preparation>,
}

impl ComputeError {
    /// A wait on something outside the worker, with its pending code.
    pub fn pending(code: &'static str, class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Pending(code),
            ..ComputeError::transient(class, status)
        }
    }

    pub fn transient(class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::TransientDependency,
            class,
            status,
            reason: None,
            details: None,
        }
    }

    pub fn retryable(class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Retryable,
            class,
            status,
            reason: None,
            details: None,
        }
    }

    /// A stop still draining (SPEC Z5).
    pub fn draining(class: &'static str) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Draining,
            class,
            status: None,
            reason: None,
            details: None,
        }
    }

    /// A refusal on permissions (`ComputeErrorKind::Denied`), failing with `code` once retries
    /// are spent.
    pub fn denied(code: &str, class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Denied(code.into()),
            ..ComputeError::permanent(code, class, status)
        }
    }

    pub fn permanent(code: &str, class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Permanent(code.to_string()),
            class,
            status,
            reason: None,
            details: None,
        }
    }

    /// A preparation that failed for good (SPEC Z3): permanent with `code`, carrying the
    /// driver's evidence (`{preparation: evidence}` in the failed work's result data). The
    /// worker stops the candidate's runtime before it publishes the failure.
    pub fn preparation_failed(
        code: &str,
        class: &'static str,
        evidence: Option<serde_json::Value>,
    ) -> ComputeError {
        let mut e = ComputeError::permanent(code, class, None);
        e.details_mut().preparation = Some(Preparation { evidence });
        e
    }

    /// Whether this is a failed preparation (SPEC Z3).
    pub fn is_preparation_failure(&self) -> bool {
        self.details
            .as_ref()
            .is_some_and(|d| d.preparation.is_some())
    }

    /// A failed preparation's evidence (SPEC Z3).
    pub fn preparation_evidence(&self) -> Option<&serde_json::Value> {
        self.details
            .as_ref()?
            .preparation
            .as_ref()?
            .evidence
            .as_ref()
    }

    pub fn cancelled(cancelled: Cancelled) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Cancelled(cancelled),
            class: "cancelled",
            status: None,
            reason: None,
            details: None,
        }
    }

    /// The same error, naming the address the driver could not reach.
    pub fn with_endpoint(mut self, endpoint: &str) -> ComputeError {
        self.details_mut().endpoint = Some(endpoint.into());
        self
    }

    /// The address the driver could not reach, for a transport failure.
    pub fn endpoint(&self) -> Option<&str> {
        self.details.as_ref()?.endpoint.as_deref()
    }

    fn details_mut(&mut self) -> &mut Details {
        self.details.get_or_insert_with(Box::default)
    }

    /// The same error, retried or waited on with `code` instead of `DEPENDENCY_UNAVAILABLE`.
    pub fn with_retry_code(mut self, code: &str) -> ComputeError {
        self.details_mut().retry_code = Some(code.into());
        self
    }

    /// The code a retry or a wait on this error carries (SPEC H4, R10).
    pub fn retry_code(&self) -> &str {
        self.details
            .as_ref()
            .and_then(|d| d.retry_code.as_deref())
            .unwrap_or("DEPENDENCY_UNAVAILABLE")
    }

    /// Attaches a provider reason code, bounded to a code-like token (at most 64 letters,
    /// digits and underscores).
    pub fn with_reason(mut self, reason: &str) -> ComputeError {
        let bounded: String = reason
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(64)
            .collect();
        if !bounded.is_empty() {
            self.reason = Some(bounded);
        }
        self
    }

    /// Attaches the driver's description of a failed preparation (SPEC Z6).
    pub fn with_diagnostic(mut self, diagnostic: PrepareDiagnostic) -> ComputeError {
        self.details_mut().diagnostic = Some(diagnostic);
        self
    }

    /// Attaches the driver's request diagnostic (SPEC Z12).
    pub fn with_request(mut self, request: RequestDiagnostic) -> ComputeError {
        self.details_mut().request = Some(request);
        self
    }

    /// Records that a cleanup after this failure failed too, with its class (SPEC Z12).
    pub fn with_failed_cleanup(mut self, class: &'static str) -> ComputeError {
        self.details_mut().cleanup_class = Some(class);
        self
    }

    pub fn diagnostic(&self) -> Option<&PrepareDiagnostic> {
        self.details.as_ref()?.diagnostic.as_ref()
    }

    pub fn request(&self) -> Option<&RequestDiagnostic> {
        self.details.as_ref()?.request.as_ref()
    }

    pub fn cleanup_class(&self) -> Option<&'static str> {
        self.details.as_ref()?.cleanup_class
    }

    pub fn kind(&self) -> &ComputeErrorKind {
        &self.kind
    }

    pub fn class(&self) -> &'static str {
        self.class
    }

    pub fn status(&self) -> Option<u16> {
        self.status
    }

    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    pub fn is_transient(&self) -> bool {
        self.kind == ComputeErrorKind::TransientDependency
    }
}

impl From<Cancelled> for ComputeError {
    fn from(cancelled: Cancelled) -> ComputeError {
        ComputeError::cancelled(cancelled)
    }
}

impl fmt::Display for ComputeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ComputeErrorKind::TransientDependency => write!(f, "compute dependency unavailable")?,
            ComputeErrorKind::Retryable => write!(f, "compute request failed")?,
            ComputeErrorKind::Draining => write!(f, "compute stop still draining")?,
            ComputeErrorKind::Permanent(code) => write!(f, "compute refused: {code}")?,
            ComputeErrorKind::Denied(code) => write!(f, "compute denied: {code}")?,
            ComputeErrorKind::Pending(code) => write!(f, "compute pending: {code}")?,
            ComputeErrorKind::Cancelled(c) => write!(f, "{c}")?,
        }
        write!(f, " (class {}", self.class)?;
        if let Some(status) = self.status {
            write!(f, ", status {status}")?;
        }
        if let Some(reason) = &self.reason {
            write!(f, ", reason {reason}")?;
        }
        if let Some(endpoint) = self.endpoint() {
            write!(f, ", at {endpoint}")?;
        }
        write!(f, ")")
    }
}

impl std::error::Error for ComputeError {}

/// The (harness id, mode) pairs a production worker runs.
pub const PRODUCTION_HARNESSES: [(&str, &str); 2] =
    [("codex", "dedicated"), ("openclaw", "embedded")];

/// The Compute Driver contract. Every call takes the pass's cancellation token and stops at
/// the next HTTP boundary once it is cancelled. Calls are idempotent: a pass may run again
/// after a lost lease.
pub trait ComputeDriver: Send + Sync {
    /// The configured driver id, pinned into revisions (`compute_id`).
    fn id(&self) -> &str;
    /// The implementation name: `docker`, `kubernetes`, or a test driver's.
    fn implementation(&self) -> &str;
    /// Checks the infrastructure answers; runs before the worker starts claiming.
    fn preflight(&self, cancel: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError>;
    fn ensure_namespace(
        &self,
        namespace: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError>;
    /// `ensure_namespace` with the claim-fenced `ledger` in which the driver reserves the
    /// Namespace's subnet before creating anything on it; the Namespace reconciler always calls
    /// this one. Drivers that pick no shared address themselves keep this default, which
    /// ignores the ledger. `LedgerUnavailable` from the ledger must end the call with an error:
    /// the reconciler reports the ledger's own error instead.
    fn ensure_namespace_reserving(
        &self,
        namespace: &NamespaceSpec,
        ledger: &dyn SubnetLedger,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        let _ = ledger;
        self.ensure_namespace(namespace, cancel)
    }
    /// Deletes the Namespace and everything it owns; `complete` once all of it is gone.
    fn delete_namespace(
        &self,
        namespace: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError>;
    fn prepare_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError>;
    /// Makes sure the Agent's route serves no revision before the first pointer commit of a
    /// dedicated Agent; idempotent.
    fn deactivate_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError>;
    /// Ensures the Agent's own objects (its runtime identity and route) exist, before stops,
    /// retirements and preparation; idempotent.
    fn bind_agent(&self, agent: &AgentSpec, cancel: &CancelToken) -> Result<(), ComputeError>;
    /// Points the Agent's route at this revision.
    fn activate_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError>;
    /// Stops the revision's runtime; idempotent.
    fn stop_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError>;
    /// Removes the revision's runtime for good; idempotent.
    fn retire_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError>;
    fn delete_agent_runtime_credentials(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError>;
    /// What the driver does with an Agent's runtime credentials (SPEC Z11): a driver that
    /// provisions them but cannot delete them makes every Agent deletion fail for good
    /// (`CREDENTIAL_DELETION_UNSUPPORTED`) before any effect.
    fn runtime_credentials(&self) -> RuntimeCredentials {
        RuntimeCredentials::None
    }
    /// Whether every earlier runtime must be stopped before this revision is prepared (R8).
    fn requires_stopped_predecessors(&self, revision: &RevisionSpec) -> bool;
    /// Whether this driver runs a harness id in a mode at all: a pure check, no request. A
    /// production Kubernetes worker runs dedicated `codex` and embedded `openclaw` only.
    fn accepts_harness(&self, _harness_id: &str, _mode: &str) -> bool {
        true
    }
    /// The maintenance interval for active revisions, if the driver wants one (R11).
    fn maintenance_interval(&self) -> Option<Duration> {
        None
    }
    /// Decides a revision's stored execution admission (SPEC Z1, C1): `Ok` when this driver
    /// runs it. The default is the worker's own check, allowing exactly `{version: 5, mode:
    /// standard}`. A pure check, no request.
    fn validate_execution_admission(
        &self,
        revision: &RevisionSpec,
        purpose: AdmissionUse,
    ) -> Result<(), ComputeError> {
        let _ = purpose;
        check_execution_admission(revision)
    }
    /// How this driver withdraws a running active revision whose execution admission it no
    /// longer accepts (SPEC Z1, C1), `None` (the default) when it cannot: the worker then
    /// takes SPEC Z2's active path.
    fn rejected_execution_withdrawal<'a>(
        &'a self,
        revision: &'a RevisionSpec,
    ) -> Option<Withdrawal<'a>> {
        let _ = revision;
        None
    }
    /// Takes the Installation's lifecycle hooks (SPEC H2), called once at start-up before any
    /// other call; `false` when the driver runs no hooks, which stops start-up.
    fn set_lifecycle_hooks(&self, hooks: std::sync::Arc<hooks::LifecycleHooks>) -> bool {
        let _ = hooks;
        false
    }
    /// Takes the Installation's Sandbox Driver (SPEC S1), called once at start-up before
    /// preflight; `false` when the driver cannot enforce one, which stops start-up.
    fn set_sandbox(&self, sandbox: &crate::installation::Sandbox) -> bool {
        let _ = sandbox;
        false
    }
    /// The Sandbox Driver's `apply_egress_policy` (SPEC S3): makes the Agent's Pods' egress
    /// exactly `egress` (its generation `generation`), removing the policy when `egress` is
    /// empty. By default there is no Sandbox Driver: a permanent `SANDBOX_DRIVER_UNAVAILABLE`.
    fn apply_egress_policy(
        &self,
        agent: &AgentSpec,
        generation: i32,
        egress: &[crate::installation::EgressRule],
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let _ = (agent, generation, egress, cancel);
        Err(ComputeError::permanent(
            "SANDBOX_DRIVER_UNAVAILABLE",
            "compute",
            None,
        ))
    }
    /// Whether this driver has `withdraw_credential_source` (SPEC E5, E17): without it a
    /// withdrawal fails for good with `CREDENTIAL_WITHDRAWAL_UNSUPPORTED` and no re-detach
    /// runs before a preparation.
    fn withdraws_credentials(&self) -> bool {
        false
    }
    /// Detaches `source` from `revision`'s runtime (SPEC E6), never touching its Secret;
    /// `recheck` is E17's re-detach of a source already revoked. A refusal is a permanent
    /// error with its code (`CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT` for a harness
    /// source its running workload still needs, `CREDENTIAL_WITHDRAWAL_MISCONFIGURED`).
    fn withdraw_credential_source(
        &self,
        revision: &RevisionSpec,
        source: &CredentialAttachment,
        recheck: bool,
        cancel: &CancelToken,
    ) -> Result<CredentialDetach, ComputeError> {
        let _ = (revision, source, recheck, cancel);
        Err(credential_withdrawal_unsupported())
    }
    /// The Sandbox Driver's `remove_egress_policy` (SPEC S3, A2): the Agent's egress policy is
    /// gone. By default nothing was ever applied, so nothing is left to remove.
    fn remove_egress_policy(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let _ = (agent, cancel);
        Ok(())
    }
}

/// Checks a Namespace observation names the Namespace asked about.
pub fn valid_namespace_observation(observation: &NamespaceObservation, namespace_id: &str) -> bool {
    observation.namespace_id == namespace_id
        && observation.pending_reason.as_deref().is_none_or(is_code)
}

/// Checks a revision observation names the exact revision and carries only bounded codes and
/// warnings for admitted plugins (SPEC R5).
pub fn valid_revision_observation(
    observation: &RevisionObservation,
    revision: &RevisionSpec,
) -> bool {
    observation.namespace_id == revision.namespace_id
        && observation.agent_id == revision.agent_id
        && observation.revision_id == revision.revision_id
        && observation.pending_reason.as_deref().is_none_or(is_code)
        && observation
            .runtime_failure
            .as_ref()
            .is_none_or(|f| is_code(&f.code) && f.container.as_deref().is_none_or(is_name))
        && valid_plugin_warnings(&observation.warnings, &revision.plugin_ids)
}

/// Plugin warnings: one of the seed's two codes, for an admitted plugin, at most one per
/// plugin.
fn valid_plugin_warnings(warnings: &[PluginWarning], plugin_ids: &[String]) -> bool {
    let mut seen: Vec<&str> = Vec::new();
    warnings.iter().all(|w| {
        let fresh = !seen.contains(&w.plugin_id.as_str());
        seen.push(&w.plugin_id);
        fresh
            && PLUGIN_WARNING_CODES.contains(&w.code.as_str())
            && plugin_ids.iter().any(|id| id == &w.plugin_id)
    })
}

/// A bounded object name: lower-case letters, digits, `-` and `.`, at most 253 characters.
fn is_name(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 253
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// A reason code: upper-case letters, digits and underscores, at most 64 characters.
pub fn is_code(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 64
        && value.starts_with(|c: char| c.is_ascii_uppercase())
        && value
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_bounded_tokens() {
        assert!(is_code("REVISION_INCOMPLETE"));
        assert!(!is_code("revision incomplete"));
        assert!(!is_code(""));
        assert!(!is_code(&"A".repeat(65)));
    }

    #[test]
    fn prepare_diagnostics_are_kept_only_within_the_seeds_bounds() {
        // SPEC Z6.
        let ok = PrepareDiagnostic {
            error_class: Some("ApiError".into()),
            message: Some("x".repeat(256)),
            status: Some(999),
            ..PrepareDiagnostic::new("A_1", "s_1")
        };
        assert!(ok.valid());
        let broken = [
            PrepareDiagnostic::new("", "s"),
            PrepareDiagnostic::new(&"A".repeat(65), "s"),
            PrepareDiagnostic::new("1A", "s"),
            PrepareDiagnostic::new("A", "S"),
            PrepareDiagnostic {
                error_class: Some("Api_Error".into()),
                ..PrepareDiagnostic::new("A", "s")
            },
            PrepareDiagnostic {
                message: Some("x".repeat(257)),
                ..PrepareDiagnostic::new("A", "s")
            },
            PrepareDiagnostic {
                message: Some("tab\there".into()),
                ..PrepareDiagnostic::new("A", "s")
            },
            PrepareDiagnostic {
                message: Some("del\u{7f}".into()),
                ..PrepareDiagnostic::new("A", "s")
            },
            PrepareDiagnostic {
                status: Some(1000),
                ..PrepareDiagnostic::new("A", "s")
            },
        ];
        for d in broken {
            assert!(!d.valid(), "{d:?}");
        }
    }

    #[test]
    fn z1_the_workers_own_check_allows_exactly_version_5_standard() {
        let spec = |version: u32, mode: &str| {
            let mut spec = test_revision();
            spec.execution_admission = ExecutionAdmission {
                version,
                mode: mode.into(),
            };
            spec
        };
        assert!(check_execution_admission(&spec(5, "standard")).is_ok());
        for (version, mode) in [(4, "standard"), (6, "standard"), (5, "protected")] {
            let e = check_execution_admission(&spec(version, mode)).unwrap_err();
            assert_eq!(
                e.kind(),
                &ComputeErrorKind::Permanent("EXECUTION_ADMISSION_UNAVAILABLE".into())
            );
        }
        assert!(ExecutionAdmission::valid_mode("standard"));
        assert!(ExecutionAdmission::valid_mode(&"a".repeat(32)));
        for bad in ["", "Standard", "_a", "a1", &"a".repeat(33)] {
            assert!(!ExecutionAdmission::valid_mode(bad), "{bad}");
        }
    }

    #[test]
    fn z3_a_preparation_failure_is_permanent_and_carries_its_evidence() {
        let evidence = serde_json::json!({"stage": "seed"});
        let e = ComputeError::preparation_failed("PREP", "test", Some(evidence.clone()));
        assert_eq!(e.kind(), &ComputeErrorKind::Permanent("PREP".into()));
        assert!(e.is_preparation_failure());
        assert_eq!(e.preparation_evidence(), Some(&evidence));
        let bare = ComputeError::preparation_failed("PREP", "test", None);
        assert!(bare.is_preparation_failure() && bare.preparation_evidence().is_none());
        assert!(!ComputeError::permanent("PREP", "test", None).is_preparation_failure());
    }

    fn test_revision() -> RevisionSpec {
        RevisionSpec {
            installation_id: "inst".into(),
            namespace_id: "ns1".into(),
            agent_id: "ag".into(),
            revision_id: "rev".into(),
            revision: 1,
            service_principal_id: "sp".into(),
            harness_id: "codex".into(),
            harness_version: "1.0.0".into(),
            harness_mode: "dedicated".into(),
            execution_mode: "dedicated".into(),
            document: serde_json::json!({}),
            harness_auth: None,
            secret_bindings: serde_json::json!({}),
            secrets: vec![],
            harness_secret: None,
            managed_account: None,
            backend_id: None,
            plugin_ids: vec![],
            execution_admission: ExecutionAdmission::standard(),
            sandbox_facets: Vec::new(),
            credential_sources: Vec::new(),
        }
    }

    #[test]
    fn reasons_are_stripped_to_tokens() {
        let e = ComputeError::transient("http", Some(503)).with_reason("Service Unavailable!");
        assert_eq!(e.reason(), Some("ServiceUnavailable"));
        assert!(e.is_transient());
    }
}
