//! What a Compute Driver that delivers repository credentials does beyond preparing the
//! revision with its sessions' material (SPEC §19): where the material must be, for the sender.

use super::error::ComputeError;
use super::spec::RevisionSpec;
use crate::cancel::CancelToken;

/// A driver's repository-credential calls (SPEC G11, G20), reached through
/// `ComputeDriver::repository`.
pub trait RepositoryRuntime: Send + Sync {
    /// The infrastructure namespace the revision's runtime reads its material Secrets from:
    /// the `kubernetesNamespace` of the sender's `open` (SPEC G20).
    fn runtime_namespace(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<String, ComputeError>;
}
