//! What a Compute Driver decides without a request (SPEC C1, R8, R11, Z1, Z11, H2): which
//! harnesses and execution admissions it runs, how it withdraws a rejected one, whether a
//! revision's predecessors must stop first, its maintenance interval, its runtime credentials
//! and the lifecycle hooks it runs. `DriverPolicy` holds these pure answers, each defaulting to
//! "not supported" or the worker's own check, reached through `ComputeDriver::policy`.

use super::error::ComputeError;
use super::hooks::LifecycleHooks;
use super::spec::{ExecutionAdmission, HarnessMode, RevisionSpec};
use crate::cancel::CancelToken;
use std::time::Duration;

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

/// The (harness id, mode) pairs a production worker runs.
pub const PRODUCTION_HARNESSES: [(&str, HarnessMode); 2] = [
    ("codex", HarnessMode::Dedicated),
    ("openclaw", HarnessMode::Embedded),
];

/// A Compute Driver's pure answers: no call here makes a request (SPEC C1).
pub trait DriverPolicy: Send + Sync {
    /// Whether every earlier runtime must be stopped before this revision is prepared (R8).
    fn requires_stopped_predecessors(&self, revision: &RevisionSpec) -> bool;
    /// Whether this driver runs a harness id in a mode at all. A production Kubernetes worker
    /// runs dedicated `codex` and embedded `openclaw` only.
    fn accepts_harness(&self, _harness_id: &str, _mode: HarnessMode) -> bool {
        true
    }
    /// The maintenance interval for active revisions, if the driver wants one (R11).
    fn maintenance_interval(&self) -> Option<Duration> {
        None
    }
    /// Whether this driver activates the revision before its active pointer is committed (a
    /// before-commit driver, SPEC R6): the candidate's pass then activates it first, and only
    /// an activation that finished is committed, so the pointer never names a revision before
    /// its runtime was seen serving. The default is `false`: the pointer commits first.
    fn activates_before_commit(&self, revision: &RevisionSpec) -> bool {
        let _ = revision;
        false
    }
    /// Decides a revision's stored execution admission (SPEC Z1, C1): `Ok` when this driver
    /// runs it. The default is the worker's own check, allowing exactly `{version: 5, mode:
    /// standard}`.
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
    /// What the driver does with an Agent's runtime credentials (SPEC Z11): a driver that
    /// provisions them but cannot delete them makes every Agent deletion fail for good
    /// (`CREDENTIAL_DELETION_UNSUPPORTED`) before any effect.
    fn runtime_credentials(&self) -> RuntimeCredentials {
        RuntimeCredentials::None
    }
    /// The lifecycle hooks this driver runs, given at its construction (SPEC H2, H3); `None`
    /// (the default) when it runs none, so an Installation that configures hooks stops
    /// start-up.
    fn lifecycle_hooks(&self) -> Option<&LifecycleHooks> {
        None
    }
    /// Whether this driver runs a workspace setup for the revision (SPEC WS2, C1): an Agent
    /// with a setup whose revision is not supported is refused `WORKSPACE_SETUP_UNSUPPORTED`
    /// in the Secret step, before any Compute call. The default is `false`.
    fn supports_workspace_setup(&self, revision: &RevisionSpec) -> bool {
        let _ = revision;
        false
    }
    /// Whether this driver delivers repository credentials to the revision's runtime (SPEC
    /// G10), the selected Sandbox Driver being `sandbox_driver_id`: `None` (the default) when
    /// the driver has no such call (`REPOSITORY_RUNTIME_UNSUPPORTED`), else its decision, a
    /// refusal's code being the recipient-unverified one.
    fn validate_repository_credentials(
        &self,
        revision: &RevisionSpec,
        sandbox_driver_id: Option<&str>,
    ) -> Option<Result<(), ComputeError>> {
        let _ = (revision, sandbox_driver_id);
        None
    }
}

/// SPEC G10: a runtime the driver cannot verify as the recipient of Git material.
pub const REPOSITORY_RECIPIENT_UNVERIFIED: &str = "REPOSITORY_RECIPIENT_UNVERIFIED";
