//! Publication (SPEC Q6, W1): a batch of resolved reports published with their queue
//! transitions in one transaction, each fenced by its live claim, with up to `claim` new works
//! claimed in the same commit. The worker's publisher threads (`runtime::finalizer`) and
//! `reconcile::finalize` (a batch of one) both publish through here, so every test of a
//! reconciler exercises the production fencing.
//!
//! The batch is first tried together (`finalize_together`): its live claims locked in one
//! statement and its completions made in one statement. When anything in it fails past the
//! claim locks, that transaction is rolled back whole and the batch runs unit by unit
//! (`finalize_each`), a savepoint per unit, so the failing unit alone is refused and never
//! loses another pass's publication; deferred constraints are checked at the end of each unit,
//! inside its savepoint. It never touches a pass's lease.

use super::dispatch::{
    finalize_in, finalize_resolved, settle_and_publish, transition, DynReconciler, Resolved,
};
use super::pass::{Context, Pass, PassError};
use super::report::{AnyReport, Outcome, Report};
use crate::db::{DbError, GenericClient};
use crate::queue::{self, Claim, QueueError};
use std::any::Any;
use std::time::Instant;

/// What a transaction's claim came to: `None` when it asked for nothing; the claims and when
/// the statement was sent (their leases count from then).
pub type Claimed = Option<Result<(Vec<Claim>, Instant), PassError>>;

/// Claims up to `limit` works in a transaction of their own (nothing to publish with them).
fn claim_alone(ctx: &Context, limit: usize) -> Claimed {
    if limit == 0 {
        return None;
    }
    match ctx.pool.get() {
        Ok(mut client) => claim_on(&mut *client, ctx, limit).map(|c| c.map_err(PassError::from)),
        Err(e) => Some(Err(e.into())),
    }
}

/// The claim statement on `client` (`queue::work_claim_batch`) when `limit` asks for any
/// work, with when it was sent.
fn claim_on(
    client: &mut impl GenericClient,
    ctx: &Context,
    limit: usize,
) -> Option<Result<(Vec<Claim>, Instant), QueueError>> {
    (limit > 0).then(|| {
        let sent = Instant::now();
        Ok((queue::work_claim_batch(client, &ctx.queue, limit)?, sent))
    })
}

/// One pass's resolved report (`finalize_resolved`) in a batch.
pub struct BatchItem<'a> {
    pub pass: Pass<'a>,
    pub reconciler: &'a dyn DynReconciler,
    pub resolved: AnyReport,
}

/// Publishes `items` in one transaction; returns one answer per item, in order. A failing item
/// (`ClaimLost`, a cancelled pass, a database error in its statements) publishes nothing and
/// The resolved report published with its queue transition, fenced by the claim: a batch of
/// one through the worker's own publication (`publish::finalize_batch`).
pub fn finalize<F: Any + Send + Sync>(
    pass: &Pass<'_>,
    reconciler: &dyn DynReconciler,
    report: Report<F>,
) -> Result<AnyReport, PassError> {
    match finalize_resolved(pass, report.erase()) {
        Resolved::Published(published) => Ok(published),
        Resolved::Publish(resolved) => {
            let item = BatchItem {
                pass: Pass {
                    claim: pass.claim,
                    ctx: pass.ctx,
                    lease: pass.lease,
                },
                reconciler,
                resolved,
            };
            finalize_batch(pass.ctx, vec![item])
                .pop()
                .unwrap_or_else(|| Err(PassError::Invariant("a batch of one answered none".into())))
        }
    }
}

/// the others still commit; if the connection or the commit fails, no item is published.
pub fn finalize_batch(
    ctx: &Context,
    items: Vec<BatchItem<'_>>,
) -> Vec<Result<AnyReport, PassError>> {
    publish_and_claim(ctx, items, 0, &|| {}).0
}

/// `finalize_batch`, then up to `claim` works claimed in the same transaction, after the
/// publications (so a lane the batch moved on is claimable at once).
///
/// The batch is first tried together (`finalize_together`): its live claims locked in one
/// statement, and its completions made in one statement, because PostgreSQL prepares
/// `occ.work`'s checks and triggers once per statement and that, not the rows, is most of a
/// single completion's cost. If anything in it fails past the claim locks, the claim included,
/// that transaction is rolled back whole and the batch runs again unit by unit
/// (`finalize_each`), a savepoint per unit and one for the claim, so the failing unit alone is
/// refused. Claims whose transaction did not commit are not returned.
pub fn publish_and_claim(
    ctx: &Context,
    items: Vec<BatchItem<'_>>,
    claim: usize,
    tick: &dyn Fn(),
) -> (Vec<Result<AnyReport, PassError>>, Claimed) {
    if items.is_empty() {
        return (Vec::new(), claim_alone(ctx, claim));
    }
    match finalize_together(ctx, &items, claim, tick) {
        Together::Done(answers, claimed) => (answers, claimed),
        Together::Unavailable(what) => unavailable_batch(items.len(), claim, what),
        Together::OneByOne => finalize_each(ctx, items, claim, tick),
    }
}

/// What trying a batch together came to.
enum Together {
    /// Every item answered, the transaction committed (or nothing needed publishing).
    Done(Vec<Result<AnyReport, PassError>>, Claimed),
    /// The connection or the commit failed: nothing is published or claimed.
    Unavailable(&'static str),
    /// An item or the claim failed past the claim locks; nothing was published: run unit by
    /// unit.
    OneByOne,
}

/// The batch in one transaction without savepoints: cancelled passes and lost claims are
/// answered first and publish nothing; every other item settles and publishes in order, then
/// the successes complete in one statement and the other outcomes make their own transitions;
/// then the claim; deferred constraints are checked by the commit. Any failure after the locks
/// rolls the whole transaction back (`Together::OneByOne`).
fn finalize_together(
    ctx: &Context,
    items: &[BatchItem<'_>],
    claim: usize,
    tick: &dyn Fn(),
) -> Together {
    let mut answers: Vec<Option<Result<AnyReport, PassError>>> = items
        .iter()
        .map(|item| item.pass.cancel().check().err().map(|e| Err(e.into())))
        .collect();
    let wanted: Vec<&Claim> = items
        .iter()
        .zip(&answers)
        .filter(|(_, a)| a.is_none())
        .map(|(item, _)| item.pass.claim)
        .collect();
    if wanted.is_empty() {
        return Together::Done(
            answers.into_iter().flatten().collect(),
            claim_alone(ctx, claim),
        );
    }
    let Ok(mut client) = ctx.pool.get() else {
        return Together::Unavailable("no database connection for the batch");
    };
    // BEGIN and the lock in one round trip.
    let (mut tx, live) = match queue::work_begin_locking_claims(&mut client, &wanted) {
        Ok(begun) => begun,
        // The server refused the statement (a lock timeout, say): unit by unit, each claim's
        // own lock decides for its pass alone.
        Err(QueueError::Db(e)) if e.sqlstate().is_some() => return Together::OneByOne,
        Err(_) => return Together::Unavailable("the batch's connection failed"),
    };
    tick();
    let mut settled: Vec<(usize, AnyReport)> = Vec::with_capacity(live.len());
    for (i, item) in items.iter().enumerate() {
        if answers[i].is_some() {
            continue;
        }
        if !live.contains(&item.pass.claim.id) {
            answers[i] = Some(Err(QueueError::ClaimLost.into()));
            continue;
        }
        match settle_and_publish(&mut tx, &item.pass, item.reconciler, item.resolved.clone()) {
            Ok(report) => settled.push((i, report)),
            Err(_) => return Together::OneByOne,
        }
        tick();
    }
    let mut successes = Vec::new();
    for (i, report) in &settled {
        let pass = &items[*i].pass;
        if report.outcome == Outcome::Success {
            successes.push((
                pass.claim,
                report.code.as_str(),
                report.result_data.as_ref(),
            ));
        } else if transition(&mut tx, pass, report).is_err() {
            return Together::OneByOne;
        }
        tick();
    }
    // A pass cancelled while the batch ran publishes nothing.
    if settled
        .iter()
        .any(|(i, _)| items[*i].pass.cancel().check().is_err())
    {
        return Together::OneByOne;
    }
    // The completions (all or none), the claim and the commit in one round trip.
    let sent = Instant::now();
    let claimed =
        match queue::work_commit_completing_and_claiming(tx, &successes, &ctx.queue, claim) {
            Ok(claims) => {
                (claim > 0).then(|| claims.map(|claims| (claims, sent)).map_err(PassError::from))
            }
            // The server refused a statement or the commit (a claim no longer live, a deferred
            // constraint): nothing is published; find the unit.
            Err(QueueError::Db(e)) if e.sqlstate().is_some() => return Together::OneByOne,
            Err(_) => return Together::Unavailable("the batch did not commit"),
        };
    tick();
    for (i, report) in settled {
        answers[i] = Some(Ok(report));
    }
    Together::Done(answers.into_iter().flatten().collect(), claimed)
}

/// The batch unit by unit in one transaction, a savepoint each (`finalize_in`),
/// then the claim in a savepoint of its own.
fn finalize_each(
    ctx: &Context,
    items: Vec<BatchItem<'_>>,
    claim: usize,
    tick: &dyn Fn(),
) -> (Vec<Result<AnyReport, PassError>>, Claimed) {
    let n = items.len();
    let all = |what: &'static str| unavailable_batch(n, claim, what);
    let Ok(mut client) = ctx.pool.get() else {
        return all("no database connection for the batch");
    };
    let Ok(mut tx) = client.transaction() else {
        return all("the batch's transaction did not begin");
    };
    // One round trip per unit besides its own statements: a unit that succeeds checks the
    // deferred constraints, releases its savepoint and opens the next one in one message; one
    // that fails rolls back to its savepoint, which stays open for the next unit.
    if tx.batch_execute("SAVEPOINT occ_unit").is_err() {
        return all("the batch's connection failed");
    }
    let mut answers = Vec::with_capacity(n);
    for item in items {
        let outcome =
            finalize_in(&mut tx, &item.pass, item.reconciler, item.resolved).and_then(|report| {
                // Deferred constraints are checked here, inside the unit's savepoint.
                tx.batch_execute(
                    "SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED; \
                         RELEASE SAVEPOINT occ_unit; SAVEPOINT occ_unit",
                )?;
                Ok(report)
            });
        if outcome.is_err() && tx.batch_execute("ROLLBACK TO SAVEPOINT occ_unit").is_err() {
            // The connection is gone: nothing in this transaction commits.
            return all("the batch's connection failed");
        }
        answers.push(outcome);
        tick();
    }
    // The claim in the savepoint still open: a refused claim is rolled back alone.
    let claimed = match claim_on(&mut tx, ctx, claim) {
        Some(Err(e)) => {
            if tx.batch_execute("ROLLBACK TO SAVEPOINT occ_unit").is_err() {
                return all("the batch's connection failed");
            }
            Some(Err(e.into()))
        }
        Some(Ok(claimed)) => Some(Ok(claimed)),
        None => None,
    };
    tick();
    if tx.commit().is_err() {
        return all("the batch did not commit");
    }
    (answers, claimed)
}

/// Nothing of the batch was published; its claims stay until their leases run out.
fn unavailable(what: &str) -> PassError {
    PassError::Db(DbError::Unavailable(what.into()))
}

/// The answers of a batch of `n` passes none of which was published, and of its claim (if it
/// asked for one), which claimed nothing.
fn unavailable_batch(
    n: usize,
    claim: usize,
    what: &str,
) -> (Vec<Result<AnyReport, PassError>>, Claimed) {
    (
        (0..n).map(|_| Err(unavailable(what))).collect(),
        (claim > 0).then(|| Err(unavailable(what))),
    )
}
