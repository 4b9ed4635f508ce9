//! The finalizer threads (`occ-finalize-N`, issue 10 item 4): publish the outcomes of passes
//! that finish close together in one transaction: together (their claims locked in one
//! statement, their completions made in one), or, when one of them fails, a savepoint per pass.
//!
//! A worker thread hands over its resolved report and blocks until the batch holding it has
//! committed (or its own unit failed). Either way each pass is fenced as the unbatched
//! finalization (`reconcile::finalize_in`) fences it: its live claim is locked by token and
//! lease before anything of it is written, so a missing row is still `ClaimLost` for that pass
//! alone. When anything else fails in the batch tried together, that transaction is rolled
//! back whole and the batch runs unit by unit: a failing unit is rolled back to its savepoint
//! and never loses another pass's publication; deferred constraints are checked at the end of
//! each unit, inside its savepoint, so no unit can make the shared commit fail. A batch of one
//! pass waits for company at most `LINGER`, and only while other passes are still running, so a
//! lone completion does not wait; a batch that found several passes waiting goes at once. It
//! never claims work and never touches a pass's lease.

use crate::db::DbError;
use crate::queue::{self, Claim, QueueError};
use crate::reconcile::{
    self, Context, LeaseState, Outcome, Pass, PassError, Reconciler, Report, Resolved,
};
use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest a batch of one pass waits for more passes.
pub const LINGER: Duration = Duration::from_millis(1);
/// The most passes one transaction publishes.
pub const MAX_BATCH: usize = 64;

/// One pass's finalization, handed to the finalizer thread.
struct Unit {
    claim: Claim,
    lease: Arc<LeaseState>,
    reconciler: Arc<dyn Reconciler>,
    resolved: Report,
    reply: Sender<Result<Report, PassError>>,
}

/// The handle worker threads use; the thread stops when every handle is dropped.
#[derive(Clone)]
pub struct Finalizer {
    units: Sender<Unit>,
    /// Passes running on the pool and not yet handed over: while there are some, a batch of
    /// one pass waits (at most `LINGER`) for them.
    running: Arc<AtomicUsize>,
}

impl Finalizer {
    /// Starts `threads` finalizer threads (`occ-finalize-N`), which take batches from one
    /// queue, so one commits while the next gathers. Join the handles after dropping every
    /// `Finalizer`.
    pub fn start(
        ctx: Arc<Context>,
        threads: usize,
    ) -> std::io::Result<(Finalizer, Vec<JoinHandle<()>>)> {
        let (units, rx) = unbounded::<Unit>();
        let running = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads.max(1) {
            let (ctx, rx, counter) = (ctx.clone(), rx.clone(), running.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("occ-finalize-{i}"))
                    .spawn(move || run(&ctx, &rx, &counter))?,
            );
        }
        Ok((Finalizer { units, running }, handles))
    }

    /// Finalizer threads for a pool of `concurrency`: one per 16 worker threads, at most 8.
    /// A batch takes four round trips whatever its size (begin, lock, complete, commit), so
    /// fewer threads make larger batches and fewer statements; a second thread from 17
    /// worker threads on overlaps one batch's commit with the next one's statements.
    /// Measured with `scripts/bench-queue --only drain` (README): one per 4 threads made
    /// batches of 2-3 and drained 10-15 % slower at 16 and 64 threads; one per 8 or per 32
    /// was no better than one per 16.
    pub fn threads_for(concurrency: usize) -> usize {
        concurrency.div_ceil(16).clamp(1, 8)
    }

    /// A pass started on the pool.
    pub fn pass_started(&self) -> PassRunning<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        PassRunning {
            running: &self.running,
            done: false,
        }
    }

    /// Finalizes `report` (`reconcile::finalize`, batched): blocks until it is published or
    /// refused. `running` is the pass's own guard, released as the report is handed over.
    pub fn finalize(
        &self,
        pass: &Pass<'_>,
        lease: &Arc<LeaseState>,
        reconciler: Arc<dyn Reconciler>,
        report: Report,
        mut running: PassRunning<'_>,
    ) -> Result<Report, PassError> {
        let resolved = match reconcile::finalize_resolved(pass, report) {
            Resolved::Published(published) => return Ok(published),
            Resolved::Publish(resolved) => resolved,
        };
        let (reply, answer) = bounded(1);
        let unit = Unit {
            claim: pass.claim.clone(),
            lease: lease.clone(),
            reconciler,
            resolved,
            reply,
        };
        running.release();
        if self.units.send(unit).is_err() {
            return Err(PassError::Invariant("the finalizer thread is gone".into()));
        }
        answer
            .recv()
            .unwrap_or_else(|_| Err(PassError::Invariant("the finalizer dropped a pass".into())))
    }
}

/// Counts a running pass until its report is handed over (or the pass ends without one).
pub struct PassRunning<'a> {
    running: &'a AtomicUsize,
    done: bool,
}

impl PassRunning<'_> {
    fn release(&mut self) {
        if !self.done {
            self.done = true;
            self.running.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for PassRunning<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

fn run(ctx: &Context, units: &Receiver<Unit>, running: &AtomicUsize) {
    while let Ok(first) = units.recv() {
        let mut batch = vec![first];
        batch.extend(units.try_iter().take(MAX_BATCH - 1));
        // Under load passes pile up while the previous batch commits, and the batch goes at
        // once; only a lone pass waits (at most `LINGER`) for one still running.
        let deadline = Instant::now() + LINGER;
        while batch.len() == 1 && running.load(Ordering::SeqCst) > 0 {
            match units.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(unit) => batch.push(unit),
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        publish(ctx, batch);
    }
}

/// The thread's side of a batch: runs it and answers every pass.
fn publish(ctx: &Context, batch: Vec<Unit>) {
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
    let answers = finalize_batch(ctx, items);
    for (unit, answer) in batch.iter().zip(answers) {
        let _ = unit.reply.send(answer);
    }
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
///
/// The batch is first tried together (`finalize_together`): its live claims locked in one
/// statement, and its completions made in one statement, because PostgreSQL prepares
/// `occ.work`'s checks and triggers once per statement and that, not the rows, is most of a
/// single completion's cost. If anything in it fails past the claim locks, that transaction
/// is rolled back whole and the batch runs again unit by unit (`finalize_each`), a savepoint
/// per unit, so the failing unit alone is refused.
pub fn finalize_batch(ctx: &Context, items: Vec<BatchItem<'_>>) -> Vec<Result<Report, PassError>> {
    match finalize_together(ctx, &items) {
        Together::Done(answers) => answers,
        Together::Unavailable(what) => (0..items.len()).map(|_| Err(unavailable(what))).collect(),
        Together::OneByOne => finalize_each(ctx, items),
    }
}

/// What trying a batch together came to.
enum Together {
    /// Every item answered, the transaction committed (or nothing needed publishing).
    Done(Vec<Result<Report, PassError>>),
    /// The connection or the commit failed: nothing is published.
    Unavailable(&'static str),
    /// An item failed past the claim locks; nothing was published: run unit by unit.
    OneByOne,
}

/// The batch in one transaction without savepoints: cancelled passes and lost claims are
/// answered first and publish nothing; every other item settles and publishes in order, then
/// the successes complete in one statement and the other outcomes make their own transitions;
/// deferred constraints are checked by the commit. Any failure after the locks rolls the
/// whole transaction back (`Together::OneByOne`).
fn finalize_together(ctx: &Context, items: &[BatchItem<'_>]) -> Together {
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
        return Together::Done(answers.into_iter().flatten().collect());
    }
    let Ok(mut client) = ctx.pool.get() else {
        return Together::Unavailable("no database connection for the batch");
    };
    let Ok(mut tx) = client.transaction() else {
        return Together::Unavailable("the batch's transaction did not begin");
    };
    let live = match queue::work_lock_claims(&mut tx, &wanted) {
        Ok(live) => live,
        // The server refused the statement (a lock timeout, say): unit by unit, each claim's
        // own lock decides for its pass alone.
        Err(QueueError::Db(e)) if e.sqlstate().is_some() => return Together::OneByOne,
        Err(_) => return Together::Unavailable("the batch's connection failed"),
    };
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
    }
    if !successes.is_empty() {
        match queue::work_complete_batch(&mut tx, &successes) {
            Ok(done) if done.len() == successes.len() => {}
            _ => return Together::OneByOne,
        }
    }
    // A pass cancelled while the batch ran publishes nothing.
    if settled
        .iter()
        .any(|(i, _)| items[*i].pass.cancel().check().is_err())
    {
        return Together::OneByOne;
    }
    match tx.commit() {
        Ok(()) => {}
        // A deferred constraint refused the commit: nothing is published; find the unit.
        Err(e) if e.code().is_some_and(|c| c.code().starts_with("23")) => {
            return Together::OneByOne
        }
        Err(_) => return Together::Unavailable("the batch did not commit"),
    }
    for (i, report) in settled {
        answers[i] = Some(Ok(report));
    }
    Together::Done(answers.into_iter().flatten().collect())
}

/// The batch unit by unit in one transaction, a savepoint each (`reconcile::finalize_in`).
fn finalize_each(ctx: &Context, items: Vec<BatchItem<'_>>) -> Vec<Result<Report, PassError>> {
    let n = items.len();
    let all = |what: &str| (0..n).map(|_| Err(unavailable(what))).collect();
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
    }
    if tx.commit().is_err() {
        return all("the batch did not commit");
    }
    answers
}

/// Nothing of the batch was published; its claims stay until their leases run out.
fn unavailable(what: &str) -> PassError {
    PassError::Db(DbError::Unavailable(what.into()))
}
