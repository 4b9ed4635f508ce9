//! Cancellation of one pass: the token every effect checks at its cancellation points.
//!
//! A token is cancelled explicitly (a refused, late or failed renewal, or a stopping worker)
//! or implicitly when the last confirmed lease runs out (SPEC W3). It never decides anything
//! about the database: it only tells the pass to stop before its next effect.

use parking_lot::Mutex;
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

#[derive(Debug)]
struct State {
    cause: Option<LossCause>,
    /// When the last confirmed lease runs out, by this process's monotonic clock, anchored at
    /// the moment the confirming renewal was sent.
    lease_deadline: Instant,
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
            })),
        }
    }

    /// A token that never lapses: for commands outside a claim (preflight, `check`).
    pub fn unbounded() -> CancelToken {
        CancelToken::new(Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600))
    }

    /// Cancels the token; the first cause wins.
    pub fn cancel(&self, cause: LossCause) {
        let mut state = self.state.lock();
        if state.cause.is_none() {
            state.cause = Some(cause);
        }
    }

    /// Records a confirmed renewal: the lease is trusted until `deadline`.
    pub fn confirm_lease(&self, deadline: Instant) {
        let mut state = self.state.lock();
        if deadline > state.lease_deadline {
            state.lease_deadline = deadline;
        }
    }

    /// The cause, if the pass must stop; a lease that ran out cancels the token for good.
    pub fn cause(&self) -> Option<LossCause> {
        let mut state = self.state.lock();
        if state.cause.is_none() && Instant::now() >= state.lease_deadline {
            state.cause = Some(LossCause::LeaseLapsed);
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

    /// How long the pass may still trust its lease; zero once cancelled. Effects bound their
    /// blocking calls (HTTP timeouts) by it.
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
    fn confirmation_extends_but_never_shortens() {
        let now = Instant::now();
        let token = CancelToken::new(now + Duration::from_secs(10));
        token.confirm_lease(now + Duration::from_secs(1));
        assert!(token.remaining() > Duration::from_secs(5));
    }
}
