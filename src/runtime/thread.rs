//! What the runtime's threads share, below every one of them: the liveness they report
//! (`Progress`), the work a pool thread runs (`Job`), how a thread is joined (`Joined`), and the
//! class an error is logged with (`error_class`).

use crate::db::DbError;
use crate::queue::Claim;
use crate::reconcile::{LeaseState, PassError};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Liveness and claim bookkeeping read by the health server.
#[derive(Default)]
pub struct Progress {
    last: Mutex<Option<Instant>>,
    /// The class of the last claim or recovery failure, until a claim succeeds.
    claim_failure: Mutex<Option<String>>,
    /// Set by `StopHandle::stop`: nothing new starts.
    pub(super) stopping: AtomicBool,
}

impl Progress {
    /// Whether a stop was requested (`/readyz` answers 503, nothing new is claimed).
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Records the outcome of the last claim or recovery statement.
    pub fn set_claim_failure(&self, cause: Option<String>) {
        *self.claim_failure.lock() = cause;
    }

    /// Why claiming fails, while it does (`/readyz` answers 503).
    pub fn claim_failure(&self) -> Option<String> {
        self.claim_failure.lock().clone()
    }

    pub fn tick(&self) {
        *self.last.lock() = Some(Instant::now());
    }

    /// Time since the scheduling loop last went round (or a publisher finished a database
    /// wait); `None` before it started.
    pub fn since(&self) -> Option<Duration> {
        self.last.lock().map(|t| t.elapsed())
    }
}

/// A claimed work for a pool thread: from the job channel, or with the answer to the thread's
/// previous pass (`finalizer::PassAnswer::send`).
pub struct Job {
    pub(super) claim: Claim,
    pub(super) lease: Arc<LeaseState>,
}

impl Job {
    /// A work its claim statement (sent at `sent`) returned, trusted for one `lease` from then.
    pub(super) fn new(claim: Claim, sent: Instant, lease: Duration) -> Job {
        let lease = Arc::new(LeaseState::new(&claim, sent, lease));
        Job { claim, lease }
    }
}

/// A thread joined when this drops (what it panicked with, if it did, is ignored: each thread
/// says its own failures).
pub(super) struct Joined(Option<JoinHandle<()>>);

impl Joined {
    pub(super) fn new(thread: JoinHandle<()>) -> Joined {
        Joined(Some(thread))
    }
}

impl Drop for Joined {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take() {
            let _ = thread.join();
        }
    }
}

/// A short class for an error, safe to log.
pub(super) fn error_class(e: &PassError) -> String {
    match e {
        PassError::Db(DbError::Unavailable(_) | DbError::Pool(_) | DbError::Thread(_)) => {
            "DatabaseUnavailable".into()
        }
        PassError::Db(DbError::Corrupt(_)) => "CorruptData".into(),
        PassError::Db(e) => match e.sqlstate() {
            Some(state) => format!("DatabaseError:{state}"),
            None => "DatabaseConnection".into(),
        },
        PassError::Compute(e) => format!("ComputeError:{}", e.class()),
        PassError::Invariant(_) => "Invariant".into(),
        PassError::Lost(c) => c.code().into(),
        PassError::ClaimLost => "ClaimLost".into(),
    }
}
