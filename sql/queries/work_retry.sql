-- Returns the current live claim to the queue with exponential backoff; the attempt stays
-- spent (Q7). At the attempt limit the work fails instead.
-- $1 id, $2 claim token, $3 code, $4 max attempts, $5 backoff base ms, $6 backoff cap ms.
WITH done AS (
    UPDATE occ.work
    SET state = CASE WHEN attempt_count >= $4 THEN 'failed_permanent' ELSE 'queued' END,
        reason_code = CASE WHEN attempt_count >= $4 THEN $3 END,
        completed_at = CASE WHEN attempt_count >= $4 THEN clock_timestamp() END,
        available_at = clock_timestamp() + make_interval(secs =>
            least($6::bigint, $5::bigint * power(2, least(attempt_count - 1, 30))) / 1000.0),
        claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
        updated_at = clock_timestamp()
    WHERE id = $1 AND claim_token = $2::text::uuid AND state = 'claimed'
      AND lease_expires_at > clock_timestamp()
    RETURNING id, attempt_count, state
)
INSERT INTO occ.work_attempts (work_id, attempt, code, outcome)
SELECT id, attempt_count, $3, CASE state WHEN 'queued' THEN 'retry' ELSE 'failed' END FROM done
RETURNING work_id, (SELECT state FROM done)
