-- Releases the current live claim of a pass interrupted by a stopping worker (W4): back to
-- the queue at once, the attempt the claim would have consumed refunded (like a deferral, Q8),
-- with WORKER_STOPPING evidence, so another worker resumes it without waiting for the lease,
-- and idle workers are woken (Q13). Only the lane row is written (V14): the work keeps its due
-- time (already past) and its count, so it stays the head of its lane (Q4 lane order).
-- $1 id, $2 claim token, $3 code.
WITH fence AS (
    SELECT w.id, w.lane, l.claim_attempt
    FROM occ.work w
    JOIN occ.work_lanes l ON l.lane = w.lane AND l.claim_id = w.id
    WHERE w.id = $1 AND l.claim_token = $2::text::uuid AND l.lease_expires_at > clock_timestamp()
    FOR UPDATE OF w FOR KEY SHARE OF l
), released AS (
    UPDATE occ.work_lanes l
    SET claim_id = NULL, claim_token = NULL, claimed_at = NULL, renewed_at = NULL,
        lease_expires_at = NULL, claim_attempt = NULL, claim_worker = NULL,
        claim_host = NULL, claim_pid = NULL
    FROM fence f
    WHERE l.lane = f.lane AND l.claim_id = f.id
    RETURNING f.id, f.claim_attempt
), evidence AS (
    INSERT INTO occ.work_attempts (work_id, attempt, code, outcome)
    SELECT id, claim_attempt, $3, 'deferred' FROM released
    RETURNING work_id
)
SELECT work_id FROM evidence WHERE occ.work_wake()
