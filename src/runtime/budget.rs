//! The connection budget: how many PostgreSQL connections one worker
//! process holds at most, derived from its threads, and the start-up check of that number
//! against what the server admits. It opens no connection of its own.
//!
//! Each thread holds at most one pooled connection at a time (it borrows, runs its statements
//! and returns it before it borrows again), so the pool is sized by the threads that borrow:
//!
//! | thread | connections |
//! | --- | --- |
//! | `occ-work-N`: a pass (reads, renewal before each effect, the fenced publication, a release at shutdown) | `concurrency` |
//! | `occ-lease-<id>`: one heartbeat thread per live claim, one per worker thread (kept for its next claims) | `concurrency` |
//! | `occ-publish-N`: the batched publications, claims, lease recovery and the idle health beat | `PUBLISHERS` (2) |
//! | `occ-http-probe`: readiness' pending count | 1 |
//!
//! The scheduling thread (`occ-claim`) borrows none: it hands its database work to the
//! publishers.
//! The listener (`occ-listen`) keeps one dedicated connection outside the pool. So a worker
//! needs `2 × concurrency + 3` pooled connections and `2 × concurrency + 4` in all.

use super::scheduler::PUBLISHERS;
use crate::db::{DbError, GenericClient};
use std::fmt;

const LIMIT: &str = include_str!("../../sql/queries/server_connection_limit.sql");

/// The threads that borrow from the pool besides the worker and heartbeat threads: the
/// publishers and the readiness probe.
const SINGLE_BORROWERS: u32 = PUBLISHERS as u32 + 1;
/// Connections outside the pool: the listener.
const DEDICATED: u32 = 1;

/// The connections a worker with `concurrency` worker threads needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionBudget {
    pub concurrency: u32,
}

impl ConnectionBudget {
    pub fn new(concurrency: usize) -> ConnectionBudget {
        ConnectionBudget {
            concurrency: u32::try_from(concurrency).unwrap_or(u32::MAX),
        }
    }

    /// The pool's size: `2 × concurrency + 3`.
    pub fn pool_size(self) -> u32 {
        self.concurrency
            .saturating_mul(2)
            .saturating_add(SINGLE_BORROWERS)
    }

    /// Every connection the worker may hold at once: the pool and the listener.
    pub fn total(self) -> u32 {
        self.pool_size().saturating_add(DEDICATED)
    }
}

/// The server's connection limit as it applies to an ordinary role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimit {
    pub max_connections: u32,
    /// `superuser_reserved_connections` (+ `reserved_connections` from PostgreSQL 16).
    pub reserved: u32,
    /// Client connections open when asked, the asking one excluded.
    pub in_use: u32,
}

impl ServerLimit {
    /// Reads the server's settings (one statement).
    pub fn read(client: &mut impl GenericClient) -> Result<ServerLimit, DbError> {
        let row = client.query_one(LIMIT, &[])?;
        let count = |i: usize| u32::try_from(row.get::<_, i32>(i)).unwrap_or(0);
        Ok(ServerLimit {
            max_connections: count(0),
            reserved: count(1),
            in_use: count(2),
        })
    }

    /// What the server admits to ordinary roles in all.
    pub fn admits(self) -> u32 {
        self.max_connections.saturating_sub(self.reserved)
    }

    /// What is left of it now.
    pub fn free(self) -> u32 {
        self.admits().saturating_sub(self.in_use)
    }
}

/// A budget the server can never meet, whatever else is connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverBudget {
    pub budget: ConnectionBudget,
    pub limit: ServerLimit,
}

impl fmt::Display for OverBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (b, l) = (self.budget, self.limit);
        write!(
            f,
            "OCC_WORKER_CONCURRENCY={} needs {} database connections (2 x {} + {} pooled, 1 listener) \
             but the server admits {} (max_connections {} less {} reserved): lower \
             OCC_WORKER_CONCURRENCY or raise max_connections",
            b.concurrency,
            b.total(),
            b.concurrency,
            SINGLE_BORROWERS,
            l.admits(),
            l.max_connections,
            l.reserved
        )
    }
}

impl std::error::Error for OverBudget {}

/// Refuses a budget larger than what the server admits at all. What other clients hold now
/// changes from moment to moment (a worker being replaced in a rollout holds its connections
/// until it exits), so it only warrants a warning, which the caller gives from `limit.free()`.
pub fn check(budget: ConnectionBudget, limit: ServerLimit) -> Result<(), OverBudget> {
    if budget.total() > limit.admits() {
        return Err(OverBudget { budget, limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(max_connections: u32, reserved: u32) -> ServerLimit {
        ServerLimit {
            max_connections,
            reserved,
            in_use: 0,
        }
    }

    #[test]
    fn the_budget_follows_the_threads() {
        let b = ConnectionBudget::new(8);
        assert_eq!((b.pool_size(), b.total()), (19, 20));
        assert_eq!(ConnectionBudget::new(1).total(), 6);
    }

    #[test]
    fn a_budget_over_what_the_server_admits_is_refused_naming_both_numbers() {
        let b = ConnectionBudget::new(8);
        assert_eq!(check(b, limit(23, 3)), Ok(()));
        let e = check(b, limit(22, 3)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "OCC_WORKER_CONCURRENCY=8 needs 20 database connections (2 x 8 + 3 pooled, 1 \
             listener) but the server admits 19 (max_connections 22 less 3 reserved): lower \
             OCC_WORKER_CONCURRENCY or raise max_connections"
        );
    }
}
