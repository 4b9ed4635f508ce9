//! Reconciliation: one `Reconciler` per work operation, the `Pass` it runs in, and the policy
//! that turns what happened into a queue transition.
//!
//! The floors, bottom up: `report` (what a pass says happened) and `policy` (what it becomes),
//! `pass` (what a pass runs with), `dispatch` (the contract, its erased form, `finalize`) and
//! `publish` (the fenced batch publication); `steps` and `rows` are shared by the reconcilers;
//! the reconcilers each have a file; `registry` alone names them. Nothing here opens a socket;
//! reconcilers reach infrastructure only through `Context::compute`.

pub mod agent;
pub mod dispatch;
pub mod namespace;
pub mod pass;
pub mod policy;
#[cfg(feature = "test-tooling")]
pub mod probe;
pub mod publish;
pub mod registry;
pub mod report;
pub mod repository;
pub mod repository_cleanup;
pub mod revision;
pub mod revision_sources;
pub mod rows;
pub mod sandbox_policy;
pub mod steps;
pub mod subnets;
pub mod withdrawal;

pub use dispatch::{
    finalize_in, finalize_resolved, settle_and_publish, transition, DynReconciler, Reconciler,
    Registry, Resolved, Unsupported,
};
pub use pass::{Context, LeaseState, Pass, PassError};
pub use policy::resolve;
pub use publish::finalize;
pub use report::{AnyFacts, AnyReport, Denial, DeployPhases, Facts, Failure, Outcome, Report};
