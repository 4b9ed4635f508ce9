//! Publication on the worker's side (SPEC W1): the outcomes of passes that finish close
//! together are published in one transaction by a publisher thread (`occ-publish-N`), which
//! claims the works for the slots they free in the same transaction.
//!
//! A worker thread hands over its resolved report (`Finalizer::finalize`, an `Event::Handover`
//! on the scheduling thread's channel) and blocks until the transaction holding it has
//! committed (or its own unit failed); the scheduling thread sends the answer, with the
//! thread's next work when the publication claimed one (`PassAnswer`), and `finalize` returns
//! both (`Finalized`). Which passes a publication takes, and how many works it claims, is the
//! scheduler's decision (`scheduler`). The transaction itself is `reconcile::publish`: each
//! pass is fenced by its live claim, locked by token and lease before anything of it is
//! written, so a missing row is `ClaimLost` for that pass alone.
//!
//! The claim comes last, in the same transaction (`publish_and_claim`): the claims it makes and
//! the claims the batch ends commit together, so the worker never holds more live claims than
//! it has worker threads (W1), and one commit and one WAL flush serve both. A claim the server
//! refuses is rolled back to its own savepoint; the batch's publications still commit.

use super::records::HealthBeat;
use super::scheduler;
use super::thread::{Job, Progress};
use crate::queue::{self, Claim};
use crate::reconcile::publish::{publish_and_claim, BatchItem, Claimed};
use crate::reconcile::{
    finalize_resolved, AnyReport, Context, DynReconciler, LeaseState, Pass, PassError, Registry,
    Resolved,
};
use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

/// What the other threads send the scheduling thread, in the scheduler's own words: every
/// cause of its activity but the end of a wait (`Tick`), which the scheduling thread adds.
pub(super) type Event = scheduler::Event<Threads>;

/// The runtime's payloads, as the scheduler moves them between threads.
pub(super) struct Threads;

impl scheduler::Payload for Threads {
    type Unit = Unit;
    type Job = Job;
    type Answer = PassAnswer;
    type Lease = Arc<LeaseState>;
    fn unit_token(unit: &Unit) -> &str {
        unit.token()
    }
    fn job_token(job: &Job) -> &str {
        &job.claim.token
    }
    fn job_lease(job: &Job) -> Arc<LeaseState> {
        job.lease.clone()
    }
}

/// One pass's finalization, handed to the scheduling thread.
pub struct Unit {
    claim: Claim,
    lease: Arc<LeaseState>,
    reconciler: Arc<dyn DynReconciler>,
    resolved: AnyReport,
    reply: Reply<Answered>,
}

/// What a waiting worker thread is answered: its pass's outcome, and the next pass for it to
/// run when the publication claimed one (so the thread starts it without waiting on the job
/// channel: one wake-up per pass instead of two).
type Answered = (Result<AnyReport, PassError>, Option<Job>);

/// A pass's outcome from its publication, for the scheduling thread to send with the next pass
/// for its thread (`send`). Dropped unsent, the thread is told its pass was dropped.
pub struct PassAnswer {
    reply: Reply<Answered>,
    outcome: Result<AnyReport, PassError>,
}

impl PassAnswer {
    /// Wakes the pass's thread with its outcome and, when given, the next pass to run.
    pub fn send(self, next: Option<Job>) {
        self.reply.send((self.outcome, next));
    }
}

impl Unit {
    /// The claim token of the pass (the scheduler's key for it).
    pub fn token(&self) -> &str {
        &self.claim.token
    }
}

/// The handle worker threads use to hand their reports to the scheduling thread.
#[derive(Clone)]
pub struct Finalizer {
    events: Sender<Event>,
}

/// What a finalization came to, for the pass's thread.
pub struct Finalized {
    pub outcome: Result<AnyReport, PassError>,
    pub slot: Slot,
}

/// What became of a finished pass's pool slot (W1).
// Returned once per pass and moved twice: boxing the work would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Slot {
    /// Still the pass's: its thread frees it (`Event::PassEnded`). The pass was published or
    /// refused on its own thread, or never answered (its publication panicked).
    Held,
    /// Freed when the scheduler batched the pass (its `Event::PassEnded` would say nothing); `next`
    /// is the work its publication claimed for this thread, if any.
    Freed { next: Option<Job> },
}

impl Finalizer {
    pub(super) fn new(events: Sender<Event>) -> Finalizer {
        Finalizer { events }
    }

    /// Finalizes `report` (`reconcile::finalize`, batched): blocks until it is published or
    /// refused.
    pub fn finalize(
        &self,
        pass: &Pass<'_>,
        lease: &Arc<LeaseState>,
        reconciler: Arc<dyn DynReconciler>,
        report: AnyReport,
    ) -> Finalized {
        let held = |outcome| Finalized {
            outcome,
            slot: Slot::Held,
        };
        let resolved = match finalize_resolved(pass, report) {
            Resolved::Published(published) => return held(Ok(published)),
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
        if self.events.send(Event::Handover(unit)).is_err() {
            return held(Err(PassError::Invariant(
                "the scheduling thread is gone".into(),
            )));
        }
        match answer.recv() {
            Some((outcome, next)) => Finalized {
                outcome,
                slot: Slot::Freed { next },
            },
            None => held(Err(PassError::Invariant(
                "the scheduling thread dropped a pass".into(),
            ))),
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
/// works to claim with it (the slots the scheduler reserved for it), and whether to recover
/// expired leases first.
pub struct Publication {
    pub batch: Vec<Unit>,
    pub claim: usize,
    pub recover: bool,
}

/// What a publication came to, for the scheduling thread.
pub struct Published {
    /// The slots reserved for its claim (`Publication::claim`): those it did not fill are free
    /// again.
    pub reserved: usize,
    /// A failed lease recovery.
    pub recovery: Option<PassError>,
    pub claimed: Claimed,
    /// The outcome of each pass of the batch, for the scheduling thread to send to its thread.
    pub answers: Vec<PassAnswer>,
}

impl Publication {
    /// Runs the publication on the calling publisher thread: the recovery when asked (the
    /// claim is dropped if a stop was requested meanwhile), then `publish`. An idle claim (no
    /// batch) that found nothing beats `worker.health`.
    pub fn run(
        self,
        ctx: &Context,
        registry: &Registry,
        progress: &Progress,
        health: &HealthBeat,
    ) -> Published {
        let reserved = self.claim;
        let idle = self.batch.is_empty();
        let mut claim = self.claim;
        let mut recovery = None;
        if self.recover {
            recovery = recover(ctx, registry).err();
            // Each database wait is bounded on its own; liveness counts them one by one.
            progress.tick();
            if progress.stopping() {
                claim = 0;
            }
        }
        // No more claims than the driver serves without a wait (SPEC Q10): a claim held while
        // its pass queues is an attempt a crash would spend.
        if let Some(capacity) = ctx.compute.claim_capacity() {
            claim = claim.min(capacity);
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

/// Returns expired claims to their lanes (`queue::work_recover_stale_listing`), saying what it
/// did, then hands the works it failed to their reconcilers (`after_stale_recovery`: a
/// credential withdrawal queues its next recovery series, SPEC E13).
fn recover(ctx: &Context, registry: &Registry) -> Result<(), PassError> {
    let mut client = ctx.pool.get()?;
    let (recovered, failed) = queue::work_recover_stale_listing(&mut *client, &ctx.queue)?;
    drop(client);
    if recovered != queue::Recovered::default() {
        ctx.events.emit(
            "worker.recovered",
            serde_json::to_value(recovered).unwrap_or_default(),
        );
    }
    registry.after_stale_recovery(ctx, &failed);
    Ok(())
}

/// A publisher's side of a batch: publishes it, claims up to `claim` works in the same
/// transaction, and returns each pass's answer (for the scheduling thread to send, with the
/// next pass for its thread) and the claims. `tick` is called after each step (each bounded
/// by the database timeout), so the worker's liveness counts them one by one, however many
/// passes the batch holds.
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
}
