-- Pending convergence (Q8): back to the queue after a bounded delay, claim released, the
-- attempt the claim would have consumed refunded (the work keeps its count). Evidence is
-- optional (a repeated identical observation is not recorded again), except with a refusal: a
-- refused candidate whose stop is still pending (R9) always records its refusal, so it
-- survives to the next pass.
-- A pending repository cleanup (SPEC G3) always records the cause it waits on.
-- $1 id, $2 claim token, $3 code, $4 delay ms, $5 record evidence, $6 refusal code or NULL,
-- $7 cause or NULL.
-- The due time and `updated_at` come from one reading of the clock, so the delay between them
-- is exactly the one asked for. The lane's claim is cleared here (V14), whether or not the due
-- time moved; the lane trigger then moves the head.
WITH now AS (
    SELECT clock_timestamp() AS at
), fence AS (
    SELECT w.id, w.lane, l.claim_attempt
    FROM occ.work w
    JOIN occ.work_lanes l ON l.lane = w.lane AND l.claim_id = w.id
    WHERE w.id = $1 AND l.claim_token = $2::text::uuid
      AND l.lease_expires_at > (SELECT at FROM now)
    FOR UPDATE OF w FOR KEY SHARE OF l
), released AS (
    UPDATE occ.work_lanes l
    SET claim_id = NULL, claim_token = NULL, claimed_at = NULL, renewed_at = NULL,
        lease_expires_at = NULL, claim_attempt = NULL, claim_worker = NULL,
        claim_host = NULL, claim_pid = NULL
    FROM fence f
    WHERE l.lane = f.lane AND l.claim_id = f.id
), done AS (
    UPDATE occ.work w
    SET available_at = now.at + make_interval(secs => $4::bigint / 1000.0),
        updated_at = now.at
    FROM now, fence f
    WHERE w.id = f.id
    RETURNING w.id, f.claim_attempt
), evidence AS (
    INSERT INTO occ.work_attempts (work_id, attempt, code, outcome, refusal, cause)
    SELECT id, claim_attempt, $3, 'deferred', $6::text, $7::text FROM done
    WHERE $5 OR $6::text IS NOT NULL OR $7::text IS NOT NULL
)
SELECT id FROM done
