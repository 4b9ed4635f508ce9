//! Cancellation of one pass: the token every effect checks at its cancellation points.
//!
//! A token is cancelled explicitly (a refused, late or failed renewal, or a stopping worker)
//! or implicitly when the last confirmed lease runs out (SPEC W3). It never decides anything
//! about the database: it tells the pass to stop before its next effect and, through the
//! aborts registered while an effect blocks (`on_cancel`, a socket shut down by the cancelling
//! thread), interrupts the effect under way (SPEC W3: no effect outlives its claim by more than
//! the time to notice the loss).
//!
//! A blocking effect finds the token of its pass through `current()`: the driver makes the
//! token current on its own thread for the span of one request (`CancelToken::enter`), so the
//! HTTP transports underneath need no token in their signatures.

use parking_lot::Mutex;
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a pass lost the right to act.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossCause {
    /// The database answered a renewal with "not yours any more".
    RenewalRefused,
    /// A renewal was confirmed only after the lease it extended had already run out.
    RenewalLate,
    /// A renewal failed (database error or timeout).
    RenewalFailed,
    /// No renewal was confirmed before the last confirmed lease ran out.
    LeaseLapsed,
    /// The worker is shutting down and the grace period ended.
    WorkerStopping,
}

impl LossCause {
    /// The stable code used in logs, events and work evidence.
    pub fn code(self) -> &'static str {
        match self {
            LossCause::RenewalRefused => "CLAIM_RENEWAL_REFUSED",
            LossCause::RenewalLate => "CLAIM_RENEWAL_LATE",
            LossCause::RenewalFailed => "CLAIM_RENEWAL_FAILED",
            LossCause::LeaseLapsed => "CLAIM_LEASE_LAPSED",
            LossCause::WorkerStopping => "WORKER_STOPPING",
        }
    }
}

impl fmt::Display for LossCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The error a cancellation point returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cancelled(pub LossCause);

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pass cancelled: {}", self.0)
    }
}

impl std::error::Error for Cancelled {}

/// Interrupts an effect blocked on another thread (shuts its socket down); must not block.
pub type Abort = Arc<dyn Fn() + Send + Sync>;

struct State {
    cause: Option<LossCause>,
    /// When the last confirmed lease runs out, by this process's monotonic clock, anchored at
    /// the moment the confirming renewal was sent.
    lease_deadline: Instant,
    /// The aborts of the effects blocked right now, by registration number.
    aborts: Vec<(u64, Abort)>,
    next_abort: u64,
    /// Until when the pass may wait on infrastructure it does not control (a client-side rate
    /// limit, a 429's `Retry-After`); a wait that would end later ends the pass pending
    /// instead (SPEC Q10). `None` for a token that may wait as long as its lease holds.
    patience: Option<Instant>,
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("cause", &self.cause)
            .field("lease_deadline", &self.lease_deadline)
            .field("aborts", &self.aborts.len())
            .finish()
    }
}

impl State {
    /// Sets the cause if none is set yet; the aborts to run (outside the lock) when it did.
    fn set_cause(&mut self, cause: LossCause) -> Vec<(u64, Abort)> {
        if self.cause.is_some() {
            return Vec::new();
        }
        self.cause = Some(cause);
        std::mem::take(&mut self.aborts)
    }
}

fn run_aborts(aborts: Vec<(u64, Abort)>) {
    for (_, abort) in aborts {
        abort();
    }
}

/// An abort registered with `CancelToken::on_cancel`; dropping it unregisters the abort.
#[must_use = "the abort is unregistered when this guard is dropped"]
pub struct AbortGuard {
    state: Arc<Mutex<State>>,
    id: u64,
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        self.state.lock().aborts.retain(|(id, _)| *id != self.id);
    }
}

thread_local! {
    /// The token of the pass whose effect this thread is running (`CancelToken::enter`).
    static CURRENT: RefCell<Option<CancelToken>> = const { RefCell::new(None) };
}

/// The token made current on this thread by `CancelToken::enter`, if any.
pub fn current() -> Option<CancelToken> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Restores the token that was current before `CancelToken::enter`.
pub struct Entered {
    previous: Option<CancelToken>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// A token's mark (`CancelToken::mark`): it names the token while some clone of it lives, and
/// nothing once the pass dropped it, so a later token at the same address is never taken for
/// it.
#[derive(Clone, Debug)]
pub struct PassMark(std::sync::Weak<Mutex<State>>);

impl PassMark {
    /// Whether `token` is the token this mark was taken of, still alive.
    pub fn is(&self, token: &CancelToken) -> bool {
        self.0.strong_count() > 0 && std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&token.state))
    }

    /// Whether the token is gone (its pass ended).
    pub fn ended(&self) -> bool {
        self.0.strong_count() == 0
    }
}

/// A cloneable cancellation token shared by a pass, its lease thread and its effects.
#[derive(Clone, Debug)]
pub struct CancelToken {
    state: Arc<Mutex<State>>,
}

impl CancelToken {
    /// A token whose lease is trusted until `lease_deadline`.
    pub fn new(lease_deadline: Instant) -> CancelToken {
        CancelToken {
            state: Arc::new(Mutex::new(State {
                cause: None,
                lease_deadline,
                aborts: Vec::new(),
                next_abort: 0,
                patience: None,
            })),
        }
    }

    /// The same token, whose waits on infrastructure end within `bound` from now (a pass's:
    /// SPEC Q10, a pass that holds its claim for seconds turns a crash into a spent attempt).
    pub fn with_patience(self, bound: Duration) -> CancelToken {
        self.state.lock().patience = Some(Instant::now() + bound);
        self
    }

    /// How long the token may still wait on infrastructure; `None` when it has no bound.
    pub fn patience(&self) -> Option<Duration> {
        let until = self.state.lock().patience?;
        Some(until.saturating_duration_since(Instant::now()))
    }

    /// A token that never lapses: for commands outside a claim (preflight, `check`).
    pub fn unbounded() -> CancelToken {
        CancelToken::new(Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600))
    }

    /// A token for one effect that may take at most `bound`: cancelled with this token's
    /// cause when this one is cancelled, and lapsing by itself `bound` from now (its own lease,
    /// never renewed). The guard keeps the link; drop it once the effect returned. `Err` when
    /// this token is cancelled already. After a cancelled effect, `self.check()` tells a lost
    /// pass from a bound that ran out.
    pub fn bounded(&self, bound: Duration) -> Result<(CancelToken, AbortGuard), Cancelled> {
        let child = CancelToken::new(Instant::now() + bound);
        child.state.lock().patience = self.state.lock().patience;
        let (parent, linked) = (self.clone(), child.clone());
        let guard = self.on_cancel(Arc::new(move || {
            if let Some(cause) = parent.state.lock().cause {
                linked.cancel(cause);
            }
        }))?;
        Ok((child, guard))
    }

    /// Cancels the token; the first cause wins and interrupts the effects blocked now.
    pub fn cancel(&self, cause: LossCause) {
        let aborts = self.state.lock().set_cause(cause);
        run_aborts(aborts);
    }

    /// Registers `abort` to run once if the token is cancelled while the guard lives (at once,
    /// on the cancelling thread). `Err` when it is cancelled already: the effect must not start.
    pub fn on_cancel(&self, abort: Abort) -> Result<AbortGuard, Cancelled> {
        self.check()?;
        let mut state = self.state.lock();
        if let Some(cause) = state.cause {
            return Err(Cancelled(cause));
        }
        let id = state.next_abort;
        state.next_abort += 1;
        state.aborts.push((id, abort));
        Ok(AbortGuard {
            state: self.state.clone(),
            id,
        })
    }

    /// Makes this token the thread's current one (`current()`) until the guard is dropped.
    pub fn enter(&self) -> Entered {
        let previous = CURRENT.with(|c| c.borrow_mut().replace(self.clone()));
        Entered { previous }
    }

    /// A mark of this token that knows it again while the token lives: what a driver observed
    /// under one pass is trusted by that pass only, never by a later one.
    pub fn mark(&self) -> PassMark {
        PassMark(Arc::downgrade(&self.state))
    }

    /// When the last confirmed lease runs out.
    pub fn lease_deadline(&self) -> Instant {
        self.state.lock().lease_deadline
    }

    /// Records a confirmed renewal: the lease is trusted until `deadline`.
    pub fn confirm_lease(&self, deadline: Instant) {
        let mut state = self.state.lock();
        if deadline > state.lease_deadline {
            state.lease_deadline = deadline;
        }
    }

    /// The cause, if the pass must stop; a lease that ran out cancels the token for good (and
    /// interrupts the effects blocked now, like `cancel`).
    pub fn cause(&self) -> Option<LossCause> {
        let mut state = self.state.lock();
        if state.cause.is_none() && Instant::now() >= state.lease_deadline {
            let aborts = state.set_cause(LossCause::LeaseLapsed);
            drop(state);
            run_aborts(aborts);
            return Some(LossCause::LeaseLapsed);
        }
        state.cause
    }

    /// A cancellation point: `Err` once the pass must stop.
    pub fn check(&self) -> Result<(), Cancelled> {
        match self.cause() {
            Some(cause) => Err(Cancelled(cause)),
            None => Ok(()),
        }
    }

    /// How long the pass may still trust its lease; zero once cancelled. Not a bound on an
    /// effect: the heartbeat renews the lease while an effect runs (SPEC W2), and a lost claim
    /// interrupts the effect through `on_cancel`.
    pub fn remaining(&self) -> Duration {
        if self.cause().is_some() {
            return Duration::ZERO;
        }
        self.state
            .lock()
            .lease_deadline
            .saturating_duration_since(Instant::now())
    }

    /// Sleeps up to `duration`, waking early (with `Err`) when the token is cancelled.
    pub fn sleep(&self, duration: Duration) -> Result<(), Cancelled> {
        let end = Instant::now() + duration;
        loop {
            self.check()?;
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            std::thread::sleep((end - now).min(Duration::from_millis(20)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patience_runs_out_with_time_and_is_shared() {
        assert_eq!(CancelToken::unbounded().patience(), None);
        let token = CancelToken::unbounded().with_patience(Duration::from_millis(300));
        let shared = token.clone();
        let left = shared.patience().expect("a bounded token");
        assert!(left <= Duration::from_millis(300) && left > Duration::ZERO);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(token.patience(), Some(Duration::ZERO));
    }

    #[test]
    fn first_cause_wins() {
        let token = CancelToken::unbounded();
        assert!(token.check().is_ok());
        token.cancel(LossCause::RenewalRefused);
        token.cancel(LossCause::WorkerStopping);
        assert_eq!(token.check(), Err(Cancelled(LossCause::RenewalRefused)));
        assert_eq!(token.remaining(), Duration::ZERO);
    }

    #[test]
    fn lapsed_lease_cancels() {
        let token = CancelToken::new(Instant::now());
        assert_eq!(token.cause(), Some(LossCause::LeaseLapsed));
    }

    #[test]
    fn cancelling_runs_the_registered_aborts_once_and_dropped_guards_never() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let token = CancelToken::unbounded();
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = |ran: &Arc<AtomicUsize>| -> Abort {
            let ran = ran.clone();
            Arc::new(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            })
        };
        let dropped = token.on_cancel(counter(&ran)).expect("not cancelled yet");
        drop(dropped);
        let _kept = token.on_cancel(counter(&ran)).expect("not cancelled yet");
        token.cancel(LossCause::RenewalRefused);
        token.cancel(LossCause::WorkerStopping);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(token.on_cancel(counter(&ran)).is_err());
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_lapse_seen_by_any_thread_runs_the_aborts() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let token = CancelToken::new(Instant::now() + Duration::from_millis(30));
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let _guard = token
            .on_cancel(Arc::new(move || flag.store(true, Ordering::SeqCst)))
            .unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(token.cause(), Some(LossCause::LeaseLapsed));
        assert!(ran.load(Ordering::SeqCst));
    }

    #[test]
    fn a_bounded_token_lapses_by_itself_or_with_its_parent() {
        let parent = CancelToken::unbounded();
        let (child, _link) = parent.bounded(Duration::ZERO).unwrap();
        assert_eq!(child.cause(), Some(LossCause::LeaseLapsed));
        assert!(parent.check().is_ok(), "the bound is the child's alone");
        let (child, link) = parent.bounded(Duration::from_secs(3600)).unwrap();
        parent.cancel(LossCause::RenewalRefused);
        assert_eq!(child.check(), Err(Cancelled(LossCause::RenewalRefused)));
        drop(link);
        assert!(parent.bounded(Duration::from_secs(1)).is_err());
    }

    #[test]
    fn entered_tokens_nest_and_restore() {
        assert!(current().is_none());
        let outer = CancelToken::unbounded();
        let inner = CancelToken::unbounded();
        {
            let _a = outer.enter();
            {
                let _b = inner.enter();
                inner.cancel(LossCause::RenewalRefused);
                assert!(current().unwrap().check().is_err());
            }
            assert!(current().unwrap().check().is_ok());
        }
        assert!(current().is_none());
    }

    #[test]
    fn confirmation_extends_but_never_shortens() {
        let now = Instant::now();
        let token = CancelToken::new(now + Duration::from_secs(10));
        token.confirm_lease(now + Duration::from_secs(1));
        assert!(token.remaining() > Duration::from_secs(5));
    }
}
