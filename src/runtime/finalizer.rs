//! The finalizer threads (`occ-finalize-N`, issue 10 item 4): publish the outcomes of passes
//! that finish close together in one transaction, a savepoint per pass.
//!
//! A worker thread hands over its resolved report and blocks until the batch holding it has
//! committed (or its own unit failed). Each unit is exactly the unbatched finalization
//! (`reconcile::finalize_in`): it locks the live claim by token and lease first, so zero rows
//! is still `ClaimLost` for that pass alone; a failing unit is rolled back to its savepoint and
//! never loses another pass's publication. Deferred constraints are checked at the end of each
//! unit, inside its savepoint, so no unit can make the shared commit fail. A batch waits for
//! more passes at most `LINGER`, and only while other passes are still running, so a lone
//! completion does not wait. It never claims work and never touches a pass's lease.

use crate::db::DbError;
use crate::queue::Claim;
use crate::reconcile::{self, Context, LeaseState, Pass, PassError, Reconciler, Report, Resolved};
use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest a batch waits for more passes after its first one arrived.
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
    /// Passes running on the pool and not yet handed over: while there are some, a batch
    /// waits (at most `LINGER`) for them.
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

    /// Finalizer threads for a pool of `concurrency`: one per 4 worker threads, at most 8.
    /// A batch runs its units one after another on one connection, so a single finalizer
    /// caps throughput at one unit's round trips; several overlap them, and each still
    /// shares its commit among the passes that finished while the previous batch ran.
    pub fn threads_for(concurrency: usize) -> usize {
        concurrency.div_ceil(4).clamp(1, 8)
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
        let deadline = Instant::now() + LINGER;
        while batch.len() < MAX_BATCH && running.load(Ordering::SeqCst) > 0 {
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

/// Publishes `items` in one transaction, a savepoint each (`reconcile::finalize_in`); returns
/// one answer per item, in order. A failing item (`ClaimLost`, a cancelled pass, a database
/// error in its statements) is rolled back to its savepoint and the others still commit; if
/// the connection or the commit fails, no item is published.
pub fn finalize_batch(ctx: &Context, items: Vec<BatchItem<'_>>) -> Vec<Result<Report, PassError>> {
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
