//! What a Compute Driver that delivers repository credentials does beyond preparing the
//! revision with its sessions' material (SPEC §19): where the material must be, for the sender.

use super::error::ComputeError;
use super::spec::RevisionSpec;
use crate::cancel::CancelToken;

/// What withdrawing an expired revision's Git access came to (SPEC G14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepositoryWithdrawal {
    /// No runtime of the revision carries Git material any more.
    Withdrawn,
    /// The workload was written without it; a runtime still carries it.
    Pending,
    /// The runtime cannot drop it while it runs: it must be retired.
    RetireRuntime,
}

/// How a revision's runtime looks to `observe_revision` (SPEC G15): what the worker keeps of
/// it; anything else the driver sees is `Unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HarnessState {
    Running,
    Starting,
    Lost,
    Unknown,
}

impl HarnessState {
    pub fn as_str(self) -> &'static str {
        match self {
            HarnessState::Running => "running",
            HarnessState::Starting => "starting",
            HarnessState::Lost => "lost",
            HarnessState::Unknown => "unknown",
        }
    }
}

/// A driver's repository-credential calls (SPEC G11, G14, G20), reached through
/// `ComputeDriver::repository`.
pub trait RepositoryRuntime: Send + Sync {
    /// The infrastructure namespace the revision's runtime reads its material Secrets from:
    /// the `kubernetesNamespace` of the sender's `open` (SPEC G20).
    fn runtime_namespace(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<String, ComputeError>;
    /// Withdraws Git from the expired revision's runtime without retiring it (SPEC G14):
    /// idempotent; `Pending` until no runtime of the revision carries the material.
    fn retire_expired_repository_access(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<RepositoryWithdrawal, ComputeError>;
    /// How the revision's runtime is doing now (SPEC G15), read without changing anything.
    fn observe_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<HarnessState, ComputeError>;
    /// What identifies the execution that received the revision's Git material (SPEC G15,
    /// G19 *captureExecution*): compared with the captured one before a standing revision's
    /// maintenance; a JSON object or array of at most 64 KiB.
    fn verify_repository_execution(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<serde_json::Value, ComputeError>;
}
