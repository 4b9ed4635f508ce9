-- Releases the current live claim of a pass interrupted by a stopping worker (W4): back to
-- the queue at once, the attempt consumed by the claim refunded (like a deferral, Q8), with
-- WORKER_STOPPING evidence, so another worker resumes it without waiting for the lease. It
-- keeps its due time (already past), so it stays the head of its lane (Q4 lane order).
-- $1 id, $2 claim token, $3 code.
WITH done AS (
    UPDATE occ.work
    SET state = 'queued',
        attempt_count = attempt_count - 1,
        claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
        updated_at = clock_timestamp()
    WHERE id = $1 AND claim_token = $2::text::uuid AND state = 'claimed'
      AND lease_expires_at > clock_timestamp()
    RETURNING id, attempt_count
)
INSERT INTO occ.work_attempts (work_id, attempt, code, outcome)
SELECT id, attempt_count + 1, $3, 'deferred' FROM done
RETURNING work_id
