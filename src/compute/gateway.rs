//! The Credential Gateway (SPEC §13, E5, E6, E17): a revision's credential sources as the
//! runtime gets them, by reference, and `CredentialGateway`, the capability a Compute Driver
//! offers when it can detach one (`ComputeDriver::credential_gateway`).
//!
//! Where a driver offers no gateway, a withdrawal fails for good with
//! `CREDENTIAL_WITHDRAWAL_UNSUPPORTED` (`credential_withdrawal_unsupported`) and no re-detach
//! runs before a preparation. This module never reads a Secret's value.

use super::error::ComputeError;
use super::spec::{CredentialAttachment, RevisionSpec};
use crate::cancel::CancelToken;

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

/// Detaching a credential source from a revision's runtime (SPEC E6), offered by a Compute
/// Driver with a Credential Gateway.
pub trait CredentialGateway: Send + Sync {
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
    ) -> Result<CredentialDetach, ComputeError>;
}
