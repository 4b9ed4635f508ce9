//! Publication on the worker's side (SPEC W1): the outcomes of passes that finish close
//! together are published in one transaction by a publisher thread (`occ-publish-N`), which
//! claims the works for the slots they free in the same transaction.
//!
//! A worker thread hands over its resolved report (`Finalizer::finalize`, an `Event::Publish`
//! on the coordinator's channel) and blocks until the transaction holding it has committed (or
//! its own unit failed); the coordinator sends the answer, with the thread's next work when the
//! publication claimed one (`PassAnswer`). The transaction itself is `reconcile::publish`: each
//! pass is fenced by its live claim, locked by token and lease before anything of it is
//! written, so a missing row is `ClaimLost` for that pass alone.
//!
//! The claim comes last, in the same transaction (`publish_and_claim`): the claims it makes and
//! the claims the batch ends commit together, so the worker never holds more live claims than
//! it has worker threads (W1), and one commit and one WAL flush serve both. A claim the server
//! refuses is rolled back to its own savepoint; the batch's publications still commit.

use super::records::HealthBeat;
use super::{Event, Job};
use crate::queue::{self, Claim};
use crate::reconcile::publish::{publish_and_claim, BatchItem, Claimed};
use crate::reconcile::{self, Context, LeaseState, Pass, PassError, Reconciler, Report, Resolved};
use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::Duration;

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
