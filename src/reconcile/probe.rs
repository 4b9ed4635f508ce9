//! Test and benchmark reconcilers, selected only by the hidden `run --test-reconciler` flag.
//!
//! `noop` completes every work at once and publishes nothing else (the queue benchmark).
//! `probe` proves lane exclusion across processes: it holds a row in `occ_lane_probe` keyed by
//! the work's lane while it runs, counts a collision with a still-live claim in
//! `occ_lane_violations`, and records each publication in `occ_probe_done` so tests can count
//! duplicates. They never touch
//! infrastructure.

use super::dispatch::Reconciler;
use super::pass::{Pass, PassError};
use super::report::Report;
use std::time::Duration;

// Two processes starting at once would race on `CREATE TABLE IF NOT EXISTS` (a catalog
// unique violation), so setup takes a transaction-scoped advisory lock first.
const PROBE_SETUP: &str = "
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('occ.probe.setup'));
CREATE TABLE IF NOT EXISTS public.occ_lane_probe (lane text PRIMARY KEY, work_id bigint NOT NULL, token text NOT NULL);
CREATE TABLE IF NOT EXISTS public.occ_lane_violations (lane text NOT NULL, work_id bigint NOT NULL);
CREATE TABLE IF NOT EXISTS public.occ_probe_done (work_id bigint NOT NULL, pid integer NOT NULL);
COMMIT;
";

// Enters a lane. A row left by a pass whose claim is no longer live (a killed process, an
// interrupted pass) is taken over; a row whose claim is still live is a violation.
const PROBE_ENTER: &str = "
INSERT INTO public.occ_lane_probe AS p (lane, work_id, token) VALUES ($1, $2, $3)
ON CONFLICT (lane) DO UPDATE SET work_id = excluded.work_id, token = excluded.token
WHERE NOT EXISTS (SELECT 1 FROM occ.work_lanes l
                  WHERE l.claim_id = p.work_id AND l.claim_token::text = p.token)
";

/// Completes every work with `NOOP_COMPLETED`.
pub struct Noop;

impl Reconciler for Noop {
    type Facts = ();

    fn reconcile(&self, _pass: &Pass<'_>) -> Result<Report, PassError> {
        Ok(Report::success("NOOP_COMPLETED"))
    }

    fn publish(
        &self,
        _tx: &mut crate::db::Tx<'_>,
        _pass: &Pass<'_>,
        _report: &Report,
    ) -> Result<(), PassError> {
        Ok(())
    }
}

/// Holds its lane for `hold`, renewing before each step like a real effect would.
pub struct Probe {
    pub hold: Duration,
}

impl Probe {
    /// Creates the probe tables (idempotent).
    pub fn setup(client: &mut postgres::Client) -> Result<(), postgres::Error> {
        client.batch_execute(PROBE_SETUP)
    }
}

impl Reconciler for Probe {
    type Facts = ();

    fn reconcile(&self, pass: &Pass<'_>) -> Result<Report, PassError> {
        let lane = &pass.claim.lane;
        pass.before_effect()?;
        {
            let mut client = pass.db()?;
            let inserted =
                client.execute(PROBE_ENTER, &[&lane, &pass.claim.id, &pass.claim.token])?;
            if inserted == 0 {
                client.execute(
                    "INSERT INTO public.occ_lane_violations (lane, work_id) VALUES ($1, $2)",
                    &[&lane, &pass.claim.id],
                )?;
            }
        }
        let mut left = self.hold;
        let step = Duration::from_millis(200);
        while !left.is_zero() {
            let now = left.min(step);
            pass.cancel().sleep(now)?;
            left -= now;
            if !left.is_zero() {
                pass.before_effect()?;
            }
        }
        let mut client = pass.db()?;
        client.execute(
            "DELETE FROM public.occ_lane_probe WHERE lane = $1 AND token = $2",
            &[&lane, &pass.claim.token],
        )?;
        Ok(Report::success("PROBE_COMPLETED"))
    }

    fn publish(
        &self,
        tx: &mut crate::db::Tx<'_>,
        pass: &Pass<'_>,
        _report: &Report,
    ) -> Result<(), PassError> {
        tx.execute(
            "INSERT INTO public.occ_probe_done (work_id, pid) VALUES ($1, $2)",
            &[&pass.claim.id, &(std::process::id() as i32)],
        )?;
        Ok(())
    }
}
