//! The dispatch seam: the `Reconciler` contract, its type-erased form the runtime holds
//! (`DynReconciler`), the `Registry` by operation, and the fenced publication of a resolved
//! report (`finalize`). It names no reconciler: `registry` composes them.
//!
//! A reconciler says *what happened* (`Report` with its own `Facts`); `policy::resolve`
//! decides retry, defer or fail; `finalize` publishes the resolved report, the reconciler's
//! lifecycle writes and the queue transition in one claim-fenced transaction.

use super::pass::{Context, Pass, PassError};
use super::report::{AnyReport, Outcome, Report};
use crate::queue::{self, FailedWork, Operation};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// One reconciler per operation. Reconcilers are idempotent: a pass may run again after a lost
/// lease, and every effect must tolerate having happened already.
pub trait Reconciler: Send + Sync + 'static {
    /// What a pass of this reconciler tells its own `settle` and `publish` (STYLE 10); `()`
    /// when the outcome and code say everything.
    type Facts: Clone + fmt::Debug + PartialEq + Send + Sync + 'static;

    /// Observes, reauthorizes and acts; says what happened.
    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report<Self::Facts>, PassError>;

    /// Inside the fenced finalizing transaction, before `publish`: a last look at the rows the
    /// outcome depends on, under lock, which may rewrite the resolved report (an Agent stop a
    /// later deployment superseded while it ran). By default the report stands.
    fn settle(
        &self,
        _tx: &mut crate::db::Tx<'_>,
        _pass: &Pass<'_>,
        report: Report<Self::Facts>,
    ) -> Result<Report<Self::Facts>, PassError> {
        Ok(report)
    }

    /// Inside the fenced finalizing transaction: writes the lifecycle state and audit evidence
    /// that go with the resolved `report`. The queue transition follows in the same
    /// transaction.
    fn publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report<Self::Facts>,
    ) -> Result<(), PassError>;

    /// After stale-claim recovery failed works of this reconciler's operation for good (Q10),
    /// outside any claim: what must follow such a failure (a credential withdrawal queues its
    /// next recovery series, SPEC E13). By default nothing.
    fn after_stale_recovery(&self, _ctx: &Context, _failed: &[FailedWork]) {}
}

/// A `Reconciler` with its facts erased, as the registry and the runtime hold it. Every
/// reconciler is one; a report handed back to `settle` or `publish` must be one this
/// reconciler made (a broken invariant otherwise).
pub trait DynReconciler: Send + Sync {
    fn reconcile(&self, pass: &Pass<'_>) -> Result<AnyReport, PassError>;

    /// `settle`, then `publish` of the settled report, with the facts restored once.
    fn settle_and_publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: AnyReport,
    ) -> Result<AnyReport, PassError>;

    fn after_stale_recovery(&self, ctx: &Context, failed: &[FailedWork]);
}

impl<R: Reconciler> DynReconciler for R {
    fn reconcile(&self, pass: &Pass<'_>) -> Result<AnyReport, PassError> {
        Reconciler::reconcile(self, pass).map(Report::erase)
    }

    fn settle_and_publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        report: AnyReport,
    ) -> Result<AnyReport, PassError> {
        let settled = Reconciler::settle(self, tx, pass, typed::<R>(report)?)?;
        Reconciler::publish(self, tx, pass, &settled)?;
        Ok(settled.erase())
    }

    fn after_stale_recovery(&self, ctx: &Context, failed: &[FailedWork]) {
        Reconciler::after_stale_recovery(self, ctx, failed)
    }
}

/// `report` with `R`'s facts restored.
fn typed<R: Reconciler>(report: AnyReport) -> Result<Report<R::Facts>, PassError> {
    report.typed::<R::Facts>().ok_or_else(|| {
        PassError::Invariant(format!(
            "a reconciler was handed another's facts (expected {})",
            std::any::type_name::<R::Facts>()
        ))
    })
}

/// The reconcilers by operation. An operation without one fails its work permanently with
/// `RECONCILER_UNAVAILABLE`; it never silently succeeds.
#[derive(Clone, Default)]
pub struct Registry {
    by_operation: HashMap<Operation, Arc<dyn DynReconciler>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn with(mut self, operation: Operation, reconciler: Arc<dyn DynReconciler>) -> Registry {
        self.by_operation.insert(operation, reconciler);
        self
    }

    pub fn get(&self, operation: Operation) -> Arc<dyn DynReconciler> {
        self.by_operation
            .get(&operation)
            .cloned()
            .unwrap_or_else(|| Arc::new(Unsupported))
    }

    /// Hands each reconciler the works of its operation that stale-claim recovery failed
    /// (`Reconciler::after_stale_recovery`).
    pub fn after_stale_recovery(&self, ctx: &Context, failed: &[FailedWork]) {
        for operation in Operation::ALL {
            let of_operation: Vec<FailedWork> = failed
                .iter()
                .filter(|w| w.operation == operation)
                .cloned()
                .collect();
            if !of_operation.is_empty() {
                self.get(operation).after_stale_recovery(ctx, &of_operation);
            }
        }
    }
}

/// The reconciler of an operation this build does not handle.
pub struct Unsupported;

impl Reconciler for Unsupported {
    type Facts = ();

    fn reconcile(&self, _pass: &Pass<'_>) -> Result<Report, PassError> {
        Ok(Report::permanent("RECONCILER_UNAVAILABLE"))
    }

    fn publish(
        &self,
        _tx: &mut crate::db::Tx<'_>,
        _pass: &Pass<'_>,
        _report: &Report,
    ) -> Result<(), PassError> {
        Ok(())
    }
}

/// A pass's report after the policy.
pub enum Resolved {
    /// To publish with its queue transition (`finalize_in`).
    Publish(AnyReport),
    /// The reconciler already published it (an Agent deletion): no queue transition follows.
    Published(AnyReport),
}

/// The policy applied to a pass's report.
pub fn finalize_resolved(pass: &Pass<'_>, report: AnyReport) -> Resolved {
    let resolved = pass.resolve(report);
    if resolved.already_published && resolved.outcome == Outcome::Success {
        return Resolved::Published(resolved);
    }
    Resolved::Publish(resolved)
}

/// Inside `tx`: locks the live claim (Q6), settles and publishes the resolved report and makes
/// its queue transition; `ClaimLost` when the claim is no longer ours, and the pass's
/// cancellation is checked last. The caller commits.
pub fn finalize_in(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    reconciler: &dyn DynReconciler,
    resolved: AnyReport,
) -> Result<AnyReport, PassError> {
    pass.cancel().check()?;
    queue::work_lock_claim(tx, pass.claim)?;
    let resolved = settle_and_publish(tx, pass, reconciler, resolved)?;
    transition(tx, pass, &resolved)?;
    pass.cancel().check()?;
    Ok(resolved)
}

/// Under the locked live claim: the reconciler's last look (`settle`) and its publication.
pub fn settle_and_publish(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    reconciler: &dyn DynReconciler,
    resolved: AnyReport,
) -> Result<AnyReport, PassError> {
    reconciler.settle_and_publish(tx, pass, resolved)
}

/// Under the locked live claim: the queue transition of a settled report.
pub fn transition(
    tx: &mut crate::db::Tx<'_>,
    pass: &Pass<'_>,
    resolved: &AnyReport,
) -> Result<(), PassError> {
    let claim = pass.claim;
    match resolved.outcome {
        Outcome::Success => {
            queue::work_complete(tx, claim, &resolved.code, resolved.result_data.as_ref())?
        }
        Outcome::Pending { recheck, .. } => queue::work_defer_with_cause(
            tx,
            claim,
            &resolved.code,
            recheck,
            resolved.record_evidence,
            resolved.refusal.as_deref(),
            resolved.cause.as_deref(),
        )?,
        Outcome::Retry => {
            queue::work_retry(tx, claim, &resolved.code, &pass.ctx.queue)?;
        }
        Outcome::Permanent => queue::work_fail(
            tx,
            claim,
            &resolved.code,
            resolved.result_data.as_ref(),
            resolved.refusal.as_deref(),
        )?,
    }
    Ok(())
}
