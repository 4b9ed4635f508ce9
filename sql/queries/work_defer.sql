-- Pending convergence (Q8): back to the queue after a bounded delay, claim released, the
-- attempt consumed by the claim refunded. Evidence is optional (a repeated identical
-- observation is not recorded again), except with a refusal: a refused candidate whose stop is
-- still pending (R9) always records its refusal, so it survives to the next pass.
-- $1 id, $2 claim token, $3 code, $4 delay ms, $5 record evidence, $6 refusal code or NULL.
-- The due time and `updated_at` come from one reading of the clock, so the delay between them
-- is exactly the one asked for.
WITH now AS (
    SELECT clock_timestamp() AS at
), done AS (
    UPDATE occ.work
    SET state = 'queued',
        attempt_count = attempt_count - 1,
        available_at = now.at + make_interval(secs => $4::bigint / 1000.0),
        claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
        updated_at = now.at
    FROM now
    WHERE id = $1 AND claim_token = $2::text::uuid AND state = 'claimed'
      AND lease_expires_at > now.at
    RETURNING id, attempt_count
), evidence AS (
    INSERT INTO occ.work_attempts (work_id, attempt, code, outcome, refusal)
    SELECT id, attempt_count + 1, $3, 'deferred', $6::text FROM done
    WHERE $5 OR $6::text IS NOT NULL
)
SELECT id FROM done
