-- No single row can stop the queue (SPEC W5, issue 9 item 3). Every timestamp the claim and
-- the stale-claim recovery read is finite, and a lease reaches at most one hour past the
-- transition that set it (claim or renewal: both stamp updated_at; OCC_WORKER_LEASE_MS is at
-- most an hour), so `lease_expires_at =
-- 'infinity'` can no longer hold a lane forever and `created_at = '-infinity'` can no longer
-- make every claim fail. Numbered V7: V5 and V6 belong to other branches.
ALTER TABLE occ.work
    ADD CONSTRAINT work_times_finite CHECK (
        isfinite(created_at) AND isfinite(updated_at) AND isfinite(available_at)
        AND (claimed_at IS NULL OR isfinite(claimed_at))
        AND (lease_expires_at IS NULL OR isfinite(lease_expires_at))
        AND (completed_at IS NULL OR isfinite(completed_at))),
    ADD CONSTRAINT work_lease_bounded CHECK (
        lease_expires_at IS NULL
        OR (claimed_at IS NOT NULL AND lease_expires_at <= updated_at + interval '1 hour'));

ALTER TABLE occ.work_attempts
    ADD CONSTRAINT work_attempts_at_finite CHECK (isfinite(at));

ALTER TABLE occ.namespaces_all
    ADD CONSTRAINT namespaces_times_finite CHECK (
        isfinite(created_at) AND isfinite(updated_at)
        AND (deleted_at IS NULL OR isfinite(deleted_at)));
