-- Completes the current live claim (Q1, Q11) and records its evidence.
-- $1 id, $2 claim token, $3 reason code, $4 result data (nullable jsonb).
WITH done AS (
    UPDATE occ.work
    SET state = 'succeeded', reason_code = $3, result_data = $4::jsonb,
        claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
        completed_at = clock_timestamp(), updated_at = clock_timestamp()
    WHERE id = $1 AND claim_token = $2::text::uuid AND state = 'claimed'
      AND lease_expires_at > clock_timestamp()
    RETURNING id, attempt_count
)
INSERT INTO occ.work_attempts (work_id, attempt, code, outcome)
SELECT id, attempt_count, $3, 'succeeded' FROM done
RETURNING work_id
