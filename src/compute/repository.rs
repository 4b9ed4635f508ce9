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
}
