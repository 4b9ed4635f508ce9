//! A pass and what it runs with: the shared `Context`, the `Pass` over one claimed work, the
//! lease bookkeeping it shares with its heartbeat thread (`LeaseState`), and `PassError`, why
//! a pass ended without a report of its own. Reconcilers reach infrastructure only through
//! `Context::compute`; every effect renews the claim first (`Pass::before_effect`, W2).

use super::policy::resolve;
use super::report::{Facts, Report};
use crate::cancel::{CancelToken, Cancelled, LossCause};
use crate::compute::{ComputeDriver, ComputeError, ComputeErrorKind};
use crate::db::{DbError, Pool, PooledClient};
use crate::events::Events;
use crate::metrics::Metrics;
use crate::queue::{self, Claim, QueueError, QueueOptions};
use parking_lot::Mutex;
use serde_json::json;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long from its claim a pass may still wait on infrastructure it does not control
/// (the Kubernetes client's rate limit, a 429's `Retry-After`): SPEC Q10 counts a crash as
/// an attempt, so a pass that holds its claim for seconds turns restarts into failures. A
/// wait past it ends the pass pending with the driver's code, refunding the attempt.
pub const WAIT_BOUND: Duration = Duration::from_secs(1);

/// Everything a pass may use, shared by every worker thread.
pub struct Context {
    pub pool: Pool,
    pub compute: Arc<dyn ComputeDriver>,
    pub installation_id: String,
    pub queue: QueueOptions,
    pub convergence_timeout: Duration,
    pub events: Events,
    pub metrics: Metrics,
    /// The Installation's Sandbox Driver and egress ceiling (SPEC S1, S3).
    pub sandbox: crate::installation::SandboxSelection,
    /// The Installation's Credential Gateway id, when one is selected (SPEC §13): the owner
    /// id a gateway-owned source must name.
    pub credential_gateway: Option<String>,
    /// The worker's mode: production alone deactivates a dedicated Agent's route before its
    /// first pointer commit (SPEC N14, W8).
    pub mode: crate::config::Mode,
    /// The Installation's native repository sender, when one is selected (SPEC G6, G20).
    pub repository_sender: Option<Arc<crate::repository::RepositorySender>>,
}

/// Why a pass ended without a report of its own.
#[derive(Debug)]
pub enum PassError {
    /// The claim is gone or the pass was cancelled: publish nothing (W3).
    Lost(LossCause),
    /// A finalizing statement found no live claim (Q6).
    ClaimLost,
    Db(DbError),
    Compute(ComputeError),
    /// A broken invariant in persisted state.
    Invariant(String),
}

impl PassError {
    /// The broken invariant of facts a reconciler never makes (a denial where it denies
    /// nothing), met in `reconciler`'s publication.
    pub fn unexpected<F: fmt::Debug>(facts: &Facts<F>, reconciler: &str) -> PassError {
        PassError::Invariant(format!("the {reconciler} reconciler was handed {facts:?}"))
    }

    /// Whether the claim is gone (no publication is possible or allowed).
    pub fn is_claim_loss(&self) -> bool {
        matches!(self, PassError::Lost(_) | PassError::ClaimLost)
            || matches!(self, PassError::Compute(e) if matches!(e.kind(), ComputeErrorKind::Cancelled(_)))
    }

    /// The loss cause's code, for events and metrics.
    pub fn loss_code(&self) -> &'static str {
        match self {
            PassError::Lost(cause) => cause.code(),
            PassError::Compute(e) => match e.kind() {
                ComputeErrorKind::Cancelled(Cancelled(cause)) => cause.code(),
                _ => "CLAIM_LOST",
            },
            _ => "CLAIM_LOST",
        }
    }

    /// Whether the pass was interrupted by a stopping worker.
    pub fn is_stopping(&self) -> bool {
        self.loss_code() == LossCause::WorkerStopping.code()
    }
}

impl fmt::Display for PassError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PassError::Lost(cause) => write!(f, "claim lost: {cause}"),
            PassError::ClaimLost => write!(f, "claim lost"),
            PassError::Db(e) => write!(f, "{e}"),
            PassError::Compute(e) => write!(f, "{e}"),
            PassError::Invariant(m) => write!(f, "invariant broken: {m}"),
        }
    }
}

impl std::error::Error for PassError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent: their `Display` is the wrapped error's own.
            PassError::Db(e) => e.source(),
            PassError::Compute(e) => e.source(),
            PassError::Lost(_) | PassError::ClaimLost | PassError::Invariant(_) => None,
        }
    }
}

impl From<Cancelled> for PassError {
    fn from(c: Cancelled) -> PassError {
        PassError::Lost(c.0)
    }
}

impl From<QueueError> for PassError {
    fn from(e: QueueError) -> PassError {
        match e {
            QueueError::ClaimLost => PassError::ClaimLost,
            QueueError::Db(e) => PassError::Db(e),
        }
    }
}

impl From<DbError> for PassError {
    fn from(e: DbError) -> PassError {
        PassError::Db(e)
    }
}

impl From<postgres::Error> for PassError {
    fn from(e: postgres::Error) -> PassError {
        PassError::Db(DbError::Query(e))
    }
}

impl From<r2d2::Error> for PassError {
    fn from(e: r2d2::Error) -> PassError {
        PassError::Db(DbError::from(e))
    }
}

impl From<ComputeError> for PassError {
    fn from(e: ComputeError) -> PassError {
        match e.kind() {
            ComputeErrorKind::Cancelled(Cancelled(cause)) => PassError::Lost(*cause),
            _ => PassError::Compute(e),
        }
    }
}

/// The lease bookkeeping shared by a pass and its heartbeat thread.
pub struct LeaseState {
    pub cancel: CancelToken,
    /// (when the last confirming answer arrived, the database age it reported in ms).
    age_anchor: Mutex<(Instant, i64)>,
    /// Until when the last confirmed lease is trusted (anchored at when its renewal was sent).
    trusted_until: Mutex<Instant>,
    /// Renewals that failed (database error) since the last confirmed one.
    failed_renewals: std::sync::atomic::AtomicU32,
}

impl LeaseState {
    pub fn new(claim: &Claim, claimed_sent_at: Instant, lease: Duration) -> LeaseState {
        LeaseState {
            cancel: CancelToken::new(claimed_sent_at + lease).with_patience(WAIT_BOUND),
            age_anchor: Mutex::new((Instant::now(), claim.age_ms)),
            trusted_until: Mutex::new(claimed_sent_at + lease),
            failed_renewals: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Renews the lease once (W2, W3). The lease is trusted from when the renewal was *sent*;
    /// an answer that arrives after the last confirmed lease ran out proves nothing and loses
    /// the claim (`CLAIM_RENEWAL_LATE`), and a refusal or failure that arrives after it is a
    /// lapse (`CLAIM_LEASE_LAPSED`): the database refused because the lease ran out while the
    /// renewal waited, not because another worker took the claim.
    pub fn renew(
        &self,
        client: &mut impl crate::db::GenericClient,
        claim: &Claim,
        options: &QueueOptions,
        events: &Events,
    ) -> Result<(), PassError> {
        self.cancel.check()?;
        let sent = Instant::now();
        let answer = queue::work_heartbeat(client, claim, options);
        let now = Instant::now();
        let lapsed = now >= *self.trusted_until.lock();
        let cause = match answer {
            Ok(_) if lapsed || now >= sent + options.lease => {
                events.emit(
                    "worker.claim-renewal-warning",
                    json!({
                        "workId": claim.id, "key": claim.key, "code": "CLAIM_RENEWAL_LATE",
                        "durationMs": (now - sent).as_millis() as u64,
                    }),
                );
                LossCause::RenewalLate
            }
            Ok(age_ms) => {
                {
                    let mut trusted = self.trusted_until.lock();
                    if sent + options.lease > *trusted {
                        *trusted = sent + options.lease;
                    }
                }
                self.cancel.confirm_lease(sent + options.lease);
                *self.age_anchor.lock() = (now, age_ms);
                self.failed_renewals
                    .store(0, std::sync::atomic::Ordering::SeqCst);
                return Ok(());
            }
            Err(_) if lapsed => LossCause::LeaseLapsed,
            Err(QueueError::ClaimLost) => LossCause::RenewalRefused,
            Err(QueueError::Db(_)) => return self.renewal_failed(claim, events),
        };
        self.cancel.cancel(cause);
        // The first cause wins: a lapse the pass already saw stays the reported cause.
        Err(PassError::Lost(self.cancel.cause().unwrap_or(cause)))
    }

    /// A renewal that could not be made (database error, no connection). The first one since
    /// the last confirmation is only a warning: the lease is still trusted until it runs out
    /// (the token lapses by itself), and the next renewal, a third of a lease later, retries it
    /// within the lease. A second one in a row cancels the pass (`CLAIM_RENEWAL_FAILED`, W3).
    pub fn renewal_failed(&self, claim: &Claim, events: &Events) -> Result<(), PassError> {
        self.cancel.check()?;
        let failures = self
            .failed_renewals
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        if failures == 1 {
            events.emit(
                "worker.claim-renewal-warning",
                json!({
                    "workId": claim.id, "key": claim.key, "code": "CLAIM_RENEWAL_FAILED",
                    "retrying": true,
                }),
            );
            return Ok(());
        }
        self.cancel.cancel(LossCause::RenewalFailed);
        Err(PassError::Lost(
            self.cancel.cause().unwrap_or(LossCause::RenewalFailed),
        ))
    }

    /// The work's age by the database clock, advanced by this process's monotonic clock since
    /// the last answer. It trails the database's age, so it never ends work early.
    pub fn age(&self) -> Duration {
        let (at, age_ms) = *self.age_anchor.lock();
        Duration::from_millis(age_ms.max(0) as u64) + at.elapsed()
    }
}

/// One pass over one claimed work.
pub struct Pass<'a> {
    pub claim: &'a Claim,
    pub ctx: &'a Context,
    pub lease: &'a LeaseState,
}

impl<'a> Pass<'a> {
    pub fn cancel(&self) -> &CancelToken {
        &self.lease.cancel
    }

    /// A pooled connection.
    pub fn db(&self) -> Result<PooledClient, PassError> {
        self.cancel().check()?;
        Ok(self.ctx.pool.get()?)
    }

    /// Renews the claim before an external effect (W2): consecutive short effects never
    /// starve renewal. `Err` once the claim is lost.
    pub fn before_effect(&self) -> Result<(), PassError> {
        let mut client = self.db()?;
        self.lease
            .renew(&mut *client, self.claim, &self.ctx.queue, &self.ctx.events)
    }

    /// The work's age by the database clock (Q12).
    pub fn age(&self) -> Duration {
        self.lease.age()
    }

    /// `report` as the policy (`resolve`) decides it for this pass: its attempt, the attempt
    /// budget, its age and the convergence deadline.
    pub fn resolve<F>(&self, report: Report<F>) -> Report<F> {
        resolve(
            report,
            self.claim.attempt,
            self.ctx.queue.max_attempts,
            self.age(),
            self.ctx.convergence_timeout,
        )
    }

    /// Runs `f` in a transaction that first locks the live claim; commits only if the claim is
    /// still ours and the pass was not cancelled (Q6). Zero rows: `ClaimLost`.
    pub fn fenced<T>(
        &self,
        f: impl FnOnce(&mut crate::db::Tx<'_>) -> Result<T, PassError>,
    ) -> Result<T, PassError> {
        let mut client = self.db()?;
        let mut tx = client.transaction()?;
        queue::work_lock_claim(&mut tx, self.claim)?;
        let out = f(&mut tx)?;
        self.cancel().check()?;
        tx.commit()?;
        Ok(out)
    }
}
