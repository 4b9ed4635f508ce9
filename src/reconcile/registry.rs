//! The one place that names every reconciler: the production `Registry`, one line per
//! operation. Adding a reconciler is its own file and a line here.

use super::agent::{AgentDelete, AgentStop};
use super::dispatch::Registry;
use super::namespace::NamespaceReconciler;
use super::repository_cleanup::RepositoryCleanupReconciler;
use super::revision::RevisionReconciler;
use super::sandbox_policy::SandboxPolicyReconciler;
use super::withdrawal::CredentialWithdrawalReconciler;
use crate::queue::Operation;
use std::sync::Arc;

/// Every operation's reconciler: Namespaces (N1-N13), Agents (A1, A2), revisions (R2-R11),
/// sandbox policies (S3), credential withdrawals (E1-E13) and repository cleanup (G3).
pub fn production() -> Registry {
    agents(namespaces(Registry::new()))
}

/// The Namespace lifecycle reconciler on `registry` (ensure and delete).
pub fn namespaces(registry: Registry) -> Registry {
    let namespace = Arc::new(NamespaceReconciler);
    registry
        .with(Operation::NamespaceEnsure, namespace.clone())
        .with(Operation::NamespaceDelete, namespace)
}

/// The Agent and AgentRevision reconcilers on `registry`.
pub fn agents(registry: Registry) -> Registry {
    let revision = Arc::new(RevisionReconciler);
    registry
        .with(Operation::AgentStop, Arc::new(AgentStop))
        .with(Operation::AgentDelete, Arc::new(AgentDelete))
        .with(Operation::RevisionReconcile, revision.clone())
        .with(Operation::RevisionMaintenance, revision)
        .with(Operation::SandboxPolicy, Arc::new(SandboxPolicyReconciler))
        .with(
            Operation::CredentialWithdrawal,
            Arc::new(CredentialWithdrawalReconciler),
        )
        .with(
            Operation::RepositoryCleanup,
            Arc::new(RepositoryCleanupReconciler::default()),
        )
}
