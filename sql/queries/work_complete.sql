-- Completes the current live claim (Q1, Q11) and records its evidence. The work takes its
-- claim's attempt; the lane trigger ends the claim and moves the head (V14).
-- $1 id, $2 claim token, $3 reason code, $4 result data (nullable jsonb).
WITH fence AS (
    SELECT w.id, l.claim_attempt
    FROM occ.work w
    JOIN occ.work_lanes l ON l.lane = w.lane AND l.claim_id = w.id
    WHERE w.id = $1 AND l.claim_token = $2::text::uuid AND l.lease_expires_at > clock_timestamp()
    FOR UPDATE OF w FOR KEY SHARE OF l
), done AS (
    UPDATE occ.work w
    SET state = 'succeeded', attempt_count = f.claim_attempt, reason_code = $3,
        result_data = $4::jsonb, completed_at = clock_timestamp(), updated_at = clock_timestamp()
    FROM fence f
    WHERE w.id = f.id
    RETURNING w.id, w.attempt_count
)
INSERT INTO occ.work_attempts (work_id, attempt, code, outcome)
SELECT id, attempt_count, $3, 'succeeded' FROM done
RETURNING work_id
