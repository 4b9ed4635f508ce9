//! What a Compute Driver answers (SPEC C1, R5): Namespace and revision observations, runtime
//! failures and plugin warnings, the codes they may carry and the checks that hold a driver's
//! answer to their bounds before the worker believes it.
//!
//! Plain data and pure functions; it never talks to anything.

use super::spec::RevisionSpec;
use serde::Serialize;

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
    /// `revision_pending`; anything else is `REVISION_INCOMPLETE`.
    pub pending_reason: Option<String>,
    /// A runtime failure the driver observed; held ones end the deployment at once.
    pub runtime_failure: Option<RuntimeFailure>,
    pub warnings: Vec<PluginWarning>,
    /// Sessions whose material the runtime could not read (SPEC G11): valid only on an unready
    /// observation of a revision whose sessions were handed over, each naming one of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repository_credential_material_missing: Vec<super::spec::MissingMaterial>,
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
    // SPEC WS5: readiness codes of a workspace node, never reported by the Kubernetes driver.
    (
        "WORKSPACE_NODE_BINDING_PENDING",
        "WORKSPACE_NODE_BINDING_PENDING",
    ),
    (
        "WORKSPACE_NODE_RECONNECT_PENDING",
        "WORKSPACE_NODE_RECONNECT_PENDING",
    ),
    (BOOTSTRAP_PENDING, BOOTSTRAP_PENDING),
    (
        "REPOSITORY_GIT_ROUTE_PENDING",
        "REPOSITORY_GIT_ROUTE_PENDING",
    ),
    // SPEC G18: a readiness code, like WS5's.
    (
        "REPOSITORY_GIT_MATERIAL_PENDING",
        "REPOSITORY_GIT_MATERIAL_PENDING",
    ),
];

/// Runtime failure codes that runtimes hold until an explicit restart, the deployment failures
/// they become, and whether the failure is kept as the work's evidence. Unknown
/// codes stay pending until the deadline.
pub const HELD_RUNTIME_FAILURE_CODES: &[(&str, &str, bool)] = &[
    (
        "AUTHENTICATION_FAILED",
        "RUNTIME_AUTHENTICATION_FAILED",
        false,
    ),
    ("MODEL_PROBE_CPU_STARVED", "RUNTIME_CPU_STARVED", false),
    ("MODEL_PROBE_TIMEOUT", "RUNTIME_MODEL_PROBE_TIMEOUT", false),
    ("MODEL_PROBE_FAILED", "RUNTIME_MODEL_PROBE_FAILED", true),
    ("LOGIN_FAILED", "RUNTIME_LOGIN_FAILED", false),
    ("UNAVAILABLE", "RUNTIME_STARTUP_FAILED", false),
    ("INCOMPATIBLE_RESPONSE", "RUNTIME_STARTUP_FAILED", false),
    ("WORKSPACE_SETUP_REFUSED", "WORKSPACE_SETUP_REFUSED", false),
    (
        "REPOSITORY_ROUTE_BLOCKED",
        "REPOSITORY_GIT_ROUTE_BLOCKED",
        false,
    ),
];

/// The only plugin warning codes a driver may report.
pub const PLUGIN_WARNING_CODES: &[&str] = &["PLUGIN_INSTALL_FAILED", "PLUGIN_AUTH_REQUIRED"];

/// The pending reason of a harness whose credentials are still being bootstrapped (SPEC Z3):
/// at the convergence deadline its candidate is stopped before the failure is published.
pub const BOOTSTRAP_PENDING: &str = "HARNESS_CREDENTIAL_BOOTSTRAP_PENDING";

/// What an unready observation's pending reason means for the deployment (SPEC R5, Z3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RevisionPending {
    pub code: &'static str,
    /// The harness's credential bootstrap (`BOOTSTRAP_PENDING`).
    pub bootstrap: bool,
}

/// The deployment meaning of an unready observation's pending reason.
pub fn revision_pending(reason: Option<&str>) -> RevisionPending {
    RevisionPending {
        code: reason
            .and_then(|r| REVISION_PENDING_CODES.iter().find(|(k, _)| *k == r))
            .map_or("REVISION_INCOMPLETE", |(_, code)| code),
        bootstrap: reason == Some(BOOTSTRAP_PENDING),
    }
}

/// A held runtime failure's deployment failure (R5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldFailure {
    /// The deployment failure's code.
    pub code: &'static str,
    /// The failure is kept as the work's result evidence (a failed model probe).
    pub keeps_evidence: bool,
}

/// The deployment failure of a held runtime failure, `None` for any other code.
pub fn held_runtime_failure(failure: &RuntimeFailure) -> Option<HeldFailure> {
    HELD_RUNTIME_FAILURE_CODES
        .iter()
        .find(|(k, _, _)| *k == failure.code)
        .map(|&(_, code, keeps_evidence)| HeldFailure {
            code,
            keeps_evidence,
        })
}

/// A warning from preflight, logged at start-up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PreflightWarning {
    pub code: String,
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
        && valid_missing_material(observation, revision)
}

/// SPEC G11: a missing-material list is valid only on an unready observation of a revision
/// whose sessions were handed over, each entry one of those sessions, none twice.
fn valid_missing_material(observation: &RevisionObservation, revision: &RevisionSpec) -> bool {
    let missing = &observation.repository_credential_material_missing;
    if missing.is_empty() {
        return true;
    }
    let Some(access) = revision.repository.as_ref() else {
        return false;
    };
    !observation.ready
        && !access.materials.is_empty()
        && missing.iter().enumerate().all(|(i, m)| {
            !missing[..i].contains(m)
                && access
                    .materials
                    .iter()
                    .any(|s| s.repository_ref == m.repository_ref && s.session_id == m.session_id)
        })
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
