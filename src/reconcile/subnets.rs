//! The claim-fenced `SubnetLedger` of a Namespace ensure pass: PostgreSQL's
//! `occ.docker_subnets`, written through the pass's claim.
//!
//! It owns the reservation statements (`docker_subnet_lock.sql`, `docker_subnet_reserve.sql`);
//! the release is part of the Namespace tombstone (`reconcile::namespace`). Each reservation
//! commits on its own, before the driver posts anything on the subnet, in a transaction that
//! first locks the live claim (`Pass::fenced`): a stale pass reserves nothing, and a pass that
//! dies after reserving leaves a row the next pass reuses. It never talks to infrastructure
//! and never decides what a failure means: a lost claim or a database error is kept for the
//! reconciler, which returns it instead of the driver's answer.

use super::pass::{Pass, PassError};
use crate::compute::{Ipv4Cidr, LedgerUnavailable, SubnetLedger, SubnetPool};
use crate::db::GenericClient;
use std::cell::RefCell;

const LOCK: &str = include_str!("../../sql/queries/docker_subnet_lock.sql");
const RESERVE: &str = include_str!("../../sql/queries/docker_subnet_reserve.sql");

/// What `docker_subnet_reserve.sql` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reservation {
    Reserved(Ipv4Cidr),
    /// The pool has no subnet left for this Namespace.
    Exhausted,
    /// A writer that bypassed the lock holds the chosen subnet; ask again.
    Raced,
}

/// Reserves a subnet of `pool` for `namespace_id` (see `SubnetLedger::reserve`). The caller
/// holds a transaction that locked its live claim.
pub fn docker_subnet_reserve(
    client: &mut impl GenericClient,
    namespace_id: &str,
    pool: &SubnetPool,
    avoid: &[Ipv4Cidr],
) -> Result<Reservation, PassError> {
    client.execute(LOCK, &[])?;
    let avoid: Vec<String> = avoid.iter().map(Ipv4Cidr::to_string).collect();
    let row = client.query_one(
        RESERVE,
        &[
            &namespace_id,
            &pool.network().to_string(),
            &i32::from(pool.subnet_prefix()),
            &avoid,
        ],
    )?;
    let subnet: Option<String> = row.get(0);
    let free: bool = row.get(1);
    Ok(match subnet {
        Some(text) => Reservation::Reserved(Ipv4Cidr::parse(&text).ok_or_else(|| {
            PassError::Invariant(format!("docker_subnets holds a non-IPv4 subnet {text}"))
        })?),
        None if free => Reservation::Raced,
        None => Reservation::Exhausted,
    })
}

/// How many times one reservation is asked again after losing to a writer that bypassed the
/// lock (an operator); workers never race each other past the lock.
const RACE_RETRIES: usize = 3;

/// The ledger of one Namespace in one pass.
pub struct FencedSubnetLedger<'p, 'a> {
    pass: &'p Pass<'a>,
    namespace_id: &'p str,
    /// The first error a reservation met; the reconciler returns it.
    failure: RefCell<Option<PassError>>,
}

impl<'p, 'a> FencedSubnetLedger<'p, 'a> {
    pub fn new(pass: &'p Pass<'a>, namespace_id: &'p str) -> FencedSubnetLedger<'p, 'a> {
        FencedSubnetLedger {
            pass,
            namespace_id,
            failure: RefCell::new(None),
        }
    }

    /// The error that made the ledger unavailable, if any.
    pub fn take_failure(&self) -> Option<PassError> {
        self.failure.borrow_mut().take()
    }

    fn fail(&self, error: PassError) -> LedgerUnavailable {
        self.failure.borrow_mut().get_or_insert(error);
        LedgerUnavailable
    }
}

impl SubnetLedger for FencedSubnetLedger<'_, '_> {
    fn reserve(
        &self,
        pool: &SubnetPool,
        avoid: &[Ipv4Cidr],
    ) -> Result<Option<Ipv4Cidr>, LedgerUnavailable> {
        for _ in 0..RACE_RETRIES {
            let answer = self
                .pass
                .fenced(|tx| docker_subnet_reserve(tx, self.namespace_id, pool, avoid));
            match answer.map_err(|e| self.fail(e))? {
                Reservation::Reserved(subnet) => return Ok(Some(subnet)),
                Reservation::Exhausted => return Ok(None),
                Reservation::Raced => continue,
            }
        }
        Err(self.fail(PassError::Invariant(format!(
            "the subnet reservation of Namespace {} lost {RACE_RETRIES} races past its lock",
            self.namespace_id
        ))))
    }
}
