//! The Compute Driver contract (SPEC C1): what a reconciler may ask of the infrastructure.
//!
//! This module owns the trait; the specs passed to drivers (`spec`), the observations they
//! return (`observation`) and the typed errors they raise (`error`) live in its submodules, and
//! so does each optional capability, a trait of its own reached through the driver:
//! `policy::DriverPolicy` (pure answers, SPEC Z1, Z11, H2), `sandbox::SandboxDriver` (S3) and
//! `gateway::CredentialGateway` (E6). A driver is built whole, everything it needs given at
//! construction; nothing is set on it afterwards. It never talks to the database: a driver that must reserve
//! addresses before it creates a Namespace (Docker subnets) does so through the
//! `subnet::SubnetLedger` the reconciler hands it. Drivers live in submodules; nothing outside
//! `compute/` opens a socket to infrastructure.

pub mod abortable;
pub mod cidr;
pub mod docker;
mod error;
mod gateway;
pub mod hooks;
pub mod kubernetes;
mod observation;
mod policy;
pub mod repository;
pub mod sandbox;
mod spec;
pub mod subnet;
#[cfg(test)]
mod tests;

pub use error::*;
pub use gateway::*;
pub use observation::*;
pub use policy::*;
pub use repository::{HarnessState, RepositoryRuntime, RepositoryWithdrawal};
pub use spec::*;
pub use subnet::{Ipv4Cidr, LedgerUnavailable, SubnetLedger, SubnetPool};

use crate::cancel::CancelToken;
use sandbox::SandboxDriver;
use std::time::Duration;

/// The budget of one driver request when none is configured: the default of
/// `OCC_COMPUTE_REQUEST_TIMEOUT_MS`, which the worker always passes to its driver (W2).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// Removes the Agent's runtime credentials and own objects (SPEC Z11); idempotent.
    fn delete_agent_runtime_credentials(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError>;
    /// The driver's pure answers: harnesses and execution admissions it runs, predecessors,
    /// maintenance, runtime credentials and lifecycle hooks (`DriverPolicy`).
    fn policy(&self) -> &dyn DriverPolicy;
    /// The Sandbox Driver this driver enforces (SPEC S1, S3), `None` (the default) when it
    /// enforces none: then `apply_egress_policy` is a permanent `SANDBOX_DRIVER_UNAVAILABLE`
    /// (`sandbox::sandbox_driver_unavailable`) and there is no egress policy to remove.
    fn sandbox(&self) -> Option<&dyn SandboxDriver> {
        None
    }
    /// The Credential Gateway this driver offers (SPEC §13, E5), `None` (the default) when it
    /// cannot withdraw a credential source: a withdrawal then fails for good with
    /// `CREDENTIAL_WITHDRAWAL_UNSUPPORTED` and no re-detach runs before a preparation.
    fn credential_gateway(&self) -> Option<&dyn CredentialGateway> {
        None
    }
    /// How this driver delivers repository credentials (SPEC §19, G10-G15), `None` (the
    /// default) when it delivers none: a revision with credentials is then refused
    /// `REPOSITORY_RUNTIME_UNSUPPORTED` before any Compute call.
    fn repository(&self) -> Option<&dyn RepositoryRuntime> {
        None
    }

    /// How many more passes the driver can serve now without making them wait on a resource
    /// it rations (SPEC Q10): the worker claims no more than this, so that claims are not held
    /// while their passes queue for, say, a client-side rate limit, where a crash would spend
    /// their attempts. `None`: no bound.
    fn claim_capacity(&self) -> Option<usize> {
        None
    }
}
