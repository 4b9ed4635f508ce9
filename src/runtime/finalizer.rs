//! Publication (SPEC Q6, W1): the outcomes of passes that finish close together are
//! published in one transaction by a publisher thread (`occ-publish-N`), which claims the works
//! for the slots they free in the same transaction.
//!
//! A worker thread hands over its resolved report (`Finalizer::finalize`, an `Event::Publish`
//! on the coordinator's channel) and blocks until the transaction holding it has committed (or
//! its own unit failed); the coordinator sends the answer, with the thread's next work when the
//! publication claimed one (`PassAnswer`). Either way each pass is fenced as the unbatched finalization
//! (`reconcile::finalize_in`) fences it: its live claim is locked by token and lease before
//! anything of it is written, so a missing row is still `ClaimLost` for that pass alone. When
//! anything else fails in the batch tried together, that transaction is rolled back whole and
//! the batch runs unit by unit: a failing unit is rolled back to its savepoint and never loses
//! another pass's publication; deferred constraints are checked at the end of each unit, inside
//! its savepoint, so no unit can make the shared commit fail. It never touches a pass's lease.
//!
//! The claim comes last, in the same transaction (`publish_and_claim`): the claims it makes and
//! the claims the batch ends commit together, so the worker never holds more live claims than
//! it has worker threads (W1), and one commit and one WAL flush serve both. A claim the server
//! refuses is rolled back to its own savepoint; the batch's publications still commit.

use super::records::HealthBeat;
use super::{Event, Job};
use crate::db::{DbError, GenericClient};
use crate::queue::{self, Claim, QueueError};
use crate::reconcile::{
    self, Context, LeaseState, Outcome, Pass, PassError, Reconciler, Report, Resolved,
};
use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest the coordinator waits for more passes to hand over while others still run.
pub const LINGER: Duration = Duration::from_millis(1);
/// The most passes one transaction publishes.
pub const MAX_BATCH: usize = 64;
/// The publisher threads (`occ-publish-N`), each with at most one publication under way on its
/// own connection: while one waits for its statements and its commit, the next batch's are
/// under way, so the database is not idle between the pool's batches.
pub const PUBLISHERS: usize = 2;
/// The fewest passes a publication is cut to so that another publisher can take the rest.
pub const MIN_SHARE: usize = 8;

/// The publishers a worker of `concurrency` keeps busy at once: all of them only while each
/// share of the pool holds `MIN_SHARE` passes or more (from concurrency 16). Below that the
/// smaller batches cost more per work than the overlap gains (`scripts/bench-queue` at
/// concurrency 4: two publishers drained 1,125-1,285 works/s against 1,494-1,525 for one; the
/// runs are in the git history of docs/benchmarks.md).
pub fn publishers_in_use(concurrency: usize) -> usize {
    if concurrency >= PUBLISHERS * MIN_SHARE {
        PUBLISHERS
    } else {
        1
    }
}

/// The most passes one publication takes at `concurrency`: an even share of the pool per
/// publisher in use, so the passes that finish together are published by every publisher at
/// once.
pub fn batch_share(concurrency: usize) -> usize {
    concurrency
        .div_ceil(publishers_in_use(concurrency))
        .clamp(1, MAX_BATCH)
}

/// One pass's finalization, handed to the coordinator.
pub struct Unit {
    claim: Claim,
    lease: Arc<LeaseState>,
    reconciler: Arc<dyn Reconciler>,
    resolved: Report,
    reply: Reply<Answered>,
}

/// What a waiting worker thread is answered: its pass's outcome, and the next pass for it to
/// run when the publication claimed one (so the thread starts it without waiting on the job
/// channel: one wake-up per pass instead of two).
type Answered = (Result<Report, PassError>, Option<Job>);

/// A pass's outcome from its publication, for the coordinator to send with the next pass for
/// its thread (`send`). Dropped unsent, the thread is told its pass was dropped.
pub struct PassAnswer {
    reply: Reply<Answered>,
    outcome: Result<Report, PassError>,
}

impl PassAnswer {
    /// Wakes the pass's thread with its outcome and, when given, the next pass to run.
    pub fn send(self, next: Option<Job>) {
        self.reply.send((self.outcome, next));
    }
}

impl Unit {
    /// The claim token of the pass (the coordinator's key for it).
    pub fn token(&self) -> &str {
        &self.claim.token
    }
}

/// The handle worker threads use to hand their reports to the coordinator; each thread has
/// its own clone (its `answered` and `next` are the thread's).
pub struct Finalizer {
    events: Sender<Event>,
    /// Whether the coordinator answered this thread's last hand-over (`take_answered`).
    answered: std::cell::Cell<bool>,
    /// The next pass the answer brought (`take_next`).
    next: std::cell::Cell<Option<Job>>,
}

impl Clone for Finalizer {
    fn clone(&self) -> Finalizer {
        Finalizer::new(self.events.clone())
    }
}

impl Finalizer {
    pub fn new(events: Sender<Event>) -> Finalizer {
        Finalizer {
            events,
            answered: std::cell::Cell::new(false),
            next: std::cell::Cell::new(None),
        }
    }

    /// Whether the pass that just ended was answered by its publication, and forgets it. Its
    /// slot was freed when the coordinator batched it, so its `Event::Done` would say nothing.
    pub fn take_answered(&self) -> bool {
        self.answered.replace(false)
    }

    /// The next pass the last answer brought, if any, and forgets it.
    pub fn take_next(&self) -> Option<Job> {
        self.next.take()
    }

    /// Finalizes `report` (`reconcile::finalize`, batched): blocks until it is published or
    /// refused.
    pub fn finalize(
        &self,
        pass: &Pass<'_>,
        lease: &Arc<LeaseState>,
        reconciler: Arc<dyn Reconciler>,
        report: Report,
    ) -> Result<Report, PassError> {
        let resolved = match reconcile::finalize_resolved(pass, report) {
            Resolved::Published(published) => return Ok(published),
            Resolved::Publish(resolved) => resolved,
        };
        let (reply, answer) = reply();
        let unit = Unit {
            claim: pass.claim.clone(),
            lease: lease.clone(),
            reconciler,
            resolved,
            reply,
        };
        if self.events.send(Event::Publish(Box::new(unit))).is_err() {
            return Err(PassError::Invariant("the coordinator is gone".into()));
        }
        match answer.recv() {
            Some((outcome, next)) => {
                self.answered.set(true);
                self.next.set(next);
                outcome
            }
            None => Err(PassError::Invariant(
                "the coordinator dropped a pass".into(),
            )),
        }
    }
}

/// One pass's answer from its publication: the worker thread waits for it parked, without
/// the spinning and yielding a channel's receive does first. A publication takes
/// milliseconds, and on two cores each of those yields was a context switch of its own.
struct Reply<T>(Arc<(Mutex<Answer<T>>, Condvar)>);

/// The waiting side of a `Reply`.
struct Awaited<T>(Arc<(Mutex<Answer<T>>, Condvar)>);

enum Answer<T> {
    Waiting,
    Sent(T),
    /// The reply was dropped unanswered (a publication that panicked).
    Dropped,
}

fn reply<T>() -> (Reply<T>, Awaited<T>) {
    let shared = Arc::new((Mutex::new(Answer::Waiting), Condvar::new()));
    (Reply(shared.clone()), Awaited(shared))
}

impl<T> Reply<T> {
    fn send(&self, value: T) {
        let (answer, ready) = &*self.0;
        *answer.lock() = Answer::Sent(value);
        ready.notify_one();
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        let (answer, ready) = &*self.0;
        let mut answer = answer.lock();
        if matches!(*answer, Answer::Waiting) {
            *answer = Answer::Dropped;
            ready.notify_one();
        }
    }
}

impl<T> Awaited<T> {
    /// The answer; `None` when the reply was dropped unanswered.
    fn recv(self) -> Option<T> {
        let (answer, ready) = &*self.0;
        let mut answer = answer.lock();
        while matches!(*answer, Answer::Waiting) {
            ready.wait(&mut answer);
        }
        match std::mem::replace(&mut *answer, Answer::Dropped) {
            Answer::Sent(value) => Some(value),
            _ => None,
        }
    }
}

/// A publication handed to a publisher thread: a batch (possibly empty) to publish, how many
/// works to claim with it (the slots the coordinator reserved for it), and whether to recover
/// expired leases first.
pub struct Publication {
    pub batch: Vec<Unit>,
    pub claim: usize,
    pub recover: bool,
}

/// What a publication came to, for the coordinator.
pub struct Published {
    /// The slots reserved for its claim (`Publication::claim`): those it did not fill are free
    /// again.
    pub reserved: usize,
    /// A failed lease recovery.
    pub recovery: Option<PassError>,
    pub claimed: Claimed,
    /// The outcome of each pass of the batch, for the coordinator to send to its thread.
    pub answers: Vec<PassAnswer>,
}

impl Publication {
    /// Runs the publication on the calling publisher thread: the recovery when asked (the
    /// claim is dropped if a stop was requested meanwhile), then `publish`. An idle claim (no
    /// batch) that found nothing beats `worker.health`.
    pub fn run(self, ctx: &Context, progress: &super::Progress, health: &HealthBeat) -> Published {
        let reserved = self.claim;
        let idle = self.batch.is_empty();
        let mut claim = self.claim;
        let mut recovery = None;
        if self.recover {
            recovery = recover(ctx).err();
            // Each database wait is bounded on its own; liveness counts them one by one.
            progress.tick();
            if progress.stopping() {
                claim = 0;
            }
        }
        let (answers, claimed) = publish(ctx, self.batch, claim, &|| progress.tick());
        if idle && matches!(&claimed, Some(Ok((claims, _))) if claims.is_empty()) {
            // Idle: `worker.health` at most once per its interval (SPEC Z7).
            health.beat(ctx, false);
        }
        Published {
            reserved,
            recovery,
            claimed,
            answers,
        }
    }
}

/// Returns expired claims to their lanes (`queue::work_recover_stale`), saying what it did.
fn recover(ctx: &Context) -> Result<(), PassError> {
    let mut client = ctx.pool.get()?;
    let recovered = queue::work_recover_stale(&mut *client, &ctx.queue)?;
    if recovered != queue::Recovered::default() {
        ctx.events.emit(
            "worker.recovered",
            serde_json::to_value(recovered).unwrap_or_default(),
        );
    }
    Ok(())
}

/// What a transaction's claim came to: `None` when it asked for nothing; the claims and when
/// the statement was sent (their leases count from then).
pub type Claimed = Option<Result<(Vec<Claim>, Instant), PassError>>;

/// A publisher's side of a batch: publishes it, claims up to `claim` works in the same
/// transaction, and returns each pass's answer (for the coordinator to send, with the next
/// pass for its thread) and the claims. `tick` is called after each step
/// (each bounded by the database timeout), so the coordinator's liveness counts them one by
/// one, however many passes the batch holds.
pub fn publish(
    ctx: &Context,
    batch: Vec<Unit>,
    claim: usize,
    tick: &dyn Fn(),
) -> (Vec<PassAnswer>, Claimed) {
    let items: Vec<BatchItem<'_>> = batch
        .iter()
        .map(|u| BatchItem {
            pass: Pass {
                claim: &u.claim,
                ctx,
                lease: &u.lease,
            },
            reconciler: &*u.reconciler,
            resolved: u.resolved.clone(),
        })
        .collect();
    let (outcomes, claimed) = publish_and_claim(ctx, items, claim, tick);
    let answers = batch
        .into_iter()
        .zip(outcomes)
        .map(|(unit, outcome)| PassAnswer {
            reply: unit.reply,
            outcome,
        })
        .collect();
    (answers, claimed)
}

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

/// One pass's resolved report (`reconcile::finalize_resolved`) in a batch.
pub struct BatchItem<'a> {
    pub pass: Pass<'a>,
    pub reconciler: &'a dyn Reconciler,
    pub resolved: Report,
}

/// Publishes `items` in one transaction; returns one answer per item, in order. A failing item
/// (`ClaimLost`, a cancelled pass, a database error in its statements) publishes nothing and
/// the others still commit; if the connection or the commit fails, no item is published.
pub fn finalize_batch(ctx: &Context, items: Vec<BatchItem<'_>>) -> Vec<Result<Report, PassError>> {
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
) -> (Vec<Result<Report, PassError>>, Claimed) {
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
    Done(Vec<Result<Report, PassError>>, Claimed),
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
    let mut answers: Vec<Option<Result<Report, PassError>>> = items
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
    let mut settled: Vec<(usize, Report)> = Vec::with_capacity(live.len());
    for (i, item) in items.iter().enumerate() {
        if answers[i].is_some() {
            continue;
        }
        if !live.contains(&item.pass.claim.id) {
            answers[i] = Some(Err(QueueError::ClaimLost.into()));
            continue;
        }
        match reconcile::settle_and_publish(
            &mut tx,
            &item.pass,
            item.reconciler,
            item.resolved.clone(),
        ) {
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
        } else if reconcile::transition(&mut tx, pass, report).is_err() {
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

/// The batch unit by unit in one transaction, a savepoint each (`reconcile::finalize_in`),
/// then the claim in a savepoint of its own.
fn finalize_each(
    ctx: &Context,
    items: Vec<BatchItem<'_>>,
    claim: usize,
    tick: &dyn Fn(),
) -> (Vec<Result<Report, PassError>>, Claimed) {
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
        let outcome = reconcile::finalize_in(&mut tx, &item.pass, item.reconciler, item.resolved)
            .and_then(|report| {
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
) -> (Vec<Result<Report, PassError>>, Claimed) {
    (
        (0..n).map(|_| Err(unavailable(what))).collect(),
        (claim > 0).then(|| Err(unavailable(what))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_reaches_the_parked_thread_and_a_dropped_one_says_so() {
        let (answer, awaited) = reply::<u32>();
        let waiter = std::thread::spawn(move || awaited.recv());
        answer.send(7);
        drop(answer);
        assert_eq!(waiter.join().unwrap(), Some(7));

        let (answer, awaited) = reply::<u32>();
        let waiter = std::thread::spawn(move || awaited.recv());
        drop(answer);
        assert_eq!(waiter.join().unwrap(), None);

        // Answered before anyone waits: the answer is kept for the waiter.
        let (answer, awaited) = reply::<u32>();
        answer.send(9);
        drop(answer);
        assert_eq!(awaited.recv(), Some(9));
    }

    #[test]
    fn the_second_publisher_takes_a_share_only_from_concurrency_16() {
        let at = |c| (publishers_in_use(c), batch_share(c));
        assert_eq!(at(1), (1, 1));
        assert_eq!(at(4), (1, 4));
        assert_eq!(at(15), (1, 15));
        assert_eq!(at(16), (2, 8));
        assert_eq!(at(17), (2, 9));
        assert_eq!(at(64), (2, 32));
        assert_eq!(at(256), (2, MAX_BATCH));
    }
}
