//! The Compute Driver contract (SPEC C1): what a reconciler may ask of the infrastructure.
//!
//! This module owns the trait, the specs passed to drivers, the observations they return and
//! the typed errors they raise. It never talks to the database: a driver that must reserve
//! addresses before it creates a Namespace (Docker subnets) does so through the
//! `subnet::SubnetLedger` the reconciler hands it. Drivers live in submodules; nothing outside
//! `compute/` opens a socket to infrastructure.

pub mod docker;
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
    pub plugin_ids: Vec<String>,
}

/// What a driver needs to know to remove an Agent's runtime credentials.
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
}

/// A plugin warning: an allowed code and an admitted plugin id, nothing else.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PluginWarning {
    pub code: String,
    #[serde(rename = "pluginId")]
    pub plugin_id: String,
}

/// A driver's answer to `prepare_revision` (SPEC R5).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RevisionObservation {
    pub namespace_id: String,
    pub agent_id: String,
    pub revision_id: String,
    pub ready: bool,
    /// A pending code such as `REVISION_UNSCHEDULABLE`; `REVISION_INCOMPLETE` when absent.
    pub pending_reason: Option<String>,
    /// A held runtime failure such as `RUNTIME_AUTHENTICATION_FAILED`.
    pub runtime_failure: Option<String>,
    pub warnings: Vec<PluginWarning>,
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
    /// The driver refuses the request for good, with a stable code.
    Permanent(String),
    /// The pass was cancelled at an HTTP boundary.
    Cancelled(Cancelled),
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
}

impl ComputeError {
    pub fn transient(class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::TransientDependency,
            class,
            status,
            reason: None,
        }
    }

    pub fn retryable(class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Retryable,
            class,
            status,
            reason: None,
        }
    }

    pub fn permanent(code: &str, class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Permanent(code.to_string()),
            class,
            status,
            reason: None,
        }
    }

    pub fn cancelled(cancelled: Cancelled) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Cancelled(cancelled),
            class: "cancelled",
            status: None,
            reason: None,
        }
    }

    /// Attaches a provider reason code (already bounded to a code-like token).
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
            ComputeErrorKind::Permanent(code) => write!(f, "compute refused: {code}")?,
            ComputeErrorKind::Cancelled(c) => write!(f, "{c}")?,
        }
        write!(f, " (class {}", self.class)?;
        if let Some(status) = self.status {
            write!(f, ", status {status}")?;
        }
        if let Some(reason) = &self.reason {
            write!(f, ", reason {reason}")?;
        }
        write!(f, ")")
    }
}

impl std::error::Error for ComputeError {}

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
    /// Whether every earlier runtime must be stopped before this revision is prepared (R8).
    fn requires_stopped_predecessors(&self, revision: &RevisionSpec) -> bool;
    /// The maintenance interval for active revisions, if the driver wants one (R11).
    fn maintenance_interval(&self) -> Option<Duration> {
        None
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
        && observation.runtime_failure.as_deref().is_none_or(is_code)
        && observation
            .warnings
            .iter()
            .all(|w| is_code(&w.code) && revision.plugin_ids.iter().any(|id| id == &w.plugin_id))
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
    fn reasons_are_stripped_to_tokens() {
        let e = ComputeError::transient("http", Some(503)).with_reason("Service Unavailable!");
        assert_eq!(e.reason(), Some("ServiceUnavailable"));
        assert!(e.is_transient());
    }
}
